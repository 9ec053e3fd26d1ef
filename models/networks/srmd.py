"""SRMD (Zhang et al. 2018): super-resolution for multiple degradations, KAIR's layout.

The blur kernel (PCA-projected) and the noise level are stretched into degradation maps and
concatenated with the low-resolution image, so one plain conv stack (no skips) handles many
degradations; KAIR's default input is 3 image + 15 kernel + 1 noise channels = 19. The last conv
upsamples in one step. One flat `nn.Sequential` `model`, so KAIR checkpoints load unchanged.
"""
import torch
from torch import nn

from models.networks.layers.kair import plain_convs, sequential, single_step_upsampler
from models.registry import NETWORKS


@NETWORKS.register('srmd')
class SRMD(nn.Module):
    """forward(x): x is N×in_nc×H×W, the image channels then the degradation maps (concatenated by the
    data); output N×out_nc×(H·upscale)×(W·upscale), upscale 2, 3 or 4."""

    def __init__(self, in_nc: int = 19, out_nc: int = 3, nc: int = 128, nb: int = 12, upscale: int = 4,
                 act_mode: str = 'R', upsample_mode: str = 'pixelshuffle'):
        super().__init__()
        layers = plain_convs(in_nc, nc, nb, act_mode, 'srmd')
        self.model = sequential(*layers, single_step_upsampler(upsample_mode, nc, out_nc, upscale, 'srmd'))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)
