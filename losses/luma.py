"""Pixel losses on the luma (Y of BT.601 YCbCr) of RGB images in [0, 1]: `l1_y` and `charbonnier_y`.

SR papers score PSNR/SSIM on Y (metrics/fidelity.rgb2y); training on the same channel optimises what
is reported and leaves the chroma free. The luma is rgb2y's formula scaled to [0, 1]:
(65.481 R + 128.553 G + 24.966 B) / 255 + 16 / 255; a one-channel image is already luma and passes
through. The channel axis is the third from the end, so video batches (N, T, C, H, W) work as images do.
"""
import torch
from torch import nn

from losses.pixel import CharbonnierLoss
from losses.registry import LOSSES
from utils.options import Key, positive

_Y = (65.481 / 255.0, 128.553 / 255.0, 24.966 / 255.0)  # R, G, B weights of BT.601 studio-swing luma


def rgb_to_y(x: torch.Tensor) -> torch.Tensor:
    """(..., 3, H, W) RGB in [0, 1] -> (..., 1, H, W) luma in [16/255, 235/255]; one channel as it is."""
    c = x.shape[-3]
    if c == 1:
        return x
    if c != 3:
        raise ValueError(f'the luma losses take RGB (3 channels) or gray (1 channel) images, got {c} channels')
    r, g, b = x.unbind(-3)
    return (_Y[0] * r + _Y[1] * g + _Y[2] * b + 16.0 / 255.0).unsqueeze(-3)


class LumaLoss(nn.Module):
    """`base` on the luma of both images."""

    def __init__(self, base: nn.Module):
        super().__init__()
        self.base = base

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.base(rgb_to_y(x), rgb_to_y(y))


@LOSSES.register('l1_y')
def l1_y() -> nn.Module:
    """Mean absolute difference of the lumas."""
    return LumaLoss(nn.L1Loss())


# the same key as `charbonnier` (G_charbonnier_eps): both read it when both are chosen
@LOSSES.register('charbonnier_y', options={'charbonnier_eps': Key(1e-9, (int, float), positive,
                                                                    'eps in sqrt(diff^2 + eps)')})
def charbonnier_y(charbonnier_eps: float) -> nn.Module:
    """mean(sqrt((Y_x - Y_y)^2 + eps)), charbonnier's formula on the lumas."""
    return LumaLoss(CharbonnierLoss(float(charbonnier_eps)))
