"""Weight initialisation selected by `netG.init_type` / `init_bn_type` / `init_gain` (KAIR semantics).

Mirrors KAIR's `select_network.init_weights`, including its clamps and fixed ranges, so that option
files ported from KAIR start from the same distribution. 'default' (or 'none') keeps the
network's own initialisation.
"""
from typing import Callable, Dict

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd

from utils.errors import UserError
from utils.suggest import did_you_mean


# Each entry initialises a conv/linear weight in place; the gain handling is KAIR's.
_WEIGHT_INITS: Dict[str, Callable[[torch.Tensor, float], None]] = {
    'normal': lambda w, g: nn.init.normal_(w, 0, 0.1).clamp_(-1, 1).mul_(g),
    'uniform': lambda w, g: nn.init.uniform_(w, -0.2, 0.2).mul_(g),
    'xavier_normal': lambda w, g: nn.init.xavier_normal_(w, gain=g).clamp_(-1, 1),
    'xavier_uniform': lambda w, g: nn.init.xavier_uniform_(w, gain=g),
    'kaiming_normal': lambda w, g: nn.init.kaiming_normal_(w, a=0, mode='fan_in', nonlinearity='relu')
                                    .clamp_(-1, 1).mul_(g),
    'kaiming_uniform': lambda w, g: nn.init.kaiming_uniform_(w, a=0, mode='fan_in', nonlinearity='relu').mul_(g),
    'orthogonal': lambda w, g: nn.init.orthogonal_(w, gain=g),
}
_KEEP = ('default', 'none')
INIT_TYPES = tuple(_WEIGHT_INITS) + _KEEP
INIT_BN_TYPES = ('uniform', 'constant')


def init_weights(net: nn.Module, init_type: str = 'default', init_bn_type: str = 'uniform',
                 gain: float = 1.0) -> None:
    """Re-initialise every conv/linear layer (bias zeroed) and every affine BatchNorm of `net` in place."""
    if init_type not in INIT_TYPES:
        raise UserError(f'netG.init_type: unknown init "{init_type}"{did_you_mean(init_type, INIT_TYPES)}; '
                        f'known: {", ".join(INIT_TYPES)}')
    if init_bn_type not in INIT_BN_TYPES:
        raise UserError(f'netG.init_bn_type: unknown init "{init_bn_type}"'
                        f'{did_you_mean(init_bn_type, INIT_BN_TYPES)}; known: {", ".join(INIT_BN_TYPES)}')
    if init_type in _KEEP:
        return
    init_w = _WEIGHT_INITS[init_type]
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (_ConvNd, nn.Linear)):
                init_w(m.weight, gain)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, _BatchNorm) and m.affine:
                if init_bn_type == 'uniform':
                    nn.init.uniform_(m.weight, 0.1, 1.0)
                else:
                    nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
