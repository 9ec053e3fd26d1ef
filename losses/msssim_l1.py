"""The MS-SSIM + L1 mix `msssim_l1` (Zhao, Gallo, Frosio, Kautz, "Loss Functions for Image Restoration
with Neural Networks", IEEE TCI 2017): alpha (1 - MS-SSIM) + (1 - alpha) L1, alpha = `G_msssim_l1_alpha`
(0.84, the paper's).

MS-SSIM keeps structure and contrast but is blind to uniform biases of brightness and colour; L1 keeps
them. MS-SSIM is losses/msssim.py's (Wang et al. 2003: five scales, images of at least 161x161). Zhao
et al. weight the L1 error of each pixel with the Gaussian of MS-SSIM's coarsest scale because they
define the loss at the centre of a patch; averaged over a whole image, a normalised Gaussian weighting
of the per-pixel errors is their plain mean (up to the image borders), so the L1 term here is the mean
absolute error. Images in
[0, 1]; float32 also under AMP.
"""
from typing import Any, Optional

import torch
from torch import nn

from losses.msssim import MSSSIMLoss
from losses.registry import LOSSES
from utils.options import Key, rule


@rule('in [0, 1]', minimum=0, maximum=1)
def _alpha(v: Any) -> Optional[str]:
    return None if 0 <= v <= 1 else 'must be in [0, 1] (the share of 1 - MS-SSIM; 1 - alpha is L1\'s)'


@LOSSES.register('msssim_l1', options={'msssim_l1_alpha': Key(0.84, (int, float), _alpha,
                                                             'weight of 1 - MS-SSIM; L1 gets 1 - alpha')})
class MSSSIML1Loss(nn.Module):
    """alpha (1 - MS-SSIM(x, y)) + (1 - alpha) mean |x - y|."""

    def __init__(self, msssim_l1_alpha: float = 0.84):
        super().__init__()
        self.alpha = float(msssim_l1_alpha)
        self.msssim = MSSSIMLoss()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            l1 = (x.float() - y.float()).abs().mean()
            return self.alpha * self.msssim(x, y) + (1.0 - self.alpha) * l1
