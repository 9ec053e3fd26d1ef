"""1 - MS-SSIM (Wang, Simoncelli, Bovik, "Multi-scale structural similarity for image quality assessment",
Asilomar 2003): `G_lossfn_type` or `G_extra_losses` member `msssim`, on images in [0, 1].

At each of 5 scales (the image, then 2x average-pooled four times) SSIM's contrast-structure term
cs = (2 cov + C2) / (var_x + var_y + C2) is averaged over the valid part of an 11x11 Gaussian window
(sigma 1.5); at the coarsest scale the luminance term joins it (the mean of l * cs, the SSIM map). The
index is prod_j cs_j^w_j * ssim_5^w_5 with the paper's weights, per image and channel, then averaged.
Terms below 0 (anti-correlated images, e.g. a generator at its random start) are clamped to 0 before the
fractional powers, which have no real value there. An odd size is pooled as Wang's MATLAB code does
(the last row/column repeated). Computed in float32 also under AMP (variances are differences of
squares).
"""
import math
from typing import List

import torch
import torch.nn.functional as F
from torch import nn

from losses.registry import LOSSES

WEIGHTS = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)  # scale 1 (full size) to 5, the paper's
WINDOW, SIGMA = 11, 1.5
C1, C2 = 0.01 ** 2, 0.03 ** 2  # (K L)^2 with L = 1: images in [0, 1]
MIN_SIZE = (WINDOW - 1) * 2 ** (len(WEIGHTS) - 1) + 1  # 161: an 11x11 window still fits at the 5th scale


def gaussian_taps(window: int, sigma: float) -> torch.Tensor:
    """The `window` taps of a normalised 1-D Gaussian of std `sigma` (computed in float64), float32."""
    g = torch.tensor([math.exp(-((i - window // 2) ** 2) / (2 * sigma ** 2)) for i in range(window)],
                     dtype=torch.float64)
    return (g / g.sum()).float()


@LOSSES.register('msssim')
class MSSSIMLoss(nn.Module):
    """1 - mean MS-SSIM over images and channels; images of at least 161x161 (`MIN_SIZE`)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer('window', gaussian_taps(WINDOW, SIGMA), persistent=False)

    def _filter(self, t: torch.Tensor) -> torch.Tensor:
        """The separable Gaussian window over each channel, valid part only."""
        c = t.shape[1]
        g = self.window
        t = F.conv2d(t, g.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
        return F.conv2d(t, g.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)

    def _terms(self, x: torch.Tensor, y: torch.Tensor) -> List[torch.Tensor]:
        """[mean SSIM, mean cs] per image and channel (N, C) at one scale."""
        mu_x, mu_y = self._filter(x), self._filter(y)
        var_x = self._filter(x * x) - mu_x ** 2
        var_y = self._filter(y * y) - mu_y ** 2
        cov = self._filter(x * y) - mu_x * mu_y
        cs = (2 * cov + C2) / (var_x + var_y + C2)
        luminance = (2 * mu_x * mu_y + C1) / (mu_x ** 2 + mu_y ** 2 + C1)
        return [(luminance * cs).mean((-2, -1)), cs.mean((-2, -1))]

    @staticmethod
    def _down(t: torch.Tensor) -> torch.Tensor:
        """2x2 average pooling; an odd last row/column is paired with itself (Wang's MATLAB msssim)."""
        h, w = t.shape[-2:]
        if h % 2 or w % 2:
            t = F.pad(t, (0, w % 2, 0, h % 2), mode='replicate')
        return F.avg_pool2d(t, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        if min(h, w) < MIN_SIZE:
            raise ValueError(f'MS-SSIM\'s {len(WEIGHTS)} scales of an {WINDOW}x{WINDOW} window need images of at '
                             f'least {MIN_SIZE}x{MIN_SIZE}, got {h}x{w}')
        with torch.autocast(x.device.type, enabled=False):
            x = x.float().reshape(-1, *x.shape[-3:])  # video (N, T, C, H, W): frames as images
            y = y.float().reshape(-1, *y.shape[-3:])
            index = x.new_ones(x.shape[:2])
            for j, weight in enumerate(WEIGHTS):
                ssim, cs = self._terms(x, y)
                if j == len(WEIGHTS) - 1:
                    index = index * ssim.clamp(min=0) ** weight
                else:
                    index = index * cs.clamp(min=0) ** weight
                    x, y = self._down(x), self._down(y)
            return 1 - index.mean()
