"""Step time of the framework's training loop against a hand-written PyTorch loop, plus option rows.

Both sides train the demo DnCNN (options/train_dncnn_demo.json) on the same in-memory batches with
the same Adam + MultiStepLR and L1 loss. The framework side is the real `Trainer.run` loop
(micro_batches, timing, the finiteness check, `dist.agree_any`, `ModelPlain.backward/step`, print
steps with `log_losses`), fed by an in-memory loader; only the end-of-run checkpoint write and
replica check are switched off, since they are not per-step costs. EMA is off (`E_decay: 0`) because
the bare loop has none; the `EMA on / off` row shows its price. The batch-augmentation row feeds the same
samples through the real `BatchAugmented` wrapper (`train.use_moa` with traiNNer-redux's default
`moa_augs`/`moa_probs`: one of none, mixup, cutmix, resizemix, cutblur per iteration, partners included)
against the plain batches: the price of the augmentation in the step, on the device. The sharpness-aware rows
(`train.G_optimizer_sam`: sam, fsam, gsam, looksam) time the same Adam wrapped by each method against Adam alone,
and the teacher row distillation from a network of the demo's size (random weights: the cost is the same).

Every row alternates its two sides rep by rep (A, B, A, B, ...) so machine load hits both alike,
and reports the median per-step time of each side and their ratio.

    python bench/bench_loop.py [--quick] [--reps 7] [--steps 15] [--warmup 2] [--threads N] [--no-compile] [--profile]

`--quick` (the demo's DnCNN made tiny, nc 8 and nb 3, on batches of 4 patches of 24²; one warm-up step,
then one rep of one step per side; no compile row) runs every other row in seconds: a smoke run, noisy.
"""
import argparse
import cProfile
import copy
import json
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
sys.path.insert(0, ROOT)

import torch  # noqa: E402
from torch.utils.data import Dataset, default_collate  # noqa: E402

import main_train  # noqa: E402
from data.batch_augment import PLAN_KEY, BatchAugmented, apply as augment_batch  # noqa: E402
from data.sampler import TrainKey, parse_key  # noqa: E402
from models.model_plain import ModelPlain  # noqa: E402
from models.networks.layers.init import init_weights  # noqa: E402
from models.precision import memory_format  # noqa: E402
from models.registry import build_network  # noqa: E402
from option_rules import read_options  # noqa: E402
from utils import dist  # noqa: E402
from utils.image import images_to_float  # noqa: E402

DEMO = os.path.join(ROOT, 'options', 'train_dncnn_demo.json')
# --quick: the demo's DnCNN made tiny, on small batches (the same layers and loop, a fraction of the work)
QUICK_DEMO = ('netG.nc=8', 'netG.nb=3', 'datasets.train.H_size=24', 'datasets.train.dataloader_batch_size=4')


def machine() -> str:
    """One line describing what the numbers were measured on."""
    try:
        load = ', '.join(f'{x:.2f}' for x in os.getloadavg())
    except OSError:
        load = '?'
    cpu = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as f:
            cpu = next(ln.split(':', 1)[1].strip() for ln in f if ln.startswith('model name'))
    except (OSError, StopIteration):
        pass
    return (f'machine: {cpu}, nproc {os.cpu_count()}, torch {torch.__version__}, '
            f'torch threads {torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get("OMP_NUM_THREADS", "unset")}, '
            f'cpu capability {torch.backends.cpu.get_cpu_capability()}, load avg {load}')


def demo_options(root: str, *overrides: str) -> Dict[str, Any]:
    """The demo options with outputs under `root`, no TensorBoard, no EMA (unless overridden)."""
    base = [f'path.root={root}', 'logging.use_tensorboard=false', 'train.E_decay=0']
    return read_options(DEMO, base + list(overrides))


def make_batches(opt: Dict[str, Any], n: int, seed: int = 0) -> List[Dict[str, torch.Tensor]]:
    """`n` demo-shaped batches (batch size, patch size, sigma of the demo's train section)."""
    ds = opt['datasets']['train']
    b, p, c = ds['dataloader_batch_size'], ds['H_size'], opt['n_channels']
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        H = torch.rand(b, c, p, p, generator=g)
        out.append({'L': H + torch.randn(H.shape, generator=g) * (ds['sigma'] / 255.0), 'H': H})
    return out


class _Samples(Dataset):
    """The samples of `batches`, one by one, as a dataset gives them (the same for any key of an index)."""

    def __init__(self, batches: Sequence[Dict[str, torch.Tensor]]):
        self.items = [{k: b[k][i] for k in ('L', 'H')} for b in batches for i in range(b['L'].shape[0])]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, key: Any) -> Dict[str, torch.Tensor]:
        return dict(self.items[parse_key(key)[0]])


def augmented_batches(opt: Dict[str, Any], batches: Sequence[Dict[str, torch.Tensor]]) -> List[Dict[str, Any]]:
    """`batches` through the `train.use_moa` wrapper: batch j is optimizer step j (its step seed), with the
    items' plans, draws and partners, collated as the loader does."""
    t = opt['train']
    ds = BatchAugmented(_Samples(batches), t['moa_augs'], t['moa_probs'])
    b = batches[0]['L'].shape[0]
    return [default_collate([ds[TrainKey(j * b + i, 1000 * j + i, j)] for i in range(b)]) for j in range(len(batches))]


def augmentation_time(batches: Sequence[Dict[str, Any]], reps: int) -> float:
    """Seconds per batch of the device side of the batch augmentation alone (`batch_augment.apply` on batches
    already scaled to floats), the mean over `batches` of each one's fastest of `reps` x 10 runs: the part of
    the row's difference that is the augmentation, without the noise of whole steps."""
    per_batch = []
    for batch in batches:
        floats = images_to_float(batch)
        best = float('inf')
        for _ in range(max(reps, 2)):
            t0 = time.perf_counter()
            for _ in range(10):
                augment_batch(floats)
            best = min(best, (time.perf_counter() - t0) / 10)
        per_batch.append(best)
    return statistics.mean(per_batch)


class _MemoryLoader:
    """Stands in for the DataLoader: the same batches every epoch."""

    def __init__(self, batches: Sequence[Dict[str, torch.Tensor]]):
        self.batches = list(batches)
        self.batch_size = self.batches[0]['L'].shape[0]

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class _NoSampler:
    def set_epoch(self, epoch: int) -> None:
        pass

    def set_position(self, position: int) -> None:
        pass


def framework(opt: Dict[str, Any], batches: Sequence[Dict[str, torch.Tensor]],
              state: Optional[dist.DistState] = None) -> Tuple[Callable[[int], None], Any]:
    """A runner doing k iterations of the real `Trainer.run` loop, and its trainer.

    `state` is the distributed state of an initialised process group (default: a single process).
    """
    torch.manual_seed(0)
    opt = copy.deepcopy(opt)  # the loop sets train.total_iter: the caller's options stay those of its next row
    args = main_train.parse_args(['--opt', DEMO])
    state = state or dist.detect({})
    trainer = main_train.Trainer(opt, state, torch.device('cpu'), args)
    trainer.seed = 0
    trainer.train_loader, trainer.sampler = _MemoryLoader(batches), _NoSampler()
    trainer.val_loader = None
    trainer.accum = opt['train']['accumulate_steps']
    trainer.steps_per_epoch = len(trainer.train_loader) // trainer.accum
    trainer.effective_batch = trainer.train_loader.batch_size * trainer.accum * state.world_size
    trainer.model = ModelPlain(opt, torch.device('cpu'))
    # The run folder as `prepare_run_dir` makes it (its lock, log file and saved options are not
    # per-step costs), then the real `start()`: the Reporter appends history.jsonl rows at print steps.
    for key in ('task', 'models', 'options'):
        os.makedirs(opt['path'][key], exist_ok=True)
    trainer.point = None
    trainer.start()
    trainer.save = lambda: None  # end-of-run checkpoint: not a per-step cost
    trainer.check_replicas = lambda: None

    def run(k: int) -> None:
        trainer.train_opt['total_iter'] = trainer.step + k
        trainer.run()
    return run, trainer


def bare(opt: Dict[str, Any], batches: Sequence[Dict[str, torch.Tensor]]) -> Callable[[int], None]:
    """The hand-written loop a user would write for the same network, optimizer and loss, in the memory format the
    framework's options give (`train.channels_last` null: channels-last on a CPU)."""
    torch.manual_seed(0)
    t = opt['train']
    net = build_network(opt['netG'])
    init_weights(net, opt['netG']['init_type'], opt['netG']['init_bn_type'], opt['netG']['init_gain'])
    fmt = torch.channels_last if memory_format(t['channels_last'], torch.device('cpu'), True, net)[0] else \
        torch.contiguous_format
    net.to(memory_format=fmt)
    optimizer = torch.optim.Adam(net.parameters(), lr=t['G_optimizer_lr'], betas=tuple(t['G_optimizer_betas']),
                                 weight_decay=t['G_optimizer_wd'])
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, t['G_scheduler_milestones'], t['G_scheduler_gamma'])
    loss_fn = torch.nn.L1Loss()
    state = {'i': 0}

    def run(k: int) -> None:
        net.train()
        for _ in range(k):
            batch = batches[state['i'] % len(batches)]
            state['i'] += 1
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(net(batch['L'].contiguous(memory_format=fmt)), batch['H'].contiguous(memory_format=fmt))
            loss.backward()
            optimizer.step()
            scheduler.step()
    return run


def interleaved(a: Callable[[int], None], b: Callable[[int], None], steps: int, reps: int,
                warmup: int = 2) -> Tuple[float, float, float]:
    """Median seconds per step of `a` and `b`, alternating A, B, A, B, ... rep by rep, and the
    median of the per-rep ratios a_i / b_i (robust to load that drifts over the run)."""
    a(warmup)
    b(warmup)
    ta, tb = [], []
    for _ in range(reps):
        for fn, out in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            fn(steps)
            out.append((time.perf_counter() - t0) / steps)
    return statistics.median(ta), statistics.median(tb), statistics.median(x / y for x, y in zip(ta, tb))


def row(label: str, a_name: str, b_name: str, ta: float, tb: float, paired: float, goal: str = '') -> str:
    return (f'{label:<40s} {a_name} {ta * 1e3:7.1f} ms/step | {b_name} {tb * 1e3:7.1f} ms/step | '
            f'ratio {ta / tb:6.3f} (paired {paired:6.3f}){"  " + goal if goal else ""}')


def profile(opt: Dict[str, Any], batches: Sequence[Dict[str, torch.Tensor]], steps: int) -> None:
    """Where the framework's step time goes (cProfile, python-level; torch ops show as their callers)."""
    run, _ = framework(opt, batches)
    run(2)
    prof = cProfile.Profile()
    prof.enable()
    run(steps)
    prof.disable()
    pstats.Stats(prof).sort_stats('tottime').print_stats(25)


def main(argv: Sequence[str] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--quick', action='store_true',
                   help='smoke run: a tiny DnCNN on small batches, 1 rep of 1 step, no torch.compile row')
    p.add_argument('--reps', type=int, default=None, help='reps per side (default 7; --quick 1)')
    p.add_argument('--steps', type=int, default=None, help='training steps per rep (default 15; --quick 1)')
    p.add_argument('--warmup', type=int, default=None, help='untimed steps per side first (default 2; --quick 1)')
    p.add_argument('--threads', type=int, default=None, help='torch threads (default: torch\'s choice)')
    p.add_argument('--no-compile', action='store_true', help='skip the torch.compile row (slow to compile)')
    p.add_argument('--profile', action='store_true', help='also print a cProfile of framework steps')
    a = p.parse_args(argv)
    a.reps = a.reps or (1 if a.quick else 7)
    a.steps = a.steps or (1 if a.quick else 15)
    a.warmup = a.warmup if a.warmup is not None else (1 if a.quick else 2)
    a.no_compile = a.no_compile or a.quick
    if a.threads:
        torch.set_num_threads(a.threads)
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        opt = lambda *o: demo_options(tmp, *(QUICK_DEMO if a.quick else ()), *o)  # noqa: E731
        base = opt()
        batches = make_batches(base, 8)
        ds, net = base['datasets']['train'], base['netG']
        print(f'workload: demo DnCNN nc={net["nc"]} nb={net["nb"]} act={net["act_mode"]}, batch '
              f'{ds["dataloader_batch_size"]}x{base["n_channels"]}x{ds["H_size"]}x{ds["H_size"]}, Adam, L1; '
              f'{a.steps} steps per rep, {a.reps} reps per side, interleaved A,B,A,B; medians')

        fw, _ = framework(base, batches)
        ta, tb, pr = interleaved(fw, bare(base, batches), a.steps, a.reps, a.warmup)
        demo_bare = tb
        print(row('framework loop / bare PyTorch loop', 'framework', 'bare', ta, tb, pr, 'goal <= 1.03'))

        fw_off, _ = framework(opt('train.nan_policy=off'), batches)
        ta, tb, pr = interleaved(fw_off, bare(base, batches), a.steps, a.reps, a.warmup)
        print(row('framework (nan_policy=off) / bare loop', 'framework', 'bare', ta, tb, pr))

        # The loop's own cost in absolute time: a network so small that compute hardly counts.
        tiny = opt('netG.nc=4', 'netG.nb=2', 'datasets.train.dataloader_batch_size=1', 'datasets.train.H_size=8')
        tiny_batches = make_batches(tiny, 8)
        fw_tiny, _ = framework(tiny, tiny_batches)
        ta, tb, pr = interleaved(fw_tiny, bare(tiny, tiny_batches), 20 * a.steps, a.reps, a.warmup)
        print(f'{"per-step overhead (tiny net nc=4 nb=2 1x3x8x8)":<40s} framework {ta * 1e6:7.0f} us/step | '
              f'bare {tb * 1e6:7.0f} us/step | overhead {(ta - tb) * 1e6:5.0f} us = '
              f'{(ta - tb) / demo_bare * 100:.2f} % of a demo bare step')

        # (label, the row's override, the baseline's: the defaults but where the default is the row's setting)
        rows = [('EMA on (E_decay 0.99) / off', 'train.E_decay=0.99', base),
                ('amp bf16 / fp32', 'train.amp=bf16', base),
                ('channels_last on / off', 'train.channels_last=true', opt('train.channels_last=false'))]
        if not a.no_compile:
            rows.append(('compile on / off', 'train.compile=true', base))
        for label, override, baseline in rows:
            on, _ = framework(opt(override), batches)
            off, _ = framework(baseline, batches)
            t0 = time.perf_counter()
            on(1)  # for compile: the compilation happens here
            first = time.perf_counter() - t0
            ta, tb, pr = interleaved(on, off, a.steps, a.reps, a.warmup)
            extra = f'(first step incl. compilation {first:.1f} s)' if 'compile' in override else ''
            print(row(label, 'on ', 'off', ta, tb, pr, extra))
        # sharpness-aware steps around the same Adam (two forward-backward passes; LookSAM's every k-th iteration),
        # and distillation from a teacher of the demo's size (its forward without gradients beside the student's)
        teacher = os.path.join(tmp, 'teacher_G.pth')
        torch.manual_seed(1)
        torch.save(build_network(net).state_dict(), teacher)
        rows = [(f'SAM {m} / {base["train"]["G_optimizer_type"]} alone', f'train.G_optimizer_sam={m}')
                for m in ('sam', 'fsam', 'gsam', 'looksam')]
        rows.append(('teacher (distillation) on / off', 'train.teacher=' + json.dumps({'weights': teacher, 'netG': net})))
        for label, override in rows:
            on, _ = framework(opt(override), batches)
            off, _ = framework(base, batches)
            ta, tb, pr = interleaved(on, off, a.steps, a.reps, a.warmup)
            print(row(label, 'on ', 'off', ta, tb, pr, '(LookSAM: two passes every G_sam_k=10 iterations)'
                      if 'looksam' in override else ''))
        # batch augmentation: the same samples, plus each iteration's augmentation (and partners) in the batch
        moa = augmented_batches(base, batches)
        drawn = Counter(json.loads(b[PLAN_KEY][0])['aug'] for b in moa)
        on, _ = framework(base, moa)
        off, _ = framework(base, batches)
        ta, tb, pr = interleaved(on, off, a.steps, a.reps, a.warmup)
        kinds = ', '.join(f'{k} {n}' for k, n in sorted(drawn.items()))
        alone = augmentation_time(moa, a.reps)
        print(row('batch augment (use_moa) on / off', 'on ', 'off', ta, tb, pr,
                  f'({len(moa)} batches: {kinds}; the augmentation alone {alone * 1e3:.2f} ms/step = '
                  f'{alone / tb * 100:.2f} % of an off step)'))
        if a.profile:
            profile(base, batches, a.steps)


if __name__ == '__main__':
    main()
