"""Adversarial losses of GAN training, chosen by `train.gan_type` (KAIR's names)."""
from typing import Any, Dict, Optional

import torch
import torch.nn.functional as F
from torch import nn

from utils.errors import UserError
from utils.options import Key, rule

GAN_TYPES = ('gan', 'ragan', 'lsgan', 'wgan', 'softplusgan', 'hinge')


@rule(f'one of {", ".join(GAN_TYPES)}', enum=list(GAN_TYPES))
def _gan_type(v: Any) -> Optional[str]:
    return None if v in GAN_TYPES else f'must be one of {", ".join(GAN_TYPES)}'


class GANLoss(nn.Module):
    """Loss of discriminator outputs (logits) against "real" or "fake", for one of GAN_TYPES.

    gan and ragan: binary cross-entropy on logits (ragan's relativism is in how the model forms the
    logits); lsgan: squared distance to 1 / 0; wgan: -mean / mean; softplusgan: softplus(-x) / softplus(x)
    (the non-saturating loss in logit form, StyleGAN's); hinge (Lim & Ye 2017, SAGAN/BigGAN's): for D
    mean relu(1 - x) on real and mean relu(1 + x) on fake, for G -mean x (`is_disc` tells the two apart;
    the other types are the same for both).
    """

    OPTIONS: Dict[str, Key] = {'gan_type': Key('gan', (str,), _gan_type, 'adversarial loss form')}  # the `train` key it is built from

    def __init__(self, gan_type: str):
        super().__init__()
        if gan_type not in GAN_TYPES:
            raise UserError(f'train.gan_type: unknown "{gan_type}"; known: {", ".join(GAN_TYPES)}')
        self.gan_type = gan_type

    def forward(self, pred: torch.Tensor, target_is_real: bool, is_disc: bool = False) -> torch.Tensor:
        pred = pred.float()
        if self.gan_type == 'hinge':
            if not is_disc:  # the generator's loss: raise D's score of its output, with no margin
                return -pred.mean()
            return F.relu(1.0 - pred).mean() if target_is_real else F.relu(1.0 + pred).mean()
        if self.gan_type == 'wgan':
            return -pred.mean() if target_is_real else pred.mean()
        if self.gan_type == 'softplusgan':
            return F.softplus(-pred).mean() if target_is_real else F.softplus(pred).mean()
        target = torch.ones_like(pred) if target_is_real else torch.zeros_like(pred)
        if self.gan_type == 'lsgan':
            return F.mse_loss(pred, target)
        return F.binary_cross_entropy_with_logits(pred, target)
