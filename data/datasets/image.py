"""Image restoration datasets (KAIR DatasetPlain / DatasetDnCNN / DatasetSR equivalents).

Keys decide the mode: a `(index, seed)` tuple from the training sampler means training (random
crop + flips, noise drawn from the sample seed); a plain int means evaluation (whole image,
deterministic noise seeded by the index). Images are decoded as uint8 in the decoder's BGR order
and cropped before anything else touches them (colour order, float conversion), which keeps large
training images cheap; images read from files leave as uint8 tensors and are scaled to [0, 1] where
they are used (`utils.image.to_float_image`: on the device in the train step). `cache_data: true`
keeps every decoded image in RAM, one copy per node that its ranks share (data/frame_cache.py).

16-bit files (PNG, TIFF, PNM) keep their precision (`reads_16bit`): they are decoded as uint16, leave as
uint16 tensors and become [0, 1] floats over 65535; H stays an integer tensor in every item (noise is
added to its float copy), so its type tells evaluation the item's bit depth, at which the restored image
is scored and written (models/restorer.py). Datasets whose own work is 8-bit (JPEG round trips, the
kernel and BSRGAN degradations) read 16-bit files mapped to 8 bits, as before (`reads_16bit = False`).

The options check each value alone (the `Key`s in OPTIONS, utils/options/checks.py, data/option_checks.py); a
dataset checks what relates several keys and the header of every file when it is built (data/checks.py), so a
bad value or file ends the run at start-up with one line per problem.
"""
import os
import random
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

from data.checks import (FileProblems, Size, colour_profiles, fmt, image_depths, image_sizes, scale_mismatch,
                         ssim_problem)
from data.datasets.transforms import augment, paired_random_crop, random_crop
from data.frame_cache import CACHE_DATA, FrameCache, cache_frames, frame_shapes
from data.patches import Patch, divided, fits, indivisible, patch_key, shown, warn_if_tiny
from data.option_checks import noise_level
from data.registry import DATASETS
from data.sampler import parse_key
from metrics.fidelity import metric_border
from utils.errors import UserError
from utils.image import (IMG_EXTENSIONS, bgr_to_rgb, image_peak, imread_uint, imresize_bicubic, is_image_file,
                         list_images, to_float_image, uint8_tensor)
from utils.options import REQUIRED, Key, at_least, one_of
from utils.paths import folder_problem

ItemKey = Any  # int (evaluation) or (index, seed) tuple (training)

PATCH_PROBLEM = 'smaller than the training patch'


def list_folder(opt: Dict[str, Any], key: str) -> List[str]:
    """Sorted image paths of the folder in option `key` (of each folder in turn, for a list of folders, as
    traiNNer-redux's files give several); UserError if one is missing or empty."""
    return [path for folder in folders(opt, key) for path in folder_images(opt, key, folder)]


def folders(opt: Dict[str, Any], key: str) -> List[str]:
    """The folder(s) of option `key`: one path, or a non-empty list of them."""
    value = opt[key]
    given = value if isinstance(value, list) and value else [value]
    for folder in given:
        if not isinstance(folder, str) or not folder:
            raise UserError(f'{opt["_where"]}.{key}: expected a folder path or a list of them, got {value!r}')
    return given


def folder_images(opt: Dict[str, Any], key: str, folder: str) -> List[str]:
    """Sorted image paths of one folder of option `key`."""
    where = f'{opt["_where"]}.{key}'
    problem = folder_problem(folder)
    if problem:
        raise UserError(f'{where}: {problem}')
    paths = list_images(folder)
    if not paths:
        raise UserError(f'{where}: no images ({", ".join(IMG_EXTENSIONS)}) in {folder}')
    return paths


META_INFO_FILE = Key(None, (str, type(None)), help='a text file listing the HR images (BasicSR\'s meta info: the '
                     'first word of each line, relative to dataroot_H; null: every image of the folder)')


def meta_info_images(opt: Dict[str, Any], folder: str) -> List[str]:
    """The images of `folder` that the file of option `meta_info_file` names (BasicSR's meta info files: the first
    word of each line), in its order; UserError naming the key for an unreadable file or a listed non-image."""
    path, where = opt['meta_info_file'], f'{opt["_where"]}.meta_info_file'
    try:
        with open(path, encoding='utf-8') as f:
            names = [line.split(' ')[0].strip() for line in f if line.strip()]
    except OSError as e:
        raise UserError(f'{where}: cannot read {path}: {e.strerror}') from None
    missing = [n for n in names if not is_image_file(n) or not os.path.isfile(os.path.join(folder, n))]
    if missing:
        raise UserError(f'{where}: {path} lists {missing[0]}, which is not an image in {folder}'
                        + (f' ({len(missing)} such lines)' if len(missing) > 1 else ''))
    if not names:
        raise UserError(f'{where}: {path} lists no images')
    return names


# Keys every image dataset takes beside its own: its folders, augmentation, scoring conventions, cache_data.
IMAGE_OPTIONS: Dict[str, Any] = {
    'dataroot_H': Key(REQUIRED, (str,), help='folder of the high-quality (target) images'),
    'dataroot_L': Key(None, (str, type(None)), help='folder of the low-quality inputs, paired with dataroot_H in '
                                                     'sorted order (null: made from H)'),
    'use_hflip': Key(True, (bool,), help='training: random horizontal flips'),
    'use_rot': Key(True, (bool,), help='training: random vertical flips and 90° rotations (the rotations only of a '
                                       'square patch)'),
    'metric_border': Key(None, (int, type(None)), at_least(0), 'evaluation: pixels cropped at each border before '
                                                               'PSNR/SSIM (null: the scale for SR, else 0)'),
    'metric_round_y': Key(None, (bool, type(None)), help='evaluation: round Y to integers before the Y scores '
                                                         '(null: true for SR)'),
    'cache_data': CACHE_DATA,
}
CHANNELS = Key(3, (int,), one_of(1, 3), '1 for gray, 3 for colour images')  # `n_channels`: gray or colour images


def patch_size(default: int) -> Key:
    """The `H_size` key: the training patch (of the high-quality image), in pixels: a side or [height, width]
    (data/patches.py)."""
    return patch_key(default, 'training patch size of the high-quality image, in pixels')


def scale(default: int) -> Key:
    """The `scale` key: high-quality images are `scale` times the low-quality ones."""
    return Key(default, (int,), at_least(1), 'high-quality images are this many times the low-quality ones')


class ImageDataset(Dataset):
    """Options are checked, then the folders listed, then every file's header checked (data/checks.py).

    What the files must satisfy depends on the phase: training crops `H_size` patches (H_size/scale
    from low-quality images), evaluation scores whole images with PSNR and SSIM after cropping
    `metric_border` pixels at each border (null: the scale for SR, none at scale 1, as KAIR's test
    scripts do; metrics/fidelity.py `metric_border`).
    """

    needs_L = False  # dataroot_L is required (paired folders)
    reads_16bit = True  # 16-bit files are read as uint16 (False: mapped to uint8, for 8-bit pipelines)

    def __init__(self, opt: Dict[str, Any]) -> None:
        self.opt = opt
        self.where = opt['_where']
        self.train = opt['phase'] == 'train'
        self.check_options()
        self.paths_H, self.paths_L = self.list_files()
        self.files_checked_for_training = False
        self.check_files()
        paths = self.paths_H + (self.paths_L or [])
        colour_profiles(paths, opt['icc'], self.where)
        depths = image_depths(paths) if self.reads_16bit and opt['cache_data'] else {}
        self.cache: Optional[FrameCache] = cache_frames(
            opt['cache_data'], frame_shapes(paths, self.header_sizes, self.n_channels), self._decode, self.where,
            {p: np.dtype(np.uint16) for p, bits in depths.items() if bits == 16})

    def list_files(self) -> Tuple[List[str], Optional[List[str]]]:
        """(the high-quality images, the low-quality ones paired with them in order, or None when L is made from H):
        the folders' images in sorted order, which must pair up one to one."""
        opt = self.opt
        paths_H = list_folder(opt, 'dataroot_H')
        if not (opt['dataroot_L'] or self.needs_L):
            return paths_H, None
        paths_L = list_folder(opt, 'dataroot_L')
        if len(paths_L) != len(paths_H):
            raise UserError(f'{self.where}.dataroot_L: {len(paths_L)} images in {opt["dataroot_L"]} but '
                            f'{len(paths_H)} in {opt["dataroot_H"]}; the folders must pair up one to one')
        return paths_H, paths_L

    def check_options(self) -> None:
        """What relates several option values, at construction (the options check each value alone)."""
        opt, where = self.opt, self.where
        self.n_channels = self._channels()
        # a dataset type with a `scale` key has it after validation; one without pairs images of one size
        self.scale = opt['scale'] if 'scale' in self.OPTIONS else 1
        for key in ('metric_border', 'metric_round_y'):
            if self.train and opt[key] is not None:
                raise UserError(f'{where}.{key}: scoring options belong in the evaluation section '
                                f'(datasets.test); training data is not scored')
        self.border = metric_border(self.scale, opt['metric_border'])
        self.patch_size = opt['H_size']
        if self.train:
            self._check_patch_options()
            self._warn_if_tiny()

    def _warn_if_tiny(self) -> None:
        """One warning line when the network's training input, H_size / scale, is too small to learn from."""
        s = self.scale
        warn_if_tiny(f'{self.where}.H_size', f'{shown(self.patch_size)}' + (f' / scale {s}' if s > 1 else ''),
                     self.patch_size, s)

    def _channels(self) -> int:
        """Channels the images are read with (`n_channels`)."""
        return self.opt['n_channels']

    def channels_note(self) -> str:
        """What the items' channel count is and which key sets it, for start-up messages about a network
        that does not fit it."""
        n = self.opt['n_channels']
        return f'{n}-channel images (n_channels {n})'

    def _check_patch_options(self) -> None:
        if indivisible(self.patch_size, self.scale):
            raise UserError(f'{self.where}.H_size: {shown(self.patch_size)} is not divisible by '
                            f'scale {self.scale}')

    def __len__(self) -> int:
        return len(self.paths_H)

    def check_train_options(self) -> None:
        """Fail early (in the main process) on options and files that only matter for training.

        Called by the train loader; a dataset built for evaluation gets its files checked for
        training here.
        """
        self._check_patch_options()
        if not self.train and not self.files_checked_for_training:
            self.check_files(train=True)

    def check_files(self, train: Optional[bool] = None) -> None:
        """Header and size of every file, for training (patches) or evaluation (pairs, SSIM)."""
        train = self.train if train is None else train
        problems = FileProblems()
        key_H, key_L = f'{self.where}.dataroot_H', f'{self.where}.dataroot_L'
        sizes_H = image_sizes(self.paths_H)
        paths_L = self.paths_L or [None] * len(self.paths_H)
        sizes_L = image_sizes(self.paths_L) if self.paths_L is not None else [None] * len(self.paths_H)
        if self.paths_L is not None:
            mismatch = scale_mismatch([(pH, sH, pL, sL) for pH, sH, pL, sL in zip(self.paths_H, sizes_H, paths_L, sizes_L)
                                       if not isinstance(sH, str) and not isinstance(sL, str)],
                                      self.scale, self.where, exact=train)
            if mismatch:
                raise UserError(mismatch)
        too_small = 0
        for path_H, size_H, path_L, size_L in zip(self.paths_H, sizes_H, paths_L, sizes_L):
            if isinstance(size_H, str):
                problems.add(key_H, path_H, size_H)
            if isinstance(size_L, str):
                problems.add(key_L, path_L, size_L)
            if isinstance(size_H, str) or isinstance(size_L, str):
                continue
            if size_L is None:
                found = self._single_problem(size_H, train)
            else:
                found = self._pair_problem(size_H, size_L, path_L, train)
            if found:
                which, problem = found
                problems.add(key_L if which == 'L' else key_H, path_L if which == 'L' else path_H, problem)
                too_small += PATCH_PROBLEM in problem
        if train and too_small == len(self.paths_H) > 1:  # an option mistake, not a few odd files
            if not isinstance(self.patch_size, int):  # no one number says what fits a [height, width] patch
                most = ''
            elif self.paths_L is not None:
                most = f' (at most {max(min(size) for size in sizes_L) * self.scale})'
            else:
                most = f' (at most {max(min(size) for size in sizes_H)})'
            raise UserError(f'{self.where}.H_size: {shown(self.patch_size)} is larger than any training image '
                            f'allows{most}: every image of {self.opt["dataroot_H"]} is smaller than the patch')
        problems.raise_if_any()
        self.header_sizes = dict(zip(self.paths_H + (self.paths_L or []), sizes_H + sizes_L))  # for cache_data
        self.files_checked_for_training = self.files_checked_for_training or train

    def _patch_problem(self, size: Size, patch: Patch, what: str) -> Optional[str]:
        if fits(size, patch):
            return None
        return f'{fmt(size)} is {PATCH_PROBLEM} ({what})'

    def _single_problem(self, size: Size, train: bool) -> Optional[Tuple[str, str]]:
        """H file without a low-quality file: random crop for training, whole image for evaluation."""
        if train:
            problem = self._patch_problem(size, self.patch_size, f'H_size {shown(self.patch_size)}')
            return ('H', problem) if problem else None
        evaluated = self._eval_size(size)
        if evaluated is None:
            return 'H', f'{fmt(size)} is smaller than the scale {self.scale}'
        problem = ssim_problem(size, self.border, evaluated)
        return ('H', problem) if problem else None

    def _eval_size(self, size: Size) -> Optional[Size]:
        return size

    def _pair_problem(self, size_H: Size, size_L: Size, path_L: str, train: bool) -> Optional[Tuple[str, str]]:
        s = self.scale
        (h, w), (hl, wl) = size_H, size_L
        times = 'the same size as' if s == 1 else f'{s}x the size of'
        if train:
            if (h, w) != (hl * s, wl * s):
                return 'H', (f'{fmt(size_H)} but its low-quality image {path_L} is {fmt(size_L)}; for training '
                             f'an image must be exactly {times} its low-quality image (scale {s})')
            lq_patch = divided(self.patch_size, s)
            what = f'H_size {shown(self.patch_size)}'
            what += f' / scale {s} = {shown(lq_patch)}' if s > 1 else ''
            problem = self._patch_problem(size_L, lq_patch, what)
            return ('H' if s == 1 else 'L', problem) if problem else None
        if not (hl * s <= h < hl * s + s and wl * s <= w < wl * s + s):
            extra = f' (up to {s - 1} more rows/columns)' if s > 1 else ''
            return 'H', (f'{fmt(size_H)} does not match its low-quality image {path_L} ({fmt(size_L)}): with '
                         f'scale {s} it must be {hl * s}x{wl * s}{extra}')
        problem = ssim_problem(size_H, self.border, (hl * s, wl * s))
        return ('H', problem) if problem else None

    def _decode(self, path: str) -> np.ndarray:
        return imread_uint(path, self.n_channels, bgr=True, keep_16bit=self.reads_16bit, icc=self.opt['icc'])

    def _read_bgr(self, path: str) -> np.ndarray:
        """HWC uint8 with colour in BGR order (`bgr_to_rgb` after cropping), from the cache if there is one."""
        return self.cache.get(path) if self.cache is not None else self._decode(path)

    def _read(self, path: str) -> np.ndarray:
        """The whole image, RGB."""
        return np.array(bgr_to_rgb(self._read_bgr(path)), order='C')  # a copy of its own, also of a cached frame

    def __getitem__(self, key: ItemKey) -> Dict[str, Any]:
        index, seed = parse_key(key)
        if self.paths_L is not None:
            return self._paired_item(index, seed)
        path_H, img_H, rng = self._read_H(index, seed)
        return self._synthesized_item(index, seed, path_H, img_H, rng)

    def _synthesized_item(self, index: int, seed: Optional[int], path_H: str, img_H: np.ndarray,
                          rng: Optional[random.Random]) -> Dict[str, Any]:
        """The item whose L is made from H (noise, downscaling): datasets without dataroot_L define it."""
        raise NotImplementedError(f'{type(self).__name__} needs dataroot_L')

    def _read_H(self, index: int, seed: Optional[int]) -> Tuple[str, np.ndarray, Optional[random.Random]]:
        """Path and image H of item `index`; for a training key (a seed) cropped to the patch, with the
        sample's random generator returned for the augmentation that follows (None for evaluation)."""
        path_H = self.paths_H[index]
        if seed is None:
            return path_H, self._read(path_H), None
        rng = random.Random(seed)
        self._check_patch_options()
        (img_H,) = random_crop([self._read_bgr(path_H)], self.patch_size, rng, where=f'{self.where}.H_size ({path_H})')
        return path_H, np.array(bgr_to_rgb(img_H), order='C'), rng

    def _augment(self, imgs: List[np.ndarray], rng: random.Random) -> List[np.ndarray]:
        return augment(imgs, bool(self.opt['use_hflip']), bool(self.opt['use_rot']), rng)

    def _paired_train(self, img_H: np.ndarray, img_L: np.ndarray, rng: random.Random,
                      path_H: str) -> Tuple[np.ndarray, np.ndarray]:
        self._check_patch_options()
        (img_H,), (img_L,) = paired_random_crop([img_H], [img_L], self.patch_size, self.scale, rng,
                                                where=f'{self.where}.H_size ({path_H})')
        img_H, img_L = self._augment([bgr_to_rgb(img_H), bgr_to_rgb(img_L)], rng)
        return img_H, img_L

    def _paired_eval(self, img_H: np.ndarray, img_L: np.ndarray, path_H: str) -> np.ndarray:
        """Crop H to scale x L (SR ground truths are often not a multiple of the scale)."""
        h, w = img_L.shape[0] * self.scale, img_L.shape[1] * self.scale
        if not (h <= img_H.shape[0] < h + self.scale and w <= img_H.shape[1] < w + self.scale):
            raise UserError(f'{self.where}: {path_H} is {img_H.shape[0]}x{img_H.shape[1]} but its '
                            f'low-quality image is {img_L.shape[0]}x{img_L.shape[1]} (scale {self.scale})')
        return img_H[:h, :w]

    def _paired_item(self, index: int, seed: Optional[int]) -> Dict[str, Any]:
        """Item from an H file and its L file: random crop + augment for training, else whole."""
        path_H, path_L = self.paths_H[index], self.paths_L[index]
        if seed is not None:
            img_H, img_L = self._paired_train(self._read_bgr(path_H), self._read_bgr(path_L), random.Random(seed), path_H)
        else:
            img_H, img_L = self._read(path_H), self._read(path_L)
            img_H = self._paired_eval(img_H, img_L, path_H)
        return self._item(img_L, img_H, path_L, path_H)

    @staticmethod
    def _item(img_L: np.ndarray, img_H: np.ndarray, path_L: str, path_H: str) -> Dict[str, Any]:
        """Tensors of an item: uint8 (uint16) images as uint8 (uint16) tensors (scaled where they are used),
        float images (already in [0, 1]) as float32."""
        L = uint8_tensor(img_L) if img_L.dtype in (np.uint8, np.uint16) else torch.from_numpy(
            np.ascontiguousarray(img_L.transpose(2, 0, 1))).float()
        return {'L': L, 'H': uint8_tensor(img_H), 'L_path': path_L, 'H_path': path_H}


@DATASETS.register('plain')
class DatasetPlain(ImageDataset):
    """Paired H/L folders of equal-size images (or H = scale x L)."""

    OPTIONS = {
        **IMAGE_OPTIONS,
        'dataroot_L': Key(REQUIRED, (str,)),
        'n_channels': CHANNELS,
        'H_size': patch_size(96),
        'scale': scale(1),
    }

    needs_L = True


@DATASETS.register('dncnn', 'denoising')
class DatasetDnCNN(ImageDataset):
    """Clean images + additive white gaussian noise of std `sigma` (0..255 scale).

    As in KAIR the noisy input is not clipped or quantised. Evaluation uses `sigma_test` (default:
    `sigma`) with noise seeded by the image index, so every run evaluates on the same noisy images.
    With `dataroot_L` the noisy images are read from files instead.
    """

    OPTIONS = {
        **IMAGE_OPTIONS,
        'n_channels': CHANNELS,
        'H_size': patch_size(64),
        'sigma': Key(25.0, (int, float), noise_level),
        'sigma_test': Key(None, (int, float, type(None)), noise_level),  # null: sigma
    }

    def check_options(self) -> None:
        super().check_options()
        sigma, sigma_test = self.opt['sigma'], self.opt['sigma_test']
        self.sigma, self.sigma_test = float(sigma), float(sigma if sigma_test is None else sigma_test)

    def _synthesized_item(self, index: int, seed: Optional[int], path_H: str, img_H: np.ndarray,
                          rng: Optional[random.Random]) -> Dict[str, Any]:
        if rng is not None:
            (img_H,) = self._augment([img_H], rng)
            sigma, noise_seed = self.sigma, seed
        else:
            sigma, noise_seed = self.sigma_test, index
        H = uint8_tensor(img_H)  # stays integer: its type is the item's bit depth
        gen = torch.Generator().manual_seed(noise_seed)
        L = to_float_image(H) + torch.randn(H.shape, generator=gen).mul_(sigma / 255.0)
        return {'L': L, 'H': H, 'L_path': path_H, 'H_path': path_H}


@DATASETS.register('sr')
class DatasetSR(ImageDataset):
    """Super-resolution: L from `dataroot_L`, else MATLAB-bicubic x1/scale of H.

    As in KAIR the bicubic L is kept as computed, in floating point (not rounded, not clipped: up to
    several grey levels from the uint8 files such LR images are usually saved as). `quantize_L: true`
    rounds and clips it to uint8 instead, like training on BasicSR-style pre-computed LR PNGs.
    """

    OPTIONS = {
        **IMAGE_OPTIONS,
        'n_channels': CHANNELS,
        'H_size': patch_size(96),
        'scale': scale(4),
        'quantize_L': Key(False, (bool,), help='round and clip the bicubic L to the files\' bit depth, like '
                          'pre-computed LR PNGs (false: floating point, as KAIR); unused with dataroot_L'),
    }

    def check_options(self) -> None:
        super().check_options()
        self.quantize_L = self.opt['quantize_L']

    def _downscale(self, img_H: np.ndarray) -> Any:
        """Bicubic L of H: float in [0, 1] (KAIR), or uint8 (uint16 for 16-bit H) with `quantize_L`."""
        if self.quantize_L:
            return imresize_bicubic(img_H, 1.0 / self.scale)
        return imresize_bicubic(img_H.astype(np.float64) / image_peak(img_H), 1.0 / self.scale).astype(np.float32)

    def _eval_size(self, size: Size) -> Optional[Size]:
        """Evaluation crops H to a multiple of the scale."""
        h, w = size[0] - size[0] % self.scale, size[1] - size[1] % self.scale
        return (h, w) if h and w else None

    def _synthesized_item(self, index: int, seed: Optional[int], path_H: str, img_H: np.ndarray,
                          rng: Optional[random.Random]) -> Dict[str, Any]:
        if rng is not None:
            img_L = self._downscale(img_H)
            img_H, img_L = self._augment([img_H, img_L], rng)
        else:
            h = img_H.shape[0] - img_H.shape[0] % self.scale
            w = img_H.shape[1] - img_H.shape[1] % self.scale
            if h == 0 or w == 0:
                raise UserError(f'{self.where}: {path_H} ({img_H.shape[0]}x{img_H.shape[1]}) is '
                                f'smaller than the scale {self.scale}')
            img_H = img_H[:h, :w]
            img_L = self._downscale(img_H)
        return self._item(img_L, img_H, path_H, path_H)
