"""The CPU cores this process may run on: its affinity, not the machine's count, so that a job pinned to a few
cores of a large node (SLURM, taskset, a container) sizes its threads and workers to those."""
import os


def usable_cores() -> int:
    """Cores in this process's affinity mask (os.cpu_count() where the platform has none); at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)
