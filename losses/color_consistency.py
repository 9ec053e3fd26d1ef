"""Colour consistency losses `oklab_consistency` and `lstar_consistency`: the colour and the lightness of the
two images compared after a blur (and an optional average pooling), so that they judge colour casts and
brightness shifts, not the detail the pixel loss and a GAN fight over (neosr's `consistency_loss`, whose two
halves these are).

- `oklab_consistency`: the chroma and hue difference in Oklab (Björn Ottosson, "A perceptual color space for
  image processing", 2020), whose Euclidean distances follow perceived differences: per pixel of the blurred
  a, b planes, sqrt(Δa² + Δb² + 1e-12) (ΔE_ok without its lightness term; the 1e-12 keeps the gradient finite
  where the two agree), averaged. Linear sRGB -> LMS -> cube root -> Lab with Ottosson's published matrices;
  the cube root of LMS below 1e-6 is that of 1e-6 (out-of-gamut and black pixels: no infinite gradient).
- `lstar_consistency`: the CIE L* (0..100, D65; the luminance Y of linear sRGB, OpenCV's row as `color`'s Lab)
  of the blurred images, mean |ΔL*| / 100.

Both convert first and blur the converted planes: the local mean of a perceptual space (cheaper too: 2 planes
or 1, not 3). `G_consistency_blur`: the Gaussian's sigma (2 ceil(3 sigma) + 1 taps, mirrored borders as
OpenCV's reflect-101; 0: none); neosr's is sigma 3 (21 taps). `G_consistency_downscale`: the planes averaged
over that many pixels squared after the blur (1: none; neosr's colour loss pools). RGB images in [0, 1];
video batches (N, T, C, H, W) count each frame; float32 also under AMP (the cube roots and the power 2.4 are
poorly conditioned in half precision). Cost: a few elementwise passes and a separable blur of 3 planes: about
an L1 loss's order, far below a VGG loss.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from losses.color import mix_channels, rgb_to_lstar, srgb_to_linear
from losses.msssim import gaussian_taps
from losses.registry import LOSSES
from utils.options import Key, at_least, non_negative

# Ottosson's matrices: linear sRGB -> LMS, and cube-rooted LMS -> L, a, b (only a and b are used here)
OKLAB_M1 = ((0.4122214708, 0.5363325363, 0.0514459929), (0.2119034982, 0.6806995451, 0.1073969566),
            (0.0883024619, 0.2817188376, 0.6299787005))
OKLAB_M2 = ((0.2104542553, 0.7936177850, -0.0040720468), (1.9779984951, -2.4285922050, 0.4505937099),
            (0.0259040371, 0.7827717662, -0.8086757660))
LMS_FLOOR = 1e-6  # the cube root's argument at least this: its derivative stays finite (3.3e3 at the floor)
AB_EPS = 1e-12    # inside the square root of the ab distance


def rgb_to_oklab(x: torch.Tensor) -> torch.Tensor:
    """(..., 3, H, W) sRGB in [0, 1] -> (..., 3, H, W) Oklab L, a, b (L 0..1, a and b about -0.4..0.4)."""
    lms = mix_channels(srgb_to_linear(x), OKLAB_M1).clamp(min=LMS_FLOOR)
    return mix_channels(lms ** (1.0 / 3.0), OKLAB_M2)


CONSISTENCY_OPTIONS = {
    'consistency_blur': Key(3.0, (int, float), non_negative, 'sigma of the Gaussian blur before the comparison, in '
                            'pixels (0: none; neosr\'s 3)'),
    'consistency_downscale': Key(1, (int,), at_least(1, '1: no pooling'), 'the blurred planes averaged over this many '
                                 'pixels squared before the comparison (1: none)'),
}


class _Consistency(nn.Module):
    """The blur and pooling both losses share; `planes` converts, `distance` compares."""

    def __init__(self, consistency_blur: float = 3.0, consistency_downscale: int = 1):
        super().__init__()
        self.sigma = float(consistency_blur)
        self.downscale = int(consistency_downscale)
        self.radius = math.ceil(3 * self.sigma) if self.sigma > 0 else 0
        taps = gaussian_taps(2 * self.radius + 1, self.sigma) if self.radius else torch.ones(1)
        self.register_buffer('taps', taps, persistent=False)

    def smooth(self, planes: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) blurred (separable, reflect-101 borders) and average-pooled as the keys say."""
        b, c, h, w = planes.shape
        if self.radius:
            if min(h, w) <= self.radius:
                raise ValueError(f'G_consistency_blur {self.sigma:g} blurs {self.radius} pixels each side, more than '
                                 f'an image of {h}x{w} has: lower it')
            g = self.taps.to(planes.dtype)
            planes = F.pad(planes, (self.radius,) * 4, mode='reflect')
            planes = F.conv2d(planes, g.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
            planes = F.conv2d(planes, g.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)
        if self.downscale > 1:
            if min(h, w) < self.downscale:
                raise ValueError(f'G_consistency_downscale {self.downscale} is larger than the image ({h}x{w})')
            planes = F.avg_pool2d(planes, self.downscale)
        return planes

    def planes(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def distance(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape[-3] != 3:
            raise ValueError(f'{type(self).NAME} compares the colour of RGB images (3 channels), got {x.shape[-3]} '
                             f'channels')
        with torch.autocast(x.device.type, enabled=False):
            a = self.smooth(self.planes(x.float().reshape(-1, *x.shape[-3:])))
            b = self.smooth(self.planes(y.float().reshape(-1, *y.shape[-3:])))
            return self.distance(a, b)


@LOSSES.register('oklab_consistency', options=CONSISTENCY_OPTIONS)
class OklabConsistencyLoss(_Consistency):
    """mean over pixels of sqrt(Δa² + Δb²) of the blurred Oklab chroma planes (see the module docstring)."""
    NAME = 'oklab_consistency'

    def planes(self, x: torch.Tensor) -> torch.Tensor:
        return rgb_to_oklab(x)[:, 1:]

    def distance(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ((a - b).square().sum(1) + AB_EPS).sqrt().mean()


@LOSSES.register('lstar_consistency', options=CONSISTENCY_OPTIONS)
class LStarConsistencyLoss(_Consistency):
    """mean |ΔL*| / 100 of the blurred CIE lightness planes (see the module docstring)."""
    NAME = 'lstar_consistency'

    def planes(self, x: torch.Tensor) -> torch.Tensor:
        return rgb_to_lstar(x) / 100.0

    def distance(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a - b).abs().mean()
