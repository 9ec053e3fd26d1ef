"""LPIPS and DISTS as training losses (`train.G_lossfn_type` "lpips" / "dists", or among `G_extra_losses`).

The networks are the metrics' own (metrics/lpips.py, metrics/dists.py), so a run minimises exactly
the distance it reports; they are frozen, always in eval mode, and computed in float32 also under
`train.amp` (their normalisations divide by small norms). The loss is the batch mean of the
per-image distance; video batches (NxTxCxHxW) count each frame as an image, gray images are
repeated to RGB. Their keys: `G_lpips_net` (default "vgg", the LPIPS authors' choice for
optimisation; "alex" is theirs as a metric), `G_lpips_path`, `G_lpips_backbone_path`,
`G_dists_path`, `G_dists_backbone_path` (null: utils/weights.py's default paths; "random": random
weights for smoke runs and tests).
"""
from typing import Optional

import torch
from torch import nn

from losses.registry import LOSSES
from metrics.dists import DISTSNet, dists_options
from metrics.imagenet import as_images
from metrics.lpips import LPIPSNet, lpips_options


class DistanceLoss(nn.Module):
    """mean over images of `net(pred, target)`, the target detached."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.net(as_images(pred), as_images(target.detach())).mean()


@LOSSES.register('lpips', options=lpips_options('vgg'))
def lpips(lpips_net: str, lpips_path: Optional[str], lpips_backbone_path: Optional[str]) -> nn.Module:
    """LPIPS v0.1 (`G_lpips_net`, `G_lpips_path`, `G_lpips_backbone_path`)."""
    return DistanceLoss(LPIPSNet(lpips_net, lpips_path, lpips_backbone_path, 'train.G_'))


@LOSSES.register('dists', options=dists_options())
def dists(dists_path: Optional[str], dists_backbone_path: Optional[str]) -> nn.Module:
    """DISTS (`G_dists_path`, `G_dists_backbone_path`)."""
    return DistanceLoss(DISTSNet(dists_path, dists_backbone_path, 'train.G_'))
