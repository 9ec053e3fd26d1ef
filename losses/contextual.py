"""Contextual loss `contextual` on VGG19 features (Mechrez, Talmi, Zelnik-Manor, "The Contextual Loss for
Image Transformation with Non-Aligned Data", ECCV 2018).

Each image is a set of feature vectors (one per position of a VGG19 feature map), compared as sets:
alignment does not matter, only whether every target feature has a similar feature in the output. For
output features x_i and target features y_j of one image (N each):
- d_ij = 1 - cos(x_i - mu_y, y_j - mu_y), the cosine distance after centring both by the target's mean
  feature mu_y;
- d~_ij = d_ij / (min_k d_ik + 1e-5), relative to the nearest target feature of x_i;
- w_ij = exp((1 - d~_ij) / h), h = `G_cx_band_width`; CX_ij = w_ij / sum_k w_ik;
- CX = (1/N) sum_j max_i CX_ij, and the loss is -log CX, averaged over the images, summed over
  `G_cx_layers` with `G_cx_weights`.
The features are VGG19's `features` outputs at the given indices (pre-activation, as the perceptual loss
takes them: 12 = conv3_2, 21 = conv4_2, traiNNer-redux's default pair), on ImageNet-normalised inputs in
[0, 1]; gray images are repeated to RGB, video frames count as images. The network is losses/perceptual.py's:
torchvision's `vgg19-dcbb9e9d.pth`, never downloaded, read from `G_cx_pretrained_path` (null: torchvision's
cache file; "random": random weights for tests). Memory: an N x N matrix per image and layer (N = positions
of the feature map: a 96x96 patch has 576 at conv3_2, a 256x256 one 4096, 16.8 M entries). The set
comparison runs in float32 also under AMP.
"""
from typing import List, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

from losses.perceptual import RANDOM_VGG, VGGFeatures, default_vgg19_path, vgg_input, vgg_layers
from losses.registry import LOSSES
from utils.errors import UserError
from utils.logger import get_logger
from utils.options import Key, positive

EPS = 1e-5  # the paper's epsilon of the relative distance


def contextual_loss(fx: torch.Tensor, fy: torch.Tensor, band_width: float) -> torch.Tensor:
    """-log CX(X, Y) per image, (B,), of output features `fx` and target features `fy`, both (B, C, H, W)."""
    x, y = fx.float().flatten(2), fy.float().flatten(2)  # B, C, N
    mu = y.mean(2, keepdim=True)
    x, y = F.normalize(x - mu, dim=1), F.normalize(y - mu, dim=1)
    d = (1.0 - x.transpose(1, 2) @ y).clamp(min=0)  # B, N (output i), N (target j)
    relative = d / (d.amin(dim=2, keepdim=True) + EPS)
    cx = torch.softmax((1.0 - relative) / band_width, dim=2)  # w_ij / sum_k w_ik
    return -torch.log(cx.amax(dim=1).mean(dim=1))


@LOSSES.register('contextual', options={
    'cx_layers': Key([12, 21], (int, list), vgg_layers('e.g. [12, 21]: conv3_2, conv4_2'),
                     'VGG19 feature layer indices compared (12, 21: conv3_2, conv4_2)'),
    'cx_weights': Key(1.0, (int, float, list), help='weight of each layer\'s loss: one number for all, or one per '
                      'layer'),
    'cx_band_width': Key(0.5, (int, float), positive, 'h in exp((1 - d) / h): smaller is sharper matching'),
    'cx_pretrained_path': Key(None, (str, type(None)), help='VGG19 weights file (null: vgg19-dcbb9e9d.pth in '
                              'torchvision\'s cache; "random": random weights, for tests)'),
})
class ContextualLoss(nn.Module):
    """sum over `cx_layers` of weight x mean over images of -log CX (see the module docstring)."""

    def __init__(self, cx_layers: Union[int, Sequence[int]] = (12, 21), cx_weights: Union[float, Sequence[float]] = 1.0,
                 cx_band_width: float = 0.5, cx_pretrained_path: Optional[str] = None):
        super().__init__()
        layers = [cx_layers] if isinstance(cx_layers, int) else list(cx_layers)
        weights = [cx_weights] * len(layers) if isinstance(cx_weights, (int, float)) else list(cx_weights)
        if len(weights) != len(layers):
            raise UserError(f'train.G_cx_weights: {len(weights)} weights for {len(layers)} G_cx_layers entries')
        if sorted(set(layers)) != layers:
            raise UserError(f'train.G_cx_layers: give the layers in increasing order, each once, got {layers}')
        path = cx_pretrained_path or default_vgg19_path()
        if path == RANDOM_VGG:
            get_logger().warning('train.G_cx_pretrained_path is "random": the contextual loss compares features of a '
                                 'random VGG19 (for smoke runs and tests only)')
        self.vgg = VGGFeatures(layers, True, False, path, 'train.G_cx_pretrained_path', 'train.G_cx_layers')
        self.weights: List[float] = [float(w) for w in weights]
        self.band_width = float(cx_band_width)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        fx = self.vgg(vgg_input(x, 'the contextual loss'))
        with torch.no_grad():
            fy = self.vgg(vgg_input(y.detach(), 'the contextual loss'))
        with torch.autocast(x.device.type, enabled=False):
            return sum(w * contextual_loss(a, b, self.band_width).mean() for w, a, b in zip(self.weights, fx, fy))
