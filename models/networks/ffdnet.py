"""FFDNet (Zhang et al. 2018): denoising at half resolution with a noise-level map, KAIR's layout.

The image is pixel-unshuffled by 2 (4 sub-images per channel) and the noise level map is
concatenated: working on quarter-size maps makes it fast and widens the receptive field, and the
map lets one network handle any noise level. A plain conv stack predicts the 4 clean sub-images,
which are shuffled back. As KAIR does it, odd sizes are padded bottom/right by replication and
cropped afterwards. One flat `nn.Sequential` `model` (the shuffles have no weights), so KAIR
checkpoints load unchanged.
"""
import torch
import torch.nn.functional as F
from torch import nn

from models.networks.layers.kair import conv, plain_convs, sequential
from models.registry import NETWORKS


@NETWORKS.register('ffdnet')
class FFDNet(nn.Module):
    """forward(x, sigma): x is N×in_nc×H×W (any H, W); sigma is the noise level on x's value scale
    (σ/255 for images in [0, 1]) as N×1×1×1 (KAIR's form; 1×1×1×1 for the whole batch) or a
    spatially varying map N×1×⌈H/2⌉×⌈W/2⌉. Output N×out_nc×H×W, the clean image."""

    def __init__(self, in_nc: int = 1, out_nc: int = 1, nc: int = 64, nb: int = 15, act_mode: str = 'R'):
        super().__init__()
        self.down = nn.PixelUnshuffle(2)
        self.model = sequential(*plain_convs(in_nc * 4 + 1, nc, nb, act_mode, 'ffdnet'), conv(nc, out_nc * 4, 'C'))
        self.up = nn.PixelShuffle(2)

    def forward(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        x = self.down(F.pad(x, (0, w % 2, 0, h % 2), mode='replicate'))
        noise_map = sigma.to(x.dtype).expand(x.shape[0], 1, *x.shape[-2:])
        return self.up(self.model(torch.cat((x, noise_map), 1)))[..., :h, :w]
