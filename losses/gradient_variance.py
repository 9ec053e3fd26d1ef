"""Gradient-variance loss `gradient_variance` (Abrahamyan, Truong, Philips, Deligiannis, "Gradient Variance
Loss for Structure-Enhanced Image Super-Resolution", ICASSP 2022).

Networks trained with L1/L2 produce gradient maps of lower variance than the ground truth's (blurred
edges). The loss: both images to gray (0.2989 R + 0.5870 G + 0.1140 B, the paper's rgb2gray; a gray
image as it is), their 3x3 Sobel gradient maps Gx, Gy (zero-padded, as the authors' code), each map cut
into non-overlapping `G_gv_patch_size` squares, the (sample, n - 1) variance of each square, and the loss
is MSE(var Gx(pred), var Gx(target)) + MSE(var Gy(pred), var Gy(target)). The patch must divide the
image (a mismatch is one line at start-up). Meant beside a pixel loss (`G_extra_losses`); video
batches (N, T, C, H, W) count each frame; float32 also under AMP (variances of squares).
"""
import torch
import torch.nn.functional as F
from torch import nn

from losses.registry import LOSSES
from utils.options import Key, at_least

_GRAY = (0.2989, 0.5870, 0.1140)
_SOBEL_X = ((-1.0, 0.0, 1.0), (-2.0, 0.0, 2.0), (-1.0, 0.0, 1.0))


def gradient_variances(x: torch.Tensor, patch: int) -> torch.Tensor:
    """(..., C, H, W) -> (B, 2, H/p * W/p): the variance of Gx and Gy in each p x p square of the gray image."""
    c, h, w = x.shape[-3:]
    if h % patch or w % patch:
        raise ValueError(f'gv_patch_size {patch} must divide the image size, got {h}x{w}')
    x = x.reshape(-1, c, h, w)
    if c == 3:
        x = sum(wt * x[:, i:i + 1] for i, wt in enumerate(_GRAY))
    elif c != 1:
        raise ValueError(f'the gradient-variance loss takes RGB or gray images, got {c} channels')
    kx = torch.tensor(_SOBEL_X, dtype=x.dtype, device=x.device)
    g = F.conv2d(x, torch.stack([kx, kx.t()])[:, None], padding=1)  # (B, 2, H, W): Gx, Gy
    squares = g.unflatten(-1, (w // patch, patch)).unflatten(-3, (h // patch, patch))  # B, 2, h/p, p, w/p, p
    squares = squares.transpose(-3, -2).flatten(-2).flatten(2, 3)  # B, 2, squares, p * p
    return squares.var(dim=-1, correction=1)


@LOSSES.register('gradient_variance', options={
    'gv_patch_size': Key(8, (int,), at_least(2, 'the side of the squares whose gradient variance is compared'),
                         'side of the squares whose gradient variances are compared; divides the patch')})
class GradientVarianceLoss(nn.Module):
    """MSE of the per-square gradient variances, x and y summed (see the module docstring)."""

    def __init__(self, gv_patch_size: int = 8):
        super().__init__()
        self.patch = int(gv_patch_size)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            vx, vy = gradient_variances(x.float(), self.patch), gradient_variances(y.float(), self.patch)
            return (vx - vy).square().mean(dim=(0, 2)).sum()
