"""Window attention through `F.scaled_dot_product_attention` equals the explicit softmax(q·kᵀ·scale + bias +
mask)·v of the papers' code (SwinIR, VRT, RVRT), values and gradients, with the shifted-window mask and the
relative position bias; the networks' parameters are the same as before, only their use changed."""
import pytest
import torch

from models.networks.layers.window_attention import window_attention
from models.networks.swinir import WindowAttention as SwinIRAttention
from models.networks.swinir import shifted_window_mask
from models.networks.vrt import WindowAttention as VRTAttention


def explicit(q, k, v, scale, bias=None, mask=None):
    """The reference: scores materialised, bias and mask added per window, softmax, weighted sum."""
    b_, heads, n, _ = q.shape
    attn = (q * scale) @ k.transpose(-2, -1)
    if bias is not None:
        attn = attn + bias.unsqueeze(0)
    if mask is not None:
        nw = mask.shape[0]
        attn = (attn.view(b_ // nw, nw, heads, n, n) + mask.unsqueeze(1).unsqueeze(0)).view(b_, heads, n, n)
    return attn.softmax(dim=-1) @ v


def _close(a, b, tol=1e-5):
    assert torch.allclose(a, b, rtol=tol, atol=tol), (a - b).abs().max()


@pytest.mark.parametrize('with_bias', [True, False])
@pytest.mark.parametrize('with_mask', [True, False])
def test_window_attention_equals_the_explicit_form_with_gradients(with_bias, with_mask):
    torch.manual_seed(0)
    images, nw, heads, n, d = 2, 4, 3, 16, 8
    q, k, v = (torch.randn(images * nw, heads, n, d, dtype=torch.float64, requires_grad=True) for _ in range(3))
    bias = torch.randn(heads, n, n, dtype=torch.float64, requires_grad=True) if with_bias else None
    mask = shifted_window_mask(8, 8, 4, 2).double() if with_mask else None  # (4 windows, 16, 16): 0 / -100
    ours = window_attention(q, k, v, d ** -0.5, bias, mask)
    ref = explicit(q, k, v, d ** -0.5, bias, mask)
    _close(ours, ref, 1e-10)
    leaves = [t for t in (q, k, v, bias) if t is not None]
    g = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(ours, leaves, g), torch.autograd.grad(ref, leaves, g)):
        _close(a, b, 1e-10)


def test_swinir_window_attention_is_the_explicit_attention_of_its_own_parameters():
    torch.manual_seed(0)
    attn = SwinIRAttention(dim=12, window_size=4, num_heads=3)
    mask = shifted_window_mask(8, 8, 4, 2)
    x = torch.randn(2 * 4, 16, 12, requires_grad=True)
    ours = attn(x, mask)
    b_, n, c = x.shape
    q, k, v = attn.qkv(x).reshape(b_, n, 3, 3, c // 3).permute(2, 0, 3, 1, 4)
    bias = attn.relative_position_bias_table[attn.relative_position_index.view(-1)].view(n, n, -1).permute(2, 0, 1)
    ref = attn.proj(explicit(q, k, v, attn.scale, bias, mask).transpose(1, 2).reshape(b_, n, c))
    _close(ours, ref)
    table_grads = [torch.autograd.grad(out.sum(), attn.relative_position_bias_table, retain_graph=True)[0]
                   for out in (ours, ref)]
    _close(*table_grads)


def test_vrt_mutual_and_self_attention_is_the_explicit_attention_of_its_own_parameters():
    torch.manual_seed(0)
    window, heads, dim = (2, 4, 4), 2, 16
    attn = VRTAttention(dim, window, heads, qkv_bias=True, mut_attn=True)
    n = 2 * 4 * 4
    mask = torch.zeros(3, n, n).masked_fill(torch.rand(3, n, n) < 0.3, -100.0)
    x = torch.randn(2 * 3, n, dim)
    ours = attn(x, mask)

    def ref_attention(q, k, v, nn_, rpe):
        bias = None
        if rpe:
            index = attn.relative_position_index[:nn_, :nn_].reshape(-1)
            bias = attn.relative_position_bias_table[index].reshape(nn_, nn_, -1).permute(2, 0, 1)
        out = explicit(q, k, v, attn.scale, bias, mask[:, :nn_, :nn_])
        return out.transpose(1, 2).reshape(x.shape[0], nn_, dim)

    qkv = attn.qkv_self(x).reshape(6, n, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
    x_out = ref_attention(qkv[0], qkv[1], qkv[2], n, True)
    qkv = attn.qkv_mut(x + attn.position_bias.repeat(1, 2, 1)).reshape(6, n, 3, heads, dim // heads)
    qkv = qkv.permute(2, 0, 3, 1, 4)
    (q1, q2), (k1, k2), (v1, v2) = (torch.chunk(qkv[i], 2, dim=2) for i in range(3))
    aligned = torch.cat([ref_attention(q2, k1, v1, n // 2, False), ref_attention(q1, k2, v2, n // 2, False)], 1)
    ref = attn.proj(torch.cat([aligned, x_out], 2))
    _close(ours, ref)


def test_under_bf16_autocast_window_attention_follows_the_explicit_form():
    torch.manual_seed(0)
    q, k, v = (torch.randn(8, 2, 16, 8) for _ in range(3))
    bias, mask = torch.randn(2, 16, 16), shifted_window_mask(8, 8, 4, 2)
    ref = explicit(q, k, v, 8 ** -0.5, bias, mask)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        ours = window_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), 8 ** -0.5, bias, mask)
    assert ours.dtype == torch.bfloat16
    _close(ours.float(), ref, 3e-2)
