"""KAIR-compatible building blocks, so networks built from them get KAIR's state_dict names.

KAIR assembles its convolutional networks from mode strings ('CBR' = conv, batch norm, ReLU) and
flattens the pieces into one `nn.Sequential`, so a parameter's name is its position (`model.N`).
Reproducing that construction order here is what lets KAIR checkpoints load unchanged.
"""
import re
from typing import Callable, List, Sequence

import torch
from torch import nn

from utils.errors import UserError

UPSAMPLE_MODES = ('upconv', 'pixelshuffle', 'convtranspose')
DOWNSAMPLE_MODES = ('strideconv', 'maxpool', 'avgpool')
_NEAREST_LETTER = {2: 'U', 3: 'u', 4: 'v'}  # KAIR's letters for nearest upsampling by 2/3/4


def _layer(t: str, in_nc: int, out_nc: int, kernel_size: int, stride: int, padding: int, bias: bool,
           negative_slope: float) -> nn.Module:
    if t == 'C':
        return nn.Conv2d(in_nc, out_nc, kernel_size, stride, padding, bias=bias)
    if t == 'T':
        return nn.ConvTranspose2d(in_nc, out_nc, kernel_size, stride, padding, bias=bias)
    if t == 'B':
        # KAIR's BN settings (momentum=0.9 is KAIR's choice; eps matters for pretrained weights).
        return nn.BatchNorm2d(out_nc, momentum=0.9, eps=1e-4, affine=True)
    if t == 'I':
        return nn.InstanceNorm2d(out_nc, affine=True)
    if t in 'Rr':
        return nn.ReLU(inplace=t == 'R')
    if t in 'Ll':
        return nn.LeakyReLU(negative_slope=negative_slope, inplace=t == 'L')
    if t in '234':
        return nn.PixelShuffle(int(t))
    if t in 'Uuv':
        return nn.Upsample(scale_factor={'U': 2, 'u': 3, 'v': 4}[t], mode='nearest')
    if t == 'M':
        return nn.MaxPool2d(kernel_size, stride, padding=0)
    if t == 'A':
        return nn.AvgPool2d(kernel_size, stride, padding=0)
    raise ValueError(f'unknown layer letter {t!r}')


def sequential(*modules: nn.Module) -> nn.Module:
    """KAIR's `B.sequential`: one module stays itself, several are flattened one level into a Sequential.

    The flattening is what numbers layers across head/body/tail as `model.0 … model.N`.
    """
    if len(modules) == 1:
        return modules[0]
    flat: List[nn.Module] = []
    for m in modules:
        flat.extend(m.children() if isinstance(m, nn.Sequential) else [m])
    return nn.Sequential(*flat)


def conv(in_nc: int, out_nc: int, mode: str = 'C', kernel_size: int = 3, stride: int = 1, padding: int = 1,
         bias: bool = True, negative_slope: float = 0.2) -> nn.Module:
    """KAIR's `B.conv`: one layer per letter of `mode` (C conv, T transposed conv, B/I norm, R/r ReLU,
    L/l LeakyReLU (lower case: not in place), 2/3/4 pixel shuffle, U/u/v nearest x2/x3/x4, M/A pool)."""
    return sequential(*[_layer(t, in_nc, out_nc, kernel_size, stride, padding, bias, negative_slope)
                        for t in mode])


class ResBlock(nn.Module):
    """x + res(x) with `res` built from `mode` ('CRC' in SRResNet): KAIR's names `res.0`, `res.2`."""

    def __init__(self, nc: int, mode: str = 'CRC', bias: bool = True, negative_slope: float = 0.2):
        super().__init__()
        self.res = conv(nc, nc, mode, bias=bias, negative_slope=negative_slope)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.res(x)


class ShortcutBlock(nn.Module):
    """x + sub(x): the long skip over an SR body, kept as its own module because KAIR names it `sub`."""

    def __init__(self, sub: nn.Module):
        super().__init__()
        self.sub = sub

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.sub(x)


def check_act_mode(act_mode: str, net_type: str) -> None:
    """An optional norm letter (B/I) then the activation (R/L), the only forms KAIR's networks build."""
    if not isinstance(act_mode, str) or not re.fullmatch(r'[BI]?[RL]', act_mode):
        raise UserError(f'netG.act_mode: "{act_mode}" is not supported for {net_type}; '
                        'use R, L, BR, BL, IR or IL (norm letter B/I, then activation R/L)')


def check_choice(key: str, value: str, allowed: Sequence[str], net_type: str) -> None:
    """A mode option (`upsample_mode`, `downsample_mode`) must be one this network can build."""
    if value not in allowed:
        raise UserError(f'netG.{key}: "{value}" is not supported for {net_type}; '
                        f'use {", ".join(allowed[:-1])} or {allowed[-1]}')


def upsampler(upsample_mode: str, in_nc: int, out_nc: int, factor: int, act: str = '', bias: bool = True,
              negative_slope: float = 0.2) -> nn.Module:
    """One upsampling step by `factor` (2, 3 or 4) then the `act` letters, laid out as KAIR's
    `upsample_upconv` (nearest + conv), `upsample_pixelshuffle` (conv to factor² × out_nc + shuffle)
    and `upsample_convtranspose` (kernel = stride = factor)."""
    if upsample_mode == 'upconv':
        return conv(in_nc, out_nc, _NEAREST_LETTER[factor] + 'C' + act, bias=bias, negative_slope=negative_slope)
    if upsample_mode == 'pixelshuffle':
        return conv(in_nc, out_nc * factor ** 2, 'C' + str(factor) + act, bias=bias, negative_slope=negative_slope)
    if upsample_mode == 'convtranspose':
        return conv(in_nc, out_nc, 'T' + act, factor, factor, 0, bias=bias, negative_slope=negative_slope)
    raise ValueError(f'unknown upsample_mode {upsample_mode!r}')


def downsampler(downsample_mode: str, in_nc: int, out_nc: int, factor: int, act: str = '', bias: bool = True,
                negative_slope: float = 0.2) -> nn.Module:
    """One downsampling step by `factor`: a conv with kernel = stride = factor (KAIR's strideconv), or a
    max/avg pool followed by a size-preserving 3x3 conv."""
    if downsample_mode == 'strideconv':
        return conv(in_nc, out_nc, 'C' + act, factor, factor, 0, bias=bias, negative_slope=negative_slope)
    if downsample_mode in ('maxpool', 'avgpool'):
        pool = conv(in_nc, in_nc, 'M' if downsample_mode == 'maxpool' else 'A', factor, factor, 0)
        return sequential(pool, conv(in_nc, out_nc, 'C' + act, bias=bias, negative_slope=negative_slope))
    raise ValueError(f'unknown downsample_mode {downsample_mode!r}')


def plain_convs(in_nc: int, nc: int, nb: int, act_mode: str, net_type: str) -> List[nn.Module]:
    """The DnCNN-style stack of `nb - 1` convs before the tail: the head has the activation only,
    the body norm + activation. FDnCNN, FFDNet and SRMD share it; the caller adds the tail."""
    check_act_mode(act_mode, net_type)
    if nb < 2:
        raise UserError(f'netG.nb: {net_type} needs at least 2 conv layers, got {nb}')
    return [conv(in_nc, nc, 'C' + act_mode[-1])] + [conv(nc, nc, 'C' + act_mode) for _ in range(nb - 2)]


def sr_upscale_factors(upscale: int, net_type: str) -> List[int]:
    """The per-step factors of an SRResNet-style upsampler: one x3, or one x2 per factor of 2."""
    if upscale == 3:
        return [3]
    if upscale < 1 or upscale & (upscale - 1):
        raise UserError(f'netG.upscale: {net_type} supports 3 or a power of 2, got {upscale!r}')
    return [2] * (upscale.bit_length() - 1)


def srresnet_layout(in_nc: int, out_nc: int, nc: int, nb: int, block: Callable[[], nn.Module], upscale: int,
                    act_mode: str, upsample_mode: str, tail_bias: bool, net_type: str) -> nn.Sequential:
    """SRResNet's layout, which KAIR's msrresnet0, dpsr and rrdb share: head conv, `nb` blocks + conv
    under a long skip, upsampling at the end (cheap: the body runs at low resolution), two convs."""
    check_act_mode(act_mode, net_type)
    check_choice('upsample_mode', upsample_mode, UPSAMPLE_MODES, net_type)
    if upsample_mode == 'pixelshuffle' and act_mode[0] in 'BI':
        raise UserError(f'netG.act_mode: "{act_mode}" with upsample_mode pixelshuffle is not supported for '
                        f'{net_type}: KAIR sizes that norm for the channels before the shuffle, so it cannot run; '
                        'use R or L, or another upsample_mode')
    ups = [upsampler(upsample_mode, nc, nc, f, act_mode) for f in sr_upscale_factors(upscale, net_type)]
    tail = [conv(nc, nc, 'C' + act_mode), conv(nc, out_nc, 'C', bias=tail_bias)]
    body = ShortcutBlock(sequential(*[block() for _ in range(nb)], conv(nc, nc, 'C')))
    return sequential(conv(in_nc, nc, 'C'), body, *ups, *tail)


def single_step_upsampler(upsample_mode: str, in_nc: int, out_nc: int, upscale: int, net_type: str) -> nn.Module:
    """The one-step tail of SRMD and IMDN (straight to `out_nc`): KAIR builds it for x2, x3 and x4 only."""
    check_choice('upsample_mode', upsample_mode, UPSAMPLE_MODES, net_type)
    if upscale not in _NEAREST_LETTER:
        raise UserError(f'netG.upscale: {net_type} supports 2, 3 or 4, got {upscale!r}')
    return upsampler(upsample_mode, in_nc, out_nc, upscale)


class DropPath(nn.Module):
    """Stochastic depth: drops the whole residual branch per sample during training.

    The keep probability is a (non-persistent) tensor and forward never branches on the rate: blocks
    of one kind then run the same compiled code (models/compile.py) although each has its own rate
    (a linear ramp over the depth), where a Python float would make torch.compile specialise, and
    recompile, per block. (Networks put an nn.Identity where the rate is 0, as the papers' code does.)
    """

    def __init__(self, drop_prob: float = 0.0):
        super().__init__()
        self.drop_prob = float(drop_prob)  # for repr; forward reads keep_prob
        self.register_buffer('keep_prob', torch.tensor(1.0 - self.drop_prob), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        keep = self.keep_prob.to(x.dtype)
        return x * (torch.rand(shape, dtype=x.dtype, device=x.device) < keep).to(x.dtype) / keep
