"""The documented exit codes reach the shell from every launch path: 0 done, 2 user error, 3 stopped for
preemption (checkpoint saved), 4 non-finite loss, 5 checkpoint write failed, 128+N killed by signal N.

Paths: `./launch_train.sh N` and `python scripts/launch.py --nproc N` (the same launcher), the gpu_ids
self-relaunch of `python main_train.py`, and `submit_job.sh`, run with bash against a fake `srun` and
`scontrol` (requeue on 3 only). Faults come from tests/patched_main.py (INJECT_NAN_AT, SAVE_FAIL_AT).
"""
import os
import re
import signal
import stat
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Dict, List

import pytest

from tests.conftest import ROOT, clean_env, tiny_options, write_options
from training.launcher import CPU_TEST_MODE, describe, root_cause, shell_code
from utils.exit_codes import EXIT_NONFINITE, EXIT_PREEMPTED, EXIT_SAVE_FAILED

PY = sys.executable
PATCHED = os.path.join('tests', 'patched_main.py')
RELAUNCH = [PY, os.path.join('scripts', 'launch.py'), '--nproc', '2']
LONG = dict(total_iter=100000, checkpoint_save=100000, checkpoint_test=100000, checkpoint_print=1)
# patched_main.py with one change: the gpu_ids relaunch starts this wrapper again (main_train.main()
# relaunches `main_train.__file__`), so the ranks get the injected faults too.
GPU_IDS_FAULT_WRAPPER = """import os
import main_train
from tests import patched_main
from utils import dist
patched_main.install()
main_train.__file__ = os.path.abspath(__file__)
dist.exit_now(main_train.main())
"""


def _opt(tmp_path, demo_images: str, **train) -> str:
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, **train)
    opt['logging']['use_tensorboard'] = False
    return write_options(str(tmp_path / 'o.json'), opt)


def _children(pid: int) -> List[int]:
    kids = []
    for entry in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open(f'/proc/{entry}/stat', 'rb') as f:
                data = f.read()
        except OSError:
            continue
        if int(data[data.rfind(b')') + 2:].split()[1]) == pid:
            kids.append(int(entry))
    return kids


def _kill_tree(proc: subprocess.Popen) -> None:
    """The ranks live in sessions of their own: a failed test must not leave them training."""
    for pid in _children(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.kill()
    proc.wait()


def _launch(cmd: List[str], env: Dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _launcher_line(err: str, code: int) -> str:
    """Exactly one line from the launcher names the rank that ended first and its code; no traceback."""
    assert 'Traceback' not in err, err[-3000:]
    lines = [ln for ln in err.splitlines() if re.match(r'launcher: rank \d of 2 ended first, with exit code', ln)]
    assert len(lines) == 1, err[-3000:]
    assert f'exit code {code} ' in lines[0] and lines[0].endswith(f'exiting with {code}'), lines[0]
    return lines[0]


def _latest(tmp_path) -> int:
    with open(tmp_path / 'exp' / 'tiny' / 'models' / 'latest') as f:
        return int(f.read())


# ---------------------------------------------------------------- the launcher's choice of code

def _failure(exitcode: int, timestamp: int) -> SimpleNamespace:
    return SimpleNamespace(exitcode=exitcode, timestamp=timestamp)


def test_the_root_cause_is_the_earliest_failure_and_a_signal_becomes_128_plus_n():
    err = SimpleNamespace(failures={0: _failure(-15, 101), 1: _failure(4, 100)})
    assert root_cause(err) == (1, 4)                       # rank 1 failed first; rank 0 was stopped later
    tie = SimpleNamespace(failures={1: _failure(3, 7), 0: _failure(-15, 7)})
    assert root_cause(tie) == (1, 3)                       # same second: the first recorded
    assert root_cause(SimpleNamespace(failures={0: _failure(-9, 5)})) == (0, 137)
    assert root_cause(SimpleNamespace(failures={})) == (None, 1)
    assert shell_code(-2) == 130 and shell_code(5) == 5
    assert describe(3) == 'code 3 (stopped for preemption, checkpoint saved)'
    assert describe(4) == 'code 4 (non-finite loss or gradients)'
    assert describe(137) == 'code 137 (killed by SIGKILL)'


def test_relaunch_module_rejects_a_bad_process_count_with_exit_code_2():
    res = _launch([PY, os.path.join('scripts', 'launch.py'), '--nproc', '0', 'main_train.py'], clean_env(), timeout=60)
    assert res.returncode == 2 and '--nproc must be a positive integer' in res.stderr


def test_a_rank_killed_by_a_signal_makes_the_launcher_exit_128_plus_n(tmp_path):
    script = tmp_path / 'die.py'
    script.write_text('import os, signal, time\n'
                      'if os.environ["RANK"] == "1":\n    os.kill(os.getpid(), signal.SIGKILL)\n'
                      'time.sleep(120)\n')
    res = _launch(RELAUNCH + [str(script)], clean_env(), timeout=120)
    assert res.returncode == 128 + signal.SIGKILL, res.stderr[-3000:]
    assert 'rank 1 of 2 ended first' in _launcher_line(res.stderr, 137)
    assert '(killed by SIGKILL)' in res.stderr


# ------------------------------------------------------------- launch_train.sh / python scripts/launch.py

def test_launch_train_sh_exits_3_with_a_checkpoint_when_its_process_group_gets_sigterm(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, **LONG)
    out_path, err_path = tmp_path / 'stdout.txt', tmp_path / 'stderr.txt'
    with open(out_path, 'w') as out, open(err_path, 'w') as err:
        proc = subprocess.Popen(['./launch_train.sh', '2', path], cwd=ROOT, env=clean_env(PYTHON=PY), stdout=out,
                                stderr=err, start_new_session=True)
    try:
        deadline = time.time() + 240
        while 'iter:       3' not in out_path.read_text():
            assert proc.poll() is None and time.time() < deadline, err_path.read_text()[-3000:]
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGTERM)  # the launcher's group: the shell exec'd into the launcher
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            _kill_tree(proc)
    out, err = out_path.read_text(), err_path.read_text()
    assert proc.returncode == EXIT_PREEMPTED, err[-3000:]
    _launcher_line(err, EXIT_PREEMPTED)
    assert 'launcher: SIGTERM passed on to 2 rank(s)' in err
    assert err.count('stopped: stopped by SIGTERM at iteration') == 2
    step = _latest(tmp_path)
    assert step >= 3 and (tmp_path / 'exp' / 'tiny' / 'models' / f'{step}_state.pth').exists()


def test_launch_train_sh_exits_2_on_a_bad_option_value(tmp_path, demo_images):
    res = _launch(['./launch_train.sh', '2', _opt(tmp_path, demo_images), '--set', 'train.E_decay=1.5'],
                  clean_env(PYTHON=PY))
    assert res.returncode == 2, res.stderr[-3000:]
    assert 'train.E_decay: 1.5 must be in [0, 1)' in res.stderr
    _launcher_line(res.stderr, 2)
    assert not (tmp_path / 'exp').exists()


def test_relaunch_module_exits_4_when_the_loss_becomes_non_finite(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=8, checkpoint_save=4, checkpoint_test=100000)
    res = _launch(RELAUNCH + [PATCHED, '--opt', path], clean_env(INJECT_NAN_AT='6'))
    assert res.returncode == EXIT_NONFINITE, res.stderr[-3000:]
    assert 'non-finite loss or gradients' in _launcher_line(res.stderr, EXIT_NONFINITE)
    assert 'iteration 6: non-finite loss term G_loss on ranks 0, 1' in res.stderr  # the term that went NaN
    assert _latest(tmp_path) == 4


def test_relaunch_module_exits_5_when_a_checkpoint_write_fails(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=8, checkpoint_save=2, checkpoint_test=100000)
    res = _launch(RELAUNCH + [PATCHED, '--opt', path], clean_env(SAVE_FAIL_AT='4'))
    assert res.returncode == EXIT_SAVE_FAILED, res.stderr[-3000:]
    assert 'checkpoint write failed' in _launcher_line(res.stderr, EXIT_SAVE_FAILED)
    assert 'checkpoint at iteration 4 failed: no space left on /' in res.stderr
    assert _latest(tmp_path) == 2


# ---------------------------------------------------------------- python main_train.py with gpu_ids

def test_gpu_ids_relaunch_exits_4_when_the_loss_becomes_non_finite(tmp_path, demo_images):
    wrapper = tmp_path / 'patched_gpu_ids_main.py'
    wrapper.write_text(GPU_IDS_FAULT_WRAPPER)
    path = _opt(tmp_path, demo_images, total_iter=8, checkpoint_save=4, checkpoint_test=100000)
    res = _launch([PY, str(wrapper), '--opt', path, '--set', 'gpu_ids=[0,1]'],
                  clean_env(**{CPU_TEST_MODE: '1', 'INJECT_NAN_AT': '6'}))
    assert res.returncode == EXIT_NONFINITE, res.stdout[-2000:] + res.stderr[-3000:]
    assert 'gpu_ids [0, 1]: relaunching as 2 DDP processes' in res.stdout
    assert 'mode=env' in res.stdout
    _launcher_line(res.stderr, EXIT_NONFINITE)
    assert _latest(tmp_path) == 4


# ---------------------------------------------------------------- submit_job.sh against fake srun/scontrol

FAKE_SRUN = """#!/bin/bash
printf '%s\\n' "$@" > "$FAKE_DIR/srun.args"
echo "MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT" > "$FAKE_DIR/srun.env"
exit "${FAKE_SRUN_EXIT:-0}"
"""
FAKE_SCONTROL = """#!/bin/bash
echo "$*" >> "$FAKE_DIR/scontrol.calls"
case "$1" in
  show) printf 'node1\\nnode2\\n' ;;
  requeue) exit "${FAKE_REQUEUE_EXIT:-0}" ;;
esac
"""


def _submit(tmp_path, srun_exit: int, requeue_exit: int = 0) -> SimpleNamespace:
    fake = tmp_path / 'fakebin'
    fake.mkdir(exist_ok=True)
    for name, text in (('srun', FAKE_SRUN), ('scontrol', FAKE_SCONTROL)):
        (fake / name).write_text(text)
        (fake / name).chmod(stat.S_IRWXU)
    env = clean_env(PATH=f'{fake}{os.pathsep}{os.environ["PATH"]}', FAKE_DIR=str(fake), PYTHON='python',
                    FAKE_SRUN_EXIT=str(srun_exit), FAKE_REQUEUE_EXIT=str(requeue_exit),
                    SLURM_JOB_ID='4242', SLURM_JOB_NODELIST='node[1-2]', SLURM_SUBMIT_DIR=ROOT)
    res = subprocess.run(['bash', 'submit_job.sh', 'options/x.json', '--set', 'train.total_iter=10'], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=60)
    calls = (fake / 'scontrol.calls').read_text().splitlines() if (fake / 'scontrol.calls').exists() else []
    return SimpleNamespace(code=res.returncode, out=res.stdout, err=res.stderr, calls=calls,
                           srun_args=(fake / 'srun.args').read_text().splitlines(),
                           srun_env=(fake / 'srun.env').read_text())


def test_submit_job_requeues_on_exit_code_3_and_then_exits_0(tmp_path):
    job = _submit(tmp_path, EXIT_PREEMPTED)
    assert job.code == 0, job.err
    assert 'requeue 4242' in job.calls
    assert 'stopped for preemption, checkpoint saved; requeueing' in job.out


@pytest.mark.parametrize('code', [2, EXIT_NONFINITE, EXIT_SAVE_FAILED, 1, 137])
def test_submit_job_passes_other_failure_codes_through_without_requeueing(tmp_path, code):
    job = _submit(tmp_path, code)
    assert job.code == code, job.err
    assert not [c for c in job.calls if c.startswith('requeue')]
    assert f'training exited with code {code}' in job.out


def test_submit_job_exits_0_when_training_completes(tmp_path):
    job = _submit(tmp_path, 0)
    assert job.code == 0 and not [c for c in job.calls if c.startswith('requeue')]


def test_submit_job_keeps_code_3_when_the_requeue_itself_fails(tmp_path):
    job = _submit(tmp_path, EXIT_PREEMPTED, requeue_exit=1)
    assert job.code == EXIT_PREEMPTED
    assert 'requeue 4242' in job.calls and 'scontrol requeue failed' in job.err


def test_submit_job_starts_the_ranks_with_srun_and_lets_them_end_by_themselves(tmp_path):
    """--kill-on-bad-exit=1 would SIGTERM a rank a moment slower than the first to exit, and srun
    then reports 143 instead of the ranks' own code (seen with a user error on SLURM 22.05)."""
    job = _submit(tmp_path, 0)
    args = job.srun_args
    assert '--kill-on-bad-exit=0' in args and '--wait=60' in args
    assert args[args.index('main_train.py') - 2:] == ['python', '-u', 'main_train.py', '--opt', 'options/x.json',
                                                       '--set', 'train.total_iter=10']
    assert 'MASTER_ADDR=node1 MASTER_PORT=19242' in job.srun_env  # first node; 15000 + job id % 20000
