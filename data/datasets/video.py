"""Video datasets in the GoPro/REDS layout (KAIR/BasicSR option keys), optionally with spike streams.

Layout: `<dataroot>/<clip>/<frame:{filename_tmpl}>.<filename_ext>` for GT and LQ, and
`<dataroot_spike>/<clip>/<frame>.npy|.dat` holding the spike planes recorded during that RGB frame's
exposure (see `data/datasets/spike.py`). With spikes, each LQ frame gets the spike representation appended
as extra channels, so 'L' is T×(3+S)×h×w and the network sees RGB and spikes of the same pixels.

Train items are sampled around every frame listed in `meta_info_file` (as KAIR/BasicSR do); test
items are whole clips read when asked for, or with `cache_data` from decoded uint8 frames held once
per node (KAIR caches every test clip as float32 on every rank, which does not fit REDS/GoPro on a
normal machine).

The options check each value alone (the `Key`s in OPTIONS); both datasets check what relates several
keys and the header of every frame and spike file when they are built (`check_frames`, data/datasets/clips.py),
so a bad value or file ends the run at start-up. What they share with the other clip datasets is in
data/datasets/clips.py.
"""
import os
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from data.datasets.clips import (GT_SIZE, INTERVALS, IO_BACKEND, IO_BACKEND_DISK, NOISE_STD, FrameStore, TrainingWindows,
                                 WholeClips, add_noise, check_folder, check_frames, frame_name_keys, window_length,
                                 item_rng, parse_meta_info, positive, sample_neighbors, stack_tensor, to_float)
from data.datasets.spike import SPIKE_OPTIONS, SpikeSource
from data.datasets.transforms import augment, common_size, paired_crop_window
from data.frame_cache import CACHE_DATA, FrameCache, cache_frames, frame_shapes
from data.lmdb_util import decode_frame
from data.option_checks import all_or_first
from data.patches import divided, patch_hw
from data.registry import DATASETS
from utils.errors import UserError
from utils.image import bgr_to_rgb, imread_uint, list_images
from utils.options.foreign import Foreign, Only
from utils.options import REQUIRED, Key, one_of, rule

REDS_VAL_PARTITIONS = {
    'REDS4': ['000', '011', '015', '020'],
    'official': [f'{v:03d}' for v in range(240, 270)],
}


@DATASETS.register('VideoRecurrentTrainDataset', 'video_train', 'REDSRecurrentDataset',
                   foreign=[Foreign('REDSRecurrentDataset', unneeded={'dataroot_flow': None})])
class VideoRecurrentTrainDataset(TrainingWindows):
    """Random `num_frame`-frame crops around every frame of the listed clips (GoPro/REDS training; BasicSR calls
    it REDSRecurrentDataset: BasicVSR, IconVSR, BasicVSR++ train on 15/30-frame windows of it).

    Randomness (interval, start clamp, reverse, crop, flips) comes only from the key's seed: keys are
    `(index, seed)` from the train sampler, or a plain index (then seeded by the index).
    """

    OPTIONS: Dict[str, Any] = {
        'dataroot_gt': REQUIRED,
        'dataroot_lq': REQUIRED,
        'meta_info_file': REQUIRED,
        **frame_name_keys('08d'),
        'val_partition': Key('REDS4', (str,), one_of(*REDS_VAL_PARTITIONS)),  # REDS clips held out for validation
        'test_mode': False,            # True keeps only the val_partition clips
        'io_backend': IO_BACKEND,
        'num_frame': window_length(6),
        'gt_size': GT_SIZE,
        'scale': positive(1),
        'interval_list': INTERVALS,
        'random_reverse': False,
        'use_hflip': True,
        'use_rot': True,
        'cache_data': CACHE_DATA,      # decoded frames in RAM, one copy per node (data/frame_cache.py), disk backend
        **SPIKE_OPTIONS,
    }

    def __init__(self, opt: Dict[str, Any]):
        super().__init__(opt)
        p = self.prefix
        self.scale, self.gt_size, self.num_frame = opt['scale'], opt['gt_size'], opt['num_frame']
        self.interval_list = opt['interval_list']
        self.check_patch()
        self.tmpl, self.ext = opt['filename_tmpl'], opt['filename_ext']
        self.backend = opt['io_backend']['type']
        self.spike = SpikeSource(opt, p) if opt['dataroot_spike'] else None
        self.spike_channels = self.spike.channels if self.spike else 0
        roots = {'gt': opt['dataroot_gt'], 'lq': opt['dataroot_lq']}
        if self.spike:
            roots['spike'] = opt['dataroot_spike']
        store = FrameStore(p, roots, self.backend, self.ext, opt['icc'])
        self.roots, self.lmdb = store.roots, store.lmdb

        clips = self._select_clips(parse_meta_info(opt['meta_info_file'], f'{p}.meta_info_file'))
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
        self.header_sizes = check_frames(self.prefix, frames, self.scale, self.gt_size, self.spike, self.opt['icc'])

    def _select_clips(self, clips: List[tuple]) -> List[tuple]:
        """Drop REDS's validation clips (keep only them in test_mode), as KAIR does for every data set.

        The held-out names are REDS clip numbers ('000', '011', ...); GoPro-style clip names never
        match them, so for other data sets this changes nothing unless test_mode is set.
        """
        opt, p = self.opt, self.prefix
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

    def __len__(self) -> int:
        return len(self.keys)

    def _frame_path(self, name: str, clip: str, frame: str) -> str:
        return str(self.roots[name] / clip / f'{frame}.{self.ext}')

    def _read_bgr(self, name: str, clip: str, frame: str) -> np.ndarray:
        """HWC uint8 BGR (`bgr_to_rgb` after cropping): from the cache, the LMDB (PNG or raw) or the file."""
        where = f'{self.prefix}.dataroot_{name}'
        if self.lmdb is not None:
            key = f'{clip}/{frame}'
            return decode_frame(self.lmdb.get(name, key, where), f'{where}: key {key} in {self.roots[name]}',
                                self.opt['icc'])
        path = self._frame_path(name, clip, frame)
        if self.cache is not None:
            return self.cache.get(path)
        if not os.path.isfile(path):
            raise UserError(f'{where}: frame {clip}/{frame} not found: {path}')
        return imread_uint(path, 3, bgr=True, icc=self.opt['icc'])

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
                            lambda path: imread_uint(path, 3, bgr=True, icc=self.opt['icc']), self.prefix)

    def _read_spike(self, clip: str, frame: str, lq_hw: Tuple[int, int], window: Tuple[int, int, int, int]
                    ) -> np.ndarray:
        if self.lmdb is not None:
            key = f'{clip}/{frame}'
            raw = self.lmdb.get('spike', key, f'{self.prefix}.dataroot_spike')
            return self.spike.decode(raw, lq_hw, f'{self.roots["spike"]}:{key}', window)
        path = self.roots['spike'] / clip / self.spike.filename(frame)
        return self.spike.decode(str(path), lq_hw, str(path), window)

    def __getitem__(self, key: Union[int, Tuple[int, int]]) -> Dict[str, Any]:
        """Frames are cropped as decoded (uint8 BGR) and leave as uint8 T×3×h×w tensors; with spikes, L holds
        the crop's RGB scaled to [0, 1] and the spike channels, float32."""
        index, rng = item_rng(key)
        clip, first = self.keys[index]
        num, start = self.clips[clip]
        neighbors, reverse = sample_neighbors(rng, first, start, num, self.num_frame, self.interval_list,
                                              self.opt['random_reverse'])
        L, H = self.sample(clip, neighbors, neighbors, reverse, rng, f'{clip}/{first:{self.tmpl}}')
        return {'L': L, 'H': H, 'key': f'{clip}/{first:{self.tmpl}}', 'folder': clip}

    def sample(self, clip: str, lq_frames: List[int], gt_frames: List[int], reverse: bool, rng: Any,
               item_key: str) -> Tuple[Any, Any]:
        """(L, H) stacked from the LQ frames `lq_frames` and the GT frames `gt_frames` of `clip`, one random crop
        and one flip/rotation for all of them (drawn from `rng` in that order); `reverse`: the frames run
        backwards, which also reverses each frame's spike channels."""
        frames = [f'{i:{self.tmpl}}' for i in lq_frames]
        gts = [self._read_bgr('gt', clip, f'{i:{self.tmpl}}') for i in gt_frames]
        lqs = [self._read_bgr('lq', clip, frame) for frame in frames]
        where = f'{self.prefix} {item_key}'
        lq_hw = common_size(lqs, 'low-quality', where)
        top, left = paired_crop_window(common_size(gts, 'ground-truth', where), lq_hw, self.gt_size, self.scale, rng,
                                       where)
        (gh, gw), (lh, lw) = patch_hw(self.gt_size), patch_hw(divided(self.gt_size, self.scale))
        t, l = top * self.scale, left * self.scale
        gts = [bgr_to_rgb(img[t:t + gh, l:l + gw]) for img in gts]
        lqs = [bgr_to_rgb(img[top:top + lh, left:left + lw]) for img in lqs]
        if self.spike:
            for j, frame in enumerate(frames):
                spikes = self._read_spike(clip, frame, lq_hw, (top, left, lh, lw))
                if reverse:  # played backwards, each exposure's spike channels run backwards too
                    spikes = spikes[:, :, ::-1]
                lqs[j] = np.concatenate([to_float(lqs[j]), spikes], axis=2)
        out = augment(lqs + gts, self.opt['use_hflip'], self.opt['use_rot'], rng, copy=False)
        n = len(lqs)
        return stack_tensor(out[:n]), stack_tensor(out[n:])


@DATASETS.register('REDSDataset', foreign=[Foreign('REDSDataset')])
class REDSDataset(VideoRecurrentTrainDataset):
    """EDVR's training set (BasicSR's REDSDataset): `num_frame` (odd) LQ frames centred on a frame of the clip,
    with the GT of the centre frame only (H is C×H×W): the sliding-window networks restore one frame.

    Every frame of the listed clips (the `val_partition` clips held out) is a centre frame; a window running
    past the clip's ends is moved to a centre drawn at random from those whose window fits, as BasicSR does.
    `random_reverse` plays the window backwards (the centre stays the centre). `dataroot_flow` (BasicSR's
    precomputed flows) is not supported: EDVR aligns by itself.
    """

    OPTIONS: Dict[str, Any] = {
        **VideoRecurrentTrainDataset.OPTIONS,
        'num_frame': Key(5, (int,), rule('an odd number >= 1', minimum=1, **{'not': {'multipleOf': 2}})(
            lambda v: None if v >= 1 and v % 2 else 'must be odd (a centre frame and as many neighbours on each side), '
                                                    'e.g. 5')),
        'dataroot_flow': Key(None, (str, type(None)), rule('null only', const=None)(
            lambda v: None if v is None else 'is not supported: EDVR aligns the frames itself (BasicSR reads no flows '
                                             'for it either); set it to null'),
            'BasicSR\'s key, accepted only as null: EDVR reads no optical flow'),
    }

    def __getitem__(self, key: Union[int, Tuple[int, int]]) -> Dict[str, Any]:
        index, rng = item_rng(key)
        clip, centre = self.keys[index]
        num, start = self.clips[clip]
        interval = rng.choice(self.interval_list)
        half = self.num_frame // 2 * interval
        while centre - half < start or centre + half > start + num - 1:  # the window fits some centre (checked)
            centre = rng.randint(start, start + num - 1)
        neighbors = list(range(centre - half, centre + half + 1, interval))
        reverse = self.opt['random_reverse'] and rng.random() < 0.5
        if reverse:
            neighbors.reverse()
        item_key = f'{clip}/{centre:{self.tmpl}}'
        L, H = self.sample(clip, neighbors, [centre], reverse, rng, item_key)
        return {'L': L, 'H': H[0], 'key': item_key, 'folder': clip}


# BasicSR's VideoTestDataset (EDVR's validation): whole clips, each frame restored from netG.num_frame frames around it
# (the model's sliding window, padded at the clip's ends by val.padding)
_SCORED_WHOLE = Only(0, 'clips are scored whole here (no border cropped)')
_TEST_FOREIGN = [Foreign('VideoRecurrentTestDataset', unneeded={'crop_border': _SCORED_WHOLE}),
                 Foreign('VideoTestDataset', keys={'padding': '/val.padding'},
                         unneeded={'crop_border': _SCORED_WHOLE, 'num_frame': Only(
                             (1, 3, 5, 7, 9), 'the window is netG.num_frame; whole clips are tested')})]


@DATASETS.register('VideoRecurrentTestDataset', 'video_test', foreign=_TEST_FOREIGN)
class VideoRecurrentTestDataset(WholeClips):
    """One whole clip per index: every clip folder of dataroot_lq with its GT (and spike) frames.

    `num_frame` -1 takes all frames; a positive value keeps only the first `num_frame` frames of each
    clip (quick validation). Clips are read when asked for, unless `cache_data` (KAIR's key, which KAIR
    honours with float32 clips on every rank) holds their decoded uint8 frames in RAM, one copy per node
    (data/frame_cache.py): a validation set evaluated every few thousand iterations is then decoded once.
    """

    train_type = 'VideoRecurrentTrainDataset'
    OPTIONS: Dict[str, Any] = {
        'dataroot_gt': REQUIRED,
        'dataroot_lq': REQUIRED,
        'io_backend': IO_BACKEND_DISK,
        'num_frame': Key(-1, (int,), all_or_first('clips')),
        'meta_info_file': Key(None, (str, type(None)), help='a text file naming the clips to test (BasicSR\'s meta info: '
                              'the first word of each line; null: every clip folder of dataroot_lq)'),
        'cache_data': CACHE_DATA,  # decoded frames in RAM, one copy per node (spike streams are read per item)
        'sigma': NOISE_STD,            # KAIR's non-blind denoising test (VRT 008): L = GT + noise + level map
        **SPIKE_OPTIONS,
    }

    def __init__(self, opt: Dict[str, Any]):
        super().__init__(opt)
        p = self.prefix
        self.sigma = None if opt['sigma'] is None else float(opt['sigma'])
        if self.sigma is not None and opt['dataroot_spike']:
            raise UserError(f'{p}.sigma: noisy clips are made from the GT frames; they take no spike streams')
        num_frame = opt['num_frame']
        self.spike = SpikeSource(opt, p) if opt['dataroot_spike'] else None
        self.spike_channels = self.spike.channels if self.spike else 0
        lq_root = check_folder(opt['dataroot_lq'], f'{p}.dataroot_lq')
        gt_root = check_folder(opt['dataroot_gt'], f'{p}.dataroot_gt')
        spike_root = check_folder(opt['dataroot_spike'], f'{p}.dataroot_spike') if self.spike else None

        self.clips: List[Tuple[str, List[str], List[str], List[str]]] = []
        for clip_dir in self._clip_folders(lq_root):
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
        # with sigma the LQ folder is never read (noise is added to the GT frames): only GT frames are cached
        cached = [path for _, lqs, gts, _ in self.clips for path in (gts if self.sigma is not None else gts + lqs)]
        self.cache = cache_frames(opt['cache_data'], frame_shapes(cached, self.header_sizes, 3),
                                  lambda path: imread_uint(path, 3, icc=opt['icc']), p)

    def _clip_folders(self, lq_root: Any) -> List[Any]:
        """The clip folders of dataroot_lq to test: all of them, or those `meta_info_file` names (BasicSR's
        VideoTestDataset: REDS4's four clips of the training folder)."""
        folders = sorted(d for d in lq_root.iterdir() if d.is_dir())
        path = self.opt['meta_info_file']
        if path is None:
            return folders
        try:
            with open(path, encoding='utf-8') as f:
                names = list(dict.fromkeys(line.split(' ')[0].split('/')[0].strip() for line in f if line.strip()))
        except OSError as e:
            raise UserError(f'{self.prefix}.meta_info_file: cannot read {path}: {e.strerror}') from None
        by_name = {d.name: d for d in folders}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise UserError(f'{self.prefix}.meta_info_file: {path} names clip {missing[0]}, which is not a folder of '
                            f'{lq_root}')
        return [by_name[n] for n in names]

    def check_files(self) -> None:
        """Header and size of every frame and spike file of every clip (see check_frames)."""
        frames = [(clip, gt, lq, spikes[i] if spikes else None)
                  for clip, lqs, gts, spikes in self.clips for i, (lq, gt) in enumerate(zip(lqs, gts))]
        self.header_sizes = check_frames(self.prefix, frames, None, None, self.spike, self.opt['icc'])

    def _read(self, path: str) -> np.ndarray:
        """One frame, float32 RGB in [0, 1]: from the cache, else decoded from its file."""
        return to_float(self.cache.get(path) if self.cache is not None else imread_uint(path, 3, icc=self.opt['icc']))

    def __getitem__(self, index: int) -> Dict[str, Any]:
        clip, lq_paths, gt_paths, spike_paths = self.clip(index)
        if self.sigma is not None:  # as KAIR: the LQ folder is not read, noise is added to the GT frames
            H = stack_tensor([self._read(path) for path in gt_paths])
            return {'L': add_noise(H, self.sigma, int(index)), 'H': H, 'folder': clip,
                    'lq_path': list(gt_paths), 'gt_path': list(gt_paths)}
        lqs = []
        for i, path in enumerate(lq_paths):
            lq = self._read(path)
            if self.spike:
                lq = np.concatenate([lq, self.spike.decode(spike_paths[i], lq.shape[:2], spike_paths[i])], axis=2)
            lqs.append(lq)
        gts = [self._read(path) for path in gt_paths]
        return {'L': stack_tensor(lqs), 'H': stack_tensor(gts), 'folder': clip,
                'lq_path': list(lq_paths), 'gt_path': list(gt_paths)}
