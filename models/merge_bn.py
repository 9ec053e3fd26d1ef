"""Folding BatchNorm into the convolution before it (KAIR's `merge_bn`).

In eval mode BN(conv(x)) is one affine map per channel after the convolution, so it can be folded
into the convolution's weight and bias: w' = w * g / s, b' = (b - mean) * g / s + beta with
s = sqrt(running_var + eps). The BatchNorm layers are then removed and each `nn.Sequential` is
renumbered (KAIR's `tidy_sequential`), so a folded DnCNN "BR" has exactly the state_dict of a DnCNN
"R" of the same size: the format of KAIR's published DnCNN weights.
"""
from typing import List

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm


def count_foldable(net: nn.Module) -> int:
    """How many BatchNorm layers directly follow a convolution inside an nn.Sequential."""
    return sum(len(_pairs(list(seq.children()))) for seq in net.modules() if isinstance(seq, nn.Sequential))


def fold_batchnorm(net: nn.Module) -> int:
    """Fold every conv → BatchNorm pair of `net`'s Sequentials in place; returns how many were folded.

    The network's output in eval mode is unchanged (to float rounding); it has no BatchNorm left
    where one followed a convolution, so training continues without batch statistics.
    """
    folded = 0
    for seq in [m for m in net.modules() if isinstance(m, nn.Sequential)]:
        children = list(seq.children())
        pairs = _pairs(children)
        if not pairs:
            continue
        for i in pairs:
            _fold(children[i], children[i + 1])
        dropped = {i + 1 for i in pairs}
        kept = [m for i, m in enumerate(children) if i not in dropped]
        for name in list(seq._modules):
            del seq._modules[name]
        for i, m in enumerate(kept):
            seq.add_module(str(i), m)
        folded += len(pairs)
    return folded


def _pairs(children: List[nn.Module]) -> List[int]:
    return [i for i in range(len(children) - 1)
            if isinstance(children[i], nn.Conv2d) and isinstance(children[i + 1], _BatchNorm)
            and children[i + 1].track_running_stats]


@torch.no_grad()
def _fold(conv: nn.Conv2d, bn: _BatchNorm) -> None:
    std = torch.sqrt(bn.running_var + bn.eps)
    gamma = bn.weight if bn.affine else torch.ones_like(std)
    beta = bn.bias if bn.affine else torch.zeros_like(std)
    scale = gamma / std
    bias = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
    new_bias = (bias - bn.running_mean) * scale + beta
    conv.weight.mul_(scale.reshape(-1, 1, 1, 1))
    if conv.bias is None:
        conv.bias = nn.Parameter(new_bias.to(conv.weight.dtype), requires_grad=conv.weight.requires_grad)
    else:
        conv.bias.copy_(new_bias)
