"""Every tiny video option file (VRT deblurring, frame interpolation and non-blind denoising; RVRT x4 SR
on the Vimeo-90K layout; BasicVSR, IconVSR, BasicVSR++ and EDVR on the REDS layout) trains under torchrun with
2 processes, and its validation PSNR rises; BasicSR's networks also resume bit-exactly.

End-to-end runs of a minute or more each on 2 cores: marked slow (CI, or RUN_SLOW=1 locally).
"""
import glob
import os
import re

import pytest
import torch

from conftest import ROOT, train_two_processes

TINY = sorted(glob.glob(os.path.join(ROOT, 'options', 'vrt', '*_tiny.json'))
              + glob.glob(os.path.join(ROOT, 'options', 'rvrt', '*_tiny.json')))


def test_there_is_a_tiny_video_config_for_each_video_task():
    names = {os.path.basename(p) for p in TINY}
    assert {'006_train_vrt_videodeblurring_gopro_rgbspike_tiny.json', '008_train_vrt_videodenoising_davis_tiny.json',
            '009_train_vrt_videofi_vimeo_tiny.json', '002_train_rvrt_videosr_bi_vimeo_tiny.json'} <= names


@pytest.mark.slow
@pytest.mark.parametrize('path', [p for p in TINY if 'gopro' not in p],  # 006 is trained in test_model_vrt.py
                         ids=[os.path.basename(p).split('_tiny')[0] for p in TINY if 'gopro' not in p])
def test_a_tiny_video_config_trains_with_two_processes_and_its_psnr_rises(tmp_path, path):
    res, psnr = train_two_processes(path, str(tmp_path / 'exp'), 20, timeout=1200)
    assert len(psnr) == 2 and psnr[-1] > psnr[0], res.stdout[-3000:]
    inputs = re.findall(r'<iter:10> validation input: (.*)', res.stdout)
    assert len(inputs) == 1 and res.stdout.count('validation input:') == 1, res.stdout[-3000:]
    if '009' in path:  # frame interpolation: no input frame is a target frame
        assert inputs[0].startswith('no input-vs-target score'), inputs
    else:
        assert re.match(r'the input (itself|upscaled by bicubic x4) .* on \d+ items: PSNR', inputs[0]), inputs


# BasicSR's video networks (options/basicvsr, basicvsrpp, edvr): trained and resumed with 2 processes each
BASICSR_TINY = sorted(p for folder in ('basicvsr', 'basicvsrpp', 'edvr')
                      for p in glob.glob(os.path.join(ROOT, 'options', folder, '*_tiny.json')))
RELEASE = {'edvr': 'past train.tsa_iter=2'}  # the frozen start each tiny file has (2 iterations)


def _same_tensors(a, b, where):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same_tensors(a[k], b[k], f'{where}.{k}')
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same_tensors(x, y, f'{where}[{i}]')
    elif torch.is_tensor(a):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), f'differs at {where}'
    else:
        assert a == b, f'differs at {where}: {a} != {b}'


def test_there_is_a_tiny_file_for_each_basicsr_video_network():
    assert {os.path.basename(p) for p in BASICSR_TINY} == {
        'train_BasicVSR_tiny.json', 'train_IconVSR_tiny.json', 'train_BasicVSRPP_tiny.json', 'train_EDVR_tiny.json'}


@pytest.mark.slow
@pytest.mark.parametrize('path', BASICSR_TINY, ids=[os.path.basename(p)[len('train_'):-len('_tiny.json')]
                                                    for p in BASICSR_TINY])
def test_a_basicsr_video_tiny_file_trains_with_two_processes_its_psnr_rises_and_it_resumes_bit_exactly(tmp_path, path):
    """8 iterations under torchrun (2 processes, gloo), the frozen start released at iteration 3; then the save of
    iteration 4 resumed by another 2-process run to iteration 8: the same weights, optimizer and schedule."""
    root = tmp_path / 'exp'
    res, psnr = train_two_processes(path, str(root), 8, ['train.checkpoint_save=4'], timeout=1500)
    assert len(psnr) == 2 and psnr[-1] > psnr[0], res.stdout[-3000:]
    release = RELEASE.get(os.path.basename(os.path.dirname(path)), 'past train.fix_flow=2')
    assert f'iteration 3: {release}' in res.stdout
    task = os.path.basename(path)[:-len('.json')]
    straight = root / task / 'models'
    resumed, _ = train_two_processes(path, str(root), 8, ['task=resumed', f'path.resume_state={straight / "4_state.pth"}'],
                                     timeout=1500)
    assert 'at iteration 4 ' in resumed.stdout and release not in resumed.stdout
    load = lambda p: torch.load(p, map_location='cpu', weights_only=True)  # noqa: E731
    other = root / 'resumed' / 'models'
    _same_tensors(load(straight / '8_G.pth'), load(other / '8_G.pth'), 'G')
    a, b = load(straight / '8_state.pth'), load(other / '8_state.pth')
    _same_tensors(a['model']['optimizer'], b['model']['optimizer'], 'optimizer')
    _same_tensors(a['model']['scheduler'], b['model']['scheduler'], 'scheduler')
