"""DPSR's super-resolver (Zhang et al. 2019, KAIR `dpsr` = MSRResNet_prior): SRResNet fed a noise map.

The architecture is KAIR's msrresnet0 (same layout and state_dict names); what makes it DPSR is the
input: the low-resolution image with a noise-level map concatenated as an extra channel, so one
network handles any noise level. KAIR's defaults are wider (nc 96) and take 4 input channels.
"""
from models.networks.msrresnet0 import MSRResNet0
from models.registry import NETWORKS


@NETWORKS.register('dpsr')
class MSRResNetPrior(MSRResNet0):
    """forward(x): x is N×in_nc×H×W, the image channels followed by the noise-level map (σ/255 in
    every pixel), concatenated by the data; output N×out_nc×(H·upscale)×(W·upscale)."""

    NET_TYPE = 'dpsr'

    def __init__(self, in_nc: int = 4, out_nc: int = 3, nc: int = 96, nb: int = 16, upscale: int = 4,
                 act_mode: str = 'R', upsample_mode: str = 'upconv'):
        super().__init__(in_nc, out_nc, nc, nb, upscale, act_mode, upsample_mode)
