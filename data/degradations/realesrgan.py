"""Real-ESRGAN's second-order degradation model (Wang et al., ICCVW 2021), split where it is cheapest.

On the CPU, in the dataset, `draw_plan` draws every random choice of a sample from its seed: the three
kernels (first blur, second blur, final sinc or identity) as arrays, and the plan, a JSON-able dict of
the rest (resize kinds, scales and interpolations, noise kinds and levels, JPEG qualities, the seeds
of the noise, the order of the final sinc and JPEG, the LR crop). On the device, in the training step,
`degrade` runs the heavy operations of the plan on the whole GT patch, and `degrade_batch` does it for
a batch and crops the aligned LR/GT patches:

    blur(kernel1) -> resize -> gaussian or poisson noise -> JPEG                       (first order)
    [blur(kernel2)] -> resize -> gaussian or poisson noise                             (second order)
    resize to 1/scale + sinc, then JPEG  |  JPEG, then resize to 1/scale + sinc       (either order)
    round to 8 bits, crop the LR patch and the GT patch at the same place

Noise comes from a torch.Generator per sample and stage, seeded from the plan on the batch's device, so
a sample's LR depends on its seed only, not on which other samples share its batch, rank or world size
(on one kind of device: CPU and CUDA generators differ). Everything runs in float32 without autograd,
whatever autocast says around it.

Choices follow BasicSR's Real-ESRGAN (its option keys name them): within each probability the same
quantities are drawn, in the same ranges. Where it differs: each sample draws its own resize scale and
interpolation (BasicSR draws one per batch, which ties a sample to its batch), and the kernel sizes
run from 7 to `blur_kernel_size` (BasicSR fixes 7..21 and ignores the key). Real-ESRGAN's training-pair
queue (a pool of 180 pairs shuffled across batches, so that one batch mixes degradations of several
loads) is left out: per-sample degradations already make every batch diverse.

Every random choice can be recorded (`record`, as in data/degradations/bsrgan.py), for the tests that compare
the frequencies with the configured probabilities.
"""
import json
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from data.degradations.bsrgan import Record, choose, happens, note
from data.degradations.diffjpeg import jpeg
from data.degradations.kernels import (circular_lowpass_kernel, covariance, gaussian_kernel, generalized_gaussian_kernel,
                          kernel_sizes, pad_kernel, plateau_kernel, pulse_kernel)
from data.patches import divided, patch_hw

KERNEL_KINDS = ('iso', 'aniso', 'generalized_iso', 'generalized_aniso', 'plateau_iso', 'plateau_aniso')
RESIZE_KINDS = ('up', 'down', 'keep')  # the order of `resize_prob`
INTERPOLATIONS = ('area', 'bilinear', 'bicubic')
MIN_KERNEL_SIZE = 7
SMALL_KERNEL = 13        # sinc kernels smaller than this get a cutoff of at least π/3, larger ones π/5
FINAL_SINC_FIRST_PROB = 0.5  # the final resize + sinc come before the last JPEG with this probability
USM_RADIUS, USM_WEIGHT, USM_THRESHOLD = 51, 0.5, 10  # GT sharpening (BasicSR's USMSharp)
LUMA = (0.299, 0.587, 0.114)
PLAN_KEY, KERNEL_KEYS = 'realesrgan_plan', ('kernel1', 'kernel2', 'sinc_kernel')
LOSSES = ('pixel', 'perceptual', 'gan')  # the losses a USM-sharpened GT may feed (`l1/percep/gan_gt_usm`)


def _uniform(rng: np.random.Generator, bounds: Sequence[float]) -> float:
    return float(rng.uniform(bounds[0], bounds[1]))


def _beta(rng: np.random.Generator, bounds: Sequence[float]) -> float:
    """Shape β of the generalized and plateau kernels: half the time in [low, 1], half in [1, high], so
    the kernels as sharp as a gaussian (β = 1) sit in the middle of the draws."""
    return _uniform(rng, (bounds[0], 1.0)) if rng.random() < 0.5 else _uniform(rng, (1.0, bounds[1]))


def draw_kernel(rng: np.random.Generator, cfg: Mapping[str, Any], suffix: str, record: Record = None,
                name: str = 'kernel') -> np.ndarray:
    """One blur kernel of a stage (`suffix` '' or '2' picks its keys), zero-padded to blur_kernel_size.

    With sinc_prob a circular low-pass (sinc) kernel, else a kind drawn from kernel_list/kernel_prob:
    gaussian, generalized gaussian (β from betag_range) or plateau (β from betap_range), isotropic
    (σ from blur_sigma) or anisotropic (σx, σy from blur_sigma, rotation uniform in [-π, π])."""
    largest = cfg[f'blur_kernel_size{suffix}']
    sizes = kernel_sizes(MIN_KERNEL_SIZE, largest)
    size = sizes[int(rng.integers(len(sizes)))]
    note(record, f'{name}_size', size)
    if happens(rng, cfg[f'sinc_prob{suffix}'], record, f'{name}_sinc'):
        low = math.pi / 3 if size < SMALL_KERNEL else math.pi / 5
        cutoff = _uniform(rng, (low, math.pi))
        note(record, f'{name}_cutoff', cutoff)
        return pad_kernel(circular_lowpass_kernel(size, cutoff), largest)
    kind = choose(rng, dict(zip(cfg[f'kernel_list{suffix}'], cfg[f'kernel_prob{suffix}'])), record, f'{name}_kind')
    sigma = cfg[f'blur_sigma{suffix}']
    sx = _uniform(rng, sigma)
    if kind.endswith('aniso'):
        sy, theta = _uniform(rng, sigma), _uniform(rng, (-math.pi, math.pi))
        note(record, f'{name}_sigma_y', sy)
        note(record, f'{name}_theta', theta)
    else:
        sy, theta = sx, 0.0
    note(record, f'{name}_sigma', sx)
    cov = covariance(theta, sx ** 2, sy ** 2)
    if kind.startswith('generalized'):
        beta = _beta(rng, cfg[f'betag_range{suffix}'])
        note(record, f'{name}_betag', beta)
        k = generalized_gaussian_kernel(size, cov, beta)
    elif kind.startswith('plateau'):
        beta = _beta(rng, cfg[f'betap_range{suffix}'])
        note(record, f'{name}_betap', beta)
        k = plateau_kernel(size, cov, beta)
    else:
        k = gaussian_kernel(size, cov)
    return pad_kernel(k, largest)


def draw_final_sinc(rng: np.random.Generator, cfg: Mapping[str, Any], record: Record = None) -> Optional[np.ndarray]:
    """With final_sinc_prob a sinc kernel (size from 7..blur_kernel_size2, cutoff uniform in [π/3, π]),
    blur_kernel_size2 wide, else None (no filter)."""
    largest = cfg['blur_kernel_size2']
    if not happens(rng, cfg['final_sinc_prob'], record, 'final_sinc'):
        return None
    sizes = kernel_sizes(MIN_KERNEL_SIZE, largest)
    size = sizes[int(rng.integers(len(sizes)))]
    cutoff = _uniform(rng, (math.pi / 3, math.pi))
    note(record, 'final_sinc_cutoff', cutoff)
    return pad_kernel(circular_lowpass_kernel(size, cutoff), largest)


def _stage(rng: np.random.Generator, cfg: Mapping[str, Any], suffix: str, size_from: int,
           record: Record) -> Dict[str, Any]:
    """A stage's resize (to int(size_from × scale)), noise and JPEG quality, and its noise seed."""
    kind = choose(rng, dict(zip(RESIZE_KINDS, cfg[f'resize_prob{suffix}'])), record, f'resize{suffix}')
    low, high = cfg[f'resize_range{suffix}']
    scale = {'up': lambda: _uniform(rng, (1.0, high)), 'down': lambda: _uniform(rng, (low, 1.0)),
             'keep': lambda: 1.0}[kind]()
    note(record, f'resize_scale{suffix}', scale)
    mode = choose(rng, {m: 1 / len(INTERPOLATIONS) for m in INTERPOLATIONS}, record, f'interpolation{suffix}')
    gaussian = happens(rng, cfg[f'gaussian_noise_prob{suffix}'], record, f'gaussian_noise{suffix}')
    level = _uniform(rng, cfg[f'noise_range{suffix}'] if gaussian else cfg[f'poisson_scale_range{suffix}'])
    note(record, f'{"noise_sigma" if gaussian else "poisson_scale"}{suffix}', level)
    gray = happens(rng, cfg[f'gray_noise_prob{suffix}'], record, f'gray_noise{suffix}')
    quality = _uniform(rng, cfg[f'jpeg_range{suffix}'])
    note(record, f'jpeg_quality{suffix}', quality)
    side = max(1, int(size_from * scale))
    return {'size': side, 'mode': mode, 'noise': 'gaussian' if gaussian else 'poisson', 'level': level,
            'gray': gray, 'jpeg': quality, 'seed': int(rng.integers(1 << 62))}


def draw_plan(rng: np.random.Generator, cfg: Mapping[str, Any], record: Record = None
              ) -> Tuple[Dict[str, Any], List[np.ndarray]]:
    """Every random choice of one sample: (plan, [kernel1, kernel2, final sinc kernel or the identity]).

    `cfg` holds the dataset's keys (BasicSR's names) plus `crop_pad_size`, `gt_size` (a side or [height,
    width]) and `scale`; the GT patch is crop_pad_size square. The plan also says where the LR patch is cut,
    whether the degradations start from the sharpened GT (`gt_usm`) and which losses get it as their target."""
    kernels = [draw_kernel(rng, cfg, '', record, 'kernel1'), draw_kernel(rng, cfg, '2', record, 'kernel2')]
    sinc = draw_final_sinc(rng, cfg, record)
    kernels.append(pulse_kernel(cfg['blur_kernel_size2']) if sinc is None else sinc)
    crop, scale = cfg['crop_pad_size'], cfg['scale']
    lq_full, (lq_h, lq_w) = crop // scale, patch_hw(divided(cfg['gt_size'], scale))
    stage1 = _stage(rng, cfg, '', crop, record)
    second_blur = happens(rng, cfg['second_blur_prob'], record, 'second_blur')
    stage2 = {'blur': second_blur, **_stage(rng, cfg, '2', lq_full, record)}
    sinc_first = happens(rng, FINAL_SINC_FIRST_PROB, record, 'sinc_before_jpeg')
    mode = choose(rng, {m: 1 / len(INTERPOLATIONS) for m in INTERPOLATIONS}, record, 'final_interpolation')
    final = {'sinc': sinc is not None, 'sinc_first': sinc_first, 'mode': mode, 'size': lq_full}
    top, left = int(rng.integers(0, lq_full - lq_h + 1)), int(rng.integers(0, lq_full - lq_w + 1))
    note(record, 'crop_top', top)
    note(record, 'crop_left', left)
    targets = [loss for loss, key in zip(LOSSES, ('l1_gt_usm', 'percep_gt_usm', 'gan_gt_usm')) if cfg[key]]
    plan = {'scale': scale, 'lq_patch': [lq_h, lq_w], 'top': top, 'left': left, 'usm_targets': targets,
            'degrade_usm': cfg['gt_usm'], 'stage1': stage1, 'stage2': stage2, 'final': final}
    return plan, kernels


# ---- on the device -------------------------------------------------------------------------------

def filter2d(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Every channel of (1, C, H, W) filtered with an odd square kernel, borders mirrored without repeating
    the edge (reflect-101). Correlation equals convolution here: every kernel of this model is symmetric
    about its centre."""
    k = kernel.shape[-1]
    c = x.shape[1]
    padded = F.pad(x, (k // 2,) * 4, mode='reflect')
    return F.conv2d(padded, kernel.to(x.dtype).expand(c, 1, k, k), groups=c)


def resize(x: torch.Tensor, side: int, mode: str) -> torch.Tensor:
    """(1, C, H, W) to side x side (the patches are square) by area, bilinear or bicubic interpolation."""
    if mode == 'area':
        return F.interpolate(x, size=(side, side), mode='area')
    return F.interpolate(x, size=(side, side), mode=mode, align_corners=False)


def _luma(x: torch.Tensor) -> torch.Tensor:
    return x[:, 0:1] * LUMA[0] + x[:, 1:2] * LUMA[1] + x[:, 2:3] * LUMA[2]


def _grey_levels(counts: torch.Tensor) -> torch.Tensor:
    """How many of the 256 values occur in an image of integer counts, on the device (torch.bincount would
    read the maximum back to the host on CUDA)."""
    seen = torch.zeros(256, device=counts.device, dtype=torch.float32)
    return seen.scatter_(0, counts.flatten().long(), 1.0).sum()


def add_noise(x: torch.Tensor, stage: Mapping[str, Any]) -> torch.Tensor:
    """The stage's noise on (1, 3, H, W), clipped to [0, 1].

    Gaussian: std `level` on the 0..255 scale, per channel or (gray) one map for all channels. Poisson:
    the image (or its luma, gray) quantised to 8 bits is taken as photon counts at a peak of the next
    power of two above its number of distinct grey levels (computed on the device: no host read), and
    the shot noise, scaled by `level`, is added. From a generator seeded with the stage's seed."""
    gen = torch.Generator(device=x.device)
    gen.manual_seed(int(stage['seed']))
    if stage['noise'] == 'gaussian':
        shape = (1, 1 if stage['gray'] else x.shape[1]) + tuple(x.shape[2:])
        noise = torch.randn(shape, generator=gen, device=x.device, dtype=x.dtype) * (stage['level'] / 255.0)
        return (x + noise).clamp(0.0, 1.0)
    src = _luma(x) if stage['gray'] else x
    counts = (src.clamp(0.0, 1.0) * 255.0).round()
    peak = torch.exp2(torch.ceil(torch.log2(_grey_levels(counts))))
    q = counts / 255.0
    noisy = torch.poisson(q * peak, generator=gen) / peak
    return (x + (noisy - q) * stage['level']).clamp(0.0, 1.0)


def degrade(H: torch.Tensor, kernels: Sequence[torch.Tensor], plan: Mapping[str, Any]) -> torch.Tensor:
    """The whole LR image (1, 3, crop/scale, crop/scale), rounded to 8 bits, of one GT patch (1, 3, crop, crop)."""
    kernel1, kernel2, sinc = kernels
    s1, s2, final = plan['stage1'], plan['stage2'], plan['final']
    x = filter2d(H, kernel1)
    x = resize(x, s1['size'], s1['mode'])
    x = add_noise(x, s1)
    x = jpeg(x.clamp(0.0, 1.0), s1['jpeg'])
    if s2['blur']:
        x = filter2d(x, kernel2)
    x = resize(x, s2['size'], s2['mode'])
    x = add_noise(x, s2)

    def to_lr_size(y: torch.Tensor) -> torch.Tensor:
        y = resize(y, final['size'], final['mode'])
        return filter2d(y, sinc) if final['sinc'] else y

    if final['sinc_first']:
        x = jpeg(to_lr_size(x).clamp(0.0, 1.0), s2['jpeg'])
    else:
        x = to_lr_size(jpeg(x.clamp(0.0, 1.0), s2['jpeg']))
    return (x * 255.0).round().clamp(0.0, 255.0) / 255.0


def _gaussian_1d(size: int, sigma: float, device: torch.device) -> torch.Tensor:
    x = torch.arange(size, dtype=torch.float64, device=device) - (size - 1) / 2
    g = torch.exp(-0.5 * (x / sigma) ** 2)
    return (g / g.sum()).float()


def usm_sharpen(img: torch.Tensor, weight: float = USM_WEIGHT, radius: int = USM_RADIUS,
                threshold: float = USM_THRESHOLD) -> torch.Tensor:
    """Unsharp masking of a batch (B, C, H, W) in [0, 1], as data/degradations/bsrgan.py's usm_sharpen does with
    OpenCV: add `weight` × (img - gaussian blur) where the detail exceeds `threshold` grey levels, with a
    blurred mask. The gaussian is `radius` wide (odd) with OpenCV's default σ for that width."""
    size = radius if radius % 2 else radius + 1
    sigma = 0.3 * ((size - 1) * 0.5 - 1) + 0.8
    g = _gaussian_1d(size, sigma, img.device)
    c, p = img.shape[1], size // 2

    def blur(x: torch.Tensor) -> torch.Tensor:
        x = F.conv2d(F.pad(x, (p, p, 0, 0), mode='reflect'), g.view(1, 1, 1, size).expand(c, 1, 1, size), groups=c)
        return F.conv2d(F.pad(x, (0, 0, p, p), mode='reflect'), g.view(1, 1, size, 1).expand(c, 1, size, 1), groups=c)

    detail = img - blur(img)
    soft = blur((detail.abs() * 255.0 > threshold).to(img.dtype))
    sharp = (img + weight * detail).clamp(0.0, 1.0)
    return soft * sharp + (1.0 - soft) * img


def degrade_batch(batch: Dict[str, Any]) -> Dict[str, Any]:
    """A collated batch of `realesrgan` items on its device (GT patches in [0, 1]) -> the training batch:
    L, the LR patches; H, the GT patches at the same place; H_<loss> (`LOSSES`), the sharpened GT for
    the losses the plan names. As in Real-ESRGAN (and Real-ESRNet with `gt_usm`), the degradations start
    from the sharpened GT when the plan says so (`degrade_usm`), while H stays the plain GT.
    Float32 without autograd, also under autocast."""
    H = batch['H']
    plans = [json.loads(p) for p in batch[PLAN_KEY]]
    out = {k: v for k, v in batch.items() if k not in (PLAN_KEY, *KERNEL_KEYS)}
    with torch.no_grad(), torch.autocast(H.device.type, enabled=False):
        H = H.float()
        targets, from_sharp = plans[0]['usm_targets'], plans[0]['degrade_usm']
        sharp = usm_sharpen(H) if targets or from_sharp else None
        source = sharp if from_sharp else H
        Ls, Hs, Us = [], [], []
        for i, plan in enumerate(plans):
            kernels = [batch[k][i].float() for k in KERNEL_KEYS]
            L = degrade(source[i:i + 1], kernels, plan)
            s, (n, m), t, l = plan['scale'], plan['lq_patch'], plan['top'], plan['left']
            Ls.append(L[:, :, t:t + n, l:l + m])
            Hs.append(H[i:i + 1, :, t * s:(t + n) * s, l * s:(l + m) * s])
            if targets:
                Us.append(sharp[i:i + 1, :, t * s:(t + n) * s, l * s:(l + m) * s])
        out['L'] = torch.cat(Ls).contiguous()
        out['H'] = torch.cat(Hs).contiguous()
        if Us:
            usm = torch.cat(Us).contiguous()
            for loss in targets:
                out[f'H_{loss}'] = usm
    return out
