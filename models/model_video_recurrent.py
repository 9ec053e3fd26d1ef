"""BasicSR's training of recurrent video SR networks (BasicVSR, IconVSR, BasicVSR++): model `video_recurrent`,
BasicSR's VideoRecurrentModel, with its keys.

- `train.fix_flow`: for the first `fix_flow` iterations the optical flow network and IconVSR's EDVR feature
  extractor (every parameter whose name contains "spynet" or "edvr", as BasicSR selects them) do not train;
- `train.flow_lr_mul`: SpyNet's parameters ("spynet") train at G_optimizer_lr × flow_lr_mul (0.125 in the
  BasicVSR/IconVSR recipes, 0.25 in BasicVSR++'s), in their own optimizer group whose schedule follows the
  same curve from that base (the normal group comes first: the log's lr is the main one).

`StagedTraining` is the mechanism, shared with model `edvr` (models/model_edvr.py): a set of parameters is
frozen at the start without changing the autograd graph, as model `vrt` does for KAIR's fix_iter: their
gradients are computed and all-reduced as usual and then dropped before the optimizer (Adam skips a parameter
without a gradient: no update, no moments, no weight decay, no optimizer state), so DDP (static graph
included) never sees a parameter stop or start taking part. BasicSR switches `requires_grad` instead and
lets DDP find unused parameters. Iterations 1..N are frozen (BasicSR unfreezes at iteration N itself: N-1
frozen iterations); a resumed run knows whether the release was logged. Evaluation is VideoRestorer's: whole
clips, optionally in temporal chunks (`val.num_frame_testing`) and spatial tiles.
"""
from typing import Any, Dict, List, Tuple

import torch
from torch import nn

from models.model_plain import ModelPlain
from models.registry import MODELS
from models.video_restorer import VideoRestorer
from utils.errors import UserError
from utils.logger import get_logger
from utils.options import Key, non_negative
from utils.options.foreign import Foreign


class StagedTraining(ModelPlain):
    """ModelPlain plus a frozen start and a scaled learning rate for parameters chosen by name.

    Subclasses name their two keys (`FREEZE_KEY`: iterations; `LR_KEY`: the multiplier) and say which
    parameter names each one concerns (`frozen_at_start`, `scaled`), with a phrase for the log and errors.
    """

    FREEZE_KEY = ''
    LR_KEY = ''
    FROZEN_WHAT = ''  # e.g. 'SpyNet and EDVR-extractor parameters (names with "spynet" or "edvr")'
    SCALED_WHAT = ''

    def __init__(self, opt: Dict[str, Any], device: torch.device, allow_unsafe_load: bool = False):
        t = opt['train']
        self.freeze_iters = int(t[self.FREEZE_KEY])
        self.lr_mul = float(t[self.LR_KEY])
        self.frozen_params: List[nn.Parameter] = []
        super().__init__(opt, device, allow_unsafe_load)  # calls self.param_groups()
        self._frozen = self.freeze_iters > 0
        if self._frozen:
            n = sum(p.numel() for p in self.frozen_params)
            get_logger().info(f'train.{self.FREEZE_KEY}: {self.FROZEN_WHAT}: {len(self.frozen_params)} tensors '
                              f'({n:,} parameters) frozen for the first {self.freeze_iters} iterations')

    def frozen_at_start(self, name: str) -> bool:
        raise NotImplementedError

    def scaled(self, name: str) -> bool:
        raise NotImplementedError

    def split(self) -> Tuple[List[Tuple[str, nn.Parameter]], List[Tuple[str, nn.Parameter]]]:
        """(normal, scaled) trainable parameters of netG, with their names."""
        named = [(n, p) for n, p in self.net_g.named_parameters() if p.requires_grad]
        return [(n, p) for n, p in named if not self.scaled(n)], [(n, p) for n, p in named if self.scaled(n)]

    def param_groups(self) -> List[Dict[str, Any]]:
        """[normal, scaled at lr × LR_KEY] (one group when the multiplier is 1, as BasicSR); records the frozen
        parameters. A key that would act on no parameter of this netG is a user error."""
        net_type = self.opt['netG']['net_type']
        named = [(n, p) for n, p in self.net_g.named_parameters() if p.requires_grad]
        self.frozen_params = [p for n, p in named if self.frozen_at_start(n)]
        if self.freeze_iters > 0 and not self.frozen_params:
            raise UserError(f'train.{self.FREEZE_KEY}: {self.freeze_iters}, but netG ({net_type}) has no '
                            f'{self.FROZEN_WHAT}; set it to 0')
        if self.freeze_iters > 0 and len(self.frozen_params) == len(named):
            raise UserError(f'train.{self.FREEZE_KEY}: every parameter of netG ({net_type}) would be frozen')
        normal, scaled = self.split()
        if self.lr_mul == 1:
            return [{'params': [p for _, p in named]}]
        if not scaled:
            raise UserError(f'train.{self.LR_KEY}: {self.lr_mul:g}, but netG ({net_type}) has no {self.SCALED_WHAT}; '
                            f'set it to 1')
        lr = float(self.train_opt['G_optimizer_lr'])
        return [{'params': [p for _, p in normal]}, {'params': [p for _, p in scaled], 'lr': lr * self.lr_mul}]

    def after_backward(self, step: int) -> None:
        """Drop the frozen parameters' gradients during the first `freeze_iters` iterations."""
        if step <= self.freeze_iters:
            for p in self.frozen_params:
                p.grad = None
        elif self._frozen:
            self._frozen = False
            get_logger().info(f'iteration {step}: past train.{self.FREEZE_KEY}={self.freeze_iters}; the '
                              f'{self.FROZEN_WHAT} train from now on')

    def training_state(self) -> Dict[str, Any]:
        return {**super().training_state(), 'freeze_released': not self._frozen}

    def load_state(self, weights: Dict[str, Any], training: Dict[str, Any]) -> None:
        """As ModelPlain; a run resumed after the frozen start does not announce the release again."""
        super().load_state(weights, training)
        if 'freeze_released' in training and training['freeze_released']:
            self._frozen = False


@MODELS.register('video_recurrent', foreign=[Foreign('VideoRecurrentModel')])
class ModelVideoRecurrent(StagedTraining):
    """BasicVSR, IconVSR, BasicVSR++ as BasicSR trains them: `fix_flow`, `flow_lr_mul` (see the module docstring)."""

    restorer_class = VideoRestorer
    TRAIN_OPTIONS: Dict[str, Any] = {
        **ModelPlain.TRAIN_OPTIONS,
        'fix_flow': Key(0, (int,), non_negative, 'iterations 1..N train without the flow network (and IconVSR\'s '
                        'EDVR extractor): their gradients are dropped (0: off)'),
        'flow_lr_mul': Key(1.0, (int, float), non_negative, 'SpyNet\'s parameters train at G_optimizer_lr x this '
                           '(a second optimizer group)'),
    }
    FREEZE_KEY, LR_KEY = 'fix_flow', 'flow_lr_mul'
    FROZEN_WHAT = 'flow network and EDVR feature extractor (parameters named *spynet* or *edvr*)'
    SCALED_WHAT = 'flow network (parameters named *spynet*)'

    def frozen_at_start(self, name: str) -> bool:
        return 'spynet' in name or 'edvr' in name

    def scaled(self, name: str) -> bool:
        return 'spynet' in name
