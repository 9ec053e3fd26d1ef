"""RVRT's guided deformable attention (GDA) in pure PyTorch, with a bounded memory footprint.

For every query pixel, keys and values are sampled bilinearly at M·K flow-guided points (`grid_sample`),
then each head takes a softmax over them. The sampled keys and values are M·K times the size of the key
frames: at RVRT 002's 64² working size about 340 MB per call, ~2.4 GB per 720p frame. Plain autograd
keeps them (twice: as sampled and as rearranged) from the forward to the backward pass of every call,
which is where RVRT's training memory went.

Here the op runs in chunks of query frames and rows, so no more than CHUNK_BYTES of sampled values
exist at once, and under autograd `_GuidedDeformableAttention` keeps only its inputs: backward samples
each chunk again and differentiates it with autograd (as the deformable convolution and the official
CUDA kernel do). The price is one more sampling pass per call in backward. Outputs and gradients are
those of the unchunked operations (every query pixel's attention is independent of the others').
"""
from typing import Any, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

CHUNK_BYTES = 256 * 2 ** 20  # sampled keys + values held at once (per chunk of query frames and rows)


def guided_deformable_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: torch.Tensor,
                                heads: int, window: Sequence[int]) -> torch.Tensor:
    """Attention of every query pixel over keys/values sampled at flow-guided, learned positions.

    q: B×D×H×W queries; k, v: B×M×D×H×W, the M key frames of each query frame; offset: B×M×G×K×2×H×W,
    for each key frame, deformable group g (channels g·D/G … (g+1)·D/G of k and v) and attention-window
    position κ = (i, j) (K = kh·kw, row-major), the displacement (dy, dx) in pixels of its sampling point
    from (y + i - kh//2, x + j - kw//2). Keys and values are sampled bilinearly there (zero outside the
    frame); each of `heads` heads (a contiguous D/heads channel slice) takes a softmax over the M·K
    sampled keys, scaled by (D/heads)^-1/2. Returns B×D×H×W. Any device; see the module docstring.
    """
    b, m, d, h, w = k.shape
    g, kk = offset.shape[2], offset.shape[3]
    kh, kw = window
    if kk != kh * kw or d % g or d % heads:
        raise ValueError(f'guided_deformable_attention: offset {tuple(offset.shape)} does not fit window {window}, '
                         f'{d} channels, {heads} heads')
    window = (int(kh), int(kw))
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, offset)):
        return _GuidedDeformableAttention.apply(q, k, v, offset, heads, window)
    return _chunked(q, k, v, offset, heads, window)


def _chunks(b: int, m: int, d: int, kk: int, h: int, w: int, itemsize: int) -> List[Tuple[slice, slice]]:
    """(query frames, query rows) blocks whose sampled keys and values stay within CHUNK_BYTES."""
    per_row = m * 2 * d * kk * w * max(itemsize, 4)  # sampling runs in (at least) float32
    rows = max(1, min(h, CHUNK_BYTES // per_row))
    frames = max(1, min(b, CHUNK_BYTES // (per_row * h))) if rows == h else 1
    return [(slice(i, i + frames), slice(r, r + rows)) for i in range(0, b, frames) for r in range(0, h, rows)]


def _chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: torch.Tensor, heads: int,
             window: Tuple[int, int]) -> torch.Tensor:
    b, m, d, h, w = k.shape
    blocks = _chunks(b, m, d, offset.shape[3], h, w, k.element_size())
    if len(blocks) == 1:
        return gda_rows(q, k, v, offset, heads, window, 0)
    out: Optional[torch.Tensor] = None
    for fr, rows in blocks:
        part = gda_rows(q[fr, :, rows], k[fr], v[fr], offset[fr, ..., rows, :], heads, window, rows.start)
        if out is None:
            out = part.new_empty(b, d, h, w)
        out[fr, :, rows] = part
    assert out is not None
    return out


class _GuidedDeformableAttention(torch.autograd.Function):
    """Saves q, k, v and the offsets only; backward samples each chunk again and differentiates it with
    autograd. Autocast's state of the forward pass is restored for the recomputation."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: torch.Tensor, heads: int,
                window: Tuple[int, int]) -> torch.Tensor:
        ctx.save_for_backward(q, k, v, offset)
        ctx.heads, ctx.window = heads, window
        dev = q.device.type
        ctx.autocast = (dev, torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        with torch.no_grad():
            return _chunked(q, k, v, offset, heads, window)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        q, k, v, offset = ctx.saved_tensors
        need = ctx.needs_input_grad[:4]
        grads = [torch.zeros_like(t) if n else None for t, n in zip((q, k, v, offset), need)]
        b, m, d, h, w = k.shape
        dev, enabled, dtype = ctx.autocast
        for fr, rows in _chunks(b, m, d, offset.shape[3], h, w, k.element_size()):
            parts = (q[fr, :, rows], k[fr], v[fr], offset[fr, ..., rows, :])
            leaves = [t.detach().requires_grad_(n) for t, n in zip(parts, need)]
            with torch.enable_grad(), torch.autocast(dev, dtype=dtype, enabled=enabled):
                out = gda_rows(*leaves, ctx.heads, ctx.window, rows.start)
            wanted = [t for t, n in zip(leaves, need) if n]
            got = iter(torch.autograd.grad(out, wanted, grad_out[fr, :, rows]))
            for i, n in enumerate(need):
                if not n:
                    continue
                g = next(got)
                if i == 0:
                    grads[0][fr, :, rows] = g
                elif i == 3:
                    grads[3][fr, ..., rows, :] = g
                else:  # keys and values: every row block samples anywhere in the frames
                    grads[i][fr] += g
        return (*grads, None, None)


def gda_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: torch.Tensor, heads: int,
              window: Tuple[int, int], row0: int) -> torch.Tensor:
    """The attention of query rows row0 … row0 + q.shape[2] - 1 (q: B×D×r×W, offset: B×M×G×K×2×r×W) over
    whole key frames k, v (B×M×D×H×W): `guided_deformable_attention` of those rows."""
    b, m, d, h, w = k.shape
    r = q.shape[2]
    g, kk = offset.shape[2], offset.shape[3]
    kh, kw = window
    # positions and sampling in (at least) float32 whatever the features' dtype: bf16 cannot hold fractional
    # pixel positions
    dev, dt = q.device, torch.promote_types(q.dtype, torch.float32)
    base_y = (torch.arange(kh, device=dev, dtype=dt) - kh // 2).repeat_interleave(kw).view(kk, 1, 1)
    base_x = (torch.arange(kw, device=dev, dtype=dt) - kw // 2).repeat(kh).view(kk, 1, 1)
    offset = offset.to(dt)
    y = torch.arange(row0, row0 + r, device=dev, dtype=dt).view(1, r, 1) + base_y + offset[:, :, :, :, 0]
    x = torch.arange(w, device=dev, dtype=dt).view(1, 1, w) + base_x + offset[:, :, :, :, 1]
    kv = torch.cat([k.reshape(b, m, g, 1, d // g, h, w), v.reshape(b, m, g, 1, d // g, h, w)], 3)
    kv = kv.view(b * m * g, 2 * d // g, h, w)
    if h == 1 or w == 1:
        # align_corners normalisation needs a size >= 2; an extra zero row/column keeps the zero padding
        kv = F.pad(kv, (0, int(w == 1), 0, int(h == 1)))
    hs, ws = kv.shape[-2:]
    grid = torch.stack((x * (2.0 / (ws - 1)) - 1.0, y * (2.0 / (hs - 1)) - 1.0), -1).view(b * m * g, kk * r, w, 2)
    sampled = F.grid_sample(kv.to(dt), grid, mode='bilinear', padding_mode='zeros', align_corners=True).to(kv.dtype)
    # b m g (k|v) c K (r w) -> (k|v) b g c m K (r w): channel g·D/G + c, sampled point m·K + κ
    sampled = sampled.view(b, m, g, 2, d // g, kk, r * w).permute(3, 0, 2, 4, 1, 5, 6)
    ks, vs = (s.reshape(b, heads, d // heads, m * kk, r * w) for s in sampled)
    qh = q.reshape(b, heads, d // heads, r * w) * (d // heads) ** -0.5
    attn = torch.einsum('bncp,bncsp->bnsp', qh, ks).softmax(dim=2)
    return torch.einsum('bnsp,bncsp->bncp', attn, vs).reshape(b, d, r, w)
