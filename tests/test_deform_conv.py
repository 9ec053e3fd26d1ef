"""The pure-PyTorch deformable convolution must be a drop-in replacement for torchvision's."""
import pytest
import torch
import torchvision

import models.networks.layers.deform_conv as dc
from models.networks.layers.deform_conv import deform_conv2d, deform_conv2d_torch

# (batch, c_in, c_out, weight groups, offset groups, H, W, kernel, stride, padding, dilation, use_mask)
CASES = [
    (2, 8, 6, 1, 4, 7, 9, 3, 1, 1, 1, True),
    (1, 6, 4, 2, 3, 6, 5, 3, 2, 2, 2, True),
    (1, 4, 6, 2, 2, 5, 8, 3, 1, 0, 1, False),
    (2, 6, 3, 3, 1, 6, 6, (2, 3), (1, 2), (1, 0), (2, 1), True),
    (1, 4, 4, 1, 2, 1, 6, 3, 1, 1, 1, True),  # single-row image
]


def _inputs(b, c_in, c_out, groups, n_off, h, w, k, s, p, d, use_mask, seed=0):
    kh, kw = (k, k) if isinstance(k, int) else k
    sh, sw = (s, s) if isinstance(s, int) else s
    ph, pw = (p, p) if isinstance(p, int) else p
    dh, dw = (d, d) if isinstance(d, int) else d
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    g = torch.Generator().manual_seed(seed)
    opts = dict(generator=g, dtype=torch.float64)
    x = torch.randn(b, c_in, h, w, **opts)
    # offsets of several pixels: many samples land outside the image or straddle its border
    offset = torch.randn(b, 2 * n_off * kh * kw, ho, wo, **opts) * 3
    weight = torch.randn(c_out, c_in // groups, kh, kw, **opts)
    bias = torch.randn(c_out, **opts)
    mask = torch.rand(b, n_off * kh * kw, ho, wo, **opts) if use_mask else None
    tensors = [t.requires_grad_() for t in (x, offset, weight, bias, mask) if t is not None]
    return (x, offset, weight, bias, mask), tensors, ((sh, sw), (ph, pw), (dh, dw))


@pytest.mark.parametrize('case', CASES)
def test_pure_torch_matches_torchvision_values_and_gradients_in_float64(case):
    (x, offset, weight, bias, mask), tensors, (s, p, d) = _inputs(*case)
    ref = torchvision.ops.deform_conv2d(x, offset, weight, bias, s, p, d, mask)
    out = deform_conv2d_torch(x, offset, weight, bias, s, p, d, mask)
    assert out.shape == ref.shape
    assert torch.allclose(out, ref, rtol=0, atol=1e-10)
    cot = torch.randn(ref.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    g_ref = torch.autograd.grad(ref, tensors, cot)
    g_out = torch.autograd.grad(out, tensors, cot)
    for name, a, b in zip(['input', 'offset', 'weight', 'bias', 'mask'], g_out, g_ref):
        assert torch.allclose(a, b, rtol=0, atol=1e-10 * max(1.0, b.abs().max().item())), name


def test_samples_far_outside_the_image_contribute_zero_like_torchvision():
    (x, offset, weight, bias, mask), _, (s, p, d) = _inputs(*CASES[0])
    far = torch.full_like(offset, 50.0)
    out = deform_conv2d_torch(x, far, weight, bias, s, p, d, mask)
    assert torch.allclose(out, bias.view(1, -1, 1, 1).expand_as(out))
    assert torch.allclose(out, torchvision.ops.deform_conv2d(x, far, weight, bias, s, p, d, mask))


def test_zero_offsets_and_unit_mask_reduce_to_an_ordinary_convolution():
    (x, offset, weight, bias, _), _, (s, p, d) = _inputs(*CASES[1])
    out = deform_conv2d_torch(x, torch.zeros_like(offset), weight, bias, s, p, d, None)
    ref = torch.nn.functional.conv2d(x, weight, bias, s, p, d, groups=x.shape[1] // weight.shape[1])
    assert torch.allclose(out, ref, atol=1e-12)


@pytest.mark.parametrize('impl, expect_torchvision', [('torch', False), ('torchvision', True)])
def test_cpu_dispatch_follows_DEFORM_IMPL(monkeypatch, impl, expect_torchvision):
    calls = []
    real = torchvision.ops.deform_conv2d
    monkeypatch.setattr(dc.torchvision.ops, 'deform_conv2d', lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(dc, 'DEFORM_IMPL', impl)
    (x, offset, weight, bias, mask), _, (s, p, d) = _inputs(*CASES[0])
    out = deform_conv2d(x, offset, weight, bias, s, p, d, mask)
    assert bool(calls) == expect_torchvision
    assert torch.allclose(out, real(x, offset, weight, bias, s, p, d, mask), atol=1e-10)


def test_unknown_DEFORM_IMPL_is_rejected(monkeypatch):
    monkeypatch.setattr(dc, 'DEFORM_IMPL', 'cuda-magic')
    (x, offset, weight, bias, mask), _, (s, p, d) = _inputs(*CASES[0])
    with pytest.raises(ValueError, match='VRT_DEFORM_IMPL'):
        deform_conv2d(x, offset, weight, bias, s, p, d, mask)


# The pure path keeps only its inputs for backward and samples again there. Plain autograd through the
# same operations (`deform_conv2d_autograd`) is the reference: outputs and gradients must be equal bit for bit.

def _float32(case, seed=0):
    (x, offset, weight, bias, mask), _, conv = _inputs(*case, seed=seed)
    leaves = [t.detach().float().requires_grad_() if t is not None else None for t in (x, offset, weight, bias, mask)]
    return leaves, conv


@pytest.mark.parametrize('case', CASES)
def test_outputs_and_gradients_equal_plain_autograd_bit_for_bit(case):
    (x, offset, weight, bias, mask), (s, p, d) = _float32(case)
    tensors = [t for t in (x, offset, weight, bias, mask) if t is not None]
    ref = dc.deform_conv2d_autograd(x, offset, weight, bias, s, p, d, mask)
    out = deform_conv2d_torch(x, offset, weight, bias, s, p, d, mask)
    assert out.grad_fn is not None and 'DeformConv2dFunction' in type(out.grad_fn).__name__
    assert torch.equal(out, ref)
    cot = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1))
    for a, b in zip(torch.autograd.grad(out, tensors, cot), torch.autograd.grad(ref, tensors, cot)):
        assert torch.equal(a, b)


def test_only_the_gradients_asked_for_are_computed_frozen_weights_and_no_mask_grad():
    (x, offset, weight, bias, mask), (s, p, d) = _float32(CASES[0])
    weight.requires_grad_(False)
    bias.requires_grad_(False)
    mask = mask.detach()
    out = deform_conv2d_torch(x, offset, weight, bias, s, p, d, mask)
    gx, goff = torch.autograd.grad(out.square().sum(), [x, offset])
    rx, roff = torch.autograd.grad(dc.deform_conv2d_autograd(x, offset, weight, bias, s, p, d, mask).square().sum(),
                                   [x, offset])
    assert torch.equal(gx, rx) and torch.equal(goff, roff)
    with torch.no_grad():  # evaluation: no autograd function at all
        assert deform_conv2d_torch(x, offset, weight, bias, s, p, d, mask).grad_fn is None


def _saved_bytes(fn) -> int:
    """Bytes of every tensor autograd keeps for backward while `fn()` runs (distinct storages)."""
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def test_backward_keeps_the_inputs_not_the_sampled_columns():
    b, c, dg, h, w = 1, 16, 4, 24, 24
    (x, offset, weight, bias, mask), (s, p, d) = _float32((b, c, c, 1, dg, h, w, 3, 1, 1, 1, True))
    columns = b * c * 9 * h * w * 4  # float32 bytes of the sampled columns
    inputs = sum(t.numel() * 4 for t in (x, offset, weight, bias, mask))
    ours = _saved_bytes(lambda: deform_conv2d_torch(x, offset, weight, bias, s, p, d, mask))
    plain = _saved_bytes(lambda: dc.deform_conv2d_autograd(x, offset, weight, bias, s, p, d, mask))
    assert ours <= inputs < columns
    assert plain > 2 * columns  # what autograd kept before: the columns before and after the mask, and more


def test_bf16_autocast_gradients_match_plain_autograd_under_autocast():
    (x, offset, weight, bias, mask), (s, p, d) = _float32(CASES[0])
    tensors = [x, offset, weight, bias, mask]
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = deform_conv2d_torch(x, offset, weight, bias, s, p, d, mask)
        ref = dc.deform_conv2d_autograd(x, offset, weight, bias, s, p, d, mask)
    assert out.dtype == ref.dtype and torch.equal(out, ref)
    cot = torch.ones_like(out)
    for a, r in zip(torch.autograd.grad(out, tensors, cot), torch.autograd.grad(ref, tensors, cot)):
        assert torch.equal(a, r)
