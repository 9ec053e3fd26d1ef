"""One run folder, one live job: ranks follow their launcher's death, a second job on a busy folder is
refused, and `--fresh` acts on the first start of a job only.

Runs are real processes (`main_train.py` alone or under `torchrun`, and small scripts around
`utils/parent_watch.py`) where the process is what is tested (its launcher's death, a job holding the lock);
a job that only meets a lock (or makes the checkpoint a test starts from) runs in the test's process
(`run_main`). Evidence is exit codes, output lines, which processes still run, and what exists on disk.
"""
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, List, Tuple

import pytest

from tests.conftest import ROOT, clean_env, run, run_main, tiny_options, write_options
from utils.exit_codes import EXIT_ORPHANED, EXIT_PREEMPTED
from utils.parent_watch import should_watch
from utils.runlock import lock_path

# pytest-xdist keeps this module on one worker: a run held by a live job is started once for the module
pytestmark = pytest.mark.xdist_group('test_run_folder')

PY = sys.executable
PATCHED = os.path.join('tests', 'patched_main.py')
TORCHRUN = [PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2']
QUIET = dict(total_iter=100000, checkpoint_save=100000, checkpoint_test=100000, checkpoint_print=100000)
# Starts `python <argv[1:]>` and then just waits: the "launcher" that the tests SIGKILL.
PARENT = 'import subprocess, sys, time\nsubprocess.Popen([sys.executable] + sys.argv[1:])\ntime.sleep(600)\n'
# A rank that cannot stop: SIGTERM is noted and ignored, as when a collective blocks on a dead peer.
STUCK_CHILD = """import os, signal, sys, time
from utils import parent_watch
signal.signal(signal.SIGTERM, lambda *a: print('SIGTERM received; carrying on', flush=True))
parent_watch.install(grace_s=float(sys.argv[1]), poll_s=0.2)
print('ready', os.getpid(), flush=True)
time.sleep(600)
"""
# Its parent dies before it asks to follow it (the parent pid recorded at start is passed in).
LATE_CHILD = """import os, time
from utils import parent_watch
start = os.getppid()
print('ready', os.getpid(), flush=True)
while os.getppid() == start:
    time.sleep(0.05)
parent_watch.install(parent=start)
print('still running after install', flush=True)
time.sleep(600)
"""


def _options(tmp_path, demo_images, **train) -> str:
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, **train)
    opt['logging']['use_tensorboard'] = False  # no background writes while a test compares the folder
    return write_options(str(tmp_path / 'o.json'), opt)


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's exit status waits for init, which may be slow to reap)."""
    try:
        with open(f'/proc/{pid}/stat', 'rb') as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b')') + 2:].split()[0] != b'Z'


def _children(pid: int) -> List[int]:
    out = []
    for entry in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open(f'/proc/{entry}/stat', 'rb') as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat[stat.rfind(b')') + 2:].split()[1]) == pid:
            out.append(int(entry))
    return out


def _wait_gone(pids: List[int], timeout: float) -> float:
    """Seconds until none of `pids` runs; inf if some still run after `timeout`."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if not any(_running(p) for p in pids):
            return time.monotonic() - start
        time.sleep(0.1)
    return float('inf')


def _kill_all(pids: List[int]) -> None:
    for pid in pids:
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


def _wait_for(path: str, needle: str, proc: subprocess.Popen, timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path) as f:
            text = f.read()
        if needle in text:
            return text
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f'{needle!r} not seen in {path}: {text[-3000:]}')


def _start(cmd: List[str], out: str, env: Dict[str, str]) -> subprocess.Popen:
    with open(out, 'w') as f:  # a file, not a pipe: orphans keep writing after the test stops reading
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)


def _snapshot(folder: str) -> Dict[str, Tuple[int, int]]:
    """Every file under `folder` (dot files too) with its size and modification time."""
    out = {}
    for dirpath, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            out[os.path.relpath(path, folder)] = (st.st_size if name in files else 0, st.st_mtime_ns)
    return out


@pytest.mark.parametrize('env, platform, watched', [
    ({'TORCHELASTIC_RUN_ID': 'abc', 'RANK': '1'}, 'linux', True),
    ({}, 'linux', False),                                               # plain process, maybe under nohup
    ({'SLURM_STEP_ID': '0', 'SLURM_PROCID': '1', 'RANK': '1'}, 'linux', False),  # srun ends its own tasks
    ({'WORLD_SIZE': '2', 'RANK': '1', 'MASTER_ADDR': 'h', 'MASTER_PORT': '1'}, 'linux', False),  # a platform
    ({'TORCHELASTIC_RUN_ID': 'abc'}, 'darwin', False),
], ids=['torch-elastic', 'plain', 'srun', 'platform-env', 'not-linux'])
def test_only_linux_ranks_started_by_a_torch_elastic_agent_follow_their_launchers_death(env, platform, watched):
    assert should_watch(env, platform) is watched


def test_sigkill_of_torchrun_stops_its_ranks_gracefully_with_a_checkpoint(tmp_path, demo_images):
    path = _options(tmp_path, demo_images, **dict(QUIET, checkpoint_print=1))
    out = str(tmp_path / 'torchrun.out')
    agent = _start(TORCHRUN + ['main_train.py', '--opt', path], out, clean_env())
    ranks: List[int] = []
    try:
        _wait_for(out, 'iter:       3', agent)
        ranks = [p for p in _children(agent.pid) if path in open(f'/proc/{p}/cmdline').read()]
        assert len(ranks) == 2, ranks
        os.kill(agent.pid, signal.SIGKILL)  # the agent only, as the OOM killer would
        agent.wait()
        assert _wait_gone(ranks, 20) < 20, open(out).read()[-3000:]
    finally:
        _kill_all(ranks)
        agent.kill()
        agent.wait()
    text = open(out).read()
    assert text.count('stopped: stopped by SIGTERM at iteration') == 2, text[-3000:]  # both ranks, together
    models = tmp_path / 'exp' / 'tiny' / 'models'
    step = int((models / 'latest').read_text())
    assert step >= 3 and (models / f'{step}_state.pth').exists()  # saved by the stop: checkpoint_save is 100000


def test_a_rank_that_cannot_stop_after_its_launcher_died_is_ended_after_the_grace_period(tmp_path):
    out = str(tmp_path / 'out')
    parent = _start([PY, '-c', PARENT, '-c', STUCK_CHILD, '2'], out, clean_env(TORCHELASTIC_RUN_ID='t'))
    child = int(_wait_for(out, 'ready', parent).split('ready ')[1].split()[0])
    try:
        parent.kill()
        parent.wait()
        elapsed = _wait_gone([child], 15)
    finally:
        _kill_all([child])
    text = open(out).read()
    assert 'SIGTERM received; carrying on' in text, text  # the graceful request came first
    assert 1.5 <= elapsed < 6, (elapsed, text)
    assert f'did not stop within 2 s; exiting with code {EXIT_ORPHANED}' in text, text


def test_a_plain_process_outlives_its_parent_as_under_nohup(tmp_path):
    out = str(tmp_path / 'out')
    parent = _start([PY, '-c', PARENT, '-c', STUCK_CHILD, '1'], out, clean_env())
    child = int(_wait_for(out, 'ready', parent).split('ready ')[1].split()[0])
    try:
        parent.kill()
        parent.wait()
        time.sleep(4)  # the watched variant is gone after 1 s + polling
        assert _running(child)
    finally:
        _kill_all([child])
    assert 'SIGTERM' not in open(out).read()


def test_a_rank_whose_launcher_died_before_it_asked_to_follow_it_stops_at_once(tmp_path):
    out = str(tmp_path / 'out')
    parent = _start([PY, '-c', PARENT, '-c', LATE_CHILD], out, clean_env(TORCHELASTIC_RUN_ID='t'))
    child = int(_wait_for(out, 'ready', parent).split('ready ')[1].split()[0])
    try:
        parent.kill()
        parent.wait()
        assert _wait_gone([child], 10) < 10
    finally:
        _kill_all([child])
    text = open(out).read()
    assert 'exited before this process asked to follow it' in text and 'still running' not in text, text


def test_the_lock_file_sits_beside_the_task_folder_so_fresh_keeps_it(tmp_path):
    (tmp_path / 'exp').mkdir()
    os.symlink(tmp_path / 'exp', tmp_path / 'link')
    expected = os.path.join(os.path.realpath(tmp_path / 'exp'), '.denoise.lock')
    assert lock_path(str(tmp_path / 'exp' / 'denoise')) == expected
    assert lock_path(str(tmp_path / 'exp' / 'denoise') + os.sep) == expected
    assert lock_path(str(tmp_path / 'link' / 'denoise')) == expected  # one folder, one lock


@pytest.fixture(scope='module')
def busy_run(tmp_path_factory, demo_images):
    """A run folder with a checkpoint and a job training in it that writes nothing for now."""
    tmp = tmp_path_factory.mktemp('busy')
    path = _options(tmp, demo_images, **QUIET)
    first = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=2'])
    assert first.returncode == 0, first.stderr[-2000:]
    out = str(tmp / 'holder.out')
    holder = _start([PY, 'main_train.py', '--opt', path], out, clean_env())
    try:
        _wait_for(out, 'start training at iteration 2', holder)
        yield path, str(tmp / 'exp'), holder.pid
        assert holder.poll() is None, open(out).read()[-3000:]  # the refused jobs did not disturb it
        holder.send_signal(signal.SIGTERM)
        assert holder.wait(timeout=120) == EXIT_PREEMPTED, open(out).read()[-3000:]
    finally:
        holder.kill()
        holder.wait()


def test_a_second_job_on_a_busy_run_folder_exits_2_naming_the_holder_and_writes_nothing(busy_run):
    path, root, pid = busy_run
    before = _snapshot(root)
    # --fresh would move the folder aside; total_iter=3: were it not refused, it would end soon.
    res = run_main('main_train', ['--opt', path, '--fresh', '--set', 'train.total_iter=3'])
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert res.stderr.count('\n') == 1 and res.stderr.startswith('error: '), res.stderr
    assert f'is in use by another job: host {socket.gethostname()} pid {pid} holds' in res.stderr, res.stderr
    assert _snapshot(root) == before


def test_a_second_torchrun_job_on_a_busy_run_folder_stops_every_rank_with_exit_2(busy_run):
    path, root, pid = busy_run
    before = _snapshot(root)
    res = run(TORCHRUN + ['main_train.py', '--opt', path, '--set', 'train.total_iter=3'])
    errors = [line for line in res.stderr.splitlines() if line.startswith('error: ')]
    assert res.returncode == 1 and res.stderr.count('exitcode  : 2') == 2, res.stderr[-3000:]  # torchrun says 1
    assert len(errors) == 2 and all('is in use by another job' in line for line in errors), errors
    assert any(f'host {socket.gethostname()} pid {pid}' in line for line in errors), errors
    assert _snapshot(root) == before


def test_each_ranks_error_line_is_one_write_so_that_two_ranks_lines_never_merge(monkeypatch):
    """The ranks above share torchrun's stderr, unbuffered (PYTHONUNBUFFERED=1): print() wrote the text and the
    newline apart, and the two ranks' lines once came out as one. utils.errors.say, which the entry points' error
    and stop lines go through, writes the line and its newline at once (a pipe write this small is atomic)."""
    from utils.errors import say
    writes: List[str] = []
    monkeypatch.setattr(sys, 'stderr', type('Stream', (), {'write': lambda self, s: writes.append(s),
                                                           'flush': lambda self: None})())
    say('error: /runs/tiny is in use by another job')
    assert writes == ['error: /runs/tiny is in use by another job\n']


def test_main_test_evaluates_a_run_folder_while_its_training_job_holds_the_lock(busy_run):
    path, root, pid = busy_run
    res = run_main('main_test', ['--opt', path, '--no-images'])
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


@pytest.mark.slow  # ~15-25 s; runs in CI (CI=true) and with RUN_SLOW=1
def test_a_lock_left_by_a_sigkilled_job_does_not_block_the_next_start(tmp_path, demo_images):
    path = _options(tmp_path, demo_images, **QUIET)
    out = str(tmp_path / 'killed.out')
    killed = _start([PY, 'main_train.py', '--opt', path], out, clean_env())
    try:
        _wait_for(out, 'start training at iteration 0', killed)
    finally:
        killed.kill()
        killed.wait()
    lock = tmp_path / 'exp' / '.tiny.lock'
    assert lock.read_text().split() == [socket.gethostname(), str(killed.pid)]  # left behind, still naming it
    res = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=2'])
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'end of training at iteration 2' in res.stdout
    assert lock.exists()  # never deleted


@pytest.mark.slow  # ~15-25 s; runs in CI (CI=true) and with RUN_SLOW=1
def test_a_torchrun_restart_after_rank_0_crashed_retakes_the_lock_ignores_fresh_and_resumes(tmp_path, demo_images):
    """The crashed attempt's rank 0 held the lock: the kernel dropped it, so the restart is not refused.
    `--fresh` moved the earlier run aside on the first attempt only; the restart resumes from the save
    that attempt made at iteration 4 instead of archiving it too."""
    path = _options(tmp_path, demo_images, total_iter=8, checkpoint_save=2, checkpoint_test=100000)
    earlier = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=2'])
    assert earlier.returncode == 0, earlier.stderr[-2000:]

    res = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', '--max-restarts=1',
               PATCHED, '--opt', path, '--fresh'], env=clean_env(CRASH_AT='5', CRASH_RANK='0'))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert 'CRASHING rank 0' in res.stdout and 'in use by another job' not in res.stderr
    assert '--fresh: ignored on this automatic restart' in res.stdout
    assert 'resumed from' in res.stdout and 'at iteration 4 (epoch' in res.stdout
    exp = tmp_path / 'exp'
    archived = [d for d in os.listdir(exp) if d.startswith('tiny_archived_')]
    assert len(archived) == 1, archived  # the earlier run, moved aside by the first attempt
    saves = sorted(n for n in os.listdir(exp / archived[0] / 'models') if n[0].isdigit() and n.endswith('_G.pth'))
    assert saves == ['2_G.pth'], saves
    assert (exp / 'tiny' / 'models' / '8_G.pth').exists()
