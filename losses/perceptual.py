"""The VGG perceptual loss (`train.F_*`) of GAN training.

The perceptual loss compares VGG19 features of the restored and ground-truth images (Johnson et al.
2016; ESRGAN takes them before the activation, KAIR's layer 34 = conv5_4). Its ImageNet weights are
torchvision's `vgg19-dcbb9e9d.pth`: never downloaded here, read from `train.F_pretrained_path`
(default: torchvision's cache file), and a missing file is a one-line error saying where to put it.
"""
from typing import Any, Dict, List, Optional, Sequence, Union

import torch
from torch import nn

from utils.checkpoint import load as load_checkpoint
from utils.errors import UserError
from utils.options import Check, Key, one_of, rule
from utils.weights import default_path, weights_path

# `F_lossfn_type`: how feature maps are compared (KAIR's two)
FEATURE_LOSSES = {'l1': nn.L1Loss, 'l2': nn.MSELoss}
RANDOM_VGG = 'random'  # F_pretrained_path value for a randomly initialised VGG19 (tiny smoke files and tests)


def vgg_layers(example: str) -> Check:
    """The check of a key naming the VGG19 `features` layers a loss compares (the perceptual and the contextual
    loss): one index >= 0, or a non-empty list of them in increasing order, each once, as the losses take them;
    `example` ends the message in brackets."""
    @rule('a VGG19 layer index >= 0 or a non-empty list of them, increasing',
          anyOf=[{'type': 'integer', 'minimum': 0},
                 {'type': 'array', 'minItems': 1, 'uniqueItems': True, 'items': {'type': 'integer', 'minimum': 0}}])
    def check(v: Any) -> Optional[str]:
        layers = [v] if isinstance(v, int) and not isinstance(v, bool) else v
        if isinstance(layers, list) and layers and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                       for i in layers) and sorted(set(layers)) == layers:
            return None
        return f'must be a VGG19 layer index or a list of them in increasing order ({example})'
    return check


def default_vgg19_path() -> str:
    """Where torchvision keeps the file once downloaded: <torch hub dir>/checkpoints/vgg19-dcbb9e9d.pth."""
    return default_path('vgg19')


def vgg_input(x: torch.Tensor, who: str) -> torch.Tensor:
    """(..., C, H, W) images as VGG19 takes them, (B, 3, H, W): video frames as images, gray repeated to RGB; any
    other channel count is a ValueError naming `who` (the loss)."""
    x = x.reshape(-1, *x.shape[-3:])
    if x.shape[1] == 1:
        return x.expand(-1, 3, -1, -1)
    if x.shape[1] != 3:
        raise ValueError(f'{who} compares VGG features of RGB or gray images, got {x.shape[1]} channels')
    return x


class VGGFeatures(nn.Module):
    """Outputs of VGG19's `features` at the given layer indices, on inputs in [0, 1] (or [-1, 1] with
    `use_range_norm`), normalised with ImageNet's mean and std when `use_input_norm`. Frozen."""

    def __init__(self, layers: Sequence[int], use_input_norm: bool, use_range_norm: bool, weights: str,
                 weights_key: str = 'train.F_pretrained_path', layers_key: str = 'train.F_feature_layer'):
        """`weights_key` and `layers_key` name the options the weights file and the layers came from in messages
        (the perceptual loss's; the contextual loss has its own)."""
        super().__init__()
        if weights != RANDOM_VGG:  # checked before building 143 M parameters
            weights_path('vgg19', weights, weights_key)
        from torchvision.models import vgg19  # torchvision is heavy: imported only for GAN training
        net = vgg19(weights=None)
        if weights != RANDOM_VGG:
            try:
                net.load_state_dict(load_checkpoint(weights))
            except RuntimeError as e:
                raise UserError(f'{weights_key}: {weights} is not torchvision\'s VGG19: '
                                f'{str(e).splitlines()[0][:200]}') from None
        last = max(layers)
        if not 0 <= min(layers) or last >= len(net.features):
            raise UserError(f'{layers_key}: layers must be in 0..{len(net.features) - 1}, got {list(layers)}')
        self.layers = sorted(set(int(i) for i in layers))
        self.features = net.features[:last + 1].eval()
        for p in self.features.parameters():
            p.requires_grad_(False)
        self.use_input_norm, self.use_range_norm = use_input_norm, use_range_norm
        self.register_buffer('mean', torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1), persistent=False)
        self.register_buffer('std', torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1), persistent=False)

    def train(self, mode: bool = True) -> 'VGGFeatures':
        super().train(mode)
        self.features.eval()  # a fixed feature extractor, whatever the model's mode
        return self

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        if self.use_range_norm:
            x = (x + 1.0) / 2.0
        if self.use_input_norm:
            x = (x - self.mean) / self.std
        out = []
        last = self.layers[-1]
        for i, layer in enumerate(self.features):
            x = layer(x)
            if i in self.layers:
                # The next layer of torchvision's VGG may be an in-place ReLU, which would overwrite a
                # stored tensor with its post-ReLU values: keep a copy (KAIR's pre-activation features).
                out.append(x if i == last else x.clone())
        return out


class PerceptualLoss(nn.Module):
    """sum_i w_i * loss(VGG_i(x), VGG_i(target)) over `F_feature_layer` (KAIR's PerceptualLoss)."""

    # The `train` keys it is built from (KAIR's names and defaults); its weight in the total,
    # `F_lossfn_weight`, belongs to the model that adds it.
    OPTIONS: Dict[str, Key] = {
        'F_lossfn_type': Key('l1', (str,), one_of(*FEATURE_LOSSES),
                             'distance between the VGG features (KAIR: l1, l2, ...)'),
        'F_feature_layer': Key(34, (int, list), vgg_layers('KAIR: 34, or [2, 7, 16, 25, 34]'),
                               'VGG19 layer index(es) whose features are compared'),
        'F_weights': Key(1.0, (int, float, list), help='weight of each feature layer (one number: the same for all)'),
        'F_use_input_norm': Key(True, (bool,), help='normalise inputs with ImageNet\'s mean and std'),
        'F_use_range_norm': Key(False, (bool,), help='map inputs from [-1, 1] to [0, 1] first'),
        # null: torchvision's cache file; "random": smoke runs
        'F_pretrained_path': Key(None, (str, type(None)), help='VGG19 weights (null: torchvision\'s cache file; '
                                                               '"random": a smoke run)'),
    }

    def __init__(self, layers: Union[int, Sequence[int]], weights: Union[float, Sequence[float]], lossfn_type: str,
                 use_input_norm: bool, use_range_norm: bool, vgg_weights: str):
        super().__init__()
        layers = [layers] if isinstance(layers, int) else list(layers)
        weights = [weights] * len(layers) if isinstance(weights, (int, float)) else list(weights)
        if len(weights) != len(layers):
            raise UserError(f'train.F_weights: {len(weights)} weights for {len(layers)} F_feature_layer entries')
        if sorted(layers) != layers or len(set(layers)) != len(layers):
            raise UserError(f'train.F_feature_layer: give the layers in increasing order, each once, got {layers}')
        self.vgg = VGGFeatures(layers, use_input_norm, use_range_norm, vgg_weights)
        self.weights = [float(w) for w in weights]
        self.lossfn = FEATURE_LOSSES[lossfn_type]()

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        fx, ft = self.vgg(x), self.vgg(target.detach())
        return sum(w * self.lossfn(a, b.detach()) for w, a, b in zip(self.weights, fx, ft))
