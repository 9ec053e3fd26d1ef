"""Locally discriminative learning (LDL: Liang, Zeng, Zhang, "Details or Artifacts: A Locally Discriminative
Learning Approach to Realistic Image Super-Resolution", CVPR 2022), `train.ldl_weight` of model `gan`.

GAN-trained SR mixes realistic details with artifacts; both differ from the ground truth, but artifacts
are where the residual is locally noisy and where the generator is less stable than its exponential
moving average. The artifact map of the residual R = sum over channels of |HR - SR| is
- pixel-level: the variance of R in the 7x7 window around each pixel (reflect-padded at the borders),
- times patch-level: the variance of the whole R of the image, to the power 1/5 (the paper's a = 5),
- set to 0 where the EMA generator's residual is larger than SR's (there SR is the better of the two, a
  detail rather than an artifact);
and the loss is L1(map * SR, map * HR). Variances are sample variances (n - 1), as in the authors'
release. The map weights the pixels and is a constant for the gradient (like a loss weight), computed in
float32 without autograd.
"""
import torch
import torch.nn.functional as F

WINDOW = 7    # the local window of the pixel-level variance
POWER = 1 / 5  # the patch-level variance's exponent, 1/a with the paper's a = 5


def artifact_map(sr: torch.Tensor, sr_ema: torch.Tensor, hr: torch.Tensor, window: int = WINDOW) -> torch.Tensor:
    """(N, 1, H, W) artifact map of SR (N, C, H, W) against HR, refined with the EMA generator's output."""
    with torch.no_grad(), torch.autocast(sr.device.type, enabled=False):
        hr = hr.float()
        residual = (hr - sr.float()).abs().sum(1, keepdim=True)
        residual_ema = (hr - sr_ema.float()).abs().sum(1, keepdim=True)
        pad = window // 2
        padded = F.pad(residual, (pad, pad, pad, pad), mode='reflect')
        mean = F.avg_pool2d(padded, window, stride=1)
        mean_sq = F.avg_pool2d(padded * padded, window, stride=1)
        n = window * window
        local = ((mean_sq - mean * mean) * (n / (n - 1))).clamp(min=0)  # E[x^2] - E[x]^2 can round below 0
        patch = residual.flatten(1).var(dim=1, correction=1).view(-1, 1, 1, 1) ** POWER
        return torch.where(residual_ema > residual, torch.zeros_like(local), local * patch)


def ldl_loss(sr: torch.Tensor, sr_ema: torch.Tensor, hr: torch.Tensor) -> torch.Tensor:
    """mean |M * SR - M * HR| with M = artifact_map(SR, SR_EMA, HR), broadcast over the channels."""
    m = artifact_map(sr, sr_ema, hr).to(sr.dtype)
    return F.l1_loss(m * sr, m * hr.to(sr.dtype)).float()
