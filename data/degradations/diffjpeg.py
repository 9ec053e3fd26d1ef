"""JPEG compression as torch operations (baseline JPEG, ITU-T T.81), for degrading batches on the device.

Real-ESRGAN compresses its synthetic low-quality images on the GPU with a differentiable JPEG (DiffJPEG,
Shin & Song 2017); this is that pipeline written from the standard: full-range YCbCr (JFIF), 4:2:0
chroma subsampling (2x2 means), level shift, 8x8 DCT, quantisation by the standard tables (Annex K)
scaled by the IJG quality formula, rounding, and the inverse of each step (nearest-neighbour chroma
upsampling). Images are padded to a multiple of 16 by repeating their edge, as encoders do, and the
result is not rounded to 8 bits (the caller decides). Entropy coding is lossless and left out.

`differentiable=True` replaces rounding by Shin & Song's x_r + (x - x_r)^3, which has a useful
gradient; the degradation pipeline does not need one and uses true rounding (as Real-ESRGAN does).
"""
import functools
import math
from typing import Dict, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F

# Annex K.1 / K.2: the example quantisation tables every libjpeg-based encoder scales by quality.
LUMA_TABLE = np.array([
    [16, 11, 10, 16, 24, 40, 51, 61],
    [12, 12, 14, 19, 26, 58, 60, 55],
    [14, 13, 16, 24, 40, 57, 69, 56],
    [14, 17, 22, 29, 51, 87, 80, 62],
    [18, 22, 37, 56, 68, 109, 103, 77],
    [24, 35, 55, 64, 81, 104, 113, 92],
    [49, 64, 78, 87, 103, 121, 120, 101],
    [72, 92, 95, 98, 112, 100, 103, 99]], dtype=np.float64)
CHROMA_TABLE = np.full((8, 8), 99.0)
CHROMA_TABLE[:4, :4] = [[17, 18, 24, 47], [18, 21, 26, 66], [24, 26, 56, 99], [47, 66, 99, 99]]

# JFIF full-range RGB -> YCbCr (rows Y, Cb, Cr); Cb and Cr are offset by 128
RGB_TO_YCBCR = np.array([[0.299, 0.587, 0.114],
                         [-0.168736, -0.331264, 0.5],
                         [0.5, -0.418688, -0.081312]])


def scaled_table(table: np.ndarray, quality: float) -> np.ndarray:
    """The IJG scaling of a quantisation table to `quality` (1..100; fractions allowed): factor 5000/q
    below 50, 200 - 2q from 50, entries floor((t * factor + 50) / 100) kept in 1..255 (baseline)."""
    q = min(max(float(quality), 1.0), 100.0)
    factor = 5000.0 / q if q < 50 else 200.0 - 2.0 * q
    return np.clip(np.floor((table * factor + 50.0) / 100.0), 1.0, 255.0)


def dct_matrix() -> np.ndarray:
    """The orthonormal 8-point DCT-II as JPEG defines it: D[u, x] = C(u)/2 cos((2x+1)uπ/16), C(0) = 1/√2;
    a block's coefficients are D f Dᵀ and its pixels Dᵀ F D."""
    u, x = np.mgrid[0:8, 0:8]
    d = 0.5 * np.cos((2 * x + 1) * u * math.pi / 16)
    d[0] /= math.sqrt(2.0)
    return d


def _round(x: torch.Tensor, differentiable: bool) -> torch.Tensor:
    r = torch.round(x)
    return r + (x - r) ** 3 if differentiable else r


def _blocks(x: torch.Tensor) -> torch.Tensor:
    """(B, H, W) -> (B, H/8, W/8, 8, 8)."""
    b, h, w = x.shape
    return x.reshape(b, h // 8, 8, w // 8, 8).permute(0, 1, 3, 2, 4)


def _unblocks(x: torch.Tensor) -> torch.Tensor:
    b, nh, nw = x.shape[:3]
    return x.permute(0, 1, 3, 2, 4).reshape(b, nh * 8, nw * 8)


def _code_plane(plane: torch.Tensor, tables: torch.Tensor, dct: torch.Tensor, differentiable: bool) -> torch.Tensor:
    """Level-shifted plane (B, H, W), H and W multiples of 8 -> the same after DCT, quantisation, inverse DCT."""
    blocks = _blocks(plane)
    coef = dct @ blocks @ dct.T
    q = tables[:, None, None]  # (B, 1, 1, 8, 8)
    coef = _round(coef / q, differentiable) * q
    return _unblocks(dct.T @ coef @ dct)


@functools.lru_cache(maxsize=None)
def _constants(device: torch.device) -> Dict[str, torch.Tensor]:
    """The fixed matrices and base tables on `device`, copied there once: a copy from pageable host memory
    waits for the device, which the training step must not do every iteration."""
    def t(a: np.ndarray) -> torch.Tensor:
        return torch.tensor(a, dtype=torch.float32, device=device)
    return {'dct': t(dct_matrix()), 'luma': t(LUMA_TABLE), 'chroma': t(CHROMA_TABLE),
            'to_ycc': t(RGB_TO_YCBCR), 'to_rgb': t(np.linalg.inv(RGB_TO_YCBCR))}


def _tables(base: torch.Tensor, qualities: Sequence[float]) -> torch.Tensor:
    """`scaled_table` on the device for each quality: (B, 8, 8)."""
    factors = []
    for quality in qualities:
        q = min(max(float(quality), 1.0), 100.0)
        factors.append(5000.0 / q if q < 50 else 200.0 - 2.0 * q)
    scaled = torch.stack([torch.floor((base * f + 50.0) / 100.0) for f in factors])
    return scaled.clamp(1.0, 255.0)


def jpeg(img: torch.Tensor, quality: Union[float, Sequence[float]], differentiable: bool = False) -> torch.Tensor:
    """Compress and decompress a batch of RGB images (B, 3, H, W) in [0, 1] at `quality` (one value, or
    one per image). Float32 in [0, 1] out, the same shape; computed in float32 whatever the input."""
    if img.dim() != 4 or img.shape[1] != 3:
        raise ValueError(f'jpeg expects (B, 3, H, W) RGB images, got shape {tuple(img.shape)}')
    b, _, h, w = img.shape
    qualities = [float(quality)] * b if isinstance(quality, (int, float)) else [float(q) for q in quality]
    if len(qualities) != b:
        raise ValueError(f'{len(qualities)} qualities for {b} images')
    c = _constants(img.device)
    luma, chroma, dct = _tables(c['luma'], qualities), _tables(c['chroma'], qualities), c['dct']
    x = img.float() * 255.0
    ph, pw = -h % 16, -w % 16
    if ph or pw:
        x = F.pad(x, (0, pw, 0, ph), mode='replicate')
    ycc = torch.einsum('ij,bjhw->bihw', c['to_ycc'], x)
    y = ycc[:, 0] - 128.0
    chroma_planes = F.avg_pool2d(ycc[:, 1:], 2)  # Cb, Cr without their +128 offset: already level-shifted
    y = _code_plane(y, luma, dct, differentiable)
    cb = _code_plane(chroma_planes[:, 0], chroma, dct, differentiable)
    cr = _code_plane(chroma_planes[:, 1], chroma, dct, differentiable)
    up = torch.stack([cb, cr], 1).repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)
    rgb = torch.einsum('ij,bjhw->bihw', c['to_rgb'], torch.cat([y[:, None] + 128.0, up], 1))
    return (rgb[:, :, :h, :w] / 255.0).clamp(0.0, 1.0)
