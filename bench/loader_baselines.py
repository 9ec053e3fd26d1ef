"""Reference ("baseline") training datasets written the way KAIR/BasicSR-style datasets load data.

Each frame is decoded whole with `cv2.imdecode` (from the file's bytes or an LMDB value), the WHOLE
frame converted with `astype(np.float32) / 255.`, then cropped, flipped/transposed on float arrays,
converted with `cv2.cvtColor(BGR2RGB)`, moved to CHW and wrapped with `torch.from_numpy` (and
`torch.stack` for clips). Spike streams are read whole and turned into their representation on the
whole frame. That is what bench/bench_loader.py compares the framework's datasets against, and the
reference path tests compare them with.

Exactness: for the same training key `(index, seed)` the baselines draw their random numbers in
exactly the order the framework's datasets do (data/datasets/image.py `_paired_train`,
data/datasets/video.py `VideoRecurrentTrainDataset.__getitem__`, data/datasets/transforms.py), so their
float32 tensors are bitwise equal to ours once our uint8 tensors are normalised the way the train
step does (`t.float().div_(255.)`). Two places where this differs from BasicSR itself, on purpose:
  - `augment` always draws its three numbers (hflip, vflip, rotation), whatever the flags; BasicSR
    skips the draws of disabled flips, which would shift the stream;
  - the clip's crop window is drawn after the frame numbers (`sample_neighbors`, imported from the
    framework together with the spike readers: those parts are not about how images are handled).

Keys are `(index, seed)` tuples (training keys, as the train sampler yields them). The clip baseline
also takes a bare index as `(index, index)`, the seed our video dataset uses for it; the image
baseline refuses one (for our image datasets a bare index means evaluation: the whole image).

LMDB: values are read with `lmdb` directly (readonly, lock=False, one environment per process,
reopened after fork). py-lmdb refuses to open the same files twice in one process, so when the
framework's reader already has the folder open in this process the baseline reads through that
environment; the other way round (baseline first) the framework's reader would fail, so a caller
that uses both in one process on one LMDB folder should read through ours first, or give the
baseline a copy of the folder (bench_loader.py does the latter).
"""
import os
import random
from typing import Any, Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np
import torch
from torch.utils.data import Dataset

from data.datasets.clips import sample_neighbors
from data.datasets.spike import decode_spike_dat, read_spike_dat, read_spike_npy, spike_to_representation
from data.datasets.video import REDS_VAL_PARTITIONS

__all__ = ['BaselinePairedImages', 'BaselineVideoClips', 'imfrombytes', 'paired_random_crop', 'augment',
           'img2tensor']


# --- BasicSR-style image helpers ----------------------------------------------------------------------

def read_bytes(path: str) -> bytes:
    """The file's bytes (BasicSR's disk backend)."""
    with open(path, 'rb') as f:
        return f.read()


def imfrombytes(content: bytes) -> np.ndarray:
    """Whole frame decoded (BGR) and converted to float32 in [0, 1]."""
    img = cv2.imdecode(np.frombuffer(content, np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError('cannot decode image bytes')
    return img.astype(np.float32) / 255.


def paired_random_crop(img_gts: List[np.ndarray], img_lqs: List[np.ndarray], gt_patch_size: int, scale: int,
                       rng: random.Random) -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """The same random gt_patch_size patch of every GT and the gt_patch_size/scale patch of every LQ
    (anything at LQ resolution, e.g. spike channels, goes with the LQs)."""
    h_lq, w_lq = img_lqs[0].shape[:2]
    h_gt, w_gt = img_gts[0].shape[:2]
    lq_patch_size = gt_patch_size // scale
    if (h_gt, w_gt) != (h_lq * scale, w_lq * scale):
        raise ValueError(f'GT {h_gt}x{w_gt} is not {scale}x the LQ {h_lq}x{w_lq}')
    if h_lq < lq_patch_size or w_lq < lq_patch_size:
        raise ValueError(f'LQ {h_lq}x{w_lq} is smaller than the patch {lq_patch_size}')
    top = rng.randint(0, h_lq - lq_patch_size)
    left = rng.randint(0, w_lq - lq_patch_size)
    img_lqs = [v[top:top + lq_patch_size, left:left + lq_patch_size, ...] for v in img_lqs]
    top_gt, left_gt = top * scale, left * scale
    img_gts = [v[top_gt:top_gt + gt_patch_size, left_gt:left_gt + gt_patch_size, ...] for v in img_gts]
    return img_gts, img_lqs


def augment(imgs: List[np.ndarray], hflip: bool, rotation: bool, rng: random.Random) -> List[np.ndarray]:
    """Horizontal flip, vertical flip, transpose (the 8 dihedral transforms), the same for every image.

    The three numbers are always drawn (as the framework's `data.datasets.transforms.augment` does)."""
    do_h = rng.random() < 0.5
    do_v = rng.random() < 0.5
    do_rot = rng.random() < 0.5
    hflip = hflip and do_h
    vflip = rotation and do_v
    rot90 = rotation and do_rot

    def _augment(img: np.ndarray) -> np.ndarray:
        if hflip:
            img = np.flip(img, axis=1)
        if vflip:
            img = np.flip(img, axis=0)
        if rot90:
            img = img.transpose(1, 0, 2)
        return np.ascontiguousarray(img)

    return [_augment(img) for img in imgs]


def img2tensor(imgs: List[np.ndarray], bgr2rgb: bool = True) -> List[torch.Tensor]:
    """HWC float32 BGR → CHW float32 RGB tensors."""
    out = []
    for img in imgs:
        if bgr2rgb:
            img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
        out.append(torch.from_numpy(img.transpose(2, 0, 1)))  # a strided view; collation/stack copies it
    return out


def _parse_key(key: Any, bare_index: bool) -> Tuple[int, int]:
    """(index, seed) of a training key; a bare index (only where `bare_index`) is seeded by itself."""
    if isinstance(key, (tuple, list)):
        return int(key[0]), int(key[1])
    if not bare_index:
        raise TypeError(f'training keys are (index, seed) tuples, got {key!r} (a bare index means evaluation '
                        f'for the framework\'s image datasets, which the baseline does not implement)')
    return int(key), int(key)


# --- LMDB (one environment per folder per process) ---------------------------------------------------

_ENVS: Dict[str, Tuple[int, Any]] = {}
_BORROWED = set()  # folders the framework's reader had open when the baseline first read them


def _lmdb_env(path: str) -> Any:
    import lmdb
    key = os.path.realpath(path)
    if key in _BORROWED:
        from data import lmdb_util
        return lmdb_util.open_env(path)  # handles fork itself
    entry = _ENVS.get(key)
    if entry is not None and entry[0] == os.getpid():
        return entry[1]
    if entry is not None:
        entry[1].close()  # inherited through fork: must not be used here; closes only this process's mapping
    try:
        env = lmdb.open(path, readonly=True, lock=False, readahead=False, meminit=False)
    except lmdb.Error as e:
        from data import lmdb_util  # the framework's reader may hold these files open in this process
        theirs = lmdb_util.open_env_in_this_process(path)
        if 'already open' not in str(e) or theirs is None:
            raise
        _BORROWED.add(key)
        return theirs
    _ENVS[key] = (os.getpid(), env)
    return env


def lmdb_get(path: str, key: str) -> bytes:
    with _lmdb_env(path).begin(write=False) as txn:
        value = txn.get(key.encode('ascii'))
    if value is None:
        raise KeyError(f'key {key} not in lmdb {path}')
    return bytes(value)


# --- datasets -----------------------------------------------------------------------------------------

class BaselinePairedImages(Dataset):
    """Paired H/L image files (DIV2K-style SR patches): {'L', 'H'} float32 CHW in [0, 1].

    Reference for the framework's image datasets with `dataroot_L` (dataset_type "sr", "plain", ...).
    """

    def __init__(self, paths_H: Sequence[str], paths_L: Sequence[str], gt_size: int, scale: int,
                 use_hflip: bool = True, use_rot: bool = True):
        if len(paths_H) != len(paths_L):
            raise ValueError(f'{len(paths_H)} H images but {len(paths_L)} L images')
        self.paths_H, self.paths_L = list(paths_H), list(paths_L)
        self.gt_size, self.scale = gt_size, scale
        self.use_hflip, self.use_rot = use_hflip, use_rot

    def __len__(self) -> int:
        return len(self.paths_H)

    def __getitem__(self, key: Any) -> Dict[str, torch.Tensor]:
        index, seed = _parse_key(key, bare_index=False)
        rng = random.Random(seed)
        img_H = imfrombytes(read_bytes(self.paths_H[index]))
        img_L = imfrombytes(read_bytes(self.paths_L[index]))
        (img_H,), (img_L,) = paired_random_crop([img_H], [img_L], self.gt_size, self.scale, rng)
        img_H, img_L = augment([img_H, img_L], self.use_hflip, self.use_rot, rng)
        H, L = img2tensor([img_H, img_L])
        return {'L': L, 'H': H}


class BaselineVideoClips(Dataset):
    """GoPro/REDS-layout training clips: {'L': T×C×h×w, 'H': T×3×h×w} float32.

    Takes the validated `datasets.train` section of a VideoRecurrentTrainDataset (the options the
    framework's dataset is built from), so both read the same frames: dataroot_gt/lq(/spike),
    meta_info_file, filename_tmpl/ext, io_backend (disk: image files; lmdb: PNG bytes under key
    `clip/frame`), num_frame, gt_size, scale, interval_list, random_reverse, use_hflip, use_rot,
    val_partition/test_mode and the spike options. With spikes, 'L' has 3 + S channels: the RGB frame
    then the spike representation of its exposure (reversed along channels when the clip is played
    backwards).
    """

    def __init__(self, opt: Dict[str, Any]):
        self.opt = opt
        self.backend = opt['io_backend']['type']
        if self.backend not in ('disk', 'lmdb'):
            raise ValueError(f'io_backend {self.backend!r}')
        self.roots = {'gt': opt['dataroot_gt'], 'lq': opt['dataroot_lq']}
        self.spike_format: Optional[str] = None
        if opt.get('dataroot_spike'):
            self.roots['spike'] = opt['dataroot_spike']
            self.spike_format = opt['spike_format']
            self.spike_repr = opt['spike_repr']
            self.spike_params = dict(opt['spike_repr_params'] or {})
            self.spike_size = opt['spike_size']
        self.tmpl, self.ext = opt['filename_tmpl'], opt['filename_ext']
        self.num_frame, self.gt_size, self.scale = opt['num_frame'], opt['gt_size'], opt['scale']
        self.interval_list = list(opt['interval_list'])
        self.random_reverse = opt['random_reverse']
        held_out = REDS_VAL_PARTITIONS[opt['val_partition']]
        self.clips: Dict[str, Tuple[int, int]] = {}
        self.keys: List[Tuple[str, int]] = []
        with open(opt['meta_info_file']) as f:
            for line in f:
                fields = line.split()
                if not fields:
                    continue
                clip, num = fields[0], int(fields[1])
                start = int(fields[3]) if len(fields) > 3 else 0
                if (clip in held_out) != bool(opt['test_mode']):
                    continue
                self.clips[clip] = (num, start)
                self.keys.extend((clip, i) for i in range(start, start + num))

    def __len__(self) -> int:
        return len(self.keys)

    def _get(self, name: str, clip: str, frame: str, ext: str) -> bytes:
        if self.backend == 'lmdb':
            return lmdb_get(self.roots[name], f'{clip}/{frame}')
        return read_bytes(os.path.join(self.roots[name], clip, f'{frame}.{ext}'))

    def _spike(self, clip: str, frame: str, lq_hw: Tuple[int, int]) -> np.ndarray:
        """H×W×S float32 representation of the whole frame's spike planes."""
        if self.backend == 'lmdb':
            data = self._get('spike', clip, frame, self.spike_format)
            if self.spike_format == 'npy':
                planes = read_spike_npy(f'{clip}/{frame}', data=data)
            else:
                planes = decode_spike_dat(data, *(self.spike_size or lq_hw))
        else:
            path = os.path.join(self.roots['spike'], clip, f'{frame}.{self.spike_format}')
            planes = (read_spike_npy(path) if self.spike_format == 'npy'
                      else read_spike_dat(path, *(self.spike_size or lq_hw)))
        return spike_to_representation(planes, self.spike_repr, **self.spike_params)

    def __getitem__(self, key: Any) -> Dict[str, torch.Tensor]:
        index, seed = _parse_key(key, bare_index=True)
        rng = random.Random(seed)
        clip, first = self.keys[index]
        num, start = self.clips[clip]
        neighbors, reverse = sample_neighbors(rng, first, start, num, self.num_frame, self.interval_list,
                                              self.random_reverse)
        img_lqs, img_gts, spikes = [], [], []
        for n in neighbors:
            frame = f'{n:{self.tmpl}}'
            img_lqs.append(imfrombytes(self._get('lq', clip, frame, self.ext)))
            img_gts.append(imfrombytes(self._get('gt', clip, frame, self.ext)))
            if self.spike_format is not None:
                rep = self._spike(clip, frame, img_lqs[-1].shape[:2])
                spikes.append(rep[:, :, ::-1] if reverse else rep)
        n = len(img_lqs)
        img_gts, lq_like = paired_random_crop(img_gts, img_lqs + spikes, self.gt_size, self.scale, rng)
        out = augment(lq_like + img_gts, self.opt['use_hflip'], self.opt['use_rot'], rng)
        img_lqs, spikes, img_gts = out[:n], out[n:len(lq_like)], out[len(lq_like):]
        lqs = [cv2.cvtColor(img, cv2.COLOR_BGR2RGB) for img in img_lqs]
        if spikes:
            lqs = [np.concatenate([lq, spk], axis=2) for lq, spk in zip(lqs, spikes)]
        L = torch.stack(img2tensor(lqs, bgr2rgb=False), dim=0)
        H = torch.stack(img2tensor(img_gts), dim=0)
        return {'L': L, 'H': H}
