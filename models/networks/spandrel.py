"""Today's architectures (HAT, DAT, SPAN, PLKSR, Real-ESRGAN's compact net, NAFNet, ...) built by spandrel.

spandrel (MIT, https://github.com/chaiNNer-org/spandrel) maintains these architectures as plain
`nn.Module`s built from the official constructor arguments; re-writing forty of them would only add
bugs. Each is registered here as a `net_type` whose netG keys are the spandrel constructor's keyword
arguments (validated by signature like our own networks), except `realplksr`, which takes the
official RealPLKSR class's (see `realplksr_kwargs`), and `nafnet`, which adds `tlc`, the official
NAFNetLocal's test-time local converter (`nafnet_tlc`).

spandrel is imported only when a spandrel net_type is validated or built: importing this module (the
registry scans every module of models/networks/ for names) must work where spandrel is not installed, and
importing spandrel costs seconds.
"""
import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from torch import nn

from models.registry import NETWORKS
from utils.errors import UserError
from utils.options.foreign import BASICSR, REDUX, Foreign, Only, Refusal

SPANDREL_REQUIREMENT = 'spandrel==0.4.2'


@dataclass(frozen=True)
class Architecture:
    """Where spandrel keeps one architecture, and what docs/networks.md says of it."""
    net_type: str
    package: str  # spandrel.architectures.<package>
    cls: str  # the class in that package
    paper: str
    licence: str  # of the original code
    # our kwargs → spandrel's; None: the same keywords (the signature is spandrel's)
    adapter: Optional[Callable[..., Dict[str, Any]]] = None
    # our kwargs → the class to build, where spandrel has one class per variant (Real-CUGAN's per scale)
    choose: Optional[Callable[..., str]] = None
    variants: Tuple[str, ...] = ()  # every class `choose` can pick (`cls` is the first)
    # (built module, our kwargs) → the module to use: what the constructor does not do (NAFNet's TLC)
    finish: Optional[Callable[..., nn.Module]] = None
    # the names BasicSR-format files give it (the official repositories' class names, traiNNer-redux's presets)
    foreign: Tuple[Foreign, ...] = ()

    def load(self, cls: Optional[str] = None) -> type:
        """spandrel's class `cls` (default: `self.cls`), importing spandrel; a UserError when spandrel is not
        installed."""
        try:
            module = importlib.import_module(f'spandrel.architectures.{self.package}')
        except ImportError as e:
            raise UserError(f'netG.net_type: "{self.net_type}" is built by spandrel, which is not installed here '
                            f'({e}); pip install {SPANDREL_REQUIREMENT}') from None
        return getattr(module, cls or self.cls)

    def builds(self, model: nn.Module) -> bool:
        """Whether `model` is one of the classes this net_type builds (for net_type "auto")."""
        return type(model) in [self.load(name) for name in (self.cls, *self.variants)]

    def signature(self) -> inspect.Signature:
        """The keys netG takes: spandrel's constructor (or the adapter's) without the parameters whose
        defaults are classes or functions (norm layers, activations): an option file cannot name those."""
        source = self.adapter if self.adapter is not None else self.load().__init__
        params = [p for p in inspect.signature(source).parameters.values()
                  if p.name != 'self' and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                  and (p.default is p.empty or not callable(p.default))]
        return inspect.Signature([inspect.Parameter('self', inspect.Parameter.POSITIONAL_OR_KEYWORD)]
                                 + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params])

    def build(self, **kwargs: Any) -> nn.Module:
        """spandrel's module for our netG kwargs; a constructor's refusal becomes one line naming netG."""
        name = self.choose(**kwargs) if self.choose is not None else self.cls
        cls = self.load(name)
        given = kwargs
        if self.adapter is not None:
            kwargs = self.adapter(**kwargs)
        try:
            model = cls(**kwargs)
        except (ValueError, AssertionError, TypeError, KeyError) as e:
            raise UserError(f'netG ({self.net_type}): spandrel\'s {name} refuses these options: '
                            f'{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}') from None
        return self.finish(model, **given) if self.finish is not None else model


class LazySignature:
    """The `__init__` of a spandrel net_type as the options validator sees it (`network_options` reads
    `inspect.signature(cls.__init__)`): its signature is read from spandrel only when asked for."""

    def __init__(self, arch: Architecture):
        self.arch = arch

    @property
    def __signature__(self) -> inspect.Signature:
        return self.arch.signature()

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError('a spandrel network is built by __new__')


def spandrel_network(arch: Architecture) -> type:
    """A class for the registry: calling it returns spandrel's module (so the state_dict is spandrel's,
    unwrapped); its `__init__` carries the constructor's signature, lazily."""
    def __new__(cls: type, **kwargs: Any) -> nn.Module:
        return arch.build(**kwargs)
    name = arch.cls if arch.cls.isidentifier() else arch.net_type
    cls = type(name, (), {'__new__': __new__, '__init__': LazySignature(arch), 'architecture': arch,
                          '__doc__': f'{arch.paper} (spandrel\'s {arch.package}.{arch.cls}; original code: '
                                     f'{arch.licence}).', '__module__': __name__})
    return NETWORKS.register(arch.net_type, foreign=arch.foreign)(cls)


def realplksr_kwargs(*, in_ch: int = 3, out_ch: int = 3, dim: int = 64, n_blocks: int = 28,
                     upscaling_factor: int = 4, kernel_size: int = 17, split_ratio: float = 0.25,
                     use_ea: bool = True, norm_groups: int = 4, dropout: float = 0,
                     upsampler: str = 'pixelshuffle', layer_norm: bool = True) -> Dict[str, Any]:
    """The official RealPLKSR class's keywords (traiNNer-redux; its registry function `realplksr()`
    calls `upscaling_factor` `scale`: write `upscaling_factor` here) as spandrel's: spandrel builds 3
    channels in and out and says `dysample` for upsampler "dysample". The default norm is the
    official one (LayerNorm); `layer_norm: false` is the older GroupNorm variant."""
    if (in_ch, out_ch) != (3, 3):
        raise UserError(f'netG (realplksr): in_ch and out_ch must be 3 (spandrel builds RGB only), got '
                        f'{in_ch} and {out_ch}')
    if upsampler not in ('pixelshuffle', 'dysample'):
        raise UserError(f'netG.upsampler: realplksr takes "pixelshuffle" or "dysample", got "{upsampler}"')
    return dict(dim=dim, n_blocks=n_blocks, upscaling_factor=upscaling_factor, kernel_size=kernel_size,
                split_ratio=split_ratio, use_ea=use_ea, norm_groups=norm_groups, dropout=dropout,
                dysample=upsampler == 'dysample', layer_norm=layer_norm)


def realplksr_from_spandrel(hyperparameters: Dict[str, Any]) -> Dict[str, Any]:
    """The inverse of `realplksr_kwargs` (for netG blocks written from a detected checkpoint)."""
    h = dict(hyperparameters)
    h['upsampler'] = 'dysample' if h.pop('dysample', False) else 'pixelshuffle'
    return h


def kbnet_s_kwargs(*, img_channel: int = 3, width: int = 64, middle_blk_num: int = 12,
                   enc_blk_nums: List[int] = [2, 2, 4, 8], dec_blk_nums: List[int] = [2, 2, 2, 2],
                   lightweight: bool = False, ffn_scale: float = 2.0) -> Dict[str, Any]:
    """KBNet_s's keywords, with `ffn_scale` a number: spandrel's default is the integer 2, but the released
    SIDD model uses 1.5."""
    return dict(img_channel=img_channel, width=width, middle_blk_num=middle_blk_num, enc_blk_nums=list(enc_blk_nums),
                dec_blk_nums=list(dec_blk_nums), lightweight=lightweight, ffn_scale=ffn_scale)


def nafnet_kwargs(*, img_channel: int = 3, width: int = 16, middle_blk_num: int = 1, enc_blk_nums: List[int] = [],
                  dec_blk_nums: List[int] = [], tlc: Any = None) -> Dict[str, Any]:
    """NAFNet's keywords and `tlc`, the test-time local converter of the released GoPro/REDS models
    (NAFNetLocal; see `nafnet_tlc`): null or false (global pooling, plain NAFNet), true (TLC for the official
    256x256 training crops) or [H, W] (for a network trained on H x W crops)."""
    tlc_train_size(tlc)  # checked before anything is built
    return dict(img_channel=img_channel, width=width, middle_blk_num=middle_blk_num, enc_blk_nums=list(enc_blk_nums),
                dec_blk_nums=list(dec_blk_nums))


TLC_TRAIN_SIZE = (256, 256)  # NAFNetLocal's default train_size (1, 3, 256, 256): GoPro's and REDS's crops


def tlc_train_size(tlc: Any) -> Optional[Tuple[int, int]]:
    """The training crop size `tlc` asks for, or None for no TLC; a value of another kind is one line."""
    if tlc is None or tlc is False:
        return None
    if tlc is True:
        return TLC_TRAIN_SIZE
    if isinstance(tlc, list) and len(tlc) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                                       for v in tlc):
        return tlc[0], tlc[1]
    raise UserError(f'netG.tlc: must be false, true (training crops of {TLC_TRAIN_SIZE[0]}x{TLC_TRAIN_SIZE[1]}, '
                    f'as the released GoPro/REDS models) or the training crop size [H, W], got {tlc!r}')


def nafnet_tlc(model: nn.Module, *, tlc: Any = None, **_: Any) -> nn.Module:
    """With `tlc`, every SCA pool of the NAFNet (`sca[0]`, a global average) becomes TLC's local average in
    evaluation (models/networks/layers/tlc.py), with the window NAFNetLocal fixes for it: its level's feature
    size for a zero-padded training crop, x 1.5. Level l (encoder l, the middle blocks at the bottom, decoder j
    at level depth-1-j) sees the padded crop halved l times. Nothing is allocated: it works on the meta
    device, and the state_dict is unchanged. spandrel (chaiNNer, ComfyUI) builds NAFNet without TLC, so the model
    declares that its weights have no file for spandrel that computes what it does (`spandrel_state_dict`)."""
    size = tlc_train_size(tlc)
    if size is None:
        return model
    model.spandrel_state_dict = no_tlc_in_spandrel
    from models.networks.layers.tlc import LocalAvgPool, tlc_kernel
    depth = len(model.encoders)
    pad = model.padder_size
    padded = [s + (pad - s % pad) % pad for s in size]
    stages = [(level, enc) for level, enc in enumerate(model.encoders)] + [(depth, model.middle_blks)] \
        + [(depth - 1 - j, dec) for j, dec in enumerate(model.decoders)]
    for level, stage in stages:
        kernel = tuple(tlc_kernel(p >> level, s) for p, s in zip(padded, size))
        for block in stage:
            block.sca[0] = LocalAvgPool(kernel)
    return model


def no_tlc_in_spandrel() -> Dict[str, Any]:
    """A NAFNet with `tlc` has no spandrel layout: spandrel's NAFNet pools globally."""
    raise UserError('netG.tlc: spandrel builds NAFNet without the test-time local converter, so chaiNNer and ComfyUI '
                    'would pool globally; to write these weights for that, export with --set netG.tlc=false')


REALCUGAN_SCALES = (2, 3, 4)


def realcugan_kwargs(*, in_channels: int = 3, out_channels: int = 3, pro: bool = False,
                     scale: int = 2) -> Dict[str, Any]:
    """Real-CUGAN's keywords with its factor: spandrel has one class per factor (UpCunet2x, 3x, 4x), which
    `scale` picks (`realcugan_class`, which also refuses other factors); `pro` is the "pro" release's variant
    (an extra output convolution)."""
    return dict(in_channels=in_channels, out_channels=out_channels, pro=pro)


def realcugan_class(*, scale: int = 2, **_: Any) -> str:
    """spandrel's Real-CUGAN class for the factor; another factor is one line (netG.scale inherits the top-level
    "scale", which is 1 when not given)."""
    if scale not in REALCUGAN_SCALES:
        raise UserError(f'netG.scale: realcugan upscales by 2, 3 or 4, got {scale} (set the top-level "scale")')
    return f'UpCunet{scale}x'


def official(*names: str, **extra: Any) -> Tuple[Foreign, ...]:
    """The class names the official repositories' BasicSR-format files write (`type: HAT`), with the constructor's
    own keywords."""
    return tuple(Foreign(name, BASICSR, **extra) for name in names)


def redux(scale_key: str, presets: Dict[str, Dict[str, Any]], **extra: Any) -> Tuple[Foreign, ...]:
    """traiNNer-redux's registry functions for this architecture (`type: hat_m`): each is spandrel's class with its
    own defaults (`presets`: {name: the defaults that differ from spandrel's}), the top-level scale as
    `scale_key`. Facts read from traiNNer-redux's traiNNer/archs/*_arch.py (Apache-2.0)."""
    keys = {'scale': scale_key, **extra.pop('keys', {})}
    return tuple(Foreign(name, REDUX, keys=keys, defaults=defaults, **extra) for name, defaults in presets.items())


_SIXES = [6] * 6
_TWELVE = [6] * 12
_CHECKPOINT = Only((False, True), 'activation checkpointing changes memory, not the network')
_MOSR_UPSAMPLERS = {'pixelshuffle': 'ps', 'dysample': 'dys', 'geoensemblepixelshuffle': 'gps'}


def _mosr_upsampler(value: Any) -> str:
    """traiNNer-redux's MoSR upsampler names → spandrel's."""
    if value not in _MOSR_UPSAMPLERS:
        raise Refusal(f'MoSR upsamplers: {", ".join(_MOSR_UPSAMPLERS)}')
    return _MOSR_UPSAMPLERS[value]


APACHE = 'Apache-2.0'
# Read second-hand: neosr's table of the licences of the code it took in; the repositories hold no licence file.
NEOSR_APACHE = 'Apache-2.0 (as neosr\'s licence table lists it; no licence file in the repository)'
# No licence file and no licence statement by the authors: ask them before using the code commercially.
NO_LICENCE = 'not stated (no licence file or statement in the repository)'
ARCHITECTURES: List[Architecture] = [
    Architecture('hat', 'HAT', 'HAT', 'Chen et al., Activating More Pixels in Image Super-Resolution Transformer, '
                 'CVPR 2023', APACHE, foreign=official('HAT') + redux('upscale', {
                     'hat_s': dict(embed_dim=144, depths=_SIXES, num_heads=_SIXES, window_size=16, compress_ratio=24,
                                   squeeze_factor=24, mlp_ratio=2.0),
                     'hat_m': dict(embed_dim=180, depths=_SIXES, num_heads=_SIXES, window_size=16, mlp_ratio=2.0),
                     'hat_l': dict(embed_dim=180, depths=_TWELVE, num_heads=_TWELVE, window_size=16, mlp_ratio=2.0)})),
    Architecture('dat', 'DAT', 'DAT', 'Chen et al., Dual Aggregation Transformer for Image Super-Resolution, '
                 'ICCV 2023', APACHE, foreign=official('DAT') + redux('upscale', {
                     'dat': dict(split_size=[8, 32], depth=_SIXES, num_heads=_SIXES),
                     'dat_2': dict(split_size=[8, 32], depth=_SIXES, num_heads=_SIXES, expansion_factor=2),
                     'dat_s': dict(split_size=[8, 16], depth=_SIXES, num_heads=_SIXES, expansion_factor=2),
                     'dat_2_l': dict(split_size=[8, 32], depth=_TWELVE, num_heads=_TWELVE, expansion_factor=2),
                     'dat_light': dict(split_size=[8, 32], depth=[18], embed_dim=60, num_heads=[6], expansion_factor=2,
                                       resi_connection='3conv')}, unneeded={'unshuffle_mod': False})),
    Architecture('span', 'SPAN', 'SPAN', 'Wan et al., Swift Parameter-free Attention Network for Efficient '
                 'Super-Resolution, CVPRW 2024', APACHE, foreign=official('SPAN') + redux('upscale', {
                     name: dict(num_in_ch=3, num_out_ch=3, feature_channels=width, norm=False)
                     for name, width in (('span', 52), ('span_s', 48), ('span_f32', 32), ('span_f64', 64),
                                         ('span_f96', 96))}, unneeded={'num_blocks': 6})),
    Architecture('plksr', 'PLKSR', 'PLKSR', 'Lee et al., Partial Large Kernel CNNs for Efficient '
                 'Super-Resolution, arXiv 2024', 'MIT', foreign=official('PLKSR') + redux('upscaling_factor', {
                     'plksr': dict(ccm_type='DCCM'),
                     'plksr_tiny': dict(n_blocks=12, ccm_type='DCCM', kernel_size=13, use_ea=False)})),
    Architecture('realplksr', 'PLKSR', 'RealPLKSR', 'RealPLKSR (community variant of PLKSR, neosr / '
                 'traiNNer-redux; no paper)', APACHE, realplksr_kwargs, foreign=official('RealPLKSR') + redux('upscaling_factor', {
                     'realplksr': {}, 'realplksr_tiny': dict(n_blocks=12, kernel_size=13, use_ea=False),
                     'realplksr_large': dict(dim=96)})),
    Architecture('srvggnet', 'Compact', 'Compact', 'Wang et al., Real-ESRGAN (compact SRVGGNet), ICCVW 2021',
                 'BSD-3-Clause', foreign=official('SRVGGNetCompact') + redux('upscale', {
                     'compact': {}, 'ultracompact': dict(num_conv=8), 'superultracompact': dict(num_feat=24, num_conv=8)},
                     unneeded={'learn_residual': True})),
    Architecture('nafnet', 'NAFNet', 'NAFNet', 'Chen et al., Simple Baselines for Image Restoration, ECCV 2022 '
                 '(`tlc`: Chu et al., Improving Image Restoration by Revisiting Global Information Aggregation, '
                 'ECCV 2022)', 'MIT', nafnet_kwargs, finish=nafnet_tlc, foreign=official('NAFNet') + (Foreign('NAFNetLocal', BASICSR, defaults={'tlc': True},
                                          unneeded={'fast_imp': False},
                                          keys={'train_size': 'tlc'}, convert={'train_size': lambda v: list(v)[-2:]}),)),
    Architecture('omnisr', 'OmniSR', 'OmniSR', 'Wang et al., Omni Aggregation Networks for Lightweight Image '
                 'Super-Resolution, CVPR 2023', 'MIT', foreign=official('OmniSR') + redux('up_scale', {'omnisr': dict(res_num=5)})),
    Architecture('atd', 'ATD', 'ATD', 'Zhang et al., Transcending the Limit of Local Window: Advanced '
                 'Super-Resolution Transformer with Adaptive Token Dictionary, CVPR 2024', APACHE, foreign=official('ATD') + redux('upscale', {
                     'atd': dict(img_size=96, embed_dim=210, depths=_SIXES, num_heads=_SIXES, window_size=16,
                                 num_tokens=128, reducted_dim=20, upsampler='pixelshuffle'),
                     'atd_light': dict(embed_dim=48, window_size=16, category_size=128, reducted_dim=8,
                                       convffn_kernel_size=7, mlp_ratio=1, upsampler='pixelshuffledirect')})),
    Architecture('drct', 'DRCT', 'DRCT', 'Hsu et al., DRCT: Saving Image Super-Resolution away from '
                 'Information Bottleneck, CVPRW 2024', 'MIT', foreign=official('DRCT') + redux('upscale', {
                     'drct': dict(upsampler='pixelshuffle'),
                     'drct_l': dict(depths=_TWELVE, num_heads=_TWELVE, upsampler='pixelshuffle'),
                     'drct_xl': dict(depths=[6] * 14, num_heads=[6] * 14, upsampler='pixelshuffle')},
                     unneeded={'use_checkpoint': _CHECKPOINT})),
    Architecture('safmn', 'SAFMN', 'SAFMN', 'Sun et al., Spatially-Adaptive Feature Modulation for Efficient '
                 'Image Super-Resolution, ICCV 2023', NO_LICENCE, foreign=official('SAFMN') + redux('upscaling_factor', {'safmn': dict(dim=36), 'safmn_l': dict(dim=128, n_blocks=16)})),
    Architecture('scunet', 'SCUNet', 'SCUNet', 'Zhang et al., Practical Blind Image Denoising via Swin-Conv-UNet '
                 'and Data Synthesis, MIR 2023', APACHE, foreign=official('SCUNet')),
    Architecture('swin2sr', 'Swin2SR', 'Swin2SR', 'Conde et al., Swin2SR: SwinV2 Transformer for Compressed '
                 'Image Super-Resolution and Restoration, ECCVW 2022', APACHE, foreign=official('Swin2SR') + redux('upscale', {
                     'swin2sr_s': dict(embed_dim=60, window_size=8, mlp_ratio=2.0, upsampler='pixelshuffledirect'),
                     'swin2sr_m': dict(embed_dim=180, depths=_SIXES, num_heads=_SIXES, window_size=8, mlp_ratio=2.0,
                                       upsampler='pixelshuffle'),
                     'swin2sr_l': dict(embed_dim=240, depths=[6] * 9, num_heads=[8] * 9, window_size=8, mlp_ratio=2.0,
                                       upsampler='nearest+conv', resi_connection='3conv')})),
    Architecture('rgt', 'RGT', 'RGT', 'Chen et al., Recursive Generalization Transformer for Image '
                 'Super-Resolution, ICLR 2024', APACHE, foreign=official('RGT') + redux('upscale', {
                     'rgt': dict(depth=[6] * 8, num_heads=[6] * 8, mlp_ratio=2.0, split_size=[8, 32]),
                     'rgt_s': dict(depth=_SIXES, num_heads=_SIXES, mlp_ratio=2.0, split_size=[8, 32])})),
    Architecture('grl', 'GRL', 'GRL', 'Li et al., Efficient and Explicit Modelling of Image Hierarchies for '
                 'Image Restoration, CVPR 2023', 'MIT', foreign=official('GRL') + redux('upscale', {
                     name: dict(embed_dim=dim, upsampler=up, depths=depths, num_heads_window=[heads] * len(depths),
                                num_heads_stripe=[heads] * len(depths), window_size=32, stripe_size=[64, 64],
                                stripe_shift=True, mlp_ratio=2.0, anchor_window_down_factor=4, local_connection=local)
                     for name, dim, up, depths, heads, local in (
                         ('grl_s', 128, 'pixelshuffle', [4, 4, 4, 4], 2, False),
                         ('grl_b', 180, 'pixelshuffle', [4, 4, 8, 8, 8, 4, 4], 3, True),
                         ('grl_t', 64, 'pixelshuffledirect', [4, 4, 4, 4], 2, False))})),
    Architecture('mosr', 'MoSR', 'MoSR', 'MoSR (community architecture, umzi2; no paper)', NO_LICENCE, foreign=redux('upscale', {'mosr': {}, 'mosr_t': dict(n_block=5, dim=48)}, convert={'upsampler': _mosr_upsampler})),
    Architecture('moesr', 'MoESR', 'MoESR', 'MoESR (community architecture, umzi2; no paper)', NO_LICENCE, foreign=redux('scale', {'moesr2': dict(expansion_factor=8 / 3)},
                     note='traiNNer-redux\'s MoESR2 as spandrel\'s MoESR builds it')),
    Architecture('seemore', 'SeemoRe', 'SeemoRe', 'Zamfir et al., See More Details: Efficient Image '
                 'Super-Resolution by Experts Mining, ICML 2024', NO_LICENCE, foreign=official('SeemoRe') + redux('scale', {'seemore_t': dict(num_experts=3, embedding_dim=36, lr_space='exp')})),
    Architecture('craft', 'CRAFT', 'CRAFT', 'Li et al., Feature Modulation Transformer: Cross-Refinement and '
                 'Spatial-Frequency Modulation for Lightweight SR (CRAFT), ICCV 2023', NEOSR_APACHE, foreign=official('CRAFT') + redux('upscale', {'craft': {}})),
    Architecture('dctlsa', 'DCTLSA', 'DCTLSA', 'Zeng et al., Densely Connected Transformer with Linear '
                 'Self-Attention for Lightweight Image Super-Resolution, TIM 2023', NEOSR_APACHE, foreign=official('DCTLSA') + redux('upscale', {'dctlsa': {}})),
    Architecture('ditn', 'DITN', 'DITN', 'Liu et al., Unfolding Once is Enough: A Deployment-Friendly '
                 'Transformer Unit for Super-Resolution, ACM MM 2023', NEOSR_APACHE, foreign=official('DITN') + redux('upscale', {'ditn_real': {}})),
    Architecture('fftformer', 'FFTformer', 'FFTformer', 'Kong et al., Efficient Frequency Domain-based '
                 'Transformers for High-Quality Image Deblurring, CVPR 2023', 'MIT', foreign=official('fftformer')),
    Architecture('uformer', 'Uformer', 'Uformer', 'Wang et al., Uformer: A General U-Shaped Transformer for '
                 'Image Restoration, CVPR 2022', 'MIT', foreign=official('Uformer')),
    Architecture('fdat', 'FDAT', 'FDAT', 'FDAT (community architecture, a lighter DAT; traiNNer-redux; no paper)',
                 NO_LICENCE, foreign=redux('scale', {
                     'fdat_tiny': dict(embed_dim=96, num_groups=2, depth_per_group=2, num_heads=3,
                                       ffn_expansion_ratio=1.5, drop_path_rate=0.05),
                     'fdat_light': dict(embed_dim=108, num_groups=3, depth_per_group=2, drop_path_rate=0.08),
                     'fdat_medium': {}, 'fdat_large': dict(embed_dim=180, depth_per_group=4, num_heads=6),
                     'fdat_xl': dict(embed_dim=180, num_groups=6, depth_per_group=6, num_heads=6)})),
    Architecture('realcugan', 'RealCUGAN', 'UpCunet2x', 'Real-CUGAN (bilibili AI Lab, anime super-resolution; '
                 'no paper)', 'MIT', realcugan_kwargs, realcugan_class, ('UpCunet3x', 'UpCunet4x'), foreign=redux('scale', {'realcugan': {}}, unneeded={'fast': False})),
    # traiNNer-redux's rcan is spandrel's RCAN (the original code's head/body/tail layout, its own weights load);
    # BasicSR's RCAN, another layout and normalisation, is this project's `rcan`
    Architecture('rcan_original', 'RCAN', 'RCAN', 'Zhang et al., Image Super-Resolution Using Very Deep Residual '
                 'Channel Attention Networks, ECCV 2018 (the original code\'s layout; `unshuffle_mod`: traiNNer-redux\'s '
                 'pixel-unshuffle head at scales 1 and 2)', 'as yulunzhang/RCAN states it (built on EDSR-PyTorch, MIT)', foreign=redux('scale', {
                     'rcan': dict(norm=False), 'rcan_unshuffle': dict(norm=False, unshuffle_mod=True),
                     'rcan_s': dict(n_resgroups=8, n_resblocks=16, n_feats=48, norm=False, unshuffle_mod=True),
                     'rcan_l': dict(n_feats=96, norm=False, unshuffle_mod=True),
                     'rcan_xl': dict(n_resgroups=12, n_resblocks=24, n_feats=96, norm=False, unshuffle_mod=True)})),
    Architecture('swiftsrgan', 'SwiftSRGAN', 'SwiftSRGAN', 'Krishnan & Krishnan, SwiftSRGAN: Rethinking '
                 'Super-Resolution for Efficient and Real-time Inference, arXiv 2021', 'CC0-1.0'),
    Architecture('kbnet_s', 'KBNet', 'KBNet_s', 'Zhang et al., KBNet: Kernel Basis Network for Image Restoration, '
                 'arXiv 2023 (the NAFNet-based variant)', NO_LICENCE, kbnet_s_kwargs, foreign=official('KBNet_s')),
    Architecture('kbnet_l', 'KBNet', 'KBNet_l', 'Zhang et al., KBNet: Kernel Basis Network for Image Restoration, '
                 'arXiv 2023 (the Restormer-based variant)', NO_LICENCE, foreign=official('KBNet_l')),
    Architecture('retinexformer', 'RetinexFormer', 'RetinexFormer', 'Cai et al., Retinexformer: One-stage '
                 'Retinex-based Transformer for Low-light Image Enhancement, ICCV 2023', 'MIT', foreign=official('RetinexFormer')),
    Architecture('mixdehazenet', 'MixDehazeNet', 'MixDehazeNet', 'Lu et al., MixDehazeNet: Mix Structure Block for '
                 'Image Dehazing Network, arXiv 2023', 'MIT'),
    Architecture('hvicidnet', 'HVICIDNet', 'HVICIDNet', 'Yan et al., HVI: A New Color Space for Low-light Image '
                 'Enhancement (CIDNet), CVPR 2025', 'MIT'),
]

for _arch in ARCHITECTURES:
    spandrel_network(_arch)


def spandrel_architecture(net_type: str) -> Optional[Architecture]:
    """The spandrel architecture registered as `net_type`, or None for a network of our own."""
    return next((a for a in ARCHITECTURES if a.net_type == net_type), None)
