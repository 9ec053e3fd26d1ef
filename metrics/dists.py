"""DISTS (Ding, Ma, Wang, Simoncelli, "Image Quality Assessment: Unifying Structure and Texture Similarity",
TPAMI 2020): a full-reference distance in [0, 1] that tolerates resampled texture; lower is better.

VGG16 with each max-pool replaced by L2 pooling (the root of a 3x3 Hann-weighted mean of squares,
stride 2, which does not alias) gives six representations: the image itself and the five stages up to
relu1_2 .. relu5_3. Per channel, a "texture" term compares the spatial means and a "structure" term
the correlation, SSIM-like (c1 = c2 = 1e-6); the learned non-negative weights alpha, beta (normalised
to sum to one) combine them and DISTS = 1 - the weighted sum. The frame is scored at its size (the
authors' script can first resize the shorter side to 256; SR papers score the frame as is).

Written here from the paper, as LPIPS (metrics/lpips.py): the authors' `DISTS_pytorch` package fetches
VGG16 through torchvision's downloader and reads alpha/beta from its install prefix. Files (options
`dists_backbone_path`: torchvision's vgg16-397923af.pth; `dists_path`: the package's weights.pt, MIT)
are read from where utils/weights.py says; `DISTS_pytorch` is the tests' reference.
"""
from typing import Dict, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from metrics.imagenet import RANDOM, backbone, check_digest, score_pair, taps, warn_random
from metrics.registry import METRICS
from utils.options.foreign import REDUX, Foreign
from utils.checkpoint import load as load_checkpoint
from utils.errors import UserError
from utils.options import Key
from utils.weights import WEIGHTS, weights_path

CHANNELS = (3, 64, 128, 256, 512, 512)  # the image, then relu1_2, relu2_2, relu3_3, relu4_3, relu5_3
AT = (3, 8, 15, 22, 29)  # those ReLUs' indices in VGG16's `features`
C1 = C2 = 1e-6
MEAN = (0.485, 0.456, 0.406)  # ImageNet's, as VGG16 was trained
STD = (0.229, 0.224, 0.225)


def dists_options() -> Dict[str, Key]:
    """The keys DISTS reads (`val.dists_*` as a metric, `train.G_dists_*` as a loss)."""
    return {'dists_path': Key(None, (str, type(None)), help='DISTS alpha/beta weights (null: the default path)'),
            'dists_backbone_path': Key(None, (str, type(None)), help='torchvision\'s VGG16 weights (null: the '
                                                                    'default path)')}


class L2Pool(nn.Module):
    """sqrt(Hann-weighted 3x3 mean of x^2), stride 2, per channel: DISTS's anti-aliased max-pool."""

    def __init__(self):
        super().__init__()
        a = torch.tensor([0.5, 1.0, 0.5])  # the 5-tap Hann window without its zero ends
        w = torch.outer(a, a)
        self.register_buffer('window', (w / w.sum())[None, None], persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[1]
        out = F.conv2d(x * x, self.window.expand(c, 1, 3, 3), stride=2, padding=1, groups=c)
        return (out + 1e-12).sqrt()


class DISTSNet(nn.Module):
    """DISTS per image of two Nx3xHxW batches in [0, 1]; differentiable in x, frozen, float32 (also under
    autocast). `where` prefixes the option names in messages ('val.', 'train.G_')."""

    def __init__(self, weights: Optional[str], backbone_path: Optional[str], where: str):
        super().__init__()
        alpha, beta = self._alpha_beta(weights, f'{where}dists_path')  # the small file first
        vgg = backbone('vgg16', backbone_path, f'{where}dists_backbone_path')
        self.features = nn.Sequential(*[L2Pool() if isinstance(m, nn.MaxPool2d) else m for m in vgg[:AT[-1] + 1]])
        self.register_buffer('mean', torch.tensor(MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer('std', torch.tensor(STD).view(1, 3, 1, 1), persistent=False)
        total = alpha.sum() + beta.sum()
        for k, (a, b) in enumerate(zip(torch.split(alpha / total, CHANNELS), torch.split(beta / total, CHANNELS))):
            self.register_buffer(f'alpha{k}', a.view(1, -1), persistent=False)
            self.register_buffer(f'beta{k}', b.view(1, -1), persistent=False)

    @staticmethod
    def _alpha_beta(given: Optional[str], where: str):
        n = sum(CHANNELS)
        if given == RANDOM:
            warn_random(where, WEIGHTS['dists'].what)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                return 0.1 + 0.01 * torch.randn(n), 0.1 + 0.01 * torch.randn(n)  # the authors' initialisation
        path = weights_path('dists', given, where)
        check_digest('dists', path, where)
        state = load_checkpoint(path)
        got = {k: tuple(v.shape) for k, v in state.items()} if isinstance(state, dict) else {}
        if got.get('alpha') != (1, n, 1, 1) or got.get('beta') != (1, n, 1, 1):
            raise UserError(f'{where}: {path} is not {WEIGHTS["dists"].what}: expected alpha and beta of shape '
                            f'(1, {n}, 1, 1), got {got or "neither"}')
        return state['alpha'].float().flatten(), state['beta'].float().flatten()

    def train(self, mode: bool = True) -> 'DISTSNet':
        return super().train(False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            n = x.shape[0]
            both = torch.cat([x.float(), y.float()])
            reps = [both] + taps(self.features, (both - self.mean) / self.std, AT)
            similarity = x.new_zeros(n, dtype=torch.float32)
            for k, f in enumerate(reps):
                f = f.flatten(2)
                fx, fy = f[:n], f[n:]
                mx, my = fx.mean(dim=2), fy.mean(dim=2)
                vx = (fx - mx[..., None]).pow(2).mean(dim=2)
                vy = (fy - my[..., None]).pow(2).mean(dim=2)
                cov = (fx * fy).mean(dim=2) - mx * my
                texture = (2 * mx * my + C1) / (mx * mx + my * my + C1)
                structure = (2 * cov + C2) / (vx + vy + C2)
                similarity = similarity + (getattr(self, f'alpha{k}') * texture
                                           + getattr(self, f'beta{k}') * structure).sum(dim=1)
            return 1 - similarity


@METRICS.register('dists', foreign=[Foreign('calculate_dists', REDUX, passthrough=False)])
class DISTS:
    """DISTS of one frame against its reference (`val.dists_path`, `val.dists_backbone_path`), on the given device."""

    higher_is_better = False
    needs_reference = True
    OPTIONS = dists_options()

    def __init__(self, device: torch.device, dists_path: Optional[str], dists_backbone_path: Optional[str]):
        self.device = torch.device(device)
        self.net = DISTSNet(dists_path, dists_backbone_path, 'val.').to(self.device)

    def __call__(self, restored: np.ndarray, reference: Optional[np.ndarray]) -> float:
        return score_pair(self.net, 'DISTS', restored, reference, self.device)
