"""The losses `train.G_lossfn_type` chooses, and the weighted loss module built from the options.

Members live in any module of this package (`losses/*.py`) and register themselves with
`@LOSSES.register(name, options={key: Key(...)})`: a member is called with its declared keys, which the
option file gives as `G_<key>` (KAIR's `G_charbonnier_eps` for charbonnier's `charbonnier_eps`) and
the validator has typed, checked and filled, and returns the unweighted loss module.
"""
from typing import Any, Dict, Optional

import torch
from torch import nn

from utils.options import rule
from utils.registry import Registry

LOSSES = Registry('loss', 'losses', '*')


class WeightedLoss(nn.Module):
    """`loss_weight * base(pred, target)`, so the model needs no separate weight bookkeeping."""

    def __init__(self, base: nn.Module, loss_weight: float = 1.0):
        super().__init__()
        self.base = base
        self.loss_weight = float(loss_weight)

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = self.base(pred, target)
        return loss if self.loss_weight == 1.0 else loss * self.loss_weight

    def set_iteration(self, step: int) -> None:
        """Tell a loss that draws random numbers (ms_swd's projections) which iteration comes next (`step`
        iterations done): it draws them from its seed and `step` alone, so every rank, every micro-batch of the
        iteration and a resumed run draw the same. The model calls it before each iteration; others ignore it."""
        hook = getattr(self.base, 'set_iteration', None)
        if hook is not None:
            hook(step)


def build_loss(train_opt: Dict[str, Any], prefix: str = 'G_') -> nn.Module:
    """The loss `<prefix>lossfn_type` names, built from its `<prefix><key>` options and weighted by
    `<prefix>lossfn_weight` (KAIR semantics: 'l2' is mean squared error, 'l2sum' its sum, 'ssim' 1 - SSIM)."""
    name, where = train_opt[f'{prefix}lossfn_type'], f'train.{prefix}lossfn_type'
    base = LOSSES.get(name, where)(**LOSSES.read(name, train_opt, prefix, where))
    return WeightedLoss(base, train_opt[f'{prefix}lossfn_weight'])


@rule('{loss name: weight >= 0}', additionalProperties={'type': 'number', 'minimum': 0})
def extra_weights(v: Dict[str, Any]) -> Optional[str]:
    """The check of `train.G_extra_losses` ({loss name: weight}); the names are the registry's business."""
    for name, weight in v.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            return f'the weight of "{name}" must be a number >= 0, e.g. {{"{name}": 0.1}}'
    return None


def build_extra_losses(train_opt: Dict[str, Any], key: str = 'G_extra_losses',
                       prefix: str = 'G_') -> Dict[str, nn.Module]:
    """{name: weight x loss} of `train.<key>` ({loss name: weight}), each member built from its own
    `<prefix><key>` options as `<prefix>lossfn_type`'s is; a weight of 0 leaves the loss out."""
    out: Dict[str, nn.Module] = {}
    for name, weight in train_opt[key].items():
        if weight > 0:
            where = f'train.{key}'
            out[name] = WeightedLoss(LOSSES.get(name, where)(**LOSSES.read(name, train_opt, prefix, where)), weight)
    return out
