"""Start-up checks of data files: every file's header and size, before anything is trained.

A corrupt or too-small file found at the first batch or the first validation costs everything
since the last save, on every attempt. Each dataset therefore checks all of its files when it is
built: the image header (size, and for PNG/JPEG the end marker; see `utils.image.read_image_size`),
OpenCV's decoding limits, the `.npy` header and the `.dat` length of spike streams, against what
the dataset will ask of them (training patch, evaluation with SSIM, pairing, scale), and what the section's
`icc` key says of images with a non-sRGB colour profile (`colour_profiles`). Pixels are never decoded, so
thousands of files take a fraction of a second.

All problems come back as one UserError with one line per bad file,
`<datasets.phase.key>: <file>: <problem>`, capped at MAX_LINES lines.
"""
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from metrics.fidelity import SSIM_WINDOW
from utils.errors import UserError
from utils.icc import Profile, ProfileError, read_profile
from utils.image_header import ImageFileError, decode_limit_problem, header_bit_depth, header_icc, read_image_size
from utils.logger import get_logger

MAX_LINES = 20
THREADS = 8                 # for slow (network) file systems: see parallel_map
PROBE = 64                  # files timed serially before deciding
SLOW_FILE_SECONDS = 200e-6  # per file; the page cache answers in ~20 µs

Size = Tuple[int, int]
T = TypeVar('T')


class FileProblems:
    """One line per bad file; `raise_if_any()` raises them as a single UserError."""

    def __init__(self) -> None:
        self.lines: List[str] = []
        self._paths = set()

    def add(self, key: str, path: str, problem: str) -> None:
        """Record `problem` for `path` (only the first problem of a file is kept)."""
        if path in self._paths:
            return
        self._paths.add(path)
        self.lines.append(f'{key}: {path}: {problem}')

    def raise_if_any(self) -> None:
        if not self.lines:
            return
        lines = self.lines[:MAX_LINES]
        if len(self.lines) > MAX_LINES:
            lines.append(f'... and {len(self.lines) - MAX_LINES} more bad files (the first {MAX_LINES} are listed)')
        raise UserError('\n'.join(lines))


def parallel_map(fn: Callable[[str], T], paths: Sequence[str]) -> List[T]:
    """`[fn(p) for p in paths]`, on threads when the file system is slow.

    From the page cache a header read takes ~20 µs and threads only add GIL contention (measured:
    ~50,000 files/s serial, ~18,000 with 8 threads on 2 cores). On a network file system every
    open waits ~1 ms, and threads overlap the waits. So the first PROBE files are read serially
    and timed, and the rest go to threads only if they were slow.
    """
    start = time.perf_counter()
    head = [fn(p) for p in paths[:PROBE]]
    rest = paths[PROBE:]
    if not rest or (time.perf_counter() - start) / len(head) < SLOW_FILE_SECONDS:
        return head + [fn(p) for p in rest]
    step = -(-len(rest) // (THREADS * 4))
    chunks = [rest[i:i + step] for i in range(0, len(rest), step)]
    with ThreadPoolExecutor(THREADS, thread_name_prefix='data-check') as pool:
        return head + [r for part in pool.map(lambda chunk: [fn(p) for p in chunk], chunks) for r in part]


def _image_size(path: str) -> Union[Size, str]:
    try:
        height, width = read_image_size(path)
    except ImageFileError as e:
        return e.problem
    return decode_limit_problem(height, width) or (height, width)


def image_sizes(paths: Sequence[str]) -> List[Union[Size, str]]:
    """(height, width) of every image from its header, or the problem that makes it unusable."""
    return parallel_map(_image_size, [str(p) for p in paths])


def image_depths(paths: Sequence[str]) -> Dict[str, int]:
    """{path: bits per sample (8 or 16)} from every image's header: what a 16-bit reader decodes it to
    (the frame cache's layout, data/frame_cache.py)."""
    paths = [str(p) for p in paths]
    return dict(zip(paths, parallel_map(header_bit_depth, paths)))


def colour_profiles(paths: Sequence[str], mode: str, where: str, key: Optional[str] = None,
                    say: Optional[Callable[[str], None]] = None) -> None:
    """What the section `where`'s `icc` key (`mode`; `key` names it, default `<where>.icc`) says of its images that
    carry a non-sRGB colour profile (utils/icc.py), from their headers at start-up: "refuse" ends the run with one
    line naming the first; "convert" says one line (how many, the first; `say`, default the log) and ends the run
    with one line per image whose profile cannot be converted; "ignore" reads nothing. Images without a profile or
    with an sRGB one cost a header read."""
    if mode == 'ignore':
        return
    key = key or f'{where}.icc'
    paths = list(dict.fromkeys(str(p) for p in paths))
    found = [(p, r) for p, r in zip(paths, parallel_map(non_srgb_profile, paths)) if r is not None]
    if not found:
        return
    first, profile = found[0]
    if mode == 'refuse':
        what = (f'a non-sRGB colour profile ("{profile.name}")' if isinstance(profile, Profile)
                else f'a colour profile that cannot be read ({profile})')
        more = f' (and {len(found) - 1} more of its {len(paths)} images)' if len(found) > 1 else ''
        raise UserError(f'{key}: "refuse", but {first} carries {what}{more}; convert the images to sRGB, or set '
                        f'it to "convert"')
    problems = FileProblems()
    for path, p in found:
        problem = p if isinstance(p, str) else p.problem(header_bit_depth(path))
        if problem:
            problems.add(key, path, f'{problem}; "ignore" reads its values as they are')
    problems.raise_if_any()
    (say or get_logger().info)(f'{where}: {len(found)} of {len(paths)} images carry a non-sRGB colour profile (the '
                               f'first: {first}, "{profile.name}"): converted to sRGB as they are read ({key} "convert")')


def non_srgb_profile(path: str) -> Union[None, Profile, str]:
    """The non-sRGB profile embedded in the image at `path`, None (none, or sRGB), or why it cannot be read."""
    try:
        icc = header_icc(path)
        return None if icc is None else read_profile(icc)
    except ImageFileError as e:
        return e.problem
    except ProfileError as e:
        return f'damaged colour profile ({e})'


def fmt(size: Size) -> str:
    return f'{size[0]}x{size[1]}'


def pair_factor(size_H: Size, size_L: Size, exact: bool = True) -> Optional[int]:
    """The integer factor f with `size_H` f x `size_L` on both axes (`exact` False: up to f - 1 more rows and
    columns, as an evaluation pair allows), or None."""
    (h, w), (hl, wl) = size_H, size_L
    if not hl or not wl:
        return None
    f = h // hl
    if f < 1 or w // wl != f:
        return None
    if exact:
        return f if (h, w) == (hl * f, wl * f) else None
    return f if h < hl * f + f and w < wl * f + f else None


def scale_mismatch(pairs: Sequence[Tuple[str, Size, str, Size]], scale: int, where: str, high: str = 'image',
                   exact: bool = True) -> Optional[str]:
    """One line naming the top-level `scale` when every (H path, H size, L path, L size) pair is off by the same
    factor, another than `scale`: an option mistake (or the LQ folder of another factor), not a folder of odd
    files, so one line instead of one per file."""
    if not pairs:
        return None
    factors = {pair_factor(sh, sl, exact) for _, sh, _, sl in pairs}
    if len(factors) != 1 or None in factors or scale in factors:
        return None
    factor = factors.pop()
    path_H, size_H, path_L, size_L = pairs[0]
    return (f'scale: {scale}, but every {high} of {where} is {factor}x its low-quality one (e.g. {path_H} '
            f'{fmt(size_H)}, {path_L} {fmt(size_L)}); set "scale": {factor}, or give the x{scale} low-quality '
            f'folder')


def ssim_problem(size: Size, border: int, evaluated: Optional[Size] = None) -> Optional[str]:
    """Why an image of `size` (evaluated at `evaluated`, default `size`) cannot be scored with SSIM."""
    h, w = evaluated or size
    need = SSIM_WINDOW + 2 * border
    if h >= need and w >= need:
        return None
    how = f' (evaluated as {fmt(evaluated)})' if evaluated and evaluated != size else ''
    if not border:
        return f'{fmt(size)}{how} is too small to evaluate: SSIM needs at least {need}x{need}'
    return (f'{fmt(size)}{how} is too small to evaluate: SSIM needs {SSIM_WINDOW}x{SSIM_WINDOW} after cropping '
            f'the {border}-pixel metric border, i.e. at least {need}x{need}')


def spike_header(path: str, spike_format: str, frame: Size, plane_size: Optional[Size]) -> Union[int, str]:
    """Number of spike planes in a `.npy`/`.dat` file from its header (or length), or the problem.

    `frame` is the LQ frame size the planes must match; `plane_size` the `.dat` plane size
    (`spike_size`, default `frame`). Values (binary 0/1) are not looked at.
    """
    if spike_format == 'npy':
        try:
            arr = np.load(path, mmap_mode='r', allow_pickle=False)  # maps the file, reads only the header
        except FileNotFoundError:
            return 'not found'
        except (OSError, ValueError) as e:  # includes a file shorter than its header says
            return f'not a valid .npy spike file ({str(e).splitlines()[0] if str(e) else type(e).__name__})'
        shape, dtype = tuple(arr.shape), arr.dtype
        del arr
        if len(shape) != 3:
            return f'spike stream must be T×H×W, got shape {shape}'
        if dtype not in (np.uint8, np.bool_):
            return f'spike stream must be uint8 or bool, got {dtype}'
        if shape[1:] != tuple(frame):
            return f'spike frames are {shape[1]}×{shape[2]} but the LQ frames are {frame[0]}×{frame[1]}'
        return shape[0]
    h, w = plane_size or frame
    if (h, w) != tuple(frame):
        return f'spike_size {h}×{w} differs from the LQ frames ({frame[0]}×{frame[1]})'
    if (h * w) % 8:
        return f'spike frame size {h}×{w} must have H*W a multiple of 8'
    try:
        length = os.path.getsize(path)
    except OSError as e:
        return f'cannot read: {e.strerror or e}'
    plane = h * w // 8
    if length == 0 or length % plane:
        return (f'{length} bytes is not a positive multiple of H*W/8 = {plane} (frame size {h}×{w}): '
                f'wrong spike_size or truncated file')
    return length // plane
