"""A small GoPro-like deblurring data set with spike streams, generated deterministically.

GoPro makes a blurred frame by averaging `blur_frames` consecutive sharp high-frame-rate frames and
keeps the middle one as ground truth. Here the sharp frames are a camera crop sliding along a smooth
random trajectory over a procedural image, and a simulated spike camera watches the same frames:
per pixel an accumulator adds the luminance (in [0, 1]) at each of `substeps` sub-steps per sharp
frame, fires a spike when it reaches `threshold` and subtracts the threshold (integrate-and-fire,
random initial charge). So each RGB frame comes with blur_frames*substeps spike planes covering
exactly its exposure, and spike rates are proportional to brightness.

Layout under `<root>` (as KAIR/VRT use GoPro), for split in train/test:
  <split>_GT/<clip>/%06d.png, <split>_GT_blurred/<clip>/%06d.png, <split>_spike/<clip>/%06d.npy|.dat,
  meta_info_GoPro_<split>_GT.txt   (lines "clip num_frames (h,w,3) 0")
Options for the data set sections: dataroot_gt <root>/train_GT, dataroot_lq <root>/train_GT_blurred,
dataroot_spike <root>/train_spike, meta_info_file <root>/meta_info_GoPro_train_GT.txt,
filename_tmpl "06d" (and the test_* folders for the test section).
"""
import os
from typing import Any, Dict, List, Tuple

import cv2
import numpy as np

from data.datasets.spike import encode_spike_dat
from data.synthetic.demo import (DEMO_DATA, dataset_key, demo_dataroot, expect_one_of, synthetic_image,
                                 write_atomically)
from utils.errors import UserError
from utils.image import imwrite

SEED = 20250
SPLITS = ('train', 'test')


def luminance(rgb_uint8: np.ndarray) -> np.ndarray:
    """HWC RGB uint8 → H×W float32 luminance in [0, 1] (BT.601 weights)."""
    rgb = rgb_uint8.astype(np.float32) / 255.0
    return rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114


def integrate_and_fire(intensities: np.ndarray, threshold: float, charge: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Simulate the spike camera over N×H×W intensities, one plane per row; returns (planes uint8, charge).

    `charge` is the accumulator state carried between calls (start it uniform in [0, threshold)).
    """
    charge = charge.astype(np.float32).copy()
    planes = np.empty(intensities.shape, dtype=np.uint8)
    for i, intensity in enumerate(intensities):
        charge += intensity
        fired = charge >= threshold
        charge[fired] -= threshold
        planes[i] = fired
    return planes, charge


def _trajectory(rng: np.random.Generator, steps: int, room: int) -> np.ndarray:
    """steps×2 smooth (x, y) crop offsets inside [0, room]: drift plus a slow wobble."""
    t = np.arange(steps, dtype=np.float64)
    angle = rng.uniform(0, 2 * np.pi)
    speed = rng.uniform(1.5, 3.0)
    path = np.stack([np.cos(angle) * speed * t, np.sin(angle) * speed * t], axis=1)
    amp, freq, phase = rng.uniform(1, 4, 2), rng.uniform(0.05, 0.2, 2), rng.uniform(0, 2 * np.pi, 2)
    path += amp * np.sin(freq * t[:, None] + phase)
    lo, hi = path.min(axis=0), path.max(axis=0)
    if np.any(hi - lo > room):
        path = (path - lo) * (room / (hi - lo).max())
        lo, hi = path.min(axis=0), path.max(axis=0)
    return path - lo + (room - (hi - lo)) / 2


def sharp_frames(split: str, clip: int, num_frames: int, size: int = 96, blur_frames: int = 5,
                 seed: int = SEED) -> np.ndarray:
    """The (num_frames*blur_frames)×size×size×3 uint8 sharp frames of one clip."""
    rng = np.random.default_rng([seed, SPLITS.index(split), clip])
    canvas_size = size * 3 + 32
    canvas = synthetic_image(rng, canvas_size).astype(np.float32)
    steps = num_frames * blur_frames
    offsets = _trajectory(rng, steps, canvas_size - size - 2)
    frames = np.empty((steps, size, size, 3), dtype=np.uint8)
    half = (size - 1) / 2
    for i, (x, y) in enumerate(offsets):
        patch = cv2.getRectSubPix(canvas, (size, size), (float(x + 1 + half), float(y + 1 + half)))
        frames[i] = np.clip(np.round(patch), 0, 255).astype(np.uint8)
    return frames


def clip_name(split: str, clip: int) -> str:
    return f'{split}_{clip:03d}'


def _write_clip(root: str, split: str, clip: int, num_frames: int, size: int, blur_frames: int,
                substeps: int, threshold: float, spike_format: str, seed: int) -> None:
    name = clip_name(split, clip)
    sharp = sharp_frames(split, clip, num_frames, size, blur_frames, seed)
    charge = np.random.default_rng([seed, SPLITS.index(split), clip, 1]).uniform(
        0, threshold, (size, size)).astype(np.float32)
    spike_dir = os.path.join(root, f'{split}_spike', name)
    os.makedirs(spike_dir, exist_ok=True)
    for f in range(num_frames):
        group = sharp[f * blur_frames:(f + 1) * blur_frames]
        blurred = np.round(group.astype(np.float64).mean(axis=0)).astype(np.uint8)
        imwrite(os.path.join(root, f'{split}_GT', name, f'{f:06d}.png'), group[blur_frames // 2])
        imwrite(os.path.join(root, f'{split}_GT_blurred', name, f'{f:06d}.png'), blurred)
        lum = np.repeat(np.stack([luminance(g) for g in group]), substeps, axis=0)
        planes, charge = integrate_and_fire(lum, threshold, charge)
        path = os.path.join(spike_dir, f'{f:06d}.{spike_format}')
        if spike_format == 'npy':
            np.save(path, planes)
        else:
            with open(path, 'wb') as fh:
                fh.write(encode_spike_dat(planes))


def make_gopro_spike(root: str, train_clips: int = 4, train_frames: int = 12, test_clips: int = 2,
                     test_frames: int = 8, size: int = 96, blur_frames: int = 5, substeps: int = 4,
                     threshold: float = 1.0, spike_format: str = 'npy', seed: int = SEED,
                     where: str = 'make_gopro_spike') -> str:
    """Generate both splits under `root` (skipped if already complete); returns `root`.

    Every RGB frame gets blur_frames*substeps spike planes (20 by default).
    """
    if spike_format not in ('npy', 'dat'):
        raise UserError(f'{where}: spike_format must be "npy" or "dat", got "{spike_format}"')
    if size % 8 and spike_format == 'dat':
        raise UserError(f'{where}: .dat spike files need size*size divisible by 8, got size {size}')
    counts = {'train': (train_clips, train_frames), 'test': (test_clips, test_frames)}

    def write(tmp: str) -> None:
        for split, (clips, frames) in counts.items():
            lines: List[str] = []
            for c in range(clips):
                _write_clip(tmp, split, c, frames, size, blur_frames, substeps, threshold, spike_format, seed)
                lines.append(f'{clip_name(split, c)} {frames} ({size},{size},3) 0\n')
            with open(os.path.join(tmp, f'meta_info_GoPro_{split}_GT.txt'), 'w') as fh:
                fh.writelines(lines)

    write_atomically(root, write, where=where)
    return root


@DEMO_DATA.register('gopro_spike')
def generate_gopro_spike(dataset_opt: Dict[str, Any]) -> None:
    """Generator for sections whose dataroot_gt is `<root>/train_GT` or `<root>/test_GT`."""
    where = dataset_opt['_where']
    gt = demo_dataroot(dataset_opt, 'gopro_spike', ('train_GT', 'test_GT'))
    root, split = os.path.dirname(gt), os.path.basename(gt)[:-len('_GT')]
    for key, written in (('dataroot_lq', f'{split}_GT_blurred'), ('dataroot_spike', f'{split}_spike'),
                         ('meta_info_file', f'meta_info_GoPro_{split}_GT.txt')):  # a test type has no meta_info_file
        expect_one_of(dataset_opt, key, (os.path.join(root, written),), 'gopro_spike', where)
    make_gopro_spike(root, spike_format=dataset_key(dataset_opt, 'spike_format', 'gopro_spike'), where=f'{where}.dataroot_gt')
