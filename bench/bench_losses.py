"""What a loss of `G_lossfn_type` / `G_extra_losses` costs a training step: forward + backward of the loss alone on
a batch netG would output, / the L1 loss's and / a network's own training step, measured in one run.

    python bench/bench_losses.py [--quick] [--reps 5] [--batch 8] [--size 128] [--device cuda] [--amp bf16]

Each loss is built from its default keys as the options loader fills them (the VGG19 of the structure-texture
and contextual losses with random weights: the same cost); the network row is KAIR's MSRResNet x4 (16 blocks,
64 channels) on the batch's LR input (size / 4). Rows run interleaved (every row once per rep), the median of the
reps after one untimed warm-up call each; peak memory on CUDA only (the allocator's peak above what the inputs
hold; nan elsewhere). `--amp bf16` runs the losses and the network under autocast as `train.amp` does.
`--quick` (batch 2 of 96x96, one rep) is a smoke run, noisy.
"""
import argparse
import math
import os
import statistics
import sys
import time
from typing import Callable, Dict, List

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from losses.registry import build_extra_losses  # noqa: E402
from models.registry import build_network  # noqa: E402
from option_rules import option_rules  # noqa: E402
from utils.options import validate  # noqa: E402

# (row, loss name, its keys beyond the defaults): the usual pixel losses, then issue 45's
ROWS = [('l1', 'l1', {}), ('charbonnier', 'charbonnier', {}), ('fft', 'fft', {}), ('color lab', 'color',
        {'G_color_space': 'lab'}), ('sobel', 'sobel', {}),
        ('wavelet', 'wavelet', {}), ('oklab_consistency', 'oklab_consistency', {}),
        ('lstar_consistency', 'lstar_consistency', {}), ('ms_swd', 'ms_swd', {}),
        ('ms_swd patch 1', 'ms_swd', {'G_swd_patch_size': 1}),
        ('structure_texture', 'structure_texture', {'G_st_pretrained_path': 'random'})]
NETWORK = {'net_type': 'msrresnet0', 'in_nc': 3, 'out_nc': 3, 'nc': 64, 'nb': 16, 'upscale': 4, 'act_mode': 'R'}


def build(name: str, keys: Dict[str, object], device: torch.device) -> torch.nn.Module:
    train = validate({'task': 'bench', 'netG': {'net_type': 'dncnn'},
                      'train': {'G_extra_losses': {name: 1.0}, **keys}}, option_rules())['train']
    return build_extra_losses(train)[name].to(device)


def sync(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--quick', action='store_true', help='smoke run: batch 2 of 96x96, 1 rep')
    p.add_argument('--reps', type=int, default=None, help='timed calls of each row (default 5; --quick 1)')
    p.add_argument('--batch', type=int, default=None, help='images per batch (default 8; --quick 2)')
    p.add_argument('--size', type=int, default=None, help='side of the square images (default 128; --quick 96)')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--amp', choices=['off', 'bf16'], default='off')
    a = p.parse_args()
    reps = a.reps or (1 if a.quick else 5)
    batch, size = a.batch or (2 if a.quick else 8), a.size or (96 if a.quick else 128)
    device = torch.device(a.device)
    g = torch.Generator().manual_seed(0)
    target = torch.rand(batch, 3, size, size, generator=g).to(device)
    pred = (target + 0.1 * torch.randn(target.shape, generator=g).to(device)).clamp(0, 1).requires_grad_(True)
    lr = torch.rand(batch, 3, size // 4, size // 4, generator=g).to(device)
    net = build_network(NETWORK).to(device).train()
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.amp == 'bf16')

    def loss_call(loss: torch.nn.Module) -> Callable[[], None]:
        def call() -> None:
            pred.grad = None
            with autocast:
                value = loss(pred, target)
            value.backward()
        return call

    def net_call() -> None:
        net.zero_grad(set_to_none=True)
        with autocast:
            value = (net(lr).float() - target).abs().mean()
        value.backward()

    calls: Dict[str, Callable[[], None]] = {row: loss_call(build(name, keys, device)) for row, name, keys in ROWS}
    calls['msrresnet x4 step'] = net_call
    times: Dict[str, List[float]] = {row: [] for row in calls}
    peak: Dict[str, float] = {}
    for row, call in calls.items():  # warm-up, and the peak memory of each row alone
        if device.type == 'cuda':
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        call()
        sync(device)
        peak[row] = (torch.cuda.max_memory_allocated(device) - base) / 2 ** 20 if device.type == 'cuda' else math.nan
    for _ in range(reps):
        for row, call in calls.items():
            sync(device)
            t0 = time.perf_counter()
            call()
            sync(device)
            times[row].append(time.perf_counter() - t0)
    ms = {row: statistics.median(t) * 1e3 for row, t in times.items()}
    print(f'== bench_losses.py{" (quick)" if a.quick else ""}: {device.type}, batch {batch} of 3x{size}x{size}, '
          f'amp {a.amp}, {reps} rep(s), torch {torch.__version__}, {torch.get_num_threads()} threads')
    print(f'{"row":<20} {"ms fwd+bwd":>10} {"/ l1":>8} {"/ msrresnet step":>16} {"peak MiB":>9}')
    step = ms['msrresnet x4 step']
    for row in calls:
        print(f'{row:<20} {ms[row]:>10.2f} {ms[row] / ms["l1"]:>8.2f} {ms[row] / step:>16.3f} {peak[row]:>9.1f}')


if __name__ == '__main__':
    main()
