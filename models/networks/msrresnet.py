"""MSRResNet (KAIR `msrresnet1` = BasicSR `MSRResNet_wo_bn`): SRResNet without BN plus a bilinear skip.

Attribute names follow BasicSR/KAIR so their checkpoints load unchanged.
"""
import torch
import torch.nn.functional as F
from torch import nn

from models.networks.layers.init import scaled_kaiming_
from models.registry import NETWORKS
from utils.options.foreign import BASICSR, REDUX, Foreign, Only
from utils.errors import UserError


class ResidualBlockNoBN(nn.Module):
    """x + conv2(relu(conv1(x)))."""

    def __init__(self, nc: int = 64):
        super().__init__()
        self.conv1 = nn.Conv2d(nc, nc, 3, 1, 1, bias=True)
        self.conv2 = nn.Conv2d(nc, nc, 3, 1, 1, bias=True)
        scaled_kaiming_([self.conv1, self.conv2], 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(F.relu(self.conv1(x), inplace=True))


@NETWORKS.register('msrresnet1', foreign=[Foreign('MSRResNet', keys={'num_in_ch': 'in_nc', 'num_out_ch': 'out_nc', 'num_feat': 'nc',
                                                                      'num_block': 'nb', 'upscale': 'upscale'},
                                                                passthrough=False)])
class MSRResNet(nn.Module):
    """Super-resolution by `upscale` in {2, 3, 4}; the network learns the residual over bilinear upsampling."""

    repeated_blocks = (ResidualBlockNoBN,)  # compiled one block at a time with train.compile (models/compile.py)

    def __init__(self, in_nc: int = 3, out_nc: int = 3, nc: int = 64, nb: int = 16, upscale: int = 4):
        super().__init__()
        if upscale not in (2, 3, 4):
            raise UserError(f'netG.upscale: msrresnet1 supports 2, 3 or 4, got {upscale!r}')
        self.upscale = upscale
        self.conv_first = nn.Conv2d(in_nc, nc, 3, 1, 1, bias=True)
        self.recon_trunk = nn.Sequential(*[ResidualBlockNoBN(nc) for _ in range(nb)])
        if upscale == 3:
            self.upconv1 = nn.Conv2d(nc, nc * 9, 3, 1, 1, bias=True)
            self.pixel_shuffle = nn.PixelShuffle(3)
        else:
            self.upconv1 = nn.Conv2d(nc, nc * 4, 3, 1, 1, bias=True)
            self.pixel_shuffle = nn.PixelShuffle(2)
        if upscale == 4:
            self.upconv2 = nn.Conv2d(nc, nc * 4, 3, 1, 1, bias=True)
        self.HRconv = nn.Conv2d(nc, nc, 3, 1, 1, bias=True)
        self.conv_last = nn.Conv2d(nc, out_nc, 3, 1, 1, bias=True)
        self.lrelu = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        scaled_kaiming_([self.conv_first, self.upconv1, self.HRconv, self.conv_last], 0.1)
        if upscale == 4:
            scaled_kaiming_([self.upconv2], 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.recon_trunk(self.lrelu(self.conv_first(x)))
        out = self.lrelu(self.pixel_shuffle(self.upconv1(out)))
        if self.upscale == 4:
            out = self.lrelu(self.pixel_shuffle(self.upconv2(out)))
        out = self.conv_last(self.lrelu(self.HRconv(out)))
        return out + F.interpolate(x, scale_factor=self.upscale, mode='bilinear', align_corners=False)
