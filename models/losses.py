"""Pixel losses selected by `train.G_lossfn_type`, scaled by `train.G_lossfn_weight` (KAIR semantics)."""
from typing import Any, Dict

import torch
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


def build_loss(train_opt: Dict[str, Any]) -> nn.Module:
    """The weighted loss module for `train_opt` ('l2' is mean squared error, 'l2sum' its sum)."""
    base = LOSSES.get(train_opt['G_lossfn_type'], 'train.G_lossfn_type')(train_opt)
    return WeightedLoss(base, train_opt['G_lossfn_weight'])
