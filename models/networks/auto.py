"""`netG.net_type: "auto"`: the architecture and its kwargs read from the checkpoint in path.pretrained_netG.

spandrel's loader recognises a released checkpoint's architecture and hyperparameters from its
state_dict alone. They are turned into the equivalent explicit netG block of one of our net_types,
which then replaces "auto" before the options are validated: from there on the run is like any
other (the block is checked by signature, logged and saved with the run's options, and the weights
load strictly as usual). The state_dict read here is the one training loads (`params` preferred).
"""
import json
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from models.networks.spandrel import ARCHITECTURES, realplksr_from_spandrel
from models.registry import INIT_OPTIONS, build_network, build_on_meta, network_options
from utils.checkpoint import load, unwrap_params
from utils.errors import UserError

AUTO = 'auto'
Mapping = Callable[[Any], Optional[Dict[str, Any]]]  # spandrel's descriptor → our kwargs, None: not this one


def esrgan_kwargs(d: Any) -> Optional[Dict[str, Any]]:
    """BasicSR's RRDBNet (Real-ESRGAN's names), any of its scales."""
    h = d.model.hyperparameters
    if h.get('plus') or h.get('num_filters') is None:
        return None
    return {'num_in_ch': d.input_channels, 'num_out_ch': d.output_channels, 'scale': d.scale,
            'num_feat': h['num_filters'], 'num_block': h['num_blocks'], 'num_grow_ch': 32}


def rrdbnet_kwargs(d: Any) -> Optional[Dict[str, Any]]:
    """KAIR/BSRGAN's RRDBNet names (no pixel-unshuffle)."""
    h = d.model.hyperparameters
    if h.get('plus') or h.get('shuffle_factor') or d.scale not in (2, 4):
        return None
    return {'in_nc': d.input_channels, 'out_nc': d.output_channels, 'nf': h['num_filters'], 'nb': h['num_blocks'],
            'gc': 32, 'upscale': d.scale}


# spandrel's architecture id → our net_types that may hold it, tried in order (the first whose
# state_dict names are the checkpoint's wins); spandrel's own architectures are added below.
CANDIDATES: Dict[str, List[Tuple[str, Mapping]]] = {'ESRGAN': [('esrgan', esrgan_kwargs), ('rrdbnet', rrdbnet_kwargs)]}


def spandrel_kwargs(net_type: str) -> Mapping:
    """The detected hyperparameters that our net_type takes (its signature's keys)."""
    def kwargs(d: Any) -> Optional[Dict[str, Any]]:
        arch = next(a for a in ARCHITECTURES if a.net_type == net_type)
        if not arch.builds(d.model):
            return None
        h = dict(d.model.hyperparameters)
        if net_type == 'realplksr':
            h = realplksr_from_spandrel(h)
        keys = [k for k in arch.signature().parameters if k != 'self']
        if arch.choose is not None:  # the factor picks the class (Real-CUGAN): not a hyperparameter of one
            h.setdefault('scale', d.scale)
        return {k: list(h[k]) if isinstance(h[k], tuple) else h[k] for k in keys if k in h}
    return kwargs


for _arch in ARCHITECTURES:
    CANDIDATES.setdefault(_arch.package, []).append((_arch.net_type, spandrel_kwargs(_arch.net_type)))


def detect(state: Dict[str, torch.Tensor], path: str, source: str = 'path.pretrained_netG',
           section: str = 'netG') -> Any:
    """spandrel's description of the network a state_dict belongs to (`source`: the key naming the file,
    `section`: the netG section it describes, for the messages)."""
    try:
        import spandrel
    except ImportError:
        raise UserError(f'{section}.net_type: "auto" detects the architecture with spandrel, which is not installed '
                        'here; pip install spandrel==0.4.2') from None
    try:
        return spandrel.ModelLoader().load_from_state_dict(state)
    except spandrel.UnsupportedModelError:
        raise UserError(f'{source}: {path}: spandrel does not recognise this architecture; '
                        f'give {section}.net_type and its keys instead of "auto"') from None
    except Exception as e:  # recognised, but its shapes contradict the detected hyperparameters
        raise UserError(f'{source}: {path}: spandrel cannot read this checkpoint '
                        f'({type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ""})'
                        ) from None


def same_names(netG: Dict[str, Any], state: Dict[str, torch.Tensor]) -> bool:
    """Whether our network built from netG has exactly the checkpoint's state_dict names."""
    net = build_on_meta(netG)
    net = build_network(netG) if net is None else net
    return set(net.state_dict()) == set(state)


def resolve_auto(netG: Dict[str, Any], pretrained: Optional[str], source: str = 'path.pretrained_netG',
                 section: str = 'netG') -> Tuple[Dict[str, Any], str]:
    """The explicit netG for `{"net_type": "auto", ...}` and a note for the log. Only the init_* keys may
    accompany "auto" (kept); every other key comes from the checkpoint. `source` is the key that names the
    checkpoint and `section` the one holding netG, for the messages (a distillation teacher's: train.teacher)."""
    extra = sorted(k for k in netG if k != 'net_type' and k not in INIT_OPTIONS)
    if extra:
        raise UserError(f'{section}.{extra[0]}: with net_type "auto" the network\'s keys come from '
                        f'{source}; give only net_type (and init_* keys)')
    if not pretrained:
        raise UserError(f'{section}.net_type: "auto" reads the architecture from {source}, which is not set')
    try:
        state = unwrap_params(load(pretrained), 'params')
    except UserError as e:
        text = str(e) if str(e).startswith(pretrained) else f'{pretrained}: {e}'
        raise UserError(f'{source}: {text}') from None
    d = detect(state, pretrained, source, section)
    arch = d.architecture.id
    tried = []
    for net_type, mapping in CANDIDATES.get(arch, []):
        kwargs = mapping(d)
        if kwargs is None:
            continue
        tried.append(net_type)
        explicit = {'net_type': net_type, **kwargs}
        network_options(net_type)  # a net_type that cannot be built here (spandrel missing) says so
        if same_names(explicit, state):
            explicit.update({k: netG[k] for k in netG if k in INIT_OPTIONS})
            note = (f'{section}: net_type "auto": {pretrained} holds {arch} (spandrel); the equivalent netG is '
                    f'{json.dumps(explicit)}')
            return explicit, note
    if not tried:
        raise UserError(f'{source}: {pretrained}: spandrel recognises {arch}, which net_type "auto" '
                        f'does not build; write its netG explicitly')
    raise UserError(f'{source}: {pretrained}: spandrel recognises {arch}, but the state_dict names '
                    f'differ from those of net_type {" and ".join(tried)}; write its netG explicitly')


def resolve_auto_options(data: Dict[str, Any]) -> Optional[Tuple[Dict[str, Any], str]]:
    """For raw (unvalidated) options whose netG.net_type is "auto": (explicit netG, note); else None."""
    netG = data.get('netG')
    if not isinstance(netG, dict) or netG.get('net_type') != AUTO:
        return None
    path = data.get('path')
    pretrained = path.get('pretrained_netG') if isinstance(path, dict) else None
    if pretrained is not None and not isinstance(pretrained, str):
        raise UserError('path.pretrained_netG: expected a string (the checkpoint "auto" reads)')
    return resolve_auto(netG, pretrained)
