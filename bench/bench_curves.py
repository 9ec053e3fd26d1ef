"""What redrawing curves.png costs the training loop: the time `redraw()` blocks the caller, the time
the draw takes, and how much a CPU-bound training step slows while the child process draws.

    python bench/bench_curves.py [--quick] [--rows 2000] [--redraws 5] [--threads N]

The history is synthetic (a long run's worth of rows); the "training step" is a small convolution
forward+backward, measured alone (median of 20) and while a redraw runs, in this run. `--quick` (200 rows,
one redraw, the step alone 3 times) is a smoke run, noisy.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from utils.history import History  # noqa: E402
from utils.plot import BackgroundPlotter, plot_run  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--quick', action='store_true', help='smoke run: 200 history rows, 1 redraw')
    p.add_argument('--rows', type=int, default=None, help='history rows (default 2000; --quick 200)')
    p.add_argument('--redraws', type=int, default=None, help='background redraws timed (default 5; --quick 1)')
    # torch's own count (one per usable core, or OMP_NUM_THREADS): a fixed 2 beside a busy neighbour (a test
    # worker given one core) oversubscribed the cores: bench_zoo --quick took 362 s in a CI run, 41 s alone
    p.add_argument('--threads', type=int, default=torch.get_num_threads(),
                   help='intra-op threads (default: torch\'s, which OMP_NUM_THREADS sets)')
    args = p.parse_args()
    args.rows = args.rows or (200 if args.quick else 2000)
    args.redraws = args.redraws or (1 if args.quick else 5)
    torch.set_num_threads(args.threads)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 3, 3, padding=1))
    x = torch.rand(8, 3, 64, 64)

    def step() -> float:
        t0 = time.perf_counter()
        net.zero_grad()
        net(x).mean().backward()
        return time.perf_counter() - t0

    with tempfile.TemporaryDirectory() as folder:
        h = History(folder)
        for i in range(1, args.rows + 1):
            h.append({'kind': 'train', 'iter': i * 10, 'epoch': i // 50, 'lr': 1e-4 * 0.5 ** (i // 500),
                      'G_loss': 0.1 / i ** 0.3, 'iter_time': 0.1, 'data_time': 0.01, 'samples_per_sec': 100.0})
            if i % 50 == 0:
                h.append({'kind': 'val', 'iter': i * 10, 'epoch': i // 50, 'test_set': 'set5', 'items': 5,
                          'psnr': 30 + (i / args.rows) ** 0.5, 'ssim': 0.9, 'psnr_y': 31.0, 'ssim_y': 0.91})
        t0 = time.perf_counter()
        plot_run(folder)  # first draw also imports matplotlib
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        plot_run(folder)
        draw = time.perf_counter() - t0
        alone = statistics.median(step() for _ in range(3 if args.quick else 20))
        plotter = BackgroundPlotter(folder)
        calls, during = [], []
        for _ in range(args.redraws):
            t0 = time.perf_counter()
            plotter.redraw()
            calls.append(time.perf_counter() - t0)
            while plotter.drawing():
                during.append(step())
            plotter.close()
    print(f'{args.rows} history rows; draw in this process: first {first:.3f} s (imports matplotlib), then '
          f'{draw:.3f} s; during training it runs in a child process')
    print(f'redraw() blocks the caller: median {statistics.median(calls) * 1e3:.2f} ms, max {max(calls) * 1e3:.2f} ms')
    print(f'training step alone {alone * 1e3:.1f} ms, during a draw {statistics.median(during) * 1e3:.1f} ms '
          f'(x{statistics.median(during) / alone:.2f}, {len(during)} steps)')


if __name__ == '__main__':
    main()
