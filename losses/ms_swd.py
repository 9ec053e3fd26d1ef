"""Multiscale sliced Wasserstein distance `ms_swd` (He, Wang, Wang, Liu, Fang, Sun, Ma, "Multiscale Sliced
Wasserstein Distances as Perceptual Color Difference Measures", ECCV 2024), as a loss.

A colour difference of distributions rather than of aligned pixels, so it tolerates the small misalignments
and texture a GAN restores while it judges colour: each image's Gaussian pyramid (`G_swd_scales` levels: the
5-tap binomial [1 4 6 4 1]/16 in both directions, mirrored borders, every second pixel kept) in CIE Lab (sRGB,
D65); at each level, the `G_swd_patch_size` x `G_swd_patch_size` patches around every pixel (mirrored borders)
projected on `G_swd_projections` random unit directions of the patch space (1: pixel colours; the authors' 11
also sees local structure); per direction, the sorted projections of the two images compared, mean |Δ| (the 1-D
Wasserstein-1 distance of the two empirical distributions); averaged over directions and pixels, over levels,
then over the images of the batch. In Lab units / 100, the scale of the pixel losses (the authors' value is
100 times this).

The directions are drawn afresh for every iteration, as the authors draw them for every call (a fixed set would
let the network match those few marginals alone), from `G_swd_seed` and the iteration alone (the model tells
the loss each iteration: `set_iteration`), on the device of the images: every rank, every micro-batch of an
iteration and a resumed run use the same directions, so 2 ranks train as 1 with the whole batch and a resume
continues bit for bit. (CPU and CUDA draw different numbers from one seed.) RGB images only; video batches
(N, T, C, H, W) count each frame; float32 also under AMP (the sort is the point). Cost: per level a
convolution with `G_swd_projections` outputs of 3 patch_size² inputs (46 k multiply-adds per pixel at the
defaults: about a 3x3 convolution layer of 64 -> 80 channels), and a sort of every projection; memory of
G_swd_projections values and sort indices per pixel of the first level (about 3 KB per pixel at 128).
"""
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from losses.color import rgb_to_lab
from losses.registry import LOSSES
from utils.options import Key, at_least, rule

PYRAMID_TAPS = (1.0, 4.0, 6.0, 4.0, 1.0)  # / 16: the authors' 5x5 [1 4 6 4 1]^T [1 4 6 4 1] / 256
_MIX = 0x9E3779B97F4A7C15  # odd 64-bit constant (the golden ratio's): seeds of neighbouring (seed, step) apart


@rule('an odd integer >= 1', minimum=1)
def _odd(v: Any) -> Optional[str]:
    return None if v >= 1 and v % 2 == 1 else 'must be an odd integer >= 1 (the patch is centred on its pixel)'


@rule('0 to 4294967295 (2**32 - 1)', minimum=0, maximum=2 ** 32 - 1)
def _seed(v: Any) -> Optional[str]:
    return None if 0 <= v < 2 ** 32 else 'must be in [0, 2**32)'


def projection_seed(seed: int, step: int) -> int:
    """The generator seed of iteration `step`'s directions: a function of the two numbers alone."""
    return (seed * _MIX + step) % 2 ** 63


def gaussian_pyramid(x: torch.Tensor, levels: int) -> list:
    """[x, then each level blurred with the binomial 5-tap filter (mirrored borders) and subsampled by 2]."""
    c = x.shape[1]
    k = torch.tensor(PYRAMID_TAPS, dtype=x.dtype, device=x.device) / 16.0
    out = [x]
    for _ in range(levels - 1):
        x = F.pad(x, (2, 2, 2, 2), mode='reflect')
        x = F.conv2d(x, k.view(1, 1, 1, 5).expand(c, 1, 1, 5), groups=c)
        x = F.conv2d(x, k.view(1, 1, 5, 1).expand(c, 1, 5, 1), groups=c)
        x = x[..., ::2, ::2]
        out.append(x)
    return out


def sliced_wasserstein(x: torch.Tensor, y: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """Per image (B,): mean over the directions (P, C, k, k) and pixels of |sorted projections of x's patches -
    sorted projections of y's|, patches around every pixel with mirrored borders."""
    pad = directions.shape[-1] // 2
    px = F.conv2d(F.pad(x, (pad,) * 4, mode='reflect'), directions).flatten(2)  # B, P, pixels
    with torch.no_grad():
        py = F.conv2d(F.pad(y, (pad,) * 4, mode='reflect'), directions).flatten(2).sort(dim=2).values
    return (px.sort(dim=2).values - py).abs().mean(dim=(1, 2))


@LOSSES.register('ms_swd', options={
    'swd_scales': Key(5, (int,), at_least(1), 'levels of the Gaussian pyramid (the authors\' 5)'),
    'swd_projections': Key(128, (int,), at_least(1), 'random directions per level, drawn anew each iteration '
                           '(the authors\' 128)'),
    'swd_patch_size': Key(11, (int,), _odd, 'side of the patches projected (the authors\' 11; 1: pixel colours '
                          'only, far cheaper)'),
    'swd_seed': Key(0, (int,), _seed, 'seed of the directions, drawn from it and the iteration: the same on every '
                    'rank and after a resume'),
})
class MSSWDLoss(nn.Module):
    """MS-SWD of the images' CIE Lab Gaussian pyramids / 100, batch mean (see the module docstring)."""

    def __init__(self, swd_scales: int = 5, swd_projections: int = 128, swd_patch_size: int = 11, swd_seed: int = 0):
        super().__init__()
        self.scales, self.projections = int(swd_scales), int(swd_projections)
        self.patch, self.seed = int(swd_patch_size), int(swd_seed)
        self.step = 0
        self._directions: Optional[torch.Tensor] = None

    def set_iteration(self, step: int) -> None:
        """The iteration about to run (`step` done): its directions are drawn at its first call."""
        if step != self.step:
            self.step, self._directions = int(step), None

    def directions(self, device: torch.device) -> torch.Tensor:
        """(scales, projections, 3, patch, patch) unit directions of this iteration, drawn on `device` once."""
        if self._directions is None or self._directions.device != device:
            g = torch.Generator(device=device)
            g.manual_seed(projection_seed(self.seed, self.step))
            d = torch.randn(self.scales, self.projections, 3 * self.patch ** 2, generator=g, device=device)
            d = d / d.norm(dim=2, keepdim=True)
            self._directions = d.view(self.scales, self.projections, 3, self.patch, self.patch)
        return self._directions

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape[-3] != 3:
            raise ValueError(f'ms_swd compares the colours of RGB images (3 channels), got {x.shape[-3]} channels')
        h, w = x.shape[-2:]
        sides = [min(h, w)]
        for _ in range(self.scales - 1):
            sides.append((sides[-1] + 1) // 2)
        # mirrored borders need more pixels than they mirror: 2 for each blur, patch // 2 for the patches
        if any(s <= 2 for s in sides[:-1]) or sides[-1] <= self.patch // 2:
            raise ValueError(f'G_swd_scales {self.scales} and G_swd_patch_size {self.patch} need a larger image than '
                             f'{h}x{w} (its level {self.scales} is {sides[-1]} pixels a side, the patches need '
                             f'{self.patch // 2 + 1}): lower one of them')
        directions = self.directions(x.device)
        with torch.autocast(x.device.type, enabled=False):
            px = gaussian_pyramid(x.float().reshape(-1, *x.shape[-3:]), self.scales)
            with torch.no_grad():
                py = gaussian_pyramid(y.float().reshape(-1, *y.shape[-3:]), self.scales)
            total = sum(sliced_wasserstein(rgb_to_lab(a), rgb_to_lab(b), d)
                        for a, b, d in zip(px, py, directions.unbind(0)))
            return (total / self.scales).mean() / 100.0
