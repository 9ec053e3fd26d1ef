"""DnCNN (Zhang et al. 2017) with KAIR's layout, so KAIR checkpoints load unchanged.

KAIR builds the network as one flat `nn.Sequential` called `model` (its `B.sequential` flattens the
head/body/tail blocks), which fixes the state_dict names: `model.0` head conv, then per body block
conv / norm / activation, and the tail conv last.
"""
import torch
from torch import nn

from models.networks.layers.kair import conv, plain_convs, sequential
from models.registry import NETWORKS


@NETWORKS.register('dncnn')
class DnCNN(nn.Module):
    """Predicts the noise and subtracts it from the input (residual learning)."""

    def __init__(self, in_nc: int = 1, out_nc: int = 1, nc: int = 64, nb: int = 17, act_mode: str = 'BR'):
        super().__init__()
        self.model = sequential(*plain_convs(in_nc, nc, nb, act_mode, 'dncnn'), conv(nc, out_nc, 'C'))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.model(x)
