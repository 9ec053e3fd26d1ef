"""Pieces BasicSR's networks share: the pixel-shuffle upsampler with BasicSR's state_dict names and the fixed
mean/range normalisation around the network (EDSR, RCAN), and the residual blocks and convolutional trunks of
its video networks (EDVR, BasicVSR, IconVSR, BasicVSR++).

Written from the papers; the layout (names, order) is BasicSR's so that its released checkpoints load.
"""
import math
from typing import Callable, Dict, Sequence

import torch
from torch import nn

from models.networks.layers.init import scaled_kaiming_
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

    def mean_shift(self, rgb_range: float) -> Dict[str, torch.Tensor]:
        """This normalisation as the original EDSR/RCAN code's `sub_mean` and `add_mean` 1x1 convolutions, which
        it applies after multiplying the input by its `rgb_range` and before dividing the output by it."""
        c = self.mean.shape[1]
        eye = torch.eye(c).view(c, c, 1, 1)
        mean = self.mean.flatten()
        return {'sub_mean.weight': eye * (self.img_range / rgb_range), 'sub_mean.bias': -mean * self.img_range,
                'add_mean.weight': eye * (rgb_range / self.img_range), 'add_mean.bias': mean * rgb_range}


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


class ResidualBlockNoBN(nn.Module):
    """x + res_scale · conv2(relu(conv1(x))), as BasicSR's video networks build it (`pytorch_init` off): Kaiming
    normal weights scaled by 0.1 and zero biases, so a deep stack starts close to the identity."""

    def __init__(self, num_feat: int = 64, res_scale: float = 1.0):
        super().__init__()
        self.res_scale = res_scale
        self.conv1 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.relu = nn.ReLU(inplace=True)
        scaled_kaiming_([self.conv1, self.conv2], 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv2(self.relu(self.conv1(x)))
        return x + out if self.res_scale == 1 else x + out * self.res_scale


def residual_blocks(num_block: int, num_feat: int) -> nn.Sequential:
    """`num_block` ResidualBlockNoBN in a row (BasicSR's `make_layer`: names `<i>.conv1`, `<i>.conv2`)."""
    return nn.Sequential(*[ResidualBlockNoBN(num_feat) for _ in range(num_block)])


class ConvResidualBlocks(nn.Module):
    """conv 3×3 in→out + LeakyReLU(0.1), then `num_block` residual blocks (`main.0`, `main.2.<i>`): the trunk of
    every propagation branch of BasicVSR, IconVSR and BasicVSR++."""

    def __init__(self, num_in_ch: int = 3, num_out_ch: int = 64, num_block: int = 15):
        super().__init__()
        self.main = nn.Sequential(nn.Conv2d(num_in_ch, num_out_ch, 3, 1, 1), nn.LeakyReLU(0.1, inplace=True),
                                  residual_blocks(num_block, num_out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.main(x)
