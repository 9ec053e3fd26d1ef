"""Sobel edge loss `sobel`: L1 of the two images' Sobel gradients, per channel.

The horizontal and vertical 3x3 Sobel responses, Gx = [[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]] and Gy its
transpose, of every channel (colour edges count, not only luma ones), with mirrored borders (OpenCV's
default, reflect-101, so a border pixel is no edge); the loss is the mean absolute difference over both
maps, all channels and pixels. Components rather than the magnitude sqrt(Gx^2 + Gy^2): the same edges,
no orientation lost, and no singular gradient where an image is flat. Video batches (N, T, C, H, W)
count each frame; float32 also under AMP.
"""
import torch
import torch.nn.functional as F
from torch import nn

from losses.registry import LOSSES

_SOBEL_X = ((-1.0, 0.0, 1.0), (-2.0, 0.0, 2.0), (-1.0, 0.0, 1.0))


def sobel(x: torch.Tensor) -> torch.Tensor:
    """(..., C, H, W) -> (..., 2, C, H, W): the Sobel x and y responses of each channel, mirrored borders."""
    c, h, w = x.shape[-3:]
    if h < 2 or w < 2:
        raise ValueError(f'the Sobel filter needs images of at least 2x2, got {h}x{w}')
    kx = torch.tensor(_SOBEL_X, dtype=x.dtype, device=x.device)
    kernel = torch.stack([kx, kx.t()])[:, None].repeat(c, 1, 1, 1)  # (2C, 1, 3, 3): x then y of each channel
    flat = F.pad(x.reshape(-1, c, h, w), (1, 1, 1, 1), mode='reflect')
    out = F.conv2d(flat, kernel, groups=c)  # (B, 2C, H, W), channel-major: c0x, c0y, c1x, ...
    return out.view(*x.shape[:-3], c, 2, h, w).transpose(-4, -3)


@LOSSES.register('sobel')
class SobelLoss(nn.Module):
    """mean |Sobel(pred) - Sobel(target)| over the x and y maps of every channel."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            return (sobel(x.float()) - sobel(y.float())).abs().mean()
