"""Non-blind video denoising (KAIR's VRT 008 / RVRT 006 on DAVIS): clean frames in, noisy frames made here.

Layout (DAVIS `JPEGImages/480p`, Set8): `<dataroot_gt>/<clip>/<frame:{filename_tmpl}>.<filename_ext>`,
e.g. `bear/00000.jpg` with filename_tmpl "05d", filename_ext "jpg"; training lists its clips in
`meta_info_file` (`clip num_frames (h,w,c) [start_frame]`). With io_backend lmdb the key of a frame
is `<clip>/<frame>` (scripts/make_lmdb.py --layout reds).

L = H + gaussian noise of std sigma (0..255 scale; not clipped or quantised, as in KAIR), with the
noise-level map sigma/255 appended to every frame as a 4th channel: L is T×4×H×W, H is T×3×H×W
(VRT/RVRT with nonblind_denoising take the map as an extra input channel).
- Training: sigma uniform in [sigma_min, sigma_max] per sample; sigma, the noise and the frames
  (interval, reverse, crop, flips) all come from the key's seed.
- Evaluation: one `sigma`; the noise of clip i is drawn from seed i, so every run, rank and loader
  worker scores the same noisy clips (KAIR reseeds with 0 for every clip).
"""
import os
import random
from typing import Any, Dict, List, Tuple, Union

import numpy as np
from torch.utils.data import Dataset

from data.registry import DATASETS
from data.sampler import parse_key
from data.transforms import augment, random_crop
from data.video_datasets import (_check_bool, _check_folder, _check_io_backend, _parse_meta_info, _stack_tensor,
                                 _to_float, add_noise, check_frames, check_gt_size, noise_level_option,
                                 sample_neighbors)
from data.vimeo_datasets import FrameStore, _check_names, _positive_int
from utils.errors import UserError
from utils.image import imread_uint, is_image_file
from utils.options import IGNORED, REQUIRED


@DATASETS.register('VideoRecurrentTrainNonblindDenoisingDataset')
class VideoRecurrentTrainNonblindDenoisingDataset(Dataset):
    """Random `num_frame`-frame crops around every listed frame, noised at a per-sample level."""

    OPTIONS: Dict[str, Any] = {
        'dataroot_gt': REQUIRED,
        'dataroot_lq': IGNORED,        # KAIR's files give one; the noisy frames are made here
        'meta_info_file': REQUIRED,
        'io_backend': {'type': 'disk'},
        'filename_tmpl': '08d',        # DAVIS: "05d"
        'filename_ext': 'png',         # DAVIS: "jpg"
        'num_frame': 6,
        'gt_size': 256,
        'scale': 1,
        'interval_list': [1],
        'random_reverse': False,
        'use_hflip': True,
        'use_rot': True,
        'sigma_min': 0.0,              # noise std range on the 0..255 scale
        'sigma_max': 50.0,
        'test_mode': False,
    }

    def __init__(self, opt: Dict[str, Any]):
        super().__init__()
        self.opt = opt
        p = self.prefix = opt['_where']
        self.num_frame = _positive_int(opt, p, 'num_frame')
        self.gt_size = _positive_int(opt, p, 'gt_size')
        if opt['scale'] != 1:
            raise UserError(f'{p}.scale: denoising keeps the frame size: scale must be 1, got {opt["scale"]!r}')
        self.interval_list = opt['interval_list']
        if (not isinstance(self.interval_list, list) or not self.interval_list
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in self.interval_list)):
            raise UserError(f'{p}.interval_list: must be a non-empty list of positive integers, got '
                            f'{self.interval_list!r}')
        _check_bool(opt, p, 'random_reverse', 'use_hflip', 'use_rot', 'test_mode')
        if opt['test_mode']:
            raise UserError(f'{p}.test_mode: no clips are held out of the training set here; evaluate with '
                            f'VideoRecurrentTestNonblindDenoisingDataset')
        self.sigma_min = noise_level_option(opt, p, 'sigma_min')
        self.sigma_max = noise_level_option(opt, p, 'sigma_max')
        if self.sigma_min > self.sigma_max:
            raise UserError(f'{p}.sigma_min: {opt["sigma_min"]} is larger than sigma_max {opt["sigma_max"]}')
        self.tmpl, ext = _check_names(opt, p)
        backend = _check_io_backend(opt, p, ('disk', 'lmdb'))
        self.store = FrameStore(p, {'gt': opt['dataroot_gt']}, backend, ext)

        clips = _parse_meta_info(opt['meta_info_file'], f'{p}.meta_info_file')
        span = (self.num_frame - 1) * max(self.interval_list) + 1
        for clip, num, _, _ in clips:
            if num < span:
                raise UserError(f'{p}.num_frame: {self.num_frame} frames at interval {max(self.interval_list)} '
                                f'need {span} frames but clip {clip} has {num}')
        self.clips = {clip: (num, start) for clip, num, start, _ in clips}
        self.gt_sizes = {clip: size for clip, _, _, size in clips if size is not None}
        self.keys = [(clip, i) for clip, num, start, _ in clips for i in range(start, start + num)]
        if backend == 'disk':
            for clip in self.clips:
                if not (self.store.roots['gt'] / clip).is_dir():
                    raise UserError(f'{p}.dataroot_gt: clip {clip} listed in meta_info_file not found: '
                                    f'{self.store.roots["gt"] / clip}')
        self.check_train_options()
        self.check_files()

    def check_files(self) -> None:
        """Header and size of every listed frame (disk backend; see check_frames)."""
        if self.store.backend != 'disk':
            return
        paths = [(clip, self.store.path('gt', f'{clip}/{i:{self.tmpl}}')) for clip, i in self.keys]
        check_frames(self.prefix, [(clip, path, path, None) for clip, path in paths], 1, self.gt_size, None)

    def check_train_options(self) -> None:
        check_gt_size(self.prefix, self.gt_size, self.gt_sizes, 'clip')

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, key: Union[int, Tuple[int, int]]) -> Dict[str, Any]:
        index, seed = parse_key(key)
        rng = random.Random(index if seed is None else seed)
        clip, first = self.keys[index]
        num, start = self.clips[clip]
        neighbors, _ = sample_neighbors(rng, first, start, num, self.num_frame, self.interval_list,
                                        self.opt['random_reverse'])
        gts = [_to_float(self.store.read('gt', f'{clip}/{i:{self.tmpl}}')) for i in neighbors]
        item_key = f'{clip}/{self.keys[index][1]:{self.tmpl}}'
        gts = random_crop(gts, self.gt_size, rng, where=f'{self.prefix} {item_key}')
        H = _stack_tensor(augment(gts, self.opt['use_hflip'], self.opt['use_rot'], rng))
        sigma = rng.uniform(self.sigma_min, self.sigma_max)
        return {'L': add_noise(H, sigma, rng.getrandbits(63)), 'H': H, 'key': item_key, 'folder': clip}


@DATASETS.register('VideoRecurrentTestNonblindDenoisingDataset')
class VideoRecurrentTestNonblindDenoisingDataset(Dataset):
    """Every clip folder of dataroot_gt, whole (or its first `num_frame` frames), noised at `sigma`.

    `cache_data` is accepted for KAIR option files and ignored: clips are read when asked for.
    """

    OPTIONS: Dict[str, Any] = {
        'dataroot_gt': REQUIRED,
        'dataroot_lq': IGNORED,        # KAIR gives the GT folder again
        'io_backend': {'type': 'disk'},
        'num_frame': -1,
        'sigma': REQUIRED,             # noise std on the 0..255 scale
        'cache_data': False,
    }

    def __init__(self, opt: Dict[str, Any]):
        super().__init__()
        self.opt = opt
        p = self.prefix = opt['_where']
        _check_io_backend(opt, p, ('disk',))
        num_frame = opt['num_frame']
        if not isinstance(num_frame, int) or isinstance(num_frame, bool) or not (num_frame == -1 or num_frame > 0):
            raise UserError(f'{p}.num_frame: must be -1 (whole clips) or a positive integer, got {num_frame!r}')
        _check_bool(opt, p, 'cache_data')
        self.sigma = noise_level_option(opt, p, 'sigma')
        root = _check_folder(opt['dataroot_gt'], f'{p}.dataroot_gt')
        self.clips: List[Tuple[str, List[str]]] = []
        for clip_dir in sorted(d for d in root.iterdir() if d.is_dir()):
            paths = sorted(str(clip_dir / f) for f in os.listdir(clip_dir) if is_image_file(f))
            if paths:
                self.clips.append((clip_dir.name, paths[:num_frame] if num_frame > 0 else paths))
        if not self.clips:
            raise UserError(f'{p}.dataroot_gt: no clip folders with images in {root}')
        check_frames(p, [(clip, path, path, None) for clip, paths in self.clips for path in paths], 1, None, None)

    def check_train_options(self) -> None:
        raise UserError(f'{self.prefix}.dataset_type: VideoRecurrentTestNonblindDenoisingDataset yields whole clips '
                        f'for evaluation; train with VideoRecurrentTrainNonblindDenoisingDataset')

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, index: int) -> Dict[str, Any]:
        if not isinstance(index, (int, np.integer)):
            raise TypeError(f'VideoRecurrentTestNonblindDenoisingDataset takes integer indices, got {index!r}')
        clip, paths = self.clips[index]
        H = _stack_tensor([_to_float(imread_uint(path, 3)) for path in paths])
        return {'L': add_noise(H, self.sigma, int(index)), 'H': H, 'folder': clip,
                'lq_path': list(paths), 'gt_path': list(paths)}
