"""MSRResNet (KAIR `msrresnet1` = BasicSR `MSRResNet_wo_bn`): SRResNet without BN plus a bilinear skip.

Attribute names follow BasicSR/KAIR so their checkpoints load unchanged: `msrresnet1` has KAIR's and the released
BasicSR MSRResNet_x4 checkpoint's (`recon_trunk`, `HRconv`), `msrresnet` BasicSR 1.4.2's (`body`, `conv_hr`, with its
keywords), what BasicSR's option files build.
"""
import torch
import torch.nn.functional as F
from torch import nn

from models.networks.layers.init import scaled_kaiming_
from models.registry import NETWORKS
from utils.options.foreign import Foreign
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


@NETWORKS.register('msrresnet1')
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

    def trunk(self) -> nn.Module:
        return self.recon_trunk

    def hr_conv(self) -> nn.Module:
        return self.HRconv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.trunk()(self.lrelu(self.conv_first(x)))
        out = self.lrelu(self.pixel_shuffle(self.upconv1(out)))
        if self.upscale == 4:
            out = self.lrelu(self.pixel_shuffle(self.upconv2(out)))
        out = self.conv_last(self.lrelu(self.hr_conv()(out)))
        return out + F.interpolate(x, scale_factor=self.upscale, mode='bilinear', align_corners=False)


@NETWORKS.register('msrresnet', foreign=[Foreign('MSRResNet')])
class MSRResNetBasicSR(MSRResNet):
    """The same network with BasicSR 1.4.2's keywords and parameter names (`body`, `conv_hr`): `upscale` 2, 3 or 4."""

    def __init__(self, num_in_ch: int = 3, num_out_ch: int = 3, num_feat: int = 64, num_block: int = 16,
                 upscale: int = 4):
        super().__init__(num_in_ch, num_out_ch, num_feat, num_block, upscale)
        # the same modules under BasicSR's names, in the same places of the state_dict
        renamed = {'recon_trunk': 'body', 'HRconv': 'conv_hr'}
        self._modules = type(self._modules)((renamed.get(k, k), v) for k, v in self._modules.items())

    def trunk(self) -> nn.Module:
        return self.body

    def hr_conv(self) -> nn.Module:
        return self.conv_hr
