"""A small REDS-like video set (sharp, bicubic ×4 and blurred frames), generated deterministically.

Each clip is a window moving at a constant sub-pixel velocity over a procedural image (as the Vimeo-like set,
data/synthetic/vimeo.py), sampled at three sub-steps per frame: the sharp frame is the middle sub-step and the
blurred frame the mean of the three (REDS makes its blur by averaging high-frame-rate frames the same way).

Layout under `<root>` (BasicSR's REDS folders; clips 000 and 011 are two of REDS4's held-out clips):
  train_sharp/<clip>/00000000.png ..          GT, 160x160, clips 000-003 and 011, 6 frames each
  train_sharp_bicubic/X4/<clip>/*.png         MATLAB bicubic x1/4 (`utils.image.imresize_bicubic`), 40x40
  train_blur/<clip>/*.png                     blurred, full size (EDVR's deblurring input)
  REDS4/GT/<clip>, REDS4/sharp_bicubic/<clip>, REDS4/blur/<clip>   the held-out clips 000 and 011 again
  meta_info_REDS_GT.txt                       every clip, lines "000 6 (160,160,3)" (BasicSR's format)
Options: dataroot_gt <root>/train_sharp, dataroot_lq <root>/train_sharp_bicubic/X4 (or train_blur),
meta_info_file <root>/meta_info_REDS_GT.txt, val_partition REDS4 (trains on 001-003); test sections
dataroot_gt <root>/REDS4/GT, dataroot_lq <root>/REDS4/sharp_bicubic (or REDS4/blur).
"""
import os
from typing import Any, Dict

import numpy as np

from data.synthetic.demo import DEMO_DATA, demo_dataroot, expect_one_of, write_atomically
from data.synthetic.vimeo import moving_window
from utils.errors import UserError
from utils.image import imresize_bicubic, imwrite

SEED = 20280
SIZE = 160
FRAMES = 6
SUBSTEPS = 3
CLIPS = ('000', '001', '002', '003', '011')
HELD_OUT = ('000', '011')  # in BasicSR's REDS4 partition
LQ_FOLDERS = {'train_sharp': ('train_sharp_bicubic/X4', 'train_blur'), 'GT': ('sharp_bicubic', 'blur')}


def clip_frames(index: int, size: int = SIZE, seed: int = SEED) -> np.ndarray:
    """(sharp, blurred): two FRAMES×size×size×3 uint8 arrays of clip CLIPS[index]."""
    sub = moving_window(np.random.default_rng([seed, index]), FRAMES * SUBSTEPS, size, size, max_speed=1.5)
    sub = sub.reshape(FRAMES, SUBSTEPS, size, size, 3)
    blurred = np.round(sub.astype(np.float64).mean(axis=1)).astype(np.uint8)
    return sub[:, SUBSTEPS // 2], blurred


def make_reds(root: str, size: int = SIZE, seed: int = SEED, where: str = 'make_reds') -> str:
    """Generate the data set under `root` (left alone if already complete); returns `root`."""
    if size % 16 or size < 16:
        raise UserError(f'{where}: size must be a multiple of 16, got {size}')

    def write(tmp: str) -> None:
        for index, clip in enumerate(CLIPS):
            sharp, blurred = clip_frames(index, size, seed)
            folders = [('train_sharp', 'train_sharp_bicubic/X4', 'train_blur')]
            if clip in HELD_OUT:
                folders.append(('REDS4/GT', 'REDS4/sharp_bicubic', 'REDS4/blur'))
            for t in range(FRAMES):
                name = os.path.join(clip, f'{t:08d}.png')
                low = imresize_bicubic(sharp[t], 1 / 4)
                for gt, lq, blur in folders:
                    imwrite(os.path.join(tmp, gt, name), sharp[t])
                    imwrite(os.path.join(tmp, lq, name), low)
                    imwrite(os.path.join(tmp, blur, name), blurred[t])
        with open(os.path.join(tmp, 'meta_info_REDS_GT.txt'), 'w') as fh:
            fh.writelines(f'{clip} {FRAMES} ({size},{size},3)\n' for clip in CLIPS)

    write_atomically(root, write, where=where)
    return root


@DEMO_DATA.register('reds')
def generate_reds(dataset_opt: Dict[str, Any]) -> None:
    """Generator for sections whose dataroot_gt is `<root>/train_sharp` or `<root>/REDS4/GT`."""
    where = dataset_opt['_where']
    gt = demo_dataroot(dataset_opt, 'reds', ('train_sharp', 'REDS4/GT'))
    test = os.path.basename(gt) == 'GT'
    root = os.path.dirname(os.path.dirname(gt)) if test else os.path.dirname(gt)
    base = os.path.dirname(gt)
    expect_one_of(dataset_opt, 'dataroot_lq', tuple(os.path.join(base, f) for f in LQ_FOLDERS[os.path.basename(gt)]),
                  'reds', where)
    expect_one_of(dataset_opt, 'meta_info_file', (os.path.join(root, 'meta_info_REDS_GT.txt'),), 'reds', where)
    make_reds(root, where=f'{where}.dataroot_gt')
