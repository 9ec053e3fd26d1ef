"""Preemption with DataLoader workers: a signal to the whole process group stops the run cleanly.

SLURM, torchrun and `kill -TERM -<pgid>` signal every process of the job, loader workers included.
The workers must leave SIGTERM/SIGUSR1 to their rank, which saves at the iteration boundary and
exits 3 (utils/stop.py); they still end with their rank.
"""
import os
import re
import signal
import subprocess
import sys
import time

from data.loader import build_train_loader, build_val_loader
from tests.conftest import ROOT, clean_env, group_members, tiny_options, write_options
from utils.exit_codes import EXIT_PREEMPTED

PY = sys.executable
LONG = dict(total_iter=100000, checkpoint_save=100000, checkpoint_test=100000, checkpoint_print=1)


def _options(tmp_path, demo_images):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, **LONG)
    opt['datasets']['train'].update(dataloader_num_workers=1, dataloader_persistent_workers=True)
    return write_options(str(tmp_path / 'o.json'), opt)


def _start(cmd, tmp_path):
    """Start `cmd` in its own session (process group), stdout to a file we can poll without blocking."""
    out = open(tmp_path / 'stdout.txt', 'w')
    err = open(tmp_path / 'stderr.txt', 'w')
    proc = subprocess.Popen(cmd, cwd=ROOT, env=clean_env(), stdout=out, stderr=err, start_new_session=True)
    out.close()
    err.close()
    return proc


def _wait_for(proc, tmp_path, pattern, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = (tmp_path / 'stdout.txt').read_text()
        if re.search(pattern, text):
            return text
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f'{pattern!r} not seen (exit {proc.poll()}): {text[-2000:]} '
                         f'{(tmp_path / "stderr.txt").read_text()[-2000:]}')


def _wait_group_gone(pgid, timeout=30):
    deadline = time.time() + timeout
    while group_members(pgid) and time.time() < deadline:
        time.sleep(0.2)
    return group_members(pgid)


def _stop_iteration(stderr):
    steps = [int(n) for n in re.findall(r'stopped by SIGTERM at iteration (\d+); checkpoint saved', stderr)]
    assert steps, stderr[-2000:]
    return steps


def test_sigterm_to_the_process_group_saves_and_exits_with_the_preemption_code_despite_loader_workers(
        tmp_path, demo_images):
    proc = _start([PY, 'main_train.py', '--opt', _options(tmp_path, demo_images)], tmp_path)
    try:
        _wait_for(proc, tmp_path, r'iter:\s+3,')
        os.killpg(proc.pid, signal.SIGTERM)           # what SLURM / kill -TERM -<pgid> do: every process
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    stderr = (tmp_path / 'stderr.txt').read_text()
    assert 'killed by signal' not in stderr, stderr[-2000:]
    assert proc.returncode == EXIT_PREEMPTED, stderr[-2000:]
    step, = _stop_iteration(stderr)
    models = tmp_path / 'exp' / 'tiny' / 'models'
    assert step >= 3 and (models / f'{step}_state.pth').exists() and (models / 'latest').read_text().strip() == str(step)
    assert _wait_group_gone(proc.pid) == [], 'loader workers outlived their rank'


def test_sigterm_to_a_torchrun_process_group_stops_both_ranks_with_a_checkpoint(tmp_path, demo_images):
    cmd = [PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'main_train.py',
           '--opt', _options(tmp_path, demo_images)]
    proc = _start(cmd, tmp_path)
    try:
        _wait_for(proc, tmp_path, r'iter:\s+3,')
        os.killpg(proc.pid, signal.SIGTERM)           # torchrun, both ranks and their workers
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    stderr = (tmp_path / 'stderr.txt').read_text()
    assert 'killed by signal' not in stderr, stderr[-2000:]
    steps = _stop_iteration(stderr)
    assert len(steps) == 2 and steps[0] == steps[1], stderr[-2000:]   # both ranks, at the same iteration
    assert (tmp_path / 'exp' / 'tiny' / 'models' / f'{steps[0]}_state.pth').exists()
    assert _wait_group_gone(proc.pid) == [], 'processes of the job outlived torchrun'


def test_train_and_val_loader_workers_ignore_the_stop_signals(tmp_path):
    """The hook itself: inside a worker (after torch installed its own handlers) SIGTERM, SIGUSR1 and SIGINT
    (a terminal's Ctrl-C reaches the workers too) are ignored."""
    import torch
    from torch.utils.data import Dataset

    class Handlers(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, key):
            return torch.tensor([int(signal.getsignal(sig) == signal.SIG_IGN)
                                 for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)])

    opt = {'dataloader_batch_size': 2, 'dataloader_num_workers': 1, 'dataloader_shuffle': False,
           'dataloader_prefetch_factor': 2, 'dataloader_persistent_workers': False, '_where': 'datasets.train'}
    train, _ = build_train_loader(Handlers(), opt, 1, 0, 0, torch.device('cpu'))
    assert all(bool(b.all()) for b in train)
    assert all(bool(b.all()) for b in build_val_loader(Handlers(), 1, 0, num_workers=1))
    assert signal.getsignal(signal.SIGTERM) != signal.SIG_IGN           # the main process is untouched
