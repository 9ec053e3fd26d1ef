"""USRNet (Zhang et al., "Deep Unfolding Network for Image Super-Resolution", CVPR 2020).

Half-quadratic splitting of  min_x 1/(2 sigma^2) ||y - (x * k)|s||^2 + lambda Phi(x)  unfolded into
`n_iter` alternations of
  - a data step D: x = argmin ||y - (z * k)|s||^2 + alpha ||x - z||^2, in closed form in the Fourier
    domain (Zhao et al., "Fast single image super-resolution using a new analytical solution", 2016),
  - a prior step P: a ResUNet (DRUNet's network without biases) denoising x given a beta map,
with alpha_i, beta_i for every iteration predicted from (sigma, sf) by the hyper-parameter module H.

Degradation convention (KAIR's USRNet data): `*` is circular convolution with k centred at
(kh // 2, kw // 2), `|s` keeps every sf-th pixel starting at (0, 0). Attribute names (`p`, `h.mlp`)
follow KAIR so model-zoo checkpoints load strictly.
"""
from typing import List, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from models.networks.drunet import ResUNet
from models.registry import NETWORKS
from utils.errors import UserError


def p2o(psf: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Optical transfer function (MATLAB's psf2otf): the 2-D FFT of `psf` (..., kh, kw) zero-padded to
    `shape` and circularly shifted so that its centre (kh // 2, kw // 2) sits at the origin.

    Unlike psf2otf, imaginary parts at round-off level are kept (KAIR zeroes those below about
    1e-12, far under float32 resolution).
    """
    kh, kw = psf.shape[-2:]
    otf = F.pad(psf, (0, shape[-1] - kw, 0, shape[-2] - kh))
    otf = torch.roll(otf, shifts=(-(kh // 2), -(kw // 2)), dims=(-2, -1))
    return torch.fft.fft2(otf)


def upsample(x: torch.Tensor, sf: int) -> torch.Tensor:
    """S^T, the adjoint of `downsample`: each pixel at the top-left of an sf x sf block of zeros."""
    z = x.new_zeros(*x.shape[:-2], x.shape[-2] * sf, x.shape[-1] * sf)
    z[..., ::sf, ::sf] = x
    return z


def downsample(x: torch.Tensor, sf: int) -> torch.Tensor:
    """S: every sf-th pixel from (0, 0), the decimation `upsample` is the adjoint of."""
    return x[..., ::sf, ::sf]


def splits(a: torch.Tensor, sf: int) -> torch.Tensor:
    """(..., H, W) -> (..., H/sf, W/sf, sf*sf): the sf x sf distinct blocks of a spectrum, stacked last.

    The spectrum of `downsample(x)` is the mean of the blocks of the spectrum of x (aliasing), which
    is what makes the data step's inverse cheap. Blocks are ordered as KAIR orders them (column-major).
    """
    *lead, h, w = a.shape
    n = len(lead)
    b = a.reshape(*lead, sf, h // sf, sf, w // sf).permute(*range(n), n + 1, n + 3, n + 2, n)
    return b.reshape(*lead, h // sf, w // sf, sf * sf)


class Spectra:
    """What every data step reuses for one (y, k, sf): FB = F(k), its conjugate, |FB|^2, conj(FB) F(S^T y)."""

    def __init__(self, y: torch.Tensor, k: torch.Tensor, sf: int):
        self.sf = sf
        self.FB = p2o(k, (y.shape[-2] * sf, y.shape[-1] * sf))
        self.FBC = torch.conj(self.FB)
        self.F2B = self.FB.real ** 2 + self.FB.imag ** 2
        self.FBFy = self.FBC * torch.fft.fft2(upsample(y, sf))


class DataStep(nn.Module):
    """D: argmin_x ||y - (x * k)|s||^2 + alpha ||x - z||^2 for every image of the batch, in closed form.

    With d = conj(FB) F(S^T y) + alpha F(z), the solution is
    F(x) = (d - conj(FB) . tile(mean_blocks(FB d) / (mean_blocks(|FB|^2) + alpha))) / alpha.
    """

    def forward(self, z: torch.Tensor, s: Spectra, alpha: torch.Tensor) -> torch.Tensor:
        FR = s.FBFy + torch.fft.fft2(alpha * z)
        FBR = splits(s.FB * FR, s.sf).mean(-1)
        invW = splits(s.F2B, s.sf).mean(-1)
        FX = (FR - s.FBC * (FBR / (invW + alpha)).tile((s.sf, s.sf))) / alpha
        h, w = z.shape[-2:]
        return torch.fft.irfft2(FX[..., :w // 2 + 1], s=(h, w))


class HyPaNet(nn.Module):
    """H: (sigma, sf) -> the n_iter alphas, then the n_iter betas; positive, and alpha divides, so >= 1e-6."""

    def __init__(self, in_nc: int, out_nc: int, nc: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Conv2d(in_nc, nc, 1, 1, 0, bias=True), nn.ReLU(inplace=True),
                                 nn.Conv2d(nc, nc, 1, 1, 0, bias=True), nn.ReLU(inplace=True),
                                 nn.Conv2d(nc, out_nc, 1, 1, 0, bias=True), nn.Softplus())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x) + 1e-6


@NETWORKS.register('usrnet')
class USRNet(nn.Module):
    """Non-blind super-resolution of y by `sf` for blur kernel k and noise level sigma: forward(y, k, sf, sigma).

    y: (N, C, h, w); k: (N or 1, 1, kh, kw), shared by the channels; sigma: (N, 1, 1, 1) on the
    [0, 1] image scale; the result is (N, C, h*sf, w*sf). The prior sees the image plus a beta map,
    so in_nc = out_nc + 1 = C + 1.
    """

    def __init__(self, n_iter: int = 8, h_nc: int = 64, in_nc: int = 4, out_nc: int = 3,
                 nc: List[int] = [64, 128, 256, 512], nb: int = 2, act_mode: str = 'R',
                 downsample_mode: str = 'strideconv', upsample_mode: str = 'convtranspose'):
        super().__init__()
        if n_iter < 1:
            raise UserError(f'netG.n_iter: usrnet needs at least 1 iteration, got {n_iter}')
        if in_nc != out_nc + 1:
            raise UserError(f'netG.in_nc: usrnet\'s prior takes the image plus a beta map, so in_nc must be '
                            f'out_nc + 1 = {out_nc + 1}, got {in_nc}')
        self.n_iter = n_iter
        self.d = DataStep()
        self.p = ResUNet(in_nc, out_nc, nc, nb, act_mode, downsample_mode, upsample_mode, bias=False)
        self.h = HyPaNet(2, 2 * n_iter, h_nc)

    def hyper_parameters(self, sigma: torch.Tensor, sf: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """(alphas, betas), each (N, n_iter, 1, 1)."""
        ab = self.h(torch.cat((sigma, torch.full_like(sigma, float(sf))), dim=1))
        return ab[:, :self.n_iter], ab[:, self.n_iter:]

    def forward(self, x: torch.Tensor, k: torch.Tensor, sf: Union[int, torch.Tensor],
                sigma: torch.Tensor) -> torch.Tensor:
        sf = int(sf)
        spectra = Spectra(x, k, sf)
        alphas, betas = self.hyper_parameters(sigma, sf)
        x = F.interpolate(x, scale_factor=sf, mode='nearest')  # z_0 (KAIR: nearest, not the paper's bicubic)
        for i in range(self.n_iter):
            x = self.d(x, spectra, alphas[:, i:i + 1])
            x = self.p(torch.cat((x, betas[:, i:i + 1].expand(-1, -1, *x.shape[-2:])), dim=1))
        return x
