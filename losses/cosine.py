"""Cosine-similarity loss `cosine`: 1 - the mean cosine of the angle between the colour vectors of the
two images, pixel by pixel.

The cosine of (R, G, B) of the output and of the target at each pixel is 1 where their hues and
saturations agree, whatever their brightness: the loss penalises colour shifts that L1 sees as small
(traiNNer-redux's `cosim` and the angular losses of colour constancy). cos = <x, y> / max(|x| |y|, eps)
with eps 1e-8, so a black pixel (|x| = 0) counts as orthogonal rather than NaN (its gradient too);
images of at least two channels (a gray pixel has no direction). Beside a pixel loss, which fixes the brightness
(`G_extra_losses`); video batches (N, T, C, H, W) count each frame; float32 also under AMP.
"""
import torch
from torch import nn

from losses.registry import LOSSES

EPS = 1e-8


@LOSSES.register('cosine')
class CosineLoss(nn.Module):
    """1 - mean over pixels of cos(pred pixel, target pixel), the channels as the vector."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape[-3] < 2:
            raise ValueError(f'the cosine loss compares colour vectors: images need at least 2 channels, got '
                             f'{x.shape[-3]}')
        with torch.autocast(x.device.type, enabled=False):
            x, y = x.float(), y.float()
            dot = (x * y).sum(-3)
            # clamped before the root: its gradient at 0 is infinite
            norms = (x.square().sum(-3) * y.square().sum(-3)).clamp(min=EPS * EPS).sqrt()
            return 1.0 - (dot / norms).mean()
