"""A known noise level given to the network (KAIR's `ffdnet`, `fdncnn` and `dpsr` datasets).

Blind DnCNN learns one noise level; FFDNet and FDnCNN take the level as an input, so training draws
a level per sample from `sigma` = [min, max] (0..255 scale) and evaluation uses `sigma_test`.
- `ffdnet`: the level is returned as C (1×1×1, on the 0..1 scale); model `plain2` feeds (L, C).
- `fdncnn`: the level map is appended to L as one more channel (the network's in_nc = n_channels + 1).
As for DnCNN the noise is gaussian, not clipped or quantised, drawn from the sample's seed in
training and from the image index in evaluation, so every run sees the same noisy test images.
With `dataroot_L` the noisy images are read from files and `sigma_test` states their level.
"""
import random
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from data.datasets.image import DatasetDnCNN, DatasetSR, ImageDataset
from data.option_checks import noise_level, noise_range
from data.registry import DATASETS
from utils.image import to_float_image, uint8_tensor
from utils.options import Key


def noise_options(sigma: List[int], sigma_test: int) -> Dict[str, Key]:
    """The keys `sigma` ([min, max] for training) and `sigma_test` (evaluation), noise stds on the 0..255 scale."""
    return {'sigma': Key(sigma, (list,), noise_range), 'sigma_test': Key(sigma_test, (int, float), noise_level)}


class _NoiseLevelDataset(ImageDataset):
    # DnCNN's keys, with a noise level range for training instead of one level
    OPTIONS = {**DatasetDnCNN.OPTIONS, **noise_options([0, 75], 25)}

    def check_options(self) -> None:
        super().check_options()
        self.sigma_range, self.sigma_test = noise_levels(self.opt)

    def _noisy(self, index: int, seed: Optional[int], img_H: np.ndarray,
               rng: Optional[random.Random]) -> Tuple[torch.Tensor, torch.Tensor, float]:
        """(H, L, noise level on the 0..1 scale) for a clean image."""
        if rng is not None:
            (img_H,) = self._augment([img_H], rng)
            level, noise_seed = rng.uniform(*self.sigma_range) / 255.0, seed
        else:
            level, noise_seed = self.sigma_test / 255.0, index
        H = uint8_tensor(img_H)  # stays integer: its type is the item's bit depth
        L = to_float_image(H) + torch.randn(H.shape, generator=torch.Generator().manual_seed(noise_seed)).mul_(level)
        return H, L, level

    def _paired_item(self, index: int, seed: Optional[int]) -> Dict[str, Any]:
        item = super()._paired_item(index, seed)
        return self._with_level(item, self.sigma_test / 255.0)

    def _synthesized_item(self, index: int, seed: Optional[int], path_H: str, img_H: np.ndarray,
                          rng: Optional[random.Random]) -> Dict[str, Any]:
        H, L, level = self._noisy(index, seed, img_H, rng)
        return self._with_level({'L': L, 'H': H, 'L_path': path_H, 'H_path': path_H}, level)

    def _with_level(self, item: Dict[str, Any], level: float) -> Dict[str, Any]:
        raise NotImplementedError


@DATASETS.register('ffdnet')
class DatasetFFDNet(_NoiseLevelDataset):
    """Noisy L, clean H and the noise level C (1×1×1) for networks fed (L, C)."""

    def _with_level(self, item: Dict[str, Any], level: float) -> Dict[str, Any]:
        return {**item, 'C': torch.full((1, 1, 1), level)}


@DATASETS.register('fdncnn')
class DatasetFDnCNN(_NoiseLevelDataset):
    """Noisy L with the noise level map appended as its last channel, clean H."""

    def _with_level(self, item: Dict[str, Any], level: float) -> Dict[str, Any]:
        return {**item, 'L': with_level_map(item['L'], level)}


def noise_levels(opt: Dict[str, Any]) -> Tuple[Tuple[float, float], float]:
    """(training range, evaluation level) from the checked `sigma` = [min, max] and `sigma_test` (0..255 scale)."""
    (lo, hi), test = opt['sigma'], opt['sigma_test']
    return (float(lo), float(hi)), float(test)


def with_level_map(L: torch.Tensor, level: float) -> torch.Tensor:
    """L (scaled to [0, 1] if it is still uint8) with a constant map of the noise level (0..1 scale)
    appended as its last channel."""
    L = to_float_image(L)
    return torch.cat([L, torch.full_like(L[:1], level)], 0)


@DATASETS.register('dpsr')
class DatasetDPSR(DatasetSR):
    """Super-resolution of noisy images (DPSR): L = bicubic x1/scale of H plus gaussian noise of a level
    drawn per sample from `sigma` = [min, max] (`sigma_test` for evaluation), with the level map
    appended as the last channel of L (the network's in_nc = n_channels + 1), as in KAIR."""

    OPTIONS = {**DatasetSR.OPTIONS, **noise_options([0, 50], 0)}

    def check_options(self) -> None:
        super().check_options()
        self.sigma_range, self.sigma_test = noise_levels(self.opt)

    def _paired_item(self, index: int, seed: Optional[int]) -> Dict[str, Any]:
        item = super()._paired_item(index, seed)
        return {**item, 'L': with_level_map(item['L'], self.sigma_test / 255.0)}

    def _synthesized_item(self, index: int, seed: Optional[int], path_H: str, img_H: np.ndarray,
                          rng: Optional[random.Random]) -> Dict[str, Any]:
        item = super()._synthesized_item(index, seed, path_H, img_H, rng)
        if rng is not None:
            level, noise_seed = rng.uniform(*self.sigma_range) / 255.0, seed
        else:
            level, noise_seed = self.sigma_test / 255.0, index
        L = item['L']
        L = L + torch.randn(L.shape, generator=torch.Generator().manual_seed(noise_seed)).mul_(level)
        return {**item, 'L': with_level_map(L, level)}

