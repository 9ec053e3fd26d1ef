"""Frequency-domain losses: `G_lossfn_type` or `G_extra_losses` members `fft` and `fft_l1`.

`fft_l1` is the plain frequency L1 loss that SAFMN (ICCV 2023) and FFTformer (CVPR 2023) train with
(their "FFTLoss", weights 0.05 and 0.1 beside L1): the mean absolute difference of the real and of the
imaginary parts of the two images' 2-D real DFTs (`torch.fft.rfft2`, unnormalised, per image and
channel). Computed in float32 also under AMP.

`fft` is the focal frequency loss (Jiang, Dai, Wu, Loy, "Focal Frequency Loss for Image Reconstruction and
Synthesis", ICCV 2021).

Both images go through a 2-D DFT (per image, channel and patch); the loss is the mean over frequencies of
w(u, v) * |F_pred(u, v) - F_target(u, v)|^2, where the spectrum weight w = |F_pred - F_target|^alpha
(optionally log(1 + .)) is scaled into [0, 1] by its maximum and treated as a constant ("gradient
locked"), so training focuses on the frequencies that are hardest to synthesise. The DFT is
orthonormal, as in the authors' implementation: by Parseval, `fft_alpha: 0` (w = 1) is then exactly the
pixel mean squared error, the plain frequency L2 loss. Computed in float32 also under AMP: half-precision
spectra lose the small high-frequency differences the loss is about.
"""
import torch
from torch import nn

from losses.registry import LOSSES
from utils.options import Key, at_least, non_negative


@LOSSES.register('fft', options={
    'fft_alpha': Key(1.0, (int, float), non_negative, 'exponent of the spectrum weight |F_pred - F_target|^alpha (0: '
                                                      'frequency L2)'),
    'fft_patch_factor': Key(1, (int,), at_least(1, 'the image is cut into patch_factor x patch_factor patches'),
                            'cut the image into patch_factor x patch_factor patches'),
    'fft_ave_spectrum': Key(False, (bool,), help='compare the batch\'s average spectra'),
    'fft_log_matrix': Key(False, (bool,), help='weight by log(1 + |difference|^alpha)'),
    'fft_batch_matrix': Key(False, (bool,), help='scale the weights by the batch\'s maximum (else per image, patch '
                                                 'and channel)')})
class FocalFrequencyLoss(nn.Module):
    """The focal frequency loss with the paper's hyper-parameters: `alpha` (the focusing exponent),
    `patch_factor` (the DFT of each of patch_factor^2 non-overlapping patches), `ave_spectrum` (compare
    the mini-batch's mean spectra), `log_matrix` (w = log(1 + |dF|^alpha)), `batch_matrix` (scale w by
    the maximum over the whole batch instead of per image, patch and channel)."""

    def __init__(self, fft_alpha: float = 1.0, fft_patch_factor: int = 1, fft_ave_spectrum: bool = False,
                 fft_log_matrix: bool = False, fft_batch_matrix: bool = False):
        super().__init__()
        self.alpha = float(fft_alpha)
        self.patch_factor = int(fft_patch_factor)
        self.ave_spectrum = fft_ave_spectrum
        self.log_matrix = fft_log_matrix
        self.batch_matrix = fft_batch_matrix

    def spectrum(self, x: torch.Tensor) -> torch.Tensor:
        """Orthonormal 2-D DFT of each patch: (..., C, H, W) -> (..., P, C, H/p, W/p) complex, P = p^2."""
        p = self.patch_factor
        h, w = x.shape[-2:]
        if h % p or w % p:
            raise ValueError(f'fft_patch_factor {p} must divide the image size, got {h}x{w}')
        # (..., C, p, H/p, p, W/p) -> (..., p * p, C, H/p, W/p): patch rows and columns in front
        x = x.unflatten(-1, (p, w // p)).unflatten(-3, (p, h // p))
        lead = x.dim() - 5
        x = x.permute(*range(lead), lead + 1, lead + 3, lead, lead + 2, lead + 4).flatten(lead, lead + 1)
        return torch.fft.fft2(x, norm='ortho')

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            fx, fy = self.spectrum(x.float()), self.spectrum(y.float())
            if self.ave_spectrum:
                fx, fy = fx.mean(0, keepdim=True), fy.mean(0, keepdim=True)
            dist = (fx - fy).abs().square()  # |dF|^2 = d(real)^2 + d(imag)^2
            with torch.no_grad():
                weight = dist.sqrt().pow(self.alpha)
                if self.log_matrix:
                    weight = torch.log1p(weight)
                peak = weight.amax() if self.batch_matrix else weight.amax(dim=(-2, -1), keepdim=True)
                # identical spectra (0 / 0) get weight 0: there is nothing to focus on
                weight = torch.nan_to_num(weight / peak, nan=0.0).clamp(0.0, 1.0)
            return (weight * dist).mean()


@LOSSES.register('fft_l1')
class FrequencyL1Loss(nn.Module):
    """mean(|Re(F_pred - F_target)|, |Im(F_pred - F_target)|) over the rfft2 half-spectra (see the module
    docstring): SAFMN's and FFTformer's FFT loss."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            diff = torch.fft.rfft2(x.float()) - torch.fft.rfft2(y.float())
            return torch.view_as_real(diff).abs().mean()
