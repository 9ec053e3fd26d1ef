"""Pieces BasicSR's SR networks share (EDSR, RCAN): the pixel-shuffle upsampler with BasicSR's
state_dict names, and the fixed mean/range normalisation around the network.

Written from the papers; the layout (names, order) is BasicSR's so that its released checkpoints load.
"""
import math
from typing import Callable, Sequence

import torch
from torch import nn

from utils.errors import UserError


def pixel_shuffle_upsampler(scale: int, num_feat: int, net_type: str) -> nn.Sequential:
    """conv num_feat→4·num_feat + PixelShuffle(2), log2(scale) times (`upsample.0`, `upsample.2`, ...),
    or conv→9·num_feat + PixelShuffle(3) for scale 3."""
    layers = []
    if scale >= 1 and (scale & (scale - 1)) == 0:
        for _ in range(int(math.log2(scale))):
            layers += [nn.Conv2d(num_feat, 4 * num_feat, 3, 1, 1), nn.PixelShuffle(2)]
    elif scale == 3:
        layers += [nn.Conv2d(num_feat, 9 * num_feat, 3, 1, 1), nn.PixelShuffle(3)]
    else:
        raise UserError(f'netG.upscale: {net_type} supports scales 2^n and 3, got {scale!r}')
    return nn.Sequential(*layers)


class MeanRange(nn.Module):
    """(x - mean) * img_range in, y / img_range + mean out. The mean is a plain attribute, not a buffer:
    released checkpoints do not hold it (BasicSR's `self.mean`)."""

    def __init__(self, rgb_mean: Sequence[float], img_range: float, channels: int):
        super().__init__()
        mean = list(rgb_mean) if channels == len(rgb_mean) else [0.0] * channels
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, channels, 1, 1)
        self.img_range = img_range

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean.to(x)) * self.img_range

    def restore(self, y: torch.Tensor) -> torch.Tensor:
        return y / self.img_range + self.mean.to(y)


class ResidualSR(nn.Module):
    """BasicSR's EDSR/RCAN skeleton: normalise, `conv_first`, `body` closed by `conv_after_body` under a long
    skip, the pixel-shuffle `upsample`, `conv_last`, de-normalise. `make_body` builds the body (so that the
    state_dict keeps BasicSR's order: conv_first, body, conv_after_body, upsample, conv_last)."""

    def __init__(self, make_body: Callable[[], nn.Module], num_in_ch: int, num_out_ch: int, num_feat: int,
                 upscale: int, img_range: float, rgb_mean: Sequence[float], net_type: str):
        super().__init__()
        self.norm = MeanRange(rgb_mean, img_range, num_in_ch)
        self.conv_first = nn.Conv2d(num_in_ch, num_feat, 3, 1, 1)
        self.body = make_body()
        self.conv_after_body = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.upsample = pixel_shuffle_upsampler(upscale, num_feat, net_type)
        self.conv_last = nn.Conv2d(num_feat, num_out_ch, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_first(self.norm.normalise(x))
        x = x + self.conv_after_body(self.body(x))
        return self.norm.restore(self.conv_last(self.upsample(x)))
