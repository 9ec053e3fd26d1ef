"""Loader-only benchmark: the framework's training datasets against KAIR/BasicSR-style baselines.

The baselines (bench/loader_baselines.py) decode every frame whole, convert the whole frame to
float32, then crop, flip and convert colour, as KAIR/BasicSR datasets do. They draw their random
numbers in the framework's order, so before timing the script checks on a few keys that both sides
give the same tensors bit for bit (ours normalised with `t.float().div_(255.)`, as the train step
does) and prints "outputs identical" or which tensor differs.

Data (bench/loader_data.py: generated with fixed seeds under a temp dir, or kept in `--data DIR` and reused):
  - image SR patches: 12 DIV2K-like 2040×1356 HR PNGs (textured, ~12 bits/pixel like DIV2K) and
    their ×4 LR PNGs (cv2.resize INTER_AREA); dataset_type "sr" with dataroot_L, H_size 192,
    scale 4, flips + rotations;
  - VRT/RVRT clips: 2 GoPro-like clips × 14 frames, 720×1280 GT and blurred LQ (scale 1),
    num_frame 6, gt_size 192, interval_list [1]; read from the frame folders (io_backend disk),
    from an LMDB of the PNG bytes (as BasicSR stores them), from an LMDB of raw frames and with
    `cache_data` (the last two need the options; "n/a" if this tree does not have them);
  - spike+RGB clips: the same clips plus one .npy spike file per frame (20 binary planes,
    20×720×1280 uint8, 18 MiB each), spike_repr "count" with num_bins 4 and random_reverse, as
    options/vrt/006_train_vrt_videodeblurring_gopro_rgbspike.json; frame folders only (the spike
    files are read per sample from disk in every variant).
`--quick` makes less and smaller data of the same kinds (4 HR images of 512×384; clips of 7 frames
of 320×256; kept under DIR/quick with --data) and times one rep of 2 image / 1 clip samples (1 batch per
process, 1 decode, 2 / 1 profiled samples; 3 keys checked for identity), so every row runs in seconds; its
numbers are a smoke test of the code paths, not of the speed on real frame sizes.
Our datasets are built from a `datasets.train` section validated with main_train's option rules
and `data.registry.build_dataset`, as the framework builds them.

Measured per kind, the two sides interleaved rep by rep (A, B, A, B, ...), medians of the reps:
  - per worker: samples/s of `dataset[(index, seed)]` in this process, with torch and OpenCV at one
    thread, as a loader worker runs; our uint8 tensors are normalised to float here (the train step
    does that on the device; counted on our side);
  - per process: a DataLoader with 2 workers (persistent, batch 4 for images, 2 for clips) incl.
    collation and our normalisation, samples/s over a pass of fresh keys (workers already started);
  - decoders: one 720p and one 2K PNG (--quick: the smaller frames) with cv2.imdecode and
    torchvision.io.decode_png, from bytes;
  - where the time goes: a cProfile of a few samples per side, split into PNG decoding, float
    conversion, spike reading + representation and the rest;
  - cache fill: the start-up fill of `cache_data` (every frame of the set decoded into RAM), one
    decoding thread (as before the fill used threads) against the default, one per processor
    (`data.frame_cache.fill_threads`), interleaved; the files are in the page cache after the first
    rep, so this is the decoding speed the fill reaches, not a cold disk's.
The full run takes about 3 minutes on 2 cores (~20 s of it generating the data), --quick seconds.

    python bench/bench_loader.py [--quick] [--reps 5] [--data DIR] [--workers 2]
"""
import argparse
import contextlib
import cProfile
import os
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from data.registry import DATASETS, build_dataset  # noqa: E402
from common import median_seconds  # noqa: E402
from loader_baselines import BaselinePairedImages, BaselineVideoClips  # noqa: E402
from loader_data import CLIPS, FULL, QUICK, SCALE, Sizes, make_clips, make_images, make_lmdbs  # noqa: E402
from utils.errors import UserError  # noqa: E402
from utils.image import images_to_float  # noqa: E402

GOAL_CLIPS, GOAL_IMAGES = 2.0, 1.5
# Seeds of the keys the identity check uses: with the generated sizes, already the first 3 keys of each
# include both outcomes of every flip / transpose draw (and of the clip reversal in the spike rows).
CHECK_SEEDS = {'images': 704, 'clips': 700, 'spike': 700}


# --- datasets -----------------------------------------------------------------------------------------

def pngs(folder: str) -> List[str]:
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith('.png'))


def section(dataset_type: str, **given: Any) -> Dict[str, Any]:
    """A `datasets.train` section validated by the entry point's rules (defaults filled, `_where`); the
    top-level scale follows the section's."""
    from option_rules import option_rules
    from utils.options import validate
    raw = {'task': 'bench_loader', 'netG': {'net_type': 'dncnn'}, 'scale': given.get('scale', 1),
           'datasets': {'train': {'dataset_type': dataset_type, **given}}}
    return validate(raw, option_rules())['datasets']['train']


def cache_supported(dataset_type: str) -> bool:
    return 'cache_data' in DATASETS.get(dataset_type, 'dataset_type').OPTIONS


class Row:
    """One benchmark row: a baseline and our dataset (None: not supported, `why` says so)."""

    def __init__(self, kind: str, group: str, baseline: Any, ours: Any, goal: Optional[float],
                 batch: int, why: str = '', note: str = ''):
        self.kind, self.group, self.baseline, self.ours, self.goal = kind, group, baseline, ours, goal
        self.batch, self.why, self.note = batch, why, note
        self.worker: Dict[str, float] = {}
        self.process: Dict[str, float] = {}
        self.identical: Optional[bool] = None


def build_rows(data: str, only: Sequence[str], sizes: Sizes) -> List[Row]:
    rows: List[Row] = []

    def ours_or_na(make: Callable[[], Any], supported: bool, what: str) -> Tuple[Any, str]:
        if not supported:
            return None, f'n/a (not supported: {what})'
        try:
            t0 = time.perf_counter()
            ds = make()
            return ds, f'built in {time.perf_counter() - t0:.1f} s'
        except (UserError, TypeError, KeyError) as e:
            return None, f'n/a (not supported: {str(e).splitlines()[0][:120]})'

    if 'images' in only:
        div2k = make_images(data, sizes)
        given = dict(dataroot_H=os.path.join(div2k, 'HR'), dataroot_L=os.path.join(div2k, 'LR_x4'), H_size=192,
                     scale=SCALE, use_hflip=True, use_rot=True, dataloader_batch_size=4)
        base = BaselinePairedImages(pngs(given['dataroot_H']), pngs(given['dataroot_L']), 192, SCALE, True, True)
        rows.append(Row('image patches (sr x4, 192), files', 'images', base,
                        build_dataset(section('sr', **given)), GOAL_IMAGES, 4))
        ours, why = ours_or_na(lambda: build_dataset(section('sr', **given, cache_data=True)),
                               cache_supported('sr'), 'cache_data')
        rows.append(Row('image patches, ours cache_data', 'images', base, ours, GOAL_IMAGES, 4,
                        why=why if ours is None else '', note=why if ours is not None else ''))

    if 'clips' in only or 'spike' in only:
        gopro = make_clips(data, sizes)
        clip_opts = dict(dataroot_gt=os.path.join(gopro, 'train_GT'),
                         dataroot_lq=os.path.join(gopro, 'train_GT_blurred'),
                         meta_info_file=os.path.join(gopro, 'meta_info_GoPro_train_GT.txt'), filename_tmpl='06d',
                         filename_ext='png', num_frame=6, gt_size=192, scale=1, interval_list=[1],
                         random_reverse=False, use_hflip=True, use_rot=True, dataloader_batch_size=2)
        vtype = 'VideoRecurrentTrainDataset'
        cache_ok = cache_supported(vtype)

    if 'clips' in only:
        disk = section(vtype, **clip_opts)
        base_disk = BaselineVideoClips(disk)
        rows.append(Row('clips, frame folders (disk)', 'clips', base_disk, build_dataset(disk), GOAL_CLIPS, 2))
        lmdbs = make_lmdbs(gopro)
        lmdb_png = section(vtype, **{**clip_opts, 'dataroot_gt': lmdbs['png_gt'], 'dataroot_lq': lmdbs['png_lq'],
                                        'io_backend': {'type': 'lmdb'}})
        base_lmdb = BaselineVideoClips({**lmdb_png, 'dataroot_gt': lmdbs['base_gt'], 'dataroot_lq': lmdbs['base_lq']})
        rows.append(Row('clips, lmdb (PNG bytes)', 'clips', base_lmdb, build_dataset(lmdb_png), GOAL_CLIPS, 2))
        ours, why = ours_or_na(lambda: build_dataset(section(vtype, **{
            **clip_opts, 'dataroot_gt': lmdbs['raw_gt'], 'dataroot_lq': lmdbs['raw_lq'],
            'io_backend': {'type': 'lmdb'}})), 'raw_gt' in lmdbs, 'make_lmdb_from_folder(raw=True)')
        rows.append(Row('clips, ours lmdb raw frames / base lmdb PNG', 'clips', base_lmdb, ours, GOAL_CLIPS, 2,
                        why=why if ours is None else ''))
        ours, why = ours_or_na(lambda: build_dataset(section(vtype, **clip_opts, cache_data=True)), cache_ok,
                               'cache_data')
        rows.append(Row('clips, ours cache_data / base frame folders', 'clips', base_disk, ours, GOAL_CLIPS, 2,
                        why=why if ours is None else '', note=why if ours is not None else ''))

    if 'spike' in only:
        spike_opts = dict(clip_opts, dataroot_spike=os.path.join(gopro, 'train_spike'), spike_format='npy',
                          spike_repr='count', spike_repr_params={'num_bins': 4}, random_reverse=True)
        spk = section(vtype, **spike_opts)
        base_spk = BaselineVideoClips(spk)
        rows.append(Row('spike+RGB clips, frame folders', 'spike', base_spk, build_dataset(spk), None, 2))
        ours, why = ours_or_na(lambda: build_dataset(section(vtype, **spike_opts, cache_data=True)), cache_ok,
                               'cache_data')
        rows.append(Row('spike+RGB clips, ours cache_data', 'spike', base_spk, ours, None, 2,
                        why=why if ours is None else '', note=why if ours is not None else ''))
    return rows


# --- measurement --------------------------------------------------------------------------------------

def keys_for(n_items: int, count: int, seed: int) -> List[Tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randrange(n_items), rng.randrange(2 ** 31)) for _ in range(count)]


def normalised(item: Dict[str, Any]) -> Dict[str, Any]:
    """What the train step does to a batch: uint8 image tensors → float32 in [0, 1]."""
    return images_to_float(item)


def check_identical(row: Row, keys: Sequence[Tuple[int, int]]) -> List[str]:
    """Differences between baseline and ours on `keys`, one line each (empty: bitwise identical)."""
    problems = []
    for key in keys:
        b, o = row.baseline[key], normalised(row.ours[key])
        for name in ('L', 'H'):
            tb, to = b[name], o[name]
            if tb.shape != to.shape or tb.dtype != to.dtype:
                problems.append(f'key {key} tensor {name}: baseline {tuple(tb.shape)} {tb.dtype}, '
                                f'ours {tuple(to.shape)} {to.dtype} (after normalisation)')
            elif not torch.equal(tb, to):
                diff = (tb - to).abs()
                where = ''
                if diff.dim() == 4:  # T×C×H×W: which channels differ
                    chans = sorted(set(int(c) for c in torch.nonzero(diff.amax(dim=(0, 2, 3)) > 0).flatten()))
                    where = f', channels {chans}'
                problems.append(f'key {key} tensor {name}: {int((diff > 0).sum())} of {diff.numel()} values differ, '
                                f'max |diff| {float(diff.max()):.3g}{where}')
    return problems


def per_worker(row: Row, reps: int, samples: int, seed: int) -> None:
    """Samples/s of `dataset[key]` in this process, the two sides interleaved rep by rep."""
    sides = {'baseline': lambda key: row.baseline[key], 'ours': lambda key: normalised(row.ours[key])}
    n = len(row.ours)
    for get in sides.values():  # warm-up (LMDB environments, first decode)
        get(keys_for(n, 1, seed - 1)[0])
    times: Dict[str, List[float]] = {k: [] for k in sides}
    for rep in range(reps):
        keys = keys_for(n, samples, seed + rep)
        order = list(sides) if rep % 2 == 0 else list(sides)[::-1]
        for side in order:
            t0 = time.perf_counter()
            for key in keys:
                sides[side](key)
            times[side].append(samples / (time.perf_counter() - t0))
    row.worker = {k: statistics.median(v) for k, v in times.items()}


class KeySampler:
    """The keys of the next pass (set before each pass): a DataLoader sampler yielding training keys."""

    def __init__(self) -> None:
        self.keys: List[Tuple[int, int]] = []

    def __iter__(self):
        return iter(list(self.keys))

    def __len__(self) -> int:
        return len(self.keys)


def per_process(row: Row, reps: int, batches: int, workers: int, seed: int) -> None:
    """Samples/s through a DataLoader (persistent workers, started before timing), interleaved."""
    loaders, samplers = {}, {}
    for side in ('baseline', 'ours'):
        samplers[side] = KeySampler()
        loaders[side] = DataLoader(getattr(row, side), batch_size=row.batch, sampler=samplers[side],
                                   num_workers=workers, persistent_workers=workers > 0,
                                   prefetch_factor=2 if workers > 0 else None, drop_last=True)
    n = len(row.ours)
    count = batches * row.batch

    def run(side: str, keys: List[Tuple[int, int]]) -> float:
        samplers[side].keys = keys
        t0 = time.perf_counter()
        for batch in loaders[side]:
            if side == 'ours':
                normalised(batch)
        return len(keys) / (time.perf_counter() - t0)

    try:
        for side in loaders:  # start the workers, warm them up
            run(side, keys_for(n, max(workers, 1) * row.batch, seed - 1))
        times: Dict[str, List[float]] = {k: [] for k in loaders}
        for rep in range(reps):
            keys = keys_for(n, count, seed + rep)
            order = list(loaders) if rep % 2 == 0 else list(loaders)[::-1]
            for side in order:
                times[side].append(run(side, keys))
        row.process = {k: statistics.median(v) for k, v in times.items()}
    finally:
        for loader in loaders.values():
            it = getattr(loader, '_iterator', None)
            if it is not None:
                it._shutdown_workers()


def fill_rows(rows: Sequence[Row], reps: int) -> List[Tuple[str, int, float, float, int]]:
    """(kind, frames, frames/s with 1 thread, frames/s with fill_threads(), threads) of the cache fill of each
    cached row's frames, the two interleaved rep by rep (a fresh cache each time, freed before the next)."""
    from data.frame_cache import FrameCache, fill_threads
    from utils.image import imread_uint
    out = []
    threads = fill_threads()
    for row in rows:
        if row.ours is None or getattr(row.ours, 'cache', None) is None:
            continue
        shapes = {path: shape for path, (_, shape, _) in row.ours.cache.index.items()}
        dtypes = {path: dtype for path, (_, _, dtype) in row.ours.cache.index.items()}
        times: Dict[int, List[float]] = {1: [], threads: []}
        for rep in range(reps):
            for t in ((1, threads) if rep % 2 == 0 else (threads, 1)):
                t0 = time.perf_counter()
                cache = FrameCache(shapes, lambda path: imread_uint(path, 3, bgr=True), 'bench', dtypes=dtypes,
                                   threads=t)
                times[t].append(len(shapes) / (time.perf_counter() - t0))
                del cache
        out.append((row.kind, len(shapes), statistics.median(times[1]), statistics.median(times[threads]), threads))
    return out


def decoder_rows(files: Dict[str, str], reps: int) -> Dict[str, Dict[str, float]]:
    """Seconds per decode of each file, cv2.imdecode vs torchvision.io.decode_png (interleaved), plus the
    baseline's whole-frame float conversion."""
    import torchvision.io
    out: Dict[str, Dict[str, float]] = {}
    for label, path in files.items():
        with open(path, 'rb') as f:
            data = f.read()
        arr = np.frombuffer(data, np.uint8)
        tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        img = cv2.imdecode(arr, cv2.IMREAD_COLOR)
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            sides = {'cv2': lambda: cv2.imdecode(arr, cv2.IMREAD_COLOR),
                     'torchvision': lambda: torchvision.io.decode_png(tensor)}
            for fn in sides.values():
                fn()
            times: Dict[str, List[float]] = {k: [] for k in sides}
            for _ in range(reps):
                for k, fn in sides.items():
                    times[k].append(median_seconds(fn, 1))
        out[label] = {k: statistics.median(v) for k, v in times.items()}
        out[label]['float'] = median_seconds(lambda: img.astype(np.float32) / 255., reps)
        out[label]['bytes'] = len(data)
        out[label]['shape'] = img.shape
    return out


FLOAT_CALLS = ("<method 'astype' of 'numpy.ndarray' objects>", "<method 'float' of 'torch._C.TensorBase' objects>",
               "<method 'div_' of 'torch._C.TensorBase' objects>", 'imfrombytes')


def profile_split(get: Callable[[Any], Any], keys: Sequence[Any]) -> Dict[str, float]:
    """Seconds of `get` over `keys` (under cProfile) in PNG decoding (cv2.imdecode), float conversion (numpy
    astype and the division in the baseline's imfrombytes; torch .float()/.div_()), spike reading + representation,
    and the rest."""
    prof = cProfile.Profile()
    prof.enable()
    for key in keys:
        get(key)
    prof.disable()
    stats = pstats.Stats(prof).stats  # (file, line, name) -> (calls, ncalls, tottime, cumtime, callers)
    split = {'decode': 0.0, 'float': 0.0, 'spikes': 0.0}
    total = 0.0
    for (file, _line, name), (_cc, _nc, tottime, cumtime, _callers) in stats.items():
        if name == "<method 'disable' of '_lsprof.Profiler' objects>":
            continue
        total += tottime
        if name == '<imdecode>':
            split['decode'] += tottime
        elif name in FLOAT_CALLS:
            split['float'] += tottime
        elif (name == '_spike' and file.endswith('loader_baselines.py')) or \
                (name == 'decode' and file.endswith('spike.py')):
            split['spikes'] += cumtime
    split['total'] = total
    split['rest'] = max(total - split['decode'] - split['float'] - split['spikes'], 0.0)
    return split


# --- report -------------------------------------------------------------------------------------------

def machine() -> str:
    try:
        load = ', '.join(f'{x:.2f}' for x in os.getloadavg())
    except OSError:
        load = '?'
    cpu = '?'
    with contextlib.suppress(OSError, StopIteration):
        with open('/proc/cpuinfo') as f:
            cpu = next(ln.split(':', 1)[1].strip() for ln in f if ln.startswith('model name'))
    return (f'machine: {cpu}, cpu count {os.cpu_count()}, torch {torch.__version__} threads '
            f'{torch.get_num_threads()}, cv2 {cv2.__version__} threads {cv2.getNumThreads()}, '
            f'load avg {load}')


def print_table(rows: Sequence[Row], which: str, title: str) -> None:
    print(f'\n{title}')
    print(f'  {"kind":46s} | {"baseline/s":>10s} | {"ours/s":>8s} | {"ours/base":>9s} | goal')
    for row in rows:
        goal = f'>= {row.goal:.1f}' if row.goal else '-'
        if row.ours is None:
            print(f'  {row.kind:46s} | {"":>10s} | {row.why}')
            continue
        r = getattr(row, which)
        if not r:
            continue
        ratio = r['ours'] / r['baseline']
        mark = '' if not row.goal else (' met' if ratio >= row.goal else ' NOT met')
        print(f'  {row.kind:46s} | {r["baseline"]:10.2f} | {r["ours"]:8.2f} | {ratio:9.2f} | {goal}{mark}')


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--quick', action='store_true', help='smoke run: 1 rep, fewest samples, small data')
    p.add_argument('--reps', type=int, default=None, help='interleaved reps per row (default 5; --quick 1)')
    p.add_argument('--data', default=None, help='generate the data here and keep it (reused when complete); '
                                                'default: a temp dir, deleted at the end')
    p.add_argument('--workers', type=int, default=2, help='DataLoader workers for the per-process rows')
    p.add_argument('--only', nargs='+', default=['images', 'clips', 'spike'], choices=['images', 'clips', 'spike'],
                   help='kinds to run')
    p.add_argument('--no-loader', action='store_true', help='skip the per-process (DataLoader) rows')
    args = p.parse_args()
    reps = args.reps or (1 if args.quick else 5)
    # samples per rep (per worker), batches per rep (per process), keys checked for identity
    n_img, n_clip = (2, 1) if args.quick else (12, 4)
    b_img, b_clip = (1, 1) if args.quick else (6, 4)
    n_check = 3 if args.quick else 6

    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    print(f'== bench_loader.py {"(quick) " if args.quick else ""}{time.strftime("%Y-%m-%d %H:%M:%S")}')
    print(machine())
    tmp = None
    data = args.data
    if data is None:
        tmp = tempfile.mkdtemp(prefix='bench_loader_')
        data = tmp
    if args.quick:
        data = os.path.join(data, 'quick')  # never mixed with the full-size data of a kept --data DIR
    os.makedirs(data, exist_ok=True)
    try:
        t0 = time.perf_counter()
        rows = build_rows(data, args.only, QUICK if args.quick else FULL)
        print(f'data under {data} ready, datasets built: {time.perf_counter() - t0:.1f} s')
        for row in rows:
            if row.note:
                print(f'  {row.kind}: ours {row.note}')

        print(f'\nidentity (baseline float tensors == ours normalised, {n_check} keys per row):')
        all_same = True
        for row in rows:
            if row.ours is None:
                continue
            problems = check_identical(row, keys_for(len(row.ours), n_check, CHECK_SEEDS[row.group]))
            row.identical = not problems
            all_same = all_same and not problems
            print(f'  {row.kind:46s} ' + ('outputs identical' if not problems else 'OUTPUTS DIFFER:'))
            for line in problems:
                print(f'      {line}')
        print('outputs identical' if all_same else 'OUTPUTS DIFFER (see above): the timings below compare unequal work')

        for i, row in enumerate(rows):
            if row.ours is not None:
                n = n_img if row.group == 'images' else n_clip
                per_worker(row, reps, n, 1000 * (i + 1))
        print_table(rows, 'worker', f'per worker (dataset[(index, seed)] in one process, 1 thread; median of {reps} '
                                    f'interleaved reps of {n_img} image / {n_clip} clip samples; samples/s):')

        if not args.no_loader:
            for i, row in enumerate(rows):
                if row.ours is not None:
                    b = b_img if row.group == 'images' else b_clip
                    per_process(row, reps, b, args.workers, 5000 * (i + 1))
            print_table(rows, 'process', f'per process (DataLoader, {args.workers} workers, batch 4 images / 2 clips, '
                                         f'{b_img} / {b_clip} batches per rep, median of {reps} reps; samples/s):')

        files = {}
        if 'images' in args.only:
            files['HR PNG'] = os.path.join(data, 'div2k', 'HR', '0001.png')
            files['x4 LR PNG'] = os.path.join(data, 'div2k', 'LR_x4', '0001x4.png')
        if 'clips' in args.only or 'spike' in args.only:
            files['GT frame PNG'] = os.path.join(data, 'gopro', 'train_GT', CLIPS[0], '000000.png')
            files['blurred LQ frame PNG'] = os.path.join(data, 'gopro', 'train_GT_blurred', CLIPS[0], '000000.png')
        dec = decoder_rows(files, max(reps, 5) if not args.quick else 1)
        print('\ndecoders (one frame from bytes, median; ms):')
        print(f'  {"frame":22s} | {"size":>9s} | {"bits/px":>7s} | {"cv2.imdecode":>12s} | {"tv decode_png":>13s} | '
              f'{"tv/cv2":>6s} | whole-frame astype(float32)/255')
        for label, d in dec.items():
            h, w = d['shape'][:2]
            print(f'  {label:22s} | {w:4d}x{h:<4d} | {d["bytes"] * 8 / (h * w):7.1f} | {d["cv2"] * 1e3:12.2f} | '
                  f'{d["torchvision"] * 1e3:13.2f} | {d["torchvision"] / d["cv2"]:6.2f} | {d["float"] * 1e3:.2f}')

        n_prof = (2, 1) if args.quick else (8, 4)
        print(f'\nwhere a sample\'s time goes (per worker, cProfile of {n_prof[0]} image / {n_prof[1]} clip samples '
              f'per side; shares of the profiled time; "float": conversions to float incl. our normalisation; '
              f'"spikes": spike files read + representation):')
        for row in rows:
            if row.ours is None:
                continue
            keys = keys_for(len(row.ours), n_prof[0] if row.group == 'images' else n_prof[1], 31337)
            parts = []
            names = ('decode', 'float', 'spikes', 'rest') if row.group == 'spike' else ('decode', 'float', 'rest')
            for side, get in (('baseline', lambda key: row.baseline[key]),
                              ('ours', lambda key: normalised(row.ours[key]))):
                split = profile_split(get, keys)
                parts.append(f'{side} {split["total"] * 1e3 / len(keys):6.1f} ms: ' + ', '.join(
                    f'{name} {100 * split[name] / split["total"]:3.0f} %' for name in names))
            print(f'  {row.kind:46s} ' + '; '.join(parts))
        fills = fill_rows(rows, reps)
        print(f'\ncache fill (cache_data at start-up: every frame decoded into RAM; median of {reps} interleaved '
              f'reps; frames/s):')
        print(f'  {"kind":46s} | {"frames":>6s} | {"1 thread/s":>10s} | {"default/s":>9s} | default / 1 thread')
        for kind, frames, one, many, threads in fills:
            print(f'  {kind:46s} | {frames:6d} | {one:10.2f} | {many:9.2f} | {many / one:.2f} ({threads} threads)')
        print(f'\n{machine()}')
        print(f'== done {time.strftime("%H:%M:%S")}')
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
