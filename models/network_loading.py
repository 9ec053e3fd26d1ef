"""A network built for evaluation (or training's start), its sizes checked first, and weights loaded into it.

main_test.py, scripts/export.py and a distillation teacher build their network with `build_eval_network`: the
network of `netG` with exactly a file's weights, nothing of training. The models build theirs with
`build_checked_network` and load `path.pretrained_netG` with `load_weights`, so that a wrong size or a file that
does not fit is the same one-line error everywhere.
"""
import copy
import warnings
from typing import Any, Dict, Optional

import torch
from torch import nn

from models.merge_bn import fold_batchnorm
from models.registry import build_network, build_on_meta
from utils.checkpoint import load as load_checkpoint, unwrap_params
from utils.errors import UserError
from utils.logger import get_logger
from utils.memory import memory_budget


def build_checked_network(netG: Dict[str, Any], section: str = 'netG') -> nn.Module:
    """The network of `netG` (or of `netD`: `section`), with its sizes checked first.

    A negative integer (a width, count or channel number) is a user error naming the key; the
    network is then built without memory (`torch.device('meta')`) to count its parameters, and one
    whose weights alone exceed the memory this process may still take (the machine's, or a job's memory
    cgroup limit: utils/memory.py) is refused with its size,
    instead of failing to allocate; a parameter without elements (e.g. `nc: 0`) is a user error too.
    """
    for key, value in netG.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        bad = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v < 0]
        if bad:
            raise UserError(f'{section}.{key}: {value} must not be negative (widths, counts and channel numbers '
                            f'are sizes)')
    count = _parameter_count(netG, section)
    budget = memory_budget()
    if count is not None and budget is not None and 4 * count > budget.available:
        raise UserError(f'{section} ({netG["net_type"]}): {count:,} parameters, {4 * count / 1e9:,.1f} GB of '
                        f'float32 weights alone, more than {budget.has(f"{budget.available / 1e9:.1f} GB")}; '
                        f'check its sizes ({", ".join(k for k, v in netG.items() if isinstance(v, (int, list)))})')
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='Initializing zero-element tensors')
        net = build_network(netG, f'{section}.net_type')
    empty = [name for name, p in net.named_parameters() if p.numel() == 0]
    if empty:
        raise UserError(f'{section} ({netG["net_type"]}): parameter {empty[0]} has no elements '
                        f'(a width or channel count of 0 in {section}?)')
    return net


def _parameter_count(netG: Dict[str, Any], section: str) -> Optional[int]:
    """Parameters of the network, counted on the meta device (no memory); None if it cannot be built there."""
    probe = build_on_meta(netG, f'{section}.net_type')
    return None if probe is None else sum(p.numel() for p in probe.parameters())


def load_weights(net: nn.Module, path: str, strict: bool, prefer: str, where: str,
                 allow_unsafe: bool = False, merge_bn: bool = False) -> bool:
    """Load KAIR (bare) or BasicSR/VRT (`params`/`params_ema`) weights; mismatches are user errors.

    With `merge_bn`, weights saved after BatchNorm was folded (their names are those of the folded
    network, not of `net`) are loaded into `net` folded first. Returns whether `net` was folded.
    """
    try:
        state = unwrap_params(load_checkpoint(path, allow_unsafe), prefer)
    except UserError as e:
        raise UserError(f'{where}: {e}') from None  # which option named the file
    folded = False
    if merge_bn and set(state) != set(net.state_dict()):
        candidate = copy.deepcopy(net)
        fold_batchnorm(candidate)
        if set(state) == set(candidate.state_dict()):
            fold_batchnorm(net)
            folded = True
    try:
        result = net.load_state_dict(state, strict=strict)
    except RuntimeError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        raise UserError(f'{where}: {path} does not fit netG: {" ".join(lines[1:3])[:300]}') from None
    if not strict and (result.missing_keys or result.unexpected_keys):
        get_logger().warning(f'{where}: loaded non-strictly; missing {len(result.missing_keys)}, '
                             f'unexpected {len(result.unexpected_keys)} keys')
    return folded


def build_eval_network(netG: Dict[str, Any], weights: str, device: torch.device, where: str,
                       allow_unsafe_load: bool = False, merge_bn: bool = False, prefer: Optional[str] = None,
                       strict: bool = True) -> nn.Module:
    """netG with exactly the weights of `weights` (strict), in eval mode on `device`.

    No initialisation, optimizer, loss, DDP or EMA: testing needs only the trained weights. From a
    BasicSR/VRT file holding both, an `_E.pth` name takes `params_ema`, any other name `params`, unless
    `prefer` names the entry (a BasicSR test file's param_key_g; `strict`: its strict_load_g).
    With `merge_bn`, weights saved before or after the BatchNorm fold both load.
    """
    net = build_checked_network(netG)
    prefer = prefer or ('params_ema' if weights.endswith('_E.pth') else 'params')
    load_weights(net, weights, strict, prefer, where, allow_unsafe_load, merge_bn)
    return net.to(device).eval()
