"""Image restoration datasets (KAIR DatasetPlain / DatasetDnCNN / DatasetSR equivalents).

Keys decide the mode: a `(index, seed)` tuple from the training sampler means training (random
crop + flips, noise drawn from the sample seed); a plain int means evaluation (whole image,
deterministic noise seeded by the index). Images are decoded as uint8 and cropped before they
are converted to float, which keeps large training images cheap.
"""
import os
import random
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset

from data.registry import REQUIRED, register_dataset
from data.transforms import augment, paired_random_crop, random_crop
from utils.errors import UserError
from utils.image import IMG_EXTENSIONS, imread_uint, imresize_bicubic, list_images, uint2tensor

Key = Any  # int (evaluation) or (index, seed) tuple (training)


def _where(opt: Dict[str, Any]) -> str:
    """Option path used in error messages, e.g. 'datasets.train'."""
    if opt.get('_where'):
        return str(opt['_where'])
    return f"datasets.{opt['name']}" if opt.get('name') else 'datasets'


def parse_key(key: Key) -> Tuple[int, Optional[int]]:
    """(index, seed) for a training key, (index, None) for an evaluation key."""
    if isinstance(key, (tuple, list)):
        return int(key[0]), int(key[1])
    return int(key), None


def list_folder(opt: Dict[str, Any], key: str) -> List[str]:
    """Sorted image paths of the folder in option `key`; UserError if missing or empty."""
    where = f'{_where(opt)}.{key}'
    folder = opt.get(key)
    if not isinstance(folder, str) or not folder:
        raise UserError(f'{where}: expected a folder path, got {folder!r}')
    if not os.path.isdir(folder):
        raise UserError(f'{where}: folder not found: {folder}')
    paths = list_images(folder)
    if not paths:
        raise UserError(f'{where}: no images ({", ".join(IMG_EXTENSIONS)}) in {folder}')
    return paths


class _ImageDataset(Dataset):
    def __init__(self, opt: Dict[str, Any]) -> None:
        self.opt = opt
        self.where = _where(opt)
        self.n_channels = int(opt['n_channels'])
        if self.n_channels not in (1, 3):
            raise UserError(f'{self.where}.n_channels: must be 1 or 3, got {opt["n_channels"]!r}')
        self.patch_size = int(opt['H_size'])
        self.scale = int(opt.get('scale', 1))
        if self.scale < 1:
            raise UserError(f'{self.where}.scale: must be >= 1, got {opt["scale"]!r}')
        self.paths_H = list_folder(opt, 'dataroot_H')
        self.paths_L: Optional[List[str]] = None
        if opt.get('dataroot_L'):
            self.paths_L = list_folder(opt, 'dataroot_L')
            if len(self.paths_L) != len(self.paths_H):
                raise UserError(f'{self.where}.dataroot_L: {len(self.paths_L)} images in '
                                f'{opt["dataroot_L"]} but {len(self.paths_H)} in {opt["dataroot_H"]}; '
                                'the folders must pair up one to one')

    def __len__(self) -> int:
        return len(self.paths_H)

    def check_train_options(self) -> None:
        """Fail early (in the main process) on options that only matter for training."""
        if self.patch_size < 1:
            raise UserError(f'{self.where}.H_size: must be >= 1, got {self.patch_size}')
        if self.patch_size % self.scale:
            raise UserError(f'{self.where}.H_size: {self.patch_size} is not divisible by '
                            f'scale {self.scale}')

    def _read(self, path: str) -> np.ndarray:
        return imread_uint(path, self.n_channels)

    def _augment(self, imgs: List[np.ndarray], rng: random.Random) -> List[np.ndarray]:
        return augment(imgs, bool(self.opt['use_hflip']), bool(self.opt['use_rot']), rng)

    def _paired_train(self, img_H: np.ndarray, img_L: np.ndarray, rng: random.Random,
                      path_H: str) -> Tuple[np.ndarray, np.ndarray]:
        self.check_train_options()
        (img_H,), (img_L,) = paired_random_crop([img_H], [img_L], self.patch_size, self.scale, rng,
                                                where=f'{self.where}.H_size ({path_H})')
        img_H, img_L = self._augment([img_H, img_L], rng)
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
        img_H, img_L = self._read(path_H), self._read(path_L)
        if seed is not None:
            img_H, img_L = self._paired_train(img_H, img_L, random.Random(seed), path_H)
        else:
            img_H = self._paired_eval(img_H, img_L, path_H)
        return self._item(img_L, img_H, path_L, path_H)

    @staticmethod
    def _item(img_L: Any, img_H: np.ndarray, path_L: str, path_H: str) -> Dict[str, Any]:
        L = img_L if isinstance(img_L, torch.Tensor) else uint2tensor(img_L)
        return {'L': L, 'H': uint2tensor(img_H), 'L_path': path_L, 'H_path': path_H}


@register_dataset('plain')
class DatasetPlain(_ImageDataset):
    """Paired H/L folders of equal-size images (or H = scale x L)."""

    OPTIONS = {
        'dataroot_H': REQUIRED,
        'dataroot_L': REQUIRED,
        'n_channels': 3,
        'H_size': 96,
        'scale': 1,
        'use_hflip': True,
        'use_rot': True,
    }

    def __init__(self, opt: Dict[str, Any]) -> None:
        super().__init__(opt)
        if self.paths_L is None:
            self.paths_L = list_folder(opt, 'dataroot_L')

    def __getitem__(self, key: Key) -> Dict[str, Any]:
        return self._paired_item(*parse_key(key))


@register_dataset('dncnn', 'denoising')
class DatasetDnCNN(_ImageDataset):
    """Clean images + additive white gaussian noise of std `sigma` (0..255 scale).

    As in KAIR the noisy input is not clipped or quantised. Evaluation uses `sigma_test` (default:
    `sigma`) with noise seeded by the image index, so every run evaluates on the same noisy images.
    With `dataroot_L` the noisy images are read from files instead.
    """

    OPTIONS = {
        'dataroot_H': REQUIRED,
        'dataroot_L': None,
        'n_channels': 3,
        'H_size': 64,
        'sigma': 25.0,
        'sigma_test': None,
        'use_hflip': True,
        'use_rot': True,
    }

    def __init__(self, opt: Dict[str, Any]) -> None:
        super().__init__(opt)
        self.sigma = float(opt['sigma'])
        self.sigma_test = self.sigma if opt.get('sigma_test') is None else float(opt['sigma_test'])
        for key, value in (('sigma', self.sigma), ('sigma_test', self.sigma_test)):
            if value < 0:
                raise UserError(f'{self.where}.{key}: must be >= 0, got {value}')

    def __getitem__(self, key: Key) -> Dict[str, Any]:
        index, seed = parse_key(key)
        if self.paths_L is not None:
            return self._paired_item(index, seed)
        path_H = self.paths_H[index]
        img_H = self._read(path_H)
        if seed is not None:
            rng = random.Random(seed)
            self.check_train_options()
            (img_H,) = random_crop([img_H], self.patch_size, rng, where=f'{self.where}.H_size ({path_H})')
            (img_H,) = self._augment([img_H], rng)
            sigma, noise_seed = self.sigma, seed
        else:
            sigma, noise_seed = self.sigma_test, index
        H = uint2tensor(img_H)
        gen = torch.Generator().manual_seed(noise_seed)
        L = H + torch.randn(H.shape, generator=gen).mul_(sigma / 255.0)
        return {'L': L, 'H': H, 'L_path': path_H, 'H_path': path_H}


@register_dataset('sr')
class DatasetSR(_ImageDataset):
    """Super-resolution: L from `dataroot_L`, else MATLAB-bicubic x1/scale of H (rounded to uint8)."""

    OPTIONS = {
        'dataroot_H': REQUIRED,
        'dataroot_L': None,
        'n_channels': 3,
        'H_size': 96,
        'scale': 4,
        'use_hflip': True,
        'use_rot': True,
    }

    def __getitem__(self, key: Key) -> Dict[str, Any]:
        index, seed = parse_key(key)
        if self.paths_L is not None:
            return self._paired_item(index, seed)
        path_H = self.paths_H[index]
        img_H = self._read(path_H)
        if seed is not None:
            rng = random.Random(seed)
            self.check_train_options()
            (img_H,) = random_crop([img_H], self.patch_size, rng, where=f'{self.where}.H_size ({path_H})')
            img_L = imresize_bicubic(img_H, 1.0 / self.scale)
            img_H, img_L = self._augment([img_H, img_L], rng)
        else:
            h = img_H.shape[0] - img_H.shape[0] % self.scale
            w = img_H.shape[1] - img_H.shape[1] % self.scale
            if h == 0 or w == 0:
                raise UserError(f'{self.where}: {path_H} ({img_H.shape[0]}x{img_H.shape[1]}) is '
                                f'smaller than the scale {self.scale}')
            img_H = img_H[:h, :w]
            img_L = imresize_bicubic(img_H, 1.0 / self.scale)
        return self._item(img_L, img_H, path_H, path_H)
