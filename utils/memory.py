"""How much memory this process may still take, for checks that must refuse before they allocate.

The machine's MemAvailable is not the bound inside a container or a batch job: SLURM (`--mem`), Docker
(`--memory`) and Kubernetes (resource limits) confine a job to a memory cgroup whose limit is often far
below the node's free memory, and the kernel's OOM killer ends the job at that limit. So the budget is the
smaller of MemAvailable and, for the process's memory cgroup and every ancestor this process can see, the
limit minus what the cgroup already uses (its usage less the inactive page cache, which the kernel
reclaims before it kills anything: the working set, as Kubernetes counts it).

cgroup v2: `/proc/self/cgroup` says `0::<path>`, the files are `<mount>/<path>/memory.max` ("max": no
limit), `memory.current` and `memory.stat` (`inactive_file`). cgroup v1: the line of the `memory`
controller names the path under `<mount>/memory`, with `memory.limit_in_bytes` (a huge number: no limit),
`memory.usage_in_bytes` and `memory.stat` (`total_inactive_file`, and `hierarchical_memory_limit`, the
bound set by ancestors the container cannot see). Inside a container with its own cgroup namespace the
path is `/` or names a folder that is not mounted: then the mount's root is the process's cgroup.
`MemorySources` holds every path, so that tests can point them at fake files.

`peak_memory` says how much this process has taken at most (the line of an out-of-memory error, --check).
"""
import os
import resource
import sys
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch

UNLIMITED = 2 ** 60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


@dataclass(frozen=True)
class MemorySources:
    """Where the kernel reports memory (tests give fake files)."""
    meminfo: str = '/proc/meminfo'
    self_cgroup: str = '/proc/self/cgroup'
    cgroup_mount: str = '/sys/fs/cgroup'


SOURCES = MemorySources()


@dataclass(frozen=True)
class MemoryBudget:
    """Bytes this process may still allocate, and what sets that bound (for the one line that refuses)."""
    available: int
    limit: Optional[int] = None     # the cgroup limit when a cgroup sets the bound, else None (the machine's)
    where: str = ''                 # the cgroup file of that limit

    def has(self, amount: str) -> str:
        """'this machine has <amount> available' or, under a cgroup limit, what the job's limit leaves."""
        if self.limit is None:
            return f'this machine has {amount} available'
        return f'this job\'s memory limit leaves {amount} ({gib(self.limit)} in {self.where})'


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _number(path: str) -> Optional[int]:
    text = _read(path)
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isdigit() else None


def _stat(path: str, key: str) -> int:
    """A field of a cgroup's memory.stat, 0 when absent."""
    for line in (_read(path) or '').splitlines():
        name, _, value = line.partition(' ')
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _mem_available(src: MemorySources) -> Optional[int]:
    for line in (_read(src.meminfo) or '').splitlines():
        if line.startswith('MemAvailable:'):
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                return int(fields[1]) * 1024
    return None


def _cgroup_dirs(src: MemorySources) -> List[Tuple[int, str]]:
    """(cgroup version, folder) of this process's memory cgroup and its visible ancestors, innermost first."""
    out: List[Tuple[int, str]] = []
    for line in (_read(src.self_cgroup) or '').splitlines():
        parts = line.split(':', 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == '':
            version, base = 2, src.cgroup_mount
        elif 'memory' in controllers.split(','):
            version, base = 1, os.path.join(src.cgroup_mount, 'memory')
            if not os.path.isdir(base):  # mounted with other controllers, e.g. memory,cpu
                base = os.path.join(src.cgroup_mount, controllers)
        else:
            continue
        if not os.path.isdir(base):
            continue
        folder = os.path.normpath(os.path.join(base, path.strip().lstrip('/')))
        if not os.path.isdir(folder) or os.path.commonpath([folder, base]) != base:
            folder = base  # a cgroup namespace: the mount's root is this process's cgroup
        while True:
            out.append((version, folder))
            if folder == base:
                break
            folder = os.path.dirname(folder)
    return out


def _cgroup_budget(src: MemorySources) -> Optional[MemoryBudget]:
    """The tightest (limit - working set) over the visible memory cgroups, or None without a limit."""
    best: Optional[MemoryBudget] = None
    for version, folder in _cgroup_dirs(src):
        if version == 2:
            limit_file, usage_file, inactive = 'memory.max', 'memory.current', 'inactive_file'
        else:
            limit_file, usage_file, inactive = 'memory.limit_in_bytes', 'memory.usage_in_bytes', 'total_inactive_file'
        stat = os.path.join(folder, 'memory.stat')
        limits = [(_number(os.path.join(folder, limit_file)), os.path.join(folder, limit_file))]
        if version == 1:
            limits.append((_stat(stat, 'hierarchical_memory_limit') or None, f'{stat} (hierarchical_memory_limit)'))
        usage = _number(os.path.join(folder, usage_file))
        for limit, where in limits:
            if limit is None or limit >= UNLIMITED:
                continue
            used = max((usage or 0) - _stat(stat, inactive), 0)
            left = max(limit - used, 0)
            if best is None or left < best.available:
                best = MemoryBudget(left, limit, where)
    return best


def memory_budget(sources: Optional[MemorySources] = None) -> Optional[MemoryBudget]:
    """What this process may still allocate: MemAvailable, or less where a memory cgroup's limit is tighter;
    None when neither can be read (not Linux)."""
    src = sources or SOURCES
    machine = _mem_available(src)
    cgroup = _cgroup_budget(src)
    if cgroup is not None and (machine is None or cgroup.available < machine):
        return cgroup
    return None if machine is None else MemoryBudget(machine)


def available_memory(sources: Optional[MemorySources] = None) -> Optional[int]:
    """Bytes this process may still allocate (see memory_budget), else None."""
    budget = memory_budget(sources)
    return None if budget is None else budget.available


def gib(n: float) -> str:
    return f'{n / 2 ** 30:.2f} GiB'


def size(n: float) -> str:
    """Bytes as MiB below a GiB, else GiB: the unit a reader compares with a card's size."""
    return gib(n) if n >= 2 ** 30 else f'{n / 2 ** 20:.1f} MiB'


def peak_memory(device: torch.device) -> str:
    """The most memory this process has held so far, in words: on a CUDA device the caching allocator's peak
    allocated and reserved bytes (torch.cuda.max_memory_allocated / max_memory_reserved) against the card's total;
    elsewhere the process's peak resident size (getrusage) against what the machine or the job's memory cgroup
    leaves (`memory_budget`)."""
    if device.type == 'cuda':
        total = torch.cuda.get_device_properties(device).total_memory
        return (f'peak GPU memory {gib(torch.cuda.max_memory_allocated(device))} allocated, '
                f'{gib(torch.cuda.max_memory_reserved(device))} reserved of the card\'s {gib(total)}')
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == 'darwin' else 1024)
    budget = memory_budget()
    left = f'; {budget.has(gib(budget.available))}' if budget is not None else ''
    return f'peak memory {gib(peak)} (the process\'s resident size, {device.type}){left}'
