"""Wavelet loss `wavelet`: L1 of the two images' Haar wavelet sub-bands, each band weighted on its own.

The orthonormal 2-D Haar transform (PyWavelets' `haar`, its `dwt2` coefficients exactly) of every channel,
`G_wavelet_levels` deep (each level transforms the previous level's LL): per level the bands LL (the 2x2
means, x 2), LH (PyWavelets' cH: the horizontal detail, a difference between two rows), HL (cV: the vertical
detail, between two columns) and HH (cD: the diagonal one), each half the size of the level's input. The loss
is sum over levels of w_LH |ΔLH| + w_HL |ΔHL| + w_HH |ΔHH| (each the mean over its coefficients), plus w_LL
|ΔLL| of the last level (the LL of the levels before it is split further); `G_wavelet_weights` [w_LL, w_LH,
w_HL, w_HH]. Pixel losses weigh an error in fine detail no more than a smooth one; raising the detail bands'
weights (or lowering LL's, which a pixel loss beside it already covers) trains what they leave blurry, as the
wavelet losses of neosr and of wavelet-guided SR (WGSR, Korkmaz et al. 2024) do. An odd size is extended by
repeating its last row or column (PyWavelets' `symmetric` mode for Haar); video batches (N, T, C, H, W) count
each frame; float32 also under AMP. Cost: a few strided slices and sums per level, about an L1 loss's.
"""
from typing import Any, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from losses.registry import LOSSES
from utils.options import Key, at_least, rule

BANDS = ('LL', 'LH', 'HL', 'HH')


def haar_level(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One level of the orthonormal 2-D Haar transform of (B, C, H, W): LL, LH, HL, HH, each (B, C, ceil(H/2),
    ceil(W/2)); an odd side repeats its last row/column first (PyWavelets' symmetric extension)."""
    h, w = x.shape[-2:]
    if h % 2 or w % 2:
        x = F.pad(x, (0, w % 2, 0, h % 2), mode='replicate')
    a, b = x[..., 0::2, 0::2], x[..., 0::2, 1::2]  # a b  (the four pixels of each 2x2 block)
    c, d = x[..., 1::2, 0::2], x[..., 1::2, 1::2]  # c d
    return (a + b + c + d) / 2, (a + b - c - d) / 2, (a - b + c - d) / 2, (a - b - c + d) / 2


def haar(x: torch.Tensor, levels: int) -> List[Tuple[torch.Tensor, ...]]:
    """[(LL, LH, HL, HH) of level 1, ... of level `levels`], each level transforming the previous LL."""
    out = []
    for _ in range(levels):
        bands = haar_level(x)
        out.append(bands)
        x = bands[0]
    return out


@rule('four numbers >= 0: [LL, LH, HL, HH]', minItems=4, maxItems=4, items={'type': 'number', 'minimum': 0})
def _weights(v: Sequence[Any]) -> Optional[str]:
    if len(v) == 4 and all(isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 for w in v):
        return None
    return 'must be four numbers >= 0: the weights of [LL, LH, HL, HH]'


@LOSSES.register('wavelet', options={
    'wavelet_levels': Key(2, (int,), at_least(1), 'Haar transform levels; each splits the previous level\'s LL'),
    'wavelet_weights': Key([1.0, 1.0, 1.0, 1.0], (list,), _weights, 'weights of the L1 of the sub-bands [LL, LH, HL, '
                           'HH]; LL only of the last level, the detail bands of every level'),
})
class WaveletLoss(nn.Module):
    """sum over levels of the weighted mean |Δ| of each Haar detail band, plus the last level's LL (see the module
    docstring)."""

    def __init__(self, wavelet_levels: int = 2, wavelet_weights: Sequence[float] = (1.0, 1.0, 1.0, 1.0)):
        super().__init__()
        self.levels = int(wavelet_levels)
        self.weights = [float(w) for w in wavelet_weights]

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        if min(h, w) < 2 ** self.levels:
            raise ValueError(f'G_wavelet_levels {self.levels} halves the image {self.levels} times; {h}x{w} is too '
                             f'small (at least {2 ** self.levels}x{2 ** self.levels})')
        with torch.autocast(x.device.type, enabled=False):
            # one transform of the difference: the Haar transform is linear
            levels = haar((x.float() - y.float()).reshape(-1, *x.shape[-3:]), self.levels)
            w_ll, *w_detail = self.weights
            total = w_ll * levels[-1][0].abs().mean()
            for _, *details in levels:
                for weight, band in zip(w_detail, details):
                    if weight:
                        total = total + weight * band.abs().mean()
            return total
