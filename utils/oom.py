"""Out-of-memory errors told in one line: where it happened, what ran, the peak, and the keys that lower it.

torch raises `torch.cuda.OutOfMemoryError` (a RuntimeError) when the CUDA caching allocator cannot get the memory
it needs; its own message is a paragraph about the allocator. The CPU allocator raises a RuntimeError saying it
"can't allocate memory" (rare on Linux, where the kernel's OOM killer ends the process first: exit 137). The
entry points turn either into `OutOfMemory`, whose message is the one line a user acts on, and exit with
EXIT_OUT_OF_MEMORY on every rank (models/out_of_memory.py words the line, utils/dist/departure.py takes the
other ranks along when one rank fails alone in the middle of a step).
"""
import contextlib
import os
import re
import traceback
from typing import Callable, Iterator, Optional

from utils.exit_codes import EXIT_OUT_OF_MEMORY

_CPU_ALLOCATOR = "can't allocate memory"  # DefaultCPUAllocator's words
_TRIED = re.compile(r'Tried to allocate ([\d.]+ [KMGT]?i?B)')
_AUTOGRAD = os.path.join('torch', 'autograd', '__init__.py')  # where backward() and grad() enter the engine


class OutOfMemory(Exception):
    """An out-of-memory error, described: `str(e)` is the line after `error: `, `code` the exit code. What the
    place that caught it knew, for the caller that words the whole line: `detail` (an evaluation: the item and
    rank), `tried` (the failed allocation's size) and `peak` (the failing rank's peak memory, '' where the
    error is worded on that rank itself)."""

    code = EXIT_OUT_OF_MEMORY

    def __init__(self, line: str = '', detail: str = '', tried: str = '', peak: str = ''):
        super().__init__(line)
        self.detail, self.tried, self.peak = detail, tried, peak


def is_out_of_memory(e: BaseException) -> bool:
    """Whether `e` is an allocator running out of memory (CUDA's error type, the CPU allocator's message), or one
    already described (`OutOfMemory`)."""
    import torch  # here: this module is imported where torch need not be loaded yet
    return isinstance(e, (OutOfMemory, torch.cuda.OutOfMemoryError)) or \
        (isinstance(e, RuntimeError) and _CPU_ALLOCATOR in str(e))


def tried(e: BaseException) -> str:
    """What the failed allocation asked for, from torch's message (`Tried to allocate 2.00 GiB`), else ''."""
    if isinstance(e, OutOfMemory):
        return e.tried
    found = _TRIED.search(str(e))
    return found.group(1) if found else ''


def pass_of(e: BaseException) -> str:
    """'backward' when the error came out of autograd's engine (`torch.autograd.backward` or `grad` is on its
    traceback), else 'forward': what a training step's forward-and-backward call was doing when memory ran out.
    (A custom autograd Function's frames are torch/autograd/function.py's in either pass: not a sign.)"""
    frames = traceback.extract_tb(e.__traceback__)
    return 'backward' if any(f.filename.endswith(_AUTOGRAD) and f.name in ('backward', 'grad') for f in frames) \
        else 'forward'


def caught(e: BaseException) -> OutOfMemory:
    """`e` (an out-of-memory error) as an `OutOfMemory` that holds what it said, not the error itself: its
    traceback holds the frames and the tensors of the step that failed."""
    return e if isinstance(e, OutOfMemory) else OutOfMemory(tried=tried(e))


@contextlib.contextmanager
def on_out_of_memory(stop: Callable[[BaseException], BaseException]) -> Iterator[None]:
    """Inside: an out-of-memory error (raw, or an `OutOfMemory` a loop agreed on) leaves as `stop(error)`, the
    caller's own exception with the line it words; any other error passes."""
    failed: Optional[BaseException] = None
    try:
        yield
    except Exception as e:
        if not is_out_of_memory(e):
            raise
        failed = stop(e)
    if failed is not None:
        raise failed
