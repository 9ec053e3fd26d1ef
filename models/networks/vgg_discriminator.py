"""BasicSR's VGG-style discriminator (`netD.net_type: discriminator_vgg_style`; BasicSR's VGGStyleDiscriminator),
with BasicSR's parameter names, for SRGAN, ESRGAN and video GAN training as BasicSR trains them.

Five (six for 256x256 inputs) stages of a 3x3 conv and a strided 4x4 conv, each followed by BatchNorm (but the very
first conv, which has a bias and no norm) and LeakyReLU(0.2), widths num_feat x 1, 2, 4, 8, 8 (8); the 4x4 map left
is flattened into a 100-unit linear layer and one logit. It differs from KAIR's discriminator_vgg_128 (which has no
activation after its first conv): BasicSR's files train with this one.
"""
from typing import List

import torch
from torch import nn

from models.registry import NETWORKS
from utils.errors import UserError
from utils.options.foreign import BASICSR, REDUX, Foreign

INPUT_SIZES = (128, 256)


@NETWORKS.register('discriminator_vgg_style', foreign=[Foreign('VGGStyleDiscriminator', t) for t in (BASICSR, REDUX)])
class VGGStyleDiscriminator(nn.Module):
    """One logit per `input_size` x `input_size` image (128 or 256: the training patch of the GT)."""

    def __init__(self, num_in_ch: int = 3, num_feat: int = 64, input_size: int = 128):
        super().__init__()
        if input_size not in INPUT_SIZES:
            raise UserError(f'netD.input_size: the VGG-style discriminator takes 128 or 256, got {input_size!r}')
        self.input_size = input_size
        widths = [num_feat, num_feat * 2, num_feat * 4, num_feat * 8, num_feat * 8] + (
            [num_feat * 8] if input_size == 256 else [])
        self.stages = len(widths)
        self.conv0_0 = nn.Conv2d(num_in_ch, num_feat, 3, 1, 1, bias=True)
        previous = num_feat
        for i, width in enumerate(widths):
            if i:  # stage 0 starts with conv0_0 above (a bias, no norm)
                setattr(self, f'conv{i}_0', nn.Conv2d(previous, width, 3, 1, 1, bias=False))
                setattr(self, f'bn{i}_0', nn.BatchNorm2d(width))
            setattr(self, f'conv{i}_1', nn.Conv2d(width, width, 4, 2, 1, bias=False))
            setattr(self, f'bn{i}_1', nn.BatchNorm2d(width))
            previous = width
        self.linear1 = nn.Linear(num_feat * 8 * 4 * 4, 100)
        self.linear2 = nn.Linear(100, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def _layers(self) -> List[nn.Module]:
        out: List[nn.Module] = []
        for i in range(self.stages):
            if i:
                out += [getattr(self, f'conv{i}_0'), getattr(self, f'bn{i}_0')]
            out += [getattr(self, f'conv{i}_1'), getattr(self, f'bn{i}_1')]
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape[-2:]) != (self.input_size, self.input_size):
            raise UserError(f'discriminator_vgg_style needs {self.input_size}x{self.input_size} inputs (netD.input_size, '
                            f'its linear layer is sized for them), got {x.shape[-2]}x{x.shape[-1]}; train on '
                            f'{self.input_size}x{self.input_size} GT patches (datasets.train.gt_size)')
        feat = self.lrelu(self.conv0_0(x))
        layers = self._layers()
        for conv, norm in zip(layers[::2], layers[1::2]):
            feat = self.lrelu(norm(conv(feat)))
        return self.linear2(self.lrelu(self.linear1(feat.flatten(1))))
