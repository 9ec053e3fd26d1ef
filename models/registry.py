"""The registries of networks (`netG.net_type`) and models (`model`), and what they require of options.

Networks live in `models/networks/<family>.py` (their shared layers in `models/networks/layers/`) and models
in `models/model_<name>.py`, each
registering itself with `@NETWORKS.register(...)` / `@MODELS.register(...)`: adding one is one new
file. Network kwargs come straight from the `netG` options: every key except `net_type` and the
`init_*` keys is passed to the constructor, and the constructor's signature is the list of
accepted keys (with its defaults), so a new network needs no mapping code anywhere.
"""
import inspect
import warnings
from typing import Any, Dict, Optional, Sequence

import torch
from torch import nn

from utils.errors import UserError
from utils.options import IGNORED, REQUIRED, Key
from utils.registry import Registry

NETWORKS = Registry('network', 'models.networks')
MODELS = Registry('model', 'models', 'model_*')

# netG keys that configure weight initialisation rather than the constructor, with their defaults.
INIT_OPTIONS: Dict[str, Any] = {
    'init_type': Key('default', (str,), help='re-initialise conv/linear weights (KAIR\'s init_weights); "default": '
                                             'keep the network\'s own'),
    'init_bn_type': Key('uniform', (str,), help='BatchNorm scales with init_type: uniform or constant'),
    'init_gain': Key(1.0, (int, float), help='gain of init_type\'s initialisation')}

# netG keys KAIR's option files write for every convolutional network; KAIR's builder passes each
# network only the ones it takes. A network whose constructor lacks one accepts it with a warning.
KAIR_SHARED_KEYS = ('in_nc', 'out_nc', 'nc', 'nf', 'nb', 'gc', 'ng', 'reduction', 'act_mode', 'upsample_mode',
                    'downsample_mode', 'bias')

# What KAIR's shared netG/netD keys and the super-resolution factor keys mean, for the option reference and
# --describe (a constructor's signature carries no help text; a network's docstring may say more).
NETWORK_KEY_HELP: Dict[str, str] = {
    'in_nc': 'input channels', 'out_nc': 'output channels',
    'nc': 'feature channels (a list: per level)', 'nf': 'feature channels',
    'base_nc': 'feature channels of the first layer',
    'nb': 'number of blocks (or layers; the unit is the network\'s)', 'gc': 'growth channels of a dense block',
    'ng': 'number of residual groups', 'reduction': 'channel-attention reduction ratio',
    'act_mode': 'KAIR\'s layer letters after a convolution: an optional norm (B, I), then R (ReLU) or L (LeakyReLU)',
    'upsample_mode': 'upsampling layer (KAIR: upconv, pixelshuffle or convtranspose)',
    'downsample_mode': 'downsampling layer (KAIR: avgpool, maxpool or strideconv)',
    'bias': 'convolutions with a bias',
    'n_layers': 'number of layers', 'norm_type': 'normalisation layer',
    # the usual names of today's architectures (SwinIR and the transformers after it, spandrel's constructors)
    **{k: 'input channels' for k in ('in_chans', 'in_ch', 'num_in_ch', 'in_channels', 'inp_channels')},
    **{k: 'output channels' for k in ('out_ch', 'num_out_ch', 'out_channels', 'out_chans')},
    'img_channel': 'image channels (in and out)',
    'embed_dim': 'feature (embedding) channels', 'num_feat': 'feature channels', 'dim': 'feature channels',
    'num_block': 'number of blocks', 'n_blocks': 'number of blocks',
    'depths': 'blocks per stage (one entry per stage)', 'num_heads': 'attention heads (per stage)',
    'window_size': 'attention window size', 'mlp_ratio': 'feed-forward hidden width / feature channels',
    'img_size': 'input size the network is built for (the training patch)',
    'img_range': 'pixel range the network works in (inputs are multiplied by it)',
    'upsampler': 'reconstruction head (upsampling layer)', 'qkv_bias': 'bias in the attention\'s q, k, v projections',
    'qk_scale': 'attention scale (null: head dimension ** -0.5)', 'drop_rate': 'dropout rate',
    'attn_drop_rate': 'attention dropout rate', 'drop_path_rate': 'stochastic depth rate',
    'use_checkpoint': 'activation checkpointing (less memory, more compute)',
    'ape': 'absolute position embedding', 'patch_norm': 'normalise after the patch embedding',
    'resi_connection': 'convolution(s) closing each residual group ("1conv" or "3conv")',
    **{k: 'super-resolution factor' for k in ('upscale', 'upscaling_factor', 'up_scale', 'upscale_factor', 'scale')},
}


def network_kwargs(netG: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in netG.items() if k != 'net_type' and k not in INIT_OPTIONS}


def build_network(netG: Dict[str, Any], where: str = 'netG.net_type') -> nn.Module:
    """Build the network named by `netG.net_type` (or netD's) with the remaining keys as kwargs."""
    return NETWORKS.get(netG['net_type'], where)(**network_kwargs(netG))


def build_on_meta(netG: Dict[str, Any], where: str = 'netG.net_type') -> Optional[nn.Module]:
    """The network built on the meta device: its names, shapes and parameter count for no memory. None when
    its constructor needs real tensors (reads values with .item(), loads a file): then only a real build tells.
    A UserError (a wrong option) is raised as it is."""
    try:
        with warnings.catch_warnings(), torch.device('meta'):
            warnings.filterwarnings('ignore')
            return build_network(netG, where)
    except UserError:
        raise
    except Exception:
        return None


# netD keys KAIR's option files write for every discriminator; each class takes the ones it uses.
KAIR_SHARED_D_KEYS = ('in_nc', 'base_nc', 'act_mode', 'n_layers', 'norm_type')


def network_options(net_type: str, where: str = 'netG.net_type',
                    shared: Sequence[str] = KAIR_SHARED_KEYS) -> Dict[str, Any]:
    """The keys `netG` accepts for `net_type` with their defaults (REQUIRED when the constructor has none).

    KAIR's `shared` keys that the constructor does not take are IGNORED: accepted with a warning.
    """
    cls = NETWORKS.get(net_type, where)
    params = inspect.signature(cls.__init__).parameters
    options: Dict[str, Any] = {'net_type': net_type, **{k: IGNORED for k in shared}}
    for name, p in params.items():
        if name != 'self' and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            options[name] = REQUIRED if p.default is inspect.Parameter.empty else p.default
    options.update(INIT_OPTIONS)
    return options



def discriminator_options(net_type: str, where: str = 'netD.net_type') -> Dict[str, Any]:
    """The keys `netD` accepts for `net_type`: as `network_options`, with KAIR's netD keys as the shared ones."""
    return network_options(net_type, where, KAIR_SHARED_D_KEYS)


def model_options(model: str, where: str = 'model') -> Dict[str, Any]:
    """What a model adds to the options: `{section: {key: default}}` for `train`, `path` and `val`, `netD` (True)
    when it trains a discriminator, and `choices`: its `train` type keys with the registry and prefix of
    the members they choose (utils.options.Choice)."""
    cls = MODELS.get(model, where)
    extra: Dict[str, Any] = {}
    if getattr(cls, 'TRAIN_OPTIONS', None):
        extra['train'] = cls.TRAIN_OPTIONS
    if getattr(cls, 'PATH_OPTIONS', None):
        extra['path'] = cls.PATH_OPTIONS
    if getattr(cls, 'VAL_OPTIONS', None):
        extra['val'] = cls.VAL_OPTIONS
    if getattr(cls, 'CHOICES', None):
        extra['choices'] = cls.CHOICES
    if getattr(cls, 'HAS_NETD', False):
        extra['netD'] = True
    return extra
