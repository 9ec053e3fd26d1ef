"""Sharpness-aware steps (`train.G_optimizer_sam`): SAM, F-SAM, GSAM and LookSAM around any base optimizer.

SAM (Foret et al., ICLR 2021) takes the gradient at the worst point of a small ball around the weights: a
first forward-backward gives g, the weights move by e = rho g / ||g|| (ASAM's `adaptive`, Kwon et al. 2021:
scaled by the weights, |w|² g / || |w| g ||), a second forward-backward there gives the gradient the base
optimizer (`G_optimizer_type`, any of them) applies at the original weights. The variants:
- `fsam`, F-SAM (Li et al., CVPR 2024, neosr's): the ascent direction is g minus `sigma` times a moving average
  (decay `lmbda`) of the past gradients, the batch-specific part of the gradient;
- `gsam`, GSAM (Zhuang et al., ICLR 2022): the applied gradient is the second one minus `alpha` times the part of
  the first orthogonal to it (the surrogate gap's descent); rho follows the learning rate from `rho` down to
  `rho_min` (the paper's proportional schedule);
- `looksam`, LookSAM (Liu et al., CVPR 2022): the two passes only every `k` iterations; on the others one pass,
  whose gradient gets, per tensor, the sharpness-aware part of the last full step added back (weight `alpha`).

The formulas are pytorch-optimizer's (4.1.0: SAM, FriendlySAM, GSAM, LookSAM, their defaults; the tests check
these steps against theirs), the implementation is this project's: the library's classes step with a closure
that zeroes, recomputes and, for GSAM, all-reduces gradients itself, tensor by tensor, and its state (F-SAM's
average, LookSAM's reused part) would take the values of a non-finite step. Here the model runs the passes
(with DDP, accumulation, AMP and the non-finite gate, models/model_plain.py, through `SharpnessAwareStep`), and
every operation is one kernel
over all weights: the weights, gradients and state live in flat buffers (views per parameter), copied in and
out with `torch._foreach` ops; per-tensor norms and products (LookSAM) are multi-tensor reductions. Nothing
reads the device on the host. The state is kept only when the step is applied (`commit`, decided on the device).
"""
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import nn

from utils.errors import UserError
from utils.options import Key, closed_unit, non_negative, open_unit, positive
from utils.registry import Registry

SAM_METHODS = Registry('sharpness-aware method')
EPS = 1e-12  # pytorch-optimizer's perturb_eps: keeps rho / ||g|| finite for a zero gradient

_NUM = (int, float)
RHO = Key(0.05, _NUM, non_negative, 'radius of the neighbourhood the weights are moved to (SAM\'s rho; with '
                                    'adaptive, ASAM\'s: typically 0.5-2)')
ADAPTIVE = Key(False, (bool,), help='ASAM: the neighbourhood scaled by the weights\' magnitudes (scale-invariant)')


class SAM:
    """SAM (Foret et al., ICLR 2021): the base optimizer applies the gradient taken at w + rho g / ||g||."""

    OPTIONS: Dict[str, Key] = {'rho': RHO, 'adaptive': ADAPTIVE}
    STATE: Sequence[str] = ()  # flat state tensors kept across steps (saved with the checkpoint)

    def __init__(self, params: List[torch.Tensor], buffers: List[torch.Tensor], rho: float, adaptive: bool,
                 where: str = 'train.G_optimizer_sam'):
        if not params:
            raise UserError(f'{where}: netG has no trained parameters to perturb')
        kinds = {(p.dtype, p.device) for p in params}
        if len(kinds) > 1:
            raise UserError(f'{where}: the trained parameters have several dtypes or devices '
                            f'({", ".join(sorted(f"{d} on {v}" for d, v in kinds))}); sharpness-aware steps need one')
        self.params = params
        self.buffers = buffers
        self.rho = float(rho)
        self.adaptive = bool(adaptive)
        self.numels = [p.numel() for p in params]
        self.lengths = torch.tensor(self.numels, device=params[0].device)
        self.total = sum(self.numels)
        self.backup, self._backup_views = self._flat()   # the weights at the step's start
        self.g1, self._g1_views = self._flat()           # the first pass's gradient
        self.e, self._e_views = self._flat()             # the perturbation
        self._buffer_backup = [b.detach().clone() for b in buffers]
        self.first_pass_finite: Optional[torch.Tensor] = None

    def _flat(self) -> Any:
        p = self.params[0]
        flat = torch.zeros(self.total, dtype=p.dtype, device=p.device)
        return flat, [v.view_as(q) for v, q in zip(flat.split(self.numels), self.params)]

    def _expand(self, per_tensor: torch.Tensor) -> torch.Tensor:
        """A value per parameter tensor, repeated over its elements (no host read: the size is known)."""
        return torch.repeat_interleave(per_tensor, self.lengths, output_size=self.total)

    @staticmethod
    def _norms(views: List[torch.Tensor]) -> torch.Tensor:
        """The L2 norm of each tensor of `views`, as one vector (one multi-tensor kernel)."""
        return torch.stack(torch._foreach_norm(views))

    @staticmethod
    def _dots(a: List[torch.Tensor], b: List[torch.Tensor]) -> torch.Tensor:
        """The dot product of each pair of tensors, as one vector: the sums of the positive and of the negative
        parts of the products, as L1 norms (multi-tensor kernels; a segment reduction would read its lengths on
        the host)."""
        products = torch._foreach_mul(a, b)
        positive = torch.stack(torch._foreach_norm(torch._foreach_clamp_min(products, 0.0), 1))
        torch._foreach_clamp_max_(products, 0.0)
        return positive - torch.stack(torch._foreach_norm(products, 1))

    def gather(self, views: List[torch.Tensor], flat: torch.Tensor) -> None:
        """The parameters' gradients into `flat` (a parameter without one counts as zeros)."""
        grads = [p.grad for p in self.params]
        have = [i for i, g in enumerate(grads) if g is not None]
        if len(have) < len(grads):
            flat.zero_()
        if have:
            torch._foreach_copy_([views[i] for i in have], [grads[i] for i in have])

    def scatter(self, flat_views: List[torch.Tensor]) -> None:
        """`flat_views` back into the gradients of the parameters that have one."""
        have = [i for i, p in enumerate(self.params) if p.grad is not None]
        if have:
            torch._foreach_copy_([self.params[i].grad for i in have], [flat_views[i] for i in have])

    def due(self, step: int) -> bool:
        """Whether iteration `step` (1-based) takes the two passes (LookSAM: every k-th)."""
        return True

    def rho_at(self, lr_ratio: float) -> float:
        """The radius at a learning rate of `lr_ratio` times the base one (constant; GSAM scales it)."""
        return self.rho

    def direction(self) -> torch.Tensor:
        """The ascent direction from the first pass's gradient `g1` (F-SAM subtracts its average)."""
        return self.g1

    @torch.no_grad()
    def perturb(self, lr_ratio: float = 1.0) -> None:
        """After the first pass (gradients final: all-reduced, unscaled): keep the weights and buffers, move the
        weights to w + e. `first_pass_finite` (device bool) is whether the first gradient was finite; where it
        is not, e is not either, and so neither is the second pass: the step is skipped."""
        torch._foreach_copy_(self._backup_views, self.params)
        self.gather(self._g1_views, self.g1)
        d = self.direction()
        norm = torch.linalg.vector_norm(d * self.backup.abs() if self.adaptive else d)
        self.first_pass_finite = torch.isfinite(norm)
        scale = self.rho_at(lr_ratio) / (norm + EPS)
        if self.adaptive:
            torch.mul(self.backup.square().mul_(d), scale, out=self.e)
        else:
            torch.mul(d, scale, out=self.e)
        torch._foreach_add_(self.params, self._e_views)
        if self.buffers:
            torch._foreach_copy_(self._buffer_backup, self.buffers)

    @torch.no_grad()
    def restore(self) -> None:
        """After the second pass: the weights of the step's start, exactly, and the buffers (BatchNorm statistics)
        as the first pass left them: the second pass only measures the gradient."""
        torch._foreach_copy_(self.params, self._backup_views)
        if self.buffers:
            torch._foreach_copy_(self.buffers, self._buffer_backup)

    def edit_gradients(self, step: int, ran: bool) -> None:
        """The applied gradient from the second pass's (final, unscaled); `ran`: whether this step took two passes."""

    def commit(self, ok: Optional[torch.Tensor]) -> None:
        """Keep the state this step computed where `ok` (a device bool: applied and finite; None: always)."""

    def state_dict(self) -> Dict[str, Any]:
        return {name: getattr(self, name) for name in self.STATE}

    def load_state_dict(self, state: Dict[str, Any]) -> Optional[str]:
        """Restore `state_dict`'s tensors; a note (and a fresh state) when they do not fit these parameters."""
        for name in self.STATE:
            saved = state.get(name)
            if not torch.is_tensor(saved) or saved.shape != getattr(self, name).shape:
                return 'the saved sharpness-aware state does not fit netG\'s parameters; it starts afresh'
        for name in self.STATE:
            getattr(self, name).copy_(state[name])
        return None


def _select(ok: Optional[torch.Tensor], new: torch.Tensor, old: torch.Tensor) -> None:
    """old <- new where the device bool `ok` (always when None): one kernel, right even where `new` is NaN."""
    old.copy_(new if ok is None else torch.where(ok, new, old))


@SAM_METHODS.register('sam')
class PlainSAM(SAM):
    """SAM (Foret et al., ICLR 2021): the gradient at w + rho g / ||g||, two passes per step."""


@SAM_METHODS.register('fsam')
class FriendlySAM(SAM):
    """F-SAM (Li et al., CVPR 2024): the ascent along g - sigma m, m the moving average of the gradients."""

    OPTIONS = {'rho': RHO, 'sigma': Key(1.0, _NUM, non_negative, 'how much of the gradients\' moving average is '
                                                                   'taken out of the ascent direction'),
               'lmbda': Key(0.9, _NUM, closed_unit, 'decay of the gradients\' moving average'),
               'adaptive': ADAPTIVE}
    STATE = ('momentum', 'started')

    def __init__(self, params: List[torch.Tensor], buffers: List[torch.Tensor], rho: float, sigma: float,
                 lmbda: float, adaptive: bool, where: str = 'train.G_optimizer_sam'):
        super().__init__(params, buffers, rho, adaptive, where)
        self.sigma, self.lmbda = float(sigma), float(lmbda)
        self.momentum, _ = self._flat()
        self.started = torch.zeros((), device=params[0].device)  # 1 once a step was applied: m holds a gradient
        self._momentum_new: Optional[torch.Tensor] = None

    def direction(self) -> torch.Tensor:
        """g - sigma m_old; the new average m = lmbda m_old + (1 - lmbda) g (the first step: m = g, d = g)."""
        started = self.started > 0
        self._momentum_new = torch.where(started, torch.lerp(self.momentum, self.g1, 1.0 - self.lmbda), self.g1)
        return self.g1 - (self.sigma * self.started) * self.momentum

    def commit(self, ok: Optional[torch.Tensor]) -> None:
        if self._momentum_new is None:
            return
        _select(ok, self._momentum_new, self.momentum)
        _select(ok, torch.ones_like(self.started), self.started)
        self._momentum_new = None


@SAM_METHODS.register('gsam')
class GSAM(SAM):
    """GSAM (Zhuang et al., ICLR 2022): the second gradient minus alpha times the first's part orthogonal to it."""

    OPTIONS = {'rho': Key(0.05, _NUM, non_negative, 'the radius at the base learning rate (GSAM\'s rho_max)'),
               'rho_min': Key(None, (int, float, type(None)), non_negative,
                              'the radius at a learning rate of 0: rho follows the lr linearly from rho down to this '
                              '(null: rho, constant)'),
               'alpha': Key(0.4, _NUM, closed_unit, 'weight of the surrogate gap\'s gradient (the first gradient\'s '
                                                     'part orthogonal to the second)'),
               'adaptive': ADAPTIVE}

    def __init__(self, params: List[torch.Tensor], buffers: List[torch.Tensor], rho: float,
                 rho_min: Optional[float], alpha: float, adaptive: bool, where: str = 'train.G_optimizer_sam'):
        super().__init__(params, buffers, rho, adaptive, where)
        self.rho_min = self.rho if rho_min is None else float(rho_min)
        if self.rho_min > self.rho:
            raise UserError(f'{where} gsam: G_sam_rho_min {self.rho_min:g} is above G_sam_rho {self.rho:g} (rho falls '
                            f'with the learning rate from G_sam_rho to G_sam_rho_min)')
        self.alpha = float(alpha)
        self.g2, self._g2_views = self._flat()

    def rho_at(self, lr_ratio: float) -> float:
        """GSAM's proportional schedule (pytorch-optimizer's ProportionScheduler with a minimum lr of 0)."""
        return self.rho_min + (self.rho - self.rho_min) * min(max(lr_ratio, 0.0), 1.0)

    @torch.no_grad()
    def edit_gradients(self, step: int, ran: bool) -> None:
        """g2 - alpha (g1 - cos(g1, g2) ||g1|| / ||g2|| g2) over all weights (the library's gradient_decompose)."""
        self.gather(self._g2_views, self.g2)
        n1, n2 = torch.linalg.vector_norm(self.g1), torch.linalg.vector_norm(self.g2)
        cosine = torch.dot(self.g1, self.g2) / (n1 * n2 + EPS)
        vertical = self.g1 - (cosine * n1 / (n2 + EPS)) * self.g2
        self.g2.sub_(vertical, alpha=self.alpha)
        self.scatter(self._g2_views)


@SAM_METHODS.register('looksam')
class LookSAM(SAM):
    """LookSAM (Liu et al., CVPR 2022): two passes every k iterations, the sharpness part reused between them."""

    OPTIONS = {'rho': Key(0.1, _NUM, non_negative, 'radius of the neighbourhood (LookSAM\'s default 0.1)'),
               'k': Key(10, (int,), positive, 'the two passes every this many iterations (the first, then every k-th)'),
               'alpha': Key(0.7, _NUM, open_unit, 'weight of the reused sharpness part on the one-pass iterations'),
               'adaptive': ADAPTIVE}
    STATE = ('gv',)

    def __init__(self, params: List[torch.Tensor], buffers: List[torch.Tensor], rho: float, k: int, alpha: float,
                 adaptive: bool, where: str = 'train.G_optimizer_sam'):
        super().__init__(params, buffers, rho, adaptive, where)
        self.k, self.alpha = int(k), float(alpha)
        self.gv, self._gv_views = self._flat()       # the sharpness-aware part of the last full step's gradient
        self.g2, self._g2_views = self._flat()
        self._gv_new: Optional[torch.Tensor] = None

    def due(self, step: int) -> bool:
        return (step - 1) % self.k == 0

    @torch.no_grad()
    def edit_gradients(self, step: int, ran: bool) -> None:
        """Full step: gv = g2 - ||g2|| cos(g1, g2) g1 / ||g1||, per tensor (the gradient stays g2). One-pass step:
        g += alpha ||g|| / (||gv|| + 1e-8) gv, per tensor."""
        self.gather(self._g2_views, self.g2)
        if ran:
            n1, n2 = self._norms(self._g1_views), self._norms(self._g2_views)
            m1, m2 = n1.clamp_min(EPS), n2.clamp_min(EPS)
            coefficient = n2 * self._dots(self._g1_views, self._g2_views) / (m1 * m1 * m2)
            self._gv_new = self.g2 - self._expand(coefficient) * self.g1
            return
        coefficient = self.alpha * self._norms(self._g2_views) / (self._norms(self._gv_views) + 1e-8)
        self.g2.addcmul_(self._expand(coefficient), self.gv)
        self.scatter(self._g2_views)

    def commit(self, ok: Optional[torch.Tensor]) -> None:
        if self._gv_new is not None:
            _select(ok, self._gv_new, self.gv)
            self._gv_new = None


def build_sam(name: Optional[str], train_opt: Dict[str, Any], params: List[torch.Tensor],
              buffers: List[torch.Tensor], net: str = 'G') -> Optional[SAM]:
    """The `<net>_optimizer_sam` method over `params` (the optimizer's), from its `<net>_sam_<key>` keys; None when
    null. `buffers`: what the second pass must not change (the network's BatchNorm statistics)."""
    if name is None:
        return None
    where = f'train.{net}_optimizer_sam'
    cls = SAM_METHODS.get(name, where)
    return cls(params, buffers, where=where, **SAM_METHODS.read(name, train_opt, f'{net}_sam_', where))


def trained_parameters(param_groups: Sequence[Dict[str, Any]]) -> List[nn.Parameter]:
    """The parameters an optimizer's groups train, in its order (what a sharpness-aware step perturbs)."""
    return [p for g in param_groups for p in g['params'] if p.requires_grad]



class _FirstPass:
    """netG's optimizer under another name for the GradScaler: `unscale_` of the sharpness-aware step's first pass
    (the second is the optimizer's own) records that pass's overflow, which backs the scale off at the update."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.param_groups = optimizer.param_groups


class SharpnessAwareStep:
    """A sharpness-aware method as the model's step runs it: which iterations take the two passes, the weights moved
    between them and back, the gradient edits, both passes in the step's finiteness verdict, the method's state
    kept only for applied steps, and that state in checkpoints. The model keeps its own passes (`backward`)."""

    def __init__(self, method: SAM, name: str, optimizer: torch.optim.Optimizer):
        self.method = method
        self.name = name
        self.first_pass = _FirstPass(optimizer)
        self.ran = False  # whether this iteration took the two passes
        self.second_loss: Optional[torch.Tensor] = None

    @classmethod
    def build(cls, train_opt: Dict[str, Any], optimizer: torch.optim.Optimizer,
              net: nn.Module) -> Optional['SharpnessAwareStep']:
        """`train.G_optimizer_sam` around the optimizer's parameters (again after merge_bn rebuilt it), None when
        null; the second pass must leave `net`'s buffers (BatchNorm statistics) as the first one left them."""
        name = train_opt['G_optimizer_sam']
        method = build_sam(name, train_opt, trained_parameters(optimizer.param_groups), list(net.buffers()))
        return None if method is None else cls(method, name, optimizer)

    def begin(self, step: int) -> bool:
        """Whether iteration `step` takes the two passes (LookSAM: every k-th)."""
        self.ran = self.method.due(step)
        return self.ran

    def perturb(self, optimizer: torch.optim.Optimizer, scaler: Optional[torch.amp.GradScaler],
                after_backward: Callable[[], None]) -> None:
        """Between the passes: the first pass's gradients unscaled (the perturbation is taken from true gradients;
        an fp16 overflow is recorded for the scaler) and edited by the model (`after_backward`), the weights moved
        (the radius at the current lr's ratio to the base lr, for GSAM), the gradients cleared for the second."""
        if scaler is not None:
            scaler.unscale_(self.first_pass)
        after_backward()
        group = optimizer.param_groups[0]
        self.method.perturb(group['lr'] / group['initial_lr'] if group.get('initial_lr') else 1.0)
        optimizer.zero_grad(set_to_none=True)

    def restore(self, second_loss: torch.Tensor) -> None:
        """After the second pass (its mean loss `second_loss`): the weights of the step's start."""
        self.second_loss = second_loss
        self.method.restore()

    def edit_gradients(self, step: int) -> None:
        """The applied gradient from the final, unscaled one (GSAM's decomposition, LookSAM's reuse)."""
        self.method.edit_gradients(step, self.ran)

    def finite(self, finite: torch.Tensor) -> torch.Tensor:
        """The step's finiteness verdict (device bool) with both passes': the first pass's gradient and the second
        pass's loss (nothing more on a one-pass iteration)."""
        if not self.ran:
            return finite
        return finite & self.method.first_pass_finite & torch.isfinite(self.second_loss)

    @property
    def needs_grad_norm(self) -> bool:
        """Whether `commit` needs the step's total gradient norm (a method with a state)."""
        return bool(self.method.STATE)

    def commit(self, grad_norm: Optional[torch.Tensor], applied: Optional[torch.Tensor]) -> None:
        """The method's state of this step (F-SAM's average, LookSAM's reused part) is kept only where the step
        was applied and both passes were finite (an fp16 overflow the GradScaler skipped included): on the device."""
        ok: Optional[torch.Tensor] = None
        if self.method.STATE:
            ok = torch.isfinite(grad_norm)
            if self.ran:
                ok = ok & self.method.first_pass_finite
            if applied is not None:
                ok = ok & applied
        self.method.commit(ok)

    def describe(self) -> str:
        """The method for the start-up log line."""
        return (f'sharpness-aware steps {self.name} ({type(self.method).__name__}, rho {self.method.rho:g}): two '
                f'forward-backward passes per step')

    def state_dict(self) -> Dict[str, Any]:
        """The method's name and its state, for the checkpoint (a resume with another method starts afresh)."""
        return {'method': self.name, 'state': self.method.state_dict()}

    def load_state_dict(self, saved: Optional[Dict[str, Any]]) -> List[str]:
        """A checkpoint's `state_dict` (None: it had none); notes where it cannot be used."""
        if not self.method.STATE:
            return []
        if saved is None or saved['method'] != self.name:
            was = 'none' if saved is None else saved['method']
            return [f'train.G_optimizer_sam: checkpoint {was}, options {self.name}: its state starts afresh']
        note = self.method.load_state_dict(saved['state'])
        return [note] if note else []


def resume_sharpness_aware(sam_step: Optional[SharpnessAwareStep], saved: Optional[Dict[str, Any]],
                           optimizer_type: str) -> List[str]:
    """A checkpoint's sharpness-aware state (`saved`, None when it had none) into `sam_step` (None: the options
    have none, `optimizer_type` steps alone); notes where it cannot be used."""
    if sam_step is not None:
        return sam_step.load_state_dict(saved)
    if saved is None:
        return []
    return [f'train.G_optimizer_sam: checkpoint {saved["method"]}, options null: plain {optimizer_type} steps from '
            f'here']
