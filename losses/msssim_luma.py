"""1 - MS-SSIM of the lumas without the luminance term (`msssim_luma`; traiNNer-redux's `mssimloss`, whose GAN
templates train with it on small patches).

As traiNNer-redux computes it (Apache-2.0; traiNNer/losses/mssim_loss.py, itself from IQA-PyTorch, read as facts),
with its defaults: both images clamped to [0, 1] and reduced to the Y of YIQ (0.299 R + 0.587 G + 0.114 B); at each of
5 scales the contrast-structure map (2 cov + C2) / (var_x + var_y + C2), clamped at 0, is averaged per image, under an
11x11 Gaussian window of sigma 1.5 applied "valid", or with zero padding to the same size where the image is
narrower than the window (so 64x64 patches work); the images are then 2x average-pooled (an odd side padded). The
index is prod_j cs_j^w_j over the first four scales times cs_5^w_5 (the luminance term is left out), averaged over
the batch and clamped to [0, 1]; the loss is 1 minus it. Computed in float32. The `msssim` loss is the paper's
(luminance at the coarsest scale, every channel, images of at least 161 pixels).
"""
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from losses.msssim import WEIGHTS
from losses.registry import LOSSES
from utils.options.foreign import REDUX, Foreign, Only

WINDOW, SIGMA = 11, 1.5
C2 = 0.03 ** 2  # (K2 L)^2, images in [0, 1]
YIQ_LUMA = (0.299, 0.587, 0.114)


def gaussian_window(size: int = WINDOW, sigma: float = SIGMA) -> torch.Tensor:
    """MATLAB's fspecial('gaussian', size, sigma): a normalised 2-D Gaussian (float64, then float32), taps below
    eps x the largest set to 0, as (1, 1, size, size)."""
    r = (size - 1) / 2.0
    axis = torch.arange(size, dtype=torch.float64) - r
    g = torch.exp(-(axis[:, None] ** 2 + axis[None, :] ** 2) / (2 * sigma ** 2))
    g[g < torch.finfo(torch.float64).eps * g.max()] = 0
    return (g / g.sum()).float()[None, None]


def _filter(x: torch.Tensor, window: torch.Tensor, same: bool) -> torch.Tensor:
    if same:  # zero padding to the input's size (MATLAB's imfilter 'same', the kernel's extra row on the far side)
        pad = window.shape[-1] - 1
        x = F.pad(x, (pad // 2, pad - pad // 2, pad // 2, pad - pad // 2))
    return F.conv2d(x, window)


def contrast_structure(x: torch.Tensor, y: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
    """The mean over each image of max(0, (2 cov + C2) / (var_x + var_y + C2)), one value per image."""
    same = x.shape[-1] < window.shape[-1]
    mu_x, mu_y = _filter(x, window, same), _filter(y, window, same)
    var_x = _filter(x * x, window, same) - mu_x ** 2
    var_y = _filter(y * y, window, same) - mu_y ** 2
    cov = _filter(x * y, window, same) - mu_x * mu_y
    return F.relu((2 * cov + C2) / (var_x + var_y + C2)).mean(dim=(1, 2, 3))


@LOSSES.register('msssim_luma', foreign=[Foreign('MSSIMLoss', REDUX, passthrough=False, unneeded={
    'channels': Only(3), 'downsample': Only(False), 'test_y_channel': Only(True), 'is_prod': Only(True),
    'color_space': Only('yiq'), 'include_luminance': Only(False)})])
class LumaMSSSIMLoss(nn.Module):
    """1 - MS-SSIM (contrast-structure only) of the YIQ lumas (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer('window', gaussian_window(), persistent=False)
        self.register_buffer('luma', torch.tensor(YIQ_LUMA).view(1, 3, 1, 1), persistent=False)
        self.register_buffer('weights', torch.tensor(WEIGHTS), persistent=False)

    def _luma(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float().clamp(0, 1)
        return (x * self.luma).sum(1, keepdim=True) if x.shape[1] == 3 else x

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x, y = self._luma(x), self._luma(y)
        window = self.window.expand(x.shape[1], 1, -1, -1) if x.shape[1] > 1 else self.window
        cs: Optional[torch.Tensor] = None
        levels = []
        for _ in range(len(WEIGHTS)):
            cs = contrast_structure(x, y, window)
            levels.append(cs)
            pad = (x.shape[2] % 2, x.shape[3] % 2)
            x, y = F.avg_pool2d(x, 2, padding=pad), F.avg_pool2d(y, 2, padding=pad)
        stacked = torch.stack(levels)
        index = torch.prod(stacked[:-1] ** self.weights[:-1, None], dim=0) * stacked[-1] ** self.weights[-1]
        return 1 - index.mean().clamp(0, 1)
