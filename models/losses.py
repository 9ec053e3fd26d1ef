"""Pixel losses selected by `train.G_lossfn_type`, scaled by `train.G_lossfn_weight` (KAIR semantics)."""
from typing import Any, Dict

import torch
from torch import nn

from utils.errors import UserError
from utils.suggest import did_you_mean

LOSS_TYPES = ('l1', 'l2', 'l2sum', 'charbonnier')


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


def build_loss(train_opt: Dict[str, Any]) -> nn.Module:
    """The weighted loss module for `train_opt` ('l2' is mean squared error, 'l2sum' its sum)."""
    kind = train_opt.get('G_lossfn_type', 'l1')
    if kind == 'l1':
        base: nn.Module = nn.L1Loss()
    elif kind == 'l2':
        base = nn.MSELoss()
    elif kind == 'l2sum':
        base = nn.MSELoss(reduction='sum')
    elif kind == 'charbonnier':
        eps = train_opt.get('G_charbonnier_eps')
        base = CharbonnierLoss(1e-9 if eps is None else float(eps))
    else:
        raise UserError(f'train.G_lossfn_type: unknown loss "{kind}"{did_you_mean(kind, LOSS_TYPES)}; '
                        f'known: {", ".join(LOSS_TYPES)}')
    weight = train_opt.get('G_lossfn_weight')
    return WeightedLoss(base, 1.0 if weight is None else weight)
