"""The image model: network + loss + optimizer + scheduler + EMA, wrapped in DDP when distributed.

It implements models/interface.py's `TrainingModel`, the only members the train loop calls, so
every network trains with the same loop; the video and GAN models extend it. Evaluation is not
here: `validate` hands the current eval network to the model's `restorer_class`
(models/restorer.py) and runs it through models/evaluation.py, as main_test.py does.
"""
import contextlib
import gc
import re
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from data import batch_augment
from data.degradations import batch_transforms
from losses.registry import LOSSES, build_extra_losses, build_loss, extra_weights
from models.compile import compile_training_net, eager
from models.distill import TEACHER_OPTIONS, Distillation
from models.ema import ModelEMA
from models.evaluation import Evaluation, WriteItem, evaluate
from models.merge_bn import count_foldable, fold_batchnorm
from models.network_loading import build_checked_network, load_weights
from models.networks.layers.init import init_weights
from models.optim import (OPTIMIZERS, Averaging, averaging, build_optimizer, gated_step, refreshed_group_keys,
                          resume_optimizer)
from models.registry import MODELS
from models.regularizers import apply_regularizers, regularizers_due
from models.restorer import ImageRestorer, amp_dtype
from models.sam import SAM, SAM_METHODS, build_sam, trained_parameters
from models.schedules import SCHEDULERS, build_scheduler
from utils import dist
from utils.errors import UserError, first_line
from utils.image import bit_depth, images_to_float, tensor2uint
from utils.logger import get_logger
from utils.options.foreign import REDUX, Foreign
from utils.options import IGNORED, Choice, Key, learning_rate, non_negative, one_of, positive, rule, unit_interval

# What a network or loss raises on an input it cannot take, caught by the start-up checks to become one line:
# PyTorch's errors, and the asserts and indexing of networks written elsewhere (spandrel's).
NETWORK_FAILURES = (RuntimeError, ValueError, TypeError, IndexError, AssertionError, KeyError)


def failure_text(e: BaseException) -> str:
    """The first line of a NETWORK_FAILURES error, with its kind where the message alone says little (a
    KeyError's message is only the key)."""
    text = first_line(e)[:300]
    return text if isinstance(e, (RuntimeError, ValueError, TypeError, UserError)) else f'{type(e).__name__}: {text}'


# the netG keys that give a network's input channels (KAIR, BasicSR, SwinIR, Restormer, spandrel's networks)
INPUT_CHANNEL_KEYS = ('in_nc', 'num_in_ch', 'in_chans', 'in_channels', 'inp_channels', 'in_ch')
_CHANNELS_ERROR = re.compile(r'expected input\[[^\]]*\] to have (\d+) channels, but got (\d+) channels')


def channel_key_problem(netG: Dict[str, Any], error: BaseException, where: str,
                        channels: Optional[str]) -> Optional[str]:
    """The one line naming netG's input-channel key when torch's first convolution refused the data's channel
    count (`channels`: the dataset's words for its channels, as for `channels_hint`); None for any other
    failure."""
    found = _CHANNELS_ERROR.search(str(error))
    if found is None:
        return None
    expected, given = int(found.group(1)), int(found.group(2))
    key = next((k for k in INPUT_CHANNEL_KEYS if netG.get(k) == expected), None)
    if key is None:
        return None
    data = f'{where} gives {channels}' if channels else f'{where} gives {given}-channel input'
    return (f'netG.{key}: {expected}, but {data}: netG\'s first layer takes {expected} channels and is given '
            f'{given}')


def channels_hint(where: str, channels: Optional[str]) -> str:
    """What a network's channels must match, for start-up messages: the dataset's own words where it has
    them (`datasets.train: 1-channel gray images (is_color false)`), else the usual key."""
    return f'{where}: {channels}' if channels else '"n_channels"'


def amp_setup(amp: str, device: torch.device) -> Tuple[Optional[torch.dtype], bool]:
    """(autocast dtype or None, whether a GradScaler is needed) for `train.amp` on `device`: fp16 (CUDA only,
    `amp_dtype`) needs loss scaling, bf16 has float32's range and needs no scaler."""
    return amp_dtype(amp, device, 'train.amp'), amp == 'fp16'


def tf32_setup(tf32: Optional[bool], device: torch.device) -> Optional[str]:
    """`train.tf32`: TensorFloat-32 for float32 matmuls and cuDNN convolutions (10-bit mantissa products,
    float32 accumulation; several times the float32 rate on tensor cores). null: on where the GPU has it
    (compute capability 8.0+, Ampere on). Process-wide; returns the line to log (None off CUDA)."""
    if device.type != 'cuda':
        return None
    on = torch.cuda.get_device_capability(device)[0] >= 8 if tf32 is None else bool(tf32)
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    how = 'the GPU has it' if tf32 is None and on else 'the GPU has none' if tf32 is None else 'train.tf32'
    return f'TensorFloat-32 matmuls and convolutions {"on" if on else "off"} ({how}; train.tf32 sets it)'


@rule('"default", "max-autotune", "reduce-overhead" or null', enum=[None, 'default', 'max-autotune', 'reduce-overhead'])
def _compile_mode(v: Any) -> Optional[str]:
    return None if v in (None, 'default', 'max-autotune', 'reduce-overhead') else \
        'must be one of default, max-autotune, reduce-overhead (or null)'


# BasicSR's model classes (and those of the repositories built on it) that train one network as this model does
FOREIGN_NAMES = [Foreign(name) for name in ('SRModel', 'SwinIRModel', 'HATModel', 'DATModel', 'ATDModel', 'DRCTModel')] + [
    Foreign('RealESRNetModel', note='the degradations of its realesrgan training set run on the device in the step'),
    Foreign('SRModel', REDUX)]


@MODELS.register('plain', foreign=FOREIGN_NAMES)
class ModelPlain:
    """Image-to-image restoration (denoising, SR, deblurring) with one generator `netG`."""

    restorer_class = ImageRestorer  # how this model's networks are evaluated (validation and main_test)

    # The `train` keys this model reads beside the loop's (utils/options.py SCHEMA), KAIR's names and defaults.
    TRAIN_OPTIONS: Dict[str, Any] = {
        'G_lossfn_type': Key('l1', (str,), help='netG\'s loss: a loss of losses/ (l1, l2, charbonnier, ssim, ...)'),
        'G_lossfn_weight': Key(1.0, (int, float), help='weight of G_lossfn_type\'s loss'),
        # more losses added to G_lossfn_type's, {loss name: weight}, each reading its own G_<key> options
        'G_extra_losses': Key({}, (dict,), extra_weights, 'more losses added to G_lossfn_type\'s: {loss name: '
                                                          'weight}, each reading its own G_<key> keys'),
        'E_decay': Key(0.0, (int, float), unit_interval, 'decay of the weights\' moving average netE (EMA); 0: '
                                                         'no EMA'),
        'E_warmup_iter': Key(0, (int,), non_negative, 'iterations over which the EMA decay ramps linearly from 0 '
                                                      'up to E_decay (0: E_decay from the start)'),
        'E_switch_iter': Key(0, (int,), non_negative, 'every this many iterations the EMA weights are copied into '
                                                      'netG, which trains on from them (0: never)'),
        'G_optimizer_type': Key('adam', (str,), help='netG\'s optimizer: a name of models/optim.py (adam, adamw, '
                                                     'adan, lion, adamw_sf, ...)'),
        'G_optimizer_lr': Key(1e-4, (int, float), learning_rate, 'netG\'s learning rate'),
        'G_optimizer_clipgrad': Key(None, (int, float, type(None)), positive,
                                    'clip netG\'s total gradient norm at this value (null: no clipping)'),
        'G_optimizer_reuse': Key(True, (bool,), help='on resume, load the saved optimizer state (moments); false: '
                                                     'start it afresh'),
        'G_optimizer_sam': Key(None, (str, type(None)), help='sharpness-aware steps around G_optimizer_type: sam, fsam, '
                                                             'gsam or looksam (models/sam.py; their keys G_sam_<key>), '
                                                             'two forward-backward passes per step; null: off'),
        'G_scheduler_type': Key('MultiStepLR', (str, type(None)),
                                help='learning-rate schedule: a scheduler of models/optim.py (null: constant)'),
        'G_scheduler_warmup_iter': Key(0, (int,), non_negative, 'linear learning-rate warm-up over this many '
                                                                'iterations'),
        'G_regularizer_orthstep': Key(None, (int, type(None)), positive,
                                      'KAIR\'s orthogonal regulariser every this many iterations (null: off)'),
        'G_regularizer_clipstep': Key(None, (int, type(None)), positive,
                                      'KAIR\'s weight-clipping regulariser every this many iterations (null: off)'),
        'G_param_strict': Key(True, (bool,), help='path.pretrained_netG must match netG key for key'),
        'E_param_strict': Key(True, (bool,), help='path.pretrained_netE must match netE key for key'),
        'amp': Key('none', (str,), one_of('none', 'bf16', 'fp16'), 'mixed precision: none, bf16, or fp16 (CUDA '
                                                                    'only, with loss scaling)'),
        'tf32': Key(None, (bool, type(None)), help='TensorFloat-32 matmuls and convolutions on CUDA (null: on GPUs '
                                                    'that have it)'),
        'channels_last': Key(False, (bool,), help='channels-last memory format for the network and its inputs'),
        'compile_mode': Key(None, (str, type(None)), _compile_mode,
                            'torch.compile mode with train.compile (reduce-overhead: CUDA graphs); null: default'),
        # batch augmentation (traiNNer-redux's MoA): drawn with the training items (the loop wraps the training
        # set, data/batch_augment.py), applied on the device in `to_device`
        **batch_augment.MOA_OPTIONS,
        # distillation from a trained teacher network (models/distill.py)
        **TEACHER_OPTIONS,
        # KAIR's video keys (models/model_vrt.py), which its image models ignore
        'fix_iter': IGNORED, 'fix_lr_mul': IGNORED, 'fix_keys': IGNORED,
    }
    PATH_OPTIONS: Dict[str, Any] = {
        'pretrained_netG': Key(None, (str, type(None)), help='weights netG starts from (.pth or .safetensors; '
                                                             'null: initialised)'),
        'pretrained_netE': Key(None, (str, type(None)), help='weights the EMA netE starts from, with E_decay > 0 '
                                                             '(null: netG\'s)')}
    # Type keys choosing a registered member, which reads its own keys as `<prefix><key>` (models/optim.py)
    CHOICES: Dict[str, Choice] = {'G_lossfn_type': Choice(LOSSES, 'G_'), 'G_extra_losses': Choice(LOSSES, 'G_'),
                                  'G_optimizer_type': Choice(OPTIMIZERS, 'G_optimizer_'),
                                  'G_optimizer_sam': Choice(SAM_METHODS, 'G_sam_'),
                                  'G_scheduler_type': Choice(SCHEDULERS, 'G_scheduler_'),
                                  'T_lossfn_type': Choice(LOSSES, 'T_')}

    def __init__(self, opt: Dict[str, Any], device: torch.device, allow_unsafe_load: bool = False):
        self.opt = opt
        self.train_opt = opt['train']
        self.device = device
        self.allow_unsafe_load = allow_unsafe_load
        self.amp_dtype, use_scaler = amp_setup(self.train_opt['amp'], device)
        tf32 = tf32_setup(self.train_opt['tf32'], device)
        if tf32:
            get_logger().info(tf32)
        self.scaler = torch.amp.GradScaler(device.type) if use_scaler else None
        self.channels_last = self.train_opt['channels_last']
        self._warned_5d = False
        netG = opt['netG']
        net = build_checked_network(netG)
        init_weights(net, netG['init_type'], netG['init_bn_type'], netG['init_gain'])
        self.merge_bn_at: Optional[int] = opt['merge_bn_startpoint'] if opt['merge_bn'] else None
        self.bn_merged = False  # a pretrained netG saved after merge_bn is loaded folded: nothing left to fold
        if opt['path']['pretrained_netG']:
            self.bn_merged = load_weights(net, opt['path']['pretrained_netG'], self.train_opt['G_param_strict'],
                                          'params', 'path.pretrained_netG', allow_unsafe_load, opt['merge_bn'])
        if self.bn_merged:
            get_logger().info('path.pretrained_netG holds weights saved after merge_bn folded BatchNorm: netG is '
                              'built folded and trains on without batch statistics')
        self.net_g = net.to(device)
        if self.channels_last:
            self.net_g.to(memory_format=torch.channels_last)  # 4-D weights only; others unchanged
        self.ema: Optional[ModelEMA] = None
        for key in ('E_warmup_iter', 'E_switch_iter'):
            if self.train_opt[key] and self.train_opt['E_decay'] <= 0:
                raise UserError(f'train.{key}: {self.train_opt[key]} needs the EMA: set train.E_decay > 0 '
                                f'(e.g. 0.999), or {key} to 0')
        if self.train_opt['E_decay'] > 0:
            self.ema = ModelEMA(self.net_g, self.train_opt['E_decay'], self.train_opt['E_warmup_iter'])
            if opt['path']['pretrained_netE']:
                load_weights(self.ema.module, opt['path']['pretrained_netE'], self.train_opt['E_param_strict'],
                             'params_ema', 'path.pretrained_netE', allow_unsafe_load)
        if self.merge_bn_at is not None and not self.bn_merged and not count_foldable(self.net_g):
            raise UserError(f'merge_bn: netG ({netG["net_type"]}) has no BatchNorm after a convolution to fold '
                            f'(e.g. dncnn needs act_mode "BR"); set merge_bn to false')
        # after the EMA copy, which must not take the feature hooks along
        self.distill: Optional[Distillation] = self._distillation(allow_unsafe_load)
        self.ddp: Optional[DistributedDataParallel] = None
        self.net: nn.Module = self._training_net()
        if self.sync_every_micro_batch:
            get_logger().info(f'use_static_graph with train.accumulate_steps {self.train_opt["accumulate_steps"]}: '
                              f'gradients are all-reduced after every micro-batch (DDP cannot skip the sync '
                              f'under static graph); the result is the same, the communication is larger')
        self.loss_fn = build_loss(self.train_opt).to(device)
        self.extra_losses = {name: loss.to(device) for name, loss in build_extra_losses(self.train_opt).items()}
        self.optimizer = build_optimizer(self.optimizer_groups(), self.train_opt, 'G', self.device)
        self.scheduler = build_scheduler(self.optimizer, self.train_opt)
        self.averaging: Optional[Averaging] = averaging(self.optimizer)
        self._check_schedule_free()
        self.sam: Optional[SAM] = None
        self._build_sam()
        self._sam_ran = False  # whether this iteration took the sharpness-aware step's two passes
        self._second_loss: Optional[torch.Tensor] = None
        self._iteration = 0  # the last finished iteration (`end_iteration`)
        # nan_policy "stop" on CUDA: an optimizer that cannot take the skip verdict on the device steps regardless
        # (`gated_step`): the run stops at the next check point before anything is written, so the step cannot
        # matter, and reading the verdict would make the CPU wait for the GPU every iteration. Elsewhere (CPU,
        # where a read costs nothing, or "skip", which must not apply the step) the verdict is read.
        self.host_verdict = device.type != 'cuda' or self.train_opt['nan_policy'] != 'stop'
        self._loss_sum = torch.zeros((), device=device)
        self._loss_steps = torch.zeros((), device=device)
        # with extra losses or a teacher, the sums of [G_lossfn_type's, each extra's, the distillation terms] since the
        # last log (applied steps)
        self.term_names = ['pix', *self.extra_losses, *(self.distill.names() if self.distill is not None else [])]
        self._term_sums = torch.zeros(len(self.term_names) if len(self.term_names) > 1 else 0, device=device)
        self._iteration_terms: Optional[torch.Tensor] = None
        self._iteration_loss = torch.zeros((), device=device)
        self._finalized = False
        self._grad_norm: Optional[torch.Tensor] = None
        self.restorer = self.restorer_class.from_options(self.eval_net, opt, device)

    def _check_schedule_free(self) -> None:
        """What a schedule-free optimizer (G_optimizer_type adamw_sf, adan_sf) cannot be combined with, and what
        to know: BatchNorm statistics are gathered at the training point, not the averaged one that is validated."""
        if self.averaging is None:
            return
        t, log = self.train_opt, get_logger()
        if t['E_switch_iter']:
            raise UserError(f'train.E_switch_iter: {t["E_switch_iter"]} cannot be combined with the schedule-free '
                            f'G_optimizer_type {t["G_optimizer_type"]} (netG holds its training point, the EMA '
                            f'averages its evaluation point); set E_switch_iter to 0')
        if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in self.net_g.modules()):
            log.warning(f'train.G_optimizer_type {t["G_optimizer_type"]}: netG has BatchNorm, whose running '
                        f'statistics are gathered at the training weights, not at the averaged weights that are '
                        f'validated and saved (the schedule-free README\'s caveat): scores may be off')
        if t['G_scheduler_type'] not in (None, 'none') and not (t['G_scheduler_type'] in ('MultiStepLR', 'multistep')
                                                               and not t['G_scheduler_milestones']):
            log.info(f'train.G_optimizer_type {t["G_optimizer_type"]} is schedule-free: it is meant for a constant lr '
                     f'after the warm-up (G_scheduler_warmup_iter); G_scheduler_type {t["G_scheduler_type"]} '
                     f'decays it as well')

    def _distillation(self, allow_unsafe_load: bool) -> Optional[Distillation]:
        """`train.teacher`'s network and losses (models/distill.py), or None."""
        t = self.train_opt
        if t['teacher'] is None:  # an accepted key must do something: say which of the teacher's keys were given
            given = [f'train.{k}' for k, spec in TEACHER_OPTIONS.items() if k != 'teacher' and t[k] != spec.default]
            if given and dist.is_main_process():
                get_logger().warning(f'{", ".join(given)}: ignored: train.teacher is null (no teacher to distil from)')
            return None
        if t['T_features'] and t['compile']:
            raise UserError('train.T_features: the feature hooks cannot be combined with train.compile (a compiled '
                            'block does not call them); set compile to false or T_features to {}')
        if t['T_features'] and self.merge_bn_at is not None:
            raise UserError('train.T_features: merge_bn renames netG\'s modules when it folds them; set merge_bn to '
                            'false or T_features to {}')
        return Distillation(t, self.net_g, self.opt['netG']['net_type'], self.device, self.channels_last,
                            allow_unsafe_load)

    def optimizer_groups(self) -> List[Dict[str, Any]]:
        """What netG's optimizer trains: `param_groups()`, then the distillation adapters' group (T_features)."""
        return self.param_groups() + (self.distill.param_groups() if self.distill is not None else [])

    def _build_sam(self) -> None:
        """`train.G_optimizer_sam` around the optimizer's parameters (again after merge_bn rebuilt it); the second
        pass must leave netG's buffers (BatchNorm statistics) as the first one left them."""
        self.sam = build_sam(self.train_opt['G_optimizer_sam'], self.train_opt,
                             trained_parameters(self.optimizer.param_groups), list(self.net_g.buffers()))
        self._first_pass = _FirstPass(self.optimizer)

    def _training_net(self) -> nn.Module:
        """net_g as the training forward runs it: in DDP when distributed, compiled with `train.compile`."""
        net = self._wrap(self.net_g)
        self.ddp = net if isinstance(net, DistributedDataParallel) else None
        if self.train_opt['compile']:
            # Only the training forward is compiled (models/compile.py); evaluation (whole images of varying
            # size) and the EMA copy run eagerly, and state_dict keys stay those of the bare network.
            net, note = compile_training_net(self.net_g, net, self.train_opt['compile_mode'])
            get_logger().info(note)
        return net

    def end_iteration(self, step: int) -> None:
        """Called after every iteration (and with the start iteration before the first): KAIR's
        `merge_bn` folds BatchNorm into the convolutions once `merge_bn_startpoint` is reached; a loss that draws
        random numbers (ms_swd) draws those of the next iteration from `step`, the same after a resume."""
        self._iteration = step
        for loss in (self.loss_fn, *self.extra_losses.values()):
            loss.set_iteration(step)
        if self.distill is not None and self.distill.loss is not None:  # T_lossfn_type may be ms_swd too
            self.distill.loss.set_iteration(step)
        if self.merge_bn_at is not None and not self.bn_merged and step >= self.merge_bn_at:
            self.merge_batchnorm()
            get_logger().info(f'iteration {step}: merge_bn folded BatchNorm into the convolutions '
                              f'({sum(p.numel() for p in self.net_g.parameters()):,} parameters now); training '
                              f'goes on without batch statistics, the lr schedule continues where it was')

    def merge_batchnorm(self) -> None:
        """Fold netG's (and the EMA copy's) BatchNorm layers; rebuild what holds their parameters.

        DDP is rebuilt around the new parameter set, and so is the optimizer (fresh moments, as KAIR
        does); the schedule keeps its position (KAIR restarts it, which repeats the warm start).
        """
        self.sync_eval_buffers()
        if self.averaging is not None:  # fold the averaged weights: the new optimizer starts there, without z
            self.averaging.eval()
        fold_batchnorm(self.net_g)  # differences between the ranks' netG go with DDP's rebuild below
        if self.ema is not None:
            fold_batchnorm(self.ema.module)
            self.ema.refresh()
        self.bn_merged = True
        self.ddp = None
        self.net = None
        gc.collect()  # the old DDP's hooks on the parameters go with it
        self.net = self._training_net()
        schedule = self.scheduler.state_dict()
        self.optimizer = build_optimizer(self.optimizer_groups(), self.train_opt, 'G', self.device)
        self.scheduler = build_scheduler(self.optimizer, self.train_opt, notes=False)
        self.scheduler.load_state_dict(schedule)
        self.averaging = averaging(self.optimizer)
        self._build_sam()  # the folded parameters: the sharpness-aware state starts afresh, as the moments do

    def _wrap(self, net: nn.Module, static_graph: Optional[bool] = None) -> nn.Module:
        """`net` in DDP with the top-level flags when distributed (`static_graph`: None = the options')."""
        if not dist.is_initialized():
            return net
        # torch 2.14 deprecates `broadcast_buffers` (True is the default); False keeps its meaning
        # of "never sync buffers", which the newer `forward_sync_buffers=False` does not.
        buffers = {} if self.opt['broadcast_buffers'] else {'broadcast_buffers': False}
        return DistributedDataParallel(
            net, device_ids=[self.device.index] if self.device.type == 'cuda' else None,
            find_unused_parameters=self.opt['find_unused_parameters'],
            static_graph=self.opt['use_static_graph'] if static_graph is None else static_graph,
            gradient_as_bucket_view=self.opt['gradient_as_bucket_view'], **buffers)

    def param_groups(self) -> List[Dict[str, Any]]:
        """Optimizer parameter groups; subclasses split them (e.g. a slower group for flow nets)."""
        return [{'params': [p for p in self.net_g.parameters() if p.requires_grad]}]

    def network_info(self) -> str:
        n = sum(p.numel() for p in self.net_g.parameters())
        fused = ' (fused)' if self.optimizer.defaults.get('fused') else ''
        if self.averaging is not None:
            fused += ' (schedule-free: validated and saved at its averaged weights)'
        kind = f'{self.train_opt["G_optimizer_type"]} ({type(self.optimizer).__name__})'
        if self.sam is not None:
            fused += (f'; sharpness-aware steps {self.train_opt["G_optimizer_sam"]} ({type(self.sam).__name__}, '
                      f'rho {self.sam.rho:g}): two forward-backward passes per step')
        if self.distill is not None:
            d = self.distill
            fused += (f'; distilled from {d.weights} ({d.net_type}, '
                      f'{sum(p.numel() for p in d.net.parameters()):,} parameters, sha256 {d.sha256[:12]})'
                      + (f', {len(d.pairs)} feature pair(s)' if d.pairs else ''))
        return f'network {type(self.net_g).__name__}: {n:,} parameters; optimizer {kind}{fused}'

    def to_device(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        """The batch on the device, uint8 images scaled to [0, 1] there: loaders pass images as uint8 (pinned
        on CUDA, so the copy overlaps the previous step), a quarter of the bytes of float32. Then the
        dataset's device-side transform, if its items name one (data/degradations/batch_transforms.py: Real-ESRGAN's
        degradations run here, on the device, in float32 whatever `train.amp` says), and the
        iteration's batch augmentation, if its items carry one (`train.use_moa`, data/batch_augment.py)."""
        nb = self.device.type == 'cuda'
        out = images_to_float({k: v.to(self.device, non_blocking=nb) if torch.is_tensor(v) else v
                               for k, v in batch.items()})
        out = batch_augment.apply(out)
        if self.channels_last:
            for k, v in out.items():
                if torch.is_tensor(v) and v.dim() == 4:
                    out[k] = v.contiguous(memory_format=torch.channels_last)
                elif torch.is_tensor(v) and v.dim() == 5 and not self._warned_5d:
                    self._warned_5d = True
                    get_logger().info(f'train.channels_last: 5-D (video) batch "{k}" left as it is; '
                                      f'only 4-D batches and 2-D conv weights use channels_last')
        return out

    def autocast(self) -> Any:
        """Mixed-precision context for the forward pass and loss (`train.amp`)."""
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def loss_terms(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """[G_lossfn_type's weighted loss, then each of G_extra_losses' weighted loss], one float32 vector."""
        return torch.stack([self.loss_fn(pred, target).float()]
                           + [loss(pred, target).float() for loss in self.extra_losses.values()])

    def pixel_losses(self) -> List[Tuple[str, nn.Module]]:
        """(the key that chose it, loss) of every pixel loss the G step computes, for the start-up check."""
        return ([(f'train.G_lossfn_type ({self.train_opt["G_lossfn_type"]})', self.loss_fn)]
                + [(f'train.G_extra_losses.{name}', loss) for name, loss in self.extra_losses.items()])

    def check_sample(self, sample: Dict[str, Any], where: str,
                     channels: Optional[str] = None) -> Tuple[torch.Tensor, Dict[str, Any]]:
        """Run one training sample through netG (no grad, eval mode) before anything is written.

        A network that cannot take the data (channel counts, `nc: 0`, a scale that differs from the
        dataset's) fails here with one line instead of at the first iteration, after the run
        folder, log and options were written; so does a pixel loss that cannot take netG's output
        (MS-SSIM below 161x161, an fft_patch_factor not dividing the patch). The random states are left
        as they were. Returns netG's output and the batch on the device, for models that check more
        networks on them. `channels` names the key that decides the data's channels, for the message.
        """
        against = channels_hint(where, channels)
        batch = {k: v.unsqueeze(0) if torch.is_tensor(v) else [v] for k, v in sample.items()}
        batch = self.to_device(batch)
        try:
            with self.probe(self.net_g), self.capturing():
                out = self.predict(self.net_g, batch)
        except NETWORK_FAILURES as e:
            keyed = channel_key_problem(self.opt['netG'], e, where, channels)
            if keyed is not None:
                raise UserError(keyed) from None
            shapes = ', '.join(f'{k} {tuple(v.shape[1:])}' for k, v in batch.items() if torch.is_tensor(v))
            raise UserError(f'netG ({self.opt["netG"]["net_type"]}) cannot take a sample of {where} ({shapes}): '
                            f'{failure_text(e)}' + (f' (check netG\'s channels against {against})' if channels else '')
                            ) from None
        target = batch['H']
        if out.shape != target.shape:
            raise UserError(f'netG ({self.opt["netG"]["net_type"]}) turns {where} input {tuple(batch["L"].shape[1:])} '
                            f'into {tuple(out.shape[1:])}, but the target H is {tuple(target.shape[1:])} '
                            f'(check netG\'s scale against "scale" and its channels against {against})')
        for key, loss in self.pixel_losses():
            try:
                with self.probe():
                    loss(out, target)
            except NETWORK_FAILURES as e:
                raise UserError(f'{key} cannot take netG\'s output {tuple(out.shape[1:])} for a sample of {where}: '
                                f'{failure_text(e)}') from None
        if self.distill is not None:
            try:
                with self.probe():
                    self.distill.check(out, batch, self.predict, where)
            except NETWORK_FAILURES as e:
                raise UserError(f'train.teacher ({self.distill.net_type}) cannot take a sample of {where}: '
                                f'{failure_text(e)}') from None
        return out, batch

    def check_test_sample(self, sample: Dict[str, Any], where: str) -> None:
        """The target frames of one test item scored against themselves by the restorer: what each metric of
        `val.metrics` needs of a frame (NIQE two 96x96 blocks, LPIPS its receptive field) is checked at
        start-up, not at the first validation hours into the run. PSNR/SSIM sizes are checked by the
        datasets; without metrics there is nothing more to check."""
        if not self.restorer.metrics:
            return
        bits = bit_depth(sample['H'])
        H = images_to_float({'H': sample['H']})['H']
        frames = [tensor2uint(f, bits) for f in (H if H.dim() == 4 else H[None])]
        try:
            self.restorer.score(frames, frames)
        except UserError as e:
            raise UserError(f'{where}: its first item cannot be scored: {e}') from None

    @contextlib.contextmanager
    def probe(self, *nets: nn.Module) -> Iterator[None]:
        """For start-up checks that must leave no trace: `nets` in eval mode (no BatchNorm statistics or
        spectral-norm vectors updated), no autograd, the random states restored after, under `train.amp`."""
        modes = [net.training for net in nets]
        for net in nets:
            net.eval()
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=[self.device] if self.device.type == 'cuda' else []):
                with self.autocast(), eager():
                    yield
        finally:
            for net, mode in zip(nets, modes):
                net.train(mode)

    def predict(self, net: nn.Module, batch: Dict[str, Any]) -> torch.Tensor:
        """`net`'s output for a training batch, the tensor the loss compares with batch['H']."""
        return net(*self.restorer_class.inputs(batch))

    def capturing(self) -> Any:
        """Around netG's training forward: the distillation's feature hooks keep what they see (else nothing)."""
        return self.distill.capture() if self.distill is not None else contextlib.nullcontext()

    def after_backward(self, step: int) -> None:
        """Hook between backward and the finiteness check (gradient edits such as freezing)."""

    @property
    def sync_every_micro_batch(self) -> bool:
        """Whether DDP all-reduces after each micro-batch instead of only the last one.

        `no_sync` is not supported under DDP's static graph (torch asserts at the first step, and
        with the assert bypassed gradients silently stop being all-reduced). Without it every
        micro-batch is all-reduced: rank-mean(g1) + rank-mean(g2) = rank-mean(g1 + g2), the same
        gradient at the cost of extra communication.
        """
        return self.ddp is not None and self.opt['use_static_graph'] and self.train_opt['accumulate_steps'] > 1

    def backward(self, batches: Sequence[Dict[str, Any]]) -> torch.Tensor:
        """Accumulate the gradients of the mean loss over `batches`; returns the loss, unsynced.

        With DDP, gradients are all-reduced on the last micro-batch only (`no_sync` before it),
        except under static graph (`sync_every_micro_batch`).

        With `G_optimizer_sam`, two passes over the same device batches (and the teacher's outputs, computed once):
        the first one's gradient, accumulated over every micro-batch and all-reduced like any gradient (so every
        rank takes the same perturbation, N ranks x b as 1 rank x N*b, and a non-finite first pass is non-finite
        on every rank), moves the weights once per optimizer step; the second pass accumulates the gradient there
        and the weights go back. The loss returned and logged is the first pass's, at the weights themselves.
        """
        self.net.train()
        self.optimizer.zero_grad(set_to_none=True)
        self._finalized = False
        step = self._iteration + 1
        self._sam_ran = self.sam is not None and self.sam.due(step)
        kept: Optional[List[Tuple[Dict[str, Any], Any]]] = [] if self._sam_ran else None
        total, terms = self._accumulate(batches, kept)
        if self._sam_ran:
            if self.scaler is not None:  # the perturbation is taken from true gradients
                self.scaler.unscale_(self._first_pass)
            self.after_backward(step)
            group = self.optimizer.param_groups[0]
            self.sam.perturb(group['lr'] / group['initial_lr'] if group.get('initial_lr') else 1.0)
            self.optimizer.zero_grad(set_to_none=True)
            self._second_loss, _ = self._accumulate(kept, None)
            self.sam.restore()
        self._iteration_terms = terms
        self._iteration_loss = total
        return total

    def _accumulate(self, batches: Sequence[Any], kept: Optional[List[Tuple[Dict[str, Any], Any]]]
                    ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """One forward-backward over the micro-batches: (their mean loss, its terms). `batches` are loader batches,
        or (device batch, teacher's output) pairs `kept` by a first pass (given a list, this pass fills it)."""
        n = len(batches)
        total = torch.zeros((), device=self.device)
        terms_total = torch.zeros_like(self._term_sums) if self._term_sums.numel() else None
        for i, item in enumerate(batches):
            sync = self.ddp is None or i == n - 1 or self.sync_every_micro_batch
            with contextlib.nullcontext() if sync else self.ddp.no_sync():
                with self.autocast():
                    batch, taught = (self.to_device(item), None) if isinstance(item, dict) else item
                    terms, taught = self._terms(batch, taught)
                    terms = terms / n
                    loss = terms.sum()
                (loss if self.scaler is None else self.scaler.scale(loss)).backward()
            if kept is not None:
                kept.append((batch, taught))
            total += loss.detach()
            if terms_total is not None:
                terms_total += terms.detach()
        if self.distill is not None:
            self.distill.reduce_gradients()
        return total, terms_total

    def _terms(self, batch: Dict[str, Any], taught: Any) -> Tuple[torch.Tensor, Any]:
        """(`loss_terms` of netG's output on a device batch, then the distillation's, the teacher's output): the
        teacher runs once per batch (`taught`: its output from an earlier pass over the batch)."""
        target = batch_transforms.target(batch, 'pixel')
        if self.distill is None:
            return self.loss_terms(self.predict(self.net, batch), target), None
        with self.distill.capture():
            pred = self.predict(self.net, batch)
        if taught is None:
            taught = self.distill.teach(batch, self.predict)
        return torch.cat([self.loss_terms(pred, target), self.distill.terms(pred, taught)]), taught

    def iteration_losses(self) -> Tuple[List[Optional[str]], torch.Tensor]:
        """`G_loss`, or with G_extra_losses or a teacher each term (`l_g_pix`, `l_g_<name>`, `l_g_distill`, ...), of
        the last backward's first pass."""
        if self._iteration_terms is not None:
            return [f'l_g_{name}' for name in self.term_names], self._iteration_terms
        return ['G_loss'], self._iteration_loss.reshape(1)

    def finalize_gradients(self, step: int, loss: torch.Tensor) -> torch.Tensor:
        """Make the gradients of `backward` final and say whether the step is sound (device bool).

        Under a GradScaler the gradients are unscaled here, so clipping and the norm see true
        values; an fp16 overflow is the scaler's business (it skips that update). Otherwise the
        step is unsound when the loss or the total gradient norm is not finite: a finite loss can
        still give inf/NaN gradients. The norm is computed once and reused for clipping; nothing
        here syncs with the host.
        """
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        self.after_backward(step)
        if self.sam is not None:
            self.sam.edit_gradients(step, self._sam_ran)
        self._finalized = True
        finite = torch.isfinite(loss)
        check_grads = self.train_opt['nan_policy'] != 'off' and self.scaler is None
        if self._sam_ran and check_grads:  # under a GradScaler an overflow of either pass is its business
            finite = finite & self.sam.first_pass_finite & torch.isfinite(self._second_loss)
        self._grad_norm = None
        if self.train_opt['G_optimizer_clipgrad'] or check_grads or (self.sam is not None and self.sam.STATE):
            self._grad_norm = torch.nn.utils.get_total_norm(self._grads())
            if check_grads:
                finite = finite & torch.isfinite(self._grad_norm)
        return finite

    def _grads(self) -> List[torch.Tensor]:
        """The gradients of what netG's optimizer trains (netG, and the distillation adapters)."""
        return [p.grad for g in self.optimizer.param_groups for p in g['params'] if p.grad is not None]

    def step(self, step: int, loss: torch.Tensor, applied: Optional[torch.Tensor] = None) -> None:
        """Apply the gradients of `backward`: clip, optimizer, scheduler, regularizers, EMA.

        `applied` (a device bool, the loop's non-finite verdict, the same on every rank; None: apply)
        gates the update where it can be gated on the device (fused optimizer, EMA, loss bookkeeping):
        a skipped step changes no weight, moment or average, while the schedule still advances so the
        learning rate keeps following the iteration count.
        """
        if not self._finalized:
            self.finalize_gradients(step, loss)
        clip = self.train_opt['G_optimizer_clipgrad']
        if clip:
            torch.nn.utils.clip_grads_with_norm_(self._grads(), clip, self._grad_norm)
        gated_step(self.optimizer, applied, self.scaler, self.host_verdict)
        if self.sam is not None:
            self._commit_sam(applied)
        self.scheduler.step()
        if regularizers_due(step, self.train_opt) and (applied is None or bool(applied)):
            apply_regularizers(self.net_g, step, self.train_opt)
        self.update_ema(step, applied)
        self._count_loss(loss, applied)

    def _commit_sam(self, applied: Optional[torch.Tensor]) -> None:
        """The sharpness-aware state of this step (F-SAM's average, LookSAM's reused part) is kept only where the step
        was applied and both passes were finite (an fp16 overflow the GradScaler skipped included): on the device."""
        ok: Optional[torch.Tensor] = None
        if self.sam.STATE:
            ok = torch.isfinite(self._grad_norm)
            if self._sam_ran:
                ok = ok & self.sam.first_pass_finite
            if applied is not None:
                ok = ok & applied
        self.sam.commit(ok)

    def _resume_sam(self, saved: Optional[Dict[str, Any]]) -> List[str]:
        """The sharpness-aware state of a checkpoint (notes where it cannot be used)."""
        name = self.train_opt['G_optimizer_sam']
        if self.sam is None and saved is not None:
            return [f'train.G_optimizer_sam: checkpoint {saved["method"]}, options null: plain '
                    f'{self.train_opt["G_optimizer_type"]} steps from here']
        if self.sam is None or not self.sam.STATE:
            return []
        if saved is None or saved['method'] != name:
            was = 'none' if saved is None else saved['method']
            return [f'train.G_optimizer_sam: checkpoint {was}, options {name}: its state starts afresh']
        note = self.sam.load_state_dict(saved['state'])
        return [note] if note else []

    def update_ema(self, step: int, applied: Optional[torch.Tensor]) -> None:
        """The EMA's update of iteration `step` (its decay ramps over `E_warmup_iter`; a schedule-free optimizer's
        averaged weights are what it averages), then `E_switch_iter`'s copy of the average into netG."""
        if self.ema is None:
            return
        self.ema.update(self.net_g, applied, step, self.averaging.averaged if self.averaging is not None else None)
        switch = self.train_opt['E_switch_iter']
        if switch and step % switch == 0:
            self.ema.copy_to(self.net_g)

    def averagings(self) -> List[Averaging]:
        """The schedule-free optimizers' `Averaging`s (G's; a GAN adds D's)."""
        return [self.averaging] if self.averaging is not None else []

    @contextlib.contextmanager
    def eval_weights(self) -> Iterator[None]:
        """Every network at its evaluation weights inside (a schedule-free optimizer's average), at its training
        weights after: around validation and every checkpoint written, on every rank. Nothing without one."""
        switched = [a for a in self.averagings() if a.training]
        for a in switched:
            a.eval()
        try:
            yield
        finally:
            for a in switched:
                a.train()

    def lr_schedule(self, iterations: Sequence[int]) -> List[float]:
        """The lr the schedule gives the first parameter group at each of `iterations` (curves.png's plan)."""
        return self.scheduler.planned(iterations)

    def lr_phases(self) -> List[int]:
        return self.scheduler.phases()

    def _count_loss(self, loss: torch.Tensor, applied: Optional[torch.Tensor]) -> None:
        """Add an applied step's loss to the sums `log_losses` reads (on the device)."""
        terms = self._iteration_terms
        if applied is None:
            self._loss_sum += loss
            self._loss_steps += 1
            if terms is not None:
                self._term_sums += terms
        else:
            self._loss_sum += torch.where(applied, loss, torch.zeros_like(loss))
            self._loss_steps += applied
            if terms is not None:
                self._term_sums += torch.where(applied, terms, torch.zeros_like(terms))

    def log_losses(self) -> Dict[str, float]:
        """Mean loss of the applied steps since the last call, averaged over ranks (one host read); with
        G_extra_losses or a teacher also each term: `l_g_pix` (G_lossfn_type's), `l_g_<name>`, `l_g_distill` and
        `l_g_distill_feat`."""
        t = torch.cat([torch.stack([self._loss_sum, self._loss_steps]), self._term_sums])
        dist.all_reduce_sum(t)
        self._loss_sum.zero_()
        self._loss_steps.zero_()
        self._term_sums.zero_()
        total, steps, *terms = t.tolist()
        out = {'G_loss': total / steps if steps else float('nan')}
        if terms:
            for name, value in zip(self.term_names, terms):
                out[f'l_g_{name}'] = value / steps if steps else float('nan')
        return out

    def current_lr(self) -> float:
        return self.optimizer.param_groups[0]['lr']

    def networks(self) -> List[nn.Module]:
        """Every trained network whose parameters must stay identical across ranks (netG, its EMA, the distillation
        adapters)."""
        adapters = [self.distill.adapters] if self.distill is not None and self.distill.pairs else []
        return [self.net_g] + ([self.ema.module] if self.ema is not None else []) + adapters

    @property
    def eval_net(self) -> nn.Module:
        """The network used for testing: EMA weights when enabled (KAIR's netE), else netG."""
        return self.ema.module if self.ema is not None else self.net_g

    def validate(self, loader: Iterable[Dict[str, Any]], num_items: int, *, score_input: bool = False,
                 num_previews: int = 0, write_item: Optional[WriteItem] = None) -> Evaluation:
        """The current eval network (EMA or netG) through the one evaluation loop (models/evaluation.py).

        A collective: every rank must call it.
        """
        self.sync_eval_buffers()
        with eager():  # regionally compiled blocks of netG would recompile for every image size
            return evaluate(self.restorer, loader, num_items, score_input=score_input, num_previews=num_previews,
                            write_item=write_item)

    def sync_eval_buffers(self) -> None:
        """Rank 0's buffers (BatchNorm running statistics) in the EMA copy, and in netG when DDP
        broadcasts buffers, on every rank.

        Each rank's BatchNorm takes its last steps on its own data after DDP's broadcast, and the EMA
        copies those statistics; without this, ranks would validate (and merge_bn fold) slightly
        different networks than the one rank 0 saves. netG's buffers are overwritten by DDP at the
        next forward anyway; with `broadcast_buffers: false` they stay each rank's own.
        """
        buffers = list(self.ema.module.buffers()) if self.ema is not None else []
        if self.opt['broadcast_buffers']:
            buffers += list(self.net_g.buffers())
        dist.broadcast_tensors(buffers)

    def state_files(self) -> Dict[str, Any]:
        """KAIR-compatible weight files; the training state is assembled by the loop."""
        files: Dict[str, Any] = {'G': self.net_g.state_dict()}
        if self.ema is not None:
            files['E'] = self.ema.module.state_dict()
        return files

    def weights_finite(self) -> bool:
        """Whether every floating-point weight of netG (and of the EMA copy) is finite: one host sync."""
        tensors = [t for files in self.state_files().values() for t in files.values()
                   if torch.is_tensor(t) and t.is_floating_point()]
        return bool(torch.stack([torch.isfinite(t).all() for t in tensors]).all()) if tensors else True

    def training_state(self) -> Dict[str, Any]:
        state = {'optimizer': self.optimizer.state_dict(), 'scheduler': self.scheduler.state_dict(),
                 'optimizer_type': self.train_opt['G_optimizer_type'], 'bn_merged': self.bn_merged}
        if self.scaler is not None:
            state['grad_scaler'] = self.scaler.state_dict()
        if self.sam is not None:
            state['sam'] = {'method': self.train_opt['G_optimizer_sam'], 'state': self.sam.state_dict()}
        if self.distill is not None:
            state['distill'] = self.distill.state_dict()  # the teacher's file and digest, the adapters
        return state

    def load_state(self, weights: Dict[str, Any], training: Dict[str, Any]) -> None:
        """Restore a checkpoint written by `state_files`/`training_state` (before training resumes).

        Weights, optimizer moments and the schedule position come from the checkpoint; every
        hyperparameter comes from the options. Each value that differs is logged with the winner.
        """
        log = get_logger()
        if self.distill is not None:  # first: another teacher is refused before anything is loaded
            self.distill.load_state_dict(training['distill'] if 'distill' in training else None)
        elif 'distill' in training:
            log.warning(f'resume: the checkpoint was distilled from {training["distill"]["teacher"]["weights"]}; '
                        f'train.teacher is null now: training goes on without a teacher')
        # checkpoints written before merge_bn existed lack the flag: their BatchNorm was never folded
        if 'bn_merged' in training and training['bn_merged'] and not self.bn_merged:
            if self.merge_bn_at is None:
                raise UserError('resume: the checkpoint was written after merge_bn folded netG\'s BatchNorm; keep '
                                '"merge_bn": true to resume it, or start a new task or use --fresh')
            self.merge_batchnorm()
        load_resume_weights(self.net_g, weights['G'], 'G', self.opt['netG']['net_type'])
        if self.ema is not None:
            if 'E' in weights:
                load_resume_weights(self.ema.module, weights['E'], 'E', self.opt['netG']['net_type'])
            else:
                self.ema.module.load_state_dict(weights['G'])
                log.warning('resume: the checkpoint has no EMA weights (_E.pth); train.E_decay > 0 now, so '
                            'the EMA starts from the resumed netG weights')
        t = self.train_opt
        # checkpoints written before the optimizer type was recorded lack it: None, type unknown
        saved_type = training['optimizer_type'] if 'optimizer_type' in training else None
        notes = resume_optimizer(self.optimizer, training['optimizer'], t['G_optimizer_reuse'],
                                 saved_type, t['G_optimizer_type'], 'G', refreshed_group_keys(t, 'G'))
        if self.averaging is not None and not self.averaging.training:
            self.averaging.train()  # saved at the averaged weights: back to the training point, as after the save
        notes += self.scheduler.differences(training['scheduler'])
        self.scheduler.load_state_dict(training['scheduler'])
        notes += self._resume_sam(training['sam'] if 'sam' in training else None)
        for note in notes:
            log.warning(f'resume: {note}')
        if self.scaler is not None:
            if 'grad_scaler' in training:
                self.scaler.load_state_dict(training['grad_scaler'])
            else:
                log.info('resume: the checkpoint has no GradScaler state (trained without fp16); '
                         'loss scaling starts afresh')


class _FirstPass:
    """netG's optimizer under another name for the GradScaler: `unscale_` of the sharpness-aware step's first pass
    (the second is the optimizer's own) records that pass's overflow, which backs the scale off at the update."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.param_groups = optimizer.param_groups


def load_resume_weights(net: nn.Module, state: Dict[str, Any], kind: str, net_type: str) -> None:
    """load_state_dict(strict) for a resume: a checkpoint of another network is a user error, not a traceback."""
    try:
        net.load_state_dict(state)
    except RuntimeError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        raise UserError(f'resume: the checkpoint\'s {kind} weights do not fit netG ({net_type}) as the options '
                        f'build it (were netG options changed?): {" ".join(lines[1:3])[:300]}; start a new task '
                        f'or use --fresh') from None
