"""Optimizer and iteration-based learning-rate schedule from the `train` options (KAIR key names).

The schedule is one closed-form function of the iteration counter, so a resumed run only needs
`last_epoch` (the number of `step()` calls) to continue on exactly the same lr sequence, and
warmup composes with any schedule without chaining schedulers.

Each optimizer and schedule declares the keys it reads (unprefixed; the model's type key gives the
prefix: `G_optimizer_type` → `G_optimizer_<key>`, `G_scheduler_type` → `G_scheduler_<key>`, D's likewise);
the keys every member reads (`lr`, `clipgrad`, `reuse`, `warmup_iter`) are the model's.
"""
import bisect
import math
import warnings
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import torch
from torch.optim.lr_scheduler import LRScheduler

from utils.dist import is_main_process
from utils.errors import UserError
from utils.logger import get_logger
from utils.options import REQUIRED, Key, betas, non_negative, positive
from utils.registry import Registry

# Adam and AdamW read `<net>_optimizer_betas`, `_wd` and `_fused` (null: fused on CUDA, see `use_fused`).
ADAM_OPTIONS: Dict[str, Key] = {'betas': Key([0.9, 0.999], (list,), betas),
                                'wd': Key(0.0, (int, float), non_negative),
                                'fused': Key(None, (bool, type(None)))}
OPTIMIZERS = Registry('optimizer')
OPTIMIZERS.register('adam', options=ADAM_OPTIONS)(torch.optim.Adam)
OPTIMIZERS.register('adamw', options=ADAM_OPTIONS)(torch.optim.AdamW)

# `G_scheduler_type` (KAIR's and BasicSR's spellings) → function(where, its keys) → IterationLR kwargs
SCHEDULERS = Registry('scheduler')


def use_fused(train_opt: Dict[str, Any], device: torch.device, net: str = 'G') -> bool:
    """`<net>_optimizer_fused`: null picks the fused kernel on CUDA (one launch for every parameter, and a
    skipped step decided on the device: no host sync per iteration) and torch's default elsewhere."""
    fused = train_opt[f'{net}_optimizer_fused']
    return device.type == 'cuda' if fused is None else bool(fused)


def build_optimizer(param_groups: Union[Iterable[Dict[str, Any]], Iterable[torch.Tensor]],
                    train_opt: Dict[str, Any], net: str = 'G',
                    device: torch.device = torch.device('cpu')) -> torch.optim.Optimizer:
    """Adam/AdamW over `param_groups` from the `<net>_optimizer_*` keys (G: the generator, D: a GAN's
    discriminator); a group's own 'lr' wins over `<net>_optimizer_lr`. Fused or foreach: `use_fused`."""
    name, where = train_opt[f'{net}_optimizer_type'], f'train.{net}_optimizer_type'
    cls = OPTIMIZERS.get(name, where)
    o = OPTIMIZERS.read(name, train_opt, f'{net}_optimizer_', where)
    fused = 'fused' in o and use_fused(train_opt, device, net)  # for the optimizers that declare the key
    impl = {'fused': True} if fused else {}  # else torch's choice (foreach on CUDA)
    betas = (float(o['betas'][0]), float(o['betas'][1]))
    return cls(param_groups, lr=float(train_opt[f'{net}_optimizer_lr']), betas=betas, weight_decay=float(o['wd']),
               **impl)


def gated_step(optimizer: torch.optim.Optimizer, applied: Optional[torch.Tensor] = None,
               scaler: Optional[torch.amp.GradScaler] = None) -> None:
    """`optimizer.step()` if `applied` (a device bool from the non-finite check; None: always).

    A fused optimizer takes the decision on the device (its `found_inf`, as GradScaler uses it: no
    parameter, moment or step count changes where it is set), so the loop never waits for the GPU.
    Other optimizers, and fp16's GradScaler, read `applied` on the host. A skipped step closes a
    GradScaler's iteration without changing its scale.
    """
    if scaler is not None:
        if applied is None or bool(applied):
            scaler.step(optimizer)  # skips the update by itself if fp16 gradients overflowed
            scaler.update()
        else:
            scaler.update(scaler.get_scale())
        return
    if applied is None:
        optimizer.step()
    elif optimizer.defaults.get('fused'):
        optimizer.found_inf = (~applied).to(torch.float32)
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf
    elif bool(applied):
        optimizer.step()


class IterationLR(LRScheduler):
    """lr of each group = schedule(base lr of the group, number of `step()` calls so far).

    kind 'multistep': base * gamma ** (number of milestones <= t), like torch's MultiStepLR.
    kind 'cosine' with `periods` a list (BasicSR CosineAnnealingRestartLR): cosine from
        eta_min + weight_i * (base - eta_min) down to eta_min over each period in turn; eta_min after the last.
    kind 'cosine' with `periods` an int T (torch CosineAnnealingWarmRestarts, T_mult=1): restart every T.
    kind 'constant': base.
    Warmup multiplies the result by min(1, (t + 1) / warmup_iter).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, kind: str, milestones: Sequence[int] = (),
                 gamma: float = 0.5, periods: Union[int, Sequence[int]] = 1,
                 restart_weights: Sequence[float] = (1,), eta_min: float = 0.0, warmup_iter: int = 0,
                 last_epoch: int = -1, net: str = 'G'):
        self.net = net  # whose `<net>_scheduler_*` keys built it, for the notes of `differences`
        self.kind = kind
        self.milestones = sorted(int(m) for m in milestones)
        self.gamma = float(gamma)
        self.periods = int(periods) if isinstance(periods, int) else [int(p) for p in periods]
        self.restart_weights = [float(w) for w in restart_weights]
        self.eta_min = float(eta_min)
        self.warmup_iter = int(warmup_iter)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, t: int) -> float:
        if self.kind == 'multistep':
            lr = base_lr * self.gamma ** bisect.bisect_right(self.milestones, t)
        elif self.kind == 'cosine':
            lr = self._cosine(base_lr, t)
        else:
            lr = base_lr
        if self.warmup_iter > 0 and t < self.warmup_iter:
            lr *= (t + 1) / self.warmup_iter
        return lr

    def _cosine(self, base_lr: float, t: int) -> float:
        if isinstance(self.periods, int):
            weight, pos, period = 1.0, t % self.periods, self.periods
        else:
            start = 0
            for period, weight in zip(self.periods, self.restart_weights):
                if t <= start + period:
                    pos = t - start
                    break
                start += period
            else:
                return self.eta_min
        return self.eta_min + weight * 0.5 * (base_lr - self.eta_min) * (1 + math.cos(math.pi * pos / period))

    def get_lr(self) -> List[float]:
        return [self.lr_at(base, self.last_epoch) for base in self.base_lrs]

    _get_closed_form_lr = get_lr

    # Schedule attributes that come from the options, by option key (the counter comes from a checkpoint).
    OPTION_KEYS = {'kind': 'G_scheduler_type', 'milestones': 'G_scheduler_milestones',
                   'gamma': 'G_scheduler_gamma', 'periods': 'G_scheduler_periods',
                   'restart_weights': 'G_scheduler_restart_weights', 'eta_min': 'G_scheduler_eta_min',
                   'warmup_iter': 'G_scheduler_warmup_iter'}

    def step(self, epoch: Optional[int] = None) -> None:
        """Advance the counter. The lr is a function of the counter alone, so stepping before the
        optimizer (a skipped step, a GAN iteration without a G update) loses nothing; torch's warning
        about that order is for chained schedulers and is silenced here."""
        with warnings.catch_warnings():
            warnings.filterwarnings('ignore', message=r'Detected call of `lr_scheduler\.step\(\)` before')
            super().step(epoch)

    def differences(self, state_dict: Dict[str, Any]) -> List[str]:
        """Where a saved schedule differs from this one (built from the options), one note each."""
        return [f'train.{self.net}{key[1:]}: checkpoint {_show(state_dict[attr])}, options {_show(getattr(self, attr))}; '
                f'the options win'
                for attr, key in self.OPTION_KEYS.items()
                if attr in state_dict and not _same(state_dict[attr], getattr(self, attr))]

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Continue the saved schedule's position on this schedule, and push its lrs into the optimizer.

        Only the step counter is restored: the shape of the schedule (base lrs, milestones, periods,
        warmup, ...) is the one this scheduler was built with from the options, so an option edited
        before resuming takes effect at the resumed iteration.
        """
        self.last_epoch = int(state_dict['last_epoch'])
        self._step_count = int(state_dict['_step_count'])
        lrs = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group['lr'] = lr
        self._last_lr = list(lrs)


# Optimizer hyperparameters that come from the options, by option key (the moments come from a checkpoint).
_GROUP_KEYS = {'initial_lr': 'G_optimizer_lr', 'weight_decay': 'G_optimizer_wd', 'betas': 'G_optimizer_betas'}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _show(v: Any) -> str:
    return str(list(v)) if isinstance(v, tuple) else str(v)


def resume_optimizer(optimizer: torch.optim.Optimizer, saved: Dict[str, Any], reuse: bool,
                     saved_type: Optional[str], kind: str, net: str = 'G') -> List[str]:
    """Load a saved optimizer's state (Adam moments, step counts) under the options' hyperparameters.

    The options win for every hyperparameter (lr, weight decay, betas): what the user edited before
    resuming is what trains. The saved state is not used when `train.G_optimizer_reuse` is false
    (KAIR's meaning), when the optimizer type changed, or when the parameter groups no longer match.
    Returns one note per difference and per decision, for the log.
    """
    if not reuse:
        return [f'train.{net}_optimizer_reuse is false: the optimizer state (moments) starts afresh']
    if saved_type is not None and saved_type != kind:
        return [f'train.{net}_optimizer_type: checkpoint {saved_type}, options {kind}: the optimizer state starts afresh']
    fresh = [{k: v for k, v in g.items() if k != 'params'} for g in optimizer.param_groups]
    try:
        optimizer.load_state_dict(saved)
    except ValueError as e:
        return [f'the saved optimizer state does not fit the parameter groups ({e}); it starts afresh']
    notes = []
    for i, (group, options) in enumerate(zip(optimizer.param_groups, fresh)):
        for attr, key in _GROUP_KEYS.items():
            if attr in options and not _same(group.get(attr), options[attr]):
                where = f' (parameter group {i})' if len(fresh) > 1 else ''
                notes.append(f'train.{net}{key[1:]}{where}: checkpoint {_show(group.get(attr))}, '
                             f'options {_show(options[attr])}; the options win')
        group.update(options)
    return notes


def _int_list(v: Any) -> Optional[str]:
    return None if all(isinstance(m, int) and not isinstance(m, bool) and m >= 0 for m in v) else \
        'must be a list of non-negative integers'


def _periods(v: Any) -> Optional[str]:
    if isinstance(v, int) and v > 0 or isinstance(v, list) and v and all(
            isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in v):
        return None
    return 'must be a positive integer or a non-empty list of them'


def build_scheduler(optimizer: torch.optim.Optimizer, train_opt: Dict[str, Any], net: str = 'G') -> IterationLR:
    """The lr schedule of the `<net>_scheduler_*` keys (null type: constant); call `step()` once per iteration."""
    name = train_opt[f'{net}_scheduler_type']
    name, where = 'none' if name is None else name, f'train.{net}_scheduler_type'
    prefix = f'{net}_scheduler_'
    kwargs = SCHEDULERS.get(name, where)(f'train.{prefix}', **SCHEDULERS.read(name, train_opt, prefix, where))
    return IterationLR(optimizer, warmup_iter=train_opt[f'{net}_scheduler_warmup_iter'], net=net, **kwargs)


@SCHEDULERS.register('MultiStepLR', 'multistep', options={'milestones': Key([], (list,), _int_list),
                                                          'gamma': Key(0.5, (int, float), positive)})
def _multistep(where: str, milestones: List[int], gamma: float) -> Dict[str, Any]:
    """Milestones are used in increasing order (as torch's MultiStepLR counts them); given in another order,
    one warning line says so, since an unordered list is more often a typo than a choice."""
    ordered = sorted(milestones)
    if ordered != list(milestones) and is_main_process():
        get_logger().warning(f'{where}milestones: {list(milestones)} are not in increasing order; they are used '
                             f'sorted: {ordered}')
    return {'kind': 'multistep', 'gamma': gamma, 'milestones': ordered}


@SCHEDULERS.register('none')
def _constant(where: str) -> Dict[str, Any]:
    return {'kind': 'constant'}


@SCHEDULERS.register('CosineAnnealingWarmRestarts', 'cosine_restart', options={
    'periods': Key(REQUIRED, (int, list), _periods),
    'restart_weights': Key(None, (int, float, list, type(None))),
    'eta_min': Key(0.0, (int, float), non_negative)})
def _cosine(where: str, periods: Union[int, List[int]], restart_weights: Union[None, float, List[float]],
            eta_min: float) -> Dict[str, Any]:
    """`where` is the keys' prefix ("train.G_scheduler_") for the errors about two keys together."""
    weights = restart_weights
    if isinstance(periods, int):
        # KAIR passes restart_weights to torch as T_mult; only T_mult=1 (a plain repeat) is supported.
        if weights not in (None, 1, [1]):
            raise UserError(f'{where}restart_weights: {weights!r} is not supported with a single integer '
                            f'{where[6:]}periods; give {where[6:]}periods as a list to weight restarts')
        return {'kind': 'cosine', 'periods': periods, 'eta_min': eta_min}
    if weights is None:
        weights = [1] * len(periods)
    elif isinstance(weights, (int, float)):
        weights = [weights] * len(periods)
    if len(weights) != len(periods):
        raise UserError(f'{where}restart_weights: needs one weight per period '
                        f'({len(periods)}), got {weights!r}')
    return {'kind': 'cosine', 'periods': list(periods), 'restart_weights': weights, 'eta_min': eta_min}
