"""Every tiny option file of today's architectures (options/archs/*_tiny.json) trains under torchrun with
2 processes, and its validation PSNR rises: the same end-to-end check as tests/test_zoo_tiny.py.

Marked slow (CI=true or RUN_SLOW=1), as the zoo's runs are.
"""
import glob
import os

import pytest

from conftest import ROOT, need_spandrel, train_two_processes

ARCHS = sorted(glob.glob(os.path.join(ROOT, 'options', 'archs', '*_tiny.json')))
OURS = ('esrgan', 'rcan', 'edsr', 'restormer')  # written here; the rest are built by spandrel


def test_every_new_net_type_has_a_tiny_option_file():
    from models.networks.spandrel import ARCHITECTURES
    names = {os.path.basename(p)[len('train_'):-len('_tiny.json')] for p in ARCHS}
    assert names == {a.net_type for a in ARCHITECTURES} | set(OURS)


@pytest.mark.slow
@pytest.mark.parametrize('path', ARCHS, ids=[os.path.basename(p)[len('train_'):-len('_tiny.json')] for p in ARCHS])
def test_a_tiny_arch_config_trains_with_two_processes_and_its_psnr_rises(tmp_path, path):
    if os.path.basename(path)[len('train_'):-len('_tiny.json')] not in OURS:
        need_spandrel()
    res, psnr = train_two_processes(path, str(tmp_path / 'exp'), 40, ['train.E_decay=0'])
    assert len(psnr) == 2 and psnr[-1] > psnr[0], res.stdout[-3000:]
