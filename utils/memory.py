"""How much memory this machine has available, for checks that must refuse before they allocate."""
from typing import Optional


def available_memory() -> Optional[int]:
    """Bytes the kernel reports as available for new allocations (Linux MemAvailable), else None."""
    try:
        with open('/proc/meminfo') as f:
            for line in f:
                if line.startswith('MemAvailable:'):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def gib(n: float) -> str:
    return f'{n / 2 ** 30:.2f} GiB'
