"""What the video datasets share: reading, listing, checking and sampling the frames of clips.

The GoPro/REDS, Vimeo-90K and DAVIS datasets (data/datasets/video.py, data/datasets/vimeo.py,
data/datasets/video_denoising.py) read frames from folders or LMDBs, list clips in BasicSR/KAIR
meta info files, check every frame's header at start-up, draw training windows and stack frames
into T×C×H×W tensors the same way; it is written once here, so a fix reaches all of them.
Option keys several of them declare (`Key`s with their checks) are here too.
"""
import os
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import cv2
import numpy as np
import torch
from torch.utils.data import Dataset

from data.checks import (FileProblems, colour_profiles, fmt, image_sizes, parallel_map, scale_mismatch, spike_header,
                         ssim_problem)
from data.datasets.spike import SpikeSource
from data.lmdb_util import LazyLmdbReader, check_lmdb_folder, decode_frame
from data.option_checks import extension, int_format, io_backend, noise_level
from data.patches import Patch, fits, indivisible, patch_key, shown, warn_if_tiny
from data.sampler import parse_key
from utils.errors import UserError
from utils.image import imread_uint
from utils.options import Key, at_least, positive_ints, rule
from utils.paths import folder_problem

Size = Tuple[int, int]
T = TypeVar('T')
SIZE_FIELD = re.compile(r'\((\d+),(\d+)(?:,\d+)?\)')  # `(h,w,c)` of a meta info line

# Keys the clip datasets share (each dataset's OPTIONS lists them in its own order).
IO_BACKEND = Key({'type': 'disk'}, (dict,), io_backend('disk', 'lmdb'))   # training: frames in folders or an LMDB
IO_BACKEND_DISK = Key({'type': 'disk'}, (dict,), io_backend('disk'))      # evaluation: folders
INTERVALS = Key([1], (list,), positive_ints)   # `interval_list`: frame steps a training window is drawn with
NOISE_STD = Key(None, (int, float, type(None)), noise_level)               # 0..255 scale; null: no noise


def positive(default: int) -> Key:
    """An integer key >= 1 (`num_frame`, `scale` of a training set)."""
    return Key(default, (int,), at_least(1))


# `gt_size` of a training set: the crop of the ground-truth frames (data/patches.py)
GT_SIZE = patch_key(256, 'training patch size of the ground truth, in pixels')


def window_length(default: int) -> Key:
    """`num_frame` of a training set that crops random windows from long clips (GoPro, REDS, DAVIS): a length
    >= 1. KAIR's and BasicSR's -1 ("all frames") belongs to Vimeo's septuplets and to test sets; here it
    would stack a whole clip of ~100 frames, which KAIR's and BasicSR's own training sets cannot do either."""
    @rule('>= 1', minimum=1)
    def check(v: int) -> Optional[str]:
        if v >= 1:
            return None
        hint = ' (-1, all frames, is for Vimeo training sets and for test sets)' if v == -1 else ''
        return f'must be >= 1: the number of frames of each random training window{hint}'
    return Key(default, (int,), check)


def frame_name_keys(tmpl: str) -> Dict[str, Key]:
    """`filename_tmpl` (the frame number's format, default `tmpl`) and `filename_ext` (png)."""
    return {'filename_tmpl': Key(tmpl, (str,), int_format(f'"{tmpl}"')), 'filename_ext': Key('png', (str,), extension)}


def to_float(img: np.ndarray) -> np.ndarray:
    """uint8 HWC → float32 in [0, 1]."""
    return img.astype(np.float32) / 255.0


def stack_tensor(frames: Sequence[np.ndarray]) -> torch.Tensor:
    """List of HWC arrays (any strides: crops, flips, channel-reversed views) → T×C×H×W tensor of their
    dtype, in one copy per frame."""
    h, w, c = frames[0].shape
    out = np.empty((len(frames), c, h, w), dtype=frames[0].dtype)
    for t, frame in enumerate(frames):
        out[t] = frame.transpose(2, 0, 1)
    return torch.from_numpy(out)


def check_folder(path: Optional[str], key: str) -> Path:
    """The folder `path` as a Path; UserError naming the option `key` when it is not one."""
    problem = folder_problem(path) if path else f'folder not found: {path}'
    if problem:
        raise UserError(f'{key}: {problem}')
    return Path(path)


class FrameStore:
    """RGB frames by key (`<clip>/<seq>/im4`, `<clip>/00000012`: the path without extension) from
    one folder or LMDB per name ('gt', 'lq'); LMDBs are opened lazily, per process. `icc`: the section's key, what
    happens to a frame with a non-sRGB colour profile (utils/icc.py)."""

    def __init__(self, prefix: str, roots: Dict[str, Any], backend: str, ext: str, icc: str):
        self.prefix, self.backend, self.ext, self.icc = prefix, backend, ext, icc
        self.roots: Dict[str, Path] = {}
        for name, path in roots.items():
            key = f'{prefix}.dataroot_{name}'
            if backend == 'lmdb':
                check_lmdb_folder(path, key)
                self.roots[name] = Path(path)
            else:
                self.roots[name] = check_folder(path, key)
        self.lmdb = LazyLmdbReader({k: str(v) for k, v in self.roots.items()}) if backend == 'lmdb' else None

    def path(self, name: str, key: str) -> str:
        return str(self.roots[name] / f'{key}.{self.ext}')

    def read(self, name: str, key: str) -> np.ndarray:
        """HWC uint8 RGB."""
        where = f'{self.prefix}.dataroot_{name}'
        if self.lmdb is None:
            path = self.path(name, key)
            if not os.path.isfile(path):
                raise UserError(f'{where}: frame {key} not found: {path}')
            return imread_uint(path, 3, icc=self.icc)
        img = decode_frame(self.lmdb.get(name, key, where), f'{where}: key {key} in {self.roots[name]}', self.icc)
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def size_field(text: str) -> Optional[Size]:
    """(h, w) of a meta info size field `(h,w,c)` or `(h,w)`; None when it is not one."""
    size = SIZE_FIELD.fullmatch(text)
    return (int(size[1]), int(size[2])) if size else None


def read_meta_info(path: Any, key: str, parse: Callable[[List[str]], Optional[T]], expected: str,
                   what: str) -> List[T]:
    """Every non-blank line of the meta info file `path` (option `key`), split into fields and parsed by
    `parse`, which returns None for a malformed line: one UserError line names it and says `expected`."""
    if not isinstance(path, str) or not os.path.isfile(path):
        raise UserError(f'{key}: file not found: {path}')
    entries = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            entry = parse(fields)
            if entry is None:
                raise UserError(f'{key}: {path}:{lineno}: expected {expected}, got "{line.strip()}"')
            entries.append(entry)
    if not entries:
        raise UserError(f'{key}: no {what} listed in {path}')
    return entries


def _clip_line(fields: List[str]) -> Optional[Tuple[str, int, int, Optional[Size]]]:
    if len(fields) not in (3, 4):
        return None
    try:
        clip, num, start = fields[0], int(fields[1]), int(fields[3]) if len(fields) == 4 else 0
    except ValueError:
        return None
    return (clip, num, start, size_field(fields[2])) if num >= 1 and start >= 0 else None


def parse_meta_info(path: str, key: str) -> List[Tuple[str, int, int, Optional[Size]]]:
    """Lines `clip num_frames (h,w,c) [start_frame]` (BasicSR: 3 fields; KAIR: 4).

    Returns (clip, num_frames, start_frame, (h, w) or None when the size field is not parseable).
    """
    return read_meta_info(path, key, _clip_line, '"clip num_frames (h,w,c) [start_frame]"', 'clips')


def check_frames(prefix: str, frames: Sequence[Tuple[str, str, str, Optional[str]]], scale: Optional[int],
                 gt_size: Optional[Patch], spike: Optional[SpikeSource], icc: str) -> Dict[str, Tuple[int, int]]:
    """Header checks of video frames `(clip, gt_path, lq_path, spike_path)`; one UserError line per bad file, then
    what the section's `icc` says of frames with a non-sRGB colour profile (`colour_profiles`).
    Returns the (h, w) of every GT and LQ frame, read once here (`cache_data` sizes its buffer from them).

    Training (`gt_size` given): GT frames exactly `scale` x the LQ frames and at least gt_size.
    Evaluation: GT frames an integer multiple of the LQ frames (the same factor on both axes) and
    large enough for SSIM (video models score whole frames: no border crop). Every frame of a clip
    must have the clip's size (the one most of its frames have); spike files must match the LQ frames.
    """
    problems = FileProblems()
    keys = {'gt': f'{prefix}.dataroot_gt', 'lq': f'{prefix}.dataroot_lq', 'spike': f'{prefix}.dataroot_spike'}
    gt_sizes = image_sizes([f[1] for f in frames])
    lq_sizes = image_sizes([f[2] for f in frames])
    usual: Dict[str, Counter] = {}
    for (clip, *_), gs, ls in zip(frames, gt_sizes, lq_sizes):
        if not isinstance(gs, str) and not isinstance(ls, str):
            usual.setdefault(clip, Counter())[(gs, ls)] += 1
    clip_size = {clip: counts.most_common(1)[0][0] for clip, counts in usual.items()}
    if scale is not None:
        mismatch = scale_mismatch([(f[1], gs, f[2], ls) for f, gs, ls in zip(frames, gt_sizes, lq_sizes)
                                   if not isinstance(gs, str) and not isinstance(ls, str)], scale, prefix, 'GT frame')
        if mismatch:
            raise UserError(mismatch)
    spike_jobs = []
    for (clip, gp, lp, sp), gs, ls in zip(frames, gt_sizes, lq_sizes):
        if isinstance(gs, str) or isinstance(ls, str):
            if isinstance(gs, str):
                problems.add(keys['gt'], gp, gs)
            if isinstance(ls, str):
                problems.add(keys['lq'], lp, ls)
            continue
        ref_gt, ref_lq = clip_size[clip]
        if gs != ref_gt:
            problems.add(keys['gt'], gp, f'{fmt(gs)} but the other GT frames of clip {clip} are {fmt(ref_gt)}; '
                                         f'the frames of a clip must have one size')
            continue
        if ls != ref_lq:
            problems.add(keys['lq'], lp, f'{fmt(ls)} but the other LQ frames of clip {clip} are {fmt(ref_lq)}; '
                                         f'the frames of a clip must have one size')
            continue
        if scale is not None:
            if gs != (ls[0] * scale, ls[1] * scale):
                problems.add(keys['gt'], gp, f'{fmt(gs)} but its LQ frame {lp} is {fmt(ls)}; for training GT frames '
                                             f'must be exactly scale {scale} x the LQ frames')
                continue
        elif gs[0] % ls[0] or gs[1] % ls[1] or gs[0] // ls[0] != gs[1] // ls[1]:
            problems.add(keys['gt'], gp, f'{fmt(gs)} is not a whole multiple of its LQ frame {lp} ({fmt(ls)}) '
                                         f'with the same factor for height and width')
            continue
        if gt_size is not None:
            if not fits(gs, gt_size):
                problems.add(keys['gt'], gp, f'{fmt(gs)} is smaller than the training patch (gt_size {shown(gt_size)})')
                continue
        else:
            problem = ssim_problem(gs, 0)
            if problem:
                problems.add(keys['gt'], gp, problem)
                continue
        if spike is not None and sp is not None:
            spike_jobs.append((sp, ls))
    if spike is not None and spike_jobs:
        counts = parallel_map(lambda job: spike_header(job[0], spike.format, job[1], spike.size), spike_jobs)
        for (sp, _), count in zip(spike_jobs, counts):
            if isinstance(count, str):
                problems.add(keys['spike'], sp, count)
            elif count < spike.min_planes:
                problems.add(keys['spike'], sp, f'{count} spike planes, but spike_repr "{spike.repr}" with '
                                                f'{describe_params(spike.params)} needs at least {spike.min_planes}')
    problems.raise_if_any()
    colour_profiles([path for f in frames for path in f[1:3]], icc, prefix)
    return {path: size for f, gs, ls in zip(frames, gt_sizes, lq_sizes) for path, size in ((f[1], gs), (f[2], ls))}


def describe_params(params: Dict[str, Any]) -> str:
    return 'spike_repr_params ' + (', '.join(f'{k}={v}' for k, v in params.items()) if params else '(defaults)')


def sample_neighbors(rng: random.Random, first: int, start: int, num: int, num_frame: int,
                     interval_list: Sequence[int], random_reverse: bool) -> Tuple[List[int], bool]:
    """Frame numbers of a training clip from frame `first` of a sequence of `num` frames from `start`
    (KAIR/BasicSR): an interval from `interval_list`, the clip moved back inside the sequence when it
    would run past its end, reversed with probability 1/2 under `random_reverse`. Returns the frames
    and whether they were reversed. The draws come in a fixed order, so items stay bit-identical."""
    interval = rng.choice(interval_list)
    last_start = start + num - (num_frame - 1) * interval - 1
    if first > last_start:
        first = rng.randint(start, last_start)
    neighbors = list(range(first, first + num_frame * interval, interval))
    reverse = random_reverse and rng.random() < 0.5
    if reverse:
        neighbors.reverse()
    return neighbors, reverse


def add_noise(clean: torch.Tensor, sigma: float, seed: int) -> torch.Tensor:
    """T×3×H×W clean frames → T×4×H×W: plus gaussian noise of std sigma/255 from `seed`, then the level map."""
    level = sigma / 255.0
    noise = torch.randn(clean.shape, generator=torch.Generator().manual_seed(seed))
    t, _, h, w = clean.shape
    return torch.cat([clean + noise.mul_(level), torch.full((t, 1, h, w), level, dtype=clean.dtype)], 1)


def check_gt_size(prefix: str, gt_size: Patch, sizes: Dict[str, Tuple[int, int]], what: str) -> None:
    """Fail in the main process, not in a worker, when `gt_size` cannot be cropped from a listed `what`
    (clip, sequence) of the sizes its meta_info_file gives."""
    for name, (h, w) in sizes.items():
        if not fits((h, w), gt_size):
            raise UserError(f'{prefix}.gt_size: {shown(gt_size)} is larger than the {h}×{w} frames of {what} {name} '
                            f'(meta_info_file)')


def item_rng(key: Union[int, Tuple[int, int]]) -> Tuple[int, random.Random]:
    """The index of a training item's key and the generator its sample draws from: seeded by the key's seed
    (`(index, seed)` from the train sampler) or, for a bare index, by the index."""
    index, seed = parse_key(key)
    return index, random.Random(index if seed is None else seed)


class ClipDataset(Dataset):
    """A clip dataset keeps its validated section (`opt`) and names its keys after `prefix` (`datasets.<phase>`)."""

    def __init__(self, opt: Dict[str, Any]):
        super().__init__()
        self.opt = opt
        self.prefix: str = opt['_where']


class TrainingWindows(ClipDataset):
    """A training set of `gt_size` crops of frame windows from the clips (or sequences: `unit`) of a meta info
    file, whose frame sizes (`gt_sizes`, where the file gives them) say before any worker starts whether the
    crop fits."""

    gt_size: Patch
    gt_sizes: Dict[str, Size]
    scale = 1
    unit = 'clip'

    def check_scale(self) -> None:
        """gt_size must be a multiple of the scale on both sides."""
        if indivisible(self.gt_size, self.scale):
            raise UserError(f'{self.prefix}.gt_size: {shown(self.gt_size)} is not divisible by scale {self.scale}')

    def check_patch(self) -> None:
        """At construction: `check_scale`, and one warning line when the network's input patch is too small to
        learn from."""
        self.check_scale()
        s = self.scale
        warn_if_tiny(f'{self.prefix}.gt_size', shown(self.gt_size) + (f' / scale {s}' if s > 1 else ''),
                     self.gt_size, s)

    def check_train_options(self) -> None:
        """Fail in the main process, not in a worker, when gt_size cannot be cropped."""
        self.check_scale()
        check_gt_size(self.prefix, self.gt_size, self.gt_sizes, self.unit)


class WholeClips(ClipDataset):
    """An evaluation set: `clips` holds one entry per whole clip, read by integer index; it trains nothing."""

    clips: List[Any]
    unit = 'clips'         # what an item is, in messages
    train_type = ''        # the dataset type that trains on such data

    def check_train_options(self) -> None:
        raise UserError(f'{self.prefix}.dataset_type: {type(self).__name__} yields whole {self.unit} for evaluation; '
                        f'train with {self.train_type}')

    def __len__(self) -> int:
        return len(self.clips)

    def clip(self, index: int) -> Any:
        """The entry of clip `index` (an integer: evaluation items are never drawn with a seed)."""
        if not isinstance(index, (int, np.integer)):
            raise TypeError(f'{type(self).__name__} takes integer indices, got {index!r}')
        return self.clips[index]
