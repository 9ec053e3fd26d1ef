"""Crop large training images into overlapping sub-images (BasicSR's data preparation for DIV2K, DF2K, Flickr2K).

    python scripts/extract_subimages.py --input DIV2K/DIV2K_train_HR --output DIV2K/DIV2K_train_HR_sub \
        --lr DIV2K/DIV2K_train_LR_bicubic/X4 DIV2K/DIV2K_train_LR_bicubic/X4_sub 4 \
        [--crop-size 480] [--step 240] [--thresh-size 0] [--workers N] [--compression 3]

Why: a training sample is a small random patch (e.g. 192² of HR), but a PNG is decoded whole, so every
sample of a 2040x1356 DIV2K image decodes 2.8 Mpixels for 37 kpixels of patch. Sub-images of 480² decode
12x fewer pixels per sample for the same data (docs/data_preparation.md measures it).

Tiles: `--crop-size` squares every `--step` pixels (480 and 240: overlapping by half), row by row; where
the last tile of a row or column leaves more than `--thresh-size` pixels uncovered at the image's edge, one
more tile is placed flush with that edge (0: the whole image is always covered), as BasicSR does. An
image smaller than the crop in either direction is skipped (counted in the summary).

`--lr DIR OUT SCALE` (repeatable: X2, X3, X4) crops the matching low-resolution images at the same places,
scaled: tiles of crop/SCALE at positions/SCALE, so each LR sub-image is exactly its HR sub-image's
downscaled content. An LR image matches an HR image by name, with DIV2K's `x<SCALE>` suffix or without
(`0001.png` <-> `0001x4.png`), and must be floor(HR size / SCALE). Both folders get the same file names
(`0001_s001.png`, ...), so the `sr` and `plain` datasets pair them in sorted order. Crop, step and threshold
must be multiples of every SCALE; tile positions are computed on the part of the HR image that every
scale divides (at most SCALE-1 pixels off its bottom/right edge are left out).

Sub-images are PNG (lossless, whatever the input format; `--compression` 0-9, BasicSR's default 3), with the
input's bit depth and channels (read unchanged), and in sRGB: an image with a non-sRGB colour profile embedded
(Display P3, Adobe RGB) has its sub-images converted to sRGB at its own bit depth (`--icc convert`, the datasets'
default; PNGs written here carry no profile, so they hold the converted pixels), or is refused (`--icc refuse`), or
cropped as its values are (`--icc ignore`); see utils/icc.py. Work is spread over `--workers` processes (default: the CPUs
this process may use) with a progress bar on a terminal (lines of progress elsewhere). Everything is written
into `<output>.tmp-<pid>` folders renamed into place at the end, so an interrupted or failed run leaves no
output folder that looks complete.
Exit codes: 0 done, 2 a problem with the arguments or the input (one line on stderr).
"""
import argparse
import math
import multiprocessing
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import cv2  # noqa: E402
import numpy as np  # noqa: E402

from utils.cores import usable_cores  # noqa: E402
from utils.errors import UserError  # noqa: E402
from utils.icc import ICC_MODES, file_profile  # noqa: E402
from utils.paths import folder_problem  # noqa: E402
from utils.progress import progress  # noqa: E402

CROP_SIZE, STEP, THRESH_SIZE, COMPRESSION = 480, 240, 0, 3  # BasicSR's DIV2K settings
# utils/image.py's IMG_EXTENSIONS, not imported from there: that module imports torch (seconds, in every worker)
IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg', '.bmp', '.ppm', '.pgm', '.tif', '.tiff', '.webp')


@dataclass(frozen=True)
class LowRes:
    """One `--lr DIR OUT SCALE`: the folder of LR images, where their sub-images go, the factor."""
    folder: str
    output: str
    scale: int


@dataclass(frozen=True)
class Task:
    """One HR image and its LR images (one per LowRes, in order), cropped by one worker."""
    name: str                   # the sub-images' stem: the HR file's stem
    hr: str
    lrs: Tuple[str, ...]


@dataclass(frozen=True)
class Settings:
    crop: int
    step: int
    thresh: int
    compression: int
    outputs: Tuple[str, ...]    # the HR output first, then one per LowRes (temporary folders while writing)
    scales: Tuple[int, ...]     # 1 for HR, then each LowRes's
    icc: str = 'convert'        # images with a non-sRGB colour profile: utils/icc.py ICC_MODES


def tile_starts(size: int, crop: int, step: int, thresh: int) -> List[int]:
    """Start offsets of the tiles along one side of `size` pixels: every `step`, plus one flush with the end
    when the last tile leaves more than `thresh` pixels uncovered. Empty when the side is shorter than `crop`."""
    if size < crop:
        return []
    starts = list(range(0, size - crop + 1, step))
    if size - (starts[-1] + crop) > thresh:
        starts.append(size - crop)
    return starts


def images(folder: str, where: str) -> List[str]:
    """The image files directly in `folder`, sorted."""
    problem = folder_problem(folder)
    if problem:
        raise UserError(f'{where}: {problem}')
    found = sorted(f for f in os.listdir(folder) if f.lower().endswith(IMAGE_EXTENSIONS)
                   and os.path.isfile(os.path.join(folder, f)))
    if not found:
        raise UserError(f'{where}: no images in {folder}')
    return found


def lr_stem(stem: str, scale: int) -> str:
    """An LR file's stem as its HR image's: DIV2K's `0001x4` is `0001`."""
    suffix = f'x{scale}'
    return stem[:-len(suffix)] if stem.endswith(suffix) and len(stem) > len(suffix) else stem


def plan(input_dir: str, lows: Sequence[LowRes]) -> List[Task]:
    """Pair every HR image with its LR image in each --lr folder; any mismatch is a UserError."""
    hr_files = images(input_dir, '--input')
    stems: Dict[str, str] = {}
    for f in hr_files:
        stem = os.path.splitext(f)[0]
        if stem in stems:
            raise UserError(f'--input: {stems[stem]} and {f} would both be cropped to {stem}_s001.png ...; keep one')
        stems[stem] = f
    pairs: List[Dict[str, str]] = []
    for low in lows:
        by_stem: Dict[str, str] = {}
        for f in images(low.folder, f'--lr {low.folder}'):
            stem = lr_stem(os.path.splitext(f)[0], low.scale)
            if stem not in stems:
                raise UserError(f'--lr {low.folder}: {f} matches no HR image in {input_dir} (by name, with or without '
                                f'the x{low.scale} suffix)')
            if stem in by_stem:
                raise UserError(f'--lr {low.folder}: {by_stem[stem]} and {f} both match HR image {stems[stem]}')
            by_stem[stem] = f
        missing = [stems[s] for s in stems if s not in by_stem]
        if missing:
            more = f' and {len(missing) - 1} more' if len(missing) > 1 else ''
            raise UserError(f'--lr {low.folder}: no LR image for {missing[0]} (expected '
                            f'{os.path.splitext(missing[0])[0]}x{low.scale}.<ext> or the same name){more}')
        pairs.append(by_stem)
    return [Task(stem, os.path.join(input_dir, f), tuple(os.path.join(low.folder, p[stem])
                                                          for low, p in zip(lows, pairs)))
            for stem, f in stems.items()]


def read(path: str, icc: str) -> Tuple[np.ndarray, bool]:
    """The image at `path` with its bit depth and channels, in sRGB as `icc` says; and whether it was converted
    from its colour profile."""
    try:
        with open(path, 'rb') as f:
            raw = f.read()
    except OSError as e:
        raise UserError(f'{path}: cannot be read: {e.strerror or e}') from None
    img = cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_UNCHANGED) if raw else None
    if img is None:
        raise UserError(f'{path}: cannot be read as an image')
    profile = file_profile(raw, path, icc)
    return (img, False) if profile is None else (profile.to_srgb(img, path, bgr=True), True)


def crop_task(task: Task, s: Settings) -> Tuple[str, int, int]:
    """Crop one HR image (and its LR images) into the output folders; returns (name, tiles written, how many of
    its images were converted from a colour profile)."""
    hr, converted = read(task.hr, s.icc)
    h, w = hr.shape[:2]
    grid = math.lcm(*s.scales)
    usable_h, usable_w = h - h % grid, w - w % grid
    lrs = []
    for path, scale in zip(task.lrs, s.scales[1:]):
        lr, lr_converted = read(path, s.icc)
        converted += lr_converted
        if lr.shape[:2] != (h // scale, w // scale):
            raise UserError(f'{path}: {lr.shape[1]}x{lr.shape[0]} is not its HR image {task.hr} ({w}x{h}) / {scale} '
                            f'= {w // scale}x{h // scale}')
        lrs.append(lr)
    tops = tile_starts(usable_h, s.crop, s.step, s.thresh)
    lefts = tile_starts(usable_w, s.crop, s.step, s.thresh)
    index = 0
    params = [cv2.IMWRITE_PNG_COMPRESSION, s.compression]
    for top in tops:
        for left in lefts:
            index += 1
            name = f'{task.name}_s{index:03d}.png'
            for img, scale, out in zip([hr, *lrs], s.scales, s.outputs):
                c, y, x = s.crop // scale, top // scale, left // scale
                tile = np.ascontiguousarray(img[y:y + c, x:x + c])
                if not cv2.imwrite(os.path.join(out, name), tile, params):
                    raise UserError(f'{os.path.join(out, name)}: cannot be written')
    return task.name, index, converted


def _worker_init() -> None:
    cv2.setNumThreads(1)  # the processes are the parallelism


def _run(args: Tuple[Task, Settings]) -> Tuple[str, int, int]:
    return crop_task(*args)


def check_settings(crop: int, step: int, thresh: int, compression: int, lows: Sequence[LowRes]) -> None:
    if crop < 1:
        raise UserError(f'--crop-size: must be >= 1, got {crop}')
    if step < 1:
        raise UserError(f'--step: must be >= 1, got {step}')
    if not 0 <= thresh < crop:
        raise UserError(f'--thresh-size: must be >= 0 and smaller than --crop-size {crop}, got {thresh}')
    if not 0 <= compression <= 9:
        raise UserError(f'--compression: must be a PNG compression level from 0 to 9, got {compression}')
    for low in lows:
        if low.scale < 1:
            raise UserError(f'--lr {low.folder}: the scale must be >= 1, got {low.scale}')
        for flag, value in (('--crop-size', crop), ('--step', step), ('--thresh-size', thresh)):
            if value % low.scale:
                raise UserError(f'{flag}: {value} is not a multiple of the LR scale {low.scale} (--lr {low.folder}); '
                                f'the LR tiles would not start on whole pixels')


def check_outputs(input_dir: str, lows: Sequence[LowRes], output: str) -> None:
    """Every output is a new folder, distinct, and not inside an input folder."""
    outs = [('--output', output)] + [(f'--lr {low.folder}', low.output) for low in lows]
    ins = [os.path.abspath(input_dir)] + [os.path.abspath(low.folder) for low in lows]
    seen: Dict[str, str] = {}
    for flag, out in outs:
        real = os.path.abspath(out)
        if os.path.exists(out):
            raise UserError(f'{flag}: {out} already exists; remove it or choose another folder')
        if real in seen:
            raise UserError(f'{flag}: {out} is also the output of {seen[real]}')
        seen[real] = flag
        for folder in ins:
            if real == folder or real.startswith(folder + os.sep):
                raise UserError(f'{flag}: {out} is inside the input folder {folder}')


def extract(input_dir: str, output: str, lows: Sequence[LowRes] = (), crop: int = CROP_SIZE, step: int = STEP,
            thresh: int = THRESH_SIZE, compression: int = COMPRESSION, workers: int = 1,
            say=None, icc: str = 'convert') -> Tuple[int, int, List[str]]:
    """Write the sub-images; returns (images, sub-images per output folder, names of the images too small
    for one tile). `say` also tells how many images were converted from their colour profile (`icc`)."""
    check_settings(crop, step, thresh, compression, lows)
    if icc not in ICC_MODES:
        raise UserError(f'--icc: must be one of {", ".join(ICC_MODES)}, got {icc!r}')
    check_outputs(input_dir, lows, output)
    tasks = plan(input_dir, lows)
    finals = [output] + [low.output for low in lows]
    temps = [f'{os.path.abspath(out).rstrip(os.sep)}.tmp-{os.getpid()}' for out in finals]
    settings = Settings(crop, step, thresh, compression, tuple(temps), (1, *(low.scale for low in lows)), icc)
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    done = False
    try:
        for tmp in temps:
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
        jobs = [(t, settings) for t in tasks]
        desc = f'{os.path.basename(os.path.normpath(input_dir))} -> {crop}x{crop}'
        if workers > 1 and len(tasks) > 1:
            ctx = multiprocessing.get_context('spawn')  # no fork of a process that may hold threads
            with ctx.Pool(min(workers, len(tasks)), initializer=_worker_init) as pool:
                results = list(progress(pool.imap_unordered(_run, jobs), len(jobs), desc, say=say, every=0.1,
                                        unit='image'))
        else:
            results = [_run(job) for job in progress(jobs, len(jobs), desc, say=say, every=0.1, unit='image')]
        for tmp, out in zip(temps, finals):
            parent = os.path.dirname(os.path.abspath(out))
            os.makedirs(parent, exist_ok=True)
            os.replace(tmp, out)
        done = True
    finally:
        if not done:
            for tmp in temps:
                shutil.rmtree(tmp, ignore_errors=True)
    small = sorted(name for name, n, _ in results if n == 0)
    converted = sum(c for _, _, c in results)
    if converted:
        say(f'{converted} of the images carr{"y" if converted > 1 else "ies"} a non-sRGB colour profile: '
            f'{"their" if converted > 1 else "its"} sub-images are converted to sRGB (--icc convert)')
    return len(tasks), sum(n for _, n, _ in results), small


def lr_argument(values: List[str]) -> LowRes:
    folder, out, scale = values
    try:
        return LowRes(folder, out, int(scale))
    except ValueError:
        raise UserError(f'--lr {folder}: the scale must be an integer, got {scale!r}') from None


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--input', required=True, help='folder of the HR images (e.g. DIV2K_train_HR)')
    p.add_argument('--output', required=True, help='new folder for the HR sub-images')
    p.add_argument('--lr', nargs=3, action='append', default=[], metavar=('LR_DIR', 'LR_OUT', 'SCALE'),
                   help='also crop the matching LR images of LR_DIR at SCALE into LR_OUT (repeatable)')
    p.add_argument('--crop-size', type=int, default=CROP_SIZE, help=f'HR sub-image size (default {CROP_SIZE})')
    p.add_argument('--step', type=int, default=STEP, help=f'HR distance between sub-images (default {STEP})')
    p.add_argument('--thresh-size', type=int, default=THRESH_SIZE,
                   help='edge strip left uncovered at most before one more tile is placed flush with the edge '
                        f'(default {THRESH_SIZE}: always cover the image)')
    p.add_argument('--compression', type=int, default=COMPRESSION, help=f'PNG compression 0-9 (default {COMPRESSION})')
    p.add_argument('--workers', type=int, default=usable_cores(), help='processes (default: the usable CPUs)')
    p.add_argument('--icc', choices=ICC_MODES, default='convert',
                   help='images with a non-sRGB colour profile: convert their sub-images to sRGB (default), refuse '
                        'them, or ignore the profile (the values as they are)')
    args = p.parse_args(argv)
    try:
        if args.workers < 1:
            raise UserError(f'--workers: must be >= 1, got {args.workers}')
        lows = [lr_argument(v) for v in args.lr]
        n, tiles, small = extract(args.input, args.output, lows, args.crop_size, args.step, args.thresh_size,
                                  args.compression, args.workers, icc=args.icc)
    except UserError as e:
        print(f'extract_subimages: {e}', file=sys.stderr)
        return 2
    lr_text = ''.join(f'; x{low.scale}: {args.crop_size // low.scale}x{args.crop_size // low.scale} in {low.output}'
                      for low in lows)
    skipped = (f'; {len(small)} image{"s" if len(small) != 1 else ""} smaller than {args.crop_size} skipped '
               f'({small[0]}{", ..." if len(small) > 1 else ""})') if small else ''
    print(f'extract_subimages: {n} images -> {tiles} sub-images of {args.crop_size}x{args.crop_size} in '
          f'{args.output}{lr_text}{skipped}', file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
