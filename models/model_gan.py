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
"""
import contextlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from losses.adversarial import GANLoss
from losses.perceptual import RANDOM_VGG, PerceptualLoss, default_vgg19_path
from models.init import init_weights
from models.model_plain import ModelPlain, load_resume_weights
from models.optim import OPTIMIZERS, SCHEDULERS, build_optimizer, build_scheduler, gated_step, resume_optimizer
from models.registry import MODELS
from models.restorer import build_checked_network, load_weights
from utils import dist
from utils.errors import UserError, first_line
from utils.logger import get_logger
from utils.options import Choice, Key, non_negative


def _positive_int(v: Any) -> Optional[str]:
    return None if v >= 1 else 'must be >= 1'


@MODELS.register('gan')
class ModelGAN(ModelPlain):
    # train keys of this model beside ModelPlain's (KAIR's names and defaults), the perceptual and adversarial
    # losses' own (losses/), and those of the optimizer and schedule D_optimizer_type / D_scheduler_type choose
    TRAIN_OPTIONS: Dict[str, Any] = {
        **ModelPlain.TRAIN_OPTIONS,
        **PerceptualLoss.OPTIONS,
        'F_lossfn_weight': Key(1.0, (int, float), non_negative),
        **GANLoss.OPTIONS,
        'D_lossfn_weight': Key(0.1, (int, float), non_negative),
        'D_update_ratio': Key(1, (int,), _positive_int),
        'D_init_iters': Key(0, (int,), non_negative),
        'D_optimizer_type': Key('adam', (str,)),
        'D_optimizer_lr': Key(1e-4, (int, float), lambda v: None if 0 < v <= 1 else 'must be in (0, 1]'),
        'D_optimizer_reuse': Key(True, (bool,)),
        'D_scheduler_type': Key('MultiStepLR', (str, type(None))),
        'D_scheduler_warmup_iter': Key(0, (int,), non_negative),
        'D_param_strict': Key(True, (bool,)),
    }
    CHOICES: Dict[str, Choice] = {**ModelPlain.CHOICES, 'D_optimizer_type': Choice(OPTIMIZERS, 'D_optimizer_'),
                                  'D_scheduler_type': Choice(SCHEDULERS, 'D_scheduler_')}
    PATH_OPTIONS: Dict[str, Any] = {**ModelPlain.PATH_OPTIONS, 'pretrained_netD': Key(None, (str, type(None)))}
    HAS_NETD = True  # the options need a `netD` section

    def __init__(self, opt: Dict[str, Any], device: torch.device, allow_unsafe_load: bool = False):
        t = opt['train']
        netD = opt['netD']
        net_d = build_checked_network(netD, 'netD')
        init_weights(net_d, netD['init_type'], netD['init_bn_type'], netD['init_gain'])
        if opt['path']['pretrained_netD']:
            load_weights(net_d, opt['path']['pretrained_netD'], t['D_param_strict'], 'params',
                         'path.pretrained_netD', allow_unsafe_load)
        self.perceptual: Optional[PerceptualLoss] = None
        if t['F_lossfn_weight'] > 0:
            vgg = t['F_pretrained_path'] or default_vgg19_path()
            self.perceptual = PerceptualLoss(t['F_feature_layer'], t['F_weights'], t['F_lossfn_type'],
                                             t['F_use_input_norm'], t['F_use_range_norm'], vgg).to(device)
            if vgg == RANDOM_VGG:
                get_logger().warning('train.F_pretrained_path is "random": the perceptual loss uses a randomly '
                                     'initialised VGG19: a smoke run, not a perceptual loss (real training needs '
                                     'torchvision\'s vgg19-dcbb9e9d.pth, see the README)')
        super().__init__(opt, device, allow_unsafe_load)
        self.net_d = net_d.to(device)
        self.net_D = self._wrap(self.net_d, static_graph=False)  # two backward passes per iteration
        self.ddp_d = self.net_D if isinstance(self.net_D, DistributedDataParallel) else None
        self.gan_loss = GANLoss(t['gan_type'])
        self.optimizer_d = build_optimizer([p for p in self.net_d.parameters() if p.requires_grad], t, 'D', device)
        self.scheduler_d = build_scheduler(self.optimizer_d, t, 'D')
        self.scaler_d = torch.amp.GradScaler(device.type) if self.scaler is not None else None
        self._iteration = 0
        self._update_g = True
        self._d_loss = torch.zeros((), device=device)
        # sums since the last log over the applied iterations: pixel, perceptual, adversarial (G steps), D loss,
        # D(real), D(fake), G steps, D steps
        self._parts = torch.zeros(8, device=device)
        self._iteration_parts = torch.zeros(8, device=device)

    def check_sample(self, sample: Dict[str, Any], where: str) -> Tuple[torch.Tensor, Dict[str, Any]]:
        """netG's check (see ModelPlain), then netD and the perceptual loss on its output: a netD that does not
        fit the data (`in_nc`, a patch size a VGG-style netD cannot take) or a perceptual loss that cannot
        take the images is one line at start-up, before anything is written, not a traceback at iteration 1."""
        out, batch = super().check_sample(sample, where)
        shape = tuple(out.shape[1:])
        try:
            with self.probe(self.net_d):
                self.net_d(out)
        except (RuntimeError, ValueError, TypeError, UserError) as e:
            hint = '' if isinstance(e, UserError) else ' (check netD.in_nc against "n_channels")'
            raise UserError(f'netD ({self.opt["netD"]["net_type"]}) cannot take netG\'s output {shape} for a sample '
                            f'of {where}: {first_line(e)[:300]}{hint}') from None
        if self.perceptual is not None:
            try:
                with self.probe(self.perceptual):
                    self.perceptual(out, batch['H'])
            except (RuntimeError, ValueError, TypeError) as e:
                hint = (' (VGG19 takes 3 channels: gray images get them from F_use_input_norm true, whose '
                        'normalisation broadcasts them, as in KAIR; else set F_lossfn_weight to 0)' if shape[0] != 3
                        else '')
                raise UserError(f'train.F_lossfn_weight: the VGG19 perceptual loss cannot take netG\'s output {shape} '
                                f'for a sample of {where}: {first_line(e)[:200]}{hint}') from None
        return out, batch

    def network_info(self) -> str:
        n_d = sum(p.numel() for p in self.net_d.parameters())
        return f'{super().network_info()}; discriminator {type(self.net_d).__name__}: {n_d:,} parameters'

    def networks(self) -> List[nn.Module]:
        return super().networks() + [self.net_d]

    def end_iteration(self, step: int) -> None:
        super().end_iteration(step)
        self._iteration = step

    def _g_step_due(self) -> bool:
        """KAIR: G is updated on iterations divisible by D_update_ratio, after D_init_iters."""
        step, t = self._iteration + 1, self.train_opt
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
        self._finalized = False
        n = len(batches)
        total_g = torch.zeros((), device=self.device)
        total_d = torch.zeros((), device=self.device)
        parts = torch.zeros(8, device=self.device)
        for i, batch in enumerate(batches):
            batch = self.to_device(batch)
            last = i == n - 1
            if self._update_g:
                sync = self.ddp is None or last or self.sync_every_micro_batch
                with contextlib.nullcontext() if sync else self.ddp.no_sync():
                    with self.autocast():
                        E = self.predict(self.net, batch)
                        loss_g = self._generator_loss(E, batch['H'], parts, n)
                    (loss_g if self.scaler is None else self.scaler.scale(loss_g)).backward()
                total_g += loss_g.detach()
                parts[6] += 1.0 / n
            else:
                with torch.no_grad(), self.autocast():
                    E = self.predict(self.net_g, batch)
            total_d += self._discriminator_backward(E.detach(), batch['H'], n, last, parts)
        parts[7] += 1.0
        self._iteration_parts = parts  # into the log's sums when the step is applied (`step`)
        self._d_loss = total_d
        return total_g

    def _generator_loss(self, E: torch.Tensor, H: torch.Tensor, parts: torch.Tensor, n: int) -> torch.Tensor:
        """Pixel + perceptual + adversarial loss of one of `n` micro-batches, divided by n (the iteration's
        loss is their mean), with D frozen and unwrapped; `parts` sums the divided terms for the log."""
        t = self.train_opt
        loss = E.new_zeros((), dtype=torch.float32)
        if t['G_lossfn_weight'] > 0:
            pix = self.loss_fn(E, H).float() / n
            loss = loss + pix
            parts[0] += pix.detach()
        if self.perceptual is not None:
            percep = t['F_lossfn_weight'] * self.perceptual(E, H).float() / n
            loss = loss + percep
            parts[1] += percep.detach()
        self._set_d_trainable(False)
        try:
            pred_fake = self.net_d(E)
            if t['gan_type'] == 'ragan':
                pred_real = self.net_d(H).detach()
                adv = (self.gan_loss(pred_real - pred_fake.mean(0, keepdim=True), False)
                       + self.gan_loss(pred_fake - pred_real.mean(0, keepdim=True), True)) / 2
            else:
                adv = self.gan_loss(pred_fake, True)
        finally:
            self._set_d_trainable(True)
        adv = t['D_lossfn_weight'] * adv / n
        parts[2] += adv.detach()
        return loss + adv

    def _discriminator_backward(self, fake: torch.Tensor, real: torch.Tensor, n: int, last: bool,
                                parts: torch.Tensor) -> torch.Tensor:
        """Real then fake through the DDP-wrapped D, each with its backward; returns D's loss."""
        ragan = self.train_opt['gan_type'] == 'ragan'
        ref_fake = None
        if ragan:  # the relativistic baseline: a constant, computed outside DDP
            with torch.no_grad(), self.autocast():
                ref_fake = self.net_d(fake).float().mean(0, keepdim=True)
        total = torch.zeros((), device=self.device)
        pred_real_mean = None
        for which in ('real', 'fake'):
            sync = self.ddp_d is None or (last and which == 'fake')
            with contextlib.nullcontext() if sync else self.ddp_d.no_sync():
                with self.autocast():
                    pred = self.net_D(real if which == 'real' else fake).float()
                    if ragan:
                        baseline = ref_fake if which == 'real' else pred_real_mean
                        loss = 0.5 * self.gan_loss(pred - baseline, which == 'real')
                    else:
                        loss = self.gan_loss(pred, which == 'real')
                    loss = loss / n
                (loss if self.scaler_d is None else self.scaler_d.scale(loss)).backward()
            if which == 'real':
                pred_real_mean = pred.detach().mean(0, keepdim=True)
            parts[4 if which == 'real' else 5] += pred.detach().mean() / n
            total += loss.detach()
        parts[3] += total
        return total

    def finalize_gradients(self, step: int, loss: torch.Tensor) -> torch.Tensor:
        """G's checks (when G stepped) and D's: the loss and gradient norm must be finite."""
        if self._update_g:
            finite = super().finalize_gradients(step, loss)
        else:
            self._finalized = True
            self._grad_norm = None
            finite = torch.isfinite(loss)
        if self.scaler_d is not None:
            self.scaler_d.unscale_(self.optimizer_d)
        finite = finite & torch.isfinite(self._d_loss)
        if self.train_opt['nan_policy'] != 'off' and self.scaler_d is None:
            grads = [p.grad for p in self.net_d.parameters() if p.grad is not None]
            finite = finite & torch.isfinite(torch.nn.utils.get_total_norm(grads))
        return finite

    def step(self, step: int, loss: torch.Tensor, applied: Optional[torch.Tensor] = None) -> None:
        """G's step (when due) and D's, both gated by `applied` (see ModelPlain.step)."""
        if not self._finalized:
            self.finalize_gradients(step, loss)
        if self._update_g:
            super().step(step, loss, applied)
        else:  # nothing to apply to G; its schedule and EMA follow the iteration as in KAIR
            self.scheduler.step()
            if self.ema is not None:
                self.ema.update(self.net_g, applied)
        gated_step(self.optimizer_d, applied, self.scaler_d)
        self.scheduler_d.step()
        parts = self._iteration_parts
        self._parts += parts if applied is None else torch.where(applied, parts, torch.zeros_like(parts))

    def log_losses(self) -> Dict[str, float]:
        """KAIR's log: G's losses (means over G steps), D's loss and mean outputs (over D steps)."""
        t = self._parts.clone()
        dist.all_reduce_sum(t)
        self._parts.zero_()
        pix, percep, adv, d_loss, d_real, d_fake, g_steps, d_steps = t.tolist()
        out = {}
        if g_steps:
            out.update(G_loss=(pix + percep + adv) / g_steps, l_g_pix=pix / g_steps, l_g_percep=percep / g_steps,
                       l_g_gan=adv / g_steps)
        if d_steps:
            out.update(D_loss=d_loss / d_steps, D_real=d_real / d_steps, D_fake=d_fake / d_steps)
        self._loss_sum.zero_()
        self._loss_steps.zero_()
        return out

    def state_files(self) -> Dict[str, Any]:
        return {**super().state_files(), 'D': self.net_d.state_dict()}

    def training_state(self) -> Dict[str, Any]:
        state = super().training_state()
        state.update(optimizer_d=self.optimizer_d.state_dict(), scheduler_d=self.scheduler_d.state_dict(),
                     optimizer_d_type=self.train_opt['D_optimizer_type'])
        if self.scaler_d is not None:
            state['grad_scaler_d'] = self.scaler_d.state_dict()
        return state

    def load_state(self, weights: Dict[str, Any], training: Dict[str, Any]) -> None:
        super().load_state(weights, training)
        if 'D' not in weights or 'optimizer_d' not in training:
            raise UserError('resume: the checkpoint has no discriminator (written by a model without netD); '
                            'start a new task, or use --fresh, to train a GAN')
        load_resume_weights(self.net_d, weights['D'], 'D', self.opt['netD']['net_type'])
        t = self.train_opt
        notes = resume_optimizer(self.optimizer_d, training['optimizer_d'], t['D_optimizer_reuse'],
                                 training['optimizer_d_type'], t['D_optimizer_type'], 'D')
        notes += self.scheduler_d.differences(training['scheduler_d'])
        self.scheduler_d.load_state_dict(training['scheduler_d'])
        for note in notes:
            get_logger().warning(f'resume: {note}')
        if self.scaler_d is not None and 'grad_scaler_d' in training:
            self.scaler_d.load_state_dict(training['grad_scaler_d'])

