"""MSRResNet0 (KAIR `msrresnet0`): SRResNet (Ledig et al. 2017) without batch norm, KAIR's layout.

Unlike `msrresnet1` there is no bilinear skip: the output is the network's alone. The whole network
is one flat `nn.Sequential` `model` (head `model.0`, the residual body under a long skip `model.1.sub`,
the upsamplers, then two tail convs, the last one without bias), so KAIR checkpoints load unchanged.
"""
import torch
from torch import nn

from models.networks.layers.kair import ResBlock, srresnet_layout
from models.registry import NETWORKS


@NETWORKS.register('msrresnet0')
class MSRResNet0(nn.Module):
    """forward(x): N×in_nc×H×W → N×out_nc×(H·upscale)×(W·upscale); upscale 3 or a power of 2.

    upsample_mode: upconv (nearest + conv), pixelshuffle or convtranspose, one step per factor 2.
    """

    NET_TYPE = 'msrresnet0'  # named in error messages

    def __init__(self, in_nc: int = 3, out_nc: int = 3, nc: int = 64, nb: int = 16, upscale: int = 4,
                 act_mode: str = 'R', upsample_mode: str = 'upconv'):
        super().__init__()
        self.model = srresnet_layout(in_nc, out_nc, nc, nb, lambda: ResBlock(nc, 'C' + act_mode + 'C'), upscale,
                                     act_mode, upsample_mode, tail_bias=False, net_type=self.NET_TYPE)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)
