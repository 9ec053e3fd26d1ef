"""PSNR / SSIM on uint8 images, numerically compatible with KAIR and BasicSR, and on 16-bit images.

Matching their numbers matters because results are compared with published tables. Inputs are
HWC (or HW) arrays in [0, 255]; `test_y_channel` evaluates on the BT.601 luma of RGB images. uint16
images (16-bit data) are scored on their own range [0, 65535]: the peak of PSNR, SSIM's constants
(K L)^2 and the luma's offset scale with it (`peak`; default: 65535 for a uint16 first image, else 255),
so the score of a 16-bit image is the score of its [0, 1] values, as for 8 bits, without rounding them
to 256 levels first.
"""
import math
from typing import Optional

import cv2
import numpy as np

from utils.errors import UserError

SSIM_WINDOW = 11  # the gaussian window: SSIM needs at least this many pixels per side


def metric_border(scale: int, given: Optional[int]) -> int:
    """Pixels cropped at each border before PSNR/SSIM: `given`, else KAIR's test-script convention
    for the task: the scale for super-resolution, none for restoration at scale 1 (denoising)."""
    if given is not None:
        return given
    return scale if scale > 1 else 0


def metric_round_y(scale: int, given: Optional[bool]) -> bool:
    """Whether Y is rounded to integers before PSNR/SSIM: `given`, else KAIR's convention for the task:
    its super-resolution test scripts score the rounded uint8 Y, everything else unrounded Y (as
    BasicSR and SwinIR's own test script do). The two differ by a few hundredths of a dB."""
    if given is not None:
        return given
    return scale > 1


_Y_WEIGHTS = np.array([65.481, 128.553, 24.966], dtype=np.float64)  # R, G, B (BT.601, studio swing)


def data_peak(img: np.ndarray) -> float:
    """The range an image's values are scored on: 65535 for uint16 (16-bit data), else 255."""
    return 65535.0 if np.asarray(img).dtype == np.uint16 else 255.0


def rgb2y(img: np.ndarray, peak: float = 255.0) -> np.ndarray:
    """BT.601 luma in [16, 235] (float64 HxW) of an RGB image in [0, 255]; in [16, 235] x peak / 255 for an
    image in [0, peak] (16-bit: x 257).

    Same formula as KAIR's `bgr2ycbcr(only_y=True)` / BasicSR's `to_y_channel`, with the channel
    order for RGB input; not rounded (as BasicSR's metric code and KAIR's test scripts).
    Single-channel input is returned as is (already luminance).
    """
    img = np.asarray(img, dtype=np.float64)
    if img.ndim == 3 and img.shape[2] == 1:
        return img[:, :, 0]
    if img.ndim == 2:
        return img
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f'rgb2y expects HxWx3, got shape {img.shape}')
    return img @ _Y_WEIGHTS / 255.0 + 16.0 * peak / 255.0


def _same_shape(img1: np.ndarray, img2: np.ndarray) -> None:
    if np.shape(img1) != np.shape(img2):
        raise ValueError(f'image shapes differ: {np.shape(img1)} vs {np.shape(img2)}')


def _prepare(img1: np.ndarray, img2: np.ndarray, crop_border: int, test_y_channel: bool, round_y: bool,
             peak: float = 255.0):
    _same_shape(img1, img2)
    size = _size(np.shape(img1))
    if test_y_channel:
        img1, img2 = rgb2y(img1, peak), rgb2y(img2, peak)
        if round_y:
            img1, img2 = np.round(img1), np.round(img2)
    img1 = np.asarray(img1, dtype=np.float64)
    img2 = np.asarray(img2, dtype=np.float64)
    if crop_border:
        img1 = img1[crop_border:-crop_border, crop_border:-crop_border]
        img2 = img2[crop_border:-crop_border, crop_border:-crop_border]
    if img1.size == 0:
        raise UserError(f'cannot score a {size} image: nothing is left after cropping the '
                        f'{crop_border}-pixel border')
    if img1.ndim == 2:
        img1, img2 = img1[:, :, None], img2[:, :, None]
    return img1, img2


def _size(shape) -> str:
    return f'{shape[0]}x{shape[1]}'


def calculate_psnr(img1: np.ndarray, img2: np.ndarray, crop_border: int = 0,
                   test_y_channel: bool = False, round_y: bool = False, peak: Optional[float] = None) -> float:
    """PSNR in dB with peak 255 (65535 for uint16 images, or `peak`); inf for identical images."""
    peak = data_peak(img1) if peak is None else float(peak)
    a, b = _prepare(img1, img2, crop_border, test_y_channel, round_y, peak)
    mse = float(np.mean((a - b) ** 2))
    if mse == 0:
        return float('inf')
    return 20.0 * math.log10(peak / math.sqrt(mse))


def _ssim_plane(a: np.ndarray, b: np.ndarray, peak: float = 255.0) -> float:
    c1 = (0.01 * peak) ** 2
    c2 = (0.03 * peak) ** 2
    kernel = cv2.getGaussianKernel(11, 1.5)
    window = np.outer(kernel, kernel.transpose())

    def filt(x: np.ndarray) -> np.ndarray:
        return cv2.filter2D(x, -1, window)[5:-5, 5:-5]  # 'valid' part only

    mu1, mu2 = filt(a), filt(b)
    mu1_sq, mu2_sq, mu1_mu2 = mu1 ** 2, mu2 ** 2, mu1 * mu2
    sigma1_sq = filt(a ** 2) - mu1_sq
    sigma2_sq = filt(b ** 2) - mu2_sq
    sigma12 = filt(a * b) - mu1_mu2
    ssim_map = (((2 * mu1_mu2 + c1) * (2 * sigma12 + c2))
                / ((mu1_sq + mu2_sq + c1) * (sigma1_sq + sigma2_sq + c2)))
    return float(ssim_map.mean())


def calculate_ssim(img1: np.ndarray, img2: np.ndarray, crop_border: int = 0,
                   test_y_channel: bool = False, round_y: bool = False, peak: Optional[float] = None) -> float:
    """SSIM (Wang et al. 2004: 11x11 gaussian, sigma 1.5), averaged over channels like KAIR; its constants
    for the data's range (`peak`: 255, 65535 for uint16 images)."""
    peak = data_peak(img1) if peak is None else float(peak)
    _same_shape(img1, img2)
    h, w = np.shape(img1)[:2]
    need = SSIM_WINDOW + 2 * crop_border
    if h < need or w < need:
        crop = f' after cropping the {crop_border}-pixel border' if crop_border else ''
        raise UserError(f'cannot score a {h}x{w} image with SSIM: it needs {SSIM_WINDOW}x{SSIM_WINDOW} pixels{crop}, '
                        f'i.e. images of at least {need}x{need}')
    a, b = _prepare(img1, img2, crop_border, test_y_channel, round_y, peak)
    return float(np.mean([_ssim_plane(a[:, :, c], b[:, :, c], peak) for c in range(a.shape[2])]))
