"""The start-up lines that say where a run ran: launch, process group, software and hardware.

A log read weeks later (or sent with a bug report) must answer "which launcher, which versions,
which device" without access to the machine; these lines are written first, once per run.
"""
import importlib.metadata
import platform

import torch
import torch.distributed as dist

from utils.dist.detect import DistState


def banner(state: DistState, device: torch.device) -> str:
    """Two lines for the start of the log: the distributed setup, then `environment(device)`."""
    backend = dist.get_backend() if dist.is_initialized() else 'none'
    master = f'{state.master_addr}:{state.master_port}' if state.distributed else '-'
    return (f'distributed: mode={state.mode} backend={backend} world_size={state.world_size} '
            f'rank={state.rank} local_rank={state.local_rank} master={master} device={device} '
            f'threads={torch.get_num_threads()}\n{environment(device)}')


def environment(device: torch.device) -> str:
    """Python, torch and torchvision versions, then the CUDA stack and GPU name, or the CPU."""
    software = (f'environment: python {platform.python_version()}, torch {torch.__version__}, '
                f'torchvision {_installed("torchvision")}')
    if device.type == 'cuda':
        return (f'{software}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, '
                f'NCCL {_nccl_version()}, GPU {torch.cuda.get_device_name(device)}')
    return (f'{software}, CPU only ({torch.get_num_threads()} intra-op threads), '
            f'CPU {platform.processor() or platform.machine() or "unknown"}')


def _installed(package: str) -> str:
    """Installed version without importing the package (torchvision loads C++ ops on import)."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return 'not installed'


def _nccl_version() -> str:
    """NCCL as `2.21.5`, or 'none' when torch was built without it."""
    if not (dist.is_available() and dist.is_nccl_available()):
        return 'none'
    version = torch.cuda.nccl.version()
    return '.'.join(str(v) for v in version) if isinstance(version, tuple) else str(version)
