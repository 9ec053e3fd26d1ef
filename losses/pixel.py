"""Pixel losses selected by `train.G_lossfn_type`, scaled by `train.G_lossfn_weight` (KAIR semantics)."""
import math
from typing import Any, List

import torch
import torch.nn.functional as F
from torch import nn

from losses.registry import LOSSES
from utils.options import Key, positive
from utils.options.foreign import BASICSR, REDUX, Foreign


class CharbonnierLoss(nn.Module):
    """mean(sqrt((x - y)^2 + eps)): a differentiable L1 (KAIR/VRT; eps is added inside the root, not squared);
    with `reduction` 'sum' the sum instead (BasicSR's EDVR recipes)."""

    def __init__(self, eps: float = 1e-9, reduction: str = 'mean'):
        super().__init__()
        self.eps = eps
        self.reduce = torch.sum if reduction == 'sum' else torch.mean

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        diff = x - y
        return self.reduce(torch.sqrt(diff * diff + self.eps))


class SSIMLoss(nn.Module):
    """1 - SSIM (Wang et al. 2004: 11x11 Gaussian window, sigma 1.5, valid part only), per channel.

    The same SSIM as the validation metric (metrics/fidelity.py), on images in [0, 1], so that the
    loss a run minimises is the score it reports; KAIR's `ssim` loss type.
    """

    def __init__(self, window: int = 11, sigma: float = 1.5):
        super().__init__()
        g = torch.tensor([math.exp(-((i - window // 2) ** 2) / (2 * sigma ** 2)) for i in range(window)],
                         dtype=torch.float64)
        g = g / g.sum()
        self.register_buffer('window', torch.outer(g, g).float()[None, None], persistent=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        c1, c2 = 0.01 ** 2, 0.03 ** 2
        n = x.shape[1]
        w = self.window.to(x.dtype).expand(n, 1, -1, -1)

        def filt(t: torch.Tensor) -> torch.Tensor:
            return F.conv2d(t, w, groups=n)

        mu_x, mu_y = filt(x), filt(y)
        var_x = filt(x * x) - mu_x ** 2
        var_y = filt(y * y) - mu_y ** 2
        cov = filt(x * y) - mu_x * mu_y
        ssim = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x ** 2 + mu_y ** 2 + c1) * (var_x + var_y + c2))
        return 1 - ssim.mean()




def _named(name: str, reduction: str = 'mean', **extra: Any) -> List[Foreign]:
    """BasicSR's and traiNNer-redux's `name` loss with `reduction` (their default: mean): `loss_weight` is the
    slot's weight, read by the reader of their files."""
    defaults = {'reduction': 'mean', **extra.pop('defaults', {})}
    return [Foreign(name, trainer, requires={'reduction': reduction}, defaults=defaults, **extra)
            for trainer in (BASICSR, REDUX)]


LOSSES.register('l1', foreign=_named('L1Loss'))(nn.L1Loss)
LOSSES.register('l2', foreign=_named('MSELoss'))(nn.MSELoss)
LOSSES.register('ssim')(SSIMLoss)


@LOSSES.register('psnr', foreign=[Foreign('PSNRLoss', BASICSR, unneeded={'toY': False, 'reduction': 'mean'}),
                                   Foreign('PSNRLoss', REDUX, unneeded={'to_y': False, 'reduction': 'mean'})])
class PSNRLoss(nn.Module):
    """NAFNet's PSNR loss (Chen et al., ECCV 2022): the mean over the batch of 10 log10(MSE + 1e-8) of each image,
    i.e. minus its PSNR for images in [0, 1]; per-image, so a batch's easy images do not drown its hard ones."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        mse = (x.float() - y.float()).square().flatten(1).mean(1)
        return 10.0 * torch.log10(mse + 1e-8).mean()


@LOSSES.register('l2sum', foreign=_named('MSELoss', 'sum'))
def l2sum() -> nn.Module:
    """Sum of squared differences (KAIR's 'l2sum')."""
    return nn.MSELoss(reduction='sum')


# BasicSR's and traiNNer-redux's CharbonnierLoss: eps 1e-12 unless the file gives one
_CHARBONNIER = dict(keys={'eps': 'charbonnier_eps'}, defaults={'eps': 1e-12})


@LOSSES.register('charbonnier', options={'charbonnier_eps': Key(1e-9, (int, float), positive,
                                                                  'eps in sqrt(diff^2 + eps)')},
                 foreign=_named('CharbonnierLoss', **_CHARBONNIER))
def charbonnier(charbonnier_eps: float) -> nn.Module:
    """CharbonnierLoss with KAIR's `G_charbonnier_eps`."""
    return CharbonnierLoss(float(charbonnier_eps))


@LOSSES.register('charbonnier_sum', options={'charbonnier_eps': Key(1e-9, (int, float), positive,
                                                                      'eps in sqrt(diff^2 + eps)')},
                 foreign=_named('CharbonnierLoss', 'sum', **_CHARBONNIER))
def charbonnier_sum(charbonnier_eps: float) -> nn.Module:
    """The sum over all pixels of sqrt((x - y)^2 + eps): BasicSR's CharbonnierLoss with `reduction: sum`, which its
    EDVR recipes train with (named like KAIR's 'l2sum'). With Adam the scale barely matters: the steps are the
    mean's, but eps (1e-8) weighs relatively less."""
    return CharbonnierLoss(float(charbonnier_eps), 'sum')
