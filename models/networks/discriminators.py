"""The GAN discriminators KAIR's `define_D` builds (`netD.net_type`), with KAIR's state_dict names.

KAIR's option files write the same netD keys for every discriminator (`in_nc`, `base_nc`, `act_mode`,
`n_layers`, `norm_type`) and its builder passes each one only those it uses; the constructors here
take exactly those, under the option names, with KAIR's defaults.

Spectral normalisation is `torch.nn.utils.spectral_norm` (a forward pre-hook), not the newer
parametrization: only the hook stores `weight_orig`, `weight_u` and `weight_v`, the names in KAIR's
checkpoints. Its power iteration runs on every forward pass in train mode.
"""
import re
from typing import Callable, List

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import spectral_norm

from models.networks.layers.kair import conv, sequential
from models.registry import NETWORKS
from utils.options.foreign import BASICSR, REDUX, Foreign
from utils.errors import UserError

PATCHGAN_NORM_TYPES = ('batch', 'instance', 'spectral', 'batchspectral', 'instancespectral', 'none')


def _check_act_mode(act_mode: str, net_type: str) -> None:
    if not isinstance(act_mode, str) or not re.fullmatch(r'[BI]?[RL]', act_mode):
        raise UserError(f'netD.act_mode: "{act_mode}" is not supported for {net_type}; '
                        'use BL (KAIR\'s choice), L, BR, R, IL or IR (norm letter B/I, then activation R/L)')


def _check_size(x: torch.Tensor, size: int, net_type: str) -> None:
    h, w = x.shape[-2:]
    if (h, w) != (size, size):
        raise UserError(f'{net_type} needs {size}x{size} inputs (its linear layer is sized for them), got {h}x{w}; '
                        f'train on {size}x{size} patches (datasets.train.H_size) or use the discriminator for yours')


class _VGGDiscriminator(nn.Module):
    """SRGAN's discriminator as KAIR builds it: `stages` halvings, each a 3x3 conv then a strided 4x4
    conv (widths base_nc, 2x, 4x, 8x, then 8x), and two linear layers on the flattened 3x3 or 4x4 map.

    KAIR gives the first conv no activation (it feeds the first strided conv directly), and every
    later conv the `act_mode` letters; the layer order is what numbers `features.<i>`. The sizes differ
    only in `input_size` and `stages`, so they share this constructor (and its option keys).
    """

    net_type = ''
    input_size = 0
    stages = 5

    def __init__(self, in_nc: int = 3, base_nc: int = 64, act_mode: str = 'BL'):
        super().__init__()
        stages = self.stages
        _check_act_mode(act_mode, self.net_type)
        mode = 'C' + act_mode
        layers: List[nn.Module] = [conv(in_nc, base_nc, 'C', kernel_size=3)]
        nc = base_nc
        for i in range(stages):
            width = base_nc * 2 ** min(i, 3)
            if i:
                layers.append(conv(nc, width, mode, kernel_size=3, stride=1))
            layers.append(conv(width, width, mode, kernel_size=4, stride=2))
            nc = width
        self.features = sequential(*layers)
        side = self.input_size >> stages
        self.classifier = nn.Sequential(nn.Linear(nc * side * side, 100), nn.LeakyReLU(0.2, True), nn.Linear(100, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_size(x, self.input_size, self.net_type)
        return self.classifier(torch.flatten(self.features(x), 1))


@NETWORKS.register('discriminator_vgg_96')
class DiscriminatorVGG96(_VGGDiscriminator):
    """SRGAN's VGG-style discriminator (Ledig et al., CVPR 2017) for 96x96 HR patches, SRGAN's own
    patch size: five halvings leave 3x3, so it gives one logit per image and refuses other sizes."""

    net_type = 'discriminator_vgg_96'
    input_size = 96


@NETWORKS.register('discriminator_vgg_128')
class DiscriminatorVGG128(_VGGDiscriminator):
    """The same discriminator for 128x128 patches, ESRGAN's (Wang et al., ECCVW 2018) training size:
    five halvings leave 4x4, so the first linear layer is larger; one logit per image."""

    net_type = 'discriminator_vgg_128'
    input_size = 128


@NETWORKS.register('discriminator_vgg_192')
class DiscriminatorVGG192(_VGGDiscriminator):
    """The same discriminator for 192x192 patches: one more 8x-wide stage (six halvings) brings the map
    back to 3x3, so the classifier matches the 96 one; one logit per image."""

    net_type = 'discriminator_vgg_192'
    input_size = 192
    stages = 6


@NETWORKS.register('discriminator_vgg_128_SN')
class DiscriminatorVGG128SN(nn.Module):
    """ESRGAN's VGG-128 discriminator with spectral normalisation (Miyato et al., ICLR 2018) on every
    conv and linear layer instead of batch norm, for 128x128 RGB patches; one logit per image.

    Spectral norm bounds each layer's Lipschitz constant, which stabilises GAN training without
    batch statistics. KAIR's builder passes it no options (3 channels, width 64 fixed), so it takes
    none; its layers are attributes `conv0`..`conv9`, `linear0`, `linear1` as in KAIR.
    """

    net_type = 'discriminator_vgg_128_SN'
    input_size = 128

    def __init__(self):
        super().__init__()
        self.lrelu = nn.LeakyReLU(0.2, True)
        widths = [64, 64, 128, 128, 256, 256, 512, 512, 512, 512]
        nc = 3
        for i, width in enumerate(widths):
            kernel_size, stride = (4, 2) if i % 2 else (3, 1)
            setattr(self, f'conv{i}', spectral_norm(nn.Conv2d(nc, width, kernel_size, stride, 1)))
            nc = width
        self.linear0 = spectral_norm(nn.Linear(512 * 4 * 4, 100))
        self.linear1 = spectral_norm(nn.Linear(100, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_size(x, self.input_size, self.net_type)
        for i in range(10):
            x = self.lrelu(getattr(self, f'conv{i}')(x))
        return self.linear1(self.lrelu(self.linear0(torch.flatten(x, 1))))


@NETWORKS.register('discriminator_patchgan')
class DiscriminatorPatchGAN(nn.Module):
    """pix2pix's PatchGAN (Isola et al., CVPR 2017) as KAIR builds it: a fully convolutional stack of
    `n_layers` strided 4x4 convs and two stride-1 ones giving one logit per overlapping patch (70x70
    receptive field for n_layers 3), so it judges local texture and takes any input size.

    With 4x4 kernels and padding 2 (pix2pixHD's), an HxW input gives a map of
    H/2+1 per strided conv (floor) and +1 per stride-1 conv. `norm_type` picks the norm after every
    conv but the first and last (batch, instance, or none) and whether all convs are spectrally
    normalised ('spectral' in the name); layers are `model.child<k>.<i>` as in KAIR.
    """

    def __init__(self, in_nc: int = 3, base_nc: int = 64, n_layers: int = 3, norm_type: str = 'spectral'):
        super().__init__()
        if norm_type not in PATCHGAN_NORM_TYPES:
            raise UserError(f'netD.norm_type: "{norm_type}" is not supported for discriminator_patchgan; '
                            f'use {", ".join(PATCHGAN_NORM_TYPES[:-1])} or {PATCHGAN_NORM_TYPES[-1]}')
        if not isinstance(n_layers, int) or n_layers < 0:
            raise UserError(f'netD.n_layers: discriminator_patchgan needs a number of strided convs >= 0, '
                            f'got {n_layers!r}')
        norm = self._norm_layer(norm_type)

        def conv4(in_ch: int, out_ch: int, stride: int) -> nn.Module:
            c = nn.Conv2d(in_ch, out_ch, kernel_size=4, stride=stride, padding=2)
            nn.init.normal_(c.weight, 0.0, 0.02)
            return spectral_norm(c) if 'spectral' in norm_type else c

        children = [[conv4(in_nc, base_nc, 2), nn.LeakyReLU(0.2, True)]]
        nc = base_nc
        for stride in [2] * (n_layers - 1) + [1]:
            width = min(nc * 2, 512)
            children.append([conv4(nc, width, stride), norm(width), nn.LeakyReLU(0.2, True)])
            nc = width
        children.append([conv4(nc, 1, 1)])
        self.model = nn.Sequential()
        for k, layers in enumerate(children):
            self.model.add_module(f'child{k}', nn.Sequential(*layers))

    @staticmethod
    def _norm_layer(norm_type: str) -> Callable[[int], nn.Module]:
        if 'batch' in norm_type:
            def batch_norm(nc: int) -> nn.Module:
                bn = nn.BatchNorm2d(nc, affine=True)
                nn.init.normal_(bn.weight, 1.0, 0.02)
                nn.init.zeros_(bn.bias)
                return bn
            return batch_norm
        if 'instance' in norm_type:
            return lambda nc: nn.InstanceNorm2d(nc, affine=False)
        return lambda nc: nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


@NETWORKS.register('discriminator_unet', foreign=[
    Foreign(name, trainer, keys={'num_in_ch': 'in_nc', 'num_feat': 'base_nc'}, passthrough=False,
            unneeded={'skip_connection': True}) for name, trainer in (('UNetDiscriminatorSN', BASICSR),
                                                                      ('UNetDiscriminatorSN', REDUX))])
class DiscriminatorUNet(nn.Module):
    """Real-ESRGAN's U-Net discriminator with spectral norm (Wang et al., ICCVW 2021), used by BSRGAN
    and SwinIR's real-world GAN training: it gives one logit per pixel (an HxW map), so it judges both
    global structure (through the 8x downsampled bottleneck) and local texture, which real-world
    degradations need. Three strided convs then three bilinear x2 upsamplings with additive skips,
    so H and W must be divisible by 8. KAIR takes only `in_nc` and `base_nc`: spectral norm is always
    on, on every conv but the first and the last.
    """

    def __init__(self, in_nc: int = 3, base_nc: int = 64):
        super().__init__()
        nc = base_nc
        self.conv0 = nn.Conv2d(in_nc, nc, 3, 1, 1)
        self.conv1 = spectral_norm(nn.Conv2d(nc, nc * 2, 4, 2, 1, bias=False))
        self.conv2 = spectral_norm(nn.Conv2d(nc * 2, nc * 4, 4, 2, 1, bias=False))
        self.conv3 = spectral_norm(nn.Conv2d(nc * 4, nc * 8, 4, 2, 1, bias=False))
        self.conv4 = spectral_norm(nn.Conv2d(nc * 8, nc * 4, 3, 1, 1, bias=False))
        self.conv5 = spectral_norm(nn.Conv2d(nc * 4, nc * 2, 3, 1, 1, bias=False))
        self.conv6 = spectral_norm(nn.Conv2d(nc * 2, nc, 3, 1, 1, bias=False))
        self.conv7 = spectral_norm(nn.Conv2d(nc, nc, 3, 1, 1, bias=False))
        self.conv8 = spectral_norm(nn.Conv2d(nc, nc, 3, 1, 1, bias=False))
        self.conv9 = nn.Conv2d(nc, 1, 3, 1, 1)

    @staticmethod
    def _act(x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope=0.2, inplace=True)

    def _up(self, conv: nn.Module, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self._act(conv(F.interpolate(x, scale_factor=2, mode='bilinear', align_corners=False))) + skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        if h % 8 or w % 8:
            raise UserError(f'discriminator_unet needs input sizes divisible by 8 (it downsamples 3 times and '
                            f'adds skips), got {h}x{w}')
        x0 = self._act(self.conv0(x))
        x1 = self._act(self.conv1(x0))
        x2 = self._act(self.conv2(x1))
        x3 = self._act(self.conv3(x2))
        x4 = self._up(self.conv4, x3, x2)
        x5 = self._up(self.conv5, x4, x1)
        x6 = self._up(self.conv6, x5, x0)
        return self.conv9(self._act(self.conv8(self._act(self.conv7(x6)))))
