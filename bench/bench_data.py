"""Data wait as a fraction of step time on the demo configuration (real dataset, loader, model, loop).

Runs `Trainer.build()`, `start()` and `run()` (training/trainer.py) on options/train_dncnn_demo.json and
records what the loop itself measures at every print step: the time blocked in `next(iterator)`
(data) and the whole iteration (iter). Print steps are every iteration here, so per-step numbers
are exact; the loop's log line rounds to ms, this does not. Validation, checkpoint writes and the
replica check are switched off (not per-step costs). The first `--skip` iterations (worker start-up,
first batch) are reported separately from the steady state. Epoch boundaries are included: the demo
has 64 images / batch 16 = 4 iterations per epoch, so every 4th step starts a new loader iterator.
The demo images are generated in a temporary folder's demo_data/ (generate_demo writes only there),
so the benchmark leaves nothing in the project.

    python bench/bench_data.py [--quick] [--iters 60] [--skip 4] [--workers 1 0 2] [--threads N]

`--quick` (5 iterations per row: 3 start-up, then one inside an epoch and one epoch start; the demo's data
and loader with its DnCNN made tiny, nc 8 and nb 3) is a smoke run, noisy.
"""
import argparse
import os
import statistics
import sys
import tempfile
from typing import Any, Dict, List, Sequence, Tuple

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import main_train  # noqa: E402
from bench_loop import DEMO, demo_options, machine  # noqa: E402
from training.run_folder import prepare_run_dir  # noqa: E402
from utils import dist  # noqa: E402

QUICK_NET = ('netG.nc=8', 'netG.nb=3')  # --quick: the demo's DnCNN made tiny (the batches stay the demo's)


def measure(opt: Dict[str, Any], iters: int) -> Tuple[List[Tuple[float, float]], int]:
    """(iteration seconds, data-wait seconds) of each of `iters` iterations, and iterations per epoch."""
    # a constant lr: the demo's milestones lie past so short a run (and the data wait does not depend on it)
    opt['train'].update(total_iter=iters, checkpoint_print=1, checkpoint_test=10 ** 9, checkpoint_save=10 ** 9,
                        G_scheduler_milestones=[])
    args = main_train.parse_args(['--opt', DEMO])
    state = dist.detect({})
    trainer = main_train.Trainer(opt, state, torch.device('cpu'), args)
    samples: List[Tuple[float, float]] = []
    lock = None
    try:
        trainer.build()
        lock = prepare_run_dir(opt, state, args)  # the run folder the history and the log go to
        trainer.start()
        trainer.val_loader = None
        trainer.save = lambda: None
        trainer.check_replicas = lambda: None
        trainer.print_status = lambda it, data, *_: samples.append((it, data))
        trainer.run()
    finally:
        trainer.close()
        if lock is not None:
            lock.release()
    return samples, trainer.steps_per_epoch


def summary(samples: Sequence[Tuple[float, float]], skip: int, per_epoch: int) -> str:
    head, steady = samples[:skip], samples[skip:]
    it = sum(s[0] for s in steady)
    data = sum(s[1] for s in steady)
    boundary = [s[1] for i, s in enumerate(samples) if i >= skip and i % per_epoch == 0]
    inside = [s[1] for i, s in enumerate(samples) if i >= skip and i % per_epoch != 0]
    return (f'steady state ({len(steady)} iters): data wait {100 * data / it:5.2f} % of step time '
            f'(median step {statistics.median(s[0] for s in steady) * 1e3:.1f} ms; median wait at epoch start '
            f'{statistics.median(boundary) * 1e3:.2f} ms, inside an epoch {statistics.median(inside) * 1e3:.2f} ms); '
            f'first {skip} iters: wait {sum(s[1] for s in head):.2f} s of {sum(s[0] for s in head):.2f} s')


def main(argv: Sequence[str] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--quick', action='store_true',
                   help='smoke run: 5 iterations per row, 3 of them start-up, a tiny DnCNN')
    p.add_argument('--iters', type=int, default=None, help='iterations per row (default 60; --quick 5)')
    p.add_argument('--skip', type=int, default=None,
                   help='start-up iterations reported separately (default 4; --quick 3)')
    p.add_argument('--workers', type=int, nargs='+', default=[1, 0, 2],
                   help='dataloader_num_workers values to measure (the demo uses 1)')
    p.add_argument('--threads', type=int, default=None)
    a = p.parse_args(argv)
    a.iters = a.iters or (5 if a.quick else 60)
    a.skip = a.skip if a.skip is not None else (3 if a.quick else 4)
    if a.threads:
        torch.set_num_threads(a.threads)
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        for w in a.workers:
            opt = demo_options(tmp, *(QUICK_NET if a.quick else ()),
                               f'datasets.train.dataloader_num_workers={w}', 'train.E_decay=0.99',
                               f'datasets.train.dataroot_H="{os.path.join(tmp, "demo_data", "train")}"',
                               f'datasets.test.dataroot_H="{os.path.join(tmp, "demo_data", "test")}"')
            ds = opt['datasets']['train']
            samples, per_epoch = measure(opt, a.iters)
            tag = ' (demo setting)' if w == 1 else ''
            how = (f'prefetch_factor {ds.get("dataloader_prefetch_factor", 2)}, persistent workers'
                   if w else 'loading in the training process')
            print(f'data wait, demo config, workers={w}{tag}{", tiny DnCNN (--quick)" if a.quick else ""}, {how}: '
                  f'{summary(samples, a.skip, per_epoch)}{"  goal < 5 %" if w == 1 else ""}')


if __name__ == '__main__':
    main()
