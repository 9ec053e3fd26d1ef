"""Deterministic synthetic data for the built-in demo (no downloads).

A dataset section with `"generate_demo": "<generator>"` gets its data generated under its data
root(s) before the dataset is built, when every data root it gives (`dataroot_*`) lies inside a
folder named `demo_data` (a component of the path, as in the demo files' `demo_data/images/train`).
Any other path is the user's: it is read as it is, with one log line saying that generate_demo did
not apply, so a typo in a path is the dataset's "folder not found", never made-up data trained on
in silence. Generators must be
- idempotent: a folder holding the completion marker is left alone;
- atomic: they write into a temporary sibling folder and rename it into place, so a killed run
  never leaves a half-written data root that looks complete;
- deterministic: fixed seeds, so every run (and every machine) sees the same bytes.
`write_atomically` implements the first two. Generators register with `@DEMO_DATA.register(name)`,
here or in a module `data/synthetic/<name>.py`.

Generator 'images' fills `dataroot_H` with 128x128 RGB PNGs (smooth gradients, filled shapes,
lines and stripe textures, lightly blurred): 64 images for the training section, else 8 images
from a different seed (validation).
"""
import os
import shutil
import uuid
from typing import Any, Callable, Dict, Sequence

import cv2
import numpy as np

from utils.errors import UserError
from utils.image import imwrite
from utils.logger import get_logger
from utils.registry import Registry

DEMO_DATA = Registry('demo', 'data.synthetic')

COMPLETE_MARKER = '.demo_complete'
DEMO_FOLDER = 'demo_data'  # generate_demo writes only inside a folder of this name


def ensure_demo_data(dataset_opt: Dict[str, Any]) -> bool:
    """Generate the demo data named by `generate_demo` unless it is already complete.

    Only data roots inside a `demo_data` folder are generated; a section with any other data root is
    left to read its folders as they are (logged once). Returns whether the generator ran.
    """
    name = dataset_opt['generate_demo']
    if not name:
        return False
    where = dataset_opt['_where']
    generator = DEMO_DATA.get(name, f'{where}.generate_demo')
    outside = [key for key in sorted(dataset_opt) if key.startswith('dataroot')
               and isinstance(dataset_opt[key], str) and dataset_opt[key] and not in_demo_folder(dataset_opt[key])]
    if outside:
        key = outside[0]
        get_logger().warning(f'{where}.generate_demo: "{name}" did not apply: {where}.{key} {dataset_opt[key]} is not '
                             f'inside a folder named {DEMO_FOLDER}, so it is read as it is (demo data are generated '
                             f'only under {DEMO_FOLDER}/)')
        return False
    generator(dataset_opt)
    return True


def in_demo_folder(path: str) -> bool:
    """Whether `path` lies inside a folder named `demo_data` (any component above its last one)."""
    return DEMO_FOLDER in os.path.abspath(path).split(os.sep)[:-1]


def dataset_key(dataset_opt: Dict[str, Any], key: str, demo: str) -> Any:
    """`dataset_opt[key]`, or a one-line error when this dataset type has no such key."""
    if key not in dataset_opt:
        raise UserError(f'{dataset_opt["_where"]}.generate_demo: "{demo}" writes {key}, which dataset type '
                        f'"{dataset_opt["dataset_type"]}" does not have')
    return dataset_opt[key]


def demo_dataroot(dataset_opt: Dict[str, Any], demo: str, endings: Sequence[str]) -> str:
    """The section's `dataroot_gt` as an absolute path, when it ends in one of the folders the generator `demo`
    writes (`endings`: "train", "REDS4/GT", ...), the generator's root lying above it; else a one-line error
    naming them."""
    gt = dataset_key(dataset_opt, 'dataroot_gt', demo)
    parts = os.path.normpath(gt).split(os.sep) if isinstance(gt, str) else []
    if not any(parts[-len(ending.split('/')):] == ending.split('/') for ending in endings):
        raise UserError(f'{dataset_opt["_where"]}.dataroot_gt: generate_demo "{demo}" needs a path ending in '
                        f'{" or ".join(endings)}, got {gt!r}')
    return os.path.abspath(gt)


def expect_one_of(opt: Dict[str, Any], key: str, allowed: Sequence[str], demo: str, where: str) -> None:
    """A one-line error when `opt[key]` is set to a path the generator does not write (a key the section's
    dataset type does not have, such as a test type's meta_info_file, is not looked at)."""
    value = opt[key] if key in opt else None
    if value and os.path.abspath(value) not in {os.path.abspath(a) for a in allowed}:
        raise UserError(f'{where}.{key}: generate_demo "{demo}" writes {" or ".join(allowed)}, but {key} is {value}')


def is_complete(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, COMPLETE_MARKER))


def write_atomically(target: str, write: Callable[[str], None], where: str = '') -> None:
    """Create folder `target` by calling `write(tmp_folder)` and renaming tmp_folder into place.

    Does nothing if `target` is already complete. Refuses to touch a non-empty `target` without
    the marker (it may be the user's own data). Concurrent callers (e.g. several DDP ranks) are
    safe: the first rename wins and the others discard their copy. The writer that wins logs one line
    saying what it wrote where: a typo in a demo data root makes new data in a new folder, never silently.
    """
    target = os.path.abspath(target)
    if is_complete(target):
        return
    if os.path.isdir(target) and os.listdir(target):
        raise UserError(f'{where}: {target} exists but is not a complete generated demo folder '
                        f'(no {COMPLETE_MARKER}); remove it or unset generate_demo')
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    tmp = f'{target}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}'
    try:
        os.makedirs(tmp)
        write(tmp)
        files = sum(len(names) for _, _, names in os.walk(tmp))
        with open(os.path.join(tmp, COMPLETE_MARKER), 'w') as f:
            f.write('complete\n')
        try:
            os.replace(tmp, target)  # atomic; also replaces an empty target folder
            get_logger().info(f'{where}: generate_demo wrote {files} files of synthetic demo data into {target}')
        except OSError:
            if not is_complete(target):  # lost a race to another writer: fine; otherwise a real error
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _remove_stale_temps(target)


def _remove_stale_temps(target: str) -> None:
    """Delete temp folders of killed generator runs (their process no longer exists)."""
    parent, base = os.path.split(target)
    for entry in os.listdir(parent):
        if not entry.startswith(f'{base}.tmp-'):
            continue
        try:
            pid = int(entry[len(base) + 5:].split('-')[0])
        except ValueError:
            continue
        try:
            os.kill(pid, 0)
            continue  # still running (another rank may be writing)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
        except PermissionError:
            continue


def synthetic_image(rng: np.random.Generator, size: int = 128) -> np.ndarray:
    """A piecewise-smooth RGB image with edges and texture: easy to denoise, not trivial."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64) / size
    c0, c1 = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    angle = rng.uniform(0, 2 * np.pi)
    t = (np.cos(angle) * xx + np.sin(angle) * yy)
    t = (t - t.min()) / max(t.max() - t.min(), 1e-6)
    img = c0 * (1 - t[..., None]) + c1 * t[..., None]
    freq, phase = rng.uniform(1, 3, 2), rng.uniform(0, 2 * np.pi, 2)
    img += 20 * (np.sin(2 * np.pi * freq[0] * xx + phase[0]) * np.cos(2 * np.pi * freq[1] * yy + phase[1]))[..., None]
    img = np.clip(img, 0, 255).astype(np.uint8)

    def colour() -> tuple:
        return tuple(int(v) for v in rng.integers(0, 256, 3))

    def point() -> tuple:
        return int(rng.integers(0, size)), int(rng.integers(0, size))

    for _ in range(int(rng.integers(4, 9))):
        kind = int(rng.integers(0, 4))
        if kind == 0:
            cv2.circle(img, point(), int(rng.integers(size // 16, size // 4)), colour(), -1, cv2.LINE_AA)
        elif kind == 1:
            cv2.rectangle(img, point(), point(), colour(), -1)
        elif kind == 2:
            pts = np.array([point() for _ in range(int(rng.integers(3, 7)))], dtype=np.int32)
            cv2.fillPoly(img, [pts], colour(), cv2.LINE_AA)
        else:
            x0, y0 = point()
            w, h = int(rng.integers(size // 8, size // 3)), int(rng.integers(size // 8, size // 3))
            period = int(rng.integers(3, 8))
            patch = img[y0:y0 + h, x0:x0 + w]
            stripes = ((np.arange(patch.shape[1]) // period) % 2).astype(bool)
            patch[:, stripes] = colour()
    for _ in range(int(rng.integers(2, 6))):
        cv2.line(img, point(), point(), colour(), int(rng.integers(1, 4)), cv2.LINE_AA)
    return cv2.GaussianBlur(img, (0, 0), 0.7)


@DEMO_DATA.register('images')
def generate_images(dataset_opt: Dict[str, Any]) -> None:
    where = dataset_opt['_where']
    target = dataset_key(dataset_opt, 'dataroot_H', 'images')
    if not isinstance(target, str) or not target:
        raise UserError(f'{where}.dataroot_H: generate_demo "images" needs a folder path, got {target!r}')
    count, seed = (64, 20240) if dataset_opt['phase'] == 'train' else (8, 20241)

    def write(folder: str) -> None:
        for i in range(count):
            img = synthetic_image(np.random.default_rng([seed, i]))
            imwrite(os.path.join(folder, f'{i:04d}.png'), img)

    write_atomically(target, write, where=f'{where}.dataroot_H')
