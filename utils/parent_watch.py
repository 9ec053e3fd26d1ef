"""Ranks started by a torch elastic agent (torchrun, the `gpu_ids` relaunch) end when the agent dies.

torch elastic starts every rank in its own session, so when the agent is SIGKILLed (OOM killer,
`kill -9` of the launcher) nothing stops its ranks: they go on training and writing into the run
folder, rank 0 keeps the run lock, and the next job finds the folder busy. Here, on Linux, a rank
asks the kernel for SIGTERM when its parent dies (prctl PR_SET_PDEATHSIG), which the loop treats
like preemption: all ranks agree, rank 0 saves, exit code 3. A watchdog thread bounds that stop.

Only under an elastic agent (TORCHELASTIC_RUN_ID set): a plain process may outlive its shell on
purpose (nohup), and srun already ends its tasks itself. Elsewhere than Linux nothing is done.
"""
import ctypes
import os
import signal
import sys
import threading
import time
from typing import Mapping, Optional

from utils.errors import say
from utils.exit_codes import EXIT_ORPHANED

# SLURM's KillWait and Kubernetes' terminationGracePeriodSeconds both default to 30 s between
# SIGTERM and SIGKILL: enough for a rank to reach the next iteration and for rank 0 to write a
# checkpoint. Not dist_timeout (600 s by default), which is the time a collective with a dead peer
# may block, so orphans would keep writing (and keep the run lock) for ten minutes.
GRACE_S = 30.0
_PR_SET_PDEATHSIG = 1


def should_watch(env: Mapping[str, str], platform: str = sys.platform) -> bool:
    """True for a Linux process started by a torch elastic agent."""
    return platform.startswith('linux') and 'TORCHELASTIC_RUN_ID' in env


def _ask_for_sigterm_on_parent_death() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _say(line: str) -> None:
    try:
        say(line)
    except (OSError, ValueError):  # the launcher owned the other end of stderr
        pass


def _watch(parent: int, armed: bool, grace_s: float, poll_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(poll_s)
    if not armed:
        os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)
    _say(f'error: the launcher (pid {parent}) died and this process did not stop within {grace_s:g} s; '
         f'exiting with code {EXIT_ORPHANED}')
    os._exit(EXIT_ORPHANED)


def install(env: Mapping[str, str] = os.environ, parent: Optional[int] = None, grace_s: float = GRACE_S,
            poll_s: float = 1.0) -> bool:
    """Call first thing in the process: SIGTERM when the parent dies, and `os._exit(EXIT_ORPHANED)`
    if the process still runs `grace_s` seconds (plus up to `poll_s`) after that.

    `parent` is the parent pid seen at start (default: now). If it is already gone when the kernel
    request is made, the kernel would never send the signal: this process signals itself instead.
    Returns whether the process is watched.
    """
    if not should_watch(env):
        return False
    parent = os.getppid() if parent is None else parent
    armed = _ask_for_sigterm_on_parent_death()
    threading.Thread(target=_watch, args=(parent, armed, grace_s, poll_s), name='parent-watch', daemon=True).start()
    if armed and os.getppid() != parent:
        _say(f'stopping: the launcher (pid {parent}) exited before this process asked to follow it')
        os.kill(os.getpid(), signal.SIGTERM)
    return True
