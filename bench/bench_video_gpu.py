"""Video training memory and time: VRT 006, RVRT 002 and BasicVSR++, one forward + backward + Adam step on a CUDA GPU.

GPU rows, each in a fresh process (same weights, seed 0; median of `--reps` steps after `--warmup`;
peak = torch.cuda.max_memory_allocated over the steps):
  - VRT 006 (GoPro deblurring), 1×6×3×192², KAIR's checkpoint settings (attention and FFN checkpointed
    but for stages [2,3,4] / [1,2,3,4,5,9]): fp32, bf16 autocast; `netG.checkpoint: "memory"` fp32, bf16;
  - RVRT 002 (Vimeo ×4 SR), 1×14×3×64² → 256², KAIR's settings (no checkpointing): fp32, bf16;
    `checkpoint: "memory"` fp32;
  - BasicVSR++ (BasicSR's REDS configuration, ×4 SR), 1×30×3×64² → 256² (its 30-frame training clips at
    64² LR): fp32, bf16.
The official implementations are not part of this repository; their figures, measured on one H100
with the same protocol (issue "Video models that fit"), are printed beside ours for reference:
VRT 006 1834 ms / 28.98 GiB (bf16 1554 ms / 22.39 GiB), RVRT 002 830 ms / 16.35 GiB.

Block rows (any device, the CPU included): one call of RVRT's guided deformable attention and one VRT
window-attention block, forward + backward, bytes autograd keeps for backward and time: ours against
the way it was before (plain autograd through the same sampling; the explicit softmax attention).
These pin the memory gain on the CPU (tests/test_benches.py runs `--quick`).

    python bench/bench_video_gpu.py [--quick] [--reps 5] [--warmup 2] [--out DIR]

`--quick` runs the block rows and tiny versions of the networks on small clips (any device), one step per
row without warm-up, two step rows side by side: a smoke test of every code path; on CUDA without --quick,
the full-size rows as above, one at a time.
"""
import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, '..')
sys.path.insert(0, ROOT)

from common import quick_jobs, run_children  # noqa: E402

VRT_006 = {'net_type': 'vrt', 'upscale': 1, 'img_size': [6, 192, 192], 'window_size': [6, 8, 8],
           'depths': [8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4], 'indep_reconsts': [9, 10],
           'embed_dims': [96, 96, 96, 96, 96, 96, 96, 120, 120, 120, 120], 'num_heads': [6] * 11, 'pa_frames': 2,
           'deformable_groups': 16, 'use_checkpoint_attn': True, 'use_checkpoint_ffn': True,
           'no_checkpoint_attn_blocks': [2, 3, 4], 'no_checkpoint_ffn_blocks': [1, 2, 3, 4, 5, 9]}
RVRT_002 = {'net_type': 'rvrt', 'upscale': 4, 'clip_size': 2, 'img_size': [2, 64, 64], 'window_size': [2, 8, 8],
            'num_blocks': [1, 2, 1], 'depths': [2, 2, 2], 'embed_dims': [144, 144, 144], 'num_heads': [6, 6, 6],
            'inputconv_groups': [1, 1, 1, 1, 1, 1], 'deformable_groups': 12, 'attention_heads': 12,
            'attention_window': [3, 3]}
BASICVSRPP_REDS = {'net_type': 'basicvsrpp', 'mid_channels': 64, 'num_blocks': 7, 'is_low_res_input': True}
# --quick: the same layouts, tiny
TINY = {'basicvsrpp': {'mid_channels': 16, 'num_blocks': 1},
        'vrt': {'img_size': [2, 40, 40], 'window_size': [2, 4, 4], 'depths': [1] * 11, 'embed_dims': [8] * 11,
                'num_heads': [1] * 11, 'deformable_groups': 2},
        'rvrt': {'num_blocks': [1, 1, 1], 'depths': [1, 1, 1], 'embed_dims': [8, 8, 8], 'num_heads': [2, 2, 2],
                 'deformable_groups': 4, 'attention_heads': 4}}
# --quick's clips: the fewest frames and pixels each network takes (on a CPU without native bf16, whose
# convolutions run 20-60 times slower than fp32, RVRT's bf16 step took 50 s on 4 frames and 2 s on 2)
NETS = {'vrt': (VRT_006, (1, 6, 3, 192, 192), (1, 2, 3, 40, 40)),
        'rvrt': (RVRT_002, (1, 14, 3, 64, 64), (1, 2, 3, 16, 16)),
        'basicvsrpp': (BASICVSRPP_REDS, (1, 30, 3, 64, 64), (1, 2, 3, 33, 33))}
ROWS = [('vrt', 'KAIR', 'fp32'), ('vrt', 'KAIR', 'bf16'), ('vrt', 'memory', 'fp32'), ('vrt', 'memory', 'bf16'),
        ('rvrt', 'KAIR', 'fp32'), ('rvrt', 'KAIR', 'bf16'), ('rvrt', 'memory', 'fp32'),
        ('basicvsrpp', 'BasicSR', 'fp32'), ('basicvsrpp', 'BasicSR', 'bf16')]
OFFICIAL = {('vrt', 'fp32'): '1834 ms, 28.98 GiB', ('vrt', 'bf16'): '1554 ms, 22.39 GiB',
            ('rvrt', 'fp32'): '830 ms, 16.35 GiB'}


def step_row(net_name: str, checkpoint: str, precision: str, quick: bool, reps: int, warmup: int) -> Dict[str, float]:
    """One row, in this (fresh) process: ms per step (median) and peak GPU memory in GiB (nan off CUDA)."""
    import torch

    from models.registry import build_network
    device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    kwargs, shape, tiny_shape = NETS[net_name]
    net_opt = {k: v for k, v in {**kwargs, **(TINY[net_name] if quick else {})}.items() if k != 'net_type'}
    if checkpoint == 'memory':
        net_opt['checkpoint'] = 'memory'
    torch.manual_seed(0)
    net = build_network({'net_type': kwargs['net_type'], **net_opt}).to(device).train()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-4, fused=device.type == 'cuda')
    g = torch.Generator(device=device).manual_seed(1)
    x = torch.rand(tiny_shape if quick else shape, device=device, generator=g)
    dtype = torch.bfloat16 if precision == 'bf16' else None
    times = []
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
    for i in range(warmup + reps):
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            out = net(x)
        loss = (out.float() - 0.5).abs().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == 'cuda' else float('nan')
    return {'ms': 1e3 * statistics.median(times), 'peak_gib': peak}


def _saved_bytes(fn: Callable[[], Any]) -> Tuple[int, Any]:
    """Bytes autograd keeps for backward while fn()'s graph lives (each storage counted once)."""
    import torch
    seen: Dict[int, int] = {}

    def pack(t: Any) -> Any:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(seen.values()), out


def block_rows(quick: bool, reps: int) -> List[Tuple[str, str, float, float]]:
    """(block, side, MiB kept for backward, ms per forward+backward) for ours and before."""
    import torch

    from models.networks import vrt
    from models.networks.layers.guided_attention import gda_rows, guided_deformable_attention
    torch.manual_seed(0)
    # RVRT 002's GDA call at its 64x64 working size (--quick: 16x16): 2 query frames, 2 key frames each
    size = 16 if quick else 64
    q = torch.randn(2, 288, size, size, requires_grad=True)
    k, v = (torch.randn(2, 2, 288, size, size, requires_grad=True) for _ in range(2))
    offset = torch.randn(2, 2, 12, 9, 2, size, size, requires_grad=True)
    gda = {'ours': lambda: guided_deformable_attention(q, k, v, offset, 12, (3, 3)),
           'before': lambda: gda_rows(q, k, v, offset, 12, (3, 3), 0)}
    # VRT 006's first-stage mutual + self attention: 2x8x8 windows of 96 channels, 6 heads
    attn = vrt.WindowAttention(96, (2, 8, 8), 6, qkv_bias=True, mut_attn=True)
    windows = 8 if quick else 144  # a 1x6x192x192 clip has 1728 of them
    x = torch.randn(windows, 2 * 8 * 8, 96, requires_grad=True)

    def explicit(q, k, v, scale, bias=None, mask=None, dropout_p=0.0):
        a = (q * scale) @ k.transpose(-2, -1)
        if bias is not None:
            a = a + bias.unsqueeze(0)
        return a.softmax(-1) @ v
    rows = []
    for block, sides in (('RVRT GDA call', gda), ('VRT attention block', {'ours': lambda: attn(x), 'before': None})):
        for side in ('ours', 'before'):
            fn = sides[side]
            original = vrt.window_attention
            if fn is None:  # the explicit attention the blocks used before SDPA
                vrt.window_attention = explicit
                fn = sides['ours']
            try:
                kept, out = _saved_bytes(fn)
                times = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    fn().float().square().mean().backward()
                    times.append(time.perf_counter() - t0)
            finally:
                vrt.window_attention = original
            del out
            rows.append((block, side, kept / 2 ** 20, 1e3 * statistics.median(times)))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--quick', action='store_true', help='block rows and tiny networks, one step each (any device)')
    p.add_argument('--reps', type=int, default=None, help='timed steps per row (default 5; --quick 1)')
    p.add_argument('--warmup', type=int, default=None, help='steps before timing (default 2; --quick 0)')
    p.add_argument('--child', nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    reps = args.reps or (1 if args.quick else 5)
    warmup = args.warmup if args.warmup is not None else (0 if args.quick else 2)
    if args.child:
        print('RESULT ' + json.dumps(step_row(*args.child, args.quick, reps, warmup)), flush=True)
        return 0
    import torch
    cuda = torch.cuda.is_available()
    print(f'== bench_video_gpu.py{" (quick)" if args.quick else ""}: '
          f'{torch.cuda.get_device_name(0) if cuda else "CPU"}, torch {torch.__version__}', flush=True)
    blocks = block_rows(args.quick, reps)
    steps = []
    if cuda or args.quick:
        cmds = [[sys.executable, os.path.abspath(__file__), '--child', net_name, checkpoint, precision,
                 '--reps', str(reps), '--warmup', str(warmup)] + (['--quick'] if args.quick else [])
                for net_name, checkpoint, precision in ROWS]
        # measured rows one at a time; --quick's smoke rows two at a time
        procs = run_children(cmds, quick_jobs() if args.quick else 1, cwd=ROOT, capture_output=True, text=True)
        for (net_name, checkpoint, precision), proc in zip(ROWS, procs):
            if proc.returncode:
                print(proc.stderr[-3000:], file=sys.stderr)
                return proc.returncode
            result = json.loads(proc.stdout.split('RESULT ', 1)[1])
            steps.append((net_name, checkpoint, precision, result))
    print(f'\n{"block":<20} {"side":<7} {"MiB kept for backward":>22} {"ms fwd+bwd":>11}')
    for block, side, mib, ms in blocks:
        print(f'{block:<20} {side:<7} {mib:22.1f} {ms:11.1f}')
    for block in ('RVRT GDA call', 'VRT attention block'):
        ours, before = [(mib, ms) for b, s, mib, ms in blocks if b == block]
        print(f'{block}: kept for backward ours / before = {ours[0] / before[0]:.3f}, time {ours[1] / before[1]:.2f}')
    if not steps:
        print('no CUDA GPU here: the step rows need one (--quick runs tiny ones anywhere)')
        return 0
    print(f'\n{"network":<10} {"checkpointing":<14} {"precision":<9} {"ms/step":>9} {"peak GiB":>9}  official (H100, issue)')
    for net_name, checkpoint, precision, r in steps:
        ref = OFFICIAL.get((net_name, precision), '-') if checkpoint == 'KAIR' and not args.quick else '-'
        print(f'{net_name:<10} {checkpoint:<14} {precision:<9} {r["ms"]:9.1f} {r["peak_gib"]:9.2f}  {ref}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
