"""Image file I/O, numpy <-> tensor conversion and MATLAB-compatible bicubic resizing.

Conventions: numpy images are HWC uint8 RGB (C=1 for gray), or uint16 for 16-bit files read with
`keep_16bit` (PNG, TIFF, PNM of 16 bits per sample: their full precision, 0..65535); tensors are float32 CHW
in [0, 1] (the sample value over its type's peak, 255 or 65535). Files are decoded with cv2 (BGR) and
converted, so every reader in the project sees RGB, and in sRGB: a file with a non-sRGB colour profile embedded
is converted as it is read (`imread_uint`'s `icc`, utils/icc.py). Restored images go back to the bit depth of their
data (`tensor2uint(..., bits=16)`) and are written as 16-bit PNGs then.
"""
import math
import os
from typing import Any, Dict, List

import cv2
import numpy as np
import torch

from utils.errors import UserError
from utils.icc import file_profile
from utils.image_header import decode_limit_problem, header_size

IMG_EXTENSIONS = ('.png', '.jpg', '.jpeg', '.bmp', '.ppm', '.pgm', '.tif', '.tiff', '.webp')


def is_image_file(path: str) -> bool:
    return path.lower().endswith(IMG_EXTENSIONS)


def list_images(folder: str) -> List[str]:
    """All image files below `folder` (recursive), sorted so that paired folders line up."""
    paths = []
    for root, _dirs, files in os.walk(folder):
        paths.extend(os.path.join(root, f) for f in files if is_image_file(f))
    return sorted(paths)


PEAKS = {np.dtype(np.uint8): 255, np.dtype(np.uint16): 65535}  # the largest sample value of each integer image type


def image_peak(img: Any) -> int:
    """255 for uint8 images (arrays, tensors or dtypes), 65535 for uint16 ones."""
    dtype = img.dtype if hasattr(img, 'dtype') else img
    if isinstance(dtype, torch.dtype):
        return 65535 if dtype == torch.uint16 else 255
    return PEAKS.get(np.dtype(dtype), 255)


def to_uint8(img: np.ndarray) -> np.ndarray:
    """A uint16 image mapped to uint8 (65535 -> 255, rounded); a uint8 image as it is."""
    if img.dtype == np.uint16:
        return np.round(img.astype(np.float64) / 257.0).astype(np.uint8)
    return img


def _sample_type(img: np.ndarray, path: str, keep_16bit: bool) -> np.ndarray:
    if img.dtype == np.uint8:
        return img
    if img.dtype == np.uint16:  # 16-bit PNG/TIFF: kept, or mapped 65535 -> 255
        return img if keep_16bit else to_uint8(img)
    raise UserError(f'cannot use image {path}: {img.dtype} samples are not supported (8- or 16-bit images only)')


def imread_uint(path: str, n_channels: int = 3, bgr: bool = False, keep_16bit: bool = False,
                icc: str = 'convert') -> np.ndarray:
    """Read an image as HWC uint8: RGB for n_channels=3, gray (C=1) for n_channels=1.

    `bgr=True` leaves colour in the decoder's BGR order: a caller that crops first then reverses only
    the crop's channels (`bgr_to_rgb`), the same pixels as converting the whole image, for less work.
    `keep_16bit=True` returns a file of 16 bits per sample as uint16 (its full precision) instead of
    mapping it to uint8; 8-bit files stay uint8 either way. `icc` says what happens to a file with a
    non-sRGB colour profile embedded (utils/icc.py): "convert" its pixels to sRGB (at their own bit depth,
    before anything else), "refuse" it (UserError), or "ignore" the profile (its values as they are).
    """
    if n_channels not in (1, 3):
        raise UserError(f'n_channels: must be 1 or 3, got {n_channels!r}')
    try:
        with open(path, 'rb') as f:  # open + imdecode also handles non-ASCII paths
            raw = f.read()
    except OSError as e:
        raise UserError(f'cannot read image {path}: {e.strerror or e}') from None
    data = np.frombuffer(raw, dtype=np.uint8)
    profile = file_profile(raw, path, icc)
    if profile is not None:  # every channel at every bit: converted before anything is dropped
        img = profile.to_srgb(_sample_type(_decode(data, cv2.IMREAD_UNCHANGED, path), path, True), path, bgr=True)
    else:
        # Gray is OpenCV's own grayscale decode, as KAIR reads it: for colour PNGs it differs by ±1 from
        # converting the decoded RGB (libpng's own integer conversion), on half the demo images' pixels.
        # EXIF orientation is ignored in both modes (IMREAD_UNCHANGED ignores it), so gray and colour
        # reads of a file agree in size with each other and with the header checks (data/checks.py).
        flag = cv2.IMREAD_GRAYSCALE | cv2.IMREAD_IGNORE_ORIENTATION if n_channels == 1 else cv2.IMREAD_UNCHANGED
        if n_channels == 1 and keep_16bit:
            flag |= cv2.IMREAD_ANYDEPTH  # gray of a 16-bit file at 16 bits (IMREAD_GRAYSCALE alone gives 8)
        img = _decode(data, flag, path)
    img = _sample_type(img, path, keep_16bit)
    if img.ndim == 2:
        img = img[:, :, None]
    if img.shape[2] == 4:
        img = img[:, :, :3]  # drop alpha: BGRA -> BGR
    if n_channels == 1:
        if img.shape[2] == 3:  # a converted colour image: the gray of its sRGB colours
            img = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)[:, :, None]
        return np.ascontiguousarray(img)
    if img.shape[2] == 1:
        return np.ascontiguousarray(np.repeat(img, 3, axis=2))
    return img if bgr else cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def _decode(data: np.ndarray, flag: int, path: str) -> np.ndarray:
    try:
        img = cv2.imdecode(data, flag) if data.size else None
    except cv2.error as e:  # e.g. the size limits (validateInputImageSize): a traceback is no help
        raise UserError(f'cannot decode image {path}: {_cv2_problem(e, path)}') from None
    if img is None:
        raise UserError(f'cannot decode image {path} (corrupt or not an image)')
    return img


def bgr_to_rgb(img: np.ndarray) -> np.ndarray:
    """HWC BGR (or gray, returned as it is) → RGB, as a view: the copy happens where the caller stacks."""
    return img[:, :, ::-1] if img.shape[2] == 3 else img


def _cv2_problem(e: 'cv2.error', path: str) -> str:
    """One line for an OpenCV decoding error: the size limit when that is what failed."""
    try:
        size = header_size(path)
    except UserError:
        size = None
    problem = decode_limit_problem(*size) if size else None
    if problem:
        return problem
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[-1] if lines else 'OpenCV error'


def encode_image(img: np.ndarray, ext: str = '.png') -> bytes:
    """An HWC (or HW) uint8 RGB/gray image as the bytes of an image file (`ext` picks the format); a uint16
    image as a 16-bit one (PNG, TIFF)."""
    img = np.asarray(img)
    if img.ndim == 3 and img.shape[2] == 3:
        img = cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
    elif img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    ok, buf = cv2.imencode(ext, img)
    if not ok:
        raise OSError(f'cannot encode a {img.shape} image as {ext}')
    return buf.tobytes()


def imwrite(path: str, img: np.ndarray) -> None:
    """Write an HWC (or HW) uint8 (or uint16: 16-bit) RGB/gray image; creates the parent folder."""
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    data = encode_image(img, os.path.splitext(path)[1] or '.png')
    with open(path, 'wb') as f:
        f.write(data)


def uint2tensor(img: np.ndarray) -> torch.Tensor:
    """HWC (or HW) uint8 -> CHW float32 in [0, 1]."""
    return to_float_image(uint8_tensor(img))


def uint8_tensor(img: np.ndarray) -> torch.Tensor:
    """HWC (or HW) uint8 -> CHW uint8 tensor: what loader workers pass on (a quarter of float32's bytes
    through worker queues, pinned memory and the host-to-device copy); `to_float_image` scales it. A uint16
    image gives a uint16 tensor the same way (half of float32's bytes)."""
    if img.ndim == 2:
        img = img[:, :, None]
    return torch.from_numpy(np.array(img.transpose(2, 0, 1), order='C'))  # always a copy: never a view of a cache


def to_float_image(t: torch.Tensor) -> torch.Tensor:
    """A uint8 (uint16) image tensor -> float32 in [0, 1], the value over 255 (65535); other tensors unchanged:
    the one place images are normalised, on the device in the train step, so every path gives the same floats."""
    if t.dtype == torch.uint8:
        return t.float().div_(255.0)
    if t.dtype == torch.uint16:
        return t.float().div_(65535.0)
    return t


def bit_depth(*tensors: Any) -> int:
    """16 when any of `tensors` holds 16-bit samples (a uint16 image tensor), else 8: the depth an item's
    restored images are written and scored at."""
    return 16 if any(torch.is_tensor(t) and t.dtype == torch.uint16 for t in tensors) else 8


def images_to_float(batch: Dict[str, Any]) -> Dict[str, Any]:
    """`to_float_image` on every tensor of a batch (or item) dict."""
    return {k: to_float_image(v) if torch.is_tensor(v) else v for k, v in batch.items()}


def tensor2uint(t: torch.Tensor, bits: int = 8) -> np.ndarray:
    """CHW or 1xCHW float tensor in [0, 1] -> HWC uint8 (clamped, rounded); `bits=16`: uint16 (0..65535)."""
    t = t.detach()
    if t.dim() == 4:
        if t.shape[0] != 1:
            raise ValueError(f'tensor2uint expects CHW or 1xCHW, got shape {tuple(t.shape)}')
        t = t[0]
    if t.dim() != 3:
        raise ValueError(f'tensor2uint expects CHW or 1xCHW, got shape {tuple(t.shape)}')
    if bits not in (8, 16):
        raise ValueError(f'tensor2uint: bits must be 8 or 16, got {bits}')
    dtype = torch.uint16 if bits == 16 else torch.uint8
    if t.dtype == dtype:  # a loader's image, not yet scaled
        return np.ascontiguousarray(t.cpu().permute(1, 2, 0).numpy())
    t = to_float_image(t)  # a loader's image of the other depth: through [0, 1]
    peak = 65535.0 if bits == 16 else 255.0
    t = (t.float().cpu().clamp(0, 1) * peak).round()  # out of place: never modify the caller's tensor
    return np.ascontiguousarray(t.to(dtype).permute(1, 2, 0).numpy())


def _cubic(x: np.ndarray) -> np.ndarray:
    """Keys cubic kernel with a = -0.5 (MATLAB's 'bicubic')."""
    absx = np.abs(x)
    absx2, absx3 = absx ** 2, absx ** 3
    return ((1.5 * absx3 - 2.5 * absx2 + 1) * (absx <= 1)
            + (-0.5 * absx3 + 2.5 * absx2 - 4 * absx + 2) * ((absx > 1) & (absx <= 2)))


def _resize_matrix(in_length: int, out_length: int, scale: float) -> np.ndarray:
    """Dense (out_length, in_length) matrix of MATLAB imresize weights for one axis.

    Same maths as MATLAB's `contributions` (and BasicSR's `calculate_weights_indices`): when
    downscaling the kernel is stretched by 1/scale (antialiasing), and samples outside the image
    are mirrored (symmetric padding), which here folds their weight onto the mirrored pixel.
    """
    kernel_width = 4.0
    if scale < 1:
        kernel_width /= scale
    x = np.arange(1, out_length + 1, dtype=np.float64)
    u = x / scale + 0.5 * (1 - 1 / scale)  # output pixel centres in input coordinates (1-based)
    left = np.floor(u - kernel_width / 2)
    taps = int(math.ceil(kernel_width)) + 2
    indices = left[:, None] + np.arange(taps)[None, :]  # 1-based
    dist = u[:, None] - indices
    weights = scale * _cubic(dist * scale) if scale < 1 else _cubic(dist)
    weights /= weights.sum(axis=1, keepdims=True)
    idx = indices.astype(np.int64) - 1  # 0-based, may fall outside [0, in_length)
    period = 2 * in_length
    idx = np.mod(idx, period)
    idx = np.where(idx >= in_length, period - 1 - idx, idx)  # symmetric: -1 -> 0, n -> n-1
    mat = np.zeros((out_length, in_length), dtype=np.float64)
    rows = np.broadcast_to(np.arange(out_length)[:, None], idx.shape)
    np.add.at(mat, (rows, idx), weights)
    return mat


def imresize_bicubic(img: np.ndarray, scale_factor: float) -> np.ndarray:
    """MATLAB `imresize(img, scale_factor, 'bicubic')` (with antialiasing when downscaling).

    This is the degradation SR papers and KAIR/BasicSR use to make LR images, so models trained on
    on-the-fly LR match published test sets. Accepts HWC or HW; output size is ceil(size * scale).
    uint8 (uint16) input gives uint8 (uint16) output (rounded and clipped, like MATLAB); float input stays float.
    """
    if scale_factor <= 0:
        raise ValueError(f'scale_factor must be positive, got {scale_factor}')
    in_h, in_w = img.shape[:2]
    # The tolerance protects against e.g. 96 * (1/3) = 32.000000000000004 -> 33.
    out_h = max(1, int(math.ceil(in_h * scale_factor - 1e-9)))
    out_w = max(1, int(math.ceil(in_w * scale_factor - 1e-9)))
    data = img.astype(np.float64)
    squeeze = data.ndim == 2
    if squeeze:
        data = data[:, :, None]
    mat_h = _resize_matrix(in_h, out_h, scale_factor)
    mat_w = _resize_matrix(in_w, out_w, scale_factor)
    # two matrix products through BLAS (a plain einsum loops in numpy: seconds for a 2K frame)
    out = np.tensordot(mat_h, data, axes=(1, 0))                       # out_h, in_w, c
    out = np.ascontiguousarray(np.tensordot(out, mat_w, axes=(1, 1)).transpose(0, 2, 1))  # out_h, out_w, c
    if squeeze:
        out = out[:, :, 0]
    if img.dtype in (np.uint8, np.uint16):
        return np.clip(np.round(out), 0, image_peak(img)).astype(img.dtype)
    return out.astype(img.dtype, copy=False)
