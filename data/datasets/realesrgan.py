"""Real-ESRGAN training data (`dataset_type: realesrgan`): GT patches degraded by the second-order model.

The dataset reads a GT image, pads it (reflect-101) to at least `crop_pad_size` and crops a
crop_pad_size square, flips/rotates it (`use_hflip`, `use_rot`), and draws on the CPU, from the
sample's seed, every random choice of the degradation (data/degradations/realesrgan.py): three kernels
and a plan. The item carries the uint8 GT patch, the kernels and the plan; the degradations themselves
run on the device in the training step (`device_transform`, applied by the model once the batch is
there: data/degradations/batch_transforms.py), which returns L (gt_size/scale), H (gt_size) and the sharpened GT of
the losses that take it (`l1_gt_usm`, `percep_gt_usm`, `gan_gt_usm`, BasicSR's keys). As Real-ESRGAN does
(and Real-ESRNet with its `gt_usm`), the degradations start from the USM-sharpened GT (`gt_usm`, true).

The keys are BasicSR's (its dataset's and its model's degradation keys in one section), with its
defaults: `kernel_list`, `kernel_prob`, `sinc_prob`, `blur_sigma`, `betag_range`, `betap_range`,
`blur_kernel_size` and the same with `2` for the second blur, `final_sinc_prob`, `resize_prob`
(up, down, keep), `resize_range`, `gaussian_noise_prob`, `noise_range` (0..255), `poisson_scale_range`,
`gray_noise_prob`, `jpeg_range`, `second_blur_prob` and the `2` keys of the second stage. The dataset
only trains: a test section uses paired folders (`sr` or `plain` with `dataroot_L`), as Real-ESRGAN
validates on fixed LR images.
"""
import json
import os
import random
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from data.checks import Size, fmt
from data.datasets.image import IMAGE_OPTIONS, META_INFO_FILE, ImageDataset, folders, meta_info_images, scale
from data.datasets.transforms import random_crop
from data.degradations.batch_transforms import TRANSFORM_KEY
from data.degradations.realesrgan import (KERNEL_KEYS, KERNEL_KINDS, MIN_KERNEL_SIZE, PLAN_KEY, USM_RADIUS,
                                          degrade_batch, draw_plan)
from data.patches import fits, indivisible, patch_hw, patch_key, shown, warn_if_tiny
from data.registry import DATASETS
from utils.errors import UserError
from utils.image import bgr_to_rgb, uint8_tensor
from utils.options import REQUIRED, Check, Key, at_least, between, only, rule
from utils.options.foreign import BASICSR, Foreign, Only

PROBABILITY = between(0, 1, 'a probability')


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def value_range(low: float, high: float, what: str) -> Check:
    """[min, max] with low <= min <= max <= high."""
    @rule(f'[min, max] with {low} <= min <= max <= {high} ({what})', minItems=2, maxItems=2,
          items={'type': 'number', 'minimum': low, 'maximum': high})
    def check(v: Any) -> Optional[str]:
        if len(v) == 2 and all(_number(x) for x in v) and low <= v[0] <= v[1] <= high:
            return None
        return f'must be [min, max] with {low} <= min <= max <= {high} ({what})'
    return check


@rule('[min, max] with 0 < min <= 1 <= max', minItems=2, maxItems=2, items={'type': 'number', 'exclusiveMinimum': 0})
def around_one(v: Any) -> Optional[str]:
    """A resize range: [min, max] with 0 < min <= 1 <= max (down-scales come from [min, 1], up from [1, max])."""
    if len(v) == 2 and all(_number(x) for x in v) and 0 < v[0] <= 1 <= v[1]:
        return None
    return 'must be [min, max] with 0 < min <= 1 <= max (down-scales are drawn from [min, 1], up-scales from [1, max])'


def probabilities(n: Optional[int], what: str) -> Check:
    """A list of probabilities that sum to 1 (`n` of them, when fixed)."""
    @rule(f'{n if n is not None else "a list of"} probabilities >= 0 that sum to 1 ({what})', minItems=n or 1,
          **({'maxItems': n} if n is not None else {}), items={'type': 'number', 'minimum': 0})
    def check(v: Any) -> Optional[str]:
        if (n is None or len(v) == n) and v and all(_number(p) and p >= 0 for p in v) and abs(sum(v) - 1) < 1e-6:
            return None
        count = f'{n} ' if n is not None else ''
        return f'must be {count}probabilities >= 0 that sum to 1 ({what})'
    return check


@rule(f'distinct kernel kinds from {", ".join(KERNEL_KINDS)}', minItems=1, uniqueItems=True,
      items={'enum': list(KERNEL_KINDS)})
def kernel_names(v: Any) -> Optional[str]:
    if v and all(k in KERNEL_KINDS for k in v) and len(set(v)) == len(v):
        return None
    return f'must be a list of distinct kernel kinds from {", ".join(KERNEL_KINDS)}'


@rule(f'an odd size >= {MIN_KERNEL_SIZE}', minimum=MIN_KERNEL_SIZE, **{'not': {'multipleOf': 2}})
def odd_size(v: Any) -> Optional[str]:
    return None if v >= MIN_KERNEL_SIZE and v % 2 else f'must be an odd size >= {MIN_KERNEL_SIZE}'


def _stage_keys(suffix: str, sigma: list, noise: list, poisson: list, resize_prob: list, resize_range: list
                ) -> Dict[str, Key]:
    """The keys of one degradation stage (suffix '' or '2'), BasicSR's defaults for it."""
    stage = 'first' if suffix == '' else 'second'
    return {
        f'blur_kernel_size{suffix}': Key(21, (int,), odd_size, f'size of the {stage} stage\'s blur kernels'),
        f'kernel_list{suffix}': Key(list(KERNEL_KINDS), (list,), kernel_names, f'kernel kinds of the {stage} blur'),
        f'kernel_prob{suffix}': Key([0.45, 0.25, 0.12, 0.03, 0.12, 0.03], (list,),
                                    probabilities(None, f'one per kernel_list{suffix} entry'),
                                    f'probability of each kernel_list{suffix} kind'),
        f'sinc_prob{suffix}': Key(0.1, (int, float), PROBABILITY, f'probability of a sinc (ringing) kernel in the '
                                                                   f'{stage} blur instead'),
        f'blur_sigma{suffix}': Key(sigma, (list,), value_range(0.01, 100, 'kernel widths in pixels'),
                                   'gaussian kernel widths [min, max]'),
        f'betag_range{suffix}': Key([0.5, 4], (list,), value_range(0.01, 100, 'generalized gaussian shapes'),
                                    'shape beta of generalized gaussian kernels [min, max]'),
        f'betap_range{suffix}': Key([1, 2], (list,), value_range(0.01, 100, 'plateau shapes'),
                                    'shape beta of plateau kernels [min, max]'),
        f'resize_prob{suffix}': Key(resize_prob, (list,), probabilities(3, 'up, down, keep'),
                                    f'probabilities of the {stage} resize going up, down or keeping the size'),
        f'resize_range{suffix}': Key(resize_range, (list,), around_one, f'scale factors of the {stage} resize'),
        f'gaussian_noise_prob{suffix}': Key(0.5, (int, float), PROBABILITY, 'probability of gaussian (else poisson) '
                                                                            'noise'),
        f'noise_range{suffix}': Key(noise, (list,), value_range(0, 255, 'noise std on the 0..255 scale'),
                                    'gaussian noise std [min, max]'),
        f'poisson_scale_range{suffix}': Key(poisson, (list,), value_range(0, 100, 'poisson noise scales'),
                                            'poisson noise scale [min, max]'),
        f'gray_noise_prob{suffix}': Key(0.4, (int, float), PROBABILITY, 'probability that the noise is the same on '
                                                                        'every channel'),
        f'jpeg_range{suffix}': Key([30, 95], (list,), value_range(1, 100, 'JPEG qualities'),
                                   f'JPEG quality of the {stage} stage [min, max]'),
    }


# BasicSR's RealESRGANDataset (its RealESRNetModel / RealESRGANModel read the second stage's keys and gt_size at the
# top level: the reader of its files moves them here); its kernel keys have the same names here
FOREIGN = [Foreign('RealESRGANDataset', BASICSR, keys={'dataroot_gt': 'dataroot_H', 'meta_info': 'meta_info_file'},
                   unneeded={'io_backend': Only({'type': 'disk'}, 'images are read from files')})]


@DATASETS.register('realesrgan', foreign=FOREIGN)
class DatasetRealESRGAN(ImageDataset):
    """Real-ESRGAN's training data: GT patches and a random second-order degradation plan, applied on the device."""

    OPTIONS = {
        **IMAGE_OPTIONS,
        'dataroot_H': Key(REQUIRED, (str, list), help='folder (or list of folders) of the high-quality (target) images'),
        'meta_info_file': META_INFO_FILE,
        'dataroot_L': Key(None, (str, type(None)), only(None, 'realesrgan makes L from H on the device; validate on '
                                                          'paired folders in datasets.test (dataset_type sr)')),
        'n_channels': Key(3, (int,), only(3, 'the Real-ESRGAN degradations are colour')),
        'scale': scale(4),
        'use_rot': False,  # BasicSR's Real-ESRGAN files: flips only
        'gt_size': patch_key(256, 'training patch size of the GT, in pixels'),
        'crop_pad_size': Key(400, (int,), at_least(1), 'the GT is padded to at least and cropped to this square '
                                                       'before degradation (at least gt_size\'s longer side)'),
        **_stage_keys('', [0.2, 3], [1, 30], [0.05, 3], [0.2, 0.7, 0.1], [0.15, 1.5]),
        **_stage_keys('2', [0.2, 1.5], [1, 25], [0.05, 2.5], [0.3, 0.4, 0.3], [0.3, 1.2]),
        'second_blur_prob': Key(0.8, (int, float), PROBABILITY, 'probability of the second stage\'s blur'),
        'final_sinc_prob': Key(0.8, (int, float), PROBABILITY, 'probability of the final sinc filter'),
        # the degradations start from the USM-sharpened GT (Real-ESRGAN; Real-ESRNet's key)
        'gt_usm': Key(True, (bool,), help='degrade the USM-sharpened GT'),
        'l1_gt_usm': Key(True, (bool,), help='the pixel loss compares with the USM-sharpened GT'),
        'percep_gt_usm': Key(True, (bool,), help='the perceptual loss compares with the USM-sharpened GT'),
        'gan_gt_usm': Key(False, (bool,), help='the discriminator\'s real images are the USM-sharpened GT'),
    }

    device_transform = staticmethod(degrade_batch)

    def check_options(self) -> None:
        opt, where = self.opt, self.where
        if opt['phase'] != 'train':
            raise UserError(f'{where}.dataset_type: "realesrgan" only trains; evaluate on paired folders '
                            f'(dataset_type "sr" with dataroot_L, or "plain")')
        for suffix in ('', '2'):
            names, probs = opt[f'kernel_list{suffix}'], opt[f'kernel_prob{suffix}']
            if len(names) != len(probs):
                raise UserError(f'{where}.kernel_prob{suffix}: {len(probs)} probabilities for the {len(names)} '
                                f'kernels of kernel_list{suffix}')
        self.gt_size, self.crop_pad_size = opt['gt_size'], opt['crop_pad_size']
        self.scale = opt['scale']
        self._check_sizes()
        self.opt = {**opt, 'H_size': self.gt_size}  # the training patch of ImageDataset's checks
        super().check_options()
        self.cfg = dict(self.opt)

    def _check_sizes(self) -> None:
        """Every image the device steps see must be large enough for their filters (mirrored borders)."""
        where, s, crop, gt = self.where, self.scale, self.crop_pad_size, self.gt_size
        if indivisible(gt, s):
            raise UserError(f'{where}.gt_size: {shown(gt)} is not divisible by scale {s}')
        if crop % s or crop < max(patch_hw(gt)):
            raise UserError(f'{where}.crop_pad_size: {crop} must be >= gt_size {shown(gt)} and divisible by scale {s}')
        opt = self.opt
        pad1, pad2 = opt['blur_kernel_size'] // 2, opt['blur_kernel_size2'] // 2
        after1 = int(crop * opt['resize_range'][0])
        lq = crop // s
        needs = [(crop > max(pad1, USM_RADIUS // 2), 'crop_pad_size',
                  f'{crop} is too small for the first blur and the GT sharpening (more than '
                  f'{max(pad1, USM_RADIUS // 2)} pixels needed)'),
                 (after1 > pad2, 'resize_range',
                  f'{opt["resize_range"]}: the smallest first resize of crop_pad_size {crop} gives {after1} pixels, '
                  f'too few for the second blur (blur_kernel_size2 {opt["blur_kernel_size2"]} needs more than {pad2})'),
                 (lq > pad2, 'crop_pad_size',
                  f'{crop}: the LR image ({lq} pixels at scale {s}) is too small for the final sinc filter '
                  f'(blur_kernel_size2 {opt["blur_kernel_size2"]} needs more than {pad2})')]
        for ok, key, problem in needs:
            if not ok:
                raise UserError(f'{where}.{key}: {problem}')

    def _warn_if_tiny(self) -> None:
        """The network's training input is gt_size / scale."""
        warn_if_tiny(f'{self.where}.gt_size', f'{shown(self.gt_size)} / scale {self.scale}', self.gt_size, self.scale)

    def list_files(self) -> Tuple[List[str], Optional[List[str]]]:
        """The GT images: of the folder(s), or those the meta info file lists (BasicSR's `meta_info`)."""
        if self.opt['meta_info_file'] is None:
            return super().list_files()
        roots = folders(self.opt, 'dataroot_H')
        if len(roots) > 1:
            raise UserError(f'{self.where}.meta_info_file: lists the images of one dataroot_H folder; give one folder')
        return [os.path.join(roots[0], name) for name in meta_info_images(self.opt, roots[0])], None

    def _single_problem(self, size: Size, train: bool) -> Optional[Tuple[str, str]]:
        """A training image at least gt_size wide and high (smaller than crop_pad_size: padded, as in BasicSR)."""
        if not fits(size, self.gt_size):
            return 'H', f'{fmt(size)} is smaller than gt_size {shown(self.gt_size)}'
        return None

    def _read_H(self, index: int, seed: Optional[int]) -> Tuple[str, np.ndarray, Optional[random.Random]]:
        path = self.paths_H[index]
        rng = random.Random(seed)
        img = self._read_bgr(path)
        crop = self.crop_pad_size
        ph, pw = max(0, crop - img.shape[0]), max(0, crop - img.shape[1])
        if ph or pw:
            img = np.pad(img, ((0, ph), (0, pw), (0, 0)), mode='reflect')
        (img,) = random_crop([img], crop, rng, where=f'{self.where}.crop_pad_size ({path})')
        return path, np.array(bgr_to_rgb(img), order='C'), rng

    def _synthesized_item(self, index: int, seed: Optional[int], path_H: str, img_H: np.ndarray,
                          rng: Optional[random.Random]) -> Dict[str, Any]:
        (img_H,) = self._augment([img_H], rng)
        plan, kernels = draw_plan(np.random.default_rng(seed), self.cfg)
        item = {'H': uint8_tensor(img_H), 'L_path': path_H, 'H_path': path_H, PLAN_KEY: json.dumps(plan),
                TRANSFORM_KEY: 'realesrgan'}
        item.update({k: torch.from_numpy(v.astype(np.float32)) for k, v in zip(KERNEL_KEYS, kernels)})
        return item

