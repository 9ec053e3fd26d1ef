"""The start-up banner names the software and the device, so a log alone tells where a run ran."""
import platform

import torch

from utils import dist
from utils.dist import DistState


def test_cpu_banner_names_versions_the_cpu_and_the_threads():
    lines = dist.banner(DistState('single'), torch.device('cpu')).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith('distributed: mode=single ')
    assert f'python {platform.python_version()}' in lines[1]
    assert f'torch {torch.__version__}' in lines[1] and 'torchvision ' in lines[1]
    assert f'CPU only ({torch.get_num_threads()} intra-op threads)' in lines[1]
    assert f'CPU {platform.processor() or platform.machine()}' in lines[1]
    assert 'CUDA' not in lines[1]


def test_gpu_banner_names_the_cuda_stack_and_the_local_gpu(monkeypatch):
    names = []
    monkeypatch.setattr(torch.version, 'cuda', '12.4')
    monkeypatch.setattr(torch.backends.cudnn, 'version', lambda: 90100)
    monkeypatch.setattr(torch.distributed, 'is_nccl_available', lambda: True)
    monkeypatch.setattr(torch.cuda.nccl, 'version', lambda: (2, 21, 5))
    monkeypatch.setattr(torch.cuda, 'get_device_name', lambda d=None: names.append(d) or 'NVIDIA A100')
    env = dist.environment(torch.device('cuda', 1))
    assert f'torch {torch.__version__}' in env
    assert 'CUDA 12.4, cuDNN 90100, NCCL 2.21.5, GPU NVIDIA A100' in env and 'CPU only' not in env
    assert names == [torch.device('cuda', 1)]
