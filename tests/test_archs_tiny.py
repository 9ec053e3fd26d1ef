"""Every tiny option file of today's architectures (options/archs/*_tiny.json) trains under torchrun with
2 processes, and its validation PSNR rises: the same end-to-end check as tests/test_zoo_tiny.py.

Marked slow (CI=true or RUN_SLOW=1), as the zoo's runs are.
"""
import glob
import os
import re
import sys

import pytest

from conftest import ROOT, clean_env, need_spandrel, run

ARCHS = sorted(glob.glob(os.path.join(ROOT, 'options', 'archs', '*_tiny.json')))
PSNR = re.compile(r'<iter:\s*(\d+)> validation on \d+ items: PSNR ([\d.]+) dB')
OURS = ('esrgan', 'rcan', 'edsr', 'restormer')  # written here; the rest are built by spandrel


def test_every_new_net_type_has_a_tiny_option_file():
    from models.network_spandrel import ARCHITECTURES
    names = {os.path.basename(p)[len('train_'):-len('_tiny.json')] for p in ARCHS}
    assert names == {a.net_type for a in ARCHITECTURES} | set(OURS)


@pytest.mark.slow
@pytest.mark.parametrize('path', ARCHS, ids=[os.path.basename(p)[len('train_'):-len('_tiny.json')] for p in ARCHS])
def test_a_tiny_arch_config_trains_with_two_processes_and_its_psnr_rises(tmp_path, path):
    if os.path.basename(path)[len('train_'):-len('_tiny.json')] not in OURS:
        need_spandrel()
    overrides = [f'path.root={tmp_path / "exp"}', 'train.total_iter=40', 'train.checkpoint_test=20',
                 'train.checkpoint_save=40', 'logging.use_tensorboard=false', 'train.E_decay=0']
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'main_train.py',
           '--opt', path] + [a for o in overrides for a in ('--set', o)]
    res = run(cmd, env=clean_env(OMP_NUM_THREADS='1'), timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'world_size=2' in res.stdout and 'parameters identical on all 2 rank(s)' in res.stdout
    psnr = [float(v) for _, v in PSNR.findall(res.stdout)]
    assert len(psnr) == 2 and psnr[-1] > psnr[0], res.stdout[-3000:]
