"""A VGG19 perceptual loss chosen like any loss (`G_lossfn_type` / `G_extra_losses`: `vgg_perceptual`): traiNNer-redux's
`perceptualloss`, which its GAN templates train with (model gan's own VGG loss, `F_*`, is KAIR's and BasicSR's).

As traiNNer-redux computes it with its l1 and charbonnier criteria (Apache-2.0; traiNNer/losses/perceptual_fp16_loss.py,
read as facts): the images normalised with ImageNet's mean and std go through torchvision's ImageNet VGG19, whose first
convolution pads by replicating the border instead of with zeros; at each layer of `vgg_layer_weights` (BasicSR's
names; by default conv1_2, conv2_2, conv3_4, conv4_4, conv5_4, before their ReLU, weighted 0.1, 0.1, 1, 1, 1) the
criterion (the mean of sqrt(d^2 + 1e-12) for charbonnier, of |d| for l1) of the two feature maps is weighted and
summed. The VGG19 weights are read, never downloaded (`vgg_pretrained_path`, as `F_pretrained_path`).
"""
from typing import Any, Dict, Optional

import torch
from torch import nn

from losses.perceptual import VGGFeatures
from losses.registry import LOSSES
from utils.options import Key, one_of, rule
from utils.options.foreign import REDUX, Foreign, Only
from utils.vgg19 import VGG19_LAYER_NAMES, vgg19_index

CONV_LAYER_WEIGHTS = {'conv1_2': 0.1, 'conv2_2': 0.1, 'conv3_4': 1.0, 'conv4_4': 1.0, 'conv5_4': 1.0}


@rule('{VGG19 layer name (conv1_1 ... conv5_4, relu..., pool...): weight >= 0}, at least one',
      minProperties=1, additionalProperties={'type': 'number', 'minimum': 0})
def _layer_weights(v: Any) -> Optional[str]:
    if not v:
        return 'must name at least one VGG19 layer, e.g. {"conv5_4": 1.0}'
    for name, weight in v.items():
        if name not in VGG19_LAYER_NAMES:
            return f'"{name}" is not a VGG19 layer ({VGG19_LAYER_NAMES[0]} ... {VGG19_LAYER_NAMES[-1]})'
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            return f'the weight of "{name}" must be a number >= 0'
    return None


def _criterion(name: str) -> Any:
    if name == 'l1':
        return lambda a, b: (a - b).abs().mean()
    return lambda a, b: torch.sqrt((a - b) ** 2 + 1e-12).mean()


class VGGPerceptualLoss(nn.Module):
    """sum over the layers of weight x criterion(VGG19 features of pred, of target)."""

    def __init__(self, layer_weights: Dict[str, float], criterion: str, pretrained_path: Optional[str]):
        super().__init__()
        ordered = sorted(layer_weights, key=vgg19_index)
        self.vgg = VGGFeatures([vgg19_index(n) for n in ordered], True, False, pretrained_path,
                               'train.G_vgg_pretrained_path', 'train.G_vgg_layer_weights')
        self.vgg.features[0].padding_mode = 'replicate'  # traiNNer-redux's first convolution
        self.weights = [float(layer_weights[n]) for n in ordered]
        self.criterion = _criterion(criterion)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        fx, ft = self.vgg(x.float()), self.vgg(target.detach().float())
        return sum(w * self.criterion(a, b.detach()) for w, a, b in zip(self.weights, fx, ft))


_PD_FD_ONLY = Only(None, 'read only with the pd/fd criteria, which are not offered here')


@LOSSES.register('vgg_perceptual', options={
    'vgg_layer_weights': Key(dict(CONV_LAYER_WEIGHTS), (dict,), _layer_weights, 'VGG19 layers compared, by name, with '
                             'their weights'),
    'vgg_criterion': Key('charbonnier', (str,), one_of('charbonnier', 'l1'), 'distance of the feature maps: '
                         'charbonnier (sqrt(d^2 + 1e-12)) or l1'),
    'vgg_pretrained_path': Key(None, (str, type(None)), help='VGG19 weights (null: vgg19-dcbb9e9d.pth in torchvision\'s '
                                                             'cache; "random": random weights, for tests)')},
    foreign=[Foreign('PerceptualLoss', REDUX, passthrough=False,
                     keys={'layer_weights': 'vgg_layer_weights', 'criterion': 'vgg_criterion',
                           'pretrained_path': 'vgg_pretrained_path'},
                     unneeded={'clip_min': Only(0), 'antialiased': Only(False), 'alpha': _PD_FD_ONLY,
                               'w_lambda': Only((0.01,), 'read only with the pd/fd criteria'),
                               'num_proj_fd': Only((256,), 'read only with the fd criteria'),
                               'phase_weight_fd': Only((1, 1.0), 'read only with the fd criteria'),
                               'stride_fd': Only((1,), 'read only with the fd criteria'),
                               'verbose_logging': Only((False, True), 'the log shows the total here')})])
def vgg_perceptual(vgg_layer_weights: Dict[str, float], vgg_criterion: str,
                   vgg_pretrained_path: Optional[str]) -> nn.Module:
    """traiNNer-redux's VGG19 perceptual loss (see the module docstring)."""
    return VGGPerceptualLoss(vgg_layer_weights, vgg_criterion, vgg_pretrained_path)
