"""Distributed state: detected once from the environment, then one process group for the run.

Detection is a pure function of the environment so that every launch mode can be tested with a
patched dict: torchrun or a platform that injects WORLD_SIZE/RANK/MASTER_* ('env'), a SLURM job
step ('slurm'), or a plain process ('single'). The sbatch batch script also carries SLURM_PROCID,
so SLURM is recognised only inside a job step (SLURM_STEP_ID set); otherwise the batch script
would wait forever for ranks that never come.
"""
import contextlib
import datetime
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, TypeVar

import torch
import torch.distributed as dist

from utils.errors import UserError

T = TypeVar('T')
# Seconds past dist_timeout before init gives up on c10d itself (it can wait forever on a foreign port).
INIT_GRACE_S = 10.0


@dataclass(frozen=True)
class DistState:
    mode: str                 # 'single' | 'env' | 'slurm'
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    master_addr: Optional[str] = None
    master_port: Optional[int] = None

    @property
    def distributed(self) -> bool:
        """True when a process group is used (also for WORLD_SIZE=1 launched by a tool)."""
        return self.mode != 'single'


def _split_top(text: str, where: str) -> List[str]:
    """Split at commas outside brackets: `a[1,3],b` -> ['a[1,3]', 'b']."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == '[':
            depth += 1
            if depth > 1:
                raise UserError(f'SLURM host list {where!r}: nested "["')
        elif c == ']':
            depth -= 1
            if depth < 0:
                raise UserError(f'SLURM host list {where!r}: "]" without "["')
        elif c == ',' and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise UserError(f'SLURM host list {where!r}: "[" without "]"')
    parts.append(text[start:])
    return [p for p in parts if p]


_DIGITS = re.compile(r'[0-9]+')  # ASCII only: str.isdigit() also accepts '²', which int() rejects


def _bracket_values(spec: str, where: str) -> List[str]:
    """`01-03,07` -> ['01', '02', '03', '07'] (zero padding of the lower bound kept)."""
    values = []
    for part in spec.split(','):
        lo, dash, hi = part.partition('-')
        if not _DIGITS.fullmatch(lo) or (dash and not _DIGITS.fullmatch(hi)):
            raise UserError(f'SLURM host list {where!r}: bad range "{part}"')
        hi = hi if dash else lo
        if int(hi) < int(lo):
            raise UserError(f'SLURM host list {where!r}: empty range "{part}"')
        values.extend(str(i).zfill(len(lo)) for i in range(int(lo), int(hi) + 1))
    return values


# A literal then an optional bracket group; `spec` is None when there is no group, '' for `[]`.
_GROUPS = re.compile(r'([^\[]*)(?:\[([^\]]*)\])?')


def expand_hostlist(hostlist: str) -> List[str]:
    """Expand a SLURM host list without `scontrol` (pure Python), in SLURM's order.

    `gpu[01-03,07],login1` -> gpu01 gpu02 gpu03 gpu07 login1; a host may have several bracket
    groups: `rack[1-2]-node[01-02]` -> rack1-node01 rack1-node02 rack2-node01 rack2-node02.
    """
    hosts: List[str] = []
    for host in _split_top(hostlist.strip(), hostlist):
        names = ['']
        for m in _GROUPS.finditer(host):
            literal, spec = m.group(1), m.group(2)
            values = _bracket_values(spec, hostlist) if spec is not None else ['']
            names = [n + literal + v for n in names for v in values]
        hosts.extend(names)
    if not hosts:
        raise UserError(f'SLURM host list {hostlist!r} names no host')
    return hosts


def first_host(hostlist: str, scontrol: Optional[str] = None) -> str:
    """First host of a SLURM node list: `scontrol show hostnames` when present, else pure Python."""
    scontrol = scontrol if scontrol is not None else shutil.which('scontrol')
    if scontrol:
        try:
            out = subprocess.run([scontrol, 'show', 'hostnames', hostlist], capture_output=True,
                                 text=True, timeout=20, check=True).stdout.split()
            if out:
                return out[0]
        except (OSError, subprocess.SubprocessError):
            pass
    return expand_hostlist(hostlist)[0]


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise UserError(f'environment: {key}={env[key]!r} is not an integer') from None


def detect(env: Mapping[str, str] = os.environ, scontrol: Optional[str] = None) -> DistState:
    """Work out the launch mode and this process's place in it from `env`.

    In env mode without LOCAL_RANK (some platforms set only WORLD_SIZE/RANK), the global RANK is
    taken as the local rank; `cuda_device_index` then maps it onto the GPUs this process can see.
    """
    if 'WORLD_SIZE' in env and 'RANK' in env:
        missing = [k for k in ('MASTER_ADDR', 'MASTER_PORT') if not env.get(k)]
        if missing:
            raise UserError(f'environment: WORLD_SIZE and RANK are set but {" and ".join(missing)} '
                            f'{"is" if len(missing) == 1 else "are"} not')
        state = DistState('env', _int(env, 'WORLD_SIZE'), _int(env, 'RANK'),
                          _int(env, 'LOCAL_RANK') if 'LOCAL_RANK' in env else _int(env, 'RANK'),
                          env['MASTER_ADDR'], _int(env, 'MASTER_PORT'))
    elif 'SLURM_STEP_ID' in env and 'SLURM_PROCID' in env:
        world = env.get('SLURM_STEP_NUM_TASKS') or env.get('SLURM_NTASKS') or '1'
        nodes = env.get('SLURM_STEP_NODELIST') or env.get('SLURM_JOB_NODELIST') or '127.0.0.1'
        addr = env.get('MASTER_ADDR') or first_host(nodes, scontrol)
        if env.get('MASTER_PORT'):
            port = _int(env, 'MASTER_PORT')
        else:  # same on every task of the job, different between jobs sharing a node
            port = 15000 + int(re.sub(r'\D', '', env.get('SLURM_JOB_ID', '0')) or 0) % 20000
        state = DistState('slurm', int(world), _int(env, 'SLURM_PROCID'),
                          _int(env, 'SLURM_LOCALID') if 'SLURM_LOCALID' in env else 0, addr, port)
    else:
        return DistState('single')
    if not 0 <= state.rank < state.world_size:
        raise UserError(f'environment: rank {state.rank} is outside world size {state.world_size}')
    return state


def select_gpus(gpu_ids: Optional[Sequence[int]], state: DistState, env: Any = os.environ) -> Optional[str]:
    """Single-process runs may restrict visible GPUs with `gpu_ids`; never on clusters or under DDP.

    Returns the value set, or None when left alone (launcher/cluster owns CUDA_VISIBLE_DEVICES).
    """
    if state.distributed or not gpu_ids or 'CUDA_VISIBLE_DEVICES' in env:
        return None
    env['CUDA_VISIBLE_DEVICES'] = ','.join(str(g) for g in gpu_ids)
    return env['CUDA_VISIBLE_DEVICES']


def cuda_device_index(local_rank: int, visible: int) -> int:
    """This rank's GPU among the `visible` ones: local rank modulo what this process can see.

    With one GPU per task (SLURM `--gpus-per-task=1`, or a launcher that sets CUDA_VISIBLE_DEVICES
    per rank) every rank uses index 0 whatever its local rank; with all of a node's GPUs visible,
    local rank i uses GPU i. A launch without LOCAL_RANK falls back to the global rank (see
    `detect`), which the modulo maps onto the node's GPUs when ranks are numbered node by node.
    """
    if visible < 1:
        raise UserError('CUDA is available but no GPU is visible (check CUDA_VISIBLE_DEVICES)')
    return local_rank % visible


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


def banner(state: DistState, device: torch.device) -> str:
    backend = dist.get_backend() if dist.is_initialized() else 'none'
    master = f'{state.master_addr}:{state.master_port}' if state.distributed else '-'
    return (f'distributed: mode={state.mode} backend={backend} world_size={state.world_size} '
            f'rank={state.rank} local_rank={state.local_rank} master={master} device={device} '
            f'threads={torch.get_num_threads()}')


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    return dist.get_rank() if is_initialized() else 0


def get_world_size() -> int:
    return dist.get_world_size() if is_initialized() else 1


def is_main_process() -> bool:
    return get_rank() == 0


def barrier() -> None:
    if is_initialized():
        dist.barrier()


def _all_reduce(t: torch.Tensor, op: Any) -> None:
    """all_reduce that also takes CPU tensors under NCCL (metric sums live on the host)."""
    if dist.get_backend() == 'nccl' and not t.is_cuda:
        tmp = t.cuda()
        dist.all_reduce(tmp, op=op)
        t.copy_(tmp.cpu())
    else:
        dist.all_reduce(t, op=op)


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum over ranks, in place; identity in a single process."""
    if is_initialized():
        _all_reduce(t, dist.ReduceOp.SUM)
    return t


def all_reduce_max(t: torch.Tensor) -> torch.Tensor:
    """Max over ranks, in place (e.g. 'any rank saw a NaN / a stop signal')."""
    if is_initialized():
        _all_reduce(t, dist.ReduceOp.MAX)
    return t


def broadcast_object(obj: T, src: int = 0) -> T:
    """Rank `src`'s `obj` on every rank (e.g. a seed drawn once)."""
    if not is_initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def gather_objects(obj: T) -> List[T]:
    """Every rank's `obj`, in rank order, on every rank."""
    if not is_initialized():
        return [obj]
    out: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


_control_group: Any = None
_timeout_s = 600.0  # the run's dist_timeout, set by init(); also bounds the control group's collectives


def agree_any(flags: Sequence[bool]) -> List[bool]:
    """For each flag, True on every rank if it is True on any rank (one small collective).

    Runs on a gloo group over host memory, so under NCCL it never waits for the GPU stream.
    """
    global _control_group
    t = torch.tensor([1.0 if f else 0.0 for f in flags])
    if is_initialized():
        if dist.get_backend() == 'gloo':
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        else:
            if _control_group is None:
                # Without its own timeout a gloo group waits torch's default 30 minutes for a dead node.
                _control_group = dist.new_group(backend='gloo', timeout=datetime.timedelta(seconds=_timeout_s))
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=_control_group)
    return [bool(v) for v in t.tolist()]


def cleanup(together: bool = True) -> None:
    """Leave together, then destroy the group: a rank exiting while another still talks aborts it.

    After a failure (`together=False`) there is no barrier: the other ranks may be gone.
    """
    global _control_group
    if is_initialized():
        try:
            if together:
                dist.barrier()
        finally:
            _control_group = None
            dist.destroy_process_group()


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
            print(f'error: {message}', file=sys.stderr, flush=True)
            os._exit(code)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        done.set()
        timer.cancel()


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
