"""A frozen start and a scaled learning rate for parameters chosen by name: the video models' schedules (KAIR's
`fix_iter` for VRT, BasicSR's `fix_flow` and `tsa_iter`) as one mechanism.

A set of parameters is frozen at the start without changing the autograd graph: their gradients are computed
and all-reduced as usual and then dropped before the optimizer (Adam skips a parameter without a gradient: no
update, no moments, no weight decay, no optimizer state), so DDP (static graph included) never sees a parameter
stop or start taking part. The reference trainers switch `requires_grad` instead, which KAIR cannot follow under
a static graph (it stops and asks for a resume) and BasicSR leaves to DDP's unused-parameter search. Iterations
1..N are frozen (the references unfreeze at iteration N itself: N-1 frozen iterations); the release is logged
once, and a resumed run knows whether it was.
"""
from typing import Any, Dict, List, Tuple

import torch
from torch import nn

from models.model_plain import ModelPlain
from utils.errors import UserError
from utils.logger import get_logger
from utils.options import Key, non_negative


def staged_keys(freeze_key: str, freeze_help: str, lr_key: str, lr_help: str) -> Dict[str, Key]:
    """The two `train` keys of a BasicSR-style schedule: iterations frozen (0: off) and the lr multiplier (1)."""
    return {freeze_key: Key(0, (int,), non_negative, freeze_help),
            lr_key: Key(1.0, (int, float), non_negative, lr_help)}


class StagedTraining(ModelPlain):
    """ModelPlain plus a frozen start and a scaled learning rate for parameters chosen by name.

    Subclasses name their two keys (`FREEZE_KEY`: iterations; `LR_KEY`: the multiplier) and say which
    parameter names each one concerns (`frozen_at_start`, `scaled`), with a phrase for the log and errors;
    BasicSR's grouping is `param_groups` here, a model with another one (VRT's) overrides it and records
    `frozen_params` there.
    """

    FREEZE_KEY = ''
    LR_KEY = ''
    RELEASED_KEY = 'freeze_released'  # the training state's record that the release was logged
    FROZEN_WHAT = ''  # e.g. 'SpyNet and EDVR-extractor parameters (names with "spynet" or "edvr")'
    SCALED_WHAT = ''

    def __init__(self, opt: Dict[str, Any], device: torch.device, allow_unsafe_load: bool = False):
        t = opt['train']
        self.freeze_iters = int(t[self.FREEZE_KEY])
        self.lr_mul = float(t[self.LR_KEY])
        self.frozen_params: List[nn.Parameter] = []
        super().__init__(opt, device, allow_unsafe_load)  # calls self.param_groups()
        self.frozen = self.freeze_iters > 0 and bool(self.frozen_params)  # until the release is logged
        self.announce_frozen_start()

    def announce_frozen_start(self) -> None:
        """The start-up log line of the frozen start."""
        if self.frozen:
            n = sum(p.numel() for p in self.frozen_params)
            get_logger().info(f'train.{self.FREEZE_KEY}: {self.FROZEN_WHAT}: {len(self.frozen_params)} tensors '
                              f'({n:,} parameters) frozen for the first {self.freeze_iters} iterations')

    def release_note(self) -> str:
        """What the log says at the release (after `iteration N: `)."""
        return f'past train.{self.FREEZE_KEY}={self.freeze_iters}; the {self.FROZEN_WHAT} train from now on'

    def frozen_at_start(self, name: str) -> bool:
        """Whether netG's parameter `name` is frozen for the first FREEZE_KEY iterations (BasicSR's choice)."""
        raise NotImplementedError

    def scaled(self, name: str) -> bool:
        """Whether netG's parameter `name` trains at lr x LR_KEY (BasicSR's choice)."""
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
        elif self.frozen:
            self.frozen = False
            get_logger().info(f'iteration {step}: {self.release_note()}')

    def training_state(self) -> Dict[str, Any]:
        """ModelPlain's, and whether the release was logged (a resumed run does not log it again)."""
        return {**super().training_state(), self.RELEASED_KEY: not self.frozen}

    def load_state(self, weights: Dict[str, Any], training: Dict[str, Any]) -> None:
        """As ModelPlain; a run resumed after the frozen start does not announce the release again."""
        super().load_state(weights, training)
        # checkpoints written before the release was recorded lack it: the release is announced again
        if self.RELEASED_KEY in training and training[self.RELEASED_KEY]:
            self.frozen = False
