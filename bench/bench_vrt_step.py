"""VRT 006's training step on CPU: deformable convolution paths, with and without checkpointing.

The network is netG of options/vrt/006_train_vrt_videodeblurring_gopro_rgbspike.json (RGB + 4 spike
channels, random SpyNet: no download), built with seed 0 so every row has the same weights, on one
1×6×7×64×64 clip. Rows: `models.networks.layers.deform_conv.DEFORM_IMPL` "torch" (the default pure-PyTorch path)
and "torchvision" (its C++ kernel), plus "torch, before" (the pure path as plain autograd through the
same operations, as it was before it kept only its inputs), each with `use_checkpoint_attn` and
`use_checkpoint_ffn` off and on. Every row is a fresh process: one warm-up step, then `--reps` timed
steps (median): forward time (training mode, autograd on), backward time of a mean loss, and the
peak resident memory of the steps (Linux VmHWM, reset through /proc/self/clear_refs after the network
and input exist; "peak" is the whole process, "growth" what the steps added).

    python bench/bench_vrt_step.py [--quick] [--threads 2] [--reps 1] [--size 64]

`--quick` runs every row on a tiny VRT of the same layout (11 stages of depth 1, 8 channels, window
2x4x4, deformable groups 2) and a 1x2x7x40x40 clip (SpyNet needs more than 32 pixels), one timed step
without the warm-up step, two rows side by side at one thread each (unless `--threads` is given): seconds
per row instead of minutes, a smoke run whose numbers say little about the real network.
"""
import argparse
import json
import os
import re
import statistics
import sys
import time
from typing import Dict, Sequence

from common import quick_jobs, run_children

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, '..')
OPT = os.path.join(ROOT, 'options', 'vrt', '006_train_vrt_videodeblurring_gopro_rgbspike.json')
# --quick: the same network type, stage layout and inputs (RGB + spikes), everything small
TINY = ['netG.img_size=[2,40,40]', 'netG.window_size=[2,4,4]', f'netG.depths={[1] * 11}',
        f'netG.embed_dims={[8] * 11}', f'netG.num_heads={[1] * 11}', 'netG.deformable_groups=2']
ROWS = [('torch', False), ('torchvision', False), ('torch, before', False),
        ('torch', True), ('torchvision', True), ('torch, before', True)]


def _kib(field: str) -> int:
    with open('/proc/self/status') as f:
        return int(re.search(rf'{field}:\s+(\d+)', f.read()).group(1))


def child(impl: str, checkpoint: bool, threads: int, reps: int, size: int, quick: bool) -> Dict[str, float]:
    """One row in this (fresh) process: `reps` timed steps after one warm-up step (--quick: none)."""
    sys.path.insert(0, ROOT)
    import torch

    import models.networks.layers.deform_conv as dc
    from models.registry import build_network
    from option_rules import read_options
    torch.set_num_threads(threads)
    flag = 'true' if checkpoint else 'false'
    opt = read_options(OPT, ['netG.spynet_path=null', f'netG.use_checkpoint_attn={flag}',
                           f'netG.use_checkpoint_ffn={flag}'] + (TINY if quick else []))
    dc.DEFORM_IMPL = 'torchvision' if impl == 'torchvision' else 'torch'
    if impl == 'torch, before':
        dc.deform_conv2d_torch = dc.deform_conv2d_autograd  # plain autograd: keeps the sampled columns
    torch.manual_seed(0)
    net = build_network(opt['netG']).train()
    g = opt['netG']
    frames = g['img_size'][0]
    x = torch.rand(1, frames, g['in_chans'] + g['spike_chans'], size, size,
                   generator=torch.Generator().manual_seed(1))
    fwd, bwd = [], []
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')  # VmHWM := current RSS
    base = _kib('VmRSS')
    warmup = 0 if quick else 1
    for rep in range(warmup + reps):
        net.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = net(x).mean()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        if rep >= warmup:  # the first step warms up allocator and caches
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    return {'fwd': statistics.median(fwd), 'fwd_bwd': statistics.median(f + b for f, b in zip(fwd, bwd)),
            'peak_gib': _kib('VmHWM') / 2 ** 20, 'growth_gib': (_kib('VmHWM') - base) / 2 ** 20}


def main(argv: Sequence[str] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--quick', action='store_true',
                   help='smoke run: a tiny VRT of the same layout, 1x2x7x40x40 clip, no warm-up step')
    p.add_argument('--threads', type=int, default=None, help='torch threads per row (default 2; --quick 1)')
    p.add_argument('--reps', type=int, default=1,
                   help='timed steps per row after one warm-up step (--quick: none) (median)')
    p.add_argument('--size', type=int, default=None, help='frame height and width (default 64; --quick 40)')
    p.add_argument('--child', nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.size = a.size or (40 if a.quick else 64)
    side_by_side = quick_jobs() if a.quick and a.threads is None else 1  # --quick's smoke rows: two at a time
    a.threads = a.threads or (1 if side_by_side > 1 else 2)
    if a.child:
        print(json.dumps(child(a.child[0], a.child[1] == 'on', a.threads, a.reps, a.size, a.quick)))
        return
    load = ', '.join(f'{v:.2f}' for v in os.getloadavg())
    what = 'tiny VRT of the same layout (--quick)' if a.quick else 'VRT 006'
    frames = 2 if a.quick else 6
    print(f'{what} (RGB+spike, {OPT.split(os.sep)[-1]}), one 1x{frames}x7x{a.size}x{a.size} clip, CPU, '
          f'{a.threads} thread(s), {0 if a.quick else 1} warm-up + {a.reps} timed step(s) per row, fresh process per '
          f'row{", two rows at a time" if side_by_side > 1 else ""}; load avg {load}')
    results: Dict[tuple, Dict[str, float]] = {}
    cmds = [[sys.executable, os.path.abspath(__file__), '--threads', str(a.threads), '--reps', str(a.reps),
             '--size', str(a.size), '--child', impl, 'on' if ckpt else 'off'] + (['--quick'] if a.quick else [])
            for impl, ckpt in ROWS]
    for (impl, ckpt), out in zip(ROWS, run_children(cmds, side_by_side, capture_output=True, text=True, cwd=ROOT)):
        if out.returncode:
            raise SystemExit(f'{impl} checkpoint={ckpt} failed:\n{out.stderr[-3000:]}')
        results[impl, ckpt] = json.loads(out.stdout.strip().splitlines()[-1])
        r = results[impl, ckpt]
        print(f'  deform conv {impl:14s} checkpointing {"on " if ckpt else "off"}: forward {r["fwd"]:7.1f} s, '
              f'forward+backward {r["fwd_bwd"]:7.1f} s, peak RSS {r["peak_gib"]:5.2f} GiB '
              f'(step growth {r["growth_gib"]:5.2f} GiB)', flush=True)
    for ckpt in (False, True):
        t, v, b = results['torch', ckpt], results['torchvision', ckpt], results['torch, before', ckpt]
        print(f'checkpointing {"on " if ckpt else "off"}: torch / torchvision: fwd+bwd time '
              f'{t["fwd_bwd"] / v["fwd_bwd"]:.2f} (goal <= 0.8), peak RSS {t["peak_gib"] / v["peak_gib"]:.2f} '
              f'(goal <= 1.0); torch / torch before: peak RSS {t["peak_gib"] / b["peak_gib"]:.2f}, '
              f'fwd+bwd time {t["fwd_bwd"] / b["fwd_bwd"]:.2f}')


if __name__ == '__main__':
    main()
