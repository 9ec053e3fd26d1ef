"""A model's checkpoint both ways: no save with a non-finite weight is written, and on resume the weights must fit
the networks as the options build them, and the optimizers' states, schedule positions and loss scales come back
under the options' hyperparameters.

netG's (models/model_plain.py) and a GAN's netD (models/model_gan.py) are resumed through the same steps.
"""
from typing import Any, Dict, List, Optional

import torch
from torch import nn

from models.ema import ModelEMA
from models.optim import Averaging, refreshed_group_keys, resume_optimizer
from utils.errors import UserError
from utils.logger import get_logger


def weights_finite(files: Dict[str, Dict[str, Any]]) -> bool:
    """Whether every floating-point tensor of a checkpoint's weight files ({kind: state_dict}) is finite: one
    host sync."""
    tensors = [t for state in files.values() for t in state.values() if torch.is_tensor(t) and t.is_floating_point()]
    return bool(torch.stack([torch.isfinite(t).all() for t in tensors]).all()) if tensors else True


def load_resume_weights(net: nn.Module, state: Dict[str, Any], kind: str, net_type: str) -> None:
    """load_state_dict(strict) for a resume: a checkpoint of another network is a user error, not a traceback."""
    try:
        net.load_state_dict(state)
    except RuntimeError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        raise UserError(f'resume: the checkpoint\'s {kind} weights do not fit netG ({net_type}) as the options '
                        f'build it (were netG options changed?): {" ".join(lines[1:3])[:300]}; start a new task '
                        f'or use --fresh') from None


def restore_generator(net_g: nn.Module, ema: Optional[ModelEMA], weights: Dict[str, Any], net_type: str) -> None:
    """netG's checkpoint weights ('G'), and its EMA's ('E'; a checkpoint without them, written with E_decay 0,
    starts the EMA from the resumed netG)."""
    load_resume_weights(net_g, weights['G'], 'G', net_type)
    if ema is not None:
        if 'E' in weights:
            load_resume_weights(ema.module, weights['E'], 'E', net_type)
        else:
            ema.module.load_state_dict(weights['G'])
            get_logger().warning('resume: the checkpoint has no EMA weights (_E.pth); train.E_decay > 0 now, so '
                                 'the EMA starts from the resumed netG weights')


def resume_schedule(optimizer: Any, scheduler: Any, averaging: Optional[Averaging], saved_optimizer: Dict[str, Any],
                    saved_scheduler: Dict[str, Any], saved_type: Optional[str], train_opt: Dict[str, Any],
                    net: str) -> List[str]:
    """Network `net`'s ('G', 'D') optimizer state (`<net>_optimizer_reuse`; `saved_type`: the checkpoint's
    `<net>_optimizer_type`, None when it did not record it) and its schedule's position from a checkpoint, its
    hyperparameters from the options; a schedule-free optimizer saved at its averaged weights goes back to its
    training point, as after the save. Returns the notes on what differs, for the log."""
    t = train_opt
    notes = resume_optimizer(optimizer, saved_optimizer, t[f'{net}_optimizer_reuse'], saved_type,
                             t[f'{net}_optimizer_type'], net, refreshed_group_keys(t, net))
    if averaging is not None and not averaging.training:
        averaging.train()
    notes += scheduler.differences(saved_scheduler)
    scheduler.load_state_dict(saved_scheduler)
    return notes


def resume_scaler(scaler: Optional[Any], saved: Optional[Dict[str, Any]], missing: Optional[str] = None) -> None:
    """A checkpoint's GradScaler state (`saved`, None when it had none) into `scaler` (None: no fp16); `missing`:
    the log line when the checkpoint has none (its scaling starts afresh)."""
    if scaler is None:
        return
    if saved is not None:
        scaler.load_state_dict(saved)
    elif missing:
        get_logger().info(missing)
