"""The run's process group, from creation to the last exit.

Creating it, leaving it and leaving the process are where a distributed run hangs or aborts: a
master that is not there, a port held by some other program, a rank exiting while another still
talks, a store client destroyed after the launcher's store is gone. Each of these ends here in one
line and a known exit code instead of a wait or a C++ stack trace.
"""
import contextlib
import datetime
import logging
import os
import socket
import sys
import threading
import time
from typing import Any, Dict, Iterator, Optional

import torch
import torch.distributed as dist

from utils import wait_policy
from utils.cores import fitted_workers, usable_cores
from utils.dist import departure
from utils.dist.detect import DistState, cuda_device_index
from utils.errors import UserError, say

# Seconds past dist_timeout before init gives up on c10d itself (it can wait forever on a foreign port).
INIT_GRACE_S = 10.0

_control_group: Any = None
_timeout_s = 600.0  # the run's dist_timeout, set by init(); also bounds the control group's collectives


def is_initialized() -> bool:
    """True once `init` has created a process group; every collective is the identity until then."""
    return dist.is_available() and dist.is_initialized()


def init(state: DistState, timeout_s: float = 600, env: Any = os.environ) -> torch.device:
    """Create the process group (env://) and return this rank's device.

    On CPU each rank gets one intra-op thread unless OMP_NUM_THREADS is set: two ranks with two
    threads each on two cores run ~40 % slower than with one.
    """
    global _timeout_s
    _timeout_s = float(timeout_s)
    cuda = torch.cuda.is_available()
    if cuda:
        device = torch.device('cuda', cuda_device_index(state.local_rank, torch.cuda.device_count()))
        torch.cuda.set_device(device)
    else:
        device = torch.device('cpu')
        if state.distributed and 'OMP_NUM_THREADS' not in env:
            torch.set_num_threads(1)
    if not state.distributed:
        return device
    # env:// reads these; SLURM steps do not provide them, so they are exported here, once.
    env.update(MASTER_ADDR=str(state.master_addr), MASTER_PORT=str(state.master_port),
               WORLD_SIZE=str(state.world_size), RANK=str(state.rank), LOCAL_RANK=str(state.local_rank))
    timeout = datetime.timedelta(seconds=timeout_s)
    wait_for_master(state, timeout_s)
    stuck = (f'distributed init failed (rank {state.rank}/{state.world_size}, master {state.master_addr}:'
             f'{state.master_port}): no rendezvous within {timeout_s:g}s (+{INIT_GRACE_S:g}s); '
             f'is MASTER_PORT held by another program?')
    with exit_if_stuck(timeout_s + INIT_GRACE_S, stuck):
        try:
            rendezvous: Dict[str, Any] = {'init_method': 'env://'}
            if env.get('TORCHELASTIC_USE_AGENT_STORE') == 'True':
                # Restarts by `torchrun --max-restarts` reuse the agent's store: without a per-attempt
                # prefix the new ranks read the dead attempt's addresses and fail to connect (torch 2.14).
                store = dist.TCPStore(str(state.master_addr), int(state.master_port), state.world_size,
                                      is_master=False, timeout=timeout)
                attempt = env.get('TORCHELASTIC_RESTART_COUNT', '0')
                rendezvous = {'store': dist.PrefixStore(f'/restoration/attempt_{attempt}', store)}
            dist.init_process_group(backend='nccl' if cuda else 'gloo', world_size=state.world_size,
                                    rank=state.rank, timeout=timeout, device_id=device if cuda else None,
                                    **rendezvous)
            dist.barrier()  # every rank is here: a rank with another WORLD_SIZE fails now, inside this try
        except Exception as e:  # the c10d store raises several types; all mean "could not rendezvous"
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f'distributed init failed (rank {state.rank}/{state.world_size}, master '
                            f'{state.master_addr}:{state.master_port}, timeout {timeout_s:g}s): {first}') from None
    return device


def set_cpu_threads(state: DistState, loader_workers: int, env: Any = os.environ) -> Optional[str]:
    """CPU runs: flush denormal numbers to zero; a single CPU process also takes one torch intra-op thread per
    core it may use (its affinity, which taskset, cgroups and SLURM's --cpus-per-task restrict) that other programs
    left free at start, sharing them with its loader workers.

    Why every core: the loader of a restoration run is usually cheap next to the network (the demo's worker
    is busy 0.002 s of a 0.3 s step), so reserving cores for workers left half of a 2-core machine idle.
    Why that stays right where the loader does need a core: the entry points let OpenMP's idle threads spin only
    briefly before they sleep (utils/wait_policy.py, chosen before torch is imported unless the user set a policy),
    so a thread that is not computing soon takes no core from a worker.
    Why not the cores other programs keep busy (where the wait policy found them busy at start, and they stayed
    busy through the start-up): every parallel region waits for its slowest thread, and the thread that shares a
    core with a busy program gets half of it; beside one busy process on 2 cores one thread took 0.8x the time of
    two (RCAN, docs/launching.md, "Devices and CPU threads"). Chosen once: the sums of a backward pass depend on
    the thread count, and a run keeps its numerics (a resume with another count says so, training/resume_plan.py).
    Denormals: after a few hundred iterations a quarter of Adam's first moments (those of weights whose
    gradient is 0) decay through the denormal range; flushing them saved 5 % of the demo's CPU time.
    OMP_NUM_THREADS, when set, decides the count; DDP ranks get 1 thread each (`init`).
    Returns the line to log (None where no count was chosen: CUDA, DDP, OMP_NUM_THREADS).
    """
    if torch.cuda.is_available():
        return None
    torch.set_flush_denormal(True)
    if state.distributed or 'OMP_NUM_THREADS' in env:
        return None
    cores = usable_cores()
    others = wait_policy.others_load_at_start(env)
    taken = int(others + 0.5) if others is not None else 0  # whole cores
    threads = max(1, cores - taken)
    torch.set_num_threads(threads)
    workers = fitted_workers(max(0, int(loader_workers)), cores, env)  # as data/loader.py starts them
    share = f'shared with {workers} loader worker{"s" if workers != 1 else ""}' if workers else ''
    if taken:
        which = (f'one per usable core left free: other processes kept {others:.1f} of the {cores} busy through the '
                 f'start-up{"; " + share if share else ""}')
    else:
        which = f'one per usable core{", " + share if share else ""}'
    return (f'CPU: {threads} torch thread{"s" if threads > 1 else ""} ({which}; '
            f'{wait_policy.describe(env)}; OMP_NUM_THREADS overrides)')


def wait_for_master(state: DistState, timeout_s: float, poll_s: float = 0.5) -> None:
    """Ranks other than 0: wait until the master's port accepts connections, or fail in one line.

    Against a master that is not there, torch's TCPStore client retries for about three times the
    timeout and logs C++ stack traces meanwhile; this loop gives up at the timeout. Rank 0 hosts
    the store itself, so it has nothing to wait for.
    """
    if not state.distributed or state.rank == 0:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((str(state.master_addr), int(state.master_port)),
                                          timeout=max(min(poll_s * 4, left), 0.1)):
                return
        except OSError as e:
            reason = e.strerror or str(e) or type(e).__name__
        if left <= poll_s:
            raise UserError(f'distributed init failed (rank {state.rank}/{state.world_size}): master '
                            f'{state.master_addr}:{state.master_port} not reachable within {timeout_s:g}s '
                            f'({reason}); is rank 0 running, with the same MASTER_ADDR and MASTER_PORT?')
        time.sleep(poll_s)


@contextlib.contextmanager
def exit_if_stuck(seconds: float, message: str, code: int = 2) -> Iterator[None]:
    """Hard deadline around a blocking call that can ignore its own timeout.

    A TCPStore client that reached a port held by some other program waits for an answer forever.
    A timer thread (blocking c10d calls release the GIL) prints `error: message` and ends the
    process with `code`; nothing needs cleaning up before the process group exists.
    """
    done = threading.Event()

    def fire() -> None:
        if not done.is_set():
            say(f'error: {message}')
            os._exit(code)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        done.set()
        timer.cancel()


def control_group() -> Any:
    """A gloo group over host memory for small agreements, so they never wait for a GPU stream.

    Created on first use (every rank must ask for it at the same point), with the run's
    dist_timeout: without its own timeout a gloo group waits torch's default 30 minutes for a
    dead node.
    """
    global _control_group
    if _control_group is None:
        _control_group = dist.new_group(backend='gloo', timeout=datetime.timedelta(seconds=_timeout_s))
    return _control_group


def cleanup(together: bool = True) -> None:
    """Leave together, then destroy the group: a rank exiting while another still talks aborts it.

    After a failure (`together=False`) there is no barrier: the other ranks may be gone. A rank that departed
    alone (utils/dist/departure.py) leaves the group as it is: it may hold collectives that never complete, and
    the process ends right after.
    """
    global _control_group
    departure.stop_watching()
    if is_initialized() and not departure.departed():
        try:
            if together:
                dist.barrier()
        finally:
            _control_group = None
            dist.destroy_process_group()


def exit_now(code: int) -> None:
    """Flush and leave without running C++ static destructors (call after `cleanup`).

    The process group is already destroyed and every output closed; what remains at interpreter
    exit are c10d/gloo store clients whose destructors can abort (SIGABRT) when the launcher's
    store is already gone, turning a finished run into a failed one (seen rarely under torchrun).
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
