"""netG and its moving average (KAIR's netE) as the options build them, before anything trains them."""
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from models.ema import ModelEMA
from models.networks.layers.init import init_weights
from models.network_loading import build_checked_network, load_weights
from utils.errors import UserError
from utils.logger import get_logger


def build_generator(opt: Dict[str, Any], device: torch.device, channels_last: bool,
                    allow_unsafe_load: bool) -> Tuple[nn.Module, bool]:
    """(netG, whether it is built folded): built from `netG`, initialised (`init_type`), loaded from
    `path.pretrained_netG` (weights saved after merge_bn load folded: nothing is left to fold), on `device` in
    its memory format."""
    netG = opt['netG']
    net = build_checked_network(netG)
    init_weights(net, netG['init_type'], netG['init_bn_type'], netG['init_gain'])
    folded = False
    if opt['path']['pretrained_netG']:
        folded = load_weights(net, opt['path']['pretrained_netG'], opt['train']['G_param_strict'], 'params',
                              'path.pretrained_netG', allow_unsafe_load, opt['merge_bn'])
    if folded:
        get_logger().info('path.pretrained_netG holds weights saved after merge_bn folded BatchNorm: netG is '
                          'built folded and trains on without batch statistics')
    net = net.to(device)
    if channels_last:
        net.to(memory_format=torch.channels_last)  # 4-D weights only; others unchanged
    return net, folded


def build_ema(net_g: nn.Module, opt: Dict[str, Any], allow_unsafe_load: bool) -> Optional[ModelEMA]:
    """netG's moving average (`train.E_decay` > 0), loaded from `path.pretrained_netE`; None without one (then
    its other keys must be off: they would do nothing)."""
    t = opt['train']
    for key in ('E_warmup_iter', 'E_switch_iter'):
        if t[key] and t['E_decay'] <= 0:
            raise UserError(f'train.{key}: {t[key]} needs the EMA: set train.E_decay > 0 (e.g. 0.999), or {key} '
                            f'to 0')
    if t['E_decay'] <= 0:
        return None
    ema = ModelEMA(net_g, t['E_decay'], t['E_warmup_iter'])
    if opt['path']['pretrained_netE']:
        load_weights(ema.module, opt['path']['pretrained_netE'], t['E_param_strict'], 'params_ema',
                     'path.pretrained_netE', allow_unsafe_load)
    return ema
