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

# Modules whose import fills the registries (explicit, so nothing depends on import side order).
_NETWORK_MODULES = ('models.network_dncnn', 'models.network_msrresnet', 'models.network_vrt')
_MODEL_MODULES = ('models.model_plain', 'models.model_vrt')

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


def _load(modules) -> None:
    for mod in modules:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:  # a real missing dependency inside the module
                raise


def network_class(net_type: str) -> Type[nn.Module]:
    _load(_NETWORK_MODULES)
    if net_type not in NETWORKS:
        raise UserError(f'netG.net_type: unknown network "{net_type}"{did_you_mean(net_type, NETWORKS)}; '
                        f'known: {", ".join(sorted(NETWORKS))}')
    return NETWORKS[net_type]


def model_class(name: str) -> type:
    _load(_MODEL_MODULES)
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
