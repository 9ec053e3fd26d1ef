"""The launch paths besides SLURM, run for real on CPU: ./launch_train.sh, a platform's hand-set env
(and its debugger-style single rank), two torchrun "nodes" meeting over c10d, the gpu_ids
self-relaunch, and the rendezvous failures users hit (busy port, absent master, wrong world size).
"""
import os
import socket
import subprocess
import sys
import time
import uuid
from typing import Dict, Iterator

import pytest

from tests.conftest import ROOT, clean_env, free_port, free_ports, run, tiny_options, write_options
from training.launcher import CPU_TEST_MODE, relaunch_count
from utils.dist import DistState

# pytest-xdist keeps this module on one worker: its rendezvous failures are started once, side by side
pytestmark = pytest.mark.xdist_group('test_launch_paths')

PY = sys.executable
DIST_TIMEOUT = 5
# A failing rank must be gone this long after its program is loaded: the timeout, the 10 s grace
# that init gives c10d before giving up on it, and 5 s for a 2-core machine running six ranks.
LIMIT_S = DIST_TIMEOUT + 10 + 5
HANG_S = 120  # a scenario still running after this long (from its start) is killed and reported
# `python main_train.py` that notes when its imports are done (those of option checking too): start-up
# on a busy machine varies by tens of seconds, the time a failing rendezvous takes must not.
LOADED_THEN_MAIN = """import sys, time
import main_train, option_rules
args = main_train.parse_args(sys.argv[2:])
option_rules.read_options(args.opt, args.set)
with open(sys.argv[1], 'w') as f:
    f.write(repr(time.monotonic()))
sys.exit(main_train.main(sys.argv[2:]))
"""


def _opt(tmp_path, demo_images: str) -> str:
    opt = tiny_options(str(tmp_path / 'exp'), demo_images)
    opt['logging']['use_tensorboard'] = False  # ~3 s per run, and not what these tests are about
    return write_options(str(tmp_path / 'o.json'), opt)


def _assert_trained_together(log: str, world_size: int) -> None:
    assert f'world_size={world_size}' in log, log[-3000:]
    assert f'parameters identical on all {world_size} rank(s)' in log, log[-3000:]


class Failure:
    """One rank started by hand for a failure scenario, with its exit code, stderr and wall time."""

    def __init__(self, opt: str, rank: int, world_size: int, port: int, root: str):
        env = clean_env(WORLD_SIZE=str(world_size), RANK=str(rank), LOCAL_RANK=str(rank),
                        MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), TORCH_CPP_LOG_LEVEL='ERROR')
        self.loaded_path, self.err_path = root + '.loaded', root + '.err'
        cmd = [PY, '-c', LOADED_THEN_MAIN, self.loaded_path, '--opt', opt, '--set', f'dist_timeout={DIST_TIMEOUT}',
               '--set', f'path.root={root}']
        self.port, self.elapsed, self.err, self.hung = port, float('inf'), '', False
        with open(self.err_path, 'w') as err:  # a file, not a pipe: a flood of C++ logs must not block the rank
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)

    def finish(self) -> None:
        """Called as soon as the process has exited: seconds since its imports were done."""
        if os.path.exists(self.loaded_path):
            with open(self.loaded_path) as f:
                self.elapsed = time.monotonic() - float(f.read())
        with open(self.err_path) as f:
            self.err = f.read()


@pytest.fixture(scope='module')
def failures(tmp_path_factory, demo_images) -> Iterator[Dict[str, Failure]]:
    """Every rendezvous failure scenario, started at once: they mostly wait out a timeout, so
    running them side by side costs the time of the slowest instead of the sum."""
    tmp = tmp_path_factory.mktemp('failures')
    opt = write_options(str(tmp / 'o.json'), tiny_options(str(tmp / 'exp'), demo_images))
    with socket.socket() as squatter:  # another program holds this MASTER_PORT and accepts connections
        squatter.bind(('127.0.0.1', 0))
        squatter.listen()
        busy = squatter.getsockname()[1]
        mismatch, unreachable, alone = free_ports(3)  # distinct: two of these scenarios on one port would meet
        runs = {
            'busy_rank0': Failure(opt, 0, 2, busy, str(tmp / 'busy0')),
            'busy_rank1': Failure(opt, 1, 2, busy, str(tmp / 'busy1')),
            'unreachable_rank1': Failure(opt, 1, 2, unreachable, str(tmp / 'unreachable1')),
            'alone_rank0': Failure(opt, 0, 2, alone, str(tmp / 'alone0')),
            'says2_rank0': Failure(opt, 0, 2, mismatch, str(tmp / 'says2')),
            'says3_rank1': Failure(opt, 1, 3, mismatch, str(tmp / 'says3')),
        }
        pending = set(runs.values())
        deadline = time.monotonic() + HANG_S
        while pending and time.monotonic() < deadline:
            for r in [r for r in pending if r.proc.poll() is not None]:
                r.finish()
                pending.discard(r)
            time.sleep(0.1)
        for r in pending:  # hung: recorded as such, the tests report it
            r.hung = True
            r.proc.kill()
            r.proc.wait()
            r.finish()
    yield runs


def _assert_fails_in_one_line(failure: Failure, *phrases: str) -> str:
    """Non-zero exit within the timeout (+ grace) and one `error: ...` line, no traceback."""
    assert not failure.hung, f'still running {HANG_S} s after start (killed); stderr: {failure.err[-2000:]}'
    assert failure.proc.returncode != 0
    lines = failure.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: distributed init failed'), failure.err[-3000:]
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    assert failure.elapsed < LIMIT_S, f'took {failure.elapsed:.1f} s after loading: {lines[0]}'
    return lines[0]


def test_launch_train_sh_starts_n_processes_that_train_together(tmp_path, demo_images):
    res = run(['./launch_train.sh', '2', _opt(tmp_path, demo_images)], env=clean_env(PYTHON=PY))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'mode=env' in res.stdout
    _assert_trained_together(res.stdout, 2)


def test_launch_train_sh_refuses_to_nest_inside_a_launched_rank(tmp_path, demo_images):
    env = clean_env(WORLD_SIZE='8', RANK='0', MASTER_ADDR='10.0.0.1', MASTER_PORT='29500', PYTHON=PY)
    res = run(['./launch_train.sh', '2', _opt(tmp_path, demo_images)], env=env, timeout=30)
    assert res.returncode == 2
    assert 'WORLD_SIZE=8 is already set' in res.stderr
    assert "Run 'python main_train.py --opt ...' directly" in res.stderr
    assert not (tmp_path / 'exp').exists()


def test_debugger_style_single_rank_with_world_size_1_takes_the_distributed_path(tmp_path, demo_images):
    env = clean_env(WORLD_SIZE='1', RANK='0', MASTER_ADDR='127.0.0.1', MASTER_PORT=str(free_port()))
    res = run([PY, 'main_train.py', '--opt', _opt(tmp_path, demo_images)], env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert 'mode=env backend=gloo world_size=1 rank=0' in res.stdout
    assert 'parameters identical on all 1 rank(s)' in res.stdout


def test_two_torchrun_nodes_meet_over_c10d_and_exactly_one_writes(tmp_path, demo_images):
    """Stand-in for two hosts: each `torchrun --nnodes=2` gets its own output root; c10d decides
    which node holds rank 0, and only that node's root may receive anything."""
    opt = _opt(tmp_path, demo_images)
    endpoint, run_id = f'127.0.0.1:{free_port()}', uuid.uuid4().hex
    procs = []
    for node in (0, 1):
        cmd = [PY, '-m', 'torch.distributed.run', '--nnodes=2', '--nproc_per_node=1', '--rdzv_backend=c10d',
               f'--rdzv_endpoint={endpoint}', f'--rdzv_id={run_id}', 'main_train.py', '--opt', opt,
               '--set', f'path.root={tmp_path / f"node{node}"}']
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=clean_env(), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, o[-3000:] + e[-3000:]
    logs = ''.join(o for o, _ in outs)
    assert 'mode=env' in logs
    _assert_trained_together(logs, 2)
    written = [n for n in (0, 1) if (tmp_path / f'node{n}').exists()]
    assert len(written) == 1, written
    assert (tmp_path / f'node{written[0]}' / 'tiny' / 'models' / '8_G.pth').exists()


def test_gpu_ids_relaunch_counts_processes_only_for_plain_multi_entry_runs():
    single, launched = DistState('single'), DistState('env', 2, 0, 0, '127.0.0.1', 1)
    test_mode = {CPU_TEST_MODE: '1'}
    assert relaunch_count([0, 1, 2], single, cuda=True, env={}) == 3
    assert relaunch_count([0], single, cuda=True, env={}) == 0
    assert relaunch_count(None, single, cuda=True, env={}) == 0
    assert relaunch_count([0, 1], launched, cuda=True, env={}) == 0  # the children never relaunch
    assert relaunch_count([0, 1], single, cuda=False, env={}) == 0  # CPU: gpu_ids ignored as before
    assert relaunch_count([0, 1], single, cuda=False, env=test_mode) == 2


def test_plain_command_with_two_gpu_ids_relaunches_as_two_ddp_processes(tmp_path, demo_images):
    """No GPU here: the documented test mode lets gpu_ids count CPU processes; the rest is the real path."""
    res = run([PY, 'main_train.py', '--opt', _opt(tmp_path, demo_images), '--set', 'gpu_ids=[0,1]'],
              env=clean_env(**{CPU_TEST_MODE: '1'}))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'gpu_ids [0, 1]: relaunching as 2 DDP processes' in res.stdout
    assert 'mode=env' in res.stdout
    _assert_trained_together(res.stdout, 2)


def test_busy_master_port_fails_rank0_at_once_and_rank1_within_the_timeout(failures):
    line = _assert_fails_in_one_line(failures['busy_rank0'], 'rank 0/2', 'address already in use')
    assert str(failures['busy_rank0'].port) in line
    assert failures['busy_rank0'].elapsed < DIST_TIMEOUT  # the bind fails; nothing to wait for
    # rank 1 reached the other program's socket, which never answers the store's handshake
    _assert_fails_in_one_line(failures['busy_rank1'], 'rank 1/2')


def test_unreachable_master_fails_within_the_timeout(failures):
    _assert_fails_in_one_line(failures['unreachable_rank1'], 'rank 1/2', f'{DIST_TIMEOUT}s')


def test_only_one_of_two_ranks_started_fails_within_the_timeout(failures):
    _assert_fails_in_one_line(failures['alone_rank0'], 'rank 0/2', '1/2 clients joined')


def test_ranks_disagreeing_on_world_size_both_fail_in_one_line(failures):
    """Rank 0 says 2, rank 1 says 3: rank 0's rendezvous completes, so the mismatch surfaces only
    when the ranks first talk; both must still stop with one line each, not a traceback."""
    _assert_fails_in_one_line(failures['says2_rank0'], 'rank 0/2')
    _assert_fails_in_one_line(failures['says3_rank1'], 'rank 1/3')
