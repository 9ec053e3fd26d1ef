"""Pixel losses selected by `train.G_lossfn_type`, scaled by `train.G_lossfn_weight` (KAIR semantics)."""
import math
from typing import Any, Dict

import torch
import torch.nn.functional as F
from torch import nn

from utils.registry import Registry

# name → function(train options) → unweighted loss module
LOSSES = Registry('loss')


class CharbonnierLoss(nn.Module):
    """mean(sqrt((x - y)^2 + eps)): a differentiable L1 (KAIR/VRT; eps is added inside the root, not squared)."""

    def __init__(self, eps: float = 1e-9):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        diff = x - y
        return torch.mean(torch.sqrt(diff * diff + self.eps))


class SSIMLoss(nn.Module):
    """1 - SSIM (Wang et al. 2004: 11x11 Gaussian window, sigma 1.5, valid part only), per channel.

    The same SSIM as the validation metric (utils/metrics.py), on images in [0, 1], so that the
    loss a run minimises is the score it reports; KAIR's `ssim` loss type.
    """

    def __init__(self, window: int = 11, sigma: float = 1.5):
        super().__init__()
        g = torch.tensor([math.exp(-((i - window // 2) ** 2) / (2 * sigma ** 2)) for i in range(window)],
                         dtype=torch.float64)
        g = g / g.sum()
        self.register_buffer('window', torch.outer(g, g).float()[None, None], persistent=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        c1, c2 = 0.01 ** 2, 0.03 ** 2
        n = x.shape[1]
        w = self.window.to(x.dtype).expand(n, 1, -1, -1)

        def filt(t: torch.Tensor) -> torch.Tensor:
            return F.conv2d(t, w, groups=n)

        mu_x, mu_y = filt(x), filt(y)
        var_x = filt(x * x) - mu_x ** 2
        var_y = filt(y * y) - mu_y ** 2
        cov = filt(x * y) - mu_x * mu_y
        ssim = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x ** 2 + mu_y ** 2 + c1) * (var_x + var_y + c2))
        return 1 - ssim.mean()


class WeightedLoss(nn.Module):
    """`loss_weight * base(pred, target)`, so the model needs no separate weight bookkeeping."""

    def __init__(self, base: nn.Module, loss_weight: float = 1.0):
        super().__init__()
        self.base = base
        self.loss_weight = float(loss_weight)

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = self.base(pred, target)
        return loss if self.loss_weight == 1.0 else loss * self.loss_weight


LOSSES.register('l1')(lambda train_opt: nn.L1Loss())
LOSSES.register('l2')(lambda train_opt: nn.MSELoss())
LOSSES.register('l2sum')(lambda train_opt: nn.MSELoss(reduction='sum'))
LOSSES.register('charbonnier')(lambda train_opt: CharbonnierLoss(float(train_opt['G_charbonnier_eps'])))
LOSSES.register('ssim')(lambda train_opt: SSIMLoss())


def build_loss(train_opt: Dict[str, Any]) -> nn.Module:
    """The weighted loss module for `train_opt` ('l2' is mean squared error, 'l2sum' its sum, 'ssim' 1 - SSIM)."""
    base = LOSSES.get(train_opt['G_lossfn_type'], 'train.G_lossfn_type')(train_opt)
    return WeightedLoss(base, train_opt['G_lossfn_weight'])
