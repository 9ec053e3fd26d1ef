"""Super-resolution with a known blur kernel and noise level (KAIR's `usrnet` and `srmd` datasets).

Both make L from H on the fly: blur with a random kernel, downscale, add gaussian noise, and hand the
degradation to the network, which is what lets one model serve every kernel:
- `usrnet` (model `plain4`): L, the kernel k, the scale factor sf and the noise level sigma, with L =
  (H circularly convolved with k) keeping every sf-th pixel from (0, 0), plus noise: the degradation
  USRNet's data step inverts in closed form. One scale per optimizer step (all ranks, all
  micro-batches), drawn from `scales`, since a batch must share its size; half the kernels are
  motion blur, half shifted anisotropic gaussians (data/degradations/kernels.py).
- `srmd` (model `plain`): L = bicubic downscale of the blurred H plus noise, with the kernel's
  projection on a PCA basis (15 numbers) and the noise level appended as constant maps (in_nc =
  n_channels + 16).
Unlike KAIR, the blurred image is not truncated to uint8 before decimation (scipy's convolution of a
uint8 image truncates, a bias of -0.5/255); L stays float as for `sr`. Evaluation is deterministic:
the kernel and noise of test image i are drawn from a generator seeded by i.
"""
import functools
import math
import os
import random
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from data.datasets.image import CHANNELS, IMAGE_OPTIONS, ImageDataset, patch_size, scale
from data.datasets.noise_level import noise_levels, noise_options
from data.degradations.kernels import anisotropic_gaussian, isotropic_gaussian, motion_kernel, shifted_anisotropic_gaussian
from data.patches import indivisible, shown
from data.registry import DATASETS
from data.sampler import key_step_seed, parse_key
from utils.errors import UserError
from utils.image import imresize_bicubic, uint2tensor
from utils.options import IGNORED, Key, at_least, positive_ints

USRNET_KERNEL_SIZE = 25  # KAIR's USRNet kernels (motion and gaussian) are 25x25
MOTION_PROB = 0.5        # KAIR: motion blur for 4 of the 8 values of randint(0, 7)
NOISE_FREE_PROB = 1 / 9  # KAIR: no noise when randint(0, 8) == 1

SRMD_KERNEL_SIZE = 15    # KAIR's SRMD PCA matrix is 15 x 225: 15 components of a 15x15 kernel
SRMD_PCA_DIM = 15
SRMD_NOISE_FREE_PROB = 0.1
SRMD_ISOTROPIC_PROB = 0.5


def circular_blur(img: np.ndarray, k: np.ndarray) -> np.ndarray:
    """HWC image (any dtype) convolved with k (anchor (kh // 2, kw // 2)), wrapping around the borders; float64.

    Circular, so that it is exactly the blur USRNet's Fourier-domain data step models.
    """
    h, w = img.shape[:2]
    kh, kw = k.shape
    otf = np.zeros((h, w))
    otf[:kh, :kw] = k
    otf = np.fft.fft2(np.roll(otf, (-(kh // 2), -(kw // 2)), axis=(0, 1)))
    return np.real(np.fft.ifft2(np.fft.fft2(img.astype(np.float64), axes=(0, 1)) * otf[:, :, None], axes=(0, 1)))


def dihedral(k: np.ndarray, mode: int) -> np.ndarray:
    """One of the 8 flips/rotations of a kernel (KAIR's augment modes)."""
    k = np.rot90(k, mode % 4)
    return np.ascontiguousarray(np.flipud(k) if mode >= 4 else k)


class _KernelDataset(ImageDataset):
    """L is always synthesized from H: the kernel and noise must be known to the network."""

    reads_16bit = False  # 16-bit files mapped to 8 bits: KAIR's kernel degradations work on 0..255 images

    def check_options(self) -> None:
        if self.opt['dataroot_L']:
            raise UserError(f'{self.where}.dataroot_L: {self.opt["dataset_type"]} makes L from H with a known '
                            f'kernel and noise level; give null')
        super().check_options()

    def _check_kernel_fits(self, img: np.ndarray, size: int, path: str) -> None:
        if min(img.shape[:2]) < size:
            raise UserError(f'{self.where}.dataroot_H: {path} ({img.shape[0]}x{img.shape[1]}) is smaller than the '
                            f'{size}x{size} blur kernel')


@DATASETS.register('usrnet')
class DatasetUSRNet(_KernelDataset):
    """Items {L, H, k (1 x 25 x 25), sigma (1 x 1 x 1, 0..1 scale), sf} for USRNet (model `plain4`).

    Training: noise level an integer in [0, sigma_max) / 255 (none with probability 1/9), scale one
    of `scales` per optimizer step. Evaluation: scale `sf_validation`, no noise.
    """

    OPTIONS = {
        **IMAGE_OPTIONS,
        'n_channels': CHANNELS,
        'H_size': patch_size(96),
        'sigma_max': Key(25, (int,), at_least(1), 'training noise std: an integer in [0, sigma_max) / 255 (none '
                         'for 1/9 of the samples)'),
        'scales': Key([1, 2, 3, 4], (list,), positive_ints, 'training scale factors: one drawn per optimizer step, '
                      'the same on every process'),
        'sf_validation': Key(3, (int,), at_least(1), 'the scale factor of evaluation (no noise there)'),
        'use_flip': IGNORED,           # in KAIR's train_usrnet.json; its USRNet dataset never reads it
    }

    uses_step_seed = True  # the loader gives keys a seed per optimizer step: one scale per batch

    def check_options(self) -> None:
        self.scales = list(self.opt['scales'])
        self.sf_validation = self.opt['sf_validation']
        self.sigma_max = self.opt['sigma_max']
        super().check_options()

    @property
    def eval_scale(self) -> int:
        return self.sf_validation

    def _check_patch_options(self) -> None:
        super()._check_patch_options()
        for sf in self.scales:
            if indivisible(self.patch_size, sf):
                raise UserError(f'{self.where}.H_size: {shown(self.patch_size)} is not divisible by scale {sf} of '
                                f'scales {self.scales}')

    def check_files(self, train: Optional[bool] = None) -> None:
        self.scale = 1 if (self.train if train is None else train) else self.sf_validation
        super().check_files(train)

    def _eval_size(self, size: Tuple[int, int]) -> Optional[Tuple[int, int]]:
        s = self.sf_validation
        h, w = size[0] - size[0] % s, size[1] - size[1] % s
        return (h, w) if h and w else None

    def __getitem__(self, key: Any) -> Dict[str, Any]:
        index, seed = parse_key(key)
        path_H, img_H, rng = self._read_H(index, seed)
        if rng is None:
            s = self.sf_validation
            img_H = img_H[:img_H.shape[0] - img_H.shape[0] % s, :img_H.shape[1] - img_H.shape[1] % s]
            k = isotropic_gaussian(USRNET_KERNEL_SIZE, 0.7 + 0.3 * (index % 5))  # widths 0.7 .. 1.9
            return self._degraded(img_H, k, s, 0.0, np.random.default_rng(index), path_H)
        (img_H,) = self._augment([img_H], rng)
        step = key_step_seed(key)  # without one (a key made by hand) the scale is the sample's own
        sf = random.Random(step if step is not None else seed).choice(self.scales)
        g = np.random.default_rng(seed)
        if g.random() < MOTION_PROB:
            k = motion_kernel(g, USRNET_KERNEL_SIZE)
        else:
            k = shifted_anisotropic_gaussian(g, int(g.choice(self.scales)), USRNET_KERNEL_SIZE)
            k = dihedral(k, int(g.integers(0, 8)))
        level = 0.0 if g.random() < NOISE_FREE_PROB else int(g.integers(0, self.sigma_max)) / 255.0
        return self._degraded(img_H, k, sf, level, g, path_H)

    def _degraded(self, img_H: np.ndarray, k: np.ndarray, sf: int, level: float, g: np.random.Generator,
                  path_H: str) -> Dict[str, Any]:
        self._check_kernel_fits(img_H, k.shape[0], path_H)
        L = circular_blur(img_H, k)[::sf, ::sf] / 255.0
        if level > 0:
            L = L + g.normal(0.0, level, L.shape)
        return {'L': torch.from_numpy(np.ascontiguousarray(L.transpose(2, 0, 1))).float(), 'H': uint2tensor(img_H),
                'k': torch.from_numpy(k).float()[None], 'sigma': torch.full((1, 1, 1), level), 'sf': sf,
                'L_path': path_H, 'H_path': path_H}


@DATASETS.register('srmd')
class DatasetSRMD(_KernelDataset):
    """L (bicubic x1/scale of the blurred H, plus noise) with 15 kernel-PCA maps and a noise map appended.

    Kernels: 15x15 gaussians, isotropic or anisotropic (half each), standard deviations uniform in
    [0.2, max(2, scale)] pixels (SRMD's ranges: [0.2, 2], [0.2, 3], [0.2, 4] for x2, x3, x4). Noise: a
    level uniform in `sigma` = [min, max] (none for 10 % of the samples), `sigma_test` for evaluation.
    `pca_path`: the 15 x 225 projection the network was trained with; KAIR's SRMD weights need KAIR's
    `kernels/srmd_pca_pytorch.mat` (key `p`; .npy and .pt files work too). Without it the basis is
    the principal components of 4096 kernels of this distribution, computed identically on every run.
    """

    OPTIONS = {
        **IMAGE_OPTIONS,
        'n_channels': CHANNELS,
        'H_size': patch_size(96),
        'scale': scale(4),
        **noise_options([0, 50], 0),
        'pca_path': Key(None, (str, type(None)), help='the kernel-PCA projection (15 x 225: .mat key p, .npy, .pt); '
                        'KAIR\'s weights need its srmd_pca_pytorch.mat (null: computed from the kernels)'),
    }

    def check_options(self) -> None:
        super().check_options()
        self.sigma_range, self.sigma_test = noise_levels(self.opt)
        self.pca = (load_pca(self.opt['pca_path'], f'{self.where}.pca_path') if self.opt['pca_path']
                    else srmd_pca_basis(SRMD_KERNEL_SIZE, SRMD_PCA_DIM))

    def _eval_size(self, size: Tuple[int, int]) -> Optional[Tuple[int, int]]:
        h, w = size[0] - size[0] % self.scale, size[1] - size[1] % self.scale
        return (h, w) if h and w else None

    def _synthesized_item(self, index: int, seed: Optional[int], path_H: str, img_H: np.ndarray,
                          rng: Optional[random.Random]) -> Dict[str, Any]:
        if rng is not None:
            (img_H,) = self._augment([img_H], rng)
            g = np.random.default_rng(seed)
            k = srmd_kernel(g, self.scale)
            level = 0.0 if g.random() < SRMD_NOISE_FREE_PROB else g.uniform(*self.sigma_range) / 255.0
        else:
            s = self.scale
            img_H = img_H[:img_H.shape[0] - img_H.shape[0] % s, :img_H.shape[1] - img_H.shape[1] % s]
            g = np.random.default_rng(index)
            k = srmd_kernel(g, self.scale)
            level = self.sigma_test / 255.0
        self._check_kernel_fits(img_H, SRMD_KERNEL_SIZE, path_H)
        L = imresize_bicubic(circular_blur(img_H, k) / 255.0, 1.0 / self.scale)
        if level > 0:
            L = L + g.normal(0.0, level, L.shape)
        L = torch.from_numpy(np.ascontiguousarray(L.transpose(2, 0, 1))).float()
        code = torch.from_numpy(np.concatenate([self.pca @ k.reshape(-1), [level]])).float()
        maps = code[:, None, None].expand(-1, *L.shape[-2:])
        return {'L': torch.cat([L, maps], 0), 'H': uint2tensor(img_H), 'L_path': path_H, 'H_path': path_H}


def srmd_kernel(g: np.random.Generator, scale: int) -> np.ndarray:
    """A random 15x15 gaussian of SRMD's training distribution for `scale`."""
    hi = max(2.0, float(scale))
    if g.random() < SRMD_ISOTROPIC_PROB:
        return isotropic_gaussian(SRMD_KERNEL_SIZE, g.uniform(0.2, hi))
    std = g.uniform(0.2, hi, size=2)
    return anisotropic_gaussian(SRMD_KERNEL_SIZE, g.uniform(0.0, math.pi), std[0] ** 2, std[1] ** 2)


@functools.lru_cache(maxsize=None)
def srmd_pca_basis(size: int, dim: int, count: int = 4096) -> np.ndarray:
    """(dim, size*size): the leading right singular vectors of `count` SRMD kernels (seed 0, scales 2-4).

    Signs are fixed (largest entry positive) so the basis is the same wherever it is computed.
    """
    g = np.random.default_rng(0)
    kernels = np.stack([srmd_kernel(g, 2 + i % 3).reshape(-1) for i in range(count)])
    _, _, vt = np.linalg.svd(kernels, full_matrices=False)
    basis = vt[:dim]
    signs = np.sign(basis[np.arange(dim), np.abs(basis).argmax(1)])
    return basis * signs[:, None]


def load_pca(path: str, where: str) -> np.ndarray:
    """A (15, 225) projection matrix from a .mat (key `p`, KAIR's format), .npy or .pt/.pth file."""
    if not os.path.isfile(path):
        raise UserError(f'{where}: file not found: {path}')
    try:
        if path.endswith('.mat'):
            try:
                from scipy.io import loadmat
            except ImportError:
                raise UserError(f'{where}: reading .mat files needs scipy (pip install scipy), or save the '
                                f'matrix as .npy') from None
            p = loadmat(path)['p']
        elif path.endswith('.npy'):
            p = np.load(path, allow_pickle=False)
        else:
            p = torch.load(path, map_location='cpu', weights_only=True)
            p = p.numpy() if torch.is_tensor(p) else np.asarray(p)
    except UserError:
        raise
    except Exception as e:
        raise UserError(f'{where}: cannot read {path}: {str(e).splitlines()[0][:200]}') from None
    p = np.asarray(p, dtype=np.float64)
    expected = (SRMD_PCA_DIM, SRMD_KERNEL_SIZE ** 2)
    if p.shape != expected:
        raise UserError(f'{where}: {path} holds a {"x".join(map(str, p.shape))} matrix; SRMD projects 15x15 '
                        f'kernels on 15 components, a {expected[0]}x{expected[1]} matrix')
    return p


def step_scales(dataset: DatasetUSRNet, keys: List[Any]) -> List[int]:
    """The scale each key's sample is degraded with (tests and tools; the same rule as __getitem__)."""
    return [random.Random(key_step_seed(k) if key_step_seed(k) is not None else parse_key(k)[1]).choice(dataset.scales)
            for k in keys]
