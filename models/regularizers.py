"""KAIR's weight regularisers, applied every `G_regularizer_orthstep` / `G_regularizer_clipstep` iterations.

Both nudge weights by 1e-4 per application rather than projecting, exactly as KAIR does, so their
effect accumulates slowly over training.
"""
from typing import Any, Dict, List

import torch
from torch import nn
from torch.nn.modules.conv import _ConvNd

_NUDGE = 1e-4


@torch.no_grad()
def regularize_orth(net: nn.Module) -> None:
    """SVD of each Conv2d weight (as (kh*kw*c_in) x c_out): singular values > 1.5 shrink, < 0.5 grow, by 1e-4."""
    for m in net.modules():
        if not isinstance(m, nn.Conv2d):  # KAIR's layout assumption; transposed/3-D convs are skipped
            continue
        w = m.weight
        c_out, c_in, kh, kw = w.shape
        mat = w.permute(2, 3, 1, 0).reshape(kh * kw * c_in, c_out)
        u, s, vh = torch.linalg.svd(mat, full_matrices=False)
        s = torch.where(s > 1.5, s - _NUDGE, torch.where(s < 0.5, s + _NUDGE, s))
        mat = (u * s) @ vh
        w.copy_(mat.reshape(kh, kw, c_in, c_out).permute(3, 2, 0, 1))


@torch.no_grad()
def regularize_clip(net: nn.Module) -> None:
    """Conv/linear weights and biases above 1.5 decrease, below -1.5 increase, by 1e-4."""
    for m in net.modules():
        if not isinstance(m, (_ConvNd, nn.Linear)):
            continue
        for t in (m.weight, m.bias):
            if t is not None:
                step = (t < -1.5).to(t.dtype) - (t > 1.5).to(t.dtype)
                t.add_(step, alpha=_NUDGE)


def apply_regularizers(net: nn.Module, step: int, train_opt: Dict[str, Any]) -> List[str]:
    """Apply the regularisers whose step option is set and divides `step`; return their names (for logging)."""
    done = []
    for key, fn, name in (('G_regularizer_orthstep', regularize_orth, 'orth'),
                          ('G_regularizer_clipstep', regularize_clip, 'clip')):
        every = train_opt[key]
        if every and step % every == 0:
            fn(net)
            done.append(name)
    return done


def regularizers_due(step: int, train_opt: Dict[str, Any]) -> bool:
    """Whether a regulariser applies at `step` (the loop then needs to know that the step was applied)."""
    return any(train_opt[key] and step % train_opt[key] == 0
               for key in ('G_regularizer_orthstep', 'G_regularizer_clipstep'))
