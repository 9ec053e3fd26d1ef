"""`cache_data`: decoded uint8 (or uint16: 16-bit files) frames held in RAM, one copy per node, so training
reads crop from memory instead of decoding.

Each node keeps one copy, however many training processes it runs. The node's lowest rank (its
leader) decodes every frame once into an anonymous memory file (`memfd_create`); the node's other
ranks open that file read-only through `/proc/<pid>/fd/<fd>` and map the same pages. Eight ranks on
a node hold one copy instead of eight, and the validation set is decoded once per node too.
The cache is filled before the loader starts its workers, and forked workers inherit the shared
mapping: one contiguous buffer, so reading it touches no per-frame Python objects and nothing is
ever copied on write. A memory file has no name in any file system and lives only as long as some
process maps it or holds it open, so a run that ends in any way, SIGKILL included, leaves nothing behind (a file in
/dev/shm would stay until someone deleted it).

Ranks are grouped into nodes by (host name, boot id, pid namespace), gathered from every rank, and
not by LOCAL_RANK: a launcher need not set it, and a rank can open another's file through /proc only
on the same kernel and in the same pid namespace. A rank that cannot open its leader's file (/proc
restricted, another user) warns once and decodes a private copy.

The size is known from the file headers before anything is decoded. Each leader checks it against
the memory its node has available: MemAvailable, or what the job's memory cgroup leaves where that is
less (SLURM `--mem`, Docker, Kubernetes; utils/memory.py). Every rank learns whether the check passed and whether any file
failed to decode while filling, so all ranks stop with the same one line and none is left waiting
in a collective. The fill runs in rounds of ROUND_S seconds with a small agreement after each, so a
rank waiting for its leader spends one round in a collective, not the whole fill: an hour of decoding
does not run into dist_timeout.

Frames are stored exactly as the dataset's reader returns them, so a cached run sees the same
pixels as an uncached one. A leader decodes with a pool of threads, one per processor it may run on
(`fill_threads`; PNG decoding releases the GIL), each writing its frames into their own bytes of the
buffer, so a large training set is cached at the speed of the disk and the cores, not of one core;
frames are taken up in index order, and the first one that fails in that order is the one reported.

`cache_data: "auto"` caches when the decoded set takes at most AUTO_SHARE of the memory every node
has available, and otherwise decodes per sample; the ranks decide together and the log says which.
"""
import collections
import fcntl
import mmap
import os
import socket
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from utils.cores import usable_cores
from utils.dist import agree_any, gather_objects, get_rank, is_main_process
from utils.errors import UserError
from utils.logger import get_logger
from utils.memory import memory_budget, gib
from utils.options import Key, rule
from utils.progress import progress

Shape = Tuple[int, int, int]
Reader = Callable[[str], np.ndarray]
UINT8 = np.dtype(np.uint8)

ROUND_S = 2.0  # seconds a leader decodes between two agreements: far below any workable dist_timeout
AUTO_SHARE = 0.5  # cache_data "auto": the largest share of a node's available memory the cache may take
FILL_THREADS: Optional[int] = None  # decoding threads of a fill; None: one per processor (fill_threads)
MAX_FILL_THREADS = 32  # beyond this a disk, not the cores, is the bound


def fill_threads() -> int:
    """Threads a fill decodes with: FILL_THREADS, else one per processor this process may run on (its
    affinity: a job pinned to a few cores of a large node gets that many)."""
    if FILL_THREADS is not None:
        return max(1, FILL_THREADS)
    return min(usable_cores(), MAX_FILL_THREADS)


@rule('true, false or "auto"', enum=[True, False, 'auto'])
def _cache_choice(v: object) -> Optional[str]:
    return None if v in (True, False, 'auto') else 'must be true, false or "auto"'


# the `cache_data` key of the datasets that take it
CACHE_DATA = Key(False, (bool, str), _cache_choice, 'decode every image once into RAM, one copy per node shared by '
                                                    'its processes; "auto": when it takes at most half the free memory')




def _processes(n: int) -> str:
    return f'{n} training process' + ('es' if n != 1 else '')


def node_key() -> str:
    """What ranks that can share a memory file have in common: host name, kernel boot, pid namespace.

    The boot id tells apart machines that report the same host name (cloned images, containers);
    the pid namespace tells apart containers on one machine, where /proc/<pid> of another rank would
    name a different process or none.
    """
    try:
        with open('/proc/sys/kernel/random/boot_id') as f:
            boot = f.read().strip()
    except OSError:
        boot = ''
    try:
        pid_namespace = os.readlink('/proc/self/ns/pid')
    except OSError:
        pid_namespace = ''
    return f'{socket.gethostname()}/{boot}/{pid_namespace}'


def _memory_file(size: int, name: str) -> Optional[int]:
    """A new anonymous memory file of `size` bytes (its fd), or None where memfd_create is not available."""
    try:
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except (AttributeError, OSError):
        return None
    try:
        os.ftruncate(fd, size)
    except OSError:
        os.close(fd)
        return None
    return fd


def _map_read_only(fd: int, size: int) -> np.ndarray:
    """`size` bytes of the memory file `fd`, mapped shared and read-only (mmap keeps its own copy of the fd)."""
    return np.frombuffer(mmap.mmap(fd, max(size, 1), access=mmap.ACCESS_READ), np.uint8, count=size)


class _Fill:
    """Decodes frames into a new buffer a few seconds at a time, with `threads` decoding threads; an error
    is kept as one line.

    The buffer is a memory file when the system has memfd_create (the node's other ranks can then
    map it), else anonymous shared memory (forked workers still share it). Frames are handed to the
    threads in index order, at most 2 x threads ahead of the oldest one not yet done, and taken back in
    that order: the first failure in index order is the one reported, whatever the threads' timing.
    Threads go on decoding while the ranks agree between two rounds.
    """

    def __init__(self, index: Dict[str, Tuple[int, Shape, np.dtype]], read: Reader, total: int, where: str,
                 show_progress: bool, refused: Optional[str] = None, threads: int = 1) -> None:
        self.index, self.read, self.total, self.where = index, read, total, where
        self.done = False
        self.error = refused  # the first problem, one line; `refused`: the memory check failed, nothing to fill
        self.exception: Optional[Exception] = None  # not a UserError: a bug, re-raised with its traceback
        self.buffer: Optional[np.ndarray] = None
        self.fd: Optional[int] = None
        self.writable: Optional[mmap.mmap] = None
        self.pool: Optional[ThreadPoolExecutor] = None
        if refused is not None:
            return
        self.fd = _memory_file(max(total, 1), f'frame_cache {where}')
        self.writable = mmap.mmap(-1 if self.fd is None else self.fd, max(total, 1))
        self.out: Optional[np.ndarray] = np.frombuffer(self.writable, np.uint8, count=self.total)
        self.threads = max(1, threads)
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix='frame_cache')
        self.pending: Deque[Future] = collections.deque()
        self.todo: Iterator[str] = iter(progress(list(index), len(index), f'{where}: cache_data',
                                                 enabled=show_progress))

    @property
    def running(self) -> bool:
        return not self.done and self.error is None

    def _decode(self, path: str) -> None:
        """One frame into its bytes of the buffer (in a pool thread; frames never share bytes)."""
        offset, shape, dtype = self.index[path]
        img = self.read(path)
        if img.shape != shape:
            raise UserError(f'{self.where}: {path} decodes to {"x".join(map(str, img.shape))} but its '
                            f'header says {shape[0]}x{shape[1]}x{shape[2]}')
        if img.dtype != dtype:
            raise UserError(f'{self.where}: {path} decodes to {img.dtype} samples but its header says '
                            f'{8 * dtype.itemsize}-bit')
        assert self.out is not None
        self.out[offset:offset + img.nbytes] = np.ascontiguousarray(img).reshape(-1).view(np.uint8)

    def step(self, seconds: float) -> None:
        """Decode frames for about `seconds` (at least one), or to the end."""
        assert self.pool is not None
        deadline = time.monotonic() + seconds
        try:
            while True:
                while len(self.pending) < 2 * self.threads:
                    path = next(self.todo, None)
                    if path is None:
                        break
                    self.pending.append(self.pool.submit(self._decode, path))
                if not self.pending:
                    break
                self.pending.popleft().result()
                if time.monotonic() >= deadline:
                    return
        except UserError as e:
            self._stop()
            text = str(e)
            self.error = text if text.startswith(self.where) else f'{self.where}: {text}'
            return
        except Exception as e:
            self._stop()
            self.error = f'{self.where}: filling the frame cache failed on rank {get_rank()}: {type(e).__name__}: {e}'
            self.exception = e
            return
        self._stop()
        self.done = True
        self.buffer = self._read_only()

    def _stop(self) -> None:
        """Cancel what no thread has begun, wait for the rest, and drop the writable view."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        self.pending.clear()
        self.out = None  # the writable mapping can close only without views

    def _read_only(self) -> np.ndarray:
        """The filled buffer, from now on read-only: a memory file is sealed against any change and mapped
        again read-only; anonymous memory stays mapped, behind a read-only array."""
        assert self.writable is not None
        if self.fd is None:
            buffer = np.frombuffer(self.writable, np.uint8, count=self.total)
            buffer.flags.writeable = False
            return buffer
        self.writable.close()
        self.writable = None
        try:  # a rank that maps the file can then trust it to keep its size and content
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
        except (AttributeError, OSError):
            pass
        return _map_read_only(self.fd, self.total)

    def share(self) -> Optional[Tuple[int, int, int]]:
        """(fd, st_dev, st_ino) for the node's other ranks, or None when the buffer is not a memory file."""
        if self.fd is None or not self.done:
            return None
        st = os.fstat(self.fd)
        return self.fd, st.st_dev, st.st_ino

    def close(self) -> None:
        """Drop this process's own handle; the mappings keep the memory as long as they live."""
        if self.pool is not None:
            self._stop()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _fill_in_rounds(job: Optional[_Fill]) -> bool:
    """Every rank runs the same rounds: each job decodes for up to ROUND_S, then all ranks agree whether
    a job is still running or has failed. Returns, on every rank, whether some job failed."""
    while True:
        if job is not None and job.running:
            job.step(ROUND_S)
        running, failed = agree_any([job is not None and job.running, job is not None and job.error is not None])
        if failed or not running:
            return failed


def _raise_agreed(job: Optional[_Fill]) -> None:
    """Every rank raises the first error in rank order, so all ranks print the same line."""
    errors = [e for e in gather_objects(job.error if job is not None else None) if e]
    if job is not None:
        job.close()
    if job is not None and job.exception is not None:
        raise job.exception
    raise UserError(errors[0])


def frame_bytes(shapes: Dict[str, Shape], dtypes: Optional[Dict[str, np.dtype]] = None) -> int:
    """The bytes the frames of `shapes` take, of type `dtypes[path]` (default uint8)."""
    dtypes = dtypes or {}
    return sum(h * w * c * dtypes.get(p, UINT8).itemsize for p, (h, w, c) in shapes.items())


class FrameCache:
    """Frames of `shapes` (path -> H×W×C of what `read(path)` returns, of type `dtypes[path]`, default uint8),
    read once per node into one buffer.

    Every rank must build it at the same point (datasets are built in the same order on every rank):
    it runs collectives. Without a process group it is a private cache of this process. `threads`: the
    decoding threads of a fill (default `fill_threads()`).
    """

    def __init__(self, shapes: Dict[str, Shape], read: Reader, where: str,
                 dtypes: Optional[Dict[str, np.dtype]] = None, threads: Optional[int] = None) -> None:
        self.where = where
        self.threads = threads if threads is not None else fill_threads()
        self.index: Dict[str, Tuple[int, Shape, np.dtype]] = {}
        total = 0
        for path, (h, w, c) in shapes.items():
            dtype = np.dtype((dtypes or {}).get(path, UINT8))
            total += -total % dtype.itemsize  # aligned to its sample size
            self.index[path] = (total, (h, w, c), dtype)
            total += h * w * c * dtype.itemsize
        rank = get_rank()
        peers: List[Tuple[str, int]] = gather_objects((node_key(), os.getpid()))
        node = [r for r, (key, _) in enumerate(peers) if key == peers[rank][0]]
        leader = node[0]
        self.node_ranks = len(node)  # ranks of this node that share the copy (when all can map it)
        self.owner = rank            # the rank that decoded the copy this rank reads

        # The leader of each node checks the size, then fills its memory file.
        job = self._start(read, total, len(node)) if rank == leader else None
        if _fill_in_rounds(job):
            _raise_agreed(job)
        shares = gather_objects(job.share() if job is not None else None)

        # The node's other ranks map the leader's file; one that cannot fills a private copy.
        own: Optional[_Fill] = None
        if job is not None:
            assert job.buffer is not None
            self.buffer = job.buffer
        else:
            try:
                self.buffer = self._map_leader(peers[leader][1], shares[leader], total)
                self.owner = leader
            except OSError as e:
                get_logger().warning(f'{where}: cache_data: cannot map the copy of rank {leader} on this node '
                                     f'({e.strerror or e}); this process decodes a copy of its own '
                                     f'({gib(total)} more)')
                own = self._start(read, total, 1)
        if _fill_in_rounds(own):
            _raise_agreed(own)
        for done in (job, own):  # every rank that maps our file has opened it by now
            if done is not None:
                done.close()
        if own is not None:
            assert own.buffer is not None
            self.buffer = own.buffer

    def _start(self, read: Reader, total: int, sharing: int) -> _Fill:
        """A fill of `total` bytes after the memory check, or a failed one saying why not."""
        budget = memory_budget()
        if budget is not None and total > 0.9 * budget.available:
            return _Fill(self.index, read, total, self.where, False, refused=(
                f'{self.where}: the decoded frames need {gib(total)} '
                + (f'(one copy per node, for its {_processes(sharing)}) ' if sharing > 1 else '')
                + f'but {budget.has(gib(budget.available))}; set cache_data to false (frames are then '
                f'decoded per sample)'))
        shared = f'shared by its {_processes(sharing)}' if sharing > 1 else 'for its only training process'
        get_logger().info(f'{self.where}: caching {len(self.index)} decoded frames in RAM: {gib(total)} per node, '
                          f'one copy {shared}, {self.threads} decoding thread{"s" if self.threads > 1 else ""}'
                          + (f' ({budget.has(gib(budget.available))})' if budget is not None else ''))
        return _Fill(self.index, read, total, self.where, show_progress=is_main_process(), threads=self.threads)

    @staticmethod
    def _map_leader(pid: int, share: Optional[Tuple[int, int, int]], total: int) -> np.ndarray:
        """The leader's memory file, opened read-only through /proc and mapped: the same pages, no copy."""
        if share is None:
            raise OSError('it is not in a memory file: this system has no memfd_create')
        fd, dev, ino = share
        mine = os.open(f'/proc/{pid}/fd/{fd}', os.O_RDONLY | os.O_CLOEXEC)
        try:
            st = os.fstat(mine)
            if (st.st_dev, st.st_ino) != (dev, ino) or st.st_size != max(total, 1):
                raise OSError(f'/proc/{pid}/fd/{fd} is another file')
            return _map_read_only(mine, total)
        finally:
            os.close(mine)

    def __contains__(self, path: str) -> bool:
        return path in self.index

    def get(self, path: str) -> np.ndarray:
        """The cached frame as a read-only view (callers crop and copy)."""
        offset, shape, dtype = self.index[path]
        view = self.buffer[offset:offset + shape[0] * shape[1] * shape[2] * dtype.itemsize].view(dtype).reshape(shape)
        view.flags.writeable = False
        return view


def cache_frames(option: object, shapes: Dict[str, Shape], read: Reader, where: str,
                 dtypes: Optional[Dict[str, np.dtype]] = None) -> Optional[FrameCache]:
    """The dataset's cache for its `cache_data` value (true, false, "auto"), or None when it decodes per sample;
    `dtypes`: the frames that decode to another type than uint8 (16-bit files: uint16).

    Every rank must call it at the same point: "auto" and the cache itself are decided together.
    """
    if _cache_choice(option):
        raise UserError(f'{where}.cache_data: must be true, false or "auto", got {option!r}')
    if option == 'auto':
        total = frame_bytes(shapes, dtypes)
        budget = memory_budget()
        too_large, = agree_any([budget is not None and total > AUTO_SHARE * budget.available])
        if is_main_process():
            room = (f'{AUTO_SHARE:.0%} of the memory ({budget.has(gib(budget.available))})' if budget is not None
                    else 'memory')
            get_logger().info(f'{where}: cache_data "auto": the decoded frames ({gib(total)}) '
                              + (f'exceed {room} (on some node): decoded per sample' if too_large
                                 else f'fit in {room}: cached'))
        if too_large:
            return None
    elif not option:
        return None
    return FrameCache(shapes, read, where, dtypes)


def frame_shapes(paths: Sequence[str], sizes: Dict[str, Tuple[int, int]], channels: int) -> Dict[str, Shape]:
    """path -> (h, w, channels) from the header sizes the dataset's file checks read (data/checks.py)."""
    return {p: (int(sizes[p][0]), int(sizes[p][1]), channels) for p in paths}
