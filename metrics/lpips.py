"""LPIPS v0.1 (Zhang, Isola, Efros, Shechtman, Wang, "The Unreasonable Effectiveness of Deep Features as a
Perceptual Metric", CVPR 2018): a learned full-reference distance, lower is better.

Both images go through an ImageNet network (`lpips_net`: "alex", the authors' choice as a metric, or
"vgg", theirs as a training loss, losses/perceptual_distance.py); at five ReLU outputs the features
are normalised to unit length over channels, their squared difference is weighted per channel by the
learned "linear layers", averaged over space, and the five layers are summed. Inputs in [0, 1] are
mapped to [-1, 1] and standardised with the constants of the official code.

Written here from the paper rather than depending on the `lpips` package: that package fetches its
backbone through torchvision's downloader (no internet here, nor on the GPU machines) and pins its
files to its install folder; here the two files are read from where utils/weights.py says (options
`lpips_backbone_path`: torchvision's alexnet-owt-7be5be79.pth / vgg16-397923af.pth, `lpips_path`: the
package's weights/v0.1/{alex,vgg}.pth, BSD-2-Clause). The `lpips` package is the tests' reference.
"""
from typing import Any, Dict, List, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from metrics.imagenet import RANDOM, backbone, check_digest, score_pair, taps, warn_random
from metrics.registry import METRICS
from utils.options.foreign import REDUX, Foreign
from utils.checkpoint import load as load_checkpoint
from utils.errors import UserError
from utils.options import Key, one_of
from utils.weights import WEIGHTS, weights_path

# net: (backbone in utils/weights.py, indices of the five ReLUs in its `features`, their channels)
NETS: Dict[str, Any] = {
    'alex': ('alexnet', (1, 4, 7, 9, 11), (64, 192, 384, 256, 256)),          # relu1 .. relu5
    'vgg': ('vgg16', (3, 8, 15, 22, 29), (64, 128, 256, 512, 512)),          # relu1_2 .. relu5_3
}
# The official input scaling for images in [-1, 1]: ImageNet's mean and std, mapped to [-1, 1]
SHIFT = (-0.030, -0.088, -0.188)
SCALE = (0.458, 0.448, 0.450)
EPS = 1e-10  # added to the feature norms


def lpips_options(net: str) -> Dict[str, Key]:
    """The keys LPIPS reads (`val.lpips_*` as a metric, `train.G_lpips_*` as a loss), `net` the default."""
    return {'lpips_net': Key(net, (str,), one_of(*NETS), 'LPIPS backbone'),
            # linear layers; null: default path; "random"
            'lpips_path': Key(None, (str, type(None)), help='LPIPS linear-layer weights (null: the default path)'),
            # torchvision's file; null: default; "random"
            'lpips_backbone_path': Key(None, (str, type(None)), help='the backbone\'s torchvision weights (null: '
                                                                    'the default path)')}


class LPIPSNet(nn.Module):
    """d(x, y) per image of two Nx3xHxW batches in [0, 1]; differentiable in x, frozen, float32 (also
    under autocast). `where` prefixes the option names in messages ('val.', 'train.G_')."""

    def __init__(self, net: str, lin_path: Optional[str], backbone_path: Optional[str], where: str):
        super().__init__()
        if net not in NETS:
            raise UserError(f'{where}lpips_net: must be one of {", ".join(NETS)}, got {net!r}')
        name, self.at, channels = NETS[net]
        lin = self._linear(f'lpips_{net}', lin_path, channels, f'{where}lpips_path')  # the small file first
        self.features = backbone(name, backbone_path, f'{where}lpips_backbone_path')
        self.register_buffer('shift', torch.tensor(SHIFT).view(1, 3, 1, 1), persistent=False)
        self.register_buffer('scale', torch.tensor(SCALE).view(1, 3, 1, 1), persistent=False)
        for i, w in enumerate(lin):
            self.register_buffer(f'lin{i}', w, persistent=False)

    @staticmethod
    def _linear(name: str, given: Optional[str], channels: List[int], where: str) -> List[torch.Tensor]:
        """The five 1x1 weightings (1xCx1x1): the official file's `lin<i>.model.1.weight`."""
        if given == RANDOM:
            warn_random(where, WEIGHTS[name].what)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                return [torch.rand(1, c, 1, 1) for c in channels]  # non-negative, as the trained ones
        path = weights_path(name, given, where)
        check_digest(name, path, where)
        state = load_checkpoint(path)
        keys = [f'lin{i}.model.1.weight' for i in range(len(channels))]
        got = {k: tuple(state[k].shape) for k in keys if k in state} if isinstance(state, dict) else {}
        want = {k: (1, c, 1, 1) for k, c in zip(keys, channels)}
        if got != want:
            raise UserError(f'{where}: {path} is not {WEIGHTS[name].what}: expected tensors {want}, got '
                            f'{got or "none of them"}')
        return [state[k].float() for k in keys]

    def train(self, mode: bool = True) -> 'LPIPSNet':
        return super().train(False)  # a fixed measure: never dropout or other training behaviour

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            n = x.shape[0]
            both = (torch.cat([x.float(), y.float()]) * 2 - 1 - self.shift) / self.scale
            total = x.new_zeros(n, dtype=torch.float32)
            for i, f in enumerate(taps(self.features, both, self.at)):
                f = f / (f.pow(2).sum(dim=1, keepdim=True).sqrt() + EPS)
                d = (f[:n] - f[n:]).pow(2)
                total = total + F.conv2d(d, getattr(self, f'lin{i}')).mean(dim=(1, 2, 3))
            return total


@METRICS.register('lpips', foreign=[Foreign('calculate_lpips', REDUX, passthrough=False)])
class LPIPS:
    """LPIPS of one frame against its reference (`val.lpips_net`, `val.lpips_path`, `val.lpips_backbone_path`),
    computed on the given device."""

    higher_is_better = False
    needs_reference = True
    OPTIONS = lpips_options('alex')

    def __init__(self, device: torch.device, lpips_net: str, lpips_path: Optional[str],
                 lpips_backbone_path: Optional[str]):
        self.device = torch.device(device)
        self.name = f'LPIPS-{lpips_net}'
        self.net = LPIPSNet(lpips_net, lpips_path, lpips_backbone_path, 'val.').to(self.device)

    def __call__(self, restored: np.ndarray, reference: Optional[np.ndarray]) -> float:
        return score_pair(self.net, self.name, restored, reference, self.device)
