"""Random crops and flips on lists of HWC numpy arrays (any channel count), colour jitter of a clip.

Every list element gets the same crop / flip so paired frames, video clips and spike planes stay
aligned. All randomness comes from the `rng` argument (per-sample seeded by the caller).
"""
import random
from typing import List, Tuple

import numpy as np
import torch

from data.patches import Patch, divided, indivisible, patch_hw, shown
from utils.errors import UserError


def _prefix(where: str) -> str:
    return f'{where}: ' if where else ''


def common_size(imgs: List[np.ndarray], what: str, where: str) -> Tuple[int, int]:
    """The (h, w) all `imgs` share; UserError naming `where` when they differ."""
    sizes = {img.shape[:2] for img in imgs}
    if len(sizes) != 1:
        raise UserError(f'{_prefix(where)}{what} images in one sample differ in size: '
                        f'{sorted(sizes)}')
    return sizes.pop()


def paired_random_crop(gts: List[np.ndarray], lqs: List[np.ndarray], gt_size: Patch, scale: int,
                       rng: random.Random, where: str = '') -> Tuple[List[np.ndarray], List[np.ndarray]]:
    """Crop a gt_size patch (an integer: a square; or [height, width]) from every gt and the matching
    gt_size/scale patch from every lq."""
    top, left = paired_crop_window(common_size(gts, 'ground-truth', where), common_size(lqs, 'low-quality', where),
                                   gt_size, scale, rng, where)
    lq_h, lq_w = patch_hw(divided(gt_size, scale))
    lqs = [img[top:top + lq_h, left:left + lq_w] for img in lqs]
    t, l = top * scale, left * scale
    gt_h, gt_w = patch_hw(gt_size)
    gts = [img[t:t + gt_h, l:l + gt_w] for img in gts]
    return gts, lqs


def paired_crop_window(gt_hw: Tuple[int, int], lq_hw: Tuple[int, int], gt_size: Patch, scale: int,
                       rng: random.Random, where: str = '') -> Tuple[int, int]:
    """(top, left) in low-quality pixels of the random patch `paired_random_crop` takes, for callers
    that crop more than images with it (spike planes, before they become float channels)."""
    (h_gt, w_gt), (h_lq, w_lq) = gt_hw, lq_hw
    if indivisible(gt_size, scale):
        raise UserError(f'{_prefix(where)}patch size {shown(gt_size)} is not divisible by scale {scale}')
    if (h_gt, w_gt) != (h_lq * scale, w_lq * scale):
        raise UserError(f'{_prefix(where)}ground-truth size {h_gt}x{w_gt} is not {scale}x the '
                        f'low-quality size {h_lq}x{w_lq}')
    lq_h, lq_w = patch_hw(divided(gt_size, scale))
    if h_lq < lq_h or w_lq < lq_w:
        raise UserError(f'{_prefix(where)}image of size {h_gt}x{w_gt} is smaller than the patch '
                        f'size {shown(gt_size)}')
    top = rng.randint(0, h_lq - lq_h)
    left = rng.randint(0, w_lq - lq_w)
    return top, left


def random_crop(imgs: List[np.ndarray], size: Patch, rng: random.Random,
                where: str = '') -> List[np.ndarray]:
    """Crop the same patch (an integer: a square; or [height, width]) from every image (all of one size)."""
    h, w = common_size(imgs, 'the', where)
    ph, pw = patch_hw(size)
    if h < ph or w < pw:
        raise UserError(f'{_prefix(where)}image of size {h}x{w} is smaller than the patch size {shown(size)}')
    top = rng.randint(0, h - ph)
    left = rng.randint(0, w - pw)
    return [img[top:top + ph, left:left + pw] for img in imgs]


def augment(imgs: List[np.ndarray], hflip: bool, rotation: bool,
            rng: random.Random, copy: bool = True) -> List[np.ndarray]:
    """Apply one random horizontal flip / vertical flip / 90° rotation to all arrays.

    Together the three draws cover the 8 dihedral transforms (KAIR's augment_img modes). The three
    numbers are always drawn so the rng stream does not depend on the flags. A non-square patch is never
    rotated by 90°, which would make it w×h where the batch needs h×w: its flips (with `hflip`, also the
    180° rotation) are the 4 transforms that keep its shape. `copy=False` returns views, for a caller whose
    next step copies anyway (stacking a clip).
    """
    do_h, do_v, do_rot = rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.5
    do_h = hflip and do_h
    do_v = rotation and do_v
    do_rot = rotation and do_rot and all(img.shape[0] == img.shape[1] for img in imgs)
    out = []
    for img in imgs:
        if do_h:
            img = img[:, ::-1]
        if do_v:
            img = img[::-1]
        if do_rot:
            img = img.transpose((1, 0) + tuple(range(2, img.ndim)))
        out.append(np.ascontiguousarray(img) if copy else img)
    return out


def color_jitter(clip: torch.Tensor, rng: random.Random, strength: float = 0.05) -> torch.Tensor:
    """One random colour jitter of a whole uint8 clip (T×C×H×W, RGB), the same for every frame: KAIR's VRT 009
    `color_jitter` (torchvision's ColorJitter(0.05, 0.05, 0.05, 0.05) on the stacked input and target).

    Brightness, contrast and saturation factors are drawn from [1 - s, 1 + s], the hue shift from [-s, s],
    and the four adjustments run in a random order, as ColorJitter does, but from the sample's own `rng`
    (data order and augmentation stay a function of the sample seed). The result is rounded back to uint8,
    the loader's format: at most half a grey level from KAIR's float result.
    """
    from torchvision.transforms import functional as TF  # torchvision is heavy: only when jitter is on
    factors = [rng.uniform(1 - strength, 1 + strength) for _ in range(3)] + [rng.uniform(-strength, strength)]
    order = rng.sample(range(4), 4)
    adjust = (TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue)
    x = clip.float() / 255.0
    for i in order:
        x = adjust[i](x, factors[i])
    return (x * 255.0).round_().clamp_(0, 255).to(torch.uint8)
