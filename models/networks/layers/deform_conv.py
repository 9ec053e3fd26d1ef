"""Modulated deformable convolution (DCNv2) with a pure-PyTorch CPU path.

`deform_conv2d` has torchvision's signature and semantics (offset layout, offset groups inferred
from the offset's channel count, weight groups inferred from `input.shape[1] // weight.shape[1]`,
zero padding outside the image). On CUDA it always calls `torchvision.ops.deform_conv2d`. On CPU
it uses the implementation chosen by `DEFORM_IMPL`:

- ``'torch'``: bilinear sampling with `F.grid_sample` + one batched matmul. Measured faster than
  torchvision's CPU kernel for VRT-sized shapes (see bench/bench_deform_conv.py). The sampled
  columns (B × C_in × 9 × H_out × W_out, 9× the input) exist only inside one call: under autograd
  the layer saves its inputs alone and samples again in backward (`_DeformConv2dFunction`), as
  torchvision's kernel does, instead of autograd keeping the columns (twice: before and after the
  mask) and the sampling grid of every layer until the backward pass reaches it. Outputs and
  gradients are those of plain autograd through the same operations, bit for bit.
- ``'torchvision'``: torchvision's C++ CPU kernel.

The default is read once from the environment variable ``VRT_DEFORM_IMPL`` (``torch`` if unset);
assign ``models.networks.layers.deform_conv.DEFORM_IMPL`` to switch at run time.

`ModulatedDeformConvPack` holds the weights of one such layer with BasicSR's names and initialisation
(EDVR's PCD alignment, BasicVSR++'s second-order alignment).
"""
import math
import os
from typing import Any, Optional, Tuple, Union

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

IMPLS = ('torch', 'torchvision')
DEFORM_IMPL: str = os.environ.get('VRT_DEFORM_IMPL', 'torch')

_Pair = Union[int, Tuple[int, int]]


def _pair(v: _Pair) -> Tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def deform_conv2d(input: torch.Tensor, offset: torch.Tensor, weight: torch.Tensor,
                  bias: Optional[torch.Tensor] = None, stride: _Pair = 1, padding: _Pair = 0,
                  dilation: _Pair = 1, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Deformable convolution; see the module docstring for how the implementation is chosen."""
    if DEFORM_IMPL not in IMPLS:
        raise ValueError(f'VRT_DEFORM_IMPL / models.networks.layers.deform_conv.DEFORM_IMPL must be one of {IMPLS}, '
                         f'got {DEFORM_IMPL!r}')
    if input.device.type == 'cpu' and DEFORM_IMPL == 'torch':
        return deform_conv2d_torch(input, offset, weight, bias, stride, padding, dilation, mask)
    return torchvision.ops.deform_conv2d(input, offset, weight, bias, _pair(stride), _pair(padding),
                                         _pair(dilation), mask)


def deform_conv2d_torch(input: torch.Tensor, offset: torch.Tensor, weight: torch.Tensor,
                        bias: Optional[torch.Tensor] = None, stride: _Pair = 1, padding: _Pair = 0,
                        dilation: _Pair = 1, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Pure-PyTorch deformable convolution with torchvision's semantics; see `deform_conv2d_autograd` for the
    sampling. With gradients wanted it runs through `_DeformConv2dFunction`, which keeps only the inputs."""
    tensors = (input, offset, weight, bias, mask)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        return _DeformConv2dFunction.apply(input, offset, weight, bias, mask, stride, padding, dilation)
    return deform_conv2d_autograd(input, offset, weight, bias, stride, padding, dilation, mask)


class _DeformConv2dFunction(torch.autograd.Function):
    """Saves the layer's inputs only; backward samples the columns again and differentiates the same
    operations with autograd, so gradients equal plain autograd's bit for bit while the columns of every
    layer no longer stay alive from the forward to the backward pass (the peak-memory cost of the pure
    path in VRT). The price is one more sampling per layer in backward. Autocast state is restored for
    the recomputation (`custom_fwd`/`custom_bwd`)."""

    @staticmethod
    @torch.amp.custom_fwd(device_type='cpu')
    def forward(ctx: Any, input: torch.Tensor, offset: torch.Tensor, weight: torch.Tensor,
                bias: Optional[torch.Tensor], mask: Optional[torch.Tensor], stride: _Pair, padding: _Pair,
                dilation: _Pair) -> torch.Tensor:
        ctx.save_for_backward(input, offset, weight, bias, mask)
        ctx.conv = (stride, padding, dilation)
        return deform_conv2d_autograd(input, offset, weight, bias, stride, padding, dilation, mask)

    @staticmethod
    @torch.amp.custom_bwd(device_type='cpu')
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        saved = ctx.saved_tensors
        need = ctx.needs_input_grad[:5]
        leaves = [t.detach().requires_grad_(n) if t is not None else None for t, n in zip(saved, need)]
        with torch.enable_grad():
            input, offset, weight, bias, mask = leaves
            out = deform_conv2d_autograd(input, offset, weight, bias, *ctx.conv, mask)
        wanted = [t for t, n in zip(leaves, need) if t is not None and n]
        grads = iter(torch.autograd.grad(out, wanted, grad_out) if wanted else ())
        return (*(next(grads) if t is not None and n else None for t, n in zip(leaves, need)), None, None, None)


def deform_conv2d_autograd(input: torch.Tensor, offset: torch.Tensor, weight: torch.Tensor,
                       bias: Optional[torch.Tensor] = None, stride: _Pair = 1, padding: _Pair = 0,
                       dilation: _Pair = 1, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The deformable convolution as differentiable PyTorch operations.

    Every kernel tap of every output pixel is sampled bilinearly at
    ``(y, x) = (h_out*stride - pad + i*dil + dy, w_out*stride - pad + j*dil + dx)``, where
    ``(dy, dx)`` are channels ``2k, 2k+1`` of the tap's offset group (k = i*kw + j); samples outside
    the image contribute zero. The samples are multiplied by the mask and contracted with the weight.
    """
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    b, c_in, h, w = input.shape
    c_out, c_in_g, kh, kw = weight.shape
    k = kh * kw
    groups = c_in // c_in_g
    n_off = offset.shape[1] // (2 * k)
    h_out, w_out = offset.shape[-2:]
    if groups * c_in_g != c_in or c_out % groups or n_off * 2 * k != offset.shape[1] or c_in % n_off:
        raise ValueError(f'deform_conv2d: inconsistent shapes input {tuple(input.shape)}, '
                         f'weight {tuple(weight.shape)}, offset {tuple(offset.shape)}')

    # Positions and sampling in (at least) float32 whatever the input's dtype: under autocast it is bf16/fp16,
    # which cannot hold a fractional pixel position (bf16 steps by 1 px from 128 px); columns return in its dtype.
    dev, dt = input.device, torch.promote_types(input.dtype, torch.float32)
    base_y = (torch.arange(kh, device=dev, dtype=dt) * dh).view(kh, 1, 1, 1) \
        + (torch.arange(h_out, device=dev, dtype=dt) * sh - ph).view(1, 1, h_out, 1)
    base_x = (torch.arange(kw, device=dev, dtype=dt) * dw).view(1, kw, 1, 1) \
        + (torch.arange(w_out, device=dev, dtype=dt) * sw - pw).view(1, 1, 1, w_out)
    base_y = base_y.expand(kh, kw, h_out, w_out).reshape(k, h_out, w_out)
    base_x = base_x.expand(kh, kw, h_out, w_out).reshape(k, h_out, w_out)
    off = offset.to(dt).view(b, n_off, k, 2, h_out, w_out)
    y = base_y + off[:, :, :, 0]
    x = base_x + off[:, :, :, 1]

    if h == 1 or w == 1:
        # align_corners normalisation needs size >= 2; an extra zero row/column keeps zero padding.
        input = F.pad(input, (0, int(w == 1), 0, int(h == 1)))
        h, w = input.shape[-2:]
    grid = torch.stack((x * (2.0 / (w - 1)) - 1.0, y * (2.0 / (h - 1)) - 1.0), dim=-1)
    grid = grid.view(b * n_off, k * h_out, w_out, 2)
    cols = F.grid_sample(input.to(dt).reshape(b * n_off, c_in // n_off, h, w), grid, mode='bilinear',
                         padding_mode='zeros', align_corners=True).to(input.dtype)
    cols = cols.view(b, n_off, c_in // n_off, k, h_out, w_out)
    if mask is not None:
        cols = cols * mask.view(b, n_off, 1, k, h_out, w_out)
    cols = cols.reshape(b, groups, c_in_g * k, h_out * w_out)
    out = torch.matmul(weight.reshape(groups, c_out // groups, c_in_g * k), cols)
    out = out.reshape(b, c_out, h_out, w_out)
    if bias is not None:
        out = out + bias.view(1, -1, 1, 1)
    return out


class ModulatedDeformConvPack(nn.Module):
    """`weight` (out, in, k, k) and `bias` of a modulated deformable convolution, named and initialised as BasicSR's
    ModulatedDeformConvPack: weights uniform in ±1/sqrt(in·k·k), zero bias. Subclasses add the `conv_offset` that
    predicts offsets and masks (its state_dict entries follow `weight` and `bias`) and zero its last layer, so
    that sampling starts on the regular grid (or on the optical flow the offsets are added to)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, stride: int = 1,
                 padding: int = 1, dilation: int = 1, deformable_groups: int = 1):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.deformable_groups = deformable_groups
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels))
        stdv = 1.0 / math.sqrt(in_channels * kernel_size * kernel_size)
        with torch.no_grad():
            self.weight.uniform_(-stdv, stdv)
            self.bias.zero_()

    def deform(self, x: torch.Tensor, offset: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The convolution of `x` sampled at `offset` ((dy, dx) per tap and deformable group), weighted by `mask`."""
        return deform_conv2d(x, offset, self.weight, self.bias, self.stride, self.padding, self.dilation, mask)
