"""Optimizers from the `train` options (KAIR key names), and what a resumed run takes of a saved optimizer.

Each optimizer declares the keys it reads (unprefixed; the model's type key gives the prefix:
`G_optimizer_type` → `G_optimizer_<key>`, D's likewise); the keys every member reads (`lr`, `clipgrad`,
`reuse`) are the model's. The learning-rate schedules that drive them are models/schedules.py's.

Optimizers beyond torch's come from `pytorch-optimizer` (pinned in requirements.txt, imported only when
one of them is chosen). The schedule-free ones (`adamw_sf`, `adan_sf`) train at one point (y) and
evaluate at another (the average x): `Averaging` switches between them for validation and saving.
"""
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

import torch

from utils.errors import UserError
from utils.options import Key, at_least, betas, closed_unit, non_negative, open_unit, positive, rule, unit_interval
from utils.options.foreign import BASICSR, REDUX, Foreign
from utils.registry import Registry

PYTORCH_OPTIMIZER = 'pytorch_optimizer'  # the package's module name (requirements.txt: pytorch-optimizer)


@rule('three numbers in [0, 1)', minItems=3, maxItems=3,
      items={'type': 'number', 'minimum': 0, 'exclusiveMaximum': 1})
def _betas3(v: List[Any]) -> Optional[str]:
    if len(v) == 3 and all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in v):
        return None
    return 'must be three numbers in [0, 1)'


UNLIMITED_GROWTH = at_least(1, 'null: no limit')


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
    `schedule_free`: the optimizer keeps an averaged point for evaluation (`Averaging`). `summary`: what the kind
    is, for `--describe optimizer` and docs/options.md (the instances share this class's docstring)."""
    make: Callable[..., torch.optim.Optimizer]
    keywords: Dict[str, str] = field(default_factory=dict)
    library: str = 'torch'
    schedule_free: bool = False
    summary: str = ''


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

# torch's Adam/AdamW as BasicSR and traiNNer-redux name them (`optim_g: {type: Adam, lr, betas, weight_decay}`); torch's
# AdamW decays by 0.01 when the file gives no weight_decay, and SGD has no momentum by default
_TORCH_ADAM = dict(keys={'weight_decay': 'wd'}, unneeded={'amsgrad': False, 'maximize': False, 'capturable': False,
                                                           'differentiable': False, 'foreach': None})


def _torch_names(name: str, **extra: Any) -> List[Foreign]:
    return [Foreign(name, BASICSR, **_TORCH_ADAM, **extra), Foreign(name, REDUX, **_TORCH_ADAM, **extra)]


OPTIMIZERS = Registry('optimizer')
OPTIMIZERS.register('adam', options=ADAM_OPTIONS, foreign=_torch_names('Adam'))(OptimizerKind(
    torch.optim.Adam, _ADAM_KW, summary='Adam (Kingma & Ba), torch\'s; KAIR\'s and BasicSR\'s default'))
OPTIMIZERS.register('adamw', options=ADAM_OPTIONS, foreign=_torch_names('AdamW', defaults={'weight_decay': 0.01}))(
    OptimizerKind(torch.optim.AdamW, _ADAM_KW,
                  summary='AdamW: Adam with decoupled weight decay (Loshchilov & Hutter), torch\'s'))
_BETAS2 = 'moment decays [beta1, beta2]: of the gradient mean and of the squared gradient'
OPTIMIZERS.register('nadam', options={
    'betas': Key([0.9, 0.999], (list,), betas, _BETAS2), 'wd': WD, 'eps': EPS,
    'momentum_decay': Key(0.004, _NUM, non_negative, 'NAdam\'s psi: how fast its momentum schedule warms up'),
    'decoupled_wd': DECOUPLE, 'foreach': FOREACH})(OptimizerKind(torch.optim.NAdam, {
        **_ADAM_KW, 'momentum_decay': 'momentum_decay', 'decoupled_wd': 'decoupled_weight_decay',
        'foreach': 'foreach'}, summary="NAdam: Adam with Nesterov momentum (Dozat), torch's"))
OPTIMIZERS.register('radam', options={
    'betas': Key([0.9, 0.999], (list,), betas, _BETAS2), 'wd': WD, 'eps': EPS, 'decoupled_wd': DECOUPLE,
    'foreach': FOREACH})(OptimizerKind(torch.optim.RAdam, {
        **_ADAM_KW, 'decoupled_wd': 'decoupled_weight_decay', 'foreach': 'foreach'},
        summary="RAdam: Adam with the variance of its adaptive lr rectified early on (Liu et al.), torch's"))
OPTIMIZERS.register('sgd', options={
    'momentum': Key(0.9, _NUM, unit_interval,
                    'momentum factor (0.9 here; torch\'s default is 0)'),
    'dampening': Key(0.0, _NUM, closed_unit,
                     'share of the new gradient left out of the momentum buffer'),
    'nesterov': Key(False, (bool,), help='Nesterov momentum (needs momentum > 0 and dampening 0)'),
    'wd': WD, 'fused': FUSED}, foreign=[Foreign('SGD', t, keys={'weight_decay': 'wd'}, defaults={'momentum': 0},
                                              unneeded={'maximize': False, 'foreach': None}) for t in (BASICSR, REDUX)])(
    OptimizerKind(torch.optim.SGD, {
        'momentum': 'momentum', 'dampening': 'dampening', 'nesterov': 'nesterov', 'wd': 'weight_decay'},
        summary="SGD with momentum, torch's"))
OPTIMIZERS.register('adan', options={
    'betas': Key([0.98, 0.92, 0.99], (list,), _betas3, 'decays of the gradient mean, the gradient-difference mean '
                 'and the squared-gradient mean'),
    'wd': WD, 'weight_decouple': DECOUPLE,
    'max_grad_norm': Key(0.0, _NUM, non_negative, 'Adan\'s own clipping of the global gradient norm (0: off)'),
    'eps': EPS, 'foreach': FOREACH})(OptimizerKind(_lib('Adan'), {
        'betas': 'betas', 'wd': 'weight_decay', 'weight_decouple': 'weight_decouple',
        'max_grad_norm': 'max_grad_norm', 'eps': 'eps', 'foreach': 'foreach'}, 'pytorch-optimizer',
        summary="Adan: adaptive Nesterov momentum (Xie et al.), pytorch-optimizer's"))
OPTIMIZERS.register('soap', options={
    'betas': Key([0.95, 0.95], (list,), betas, _BETAS2),
    'wd': Key(0.01, _NUM, non_negative, 'weight decay (SOAP\'s default 0.01)'),
    'shampoo_beta': Key(None, _OPT_NUM, open_unit, 'decay of the preconditioner statistics (null: betas[1])'),
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
        'correct_bias': 'correct_bias', 'eps': 'eps'}, 'pytorch-optimizer',
        summary="SOAP: Adam in Shampoo's eigenbasis (Vyas et al.), pytorch-optimizer's"))
OPTIMIZERS.register('adopt', options={
    'betas': Key([0.9, 0.9999], (list,), betas, _BETAS2), 'wd': WD, 'weight_decouple': DECOUPLE,
    'eps': Key(1e-6, _NUM, positive, 'added to the denominator of the step (ADOPT\'s default 1e-6)'),
    'foreach': FOREACH})(OptimizerKind(_lib('ADOPT'), {
        'betas': 'betas', 'wd': 'weight_decay', 'weight_decouple': 'weight_decouple', 'eps': 'eps',
        'foreach': 'foreach'}, 'pytorch-optimizer',
        summary="ADOPT: Adam that converges for any beta2 (Taniguchi et al.), pytorch-optimizer's"))
OPTIMIZERS.register('stableadamw', options={
    'betas': Key([0.9, 0.99], (list,), betas, _BETAS2),
    'wd': Key(0.01, _NUM, non_negative, 'weight decay (StableAdamW\'s default 0.01)'),
    'kahan_sum': Key(True, (bool,), help='Kahan-compensated updates, for weights held in bf16/fp16'),
    'eps': EPS, 'foreach': FOREACH})(OptimizerKind(_lib('StableAdamW'), {
        'betas': 'betas', 'wd': 'weight_decay', 'kahan_sum': 'kahan_sum', 'eps': 'eps', 'foreach': 'foreach'},
        'pytorch-optimizer',
        summary="StableAdamW: AdamW with AdaFactor's update clipping (Wortsman et al.), pytorch-optimizer's"))
OPTIMIZERS.register('lion', options={
    'betas': Key([0.9, 0.99], (list,), betas, 'decays [beta1, beta2]: of the update\'s interpolation and of the '
                 'momentum'),
    'wd': WD, 'foreach': FOREACH})(OptimizerKind(_lib('Lion'), {
        'betas': 'betas', 'wd': 'weight_decay', 'foreach': 'foreach'}, 'pytorch-optimizer',
        summary="Lion: the sign of an interpolated momentum (Chen et al.), pytorch-optimizer's"))
OPTIMIZERS.register('prodigy', options={
    'betas': Key([0.9, 0.999], (list,), betas, _BETAS2),
    'beta3': Key(None, _OPT_NUM, open_unit, 'decay of Prodigy\'s step-size (distance) estimate (null: '
                 'sqrt(betas[1]))'),
    'd0': Key(1e-6, _NUM, positive, 'initial step-size estimate'),
    'd_coef': Key(1.0, _NUM, positive, 'multiplies the step-size estimate'),
    'growth_rate': Key(None, _OPT_NUM, UNLIMITED_GROWTH, 'largest factor by which the estimate grows per step '
                       '(null: unbounded)'),
    'wd': WD, 'weight_decouple': Key(True, (bool,), help='weight decay applied to the weights (AdamW-style) '
                                     'instead of added to the gradient (Prodigy\'s default: true)'),
    'bias_correction': Key(False, (bool,), help='Adam\'s bias correction of the moments, in the step size'),
    'safeguard_warmup': Key(False, (bool,), help='leave the lr out of the estimate\'s denominator (for runs '
                            'with a warm-up)'),
    'eps': EPS, 'foreach': FOREACH})(OptimizerKind(_lib('Prodigy'), {
        'betas': 'betas', 'beta3': 'beta3', 'd0': 'd0', 'd_coef': 'd_coef', 'growth_rate': 'growth_rate',
        'wd': 'weight_decay', 'weight_decouple': 'weight_decouple', 'bias_correction': 'bias_correction',
        'safeguard_warmup': 'safeguard_warmup', 'eps': 'eps', 'foreach': 'foreach'}, 'pytorch-optimizer',
        summary="Prodigy: Adam whose step size is estimated, lr 1.0 (Mishchenko & Defazio), pytorch-optimizer's"))
OPTIMIZERS.register('adamw_sf', options={
    'betas': Key([0.9, 0.999], (list,), betas, '[interpolation between the training and averaged point, decay '
                 'of the squared gradient]'),
    'wd': WD, **_SF_OPTIONS, 'eps': EPS,
    'foreach': FOREACH})(OptimizerKind(_lib('ScheduleFreeAdamW'), {
        'betas': 'betas', 'wd': 'weight_decay', 'r': 'r', 'weight_lr_power': 'weight_lr_power', 'eps': 'eps',
        'foreach': 'foreach'}, 'pytorch-optimizer', schedule_free=True,
        summary="Schedule-free AdamW (Defazio et al.): validated and saved at its averaged weights, pytorch-optimizer's"))
OPTIMIZERS.register('adan_sf', options={
    'betas': Key([0.0, 0.92, 0.99], (list,), _betas3, 'Adan\'s decays; the first (its gradient mean) is 0: the '
                 'wrapper\'s momentum replaces it'),
    'sf_momentum': Key(0.9, _NUM, open_unit, 'the schedule-free interpolation between the training and averaged '
                       'point (adamw_sf\'s betas[0])'),
    'wd': WD, 'weight_decouple': DECOUPLE, **_SF_OPTIONS, 'eps': EPS,
    'foreach': FOREACH})(OptimizerKind(_adan_schedule_free, {
        'betas': 'betas', 'sf_momentum': 'momentum', 'wd': 'weight_decay', 'weight_decouple': 'weight_decouple',
        'r': 'r', 'weight_lr_power': 'weight_lr_power', 'eps': 'eps', 'foreach': 'foreach'}, 'pytorch-optimizer',
        schedule_free=True, summary="Schedule-free Adan: pytorch-optimizer's ScheduleFreeWrapper around its Adan"))


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
    """The `OptimizerKind` `<net>_optimizer_type` names: how it is built and which keys it reads."""
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
        """Whether the weights are at the training point y (else at the average x)."""
        if self.wrapper:
            return bool(self.optimizer.train_mode)
        return bool(self.optimizer.param_groups[0]['train_mode'])

    def eval(self) -> None:
        """The weights become the average x, for evaluating or saving."""
        self.optimizer.eval()

    def train(self) -> None:
        """The weights return to y, before training steps."""
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


def same_value(a: Any, b: Any) -> bool:
    """Whether a saved value equals an option's: a list and a tuple of equal items are equal (a checkpoint
    holds lists where the options hold tuples), so that a resume notes only real differences."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return a == b


def show_value(v: Any) -> str:
    """A value as a resume note shows it: tuples as the lists the option file writes."""
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
            if attr in options and not same_value(group.get(attr), options[attr]):
                where = f' (parameter group {i})' if len(fresh) > 1 else ''
                notes.append(f'train.{key}{where}: checkpoint {show_value(group.get(attr))}, '
                             f'options {show_value(options[attr])}; the options win')
        group.update(options)
    return notes
