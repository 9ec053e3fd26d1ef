"""Which data preparation a training set needs: loader samples/s per worker for each way of storing the demo
data, against the files as downloaded, with what each costs to prepare (time, disk, RAM).

Image SR (dataset_type "sr", x4, 192² HR patches, flips and rotations, LR from dataroot_L), on the
DIV2K-like data bench/loader_data.py generates (12 HR PNGs of 2040x1356, ~12 bits/pixel, and their x4 LR):
  - the PNG folders as downloaded;
  - sub-images of scripts/extract_subimages.py (480² HR tiles every 240 pixels, 120² LR tiles);
  - `cache_data: true` on the folders as downloaded.
Video (VideoRecurrentTrainDataset, 6-frame clips, 192² GT patches) on the GoPro-like 720p clips:
  - the frame folders; LMDBs of scripts/make_lmdb.py with PNG frames (`--compress fast`) and raw frames
    (`--compress raw`); `cache_data: true` on the frame folders.
Per worker: `dataset[(index, seed)]` in this process with torch and OpenCV at one thread, as one loader worker
runs it, the uint8 tensors normalised as the train step does; every storage of a kind timed on the same keys
in each rep, in rotating order (A B C, B C A, ...), medians of the reps: the ratios stand even where other
processes load the machine (they slow every storage of a rep alike), the absolute samples/s do not.
Prepare: the seconds the preparation took here, in one process (the scripts' functions; for cache_data:
building the dataset, which decodes every image once), and what it occupies on disk / in RAM.
`--quick`: the small data of bench_loader.py --quick (4 HR images of 512x384, sub-images of 240² every 120),
one rep of 2 samples per row: a smoke test of every row, not a measurement.

    python bench/bench_data_prep.py [--quick] [--reps 5] [--data DIR] [--samples N]
"""
import importlib.util
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cv2  # noqa: E402
import torch  # noqa: E402

from common import parse_reps, reps_parser  # noqa: E402
from data.registry import build_dataset  # noqa: E402
from loader_data import FULL, QUICK, SCALE, Sizes, make_clips, make_images  # noqa: E402
from utils.image import images_to_float  # noqa: E402


def section(dataset_type: str, **given: Any) -> Dict[str, Any]:
    """A `datasets.train` section validated by the entry point's rules (defaults filled)."""
    from option_rules import option_rules
    from utils.options import validate
    raw = {'task': 'bench_data_prep', 'netG': {'net_type': 'dncnn'}, 'scale': given.get('scale', 1),
           'datasets': {'train': {'dataset_type': dataset_type, **given}}}
    return validate(raw, option_rules())['datasets']['train']


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def load_script(name: str) -> Any:
    """scripts/<name>.py as a module: its functions are timed here, without an interpreter's start-up."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, 'scripts', f'{name}.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class Row:
    """One storage: how the dataset is built, what preparing it cost."""

    def __init__(self, kind: str, label: str, build: Callable[[], Any], prepare_s: Optional[float],
                 disk: Optional[int]):
        self.kind, self.label, self.prepare_s, self.disk = kind, label, prepare_s, disk
        t0 = time.perf_counter()
        self.dataset = build()
        built = time.perf_counter() - t0
        cache = getattr(self.dataset, 'cache', None)  # data/frame_cache.py FrameCache: {path: (offset, shape)}
        self.ram = (sum(h * w * c * dtype.itemsize for _, (h, w, c), dtype in cache.index.values())
                    if cache is not None else None)
        if self.ram is not None:  # the preparation is the decode at start-up
            self.prepare_s = built
        self.rate = float('nan')


def image_rows(data: str, sizes: Sizes, crop: int, step: int) -> List[Row]:
    div2k = make_images(data, sizes)
    hr, lr = os.path.join(div2k, 'HR'), os.path.join(div2k, 'LR_x4')
    sub = os.path.join(data, f'div2k_sub_{crop}_{step}')
    hr_sub, lr_sub = os.path.join(sub, 'HR'), os.path.join(sub, 'LR_x4')
    shutil.rmtree(sub, ignore_errors=True)
    os.makedirs(sub)
    es = load_script('extract_subimages')
    seconds = timed(lambda: es.extract(hr, hr_sub, [es.LowRes(lr, lr_sub, SCALE)], crop, step, workers=1,
                                       say=lambda _: None))
    given = dict(H_size=192, scale=SCALE, use_hflip=True, use_rot=True)
    return [
        Row('images', 'PNG folders, as downloaded', lambda: build_dataset(section(
            'sr', dataroot_H=hr, dataroot_L=lr, **given)), None, folder_bytes(hr) + folder_bytes(lr)),
        Row('images', f'extract_subimages {crop}/{step}', lambda: build_dataset(section(
            'sr', dataroot_H=hr_sub, dataroot_L=lr_sub, **given)), seconds, folder_bytes(sub)),
        Row('images', 'cache_data: true', lambda: build_dataset(section(
            'sr', dataroot_H=hr, dataroot_L=lr, cache_data=True, **given)), None, None),
    ]


def clip_rows(data: str, sizes: Sizes) -> List[Row]:
    gopro = make_clips(data, sizes)
    gt, lq = os.path.join(gopro, 'train_GT'), os.path.join(gopro, 'train_GT_blurred')
    clip = dict(dataroot_gt=gt, dataroot_lq=lq, meta_info_file=os.path.join(gopro, 'meta_info_GoPro_train_GT.txt'),
                filename_tmpl='06d', filename_ext='png', num_frame=6, gt_size=192, scale=1, interval_list=[1],
                random_reverse=False, use_hflip=True, use_rot=True)
    vtype = 'VideoRecurrentTrainDataset'
    make_lmdb = load_script('make_lmdb')
    rows = [Row('clips', 'PNG frame folders', lambda: build_dataset(section(vtype, **clip)), None,
                folder_bytes(gt) + folder_bytes(lq))]
    for compress in ('fast', 'raw'):
        out = os.path.join(data, f'gopro_lmdb_{compress}')
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        lmdbs = {name: os.path.join(out, f'{name}.lmdb') for name in ('gt', 'lq')}
        seconds = sum(timed(lambda src=src, name=name: make_lmdb.make_lmdb_from_frames(
            src, lmdbs[name], 'reds', compress, show=lambda items, desc: items))
            for name, src in (('gt', gt), ('lq', lq)))
        rows.append(Row('clips', f'make_lmdb --compress {compress}', lambda lmdbs=lmdbs: build_dataset(section(
            vtype, **{**clip, 'dataroot_gt': lmdbs['gt'], 'dataroot_lq': lmdbs['lq'], 'io_backend': {'type': 'lmdb'}})),
            seconds, folder_bytes(out)))
    rows.append(Row('clips', 'cache_data: true', lambda: build_dataset(section(vtype, **clip, cache_data=True)),
                    None, None))
    return rows


def keys_for(n_items: int, count: int, seed: int) -> List[Tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randrange(n_items), rng.randrange(2 ** 31)) for _ in range(count)]


def measure(rows: Sequence[Row], reps: int, samples: int, seed: int) -> None:
    """Samples/s per row, the rows of one kind interleaved in rotating order on the same keys each rep.
    The keys index the dataset of each row (sub-image sets are larger: the same draws, reduced modulo)."""
    times: Dict[int, List[float]] = {i: [] for i in range(len(rows))}
    for i, row in enumerate(rows):  # warm-up: LMDB environments, first decode, cache pages
        images_to_float(row.dataset[keys_for(len(row.dataset), 1, seed - 1)[0]])
    for rep in range(reps):
        order = list(range(len(rows)))
        k = rep % len(order)
        order = order[k:] + order[:k]
        draws = keys_for(1 << 30, samples, seed + rep)
        for i in order:
            ds = rows[i].dataset
            keys = [(index % len(ds), s) for index, s in draws]
            t0 = time.perf_counter()
            for key in keys:
                images_to_float(ds[key])
            times[i].append(samples / (time.perf_counter() - t0))
    for i, row in enumerate(rows):
        row.rate = statistics.median(times[i])


def mb(n: Optional[int]) -> str:
    return '-' if n is None else f'{n / 2**20:.0f} MB' if n >= 2**20 else f'{n / 2**20:.1f} MB'


def report(title: str, rows: Sequence[Row]) -> None:
    base = rows[0].rate
    print(title)
    print(f'  {"storage":<32} {"prepare":>10} {"on disk":>9} {"in RAM":>9} {"samples/s":>10} {"/ first":>8}')
    for r in rows:
        prep = '-' if r.prepare_s is None else f'{r.prepare_s:.1f} s'
        print(f'  {r.label:<32} {prep:>10} {mb(r.disk):>9} {mb(r.ram):>9} {r.rate:>10.1f} {r.rate / base:>8.2f}')


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = reps_parser(__doc__, 'small data, fewest reps: a smoke test of every row', 'interleaved reps (default 5)')
    p.add_argument('--data', default=None, help='keep the generated data here and reuse it (default: a temp dir)')
    p.add_argument('--samples', type=int, default=None,
                   help='samples per row and rep (default 40, --quick 2; clips a quarter, at least 2)')
    args = parse_reps(p, argv, default=5, quick=1)
    samples = args.samples or (2 if args.quick else 40)
    sizes = QUICK if args.quick else FULL
    crop, step = (240, 120) if args.quick else (480, 240)
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    tmp = None
    if args.data:
        data = os.path.join(args.data, 'quick') if args.quick else args.data
        os.makedirs(data, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix='bench_data_prep_')
        data = tmp
    try:
        load = os.getloadavg()[0] if hasattr(os, 'getloadavg') else float('nan')
        print(f'== bench_data_prep.py{" (quick)" if args.quick else ""}: torch {torch.__version__}, 1 thread, '
              f'{os.cpu_count()} CPUs, load average {load:.2f}; {args.reps} interleaved reps x {samples} samples')
        h, w = sizes.hr_size
        images = image_rows(data, sizes, crop, step)
        measure(images, args.reps, samples, seed=3500)
        report(f'sr x4, 192² patches from {sizes.images} HR PNGs of {w}x{h} (samples/s per worker; / the PNG folders)',
               images)
        fh, fw = sizes.frame_size
        clips = clip_rows(data, sizes)
        measure(clips, args.reps, max(2, samples // 4), seed=3600)
        report(f'clips of 6 frames, 192² patches, {fw}x{fh} frames (samples/s per worker; / the frame folders)',
               clips)
        print(f'== done {time.strftime("%H:%M:%S")}')
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
