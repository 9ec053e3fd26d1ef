"""Exponential moving average of a network's weights (KAIR's netE, `E_decay`), with a warm-up of the decay
(`E_warmup_power` or `E_warmup_iter`) and the copy of the average back into the trained network (`E_switch_iter`)."""
import copy
from typing import Any, Callable, Dict, List, Optional, Union

import torch
from torch import nn


def _unwrap(model: nn.Module) -> nn.Module:
    """The bare network inside a DDP/DataParallel wrapper, so parameter names and order match."""
    return model.module if hasattr(model, 'module') else model


class ModelEMA:
    """Keeps `module`, an eval-mode copy with e = e + (1 - decay) * (p - e) after every `update`.

    One `torch._foreach_lerp_` over all parameters (no per-parameter Python work); buffers (e.g.
    BatchNorm running statistics) are copied rather than averaged. `state_dict()` is the plain network
    state_dict, so the EMA checkpoint loads directly into a fresh network.

    Warm-up of the decay (`decay_at`), so that the first averages follow the network instead of keeping its
    random start (with a constant 0.999, 74 % of the average is still the initialisation after 300 updates):
    `warmup_power` p > 0 gives the update of iteration t the decay min(decay, 1 - t^-p), as timm's ModelEmaV3,
    ema-pytorch and traiNNer-redux's `ema_power` do (0 at the first iteration: the average starts as the
    network; p = 0.75 reaches 0.999 at iteration 10,000); `warmup_iter` > 0 ramps it linearly from 0 at
    iteration 0 to `decay` at iteration `warmup_iter`. One of the two at most; neither: `decay` throughout
    (KAIR's netE). The decay is a function of the iteration alone, so a resumed run continues on the same ramp.
    """

    def __init__(self, model: nn.Module, decay: float, warmup_iter: int = 0, warmup_power: float = 0.0):
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f'EMA decay must be in [0, 1], got {decay}')
        if warmup_iter > 0 and warmup_power > 0:
            raise ValueError('ModelEMA: warmup_iter and warmup_power are two warm-ups of the decay: give one')
        self.decay = float(decay)
        self.warmup_iter = int(warmup_iter)
        self.warmup_power = float(warmup_power)
        self.step: Optional[int] = None  # the iteration of the last update (`describe`)
        self.module = copy.deepcopy(_unwrap(model)).eval()
        self.refresh()

    def refresh(self) -> None:
        """Take up a changed parameter set of `module` (after BatchNorm folding)."""
        for p in self.module.parameters():
            p.requires_grad_(False)
        self._params = list(self.module.parameters())
        self._buffers = list(self.module.buffers())
        self._source: Optional[nn.Module] = None
        self._source_tensors: List[List[torch.Tensor]] = []

    def _tensors_of(self, model: nn.Module) -> List[List[torch.Tensor]]:
        """[parameters, buffers] of `model`, listed once per source (refresh() forgets them)."""
        src = _unwrap(model)
        if src is not self._source:
            params, buffers = list(src.parameters()), list(src.buffers())
            if len(params) != len(self._params) or len(buffers) != len(self._buffers):
                raise ValueError('ModelEMA.update: model structure differs from the EMA copy')
            self._source, self._source_tensors = src, [params, buffers]
        return self._source_tensors

    def decay_at(self, step: Optional[int]) -> float:
        """The decay of the update at iteration `step` (None: the full decay)."""
        if step is None:
            return self.decay
        if self.warmup_power > 0:
            return min(self.decay, 1.0 - max(step, 1) ** -self.warmup_power)
        if self.warmup_iter <= 0 or step >= self.warmup_iter:
            return self.decay
        return self.decay * max(step, 0) / self.warmup_iter

    def schedule(self) -> str:
        """The decay's plan, for the start-up log (what `decay_at` does)."""
        if self.warmup_power > 0:
            return (f'EMA decay min({self.decay:g}, 1 - t^-{self.warmup_power:g}) at iteration t (E_warmup_power; 0: '
                    f'{self.decay:g} throughout)')
        if self.warmup_iter > 0:
            return f'EMA decay ramping linearly to {self.decay:g} by iteration {self.warmup_iter:,d} (E_warmup_iter)'
        return f'EMA decay {self.decay:g}'

    def describe(self) -> str:
        """Which weights these are, for the validation log: the decay of the last update and its iteration."""
        if self.step is None:
            return f'EMA (decay {self.decay:.6g})'
        return f'EMA (decay {self.decay_at(self.step):.6g} at iteration {self.step:,d})'

    @torch.no_grad()
    def update(self, model: nn.Module, applied: Optional[torch.Tensor] = None, step: Optional[int] = None,
               weights_of: Optional[Callable[[List[torch.Tensor]], List[torch.Tensor]]] = None) -> None:
        """Move the average towards `model`'s weights. `applied` (a device bool, None: True) is whether this
        iteration's optimizer step was applied: a skipped step leaves the average where it was, decided on
        the device (the weight of the move is 0), with no host sync. Buffers are copied either way.
        `step`: the iteration, for the warm-up of the decay. `weights_of` maps `model`'s parameters to the
        weights to average instead (a schedule-free optimizer's evaluation point, models/optim.py Averaging)."""
        params, buffers = self._tensors_of(model)
        self.step = step
        if params:
            targets = weights_of(params) if weights_of is not None else params
            weight: Union[float, torch.Tensor] = 1.0 - self.decay_at(step)
            if applied is not None:
                weight = applied.to(torch.float32) * weight
            torch._foreach_lerp_(self._params, targets, weight)
        if buffers:
            torch._foreach_copy_(self._buffers, buffers)

    @torch.no_grad()
    def copy_to(self, model: nn.Module) -> None:
        """`E_switch_iter`: the averaged weights into `model`'s parameters, in place (one foreach copy; DDP's
        and the optimizer's references to the parameters stay valid). Buffers are the model's already."""
        params, _ = self._tensors_of(model)
        if params:
            torch._foreach_copy_(params, self._params)

    def state_dict(self) -> Dict[str, Any]:
        return self.module.state_dict()

    def load_state_dict(self, state_dict: Dict[str, Any], strict: bool = True) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict)
