"""The start-up checks: one training sample through the networks and losses, one test item through the
metrics, and the combinations of options that cannot work, before anything is written, so that options that do
not fit end the run in one line at start-up instead of a traceback at the first iteration or the first
validation hours later.

The models call these (`check_sample`, `check_test_sample`); main_test's `--input` output
(models/input_restore.py) turns a network's failure into one line the same way.
"""
import contextlib
import re
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

import torch
from torch import nn

from models.compile import eager
from models.precision import autocast
from utils.errors import UserError, first_line
from utils.image import bit_depth, images_to_float, tensor2uint
from utils.logger import get_logger
from utils.oom import is_out_of_memory

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


@contextlib.contextmanager
def probe(nets: Sequence[nn.Module], device: torch.device, amp_dtype: Optional[torch.dtype]) -> Iterator[None]:
    """For start-up checks that must leave no trace: `nets` in eval mode (no BatchNorm statistics or
    spectral-norm vectors updated), no autograd, the random states restored after, under `train.amp`."""
    modes = [net.training for net in nets]
    for net in nets:
        net.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[device] if device.type == 'cuda' else []):
            with autocast(amp_dtype, device), eager():
                yield
    finally:
        for net, mode in zip(nets, modes):
            net.train(mode)


def check_generator(model: Any, sample: Dict[str, Any], where: str,
                    channels: Optional[str] = None) -> Tuple[torch.Tensor, Dict[str, Any]]:
    """One training sample of `where` through `model`'s netG (a ModelPlain's: no grad, eval mode, `probe`), its
    pixel losses and its teacher.

    A network that cannot take the data (channel counts, `nc: 0`, a scale that differs from the
    dataset's) fails here with one line instead of at the first iteration, after the run
    folder, log and options were written; so does a pixel loss that cannot take netG's output
    (MS-SSIM below 161x161, an fft_patch_factor not dividing the patch). The random states are left
    as they were. Returns netG's output and the batch on the device, for models that check more
    networks on them. `channels` names the key that decides the data's channels, for the message.
    """
    against = channels_hint(where, channels)
    batch = {k: v.unsqueeze(0) if torch.is_tensor(v) else [v] for k, v in sample.items()}
    batch = model.to_device(batch)
    net_type = model.opt['netG']['net_type']
    try:
        with probe([model.net_g], model.device, model.amp_dtype), model.capturing():
            out = model.predict(model.net_g, batch)
    except NETWORK_FAILURES as e:
        if is_out_of_memory(e):  # not the data's or the options' fault: its own line and exit code
            raise
        keyed = channel_key_problem(model.opt['netG'], e, where, channels)
        if keyed is not None:
            raise UserError(keyed) from None
        shapes = ', '.join(f'{k} {tuple(v.shape[1:])}' for k, v in batch.items() if torch.is_tensor(v))
        raise UserError(f'netG ({net_type}) cannot take a sample of {where} ({shapes}): '
                        f'{failure_text(e)}' + (f' (check netG\'s channels against {against})' if channels else '')
                        ) from None
    target = batch['H']
    if out.shape != target.shape:
        raise UserError(f'netG ({net_type}) turns {where} input {tuple(batch["L"].shape[1:])} '
                        f'into {tuple(out.shape[1:])}, but the target H is {tuple(target.shape[1:])} '
                        f'(check netG\'s scale against "scale" and its channels against {against})')
    for key, loss in model.pixel_losses():
        try:
            with probe([], model.device, model.amp_dtype):
                loss(out, target)
        except NETWORK_FAILURES as e:
            if is_out_of_memory(e):  # not the data's or the options' fault: its own line and exit code
                raise
            raise UserError(f'{key} cannot take netG\'s output {tuple(out.shape[1:])} for a sample of {where}: '
                            f'{failure_text(e)}') from None
    if model.distill is not None:
        try:
            with probe([], model.device, model.amp_dtype):
                model.distill.check(out, batch, model.predict, where)
        except NETWORK_FAILURES as e:
            if is_out_of_memory(e):  # not the data's or the options' fault: its own line and exit code
                raise
            raise UserError(f'train.teacher ({model.distill.net_type}) cannot take a sample of {where}: '
                            f'{failure_text(e)}') from None
    return out, batch


def check_test_item(restorer: Any, sample: Dict[str, Any], where: str) -> None:
    """The target frames of one test item scored against themselves by `restorer` (models/restorer.py): what each
    metric of `val.metrics` needs of a frame (NIQE two 96x96 blocks, LPIPS its receptive field) is checked at
    start-up, not at the first validation hours into the run. PSNR/SSIM sizes are checked by the
    datasets; without metrics there is nothing more to check."""
    if not restorer.metrics:
        return
    bits = bit_depth(sample['H'])
    H = images_to_float({'H': sample['H']})['H']
    frames = [tensor2uint(f, bits) for f in (H if H.dim() == 4 else H[None])]
    try:
        restorer.score(frames, frames)
    except UserError as e:
        raise UserError(f'{where}: its first item cannot be scored: {e}') from None


def check_schedule_free(train_opt: Dict[str, Any], net_g: nn.Module) -> None:
    """What a schedule-free optimizer (G_optimizer_type adamw_sf, adan_sf) cannot be combined with, and what
    to know: BatchNorm statistics are gathered at the training point, not the averaged one that is validated."""
    t, log = train_opt, get_logger()
    if t['E_switch_iter']:
        raise UserError(f'train.E_switch_iter: {t["E_switch_iter"]} cannot be combined with the schedule-free '
                        f'G_optimizer_type {t["G_optimizer_type"]} (netG holds its training point, the EMA '
                        f'averages its evaluation point); set E_switch_iter to 0')
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net_g.modules()):
        log.warning(f'train.G_optimizer_type {t["G_optimizer_type"]}: netG has BatchNorm, whose running '
                    f'statistics are gathered at the training weights, not at the averaged weights that are '
                    f'validated and saved (the schedule-free README\'s caveat): scores may be off')
    if t['G_scheduler_type'] not in (None, 'none') and not (t['G_scheduler_type'] in ('MultiStepLR', 'multistep')
                                                           and not t['G_scheduler_milestones']):
        log.info(f'train.G_optimizer_type {t["G_optimizer_type"]} is schedule-free: it is meant for a constant lr '
                 f'after the warm-up (G_scheduler_warmup_iter); G_scheduler_type {t["G_scheduler_type"]} '
                 f'decays it as well')
