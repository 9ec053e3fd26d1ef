"""A checkpoint written by an earlier version of the code resumes bit for bit.

tests/data/old_checkpoint holds iteration 4 of the tiny DnCNN run of `options.json` (EMA, Adam, MultiStepLR, the
demo images) as the code of commit c0033ef wrote it, and iterations 8's files as that code wrote them when it
trained on to 8. Resuming those files with today's code must give the same weights, EMA, optimizer moments,
schedule and data position at iteration 8: refactoring the model, the options or the loop must not change what
an existing run continues with. Both were trained on one intra-op thread and on the baseline x86 instruction set
(`BASELINE_CPU`), and so is the resumed run: the sums of a backward pass depend on how many threads share them, and
on the vector width of the kernels each CPU picks (the same files resumed with AVX-512 kernels differed from those
an AVX2 machine wrote by 1e-8 in the first step, more after Adam's normalisation).
"""
import json
import os
import shutil
import sys

import torch

from tests.conftest import ROOT, clean_env, run, write_options

DATA = os.path.join(ROOT, 'tests', 'data', 'old_checkpoint')
# kernels every x86-64 CPU runs alike: ATen's unvectorised ones, oneDNN up to SSE4.1, MKL's reproducible code path
BASELINE_CPU = {'OMP_NUM_THREADS': '1', 'ATEN_CPU_CAPABILITY': 'default', 'ONEDNN_MAX_CPU_ISA': 'SSE41',
                'MKL_CBWR': 'COMPATIBLE'}


def _load(path):
    return torch.load(path, map_location='cpu', weights_only=True)


def _same(a, b, where):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f'{where}.{k}')
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f'{where}[{i}]')
    elif torch.is_tensor(a):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), f'differs at {where}'
    else:
        assert a == b, f'differs at {where}: {a!r} != {b!r}'


def test_a_checkpoint_of_the_earlier_code_resumes_bit_for_bit(tmp_path, demo_images):
    with open(os.path.join(DATA, 'options.json')) as f:
        opt = json.load(f)
    opt['path']['root'] = str(tmp_path / 'exp')
    opt['datasets']['train']['dataroot_H'] = os.path.join(demo_images, 'train')
    opt['datasets']['test']['dataroot_H'] = os.path.join(demo_images, 'test')
    models = tmp_path / 'exp' / opt['task'] / 'models'
    models.mkdir(parents=True)
    for kind in ('G', 'E', 'state'):
        shutil.copy(os.path.join(DATA, f'4_{kind}.pth'), models / f'4_{kind}.pth')
    # a process of its own: the libraries read these variables once, at their first operation, which an earlier
    # test on this worker has already run (in the worker's process, run_main's resume ran the AVX-512 kernels)
    res = run([sys.executable, 'main_train.py', '--opt', write_options(str(tmp_path / 'o.json'), opt)],
              env=clean_env(**BASELINE_CPU))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert 'resumed from' in res.stdout and 'iteration 4' in res.stdout, res.stdout[-2000:]
    for kind in ('G', 'E'):
        _same(_load(models / f'8_{kind}.pth'), _load(os.path.join(DATA, f'expected_8_{kind}.pth')), kind)
    now, then = _load(models / '8_state.pth'), _load(os.path.join(DATA, 'expected_8_state.pth'))
    for key in ('iter', 'epoch', 'epoch_step', 'epoch_position', 'seed', 'rng', 'train_files'):
        _same(now[key], then[key], key)
    for key in ('optimizer', 'scheduler'):
        _same(now['model'][key], then['model'][key], key)
