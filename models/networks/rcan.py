"""RCAN (Zhang et al., "Image Super-Resolution Using Very Deep Residual Channel Attention Networks",
ECCV 2018) in BasicSR's layout, so BasicSR's `RCAN_BIX4-official` checkpoint loads strictly.

Residual in residual: groups of residual channel-attention blocks (conv, ReLU, conv, then a
squeeze-and-excitation gate from the global average), each group closed by a conv and a skip, and a
long skip over all groups; pixel-shuffle upsampling. Mean/range normalisation as EDSR's.

spandrel (chaiNNer, ComfyUI) reads RCAN in the original code's layout (EDSR-PyTorch's `head`, `body`, `tail`), not
BasicSR's: `spandrel_state_dict` renames the weights.
"""
from typing import Dict, Sequence

import torch
from torch import nn

from models.networks.edsr import DIV2K_MEAN
from models.networks.layers.basicsr import ResidualSR
from models.networks.layers.rename import renamed
from models.registry import NETWORKS
from utils.options.foreign import Foreign

# BasicSR's names (ours) → the original code's; {num_block}: the index of a group's closing conv after its RCABs,
# {num_group}: that of the conv after the body, after the groups
ORIGINAL_NAMES = (
    (r'conv_first\.', 'head.0.'),
    (r'body\.(\d+)\.residual_group\.(\d+)\.rcab\.([02])\.', r'body.\1.body.\2.body.\3.'),
    (r'body\.(\d+)\.residual_group\.(\d+)\.rcab\.3\.attention\.1\.', r'body.\1.body.\2.body.3.conv_du.0.'),
    (r'body\.(\d+)\.residual_group\.(\d+)\.rcab\.3\.attention\.3\.', r'body.\1.body.\2.body.3.conv_du.2.'),
    (r'body\.(\d+)\.conv\.', r'body.\1.body.{num_block}.'),
    (r'conv_after_body\.', 'body.{num_group}.'),
    (r'upsample\.', 'tail.0.'),
    (r'conv_last\.', 'tail.1.'),
)
ORIGINAL_RGB_RANGE = 255  # the original code multiplies the [0, 1] input by this around its mean shifts


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


@NETWORKS.register('rcan', foreign=[Foreign('RCAN')])
class RCAN(ResidualSR):
    """Super-resolution by `upscale` (inherited from the top-level scale): 2^n or 3."""

    repeated_blocks = (ResidualGroup,)

    def __init__(self, num_in_ch: int = 3, num_out_ch: int = 3, num_feat: int = 64, num_group: int = 10,
                 num_block: int = 16, squeeze_factor: int = 16, upscale: int = 4, res_scale: float = 1.0,
                 img_range: float = 255., rgb_mean: Sequence[float] = DIV2K_MEAN):
        super().__init__(lambda: nn.Sequential(*[ResidualGroup(num_feat, num_block, squeeze_factor, res_scale)
                                                 for _ in range(num_group)]),
                         num_in_ch, num_out_ch, num_feat, upscale, img_range, rgb_mean, 'rcan')

    def spandrel_state_dict(self) -> Dict[str, torch.Tensor]:
        """The weights in the original RCAN code's layout, the one spandrel detects as RCAN (scripts/export.py
        --format spandrel); the mean and img_range become its mean-shift convolutions."""
        sizes = dict(num_block=len(self.body[0].residual_group), num_group=len(self.body))
        state = renamed(self.state_dict(), [(p, r.format(**sizes)) for p, r in ORIGINAL_NAMES])
        return {**state, **self.norm.mean_shift(ORIGINAL_RGB_RANGE)}
