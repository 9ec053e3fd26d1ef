"""tests/conftest.py's `run_main`: an entry point run in the test's process answers as the process would, and
leaves the test's process as it found it (the later tests see no trace of it)."""
import logging
import os
import random
import signal

import torch

import main_test  # noqa: F401  (imported before the state is read: an import's own changes are not the run's)
import main_train
from conftest import clean_env, run, run_main, tiny_options, write_options
from utils import exit_codes, stop


def _process_state():
    return {'env': dict(os.environ), 'cwd': os.getcwd(), 'threads': torch.get_num_threads(),
            'handlers': {s: signal.getsignal(s) for s in stop.STOP_SIGNALS}, 'stop': stop.current(),
            'wakeup': signal.set_wakeup_fd(-1), 'logger': list(logging.getLogger('restoration').handlers),
            'random': random.getstate(), 'torch_rng': torch.get_rng_state()}


def test_a_run_in_this_process_answers_as_the_process_and_leaves_nothing_behind(tmp_path, demo_images):
    path = write_options(str(tmp_path / 'o.json'), tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=2,
                                                                checkpoint_save=2, checkpoint_test=2))
    before = _process_state()
    signal.set_wakeup_fd(before['wakeup'])
    ok = run_main('main_train', ['--opt', path], env=clean_env(OMP_NUM_THREADS='1', EXTRA_VAR='x'), cwd=str(tmp_path))
    bad = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=x'])
    usage = run_main('main_test', [])
    after = _process_state()
    signal.set_wakeup_fd(after['wakeup'])
    assert ok.returncode == 0 and 'end of training at iteration 2' in ok.stdout, ok.stderr[-2000:]
    assert bad.returncode == 2 and bad.stdout == '' and bad.stderr.startswith('error: ') and \
        bad.stderr.count('\n') == 1, bad.stderr
    assert usage.returncode == 2 and 'error: give --weights' in usage.stderr  # argparse's exit (p.error)
    for key, value in before.items():
        assert after[key] == value if key != 'torch_rng' else torch.equal(after[key], value), key


def test_a_fault_is_injected_for_one_run_only_and_a_traceback_is_exit_1(tmp_path, demo_images, monkeypatch):
    path = write_options(str(tmp_path / 'o.json'), tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=3,
                                                                checkpoint_save=100, checkpoint_test=100))
    nan = run_main('main_train', ['--opt', path], faults={'INJECT_NAN_AT': '2'})
    assert nan.returncode == exit_codes.EXIT_NONFINITE and 'iteration 2: non-finite loss' in nan.stderr, nan.stderr
    clean = run_main('main_train', ['--opt', path, '--fresh'])
    assert clean.returncode == 0, clean.stderr[-2000:]  # the patch is gone

    def boom(*args):
        raise RuntimeError('a bug')
    monkeypatch.setattr(main_train, 'train', boom)
    crash = run_main('main_train', ['--opt', path])
    assert crash.returncode == 1 and 'Traceback' in crash.stderr and 'RuntimeError: a bug' in crash.stderr


def test_the_same_command_in_a_process_of_its_own_gives_the_same_answer(tmp_path):
    """The reference for the in-process answers: the process's own exit code and stderr."""
    path = write_options(str(tmp_path / 'o.json'), tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'none'),
                                                                manual_seed=-1))
    import sys
    real = run([sys.executable, 'main_train.py', '--opt', path])
    here = run_main('main_train', ['--opt', path])
    assert (here.returncode, here.stdout, here.stderr) == (real.returncode, real.stdout, real.stderr) \
        and real.returncode == 2, (real, here)
