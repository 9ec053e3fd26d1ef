"""Rank queries and collectives that also work in a plain process.

Callers write one code path: without a process group every function here is the identity for a
single rank (rank 0 of 1, sums of one, a list of one), so the training loop never asks whether
it runs distributed.
"""
import socket
from typing import Any, Callable, List, Optional, Sequence, Tuple, TypeVar

import torch
import torch.distributed as dist

from utils.cores import affinity, shared_cores
from utils.diskspace import describe_write_error
from utils.dist.group import control_group, is_initialized
from utils.errors import UserError, WriteFailed, first_line

T = TypeVar('T')


def get_rank() -> int:
    """This process's rank; 0 without a process group."""
    return dist.get_rank() if is_initialized() else 0


def get_world_size() -> int:
    """Number of ranks; 1 without a process group."""
    return dist.get_world_size() if is_initialized() else 1


def is_main_process() -> bool:
    """Rank 0: the one rank that writes logs, checkpoints and images."""
    return get_rank() == 0


def barrier() -> None:
    """Wait for every rank; nothing to wait for in a single process."""
    if is_initialized():
        dist.barrier()


def _all_reduce(t: torch.Tensor, op: str) -> torch.Tensor:
    """ReduceOp `op` over ranks, in place; identity in a single process.

    Also takes CPU tensors under NCCL (metric sums live on the host). `op` is a name so that a
    torch built without distributed support, which has no ReduceOp, still runs single-process.
    """
    if is_initialized():
        reduce_op = getattr(dist.ReduceOp, op)
        if dist.get_backend() == 'nccl' and not t.is_cuda:
            tmp = t.cuda()
            dist.all_reduce(tmp, op=reduce_op)
            t.copy_(tmp.cpu())
        else:
            dist.all_reduce(t, op=reduce_op)
    return t


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum over ranks, in place; identity in a single process."""
    return _all_reduce(t, 'SUM')


def all_reduce_max(t: torch.Tensor) -> torch.Tensor:
    """Max over ranks, in place (e.g. 'any rank saw a NaN / a stop signal')."""
    return _all_reduce(t, 'MAX')


def all_reduce_min(t: torch.Tensor) -> torch.Tensor:
    """Min over ranks, in place (e.g. 'finite on every rank'); on a device tensor it is queued on the
    device like any kernel, with no host sync."""
    return _all_reduce(t, 'MIN')


def broadcast_object(obj: T, src: int = 0) -> T:
    """Rank `src`'s `obj` on every rank (e.g. a seed drawn once)."""
    if not is_initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def broadcast_tensors(tensors: Sequence[torch.Tensor], src: int = 0) -> None:
    """Rank `src`'s values copied into `tensors` on every rank, in place (e.g. BatchNorm statistics).

    Every rank must pass tensors of the same shapes in the same order; nothing to do in a single process.
    """
    if is_initialized():
        for t in tensors:
            dist.broadcast(t, src=src)


def gather_objects(obj: T) -> List[T]:
    """Every rank's `obj`, in rank order, on every rank."""
    if not is_initialized():
        return [obj]
    out: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def rank_cores() -> int:
    """Collective: the cores this rank may count on, its affinity's shared with the ranks of its host whose masks
    overlap it (utils/cores.py shared_cores); a single process: its usable cores."""
    mine = affinity()
    if get_world_size() == 1:
        return len(mine)
    host = socket.gethostname()
    return shared_cores(mine, [m for h, m in gather_objects((host, mine)) if h == host])


def agree_any(flags: Sequence[bool]) -> List[bool]:
    """For each flag, True on every rank if it is True on any rank (one small collective).

    Under NCCL it runs on the gloo control group over host memory, so it never waits for the GPU stream.
    """
    t = torch.tensor([1.0 if f else 0.0 for f in flags])
    if is_initialized():
        if dist.get_backend() == 'gloo':
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        else:
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=control_group())
    return [bool(v) for v in t.tolist()]


def main_process_outcome(action: Callable[[], None],
                         describe: Callable[[BaseException], Optional[T]]) -> Optional[T]:
    """Rank 0 tries `action`; every rank returns the same outcome: None when it worked, else what
    `describe` made of the exception (a message, or a (kind, message) pair).

    The one pattern for side effects (writes, generated data, checkpoints): only rank 0 acts, but
    every rank must act on its failure together, or the others would train on and wait forever in
    the next collective. An exception that `describe` returns None for is not an outcome: it
    propagates on rank 0 as a crash. One collective, on the host (gloo control group under NCCL).
    """
    outcome: Optional[T] = None
    if is_main_process():
        try:
            action()
        except Exception as e:
            outcome = describe(e)
            if outcome is None:
                raise
    if not is_initialized():
        return outcome
    box = [outcome]
    dist.broadcast_object_list(box, src=0, group=None if dist.get_backend() == 'gloo' else control_group())
    return box[0]


def main_process_write(action: Callable[[], None], where: str = '.') -> None:
    """Rank 0 runs `action`, a write of results (a table, a page, a plot); when it fails every rank raises
    together: a UserError as it is, an OSError as `WriteFailed` with its one line (`no space left on <mount> (N MB
    free)`, else the error's first line; `where`: the folder written into, for the free space), and anything
    else, a bug, with its traceback on rank 0 and a RuntimeError naming it on the others.

    `main_process_outcome` for writes that may fail between collectives: without it rank 0 would leave while
    the others wait in the next collective until `dist_timeout`.
    """
    failed: List[BaseException] = []

    def describe(e: BaseException) -> Tuple[str, str]:
        failed.append(e)
        if isinstance(e, UserError):
            return 'user', str(e)
        if isinstance(e, OSError):
            return 'write', describe_write_error(e, e.filename or where)
        return 'bug', f'{type(e).__name__}: {first_line(e)}'
    outcome = main_process_outcome(action, describe)
    if outcome is None:
        return
    kind, line = outcome
    if kind == 'user':
        raise UserError(line)
    if kind == 'write':
        raise WriteFailed(line)
    if failed:
        raise failed[0]
    raise RuntimeError(f'rank 0 failed while writing results: {line}')
