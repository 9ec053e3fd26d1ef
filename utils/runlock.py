"""One job per run folder: an OS lock on `<root>/.<task>.lock`, held open by rank 0 for the whole run.

A lock held by an open file, not a marker file: the kernel drops it when the holder dies, however
it dies (SIGKILL, OOM killer), so a crashed job never blocks the next start. POSIX record locks
(`lockf`) rather than `flock`: forked DataLoader workers do not inherit them, so a worker cannot
keep the lock after rank 0 is gone, and NFS honours them across hosts. The file sits beside the
task folder so that `--fresh`, which renames the folder aside, keeps it; it is never deleted,
because deleting a lock file races with a job that has it open and is about to lock it.
"""
import errno
import fcntl
import os
import socket
import struct
import sys
from typing import IO, Optional

from utils.diskspace import NoSpaceLeft, no_space
from utils.errors import UserError

_HELD = (errno.EACCES, errno.EAGAIN)  # what lockf reports when another process holds the lock


def lock_path(task_dir: str) -> str:
    """`<root>/<task>` -> `<root>/.<task>.lock`, with `<root>` resolved: two jobs that reach the same
    folder through different symlinks get the same lock."""
    parent, name = os.path.split(os.path.abspath(task_dir))
    return os.path.join(os.path.realpath(parent), f'.{name}.lock')


def holder(path: str) -> str:
    """Who holds the lock, as its holder wrote it ("host <host> pid <pid>")."""
    try:
        with open(path) as f:
            words = f.read().split()
    except OSError:
        words = []
    if len(words) != 2:  # the holder locked it a moment ago and has not written its name yet
        return 'another process'
    return f'host {words[0]} pid {words[1]}'


def is_held(task_dir: str) -> Optional[bool]:
    """Whether a job holds the run lock of `task_dir` now, asked without taking it (`F_GETLK`: a test that places
    no lock, so that a job starting at this moment is never refused): for an outside observer such as
    `main_test.py --watch`. None when it cannot be told (not Linux, a file system without locks). The lock
    file is opened read-only and never created. A process never sees its own locks conflict: ask from another."""
    path = lock_path(task_dir)
    if not sys.platform.startswith('linux'):
        return None  # `struct flock`'s layout below is Linux's
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False  # no job ever ran here
    except OSError:
        return None
    try:
        # struct flock {short l_type, l_whence; off_t l_start, l_len; pid_t l_pid;}: the whole file, exclusively
        query = struct.pack('hhqqi4x', fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
        return struct.unpack('hhqqi4x', answer)[0] != fcntl.F_UNLCK
    except OSError:
        return None
    finally:
        os.close(fd)


class RunLock:
    """The held lock of one run folder; `release()` (or the end of the process) frees it."""

    def __init__(self, path: str, file: Optional[IO[str]], warning: Optional[str] = None):
        self.path, self._file, self.warning = path, file, warning

    @classmethod
    def acquire(cls, task_dir: str) -> 'RunLock':
        """Lock the run folder `task_dir` for this process, or raise a UserError naming the holder.

        A file system without locks (some network mounts) does not stop the run: the lock comes
        back unheld, with a `warning` to log. No space to create the lock file raises NoSpaceLeft.
        """
        path = lock_path(task_dir)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            f = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o666), 'r+')
        except OSError as e:
            full = no_space(e, path)
            if full:
                raise NoSpaceLeft(f'{path}: {full}') from None
            raise UserError(f'{path}: cannot create the run lock: {e.strerror or e}') from None
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            f.close()
            if e.errno in _HELD:
                raise UserError(f'{task_dir} is in use by another job: {holder(path)} holds {path}') from None
            return cls(path, None, f'run lock {path} not available on this file system ({e.strerror or e}): '
                                   f'nothing stops a second job from writing into {task_dir}')
        try:  # unbuffered: a write that fails here must not fail again when the file is closed
            os.ftruncate(f.fileno(), 0)
            os.pwrite(f.fileno(), f'{socket.gethostname()} {os.getpid()}\n'.encode(), 0)
        except OSError:  # a full disk: the lock is held all the same, only its holder's name is missing
            pass
        return cls(path, f)

    @property
    def held(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        """Closing the file drops the lock; the file itself stays (see the module docstring)."""
        if self._file is not None:
            self._file.close()
            self._file = None
