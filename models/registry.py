"""Name → class registries for networks and models.

Network kwargs come straight from the `netG` options: every key except `net_type` and the
`init_*` keys is passed to the constructor, so a new network needs no mapping code here.
"""
import importlib
import inspect
from typing import Any, Callable, Dict, Type

from torch import nn

from utils.errors import UserError
from utils.suggest import did_you_mean

NETWORKS: Dict[str, Type[nn.Module]] = {}
MODELS: Dict[str, type] = {}

# Where each registered name lives, so that building one network imports only its module (VRT's
# pulls in torchvision, ~3 s per rank); an unknown name imports them all for the did-you-mean.
_NETWORK_MODULES = {'dncnn': 'models.network_dncnn', 'msrresnet1': 'models.network_msrresnet',
                    'vrt': 'models.network_vrt'}
_MODEL_MODULES = {'plain': 'models.model_plain', 'vrt': 'models.model_vrt'}

# netG keys that configure weight initialisation rather than the constructor.
INIT_KEYS = ('init_type', 'init_bn_type', 'init_gain')


def register_network(name: str) -> Callable[[type], type]:
    def deco(cls: type) -> type:
        if name in NETWORKS:
            raise ValueError(f'network {name!r} registered twice')
        NETWORKS[name] = cls
        return cls
    return deco


def register_model(name: str) -> Callable[[type], type]:
    def deco(cls: type) -> type:
        if name in MODELS:
            raise ValueError(f'model {name!r} registered twice')
        MODELS[name] = cls
        return cls
    return deco


def _load(modules: Dict[str, str], name: str) -> None:
    """Import the module registering `name`, or every known module when `name` is not listed."""
    for mod in ([modules[name]] if name in modules else sorted(set(modules.values()))):
        importlib.import_module(mod)


def network_class(net_type: str) -> Type[nn.Module]:
    _load(_NETWORK_MODULES, net_type)
    if net_type not in NETWORKS:
        raise UserError(f'netG.net_type: unknown network "{net_type}"{did_you_mean(net_type, NETWORKS)}; '
                        f'known: {", ".join(sorted(NETWORKS))}')
    return NETWORKS[net_type]


def model_class(name: str) -> type:
    _load(_MODEL_MODULES, name)
    if name not in MODELS:
        raise UserError(f'model: unknown model "{name}"{did_you_mean(name, MODELS)}; '
                        f'known: {", ".join(sorted(MODELS))}')
    return MODELS[name]


def network_kwargs(netG: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in netG.items() if k != 'net_type' and k not in INIT_KEYS}


def build_network(netG: Dict[str, Any]) -> nn.Module:
    """Build the network named by `netG.net_type` with the remaining `netG` keys as kwargs."""
    return network_class(netG['net_type'])(**network_kwargs(netG))


def constructor_defaults(cls: type) -> Dict[str, Any]:
    """Keyword parameters of `cls.__init__` with their defaults (`inspect.Parameter.empty` if required)."""
    params = inspect.signature(cls.__init__).parameters
    return {n: p.default for n, p in params.items()
            if n != 'self' and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
