"""Vimeo-90K septuplet datasets with KAIR/BasicSR names and option keys: video SR and frame interpolation.

Layout: `<dataroot>/<clip>/<seq>/im1.png .. im7.png` (`vimeo_septuplet/sequences`); GT and LQ roots
hold the same names, and a BD test set is just another LQ root. The sequences used are the lines
`<clip>/<seq> [num_frames [(h,w,c)]]` of `meta_info_file`: BasicSR's meta_info_Vimeo90K_*_GT.txt
(`00001/0001 7 (256,448,3)`) and Vimeo's own sep_trainlist.txt (`00001/0001`, 7 frames) both work.
With io_backend lmdb, frame `im<i>` of `<clip>/<seq>` is the key `<clip>/<seq>/im<i>`, as BasicSR's
create_lmdb writes it (scripts/make_lmdb.py --layout vimeo builds one).

Frames (KAIR's neighbour list): `num_frame` frames `interval` apart, centred in the sequence:
num_frame 7 → im1..im7, 5 → im2..im6, 3 → im3..im5, 1 → im4; -1 → the whole sequence, consecutive
frames (KAIR's and BasicSR's recurrent Vimeo training sets always stack im1..im7, and their option files
write `num_frame: -1`, "not needed", for that).

Temporal padding, applied to L and H alike so every frame the network returns has its target:
- `pad_sequence` (KAIR's VRT): the last frame once more, 7 → 8 frames (t = 0..6, 6);
- `mirror_sequence` (KAIR's RVRT): the clip then its reversal, 7 → 14 frames (t = 0..6, 6..0).
(KAIR's test set pads only L; the model's `val.pad_seq` / `val.flip_seq` do KAIR's test-time
padding, dropping the padded output / averaging the two directions.)

Frame interpolation, as VRT 009: the window's frames `temporal_scale` apart are the input and its
centre frame is the target: num_frame 7, temporal_scale 2 → L = im1, im3, im5, im7 (4×3×H×W),
H = im4 (1×3×H×W); num_frame 3 → L = im3, im5, H = im4. VRT's interpolation network (pa_frames 0)
returns N×1×3×H×W for this L. KAIR's names: `VideoRecurrentTrainVimeoVFIDataset` takes any
temporal_scale, default 1 as in KAIR (every frame in, the target among them: said in the log);
`VideoTestVimeo90KDataset` and `VideoRecurrentTrainVimeoDataset` interpolate with temporal_scale 2
(1: restoration); `VideoTestVimeo90KVFIDataset` (ours) is the test set with temporal_scale 2. The
input frames are read from `dataroot_lq` (the VFI types default it to `dataroot_gt`).

Randomness of training items (interval, reverse, crop, flips) comes only from the key's seed
(`(index, seed)` from the train sampler; a bare index seeds with itself).
"""
import importlib
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from data.datasets.clips import (GT_SIZE, INTERVALS, IO_BACKEND, IO_BACKEND_DISK, FrameStore, TrainingWindows,
                                 WholeClips, check_frames, frame_name_keys, item_rng, positive, read_meta_info, size_field,
                                 stack_tensor, to_float)
from data.datasets.transforms import augment, color_jitter, paired_random_crop
from data.option_checks import all_or_first
from data.registry import DATASETS
from utils.dist import is_main_process
from utils.errors import UserError
from utils.image import imread_uint
from utils.logger import get_logger
from utils.options.foreign import Foreign, Only
from utils.options import REQUIRED, Key, at_least, only, rule

Size = Tuple[int, int]
VIMEO_FRAMES = 7


def _sequence_line(fields: List[str]) -> Optional[Tuple[str, int, Optional[Size]]]:
    size = size_field(fields[2]) if len(fields) == 3 else None
    ok = (len(fields) <= 3 and re.fullmatch(r'[^/]+/[^/]+', fields[0]) is not None
          and (len(fields) == 1 or (fields[1].isdigit() and int(fields[1]) > 0))
          and (len(fields) < 3 or size is not None))
    return (fields[0], int(fields[1]) if len(fields) > 1 else VIMEO_FRAMES, size) if ok else None


def parse_vimeo_meta(path: Any, key: str) -> List[Tuple[str, int, Optional[Size]]]:
    """(`<clip>/<seq>`, number of frames, (h, w) or None) per line `<clip>/<seq> [num_frames [(h,w,c)]]`."""
    return read_meta_info(path, key, _sequence_line,
                          '"<clip>/<seq> [num_frames (h,w,c)]" like "00001/0001 7 (256,448,3)"', 'sequences')


def frame_window(num: int, num_frame: int, interval: int = 1) -> List[int]:
    """1-based frame numbers: `num_frame` frames `interval` apart, centred in a sequence of `num`."""
    first = (num - ((num_frame - 1) * interval + 1)) // 2 + 1
    return [first + k * interval for k in range(num_frame)]


def vfi_split(frames: Sequence[int], step: int = 2) -> Tuple[List[int], List[int]]:
    """(input frames, target frames) for interpolation: every `step`-th frame in, the centre frame out."""
    return list(frames[::step]), [frames[len(frames) // 2]]


def _temporal_padding(opt: Dict[str, Any], prefix: str, vfi: bool) -> Tuple[bool, bool]:
    pad, mirror = opt['pad_sequence'], opt['mirror_sequence']
    if pad and mirror:
        raise UserError(f'{prefix}.pad_sequence: give pad_sequence (VRT, 7 → 8 frames) or mirror_sequence '
                        f'(RVRT, 7 → 14 frames), not both')
    if vfi and (pad or mirror):
        key = 'pad_sequence' if pad else 'mirror_sequence'
        raise UserError(f'{prefix}.{key}: not for frame interpolation: the network takes exactly the known '
                        f'frames; set it to false')
    return pad, mirror


def _pad_in_time(clip: torch.Tensor, pad: bool, mirror: bool) -> torch.Tensor:
    if mirror:
        return torch.cat([clip, clip.flip(0)], 0)
    if pad:
        return torch.cat([clip, clip[-1:]], 0)
    return clip


@rule('1 (restoration) or 2 (frame interpolation)', enum=[1, 2])
def _temporal_scale(v: int) -> Optional[str]:
    return None if v in (1, 2) else 'must be 1 (restoration) or 2 (frame interpolation)'


# `temporal_scale` of the SR types: 1 restores every frame, 2 interpolates the centre one from every second frame
TEMPORAL_SCALE = Key(1, (int,), _temporal_scale)


def _check_vfi_num_frame(num_frame: int, prefix: str, key: str = 'num_frame') -> None:
    if num_frame % 4 != 3:
        raise UserError(f'{prefix}.{key}: frame interpolation needs a window whose centre frame is not an input '
                        f'(every second frame is): 3 (im3, im5 → im4) or 7 (im1, im3, im5, im7 → im4), '
                        f'got {num_frame}')


def _whole_sequence(seqs: Sequence[Tuple[str, int, Optional[Size]]], opt: Dict[str, Any], prefix: str) -> int:
    """The number of frames `num_frame: -1` stacks: that of every listed sequence (items are batched)."""
    lengths = {num: seq for seq, num, _ in seqs}
    if len(lengths) > 1:
        (n1, s1), (n2, s2) = sorted(lengths.items())[:2]
        raise UserError(f'{prefix}.num_frame: -1 stacks whole sequences, which then need one length to be '
                        f'batched, but {s1} has {n1} frames and {s2} {n2} (meta_info_file); give a number of frames')
    if opt['interval_list'] != [1]:
        raise UserError(f'{prefix}.num_frame: -1 stacks whole sequences of consecutive frames: interval_list must '
                        f'be [1], got {opt["interval_list"]}; give a number of frames for other intervals')
    return next(iter(lengths), VIMEO_FRAMES)


def _check_sequence_folders(store: FrameStore, seqs: Sequence[str]) -> None:
    """One line for the first listed sequence missing from a root (instead of seven per sequence)."""
    for name, root in store.roots.items():
        for seq in seqs:
            if not (root / seq).is_dir():
                raise UserError(f'{store.prefix}.dataroot_{name}: sequence {seq} listed in meta_info_file not found: '
                                f'{root / seq}')


@DATASETS.register('VideoRecurrentTrainVimeoDataset')
class VideoRecurrentTrainVimeoDataset(TrainingWindows):
    """Random crops of Vimeo-90K septuplets for training (KAIR's VRT/RVRT 003/004 x4 SR; 009 with temporal_scale 2)."""

    OPTIONS: Dict[str, Any] = {
        'dataroot_gt': REQUIRED,
        'dataroot_lq': REQUIRED,
        'meta_info_file': REQUIRED,
        'io_backend': IO_BACKEND,
        **frame_name_keys('d'),        # im<frame:tmpl>: "d" → im1 .. im7
        'num_frame': Key(7, (int,), all_or_first('sequence')),  # -1: the whole sequence (KAIR's RVRT 002/003)
        'gt_size': GT_SIZE,
        'scale': positive(4),
        'interval_list': INTERVALS,
        'random_reverse': False,
        'use_hflip': True,
        'use_rot': True,
        'mirror_sequence': False,      # RVRT: the clip then its reversal (7 → 14 frames)
        'pad_sequence': False,         # VRT: the last frame repeated (7 → 8 frames)
        'temporal_scale': TEMPORAL_SCALE,  # 2: frame interpolation (see the module docstring)
        # accepted for KAIR option files; Vimeo's test split is its own meta_info_file
        'test_mode': Key(False, (bool,), only(False, 'Vimeo-90K has no clips to hold out here (its test split is '
                                                    'meta_info_Vimeo90K_test_GT.txt); evaluate with '
                                                    'VideoTestVimeo90KDataset')),
    }
    unit = 'sequence'
    jitter = False  # colour jitter of each item (the VFI type's `color_jitter`)

    def __init__(self, opt: Dict[str, Any]):
        super().__init__(opt)
        p = self.prefix
        seqs = parse_vimeo_meta(opt['meta_info_file'], f'{p}.meta_info_file')
        self.num_frame = opt['num_frame'] if opt['num_frame'] != -1 else _whole_sequence(seqs, opt, p)
        self.input_step = self.interpolation_step(opt, p)
        self.vfi = self.input_step is not None
        self.gt_size, self.scale, self.interval_list = opt['gt_size'], opt['scale'], opt['interval_list']
        self.pad, self.mirror = _temporal_padding(opt, p, self.vfi)
        if self.vfi:
            if self.scale != 1:
                raise UserError(f'{p}.scale: frame interpolation keeps the frame size: scale must be 1, '
                                f'got {self.scale}')
            if self.interval_list != [1]:
                raise UserError(f'{p}.interval_list: frame interpolation uses consecutive frames: [1], got '
                                f'{self.interval_list}')
        self.check_patch()
        self.tmpl = opt['filename_tmpl']
        backend = opt['io_backend']['type']
        self.store = FrameStore(p, {'gt': opt['dataroot_gt'], 'lq': opt['dataroot_lq']}, backend, opt['filename_ext'],
                                opt['icc'])

        span = (self.num_frame - 1) * max(self.interval_list) + 1
        for seq, num, _ in seqs:
            if num < span:
                raise UserError(f'{p}.num_frame: {self.num_frame} frames at interval {max(self.interval_list)} '
                                f'need {span} frames but sequence {seq} has {num} (meta_info_file)')
        self.seqs = [(seq, num) for seq, num, _ in seqs]
        self.gt_sizes = {seq: size for seq, _, size in seqs if size is not None}
        if backend == 'disk':
            _check_sequence_folders(self.store, [seq for seq, _ in self.seqs])
        self.check_train_options()
        self.check_files()

    def interpolation_step(self, opt: Dict[str, Any], prefix: str) -> Optional[int]:
        """The step between input frames when the dataset is for frame interpolation, else None.

        Here temporal_scale 1 is restoration and 2 interpolation from every second frame (KAIR's
        training set has no working temporal_scale 2: it stacks a hard-coded 7 frames).
        """
        if opt['temporal_scale'] != 2:
            return None
        _check_vfi_num_frame(self.num_frame, prefix)
        return 2

    def frame_key(self, seq: str, frame: int) -> str:
        return f'{seq}/im{frame:{self.tmpl}}'

    def frames(self, num: int, interval: int) -> Tuple[List[int], List[int]]:
        """(LQ input frames, GT target frames), 1-based, in time order."""
        window = frame_window(num, self.num_frame, interval)
        return vfi_split(window, self.input_step) if self.vfi else (window, window)

    def check_files(self) -> None:
        """Header and size of every frame a training item can read (disk backend; see check_frames)."""
        if self.store.backend != 'disk':
            return  # frames live in the LMDB; they are checked as they are read
        jobs = []
        for seq, num in self.seqs:
            pairs = set()
            for interval in self.interval_list:
                inputs, targets = self.frames(num, interval)
                # VFI pairs each input with the target (same size at scale 1); SR pairs GT and LQ of one frame
                pairs.update(zip([targets[0]] * len(inputs), inputs) if self.vfi else zip(targets, inputs))
            jobs += [(seq, self.store.path('gt', self.frame_key(seq, g)), self.store.path('lq', self.frame_key(seq, q)),
                      None) for g, q in sorted(pairs)]
        check_frames(self.prefix, jobs, self.scale, self.gt_size, None, self.opt['icc'])

    def __len__(self) -> int:
        return len(self.seqs)

    def __getitem__(self, key: Union[int, Tuple[int, int]]) -> Dict[str, Any]:
        index, rng = item_rng(key)
        seq, num = self.seqs[index]
        inputs, targets = self.frames(num, rng.choice(self.interval_list))
        if self.opt['random_reverse'] and rng.random() < 0.5:
            inputs, targets = inputs[::-1], targets[::-1]
        lqs = [self.store.read('lq', self.frame_key(seq, i)) for i in inputs]  # uint8: scaled in the train step
        gts = [self.store.read('gt', self.frame_key(seq, i)) for i in targets]
        gts, lqs = paired_random_crop(gts, lqs, self.gt_size, self.scale, rng, where=f'{self.prefix} {seq}')
        out = augment(lqs + gts, self.opt['use_hflip'], self.opt['use_rot'], rng)
        n = len(lqs)
        L, H = stack_tensor(out[:n]), stack_tensor(out[n:])
        if self.jitter:  # the VFI type (scale 1): one draw for input and target
            both = color_jitter(torch.cat([L, H]), rng)
            L, H = both[:n], both[n:]
        return {'L': _pad_in_time(L, self.pad, self.mirror), 'H': _pad_in_time(H, self.pad, self.mirror),
                'key': seq, 'folder': seq}


@DATASETS.register('Vimeo90KRecurrentDataset', foreign=[Foreign('Vimeo90KRecurrentDataset')])
class Vimeo90KRecurrentDataset(VideoRecurrentTrainVimeoDataset):
    """BasicSR's Vimeo-90K training set for recurrent networks (BasicVSR, IconVSR), with its keys: every frame of
    each septuplet (`num_frame` -1, BasicSR's "not needed", or 7) and `flip_sequence`, the clip followed by its
    reversal (7 → 14 frames, as BasicSR trains BasicVSR on Vimeo-90K). `random_reverse` plays it backwards."""

    OPTIONS: Dict[str, Any] = {
        **{k: v for k, v in VideoRecurrentTrainVimeoDataset.OPTIONS.items()
           if k not in ('num_frame', 'mirror_sequence', 'pad_sequence', 'temporal_scale')},
        'num_frame': Key(-1, (int,), rule(f'-1 (every frame) or {VIMEO_FRAMES}', enum=[-1, VIMEO_FRAMES])(
            lambda v: None if v in (-1, VIMEO_FRAMES) else
            f'must be -1 (every frame of the septuplet, as BasicSR) or {VIMEO_FRAMES}')),
        'flip_sequence': Key(False, (bool,), help='the septuplet followed by its reversal (7 -> 14 frames), as '
                             'BasicSR trains BasicVSR on Vimeo-90K'),
    }

    def __init__(self, opt: Dict[str, Any]):
        super().__init__({**opt, 'num_frame': VIMEO_FRAMES, 'mirror_sequence': opt['flip_sequence'],
                          'pad_sequence': False, 'temporal_scale': 1})


# Keys of the SR types that the VFI types fix (the values they get).
_VFI_TRAIN_FIXED = {'scale': 1, 'pad_sequence': False, 'mirror_sequence': False}
_VFI_TEST_FIXED = {'temporal_scale': 2, 'pad_sequence': False, 'mirror_sequence': False}


@DATASETS.register('VideoRecurrentTrainVimeoVFIDataset')
class VideoRecurrentTrainVimeoVFIDataset(VideoRecurrentTrainVimeoDataset):
    """Frame interpolation training on Vimeo-90K, KAIR's type: the window's frames `temporal_scale` apart are
    the input, its centre frame the target (num_frame 7, temporal_scale 2, as VRT 009: im1, im3, im5, im7 →
    im4). KAIR's default temporal_scale is 1, which feeds every frame, the target included (said once in the
    log). Input frames come from dataroot_gt unless dataroot_lq is given; `color_jitter` jitters input and
    target alike (KAIR's 009)."""

    OPTIONS: Dict[str, Any] = {**{k: v for k, v in VideoRecurrentTrainVimeoDataset.OPTIONS.items()
                                  if k not in _VFI_TRAIN_FIXED},
                               'dataroot_lq': None,
                               'color_jitter': Key(False, (bool,), help='one random colour jitter (5 % brightness, '
                                                   'contrast, saturation, hue) of input and target alike'),
                               'temporal_scale': Key(1, (int,), at_least(1))}  # the step between input frames

    def __init__(self, opt: Dict[str, Any]):
        super().__init__({**opt, **_VFI_TRAIN_FIXED, 'dataroot_lq': opt['dataroot_lq'] or opt['dataroot_gt']})
        self.jitter = opt['color_jitter']
        if self.jitter:  # imported here, before loader workers fork: an import in a forked child can deadlock
            importlib.import_module('torchvision.transforms.functional')

    def interpolation_step(self, opt: Dict[str, Any], prefix: str) -> Optional[int]:
        """KAIR's rule: inputs are the window's frames [::temporal_scale], the target its centre frame."""
        step = opt['temporal_scale']
        if (self.num_frame // 2) % step == 0 and is_main_process():
            get_logger().warning(f'{prefix}.temporal_scale: {step} with num_frame {self.num_frame} makes the target '
                                 f'(the centre frame) one of the inputs, as KAIR does; interpolation from frames '
                                 f'around it takes temporal_scale 2 (VRT 009)')
        return step


# BasicSR's VideoTestVimeo90KDataset (BasicVSR's, IconVSR's and EDVR's Vimeo-90K tests): the same centred window of
# each listed septuplet, its GT the centre frame (im4) alone, which is what val.center_frame_only scores here
_BASICSR_TEST = Foreign('VideoTestVimeo90KDataset', keys={'padding': '/val.padding',
                                                          'center_frame_only': '/val.center_frame_only'},
                        defaults={'center_frame_only': True},
                        unneeded={'crop_border': Only(0, 'clips are scored whole here (no border cropped)')},
                        note='its GT is the centre frame alone: the centre frame is what is scored '
                             '(val.center_frame_only)')


@DATASETS.register('VideoTestVimeo90KDataset', foreign=[_BASICSR_TEST])
class VideoTestVimeo90KDataset(WholeClips):
    """Whole Vimeo-90K test septuplets (or their centred `num_frame` window), one per index.

    H holds every GT frame of the window (KAIR returns only im4; `val.center_frame_only` scores the
    centre frame alone). With temporal_scale 2, L holds the known frames and H the interpolated one
    (see the module docstring). Frames are read when an item is asked for: nothing is cached.
    """

    unit = 'sequences'
    OPTIONS: Dict[str, Any] = {
        'dataroot_gt': REQUIRED,
        'dataroot_lq': REQUIRED,
        'meta_info_file': REQUIRED,
        'io_backend': IO_BACKEND_DISK,
        **frame_name_keys('d'),
        'num_frame': Key(7, (int,), all_or_first('sequences')),  # -1: every frame of each sequence
        'pad_sequence': False,
        'mirror_sequence': False,
        'temporal_scale': TEMPORAL_SCALE,
        'cache_data': Key(False, (bool,), only(False, 'not supported for Vimeo-90K (KAIR refuses it too): sequences '
                                                      'are read when needed')),
    }

    def __init__(self, opt: Dict[str, Any]):
        super().__init__(opt)
        p = self.prefix
        self.vfi = opt['temporal_scale'] == 2
        num_frame = opt['num_frame']
        self.pad, self.mirror = _temporal_padding(opt, p, self.vfi)
        if self.vfi and num_frame != -1:
            _check_vfi_num_frame(num_frame, p)
        tmpl = opt['filename_tmpl']
        self.store = FrameStore(p, {'gt': opt['dataroot_gt'], 'lq': opt['dataroot_lq']}, 'disk', opt['filename_ext'],
                                opt['icc'])
        self.clips: List[Tuple[str, List[str], List[str]]] = []
        for seq, num, _ in parse_vimeo_meta(opt['meta_info_file'], f'{p}.meta_info_file'):
            count = num if num_frame == -1 else num_frame
            if count > num:
                raise UserError(f'{p}.num_frame: {count} frames but sequence {seq} has {num} (meta_info_file)')
            if self.vfi and num % 4 != 3:
                raise UserError(f'{p}.num_frame: -1 interpolates the centre frame of whole sequences, which needs '
                                f'3 or 7 frames, but sequence {seq} has {num} (meta_info_file)')
            window = frame_window(num, count)
            inputs, targets = vfi_split(window) if self.vfi else (window, window)
            self.clips.append((seq, [self.store.path('lq', f'{seq}/im{i:{tmpl}}') for i in inputs],
                               [self.store.path('gt', f'{seq}/im{i:{tmpl}}') for i in targets]))
        _check_sequence_folders(self.store, [seq for seq, _, _ in self.clips])
        self.check_files()

    def check_files(self) -> None:
        """Header and size of every frame (see check_frames): scale 1 for interpolation, a whole factor for SR."""
        jobs = [(seq, gts[0] if self.vfi else gts[i], lq, None)
                for seq, lqs, gts in self.clips for i, lq in enumerate(lqs)]
        check_frames(self.prefix, jobs, 1 if self.vfi else None, None, None, self.opt['icc'])

    @property
    def train_type(self) -> str:  # type: ignore[override]
        return f'VideoRecurrentTrainVimeo{"VFI" if self.vfi else ""}Dataset'

    def __getitem__(self, index: int) -> Dict[str, Any]:
        seq, lq_paths, gt_paths = self.clip(index)
        L = stack_tensor([to_float(imread_uint(path, 3, icc=self.opt['icc'])) for path in lq_paths])
        H = stack_tensor([to_float(imread_uint(path, 3, icc=self.opt['icc'])) for path in gt_paths])
        return {'L': _pad_in_time(L, self.pad, self.mirror), 'H': _pad_in_time(H, self.pad, self.mirror),
                'folder': seq, 'lq_path': list(lq_paths), 'gt_path': list(gt_paths)}


@DATASETS.register('VideoTestVimeo90KVFIDataset')
class VideoTestVimeo90KVFIDataset(VideoTestVimeo90KDataset):
    """Frame interpolation evaluation on Vimeo-90K: im1, im3, im5, im7 → im4 (VideoTestVimeo90KDataset
    with temporal_scale 2; the input frames come from dataroot_gt unless dataroot_lq is given)."""

    OPTIONS: Dict[str, Any] = {**{k: v for k, v in VideoTestVimeo90KDataset.OPTIONS.items()
                                  if k not in _VFI_TEST_FIXED}, 'dataroot_lq': None}

    def __init__(self, opt: Dict[str, Any]):
        super().__init__({**opt, **_VFI_TEST_FIXED, 'dataroot_lq': opt['dataroot_lq'] or opt['dataroot_gt']})
