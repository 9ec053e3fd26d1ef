"""Normalised cross-correlation loss `ncc`: 1 - the Pearson correlation of the two images, per image and
channel.

NCC = sum((x - mean x)(y - mean y)) / sqrt(sum((x - mean x)^2) sum((y - mean y)^2)) over the pixels of one
channel of one image: 1 when the output is the target up to brightness and contrast (gain and offset),
-1 when inverted. The loss is 1 - the mean NCC over images and channels, in [0, 2]; it ignores gain and
offset, so it goes beside a pixel loss (`G_extra_losses`) that fixes them. A flat channel has no
correlation: the denominator is kept >= eps = 1e-8, so it counts as uncorrelated (NCC 0), not NaN.
Video batches (N, T, C, H, W) count each frame; float32 also under AMP (sums of squares).
"""
import torch
from torch import nn

from losses.registry import LOSSES

EPS = 1e-8


def ncc(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(..., C, H, W) pairs -> (..., C): the correlation coefficient of each channel of each image."""
    x = x - x.mean((-2, -1), keepdim=True)
    y = y - y.mean((-2, -1), keepdim=True)
    num = (x * y).sum((-2, -1))
    den = (x.square().sum((-2, -1)) * y.square().sum((-2, -1))).clamp(min=EPS * EPS).sqrt()  # no infinite slope at 0
    return num / den


@LOSSES.register('ncc')
class NCCLoss(nn.Module):
    """1 - mean over images and channels of their normalised cross-correlation."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            return 1.0 - ncc(x.float(), y.float()).mean()
