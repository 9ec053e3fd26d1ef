"""Video datasets in the GoPro/REDS layout (KAIR/BasicSR option keys), optionally with spike streams.

Layout: `<dataroot>/<clip>/<frame:{filename_tmpl}>.<filename_ext>` for GT and LQ, and
`<dataroot_spike>/<clip>/<frame>.npy|.dat` holding the spike planes recorded during that RGB frame's
exposure (see `data/spike.py`). With spikes, each LQ frame gets the spike representation appended
as extra channels, so 'L' is T×(3+S)×h×w and the network sees RGB and spikes of the same pixels.

Train items are sampled around every frame listed in `meta_info_file` (as KAIR/BasicSR do); test
items are whole clips read lazily, never cached in memory (KAIR caches every test clip as float32
on every rank, which does not fit REDS/GoPro on a normal machine).

Both datasets check their option values and the header of every frame and spike file when they are
built (`check_frames`, data/checks.py), so a bad value or file ends the run at start-up.
"""
import math
import os
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import Dataset

from data.checks import FileProblems, fmt, image_sizes, parallel_map, spike_header, ssim_problem
from data.frame_cache import CACHE_DATA, FrameCache, cache_frames, frame_shapes
from data.lmdb_util import LazyLmdbReader, check_lmdb_folder, decode_frame
from data.registry import DATASETS
from data.sampler import parse_key
from data.spike import (decode_spike_dat, min_planes, read_spike_dat, read_spike_npy, representation_channels,
                        spike_to_representation)
from data.transforms import augment, common_size, paired_crop_window
from utils.errors import UserError
from utils.image import bgr_to_rgb, imread_uint, list_images
from utils.options import REQUIRED

SPIKE_OPTIONS: Dict[str, Any] = {
    'dataroot_spike': None,        # <root>/<clip>/<frame>.npy|.dat, one file per RGB frame
    'spike_format': 'npy',         # 'npy' | 'dat'
    'spike_size': None,            # [H, W] of .dat planes; default: the LQ frame size
    'spike_repr': 'count',         # 'raw' | 'count' | 'interval' (data/spike.py)
    'spike_repr_params': {},       # e.g. {"num_bins": 4}
}

REDS_VAL_PARTITIONS = {
    'REDS4': ['000', '011', '015', '020'],
    'official': [f'{v:03d}' for v in range(240, 270)],
}


def _to_float(img: np.ndarray) -> np.ndarray:
    return img.astype(np.float32) / 255.0


def _stack_tensor(frames: Sequence[np.ndarray]) -> torch.Tensor:
    """List of HWC arrays (any strides: crops, flips, channel-reversed views) → T×C×H×W tensor of their
    dtype, in one copy per frame."""
    h, w, c = frames[0].shape
    out = np.empty((len(frames), c, h, w), dtype=frames[0].dtype)
    for t, frame in enumerate(frames):
        out[t] = frame.transpose(2, 0, 1)
    return torch.from_numpy(out)


def _check_io_backend(opt: Dict[str, Any], prefix: str, allowed: Tuple[str, ...]) -> str:
    backend = opt['io_backend']
    if not isinstance(backend, dict) or set(backend) != {'type'}:
        raise UserError(f'{prefix}.io_backend: expected {{"type": "disk"}} or {{"type": "lmdb"}}, got {backend!r}')
    kind = backend['type']
    if kind not in allowed:
        raise UserError(f'{prefix}.io_backend.type: "{kind}" is not supported here; use one of {", ".join(allowed)}')
    return kind


def _check_folder(path: Optional[str], key: str) -> Path:
    if not path or not os.path.isdir(path):
        raise UserError(f'{key}: folder not found: {path}')
    return Path(path)


class SpikeSource:
    """Reads one spike file per RGB frame and turns it into H×W×S float32 channels."""

    def __init__(self, opt: Dict[str, Any], prefix: str):
        self.prefix = prefix
        self.format = opt['spike_format']
        if self.format not in ('npy', 'dat'):
            raise UserError(f'{prefix}.spike_format: must be "npy" or "dat", got "{self.format}"')
        size = opt['spike_size']
        if size is not None and (not isinstance(size, (list, tuple)) or len(size) != 2
                                 or not all(isinstance(v, int) and v > 0 for v in size)):
            raise UserError(f'{prefix}.spike_size: must be [H, W] with positive integers, got {size!r}')
        self.size = tuple(size) if size is not None else None
        self.repr = opt['spike_repr']
        self.params = dict(opt['spike_repr_params'] or {})
        try:
            self.channels = representation_channels(self.repr, self.params)
            self.min_planes = min_planes(self.repr, self.params)
        except UserError as e:
            raise UserError(f'{prefix}.{e}') from None

    def filename(self, stem: str) -> str:
        return f'{stem}.{self.format}'

    def decode(self, source: Union[str, bytes], lq_hw: Tuple[int, int], where: str,
               window: Optional[Tuple[int, int, int]] = None) -> np.ndarray:
        """H×W×S float32 channels; `source` is a file path or (lmdb) the file's bytes; `where` names it in errors.

        `window` (top, left, size) in LQ pixels crops the planes first, so only the crop becomes float
        channels (the representations are per pixel: the same numbers as cropping afterwards), and a
        `.npy` file is memory-mapped so only the crop's pages are read.
        """
        h, w = self.size or lq_hw
        try:
            if self.format == 'npy':
                planes = (read_spike_npy(where, data=source) if isinstance(source, bytes)
                          else read_spike_npy(source, mapped=window is not None))
            elif isinstance(source, bytes):
                planes = decode_spike_dat(source, h, w, where)
            else:
                planes = read_spike_dat(source, h, w)
            if planes.shape[1:] != tuple(lq_hw):
                raise UserError(f'spike frames are {planes.shape[1]}×{planes.shape[2]} '
                                f'but the LQ frames are {lq_hw[0]}×{lq_hw[1]}')
            if window is not None:
                top, left, size = window
                planes = planes[:, top:top + size, left:left + size]
            return spike_to_representation(planes, self.repr, **self.params)
        except UserError as e:
            raise UserError(f'{self.prefix}.dataroot_spike: {where}: {e}') from None


def _check_bool(opt: Dict[str, Any], prefix: str, *keys: str) -> None:
    for key in keys:
        if not isinstance(opt[key], bool):
            raise UserError(f'{prefix}.{key}: must be true or false, got {opt[key]!r}')


def check_frames(prefix: str, frames: Sequence[Tuple[str, str, str, Optional[str]]], scale: Optional[int],
                 gt_size: Optional[int], spike: Optional['SpikeSource']) -> Dict[str, Tuple[int, int]]:
    """Header checks of video frames `(clip, gt_path, lq_path, spike_path)`; one UserError line per bad file.
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
            if min(gs) < gt_size:
                problems.add(keys['gt'], gp, f'{fmt(gs)} is smaller than the training patch (gt_size {gt_size})')
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
                                                f'{_describe(spike.params)} needs at least {spike.min_planes}')
    problems.raise_if_any()
    return {path: size for f, gs, ls in zip(frames, gt_sizes, lq_sizes) for path, size in ((f[1], gs), (f[2], ls))}


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


def noise_level_option(opt: Dict[str, Any], prefix: str, key: str) -> float:
    """A noise std on the 0..255 scale; one line naming `<prefix>.<key>` when it is not a number >= 0."""
    v = opt[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise UserError(f'{prefix}.{key}: must be a number >= 0 (noise std on the 0..255 scale), got {v!r}')
    return float(v)


def add_noise(clean: torch.Tensor, sigma: float, seed: int) -> torch.Tensor:
    """T×3×H×W clean frames → T×4×H×W: plus gaussian noise of std sigma/255 from `seed`, then the level map."""
    level = sigma / 255.0
    noise = torch.randn(clean.shape, generator=torch.Generator().manual_seed(seed))
    t, _, h, w = clean.shape
    return torch.cat([clean + noise.mul_(level), torch.full((t, 1, h, w), level, dtype=clean.dtype)], 1)


def check_gt_size(prefix: str, gt_size: int, sizes: Dict[str, Tuple[int, int]], what: str) -> None:
    """Fail in the main process, not in a worker, when `gt_size` cannot be cropped from a listed `what`
    (clip, sequence) of the sizes its meta_info_file gives."""
    for name, (h, w) in sizes.items():
        if gt_size > min(h, w):
            raise UserError(f'{prefix}.gt_size: {gt_size} is larger than the {h}×{w} frames of {what} {name} '
                            f'(meta_info_file)')


def _describe(params: Dict[str, Any]) -> str:
    return 'spike_repr_params ' + (', '.join(f'{k}={v}' for k, v in params.items()) if params else '(defaults)')


def _parse_meta_info(path: str, key: str) -> List[Tuple[str, int, int, Optional[Tuple[int, int]]]]:
    """Lines `clip num_frames (h,w,c) [start_frame]` (BasicSR: 3 fields; KAIR: 4).

    Returns (clip, num_frames, start_frame, (h, w) or None when the size field is not parseable).
    """
    if not isinstance(path, str) or not os.path.isfile(path):
        raise UserError(f'{key}: file not found: {path}')
    clips = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            try:
                if len(fields) not in (3, 4):
                    raise ValueError
                clip, num, start = fields[0], int(fields[1]), int(fields[3]) if len(fields) == 4 else 0
                if num < 1 or start < 0:
                    raise ValueError
            except ValueError:
                raise UserError(f'{key}: {path}:{lineno}: expected "clip num_frames (h,w,c) [start_frame]", '
                                f'got "{line.strip()}"') from None
            size = re.fullmatch(r'\((\d+),(\d+)(?:,\d+)?\)', fields[2])
            clips.append((clip, num, start, (int(size[1]), int(size[2])) if size else None))
    if not clips:
        raise UserError(f'{key}: no clips listed in {path}')
    return clips


@DATASETS.register('VideoRecurrentTrainDataset', 'video_train')
class VideoRecurrentTrainDataset(Dataset):
    """Random `num_frame`-frame crops around every frame of the listed clips (GoPro/REDS training).

    Randomness (interval, start clamp, reverse, crop, flips) comes only from the key's seed: keys are
    `(index, seed)` from the train sampler, or a plain index (then seeded by the index).
    """

    OPTIONS: Dict[str, Any] = {
        'dataroot_gt': REQUIRED,
        'dataroot_lq': REQUIRED,
        'meta_info_file': REQUIRED,
        'filename_tmpl': '08d',
        'filename_ext': 'png',
        'val_partition': 'REDS4',      # REDS clips held out for validation: 'REDS4' | 'official'
        'test_mode': False,            # True keeps only the val_partition clips
        'io_backend': {'type': 'disk'},
        'num_frame': 6,
        'gt_size': 256,
        'scale': 1,
        'interval_list': [1],
        'random_reverse': False,
        'use_hflip': True,
        'use_rot': True,
        'cache_data': CACHE_DATA,      # decoded frames in RAM, one copy per node (data/frame_cache.py), disk backend
        **SPIKE_OPTIONS,
    }

    def __init__(self, opt: Dict[str, Any]):
        super().__init__()
        self.opt = opt
        p = self.prefix = opt['_where']
        self.scale, self.gt_size, self.num_frame = opt['scale'], opt['gt_size'], opt['num_frame']
        for key in ('scale', 'gt_size', 'num_frame'):
            if not isinstance(opt[key], int) or isinstance(opt[key], bool) or opt[key] < 1:
                raise UserError(f'{p}.{key}: must be a positive integer, got {opt[key]!r}')
        self.interval_list = opt['interval_list']
        if (not isinstance(self.interval_list, list) or not self.interval_list
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in self.interval_list)):
            raise UserError(f'{p}.interval_list: must be a non-empty list of positive integers, got {opt["interval_list"]!r}')
        if self.gt_size % self.scale:
            raise UserError(f'{p}.gt_size: {self.gt_size} is not divisible by scale {self.scale}')
        _check_bool(opt, p, 'test_mode', 'random_reverse', 'use_hflip', 'use_rot')
        self.tmpl, self.ext = opt['filename_tmpl'], opt['filename_ext']
        try:
            format(0, self.tmpl)
        except (ValueError, TypeError):
            raise UserError(f'{p}.filename_tmpl: not an integer format spec like "08d": {self.tmpl!r}') from None
        if not isinstance(self.ext, str) or not self.ext or self.ext.startswith('.'):
            raise UserError(f'{p}.filename_ext: expected an extension without the dot, like "png", got {self.ext!r}')

        self.backend = _check_io_backend(opt, p, ('disk', 'lmdb'))
        self.spike = SpikeSource(opt, p) if opt['dataroot_spike'] else None
        self.spike_channels = self.spike.channels if self.spike else 0
        roots = {'gt': opt['dataroot_gt'], 'lq': opt['dataroot_lq']}
        if self.spike:
            roots['spike'] = opt['dataroot_spike']
        self.roots = {}
        for name, path in roots.items():
            if self.backend == 'lmdb':
                check_lmdb_folder(path, f'{p}.dataroot_{name}')
                self.roots[name] = Path(path)
            else:
                self.roots[name] = _check_folder(path, f'{p}.dataroot_{name}')
        self.lmdb = LazyLmdbReader({k: str(v) for k, v in self.roots.items()}) if self.backend == 'lmdb' else None

        clips = self._select_clips(_parse_meta_info(opt['meta_info_file'], f'{p}.meta_info_file'))
        self.gt_sizes = {clip: size for clip, _, _, size in clips if size is not None}
        clips = [c[:3] for c in clips]
        span = (self.num_frame - 1) * max(self.interval_list) + 1
        for clip, num, _ in clips:
            if num < span:
                raise UserError(f'{p}.num_frame: {self.num_frame} frames at interval {max(self.interval_list)} '
                                f'need {span} frames but clip {clip} has {num}')
        if self.backend == 'disk':
            for clip, num, start in clips:
                self._check_clip_files(clip, num, start)
        self.clips = {clip: (num, start) for clip, num, start in clips}
        self.keys = [(clip, i) for clip, num, start in clips for i in range(start, start + num)]
        self.check_train_options()
        self.check_files()
        self.cache = self._fill_cache()

    def check_files(self) -> None:
        """Header and size of every listed GT/LQ frame and spike file (disk backend; see check_frames)."""
        self.header_sizes: Dict[str, Tuple[int, int]] = {}
        if self.backend != 'disk':
            return  # frames live in the LMDB; they are checked as they are read
        frames = []
        for clip, i in self.keys:
            frame = f'{i:{self.tmpl}}'
            frames.append((clip, str(self.roots['gt'] / clip / f'{frame}.{self.ext}'),
                           str(self.roots['lq'] / clip / f'{frame}.{self.ext}'),
                           str(self.roots['spike'] / clip / self.spike.filename(frame)) if self.spike else None))
        self.header_sizes = check_frames(self.prefix, frames, self.scale, self.gt_size, self.spike)

    def _select_clips(self, clips: List[tuple]) -> List[tuple]:
        """Drop REDS's validation clips (keep only them in test_mode), as KAIR does for every data set.

        The held-out names are REDS clip numbers ('000', '011', ...); GoPro-style clip names never
        match them, so for other data sets this changes nothing unless test_mode is set.
        """
        opt, p = self.opt, self.prefix
        if opt['val_partition'] not in REDS_VAL_PARTITIONS:
            raise UserError(f'{p}.val_partition: must be "REDS4" or "official", got "{opt["val_partition"]}"')
        held_out = REDS_VAL_PARTITIONS[opt['val_partition']]
        keep = [c for c in clips if (c[0] in held_out) == bool(opt['test_mode'])]
        if not keep:
            raise UserError(f'{p}.meta_info_file: no clips left with test_mode={opt["test_mode"]} '
                            f'(val_partition {opt["val_partition"]} holds out clips {", ".join(held_out)})')
        return keep

    def _check_clip_files(self, clip: str, num: int, start: int) -> None:
        """Catch missing clips/frames at construction rather than in a worker mid-training."""
        exts = {'gt': self.ext, 'lq': self.ext, 'spike': self.spike.format if self.spike else ''}
        for name, root in self.roots.items():
            folder = root / clip
            if not folder.is_dir():
                raise UserError(f'{self.prefix}.dataroot_{name}: clip {clip} listed in meta_info_file '
                                f'not found: {folder}')
            present = set(os.listdir(folder))
            for i in range(start, start + num):
                fname = f'{i:{self.tmpl}}.{exts[name]}'
                if fname not in present:
                    raise UserError(f'{self.prefix}.dataroot_{name}: frame {clip}/{i:{self.tmpl}} not found: '
                                    f'{folder / fname}')

    def check_train_options(self) -> None:
        """Fail in the main process, not in a worker, when gt_size cannot be cropped."""
        if self.gt_size % self.scale:
            raise UserError(f'{self.prefix}.gt_size: {self.gt_size} is not divisible by scale {self.scale}')
        for clip, (h, w) in self.gt_sizes.items():
            if self.gt_size > min(h, w):
                raise UserError(f'{self.prefix}.gt_size: {self.gt_size} is larger than the {h}×{w} frames '
                                f'of clip {clip} (meta_info_file)')

    def __len__(self) -> int:
        return len(self.keys)

    def _frame_path(self, name: str, clip: str, frame: str) -> str:
        return str(self.roots[name] / clip / f'{frame}.{self.ext}')

    def _read_bgr(self, name: str, clip: str, frame: str) -> np.ndarray:
        """HWC uint8 BGR (`bgr_to_rgb` after cropping): from the cache, the LMDB (PNG or raw) or the file."""
        where = f'{self.prefix}.dataroot_{name}'
        if self.lmdb is not None:
            key = f'{clip}/{frame}'
            return decode_frame(self.lmdb.get(name, key, where), f'{where}: key {key} in {self.roots[name]}')
        path = self._frame_path(name, clip, frame)
        if self.cache is not None:
            return self.cache.get(path)
        if not os.path.isfile(path):
            raise UserError(f'{where}: frame {clip}/{frame} not found: {path}')
        return imread_uint(path, 3, bgr=True)

    def _fill_cache(self) -> Optional[FrameCache]:
        """`cache_data`: every listed GT and LQ frame decoded into RAM, one copy per node (spike streams are read
        per sample)."""
        if not self.opt['cache_data']:
            return None
        if self.backend == 'lmdb':
            if self.opt['cache_data'] == 'auto':
                return None  # frames in an LMDB are read from mapped memory already
            raise UserError(f'{self.prefix}.cache_data: works with io_backend disk; an LMDB is read from mapped '
                            f'memory already, store its frames raw (scripts/make_lmdb.py --compress raw) to skip '
                            f'decoding them')
        paths = [self._frame_path(name, clip, f'{i:{self.tmpl}}') for name in ('gt', 'lq') for clip, i in self.keys]
        return cache_frames(self.opt['cache_data'], frame_shapes(paths, self.header_sizes, 3),
                            lambda path: imread_uint(path, 3, bgr=True), self.prefix)

    def _read_spike(self, clip: str, frame: str, lq_hw: Tuple[int, int], window: Tuple[int, int, int]) -> np.ndarray:
        if self.lmdb is not None:
            key = f'{clip}/{frame}'
            raw = self.lmdb.get('spike', key, f'{self.prefix}.dataroot_spike')
            return self.spike.decode(raw, lq_hw, f'{self.roots["spike"]}:{key}', window)
        path = self.roots['spike'] / clip / self.spike.filename(frame)
        return self.spike.decode(str(path), lq_hw, str(path), window)

    def __getitem__(self, key: Union[int, Tuple[int, int]]) -> Dict[str, Any]:
        """Frames are cropped as decoded (uint8 BGR) and leave as uint8 T×3×h×w tensors; with spikes, L holds
        the crop's RGB scaled to [0, 1] and the spike channels, float32."""
        index, seed = parse_key(key)
        rng = random.Random(index if seed is None else seed)
        clip, first = self.keys[index]
        num, start = self.clips[clip]

        neighbors, reverse = sample_neighbors(rng, first, start, num, self.num_frame, self.interval_list,
                                              self.opt['random_reverse'])
        frames = [f'{i:{self.tmpl}}' for i in neighbors]
        gts = [self._read_bgr('gt', clip, frame) for frame in frames]
        lqs = [self._read_bgr('lq', clip, frame) for frame in frames]

        item_key = f'{clip}/{self.keys[index][1]:{self.tmpl}}'
        where = f'{self.prefix} {item_key}'
        lq_hw = common_size(lqs, 'low-quality', where)
        top, left = paired_crop_window(common_size(gts, 'ground-truth', where), lq_hw, self.gt_size, self.scale, rng,
                                       where)
        lq_size, t, l = self.gt_size // self.scale, top * self.scale, left * self.scale
        gts = [bgr_to_rgb(img[t:t + self.gt_size, l:l + self.gt_size]) for img in gts]
        lqs = [bgr_to_rgb(img[top:top + lq_size, left:left + lq_size]) for img in lqs]
        if self.spike:
            for j, frame in enumerate(frames):
                spikes = self._read_spike(clip, frame, lq_hw, (top, left, lq_size))
                if reverse:  # played backwards, each exposure's spike channels run backwards too
                    spikes = spikes[:, :, ::-1]
                lqs[j] = np.concatenate([_to_float(lqs[j]), spikes], axis=2)
        out = augment(lqs + gts, self.opt['use_hflip'], self.opt['use_rot'], rng, copy=False)
        n = len(lqs)
        return {'L': _stack_tensor(out[:n]), 'H': _stack_tensor(out[n:]), 'key': item_key, 'folder': clip}


@DATASETS.register('VideoRecurrentTestDataset', 'video_test')
class VideoRecurrentTestDataset(Dataset):
    """One whole clip per index: every clip folder of dataroot_lq with its GT (and spike) frames.

    `num_frame` -1 takes all frames; a positive value keeps only the first `num_frame` frames of each
    clip (quick validation). `cache_data` is accepted for KAIR option files but ignored: clips are
    always read lazily, one per `__getitem__`.
    """

    OPTIONS: Dict[str, Any] = {
        'dataroot_gt': REQUIRED,
        'dataroot_lq': REQUIRED,
        'io_backend': {'type': 'disk'},
        'num_frame': -1,
        'cache_data': False,
        'sigma': None,                 # KAIR's non-blind denoising test (VRT 008): L = GT + noise + level map
        **SPIKE_OPTIONS,
    }

    def __init__(self, opt: Dict[str, Any]):
        super().__init__()
        self.opt = opt
        p = self.prefix = opt['_where']
        _check_io_backend(opt, p, ('disk',))
        self.sigma = None if opt['sigma'] is None else noise_level_option(opt, p, 'sigma')
        if self.sigma is not None and opt['dataroot_spike']:
            raise UserError(f'{p}.sigma: noisy clips are made from the GT frames; they take no spike streams')
        num_frame = opt['num_frame']
        if not isinstance(num_frame, int) or not (num_frame == -1 or num_frame > 0):
            raise UserError(f'{p}.num_frame: must be -1 (whole clips) or a positive integer, got {num_frame!r}')
        _check_bool(opt, p, 'cache_data')
        self.spike = SpikeSource(opt, p) if opt['dataroot_spike'] else None
        self.spike_channels = self.spike.channels if self.spike else 0
        lq_root = _check_folder(opt['dataroot_lq'], f'{p}.dataroot_lq')
        gt_root = _check_folder(opt['dataroot_gt'], f'{p}.dataroot_gt')
        spike_root = _check_folder(opt['dataroot_spike'], f'{p}.dataroot_spike') if self.spike else None

        self.clips: List[Tuple[str, List[str], List[str], List[str]]] = []
        for clip_dir in sorted(d for d in lq_root.iterdir() if d.is_dir()):
            clip = clip_dir.name
            lq_paths = [str(x) for x in list_images(str(clip_dir))]
            if not lq_paths:
                continue
            if num_frame > 0:
                lq_paths = lq_paths[:num_frame]
            gt_paths, spike_paths = [], []
            for lq_path in lq_paths:
                name = os.path.basename(lq_path)
                gt_path = gt_root / clip / name
                if not gt_path.is_file():
                    raise UserError(f'{p}.dataroot_gt: frame {clip}/{name} (present in dataroot_lq) not found: {gt_path}')
                gt_paths.append(str(gt_path))
                if spike_root is not None:
                    spike_path = spike_root / clip / self.spike.filename(os.path.splitext(name)[0])
                    if not spike_path.is_file():
                        raise UserError(f'{p}.dataroot_spike: spikes of frame {clip}/{name} not found: {spike_path}')
                    spike_paths.append(str(spike_path))
            self.clips.append((clip, lq_paths, gt_paths, spike_paths))
        if not self.clips:
            raise UserError(f'{p}.dataroot_lq: no clip folders with images in {lq_root}')
        self.check_files()

    def check_files(self) -> None:
        """Header and size of every frame and spike file of every clip (see check_frames)."""
        frames = [(clip, gt, lq, spikes[i] if spikes else None)
                  for clip, lqs, gts, spikes in self.clips for i, (lq, gt) in enumerate(zip(lqs, gts))]
        check_frames(self.prefix, frames, None, None, self.spike)

    def check_train_options(self) -> None:
        raise UserError(f'{self.prefix}.dataset_type: VideoRecurrentTestDataset yields whole clips for '
                        f'evaluation; train with VideoRecurrentTrainDataset')

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, index: int) -> Dict[str, Any]:
        if not isinstance(index, (int, np.integer)):
            raise TypeError(f'VideoRecurrentTestDataset takes integer indices, got {index!r}')
        clip, lq_paths, gt_paths, spike_paths = self.clips[index]
        if self.sigma is not None:  # as KAIR: the LQ folder is not read, noise is added to the GT frames
            H = _stack_tensor([_to_float(imread_uint(path, 3)) for path in gt_paths])
            return {'L': add_noise(H, self.sigma, int(index)), 'H': H, 'folder': clip,
                    'lq_path': list(gt_paths), 'gt_path': list(gt_paths)}
        lqs = []
        for i, path in enumerate(lq_paths):
            lq = _to_float(imread_uint(path, 3))
            if self.spike:
                lq = np.concatenate([lq, self.spike.decode(spike_paths[i], lq.shape[:2], spike_paths[i])], axis=2)
            lqs.append(lq)
        gts = [_to_float(imread_uint(path, 3)) for path in gt_paths]
        return {'L': _stack_tensor(lqs), 'H': _stack_tensor(gts), 'folder': clip,
                'lq_path': list(lq_paths), 'gt_path': list(gt_paths)}
