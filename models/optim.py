"""Optimizers and iteration-based learning-rate schedules from the `train` options (KAIR key names).

The schedule is one closed-form function of the iteration counter, so a resumed run only needs
`last_epoch` (the number of `step()` calls) to continue on exactly the same lr sequence, and
warmup composes with any schedule without chaining schedulers.

Each optimizer and schedule declares the keys it reads (unprefixed; the model's type key gives the
prefix: `G_optimizer_type` → `G_optimizer_<key>`, `G_scheduler_type` → `G_scheduler_<key>`, D's likewise);
the keys every member reads (`lr`, `clipgrad`, `reuse`, `warmup_iter`) are the model's.

Optimizers beyond torch's come from `pytorch-optimizer` (pinned in requirements.txt, imported only when
one of them is chosen). The schedule-free ones (`adamw_sf`, `adan_sf`) train at one point (y) and
evaluate at another (the average x): `Averaging` switches between them for validation and saving.
"""
import bisect
import math
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
from torch.optim.lr_scheduler import LRScheduler

from utils.dist import is_main_process
from utils.errors import UserError
from utils.logger import get_logger
from utils.options import REQUIRED, Key, betas, non_negative, one_of, positive, rule, unit_interval
from utils.registry import Registry

PYTORCH_OPTIMIZER = 'pytorch_optimizer'  # the package's module name (requirements.txt: pytorch-optimizer)


def _betas3(v: List[Any]) -> Optional[str]:
    if len(v) == 3 and all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in v):
        return None
    return 'must be three numbers in [0, 1)'


def _open_unit(v: Any) -> Optional[str]:
    return None if v is None or 0 < v < 1 else 'must be in (0, 1)'


def _at_least_one(v: Any) -> Optional[str]:
    return None if v is None or v >= 1 else 'must be >= 1 (null: no limit)'


_OPT_BOOL = (bool, type(None))
_OPT_NUM = (int, float, type(None))
_NUM = (int, float)
# Keys several optimizers read; each optimizer's own defaults are those of its library (torch or pytorch-optimizer)
# unless a comment says otherwise.
WD = Key(0.0, _NUM, non_negative, 'weight decay (KAIR\'s G_optimizer_wd; AdamW-style kinds: decoupled)')
EPS = Key(1e-8, _NUM, positive, 'added to the denominator of adaptive steps')
FUSED = Key(None, _OPT_BOOL, help='one fused kernel for every parameter (null: on CUDA)')
FOREACH = Key(None, _OPT_BOOL, help='batched (multi-tensor) update (null: the library\'s choice)')
DECOUPLE = Key(False, (bool,), help='weight decay applied to the weights (AdamW-style) instead of added to the '
                                       'gradient')


@dataclass(frozen=True)
class OptimizerKind:
    """How one `<net>_optimizer_type` is built: `make(params, lr=..., **kwargs)` with `kwargs` read from the option
    keys named in `keywords` (option key → constructor keyword), plus `fused` when the kind declares that key
    (a fused kernel takes the skip-step verdict on the device). `library`: where `make` comes from, for errors.
    `schedule_free`: the optimizer keeps an averaged point for evaluation (`Averaging`)."""
    make: Callable[..., torch.optim.Optimizer]
    keywords: Dict[str, str] = field(default_factory=dict)
    library: str = 'torch'
    schedule_free: bool = False


def _lib(name: str) -> Callable[..., torch.optim.Optimizer]:
    """pytorch-optimizer's class `name`, imported when an optimizer is built (a second of imports otherwise)."""
    def make(*args: Any, **kwargs: Any) -> torch.optim.Optimizer:
        try:
            import pytorch_optimizer
        except ImportError:
            raise UserError(f'optimizer {name} needs the pytorch-optimizer package: pip install -r '
                            f'requirements.txt') from None
        return getattr(pytorch_optimizer, name)(*args, **kwargs)
    return make


def _adan_schedule_free(params: Any, lr: float, momentum: float, r: float, weight_lr_power: float,
                        **adan: Any) -> torch.optim.Optimizer:
    """pytorch-optimizer's ScheduleFreeWrapper around its Adan: the wrapper supplies the momentum by
    interpolation (so Adan's own first moment is off by default, betas[0] = 0) and averages the iterates."""
    import pytorch_optimizer as po
    wrapper = po.ScheduleFreeWrapper(po.Adan(params, lr=lr, **adan), momentum=momentum, r=r,
                                     weight_lr_power=weight_lr_power)
    wrapper.train()  # the wrapper starts in eval mode; a step needs train mode
    return wrapper


ADAM_OPTIONS: Dict[str, Key] = {'betas': Key([0.9, 0.999], (list,), betas, 'Adam\'s moment decays [beta1, beta2]'),
                                'wd': WD, 'eps': EPS, 'fused': FUSED}
_ADAM_KW = {'betas': 'betas', 'wd': 'weight_decay', 'eps': 'eps'}
_SF_OPTIONS = {'r': Key(0.0, _NUM, non_negative, 'iterate t weighs t ** r in the evaluation average (0: uniform)'),
               'weight_lr_power': Key(2.0, _NUM, non_negative, 'iterates also weigh (largest lr so far) ** this in '
                                      'the average, so warm-up iterates count less (0: off)')}

OPTIMIZERS = Registry('optimizer')
OPTIMIZERS.register('adam', options=ADAM_OPTIONS)(OptimizerKind(torch.optim.Adam, _ADAM_KW))
OPTIMIZERS.register('adamw', options=ADAM_OPTIONS)(OptimizerKind(torch.optim.AdamW, _ADAM_KW))
_BETAS2 = 'moment decays [beta1, beta2]: of the gradient mean and of the squared gradient'
OPTIMIZERS.register('nadam', options={
    'betas': Key([0.9, 0.999], (list,), betas, _BETAS2), 'wd': WD, 'eps': EPS,
    'momentum_decay': Key(0.004, _NUM, non_negative, 'NAdam\'s psi: how fast its momentum schedule warms up'),
    'decoupled_wd': DECOUPLE, 'foreach': FOREACH})(OptimizerKind(torch.optim.NAdam, {
        **_ADAM_KW, 'momentum_decay': 'momentum_decay', 'decoupled_wd': 'decoupled_weight_decay',
        'foreach': 'foreach'}))
OPTIMIZERS.register('radam', options={
    'betas': Key([0.9, 0.999], (list,), betas, _BETAS2), 'wd': WD, 'eps': EPS, 'decoupled_wd': DECOUPLE,
    'foreach': FOREACH})(OptimizerKind(torch.optim.RAdam, {
        **_ADAM_KW, 'decoupled_wd': 'decoupled_weight_decay', 'foreach': 'foreach'}))
OPTIMIZERS.register('sgd', options={
    'momentum': Key(0.9, _NUM, lambda v: None if 0 <= v < 1 else 'must be in [0, 1)',
                    'momentum factor (0.9 here; torch\'s default is 0)'),
    'dampening': Key(0.0, _NUM, lambda v: None if 0 <= v <= 1 else 'must be in [0, 1]',
                     'share of the new gradient left out of the momentum buffer'),
    'nesterov': Key(False, (bool,), help='Nesterov momentum (needs momentum > 0 and dampening 0)'),
    'wd': WD, 'fused': FUSED})(OptimizerKind(torch.optim.SGD, {
        'momentum': 'momentum', 'dampening': 'dampening', 'nesterov': 'nesterov', 'wd': 'weight_decay'}))
OPTIMIZERS.register('adan', options={
    'betas': Key([0.98, 0.92, 0.99], (list,), _betas3, 'decays of the gradient mean, the gradient-difference mean '
                 'and the squared-gradient mean'),
    'wd': WD, 'weight_decouple': DECOUPLE,
    'max_grad_norm': Key(0.0, _NUM, non_negative, 'Adan\'s own clipping of the global gradient norm (0: off)'),
    'eps': EPS, 'foreach': FOREACH})(OptimizerKind(_lib('Adan'), {
        'betas': 'betas', 'wd': 'weight_decay', 'weight_decouple': 'weight_decouple',
        'max_grad_norm': 'max_grad_norm', 'eps': 'eps', 'foreach': 'foreach'}, 'pytorch-optimizer'))
OPTIMIZERS.register('soap', options={
    'betas': Key([0.95, 0.95], (list,), betas, _BETAS2),
    'wd': Key(0.01, _NUM, non_negative, 'weight decay (SOAP\'s default 0.01)'),
    'shampoo_beta': Key(None, _OPT_NUM, _open_unit, 'decay of the preconditioner statistics (null: betas[1])'),
    'precondition_frequency': Key(10, (int,), positive, 'iterations between updates of the eigenbasis'),
    'max_precondition_dim': Key(10000, (int,), positive, 'dimensions larger than this stay unpreconditioned'),
    'merge_dims': Key(False, (bool,), help='merge small dimensions of a tensor (a conv kernel) into one '
                      'preconditioner'),
    'precondition_1d': Key(False, (bool,), help='precondition 1-D parameters (biases, norms) too'),
    'normalize_gradient': Key(False, (bool,), help='divide each update by its root mean square'),
    'correct_bias': Key(True, (bool,), help='Adam\'s bias correction of the moments'),
    'eps': EPS})(OptimizerKind(_lib('SOAP'), {
        'betas': 'betas', 'wd': 'weight_decay', 'shampoo_beta': 'shampoo_beta',
        'precondition_frequency': 'precondition_frequency', 'max_precondition_dim': 'max_precondition_dim',
        'merge_dims': 'merge_dims', 'precondition_1d': 'precondition_1d', 'normalize_gradient': 'normalize_gradient',
        'correct_bias': 'correct_bias', 'eps': 'eps'}, 'pytorch-optimizer'))
OPTIMIZERS.register('adopt', options={
    'betas': Key([0.9, 0.9999], (list,), betas, _BETAS2), 'wd': WD, 'weight_decouple': DECOUPLE,
    'eps': Key(1e-6, _NUM, positive, 'added to the denominator of the step (ADOPT\'s default 1e-6)'), 'foreach': FOREACH})(OptimizerKind(_lib('ADOPT'), {
        'betas': 'betas', 'wd': 'weight_decay', 'weight_decouple': 'weight_decouple', 'eps': 'eps',
        'foreach': 'foreach'}, 'pytorch-optimizer'))
OPTIMIZERS.register('stableadamw', options={
    'betas': Key([0.9, 0.99], (list,), betas, _BETAS2),
    'wd': Key(0.01, _NUM, non_negative, 'weight decay (StableAdamW\'s default 0.01)'),
    'kahan_sum': Key(True, (bool,), help='Kahan-compensated updates, for weights held in bf16/fp16'),
    'eps': EPS, 'foreach': FOREACH})(OptimizerKind(_lib('StableAdamW'), {
        'betas': 'betas', 'wd': 'weight_decay', 'kahan_sum': 'kahan_sum', 'eps': 'eps', 'foreach': 'foreach'},
        'pytorch-optimizer'))
OPTIMIZERS.register('lion', options={
    'betas': Key([0.9, 0.99], (list,), betas, 'decays [beta1, beta2]: of the update\'s interpolation and of the '
                 'momentum'),
    'wd': WD, 'foreach': FOREACH})(OptimizerKind(_lib('Lion'), {
        'betas': 'betas', 'wd': 'weight_decay', 'foreach': 'foreach'}, 'pytorch-optimizer'))
OPTIMIZERS.register('prodigy', options={
    'betas': Key([0.9, 0.999], (list,), betas, _BETAS2),
    'beta3': Key(None, _OPT_NUM, _open_unit, 'decay of Prodigy\'s step-size (distance) estimate (null: '
                 'sqrt(betas[1]))'),
    'd0': Key(1e-6, _NUM, positive, 'initial step-size estimate'),
    'd_coef': Key(1.0, _NUM, positive, 'multiplies the step-size estimate'),
    'growth_rate': Key(None, _OPT_NUM, _at_least_one, 'largest factor by which the estimate grows per step '
                       '(null: unbounded)'),
    'wd': WD, 'weight_decouple': Key(True, (bool,), help='weight decay applied to the weights (AdamW-style) '
                                     'instead of added to the gradient (Prodigy\'s default: true)'),
    'bias_correction': Key(False, (bool,), help='Adam\'s bias correction of the moments, in the step size'),
    'safeguard_warmup': Key(False, (bool,), help='leave the lr out of the estimate\'s denominator (for runs '
                            'with a warm-up)'),
    'eps': EPS, 'foreach': FOREACH})(OptimizerKind(_lib('Prodigy'), {
        'betas': 'betas', 'beta3': 'beta3', 'd0': 'd0', 'd_coef': 'd_coef', 'growth_rate': 'growth_rate',
        'wd': 'weight_decay', 'weight_decouple': 'weight_decouple', 'bias_correction': 'bias_correction',
        'safeguard_warmup': 'safeguard_warmup', 'eps': 'eps', 'foreach': 'foreach'}, 'pytorch-optimizer'))
OPTIMIZERS.register('adamw_sf', options={
    'betas': Key([0.9, 0.999], (list,), betas, '[interpolation between the training and averaged point, decay '
                 'of the squared gradient]'),
    'wd': WD, **_SF_OPTIONS, 'eps': EPS,
    'foreach': FOREACH})(OptimizerKind(_lib('ScheduleFreeAdamW'), {
        'betas': 'betas', 'wd': 'weight_decay', 'r': 'r', 'weight_lr_power': 'weight_lr_power', 'eps': 'eps',
        'foreach': 'foreach'}, 'pytorch-optimizer', schedule_free=True))
OPTIMIZERS.register('adan_sf', options={
    'betas': Key([0.0, 0.92, 0.99], (list,), _betas3, 'Adan\'s decays; the first (its gradient mean) is 0: the '
                 'wrapper\'s momentum replaces it'),
    'sf_momentum': Key(0.9, _NUM, _open_unit, 'the schedule-free interpolation between the training and averaged '
                       'point (adamw_sf\'s betas[0])'),
    'wd': WD, 'weight_decouple': DECOUPLE, **_SF_OPTIONS, 'eps': EPS,
    'foreach': FOREACH})(OptimizerKind(_adan_schedule_free, {
        'betas': 'betas', 'sf_momentum': 'momentum', 'wd': 'weight_decay', 'weight_decouple': 'weight_decouple',
        'r': 'r', 'weight_lr_power': 'weight_lr_power', 'eps': 'eps', 'foreach': 'foreach'}, 'pytorch-optimizer',
        schedule_free=True))

# `G_scheduler_type` (KAIR's and BasicSR's spellings) → function(where, its keys) → IterationLR kwargs
SCHEDULERS = Registry('scheduler')


def use_fused(train_opt: Dict[str, Any], device: torch.device, net: str = 'G') -> bool:
    """`<net>_optimizer_fused`: null picks the fused kernel on CUDA (one launch for every parameter, and a
    skipped step decided on the device: no host sync per iteration) and torch's default elsewhere."""
    fused = train_opt[f'{net}_optimizer_fused']
    return device.type == 'cuda' if fused is None else bool(fused)


def _keyword_value(value: Any, keyword: str) -> Any:
    if isinstance(value, list):
        return tuple(float(v) for v in value)
    if keyword == 'growth_rate' and value is None:
        return math.inf
    return value


def optimizer_kind(train_opt: Dict[str, Any], net: str = 'G') -> OptimizerKind:
    return OPTIMIZERS.get(train_opt[f'{net}_optimizer_type'], f'train.{net}_optimizer_type')


def build_optimizer(param_groups: Union[Iterable[Dict[str, Any]], Iterable[torch.Tensor]],
                    train_opt: Dict[str, Any], net: str = 'G',
                    device: torch.device = torch.device('cpu')) -> torch.optim.Optimizer:
    """The `<net>_optimizer_type` optimizer over `param_groups` from the `<net>_optimizer_*` keys (G: the generator,
    D: a GAN's discriminator); a group's own 'lr' wins over `<net>_optimizer_lr`. Fused or foreach: `use_fused`."""
    name, where = train_opt[f'{net}_optimizer_type'], f'train.{net}_optimizer_type'
    kind = OPTIMIZERS.get(name, where)
    o = OPTIMIZERS.read(name, train_opt, f'{net}_optimizer_', where)
    kwargs = {kw: _keyword_value(o[key], kw) for key, kw in kind.keywords.items()}
    if 'fused' in o and use_fused(train_opt, device, net):  # for the optimizers that declare the key
        kwargs['fused'] = True  # else torch's choice (foreach on CUDA)
    try:
        return kind.make(param_groups, lr=float(train_opt[f'{net}_optimizer_lr']), **kwargs)
    except ValueError as e:  # the library's check of a combination of values (SGD's nesterov without momentum)
        raise UserError(f'{where} {name}: {e}') from None


def refreshed_group_keys(train_opt: Dict[str, Any], net: str = 'G') -> Dict[str, str]:
    """{parameter-group key: option key} of what comes from the options on resume (the hyperparameters; the
    lr schedule's base lr is `initial_lr`). Everything else a group holds (Prodigy's estimate, a schedule-free
    optimizer's averaging weights and mode, step counts) is optimizer state and comes from the checkpoint."""
    kind = optimizer_kind(train_opt, net)
    keys = {'initial_lr': f'{net}_optimizer_lr'}
    keys.update({kw: f'{net}_optimizer_{key}' for key, kw in kind.keywords.items()})
    return keys


def gated_step(optimizer: torch.optim.Optimizer, applied: Optional[torch.Tensor] = None,
               scaler: Optional[torch.amp.GradScaler] = None, host_verdict: bool = True) -> None:
    """`optimizer.step()` if `applied` (a device bool from the non-finite check; None: always).

    A fused optimizer takes the decision on the device (its `found_inf`, as GradScaler uses it: no
    parameter, moment or step count changes where it is set), so the loop never waits for the GPU.
    Other optimizers, and fp16's GradScaler, read `applied` on the host, unless `host_verdict` is False:
    then an optimizer that cannot take it on the device steps regardless (the caller knows the verdict
    cannot matter: `ModelPlain.host_verdict`). A skipped step closes a GradScaler's iteration without
    changing its scale.
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
    elif not host_verdict or bool(applied):
        optimizer.step()


class Averaging:
    """The two points of a schedule-free optimizer (Defazio et al. 2024): it trains at y and evaluates at the
    average x. Its README's rule: `eval()` (the weights become x) before evaluating or saving, `train()` (back to
    y) before training steps. `averaged` gives x for the EMA without switching: one foreach lerp, y + c (z - y)
    with c = 1 - 1/beta1, the same operation as the library's `eval()` (tests/test_optim_recipes.py checks it
    against the pinned version)."""

    def __init__(self, optimizer: torch.optim.Optimizer, wrapper: bool):
        self.optimizer = optimizer
        self.wrapper = wrapper  # ScheduleFreeWrapper (its state and mode its own) or ScheduleFreeAdamW (per group)
        self._key: Optional[Tuple[int, int]] = None
        self._targets: List[torch.Tensor] = []
        self._params: List[torch.Tensor] = []

    @property
    def training(self) -> bool:
        if self.wrapper:
            return bool(self.optimizer.train_mode)
        return bool(self.optimizer.param_groups[0]['train_mode'])

    def eval(self) -> None:
        self.optimizer.eval()

    def train(self) -> None:
        self.optimizer.train()

    def _beta(self) -> float:
        if self.wrapper:
            return float(self.optimizer.momentum)
        beta = {float(g['betas'][0]) for g in self.optimizer.param_groups}
        if len(beta) != 1:
            raise ValueError(f'Averaging: parameter groups with different betas[0] {sorted(beta)}')
        return beta.pop()

    def averaged(self, params: List[torch.Tensor]) -> List[torch.Tensor]:
        """x for each of `params` (in train mode; their z from the optimizer state, or the parameter itself where
        the optimizer holds none: lerp(p, p, c) is p). The lists are built once per optimizer state."""
        if not self.training:
            return params
        state = self.optimizer.state
        key = (id(state), len(state))
        if key != self._key or self._params is not params:
            self._targets = [state[p]['z'] if p in state and 'z' in state[p] else p for p in params]
            self._params = params
            # complete once every trained parameter holds its z: until then, look again at the next call
            self._key = key if all(p in state and 'z' in state[p] for p in params if p.requires_grad) else None
        return list(torch._foreach_lerp(params, self._targets, 1.0 - 1.0 / self._beta()))


def averaging(optimizer: torch.optim.Optimizer) -> Optional[Averaging]:
    """The `Averaging` of a schedule-free optimizer, else None."""
    po = sys.modules.get(PYTORCH_OPTIMIZER)
    if po is None:  # never imported: no optimizer of it exists
        return None
    if isinstance(optimizer, po.ScheduleFreeWrapper):
        return Averaging(optimizer, True)
    if isinstance(optimizer, po.ScheduleFreeAdamW):
        return Averaging(optimizer, False)
    return None


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
    Warmup multiplies these by min(1, (t + 1) / warmup_iter).
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
                 last_epoch: int = -1, net: str = 'G'):
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
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, t: int) -> float:
        """The lr of a group with base lr `base_lr` after `t` steps (the lr in force at iteration t + 1)."""
        warm = self.warmup_iter
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
        if self.kind == 'multistep':
            out += self.milestones
        if self.kind == 'cosine' and isinstance(self.periods, list):
            out += [sum(self.periods[:i + 1]) for i in range(len(self.periods))]
        return sorted(set(out))

    def get_lr(self) -> List[float]:
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


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _show(v: Any) -> str:
    return str(list(v)) if isinstance(v, tuple) else str(v)


# implementation choices of this run (device, options), refreshed on resume without a note
_IMPLEMENTATION_KEYS = ('fused', 'foreach')


def resume_optimizer(optimizer: torch.optim.Optimizer, saved: Dict[str, Any], reuse: bool,
                     saved_type: Optional[str], kind: str, net: str = 'G',
                     group_keys: Optional[Dict[str, str]] = None) -> List[str]:
    """Load a saved optimizer's state (moments, step counts, estimates) under the options' hyperparameters.

    The options win for every hyperparameter (`group_keys`: parameter-group key → option key, from
    `refreshed_group_keys`; default Adam's lr, weight decay, betas): what the user edited before resuming is
    what trains. The rest of a group (Prodigy's step-size estimate, a schedule-free optimizer's averaging
    weights and mode) is state and comes from the checkpoint. The saved state is not used when
    `train.G_optimizer_reuse` is false (KAIR's meaning), when the optimizer type changed, or when the
    parameter groups no longer match. Returns one note per difference and per decision, for the log.
    """
    if group_keys is None:
        group_keys = {'initial_lr': f'{net}_optimizer_lr', 'weight_decay': f'{net}_optimizer_wd',
                      'betas': f'{net}_optimizer_betas'}
    if not reuse:
        return [f'train.{net}_optimizer_reuse is false: the optimizer state (moments) starts afresh']
    if saved_type is not None and saved_type != kind:
        return [f'train.{net}_optimizer_type: checkpoint {saved_type}, options {kind}: the optimizer state starts afresh']
    fresh = [{k: v for k, v in g.items() if k in group_keys or k in _IMPLEMENTATION_KEYS}
             for g in optimizer.param_groups]
    try:
        optimizer.load_state_dict(saved)
    except (ValueError, KeyError) as e:
        return [f'the saved optimizer state does not fit the parameter groups ({e}); it starts afresh']
    notes = []
    for i, (group, options) in enumerate(zip(optimizer.param_groups, fresh)):
        for attr, key in group_keys.items():
            if attr in options and not _same(group.get(attr), options[attr]):
                where = f' (parameter group {i})' if len(fresh) > 1 else ''
                notes.append(f'train.{key}{where}: checkpoint {_show(group.get(attr))}, '
                             f'options {_show(options[attr])}; the options win')
        group.update(options)
    return notes


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
    'gamma': Key(0.5, (int, float), positive, 'the factor at each milestone')})
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
               lambda v: None if v is None or v > 0 else 'must be > 0 (null: train.total_iter)',
               'the iteration at which the schedule ends (null: train.total_iter)')
ETA_MIN = Key(0.0, (int, float), non_negative, 'the learning rate at the end of the decay')


@SCHEDULERS.register('CosineAnnealingLR', 'cosine', options={'eta_min': ETA_MIN, 'total_iter': END_ITER})
def _cosine_decay(where: str, eta_min: float, total_iter: Optional[int]) -> Dict[str, Any]:
    return {'kind': 'cosine_decay', 'eta_min': eta_min, 'end_iter': total_iter}


@SCHEDULERS.register('LinearLR', 'linear', options={'eta_min': ETA_MIN, 'total_iter': END_ITER})
def _linear_decay(where: str, eta_min: float, total_iter: Optional[int]) -> Dict[str, Any]:
    return {'kind': 'linear_decay', 'eta_min': eta_min, 'end_iter': total_iter}


@SCHEDULERS.register('ExponentialLR', 'exponential', options={
    'gamma': Key(REQUIRED, (int, float), lambda v: None if 0 < v <= 1 else 'must be in (0, 1]',
                 'the learning rate\'s factor per iteration')})
def _exponential(where: str, gamma: float) -> Dict[str, Any]:
    return {'kind': 'exponential', 'gamma': gamma}


@SCHEDULERS.register('OneCycleLR', 'onecycle', options={
    'total_iter': END_ITER,
    'pct_start': Key(0.3, (int, float), lambda v: None if 0 < v < 1 else 'must be in (0, 1)',
                     'share of the iterations over which the lr rises'),
    'div_factor': Key(25.0, (int, float), lambda v: None if v >= 1 else 'must be >= 1',
                      'the starting lr is G_optimizer_lr / this'),
    'final_div_factor': Key(1e4, (int, float), lambda v: None if v >= 1 else 'must be >= 1',
                            'the final lr is the starting lr / this'),
    'anneal': Key('cos', (str,), one_of('cos', 'linear'), 'the shape of both phases')})
def _one_cycle(where: str, total_iter: Optional[int], pct_start: float, div_factor: float, final_div_factor: float,
               anneal: str) -> Dict[str, Any]:
    return {'kind': 'onecycle', 'end_iter': total_iter, 'pct_start': pct_start, 'div_factor': div_factor,
            'final_div_factor': final_div_factor, 'anneal': anneal}


@rule('in (0, 1]', exclusiveMinimum=0, maximum=1)
def _share(v: Any) -> Optional[str]:
    return None if 0 < v <= 1 else 'must be in (0, 1]'


@SCHEDULERS.register('wsd', options={
    'decay_ratio': Key(0.2, _NUM, _share, 'share of the run (of total_iter) over which the lr decays, at its end '
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
