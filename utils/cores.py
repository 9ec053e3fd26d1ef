"""The CPU cores this process may run on: its affinity, not the machine's count, so that a job pinned to a few
cores of a large node (SLURM, taskset, a container's cpuset) sizes its threads and workers to those; how many
loader workers fit them; and how busy other programs keep them (the kernel's per-core counters)."""
import os
import time
from typing import Collection, Dict, FrozenSet, Mapping, NamedTuple, Optional, Tuple

STAT = '/proc/stat'

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


def cpu_times(path: str = STAT) -> Dict[int, Tuple[int, int]]:
    """Per core: (busy, total) clock ticks since boot, from the kernel's counters ({} where there are none)."""
    times: Dict[int, Tuple[int, int]] = {}
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError:
        return times
    for line in lines:
        name, *fields = line.split()
        if name.startswith('cpu') and name[3:].isdigit() and len(fields) >= 8:
            user, nice, system, idle, iowait, irq, softirq, steal = map(int, fields[:8])
            busy = user + nice + system + irq + softirq + steal
            times[int(name[3:])] = (busy, busy + idle + iowait)
    return times


def busy_cores(before: Dict[int, Tuple[int, int]], after: Dict[int, Tuple[int, int]], cores: FrozenSet[int]) -> float:
    """How many of `cores`' worth of time was busy between two `cpu_times` readings."""
    load = 0.0
    for core in cores & before.keys() & after.keys():
        busy, total = after[core][0] - before[core][0], after[core][1] - before[core][1]
        load += busy / total if total > 0 else 0.0
    return load


class LoadMark(NamedTuple):
    """A point to measure other programs' load from: the wall clock, the cores' counters, this process's CPU time."""
    wall: float
    ticks: Dict[int, Tuple[int, int]]
    own: float


def load_mark() -> Optional[LoadMark]:
    """Now, to measure from (None where the kernel's counters cannot be read)."""
    ticks = cpu_times()
    return LoadMark(time.monotonic(), ticks, time.process_time()) if ticks else None


def others_load_since(mark: LoadMark) -> Optional[float]:
    """Other programs' load on this process's cores since `mark`, in cores: their busy time less this process's own
    CPU time (all its threads; its children count as others). None where nothing can be read or no time passed."""
    ticks, wall = cpu_times(), time.monotonic() - mark.wall
    if not ticks or wall <= 0:
        return None
    return max(0.0, busy_cores(mark.ticks, ticks, affinity()) - (time.process_time() - mark.own) / wall)
