"""EDSR (Lim et al., "Enhanced Deep Residual Networks for Single Image Super-Resolution", CVPRW 2017)
in BasicSR's layout, so BasicSR's converted `EDSR_{M,L}x4` checkpoints load strictly.

Residual blocks without BatchNorm (conv, ReLU, conv, scaled by `res_scale`: 0.1 for the large model,
which the paper needs to train stably), a long skip over the body, then pixel-shuffle upsampling. The
input is centred on the DIV2K mean and scaled to [0, 255] (`img_range`) and mapped back at the end.
"""
from typing import Sequence

import torch
from torch import nn

from models.networks.layers.basicsr import ResidualSR
from models.registry import NETWORKS
from utils.options.foreign import Foreign

DIV2K_MEAN = (0.4488, 0.4371, 0.4040)


class ResidualBlockNoBN(nn.Module):
    """x + res_scale · conv2(relu(conv1(x)))."""

    def __init__(self, num_feat: int, res_scale: float):
        super().__init__()
        self.res_scale = res_scale
        self.conv1 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(self.relu(self.conv1(x))) * self.res_scale


@NETWORKS.register('edsr', foreign=[Foreign('EDSR')])
class EDSR(ResidualSR):
    """Super-resolution by `upscale` (inherited from the top-level scale): 2^n or 3."""

    repeated_blocks = (ResidualBlockNoBN,)

    def __init__(self, num_in_ch: int = 3, num_out_ch: int = 3, num_feat: int = 64, num_block: int = 16,
                 upscale: int = 4, res_scale: float = 1.0, img_range: float = 255.,
                 rgb_mean: Sequence[float] = DIV2K_MEAN):
        super().__init__(lambda: nn.Sequential(*[ResidualBlockNoBN(num_feat, res_scale) for _ in range(num_block)]),
                         num_in_ch, num_out_ch, num_feat, upscale, img_range, rgb_mean, 'edsr')
