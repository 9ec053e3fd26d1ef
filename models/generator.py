"""netG and its moving average (KAIR's netE) as the options build them, before anything trains them."""
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from models.ema import ModelEMA
from models.networks.layers.init import init_weights
from models.network_loading import build_checked_network, load_weights
from utils.errors import UserError
from utils.logger import get_logger


def build_generator(opt: Dict[str, Any], device: torch.device, allow_unsafe_load: bool) -> Tuple[nn.Module, bool]:
    """(netG, whether it is built folded): built from `netG`, initialised (`init_type`), loaded from
    `path.pretrained_netG` (weights saved after merge_bn load folded: nothing is left to fold), on `device`."""
    netG = opt['netG']
    net = build_checked_network(netG)
    init_weights(net, netG['init_type'], netG['init_bn_type'], netG['init_gain'])
    folded = False
    if opt['path']['pretrained_netG']:
        folded = load_weights(net, opt['path']['pretrained_netG'], opt['train']['G_param_strict'],
                              opt['train']['G_param_key'],
                              'path.pretrained_netG', allow_unsafe_load, opt['merge_bn'])
    if folded:
        get_logger().info('path.pretrained_netG holds weights saved after merge_bn folded BatchNorm: netG is '
                          'built folded and trains on without batch statistics')
    return net.to(device), folded


# `E_warmup_power: null` where the average starts from netG's initialisation: traiNNer-redux's templates set 0.75
# ("gradually warm up ema decay when training from scratch"); timm and ema-pytorch suggest 2/3 to 3/4
DEFAULT_WARMUP_POWER = 0.75


def warmup_power(opt: Dict[str, Any]) -> float:
    """The EMA's `E_warmup_power`, its null resolved: `DEFAULT_WARMUP_POWER` where the average would otherwise
    keep a random start (netG initialised, no path.pretrained_netE, no E_warmup_iter ramp), else 0. A loaded start
    (pretrained netG or netE, as in GAN fine-tuning) is worth keeping: a warm-up's first update (decay 0) would
    replace it, so an explicit warm-up there is refused, as is one beside E_warmup_iter's linear ramp."""
    t, path = opt['train'], opt['path']
    power = t['E_warmup_power']
    if power is None:
        loaded = path['pretrained_netG'] or path['pretrained_netE']
        return 0.0 if loaded or t['E_warmup_iter'] else DEFAULT_WARMUP_POWER
    if power > 0 and t['E_warmup_iter']:
        raise UserError(f'train.E_warmup_power: {power} and train.E_warmup_iter: {t["E_warmup_iter"]} are two warm-ups '
                        f'of the EMA decay: set one of them to 0')
    if power > 0 and path['pretrained_netE']:
        raise UserError(f'train.E_warmup_power: {power} starts the average afresh at iteration 1 (decay 0), replacing '
                        f'path.pretrained_netE: set E_warmup_power to 0 (or null) to average on from it')
    return float(power)


def build_ema(net_g: nn.Module, opt: Dict[str, Any], allow_unsafe_load: bool) -> Optional[ModelEMA]:
    """netG's moving average (`train.E_decay` > 0), loaded from `path.pretrained_netE`; None without one (then
    its other keys must be off: they would do nothing)."""
    t = opt['train']
    for key in ('E_warmup_power', 'E_warmup_iter', 'E_switch_iter'):
        if t[key] and t['E_decay'] <= 0:
            raise UserError(f'train.{key}: {t[key]} needs the EMA: set train.E_decay > 0 (e.g. 0.999), or {key} '
                            f'to 0')
    if t['E_decay'] <= 0:
        return None
    ema = ModelEMA(net_g, t['E_decay'], t['E_warmup_iter'], warmup_power(opt))
    if opt['path']['pretrained_netE']:
        load_weights(ema.module, opt['path']['pretrained_netE'], t['E_param_strict'], 'params_ema',
                     'path.pretrained_netE', allow_unsafe_load)
    return ema
