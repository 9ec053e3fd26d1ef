"""Writes that fail for lack of space say so: `no space left on <mount> (N MB free)`.

A full disk shows up in many forms: `OSError: [Errno 28] No space left on device` from a plain write,
but torch's zip writer reports `[enforce fail at inline_container.cc:672] . unexpected pos 179392 vs
179280` (a RuntimeError, no errno). So a failed write counts as "no space" when its errno says so
(ENOSPC, or EDQUOT: a quota), or when, after the failure (and its temporary file removed), the file
system has less free space than what was being written.
"""
import errno
import os
import shutil
from typing import Any, Callable, Optional, Union

from utils.errors import first_line

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class NoSpaceLeft(OSError):
    """A write that failed for lack of space; `str()` is the one line, e.g. `no space left on /data (12 MB free)`."""

    def __init__(self, message: str):
        super().__init__(errno.ENOSPC, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def mount_point(path: str) -> str:
    """The mount point of the file system that holds `path` (or would hold it: its nearest existing folder)."""
    path = os.path.realpath(os.path.abspath(path))
    while not os.path.ismount(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def free_bytes(path: str) -> Optional[int]:
    """Free bytes for an unprivileged user on the file system of `path` (its nearest existing folder); None if unknown."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def _mb(n: int) -> str:
    mb = n / 1e6
    return f'{mb:.2f}' if mb < 1 else f'{mb:.1f}' if mb < 10 else f'{mb:.0f}'


def object_bytes(obj: Any) -> int:
    """About how many bytes `torch.save(obj)` writes: tensor storages and strings, recursively (a lower bound)."""
    if hasattr(obj, 'untyped_storage'):  # a torch.Tensor (this module does not import torch)
        return obj.untyped_storage().nbytes()
    if isinstance(obj, (str, bytes)):
        return len(obj)
    if isinstance(obj, dict):
        return sum(object_bytes(k) + object_bytes(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return sum(object_bytes(v) for v in obj)
    return 0


def no_space(e: BaseException, path: str, needed: Union[None, int, Callable[[], int]] = None) -> Optional[str]:
    """`no space left on <mount> (N MB free)` if `e`, raised while writing `path` (a file or its folder), came from
    a full disk (see the module docstring; `needed`: the bytes being written, or a function giving them);
    None if it did not."""
    if isinstance(e, NoSpaceLeft):
        return e.message
    code = getattr(e, 'errno', None)
    free = free_bytes(path)
    if code not in _NO_SPACE:
        if needed is None or free is None:
            return None
        try:
            size = needed() if callable(needed) else needed
        except Exception:  # an estimate must never hide the error it explains
            return None
        if free >= size:
            return None
    where = f'no space left on {mount_point(path)}'
    if code == errno.EDQUOT:
        where = f'disk quota exceeded on {mount_point(path)}'
    return f'{where} ({_mb(free)} MB free)' if free is not None else where


def describe_write_error(e: BaseException, path: str, needed: Union[None, int, Callable[[], int]] = None) -> str:
    """One line for a failed write: `no space` when the disk was full, else the error's first line."""
    return no_space(e, path, needed) or first_line(e)
