"""The CPU cores this process may run on: its affinity, not the machine's count, so that a job pinned to a few
cores of a large node (SLURM, taskset, a container's cpuset) sizes its threads and workers to those; and how many
loader workers fit them."""
import os
from typing import Collection, FrozenSet, Mapping

# set to 1: keep `dataloader_num_workers` as asked even above the usable cores (loading that waits on a network
# file system rather than on a core can use more processes than there are cores)
KEEP_WORKERS_ENV = 'KEEP_LOADER_WORKERS'


def affinity() -> FrozenSet[int]:
    """The cores in this process's affinity mask (all of os.cpu_count() where the platform has none; at least 1)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return frozenset(range(max(1, os.cpu_count() or 1)))


def usable_cores() -> int:
    """Cores in this process's affinity mask (os.cpu_count() where the platform has none); at least 1."""
    return len(affinity())


def shared_cores(mine: FrozenSet[int], masks: Collection[FrozenSet[int]]) -> int:
    """The cores a process may count on when the processes of its host have the affinity `masks` (its own `mine`
    among them): each of its cores divided among the processes whose masks hold it, so that ranks that inherit the
    node's whole mask (torchrun) split it and ranks bound to cores of their own (SLURM's --cpus-per-task) keep
    theirs; at least 1."""
    share = sum(1 / max(1, sum(core in m for m in masks)) for core in mine)
    return max(1, int(share + 1e-9))


def keeps_workers(env: Mapping[str, str] = os.environ) -> bool:
    """Whether `KEEP_WORKERS_ENV` asks for the workers as the options say."""
    return env.get(KEEP_WORKERS_ENV, '') == '1'


def fitted_workers(asked: int, usable: int, env: Mapping[str, str] = os.environ) -> int:
    """The loader workers to start for `asked`: no more than the `usable` cores (more processes than cores only
    queue for them, and torch warns), unless `KEEP_WORKERS_ENV` is 1."""
    return asked if asked <= usable or keeps_workers(env) else usable
