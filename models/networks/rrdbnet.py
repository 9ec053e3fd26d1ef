"""RRDBNet, the ESRGAN generator (Wang et al., "ESRGAN", ECCVW 2018) as BSRGAN (Zhang et al., ICCV 2021) uses it.

Residual-in-residual dense blocks without BN: each RRDB is three residual dense blocks (five 3x3
convs, each seeing the concatenation of all earlier features, growth `gc`), and every residual is
scaled by 0.2 before it is added. Upsampling is nearest x2 followed by a conv (no pixel shuffle),
once per factor 2; LeakyReLU 0.2 throughout. Attribute names follow KAIR/BSRGAN (`conv_first`,
`RRDB_trunk.<i>.RDB<j>.conv<m>`, `trunk_conv`, `upconv1/2`, `HRconv`, `conv_last`) so model-zoo
checkpoints load strictly.
"""
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from models.networks.layers.init import scaled_kaiming_
from models.registry import NETWORKS
from utils.errors import UserError

RESIDUAL_SCALE = 0.2


class ResidualDenseBlock(nn.Module):
    """Five convs with dense connections; x + 0.2 * (last conv's output)."""

    def __init__(self, nf: int, gc: int):
        super().__init__()
        self.conv1 = nn.Conv2d(nf, gc, 3, 1, 1, bias=True)
        self.conv2 = nn.Conv2d(nf + gc, gc, 3, 1, 1, bias=True)
        self.conv3 = nn.Conv2d(nf + 2 * gc, gc, 3, 1, 1, bias=True)
        self.conv4 = nn.Conv2d(nf + 3 * gc, gc, 3, 1, 1, bias=True)
        self.conv5 = nn.Conv2d(nf + 4 * gc, nf, 3, 1, 1, bias=True)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)
        scaled_kaiming_([self.conv1, self.conv2, self.conv3, self.conv4, self.conv5])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for conv in (self.conv1, self.conv2, self.conv3, self.conv4):
            features.append(self.lrelu(conv(torch.cat(features, 1))))
        return x + RESIDUAL_SCALE * self.conv5(torch.cat(features, 1))


class RRDB(nn.Module):
    """Three residual dense blocks inside one more scaled residual. `names`: their state_dict names,
    KAIR's (RDB1..3) or BasicSR's (rdb1..3, the `esrgan` net_type)."""

    def __init__(self, nf: int, gc: int, names: Sequence[str] = ('RDB1', 'RDB2', 'RDB3')):
        super().__init__()
        self.names = tuple(names)
        for name in self.names:
            self.add_module(name, ResidualDenseBlock(nf, gc))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x
        for name in self.names:
            out = getattr(self, name)(out)
        return x + RESIDUAL_SCALE * out


@NETWORKS.register('rrdbnet')
class RRDBNet(nn.Module):
    """Super-resolution by `upscale` (KAIR's `sf`, inherited from the top-level scale) in {2, 4}."""

    repeated_blocks = (RRDB,)  # compiled one block at a time with train.compile (models/compile.py)

    def __init__(self, in_nc: int = 3, out_nc: int = 3, nf: int = 64, nb: int = 23, gc: int = 32, upscale: int = 4):
        super().__init__()
        if upscale not in (2, 4):
            # KAIR would silently upsample x2 for any other factor.
            raise UserError(f'netG.upscale: rrdbnet supports 2 or 4, got {upscale!r}')
        self.upscale = upscale
        self.conv_first = nn.Conv2d(in_nc, nf, 3, 1, 1, bias=True)
        self.RRDB_trunk = nn.Sequential(*[RRDB(nf, gc) for _ in range(nb)])
        self.trunk_conv = nn.Conv2d(nf, nf, 3, 1, 1, bias=True)
        self.upconv1 = nn.Conv2d(nf, nf, 3, 1, 1, bias=True)
        if upscale == 4:
            self.upconv2 = nn.Conv2d(nf, nf, 3, 1, 1, bias=True)
        self.HRconv = nn.Conv2d(nf, nf, 3, 1, 1, bias=True)
        self.conv_last = nn.Conv2d(nf, out_nc, 3, 1, 1, bias=True)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def _up(self, conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
        return self.lrelu(conv(F.interpolate(x, scale_factor=2, mode='nearest')))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fea = self.conv_first(x)
        fea = fea + self.trunk_conv(self.RRDB_trunk(fea))
        fea = self._up(self.upconv1, fea)
        if self.upscale == 4:
            fea = self._up(self.upconv2, fea)
        return self.conv_last(self.lrelu(self.HRconv(fea)))
