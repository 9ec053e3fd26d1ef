"""A resume with another number of processes goes on at the global sample where the run stopped.

The data order is a function of (seed, epoch) and the global position only (data/sampler.py): a step of
N ranks x batch b x accumulation a consumes the next N·b·a positions, whatever N. So a SLURM requeue or an
elastic restart that comes back with fewer (or more) processes neither replays nor skips the rest of an
epoch, and with `train.keep_effective_batch` the accumulation keeps the effective batch, so the run is the
uninterrupted one up to float summation order.

End to end with real 2-process DDP (gloo, torchrun): 2 processes for 3 iterations, then 1 process (its
accumulation raised to 2 by keep_effective_batch) to iteration 10, across an epoch boundary (8 iterations
per epoch), against 2 processes straight to 10: every iteration trains on the same samples (image, crop and
noise) in the same global order, and the weights agree to 1e-6.
"""
import json
import os
import sys

import pytest
import torch

from data.sampler import ResumableDistributedSampler
from tests.conftest import ROOT, clean_env, run, tiny_options, write_options

PY = sys.executable
PATCHED = os.path.join(ROOT, 'tests', 'patched_main.py')
TORCHRUN = [PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2']
BATCH = 4          # per process; 64 demo images / (2 x 4) = 8 iterations per epoch
STOP, TOTAL = 3, 10


def _options(tmp_path, demo_images, task):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=TOTAL, checkpoint_save=STOP,
                       checkpoint_test=1000, checkpoint_print=1, checkpoint_keep_last=0, keep_effective_batch=True)
    opt['task'] = task
    opt['netG']['act_mode'] = 'R'  # no BatchNorm: its batch statistics legitimately differ with the batch per rank
    opt['datasets']['train'].update(dataloader_batch_size=BATCH, dataloader_num_workers=1)
    del opt['datasets']['test']
    return write_options(str(tmp_path / f'{task}.json'), opt)


def _launch(launcher, path, record, *extra):
    res = run([*launcher, PATCHED, '--opt', path, *extra], env=clean_env(OMP_NUM_THREADS='1', RECORD_SAMPLES=record))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout


def _steps(record, ranks, first_iteration):
    """Each iteration's samples in global position order: rank r's j-th sample of a step is position
    r + N·j (N ranks, no accumulation); with one rank, micro-batch m's j-th is m·b + j."""
    rows = {}
    for rank in range(ranks):
        with open(f'{record}.{rank}.jsonl') as f:
            for line in f:
                row = json.loads(line)
                rows.setdefault(row['call'], {})[(rank, row['micro'])] = row['samples']
    steps = {}
    for call, parts in rows.items():
        if ranks > 1:
            order = [parts[(j % ranks, 0)][j // ranks] for j in range(ranks * BATCH)]
        else:
            order = [x for m in sorted(k[1] for k in parts) for x in parts[(0, m)]]
        steps[first_iteration + call - 1] = order
    return steps


def _weights(tmp_path, task, step):
    folder = tmp_path / 'exp' / task / 'models'
    return {kind: torch.load(folder / f'{step}_{kind}.pth', map_location='cpu', weights_only=True)
            for kind in ('G', 'E')}


@pytest.mark.slow  # three launches, two of them torchrun: ~40 s on 2 idle cores; CI and RUN_SLOW=1
def test_two_processes_then_one_with_accumulation_two_is_the_two_process_run(tmp_path, demo_images):
    straight, resumed = _options(tmp_path, demo_images, 'straight'), _options(tmp_path, demo_images, 'resumed')
    _launch(TORCHRUN, straight, str(tmp_path / 'straight'))
    _launch(TORCHRUN, resumed, str(tmp_path / 'first'), '--set', f'train.total_iter={STOP}')
    log = _launch([PY], resumed, str(tmp_path / 'second'))

    assert ('train.keep_effective_batch: 2 -> 1 processes, batch 4 -> 4 per process: train.accumulate_steps 1 -> 2, '
            'the effective batch stays 8') in log
    assert (f'resume: (world size, batch per process, accumulation) (2, 4, 1) -> (1, 4, 2): epoch 0 goes on at its '
            f'sample {STOP * 2 * BATCH} of 64 (the same data order)') in log
    assert f'at iteration {STOP} (epoch 0, {STOP} iterations into it)' in log
    assert 'effective batch 8' in log and 'the effective batch changes' not in log

    expected = _steps(tmp_path / 'straight', 2, 1)
    got = {**_steps(tmp_path / 'first', 2, 1), **_steps(tmp_path / 'second', 1, STOP + 1)}
    assert sorted(expected) == sorted(got) == list(range(1, TOTAL + 1))
    for it in expected:
        assert got[it] == expected[it], f'iteration {it}'
    assert len({x for it in range(1, 9) for x in expected[it]}) == 64  # epoch 0: every image once, none again

    a, b = _weights(tmp_path, 'straight', TOTAL), _weights(tmp_path, 'resumed', TOTAL)
    for kind in a:
        for k in a[kind]:
            torch.testing.assert_close(b[kind][k], a[kind][k], rtol=0, atol=1e-6, msg=lambda m: f'{kind} {k}: {m}')
    first = _weights(tmp_path, 'resumed', STOP)['G']
    assert max((a['G'][k] - first[k]).abs().max().item() for k in first) > 1e-3  # training moved the weights


class _Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def _step_keys(n, world, batch, accum, epoch, position, steps, step_size=True):
    """The keys of `steps` optimizer steps from global `position`, in global position order, as the training
    loop's loaders (continuous, whole steps) give them to `world` ranks."""
    samplers = []
    for rank in range(world):
        s = ResumableDistributedSampler(_Sized(n), world, rank, seed=9,
                                        step_size=world * batch * accum if step_size else None)
        s.per_step = batch * accum
        s.per_epoch, s.continuous = s.num_samples // s.per_step * s.per_step, True
        s.set_epoch(epoch)
        s.set_position(position)
        samplers.append(iter(s))
    out = []
    for _ in range(steps):
        shards = [[next(it) for _ in range(batch * accum)] for it in samplers]
        out.append([shards[j % world][j // world] for j in range(world * batch * accum)])
    return out


@pytest.mark.parametrize('world, batch, accum', [(1, 4, 2), (4, 1, 2), (2, 2, 2), (8, 1, 1)])
def test_any_layout_of_the_same_effective_batch_takes_the_same_keys_from_any_position(world, batch, accum):
    """Steps of 2 ranks x batch 4 from position 24 of epoch 3, against other layouts of 8: the same keys
    (index, sample seed, step seed), across the epoch's end into the next epoch."""
    reference = _step_keys(70, 2, 4, 1, 3, 24, 8)  # 70 samples: 8 steps of 8 per epoch, the last 6 dropped
    assert _step_keys(70, world, batch, accum, 3, 24, 8) == reference
    assert len({k[0] for step in reference[:5] for k in step}) == 40  # 5 steps to the epoch's end, then epoch 4


def test_a_resume_at_a_position_that_is_no_whole_step_goes_on_there_with_steps_of_its_own():
    """1 rank x batch 4 stopped after 3 steps (position 12); 2 ranks x batch 4 go on at 12: steps 12-19,
    20-27, ..., up to the last whole step of the epoch (52-59), then epoch 1 from 0."""
    before = _step_keys(64, 1, 4, 1, 0, 0, 3)
    after = _step_keys(64, 2, 4, 1, 0, 12, 7)
    whole = _step_keys(64, 1, 4, 1, 0, 0, 16, step_size=False)
    flat = [k[:2] for step in whole for k in step]
    assert [k[:2] for step in before + after[:6] for k in step] == flat[:60]  # nothing replayed or skipped
    assert [k[:2] for k in after[6]] == [k[:2] for k in _step_keys(64, 2, 4, 1, 1, 0, 1)[0]]  # then the next epoch
    assert all(len({k[2] for k in step}) == 1 for step in after)  # one step seed per step


def _accumulation(keep, world, batch, accum, saved):
    """The trainer's choice of accumulate_steps for a resume of a run saved with (world, batch, accum) `saved`."""
    import logging
    from types import SimpleNamespace

    from training.trainer import Trainer
    from utils.dist import DistState
    from utils.resume import ResumePoint
    training = {} if saved is None else dict(zip(('world_size', 'batch_size', 'accumulate_steps'), saved))
    trainer = SimpleNamespace(train_opt={'accumulate_steps': accum, 'keep_effective_batch': keep},
                              state=DistState('env', world_size=world, rank=0), log=logging.getLogger('restoration'))
    return Trainer.resumed_accumulation(trainer, ResumePoint('m/3_state.pth', {}, training), batch)


def test_keep_effective_batch_raises_or_lowers_the_accumulation_or_says_in_one_line_why_it_cannot():
    from utils.errors import UserError
    assert _accumulation(True, 1, 4, 1, (2, 4, 1)) == 2      # 2 processes -> 1: accumulate twice
    assert _accumulation(True, 4, 4, 1, (1, 4, 8)) == 2      # 1 process x 8 -> 4 processes: accumulate twice
    assert _accumulation(True, 1, 8, 3, (2, 4, 1)) == 1      # a larger batch per process does it alone
    assert _accumulation(True, 1, 4, 1, (1, 4, 1)) == 1      # nothing changed
    assert _accumulation(False, 1, 4, 1, (2, 4, 1)) == 1     # not asked for: the options' accumulation
    assert _accumulation(True, 1, 4, 1, None) == 1           # an older file without its layout
    with pytest.raises(UserError, match=r'^train\.keep_effective_batch: m/3_state\.pth trained with an effective batch '
                                        r'of 8 \(2 processes x batch 4 x 1 accumulation\), which 3 processes x batch 4 '
                                        r'cannot make with whole accumulation steps'):
        _accumulation(True, 3, 4, 1, (2, 4, 1))
