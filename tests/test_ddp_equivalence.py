"""DDP is proven against one process: N ranks x batch b (x accumulation a) = 1 rank x batch N*b*a.

Each case trains the same tiny DnCNN (no BatchNorm, whose batch statistics legitimately differ with
the per-rank batch) for a few iterations through the real `main_train.py`, once with 2 processes
under torchrun and once in a single process with the whole batch (the test's own: `run_main`), and compares
the saved weights.
The sampler gives rank r the global positions r, r+N, ... and seeds each sample by its position,
so both runs see the same samples with the same noise; only float summation order differs.
"""
import os
import sys

import pytest
import torch

from tests.conftest import clean_env, run, run_main, tiny_options, write_options

PY = sys.executable
ITERS = 4


def _train(tmp_path, name: str, procs: int, batch: int, accum: int, static: bool, clip) -> dict:
    opt = tiny_options(str(tmp_path / name), str(tmp_path / 'unused'), E_decay=0.0, total_iter=ITERS,
                       checkpoint_save=1, checkpoint_keep_last=0, checkpoint_print=ITERS, accumulate_steps=accum,
                       G_optimizer_clipgrad=clip, G_scheduler_milestones=[2])
    opt['netG']['act_mode'] = 'R'
    opt['use_static_graph'] = static
    opt['datasets']['train']['dataloader_batch_size'] = batch
    opt['datasets']['train']['dataroot_H'] = str(tmp_path.parent / 'shared_demo' / 'train')
    del opt['datasets']['test']
    path = write_options(str(tmp_path / f'{name}.json'), opt)
    if procs > 1:
        res = run([PY, '-m', 'torch.distributed.run', '--standalone', f'--nproc_per_node={procs}', 'main_train.py',
                   '--opt', path], env=clean_env(OMP_NUM_THREADS='1'))
    else:  # the single process in the test's own
        res = run_main('main_train', ['--opt', path], env=clean_env(OMP_NUM_THREADS='1'))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f'effective batch {procs * batch * accum}' in res.stdout
    return _weights(tmp_path, name, ITERS), res.stdout


@pytest.mark.parametrize('batch, accum, static, clip', [
    (4, 1, False, None),
    (2, 2, False, 0.05),
    (2, 2, True, 0.05),
], ids=['2x4', '2x2x2-clip', '2x2x2-clip-static-graph'])
def test_two_ranks_train_the_same_weights_as_one_process_with_the_whole_batch(tmp_path, demo_images, batch,
                                                                             accum, static, clip):
    os.makedirs(tmp_path.parent / 'shared_demo', exist_ok=True)
    if not os.path.exists(tmp_path.parent / 'shared_demo' / 'train'):
        os.symlink(os.path.join(demo_images, 'train'), tmp_path.parent / 'shared_demo' / 'train')
    ddp, log = _train(tmp_path, 'ddp', 2, batch, accum, static, clip)
    single, _ = _train(tmp_path, 'single', 1, 2 * batch * accum, 1, False, clip)
    if static and accum > 1:
        assert 'gradients are all-reduced after every micro-batch' in log
    assert ddp.keys() == single.keys()
    for k in single:
        torch.testing.assert_close(ddp[k], single[k], rtol=1e-5, atol=1e-6, msg=lambda m: f'{k}: {m}')
    # The comparison means something only if training moved the weights well beyond the tolerance.
    first = _weights(tmp_path, 'single', 1)
    assert max((single[k] - first[k]).abs().max().item() for k in single) > 1e-3


def _weights(tmp_path, name: str, step: int) -> dict:
    return torch.load(str(tmp_path / name / 'tiny' / 'models' / f'{step}_G.pth'), weights_only=True)
