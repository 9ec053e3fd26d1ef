"""ESRGAN's generator, RRDBNet (Wang et al., "ESRGAN", ECCVW 2018), with BasicSR's state_dict names,
so Real-ESRGAN's releases (`RealESRGAN_x4plus`, `..._anime_6B`, `RealESRGAN_x2plus`) load strictly.

The same network as `rrdbnet` (KAIR/BSRGAN names: `RRDB_trunk.N.RDB1`, `trunk_conv`, `upconv1`, ...),
named as BasicSR names it (`body.N.rdb1`, `conv_body`, `conv_up1`, ...). Real-ESRGAN's scale 2 and 1
models first fold the image into channels (pixel-unshuffle by 2 / 4) and then upsample x4 as usual,
which keeps the costly body at a quarter (x2) or a sixteenth (x1) of the pixels.
"""
import torch
import torch.nn.functional as F
from torch import nn

from models.networks.rrdbnet import RRDB
from models.registry import NETWORKS
from utils.options.foreign import REDUX, Foreign
from utils.errors import UserError

UNSHUFFLE = {1: 4, 2: 2, 4: 1}  # scale → pixel-unshuffle factor before the x4 network


BASICSR_NAMES = ('rdb1', 'rdb2', 'rdb3')  # BasicSR's names of an RRDB's dense blocks (KAIR: RDB1..3)


# traiNNer-redux's esrgan presets build spandrel's ESRGAN, the same network under the old ESRGAN parameter names
# (model.0.weight, ...): trained here, its weights carry BasicSR's names (conv_first, body.0.rdb1, ...)
_REDUX_KEYS = {'scale': 'scale', 'in_nc': 'num_in_ch', 'out_nc': 'num_out_ch', 'num_filters': 'num_feat', 'num_blocks': 'num_block'}
_REDUX_NOTE = 'built as BasicSR\'s RRDBNet (the same network; weight names conv_first, body.N.rdbM..., not model.N...)'


@NETWORKS.register('esrgan', foreign=[
    Foreign('RRDBNet'),
    *[Foreign(name, REDUX, keys=_REDUX_KEYS, defaults=defaults, unneeded={'use_pixel_unshuffle': True},
              passthrough=False, note=_REDUX_NOTE)
      for name, defaults in (('esrgan', {}), ('esrgan_lite', {'num_filters': 32, 'num_blocks': 12}))]])
class RRDBNetBasicSR(nn.Module):
    """Super-resolution by `scale` in {1, 2, 4} (BasicSR's keyword; give the top-level scale's value)."""

    repeated_blocks = (RRDB,)

    def __init__(self, num_in_ch: int = 3, num_out_ch: int = 3, scale: int = 4, num_feat: int = 64,
                 num_block: int = 23, num_grow_ch: int = 32):
        super().__init__()
        if scale not in UNSHUFFLE:
            raise UserError(f'netG.scale: esrgan supports 1, 2 or 4, got {scale!r}')
        self.unshuffle = UNSHUFFLE[scale]
        self.conv_first = nn.Conv2d(num_in_ch * self.unshuffle ** 2, num_feat, 3, 1, 1)
        self.body = nn.Sequential(*[RRDB(num_feat, num_grow_ch, BASICSR_NAMES) for _ in range(num_block)])
        self.conv_body = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_up1 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_up2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_hr = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_last = nn.Conv2d(num_feat, num_out_ch, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.unshuffle > 1:
            if x.shape[-1] % self.unshuffle or x.shape[-2] % self.unshuffle:
                raise UserError(f'esrgan at this scale needs height and width divisible by {self.unshuffle}, '
                                f'got {tuple(x.shape[-2:])}')
            x = F.pixel_unshuffle(x, self.unshuffle)
        feat = self.conv_first(x)
        feat = feat + self.conv_body(self.body(feat))
        for conv in (self.conv_up1, self.conv_up2):
            feat = self.lrelu(conv(F.interpolate(feat, scale_factor=2, mode='nearest')))
        return self.conv_last(self.lrelu(self.conv_hr(feat)))
