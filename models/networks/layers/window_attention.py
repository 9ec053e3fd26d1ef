"""Window attention (Swin, SwinIR, VRT, RVRT) through `F.scaled_dot_product_attention`.

The explicit form `softmax(scale·q·kᵀ + bias + mask)·v` materialises every window's score matrix, in
the forward pass and again for backward, and runs as several kernels. SDPA takes the relative position
bias and the shifted-window mask as one additive `attn_mask`, so PyTorch can pick a fused kernel
(memory-efficient attention on CUDA, a fused CPU kernel) that never stores the scores; the result
equals the explicit form up to float rounding (tests/test_attention.py). State_dicts are unchanged:
this is only how the same parameters are used.
"""
from typing import Optional

import torch
import torch.nn.functional as F


def window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                     bias: Optional[torch.Tensor] = None, mask: Optional[torch.Tensor] = None,
                     dropout_p: float = 0.0) -> torch.Tensor:
    """Multi-head attention within windows: q, k, v (B·nW, heads, N, d), windows of one image consecutive.

    `bias` (heads, N, N): the relative position bias, the same for every window; `mask` (nW, N, N): added
    to window w of every image (shifted windows: a large negative value across regions). Returns
    (B·nW, heads, N, d).

    With a mask, windows and heads share one batch axis (B, nW·heads, N, d) so that the combined bias +
    mask (1, nW·heads, N, N) is broadcast over the images instead of repeated for each of them.
    """
    b_, heads, n, d = q.shape
    attn_mask = None if bias is None else bias.unsqueeze(0)
    if mask is not None:
        nw = mask.shape[0]
        m = mask.unsqueeze(1) if attn_mask is None else attn_mask + mask.unsqueeze(1)  # (nW, heads or 1, N, N)
        attn_mask = m.expand(nw, heads, n, n).reshape(1, nw * heads, n, n)
        q, k, v = (t.reshape(b_ // nw, nw * heads, n, t.shape[-1]) for t in (q, k, v))
    if attn_mask is not None:
        attn_mask = attn_mask.to(q.dtype)
    if torch.compiler.is_exporting():
        out = explicit_attention(q, k, v, scale, attn_mask)
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)
    return out.reshape(b_, heads, n, out.shape[-1])


def explicit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                       attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """softmax(scale·q·kᵀ + attn_mask)·v written out (no dropout: export is of eval networks): what graph
    export (ONNX) traces instead of SDPA.

    SDPA's CPU kernel returns its output in a (B, N, heads, d) memory layout that its exported
    decomposition does not keep, so a later reshape of the exported graph fails for symbolic sizes
    (torch 2.14); the explicit form has no such layout and exports to plain MatMul/Softmax.
    """
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if attn_mask is not None:
        scores = scores + attn_mask
    return torch.matmul(scores.softmax(-1), v)
