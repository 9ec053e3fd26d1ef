"""NIQE (Mittal, Soundararajan, Bovik, "Making a 'Completely Blind' Image Quality Analyzer", IEEE SPL 2013):
a no-reference naturalness score, lower is better; numerically the authors' MATLAB code, as BasicSR's.

The frame's luma (`niqe_convert_to`: BT.601 Y as BasicSR, or "gray") is rounded to integers, cropped
(`niqe_crop_border`) and cut to whole 96x96 blocks. At two scales (the image, then its MATLAB-bicubic
half) it is normalised to MSCN coefficients (local mean and deviation under a 7x7 Gaussian, sigma 7/6,
replicated borders: (I - mu) / (sigma + 1)); per block, asymmetric generalised Gaussian fits of the
coefficients and of their products with the four neighbours (right, below, two diagonals; circular
within the block) give 18 features, 36 over both scales. The multivariate Gaussian of the frame's
block features (NaN-free blocks for the covariance) is compared with the pristine model's:
NIQE = sqrt((mu_p - mu)^T pinv((S_p + S) / 2) (mu_p - mu)).

The pristine model is BasicSR's `niqe_pris_params.npz` (Apache-2.0; the authors' MATLAB
modelparameters.mat as arrays), read from `niqe_params_path` (null: utils/weights.py's default path;
"random": a random model for smoke runs and tests). Written here rather than using a library: BasicSR
and pyiqa (non-commercial licence) pull in large dependency trees, scikit-video's NIQE no longer runs
on current numpy/scipy. It runs on the CPU (numpy and OpenCV, a fraction of a second per frame), all
blocks of a scale at once.
"""
import math
import warnings
from typing import Optional, Tuple

import cv2
import numpy as np

from metrics.fidelity import rgb2y
from metrics.imagenet import RANDOM, check_digest, warn_random
from metrics.registry import METRICS
from utils.options.foreign import BASICSR, REDUX, Foreign, Only
from utils.errors import UserError
from utils.image import imresize_bicubic
from utils.options import Key, non_negative, one_of
from utils.weights import WEIGHTS, weights_path

BLOCK = 96
FEATURES = 36  # 18 per scale
SHIFTS = ((0, 1), (1, 0), (1, 1), (1, -1))  # neighbour products: horizontal, vertical, two diagonals
_ALPHAS = np.arange(0.2, 10.001, 0.001)  # the AGGD shape grid of the MATLAB code (0.2 .. 10, step 0.001)
_GAMMA = np.vectorize(math.gamma, otypes=[np.float64])
# r(alpha) = Gamma(2/a)^2 / (Gamma(1/a) Gamma(3/a)), the moment ratio the shape is read from
_R = _GAMMA(2 / _ALPHAS) ** 2 / (_GAMMA(1 / _ALPHAS) * _GAMMA(3 / _ALPHAS))


def gaussian_window(size: int = 7, sigma: float = 7 / 6) -> np.ndarray:
    """MATLAB's fspecial('gaussian', size, sigma): sampled, normalised to sum 1."""
    r = np.arange(size, dtype=np.float64) - (size - 1) / 2
    w = np.exp(-(r[:, None] ** 2 + r[None, :] ** 2) / (2 * sigma ** 2))
    return w / w.sum()


def aggd_fit(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of `x` (blocks x samples): the asymmetric generalised Gaussian's shape alpha and left/right
    scales, by moment matching on the grid (NaN where a side has no samples, as in MATLAB)."""
    with np.errstate(divide='ignore', invalid='ignore'):
        sq = x * x
        neg, pos = x < 0, x > 0
        left = np.sqrt((sq * neg).sum(axis=1) / neg.sum(axis=1))
        right = np.sqrt((sq * pos).sum(axis=1) / pos.sum(axis=1))
        g = left / right
        r_hat = np.abs(x).mean(axis=1) ** 2 / sq.mean(axis=1)
        r_norm = r_hat * (g ** 3 + 1) * (g + 1) / (g ** 2 + 1) ** 2
        # the first grid point on NaN rows, as MATLAB's min (and numpy's argmin) give
        alpha = _ALPHAS[np.argmin((_R[None, :] - r_norm[:, None]) ** 2, axis=1)]
        ratio = np.sqrt(_GAMMA(1 / alpha) / _GAMMA(3 / alpha))
    return alpha, left * ratio, right * ratio


def block_features(blocks: np.ndarray) -> np.ndarray:
    """The 18 features of each MSCN block (n x b x b -> n x 18)."""
    n = blocks.shape[0]
    alpha, bl, br = aggd_fit(blocks.reshape(n, -1))
    feats = [alpha, (bl + br) / 2]
    for shift in SHIFTS:
        products = blocks * np.roll(blocks, shift, axis=(1, 2))
        alpha, bl, br = aggd_fit(products.reshape(n, -1))
        with np.errstate(invalid='ignore'):
            mean = (br - bl) * _GAMMA(2 / alpha) / _GAMMA(1 / alpha)
        feats += [alpha, mean, bl, br]
    return np.stack(feats, axis=1)


def mscn(img: np.ndarray, window: np.ndarray) -> np.ndarray:
    """Mean-subtracted contrast-normalised coefficients: (I - mu) / (sigma + 1), replicated borders."""
    mu = cv2.filter2D(img, cv2.CV_64F, window, borderType=cv2.BORDER_REPLICATE)
    var = cv2.filter2D(img * img, cv2.CV_64F, window, borderType=cv2.BORDER_REPLICATE) - mu * mu
    return (img - mu) / (np.sqrt(np.abs(var)) + 1)


def niqe(luma: np.ndarray, mu_pris: np.ndarray, cov_pris: np.ndarray, window: np.ndarray) -> float:
    """NIQE of a float HxW luma image in [0, 255] (already rounded and cropped)."""
    h, w = luma.shape
    nh, nw = h // BLOCK, w // BLOCK
    if nh * nw < 2:
        raise UserError(f'cannot score a {h}x{w} image with NIQE: it needs at least two {BLOCK}x{BLOCK} blocks '
                        f'(e.g. {BLOCK}x{2 * BLOCK} pixels) after cropping the border')
    img = luma[:nh * BLOCK, :nw * BLOCK].astype(np.float64)
    per_scale = []
    for scale in (1, 2):
        b = BLOCK // scale
        blocks = mscn(img, window).reshape(nh, b, nw, b).transpose(0, 2, 1, 3).reshape(-1, b, b)
        per_scale.append(block_features(blocks))
        if scale == 1:
            img = imresize_bicubic(img / 255.0, 0.5) * 255.0
    feats = np.concatenate(per_scale, axis=1)
    with np.errstate(invalid='ignore', divide='ignore'), warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)  # a flat frame's features are NaN: so is its score
        mu = np.nanmean(feats, axis=0)
        cov = np.cov(feats[~np.isnan(feats).any(axis=1)], rowvar=False)
        d = mu_pris - mu
        return float(np.sqrt(d @ np.linalg.pinv((cov_pris + cov) / 2) @ d))


def pristine(given: Optional[str], where: str) -> Tuple[np.ndarray, np.ndarray]:
    """The pristine model (mean of 36, covariance 36x36) from `given` (null: default path; "random")."""
    if given == RANDOM:
        warn_random(where, WEIGHTS['niqe'].what)
        rng = np.random.default_rng(0)
        a = rng.standard_normal((FEATURES, FEATURES))
        return rng.standard_normal(FEATURES), a @ a.T / FEATURES + np.eye(FEATURES)  # symmetric positive definite
    path = weights_path('niqe', given, where)
    check_digest('niqe', path, where)
    try:
        with np.load(path) as f:
            mu, cov = np.asarray(f['mu_pris_param'], np.float64).ravel(), np.asarray(f['cov_pris_param'], np.float64)
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f'{where}: {path} is not {WEIGHTS["niqe"].what} (arrays mu_pris_param, cov_pris_param): '
                        f'{str(e)[:200]}') from None
    if mu.shape != (FEATURES,) or cov.shape != (FEATURES, FEATURES):
        raise UserError(f'{where}: {path}: expected mu_pris_param of {FEATURES} and cov_pris_param of '
                        f'{FEATURES}x{FEATURES} values, got {mu.shape} and {cov.shape}')
    return mu, cov


@METRICS.register('niqe', foreign=[Foreign('calculate_niqe', t, keys={'crop_border': 'niqe_crop_border', 'convert_to': 'niqe_convert_to'},
                                           unneeded={'input_order': 'HWC', 'num_thread': Only((1, 2, 4, 8, 16, 32))}) for t in (BASICSR, REDUX)])
class NIQE:
    """NIQE of one frame (`val.niqe_crop_border`, `val.niqe_convert_to`, `val.niqe_params_path`)."""

    higher_is_better = False
    needs_reference = False
    OPTIONS = {
        'niqe_crop_border': Key(0, (int,), non_negative, 'pixels cropped at each side (BasicSR\'s crop_border)'),
        'niqe_convert_to': Key('y', (str,), one_of('y', 'gray'), 'score the BT.601 luma (BasicSR) or gray'),
        'niqe_params_path': Key(None, (str, type(None)), help='NIQE model parameters (null: the default path)'),
    }

    def __init__(self, device: object, niqe_crop_border: int, niqe_convert_to: str, niqe_params_path: Optional[str]):
        del device  # a CPU computation: numpy and OpenCV
        self.crop, self.convert_to = niqe_crop_border, niqe_convert_to
        self.mu, self.cov = pristine(niqe_params_path, 'val.niqe_params_path')
        self.window = gaussian_window()

    def luma(self, img: np.ndarray) -> np.ndarray:
        """The rounded, cropped luma NIQE scores (float64 HxW in [0, 255])."""
        a = np.asarray(img, dtype=np.float64)
        if a.ndim == 3 and a.shape[2] == 3:
            a = rgb2y(a) if self.convert_to == 'y' else a @ np.array([0.299, 0.587, 0.114])
        elif a.ndim == 3 and a.shape[2] == 1:
            a = a[:, :, 0]
        elif a.ndim != 2:
            raise ValueError(f'expected an HxWx3 or HxW frame, got shape {a.shape}')
        c = self.crop
        if c:
            a = a[c:-c, c:-c]
        return np.round(a)  # the MATLAB code scores integer luma

    def __call__(self, restored: np.ndarray, reference: Optional[np.ndarray] = None) -> float:
        return niqe(self.luma(restored), self.mu, self.cov, self.window)
