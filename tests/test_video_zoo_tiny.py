"""Every tiny video option file (VRT deblurring, frame interpolation and non-blind denoising; RVRT x4 SR
on the Vimeo-90K layout) trains under torchrun with 2 processes, and its validation PSNR rises.

End-to-end runs of a minute or more each on 2 cores: marked slow (CI, or RUN_SLOW=1 locally).
"""
import glob
import os
import re

import pytest

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
