"""traiNNer-redux's DUnet discriminator (`netD.net_type: dunet`): the U-Net discriminator its GAN templates train
with (Apache-2.0; the layout is read from traiNNer-redux's traiNNer/archs/dunet_arch.py, as facts).

A 3x3 conv to `num_feat` channels, three strided 3x3 convs each doubling the channels (spectral norm, Mish), three
upsampling steps back (DySample x2, spectral-norm 3x3 conv halving the channels) each added to the encoder's map of
its size, and a head of two spectral-norm 3x3 convs with Mish and a last 3x3 conv to one logit per pixel. Spectral
norm is torch's parametrization (its weights are `parametrizations.weight.original0/1`, as traiNNer-redux saves
them); DySample is spandrel's (the learned point-sampling upsampler of Liu et al., ICCV 2023), imported when the
discriminator is built.
"""
import torch
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm

from models.registry import NETWORKS
from utils.errors import UserError
from utils.options.foreign import REDUX, Foreign


def _dysample(channels: int) -> nn.Module:
    """spandrel's DySample, x2, 4 groups, no end convolution (DUnet's upsampler)."""
    try:
        from spandrel.architectures.__arch_helpers.dysample import DySample
    except ImportError as e:
        raise UserError(f'netD (dunet): its upsampler is spandrel\'s DySample, and spandrel is not installed ({e}); '
                        f'pip install spandrel==0.4.2') from None
    return DySample(channels, channels, 2, 4, False)


class _Down(nn.Sequential):
    def __init__(self, dim: int):
        super().__init__(spectral_norm(nn.Conv2d(dim, dim * 2, 3, 2, 1)), nn.Mish(True))


class _Up(nn.Sequential):
    def __init__(self, dim: int):
        super().__init__(_dysample(dim), spectral_norm(nn.Conv2d(dim, dim // 2, 3, 1, 1)))


@NETWORKS.register('dunet', foreign=[Foreign('DUnet', REDUX)])
class DUnet(nn.Module):
    """One logit per pixel; H and W must be divisible by 8 (three halvings, added back to the encoder's maps)."""

    def __init__(self, num_in_ch: int = 3, num_feat: int = 64):
        super().__init__()
        self.in_to_dim = nn.Conv2d(num_in_ch, num_feat, 3, 1, 1)
        self.e_x1 = _Down(num_feat)
        self.e_x2 = _Down(num_feat * 2)
        self.e_x3 = _Down(num_feat * 4)
        self.up1 = _Up(num_feat * 8)
        self.up2 = _Up(num_feat * 4)
        self.up3 = _Up(num_feat * 2)
        self.end_conv = nn.Sequential(
            spectral_norm(nn.Conv2d(num_feat, num_feat, 3, 1, 1, bias=False)), nn.Mish(True),
            spectral_norm(nn.Conv2d(num_feat, num_feat, 3, 1, 1, bias=False)), nn.Mish(True),
            nn.Conv2d(num_feat, 1, 3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        if h % 8 or w % 8:
            raise UserError(f'dunet needs input sizes divisible by 8 (it halves them 3 times and adds the maps back), '
                            f'got {h}x{w}')
        x0 = self.in_to_dim(x)
        x1 = self.e_x1(x0)
        x2 = self.e_x2(x1)
        x3 = self.e_x3(x2)
        y = self.up1(x3) + x2
        y = self.up2(y) + x1
        return self.end_conv(self.up3(y) + x0)
