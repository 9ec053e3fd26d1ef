"""ESRGAN's generator (Wang et al. 2018) as KAIR's `rrdb` net_type: RRDBs in SRResNet's layout.

Residual-in-residual dense blocks replace SRResNet's residual blocks and batch norm is dropped;
the small residual scaling (0.2) keeps the deep trunk stable. KAIR's layout: one flat
`nn.Sequential` `model` (`model.1.sub.K.RDB1.conv1.0` …), so KAIR checkpoints load unchanged.
(KAIR's newer `rrdbnet` net_type is the BasicSR-named variant of the same network.)

KAIR's layout is the original ESRGAN code's (which spandrel, hence chaiNNer and ComfyUI, reads) but for one name:
KAIR's `sequential` unwraps a one-layer block, so each dense block's last conv is `conv5`, not `conv5.0`
(`spandrel_state_dict`).
"""
from typing import Dict

import torch
from torch import nn

from models.networks.layers.kair import conv, srresnet_layout
from models.networks.layers.rename import renamed
from models.registry import NETWORKS

ORIGINAL_ESRGAN_NAMES = ((r'(.*\.conv5)\.(weight|bias)$', r'\1.0.\2'),)  # ours → the original ESRGAN code's


class ResidualDenseBlock(nn.Module):
    """Five densely connected convs (each sees the input and all earlier outputs), scaled residual."""

    def __init__(self, nc: int, gc: int, mode: str):
        super().__init__()
        self.conv1 = conv(nc, gc, mode)
        self.conv2 = conv(nc + gc, gc, mode)
        self.conv3 = conv(nc + 2 * gc, gc, mode)
        self.conv4 = conv(nc + 3 * gc, gc, mode)
        self.conv5 = conv(nc + 4 * gc, nc, mode[:-1])  # no activation before the residual sum

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = [x]
        for layer in (self.conv1, self.conv2, self.conv3, self.conv4):
            feats.append(layer(torch.cat(feats, 1)))
        return self.conv5(torch.cat(feats, 1)) * 0.2 + x


class RRDBlock(nn.Module):
    """Three dense blocks under one more scaled residual (residual in residual)."""

    def __init__(self, nc: int, gc: int, mode: str):
        super().__init__()
        self.RDB1 = ResidualDenseBlock(nc, gc, mode)
        self.RDB2 = ResidualDenseBlock(nc, gc, mode)
        self.RDB3 = ResidualDenseBlock(nc, gc, mode)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.RDB3(self.RDB2(self.RDB1(x))) * 0.2 + x


@NETWORKS.register('rrdb')
class RRDB(nn.Module):
    """forward(x): N×in_nc×H×W → N×out_nc×(H·upscale)×(W·upscale); upscale 3 or a power of 2.

    gc: growth channels of each dense conv; upsample_mode: upconv, pixelshuffle or convtranspose.
    """

    repeated_blocks = (RRDBlock,)  # compiled one block at a time with train.compile (models/compile.py)

    def __init__(self, in_nc: int = 3, out_nc: int = 3, nc: int = 64, nb: int = 23, gc: int = 32, upscale: int = 4,
                 act_mode: str = 'L', upsample_mode: str = 'upconv'):
        super().__init__()
        self.model = srresnet_layout(in_nc, out_nc, nc, nb, lambda: RRDBlock(nc, gc, 'C' + act_mode), upscale,
                                     act_mode, upsample_mode, tail_bias=True, net_type='rrdb')

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def spandrel_state_dict(self) -> Dict[str, torch.Tensor]:
        """The weights in the original ESRGAN code's layout, the one spandrel detects as ESRGAN (scripts/export.py
        --format spandrel)."""
        return renamed(self.state_dict(), ORIGINAL_ESRGAN_NAMES)
