"""`cache_data`: decoded uint8 frames held in RAM, so training reads crop from memory instead of decoding.

The cache is filled once, in the process that builds the dataset, before the loader starts its
workers: forked workers share its pages (one contiguous buffer, so reading it touches no per-frame
Python objects and copy-on-write never copies it). Each training process of a node holds its own
copy. The size is known from the file headers before anything is decoded: it is logged, and a cache
that would not fit in the memory available now is refused with one line.

Frames are stored exactly as the dataset's reader returns them, so a cached run sees the same
pixels as an uncached one; a file that cannot be decoded fails while filling, naming the file.
"""
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from utils.dist import is_main_process
from utils.errors import UserError
from utils.logger import get_logger
from utils.progress import progress

Shape = Tuple[int, int, int]


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


def gib(n: int) -> str:
    return f'{n / 2 ** 30:.2f} GiB'


class FrameCache:
    """Frames of `shapes` (path -> H×W×C of what `read(path)` returns), read once into one buffer."""

    def __init__(self, shapes: Dict[str, Shape], read: Callable[[str], np.ndarray], where: str):
        self.where = where
        total = sum(h * w * c for h, w, c in shapes.values())
        free = available_memory()
        if free is not None and total > 0.9 * free:
            raise UserError(f'{where}: the decoded frames need {gib(total)} but this machine has {gib(free)} '
                            f'available; set cache_data to false (frames are then decoded per sample)')
        get_logger().info(f'{where}: caching {len(shapes)} decoded frames in RAM: {gib(total)} per training '
                          f'process' + (f' ({gib(free)} available)' if free is not None else ''))
        self.buffer = np.empty(total, dtype=np.uint8)
        self.index: Dict[str, Tuple[int, Shape]] = {}
        offset = 0
        for path in progress(list(shapes), len(shapes), f'{where}: cache_data', enabled=is_main_process()):
            img = read(path)
            if img.shape != shapes[path]:
                raise UserError(f'{where}: {path} decodes to {img.shape[0]}x{img.shape[1]}x{img.shape[2]} but its '
                                f'header says {shapes[path][0]}x{shapes[path][1]}x{shapes[path][2]}')
            n = img.size
            self.buffer[offset:offset + n] = img.reshape(-1)
            self.index[path] = (offset, img.shape)
            offset += n

    def __contains__(self, path: str) -> bool:
        return path in self.index

    def get(self, path: str) -> np.ndarray:
        """The cached frame as a read-only view (callers crop and copy)."""
        offset, shape = self.index[path]
        view = self.buffer[offset:offset + shape[0] * shape[1] * shape[2]].reshape(shape)
        view.flags.writeable = False
        return view


def frame_shapes(paths: Sequence[str], sizes: Dict[str, Tuple[int, int]], channels: int) -> Dict[str, Shape]:
    """path -> (h, w, channels) from the header sizes the dataset's file checks read (data/checks.py)."""
    return {p: (int(sizes[p][0]), int(sizes[p][1]), channels) for p in paths}
