"""The losses of a BasicSR or traiNNer-redux file: BasicSR's slots (`pixel_opt`, `perceptual_opt`, `gan_opt`,
`ldl_opt`, and traiNNer-redux's older `*_opt` ones) and traiNNer-redux's `losses:` list, as this project's loss keys.

The first loss that compares images is `G_lossfn_type` (weight `G_lossfn_weight`), every further one an entry of
`G_extra_losses` ({loss: weight}) reading its own `G_<key>` keys; a loss member says which names it is
(`LOSSES.register(..., foreign=...)`). The adversarial and LDL losses, and BasicSR's VGG perceptual loss, are the
GAN model's own keys (`gan_type`, `D_lossfn_weight`, `ldl_weight`, `F_*`): this table reads them. A weight of 0
is no loss, as in both trainers.
"""
from typing import Any, Dict, List, Mapping, Tuple

from utils.options.foreign import BASICSR
from utils.options.readers.basicsr.context import Context
from utils.options.readers.basicsr.members import apply, declaration
from utils.options.readers.yaml_file import KeyPath
from utils.options.values import show
from utils.vgg19 import VGG19_LAYER_NAMES

# BasicSR's and traiNNer-redux's older one-loss slots of `train` (`losses:` is traiNNer-redux's list of them)
SLOTS = ('pixel_opt', 'mssim_opt', 'ms_ssim_l1_opt', 'perceptual_opt', 'contextual_opt', 'dists_opt',
         'hr_inversion_opt', 'dinov2_opt', 'topiq_opt', 'pd_opt', 'fd_opt', 'ldl_opt', 'hsluv_opt', 'gan_opt',
         'color_opt', 'luma_opt', 'avg_opt', 'bicubic_opt', 'feature_matching_opt')
GAN_NAMES = ('GANLoss', 'ganloss', 'MultiScaleGANLoss')
LDL_NAMES = ('ldlloss',)
# their gan_type → ours (models/model_gan.py `gan_type`)
GAN_TYPES = {'vanilla': 'gan', 'lsgan': 'lsgan', 'wgan': 'wgan', 'wgan_softplus': 'softplusgan', 'hinge': 'hinge'}


def entries(ctx: Context, train: Mapping[str, Any]) -> List[Tuple[KeyPath, Dict[str, Any]]]:
    """Every loss section of `train` in the order they are added: pixel_opt first, then the other slots, then the
    `losses:` list."""
    out = []
    for slot in SLOTS:
        if train.get(slot) is not None:
            out.append((('train', slot), ctx.section(('train', slot), train[slot])))
    listed = train.get('losses')
    if listed is not None:
        if not isinstance(listed, list):
            raise ctx.refuse(('train', 'losses'), 'expected a list of losses (- type: ..., loss_weight: ...)', listed)
        out += [(('train', 'losses', i), ctx.section(('train', 'losses', i), item)) for i, item in enumerate(listed)]
    return out


def translate_losses(ctx: Context, train: Mapping[str, Any]) -> None:
    """Put every loss of `train` into our train keys (see the module docstring)."""
    pixel_done = False
    extra: Dict[str, float] = {}
    extra_from: Dict[str, KeyPath] = {}
    for keys, section in entries(ctx, train):
        name = section.get('type')
        if not isinstance(name, str):
            raise ctx.refuse(keys + ('type',), 'required: the loss to use', name)
        weight = _weight(ctx, keys, section)
        if weight == 0:
            ctx.unneeded(keys, 'loss_weight 0: no loss')
            continue
        if name in GAN_NAMES or name.lower() == 'ganloss':
            _gan(ctx, keys, section, weight)
        elif name.lower() in LDL_NAMES or keys[-1] == 'ldl_opt':
            _ldl(ctx, keys, section, weight)
        elif name == 'PerceptualLoss' and ctx.trainer == BASICSR:
            _vgg_perceptual(ctx, keys, section)
        else:
            f = declaration(ctx, ctx.vocabulary, 'loss', keys, section)
            if not pixel_done:
                ctx.put('train.G_lossfn_type', f.ours, keys + ('type',))
                ctx.put('train.G_lossfn_weight', weight, keys + ('loss_weight',))
                pixel_done = True
            else:
                if f.ours in extra or f.ours == ctx.get('train.G_lossfn_type'):
                    raise ctx.refuse(keys + ('type',), f'a second {f.name} loss: each loss of this project is added '
                                     f'once (train.G_extra_losses), with one set of its keys', show_value=False)
                extra[f.ours] = weight
                extra_from[f.ours] = keys
            apply(ctx, f, keys, section, 'train', 'G_', skip=('type', 'loss_weight'))
    if extra:
        ctx.put('train.G_extra_losses', extra, ('train', 'losses') if 'losses' in train else next(iter(
            extra_from.values())))
    if not pixel_done:  # only adversarial / LDL / VGG losses: the pixel loss of our models is then off
        ctx.put('train.G_lossfn_weight', 0, None, 'the file has no pixel loss')
    if ctx.model == 'gan' and not ctx.has('train.F_lossfn_weight'):  # model gan's own VGG loss: only perceptual_opt
        ctx.put('train.F_lossfn_weight', 0, None, 'the file has no BasicSR perceptual_opt')


def _weight(ctx: Context, keys: KeyPath, section: Mapping[str, Any]) -> float:
    weight = section.get('loss_weight', 1.0 if ctx.trainer == BASICSR else None)
    if weight is None:
        raise ctx.refuse(keys + ('loss_weight',), 'required (traiNNer-redux requires it: 0 turns the loss off)',
                         show_value=False)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise ctx.refuse(keys + ('loss_weight',), 'expected a number', weight)
    if weight < 0:
        raise ctx.refuse(keys + ('loss_weight',), 'a negative weight (traiNNer-redux: compare with the bicubic-'
                                                  'upscaled input instead of the target) is not offered here', weight)
    return weight


def _only_keys(ctx: Context, keys: KeyPath, section: Mapping[str, Any], known: Mapping[str, Any]) -> None:
    """Every key of `section` must be one of `known` ({key: the only value honoured here, or None for any})."""
    for key, value in section.items():
        if key not in known:
            raise ctx.unknown(keys + (key,), sorted(known), f'{section.get("type")} takes {", ".join(sorted(known))}')
        if known[key] is not None and value != known[key]:
            raise ctx.refuse(keys + (key,), f'only {show(known[key])} is supported here', value)


def _gan(ctx: Context, keys: KeyPath, section: Mapping[str, Any], weight: float) -> None:
    """The adversarial loss: model gan's gan_type and D_lossfn_weight."""
    if ctx.model != 'gan':
        if ctx.trainer == BASICSR:
            ctx.unneeded(keys, f'{ctx.model_type} trains no discriminator')
            return
        raise ctx.refuse(keys, 'an adversarial loss needs a discriminator: add network_d', show_value=False)
    if section.get('type') == 'MultiScaleGANLoss':
        raise ctx.refuse(keys + ('type',), 'HiFaceGAN\'s multi-scale GAN loss is not offered here (near: model gan '
                                           'with netD.D_num_scales)', 'MultiScaleGANLoss')
    _only_keys(ctx, keys, section, {'type': None, 'gan_type': None, 'loss_weight': None, 'real_label_val': 1.0,
                                    'fake_label_val': 0.0})
    gan_type = section.get('gan_type', 'vanilla')
    if gan_type not in GAN_TYPES:
        raise ctx.refuse(keys + ('gan_type',), f'GAN losses here: {", ".join(GAN_TYPES)}', gan_type)
    ours = GAN_TYPES[gan_type]
    relativistic = ctx.model_foreign.convert.get('gan_type') if ctx.model_foreign is not None else None
    if relativistic is not None:
        try:
            ours = relativistic(ours)
        except ValueError as e:
            raise ctx.refuse(keys + ('gan_type',), str(e), gan_type) from None
    ctx.put('train.gan_type', ours, keys + ('gan_type',))
    ctx.put('train.D_lossfn_weight', weight, keys + ('loss_weight',))


def _ldl(ctx: Context, keys: KeyPath, section: Mapping[str, Any], weight: float) -> None:
    """LDL's artifact loss (Liang et al., CVPR 2022): model gan's ldl_weight, an L1 of the artifact-weighted
    residuals."""
    if ctx.model != 'gan':
        raise ctx.refuse(keys, 'the LDL loss trains here with the GAN model (a discriminator in network_d)',
                         show_value=False)
    allowed = {'type': None, 'loss_weight': None, 'reduction': 'mean', 'criterion': 'l1'}
    _only_keys(ctx, keys, section, allowed)
    if keys[-1] == 'ldl_opt' and section['type'] not in ('L1Loss', 'ldlloss'):
        raise ctx.refuse(keys + ('type',), 'LDL\'s loss here is the L1 of the artifact-weighted residuals (L1Loss)',
                         section['type'])
    ctx.put('train.ldl_weight', weight, keys + ('loss_weight',))


def _vgg_perceptual(ctx: Context, keys: KeyPath, section: Mapping[str, Any]) -> None:
    """BasicSR's PerceptualLoss: model gan's VGG19 perceptual loss (the F_* keys)."""
    if ctx.model != 'gan':
        raise ctx.refuse(keys, f'the VGG perceptual loss trains here with the GAN model (a discriminator in '
                               f'network_d); {ctx.model_type} with perceptual_opt is not offered', show_value=False)
    _only_keys(ctx, keys, section, {'type': None, 'layer_weights': None, 'vgg_type': 'vgg19', 'use_input_norm': None,
                                    'range_norm': None, 'perceptual_weight': None, 'style_weight': 0,
                                    'criterion': None, 'loss_weight': None, 'pretrained_path': None})
    layers = section.get('layer_weights')
    if not isinstance(layers, dict) or not layers:
        raise ctx.refuse(keys + ('layer_weights',), 'expected {layer name: weight, ...} (conv5_4: 1.0)', layers)
    unknown = [name for name in layers if name not in VGG19_LAYER_NAMES]
    if unknown:
        raise ctx.refuse(keys + ('layer_weights', unknown[0]), f'not a VGG19 layer ({VGG19_LAYER_NAMES[0]} ... '
                                                               f'{VGG19_LAYER_NAMES[-1]})', show_value=False)
    ordered = sorted(layers, key=VGG19_LAYER_NAMES.index)
    ctx.put('train.F_feature_layer', [VGG19_LAYER_NAMES.index(n) for n in ordered], keys + ('layer_weights',))
    ctx.put('train.F_weights', [layers[n] for n in ordered], keys + ('layer_weights',))
    criterion = section.get('criterion', 'l1')
    if criterion not in ('l1', 'l2'):
        raise ctx.refuse(keys + ('criterion',), 'feature distances here: l1, l2', criterion)
    ctx.put('train.F_lossfn_type', criterion, keys + ('criterion',))
    for their, ours, default in (('use_input_norm', 'F_use_input_norm', True), ('range_norm', 'F_use_range_norm',
                                                                                False),
                                 ('perceptual_weight', 'F_lossfn_weight', 1.0),
                                 ('pretrained_path', 'F_pretrained_path', None)):
        if their in section:
            ctx.put(f'train.{ours}', section[their], keys + (their,))
        else:
            ctx.put(f'train.{ours}', default, keys, f'BasicSR\'s default {their}')
    if 'loss_weight' in section:
        raise ctx.refuse(keys + ('loss_weight',), 'BasicSR\'s PerceptualLoss weighs with perceptual_weight',
                         section['loss_weight'])
