"""Test-time Local Converter (TLC; Chu et al., "Improving Image Restoration by Revisiting Global Information
Aggregation", ECCV 2022): a network trained on crops pools "globally" over a crop, but at test time over a
whole image; TLC makes each global average pool a local one at test time, over a window as large as the
pool's input was for a training crop, times 1.5, so that statistics stay on the scale the network learnt.

As in the official NAFNetLocal (the released GoPro/REDS models):
- the window of a pool is fixed per pool from the training size: kernel = (its input's size for a padded
  training crop) · base // train, with base = int(1.5 · train) (384 for 256-px crops: 384, 192, 96, 48, 24
  down a NAFNet's levels);
- an input no larger than the kernel on both sides is pooled globally (then TLC changes nothing);
- otherwise the average over every kernel-sized window (each side cut to the input's) is computed from the
  integral image (cumulative sums), which gives the windows lying inside the input; that smaller map is
  padded back to the input's size by repeating its edges (replicate padding, the extra pixel, if any, on
  the right/bottom).
Only evaluation pools locally (`LocalAvgPool` in eval mode); training pools globally, which is what the
official converter computes for training crops no larger than 1.5 x the training size.
"""
from typing import Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn


def tlc_kernel(feature_size: int, train_size: int) -> int:
    """The window, along one axis, of a pool whose input is `feature_size` for a training crop of
    `train_size` (NAFNetLocal's integer rule: feature · int(1.5 · train) // train)."""
    return feature_size * int(train_size * 1.5) // train_size


def local_average(x: torch.Tensor, kernel: Sequence[int]) -> torch.Tensor:
    """N×C×H×W → N×C×H×W local means over `kernel` (kh, kw) windows (see the module docstring), or N×C×1×1
    global means when the input fits in one window."""
    kh, kw = kernel
    h, w = x.shape[-2:]
    if kh >= h and kw >= w:
        return F.adaptive_avg_pool2d(x, 1)
    k1, k2 = min(h, kh), min(w, kw)
    # integral image in at least float32 (a half-precision running sum over a large image loses the means)
    s = x.to(torch.promote_types(x.dtype, torch.float32)).cumsum(-1).cumsum(-2)
    s = F.pad(s, (1, 0, 1, 0))
    box = s[..., k1:, k2:] + s[..., :-k1, :-k2] - s[..., :-k1, k2:] - s[..., k1:, :-k2]
    out = (box / (k1 * k2)).to(x.dtype)
    _h, _w = out.shape[-2:]
    return F.pad(out, ((w - _w) // 2, (w - _w + 1) // 2, (h - _h) // 2, (h - _h + 1) // 2), mode='replicate')


class LocalAvgPool(nn.Module):
    """Replaces a global average pool (`nn.AdaptiveAvgPool2d(1)`): global in training, TLC's local average
    over `kernel` in evaluation. No parameters or buffers: a state_dict is unchanged by the swap."""

    def __init__(self, kernel: Tuple[int, int]):
        super().__init__()
        self.kernel = (int(kernel[0]), int(kernel[1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            return F.adaptive_avg_pool2d(x, 1)
        return local_average(x, self.kernel)

    def extra_repr(self) -> str:
        return f'kernel={self.kernel} (evaluation; global in training)'
