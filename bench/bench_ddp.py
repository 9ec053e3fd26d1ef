"""Throughput of 2 DDP processes x 1 thread against 1 process x 2 threads (demo DnCNN, CPU, gloo).

Both sides run the real `Trainer.run` loop (see bench_loop.py) with the same global batch of 16
(DDP: 8 per process, gradients all-reduced every step; single: 16) on in-memory demo-shaped batches.
Each measurement is a fresh set of processes (env:// rendezvous, as under torchrun); rank 0 times
`--steps` iterations after 3 warm-up iterations. The sides alternate rep by rep; samples/s are medians.

    python bench/bench_ddp.py [--quick] [--reps 5] [--steps 20]

`--quick` (one run per side: one warm-up step, one timed step) is a smoke run, noisy.
"""
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import List, Sequence

from common import entry, parse_reps, reps_parser

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, '..')
GLOBAL_BATCH = 16


def worker(world: int, threads: int, steps: int, warmup: int) -> None:
    """One rank: build the demo model through the framework, train, print samples/s on rank 0."""
    sys.path.insert(0, ROOT)
    sys.path.insert(0, HERE)
    import torch
    from bench_loop import demo_options, framework, make_batches
    from utils import dist
    torch.set_num_threads(threads)
    state = dist.detect()
    device = dist.init(state, 120)
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        opt = demo_options(tmp, f'datasets.train.dataloader_batch_size={GLOBAL_BATCH // world}')
        run, _ = framework(opt, make_batches(opt, 8, seed=state.rank), state)
        run(warmup)
        dist.barrier()
        t0 = time.perf_counter()
        run(steps)
        dist.barrier()
        elapsed = time.perf_counter() - t0
    if dist.is_main_process():
        print(f'SAMPLES_PER_S {GLOBAL_BATCH * steps / elapsed:.3f} threads={torch.get_num_threads()} '
              f'device={device}', flush=True)
    dist.cleanup()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def launch(world: int, threads: int, steps: int, warmup: int) -> float:
    """Start `world` worker processes (env:// like torchrun) and return rank 0's samples/s."""
    drop = ('WORLD_SIZE', 'RANK', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT', 'OMP_NUM_THREADS')
    base = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith('SLURM_')}
    port = _free_port()
    procs = []
    for rank in range(world):
        env = dict(base, OMP_NUM_THREADS=str(threads))
        if world > 1:
            env.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank),
                       MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), '--worker', str(world), str(threads), str(steps),
             str(warmup)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=600) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError('\n'.join(f'rank {i} exit {p.returncode}:\n{o[0][-1500:]}\n{o[1][-1500:]}'
                                     for i, (p, o) in enumerate(zip(procs, outs))))
    line = next(ln for ln in outs[0][0].splitlines() if ln.startswith('SAMPLES_PER_S'))
    return float(line.split()[1])


def main(argv: Sequence[str] = None) -> None:
    p = reps_parser(__doc__, 'smoke run: one run per side, 1 warm-up and 1 timed step',
                    'runs per side (default 5; --quick 1)')
    p.add_argument('--steps', type=int, default=None, help='timed steps per run (default 20; --quick 1)')
    a = parse_reps(p, argv, 5)
    a.steps = a.steps or (1 if a.quick else 20)
    warmup = 1 if a.quick else 3
    sys.path.insert(0, HERE)
    from bench_loop import machine
    print(machine())
    ddp: List[float] = []
    single: List[float] = []
    for _ in range(a.reps):
        ddp.append(launch(2, 1, a.steps, warmup))
        single.append(launch(1, 2, a.steps, warmup))
    d, s = statistics.median(ddp), statistics.median(single)
    print(f'workload: demo DnCNN, global batch {GLOBAL_BATCH} (DDP {GLOBAL_BATCH // 2}/process), gloo, '
          f'{warmup} warm-up and {a.steps} timed steps per run, {a.reps} runs per side interleaved; medians')
    print(f'DDP 2 proc x 1 thread / 1 proc x 2 threads (samples/s)  2x1 {d:7.1f} | 1x2 {s:7.1f} | '
          f'ratio {d / s:6.3f}  (about 1.0 expected on 2 cores)')


if __name__ == '__main__':
    entry(main, worker=lambda args: worker(*map(int, args[:4])))
