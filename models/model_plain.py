"""The image model: network + loss + optimizer + scheduler + EMA, wrapped in DDP when distributed.

It implements models/interface.py's `TrainingModel`, the only members the train loop calls, so
every network trains with the same loop; the video and GAN models extend it. It is the wiring of
parts that each hold one job: its option keys (models/plain_options.py), netG and its EMA as the
options build them (models/generator.py), the step's number formats (models/precision.py), the
batch on the device (models/device_batch.py), the DDP wrap (utils/dist/ddp.py), sharpness-aware
steps (models/sam.py `SharpnessAwareStep`), distillation (models/distill.py), the log's loss sums
(models/loss_meter.py), the start-up checks (models/startup_checks.py) and what a checkpoint
holds on resume (models/checkpoint_state.py). Evaluation is not here: `validate` hands the current
eval network to the model's `restorer_class` (models/restorer.py) and runs it through
models/evaluation.py, as main_test.py does.
"""
import contextlib
import gc
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from data.degradations import batch_transforms
from losses.registry import build_extra_losses, build_loss
from models import plain_options
from models.checkpoint_state import restore_generator, resume_scaler, resume_schedule, weights_finite
from models.compile import compile_training_net, eager
from models.device_batch import device_batch
from models.distill import Distillation, distillation, resume_teacher
from models.ema import ModelEMA
from models.evaluation import Evaluation, WriteItem, evaluate
from models.generator import build_ema, build_generator
from models.loss_meter import LossMeter, MeanLosses
from models.merge_bn import count_foldable, fold_batchnorm
from models.optim import Averaging, averaging, build_optimizer, gated_step
from models.precision import autocast, memory_format, step_precision, to_channels_last
from models.registry import MODELS
from models.regularizers import apply_regularizers, regularizers_due
from models.restorer import ImageRestorer
from models.sam import SAM, SharpnessAwareStep, resume_sharpness_aware
from models.schedules import build_scheduler
from models.startup_checks import check_generator, check_schedule_free, check_test_item
from utils import dist
from utils.errors import UserError
from utils.logger import get_logger
from utils.options import Choice
from utils.options.foreign import REDUX, Foreign


# BasicSR's model classes (and those of the repositories built on it) that train one network as this model does
FOREIGN_NAMES = [Foreign(name) for name in ('SRModel', 'SwinIRModel', 'HATModel', 'DATModel', 'ATDModel', 'DRCTModel')] + [
    Foreign('RealESRNetModel', note='the degradations of its realesrgan training set run on the device in the step'),
    Foreign('SRModel', REDUX)]


@MODELS.register('plain', foreign=FOREIGN_NAMES)
class ModelPlain:
    """Image-to-image restoration (denoising, SR, deblurring) with one generator `netG`."""

    restorer_class = ImageRestorer  # how this model's networks are evaluated (validation and main_test)
    image_batches = True  # it trains on 4-D image batches: `train.channels_last` null puts it channels-last on a CPU
    channels_last = False  # netG's memory format, decided in __init__ (`memory_format`)

    # the `train` and `path` keys this model reads and its type keys (models/plain_options.py)
    TRAIN_OPTIONS: Dict[str, Any] = plain_options.TRAIN_OPTIONS
    PATH_OPTIONS: Dict[str, Any] = plain_options.PATH_OPTIONS
    CHOICES: Dict[str, Choice] = plain_options.CHOICES

    def __init__(self, opt: Dict[str, Any], device: torch.device, allow_unsafe_load: bool = False):
        self.opt = opt
        self.train_opt = opt['train']
        self.device = device
        self.allow_unsafe_load = allow_unsafe_load
        self.amp_dtype, self.scaler = step_precision(self.train_opt, device)
        self._warned_5d = False  # the note that a 5-D batch keeps its memory format is logged once
        self.merge_bn_at: Optional[int] = opt['merge_bn_startpoint'] if opt['merge_bn'] else None
        # a pretrained netG saved after merge_bn is loaded folded: nothing left to fold
        self.net_g, self.bn_merged = build_generator(opt, device, allow_unsafe_load)
        self.channels_last, line = memory_format(self.train_opt['channels_last'], device, self.image_batches,
                                                 self.net_g)
        get_logger().info(line)
        if self.channels_last:
            to_channels_last(self.net_g)
        self.ema: Optional[ModelEMA] = build_ema(self.net_g, opt, allow_unsafe_load)
        if self.merge_bn_at is not None and not self.bn_merged and not count_foldable(self.net_g):
            raise UserError(f'merge_bn: netG ({opt["netG"]["net_type"]}) has no BatchNorm after a convolution to '
                            f'fold (e.g. dncnn needs act_mode "BR"); set merge_bn to false')
        # after the EMA copy, which must not take the feature hooks along
        self.distill: Optional[Distillation] = distillation(
            self.train_opt, self.net_g, opt['netG']['net_type'], device, self.channels_last,
            self.merge_bn_at is not None, allow_unsafe_load)
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
        if self.averaging is not None:
            check_schedule_free(self.train_opt, self.net_g)
        self._build_sam()
        self.iteration = 0  # the last finished iteration (`end_iteration`)
        # nan_policy "stop" on CUDA: an optimizer that cannot take the skip verdict on the device steps regardless
        # (`gated_step`): the run stops at the next check point before anything is written, so the step cannot
        # matter, and reading the verdict would make the CPU wait for the GPU every iteration. Elsewhere (CPU,
        # where a read costs nothing, or "skip", which must not apply the step) the verdict is read.
        self.host_verdict = device.type != 'cuda' or self.train_opt['nan_policy'] != 'stop'
        # with extra losses or a teacher, the log shows each term: G_lossfn_type's, each extra's, the distillation's
        self.term_names = ['pix', *self.extra_losses, *(self.distill.names() if self.distill is not None else [])]
        self.loss_meter: LossMeter = MeanLosses(self.term_names, device)  # the sums since the last log line
        self._iteration_terms: Optional[torch.Tensor] = None
        self._iteration_loss = torch.zeros((), device=device)
        self.gradients_final = False  # whether `finalize_gradients` ran after the last `backward`
        self._grad_norm: Optional[torch.Tensor] = None
        self.restorer = self.restorer_class.from_options(self.eval_net, opt, device)

    def optimizer_groups(self) -> List[Dict[str, Any]]:
        """What netG's optimizer trains: `param_groups()`, then the distillation adapters' group (T_features)."""
        return self.param_groups() + (self.distill.param_groups() if self.distill is not None else [])

    @property
    def sam(self) -> Optional[SAM]:
        """The sharpness-aware method of `train.G_optimizer_sam` (None: plain steps)."""
        return self.sam_step.method if self.sam_step is not None else None

    def _build_sam(self) -> None:
        """`train.G_optimizer_sam` around the optimizer's parameters (again after merge_bn rebuilt it)."""
        self.sam_step = SharpnessAwareStep.build(self.train_opt, self.optimizer, self.net_g)  # None: plain steps

    def _training_net(self) -> nn.Module:
        """net_g as the training forward runs it: in DDP when distributed, compiled with `train.compile`."""
        net = dist.wrap_ddp(self.net_g, self.opt, self.device)
        self.ddp: Optional[DistributedDataParallel] = dist.ddp_of(net)
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
        self.iteration = step
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

    def param_groups(self) -> List[Dict[str, Any]]:
        """Optimizer parameter groups; subclasses split them (e.g. a slower group for flow nets)."""
        return [{'params': [p for p in self.net_g.parameters() if p.requires_grad]}]

    def network_info(self) -> str:
        """The start-up log line saying what trains: netG's size, its optimizer and what runs around it (SAM, a
        teacher), so that a run's log tells which recipe it ran."""
        n = sum(p.numel() for p in self.net_g.parameters())
        fused = ' (fused)' if self.optimizer.defaults.get('fused') else ''
        if self.averaging is not None:
            fused += ' (schedule-free: validated and saved at its averaged weights)'
        kind = f'{self.train_opt["G_optimizer_type"]} ({type(self.optimizer).__name__})'
        if self.sam_step is not None:
            fused += f'; {self.sam_step.describe()}'
        if self.distill is not None:
            fused += f'; {self.distill.describe()}'
        if self.ema is not None:
            fused += f'; {self.ema.schedule()}'
        return f'network {type(self.net_g).__name__}: {n:,} parameters; optimizer {kind}{fused}'

    def to_device(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        """A loader batch as the step takes it: on the device, float, transformed (models/device_batch.py)."""
        out, self._warned_5d = device_batch(batch, self.device, self.channels_last, self._warned_5d)
        return out

    def autocast(self) -> Any:
        """Mixed-precision context for the forward pass and loss (`train.amp`)."""
        return autocast(self.amp_dtype, self.device)

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
        """One training sample through netG, its losses and its teacher before anything is written
        (models/startup_checks.py `check_generator`); netG's output and the batch on the device, for models
        that check more networks on them."""
        return check_generator(self, sample, where, channels)

    def check_test_sample(self, sample: Dict[str, Any], where: str) -> None:
        """One test item's target scored by every validation metric at start-up (`check_test_item`)."""
        check_test_item(self.restorer, sample, where)

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
        self.gradients_final = False
        step = self.iteration + 1
        two_passes = self.sam_step is not None and self.sam_step.begin(step)
        kept: Optional[List[Tuple[Dict[str, Any], Any]]] = [] if two_passes else None
        total, terms = self._accumulate(batches, kept)
        if two_passes:
            self.sam_step.perturb(self.optimizer, self.scaler, lambda: self.after_backward(step))
            self.sam_step.restore(self._accumulate(kept, None)[0])
        self._iteration_terms = terms
        self._iteration_loss = total
        return total

    def _accumulate(self, batches: Sequence[Any], kept: Optional[List[Tuple[Dict[str, Any], Any]]]
                    ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """One forward-backward over the micro-batches: (their mean loss, its terms). `batches` are loader batches,
        or (device batch, teacher's output) pairs `kept` by a first pass (given a list, this pass fills it)."""
        n = len(batches)
        total = torch.zeros((), device=self.device)
        terms_total = torch.zeros(len(self.term_names), device=self.device) if len(self.term_names) > 1 else None
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
        return self.loss_meter.labelled(self._iteration_loss, self._iteration_terms)

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
        sam = self.sam_step
        if sam is not None:
            sam.edit_gradients(step)
        self.gradients_final = True
        finite = torch.isfinite(loss)
        check_grads = self.train_opt['nan_policy'] != 'off' and self.scaler is None
        if sam is not None and check_grads:  # under a GradScaler an overflow of either pass is its business
            finite = sam.finite(finite)
        self._grad_norm = None
        if self.train_opt['G_optimizer_clipgrad'] or check_grads or (sam is not None and sam.needs_grad_norm):
            self._grad_norm = torch.nn.utils.get_total_norm(self._grads())
            if check_grads:
                finite = finite & torch.isfinite(self._grad_norm)
        return finite

    def _grads(self) -> List[torch.Tensor]:
        """The gradients of what netG's optimizer trains (netG, and the distillation adapters)."""
        return [p.grad for g in self.optimizer.param_groups for p in g['params'] if p.grad is not None]

    def step(self, step: int, loss: torch.Tensor, applied: Optional[torch.Tensor] = None) -> None:
        """Apply the gradients of `backward` (`update_generator`), then add the loss to the log's sums.

        `applied` (a device bool, the loop's non-finite verdict, the same on every rank; None: apply)
        gates the update where it can be gated on the device (fused optimizer, EMA, loss bookkeeping):
        a skipped step changes no weight, moment or average, while the schedule still advances so the
        learning rate keeps following the iteration count.
        """
        self.update_generator(step, loss, applied)
        self.loss_meter.count(loss, self._iteration_terms, applied)

    def update_generator(self, step: int, loss: torch.Tensor, applied: Optional[torch.Tensor]) -> None:
        """netG's update of iteration `step`, gated by `applied` (see `step`): clip, optimizer, the sharpness-aware
        state, scheduler, regularizers, EMA."""
        if not self.gradients_final:
            self.finalize_gradients(step, loss)
        clip = self.train_opt['G_optimizer_clipgrad']
        if clip:
            torch.nn.utils.clip_grads_with_norm_(self._grads(), clip, self._grad_norm)
        gated_step(self.optimizer, applied, self.scaler, self.host_verdict)
        if self.sam_step is not None:
            self.sam_step.commit(self._grad_norm, applied)
        self.scheduler.step()
        if regularizers_due(step, self.train_opt) and (applied is None or bool(applied)):
            apply_regularizers(self.net_g, step, self.train_opt)
        self.update_ema(step, applied)

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
        """The iterations where netG's schedule changes its formula, so that curves.png draws its corners."""
        return self.scheduler.phases()

    def log_losses(self) -> Dict[str, float]:
        """Mean loss of the applied steps since the last call, averaged over ranks (one host read); with
        G_extra_losses or a teacher also each term: `l_g_pix` (G_lossfn_type's), `l_g_<name>`, `l_g_distill` and
        `l_g_distill_feat`."""
        return self.loss_meter.means()

    def current_lr(self) -> float:
        """The learning rate of netG's first parameter group, for the log (a video model's slower group is second)."""
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
        """The current eval network (EMA or netG) through the one evaluation loop (models/evaluation.py); the
        result's `weights` says which (`scored_weights`).

        A collective: every rank must call it.
        """
        self.sync_eval_buffers()
        with eager():  # regionally compiled blocks of netG would recompile for every image size
            res = evaluate(self.restorer, loader, num_items, score_input=score_input, num_previews=num_previews,
                           write_item=write_item)
        res.weights = self.scored_weights()
        return res

    def scored_weights(self) -> str:
        """Which weights `eval_net` holds, for the validation log: the EMA with its current decay, or netG (at a
        schedule-free optimizer's average inside `eval_weights`)."""
        if self.ema is not None:
            return self.ema.describe()
        return 'netG (its schedule-free average)' if self.averaging is not None else 'netG'

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
        return weights_finite(self.state_files())

    def training_state(self) -> Dict[str, Any]:
        """What a resume needs beyond the weights: the optimizer's moments, the schedule's position, the
        GradScaler's scale, the sharpness-aware state, the teacher's identity, and whether BatchNorm was folded."""
        state = {'optimizer': self.optimizer.state_dict(), 'scheduler': self.scheduler.state_dict(),
                 'optimizer_type': self.train_opt['G_optimizer_type'], 'bn_merged': self.bn_merged}
        if self.scaler is not None:
            state['grad_scaler'] = self.scaler.state_dict()
        if self.sam_step is not None:
            state['sam'] = self.sam_step.state_dict()
        if self.distill is not None:
            state['distill'] = self.distill.state_dict()  # the teacher's file and digest, the adapters
        return state

    def load_state(self, weights: Dict[str, Any], training: Dict[str, Any]) -> None:
        """Restore a checkpoint written by `state_files`/`training_state` (before training resumes).

        Weights, optimizer moments and the schedule position come from the checkpoint; every
        hyperparameter comes from the options. Each value that differs is logged with the winner.
        """
        resume_teacher(self.distill, training)
        # checkpoints written before merge_bn existed lack the flag: their BatchNorm was never folded
        if 'bn_merged' in training and training['bn_merged'] and not self.bn_merged:
            if self.merge_bn_at is None:
                raise UserError('resume: the checkpoint was written after merge_bn folded netG\'s BatchNorm; keep '
                                '"merge_bn": true to resume it, or start a new task or use --fresh')
            self.merge_batchnorm()
        restore_generator(self.net_g, self.ema, weights, self.opt['netG']['net_type'])
        # checkpoints written before the optimizer type was recorded lack it: None, type unknown
        saved_type = training['optimizer_type'] if 'optimizer_type' in training else None
        notes = resume_schedule(self.optimizer, self.scheduler, self.averaging, training['optimizer'],
                                training['scheduler'], saved_type, self.train_opt, 'G')
        notes += resume_sharpness_aware(self.sam_step, training['sam'] if 'sam' in training else None,
                                        self.train_opt['G_optimizer_type'])
        for note in notes:
            get_logger().warning(f'resume: {note}')
        resume_scaler(self.scaler, training['grad_scaler'] if 'grad_scaler' in training else None,
                      'resume: the checkpoint has no GradScaler state (trained without fp16); loss scaling starts '
                      'afresh')

