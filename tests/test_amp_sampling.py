"""Under `train.amp` the features are bf16/fp16, but sampling positions are not: flow warping (VRT, RVRT),
RVRT's guided deformable attention and the pure-PyTorch deformable convolution build their grids in
float32, so a fractional pixel position far from the origin is sampled where it is, not rounded.

bf16 holds integers exactly only up to 256 and steps by 2 px beyond it (fp16 by 0.25 px beyond 256):
a +0.3 px shift at x > 256 built in those types lands on a neighbouring pixel or between others.
The probe is a row alternating 0 / 1: sampled 0.3 px to the right, every pixel reads 0.3 or 0.7.
"""
import pytest
import torch

from models.networks.layers import deform_conv
from models.networks.layers.guided_attention import guided_deformable_attention
from models.networks.vrt import flow_warp

WIDTH = 320  # positions up to 319: beyond 256, where bf16 cannot hold x + 0.3
SHIFT = 0.3
AMP_DTYPES = [torch.bfloat16, torch.float16]


def _row(channels: int = 1, height: int = 2) -> torch.Tensor:
    """1×C×H×W, every row 0, 1, 0, 1, ... (exact in every float type)."""
    return (torch.arange(WIDTH) % 2).float().expand(1, channels, height, WIDTH).contiguous()


def _expected(height: int = 2) -> torch.Tensor:
    """The row sampled SHIFT px to the right (zero beyond the last pixel, whose right neighbour is outside)."""
    x = torch.arange(WIDTH).float()
    value = torch.where(x % 2 == 0, torch.tensor(SHIFT), torch.tensor(1 - SHIFT))
    value[-1] = 1 - SHIFT  # the last pixel (odd: 1) blends with the zero outside: 0.7 * 1
    return value.expand(height, WIDTH)


def _far(t: torch.Tensor) -> torch.Tensor:
    return t[..., 257:WIDTH - 1]


@pytest.mark.parametrize('dtype', AMP_DTYPES, ids=['bf16', 'fp16'])
def test_flow_warp_samples_fractional_positions_beyond_256_px_under_autocast(dtype):
    x = _row()
    flow = torch.zeros(1, 2, WIDTH, 2)
    flow[..., 0] = SHIFT
    ref = flow_warp(x, flow)
    assert torch.allclose(ref[0, 0], _expected(), atol=1e-4)
    with torch.autocast('cpu', dtype=dtype):
        out = flow_warp(x.to(dtype), flow.to(dtype))  # what convolutions hand over under autocast
    assert out.dtype == dtype
    # values carry the dtype's rounding (0.7 -> 0.6992 in bf16); positions must not: errors of 0.2-0.5 otherwise
    assert torch.allclose(_far(out.float()), _far(ref), atol=5e-3), (_far(out.float()) - _far(ref)).abs().max()


@pytest.mark.parametrize('dtype', AMP_DTYPES, ids=['bf16', 'fp16'])
def test_flow_warp_nearest_neighbours_of_far_positions_under_autocast(dtype):
    x = torch.arange(WIDTH).float().expand(1, 1, 2, WIDTH).contiguous() / WIDTH  # a ramp: which pixel is read
    flow = torch.zeros(1, 2, WIDTH, 2)
    flow[..., 0] = SHIFT
    ref = flow_warp(x, flow, interp_mode='nearest4')
    with torch.autocast('cpu', dtype=dtype):
        out = flow_warp(x.to(dtype), flow.to(dtype), interp_mode='nearest4')
    # floor and ceil of x + 0.3 are x and x + 1: the ramp's own value and the next one (values in x's dtype)
    assert torch.allclose(_far(out.float()), _far(ref), atol=2e-3)


@pytest.mark.parametrize('dtype', AMP_DTYPES, ids=['bf16', 'fp16'])
def test_guided_deformable_attention_samples_fractional_positions_beyond_256_px_under_autocast(dtype):
    # one key frame, a 1×1 window, one head: the softmax is over one sample, so the output is v sampled there
    b, m, d, h = 1, 1, 2, 2
    v = _row(d, h).view(b, m, d, h, WIDTH)
    k = torch.ones_like(v)
    q = torch.ones(b, d, h, WIDTH)
    offset = torch.zeros(b, m, 1, 1, 2, h, WIDTH)
    offset[:, :, :, :, 1] = SHIFT  # (dy, dx)
    ref = guided_deformable_attention(q, k, v, offset, heads=1, window=(1, 1))
    assert torch.allclose(ref[0, 0], _expected(h), atol=1e-4)
    with torch.autocast('cpu', dtype=dtype):
        out = guided_deformable_attention(q.to(dtype), k.to(dtype), v.to(dtype), offset.to(dtype), heads=1,
                                          window=(1, 1))
    assert torch.allclose(_far(out.float()), _far(ref), atol=5e-3), (_far(out.float()) - _far(ref)).abs().max()


@pytest.mark.parametrize('dtype', AMP_DTYPES, ids=['bf16', 'fp16'])
@pytest.mark.parametrize('grad', [False, True], ids=['inference', 'training'])
def test_pure_deformable_conv_samples_fractional_positions_beyond_256_px_under_autocast(dtype, grad):
    x = _row()
    weight = torch.ones(1, 1, 1, 1, requires_grad=grad)  # a 1×1 identity kernel: the output is the sample
    offset = torch.zeros(1, 2, 2, WIDTH)
    offset[:, 1] = SHIFT  # (dy, dx) of the single tap
    ref = deform_conv.deform_conv2d_torch(x, offset, weight)
    assert torch.allclose(ref[0, 0], _expected(), atol=1e-4)
    with torch.autocast('cpu', dtype=dtype):
        out = deform_conv.deform_conv2d_torch(x.to(dtype), offset.to(dtype), weight)
    assert torch.allclose(_far(out.float()), _far(ref.detach()), atol=5e-3)
    if grad:
        out.float().sum().backward()
        assert torch.isfinite(weight.grad).all()
