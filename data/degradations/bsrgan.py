"""BSRGAN's practical degradation model (Zhang et al., ICCV 2021) and KAIR's `bsrgan_plus` variant.

Both take an H patch (HWC float32 RGB in [0, 1]) and return (L, H): L made from H by a random
sequence of blurs, downscalings, noises and JPEG compressions, and H cropped to `lq_patchsize * sf`
at the place of the `lq_patchsize` crop of L. Every random choice comes from the `rng` argument (a
`np.random.Generator`), so a sample seeded by its key is bit-identical in any worker or process.

The probability of every random choice is a module-level constant (or an argument). Passing a dict
as `record` appends each choice under its name (`record['blur']`, `record['noise_kind']`, ...), so a test
can compare observed frequencies with the constants, and a user can see what a sample went through.

Approximations (the paper's components we do not have here):
- camera sensor noise: the paper unprocesses the image with a reverse ISP (CycleISP-like), adds
  noise to the raw image and processes it again. `camera_noise` instead goes to linear light with a
  2.2 gamma, adds heteroscedastic shot + read noise with the log-linear relation of Brooks et al.
  (CVPR 2019, "Unprocessing images"), and goes back; no mosaicking, white balance or colour
  matrices. KAIR's public code passes no ISP model and so never applies this step: give
  `camera_prob=0` for its behaviour.
- the Poisson and speckle noises of `bsrgan_plus` are our own parameterisations (see each function).
"""
import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import cv2
import numpy as np

from data.degradations.jpeg import jpeg_roundtrip
from data.degradations.kernels import anisotropic_gaussian, isotropic_gaussian, kernel_sizes, shifted_gaussian
from data.patches import Patch, patch_hw, shown
from utils.image import imresize_bicubic

Record = Optional[Dict[str, List[Any]]]

# Blur (paper, section 3.1): kernel size uniform over 7×7 ... 21×21; isotropic width and anisotropic
# axis variances uniform in the ranges below, the anisotropic angle uniform in [0, π).
KERNEL_SIZES = kernel_sizes(7, 21)
BLUR_KIND_PROBS = {'isotropic': 0.5, 'anisotropic': 0.5}
ISO_SIGMA_RANGE = (0.1, 2.4)
ANISO_EIGENVALUE_RANGE = (0.5, 6.0)

# Downsampling: cv2 interpolations, each equally likely.
INTERPOLATIONS = {'bilinear': cv2.INTER_LINEAR, 'bicubic': cv2.INTER_CUBIC, 'area': cv2.INTER_AREA}
INTERPOLATION_PROBS = {name: 1 / 3 for name in INTERPOLATIONS}
# bsrgan, scale 4: halve first with this probability (the rest is then a ×2 problem), by a cv2
# interpolation or by MATLAB's bicubic.
HALVE_PROB = 0.25
HALVE_METHOD_PROBS = {'cv2': 0.5, 'matlab_bicubic': 0.5}
# The random-scale step before the final downscale: either a resize by 1/s with s uniform in
# [1, RANDOM_SCALE_MAX × sf], or a blur with a gaussian shifted for decimation (sigma uniform in
# DECIMATION_SIGMA_RANGE × sf) followed by keeping every sf-th pixel (the paper's aligned nearest
# neighbour downsampling).
RANDOM_SCALE_STEP_PROBS = {'resize': 0.75, 'shifted_decimation': 0.25}
RANDOM_SCALE_MAX = 2.0
DECIMATION_SIGMA_RANGE = (0.1, 0.6)
DECIMATION_KERNEL_SIZE = 25

# Gaussian noise: level uniform over the integers of NOISE_LEVEL_RANGE (0..255 scale), then
# independent per channel, the same in all channels (gray), or correlated across channels
# (covariance σ² UᵀDU, U a random rotation, D uniform in [0, 1]: the paper's general case).
NOISE_LEVEL_RANGE = (1, 25)
NOISE_KIND_PROBS = {'channel': 0.4, 'gray': 0.4, 'colour': 0.2}

# JPEG: quality uniform over the integers of JPEG_QUALITY_RANGE. The last step is always a JPEG; the
# one inside the random order happens with probability JPEG_PROB.
JPEG_QUALITY_RANGE = (30, 95)
JPEG_PROB = 0.9
CAMERA_PROB = 0.25

# bsrgan_plus: two rounds of (blur, resize, noises, camera) around a JPEG, each resize by a factor
# uniform in [1/sf, 1]; extra noises with these probabilities.
PLUS_POISSON_PROB = 0.1
PLUS_SPECKLE_PROB = 0.1
PLUS_CAMERA_PROB = 0.1
PLUS_JPEG_PROB = 0.9
POISSON_GRAY_PROB = 0.5
POISSON_LOG10_PEAK_RANGE = (2.0, 4.0)

BSRGAN_STEPS = ('blur', 'blur', 'random_scale', 'downscale', 'gaussian_noise', 'jpeg', 'camera')
PLUS_STEPS = ('blur', 'resize', 'gaussian_noise', 'poisson_noise', 'speckle_noise', 'camera', 'jpeg',
              'blur', 'resize', 'gaussian_noise', 'poisson_noise', 'speckle_noise', 'camera')
PLUS_LOCAL_SHUFFLES = ((2, 6), (9, 13))  # without the full shuffle only these noise runs are permuted

# USM sharpening of H (bsrgan_plus `use_sharp`)
USM_WEIGHT = 0.5
USM_RADIUS = 50
USM_THRESHOLD = 10


def note(record: Record, key: str, value: Any) -> None:
    """Append a random choice to `record[key]` (no-op without a record)."""
    if record is not None:
        record.setdefault(key, []).append(value)


def choose(rng: np.random.Generator, probs: Mapping[str, float], record: Record = None,
           key: str = '') -> str:
    """One name drawn with the given probabilities (one uniform number from `rng`)."""
    u, total, name = rng.random(), 0.0, ''
    for name, p in probs.items():
        total += p
        if u < total:
            break
    note(record, key, name)
    return name


def happens(rng: np.random.Generator, prob: float, record: Record = None, key: str = '') -> bool:
    """True with probability `prob` (always draws one number, so the stream does not depend on prob)."""
    value = bool(rng.random() < prob)
    note(record, key, value)
    return value


def uniform_int(rng: np.random.Generator, bounds: Tuple[int, int]) -> int:
    """Integer uniform in [low, high], both included."""
    return int(rng.integers(bounds[0], bounds[1] + 1))


def convolve(img: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """True 2-D convolution of each channel, anchor at kernel[size // 2], mirrored borders.

    cv2.filter2D correlates, so the kernel is flipped (and its anchor with it). Borders reflect
    without repeating the edge pixel (scipy.ndimage's 'mirror'), also for kernels larger than the image.
    """
    kh, kw = kernel.shape
    flipped = np.ascontiguousarray(kernel[::-1, ::-1])
    out = cv2.filter2D(img, -1, flipped, anchor=(kw - 1 - kw // 2, kh - 1 - kh // 2),
                       borderType=cv2.BORDER_REFLECT_101)
    return out.reshape(img.shape)


def random_blur_kernel(rng: np.random.Generator, record: Record = None) -> np.ndarray:
    """Isotropic or anisotropic gaussian of a random odd size (BSRGAN's blur)."""
    kind = choose(rng, BLUR_KIND_PROBS, record, 'blur')
    size = KERNEL_SIZES[int(rng.integers(len(KERNEL_SIZES)))]
    note(record, 'kernel_size', size)
    if kind == 'isotropic':
        return isotropic_gaussian(size, rng.uniform(*ISO_SIGMA_RANGE))
    theta = rng.uniform(0.0, math.pi)
    lambda1, lambda2 = rng.uniform(*ANISO_EIGENVALUE_RANGE, size=2)
    return anisotropic_gaussian(size, theta, lambda1, lambda2)


def blur(img: np.ndarray, rng: np.random.Generator, record: Record = None) -> np.ndarray:
    """One of the paper's two blurs: convolution with `random_blur_kernel`."""
    return convolve(img, random_blur_kernel(rng, record))


def resize(img: np.ndarray, height: int, width: int, interpolation: str) -> np.ndarray:
    """cv2 resize to height×width (at least 1×1) by a named interpolation, clipped to [0, 1]."""
    size = (max(1, int(width)), max(1, int(height)))
    out = cv2.resize(img, size, interpolation=INTERPOLATIONS[interpolation])
    return np.clip(out.reshape(size[1], size[0], img.shape[2]), 0.0, 1.0)


def random_resize(img: np.ndarray, height: int, width: int, rng: np.random.Generator,
                  record: Record = None) -> np.ndarray:
    """Resize with an interpolation drawn from INTERPOLATION_PROBS."""
    return resize(img, height, width, choose(rng, INTERPOLATION_PROBS, record, 'interpolation'))


def halve(img: np.ndarray, rng: np.random.Generator, record: Record = None) -> np.ndarray:
    """×1/2 by a random cv2 interpolation or by MATLAB's bicubic (bsrgan at scale 4)."""
    h, w = img.shape[0] // 2, img.shape[1] // 2
    if choose(rng, HALVE_METHOD_PROBS, record, 'halve_method') == 'cv2':
        return random_resize(img, h, w, rng, record)
    return np.clip(imresize_bicubic(img[:2 * h, :2 * w], 0.5), 0.0, 1.0).astype(np.float32)


def random_scale_step(img: np.ndarray, sf: int, rng: np.random.Generator, record: Record = None) -> np.ndarray:
    """The step before the final downscale: a resize by a random factor, or shifted blur + decimation."""
    if choose(rng, RANDOM_SCALE_STEP_PROBS, record, 'random_scale') == 'resize':
        s = rng.uniform(1.0, RANDOM_SCALE_MAX * sf)
        return random_resize(img, int(img.shape[0] / s), int(img.shape[1] / s), rng, record)
    sigma = rng.uniform(*DECIMATION_SIGMA_RANGE) * sf
    k = shifted_gaussian(DECIMATION_KERNEL_SIZE, np.eye(2) * sigma ** 2, sf)
    return np.clip(convolve(img, k)[0::sf, 0::sf], 0.0, 1.0)


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    """A random 3×3 orthogonal matrix (QR of a gaussian matrix, signs fixed)."""
    q, r = np.linalg.qr(rng.standard_normal((3, 3)))
    return q * np.sign(np.diag(r))


def gaussian_noise(img: np.ndarray, rng: np.random.Generator, record: Record = None,
                   level_range: Tuple[int, int] = NOISE_LEVEL_RANGE, multiplicative: bool = False) -> np.ndarray:
    """Additive gaussian noise of the paper: per channel, gray, or correlated across channels.

    With `multiplicative` the noise is scaled by the image (speckle noise).
    """
    what = 'speckle' if multiplicative else 'noise'
    level = uniform_int(rng, level_range) / 255.0
    note(record, f'{what}_level', level * 255.0)
    kind = choose(rng, NOISE_KIND_PROBS, record, f'{what}_kind')
    h, w, c = img.shape
    if kind == 'channel':
        noise = rng.standard_normal((h, w, c), dtype=np.float32) * np.float32(level)
    elif kind == 'gray':
        noise = np.broadcast_to(rng.standard_normal((h, w, 1), dtype=np.float32) * np.float32(level), (h, w, c))
    else:
        mix = np.sqrt(rng.uniform(0.0, 1.0, 3))[:, None] * random_rotation(rng)  # covariance mixᵀmix = UᵀDU
        noise = (rng.standard_normal((h * w, 3)) @ (mix * level)).astype(np.float32).reshape(h, w, 3)
    if multiplicative:
        noise = noise * img
    return np.clip(img + noise, 0.0, 1.0)


def speckle_noise(img: np.ndarray, rng: np.random.Generator, record: Record = None) -> np.ndarray:
    """Multiplicative gaussian noise img·(1 + n), n drawn as in `gaussian_noise`."""
    return gaussian_noise(img, rng, record, multiplicative=True)


def poisson_noise(img: np.ndarray, rng: np.random.Generator, record: Record = None) -> np.ndarray:
    """Photon-count noise: the image as counts with a peak of 10^u photons, u uniform in
    POISSON_LOG10_PEAK_RANGE; in colour or (POISSON_GRAY_PROB) on the luma only."""
    peak = 10.0 ** rng.uniform(*POISSON_LOG10_PEAK_RANGE)
    if happens(rng, POISSON_GRAY_PROB, record, 'poisson_gray'):
        luma = img @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
        luma = np.clip(luma, 0.0, 1.0)[:, :, None]
        noise = rng.poisson(luma * peak) / peak - luma
    else:
        noise = rng.poisson(img * peak) / peak - img
    return np.clip(img + noise.astype(np.float32), 0.0, 1.0)


def jpeg_noise(img: np.ndarray, rng: np.random.Generator, record: Record = None) -> np.ndarray:
    """OpenCV JPEG round trip at a quality uniform over JPEG_QUALITY_RANGE (quantises to 8 bits)."""
    quality = uniform_int(rng, JPEG_QUALITY_RANGE)
    note(record, 'jpeg_quality', quality)
    img8 = np.clip(np.round(img * 255.0), 0, 255).astype(np.uint8)
    return jpeg_roundtrip(img8, quality).astype(np.float32) / 255.0


def camera_noise(img: np.ndarray, rng: np.random.Generator, record: Record = None) -> np.ndarray:
    """Sensor noise, approximated (see the module docstring): shot + read noise in linear light."""
    log_shot = rng.uniform(math.log(1e-4), math.log(1.2e-2))
    log_read = 2.18 * log_shot + 1.20 + rng.normal(0.0, 0.26)
    note(record, 'camera_shot', math.exp(log_shot))
    linear = np.power(np.clip(img, 0.0, 1.0), 2.2)
    std = np.sqrt(linear * math.exp(log_shot) + math.exp(log_read))
    noisy = linear + rng.standard_normal(img.shape, dtype=np.float32) * std.astype(np.float32)
    return np.power(np.clip(noisy, 0.0, 1.0), 1 / 2.2).astype(np.float32)


def usm_sharpen(img: np.ndarray, weight: float = USM_WEIGHT, radius: int = USM_RADIUS,
                threshold: int = USM_THRESHOLD) -> np.ndarray:
    """Unsharp masking: add `weight` × (img - gaussian blur), only where the detail exceeds
    `threshold` grey levels (with a blurred mask, so that flat areas and their noise stay as they are)."""
    size = radius + 1 if radius % 2 == 0 else radius
    blurred = cv2.GaussianBlur(img, (size, size), 0, borderType=cv2.BORDER_REFLECT_101).reshape(img.shape)
    detail = img - blurred
    mask = (np.abs(detail) * 255.0 > threshold).astype(np.float32)
    soft = cv2.GaussianBlur(mask, (size, size), 0, borderType=cv2.BORDER_REFLECT_101).reshape(img.shape)
    sharp = np.clip(img + weight * detail, 0.0, 1.0)
    return (soft * sharp + (1.0 - soft) * img).astype(np.float32)


def paired_crop(L: np.ndarray, H: np.ndarray, sf: int, lq_patchsize: Optional[Patch],
                rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
    """A random lq_patchsize crop of L (an integer: a square; or [height, width]) and the aligned
    lq_patchsize·sf crop of H (None: no crop)."""
    if lq_patchsize is None:
        return L, H
    h, w = L.shape[:2]
    ph, pw = patch_hw(lq_patchsize)
    top = int(rng.integers(0, h - ph + 1))
    left = int(rng.integers(0, w - pw + 1))
    L = L[top:top + ph, left:left + pw]
    H = H[top * sf:(top + ph) * sf, left * sf:(left + pw) * sf]
    return np.ascontiguousarray(L), np.ascontiguousarray(H)


def _prepare(img: np.ndarray, sf: int, lq_patchsize: Optional[Patch]) -> np.ndarray:
    """The H image as float32, cropped to a multiple of sf; checks the arguments."""
    if isinstance(sf, bool) or not isinstance(sf, (int, np.integer)) or sf < 1:
        raise ValueError(f'sf must be an integer >= 1, got {sf!r}')
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f'expected an HWC RGB image, got shape {img.shape}')
    h, w = img.shape[0] - img.shape[0] % sf, img.shape[1] - img.shape[1] % sf
    if h == 0 or w == 0:
        raise ValueError(f'image {img.shape[0]}x{img.shape[1]} is smaller than the scale {sf}')
    if lq_patchsize is not None:
        ph, pw = patch_hw(lq_patchsize)
        if min(ph, pw) < 1 or h // sf < ph or w // sf < pw:
            raise ValueError(f'image {img.shape[0]}x{img.shape[1]} is too small for an L patch of '
                             f'{shown(lq_patchsize)} at scale {sf} (needs {ph * sf}x{pw * sf})')
    return np.ascontiguousarray(img[:h, :w], dtype=np.float32)


def bsrgan(img: np.ndarray, sf: int, rng: np.random.Generator, lq_patchsize: Optional[Patch] = 64, *,
           camera_prob: float = CAMERA_PROB, jpeg_prob: float = JPEG_PROB, halve_prob: float = HALVE_PROB,
           record: Record = None) -> Tuple[np.ndarray, np.ndarray]:
    """(L, H) by BSRGAN's degradation model.

    Steps (BSRGAN_STEPS) in a random order, except that the random-scale step comes before the final
    downscale to 1/sf: two blurs, the random-scale step, the downscale, gaussian noise, JPEG
    (`jpeg_prob`) and camera noise (`camera_prob`); then always a JPEG, then the paired crop. At scale
    4 the image is first halved with probability `halve_prob`. `lq_patchsize` None keeps the whole image.
    """
    hq = _prepare(img, sf, lq_patchsize)
    h, w = hq.shape[0] // sf, hq.shape[1] // sf
    lq, step_sf = hq, sf
    if sf == 4 and happens(rng, halve_prob, record, 'halve'):
        lq, step_sf = halve(lq, rng, record), 2
    order = [BSRGAN_STEPS[i] for i in rng.permutation(len(BSRGAN_STEPS))]
    a, b = order.index('random_scale'), order.index('downscale')
    if a > b:
        order[a], order[b] = order[b], order[a]
    note(record, 'order', tuple(order))
    for step in order:
        if step == 'blur':
            lq = blur(lq, rng, record)
        elif step == 'random_scale':
            lq = random_scale_step(lq, step_sf, rng, record)
        elif step == 'downscale':
            lq = random_resize(lq, h, w, rng, record)
        elif step == 'gaussian_noise':
            lq = gaussian_noise(lq, rng, record)
        elif step == 'jpeg':
            if happens(rng, jpeg_prob, record, 'jpeg'):
                lq = jpeg_noise(lq, rng, record)
        elif happens(rng, camera_prob, record, 'camera'):
            lq = camera_noise(lq, rng, record)
    lq = jpeg_noise(lq, rng, record)
    return paired_crop(lq, hq, sf, lq_patchsize, rng)


def plus_order(rng: np.random.Generator, shuffle_prob: float, record: Record = None) -> List[str]:
    """The steps of bsrgan_plus: all shuffled with probability `shuffle_prob`, else in PLUS_STEPS
    order with only the noise runs (PLUS_LOCAL_SHUFFLES) permuted."""
    if happens(rng, shuffle_prob, record, 'shuffle'):
        idx = list(rng.permutation(len(PLUS_STEPS)))
    else:
        idx = list(range(len(PLUS_STEPS)))
        for start, stop in PLUS_LOCAL_SHUFFLES:
            idx[start:stop] = [idx[start + int(i)] for i in rng.permutation(stop - start)]
    order = [PLUS_STEPS[i] for i in idx]
    note(record, 'order', tuple(order))
    return order


def sometimes(step: Callable[..., np.ndarray], prob: float, key: str) -> Callable[..., np.ndarray]:
    """`step(lq, rng, record)` with probability `prob` (one draw, recorded under `key`), else lq unchanged."""
    def apply(lq: np.ndarray, rng: np.random.Generator, record: Record = None) -> np.ndarray:
        return step(lq, rng, record) if happens(rng, prob, record, key) else lq
    return apply


def _plus_noise(step: str) -> Callable[..., np.ndarray]:
    """The bsrgan_plus step `step` of PLUS_STEPS other than blur and resize."""
    return {'gaussian_noise': gaussian_noise,
            'poisson_noise': sometimes(poisson_noise, PLUS_POISSON_PROB, 'poisson'),
            'speckle_noise': sometimes(speckle_noise, PLUS_SPECKLE_PROB, 'speckle'),
            'camera': sometimes(camera_noise, PLUS_CAMERA_PROB, 'camera'),
            'jpeg': sometimes(jpeg_noise, PLUS_JPEG_PROB, 'jpeg')}[step]


def bsrgan_plus(img: np.ndarray, sf: int, rng: np.random.Generator, shuffle_prob: float = 0.1,
                use_sharp: bool = False, lq_patchsize: Optional[Patch] = 64, *,
                record: Record = None) -> Tuple[np.ndarray, np.ndarray]:
    """(L, H) by KAIR's `bsrgan_plus`: a second-order BSRGAN degradation.

    H is USM-sharpened first with `use_sharp` (the network then learns to sharpen). Two rounds of blur,
    resize (factor uniform in [1/sf, 1], random interpolation), gaussian noise, Poisson noise
    (PLUS_POISSON_PROB), speckle noise (PLUS_SPECKLE_PROB) and camera noise (PLUS_CAMERA_PROB),
    with a JPEG (PLUS_JPEG_PROB) between them, in the order of `plus_order`; then a resize to 1/sf,
    a JPEG and the paired crop.
    """
    if not 0 <= shuffle_prob <= 1:
        raise ValueError(f'shuffle_prob must be in [0, 1], got {shuffle_prob}')
    hq = _prepare(img, sf, lq_patchsize)
    if use_sharp:
        hq = usm_sharpen(hq)
    h, w = hq.shape[0] // sf, hq.shape[1] // sf
    lq = hq
    for step in plus_order(rng, shuffle_prob, record):
        if step == 'blur':
            lq = blur(lq, rng, record)
        elif step == 'resize':
            s = rng.uniform(1.0 / sf, 1.0)
            lq = random_resize(lq, round(lq.shape[0] * s), round(lq.shape[1] * s), rng, record)
        else:  # the noises and the JPEG in between
            lq = _plus_noise(step)(lq, rng, record)
    lq = random_resize(lq, h, w, rng, record)
    lq = jpeg_noise(lq, rng, record)
    return paired_crop(lq, hq, sf, lq_patchsize, rng)


DEGRADATIONS = ('bsrgan', 'bsrgan_plus')


def degrade(name: str, img: np.ndarray, sf: int, rng: np.random.Generator, lq_patchsize: Optional[Patch],
            shuffle_prob: float = 0.1, use_sharp: bool = False,
            record: Record = None) -> Tuple[np.ndarray, np.ndarray]:
    """Dispatch by name (KAIR's `degradation_type`)."""
    if name == 'bsrgan':
        return bsrgan(img, sf, rng, lq_patchsize, record=record)
    if name == 'bsrgan_plus':
        return bsrgan_plus(img, sf, rng, shuffle_prob, use_sharp, lq_patchsize, record=record)
    raise ValueError(f'unknown degradation {name!r}; known: {", ".join(DEGRADATIONS)}')

