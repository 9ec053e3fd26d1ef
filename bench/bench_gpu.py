"""GPU training speed of KAIR configurations: main_train.py with each option row against a bare PyTorch loop.

One command on a CUDA machine: it generates the images, measures the card's bf16 matmul rate, then trains
each configuration for `--iters` iterations in fresh processes and prints a table last:

  - DnCNN-17 gray (KAIR's train_dncnn), batch 64 of 40x40, sigma 25;
  - MSRResNet x4 (KAIR's train_msrresnet_psnr), batch 32 of 96x96;
  - SwinIR classical x2 (KAIR's train_swinir_sr_classical), batch 8 of 96x96.

Rows: `bare` is the loop a user would write the straightforward way (cv2 decode, random crop, float,
DataLoader with the same workers, the same network class, Adam, L1, one host sync per print), in a
process of its own; `ours ...` are main_train.py runs of the repository's full option file with KAIR's
batch on one process and the row's options (`default`, `bf16` = train.amp bf16 + channels_last,
`cache` = datasets.train.cache_data, `compile` = bf16 + train.compile). Per row: ms per iteration and
data wait per iteration over the iterations after `--warmup` (main_train.py's history.jsonl; the bare
loop's own timers, synchronised at both ends), peak GPU memory, the achieved TFLOP/s from the
forward+backward FLOPs of one iteration (torch.utils.flop_counter) and its share of the measured bf16
matmul rate, and the row's time over the bare loop's.

Logs of every run are under `--out` (default: a temporary folder). `--quick` (any device, CPU included)
trains tiny versions of the same networks on 32² patches (DnCNN 40²) of a few small images for 2 iterations
(one of them warm-up), without the compile row, the main_train.py rows two at a time: a smoke test of every
code path, not a measurement.

    python bench/bench_gpu.py [--quick] [--out DIR] [--iters 200] [--warmup 50] [--images 800] [--workers 8]

`--row CONFIG ROW --out DIR [same arguments]` measures one row of the table (`bare` or a row name) in this
process and prints `RESULT {json}` (ms, data_ms, mem_gib; the bare row adds flops, the forward+backward
FLOPs of one iteration); `--data DIR` only generates the images. bench/gpu_check.py runs the bare row so
and the other rows' main_train.py commands (`ours_command`) directly, each in a process of its own.
"""
import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
sys.path.insert(0, ROOT)

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import child_env, entry, quick_jobs, side_by_side  # noqa: E402

# name: (option file, KAIR's batch, patch, overrides for --quick: tiny networks, small patches)
CONFIGS: Dict[str, Tuple[str, int, int, Dict[str, Any]]] = {
    'dncnn': ('options/zoo/full/train_dncnn.json', 64, 40, {'netG.nb': 3, 'netG.nc': 8}),
    'msrresnet': ('options/zoo/full/train_msrresnet0.json', 32, 96,
                  {'netG.nb': 2, 'netG.nc': 8, 'datasets.train.H_size': 32}),
    'swinir': ('options/zoo/full/train_swinir_sr_classical.json', 8, 96,
               {'netG.depths': [2], 'netG.num_heads': [2], 'netG.embed_dim': 12, 'datasets.train.H_size': 32}),
}
ROWS: Dict[str, Dict[str, Any]] = {
    'default': {},
    'bf16': {'train.amp': 'bf16', 'train.channels_last': True},
    'cache': {'datasets.train.cache_data': True},
    'compile': {'train.amp': 'bf16', 'train.compile': True},
}
CONFIG_ROWS = {'dncnn': ['default', 'cache', 'bf16'], 'msrresnet': ['default', 'cache', 'bf16'],
               'swinir': ['default', 'bf16', 'compile']}


def make_images(folder: str, count: int, size: int) -> str:
    """`count` size x size colour PNGs with structure at several scales (fixed seed); kept when complete."""
    done = os.path.join(folder, '.complete')
    if os.path.exists(done):
        return folder
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        img = np.zeros((size, size, 3), np.float32)
        for scale in (4, 16, 64):
            small = rng.random((max(size // scale, 2), max(size // scale, 2), 3), dtype=np.float32)
            img += cv2.resize(small, (size, size), interpolation=cv2.INTER_CUBIC) / 3
        cv2.imwrite(os.path.join(folder, f'{i:04d}.png'), np.clip(img * 255, 0, 255).astype(np.uint8))
    open(done, 'w').close()
    return folder


def matmul_tflops(device: torch.device, n: int) -> float:
    """bf16 n x n matmul rate, TFLOP/s (the card's practical peak for the percentage column)."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    _sync(device)
    reps, t0 = 10, time.perf_counter()
    for _ in range(reps):
        a @ b
    _sync(device)
    return 2 * n ** 3 * reps / (time.perf_counter() - t0) / 1e12


def _sync(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def _options(config: str, quick: bool, data: str, extra: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    """The validated options of a configuration as the bench trains it, and the --set list that makes them."""
    from option_rules import read_options
    path, batch, patch, tiny = CONFIGS[config]
    sets = {'datasets.train.dataroot_H': os.path.join(data, 'train'), 'datasets.test.dataroot_H': os.path.join(data, 'test'),
            'datasets.train.dataloader_batch_size': 2 if quick else batch, 'datasets.train.H_size': patch,
            **(tiny if quick else {}), **extra}
    args = [f'{k}={json.dumps(v)}' for k, v in sets.items()]
    return read_options(os.path.join(ROOT, path), args), args


def flops_per_iteration(opt: Dict[str, Any], device: torch.device) -> float:
    """Forward + backward FLOPs of one training batch through netG (torch.utils.flop_counter)."""
    from torch.utils.flop_counter import FlopCounterMode

    from models.registry import build_network
    net = build_network(opt['netG']).to(device)
    ds = opt['datasets']['train']
    patch, scale = ds['H_size'], opt['scale']
    x = torch.rand(ds['dataloader_batch_size'], opt['n_channels'], patch // scale, patch // scale, device=device)
    counter = FlopCounterMode(display=False)
    with counter:
        net(x).abs().mean().backward()
    return float(counter.get_total_flops())


def ours_task(config: str, row: str) -> str:
    """The task name of a main_train.py row: its run is <out>/runs/<task>."""
    return f'{config}_{row}'


def ours_command(config: str, row: str, quick: bool, data: str, out: str, iters: int, warmup: int,
                 workers: int) -> Tuple[List[str], str]:
    """The main_train.py command of a row (run it from any folder) and its task: the run is `out`/runs/<task>."""
    _, sets = _options(config, quick, data, {**ROWS[row], 'datasets.train.dataloader_num_workers': workers})
    task = ours_task(config, row)
    sets += [f'path.root={json.dumps(os.path.join(out, "runs"))}', f'task={json.dumps(task)}',
             f'train.total_iter={iters}', f'train.checkpoint_print={max(1, min(10, warmup))}',
             'train.checkpoint_save=1000000000', 'train.checkpoint_test=1000000000', 'train.E_decay=0.999',
             'logging.use_tensorboard=false', 'train.manual_seed=1']
    cmd = [sys.executable, os.path.join(ROOT, 'main_train.py'), '--opt', os.path.join(ROOT, CONFIGS[config][0]),
           '--fresh'] + [a for s in sets for a in ('--set', s)]
    return cmd, task


def ours_numbers(out: str, task: str, warmup: int) -> Dict[str, float]:
    """ms and data wait per iteration after `warmup`, and the peak GPU memory, from a run's history.jsonl."""
    rows = [json.loads(line) for line in open(os.path.join(out, 'runs', task, 'history.jsonl'))]
    steady = [r for r in rows if r.get('kind') == 'train' and r['iter'] > warmup] or \
        [r for r in rows if r.get('kind') == 'train']
    return {'ms': 1e3 * float(np.mean([r['iter_time'] for r in steady])),
            'data_ms': 1e3 * float(np.mean([r['data_time'] for r in steady])),
            'mem_gib': max((r.get('gpu_mem_gib', float('nan')) for r in rows if r.get('kind') == 'train'),
                           default=float('nan'))}


def run_ours(config: str, row: str, quick: bool, data: str, out: str, iters: int, warmup: int,
             workers: int, env: Optional[Dict[str, str]] = None) -> Dict[str, float]:
    """A main_train.py process with the row's options; timings from its history.jsonl after `warmup`."""
    cmd, task = ours_command(config, row, quick, data, out, iters, warmup, workers)
    log = os.path.join(out, f'{task}.log')
    with open(log, 'w') as f:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=3600, env=env)
    if proc.returncode:
        raise RuntimeError(f'{task}: main_train.py exited {proc.returncode}; see {log}')
    return ours_numbers(out, task, warmup)


class BareImages(torch.utils.data.Dataset):
    """The straightforward dataset: cv2 decode, random crop, LR by cv2 bicubic or noise, float CHW."""

    def __init__(self, folder: str, patch: int, scale: int, channels: int, sigma: float):
        self.paths = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith('.png'))
        self.patch, self.scale, self.channels, self.sigma = patch, scale, channels, sigma

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, torch.Tensor]:
        flag = cv2.IMREAD_GRAYSCALE if self.channels == 1 else cv2.IMREAD_COLOR
        img = cv2.imread(self.paths[i], flag)
        img = img[:, :, None] if img.ndim == 2 else img[:, :, ::-1]
        top, left = np.random.randint(0, img.shape[0] - self.patch + 1, 2)
        hr = np.ascontiguousarray(img[top:top + self.patch, left:left + self.patch]).astype(np.float32) / 255
        if self.scale > 1:
            small = self.patch // self.scale
            lr = cv2.resize(hr, (small, small), interpolation=cv2.INTER_CUBIC).reshape(small, small, -1)
        else:
            lr = hr + np.random.randn(*hr.shape).astype(np.float32) * self.sigma / 255
        return (torch.from_numpy(np.ascontiguousarray(lr.transpose(2, 0, 1))),
                torch.from_numpy(np.ascontiguousarray(hr.transpose(2, 0, 1))))


def run_bare(config: str, quick: bool, data: str, iters: int, warmup: int, workers: int,
             device: torch.device) -> Dict[str, float]:
    """The hand-written loop (in this process); ms and data wait per iteration after `warmup`."""
    from models.registry import build_network
    opt, _ = _options(config, quick, data, {})
    ds = opt['datasets']['train']
    torch.manual_seed(1)
    net = build_network(opt['netG']).to(device).train()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-4)
    dataset = BareImages(os.path.join(data, 'train'), ds['H_size'], opt['scale'], opt['n_channels'], 25.0)
    loader = torch.utils.data.DataLoader(dataset, batch_size=ds['dataloader_batch_size'], shuffle=True,
                                         num_workers=workers, pin_memory=device.type == 'cuda', drop_last=True,
                                         persistent_workers=workers > 0)
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
    batches, done, data_s = iter(loader), 0, 0.0
    t_start = None
    print_every = max(1, min(10, warmup))
    while done < iters:
        t0 = time.perf_counter()
        try:
            lr, hr = next(batches)
        except StopIteration:
            batches = iter(loader)
            lr, hr = next(batches)
        if done >= warmup:
            data_s += time.perf_counter() - t0
        lr, hr = lr.to(device, non_blocking=True), hr.to(device, non_blocking=True)
        loss = torch.nn.functional.l1_loss(net(lr), hr)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        done += 1
        if done % print_every == 0:
            loss.item()  # the print step's read, as any training script logs its loss
        if done == warmup:
            _sync(device)
            t_start = time.perf_counter()
    _sync(device)
    measured = max(iters - warmup, 1)
    elapsed = time.perf_counter() - (t_start if t_start is not None else time.perf_counter())
    mem = torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == 'cuda' else float('nan')
    return {'ms': 1e3 * elapsed / measured, 'data_ms': 1e3 * data_s / measured, 'mem_gib': mem}


def add_size_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments that size a run, shared by the whole table and `--row`."""
    p.add_argument('--quick', action='store_true', help='tiny networks, a few small images, 2 iterations (any device)')
    p.add_argument('--iters', type=int, default=None, help='iterations per run (default 200; --quick 2)')
    p.add_argument('--warmup', type=int, default=None, help='iterations left out of the timings (default 50; --quick 1)')
    p.add_argument('--images', type=int, default=None, help='training images (default 800 of 480x480; --quick 8 of 112)')
    p.add_argument('--workers', type=int, default=None, help='loader workers of every run (default 8; --quick 1)')


def sizes(args: argparse.Namespace) -> Tuple[int, int, int, int]:
    """(iterations, warm-up iterations, images, workers) as given, else the defaults of the mode."""
    quick = args.quick
    return (args.iters or (2 if quick else 200), args.warmup if args.warmup is not None else (1 if quick else 50),
            args.images or (8 if quick else 800), args.workers if args.workers is not None else (1 if quick else 8))


def prepare_data(out: str, images: int, quick: bool) -> str:
    """The generated training and test images under `out`/data (kept there once complete)."""
    data = os.path.join(out, 'data')
    make_images(os.path.join(data, 'train'), images, 112 if quick else 480)
    make_images(os.path.join(data, 'test'), 2, 112 if quick else 480)
    return data


def measure(config: str, row: str, quick: bool, data: str, out: str, iters: int, warmup: int, workers: int,
            device: torch.device) -> Dict[str, float]:
    """One row of the table: the bare loop in this process, or a main_train.py run with the row's options."""
    if row == 'bare':
        return run_bare(config, quick, data, iters, warmup, workers, device)
    return run_ours(config, row, quick, data, out, iters, warmup, workers)


def row_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description='one row of bench_gpu.py\'s table')
    p.add_argument('config', choices=list(CONFIGS))
    p.add_argument('row', choices=['bare', *ROWS])
    p.add_argument('--out', required=True, help='data and runs here (the images are generated once, then kept)')
    add_size_arguments(p)
    return p


def row_main(argv: List[str]) -> int:
    """`--row CONFIG ROW`: one row, measured in this process; prints `RESULT {json}` (with the FLOPs of one
    iteration for the bare row)."""
    args = row_parser().parse_args(argv)
    iters, warmup, images, workers = sizes(args)
    device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    os.makedirs(args.out, exist_ok=True)
    data = prepare_data(args.out, images, args.quick)
    result = measure(args.config, args.row, args.quick, data, args.out, iters, warmup, workers, device)
    if args.row == 'bare':
        opt, _ = _options(args.config, args.quick, data, {})
        result['flops'] = flops_per_iteration(opt, device)
    print('RESULT ' + json.dumps(result), flush=True)
    return 0


def data_main(argv: List[str]) -> int:
    """`--data OUT [--images N] [--quick]`: only generate the images of `--row` (kept once complete)."""
    p = argparse.ArgumentParser(description='the images of bench_gpu.py')
    p.add_argument('out')
    add_size_arguments(p)
    args = p.parse_args(argv)
    prepare_data(args.out, sizes(args)[2], args.quick)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    add_size_arguments(p)
    p.add_argument('--out', default=None, help='logs and data here (default: a temporary folder, removed)')
    p.add_argument('--only', nargs='+', default=list(CONFIGS), choices=list(CONFIGS))
    args = p.parse_args()
    quick = args.quick
    iters, warmup, images, workers = sizes(args)
    jobs = quick_jobs() if quick else 1  # main_train.py rows: one at a time, --quick's two at a time
    device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    if device.type != 'cuda' and not quick:
        print('bench_gpu.py: no CUDA GPU here, nothing measured (--quick runs its smoke test on any device)')
        return 0
    out = args.out or tempfile.mkdtemp(prefix='bench_gpu_')
    os.makedirs(out, exist_ok=True)
    try:
        data = prepare_data(out, images, quick)
        peak = matmul_tflops(device, 512 if quick else 8192)
        name = torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'
        print(f'== bench_gpu.py{" (quick)" if quick else ""}: {name}, torch {torch.__version__}, {iters} iterations '
              f'({warmup} warm-up), {images} images, {workers} workers; bf16 matmul {peak:.1f} TFLOP/s', flush=True)
        flops: Dict[str, float] = {}
        results: Dict[str, Dict[str, Dict[str, float]]] = {}
        for config in args.only:  # the bare loops, in this process
            opt, _ = _options(config, quick, data, {})
            flops[config] = flops_per_iteration(opt, device)
            results[config] = {'bare': measure(config, 'bare', quick, data, out, iters, warmup, workers, device)}
            print(f'{config}: bare {results[config]["bare"]["ms"]:.1f} ms/iter', flush=True)
        # then the main_train.py rows, each a process of its own: one at a time (--quick: two at a time)
        runs = [(config, row) for config in args.only for row in CONFIG_ROWS[config]
                if not (quick and row == 'compile')]
        env = child_env(jobs)
        done = side_by_side([functools.partial(run_ours, config, row, quick, data, out, iters, warmup, workers, env)
                             for config, row in runs], jobs)
        for (config, row), result in zip(runs, done):
            results[config][f'ours {row}'] = result
            print(f'{config}: ours {row} {result["ms"]:.1f} ms/iter', flush=True)
        table = []
        for config in args.only:
            bare = results[config]['bare']['ms']
            for row, r in results[config].items():
                tflops = flops[config] / (r['ms'] / 1e3) / 1e12
                table.append((config, row, r['ms'], r['data_ms'], r['mem_gib'], tflops, 100 * tflops / peak,
                              r['ms'] / bare))
        print(f'\n{"config":<10} {"row":<15} {"ms/iter":>9} {"data ms":>8} {"peak GiB":>9} {"TFLOP/s":>8} '
              f'{"% bf16 peak":>11} {"/ bare":>7}')
        for config, row, ms, data_ms, mem, tflops, share, ratio in table:
            print(f'{config:<10} {row:<15} {ms:9.1f} {data_ms:8.1f} {mem:9.2f} {tflops:8.3f} {share:11.2f} '
                  f'{ratio:7.2f}')
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == '__main__':
    entry(main, row=row_main, data=data_main)
