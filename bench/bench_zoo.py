"""Model zoo on CPU: parameters and forward+backward time of every KAIR image configuration and of
today's architectures, and the cost of GAN training against plain training of the same generator.

    python bench/bench_zoo.py [--quick] [--threads N] [--repeat 3] [--size 64] [--only swinir]

Networks are built from the KAIR listings' options (tests/data/kair/*.netG.tsv headers), exactly
as KAIR's files define them, then today's architectures from the official configurations
(tests/data/archs/*.tsv headers' kwargs) and, for those without one, their tiny option file
(options/archs/train_<net_type>_tiny.json, labelled `tiny`); each takes one 1 x C x 64 x 64 input (`--size`; x scale out for SR) plus what
it needs beside (FFDNet's noise level, USRNet's kernel, scale and noise level). Times are medians
of `--repeat` runs after one warm-up, with `--threads` intra-op threads, channels-first and then channels-last
(the 4-D weights and input), with their ratio and the format `train.channels_last: null` picks on a CPU
(channels-first for a network with a dense convolution of 17x17 or more, models/precision.py). The last table times one
training iteration of model `gan` (pixel + VGG perceptual + adversarial, D step) against model
`plain` with the same generator and batch, measured in this run. `--quick` (16 x 16 inputs, one
timed run without warm-up; the GAN table on a batch of 2) builds and steps every configuration once: a smoke
run, noisy.

The video tables (BasicVSR, IconVSR, BasicVSR++, EDVR) have their own rows: one forward and backward of a
1 x T x 3 x 64 x 64 clip (x4 out; EDVR's deblurring model 256 x 256 in and out): T = 5 (the sliding window
of EDVR; IconVSR-Vimeo's keyframe padding needs 7), wall and process CPU seconds. `--quick` takes the
fewest frames each accepts at the least size SpyNet takes (33 x 33; EDVR 16 x 16, 64 x 64 full-size), one run
without warm-up.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List, Tuple

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from common import median_seconds  # noqa: E402
from option_rules import option_rules  # noqa: E402
from models.precision import memory_format, to_channels_last  # noqa: E402
from models.registry import build_network  # noqa: E402
from utils.options import NETWORK_SCALE_KEYS, parse_json_file, validate  # noqa: E402

LISTINGS = os.path.join(ROOT, 'tests', 'data', 'kair')
ARCH_TABLES = os.path.join(ROOT, 'tests', 'data', 'archs')
ARCH_TINY = os.path.join(ROOT, 'options', 'archs')
VIDEO_NETWORKS = ('vrt', 'rvrt')
VIDEO_TABLES = ('basicvsr', 'iconvsr', 'basicvsrpp', 'edvr')  # tables of clip networks: bench_video_networks
TABLE_NET_TYPE = {'rrdbnet': 'esrgan'}  # table prefix → net_type where they differ
CHANNEL_KEYS = ('in_nc', 'in_chans', 'num_in_ch', 'inp_channels', 'img_channel', 'in_ch', 'in_channels')


def configurations() -> List[Tuple[str, Dict[str, Any], int]]:
    """(KAIR file, validated netG, scale) of every image listing (video networks skipped)."""
    out = []
    for path in sorted(glob.glob(os.path.join(LISTINGS, '*.netG.tsv'))):
        with open(path) as f:
            header = f.readline()
        m = re.search(r'scale (\d+), n_channels (\w+), netG options: (\{.*\})$', header)
        top = {'scale': int(m.group(1))}
        if m.group(2) != 'None':
            top['n_channels'] = int(m.group(2))
        netG = json.loads(m.group(3))
        if netG['net_type'] in VIDEO_NETWORKS:  # clips, not images: their own benchmarks
            continue
        opt = validate({'task': 't', **top, 'netG': netG}, option_rules(), source=path)
        out.append((os.path.basename(path)[:-len('.netG.tsv')], opt['netG'], top['scale']))
    return out + arch_configurations()


MIN_SIZE: Dict[str, int] = {}  # configuration -> the least input side it takes (set by arch_configurations)


def arch_configurations() -> List[Tuple[str, Dict[str, Any], int]]:
    """(name, validated netG, scale) of today's architectures: each official table, then the tiny file of
    every net_type of options/archs without a table."""
    raw = []
    for path in sorted(glob.glob(os.path.join(ARCH_TABLES, '*.tsv'))):
        name = os.path.basename(path)[:-len('.tsv')]
        if name.split('__')[0] in VIDEO_TABLES:
            continue
        with open(path) as f:
            kwargs = json.loads(f.readline().split('kwargs: ', 1)[1])
        scale = next((kwargs[k] for k in NETWORK_SCALE_KEYS if k in kwargs), 1)
        raw.append((name, {'net_type': TABLE_NET_TYPE.get(name.split('__')[0], name.split('__')[0]), **kwargs}, scale))
    tabled = {netG['net_type'] for _, netG, _ in raw}
    for path in sorted(glob.glob(os.path.join(ARCH_TINY, 'train_*_tiny.json'))):
        tiny = parse_json_file(path)  # option files may carry comments
        netG = tiny['netG']
        if netG['net_type'] not in tabled:
            raw.append((f'{netG["net_type"]}__tiny', netG, tiny.get('scale', 1)))
            # the input side it trains on: some take no less (windows, patches, padding to a multiple)
            MIN_SIZE[f'{netG["net_type"]}__tiny'] = tiny['datasets']['train']['H_size'] // tiny.get('scale', 1)
    out = []
    for name, netG, scale in raw:  # the scale the table's kwargs or the tiny file give, which netG inherits
        opt = validate({'task': 't', 'scale': scale, 'netG': netG}, option_rules(), source=name)
        out.append((name, opt['netG'], scale))
    return out


def inputs(netG: Dict[str, Any], scale: int, size: int = 64) -> Tuple[Any, ...]:
    kind = netG['net_type']
    channels = next((netG[k] for k in CHANNEL_KEYS if k in netG), 3)
    if kind == 'usrnet':
        k = torch.rand(1, 1, 25, 25)
        return torch.rand(1, netG['out_nc'], size, size), k / k.sum(), scale, torch.full((1, 1, 1, 1), 0.05)
    if kind == 'ffdnet':
        return torch.rand(1, channels, size, size), torch.full((1, 1, 1, 1), 0.1)
    return (torch.rand(2 if kind == 'dat' else 1, channels, size, size),)  # DAT's BatchNorm needs 2


def bench_networks(repeat: int, only: str, size: int, warmup: int = 1) -> None:
    """Each configuration's forward and backward channels-first and channels-last (its 4-D weights and the input),
    their ratio, and the format `train.channels_last` null picks for it on a CPU (models/precision.py)."""
    print(f'{"configuration":45s} {"net_type":11s} {"parameters":>12s} {"input":>14s} {"fwd+bwd s":>10s} '
          f'{"ch-last s":>10s} {"last/first":>10s} {"null":>6s}')
    cpu = torch.device('cpu')
    for name, netG, scale in configurations():
        if only and only not in name:
            continue
        torch.manual_seed(0)
        net = build_network(netG).train()
        args = inputs(netG, scale, max(size, MIN_SIZE.get(name, 0)))
        shape = 'x'.join(map(str, args[0].shape))
        params = sum(p.numel() for p in net.parameters())
        null = 'last' if memory_format(None, cpu, True, net)[0] else 'first'

        def step() -> None:
            net.zero_grad(set_to_none=True)
            net(*args).mean().backward()
        first = median_seconds(step, repeat, warmup=warmup)
        to_channels_last(net)
        args = tuple(a.contiguous(memory_format=torch.channels_last) if torch.is_tensor(a) and a.dim() == 4 else a
                     for a in args)
        last = median_seconds(step, repeat, warmup=warmup)
        print(f'{name:45s} {netG["net_type"]:11s} {params:12,d} {shape:>14s} {first:10.3f} {last:10.3f} '
              f'{last / first:10.2f} {null:>6s}', flush=True)


def video_configurations() -> List[Tuple[str, Dict[str, Any]]]:
    """(name, validated netG) of each video table: BasicSR's released BasicVSR, IconVSR, BasicVSR++, EDVR."""
    out = []
    for path in sorted(glob.glob(os.path.join(ARCH_TABLES, '*.tsv'))):
        name = os.path.basename(path)[:-len('.tsv')]
        if name.split('__')[0] not in VIDEO_TABLES:
            continue
        with open(path) as f:
            kwargs = json.loads(f.readline().split('kwargs: ', 1)[1])
        scale = 1 if kwargs.get('hr_in') else 4
        opt = validate({'task': 't', 'scale': scale, 'netG': {'net_type': name.split('__')[0], **kwargs}},
                       option_rules(), source=name)
        out.append((name, opt['netG']))
    return out


def video_clip(netG: Dict[str, Any], quick: bool) -> Tuple[int, ...]:
    """The clip shape a video table is timed on (see the module docstring)."""
    kind = netG['net_type']
    if kind == 'edvr':
        side = (64 if quick else 256) if netG['hr_in'] else (16 if quick else 64)
        return 1, netG['num_frame'], 3, side, side
    least = {'basicvsr': 2, 'basicvsrpp': 3, 'iconvsr': 2 * netG.get('temporal_padding', 0) + 1}[kind]
    return (1, least, 3, 33, 33) if quick else (1, max(5, least), 3, 64, 64)


def bench_video_networks(repeat: int, only: str, quick: bool) -> None:
    """Wall and process CPU seconds of each step (medians): on a shared machine the CPU time of a one-thread run
    is what the step costs, the wall time what it took among the other jobs."""
    print(f'\n{"video configuration":45s} {"net_type":11s} {"parameters":>12s} {"clip":>14s} {"fwd+bwd s":>10s} '
          f'{"cpu s":>9s}')
    for name, netG in video_configurations():
        if only and only not in name:
            continue
        torch.manual_seed(0)
        net = build_network(netG).train()
        clip = torch.rand(video_clip(netG, quick))
        cpu: List[float] = []

        def step() -> None:
            c0 = time.process_time()
            net.zero_grad(set_to_none=True)
            net(clip).mean().backward()
            cpu.append(time.process_time() - c0)
        warmup = 0 if quick else 1
        seconds = median_seconds(step, repeat, warmup=warmup)
        shape = 'x'.join(map(str, clip.shape))
        print(f'{name:45s} {netG["net_type"]:11s} {sum(p.numel() for p in net.parameters()):12,d} {shape:>14s} '
              f'{seconds:10.3f} {statistics.median(cpu[warmup:]):9.3f}')


def bench_gan(repeat: int, batch_size: int = 4, warmup: int = 1) -> None:
    """One iteration of model gan vs model plain, same generator and batch (option files of options/gan)."""
    from models.registry import MODELS
    with open(os.path.join(ROOT, 'options', 'gan', 'train_msrresnet_gan_tiny.json')) as f:
        text = f.read()
    raw = json.loads(text[text.index('{'):])
    raw['train']['F_pretrained_path'] = 'random'  # same cost as ImageNet weights
    batch = {'L': torch.rand(batch_size, 3, 24, 24), 'H': torch.rand(batch_size, 3, 96, 96)}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        raw['path']['root'] = tmp
        for kind in ('plain', 'gan'):
            opt_raw = json.loads(json.dumps(raw))
            if kind == 'plain':
                opt_raw['model'] = 'plain'
                opt_raw.pop('netD')
                opt_raw['path'].pop('pretrained_netD')
                opt_raw['train'] = {k: v for k, v in opt_raw['train'].items() if not k.startswith(('D_', 'F_', 'gan_'))}
            opt = validate(opt_raw, option_rules())
            model = MODELS.get(opt['model'], 'model')(opt, torch.device('cpu'))
            it = [0]

            def step() -> None:
                it[0] += 1
                loss = model.backward([batch])
                model.step(it[0], loss)
                model.end_iteration(it[0])
            rows.append((kind, median_seconds(step, repeat, warmup=warmup)))
    plain, gan = rows[0][1], rows[1][1]
    print(f'\none training iteration, MSRResNet (nc 32, nb 4) x4, batch {batch_size} x 96x96, VGG layers [2, 7], '
          f'VGG-96 D:')
    print(f'  plain {plain:.3f} s/iter, gan {gan:.3f} s/iter, gan / plain = {gan / plain:.2f}')


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--quick', action='store_true', help='smoke run: 16x16 inputs, one timed run each, no warm-up')
    # torch's own count (one per usable core, or OMP_NUM_THREADS): a fixed 2 beside a busy neighbour (a test
    # worker given one core) oversubscribed the cores: bench_zoo --quick took 362 s in a CI run, 41 s alone
    p.add_argument('--threads', type=int, default=torch.get_num_threads(),
                   help='intra-op threads (default: torch\'s, which OMP_NUM_THREADS sets)')
    p.add_argument('--repeat', type=int, default=None,
                   help='timed runs after a warm-up (default 3; --quick 1, without warm-up)')
    p.add_argument('--size', type=int, default=None, help='input height and width (default 64; --quick 16)')
    p.add_argument('--only', default='', help='only configurations whose name contains this')
    args = p.parse_args()
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.size = args.size or (16 if args.quick else 64)
    torch.set_num_threads(args.threads)
    print(f'torch {torch.__version__}, {args.threads} threads, CPU')
    warmup = 0 if args.quick else 1
    bench_networks(args.repeat, args.only, args.size, warmup)
    bench_video_networks(args.repeat, args.only, args.quick)
    if not args.only:
        bench_gan(args.repeat, 2 if args.quick else 4, warmup)


if __name__ == '__main__':
    main()
