"""Blind super-resolution (KAIR's `blindsr` dataset): L made from H by BSRGAN's degradation model.

Training crops an `H_size` patch (default `lq_patchsize * scale`), flips/rotates it, and degrades it
with `degradation_type` (`bsrgan` or `bsrgan_plus`, data/degradations/bsrgan.py), which returns an
`lq_patchsize` L patch and the aligned H patch. As in KAIR, evaluation degrades the whole image and
scores one `lq_patchsize` patch of it; KAIR draws those degradations anew at every evaluation, here
they are seeded by the image index so every run (and every process) evaluates on the same L images.
A training sample draws everything (crop, flips, degradation) from its seed: crop and flips from
`random.Random(seed)`, the degradation from `np.random.default_rng(seed)`.
With `dataroot_L` the pairs are read from files instead, as in the `sr` dataset.
"""
import random
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch

from data.checks import Size, fmt, ssim_problem
from data.datasets.image import IMAGE_OPTIONS, ImageDataset, patch_size, scale
from data.degradations.bsrgan import DEGRADATIONS, degrade
from data.registry import DATASETS
from utils.errors import UserError
from utils.options import Key, at_least, between, one_of, only


@DATASETS.register('blindsr')
class DatasetBlindSR(ImageDataset):
    reads_16bit = False  # 16-bit files mapped to 8 bits: the BSRGAN degradations work on 8-bit images

    OPTIONS = {
        **IMAGE_OPTIONS,
        'n_channels': Key(3, (int,), only(3, 'the BSRGAN degradations are colour')),
        'H_size': patch_size(None),  # null: lq_patchsize * scale
        'scale': scale(4),
        'degradation_type': Key('bsrgan', (str,), one_of(*DEGRADATIONS),
                                'BSRGAN\'s degradation model, or its second-order variant bsrgan_plus'),
        'shuffle_prob': Key(0.1, (int, float), between(0, 1, 'a probability'),
                            'bsrgan_plus: probability that all its steps run in a random order'),
        'use_sharp': Key(False, (bool,), help='bsrgan_plus: USM-sharpen H first; L is degraded from it and it is '
                         'the target'),
        'lq_patchsize': Key(64, (int,), at_least(1), 'side of the L patch (H: x scale); evaluation scores one such '
                            'patch of each image'),
    }

    def check_options(self) -> None:
        opt, where = self.opt, self.where
        self.scale = opt['scale']
        self.lq_patchsize = opt['lq_patchsize']
        self.degradation = opt['degradation_type']
        self.shuffle_prob = float(opt['shuffle_prob'])
        self.use_sharp = opt['use_sharp']
        lq_size = self.lq_patchsize * self.scale
        if opt['H_size'] is None:
            self.opt = {**opt, 'H_size': lq_size}
        super().check_options()
        if self.patch_size < lq_size:
            raise UserError(f'{where}.H_size: {self.patch_size} is smaller than lq_patchsize x scale = '
                            f'{self.lq_patchsize} x {self.scale} = {lq_size}')

    def _single_problem(self, size: Size, train: bool) -> Optional[Tuple[str, str]]:
        """Training: the H_size patch. Evaluation: the scored lq_patchsize × scale patch."""
        if train:
            return super()._single_problem(size, train)
        lq_size = self.lq_patchsize * self.scale
        if min(size) < lq_size:
            return 'H', (f'{fmt(size)} is smaller than the evaluated patch (lq_patchsize {self.lq_patchsize} '
                         f'x scale {self.scale} = {lq_size})')
        problem = ssim_problem(size, self.border, (lq_size, lq_size))
        return ('H', problem) if problem else None

    def _synthesized_item(self, index: int, seed: Optional[int], path_H: str, img_H: np.ndarray,
                          rng: Optional[random.Random]) -> Dict[str, Any]:
        if rng is not None:
            (img_H,) = self._augment([img_H], rng)
            degradation_rng = np.random.default_rng(seed)
        else:
            degradation_rng = np.random.default_rng(index)
        H = img_H.astype(np.float32) / np.float32(255.0)
        try:
            L, H = degrade(self.degradation, H, self.scale, degradation_rng, self.lq_patchsize,
                           self.shuffle_prob, self.use_sharp)
        except ValueError as e:  # an image too small for the patch (the start-up checks normally catch it)
            raise UserError(f'{self.where}: {path_H}: {e}') from None
        return {'L': _tensor(L), 'H': _tensor(H), 'L_path': path_H, 'H_path': path_H}


def _tensor(img: np.ndarray) -> torch.Tensor:
    """HWC float32 in [0, 1] → CHW float32 tensor."""
    return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))
