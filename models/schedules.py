"""Iteration-based learning-rate schedules from the `train` options (KAIR's and BasicSR's names and keys).

The schedule is one closed-form function of the iteration counter, so a resumed run only needs
`last_epoch` (the number of `step()` calls) to continue on exactly the same lr sequence, and
warmup composes with any schedule without chaining schedulers.

Each schedule declares the keys it reads (unprefixed; the model's type key gives the prefix:
`G_scheduler_type` → `G_scheduler_<key>`, D's likewise); `warmup_iter` is the model's. The optimizers they
drive are models/optim.py's.
"""
import bisect
import math
import warnings
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import torch
from torch.optim.lr_scheduler import LRScheduler

from models.optim import same_value, show_value
from utils.dist import is_main_process
from utils.errors import UserError
from utils.logger import get_logger
from utils.options import (REQUIRED, Key, above, at_least, non_negative, one_of, open_unit, positive, rule, unit_interval,
                           up_to_one)
from utils.options.foreign import BASICSR, REDUX, Foreign
from utils.registry import Registry

_NUM = (int, float)
# `G_scheduler_type` (KAIR's and BasicSR's spellings) → function(where, its keys) → IterationLR kwargs
SCHEDULERS = Registry('scheduler')


# schedules whose shape starts after the warm-up (the warm-up rises to the base lr, the decay runs from its end to
# `end_iter`); the others are functions of the absolute iteration that the warm-up multiplies
AFTER_WARMUP = ('cosine_decay', 'linear_decay', 'exponential')
# schedules that hold the base lr from the end of the warm-up to `decay_start`, then decay to eta_min at `end_iter`
HOLD_THEN_DECAY = ('wsd', 'knee')
# the shapes of a decay from the base lr (fraction p of the decay done) to eta_min; wsd's `decay_shape`
DECAY_SHAPES: Dict[str, Callable[[float], float]] = {
    'linear': lambda p: 1.0 - p,
    'cosine': lambda p: 0.5 * (1.0 + math.cos(math.pi * p)),
    '1-sqrt': lambda p: 1.0 - math.sqrt(p),
}


class IterationLR(LRScheduler):
    """lr of each group = schedule(base lr of the group, number of `step()` calls so far).

    kind 'multistep': base * gamma ** (number of milestones <= t), like torch's MultiStepLR.
    kind 'cosine' with `periods` a list (BasicSR CosineAnnealingRestartLR): cosine from
        eta_min + weight_i * (base - eta_min) down to eta_min over each period in turn; eta_min after the last.
    kind 'cosine' with `periods` an int T (torch CosineAnnealingWarmRestarts, T_mult=1): restart every T.
    kind 'constant': base.
    kind 'onecycle' (torch's OneCycleLR without momentum cycling): from base / div_factor up to base over the
        first pct_start of `end_iter` iterations, then down to base / div_factor / final_div_factor at `end_iter`
        (cosine or linear `anneal`); that minimum after it.
    kind 'multistep_restart' (BasicSR's MultiStepRestartLR): as 'multistep', the lr set back to base x
        restart_weights[i] at each of `restarts` (milestones then count from there).
    Warmup multiplies these by min(1, (t + 1) / warmup_iter); with `warmup_style` 'basicsr' (BasicSR's schedulers)
        it replaces them, as BasicSR sets the lr: base x (t + 1) / warmup_iter while t + 1 < warmup_iter, and a
        'multistep_restart' schedule goes on from the last warm-up lr (BasicSR's scheduler multiplies the lr it
        finds), so the lr after the warm-up is base x (warmup_iter - 1) / warmup_iter until a milestone or restart.
    kind 'cosine_decay' (DAT's, ATD's, DRCT's recipe): the warm-up rises to base, then a half cosine from base
        at `warmup_iter` to eta_min at `end_iter` (torch's CosineAnnealingLR when there is no warm-up);
        eta_min after it.
    kind 'linear_decay': likewise, a straight line from base to eta_min.
    kind 'exponential': likewise, base * gamma ** (t - warmup_iter) (torch's ExponentialLR without warm-up).
    kind 'wsd' (warmup-stable-decay; Hu et al. 2024's MiniCPM, Hägele et al. 2024): the warm-up, then base until
        `decay_start`, then `decay_shape` ('linear', 'cosine' or '1-sqrt': base - (base - eta_min) sqrt(p)) down
        to eta_min at `end_iter`; eta_min after it.
    kind 'knee' (Iyer et al. 2023's explore-exploit schedule, traiNNer-redux's KneeLR): the warm-up, then base
        until `decay_start` (the explore phase), then a straight line to eta_min at `end_iter`.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, kind: str, milestones: Sequence[int] = (),
                 gamma: float = 0.5, periods: Union[int, Sequence[int]] = 1,
                 restart_weights: Sequence[float] = (1,), eta_min: float = 0.0, warmup_iter: int = 0,
                 end_iter: int = 0, pct_start: float = 0.3, div_factor: float = 25.0,
                 final_div_factor: float = 1e4, anneal: str = 'cos', decay_start: int = 0,
                 decay_shape: str = 'linear', decay_ratio: float = 0.0, explore_ratio: float = 0.0,
                 restarts: Sequence[int] = (), warmup_style: str = 'scale', last_epoch: int = -1, net: str = 'G'):
        self.net = net  # whose `<net>_scheduler_*` keys built it, for the notes of `differences`
        self.kind = kind
        self.milestones = sorted(int(m) for m in milestones)
        self.gamma = float(gamma)
        self.periods = int(periods) if isinstance(periods, int) else [int(p) for p in periods]
        self.restart_weights = [float(w) for w in restart_weights]
        self.eta_min = float(eta_min)
        self.warmup_iter = int(warmup_iter)
        self.end_iter = int(end_iter)
        self.pct_start = float(pct_start)
        self.div_factor = float(div_factor)
        self.final_div_factor = float(final_div_factor)
        self.anneal = anneal
        self.decay_start = int(decay_start)
        self.decay_shape = decay_shape
        # the options decay_start comes from (wsd's, knee's), compared on resume by `differences`
        self.decay_ratio = float(decay_ratio)
        self.explore_ratio = float(explore_ratio)
        self.restarts = [int(r) for r in restarts]
        self.warmup_style = warmup_style
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, t: int) -> float:
        """The lr of a group with base lr `base_lr` after `t` steps (the lr in force at iteration t + 1)."""
        warm = self.warmup_iter
        if self.warmup_style == 'basicsr' or self.kind == 'multistep_restart':
            return self._basicsr(base_lr, t)
        if self.kind in AFTER_WARMUP or self.kind in HOLD_THEN_DECAY:
            if warm > 0 and t < warm:
                return base_lr * (t + 1) / warm
            if self.kind in AFTER_WARMUP:
                return self._decay(base_lr, t - warm, self.end_iter - warm)
            if t < self.decay_start:
                return base_lr
            s, span = t - self.decay_start, self.end_iter - self.decay_start
            if s >= span:
                return self.eta_min
            return self.eta_min + (base_lr - self.eta_min) * DECAY_SHAPES[self.decay_shape](s / span)
        if self.kind == 'multistep':
            lr = base_lr * self.gamma ** bisect.bisect_right(self.milestones, t)
        elif self.kind == 'cosine':
            lr = self._cosine(base_lr, t)
        elif self.kind == 'onecycle':
            lr = self._one_cycle(base_lr, t)
        else:
            lr = base_lr
        if warm > 0 and t < warm:
            lr *= (t + 1) / warm
        return lr

    def _basicsr(self, base_lr: float, t: int) -> float:
        """BasicSR's lr at iteration t + 1 (its `update_learning_rate`): the warm-up sets base x (t + 1) / warmup_iter
        while t + 1 < warmup_iter; its CosineAnnealingRestartLR is a function of t; its MultiStepRestartLR multiplies
        the lr in force (the last warm-up lr after a warm-up) by gamma at each milestone, and sets base x weight at
        each restart."""
        warm = self.warmup_iter
        if warm > 1 and t + 1 < warm:
            return base_lr * (t + 1) / warm
        if self.kind == 'cosine':
            return self._cosine(base_lr, t)
        begin = warm - 1 if warm > 1 else 0  # the first step BasicSR's scheduler sets the lr at, after a warm-up
        restarts = [r for r in self.restarts if begin <= r <= t]
        if restarts:
            r = max(restarts)
            lr, counted = base_lr * self.restart_weights[self.restarts.index(r)], r
        else:
            lr, counted = (base_lr * (warm - 1) / warm if warm > 1 else base_lr), begin - 1
        return lr * self.gamma ** sum(1 for m in self.milestones if counted < m <= t)

    def _decay(self, base_lr: float, s: int, span: int) -> float:
        if self.kind == 'exponential':
            return base_lr * self.gamma ** s
        if s >= span:
            return self.eta_min
        if self.kind == 'cosine_decay':
            return self.eta_min + (base_lr - self.eta_min) * 0.5 * (1 + math.cos(math.pi * s / span))
        return self.eta_min + (base_lr - self.eta_min) * (1 - s / span)

    def _one_cycle(self, base_lr: float, t: int) -> float:
        start = base_lr / self.div_factor
        low = start / self.final_div_factor
        peak_at = self.pct_start * self.end_iter - 1  # torch's phase boundaries
        last = self.end_iter - 1
        if t <= peak_at:
            a, b, pct = start, base_lr, t / peak_at
        else:
            a, b, pct = base_lr, low, min(1.0, (t - peak_at) / (last - peak_at))
        if self.anneal == 'cos':
            return b + (a - b) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (b - a) * pct + a

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

    def phases(self) -> List[int]:
        """The iterations where the closed form changes its formula (the end of the warm-up, a decay's start and end,
        the milestones, the restarts): curves.png's plan samples each, so its corners are drawn where they are."""
        out = [self.warmup_iter] if self.warmup_iter > 0 else []
        if self.kind in HOLD_THEN_DECAY:
            out.append(self.decay_start)
        if self.kind in HOLD_THEN_DECAY or self.kind in ('cosine_decay', 'linear_decay', 'onecycle'):
            out.append(self.end_iter)
        if self.kind in ('multistep', 'multistep_restart'):
            out += self.milestones + self.restarts
        if self.kind == 'cosine' and isinstance(self.periods, list):
            out += [sum(self.periods[:i + 1]) for i in range(len(self.periods))]
        return sorted(set(out))

    def get_lr(self) -> List[float]:
        """Each group's lr at the counter (torch's hook, and its closed form: the same function of the counter)."""
        return [self.lr_at(base, self.last_epoch) for base in self.base_lrs]

    _get_closed_form_lr = get_lr

    def planned(self, iterations: Iterable[int]) -> List[float]:
        """The first group's lr after each of `iterations` steps: what the log shows at those iterations (the lr
        of the iteration that follows)."""
        return [self.lr_at(self.base_lrs[0], it) for it in iterations]

    # Schedule attributes that come from the options, by option key (the counter comes from a checkpoint).
    OPTION_KEYS = {'kind': 'G_scheduler_type', 'milestones': 'G_scheduler_milestones',
                   'gamma': 'G_scheduler_gamma', 'periods': 'G_scheduler_periods',
                   'restart_weights': 'G_scheduler_restart_weights', 'eta_min': 'G_scheduler_eta_min',
                   'warmup_iter': 'G_scheduler_warmup_iter', 'end_iter': 'G_scheduler_total_iter',
                   'pct_start': 'G_scheduler_pct_start', 'div_factor': 'G_scheduler_div_factor',
                   'final_div_factor': 'G_scheduler_final_div_factor', 'anneal': 'G_scheduler_anneal',
                   'decay_ratio': 'G_scheduler_decay_ratio', 'decay_shape': 'G_scheduler_decay_shape',
                   'explore_ratio': 'G_scheduler_explore_ratio'}

    def step(self, epoch: Optional[int] = None) -> None:
        """Advance the counter. The lr is a function of the counter alone, so stepping before the
        optimizer (a skipped step, a GAN iteration without a G update) loses nothing; torch's warning
        about that order is for chained schedulers and is silenced here."""
        with warnings.catch_warnings():
            warnings.filterwarnings('ignore', message=r'Detected call of `lr_scheduler\.step\(\)` before')
            super().step(epoch)

    def differences(self, state_dict: Dict[str, Any]) -> List[str]:
        """Where a saved schedule differs from this one (built from the options), one note each."""
        return [f'train.{self.net}{key[1:]}: checkpoint {show_value(state_dict[attr])}, '
                f'options {show_value(getattr(self, attr))}; the options win'
                for attr, key in self.OPTION_KEYS.items()
                if attr in state_dict and not same_value(state_dict[attr], getattr(self, attr))]

    # BasicSR's schedules' attributes (restarts, warm-up style) come from the options alone: left out of the saved
    # state, which keeps the layout of every earlier checkpoint (only the step counter is restored anyway)
    UNSAVED = ('restarts', 'warmup_style')

    def state_dict(self) -> Dict[str, Any]:
        state = super().state_dict()
        for key in self.UNSAVED:
            state.pop(key, None)
        return state

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


@rule('a list of integers >= 0', items={'type': 'integer', 'minimum': 0})
def _int_list(v: Any) -> Optional[str]:
    return None if all(isinstance(m, int) and not isinstance(m, bool) and m >= 0 for m in v) else \
        'must be a list of non-negative integers'


@rule('an integer > 0 or a non-empty list of them',
      anyOf=[{'type': 'integer', 'exclusiveMinimum': 0},
             {'type': 'array', 'minItems': 1, 'items': {'type': 'integer', 'exclusiveMinimum': 0}}])
def _periods(v: Any) -> Optional[str]:
    if isinstance(v, int) and v > 0 or isinstance(v, list) and v and all(
            isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in v):
        return None
    return 'must be a positive integer or a non-empty list of them'


def build_scheduler(optimizer: torch.optim.Optimizer, train_opt: Dict[str, Any], net: str = 'G',
                    notes: bool = True) -> IterationLR:
    """The lr schedule of the `<net>_scheduler_*` keys (null type: constant); call `step()` once per iteration.

    A schedule that runs to an end (`<net>_scheduler_total_iter`) ends at `train.total_iter` when that key is
    null, and must end after the warm-up. `notes`: warn (rank 0) of milestones the run never reaches (False
    where a model rebuilds the schedule it already built)."""
    name = train_opt[f'{net}_scheduler_type']
    name, where = 'none' if name is None else name, f'train.{net}_scheduler_type'
    prefix = f'{net}_scheduler_'
    kwargs = SCHEDULERS.get(name, where)(f'train.{prefix}', **SCHEDULERS.read(name, train_opt, prefix, where))
    warmup = train_opt[f'{net}_scheduler_warmup_iter']
    if 'end_iter' in kwargs:
        if kwargs['end_iter'] is None:
            kwargs['end_iter'] = int(train_opt['total_iter'])
        if kwargs['kind'] in AFTER_WARMUP + HOLD_THEN_DECAY and kwargs['end_iter'] <= warmup:
            raise UserError(f'train.{prefix}total_iter: the schedule ends at iteration {kwargs["end_iter"]} (null: '
                            f'train.total_iter), not after train.{prefix}warmup_iter {warmup}')
        if kwargs['kind'] == 'onecycle' and kwargs['pct_start'] * kwargs['end_iter'] < 2:
            raise UserError(f'train.{prefix}pct_start: {kwargs["pct_start"]} of {kwargs["end_iter"]} iterations '
                            f'leaves no rising phase (it needs at least 2 iterations)')
        if kwargs['kind'] in HOLD_THEN_DECAY:
            kwargs['decay_start'] = _decay_start(kwargs, warmup, f'train.{prefix}')
    total = int(train_opt['total_iter'])
    if notes and kwargs['kind'] == 'multistep' and kwargs['milestones'] and min(kwargs['milestones']) >= total \
            and is_main_process():  # the schedule never steps: KAIR's files end on a last milestone = total_iter
        get_logger().warning(f'train.{prefix}milestones: {", ".join(map(str, kwargs["milestones"]))}, all at or beyond '
                             f'train.total_iter {total}: the learning rate never decays (milestones count '
                             f'iterations, not epochs; {prefix}type null gives a constant rate)')
    return IterationLR(optimizer, warmup_iter=warmup, net=net, **kwargs)


def _decay_start(kwargs: Dict[str, Any], warmup: int, where: str) -> int:
    """The iteration where wsd's decay (its last `decay_ratio` of the run) or the knee's (after its first
    `explore_ratio`, warm-up included, as traiNNer-redux counts it) begins, rounded to an iteration: at least one
    iteration of decay, and not before the warm-up ends."""
    end = kwargs['end_iter']
    if kwargs['kind'] == 'wsd':
        key, ratio = 'decay_ratio', kwargs['decay_ratio']
        start = end - int(round(ratio * end))
        phase = f'a decay over the last {ratio} of {end} iterations'
    else:
        key, ratio = 'explore_ratio', kwargs['explore_ratio']
        start = int(round(ratio * end))
        phase = f'an explore phase of {ratio} of {end} iterations'
    if start >= end:
        raise UserError(f'{where}{key}: {phase} leaves no iteration to decay over (the schedule ends at iteration '
                        f'{end}, null {where}total_iter: train.total_iter)')
    if start < warmup:
        raise UserError(f'{where}{key}: {phase} starts the decay at iteration {start}, before '
                        f'{where}warmup_iter {warmup} ends')
    return start


@SCHEDULERS.register('MultiStepLR', 'multistep', options={
    'milestones': Key([], (list,), _int_list, 'iterations at which the learning rate is multiplied by gamma'),
    'gamma': Key(0.5, (int, float), positive, 'the factor at each milestone')},
    foreign=[Foreign('MultiStepLR', REDUX, defaults={'gamma': 0.1}, note='')])
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
    """A constant learning rate (after any warm-up); also what `G_scheduler_type: null` gives."""
    return {'kind': 'constant'}


@SCHEDULERS.register('CosineAnnealingWarmRestarts', 'cosine_restart', options={
    'periods': Key(REQUIRED, (int, list), _periods, 'cosine cycle lengths in iterations (one integer: restart '
                                                    'every that many)'),
    'restart_weights': Key(None, (int, float, list, type(None)), help='peak of each cycle relative to the base '
                                                                      'learning rate (null: 1 each)'),
    'eta_min': Key(0.0, (int, float), non_negative, 'the learning rate at the bottom of each cycle')})
def _cosine(where: str, periods: Union[int, List[int]], restart_weights: Union[None, float, List[float]],
            eta_min: float) -> Dict[str, Any]:
    """Cosine annealing with restarts (BasicSR's CosineAnnealingRestartLR, torch's CosineAnnealingWarmRestarts).

    `where` is the keys' prefix ("train.G_scheduler_") for the errors about two keys together."""
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


END_ITER = Key(None, (int, type(None)),
               above(0, 'null: train.total_iter'),
               'the iteration at which the schedule ends (null: train.total_iter)')
ETA_MIN = Key(0.0, (int, float), non_negative, 'the learning rate at the end of the decay')


@SCHEDULERS.register('CosineAnnealingLR', 'cosine', options={'eta_min': ETA_MIN, 'total_iter': END_ITER},
                     foreign=[Foreign('CosineAnnealingLR', REDUX, keys={'T_max': 'total_iter'},
                                      note='torch\'s CosineAnnealingLR rises again after T_max; here the lr stays at '
                                           'eta_min from T_max on')])
def _cosine_decay(where: str, eta_min: float, total_iter: Optional[int]) -> Dict[str, Any]:
    """A half cosine from the base lr at the end of the warm-up to eta_min at total_iter (DAT's, ATD's, DRCT's
    recipe; torch's CosineAnnealingLR without a warm-up)."""
    return {'kind': 'cosine_decay', 'eta_min': eta_min, 'end_iter': total_iter}


@SCHEDULERS.register('LinearLR', 'linear', options={'eta_min': ETA_MIN, 'total_iter': END_ITER})
def _linear_decay(where: str, eta_min: float, total_iter: Optional[int]) -> Dict[str, Any]:
    """A straight line from the base lr at the end of the warm-up to eta_min at total_iter."""
    return {'kind': 'linear_decay', 'eta_min': eta_min, 'end_iter': total_iter}


@SCHEDULERS.register('ExponentialLR', 'exponential', options={
    'gamma': Key(REQUIRED, (int, float), up_to_one,
                 'the learning rate\'s factor per iteration')})
def _exponential(where: str, gamma: float) -> Dict[str, Any]:
    """The base lr times gamma per iteration after the warm-up (torch's ExponentialLR)."""
    return {'kind': 'exponential', 'gamma': gamma}


@SCHEDULERS.register('OneCycleLR', 'onecycle', options={
    'total_iter': END_ITER,
    'pct_start': Key(0.3, (int, float), open_unit,
                     'share of the iterations over which the lr rises'),
    'div_factor': Key(25.0, (int, float), at_least(1),
                      'the starting lr is G_optimizer_lr / this'),
    'final_div_factor': Key(1e4, (int, float), at_least(1),
                            'the final lr is the starting lr / this'),
    'anneal': Key('cos', (str,), one_of('cos', 'linear'), 'the shape of both phases')})
def _one_cycle(where: str, total_iter: Optional[int], pct_start: float, div_factor: float, final_div_factor: float,
               anneal: str) -> Dict[str, Any]:
    """torch's OneCycleLR without momentum cycling: from G_optimizer_lr / div_factor up to G_optimizer_lr over
    the first pct_start of the run, then down to the starting lr / final_div_factor at total_iter."""
    return {'kind': 'onecycle', 'end_iter': total_iter, 'pct_start': pct_start, 'div_factor': div_factor,
            'final_div_factor': final_div_factor, 'anneal': anneal}


@SCHEDULERS.register('wsd', options={
    'decay_ratio': Key(0.2, _NUM, up_to_one, 'share of the run (of total_iter) over which the lr decays, at its end '
                       '(Hägele et al.: 0.2 matches a cosine run)'),
    'decay_shape': Key('1-sqrt', (str,), one_of(*DECAY_SHAPES), 'the decay\'s shape: base lr x (1 - p), the half '
                       'cosine, or 1 - sqrt(p), p the share of the decay done (Hägele et al.\'s best)'),
    'eta_min': ETA_MIN, 'total_iter': END_ITER})
def _wsd(where: str, decay_ratio: float, decay_shape: str, eta_min: float, total_iter: Optional[int]) -> Dict[str, Any]:
    """Warmup-stable-decay: the warm-up, the base lr, then a decay over the last `decay_ratio` of the run.

    The stable phase can be extended and a decay branched off any checkpoint of it (Hägele et al. 2024), the
    decay's shape linear, cosine or 1-sqrt."""
    return {'kind': 'wsd', 'decay_ratio': decay_ratio, 'decay_shape': decay_shape, 'eta_min': eta_min,
            'end_iter': total_iter}


@SCHEDULERS.register('KneeLR', 'knee', options={
    'explore_ratio': Key(0.5, _NUM, unit_interval, 'share of the run (of total_iter, the warm-up included) held at '
                         'the base lr before the linear decay (traiNNer-redux\'s default 0.5)'),
    'eta_min': ETA_MIN, 'total_iter': END_ITER})
def _knee(where: str, explore_ratio: float, eta_min: float, total_iter: Optional[int]) -> Dict[str, Any]:
    """traiNNer-redux's KneeLR (Iyer et al., "Wide-minima density hypothesis and the explore-exploit learning rate
    schedule", JMLR 2023): the warm-up, the base lr until `explore_ratio` of the run, then linear to eta_min."""
    return {'kind': 'knee', 'explore_ratio': explore_ratio, 'eta_min': eta_min, 'end_iter': total_iter}


# BasicSR's own schedulers (basicsr/models/lr_scheduler.py) with its warm-up (models/base_model.py
# `update_learning_rate`): the lr BasicSR sets at every iteration, its warm-up included (`IterationLR._basicsr`).
_RESTART_WEIGHTS = Key([1], (list,), help='the lr at each restart, relative to the base lr (one per restart)')


@SCHEDULERS.register('MultiStepRestartLR', options={
    'milestones': Key(REQUIRED, (list,), _int_list, 'iterations at which the learning rate is multiplied by gamma'),
    'gamma': Key(0.1, (int, float), positive, 'the factor at each milestone'),
    'restarts': Key([0], (list,), _int_list, 'iterations at which the lr goes back to base x its restart weight'),
    'restart_weights': _RESTART_WEIGHTS},
    foreign=[Foreign('MultiStepLR', BASICSR), Foreign('MultiStepRestartLR', BASICSR)])
def _multistep_restart(where: str, milestones: List[int], gamma: float, restarts: List[int],
                       restart_weights: List[float]) -> Dict[str, Any]:
    """BasicSR's MultiStepRestartLR (what its `MultiStepLR` builds): gamma at each milestone, back to base x weight at
    each restart; with BasicSR's warm-up, whose last lr the schedule goes on from."""
    if len(restarts) != len(restart_weights):
        raise UserError(f'{where}restart_weights: one weight per restart ({len(restarts)}), got {restart_weights!r}')
    return {'kind': 'multistep_restart', 'gamma': gamma, 'milestones': sorted(milestones), 'restarts': restarts,
            'restart_weights': restart_weights, 'warmup_style': 'basicsr'}


@SCHEDULERS.register('CosineAnnealingRestartLR', options={
    'periods': Key(REQUIRED, (list,), _periods, 'the length of each cosine cycle, in iterations'),
    'restart_weights': _RESTART_WEIGHTS,
    'eta_min': Key(0.0, (int, float), non_negative, 'the learning rate at the bottom of each cycle')},
    foreign=[Foreign('CosineAnnealingRestartLR', BASICSR), Foreign('CosineAnnealingRestartLR', REDUX)])
def _cosine_restart(where: str, periods: List[int], restart_weights: List[float], eta_min: float) -> Dict[str, Any]:
    """BasicSR's CosineAnnealingRestartLR: a cosine from eta_min + weight x (base - eta_min) down to eta_min over
    each period in turn (eta_min after the last), with BasicSR's warm-up (the base lr ramped, not the cosine)."""
    if len(restart_weights) != len(periods):
        raise UserError(f'{where}restart_weights: one weight per period ({len(periods)}), got {restart_weights!r}')
    return {'kind': 'cosine', 'periods': list(periods), 'restart_weights': restart_weights, 'eta_min': eta_min,
            'warmup_style': 'basicsr'}
