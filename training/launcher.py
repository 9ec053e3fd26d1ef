"""Local multi-process launches on torch's elastic launch API (what torchrun runs), with exit codes a
job script can act on.

Two commands share `launch_local`:
- `python scripts/launch.py --nproc N main_train.py --opt x.json ...` (what `launch_train.sh N` runs):
  N ranks of `python -u main_train.py ...` on this node, standalone c10d rendezvous;
- `python main_train.py` with several `gpu_ids` (`maybe_relaunch`): the plain process re-launches
  itself as one DDP process per listed GPU instead of the slower single-process DataParallel.
  Only a plain process relaunches (launch mode 'single'); the children carry WORLD_SIZE/RANK, are
  detected as mode 'env' and so never relaunch again. Without CUDA, `gpu_ids` is ignored as before,
  unless RESTORATION_CPU_PROCS_FROM_GPU_IDS=1 makes it count CPU processes: the test mode that lets
  this path run for real on a machine without GPUs.

Exit codes. torchrun exits 1 with a traceback whenever a rank fails, so a job script cannot tell
"requeue me" from "broken". Here the launcher exits with the code of the rank that failed first
(earliest by the launcher's clock; 128+N for a rank killed by signal N) and prints one line naming
that rank; the ranks print their own error. Codes (utils/exit_codes.py): 2 user error, 3 stopped for
preemption (checkpoint saved), 4 non-finite loss/gradients, 5 checkpoint write failed.

Signals. SIGTERM, SIGUSR1 and SIGINT (Ctrl-C) to the launcher are passed on to the ranks (they are
started in sessions of their own, so a signal to the launcher's process group does not reach them):
the ranks agree to stop at the next iteration boundary, rank 0 saves, every rank exits 3 (130 after
Ctrl-C) and so does the launcher. A second SIGTERM or SIGINT, or SIGHUP/SIGQUIT, stops the ranks at
once as torchrun does (that signal, SIGKILL after 30 s) and the launcher exits 128+N. A stop signal
that arrives before any rank exists starts none: exit 3 (130), nothing to save. There are no
restarts (`max_restarts=0`): use torchrun directly for `--max-restarts`, whose exit code is 1 for
any failure.

A start also decides what the launch means for the options and the command line (`settle_launch`): the
detected launch mode wins over `dist`, and `--fresh` applies to the first start of a job only.
"""
import argparse
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import uuid
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from utils import stop
from utils.dist import DistState
from utils.errors import UserError
from utils.exit_codes import EXIT_INTERRUPTED, EXIT_PREEMPTED, MEANING

CPU_TEST_MODE = 'RESTORATION_CPU_PROCS_FROM_GPU_IDS'
FORWARDED = stop.STOP_SIGNALS  # the ranks' stop signals: SIGTERM, SIGUSR1, SIGINT
AT_ONCE = (signal.SIGTERM, signal.SIGINT)  # the second of these stops the ranks at once
AGENT_SIGNALS = 'SIGHUP,SIGQUIT'  # left to the elastic agent: stop the ranks at once


def relaunch_count(gpu_ids: Optional[Sequence[int]], state: DistState, cuda: bool,
                   env: Mapping[str, str] = os.environ) -> int:
    """How many processes to start here: 0 means "do not relaunch, train in this process"."""
    if state.mode != 'single' or not gpu_ids or len(gpu_ids) < 2:
        return 0
    if not cuda and env.get(CPU_TEST_MODE) != '1':
        return 0
    return len(gpu_ids)


def _check_gpus(gpu_ids: Sequence[int], env: Dict[str, str]) -> None:
    """Pin the children to `gpu_ids` unless a launcher already chose the visible GPUs."""
    if 'CUDA_VISIBLE_DEVICES' in env:
        visible = torch.cuda.device_count()
        if len(gpu_ids) > visible:
            raise UserError(f'gpu_ids: {list(gpu_ids)} asks for {len(gpu_ids)} GPUs but CUDA_VISIBLE_DEVICES='
                            f'{env["CUDA_VISIBLE_DEVICES"]} leaves {visible}')
        return
    count = torch.cuda.device_count()
    bad = [g for g in gpu_ids if not 0 <= int(g) < count]
    if bad or len(set(gpu_ids)) != len(gpu_ids):
        raise UserError(f'gpu_ids: {list(gpu_ids)} must be distinct GPU indices below {count} '
                        f'(the GPUs on this machine)')
    env['CUDA_VISIBLE_DEVICES'] = ','.join(str(g) for g in gpu_ids)


def shell_code(exitcode: int) -> int:
    """A child's exit status as a shell reports it: 128+N for a child killed by signal N."""
    return 128 - exitcode if exitcode < 0 else exitcode or 1


def describe(code: int) -> str:
    """`code` with its meaning, e.g. `code 4 (non-finite loss or gradients)`."""
    if code > 128 and code != EXIT_INTERRUPTED:  # a rank ends with 130 itself after Ctrl-C
        try:
            return f'code {code} (killed by {signal.Signals(code - 128).name})'
        except ValueError:
            pass
    return f'code {code} ({MEANING[code]})' if code in MEANING else f'code {code}'


def root_cause(err: BaseException) -> Tuple[Optional[int], int]:
    """(rank, shell exit code) of the rank that failed first in a ChildFailedError.

    Failures carry the launcher's time of noticing them (whole seconds); on a tie the one recorded
    first wins: ranks that had already failed are recorded before those the agent then stopped.
    """
    failures = getattr(err, 'failures', None) or {}
    if not failures:
        return None, 1
    rank = min(failures, key=lambda r: failures[r].timestamp)
    return rank, shell_code(failures[rank].exitcode)


def _rank_pids() -> List[int]:
    """The running ranks: children of this process that lead their own session (the elastic agent
    starts each rank with `start_new_session`). Linux /proc; elsewhere none are found."""
    me, pids = os.getpid(), []
    try:
        entries = os.listdir('/proc')
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f'/proc/{entry}/stat', 'rb') as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b')') + 2:].split()  # state ppid pgrp session ...
        if len(fields) > 3 and int(fields[1]) == me and int(fields[3]) == int(entry):
            pids.append(int(entry))
    return pids


class _ForwardStopSignals:
    """While the ranks run, SIGTERM/SIGUSR1/SIGINT to the launcher ask them to stop (they save and exit 3,
    130 for SIGINT) and the launcher keeps waiting for their exit codes. Before any rank exists, or on a
    second SIGTERM or SIGINT, the signal goes to the elastic agent as with torchrun: it stops the ranks at
    once (`early` records a first stop signal that found no rank)."""

    def __init__(self) -> None:
        self._previous: Dict[int, Any] = {}
        self._forwarded: set = set()
        self.early: Optional[int] = None

    def __enter__(self) -> '_ForwardStopSignals':
        if threading.current_thread() is threading.main_thread():
            for sig in FORWARDED:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        from torch.distributed.elastic.multiprocessing.api import SignalException
        sig = signal.Signals(signum)
        pids = _rank_pids()
        if not pids or (sig in AT_ONCE and sig in self._forwarded):
            if not pids and not self._forwarded and self.early is None:
                self.early = signum
            raise SignalException(f'Process {os.getpid()} got signal: {signum}', sigval=sig)
        self._forwarded.add(sig)
        for pid in pids:  # the rank only, not its group: its loader workers end with it
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        again = f' ({sig.name} again stops them at once)' if sig in AT_ONCE else ''
        # os.write, not print: a handler may interrupt a print of the main thread
        os.write(2, f'launcher: {sig.name} passed on to {len(pids)} rank(s): they stop together at the next '
                    f'iteration and save{again}\n'.encode())


class _DropFailureLog(logging.Filter):
    """The agent logs `failed (exitcode: N) local_rank: ...`; the launcher prints its own line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith('failed (exitcode')


def launch_local(nproc: int, script: str, argv: Sequence[str]) -> int:
    """Run `python -u script *argv` as `nproc` DDP ranks on this node and return the exit code for the shell.

    0 when every rank succeeded; else the code of the rank that failed first (128+N if killed by
    signal N), named in one line on stderr. The ranks inherit os.environ plus the DDP variables.
    """
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch
    # The agent's folder for the ranks' error files: left to itself it makes a new /tmp/torchelastic_*
    # per launch and never removes it. Ours goes when the launch is over (failures are read by then).
    log_dir = tempfile.mkdtemp(prefix='torchelastic_')
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=str(uuid.uuid4()),
                          rdzv_backend='c10d', rdzv_endpoint='localhost:0', max_restarts=0,
                          signals_to_handle=AGENT_SIGNALS, logs_specs=DefaultLogsSpecs(log_dir=log_dir))
    args: List[str] = ['-u', os.path.abspath(script), *argv]
    agent_log = logging.getLogger('torch.distributed.elastic.multiprocessing.api')
    quiet = _DropFailureLog()
    agent_log.addFilter(quiet)
    saved = os.environ.get('TORCHELASTIC_SIGNALS_TO_HANDLE')  # the launch API sets it for good
    forward = _ForwardStopSignals()
    try:
        with forward:
            asked = stop.current()
            if asked is not None and asked.requested:  # before this point: start no rank
                return _stopped_before_the_ranks(asked.received)
            elastic_launch(config, sys.executable)(*args)
    except ChildFailedError as e:
        rank, code = root_cause(e)
        who = f'rank {rank}' if rank is not None else 'a rank'
        print(f'launcher: {who} of {nproc} ended first, with exit {describe(code)}; exiting with {code}',
              file=sys.stderr, flush=True)
        return code
    except SignalException as e:  # the ranks were stopped at once (see _ForwardStopSignals)
        if forward.early is not None:  # no rank was running yet: nothing was trained, nothing to save
            return _stopped_before_the_ranks(forward.early)
        return 128 + int(e.sigval)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
        agent_log.removeFilter(quiet)
        os.environ.pop('TORCHELASTIC_SIGNALS_TO_HANDLE', None)
        if saved is not None:
            os.environ['TORCHELASTIC_SIGNALS_TO_HANDLE'] = saved
    return 0


def _stopped_before_the_ranks(signum: int) -> int:
    code = EXIT_INTERRUPTED if signum == signal.SIGINT else EXIT_PREEMPTED
    print(f'launcher: {signal.Signals(signum).name} before the ranks started: nothing to save; exiting with {code}',
          file=sys.stderr, flush=True)
    return code


def maybe_relaunch(opt: Dict[str, Any], state: DistState, script: str, argv: Sequence[str],
                   env: Optional[Dict[str, str]] = None) -> Optional[int]:
    """Run `python -u script *argv` as len(gpu_ids) DDP processes on this node and return the exit code.

    Returns None when this process should train by itself (launcher-started rank, cluster step,
    one GPU, or CPU without the test mode).
    """
    env = os.environ if env is None else env
    cuda = torch.cuda.is_available()
    n = relaunch_count(opt['gpu_ids'], state, cuda, env)
    if not n:
        return None
    if cuda:
        _check_gpus(opt['gpu_ids'], env)
    where = f'one per GPU (CUDA_VISIBLE_DEVICES={env["CUDA_VISIBLE_DEVICES"]})' if cuda else \
        f'on CPU (test mode {CPU_TEST_MODE}=1)'
    print(f'gpu_ids {list(opt["gpu_ids"])}: relaunching as {n} DDP processes {where}', flush=True)
    return launch_local(n, script, argv)


def is_restart(env: Mapping[str, str]) -> bool:
    """Whether this process is an automatic restart of a job: `torchrun --max-restarts` or a SLURM requeue.

    Both rerun the very same command line, so a `--fresh` in it was meant for the first start only.
    """
    return any(int(env.get(key) or 0) > 0 for key in ('TORCHELASTIC_RESTART_COUNT', 'SLURM_RESTART_COUNT'))


def settle_launch(opt: Dict[str, Any], state: DistState, args: argparse.Namespace,
                  env: Mapping[str, str]) -> Tuple[Dict[str, Any], argparse.Namespace, List[str]]:
    """What the launch decides over the options and the command line, decided once, in new objects:
    `dist` is the detected launch mode (saved as such), and `--fresh` applies to the first start of a
    job only (an automatic restart reruns the same command line). Returns them with the log lines."""
    notes = []
    if args.fresh and is_restart(env):
        notes.append('--fresh: ignored on this automatic restart of the job (it applied to the first start); resuming')
        args = argparse.Namespace(**{**vars(args), 'fresh': False})
    if opt['dist'] != state.distributed:
        notes.append(f'options: "dist": {str(opt["dist"]).lower()} overridden by the detected launch '
                     f'mode ({state.mode}, world size {state.world_size})')
        opt = {**opt, 'dist': state.distributed}
    return opt, args, notes
