"""DnCNN (Zhang et al. 2017) with KAIR's layout, so KAIR checkpoints load unchanged.

KAIR builds the network as one flat `nn.Sequential` called `model` (its `B.sequential` flattens the
head/body/tail blocks), which fixes the state_dict names: `model.0` head conv, then per body block
conv / norm / activation, and the tail conv last.
"""
from typing import List

import torch
from torch import nn

from models.registry import NETWORKS
from utils.errors import UserError


def _layers(in_nc: int, out_nc: int, mode: str) -> List[nn.Module]:
    """Conv followed by the norm/activation letters of `mode`, as KAIR's `B.conv` does."""
    layers: List[nn.Module] = [nn.Conv2d(in_nc, out_nc, 3, 1, 1, bias=True)]
    for t in mode:
        if t == 'B':
            # KAIR's BN settings (momentum=0.9 is KAIR's choice; eps matters for pretrained weights).
            layers.append(nn.BatchNorm2d(out_nc, momentum=0.9, eps=1e-4, affine=True))
        elif t == 'I':
            layers.append(nn.InstanceNorm2d(out_nc, affine=True))
        elif t == 'R':
            layers.append(nn.ReLU(inplace=True))
        elif t == 'L':
            layers.append(nn.LeakyReLU(negative_slope=0.2, inplace=True))
    return layers


@NETWORKS.register('dncnn')
class DnCNN(nn.Module):
    """Predicts the noise and subtracts it from the input (residual learning)."""

    def __init__(self, in_nc: int = 1, out_nc: int = 1, nc: int = 64, nb: int = 17, act_mode: str = 'BR'):
        super().__init__()
        if not act_mode or act_mode[-1] not in 'RL' or any(t not in 'BIRL' for t in act_mode):
            raise UserError(f'netG.act_mode: "{act_mode}" is not supported for dncnn; '
                            'use R, L, BR, BL, IR or IL (norm letter B/I, then activation R/L)')
        if nb < 2:
            raise UserError(f'netG.nb: dncnn needs at least 2 conv layers, got {nb}')
        layers = _layers(in_nc, nc, act_mode[-1])
        for _ in range(nb - 2):
            layers += _layers(nc, nc, act_mode)
        layers += _layers(nc, out_nc, '')
        self.model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.model(x)
