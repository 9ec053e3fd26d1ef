"""DRUNet (KAIR `UNetRes`; Zhang et al., "Plug-and-Play Image Restoration with Deep Denoiser Prior", TPAMI 2021).

A 4-scale U-Net whose stages are residual blocks (conv-act-conv plus identity): 2x2 stride-2 convs
down, 2x2 stride-2 transposed convs up, skips added (not concatenated). DRUNet's input is the image
with a noise level map as an extra channel; it predicts the clean image directly (no global
residual). USRNet's prior module is the same network without biases, so `ResUNet` is shared from
here (models/networks/usrnet.py imports it).

Attribute names follow KAIR (`m_head`, `m_down1..3`, `m_body`, `m_up3..1`, `m_tail`; a residual
block's convs are `res.0` and `res.2`) so model-zoo checkpoints load strictly.

Input sizes: the three downsamplings need height and width divisible by 8. KAIR leaves that to the
caller for DRUNet (its test scripts replicate-pad) but pads inside USRNet's ResUNet; here the
network always replicate-pads the bottom/right edges to a multiple of 8 and crops the output back.
For sizes that are already multiples of 8 (training patches, KAIR's tests) nothing changes; other
sizes give what KAIR's padded testing gives instead of a shape error.
"""
from typing import List, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from models.networks.layers.kair import ResBlock
from models.registry import NETWORKS
from utils.errors import UserError

SCALES = 4
MULTIPLE = 2 ** (SCALES - 1)  # input sizes the three 2x downsamplings divide exactly

ACTIVATIONS = ('R', 'L')  # ReLU, LeakyReLU 0.2 (models/networks/layers/kair.py letters)


def check_unet_options(nc: Sequence[int], act_mode: str, downsample_mode: str, upsample_mode: str) -> None:
    """Refuse what KAIR's option files and checkpoints never use rather than guess its layout."""
    if not isinstance(nc, (list, tuple)) or len(nc) != SCALES or not all(
            isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in nc):
        raise UserError(f'netG.nc: {nc!r} is not supported; give {SCALES} positive channel counts, '
                        f'one per scale (e.g. [64, 128, 256, 512])')
    if act_mode not in ACTIVATIONS:
        raise UserError(f'netG.act_mode: "{act_mode}" is not supported for a residual U-Net; use R (ReLU) '
                        f'or L (LeakyReLU 0.2)')
    if downsample_mode != 'strideconv':
        raise UserError(f'netG.downsample_mode: "{downsample_mode}" is not supported; use "strideconv" '
                        f'(2x2 stride-2 conv, the published DRUNet/USRNet)')
    if upsample_mode != 'convtranspose':
        raise UserError(f'netG.upsample_mode: "{upsample_mode}" is not supported; use "convtranspose" '
                        f'(2x2 stride-2 transposed conv, the published DRUNet/USRNet)')


def _blocks(nc: int, nb: int, act_mode: str, bias: bool) -> List[nn.Module]:
    return [ResBlock(nc, f'C{act_mode}C', bias=bias) for _ in range(nb)]


def _down(in_nc: int, out_nc: int, nb: int, act_mode: str, bias: bool) -> nn.Sequential:
    """nb residual blocks, then a 2x2 stride-2 conv changing the width."""
    return nn.Sequential(*_blocks(in_nc, nb, act_mode, bias), nn.Conv2d(in_nc, out_nc, 2, 2, 0, bias=bias))


def _up(in_nc: int, out_nc: int, nb: int, act_mode: str, bias: bool) -> nn.Sequential:
    """A 2x2 stride-2 transposed conv changing the width, then nb residual blocks."""
    return nn.Sequential(nn.ConvTranspose2d(in_nc, out_nc, 2, 2, 0, bias=bias), *_blocks(out_nc, nb, act_mode, bias))


def pad_to_multiple(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """Replicate-pad the bottom and right edges so that height and width are multiples of `multiple`."""
    h, w = x.shape[-2:]
    pad_h, pad_w = -h % multiple, -w % multiple
    if pad_h or pad_w:
        x = F.pad(x, (0, pad_w, 0, pad_h), mode='replicate')
    return x


@NETWORKS.register('drunet')
class ResUNet(nn.Module):
    """DRUNet: maps an image (plus noise level map channel) of any size to the restored image."""

    def __init__(self, in_nc: int = 1, out_nc: int = 1, nc: List[int] = [64, 128, 256, 512], nb: int = 4,
                 act_mode: str = 'R', downsample_mode: str = 'strideconv', upsample_mode: str = 'convtranspose',
                 bias: bool = True):
        super().__init__()
        check_unet_options(nc, act_mode, downsample_mode, upsample_mode)
        self.m_head = nn.Conv2d(in_nc, nc[0], 3, 1, 1, bias=bias)
        self.m_down1 = _down(nc[0], nc[1], nb, act_mode, bias)
        self.m_down2 = _down(nc[1], nc[2], nb, act_mode, bias)
        self.m_down3 = _down(nc[2], nc[3], nb, act_mode, bias)
        self.m_body = nn.Sequential(*_blocks(nc[3], nb, act_mode, bias))
        self.m_up3 = _up(nc[3], nc[2], nb, act_mode, bias)
        self.m_up2 = _up(nc[2], nc[1], nb, act_mode, bias)
        self.m_up1 = _up(nc[1], nc[0], nb, act_mode, bias)
        self.m_tail = nn.Conv2d(nc[0], out_nc, 3, 1, 1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        x1 = self.m_head(pad_to_multiple(x, MULTIPLE))
        x2 = self.m_down1(x1)
        x3 = self.m_down2(x2)
        x4 = self.m_down3(x3)
        x = self.m_body(x4)
        x = self.m_up3(x + x4)
        x = self.m_up2(x + x3)
        x = self.m_up1(x + x2)
        x = self.m_tail(x + x1)
        return x[..., :h, :w]
