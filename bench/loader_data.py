"""The data bench_loader.py reads, generated with fixed seeds (no downloads): DIV2K-like HR images with their
x4 LR, GoPro-like blurred clips with spike streams, and LMDBs of those clips. Each folder carries a
completion marker with DATA_VERSION, so a kept `--data DIR` is reused until the generator changes.
"""
import inspect
import os
import shutil
from typing import Dict, NamedTuple, Tuple

import cv2
import numpy as np

from data.synthetic.demo import synthetic_image
from data.synthetic.gopro import integrate_and_fire, luminance

DATA_VERSION = 'v1'  # bump when the generated data changes (a kept --data DIR is then regenerated)
SCALE, CLIPS = 4, ('GOPR0372_07_00', 'GOPR0384_11_01')


class Sizes(NamedTuple):
    """How much data to generate: HR images and their size; frames per clip and their size."""
    images: int
    hr_size: Tuple[int, int]
    frames: int
    frame_size: Tuple[int, int]


FULL = Sizes(12, (1356, 2040), 14, (720, 1280))
# --quick: every row still runs (crops of 192 fit, clips hold num_frame 6), data made in about a second
QUICK = Sizes(4, (384, 512), 7, (256, 320))
BLUR_FRAMES, SUBSTEPS = 5, 4  # sharp sub-frames per blurred frame; spike planes per sub-frame (20 planes)


def textured_image(rng: np.random.Generator, h: int, w: int, grain: float = 2.0) -> np.ndarray:
    """H×W×3 uint8 (BGR, as written): shapes with anti-aliased edges over a smooth base, region-modulated
    multi-octave texture and sensor grain; PNG compresses it to ~12 bits/pixel, like DIV2K photos."""
    base = cv2.resize(synthetic_image(rng, 512), (w, h), interpolation=cv2.INTER_CUBIC).astype(np.float32)
    size = max(h, w)
    for _ in range(int(rng.integers(40, 80))):
        colour = tuple(float(v) for v in rng.uniform(0, 255, 3))
        x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
        r = int(size * rng.uniform(0.005, 0.08))
        if rng.random() < 0.5:
            cv2.circle(base, (x, y), r, colour, -1, cv2.LINE_AA)
        else:
            pts = (np.array([x, y]) + rng.normal(0, r, (int(rng.integers(3, 7)), 2))).astype(np.int32)
            cv2.fillPoly(base, [pts], colour, cv2.LINE_AA)
    img = cv2.GaussianBlur(base, (0, 0), 1.0)
    tex = np.zeros((h, w), np.float32)
    for cell, amp in ((2, 3.0), (4, 4.0), (8, 5.0), (16, 6.0), (32, 8.0), (64, 10.0)):
        small = rng.standard_normal((h // cell + 2, w // cell + 2)).astype(np.float32)
        up = cv2.resize(small, (w + 2 * cell, h + 2 * cell), interpolation=cv2.INTER_CUBIC)
        tex += amp * up[cell:cell + h, cell:cell + w]
    gain = cv2.resize(rng.uniform(0, 1, (6, 9)).astype(np.float32), (w, h), interpolation=cv2.INTER_CUBIC)
    img += (tex * np.clip(gain, 0.05, 1))[..., None] * np.array([1.0, 0.9, 0.8], np.float32)
    img += rng.standard_normal((h, w, 3), dtype=np.float32) * grain
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _done(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, f'.complete-{DATA_VERSION}'))


def _mark(folder: str) -> None:
    with open(os.path.join(folder, f'.complete-{DATA_VERSION}'), 'w') as f:
        f.write('complete\n')


def _fresh(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)


def make_images(root: str, sizes: Sizes) -> str:
    folder = os.path.join(root, 'div2k')
    if _done(folder):
        return folder
    _fresh(folder)
    os.makedirs(os.path.join(folder, 'HR'))
    os.makedirs(os.path.join(folder, 'LR_x4'))
    h, w = sizes.hr_size
    for i in range(sizes.images):
        hr = textured_image(np.random.default_rng([2026, i]), h, w)
        cv2.imwrite(os.path.join(folder, 'HR', f'{i + 1:04d}.png'), hr)
        lr = cv2.resize(hr, (w // SCALE, h // SCALE), interpolation=cv2.INTER_AREA)
        cv2.imwrite(os.path.join(folder, 'LR_x4', f'{i + 1:04d}x4.png'), lr)
    _mark(folder)
    return folder


def make_clips(root: str, sizes: Sizes) -> str:
    """GoPro-like clips: a camera crop moving over a textured canvas; GT = the middle sharp sub-frame,
    LQ = the mean of BLUR_FRAMES sub-frames (motion blur), both with fresh grain; spikes from the
    sub-frames' luminance (integrate-and-fire, SUBSTEPS planes per sub-frame)."""
    folder = os.path.join(root, 'gopro')
    if _done(folder):
        return folder
    _fresh(folder)
    h, w = sizes.frame_size
    frames = sizes.frames
    lines = []
    for c, clip in enumerate(CLIPS):
        rng = np.random.default_rng([2027, c])
        steps = frames * BLUR_FRAMES
        angle, speed = rng.uniform(0, 2 * np.pi), rng.uniform(2.0, 3.5)
        travel = np.outer(np.arange(steps), [np.sin(angle), np.cos(angle)]) * speed
        travel -= travel.min(axis=0)
        margin = np.ceil(travel.max(axis=0)).astype(int) + 2
        canvas = textured_image(rng, h + margin[0], w + margin[1], grain=1.5)
        charge = rng.uniform(0, 1, (h, w)).astype(np.float32)
        for name in ('train_GT', 'train_GT_blurred', 'train_spike'):
            os.makedirs(os.path.join(folder, name, clip))
        for f in range(frames):
            subs = []
            for s in range(BLUR_FRAMES):
                y, x = np.rint(travel[f * BLUR_FRAMES + s]).astype(int)
                subs.append(canvas[y:y + h, x:x + w])
            gt = subs[BLUR_FRAMES // 2].astype(np.float32)
            lq = np.mean(np.stack(subs).astype(np.float32), axis=0)
            frame = f'{f:06d}'
            for name, img in (('train_GT', gt), ('train_GT_blurred', lq)):
                img = np.clip(np.rint(img + rng.standard_normal(img.shape, dtype=np.float32) * 1.5), 0, 255)
                cv2.imwrite(os.path.join(folder, name, clip, f'{frame}.png'), img.astype(np.uint8))
            lum = np.repeat(np.stack([luminance(sub[:, :, ::-1]) for sub in subs]), SUBSTEPS, axis=0)
            planes, charge = integrate_and_fire(lum, 1.0, charge)
            np.save(os.path.join(folder, 'train_spike', clip, f'{frame}.npy'), planes)
        lines.append(f'{clip} {frames} ({h},{w},3) 0\n')
    with open(os.path.join(folder, 'meta_info_GoPro_train_GT.txt'), 'w') as f:
        f.writelines(lines)
    _mark(folder)
    return folder


def raw_lmdb_supported() -> bool:
    from data.lmdb_util import make_lmdb_from_folder
    return 'raw' in inspect.signature(make_lmdb_from_folder).parameters


def make_lmdbs(clips: str) -> Dict[str, str]:
    """gt/lq LMDBs of PNG bytes for ours, copies for the baseline (py-lmdb opens a folder once per
    process), and raw-frame LMDBs if supported."""
    from data.lmdb_util import make_lmdb_from_folder
    folder = os.path.join(clips, 'lmdb')
    paths = {f'{kind}_{name}': os.path.join(folder, f'{name}_{kind}.lmdb')
             for kind in ('png', 'base', 'raw') for name in ('gt', 'lq')}
    if not _done(folder):
        _fresh(folder)
        for name, src in (('gt', 'train_GT'), ('lq', 'train_GT_blurred')):
            make_lmdb_from_folder(os.path.join(clips, src), paths[f'png_{name}'], exts=('.png',))
            shutil.copytree(paths[f'png_{name}'], paths[f'base_{name}'])
        _mark(folder)
    if raw_lmdb_supported():
        raw_done = os.path.join(folder, 'raw')
        os.makedirs(raw_done, exist_ok=True)
        if not _done(raw_done):
            for name, src in (('gt', 'train_GT'), ('lq', 'train_GT_blurred')):
                shutil.rmtree(paths[f'raw_{name}'], ignore_errors=True)
                make_lmdb_from_folder(os.path.join(clips, src), paths[f'raw_{name}'], exts=('.png',), raw=True)
            _mark(raw_done)
    else:
        del paths['raw_gt'], paths['raw_lq']
    return paths
