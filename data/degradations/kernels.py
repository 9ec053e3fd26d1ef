"""Blur kernels for synthetic degradations (BSRGAN, SRMD, USRNet, Real-ESRGAN): pure functions of their arguments.

Every random kernel is drawn from an explicit `np.random.Generator`, never from the global numpy or
`random` state, so a sample seeded by its key gets the same kernel in any worker or process. Every
kernel is a float64 array that sums to 1 (the low-pass "sinc" kernel has negative lobes; the others
are non-negative).

Conventions. A kernel is a size×size grid indexed [row, column]; its anchor (the tap that lands on
the output pixel) is [size // 2, size // 2], as for OpenCV's default anchor and scipy.ndimage. The
kernels are meant for a true convolution (`data.degradations.bsrgan.convolve`): symmetric kernels do not
care, but a shifted or motion kernel applied by correlation (plain `cv2.filter2D`) is mirrored.
Covariances are given in (x, y) = (column, row) coordinates and an angle θ turns the first principal
axis from the x axis towards the y axis (the way SRMD and BSRGAN parameterise anisotropic gaussians).
"""
import math
from typing import Optional, Sequence, Tuple

import numpy as np


def covariance(theta: float, lambda1: float, lambda2: float) -> np.ndarray:
    """2×2 covariance R(θ) diag(λ1, λ2) R(θ)ᵀ: λ1, λ2 are the variances along the principal axes."""
    if lambda1 <= 0 or lambda2 <= 0:
        raise ValueError(f'eigenvalues must be > 0, got {lambda1}, {lambda2}')
    c, s = math.cos(theta), math.sin(theta)
    rot = np.array([[c, -s], [s, c]])
    return rot @ np.diag([float(lambda1), float(lambda2)]) @ rot.T


def gaussian_kernel(size: int, cov: np.ndarray, mean: Optional[Tuple[float, float]] = None) -> np.ndarray:
    """size×size samples of the gaussian density N(mean, cov), normalised to sum 1.

    `mean` is (x, y) on the grid; the default is the geometric centre ((size-1)/2, (size-1)/2), which
    for odd sizes is the anchor. Sampling the density (rather than integrating it over pixels) is
    what SRMD, USRNet and BSRGAN do.
    """
    return _normalised(np.exp(-0.5 * _mahalanobis(size, cov, mean)))


def generalized_gaussian_kernel(size: int, cov: np.ndarray, beta: float) -> np.ndarray:
    """Centred generalized gaussian exp(-½ (dᵀΣ⁻¹d)^β).

    β < 1 gives heavier tails than a gaussian, β > 1 a flatter top with a sharper fall-off; β = 1 is
    `gaussian_kernel` (Wang et al., Real-ESRGAN, ICCVW 2021, eq. 2)."""
    if beta <= 0:
        raise ValueError(f'beta must be > 0, got {beta}')
    return _normalised(np.exp(-0.5 * _mahalanobis(size, cov) ** beta))


def plateau_kernel(size: int, cov: np.ndarray, beta: float) -> np.ndarray:
    """Centred plateau-shaped kernel 1 / (1 + (dᵀΣ⁻¹d)^β) (Real-ESRGAN): flat near the centre, slow tails."""
    if beta <= 0:
        raise ValueError(f'beta must be > 0, got {beta}')
    return _normalised(1.0 / (1.0 + _mahalanobis(size, cov) ** beta))


def bessel_j1(x: np.ndarray) -> np.ndarray:
    """The Bessel function of the first kind of order 1, J1(x) = (1/2π)∫₀^{2π} cos(τ - x sin τ) dτ.

    The integrand is smooth and 2π-periodic, so the trapezoid rule converges geometrically once the
    number of nodes exceeds |x| by a margin; 64 + 2|x| nodes reach double precision (tests compare
    with scipy.special.j1). numpy has no Bessel functions and scipy is not a dependency."""
    x = np.asarray(x, dtype=np.float64)
    n = 64 + 2 * int(np.ceil(np.abs(x).max(initial=0.0)))
    tau = 2 * np.pi * np.arange(n) / n
    return np.cos(tau - x[..., None] * np.sin(tau)).mean(axis=-1)


def circular_lowpass_kernel(size: int, cutoff: float) -> np.ndarray:
    """The ideal 2-D low-pass filter with cutoff frequency `cutoff` (radians per pixel, in (0, π]),
    sampled on a size×size grid: the "sinc" kernel of Real-ESRGAN, whose ringing and overshoot mimic
    those of sharpened or band-limited images. Its impulse response is the Airy pattern
    ω J1(ω r) / (2π r), with the limit ω² / (4π) at r = 0."""
    _check_size(size)
    if not 0 < cutoff <= math.pi:
        raise ValueError(f'cutoff must be in (0, pi], got {cutoff}')
    centre = (size - 1) / 2.0
    y, x = np.mgrid[0:size, 0:size].astype(np.float64)
    r = np.hypot(x - centre, y - centre)
    safe = np.where(r > 0, r, 1.0)
    k = np.where(r > 0, cutoff * bessel_j1(cutoff * safe) / (2 * math.pi * safe), cutoff ** 2 / (4 * math.pi))
    return _normalised_signed(k)


def pad_kernel(kernel: np.ndarray, size: int) -> np.ndarray:
    """An odd square kernel centred in a size×size grid of zeros (the same filter, a fixed shape)."""
    k = kernel.shape[0]
    if kernel.shape != (k, k) or k % 2 == 0 or size % 2 == 0 or size < k:
        raise ValueError(f'cannot centre a {kernel.shape} kernel in {size}x{size}')
    p = (size - k) // 2
    return np.pad(kernel, p)


def pulse_kernel(size: int) -> np.ndarray:
    """The identity filter: 1 at the anchor of an odd size×size grid."""
    k = np.zeros((size, size))
    k[size // 2, size // 2] = 1.0
    return k


def _mahalanobis(size: int, cov: np.ndarray, mean: Optional[Tuple[float, float]] = None) -> np.ndarray:
    """dᵀ Σ⁻¹ d on the size×size grid, d the (x, y) offset from `mean` (default: the grid centre)."""
    _check_size(size)
    cov = np.asarray(cov, dtype=np.float64)
    if cov.shape != (2, 2):
        raise ValueError(f'covariance must be 2x2, got shape {cov.shape}')
    centre = (size - 1) / 2.0
    mx, my = (centre, centre) if mean is None else (float(mean[0]), float(mean[1]))
    y, x = np.mgrid[0:size, 0:size].astype(np.float64)
    d = np.stack([x - mx, y - my], axis=-1)
    return np.einsum('...i,ij,...j->...', d, np.linalg.inv(cov), d)


def isotropic_gaussian(size: int, sigma: float) -> np.ndarray:
    """Centred isotropic gaussian of standard deviation `sigma` (pixels)."""
    if sigma <= 0:
        raise ValueError(f'sigma must be > 0, got {sigma}')
    return gaussian_kernel(size, np.eye(2) * float(sigma) ** 2)


def anisotropic_gaussian(size: int, theta: float, lambda1: float, lambda2: float) -> np.ndarray:
    """Centred anisotropic gaussian with principal variances λ1, λ2 and orientation θ (radians)."""
    return gaussian_kernel(size, covariance(theta, lambda1, lambda2))


def random_isotropic_gaussian(rng: np.random.Generator, size: int,
                              sigma_range: Tuple[float, float]) -> np.ndarray:
    """Isotropic gaussian with sigma uniform in `sigma_range`."""
    return isotropic_gaussian(size, rng.uniform(*sigma_range))


def random_anisotropic_gaussian(rng: np.random.Generator, size: int,
                                eigenvalue_range: Tuple[float, float]) -> np.ndarray:
    """Anisotropic gaussian with θ uniform in [0, π) and both variances uniform in `eigenvalue_range`."""
    theta = rng.uniform(0.0, math.pi)
    lambda1, lambda2 = rng.uniform(*eigenvalue_range, size=2)
    return anisotropic_gaussian(size, theta, lambda1, lambda2)


def kernel_sizes(low: int, high: int) -> Sequence[int]:
    """The odd sizes low, low+2, ..., high (BSRGAN draws its kernel size uniformly from these)."""
    return tuple(range(low | 1, high + 1, 2))


def decimation_offset(sf: int) -> float:
    """How far (pixels) a kernel's mean moves from the anchor so that keeping pixels 0, sf, 2sf, ...
    samples the centre of each sf×sf block, where bicubic and area downscaling put the LR pixel."""
    return 0.5 * (sf - 1)


def shifted_gaussian(size: int, cov: np.ndarray, sf: int) -> np.ndarray:
    """Gaussian with its mean at anchor - (sf-1)/2 in x and y.

    Convolved with it, output pixel p is centred on input position p + (sf-1)/2, so the decimated
    image `blurred[0::sf, 0::sf]` is aligned with the HR grid like a bicubic downscale.
    """
    _check_size(size)
    mean = size // 2 - decimation_offset(sf)
    return gaussian_kernel(size, cov, (mean, mean))


def shifted_anisotropic_gaussian(rng: np.random.Generator, sf: int, size: int = 15, min_var: float = 0.6,
                                 max_var: float = 10.0, noise_level: float = 0.0) -> np.ndarray:
    """USRNet's training kernel for scale `sf`: random anisotropic gaussian shifted for decimation.

    Variances uniform in [min_var, max_var], θ uniform in [0, π); with `noise_level` > 0 each tap is
    multiplied by (1 + u), u uniform in [-noise_level, noise_level], before normalisation.
    """
    if not 0 <= noise_level < 1:
        raise ValueError(f'noise_level must be in [0, 1), got {noise_level}')
    theta = rng.uniform(0.0, math.pi)
    lambda1, lambda2 = rng.uniform(min_var, max_var, size=2)
    k = shifted_gaussian(size, covariance(theta, lambda1, lambda2), sf)
    if noise_level > 0:
        k = k * (1.0 + rng.uniform(-noise_level, noise_level, size=k.shape))
    return _normalised(k)


def motion_kernel(rng: np.random.Generator, size: int = 21, length_range: Tuple[float, float] = (0.3, 1.0),
                  n_steps: int = 64, curvature: float = 0.12, shake_prob: float = 0.05) -> np.ndarray:
    """Random camera-shake blur: a random trajectory rasterised with bilinear weights, centred.

    The trajectory is a walk of `n_steps` equal steps whose direction starts uniform in [0, 2π) and
    turns by gaussian increments (std `curvature` radians per step), with an occasional sharp turn
    (probability `shake_prob` per step, uniform angle in ±π/2) for the jerks of a shaking hand. It is
    scaled to a length of `length_range` × (size - 1) pixels (shrunk if needed so it fits) and its
    mean moved to the grid centre; bilinear splatting keeps the mean, so the kernel's centroid is
    exactly ((size-1)/2, (size-1)/2), the anchor. `size` must be odd.
    """
    _check_size(size)
    if size % 2 == 0 or size < 3:
        raise ValueError(f'a motion kernel needs an odd size >= 3, got {size}')
    turns = rng.normal(0.0, curvature, n_steps)
    shakes = rng.random(n_steps) < shake_prob
    turns[shakes] += rng.uniform(-math.pi / 2, math.pi / 2, int(shakes.sum()))
    angles = rng.uniform(0.0, 2 * math.pi) + np.cumsum(turns)
    steps = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    points = np.concatenate([np.zeros((1, 2)), np.cumsum(steps, axis=0)])
    points *= rng.uniform(*length_range) * (size - 1) / n_steps
    points -= points.mean(axis=0)
    half = (size - 1) / 2.0
    reach = np.abs(points).max()
    if reach > half:
        points *= half / reach
    return rasterise(points + half, size)


def rasterise(points: np.ndarray, size: int) -> np.ndarray:
    """Equal-weight (x, y) points in [0, size-1]² splatted bilinearly on a size×size grid, sum 1."""
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 2 or len(points) == 0:
        raise ValueError(f'points must be an (n, 2) array, got shape {points.shape}')
    if points.min() < 0 or points.max() > size - 1:
        raise ValueError(f'points must lie in [0, {size - 1}]')
    k = np.zeros((size, size), dtype=np.float64)
    x0 = np.minimum(np.floor(points[:, 0]).astype(np.int64), size - 2)
    y0 = np.minimum(np.floor(points[:, 1]).astype(np.int64), size - 2)
    fx, fy = points[:, 0] - x0, points[:, 1] - y0
    for dy, wy in ((0, 1 - fy), (1, fy)):
        for dx, wx in ((0, 1 - fx), (1, fx)):
            np.add.at(k, (y0 + dy, x0 + dx), wy * wx)
    return _normalised(k)


def centroid(kernel: np.ndarray) -> Tuple[float, float]:
    """(x, y) centre of mass of a kernel on its grid; its offset from the anchor is how far a
    convolution with it moves the image content."""
    y, x = np.mgrid[0:kernel.shape[0], 0:kernel.shape[1]]
    total = kernel.sum()
    return float((kernel * x).sum() / total), float((kernel * y).sum() / total)


def _check_size(size: int) -> None:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ValueError(f'kernel size must be an integer >= 1, got {size!r}')


def _normalised_signed(k: np.ndarray) -> np.ndarray:
    """Sum 1 for a kernel with negative lobes (the low-pass filter): only the total must be positive."""
    total = k.sum()
    if not np.isfinite(total) or total <= 0:
        raise ValueError('kernel sums to <= 0')
    return (k / total).astype(np.float64)


def _normalised(k: np.ndarray) -> np.ndarray:
    total = k.sum()
    if not np.isfinite(total) or total <= 0:
        raise ValueError('kernel has no positive mass (too narrow for its grid?)')
    return (k / total).astype(np.float64)

