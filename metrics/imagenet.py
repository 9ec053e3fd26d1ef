"""The ImageNet backbones perceptual distances measure with (LPIPS: AlexNet or VGG16; DISTS: VGG16), read
from torchvision's released files, and the conversion of a uint8 frame to the networks' input.

Only the convolutional `features` are built, in torchvision's layout (so its files load as they are):
the classifiers hold most of the parameters (AlexNet 58 M of 61 M, VGG16 124 M of 138 M) and no
metric uses them. Nothing is downloaded: a missing file is the one line of utils/weights.py, and
"random" builds random weights for smoke runs and tests (logged as a warning: the scores then mean
nothing). The networks are frozen and built without touching the run's random stream.
"""
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from utils.checkpoint import load as load_checkpoint
from utils.errors import UserError, first_line
from utils.logger import get_logger
from utils.weights import WEIGHTS, sha256_matches, weights_path

RANDOM = 'random'  # a weights option's value for random weights (smoke runs, tests)

# Simonyan & Zisserman 2015, configuration D: 3x3 convolutions, 'M' a 2x2 max-pool
_VGG16 = (64, 64, 'M', 128, 128, 'M', 256, 256, 256, 'M', 512, 512, 512, 'M', 512, 512, 512, 'M')


def vgg16_features() -> nn.Sequential:
    """VGG16's convolutional part, torchvision's `vgg16().features` (31 layers)."""
    layers: List[nn.Module] = []
    channels = 3
    for v in _VGG16:
        if v == 'M':
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            layers += [nn.Conv2d(channels, int(v), kernel_size=3, padding=1), nn.ReLU(inplace=True)]
            channels = int(v)
    return nn.Sequential(*layers)


def alexnet_features() -> nn.Sequential:
    """AlexNet's convolutional part as torchvision has it (Krizhevsky 2014's single-tower "one weird trick"
    variant: 64, 192, 384, 256, 256 channels), torchvision's `alexnet().features` (13 layers)."""
    return nn.Sequential(
        nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2), nn.ReLU(inplace=True),
        nn.MaxPool2d(kernel_size=3, stride=2),
        nn.Conv2d(64, 192, kernel_size=5, padding=2), nn.ReLU(inplace=True),
        nn.MaxPool2d(kernel_size=3, stride=2),
        nn.Conv2d(192, 384, kernel_size=3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, kernel_size=3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(256, 256, kernel_size=3, padding=1), nn.ReLU(inplace=True),
        nn.MaxPool2d(kernel_size=3, stride=2))


BACKBONES = {'alexnet': alexnet_features, 'vgg16': vgg16_features}  # keys are utils/weights.py names


def warn_random(where: str, what: str) -> None:
    get_logger().warning(f'{where} is "{RANDOM}": {what} has random weights, its scores mean nothing '
                         f'(for smoke runs and tests only)')


def frozen(module: nn.Module) -> nn.Module:
    """`module` in eval mode with no parameter requiring a gradient."""
    for p in module.parameters():
        p.requires_grad_(False)
    return module.eval()


def backbone(name: str, given: Optional[str], where: str) -> nn.Sequential:
    """The frozen `features` of torchvision's ImageNet network `name` ('alexnet', 'vgg16'), read from `given`
    (an option's value, `where` its name: null = utils/weights.py's default path, "random")."""
    path = None if given == RANDOM else weights_path(name, given, where)  # checked before building
    with torch.random.fork_rng(devices=[]):  # the run's random stream stays as it was
        torch.manual_seed(0)
        features = BACKBONES[name]()
    if path is None:
        warn_random(where, WEIGHTS[name].what)
        return frozen(features)
    state = load_checkpoint(path)
    state = state if isinstance(state, dict) else {}
    prefix = 'features.'
    try:
        features.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
    except RuntimeError as e:
        raise UserError(f'{where}: {path} is not {WEIGHTS[name].what} ({WEIGHTS[name].file}): '
                        f'{first_line(e)[:200]}') from None
    return frozen(features)


def check_digest(name: str, path: str, where: str) -> None:
    """Warn when a small released file (LPIPS/DISTS/NIQE parameters) is not the published one: a user's own
    retrained file is allowed, but scores then differ from published tables."""
    if not sha256_matches(name, path):
        get_logger().warning(f'{where}: {path} is not the published {WEIGHTS[name].file} (sha256 differs from '
                             f'{WEIGHTS[name].sha256[:16]}...): scores will not match published ones')


def taps(features: nn.Sequential, x: torch.Tensor, at: Sequence[int]) -> List[torch.Tensor]:
    """The outputs of `features`' layers at indices `at` (increasing) for input `x`, stopping at the last."""
    out = []
    last = at[-1]
    for i, layer in enumerate(features):
        x = layer(x)
        if i in at:
            out.append(x)  # the next layer is a convolution or pooling, never an in-place ReLU
            if i == last:
                break
    return out


def frame_tensor(img: np.ndarray, device: torch.device) -> torch.Tensor:
    """A HWC (or HW, HW1) uint8 frame → 1x3xHxW float32 in [0, 1] on `device` (gray repeated: the networks
    see RGB)."""
    a = np.asarray(img)
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3 or a.shape[2] not in (1, 3):
        raise ValueError(f'expected an HxWx3 or HxW frame, got shape {a.shape}')
    t = torch.from_numpy(np.ascontiguousarray(a)).to(device).permute(2, 0, 1)[None].float().div_(255.0)
    return t.expand(-1, 3, -1, -1) if t.shape[1] == 1 else t


def pair_tensors(restored: np.ndarray, reference: Optional[np.ndarray],
                 device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """Both frames as network inputs; full-reference metrics need the reference and the same size."""
    if reference is None:
        raise ValueError('a full-reference metric needs the reference frame')
    if np.shape(restored)[:2] != np.shape(reference)[:2]:
        raise ValueError(f'image shapes differ: {np.shape(restored)} vs {np.shape(reference)}')
    return frame_tensor(restored, device), frame_tensor(reference, device)


def as_images(x: torch.Tensor) -> torch.Tensor:
    """A loss's NCHW or NTCHW batch → float32 N'x3xHxW (video frames as images, gray repeated to RGB)."""
    if x.dim() == 5:
        x = x.flatten(0, 1)
    if x.dim() != 4 or x.shape[1] not in (1, 3):
        raise ValueError(f'expected Nx3xHxW (or Nx1xHxW, NxTxCxHxW) images, got shape {tuple(x.shape)}')
    x = x.float()
    return x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x


def score_pair(net: nn.Module, name: str, restored: np.ndarray, reference: Optional[np.ndarray],
               device: torch.device) -> float:
    """A full-reference network's distance of one frame to its reference; a frame too small for the
    network is the one line of `too_small`."""
    x, y = pair_tensors(restored, reference, device)
    try:
        with torch.no_grad():
            return float(net(x, y)[0])
    except RuntimeError as e:
        if 'size' in str(e).lower():
            raise too_small(name, tuple(x.shape), e) from None
        raise


def too_small(metric: str, shape: Tuple[int, ...], e: RuntimeError) -> UserError:
    """The one line for a frame smaller than a network's receptive field can take."""
    return UserError(f'cannot score a {shape[-2]}x{shape[-1]} image with {metric}: it is too small for the '
                     f'network ({first_line(e)[:120]})')

