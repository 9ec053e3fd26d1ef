"""A small DAVIS-like clip set for non-blind video denoising, generated deterministically.

Clips are windows moving at a constant velocity over procedural images (see data/synthetic/vimeo.py),
stored as JPEG like DAVIS's `JPEGImages/480p` (the denoising datasets add the noise themselves).

Layout under `<root>`:
  train/<clip>/00000.jpg ..   3 clips of 10 frames, 64x96
  test/<clip>/00000.jpg ..    2 clips of 6 frames
  meta_info_DAVIS_train_GT.txt  (lines "clip00 10 (64,96,3) 0")
Options: dataroot_gt <root>/train with meta_info_file <root>/meta_info_DAVIS_train_GT.txt,
filename_tmpl "05d", filename_ext "jpg"; dataroot_gt <root>/test for the test section.
"""
import os
from typing import Any, Dict

import numpy as np

from data.synthetic.demo import DEMO_DATA, demo_dataroot, expect_one_of, write_atomically
from data.synthetic.vimeo import moving_window
from utils.image import imwrite

SEED = 20270
HEIGHT, WIDTH = 64, 96
CLIPS = {'train': (3, 10), 'test': (2, 6)}


def clip_frames(split: str, clip: int, seed: int = SEED) -> np.ndarray:
    """The T×HEIGHT×WIDTH×3 uint8 frames of one clip, before JPEG encoding."""
    frames = CLIPS[split][1]
    return moving_window(np.random.default_rng([seed, list(CLIPS).index(split), clip]), frames, HEIGHT, WIDTH)


def make_davis(root: str, seed: int = SEED, where: str = 'make_davis') -> str:
    """Generate both splits under `root` (left alone if already complete); returns `root`."""
    def write(tmp: str) -> None:
        for split, (clips, frames) in CLIPS.items():
            for c in range(clips):
                for t, frame in enumerate(clip_frames(split, c, seed)):
                    imwrite(os.path.join(tmp, split, f'clip{c:02d}', f'{t:05d}.jpg'), frame)
        with open(os.path.join(tmp, 'meta_info_DAVIS_train_GT.txt'), 'w') as fh:
            clips, frames = CLIPS['train']
            fh.writelines(f'clip{c:02d} {frames} ({HEIGHT},{WIDTH},3) 0\n' for c in range(clips))

    write_atomically(root, write, where=where)
    return root


@DEMO_DATA.register('davis')
def generate_davis(dataset_opt: Dict[str, Any]) -> None:
    """Generator for sections whose dataroot_gt is `<root>/train` or `<root>/test`."""
    where = dataset_opt['_where']
    root = os.path.dirname(demo_dataroot(dataset_opt, 'davis', tuple(CLIPS)))
    expect_one_of(dataset_opt, 'meta_info_file', (os.path.join(root, 'meta_info_DAVIS_train_GT.txt'),), 'davis', where)
    make_davis(root, where=f'{where}.dataroot_gt')
