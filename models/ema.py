"""Exponential moving average of a network's weights (KAIR's netE, `E_decay`)."""
import copy
from typing import Any, Dict

import torch
from torch import nn


def _unwrap(model: nn.Module) -> nn.Module:
    """The bare network inside a DDP/DataParallel wrapper, so parameter names and order match."""
    return model.module if hasattr(model, 'module') else model


class ModelEMA:
    """Keeps `module`, an eval-mode copy with e = decay * e + (1 - decay) * p after every `update`.

    Buffers (e.g. BatchNorm running statistics) are copied rather than averaged. `state_dict()` is the
    plain network state_dict, so the EMA checkpoint loads directly into a fresh network.
    """

    def __init__(self, model: nn.Module, decay: float):
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f'EMA decay must be in [0, 1], got {decay}')
        self.decay = float(decay)
        self.module = copy.deepcopy(_unwrap(model)).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self._params = list(self.module.parameters())
        self._buffers = list(self.module.buffers())

    def refresh(self) -> None:
        """Take up a changed parameter set of `module` (after BatchNorm folding)."""
        for p in self.module.parameters():
            p.requires_grad_(False)
        self._params = list(self.module.parameters())
        self._buffers = list(self.module.buffers())

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        src = _unwrap(model)
        params = [p.detach() for p in src.parameters()]
        if len(params) != len(self._params):
            raise ValueError('ModelEMA.update: model structure differs from the EMA copy')
        if params:
            torch._foreach_mul_(self._params, self.decay)
            torch._foreach_add_(self._params, params, alpha=1.0 - self.decay)
        for e, b in zip(self._buffers, src.buffers()):
            e.copy_(b)

    def state_dict(self) -> Dict[str, Any]:
        return self.module.state_dict()

    def load_state_dict(self, state_dict: Dict[str, Any], strict: bool = True) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict)
