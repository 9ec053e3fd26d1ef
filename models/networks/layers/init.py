"""Weight initialisation selected by `netG.init_type` / `init_bn_type` / `init_gain` (KAIR semantics).

Mirrors KAIR's `select_network.init_weights`, including its clamps and fixed ranges, so that option
files ported from KAIR start from the same distribution. 'default' (or 'none') keeps the
network's own initialisation.
"""
from typing import Iterable

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd

from utils.registry import Registry

# netG.init_type → function(weight, gain) re-initialising a conv/linear weight in place (KAIR's gain
# handling), or `keep_own` to keep the network's own initialisation.
WEIGHT_INITS = Registry('init')


@WEIGHT_INITS.register('normal')
def _normal(w: torch.Tensor, g: float) -> torch.Tensor:
    """Normal, std 0.1, clamped to [-1, 1], times the gain (KAIR's)."""
    return nn.init.normal_(w, 0, 0.1).clamp_(-1, 1).mul_(g)


@WEIGHT_INITS.register('uniform')
def _uniform(w: torch.Tensor, g: float) -> torch.Tensor:
    """Uniform in [-0.2, 0.2], times the gain (KAIR's)."""
    return nn.init.uniform_(w, -0.2, 0.2).mul_(g)


@WEIGHT_INITS.register('xavier_normal')
def _xavier_normal(w: torch.Tensor, g: float) -> torch.Tensor:
    """Xavier (Glorot) normal with the gain, clamped to [-1, 1] (KAIR's)."""
    return nn.init.xavier_normal_(w, gain=g).clamp_(-1, 1)


@WEIGHT_INITS.register('xavier_uniform')
def _xavier_uniform(w: torch.Tensor, g: float) -> torch.Tensor:
    """Xavier (Glorot) uniform with the gain."""
    return nn.init.xavier_uniform_(w, gain=g)


@WEIGHT_INITS.register('kaiming_normal')
def _kaiming_normal(w: torch.Tensor, g: float) -> torch.Tensor:
    """Kaiming (He) normal for ReLU, fan-in, clamped to [-1, 1], times the gain (KAIR's)."""
    return nn.init.kaiming_normal_(w, a=0, mode='fan_in', nonlinearity='relu').clamp_(-1, 1).mul_(g)


@WEIGHT_INITS.register('kaiming_uniform')
def _kaiming_uniform(w: torch.Tensor, g: float) -> torch.Tensor:
    """Kaiming (He) uniform for ReLU, fan-in, times the gain (KAIR's)."""
    return nn.init.kaiming_uniform_(w, a=0, mode='fan_in', nonlinearity='relu').mul_(g)


@WEIGHT_INITS.register('orthogonal')
def _orthogonal(w: torch.Tensor, g: float) -> torch.Tensor:
    """Orthogonal with the gain."""
    return nn.init.orthogonal_(w, gain=g)


@WEIGHT_INITS.register('default', 'none')
def keep_own(w: torch.Tensor, g: float) -> None:
    """Keep the network's own initialisation (nothing re-initialised, BatchNorm included)."""



# netG.init_bn_type → function(weight) for the scale of an affine BatchNorm (its shift becomes 0).
BN_INITS = Registry('init')


@BN_INITS.register('uniform')
def _bn_uniform(w: torch.Tensor) -> torch.Tensor:
    """BatchNorm scales uniform in [0.1, 1] (KAIR's)."""
    return nn.init.uniform_(w, 0.1, 1.0)


@BN_INITS.register('constant')
def _bn_constant(w: torch.Tensor) -> torch.Tensor:
    """BatchNorm scales 1."""
    return nn.init.ones_(w)


def init_weights(net: nn.Module, init_type: str = 'default', init_bn_type: str = 'uniform',
                 gain: float = 1.0) -> None:
    """Re-initialise every conv/linear layer (bias zeroed) and every affine BatchNorm of `net` in place."""
    init_w = WEIGHT_INITS.get(init_type, 'netG.init_type')
    init_bn = BN_INITS.get(init_bn_type, 'netG.init_bn_type')
    if init_w is keep_own:
        return
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, (_ConvNd, nn.Linear)):
                init_w(m.weight, gain)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, _BatchNorm) and m.affine:
                init_bn(m.weight)
                nn.init.zeros_(m.bias)


def scaled_kaiming_(convs: Iterable[nn.Module], scale: float = 0.1) -> None:
    """Kaiming-normal weights times `scale`, zero bias (BasicSR/ESRGAN `initialize_weights`): deep
    residual stacks start near the identity. Part of these networks' own initialisation."""
    with torch.no_grad():
        for m in convs:
            nn.init.kaiming_normal_(m.weight, a=0, mode='fan_in')
            m.weight.mul_(scale)
            nn.init.zeros_(m.bias)
