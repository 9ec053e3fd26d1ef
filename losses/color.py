"""Colour loss `color`: L1 of the chroma of the two images, in YCbCr (default) or CIE Lab.

Pixel losses on RGB weigh a colour shift no differently from a loss of detail; a chroma loss beside
them (`G_extra_losses`) penalises the colour casts restoration networks drift into. `G_color_space`:
- "ycbcr": Cb and Cr of BT.601 studio swing, the chroma beside the Y that luma.py and the `*_y`
  metrics use: Cb = (-37.797 R - 74.203 G + 112 B + 128) / 255, Cr = (112 R - 93.786 G - 18.214 B + 128)
  / 255 for RGB in [0, 1] (KAIR's rgb2ycbcr, scaled to [0, 1]);
- "lab": a* and b* of CIE L*a*b* (sRGB, D65 white, OpenCV's constants), divided by 100 (L*'s range) so
  the loss has the scale of the pixel losses. The sRGB decoding and the cube root are taken on the
  branch that applies (no NaN gradients from the other one), so outputs outside [0, 1] are fine.
RGB images only (a gray image has no chroma); video batches (N, T, C, H, W) count each frame. Float32
also under AMP (the cube root and the power 2.4 are poorly conditioned in half precision).
"""
from typing import Any, Optional

import torch
from torch import nn

from losses.registry import LOSSES
from utils.options import Key, rule

_CBCR = ((-37.797, -74.203, 112.0), (112.0, -93.786, -18.214))  # rows: Cb, Cr weights of R, G, B (0..255 scale)
# sRGB (linear) -> XYZ, OpenCV's matrix, and the D65 white it is normalised by
_XYZ = ((0.412453, 0.357580, 0.180423), (0.212671, 0.715160, 0.072169), (0.019334, 0.119193, 0.950227))
_WHITE = (0.950456, 1.0, 1.088754)


@rule('"ycbcr" or "lab"', enum=['ycbcr', 'lab'])
def _color_space(v: Any) -> Optional[str]:
    return None if v in ('ycbcr', 'lab') else 'must be "ycbcr" or "lab"'


def mix_channels(x: torch.Tensor, rows: Any) -> torch.Tensor:
    """(..., 3, H, W) -> (..., len(rows), H, W): each output channel a weighted sum of the three input ones."""
    m = torch.tensor(rows, dtype=x.dtype, device=x.device)
    return torch.einsum('oc,...chw->...ohw', m, x)


def rgb_to_cbcr(x: torch.Tensor) -> torch.Tensor:
    """(..., 3, H, W) RGB in [0, 1] -> (..., 2, H, W) BT.601 Cb, Cr in [16/255, 240/255]."""
    return mix_channels(x, _CBCR) / 255.0 + 128.0 / 255.0


def srgb_to_linear(x: torch.Tensor) -> torch.Tensor:
    """sRGB's decoding (IEC 61966-2-1), the power taken on its own branch only: no NaN gradient below 0.04045, and
    values outside [0, 1] pass (negative ones on the linear branch)."""
    return torch.where(x > 0.04045, ((x.clamp(min=0.04045) + 0.055) / 1.055) ** 2.4, x / 12.92)


def cie_f(t: torch.Tensor) -> torch.Tensor:
    """CIE Lab's f: the cube root above 0.008856, its tangent line below (OpenCV's constants)."""
    return torch.where(t > 0.008856, t.clamp(min=0.008856) ** (1.0 / 3.0), 7.787 * t + 16.0 / 116.0)


def rgb_to_lab(x: torch.Tensor) -> torch.Tensor:
    """(..., 3, H, W) sRGB in [0, 1] -> (..., 3, H, W) CIE L*, a*, b* (D65), in Lab units (L* 0..100)."""
    xyz = mix_channels(srgb_to_linear(x), _XYZ) / torch.tensor(_WHITE, dtype=x.dtype, device=x.device).view(3, 1, 1)
    fx, fy, fz = cie_f(xyz).unbind(-3)
    return torch.stack([116.0 * fy - 16.0, 500.0 * (fx - fy), 200.0 * (fy - fz)], -3)


def rgb_to_ab(x: torch.Tensor) -> torch.Tensor:
    """(..., 3, H, W) sRGB in [0, 1] -> (..., 2, H, W) CIE a*, b* (D65), in Lab units."""
    return rgb_to_lab(x)[..., 1:, :, :]


def rgb_to_lstar(x: torch.Tensor) -> torch.Tensor:
    """(..., 3, H, W) sRGB in [0, 1] -> (..., 1, H, W) CIE L* (0..100): the lightness of the luminance Y alone."""
    return 116.0 * cie_f(mix_channels(srgb_to_linear(x), _XYZ[1:2])) - 16.0


@LOSSES.register('color', options={'color_space': Key('ycbcr', (str,), _color_space,
                                                     'chroma compared: Cb/Cr of BT.601 YCbCr, or CIE Lab a*/b*')})
class ColorLoss(nn.Module):
    """mean |chroma(pred) - chroma(target)| over both chroma channels (see the module docstring)."""

    def __init__(self, color_space: str = 'ycbcr'):
        super().__init__()
        self.color_space = color_space

    def chroma(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-3] != 3:
            raise ValueError(f'the color loss compares the chroma of RGB images (3 channels), got {x.shape[-3]} '
                             f'channels')
        return rgb_to_cbcr(x) if self.color_space == 'ycbcr' else rgb_to_ab(x) / 100.0

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            return (self.chroma(x.float()) - self.chroma(y.float())).abs().mean()
