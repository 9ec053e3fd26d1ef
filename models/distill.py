"""Distillation from a teacher (`train.teacher`): a trained network whose outputs, and optionally features, netG
learns to match beside its own losses.

The teacher is a trained netG: its weights file and its netG section (left out, or net_type "auto": found from
the weights, models/networks/auto.py). It runs in eval mode without gradients beside the student, on the same
device batch (after the batch augmentation and the dataset's device transform, so both see the same input) and
under the step's autocast dtype. It is never in DDP (nothing of it is trained) and never saved: a checkpoint
records its file and sha256, and a resume with another file is refused.

The output loss is any loss of losses/ (`T_lossfn_type`, its keys `T_<key>`, weight `T_lossfn_weight`) between
netG's output and the teacher's. Feature distillation (FitNets, Romero et al., ICLR 2015; the feature losses of
lightweight SR) pairs modules by name, `T_features: {netG module: teacher module}`: forward hooks take their
outputs (4-D maps of the same size), a 1x1 convolution per pair maps netG's channels to the teacher's, and
`T_feature_lossfn_type` (L1 or L2) compares them, weighted by `T_feature_weight` (the mean over the pairs). The
adapters train with netG, in its optimizer (a parameter group of their own, netG's lr and schedule), and are
saved and resumed with the training state; their gradients are averaged over the ranks by one all-reduce per
step (they are outside netG's DDP), so N ranks x batch b train as 1 rank x N*b.
"""
import contextlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from losses.registry import build_loss
from models.network_loading import build_eval_network
from models.precision import to_channels_last
from utils import dist
from utils.errors import UserError
from utils.logger import get_logger
from utils.options import Key, non_negative, one_of, rule
from utils.suggest import did_you_mean
from utils.weights import file_sha256

WHERE = 'train.teacher'
AUTO = 'auto'
TEACHER_KEYS = ('weights', 'netG')


@rule('null, or {"weights": the trained netG weights file, "netG": its netG section (optional: found from the '
      'weights)}', properties={'weights': {'type': 'string', 'minLength': 1}, 'netG': {'type': 'object'}},
      required=['weights'], additionalProperties=False)
def _teacher(v: Any) -> Optional[str]:
    if v is None:
        return None
    unknown = [k for k in v if k not in TEACHER_KEYS]
    if unknown:
        return (f'has no key "{unknown[0]}"{did_you_mean(unknown[0], TEACHER_KEYS)}; it takes "weights" (the '
                f'teacher\'s weights file) and "netG" (its netG section)')
    if not isinstance(v.get('weights'), str) or not v['weights']:
        return 'needs "weights": the path of the teacher\'s trained netG weights (.pth or .safetensors)'
    netG = v.get('netG')
    if netG is not None and not (isinstance(netG, dict) and isinstance(netG.get('net_type'), str)):
        return '"netG" must be a netG section with its net_type (or leave it out: the network is found from the weights)'
    return None


@rule('{netG module name: teacher module name}', additionalProperties={'type': 'string', 'minLength': 1})
def _feature_pairs(v: Dict[str, Any]) -> Optional[str]:
    for student, teacher in v.items():
        if not student or not isinstance(teacher, str) or not teacher:
            return (f'pairs a netG module with a teacher module by their names, e.g. {{"model.4": "model.8"}}; '
                    f'"{student}" maps to {teacher!r}')
    return None


# The `train` keys (ModelPlain declares them, so every model with a pixel loss distils)
TEACHER_OPTIONS: Dict[str, Key] = {
    'teacher': Key(None, (dict, type(None)), _teacher,
                   'a trained network to distil from: {"weights": file, "netG": its netG section (left out or '
                   'net_type "auto": found from the weights)}; null: no distillation'),
    'T_lossfn_type': Key('l1', (str,), help='loss between netG\'s output and the teacher\'s: a loss of losses/ '
                                            '(its keys: T_<key>)'),
    'T_lossfn_weight': Key(1.0, (int, float), non_negative, 'weight of T_lossfn_type\'s loss (0: outputs not '
                                                             'compared)'),
    'T_features': Key({}, (dict,), _feature_pairs, '{netG module: teacher module}: their outputs compared through a '
                                                   '1x1 convolution trained with netG ({}: none)'),
    'T_feature_lossfn_type': Key('l2', (str,), one_of('l1', 'l2'), 'loss between the adapted netG features and the '
                                                                   'teacher\'s: l1, or l2 (FitNets\' squared error)'),
    'T_feature_weight': Key(1.0, (int, float), non_negative, 'weight of the feature loss (the mean over the '
                                                              'T_features pairs)'),
}


def teacher_network(teacher: Dict[str, Any]) -> Tuple[Dict[str, Any], Optional[str]]:
    """(the teacher's explicit netG section, a note when it was found from the weights): `teacher.netG`, or, left
    out or net_type "auto", the network spandrel recognises in `teacher.weights`."""
    netG = teacher.get('netG')
    if netG is not None and netG.get('net_type') != AUTO:
        return netG, None
    from models.networks.auto import resolve_auto
    return resolve_auto(netG or {'net_type': AUTO}, teacher['weights'], f'{WHERE}.weights', f'{WHERE}.netG')


def output_channels(root: nn.Module, name: str) -> Optional[int]:
    """The channels module `name` of `root` outputs, read from the module itself: a convolution's out_channels
    (a Linear's out_features, a norm's features), a block's last such layer, or, for a layer without any (an
    activation), the one registered before it in its parent. None: nothing says (the check at start-up tells)."""
    def own(m: nn.Module) -> Optional[int]:
        for attr in ('out_channels', 'out_features', 'num_features', 'num_channels'):
            value = getattr(m, attr, None)
            if isinstance(value, int):
                return value
        for child in reversed(list(m.children())):
            found = own(child)
            if found is not None:
                return found
        return None
    modules = dict(root.named_modules())
    found = own(modules[name])
    if found is not None or not name:
        return found
    parent, _, last = name.rpartition('.')
    siblings = list(modules[parent].named_children())
    before = [m for n, m in siblings[:[n for n, _ in siblings].index(last)]]
    for m in reversed(before):
        found = own(m)
        if found is not None:
            return found
    return None


def _module(root: nn.Module, name: str, whose: str) -> nn.Module:
    modules = dict(root.named_modules())
    if name not in modules or not name:
        names = [n for n in modules if n]
        shown = ', '.join(names[:6]) + (', ...' if len(names) > 6 else '')
        raise UserError(f'train.T_features: {whose} has no module "{name}"{did_you_mean(name, names)}; its modules '
                        f'include {shown}')
    return modules[name]


def distillation(train_opt: Dict[str, Any], student: nn.Module, student_type: str, device: torch.device,
                 channels_last: bool, merge_bn: bool, allow_unsafe_load: bool) -> Optional['Distillation']:
    """`train.teacher`'s network and losses, or None without a teacher; what cannot be combined with the teacher's
    feature hooks (`merge_bn`: whether KAIR's merge_bn will fold netG) is refused here."""
    t = train_opt
    if t['teacher'] is None:  # an accepted key must do something: say which of the teacher's keys were given
        given = [f'train.{k}' for k, spec in TEACHER_OPTIONS.items() if k != 'teacher' and t[k] != spec.default]
        if given and dist.is_main_process():
            get_logger().warning(f'{", ".join(given)}: ignored: train.teacher is null (no teacher to distil from)')
        return None
    if t['T_features'] and t['compile']:
        raise UserError('train.T_features: the feature hooks cannot be combined with train.compile (a compiled '
                        'block does not call them); set compile to false or T_features to {}')
    if t['T_features'] and merge_bn:
        raise UserError('train.T_features: merge_bn renames netG\'s modules when it folds them; set merge_bn to '
                        'false or T_features to {}')
    return Distillation(t, student, student_type, device, channels_last, allow_unsafe_load)


def resume_teacher(distill: Optional['Distillation'], training: Dict[str, Any]) -> None:
    """A checkpoint's distillation state (`training`: its training state) into `distill`, first of all: another
    teacher is refused before anything is loaded; a checkpoint distilled by a teacher the options no longer name
    goes on without one, said in the log."""
    if distill is not None:
        distill.load_state_dict(training['distill'] if 'distill' in training else None)
    elif 'distill' in training:
        get_logger().warning(f'resume: the checkpoint was distilled from {training["distill"]["teacher"]["weights"]}; '
                             f'train.teacher is null now: training goes on without a teacher')


class Distillation:
    """The teacher network, its losses, the feature hooks and adapters (see the module docstring)."""

    def __init__(self, train_opt: Dict[str, Any], student: nn.Module, student_type: str, device: torch.device,
                 channels_last: bool = False, allow_unsafe_load: bool = False):
        t = train_opt
        self.weights = t['teacher']['weights']
        netG, _ = teacher_network(t['teacher'])  # explicit once the options were read (option_rules.py)
        self.net_type = netG['net_type']
        self.net = build_eval_network(netG, self.weights, device, f'{WHERE}.weights', allow_unsafe_load)
        for p in self.net.parameters():
            p.requires_grad_(False)
        if channels_last:
            to_channels_last(self.net)
        self.sha256 = file_sha256(self.weights)
        self.loss = build_loss(t, 'T_').to(device) if t['T_lossfn_weight'] > 0 else None
        self.pairs: List[Tuple[str, str]] = list(t['T_features'].items())
        if self.loss is None and not self.pairs:
            raise UserError(f'{WHERE}: nothing to distil: T_lossfn_weight is 0 and T_features is empty; give one '
                            f'of them, or set train.teacher to null')
        self.feature_loss = F.l1_loss if t['T_feature_lossfn_type'] == 'l1' else F.mse_loss
        self.feature_weight = float(t['T_feature_weight'])
        self.adapters = nn.ModuleList()
        self._student: Dict[int, torch.Tensor] = {}
        self._teacher: Dict[int, torch.Tensor] = {}
        self._capturing = False
        self._teaching = False
        for i, (s_name, t_name) in enumerate(self.pairs):
            s_module = _module(student, s_name, f'netG ({student_type})')
            t_module = _module(self.net, t_name, f'the teacher ({self.net_type})')
            channels = (output_channels(student, s_name), output_channels(self.net, t_name))
            for (whose, name), c in zip(((f'netG ({student_type})', s_name), ('the teacher', t_name)), channels):
                if c is None:
                    raise UserError(f'train.T_features: the channels of {whose}\'s module "{name}" cannot be read from '
                                    f'it (no convolution in or before it); name a convolution or a block ending in one')
            self.adapters.append(nn.Conv2d(channels[0], channels[1], 1))
            s_module.register_forward_hook(self._hook(self._student, i, lambda: self._capturing))
            t_module.register_forward_hook(self._hook(self._teacher, i, lambda: self._teaching))
        self.adapters.to(device)
        if channels_last:
            to_channels_last(self.adapters)

    @staticmethod
    def _hook(store: Dict[int, torch.Tensor], i: int, armed: Callable[[], bool]) -> Callable[..., None]:
        """A forward hook keeping a copy of the module's output while `armed()` (a copy: the layer after it may
        work in place, as KAIR's ReLUs do)."""
        def hook(module: nn.Module, inputs: Any, output: Any) -> None:
            if armed():
                store[i] = output.clone()
        return hook

    def describe(self) -> str:
        """The teacher for the start-up log line: its file, network, size and digest, the feature pairs."""
        size = sum(p.numel() for p in self.net.parameters())
        pairs = f', {len(self.pairs)} feature pair(s)' if self.pairs else ''
        return f'distilled from {self.weights} ({self.net_type}, {size:,} parameters, sha256 {self.sha256[:12]}){pairs}'

    def names(self) -> List[str]:
        """The log names of the terms `terms` returns, in its order."""
        return (['distill'] if self.loss is not None else []) + (['distill_feat'] if self.pairs else [])

    def param_groups(self) -> List[Dict[str, Any]]:
        """The adapters' parameter group for netG's optimizer (none without T_features)."""
        return [{'params': list(self.adapters.parameters())}] if self.pairs else []

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """netG's hooked outputs are kept inside (the training forward); elsewhere (validation, the EMA) not."""
        self._capturing = True
        try:
            yield
        finally:
            self._capturing = False

    def teach(self, batch: Dict[str, Any], predict: Callable[[nn.Module, Dict[str, Any]], torch.Tensor]
              ) -> Tuple[torch.Tensor, Dict[int, torch.Tensor]]:
        """The teacher's output and hooked features for `batch`, without gradients (in the caller's autocast)."""
        self._teaching = True
        try:
            with torch.no_grad():
                out = predict(self.net, batch)
            features = dict(self._teacher)
        finally:
            self._teaching = False
            self._teacher.clear()
        return out, features

    def terms(self, pred: torch.Tensor, taught: Tuple[torch.Tensor, Dict[int, torch.Tensor]]) -> torch.Tensor:
        """[the weighted output loss, the weighted feature loss] (those configured, float32) of netG's output `pred`
        and the features captured with it, against the teacher's `taught` (from `teach`)."""
        out, features = taught
        terms = []
        if self.loss is not None:
            terms.append(self.loss(pred, out).float())
        if self.pairs:
            try:
                losses = [self.feature_loss(adapter(self._student[i]).float(), features[i].float())
                          for i, adapter in enumerate(self.adapters)]
            finally:
                self._student.clear()
            terms.append(self.feature_weight * torch.stack(losses).mean())
        return torch.stack(terms)

    def check(self, pred: torch.Tensor, batch: Dict[str, Any], predict: Callable[..., torch.Tensor],
              where: str) -> None:
        """At start-up, on netG's output `pred` for a sample of `where` (its features captured): the teacher's output
        must have the same shape, the loss must take them, and each pair of features must be 4-D maps of one size
        with the channels the adapter was built for. One line otherwise."""
        taught = self.teach(batch, predict)
        out, features = taught
        if out.shape != pred.shape:
            raise UserError(f'{WHERE}: the teacher ({self.net_type}) turns a sample of {where} into '
                            f'{tuple(out.shape[1:])}, netG into {tuple(pred.shape[1:])}: they must match (the same '
                            f'task, scale and channels)')
        for i, ((s_name, t_name), adapter) in enumerate(zip(self.pairs, self.adapters)):
            s, t = self._student.get(i), features.get(i)
            shapes = [tuple(x.shape[1:]) if torch.is_tensor(x) else type(x).__name__ for x in (s, t)]
            fits = (torch.is_tensor(s) and torch.is_tensor(t) and s.dim() == t.dim() == 4 and s.shape[2:] == t.shape[2:]
                    and s.shape[1] == adapter.in_channels and t.shape[1] == adapter.out_channels)
            if not fits:
                self._student.clear()
                raise UserError(f'train.T_features: "{s_name}": "{t_name}": netG\'s module gives {shapes[0]}, the '
                                f'teacher\'s {shapes[1]} for a sample of {where}; a pair needs feature maps (C, H, W) '
                                f'of the same size, with the channels their modules say ({adapter.in_channels} and '
                                f'{adapter.out_channels})')
        try:
            self.terms(pred, taught)
        except (RuntimeError, ValueError, TypeError) as e:
            raise UserError(f'train.T_lossfn_type ({type(self.loss.base).__name__ if self.loss else "-"}) cannot take '
                            f'netG\'s and the teacher\'s output {tuple(pred.shape[1:])}: {str(e).splitlines()[0][:200]}'
                            ) from None

    def reduce_gradients(self) -> None:
        """The adapters' gradients averaged over the ranks, in one all-reduce (netG's are DDP's): every rank calls
        it after its backward passes."""
        world = dist.get_world_size()
        grads = [p.grad for p in self.adapters.parameters() if p.grad is not None]
        if world == 1 or not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce_sum(flat)
        flat.div_(world)
        torch._foreach_copy_(grads, [v.view_as(g) for v, g in zip(flat.split([g.numel() for g in grads]), grads)])

    def state_dict(self) -> Dict[str, Any]:
        """What a checkpoint keeps: the teacher's file and digest (never its weights), the adapters."""
        return {'teacher': {'weights': self.weights, 'sha256': self.sha256}, 'adapters': self.adapters.state_dict()}

    def load_state_dict(self, saved: Optional[Dict[str, Any]]) -> None:
        """Resume: the same teacher (by its digest) or one line; the adapters where they fit, else afresh (noted)."""
        log = get_logger()
        if saved is None:
            log.warning('resume: the checkpoint was trained without train.teacher: distillation starts here'
                        + (' (the T_features adapters afresh)' if self.pairs else ''))
            return
        before = saved['teacher']
        if before['sha256'] != self.sha256:
            raise UserError(f'resume: the checkpoint was distilled from {before["weights"]} (sha256 '
                            f'{before["sha256"][:12]}), but {WHERE}.weights is {self.weights} (sha256 '
                            f'{self.sha256[:12]}): another teacher; give the same file, or start a new task or use '
                            f'--fresh')
        if before['weights'] != self.weights:
            log.info(f'resume: the teacher moved from {before["weights"]} to {self.weights} (the same file: sha256 '
                     f'{self.sha256[:12]})')
        try:
            self.adapters.load_state_dict(saved['adapters'])
        except RuntimeError:
            log.warning('resume: train.T_features changed since the checkpoint: the adapters start afresh')

