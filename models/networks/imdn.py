"""IMDN (Hui et al. 2019): lightweight SR from information multi-distillation blocks, KAIR's layout.

Each block repeatedly splits its features: a quarter is kept ("distilled"), the rest is refined by
the next conv; the kept parts are fused by a 1x1 conv. Like KAIR's IMDBlock, the paper's
contrast-aware channel attention before the fusion is left out (KAIR checkpoints have no weights for
it). Activation slope 0.05 as in the paper. One flat `nn.Sequential` `model`, so KAIR checkpoints
load unchanged.
"""
import torch
from torch import nn

from models.networks.layers.kair import ShortcutBlock, check_act_mode, conv, sequential, single_step_upsampler
from models.registry import NETWORKS

NEGATIVE_SLOPE = 0.05  # IMDN's LeakyReLU slope; KAIR's builder does not expose it


class IMDBlock(nn.Module):
    """Three distillation steps plus a last conv; fused kept features added to the input."""

    def __init__(self, nc: int, mode: str, distill_rate: float = 0.25):
        super().__init__()
        self.d_nc = int(nc * distill_rate)
        self.r_nc = nc - self.d_nc
        self.conv1 = conv(nc, nc, mode, negative_slope=NEGATIVE_SLOPE)
        self.conv2 = conv(self.r_nc, nc, mode, negative_slope=NEGATIVE_SLOPE)
        self.conv3 = conv(self.r_nc, nc, mode, negative_slope=NEGATIVE_SLOPE)
        self.conv4 = conv(self.r_nc, self.d_nc, 'C')
        self.conv1x1 = conv(self.d_nc * 4, nc, 'C', kernel_size=1, padding=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = []
        rest = x
        for layer in (self.conv1, self.conv2, self.conv3):
            d, rest = torch.split(layer(rest), (self.d_nc, self.r_nc), dim=1)
            kept.append(d)
        kept.append(self.conv4(rest))
        return x + self.conv1x1(torch.cat(kept, 1))


@NETWORKS.register('imdn')
class IMDN(nn.Module):
    """forward(x): N×in_nc×H×W → N×out_nc×(H·upscale)×(W·upscale); upscale 2, 3 or 4, one step."""

    repeated_blocks = (IMDBlock,)  # compiled one block at a time with train.compile (models/compile.py)

    def __init__(self, in_nc: int = 3, out_nc: int = 3, nc: int = 64, nb: int = 8, upscale: int = 4,
                 act_mode: str = 'L', upsample_mode: str = 'pixelshuffle'):
        super().__init__()
        check_act_mode(act_mode, 'imdn')
        body = sequential(*[IMDBlock(nc, 'C' + act_mode) for _ in range(nb)], conv(nc, nc, 'C'))
        tail = single_step_upsampler(upsample_mode, nc, out_nc, upscale, 'imdn')
        self.model = sequential(conv(in_nc, nc, 'C'), ShortcutBlock(body), tail)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)
