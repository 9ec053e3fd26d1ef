"""FDnCNN (Zhang et al., FFDNet paper / KAIR `fdncnn`): DnCNN with a noise-level map as an extra input.

The noise map makes one network cover a range of noise levels (and spatially varying noise). As in
KAIR, the network predicts the clean image directly: no residual subtraction, unlike `dncnn`.
One flat `nn.Sequential` `model`, so KAIR checkpoints load unchanged.
"""
import torch
from torch import nn

from models.networks.layers.kair import conv, plain_convs, sequential
from models.registry import NETWORKS


@NETWORKS.register('fdncnn')
class FDnCNN(nn.Module):
    """forward(x): x is N×in_nc×H×W, the noisy image then its noise-level map (σ/255 per pixel),
    concatenated by the data (in_nc = image channels + 1); output N×out_nc×H×W, the clean image."""

    def __init__(self, in_nc: int = 2, out_nc: int = 1, nc: int = 64, nb: int = 20, act_mode: str = 'R'):
        super().__init__()
        self.model = sequential(*plain_convs(in_nc, nc, nb, act_mode, 'fdncnn'), conv(nc, out_nc, 'C'))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)
