"""The video model (VRT and other clip-to-clip networks): ModelPlain's training plus two things.

1. `train.fix_iter` / `fix_keys` / `fix_lr_mul`: the flow network and the deformable offsets start
   frozen, without changing the autograd graph (so DDP's static graph survives the unfreeze).
2. Validation with VideoRestorer (models/video_restorer.py): whole clips in temporal chunks and spatial
   tiles (options from `val`), and per-clip metrics.
"""
from typing import Any, Dict, List, Optional

import torch
from torch import nn

from models.model_plain import ModelPlain
from models.registry import MODELS
from models.staged_training import StagedTraining
from models.video_restorer import VideoRestorer
from utils.errors import UserError
from utils.logger import get_logger
from utils.options import Key, non_negative, rule


@rule('>= 0, or -1 (never frozen)', minimum=-1)
def _fix_iter(v: int) -> Optional[str]:
    return None if v >= -1 else 'must be >= 0, or -1 (never fix, as KAIR)'


@MODELS.register('vrt')
class ModelVRT(StagedTraining):
    """Video restoration: N×T×C×H×W clips in, N×T×C'×H'×W' out.

    **Freezing for `fix_iter` iterations.** The reference trainers (KAIR, BasicSR) freeze the
    parameters whose names contain one of `fix_keys` (SpyNet, the deformable offset convs) by
    setting `requires_grad=False`, and unfreeze them at `fix_iter`. That changes the autograd
    graph, which DDP's `static_graph` cannot follow, so KAIR stops on purpose there and asks the
    user to resume. Here `requires_grad` stays True throughout; the graph (and the static graph
    DDP recorded) never changes. Instead:
      - the fix_keys parameters form their own optimizer param group with
        lr = G_optimizer_lr * fix_lr_mul (the normal group comes first, so `current_lr` reports
        the main lr); the scheduler scales each group from its own base lr;
      - for iterations 1..fix_iter, after backward (and after DDP's all-reduce) their `.grad` is
        set to None. Adam/AdamW skip parameters without a gradient entirely: no step, no moment
        update, no weight decay, no optimizer state created (gradient clipping ignores them too).
        That is exactly what a frozen parameter gets;
      - from iteration fix_iter+1 on they train normally, and this is logged once.
    The cost is computing (and all-reducing) gradients that are then dropped during the fix
    phase, a few percent of an iteration for SpyNet plus the offset convs. KAIR unfreezes at
    iteration == fix_iter, i.e. it freezes fix_iter-1 iterations; here exactly fix_iter.
    A fix_keys entry that matches no parameter is a user error (a typo would otherwise train
    everything from the start). The mechanism is models/staged_training.py's, with KAIR's grouping
    (`param_groups`) and log lines.

    **Testing** is VideoRestorer's: chunks, tiles, pad_seq/flip_seq/center_frame_only from `val`.
    """

    restorer_class = VideoRestorer
    image_batches = False  # 5-D clips: `train.channels_last` null leaves it channels-first

    TRAIN_OPTIONS: Dict[str, Any] = {
        **ModelPlain.TRAIN_OPTIONS,
        'fix_iter': Key(0, (int,), _fix_iter, 'iterations the fix_keys parameters stay frozen (0: none; -1: never '
                                              'frozen, as KAIR)'),
        'fix_lr_mul': Key(1.0, (int, float), non_negative, 'learning-rate multiplier of the fix_keys parameters'),
        'fix_keys': Key([], (list,), help='parameter-name fragments frozen for fix_iter iterations (e.g. "spynet", '
                                          '"deform")'),
    }

    FREEZE_KEY, LR_KEY, RELEASED_KEY = 'fix_iter', 'fix_lr_mul', 'fix_released'

    def __init__(self, opt: Dict[str, Any], device: torch.device, allow_unsafe_load: bool = False):
        self.fix_keys = list(opt['train']['fix_keys'])
        super().__init__(opt, device, allow_unsafe_load)  # calls self.param_groups(), checks the val options

    @property
    def fix_params(self) -> List[nn.Parameter]:
        """The parameters fix_keys freezes for fix_iter iterations (`frozen_params`, under KAIR's name)."""
        return self.frozen_params

    def announce_frozen_start(self) -> None:
        log = get_logger()
        if self.freeze_iters == -1:
            log.info('train.fix_iter: -1: the fix_keys parameters are never frozen (KAIR\'s meaning)')
        if self.freeze_iters > 0 and not self.frozen_params:
            log.warning(f'train.fix_iter: {self.freeze_iters} has no effect: train.fix_keys is empty')
        elif self.frozen_params:
            n = sum(p.numel() for p in self.frozen_params)
            log.info(f'train.fix_keys {self.fix_keys}: {len(self.frozen_params)} tensors ({n:,} parameters) '
                     f'frozen for the first {self.freeze_iters} iterations, then trained with lr x {self.lr_mul:g}')

    def release_note(self) -> str:
        return (f'past train.fix_iter={self.freeze_iters}; the parameters matching fix_keys {self.fix_keys} train '
                f'from now on (lr x {self.lr_mul:g})')

    def param_groups(self) -> List[Dict[str, Any]]:
        """[normal parameters, fix_keys parameters with lr * fix_lr_mul]; one group without fix_iter or fix_keys.

        As in KAIR, the separate group (and so `fix_lr_mul`) exists only when the flow network is
        fixed at the start (`fix_iter` > 0); its lower lr then also applies after the release.
        `fix_iter` 0 or -1 (KAIR's "never fix") freezes nothing.
        """
        named = [(n, p) for n, p in self.net_g.named_parameters() if p.requires_grad]
        every = [{'params': [p for _, p in named]}]
        if not self.fix_keys:
            return every
        bad = [k for k in self.fix_keys if not isinstance(k, str) or not k]
        if bad:
            raise UserError(f'train.fix_keys: entries must be non-empty strings (parts of parameter names), got {bad}')
        unmatched = [k for k in self.fix_keys if not any(k in n for n, _ in named)]
        if unmatched:
            raise UserError(f'train.fix_keys: {unmatched} match no parameter name of netG '
                            f'({self.opt["netG"]["net_type"]}), e.g. {named[0][0] if named else "-"}')
        fixed = [(n, p) for n, p in named if any(k in n for k in self.fix_keys)]
        normal = [p for n, p in named if not any(k in n for k in self.fix_keys)]
        if not normal:
            raise UserError(f'train.fix_keys: {self.fix_keys} match every parameter of netG')
        if self.freeze_iters <= 0:
            if self.lr_mul != 1:
                get_logger().info(f'train.fix_lr_mul: {self.lr_mul:g} has no effect without train.fix_iter > 0 '
                                  f'(KAIR applies it only with a fixed flow network): one lr for all parameters')
            return every
        self.frozen_params = [p for _, p in fixed]
        lr = float(self.train_opt['G_optimizer_lr'])
        return [{'params': normal}, {'params': self.frozen_params, 'lr': lr * self.lr_mul}]
