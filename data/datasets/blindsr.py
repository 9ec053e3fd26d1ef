"""Blind super-resolution (KAIR's `blindsr` dataset): L made from H by BSRGAN's degradation model.

Training crops an `H_size` patch (default `lq_patchsize * scale`), flips/rotates it, and degrades it
with `degradation_type` (`bsrgan` or `bsrgan_plus`, data/degradations/bsrgan.py), which returns an
`lq_patchsize` L patch and the aligned H patch. A larger H_size is a margin that the blurs see beyond the
patch (KAIR: 320 for 72 x 4; one log line says so); one at least twice the patch on a side is refused, as the
two keys then disagree. Both sizes take [height, width] as well as one integer (data/patches.py). As in KAIR, evaluation degrades the whole image and
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
from data.datasets.image import IMAGE_OPTIONS, ImageDataset, scale
from data.degradations.bsrgan import DEGRADATIONS, degrade
from data.patches import Patch, divided, fits, patch_hw, patch_key, shown, times, warn_if_tiny
from data.registry import DATASETS
from utils.errors import UserError
from utils.dist import is_main_process
from utils.logger import get_logger
from utils.options import Key, between, one_of, only


@DATASETS.register('blindsr')
class DatasetBlindSR(ImageDataset):
    reads_16bit = False  # 16-bit files mapped to 8 bits: the BSRGAN degradations work on 8-bit images

    OPTIONS = {
        **IMAGE_OPTIONS,
        'n_channels': Key(3, (int,), only(3, 'the BSRGAN degradations are colour')),
        'H_size': patch_key(None, 'the training crop that is degraded, in pixels (null: lq_patchsize x scale)',
                            nullable=True),
        'scale': scale(4),
        'degradation_type': Key('bsrgan', (str,), one_of(*DEGRADATIONS),
                                'BSRGAN\'s degradation model, or its second-order variant bsrgan_plus'),
        'shuffle_prob': Key(0.1, (int, float), between(0, 1, 'a probability'),
                            'bsrgan_plus: probability that all its steps run in a random order'),
        'use_sharp': Key(False, (bool,), help='bsrgan_plus: USM-sharpen H first; L is degraded from it and it is '
                         'the target'),
        'lq_patchsize': patch_key(64, 'the L patch, in pixels (H: x scale); evaluation scores one such patch of each '
                                  'image'),
    }

    def check_options(self) -> None:
        opt = self.opt
        self.scale = opt['scale']
        self.lq_patchsize = opt['lq_patchsize']
        self.degradation = opt['degradation_type']
        self.shuffle_prob = float(opt['shuffle_prob'])
        self.use_sharp = opt['use_sharp']
        lq_size = times(self.lq_patchsize, self.scale)
        if opt['H_size'] is None:
            self.opt = {**opt, 'H_size': lq_size}
        super().check_options()
        self._check_crop(lq_size)

    def _check_crop(self, lq_size: Patch) -> None:
        """H_size, the crop that is degraded, against the patch the network trains on, lq_patchsize x scale (KAIR
        crops 320 pixels for 72 x 4: a margin, so that the blurs see beyond the patch's borders). A crop at least
        twice the patch on a side is refused: the keys then contradict each other (most of every crop would be
        degraded and thrown away), and training on the small patch by mistake would go unseen."""
        where, crop = self.where, self.patch_size
        (h, w), (ph, pw) = patch_hw(crop), patch_hw(lq_size)
        patch = f'lq_patchsize x scale = {shown(self.lq_patchsize)} x {self.scale} = {shown(lq_size)}'
        if h < ph or w < pw:
            raise UserError(f'{where}.H_size: {shown(crop)} is smaller than {patch}')
        if not self.train or (h, w) == (ph, pw):
            return
        whole = f'lq_patchsize {shown(divided(crop, self.scale))} (H_size / scale) trains on the whole crop'
        if h >= 2 * ph or w >= 2 * pw:
            raise UserError(f'{where}.H_size: {shown(crop)} is at least twice {patch} on a side: the network '
                            f'would train on {ph}x{pw} patches of each {h}x{w} crop; {whole}, or H_size null on '
                            f'the patch alone')
        if is_main_process():
            get_logger().warning(f'{where}.H_size: {shown(crop)} crops are degraded whole, then the network trains '
                                 f'on a {patch} patch of each (a margin for the blurs, as KAIR\'s 320 for 72 x 4); '
                                 f'{whole}')

    def _warn_if_tiny(self) -> None:
        """The network's training input is the lq_patchsize patch."""
        warn_if_tiny(f'{self.where}.lq_patchsize', shown(self.lq_patchsize), self.lq_patchsize)

    def _single_problem(self, size: Size, train: bool) -> Optional[Tuple[str, str]]:
        """Training: the H_size patch. Evaluation: the scored lq_patchsize × scale patch."""
        if train:
            return super()._single_problem(size, train)
        lq_size = times(self.lq_patchsize, self.scale)
        if not fits(size, lq_size):
            return 'H', (f'{fmt(size)} is smaller than the evaluated patch (lq_patchsize {shown(self.lq_patchsize)} '
                         f'x scale {self.scale} = {shown(lq_size)})')
        problem = ssim_problem(size, self.border, patch_hw(lq_size))
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
