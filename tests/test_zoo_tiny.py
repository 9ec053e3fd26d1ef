"""Every tiny model-zoo option file trains under torchrun with 2 processes, and its validation PSNR rises.

These are end-to-end runs (a few seconds to a minute each on 2 cores): marked slow, so they run in
CI (CI=true) or locally with RUN_SLOW=1.
"""
import glob
import os
import re

import pytest

from conftest import ROOT, train_two_processes

ZOO = sorted(glob.glob(os.path.join(ROOT, 'options', 'zoo', '*_tiny.json')))


def test_the_zoo_has_a_tiny_option_file_per_trainable_network():
    names = {os.path.basename(p) for p in ZOO}
    assert {'train_ffdnet_tiny.json', 'train_fdncnn_tiny.json', 'train_drunet_tiny.json', 'train_dncnn_bn_tiny.json',
            'train_msrresnet0_tiny.json', 'train_rrdb_tiny.json', 'train_rrdbnet_tiny.json', 'train_imdn_tiny.json',
            'train_swinir_sr_tiny.json', 'train_swinir_denoising_tiny.json', 'train_swinir_car_jpeg_tiny.json',
            'train_dpsr_tiny.json', 'train_srmd_tiny.json', 'train_usrnet_tiny.json'} <= names


@pytest.mark.slow
@pytest.mark.parametrize('path', ZOO, ids=[os.path.basename(p)[len('train_'):-len('_tiny.json')] for p in ZOO])
def test_a_tiny_zoo_config_trains_with_two_processes_and_its_psnr_rises(tmp_path, path):
    res, psnr = train_two_processes(path, str(tmp_path / 'exp'), 40, ['train.E_decay=0'])
    assert len(psnr) == 2 and psnr[-1] > psnr[0], res.stdout[-3000:]
    inputs = re.findall(r'<iter:20> validation input: the input (itself|upscaled by bicubic x\d)', res.stdout)
    assert len(inputs) == 1 and res.stdout.count('validation input:') == 1, res.stdout[-3000:]
