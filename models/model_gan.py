"""KAIR's `gan`: a generator trained with pixel, perceptual and adversarial losses against a discriminator.

Each iteration, as in KAIR: a G step (every `D_update_ratio` iterations after `D_init_iters`) with D
frozen, then a D step on the ground truth and on the detached output. Both networks are in DDP,
each all-reducing its own gradients:
- the G step calls the bare D (not its DDP wrapper): D's parameters are frozen and get no
  gradients, so there is nothing of D's to reduce and no unused-parameter error;
- the D step runs the DDP-wrapped D, one forward and backward on real, one on fake (two forwards
  before one backward are not allowed under DDP); only the last backward of an iteration
  all-reduces (`no_sync` before it), which sums the same gradients. D is never wrapped with
  `static_graph` (two backward passes per iteration), whatever `use_static_graph` says for G;
- on iterations without a G step the output is computed without autograd on the bare G.
BatchNorm/spectral-norm buffers of D follow DDP's `broadcast_buffers` (rank 0's at every D forward);
spectral norm's power iteration depends only on the (identical) weights. With fp16, G and D each
have their own GradScaler. Checkpoints add `{iter}_D.pth` and D's optimizer and schedule.
Relativistic ("ragan") and BatchNorm discriminators compare within each process's batch, so N
processes x batch b differ from one process x batch N*b there, as in every DDP GAN trainer.

Beyond KAIR: `G_extra_losses` (added to the pixel loss, as in ModelPlain), LDL's artifact loss
(`ldl_weight`, losses/ldl.py: the EMA generator's output under no_grad is its reference), the hinge loss
(`gan_type: "hinge"`), pix2pixHD's multi-scale discrimination (`D_num_scales`: independent copies of
netD on the image average-pooled 0, 1, 2, ... times, the adversarial losses averaged over the copies; all
copies are one module, one DDP and one `_D.pth`; with 1, netD is the bare network as before), and
traiNNer-redux's adaptive discriminator updates (`D_adaptive`, see `_adaptive_d_step`), and distillation from a teacher
(`train.teacher`, models/distill.py: its losses join G's). Sharpness-aware steps (`G_optimizer_sam`) are refused.
"""
import contextlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from data.degradations import batch_transforms
from losses.adversarial import GANLoss
from losses.ldl import ldl_loss
from losses.perceptual import RANDOM_VGG, PerceptualLoss, default_vgg19_path
from models.checkpoint_state import load_resume_weights, resume_scaler, resume_schedule
from models.loss_meter import LossMeter
from models.model_plain import ModelPlain
from models.network_loading import build_checked_network, load_weights
from models.networks.layers.init import init_weights
from models.optim import OPTIMIZERS, Averaging, averaging, build_optimizer, gated_step
from models.registry import MODELS
from models.schedules import SCHEDULERS, build_scheduler
from models.startup_checks import NETWORK_FAILURES, channels_hint, failure_text, probe
from utils import dist
from utils.errors import UserError
from utils.logger import get_logger
from utils.options.foreign import REDUX, Foreign, Refusal
from utils.options import Choice, Key, at_least, learning_rate, non_negative, one_of, unit_interval
from utils.oom import is_out_of_memory


def downscaled(x: torch.Tensor, times: int) -> torch.Tensor:
    """`x` average-pooled `times` times by a 3x3 window with stride 2, padding not counted (pix2pixHD)."""
    for _ in range(times):
        x = F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)
    return x


class MultiScaleDiscriminator(nn.Module):
    """pix2pixHD's multi-scale discriminator (Wang et al., CVPR 2018): copy k judges the image downscaled
    k times (`downscaled`), so the coarse copies see global structure with the same receptive field.
    Returns the list of the copies' outputs, finest first."""

    def __init__(self, copies: Sequence[nn.Module]):
        super().__init__()
        self.scales = nn.ModuleList(copies)

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        out = []
        for k, net in enumerate(self.scales):
            if k:
                x = downscaled(x, 1)
            out.append(net(x))
        return out


# slots of the loss sums (ModelGAN's loss_meter): pixel, perceptual, adversarial (G steps), D loss, D(real), D(fake),
# G steps, D steps, LDL, D steps skipped by D_adaptive, then each of G_extra_losses
_ADV, _G_STEPS, _D_STEPS, _D_SKIPPED, _EXTRAS = 2, 6, 7, 9, 10


def _mean(values: List[torch.Tensor]) -> torch.Tensor:
    """The mean over discriminator scales; one scale is itself, unchanged to the bit."""
    return values[0] if len(values) == 1 else sum(values) / len(values)


def _relativistic(gan_type: str) -> str:
    """BasicSR's ESRGANModel: its adversarial loss is relativistic average (ESRGAN's), on the GAN loss it names."""
    if gan_type != 'gan':
        raise Refusal('ESRGANModel\'s relativistic loss is offered here on the vanilla GAN loss only (gan_type ragan)')
    return 'ragan'


# BasicSR's GAN model classes; ESRGANModel's adversarial loss is relativistic
FOREIGN_NAMES = [Foreign('SRGANModel'), Foreign('RealESRGANModel'), Foreign('ESRGANModel', convert={'gan_type': _relativistic}),
                 Foreign('RealESRGANModel', REDUX)]


@MODELS.register('gan', foreign=FOREIGN_NAMES)
class ModelGAN(ModelPlain):
    """KAIR's `gan`: a generator trained with pixel, perceptual and adversarial losses against a discriminator.

    ModelPlain's netG, EMA, distillation and checkpoints, with netD's own optimizer, schedule, GradScaler and
    loss sums (see the module docstring)."""

    # train keys of this model beside ModelPlain's (KAIR's names and defaults), the perceptual and adversarial
    # losses' own (losses/), and those of the optimizer and schedule D_optimizer_type / D_scheduler_type choose
    TRAIN_OPTIONS: Dict[str, Any] = {
        **ModelPlain.TRAIN_OPTIONS,
        **PerceptualLoss.OPTIONS,
        'F_lossfn_weight': Key(1.0, (int, float), non_negative, 'weight of the VGG perceptual loss (0: none)'),
        **GANLoss.OPTIONS,
        'D_lossfn_weight': Key(0.1, (int, float), non_negative, 'weight of the adversarial loss in netG\'s total'),
        'D_update_ratio': Key(1, (int,), at_least(1), 'netG is updated every this many iterations'),
        'D_init_iters': Key(0, (int,), non_negative, 'iterations that train netD alone first'),
        'D_optimizer_type': Key('adam', (str,), help='netD\'s optimizer: a name of models/optim.py'),
        'D_optimizer_lr': Key(1e-4, (int, float), learning_rate, 'netD\'s learning rate'),
        'D_optimizer_reuse': Key(True, (bool,), help='on resume, load netD\'s saved optimizer state'),
        'D_scheduler_type': Key('MultiStepLR', (str, type(None)), help='netD\'s learning-rate schedule (null: '
                                                                       'constant)'),
        'D_scheduler_warmup_iter': Key(0, (int,), non_negative, 'linear warm-up of netD\'s learning rate'),
        'D_param_strict': Key(True, (bool,), help='path.pretrained_netD must match netD key for key'),
        'D_param_key': Key('params', (str,), one_of('params', 'params_ema'),
                           help='the entry of a BasicSR-format file (params, or params_ema: its EMA weights) that '
                                'path.pretrained_netD loads (the other where it lacks it; a bare state_dict as it is)'),
        # pix2pixHD's multi-scale discrimination: copies of netD
        'D_num_scales': Key(1, (int,), at_least(1), 'copies of netD, copy k judging the image halved k times '
                                                     '(pix2pixHD)'),
        # LDL's artifact loss (Liang et al. 2022); 0: off
        'ldl_weight': Key(0.0, (int, float), non_negative, 'weight of LDL\'s artifact loss (needs E_decay > 0); '
                                                           '0: off'),
        # traiNNer-redux's adaptive_d: D's step is skipped while G's smoothed adversarial loss rises too fast
        'D_adaptive': Key(False, (bool,), help='skip netD\'s step while netG\'s smoothed adversarial loss rises '
                                               'faster than D_adaptive_threshold (traiNNer-redux\'s adaptive_d)'),
        'D_adaptive_decay': Key(0.999, (int, float), unit_interval, 'smoothing (EMA decay) of netG\'s adversarial '
                                                                    'loss for D_adaptive'),
        'D_adaptive_threshold': Key(1.02, (int, float), at_least(1),
                                    'a rise of the smoothed loss by more than this factor in one iteration skips '
                                    'that iteration\'s netD step'),
    }
    CHOICES: Dict[str, Choice] = {**ModelPlain.CHOICES, 'D_optimizer_type': Choice(OPTIMIZERS, 'D_optimizer_'),
                                  'D_scheduler_type': Choice(SCHEDULERS, 'D_scheduler_')}
    PATH_OPTIONS: Dict[str, Any] = {**ModelPlain.PATH_OPTIONS, 'pretrained_netD': Key(
        None, (str, type(None)), help='weights netD starts from (null: initialised)')}
    HAS_NETD = True  # the options need a `netD` section

    def __init__(self, opt: Dict[str, Any], device: torch.device, allow_unsafe_load: bool = False):
        t = opt['train']
        if t['G_optimizer_sam'] is not None:
            raise UserError(f'train.G_optimizer_sam: {t["G_optimizer_sam"]} is not available with model "gan" (its G '
                            f'step runs with the discriminator, whose step follows it); the models with one loss '
                            f'pass (plain, plain2, plain4, vrt, ...) take it; set it to null')
        if t['ldl_weight'] > 0 and t['E_decay'] <= 0:
            raise UserError(f'train.ldl_weight: {t["ldl_weight"]} needs the EMA generator (LDL compares netG\'s '
                            f'residual with its EMA copy\'s): set train.E_decay > 0 (e.g. 0.999), or ldl_weight to 0')
        netD = opt['netD']
        copies = []
        for _ in range(t['D_num_scales']):
            copies.append(build_checked_network(netD, 'netD'))
            init_weights(copies[-1], netD['init_type'], netD['init_bn_type'], netD['init_gain'])
        self.multi_scale = len(copies) > 1
        net_d = MultiScaleDiscriminator(copies) if self.multi_scale else copies[0]
        if opt['path']['pretrained_netD']:
            load_weights(net_d, opt['path']['pretrained_netD'], t['D_param_strict'], t['D_param_key'],
                         'path.pretrained_netD', allow_unsafe_load)
        self.perceptual: Optional[PerceptualLoss] = None
        if t['F_lossfn_weight'] > 0:
            vgg = t['F_pretrained_path'] or default_vgg19_path()
            self.perceptual = PerceptualLoss(t['F_feature_layer'], t['F_weights'], t['F_lossfn_type'],
                                             t['F_use_input_norm'], t['F_use_range_norm'], vgg).to(device)
            if vgg == RANDOM_VGG:
                get_logger().warning('train.F_pretrained_path is "random": the perceptual loss uses a randomly '
                                     'initialised VGG19: a smoke run, not a perceptual loss (real training needs '
                                     'torchvision\'s vgg19-dcbb9e9d.pth, see docs/training.md)')
        super().__init__(opt, device, allow_unsafe_load)
        self.net_d = net_d.to(device)
        self.net_D = dist.wrap_ddp(self.net_d, opt, device, static_graph=False)  # two backward passes per iteration
        self.ddp_d = dist.ddp_of(self.net_D)
        self.gan_loss = GANLoss(t['gan_type'])
        self.optimizer_d = build_optimizer([p for p in self.net_d.parameters() if p.requires_grad], t, 'D', device)
        self.scheduler_d = build_scheduler(self.optimizer_d, t, 'D')
        self.averaging_d: Optional[Averaging] = averaging(self.optimizer_d)
        self.scaler_d = torch.amp.GradScaler(device.type) if self.scaler is not None else None
        self._update_g = True
        self._d_loss = torch.zeros((), device=device)
        # sums since the last log over the applied iterations, by the slots above (then the distillation terms)
        self._distill_names = self.distill.names() if self.distill is not None else []
        self.loss_meter = LossMeter(_EXTRAS + len(self.extra_losses) + len(self._distill_names), device)
        self._iteration_parts = torch.zeros_like(self.loss_meter.sums)
        # D_adaptive: [smoothed adversarial loss of G, whether it holds a value yet], on the device
        self._adaptive = torch.zeros(2, device=device)

    def check_sample(self, sample: Dict[str, Any], where: str,
                     channels: Optional[str] = None) -> Tuple[torch.Tensor, Dict[str, Any]]:
        """netG's check (see ModelPlain), then netD and the perceptual loss on its output: a netD that does not
        fit the data (`in_nc`, a patch size a VGG-style netD cannot take) or a perceptual loss that cannot
        take the images is one line at start-up, before anything is written, not a traceback at iteration 1."""
        out, batch = super().check_sample(sample, where, channels)
        shape = tuple(out.shape[1:])
        copies = list(self.net_d.scales) if self.multi_scale else [self.net_d]
        for k, net in enumerate(copies):
            x = downscaled(out, k)
            seen = f' average-pooled {k} time(s) to {tuple(x.shape[2:])} (copy {k} of train.D_num_scales ' \
                   f'{len(copies)})' if k else ''
            try:
                with probe([net], self.device, self.amp_dtype):
                    net(x)
            except (*NETWORK_FAILURES, UserError) as e:
                if is_out_of_memory(e):  # not the data's or the options' fault: its own line and exit code
                    raise
                hint = '' if isinstance(e, UserError) else f' (check netD.in_nc against {channels_hint(where, channels)})'
                raise UserError(f'netD ({self.opt["netD"]["net_type"]}) cannot take netG\'s output {shape}{seen} '
                                f'for a sample of {where}: {failure_text(e)}{hint}') from None
        if self.perceptual is not None:
            try:
                with probe([self.perceptual], self.device, self.amp_dtype):
                    self.perceptual(out, batch['H'])
            except NETWORK_FAILURES as e:
                if is_out_of_memory(e):  # not the data's or the options' fault: its own line and exit code
                    raise
                hint = (' (VGG19 takes 3 channels: gray images get them from F_use_input_norm true, whose '
                        'normalisation broadcasts them, as in KAIR; else set F_lossfn_weight to 0)' if shape[0] != 3
                        else '')
                raise UserError(f'train.F_lossfn_weight: the VGG19 perceptual loss cannot take netG\'s output {shape} '
                                f'for a sample of {where}: {failure_text(e)}{hint}') from None
        return out, batch

    def network_info(self) -> str:
        """ModelPlain's line and the discriminator's kind and size."""
        n_d = sum(p.numel() for p in self.net_d.parameters())
        kind = (f'{len(self.net_d.scales)} x {type(self.net_d.scales[0]).__name__} (train.D_num_scales)'
                if self.multi_scale else type(self.net_d).__name__)
        return f'{super().network_info()}; discriminator {kind}: {n_d:,} parameters'

    def pixel_losses(self) -> List[Tuple[str, nn.Module]]:
        """ModelPlain's, without G_lossfn_type's when its weight is 0 (the G step does not compute it)."""
        losses = super().pixel_losses()
        return losses if self.train_opt['G_lossfn_weight'] > 0 else losses[1:]  # weight 0: not computed

    def _d(self, net: nn.Module, x: torch.Tensor) -> List[torch.Tensor]:
        """D's outputs on `x`, one per scale (the bare or DDP-wrapped `net`)."""
        return net(x) if self.multi_scale else [net(x)]

    def networks(self) -> List[nn.Module]:
        """ModelPlain's and netD: every rank's copy must stay the same."""
        return super().networks() + [self.net_d]

    def _g_step_due(self) -> bool:
        """KAIR: G is updated on iterations divisible by D_update_ratio, after D_init_iters."""
        step, t = self.iteration + 1, self.train_opt
        return step % t['D_update_ratio'] == 0 and step > t['D_init_iters']

    def _set_d_trainable(self, trainable: bool) -> None:
        for p in self.net_d.parameters():
            p.requires_grad_(trainable)

    def backward(self, batches: Sequence[Dict[str, Any]]) -> torch.Tensor:
        """G step (if due) then D step on each micro-batch; returns the G loss (0 without a G step)."""
        self._update_g = self._g_step_due()
        self.net.train()
        self.net_D.train()
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer_d.zero_grad(set_to_none=True)
        self.gradients_final = False
        n = len(batches)
        total_g = torch.zeros((), device=self.device)
        total_d = torch.zeros((), device=self.device)
        parts = torch.zeros_like(self.loss_meter.sums)
        for i, batch in enumerate(batches):
            batch = self.to_device(batch)
            last = i == n - 1
            if self._update_g:
                sync = self.ddp is None or last or self.sync_every_micro_batch
                with contextlib.nullcontext() if sync else self.ddp.no_sync():
                    with self.autocast():
                        with self.capturing():
                            E = self.predict(self.net, batch)
                        E_ema = None
                        if self.train_opt['ldl_weight'] > 0:
                            with torch.no_grad():
                                E_ema = self.predict(self.ema.module, batch)
                        loss_g = self._generator_loss(E, batch, parts, n, E_ema)
                    (loss_g if self.scaler is None else self.scaler.scale(loss_g)).backward()
                total_g += loss_g.detach()
                parts[6] += 1.0 / n
            else:
                with torch.no_grad(), self.autocast():
                    E = self.predict(self.net_g, batch)
            total_d += self._discriminator_backward(E.detach(), batch_transforms.target(batch, 'gan'), n, last, parts)
        if self._update_g and self.distill is not None:
            self.distill.reduce_gradients()
        parts[7] += 1.0
        self._iteration_parts = parts  # into the log's sums when the step is applied (`step`)
        self._d_loss = total_d
        return total_g

    def _generator_loss(self, E: torch.Tensor, batch: Dict[str, Any], parts: torch.Tensor, n: int,
                        E_ema: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Pixel (+ extra) + perceptual + LDL + adversarial loss of one of `n` micro-batches, divided by n (the
        iteration's loss is their mean), with D frozen and unwrapped; `parts` sums the divided terms for the
        log. `E_ema`: the EMA generator's output, LDL's reference (when ldl_weight > 0). Each loss compares
        with its own target (data/degradations/batch_transforms.py: H, or e.g. Real-ESRGAN's sharpened H; the extra
        pixel losses take the pixel loss's). LDL compares with the plain H, as LDL's Real-ESRGAN+LDL model does:
        its artifact map finds where the output strays from the real image, not from a sharpened one."""
        H = batch_transforms.target(batch, 'pixel')
        t = self.train_opt
        loss = E.new_zeros((), dtype=torch.float32)
        if t['G_lossfn_weight'] > 0:
            pix = self.loss_fn(E, H).float() / n
            loss = loss + pix
            parts[0] += pix.detach()
        for k, extra in enumerate(self.extra_losses.values()):
            term = extra(E, H).float() / n
            loss = loss + term
            parts[_EXTRAS + k] += term.detach()
        if self.perceptual is not None:
            percep = t['F_lossfn_weight'] * self.perceptual(E, batch_transforms.target(batch, 'perceptual')).float() / n
            loss = loss + percep
            parts[1] += percep.detach()
        if E_ema is not None:
            ldl = t['ldl_weight'] * ldl_loss(E, E_ema, batch['H']) / n
            loss = loss + ldl
            parts[8] += ldl.detach()
        if self.distill is not None:  # the teacher's output and features for the same (augmented) batch
            taught = self.distill.terms(E, self.distill.teach(batch, self.predict)) / n
            loss = loss + taught.sum()
            parts[_EXTRAS + len(self.extra_losses):] += taught.detach()
        self._set_d_trainable(False)
        try:
            pred_fake = self._d(self.net_d, E)
            if t['gan_type'] == 'ragan':
                pred_real = [p.detach() for p in self._d(self.net_d, batch_transforms.target(batch, 'gan'))]
                adv = _mean([(self.gan_loss(r - f.mean(0, keepdim=True), False)
                              + self.gan_loss(f - r.mean(0, keepdim=True), True)) / 2
                             for f, r in zip(pred_fake, pred_real)])
            else:
                adv = _mean([self.gan_loss(f, True) for f in pred_fake])
        finally:
            self._set_d_trainable(True)
        adv = t['D_lossfn_weight'] * adv / n
        parts[2] += adv.detach()
        return loss + adv

    def _discriminator_backward(self, fake: torch.Tensor, real: torch.Tensor, n: int, last: bool,
                                parts: torch.Tensor) -> torch.Tensor:
        """Real then fake through the DDP-wrapped D, each with its backward; returns D's loss (the mean over
        D's scales, as are the logged D(real) and D(fake))."""
        ragan = self.train_opt['gan_type'] == 'ragan'
        ref_fake: List[torch.Tensor] = []
        if ragan:  # the relativistic baseline: a constant, computed outside DDP
            with torch.no_grad(), self.autocast():
                ref_fake = [p.float().mean(0, keepdim=True) for p in self._d(self.net_d, fake)]
        total = torch.zeros((), device=self.device)
        pred_real_mean: List[torch.Tensor] = []
        for which in ('real', 'fake'):
            sync = self.ddp_d is None or (last and which == 'fake')
            with contextlib.nullcontext() if sync else self.ddp_d.no_sync():
                with self.autocast():
                    preds = [p.float() for p in self._d(self.net_D, real if which == 'real' else fake)]
                    if ragan:
                        baselines = ref_fake if which == 'real' else pred_real_mean
                        loss = _mean([0.5 * self.gan_loss(p - b, which == 'real') for p, b in zip(preds, baselines)])
                    else:
                        loss = _mean([self.gan_loss(p, which == 'real', is_disc=True) for p in preds])
                    loss = loss / n
                (loss if self.scaler_d is None else self.scaler_d.scale(loss)).backward()
            if which == 'real':
                pred_real_mean = [p.detach().mean(0, keepdim=True) for p in preds]
            parts[4 if which == 'real' else 5] += _mean([p.detach().mean() for p in preds]) / n
            total += loss.detach()
        parts[3] += total
        return total

    def finalize_gradients(self, step: int, loss: torch.Tensor) -> torch.Tensor:
        """G's checks (when G stepped) and D's: the loss and gradient norm must be finite."""
        if self._update_g:
            finite = super().finalize_gradients(step, loss)
        else:
            self.gradients_final = True
            finite = torch.isfinite(loss)
        if self.scaler_d is not None:
            self.scaler_d.unscale_(self.optimizer_d)
        finite = finite & torch.isfinite(self._d_loss)
        if self.train_opt['nan_policy'] != 'off' and self.scaler_d is None:
            grads = [p.grad for p in self.net_d.parameters() if p.grad is not None]
            finite = finite & torch.isfinite(torch.nn.utils.get_total_norm(grads))
        return finite

    def step(self, step: int, loss: torch.Tensor, applied: Optional[torch.Tensor] = None) -> None:
        """G's step (when due) and D's, both gated by `applied` (see ModelPlain.step); D's also by `D_adaptive`."""
        if not self.gradients_final:
            self.finalize_gradients(step, loss)
        if self._update_g:
            self.update_generator(step, loss, applied)
        else:  # nothing to apply to G; its schedule and EMA follow the iteration as in KAIR
            self.scheduler.step()
            self.update_ema(step, applied)
        d_applied, host_verdict = applied, self.host_verdict
        if self.train_opt['D_adaptive'] and self._update_g:
            d_go = self._adaptive_d_step(applied)
            d_applied = d_go if applied is None else applied & d_go
            host_verdict = True  # a skip decided by D_adaptive must be honoured, whatever nan_policy says
        gated_step(self.optimizer_d, d_applied, self.scaler_d, host_verdict)
        self.scheduler_d.step()
        self.loss_meter.add(self._iteration_parts, applied)

    def _adaptive_d_step(self, applied: Optional[torch.Tensor]) -> torch.Tensor:
        """`D_adaptive` (traiNNer-redux's adaptive_d): whether D steps this iteration, a device bool, the same on
        every rank. G's adversarial loss of the iteration (its mean over the ranks: one all-reduce, so N ranks x b
        decide as 1 rank x N*b) updates a moving average (decay `D_adaptive_decay`); D's step is skipped when the
        average rose by more than the factor `D_adaptive_threshold` (a rise beyond (threshold - 1) x |average|, so
        that losses below zero, the hinge loss's, are judged alike): G is falling behind D. Unlike traiNNer-redux,
        the average starts at the first value instead of 0, which skipped D for the first ~50 iterations there.
        A step not applied (non-finite) leaves the average as it was. Device operations only."""
        adv = self._iteration_parts[_ADV].clone()
        world = dist.get_world_size()
        if world > 1:
            dist.all_reduce_sum(adv)
            adv /= world
        t = self.train_opt
        decay, rise = float(t['D_adaptive_decay']), float(t['D_adaptive_threshold']) - 1.0
        average, seen = self._adaptive[0], self._adaptive[1] > 0
        new = torch.where(seen, decay * average + (1.0 - decay) * adv, adv)
        skip = seen & (new - average > rise * average.abs())
        state = torch.stack([new, torch.ones_like(new)])
        self._adaptive.copy_(state if applied is None else torch.where(applied, state, self._adaptive))
        self._iteration_parts[_D_SKIPPED] = skip.to(self._iteration_parts.dtype)
        return ~skip

    def averagings(self) -> List[Averaging]:
        """G's schedule-free averaging and D's (D_optimizer_type may be schedule-free too)."""
        return super().averagings() + ([self.averaging_d] if self.averaging_d is not None else [])

    def iteration_losses(self) -> Tuple[List[Optional[str]], torch.Tensor]:
        """G's pixel, perceptual, adversarial, LDL, extra and distillation terms and D's loss of the last backward
        (the slots of `_iteration_parts`; D's mean outputs and the step counts are no losses)."""
        names: List[Optional[str]] = ['l_g_pix', 'l_g_percep', 'l_g_gan', 'D_loss', None, None, None, None, 'l_g_ldl',
                                      None]
        return (names + [f'l_g_{name}' for name in (*self.extra_losses, *self._distill_names)],
                self._iteration_parts)

    def log_losses(self) -> Dict[str, float]:
        """KAIR's log: G's losses (means over G steps), D's loss and mean outputs (over D steps); with D_adaptive,
        `D_skipped`: the share of the iterations whose D step it skipped."""
        pix, percep, adv, d_loss, d_real, d_fake, g_steps, d_steps, ldl, d_skipped, *extras = self.loss_meter.take()
        out = {}
        if g_steps:
            out.update(G_loss=(pix + percep + adv + ldl + sum(extras)) / g_steps, l_g_pix=pix / g_steps,
                       l_g_percep=percep / g_steps, l_g_gan=adv / g_steps)
            if self.train_opt['ldl_weight'] > 0:
                out['l_g_ldl'] = ldl / g_steps
            out.update({f'l_g_{name}': value / g_steps
                        for name, value in zip([*self.extra_losses, *self._distill_names], extras)})
        if d_steps:
            out.update(D_loss=d_loss / d_steps, D_real=d_real / d_steps, D_fake=d_fake / d_steps)
            if self.train_opt['D_adaptive']:
                out['D_skipped'] = d_skipped / d_steps
        return out

    def state_files(self) -> Dict[str, Any]:
        """ModelPlain's weight files and KAIR's `{iter}_D.pth`."""
        return {**super().state_files(), 'D': self.net_d.state_dict()}

    def training_state(self) -> Dict[str, Any]:
        """ModelPlain's, and netD's optimizer, schedule, GradScaler and D_adaptive's average."""
        state = super().training_state()
        state.update(optimizer_d=self.optimizer_d.state_dict(), scheduler_d=self.scheduler_d.state_dict(),
                     optimizer_d_type=self.train_opt['D_optimizer_type'], adaptive_d=self._adaptive.clone())
        if self.scaler_d is not None:
            state['grad_scaler_d'] = self.scaler_d.state_dict()
        return state

    def load_state(self, weights: Dict[str, Any], training: Dict[str, Any]) -> None:
        """ModelPlain's resume, then the discriminator's: its weights, optimizer, schedule, GradScaler and
        D_adaptive's average. A checkpoint without a discriminator cannot resume a GAN (a fresh netD against a
        trained netG is another recipe): it is refused."""
        super().load_state(weights, training)
        if 'D' not in weights or 'optimizer_d' not in training:
            raise UserError('resume: the checkpoint has no discriminator (written by a model without netD); '
                            'start a new task, or use --fresh, to train a GAN')
        load_resume_weights(self.net_d, weights['D'], 'D', self.opt['netD']['net_type'])
        notes = resume_schedule(self.optimizer_d, self.scheduler_d, self.averaging_d, training['optimizer_d'],
                                training['scheduler_d'], training['optimizer_d_type'], self.train_opt, 'D')
        # checkpoints written before D_adaptive existed lack its average: it starts at the next G step's loss
        if 'adaptive_d' in training:
            self._adaptive.copy_(training['adaptive_d'].to(self._adaptive.device))
        for note in notes:
            get_logger().warning(f'resume: {note}')
        resume_scaler(self.scaler_d, training['grad_scaler_d'] if 'grad_scaler_d' in training else None)

