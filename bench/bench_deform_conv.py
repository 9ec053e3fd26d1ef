"""CPU benchmark: torchvision's deform_conv2d kernel vs the pure-PyTorch path in models/networks/layers/deform_conv.py.

Times forward+backward (grads w.r.t. input, offset, mask, weight, bias) for VRT-like DCN shapes,
alternating the two implementations rep by rep so that machine load affects both alike, and reports
the median. Peak memory is the growth of the process's peak RSS during the runs (Linux: VmHWM after resetting it
through /proc/self/clear_refs, so the import-time peak does not hide it), measured in a fresh
subprocess per implementation so the two cannot mask each other (the three run side by side, after
the timing: only their own peak counts).

    python bench/bench_deform_conv.py [--quick] [--reps 7] [--size 64] [--threads N]

`--quick` (one rep without warm-up, one step per peak-RSS child at one thread, 32x32 frames) is a smoke run,
noisy.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Dict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))

import torch  # noqa: E402
import torchvision  # noqa: E402

from models.networks.layers.deform_conv import deform_conv2d_autograd, deform_conv2d_torch  # noqa: E402

# (label, batch, channels, deformable groups); frames are --size x --size
SHAPES = [
    ('official VRT stage1 (C=120, dg=12, {size}x{size})', 1, 120, 12),
    ('tiny CPU config (C=16, dg=4, {size}x{size}, batch 2)', 2, 16, 4),
]
IMPLS = {
    'torchvision': lambda *a: torchvision.ops.deform_conv2d(*a[:4], (1, 1), (1, 1), (1, 1), a[4]),
    'torch': lambda *a: deform_conv2d_torch(*a[:4], 1, 1, 1, a[4]),
    # the pure path as plain autograd (before it kept only its inputs and sampled again in backward)
    'torch before': lambda *a: deform_conv2d_autograd(*a[:4], 1, 1, 1, a[4]),
}


def make_inputs(b, c, dg, h, w, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, c, h, w, generator=g)
    offset = torch.randn(b, 2 * dg * 9, h, w, generator=g) * 4
    mask = torch.rand(b, dg * 9, h, w, generator=g)
    weight = torch.randn(c, c, 3, 3, generator=g) / (3 * c ** 0.5)
    bias = torch.randn(c, generator=g)
    return [t.requires_grad_() for t in (x, offset, weight, bias, mask)]


def step(impl, inputs):
    out = IMPLS[impl](*inputs)
    torch.autograd.grad(out.square().mean(), inputs)


def time_interleaved(inputs, reps, warmup=True):
    times = {k: [] for k in IMPLS}
    for impl in IMPLS if warmup else ():
        step(impl, inputs)
    for _ in range(reps):
        for impl in IMPLS:
            t0 = time.perf_counter()
            step(impl, inputs)
            times[impl].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def _status_kib(field):
    with open('/proc/self/status') as f:
        return int(re.search(rf'{field}:\s+(\d+)', f.read()).group(1))


def peak_rss_child(impl, shape_idx, threads, size, steps=2):
    torch.set_num_threads(threads)
    inputs = make_inputs(*SHAPES[shape_idx][1:], size, size)
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')  # reset VmHWM to the current RSS
    base = _status_kib('VmRSS')
    for _ in range(steps):
        step(impl, inputs)
    print((_status_kib('VmHWM') - base) / 1024)


def peak_rss(shape_idx: int, threads: int, size: int, quick: bool = False) -> Dict[str, float]:
    """MiB of peak RSS growth of each implementation's step, each in a fresh process (run side by side;
    --quick: one thread each, one step)."""
    threads = 1 if quick else threads
    procs = {impl: subprocess.Popen([sys.executable, __file__, '--threads', str(threads), '--size', str(size),
                                     '--child', impl, str(shape_idx)] + (['--quick'] if quick else []),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for impl in IMPLS}
    mem = {}
    for impl, proc in procs.items():
        out, err = proc.communicate()
        if proc.returncode:
            raise RuntimeError(f'peak RSS child for {impl} failed ({proc.returncode}):\n{err[-2000:]}')
        mem[impl] = float(out)
    return mem


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--quick', action='store_true', help='smoke run: one rep without warm-up, 32x32 frames')
    ap.add_argument('--reps', type=int, default=None, help='interleaved reps (default 7; --quick 1)')
    ap.add_argument('--size', type=int, default=None, help='frame height and width (default 64; --quick 32)')
    ap.add_argument('--threads', type=int, default=torch.get_num_threads())
    ap.add_argument('--child', nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.reps = args.reps or (1 if args.quick else 7)
    args.size = args.size or (32 if args.quick else 64)
    if args.child:
        peak_rss_child(args.child[0], int(args.child[1]), args.threads, args.size, 1 if args.quick else 2)
        return
    torch.set_num_threads(args.threads)
    print(f'torch {torch.__version__}, torchvision {torchvision.__version__}, float32, CPU, '
          f'torch.set_num_threads({args.threads}) (interop {torch.get_num_interop_threads()}), '
          f'{os.cpu_count()} logical CPUs; median of {args.reps} interleaved reps of forward+backward'
          f'{" (no warm-up)" if args.quick else " after a warm-up"}')
    for i, (label, *shape) in enumerate(SHAPES):
        med = time_interleaved(make_inputs(*shape, args.size, args.size), args.reps, warmup=not args.quick)
        mem = peak_rss(i, args.threads, args.size, args.quick)
        print(f'{label.format(size=args.size)}:')
        for impl in IMPLS:
            print(f'  {impl:12s} {med[impl] * 1e3:8.1f} ms/iter   peak RSS growth {mem[impl]:7.1f} MiB')
        print(f'  ratio torchvision/torch = {med["torchvision"] / med["torch"]:.2f}, '
              f'torch/torch before = {med["torch"] / med["torch before"]:.2f} (time), '
              f'{mem["torch"] / mem["torch before"]:.2f} (peak RSS growth of one layer\'s step)')


if __name__ == '__main__':
    main()
