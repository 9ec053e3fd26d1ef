"""Checkpoints and resume: bit-exact continuation, kills at any moment, damaged files, faults.

Runs are real processes (`main_train.py`, or `tests/patched_main.py` to inject a fault from the outside) where
a process is killed or signalled, or several ranks run; the others run `main_train` in the test's process
(`run_main`, `faults=` for injected faults). Evidence is what the runs leave and report: checkpoint files and
log lines.
"""
import glob
import os
import pickle
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import ROOT, clean_env, free_port, need_spandrel, run, run_main, tiny_options, write_options
from utils.exit_codes import EXIT_NONFINITE, EXIT_PREEMPTED, EXIT_SAVE_FAILED

PY = sys.executable
PATCHED = os.path.join('tests', 'patched_main.py')


def _opt(tmp_path, demo_images, name='o.json', task='tiny', **train):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, **train)
    opt['task'] = task
    return write_options(str(tmp_path / name), opt)


def _models(tmp_path, task='tiny'):
    return tmp_path / 'exp' / task / 'models'


def _load(path):
    return torch.load(path, map_location='cpu', weights_only=True)


def _assert_same_tensors(a, b, where=''):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_same_tensors(a[k], b[k], f'{where}.{k}')
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same_tensors(x, y, f'{where}[{i}]')
    elif torch.is_tensor(a):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), f'differs at {where}'
    else:
        assert a == b, f'differs at {where}: {a} != {b}'


def _assert_same_run_state(dir_a, dir_b, step):
    for kind in ('G', 'E'):
        _assert_same_tensors(_load(dir_a / f'{step}_{kind}.pth'), _load(dir_b / f'{step}_{kind}.pth'), kind)
    sa, sb = _load(dir_a / f'{step}_state.pth'), _load(dir_b / f'{step}_state.pth')
    _assert_same_tensors(sa['model']['optimizer'], sb['model']['optimizer'], 'optimizer')
    _assert_same_tensors(sa['model']['scheduler'], sb['model']['scheduler'], 'scheduler')
    assert (sa['iter'], sa['epoch'], sa['epoch_step']) == (sb['iter'], sb['epoch'], sb['epoch_step'])


# 64 training images, batch 4 per process: 16 iterations per epoch in a single process, 8 with 2.
STRAIGHT = dict(total_iter=20, checkpoint_save=10, checkpoint_test=10, checkpoint_print=5)


def test_interrupted_and_resumed_run_is_bitwise_identical_to_a_straight_run(tmp_path, demo_images):
    """Single process, 2 data workers, EMA on; the interruption is mid-epoch, the end in the next epoch."""
    workers = {'dataloader_num_workers': 2}
    a = tiny_options(str(tmp_path / 'exp'), demo_images, **STRAIGHT)
    a['task'] = 'straight'
    a['datasets']['train'].update(workers)
    b = dict(a, task='resumed')
    pa, pb = write_options(str(tmp_path / 'a.json'), a), write_options(str(tmp_path / 'b.json'), b)
    assert run_main('main_train', ['--opt', pa]).returncode == 0
    first = run_main('main_train', ['--opt', pb, '--set', 'train.total_iter=10'])
    assert first.returncode == 0, first.stderr[-2000:]
    second = run_main('main_train', ['--opt', pb])
    assert second.returncode == 0, second.stderr[-2000:]
    assert 'resumed from' in second.stdout and 'at iteration 10 (epoch 0, 10 iterations into it)' in second.stdout
    _assert_same_run_state(_models(tmp_path, 'straight'), _models(tmp_path, 'resumed'), 20)


@pytest.mark.slow  # ~15-25 s; runs in CI (CI=true) and with RUN_SLOW=1
def test_ddp_interrupted_and_resumed_run_is_bitwise_identical(tmp_path, demo_images):
    a = tiny_options(str(tmp_path / 'exp'), demo_images, **dict(STRAIGHT, total_iter=12, checkpoint_save=6))
    a['task'] = 'straight'
    a['datasets']['train']['dataloader_num_workers'] = 1
    b = dict(a, task='resumed')
    pa, pb = write_options(str(tmp_path / 'a.json'), a), write_options(str(tmp_path / 'b.json'), b)
    torchrun = [PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'main_train.py']
    assert run(torchrun + ['--opt', pa]).returncode == 0
    assert run(torchrun + ['--opt', pb, '--set', 'train.total_iter=5']).returncode == 0
    res = run(torchrun + ['--opt', pb])
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'at iteration 5 (epoch 0, 5 iterations into it)' in res.stdout
    _assert_same_run_state(_models(tmp_path, 'straight'), _models(tmp_path, 'resumed'), 12)


def _start(args, env=None, stdout=subprocess.PIPE):
    return subprocess.Popen(args, cwd=ROOT, env=env or clean_env(), stdout=stdout, stderr=subprocess.PIPE,
                            text=True)


def _wait_for_line(proc, needle, timeout=120):
    deadline = time.time() + timeout
    seen = []
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if needle in line:
            return line
    raise AssertionError(f'{needle!r} not seen; output: {"".join(seen)[-2000:]} {proc.stderr.read()[-2000:] if proc.poll() is not None else ""}')


def test_sigterm_saves_and_exits_with_the_preemption_code_then_resumes(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=100000, checkpoint_save=100000, checkpoint_test=100000,
                checkpoint_print=1)
    proc = _start([PY, 'main_train.py', '--opt', path])
    _wait_for_line(proc, 'iter:       3')
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_PREEMPTED, err[-2000:]
    assert 'stopped by SIGTERM at iteration' in err
    step = int(open(_models(tmp_path) / 'latest').read())
    assert step >= 3 and (_models(tmp_path) / f'{step}_state.pth').exists()
    res = run_main('main_train', ['--opt', path, '--set', f'train.total_iter={step + 2}'])
    assert res.returncode == 0 and f'at iteration {step} ' in res.stdout, res.stderr[-2000:]


def test_signal_to_one_rank_stops_all_ranks_together(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=100000, checkpoint_save=100000, checkpoint_test=100000,
                checkpoint_print=1)
    port = str(free_port())
    procs = [_start([PY, 'main_train.py', '--opt', path],
                    env=clean_env(WORLD_SIZE='2', RANK=str(r), LOCAL_RANK=str(r), MASTER_ADDR='127.0.0.1',
                                  MASTER_PORT=port)) for r in (0, 1)]
    _wait_for_line(procs[0], 'iter:       3')
    procs[1].send_signal(signal.SIGUSR1)
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [EXIT_PREEMPTED, EXIT_PREEMPTED], [o[1][-1500:] for o in outs]
    assert 'stopped by SIGUSR1' in outs[1][1] and 'a signal on another rank' in outs[0][1]
    assert (_models(tmp_path) / 'latest').exists()


@pytest.mark.slow  # ~15-25 s; runs in CI (CI=true) and with RUN_SLOW=1
def test_sigkill_during_a_checkpoint_write_resumes_from_the_previous_complete_one(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=100, checkpoint_save=4, checkpoint_test=100000,
                checkpoint_print=100)
    proc = _start([PY, PATCHED, '--opt', path], env=clean_env(SLOW_SAVE_SECONDS='3'))
    _wait_for_line(proc, 'SAVING')                     # first save (iteration 4): let it finish
    line = _wait_for_line(proc, '8_G.pth')             # second save, caught inside its write
    assert 'SAVING' in line
    proc.kill()
    proc.communicate()
    models = _models(tmp_path)
    assert any(n.endswith('.tmp') for n in os.listdir(models))   # the interrupted write
    assert not (models / '8_G.pth').exists() and not (models / '8_state.pth').exists()
    res = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=6'])
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'at iteration 4 ' in res.stdout and 'temporary file of an interrupted checkpoint write' in res.stdout
    assert not any(n.endswith('.tmp') for n in os.listdir(models))


def test_sigkill_mid_training_resumes_from_the_last_complete_checkpoint(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=100000, checkpoint_save=3, checkpoint_test=100000,
                checkpoint_print=1)
    proc = _start([PY, 'main_train.py', '--opt', path])
    _wait_for_line(proc, 'iter:       8')
    proc.kill()
    proc.communicate()
    latest = int(open(_models(tmp_path) / 'latest').read())
    res = run_main('main_train', ['--opt', path, '--set', f'train.total_iter={latest + 1}'])
    assert res.returncode == 0 and f'at iteration {latest} ' in res.stdout, res.stderr[-2000:]


def test_damaged_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=8, checkpoint_save=4)
    assert run_main('main_train', ['--opt', path]).returncode == 0
    state = _models(tmp_path) / '8_G.pth'
    state.write_bytes(state.read_bytes()[:100])        # truncated by a disk fault
    res = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=10'])
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'checkpoint 8' in res.stdout and 'is damaged' in res.stdout
    assert 'at iteration 4 ' in res.stdout


def test_keep_last_prunes_old_saves_after_the_new_one_is_complete(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=10, checkpoint_save=2, checkpoint_keep_last=2)
    assert run_main('main_train', ['--opt', path]).returncode == 0
    names = sorted(n for n in os.listdir(_models(tmp_path)) if n[0].isdigit())
    assert names == ['10_E.pth', '10_G.pth', '10_state.pth', '8_E.pth', '8_G.pth', '8_state.pth']


class CodeCarrying:
    """Anything not on torch's weights-only allow list: unpickling it could run code."""


def test_checkpoint_that_needs_unrestricted_unpickling_is_refused(tmp_path, demo_images):
    evil = tmp_path / 'evil.pth'
    torch.save({'model.0.weight': torch.zeros(1), 'payload': CodeCarrying()}, evil, pickle_module=pickle)
    path = _opt(tmp_path, demo_images)
    res = run_main('main_train', ['--opt', path, '--set', f'path.pretrained_netG={evil}'])
    assert res.returncode == 2
    assert res.stderr.count('\n') == 1 and 'refusing to load' in res.stderr and '--allow-unsafe-load' in res.stderr


def test_nan_loss_stops_with_a_clear_message_and_the_last_checkpoint_intact(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=20, checkpoint_save=4)
    res = run_main('main_train', ['--opt', path], faults={'INJECT_NAN_AT': '6'})
    assert res.returncode == EXIT_NONFINITE
    assert 'iteration 6: non-finite loss' in res.stderr and '4_state.pth' in res.stderr
    assert int(open(_models(tmp_path) / 'latest').read()) == 4
    assert torch.isfinite(_load(_models(tmp_path) / '4_G.pth')['model.0.weight']).all()


def test_nan_on_one_rank_is_skipped_on_all_ranks(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=8, nan_policy='skip')
    res = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', PATCHED, '--opt', path],
              env=clean_env(INJECT_NAN_AT='3', INJECT_NAN_RANK='1'))
    assert res.returncode == 0, res.stderr[-2000:]
    assert ('iteration 3: 1 step skipped, non-finite loss or gradients on rank 1 (train.nan_policy=skip, at most 1 '
            'in a row)') in res.stdout
    assert 'parameters identical on all 2 rank(s)' in res.stdout
    assert torch.isfinite(_load(_models(tmp_path) / '8_G.pth')['model.0.weight']).all()


def test_a_crashed_rank_makes_the_other_exit_within_the_timeout(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=100000, checkpoint_save=100000, checkpoint_test=100000)
    port = str(free_port())
    procs = [_start([PY, PATCHED, '--opt', path, '--set', 'dist_timeout=20'],
                    env=clean_env(WORLD_SIZE='2', RANK=str(r), LOCAL_RANK=str(r), MASTER_ADDR='127.0.0.1',
                                  MASTER_PORT=port, CRASH_AT='5', CRASH_RANK='1'), stdout=subprocess.DEVNULL)
             for r in (0, 1)]
    procs[1].wait(timeout=120)
    assert procs[1].returncode == 17
    start = time.time()
    try:
        procs[0].wait(timeout=60)
    finally:
        procs[0].kill()
    assert procs[0].returncode not in (0, None)
    assert time.time() - start < 45


def test_torchrun_max_restarts_resumes_from_the_last_checkpoint(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=8, checkpoint_save=2, checkpoint_test=100000)
    res = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', '--max-restarts=1',
               PATCHED, '--opt', path], env=clean_env(CRASH_AT='5', CRASH_RANK='1'))
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'CRASHING rank 1' in res.stdout
    assert 'at iteration 4 (epoch' in res.stdout                        # the restarted workers resumed
    assert 'parameters identical on all 2 rank(s)' in res.stdout


def test_a_failed_save_stops_every_rank_loudly_unless_told_to_continue(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=8, checkpoint_save=2)
    torchrun = [PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', PATCHED, '--opt', path]
    res = run(torchrun, env=clean_env(SAVE_FAIL_AT='4'))
    assert res.returncode == 1 and f'exitcode  : {EXIT_SAVE_FAILED}' in res.stderr  # torchrun reports 1
    assert re.search(r'checkpoint at iteration 4 failed: no space left on /\S* \(\d+ MB free\)', res.stderr)
    assert int(open(_models(tmp_path) / 'latest').read()) == 2
    res = run(torchrun + ['--set', 'train.save_failure=warn', '--fresh'], env=clean_env(SAVE_FAIL_AT='4'))
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'training continues' in res.stdout + res.stderr
    assert int(open(_models(tmp_path) / 'latest').read()) == 8


def test_resume_without_a_fixed_seed_keeps_the_seed_the_run_started_with(tmp_path, demo_images):
    import re
    path = _opt(tmp_path, demo_images, manual_seed=None, total_iter=6, checkpoint_save=3)
    first = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=3'])
    second = run_main('main_train', ['--opt', path])
    assert first.returncode == 0 and second.returncode == 0, second.stderr[-2000:]
    seeds = [re.search(r'seed (\d+) \(same on every rank', r.stdout).group(1) for r in (first, second)]
    assert seeds[0] == seeds[1] and 'at iteration 3 ' in second.stdout


def tiny_architectures() -> list:
    """Every net_type of options/archs (today's architectures), by its shipped tiny file."""
    return sorted(os.path.basename(p)[len('train_'):-len('_tiny.json')]
                  for p in glob.glob(os.path.join(ROOT, 'options', 'archs', 'train_*_tiny.json')))


@pytest.mark.slow  # ~8 s each on 2 idle cores (kbnet_l, dctlsa: ~35 s); runs in CI (CI=true) and with RUN_SLOW=1
@pytest.mark.parametrize('arch', tiny_architectures())
def test_a_new_architecture_resumes_bitwise_identical_to_a_straight_run(tmp_path, arch):
    """The shipped tiny file of each net_type, EMA on: 4 iterations straight vs resumed from the straight
    run's save at iteration 2 (`path.resume_state`, another task), to the same weights, EMA, optimizer.

    SPAN also holds parameters outside the optimizer (its `eval_conv`, requires_grad False), which must
    come back from the checkpoint exactly like the trained ones; transformers draw drop-path numbers.
    """
    if arch not in ('edsr', 'rcan', 'esrgan', 'restormer'):
        need_spandrel()  # a failure under CI=true
    path = os.path.join('options', 'archs', f'train_{arch}_tiny.json')
    common = [f'path.root={tmp_path / "exp"}', 'train.checkpoint_save=2', 'train.checkpoint_test=100',
              'train.E_decay=0.999', 'logging.use_tensorboard=false', 'train.total_iter=4']

    def train(task, *more):
        sets = [*common, f'task={task}', *more]
        res = run_main('main_train', ['--opt', path] + [a for s in sets for a in ('--set', s)])
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        return res

    train('straight')
    state = tmp_path / 'exp' / 'straight' / 'models' / '2_state.pth'
    assert 'at iteration 2 ' in train('resumed', f'path.resume_state={state}').stdout
    _assert_same_run_state(_models(tmp_path, 'straight'), _models(tmp_path, 'resumed'), 4)
