"""A small Vimeo-90K-like septuplet data set with BI and BD x4 LQ frames, generated deterministically.

Each septuplet is a window moving at a constant sub-pixel velocity over a procedural image
(`data.synthetic.demo.synthetic_image`), so there is motion to align for SR and the middle frame lies between
its neighbours, as frame interpolation expects.

Layout under `<root>` (Vimeo-90K's, with KAIR's meta files beside it):
  sequences/<clip>/<seq>/im1.png .. im7.png   GT, 64x64
  sequences_BIx4/<clip>/<seq>/im*.png         MATLAB bicubic x1/4 (`utils.image.imresize_bicubic`)
  sequences_BDx4/<clip>/<seq>/im*.png         BD: gaussian blur (13x13, sigma 1.6), then every 4th pixel
  meta_info_Vimeo90K_train_GT.txt             4 septuplets, lines "00001/0001 7 (64,64,3)"
  meta_info_Vimeo90K_test_GT.txt              2 other septuplets
Options: dataroot_gt <root>/sequences, dataroot_lq <root>/sequences_BIx4 (or _BDx4; for frame
interpolation <root>/sequences or nothing), meta_info_file one of the two meta files.
"""
import os
from typing import Any, Dict, List

import cv2
import numpy as np

from data.synthetic.demo import DEMO_DATA, demo_dataroot, expect_one_of, synthetic_image, write_atomically
from utils.errors import UserError
from utils.image import imresize_bicubic, imwrite

SEED = 20260
SIZE = 64
FRAMES = 7
SEQUENCES = [('00001', '0001'), ('00001', '0002'), ('00001', '0003'),
             ('00002', '0001'), ('00002', '0002'), ('00002', '0003')]
SPLITS = {'train': SEQUENCES[:4], 'test': SEQUENCES[4:]}
LQ_FOLDERS = ('sequences_BIx4', 'sequences_BDx4')


def moving_window(rng: np.random.Generator, frames: int, height: int, width: int,
                  max_speed: float = 3.0) -> np.ndarray:
    """frames×height×width×3 uint8: a window moving at a constant velocity over a procedural image."""
    canvas_size = 2 * max(height, width) + int(np.ceil(max_speed * frames))
    canvas = synthetic_image(rng, canvas_size).astype(np.float32)
    velocity = rng.uniform(-max_speed, max_speed, 2)
    centre = (canvas_size - 1) / 2
    out = np.empty((frames, height, width, 3), dtype=np.uint8)
    for t in range(frames):
        x, y = centre + (t - (frames - 1) / 2) * velocity
        patch = cv2.getRectSubPix(canvas, (width, height), (float(x), float(y)))
        out[t] = np.clip(np.round(patch), 0, 255).astype(np.uint8)
    return out


def septuplet(index: int, size: int = SIZE, seed: int = SEED) -> np.ndarray:
    """The 7×size×size×3 uint8 GT frames of sequence `index` of SEQUENCES."""
    return moving_window(np.random.default_rng([seed, index]), FRAMES, size, size)


def bd_downsample(img: np.ndarray, scale: int = 4) -> np.ndarray:
    """BD degradation: gaussian blur (13x13, sigma 1.6), then every `scale`-th pixel from the block centres."""
    blurred = cv2.GaussianBlur(img.astype(np.float32), (13, 13), 1.6, borderType=cv2.BORDER_REFLECT)
    start = scale // 2 - 1
    return np.clip(np.round(blurred[start::scale, start::scale]), 0, 255).astype(np.uint8)


def make_vimeo(root: str, size: int = SIZE, seed: int = SEED, where: str = 'make_vimeo') -> str:
    """Generate the data set under `root` (left alone if already complete); returns `root`."""
    if size % 4 or size < 16:
        raise UserError(f'{where}: size must be a multiple of 4 and at least 16, got {size}')

    def write(tmp: str) -> None:
        for index, (clip, seq) in enumerate(SEQUENCES):
            for t, frame in enumerate(septuplet(index, size, seed), 1):
                name = os.path.join(clip, seq, f'im{t}.png')
                imwrite(os.path.join(tmp, 'sequences', name), frame)
                imwrite(os.path.join(tmp, 'sequences_BIx4', name), imresize_bicubic(frame, 1 / 4))
                imwrite(os.path.join(tmp, 'sequences_BDx4', name), bd_downsample(frame))
        for split, seqs in SPLITS.items():
            lines: List[str] = [f'{clip}/{seq} {FRAMES} ({size},{size},3)\n' for clip, seq in seqs]
            with open(os.path.join(tmp, f'meta_info_Vimeo90K_{split}_GT.txt'), 'w') as fh:
                fh.writelines(lines)

    write_atomically(root, write, where=where)
    return root


@DEMO_DATA.register('vimeo')
def generate_vimeo(dataset_opt: Dict[str, Any]) -> None:
    """Generator for sections whose dataroot_gt is `<root>/sequences`."""
    where = dataset_opt['_where']
    root = os.path.dirname(demo_dataroot(dataset_opt, 'vimeo', ('sequences',)))
    expect_one_of(dataset_opt, 'dataroot_lq', tuple(os.path.join(root, f) for f in ('sequences',) + LQ_FOLDERS),
                  'vimeo', where)
    expect_one_of(dataset_opt, 'meta_info_file',
                  tuple(os.path.join(root, f'meta_info_Vimeo90K_{s}_GT.txt') for s in SPLITS), 'vimeo', where)
    make_vimeo(root, where=f'{where}.dataroot_gt')
