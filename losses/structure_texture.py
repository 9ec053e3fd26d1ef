"""Structure-texture loss `structure_texture` (traiNNer-redux's StructureTextureLoss): a pixel loss where the
target has edges, a VGG19 feature loss where it has none.

From the target's BT.601 luma Y = 0.299 R + 0.587 G + 0.114 B: its Sobel gradients (the 3x3 kernels / 4, zero
padding), the magnitude sqrt(Gx² + Gy² + 1e-8) divided by the image's largest (+ 1e-8), and the structure
weight w_s = floor + (1 - floor) x that, in [floor, 1] (`G_st_floor`); the texture weight is w_t = 1 - w_s.
- structure: mean over pixels and channels of w_s x Charbonnier(pred - target) (sqrt(Δ² + 1e-12), traiNNer's),
- texture: sum over `G_st_layers` (VGG19 `features` indices, pre-activation: 2, 7, 16, 25, 34 = conv1_2,
  conv2_2, conv3_4, conv4_4, conv5_4) with `G_st_layer_weights` of mean(w_t' x mean over channels |ΔF|), w_t'
  the texture weight resized bilinearly (half-pixel centres, no antialiasing) to the feature map,
and the loss is `G_st_pixel_weight` x structure + `G_st_perceptual_weight` x texture. Edges are kept sharp by
the pixel term, flat and textured regions are judged by their features, so the perceptual term does not invent
detail along edges nor the pixel term average textures flat. The VGG19 is the perceptual loss's (torchvision's
`vgg19-dcbb9e9d.pth` on ImageNet-normalised inputs in [0, 1], never downloaded: `G_st_pretrained_path`; traiNNer-
redux's first convolution replicates the border where torchvision's pads zeros). Gray images are repeated to
RGB; video batches (N, T, C, H, W) count each frame. The VGG runs under the step's AMP dtype (as the perceptual
loss), the weights and means in float32. Cost: two VGG19 passes to conv5_4 (the target's without gradients),
about a perceptual loss's.
"""
from typing import Any, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from losses.perceptual import RANDOM_VGG, VGGFeatures, default_vgg19_path, vgg_input
from losses.registry import LOSSES
from utils.errors import UserError
from utils.logger import get_logger
from utils.options import Key, closed_unit, non_negative, rule

LUMA = (0.299, 0.587, 0.114)
SOBEL_X = ((-1.0, 0.0, 1.0), (-2.0, 0.0, 2.0), (-1.0, 0.0, 1.0))  # / 4 in the weight, as traiNNer-redux
MAG_EPS, NORM_EPS, CHARBONNIER_EPS = 1e-8, 1e-8, 1e-12


@rule('a non-empty list of VGG19 layer indices >= 0, increasing', minItems=1,
      items={'type': 'integer', 'minimum': 0})
def _layers(v: Any) -> Optional[str]:
    if v and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v) and sorted(set(v)) == list(v):
        return None
    return 'must be a non-empty list of VGG19 layer indices in increasing order (e.g. [2, 7, 16, 25, 34])'


@rule('a list of numbers >= 0', items={'type': 'number', 'minimum': 0})
def _layer_weights(v: Any) -> Optional[str]:
    if all(isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 for w in v):
        return None
    return 'must be a list of numbers >= 0, one per G_st_layers entry'


def structure_weight(target: torch.Tensor, floor: float) -> torch.Tensor:
    """(B, 1, H, W) w_s in [floor, 1] of (B, C, H, W) targets: their luma's normalised Sobel magnitude."""
    luma = target if target.shape[1] == 1 else torch.einsum(
        'c,bchw->bhw', torch.tensor(LUMA, dtype=target.dtype, device=target.device), target)[:, None]
    kx = torch.tensor(SOBEL_X, dtype=target.dtype, device=target.device) / 4.0
    g = F.conv2d(luma, torch.stack([kx, kx.t()])[:, None], padding=1)  # B, 2 (x, y), H, W
    mag = (g.square().sum(1, keepdim=True) + MAG_EPS).sqrt()
    return floor + (1.0 - floor) * mag / (mag.amax(dim=(2, 3), keepdim=True) + NORM_EPS)


@LOSSES.register('structure_texture', options={
    'st_layers': Key([2, 7, 16, 25, 34], (list,), _layers, 'VGG19 feature layers of the texture term (conv1_2, '
                     'conv2_2, conv3_4, conv4_4, conv5_4)'),
    'st_layer_weights': Key([0.1, 0.1, 1.0, 1.0, 1.0], (list,), _layer_weights, 'weight of each layer of '
                            'G_st_layers (traiNNer-redux\'s)'),
    'st_pixel_weight': Key(1.0, (int, float), non_negative, 'weight of the structure (edge-weighted Charbonnier) '
                           'term'),
    'st_perceptual_weight': Key(1.0, (int, float), non_negative, 'weight of the texture (flat-weighted VGG) term'),
    'st_floor': Key(0.1, (int, float), closed_unit, 'the smallest structure weight: flat regions keep this share of '
                    'the pixel term'),
    'st_pretrained_path': Key(None, (str, type(None)), help='VGG19 weights file (null: vgg19-dcbb9e9d.pth in '
                              'torchvision\'s cache; "random": random weights, for tests)'),
})
class StructureTextureLoss(nn.Module):
    """pixel_weight x edge-weighted Charbonnier + perceptual_weight x flat-weighted VGG19 L1 (see the module
    docstring)."""

    def __init__(self, st_layers: Sequence[int] = (2, 7, 16, 25, 34),
                 st_layer_weights: Sequence[float] = (0.1, 0.1, 1.0, 1.0, 1.0), st_pixel_weight: float = 1.0,
                 st_perceptual_weight: float = 1.0, st_floor: float = 0.1, st_pretrained_path: Optional[str] = None):
        super().__init__()
        layers = list(st_layers)
        if len(st_layer_weights) != len(layers):
            raise UserError(f'train.G_st_layer_weights: {len(st_layer_weights)} weights for {len(layers)} '
                            f'G_st_layers entries')
        self.weights: List[float] = [float(w) for w in st_layer_weights]
        self.pixel_weight, self.perceptual_weight = float(st_pixel_weight), float(st_perceptual_weight)
        self.floor = float(st_floor)
        self.vgg: Optional[VGGFeatures] = None
        if self.perceptual_weight > 0:
            path = st_pretrained_path or default_vgg19_path()
            if path == RANDOM_VGG:
                get_logger().warning('train.G_st_pretrained_path is "random": the structure-texture loss compares '
                                     'features of a random VGG19 (for smoke runs and tests only)')
            self.vgg = VGGFeatures(layers, True, False, path, 'train.G_st_pretrained_path', 'train.G_st_layers')

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x, y = x.reshape(-1, *x.shape[-3:]), y.detach().reshape(-1, *y.shape[-3:])
        with torch.autocast(x.device.type, enabled=False):
            w_s = structure_weight(y.float(), self.floor)
            structure = (w_s * ((x.float() - y.float()).square() + CHARBONNIER_EPS).sqrt()).mean()
        if self.vgg is None:
            return self.pixel_weight * structure
        fx = self.vgg(vgg_input(x, 'the structure-texture loss'))
        with torch.no_grad():
            fy = self.vgg(vgg_input(y, 'the structure-texture loss'))
        with torch.autocast(x.device.type, enabled=False):
            w_t = 1.0 - w_s
            texture = sum(weight * (F.interpolate(w_t, size=a.shape[-2:], mode='bilinear', align_corners=False)
                                    * (a.float() - b.float()).abs().mean(1, keepdim=True)).mean()
                          for weight, a, b in zip(self.weights, fx, fy))
            return self.pixel_weight * structure + self.perceptual_weight * texture
