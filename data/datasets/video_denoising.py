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
from typing import Any, Dict, List, Tuple, Union


from data.datasets.clips import (GT_SIZE, INTERVALS, IO_BACKEND, IO_BACKEND_DISK, FrameStore, TrainingWindows, WholeClips,
                                 add_noise, check_folder, check_frames, frame_name_keys, window_length, item_rng,
                                 parse_meta_info, sample_neighbors, stack_tensor, to_float)
from data.datasets.transforms import augment, random_crop
from data.frame_cache import CACHE_DATA, cache_frames, frame_shapes
from data.option_checks import all_or_first, noise_level
from data.registry import DATASETS
from utils.errors import UserError
from utils.image import imread_uint, is_image_file
from utils.options import IGNORED, REQUIRED, Key, only

SIGMA = Key(REQUIRED, (int, float), noise_level)


@DATASETS.register('VideoRecurrentTrainNonblindDenoisingDataset')
class VideoRecurrentTrainNonblindDenoisingDataset(TrainingWindows):
    """Random `num_frame`-frame crops around every listed frame, noised at a per-sample level."""

    OPTIONS: Dict[str, Any] = {
        'dataroot_gt': REQUIRED,
        'dataroot_lq': IGNORED,        # KAIR's files give one; the noisy frames are made here
        'meta_info_file': REQUIRED,
        'io_backend': IO_BACKEND,
        **frame_name_keys('08d'),      # DAVIS: "05d", "jpg"
        'num_frame': window_length(6),
        'gt_size': GT_SIZE,
        'scale': Key(1, (int,), only(1, 'denoising keeps the frame size')),
        'interval_list': INTERVALS,
        'random_reverse': False,
        'use_hflip': True,
        'use_rot': True,
        'sigma_min': Key(0.0, (int, float), noise_level, 'lowest noise std (0..255), drawn uniformly per sample'),
        'sigma_max': Key(50.0, (int, float), noise_level, 'highest noise std (0..255), drawn uniformly per sample'),
        'test_mode': Key(False, (bool,), only(False, 'no clips are held out of the training set here; evaluate with '
                                                    'VideoRecurrentTestNonblindDenoisingDataset')),
    }

    def __init__(self, opt: Dict[str, Any]):
        super().__init__(opt)
        p = self.prefix
        self.num_frame, self.gt_size, self.interval_list = opt['num_frame'], opt['gt_size'], opt['interval_list']
        self.sigma_min, self.sigma_max = float(opt['sigma_min']), float(opt['sigma_max'])
        if self.sigma_min > self.sigma_max:
            raise UserError(f'{p}.sigma_min: {opt["sigma_min"]} is larger than sigma_max {opt["sigma_max"]}')
        self.check_patch()
        self.tmpl = opt['filename_tmpl']
        backend = opt['io_backend']['type']
        self.store = FrameStore(p, {'gt': opt['dataroot_gt']}, backend, opt['filename_ext'], opt['icc'])

        clips = parse_meta_info(opt['meta_info_file'], f'{p}.meta_info_file')
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
        check_frames(self.prefix, [(clip, path, path, None) for clip, path in paths], 1, self.gt_size, None,
                     self.opt['icc'])

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, key: Union[int, Tuple[int, int]]) -> Dict[str, Any]:
        index, rng = item_rng(key)
        clip, first = self.keys[index]
        num, start = self.clips[clip]
        neighbors, _ = sample_neighbors(rng, first, start, num, self.num_frame, self.interval_list,
                                        self.opt['random_reverse'])
        gts = [to_float(self.store.read('gt', f'{clip}/{i:{self.tmpl}}')) for i in neighbors]
        item_key = f'{clip}/{self.keys[index][1]:{self.tmpl}}'
        gts = random_crop(gts, self.gt_size, rng, where=f'{self.prefix} {item_key}')
        H = stack_tensor(augment(gts, self.opt['use_hflip'], self.opt['use_rot'], rng))
        sigma = rng.uniform(self.sigma_min, self.sigma_max)
        return {'L': add_noise(H, sigma, rng.getrandbits(63)), 'H': H, 'key': item_key, 'folder': clip}


@DATASETS.register('VideoRecurrentTestNonblindDenoisingDataset')
class VideoRecurrentTestNonblindDenoisingDataset(WholeClips):
    """Every clip folder of dataroot_gt, whole (or its first `num_frame` frames), noised at `sigma`.

    Clips are read when asked for, unless `cache_data` holds their decoded frames in RAM, one copy per node
    (data/frame_cache.py).
    """

    train_type = 'VideoRecurrentTrainNonblindDenoisingDataset'
    OPTIONS: Dict[str, Any] = {
        'dataroot_gt': REQUIRED,
        'dataroot_lq': IGNORED,        # KAIR gives the GT folder again
        'io_backend': IO_BACKEND_DISK,
        'num_frame': Key(-1, (int,), all_or_first('clips')),
        'sigma': SIGMA,                # noise std on the 0..255 scale
        'cache_data': CACHE_DATA,
    }

    def __init__(self, opt: Dict[str, Any]):
        super().__init__(opt)
        p = self.prefix
        num_frame = opt['num_frame']
        self.sigma = float(opt['sigma'])
        root = check_folder(opt['dataroot_gt'], f'{p}.dataroot_gt')
        self.clips: List[Tuple[str, List[str]]] = []
        for clip_dir in sorted(d for d in root.iterdir() if d.is_dir()):
            paths = sorted(str(clip_dir / f) for f in os.listdir(clip_dir) if is_image_file(f))
            if paths:
                self.clips.append((clip_dir.name, paths[:num_frame] if num_frame > 0 else paths))
        if not self.clips:
            raise UserError(f'{p}.dataroot_gt: no clip folders with images in {root}')
        sizes = check_frames(p, [(clip, path, path, None) for clip, paths in self.clips for path in paths], 1, None,
                             None, opt['icc'])
        self.cache = cache_frames(opt['cache_data'], frame_shapes([q for _, paths in self.clips for q in paths], sizes, 3),
                                  lambda path: imread_uint(path, 3, icc=opt['icc']), p)

    def __getitem__(self, index: int) -> Dict[str, Any]:
        clip, paths = self.clip(index)
        H = stack_tensor([to_float(self.cache.get(path) if self.cache is not None
                                   else imread_uint(path, 3, icc=self.opt['icc'])) for path in paths])
        return {'L': add_noise(H, self.sigma, int(index)), 'H': H, 'folder': clip,
                'lq_path': list(paths), 'gt_path': list(paths)}
