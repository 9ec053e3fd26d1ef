"""A stop asked for at any moment ends the run cleanly: Ctrl-C (SIGINT), and SIGTERM/SIGUSR1 during start-up.

A first Ctrl-C works like preemption (every rank agrees at the iteration boundary, rank 0 saves) but exits
130, which no job script requeues; a second stops at once, with one line and 130 too. A stop signal during
start-up (imports, the ranks meeting, the data checks) exits 3 (130 for Ctrl-C) with nothing written, not
143. Real processes and real signals: ranks started by hand in one process group stand for a terminal's
foreground group, where Ctrl-C reaches every rank and every loader worker.
"""
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import ROOT, clean_env, free_port, group_members, tiny_options, write_options
from utils.exit_codes import EXIT_INTERRUPTED, EXIT_PREEMPTED
from utils.stop import AT_ONCE_LINE

PY = sys.executable
PATCHED = os.path.join('tests', 'patched_main.py')
LONG = dict(total_iter=100000, checkpoint_save=100000, checkpoint_test=100000, checkpoint_print=1)
SAVED_LINE = (r'stopped: stopped by SIGINT \(Ctrl-C\) at iteration (\d+); checkpoint saved, rerun the same command '
              r'to resume')


def _options(tmp_path, demo_images, workers=1, **train):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, **{**LONG, **train})
    opt['logging']['use_tensorboard'] = False
    opt['datasets']['train'].update(dataloader_num_workers=workers, dataloader_persistent_workers=True)
    return write_options(str(tmp_path / 'o.json'), opt)


class Proc:
    """A process with stdout and stderr in files (polled without blocking), leading a process group of its own, or
    joining `group`."""

    def __init__(self, cmd, tmp_path, name='p', env=None, group=None):
        self.out, self.err = tmp_path / f'{name}.out', tmp_path / f'{name}.err'
        with open(self.out, 'w') as out, open(self.err, 'w') as err:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env or clean_env(), stdout=out, stderr=err,
                                         process_group=0 if group is None else group)
        self.pid = self.proc.pid

    def wait_for(self, pattern, timeout=240):
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = self.out.read_text()
            if re.search(pattern, text):
                return text
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f'{pattern!r} not seen (exit {self.proc.poll()}): {self.out.read_text()[-1500:]} '
                             f'{self.err.read_text()[-1500:]}')

    def wait_until_it_handles(self, sig, timeout=120):
        """Until the process has a handler of its own for `sig` (SigCgt in /proc), i.e. our handlers are in place."""
        deadline = time.time() + timeout
        while time.time() < deadline and self.proc.poll() is None:
            with open(f'/proc/{self.pid}/status') as f:
                caught = int(re.search(r'^SigCgt:\s*([0-9a-f]+)$', f.read(), re.M).group(1), 16)
            if caught >> (sig - 1) & 1:
                return
            time.sleep(0.01)
        raise AssertionError(f'{signal.Signals(sig).name} never handled (exit {self.proc.poll()}): '
                             f'{self.err.read_text()[-1500:]}')

    def finish(self, timeout=120):
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(os.getpgid(self.pid), signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode, self.err.read_text()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _rank_env(rank, port):
    return clean_env(WORLD_SIZE='2', RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR='127.0.0.1', MASTER_PORT=port)


def _models(tmp_path):
    return tmp_path / 'exp' / 'tiny' / 'models'


def _one_line(err):
    assert 'Traceback' not in err and err.count('\n') == 1, err[-3000:]
    return err.strip()


# ---------------------------------------------------------------- Ctrl-C while training

def test_ctrl_c_saves_a_checkpoint_and_exits_130_with_one_line_even_with_loader_workers(tmp_path, demo_images):
    p = Proc([PY, 'main_train.py', '--opt', _options(tmp_path, demo_images)], tmp_path)
    try:
        p.wait_for(r'iter:\s+3,')
        os.killpg(p.pid, signal.SIGINT)       # a terminal's Ctrl-C: the process and its loader worker
        code, err = p.finish()
    finally:
        p.kill()
    line = _one_line(err)
    assert code == EXIT_INTERRUPTED, err
    step = int(re.fullmatch(SAVED_LINE, line).group(1))
    assert step >= 3 and (_models(tmp_path) / 'latest').read_text().strip() == str(step)
    assert (_models(tmp_path) / f'{step}_state.pth').exists()
    deadline = time.time() + 30
    while group_members(p.pid) and time.time() < deadline:
        time.sleep(0.2)
    assert group_members(p.pid) == [], 'the loader worker outlived its process'


def test_a_second_ctrl_c_stops_at_once_without_saving_with_one_line(tmp_path, demo_images):
    """The first Ctrl-C starts a save that takes long (SLOW_SAVE_SECONDS); the second does not wait for it."""
    p = Proc([PY, PATCHED, '--opt', _options(tmp_path, demo_images, workers=0)], tmp_path,
             env=clean_env(SLOW_SAVE_SECONDS='60'))
    try:
        p.wait_for(r'iter:\s+3,')
        os.kill(p.pid, signal.SIGINT)
        p.wait_for(r'SAVING ')
        start = time.time()
        os.kill(p.pid, signal.SIGINT)
        code, err = p.finish(timeout=30)
    finally:
        p.kill()
    assert time.time() - start < 10
    assert code == EXIT_INTERRUPTED and _one_line(err) == AT_ONCE_LINE
    assert not [n for n in os.listdir(_models(tmp_path)) if n.endswith('_state.pth')]  # that save never completed


def test_ctrl_c_in_a_terminal_stops_every_rank_at_the_same_iteration_with_a_checkpoint(tmp_path, demo_images):
    """Both ranks and their loader workers in one foreground process group, as under srun or a shell loop."""
    path, port = _options(tmp_path, demo_images), str(free_port())
    ranks = [Proc([PY, 'main_train.py', '--opt', path], tmp_path, 'r0', env=_rank_env(0, port))]
    ranks.append(Proc([PY, 'main_train.py', '--opt', path], tmp_path, 'r1', env=_rank_env(1, port), group=ranks[0].pid))
    try:
        ranks[0].wait_for(r'iter:\s+3,')
        os.killpg(ranks[0].pid, signal.SIGINT)
        results = [r.finish() for r in ranks]
    finally:
        for r in ranks:
            r.kill()
    assert [code for code, _ in results] == [EXIT_INTERRUPTED] * 2, [err[-1500:] for _, err in results]
    steps = {int(re.fullmatch(SAVED_LINE, _one_line(err)).group(1)) for _, err in results}
    assert len(steps) == 1, results                     # the same iteration on both ranks
    step = steps.pop()
    assert (_models(tmp_path) / f'{step}_state.pth').exists() and 'killed by signal' not in results[0][1]


def test_a_rank_waiting_for_a_frozen_peer_stops_at_the_second_ctrl_c(tmp_path, demo_images):
    """Rank 0 is blocked in the per-iteration collective (its peer is stopped with SIGSTOP), where Python signal
    handlers cannot run: the second Ctrl-C still ends it at once, not after dist_timeout."""
    path, port = _options(tmp_path, demo_images, workers=0), str(free_port())
    ranks = [Proc([PY, 'main_train.py', '--opt', path, '--set', 'dist_timeout=120'], tmp_path, f'r{r}',
                  env=_rank_env(r, port)) for r in (0, 1)]
    try:
        ranks[0].wait_for(r'iter:\s+3,')
        os.kill(ranks[1].pid, signal.SIGSTOP)
        time.sleep(1.0)                                # rank 0 now waits for rank 1 in the collective
        start = time.time()
        os.kill(ranks[0].pid, signal.SIGINT)
        time.sleep(0.3)
        os.kill(ranks[0].pid, signal.SIGINT)
        code, err = ranks[0].finish(timeout=30)
        assert time.time() - start < 15
    finally:
        for r in ranks:
            if r.proc.poll() is None:
                os.kill(r.pid, signal.SIGKILL)
            r.kill()
    assert code == EXIT_INTERRUPTED and _one_line(err) == AT_ONCE_LINE


# ---------------------------------------------------------------- a stop during start-up

@pytest.mark.parametrize('sig, code', [(signal.SIGTERM, EXIT_PREEMPTED), (signal.SIGINT, EXIT_INTERRUPTED)],
                         ids=['SIGTERM', 'SIGINT'])
def test_a_stop_signal_during_start_up_exits_with_the_stop_code_and_writes_nothing(tmp_path, demo_images, sig, code):
    """The handlers are in place before `import torch`; the stop is acted on at the first safe point."""
    p = Proc([PY, 'main_train.py', '--opt', _options(tmp_path, demo_images)], tmp_path)
    try:
        p.wait_until_it_handles(signal.SIGTERM)
        assert 'start training' not in p.out.read_text()
        os.kill(p.pid, sig)
        got, err = p.finish()
    finally:
        p.kill()
    assert got == code, err
    assert re.fullmatch(rf'stopped: stopped by {signal.Signals(sig).name}( \(Ctrl-C\))? during start-up \(.*\): '
                        r'nothing written, nothing to save; rerun the same command to continue', _one_line(err))
    assert not (tmp_path / 'exp').exists()


def test_sigterm_to_one_rank_while_the_ranks_meet_stops_both_before_anything_is_written(tmp_path, demo_images):
    """Rank 0 gets SIGTERM before rank 1 even exists; once they have met they stop together, code 3 on both."""
    path, port = _options(tmp_path, demo_images, workers=0), str(free_port())
    ranks = [Proc([PY, 'main_train.py', '--opt', path], tmp_path, 'r0', env=_rank_env(0, port))]
    try:
        ranks[0].wait_until_it_handles(signal.SIGTERM)
        os.kill(ranks[0].pid, signal.SIGTERM)
        ranks.append(Proc([PY, 'main_train.py', '--opt', path], tmp_path, 'r1', env=_rank_env(1, port)))
        results = [r.finish() for r in ranks]
    finally:
        for r in ranks:
            r.kill()
    assert [code for code, _ in results] == [EXIT_PREEMPTED] * 2, [err[-1500:] for _, err in results]
    assert _one_line(results[0][1]).startswith('stopped: stopped by SIGTERM during start-up')
    assert _one_line(results[1][1]).startswith('stopped: stopped by a signal on another rank during start-up')
    assert not (tmp_path / 'exp').exists()


def test_a_stop_signal_to_the_launcher_at_any_moment_of_its_start_exits_3_and_writes_nothing(tmp_path, demo_images):
    """`python scripts/launch.py` (launch_train.sh): before any rank exists it starts none; later the ranks stop
    during their own start-up. 3 either way, never 143."""
    cmd = [PY, os.path.join('scripts', 'launch.py'), '--nproc', '2', 'main_train.py', '--opt', _options(tmp_path, demo_images)]
    p = Proc(cmd, tmp_path)
    try:
        p.wait_until_it_handles(signal.SIGTERM)
        os.kill(p.pid, signal.SIGTERM)
        code, err = p.finish()
    finally:
        p.kill()
    assert code == EXIT_PREEMPTED, err[-3000:]
    assert 'Traceback' not in err
    assert ('launcher: SIGTERM before the ranks started: nothing to save; exiting with 3' in err
            or 'stopped: stopped by SIGTERM during start-up' in err), err[-3000:]
    assert not (tmp_path / 'exp').exists()


def test_ctrl_c_to_launch_train_sh_makes_the_ranks_save_and_the_launcher_exit_130(tmp_path, demo_images):
    p = Proc(['./launch_train.sh', '2', _options(tmp_path, demo_images)], tmp_path, env=clean_env(PYTHON=PY))
    try:
        p.wait_for(r'iter:\s+3,')
        os.killpg(p.pid, signal.SIGINT)      # the terminal's group: the launcher (the ranks have sessions of their own)
        code, err = p.finish()
    finally:
        if p.proc.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.kill()
    assert code == EXIT_INTERRUPTED, err[-3000:]
    assert 'Traceback' not in err
    assert 'launcher: SIGINT passed on to 2 rank(s)' in err
    assert re.search(r'launcher: rank \d of 2 ended first, with exit code 130 \(interrupted by SIGINT \(Ctrl-C\)\); '
                     r'exiting with 130', err), err[-3000:]
    steps = {int(m) for m in re.findall(SAVED_LINE.replace('^', ''), err)}
    assert len(steps) == 1, err[-3000:]
    assert (_models(tmp_path) / f'{steps.pop()}_state.pth').exists()


# ---------------------------------------------------------------- main_test.py

def test_ctrl_c_in_main_test_is_one_line_and_exit_130(tmp_path, demo_images):
    from models.registry import NETWORKS
    opt = tiny_options(str(tmp_path / 'exp'), demo_images)
    net = NETWORKS.get('dncnn', 'netG.net_type')(**{k: v for k, v in opt['netG'].items() if k != 'net_type'})
    torch.save(net.state_dict(), tmp_path / 'w.pth')
    opt['datasets']['test'].update(dataroot_H=os.path.join(demo_images, 'train'),  # 64 images: a few seconds
                                   dataloader_num_workers=1)
    path = write_options(str(tmp_path / 'o.json'), opt)
    p = Proc([PY, 'main_test.py', '--opt', path, '--weights', str(tmp_path / 'w.pth')], tmp_path)
    try:
        p.wait_for(r'testing .* on 64 items')
        os.killpg(p.pid, signal.SIGINT)      # with its loader worker, as from a terminal
        code, err = p.finish()
    finally:
        p.kill()
    assert code == EXIT_INTERRUPTED
    assert _one_line(err) == 'stopped: SIGINT (Ctrl-C): testing stopped; results.csv not written'


WORKER_SHARING_A_BATCH = r'''
import os, socket, sys, time
from multiprocessing import resource_sharer
from data.loader import ignore_stop_signals

ignore_stop_signals(0)                       # what every loader worker runs first
batch = resource_sharer.DupFd(os.open(os.devnull, os.O_RDONLY))   # a batch's descriptor, offered to the rank
address = resource_sharer._resource_sharer._address  # stdlib internals: where the rank would connect
for _ in range(3):                           # the rank connects and exits halfway through the handshake
    with socket.socket(socket.AF_UNIX) as rank:
        rank.connect(address)
time.sleep(1)                                # the worker's sharing thread has met each closed connection
raise ConnectionResetError('a failure of the worker itself')
'''


def test_a_loader_worker_stays_quiet_when_its_rank_exits_while_taking_a_batch(tmp_path):
    """main_test's Ctrl-C ends the rank at once; its loader worker, handing over a batch at that moment, must not
    print multiprocessing's ConnectionResetError traceback under the rank's one line. Its own failures still show."""
    done = subprocess.run([PY, '-c', WORKER_SHARING_A_BATCH], cwd=ROOT, env=clean_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert 'resource_sharer' not in done.stderr, done.stderr
    assert done.stderr.count('Traceback') == 1 and 'a failure of the worker itself' in done.stderr, done.stderr
