"""RCAN (Zhang et al., "Image Super-Resolution Using Very Deep Residual Channel Attention Networks",
ECCV 2018) in BasicSR's layout, so BasicSR's `RCAN_BIX4-official` checkpoint loads strictly.

Residual in residual: groups of residual channel-attention blocks (conv, ReLU, conv, then a
squeeze-and-excitation gate from the global average), each group closed by a conv and a skip, and a
long skip over all groups; pixel-shuffle upsampling. Mean/range normalisation as EDSR's.
"""
from typing import Sequence

import torch
from torch import nn

from models.networks.edsr import DIV2K_MEAN
from models.networks.layers.basicsr import ResidualSR
from models.registry import NETWORKS


class ChannelAttention(nn.Module):
    """x · sigmoid(conv(relu(conv(avgpool(x))))) with a bottleneck of num_feat // squeeze_factor."""

    def __init__(self, num_feat: int, squeeze_factor: int):
        super().__init__()
        self.attention = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(num_feat, num_feat // squeeze_factor, 1),
                                       nn.ReLU(inplace=True), nn.Conv2d(num_feat // squeeze_factor, num_feat, 1),
                                       nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.attention(x)


class RCAB(nn.Module):
    """Residual channel-attention block: x + res_scale · CA(conv(relu(conv(x))))."""

    def __init__(self, num_feat: int, squeeze_factor: int, res_scale: float):
        super().__init__()
        self.res_scale = res_scale
        self.rcab = nn.Sequential(nn.Conv2d(num_feat, num_feat, 3, 1, 1), nn.ReLU(True),
                                  nn.Conv2d(num_feat, num_feat, 3, 1, 1), ChannelAttention(num_feat, squeeze_factor))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.rcab(x) * self.res_scale


class ResidualGroup(nn.Module):
    """num_block RCABs and a conv, inside a skip."""

    def __init__(self, num_feat: int, num_block: int, squeeze_factor: int, res_scale: float):
        super().__init__()
        self.residual_group = nn.Sequential(*[RCAB(num_feat, squeeze_factor, res_scale) for _ in range(num_block)])
        self.conv = nn.Conv2d(num_feat, num_feat, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(self.residual_group(x))


@NETWORKS.register('rcan')
class RCAN(ResidualSR):
    """Super-resolution by `upscale` (inherited from the top-level scale): 2^n or 3."""

    repeated_blocks = (ResidualGroup,)

    def __init__(self, num_in_ch: int = 3, num_out_ch: int = 3, num_feat: int = 64, num_group: int = 10,
                 num_block: int = 16, squeeze_factor: int = 16, upscale: int = 4, res_scale: float = 1.0,
                 img_range: float = 255., rgb_mean: Sequence[float] = DIV2K_MEAN):
        super().__init__(lambda: nn.Sequential(*[ResidualGroup(num_feat, num_block, squeeze_factor, res_scale)
                                                 for _ in range(num_group)]),
                         num_in_ch, num_out_ch, num_feat, upscale, img_range, rgb_mean, 'rcan')
