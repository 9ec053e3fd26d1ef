"""The GPU proof: one command that trains every path on CUDA, then prints the speed and memory tables, in one table.

GPU time comes rarely and in minutes, so everything a CUDA machine should show is one prepared command
that fits one call of under 9 minutes (a global `--budget`, 480 s by default, then one table):

  1. every path trains on CUDA for a few iterations, each row its own processes with its log kept: the
     demo (fp32 with the fused Adam and TF32, the fused optimizer off, bf16, fp16 with its GradScaler,
     channels_last, torch.compile default and reduce-overhead, sharpness-aware steps under fp16 and bf16), a `WORLD_SIZE=1` environment launch as a
     platform starts one (NCCL), resume bit-exact (40 iterations straight against 20 + 20: weights, EMA,
     optimizer and schedule equal; once as main_train.py runs, once with deterministic kernels),
     main_test.py with tiles and x8, scripts/export.py (ONNX fp32 and fp16), every tiny file of
     options/zoo, options/gan, options/vrt, options/rvrt, options/realesrgan/tiny (the degradations run on
     the GPU) and options/archs, an LMDB-backed video run and a W&B (offline) run;
  2. speed: bench/bench_gpu.py's table, one row per process (DnCNN, MSRResNet x4, SwinIR x2 from KAIR's
     files: the bare loop, then main_train.py default / cache / bf16 / compile): ms/iter, data wait,
     peak memory, TFLOP/s and the share of the card's measured bf16 matmul rate (row `card/gpu`);
  3. memory: bench/bench_video_gpu.py's training-step rows (VRT 006, RVRT 002: ms and peak GiB per
     forward + backward + Adam step, KAIR's checkpointing and `checkpoint: "memory"`, fp32 and bf16)
     beside the official figures measured on an H100.

Everything is generated on the spot (no downloads). spandrel, lmdb and wandb may be missing on the GPU
machine: their rows say `skipped: not installed` unless their wheels are carried (below).

    python bench/gpu_check.py [--out DIR] [--budget 480] [--jobs N] [--only PATTERN ...] [--list]
    python bench/gpu_check.py --quick     # all three parts on the CPU, tiny sizes, a smoke test (~1 min)

The rows are a list (`plan()`); each says what it runs, what its log must show, what it needs (modules,
CUDA, rows before it), and its estimated and longest time on the GPU; another branch adds a row with one
line there (a memory row: one line in bench_video_gpu.py's ROWS). They start in that order, the most
important first: the card; part 1 side by side (`--jobs`, default cores - 2, at most 12; the demo's
paths and launches first, the compile rows first of all, then every tiny option file in their shadow);
then the timed rows, each alone: SwinIR's speed, the memory rows, DnCNN's and MSRResNet's speed (under
`--quick`, which measures nothing, only the card and the speed rows that read the bare row's FLOPs run
alone; the train rows do 2 iterations, resume 2 + 2, on the demo's DnCNN made tiny). A row
whose estimate no longer fits the budget is not started (`skipped: time budget`); one the budget cuts
short is stopped with its processes (skipped too); one that runs past its own limit is stopped and
fails. `--only 'demo/*' 'speed/swinir*'` reruns some rows (with the rows they need); `--list` shows the
plan without running it.

Outputs go under `--out`, else `$OUT` when set, else a new temporary folder, and are rewritten after
every row, so a run cut short still leaves what it did: `gpu_check.txt` (the table, with the failed rows'
first error lines), `gpu_check.json` (every number), `gpu_check_logs.tar.gz` (every process's output, one
folder per row). Runs and data live in a temporary work folder, removed at the end (`--keep-work`).

Columns: `row` (part/name: card, train rows by group, speed/<config> <row>, memory/<net> <checkpointing>
<precision>); `result` ok / FAILED / skipped; `ms/step` (train rows: mean iteration time after the first
print window, from history.jsonl; speed: ms per iteration after the warm-up; memory: median ms per
training step); `data ms` (wait for data per iteration); `peak GiB` (torch.cuda.max_memory_allocated);
`TFLOP/s` (speed: forward+backward FLOPs of one iteration over its time; card: the measured bf16 matmul
rate); `% bf16` (that over the card's rate); `/ bare` (speed: time over the bare loop of the same
network); `note` (why a row failed or was skipped; else what it showed: validation PSNR, compile time,
the backend, the official figures).

On a lent GPU machine (the `run` tool of the development workplace): once, on this machine, in the
repository's root, fetch the wheels of what the image lacks (pure Python spandrel, and lmdb for
Python 3.12), into a folder git ignores:

    echo /.whl/ >> "$(git rev-parse --git-common-dir)/info/exclude"
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \\
        -d .whl spandrel==0.4.2 lmdb==3.0.0

(spandrel's own requirements, torch, torchvision, safetensors, numpy, einops and typing_extensions, are
in the image; wandb would need a dozen more wheels, so its row is normally skipped). Then one call:

    run(command="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "
                "--target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; "
                "PYTHONUNBUFFERED=1 python3 bench/gpu_check.py 2>&1 | tee $OUT/gpu_check_console.txt",
        carry=[".whl"], timeout_s=540)

(one command line; without wheels, leave out everything before `PYTHONUNBUFFERED` and the carry). The
reply's output ends with the table; the three files above and the console copy come back from $OUT.
A second call can rerun what failed or was skipped: `python3 bench/gpu_check.py --only 'demo/fp16' ...`.
"""
import argparse
import fnmatch
import importlib.util
import io
import json
import math
import os
import queue
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from glob import glob
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import bench_gpu  # noqa: E402  (the speed rows: its configurations and option rows)
import bench_video_gpu  # noqa: E402  (the memory rows and the official figures)
from common import entry, quick_jobs  # noqa: E402
from utils.cores import usable_cores  # noqa: E402

NAN = float('nan')
MAIN_TRAIN = os.path.join(ROOT, 'main_train.py')
DEMO = 'options/train_dncnn_demo.json'
# --quick: the demo's DnCNN made tiny, on small patches
QUICK_DEMO = ('netG.nc=8', 'netG.nb=3', 'datasets.train.H_size=24', 'datasets.train.dataloader_batch_size=4')
# issue 45's losses beside the demo's L1 (structure_texture with a random VGG19: the weights file may be absent)
RECIPE_LOSSES = ('train.G_extra_losses={"wavelet": 0.1, "oklab_consistency": 1, "lstar_consistency": 1, "ms_swd": 1, '
                 '"structure_texture": 0.1}')
# variables of a launcher or cluster the check itself may run under: a row sets its own
LAUNCH_VARS = ('WORLD_SIZE', 'RANK', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT', 'LOCAL_WORLD_SIZE', 'GROUP_RANK',
               'ROLE_RANK', 'ROLE_WORLD_SIZE', 'GROUP_WORLD_SIZE')
FUSED = r'optimizer Adam(W)? \(fused\)'
COMPILE_NOTES = ((r'train\.compile: the first iteration took ([\d.]+) s, compilation included \((\d+) graphs\)',
                  'first iteration {0} s ({1} graphs)'),
                 (r'train\.compile: (\d+) more graph\(s\) compiled at iteration (\d+)', 'RECOMPILED {0} at {1}'))
# the speed rows' sizes (bench_gpu.py's defaults of 200 iterations on 800 images take ~8 minutes alone)
SPEED = {'iters': 80, 'warmup': 20, 'images': 300}
MEMORY = {'reps': 3, 'warmup': 1}
SPEED_ORDER = ('swinir', 'dncnn', 'msrresnet')  # SwinIR first: the target furthest from reach
TAIL = (('zoo', 'options/zoo/*_tiny.json'), ('gan', 'options/gan/*_tiny.json'), ('vrt', 'options/vrt/*_tiny.json'),
        ('rvrt', 'options/rvrt/*_tiny.json'), ('realesrgan', 'options/realesrgan/tiny/*.json'),
        ('archs', 'options/archs/*_tiny.json'))
OUTPUTS = ('gpu_check.txt', 'gpu_check.json', 'gpu_check_logs.tar.gz')
NOTE_WIDTH = 48  # of the printed table's notes (the file keeps them whole): ~100 rows stay inside 12,000 characters


# ------------------------------------------------------------------------------------------------ rows

@dataclass(frozen=True)
class Step:
    """One process of a row: `python ARGV...` in the work folder, its output in `<row>/<k>_<label>.log`."""
    label: str
    argv: Tuple[str, ...]
    env: Tuple[Tuple[str, str], ...] = ()


@dataclass
class Result:
    """What a row showed; numbers are NaN where they do not apply."""
    status: str  # ok | failed | skipped
    note: str = ''
    ms: float = NAN
    data_ms: float = NAN
    peak_gib: float = NAN
    tflops: float = NAN
    share: float = NAN
    ratio: float = NAN
    flops: float = NAN  # speed rows: forward + backward FLOPs of one iteration (measured by the bare row)
    seconds: float = NAN
    log: str = ''


@dataclass
class Ctx:
    """What the rows share: the device, the mode, the folders, the results so far."""
    cuda: bool
    quick: bool
    work: str
    threads: int = 1  # OMP_NUM_THREADS of the rows that run side by side
    results: Dict[str, Result] = field(default_factory=dict)
    speed: Mapping[str, int] = field(default_factory=lambda: dict(SPEED))
    memory: Mapping[str, int] = field(default_factory=lambda: dict(MEMORY))

    @property
    def runs(self) -> str:
        return os.path.join(self.work, 'runs')

    @property
    def logs(self) -> str:
        return os.path.join(self.work, 'logs')

    def scale(self) -> float:
        """Times on the CPU over times on the GPU, for the estimates and limits."""
        return 1.0 if self.cuda else 4.0


@dataclass(frozen=True, kw_only=True)
class Row:
    """One line of the table. `name` is `group/what`; the group gives the part (card, speed, memory, else train)."""
    name: str
    estimate_s: float = 20.0   # wall seconds on the GPU, for the budget
    timeout_s: float = 180.0   # the longest it may take on the GPU (x4 on the CPU)
    needs: Tuple[str, ...] = ()  # Python modules; missing: skipped, not installed
    after: Tuple[str, ...] = ()  # rows whose outputs it reads (they come earlier in the plan)
    cuda_only: bool = False
    exclusive: bool = False    # timed: runs alone (but under --quick, see `alone`)
    quick: bool = False        # part of --quick

    @property
    def part(self) -> str:
        group = self.name.split('/')[0]
        return group if group in ('card', 'speed', 'memory') else 'train'

    def needs_cuda(self, ctx: Ctx) -> bool:
        return self.cuda_only

    def alone(self, ctx: Ctx) -> bool:
        """Whether it runs alone, after the rows before it: a timed row; under --quick, where nothing is
        measured, only one whose check reads the results of rows before it."""
        return self.exclusive and not ctx.quick

    def steps(self, ctx: Ctx) -> List[List[Step]]:
        """Groups of processes, run group after group, the processes of a group side by side."""
        raise NotImplementedError

    def check(self, ctx: Ctx, out: Dict[str, str]) -> Result:
        """The result from the processes' outputs (`label` -> text), all of which exited 0."""
        return Result('ok')


def slug(name: str) -> str:
    return re.sub(r'[^A-Za-z0-9._-]+', '_', name)


def script(*parts: str) -> str:
    return os.path.join(ROOT, *parts)


def sets_argv(sets: Sequence[str]) -> Tuple[str, ...]:
    return tuple(a for s in sets for a in ('--set', s))


def result_line(text: str) -> Dict[str, Any]:
    """The `RESULT {json}` a bench child prints."""
    found = re.findall(r'^RESULT (\{.*\})$', text, re.M)
    if not found:
        raise ValueError('no RESULT line in the output')
    return json.loads(found[-1])


def applies(where: str, cuda: bool) -> bool:
    return where == 'any' or (where == 'cuda') == cuda


@dataclass(frozen=True, kw_only=True)
class TrainRow(Row):
    """main_train.py on one option file for a few iterations, validated at the end (`validations` times)."""
    opt: str
    sets: Tuple[str, ...] = ()
    quick_sets: Tuple[str, ...] = ()   # added with --quick: tiny sizes
    env: Tuple[Tuple[str, str], ...] = ()
    iters: int = 6
    quick_iters: int = 2
    validations: int = 1
    expect: Tuple[Tuple[str, str], ...] = ()   # (any|cuda|cpu, regex) the output must show
    absent: Tuple[Tuple[str, str], ...] = ()   # (any|cuda|cpu, regex) it must not
    notes: Tuple[Tuple[str, str], ...] = ()    # (regex, template): what the note says of the output

    @property
    def task(self) -> str:
        return slug(self.name.replace('/', '_'))

    def total(self, ctx: Ctx) -> int:
        return self.quick_iters if ctx.quick else self.iters

    def model_sets(self, ctx: Ctx) -> List[str]:
        """The overrides that change what is trained (main_test and export must repeat them)."""
        return [*self.sets, *(self.quick_sets if ctx.quick else ())]

    def train_sets(self, ctx: Ctx, task: str, iters: int, every: Optional[int] = None) -> List[str]:
        """The row's overrides, then where it runs and for how long: saved at the end (and every `every`
        iterations), validated `validations` times (or every `every`), printed about 4 times."""
        return [*self.model_sets(ctx), f'path.root={json.dumps(ctx.runs)}', f'task={json.dumps(task)}',
                f'train.total_iter={iters}', f'train.checkpoint_print={max(1, iters // 4)}',
                f'train.checkpoint_save={every or iters}',
                f'train.checkpoint_test={every or max(1, iters // self.validations)}']

    def step_env(self, ctx: Ctx) -> Tuple[Tuple[str, str], ...]:
        return self.env

    def steps(self, ctx: Ctx) -> List[List[Step]]:
        argv = (MAIN_TRAIN, '--opt', script(self.opt), *sets_argv(self.train_sets(ctx, self.task, self.total(ctx))))
        return [[Step('train', argv, self.step_env(ctx))]]

    def check(self, ctx: Ctx, out: Dict[str, str]) -> Result:
        log = out['train']
        expect = (('cuda', r'device=cuda'), ('cpu', r'device=cpu'), *self.expect)
        for where, pattern in expect:
            if applies(where, ctx.cuda) and not re.search(pattern, log, re.M):
                return Result('failed', f'the log lacks /{pattern}/')
        for where, pattern in self.absent:
            if applies(where, ctx.cuda) and re.search(pattern, log, re.M):
                return Result('failed', f'the log shows /{pattern}/')
        return history_result(os.path.join(ctx.runs, self.task), self.total(ctx), log, self.notes)


def history_result(task_dir: str, iters: int, log: str, notes: Sequence[Tuple[str, str]] = ()) -> Result:
    """ok with the run's numbers (history.jsonl: mean over the print windows after the first), or failed
    when the run stopped short of `iters`."""
    path = os.path.join(task_dir, 'history.jsonl')
    if not os.path.exists(path):
        return Result('failed', f'no {os.path.basename(task_dir)}/history.jsonl')
    rows = [json.loads(line) for line in open(path) if line.strip()]
    train = [r for r in rows if r.get('kind') == 'train']
    if not train or train[-1]['iter'] < iters:
        return Result('failed', f'history.jsonl ends at iteration {train[-1]["iter"] if train else 0} of {iters}')
    steady = train[1:] or train
    mem = [r['gpu_mem_gib'] for r in train if 'gpu_mem_gib' in r]
    said = []
    val = [r for r in rows if r.get('kind') == 'val' and 'psnr' in r]
    if val:
        said.append(f'PSNR {val[-1]["psnr"]:.2f}')
    for pattern, template in notes:
        for m in re.finditer(pattern, log, re.M):
            said.append(template.format(*m.groups()))
    return Result('ok', '; '.join(said), ms=1e3 * statistics.mean(r['iter_time'] for r in steady),
                  data_ms=1e3 * statistics.mean(r['data_time'] for r in steady), peak_gib=max(mem) if mem else NAN)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@dataclass(frozen=True, kw_only=True)
class EnvLaunchRow(TrainRow):
    """One process with the variables a platform injects (RANK, WORLD_SIZE=1, MASTER_*, LOCAL_RANK): a
    process group of one, NCCL on CUDA, DDP around the network."""

    def step_env(self, ctx: Ctx) -> Tuple[Tuple[str, str], ...]:
        return (('RANK', '0'), ('WORLD_SIZE', '1'), ('LOCAL_RANK', '0'), ('MASTER_ADDR', '127.0.0.1'),
                ('MASTER_PORT', str(free_port())), *self.env)


@dataclass(frozen=True, kw_only=True)
class ResumeRow(TrainRow):
    """`iters` straight against iters/2, then a resume to iters; the checkpoints at `iters` must be equal
    bit for bit (weights, EMA, optimizer, schedule, position). `deterministic`: every process under
    torch.use_deterministic_algorithms, which tells a resume bug from kernels that differ run to run."""
    deterministic: bool = False

    def steps(self, ctx: Ctx) -> List[List[Step]]:
        total = self.total(ctx)
        half = total // 2
        start = (__file__, '--deterministic') if self.deterministic else (MAIN_TRAIN,)
        env = (('CUBLAS_WORKSPACE_CONFIG', ':4096:8'),) if self.deterministic else ()

        def run(label: str, task: str, iters: int) -> Step:
            sets = self.train_sets(ctx, task, iters, every=half)  # both sides save and validate at half
            return Step(label, (*start, '--opt', script(self.opt), *sets_argv(sets)), env)
        return [[run('straight', f'{self.task}_straight', total), run('first', f'{self.task}_resumed', half)],
                [run('resumed', f'{self.task}_resumed', total)]]

    def check(self, ctx: Ctx, out: Dict[str, str]) -> Result:
        total = self.total(ctx)
        if f'at iteration {total // 2} (epoch' not in out['resumed']:
            return Result('failed', f'the second run did not resume at iteration {total // 2}')
        a, b = (os.path.join(ctx.runs, f'{self.task}_{s}', 'models') for s in ('straight', 'resumed'))
        problem = checkpoint_difference(a, b, total)
        if problem:
            return Result('failed', f'{total} straight != {total // 2} + {total // 2}: {problem}')
        kept = 'weights, EMA, ' if os.path.exists(os.path.join(a, f'{total}_E.pth')) else 'weights, '
        return Result('ok', f'{total} = {total // 2} + {total // 2} bit for bit: {kept}optimizer, schedule')


def checkpoint_difference(a: str, b: str, step: int) -> Optional[str]:
    """Where the checkpoints of two runs at `step` differ (None: identical)."""
    import torch

    def load(folder: str, kind: str) -> Any:
        return torch.load(os.path.join(folder, f'{step}_{kind}.pth'), map_location='cpu', weights_only=True)
    for kind in ('G', 'E'):
        there = [os.path.exists(os.path.join(f, f'{step}_{kind}.pth')) for f in (a, b)]
        if there[0] != there[1]:
            return f'{step}_{kind}.pth in one run only'
        if there[0]:
            found = difference(load(a, kind), load(b, kind), kind)
            if found:
                return found
    sa, sb = load(a, 'state'), load(b, 'state')
    for key in ('optimizer', 'scheduler'):
        found = difference(sa['model'][key], sb['model'][key], key)
        if found:
            return found
    position = ('iter', 'epoch', 'epoch_step')
    return difference([sa[k] for k in position], [sb[k] for k in position], 'position')


def difference(a: Any, b: Any, where: str) -> Optional[str]:
    """The first place where two nested checkpoint values differ, with the size of the difference."""
    import torch
    if isinstance(a, dict):
        if not isinstance(b, dict) or a.keys() != b.keys():
            return f'{where}: other keys'
        return next((d for k in a for d in [difference(a[k], b[k], f'{where}.{k}')] if d), None)
    if isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or len(a) != len(b):
            return f'{where}: other length'
        return next((d for i in range(len(a)) for d in [difference(a[i], b[i], f'{where}[{i}]')] if d), None)
    if torch.is_tensor(a):
        if not torch.is_tensor(b) or a.dtype != b.dtype or a.shape != b.shape:
            return f'{where}: other dtype or shape'
        if torch.equal(a, b):
            return None
        if a.is_floating_point():
            return f'{where}: max|diff| {(a.double() - b.double()).abs().max().item():.3g}'
        return f'{where}: differs'
    return None if a == b else f'{where}: {a!r} != {b!r}'


def source_sets(source: TrainRow, ctx: Ctx) -> List[str]:
    """The overrides that find the run of train row `source` and rebuild its network."""
    return [*source.model_sets(ctx), f'path.root={json.dumps(ctx.runs)}', f'task={json.dumps(source.task)}']


@dataclass(frozen=True, kw_only=True)
class TestRow(Row):
    """main_test.py on the checkpoint of the train row `source` (after it), tiled and with the x8 ensemble."""
    source: TrainRow
    tile: int = 64
    overlap: int = 16

    def steps(self, ctx: Ctx) -> List[List[Step]]:
        sets = [*source_sets(self.source, ctx), f'val.tile={self.tile}', f'val.tile_overlap={self.overlap}',
                'val.self_ensemble=true']
        out = os.path.join(ctx.work, 'test', slug(self.name))
        return [[Step('test', (script('main_test.py'), '--opt', script(self.source.opt), '--out', out,
                               *sets_argv(sets)))]]

    def check(self, ctx: Ctx, out: Dict[str, str]) -> Result:
        m = re.search(r'(\d+) items: PSNR ([\d.]+) dB', out['test'])
        if not m or not os.path.exists(os.path.join(ctx.work, 'test', slug(self.name), 'results.csv')):
            return Result('failed', 'no results.csv and PSNR line')
        return Result('ok', f'PSNR {m.group(2)} on {m.group(1)} items, tiles {self.tile}/{self.overlap}, x8')


@dataclass(frozen=True, kw_only=True)
class ExportRow(Row):
    """scripts/export.py of the train row `source`'s checkpoint: ONNX fp32 and fp16, checked by onnxruntime."""
    source: TrainRow

    def steps(self, ctx: Ctx) -> List[List[Step]]:
        sets = source_sets(self.source, ctx)
        return [[Step('export', (script('scripts', 'export.py'), '--opt', script(self.source.opt), '--fp16',
                                 '--out', os.path.join(ctx.work, 'export', slug(self.name)), *sets_argv(sets)))]]

    def check(self, ctx: Ctx, out: Dict[str, str]) -> Result:
        diffs = re.findall(r'^\S*?(_fp16)?\.onnx: max\|diff\| = (\S+)', out['export'], re.M)
        if len(diffs) != 2 or 'wrote ' not in out['export']:
            return Result('failed', 'no max|diff| of both ONNX files')
        return Result('ok', ', '.join(f'{"fp16" if fp16 else "fp32"} max|diff| {d}' for fp16, d in diffs))


@dataclass(frozen=True, kw_only=True)
class LmdbRow(TrainRow):
    """A video run reading its training clips from LMDBs that scripts/make_lmdb.py builds from the demo
    frames (PNG-compressed GT, raw LQ frames)."""

    def steps(self, ctx: Ctx) -> List[List[Step]]:
        demo = Step('demo data', (__file__, '--make_demo', script(self.opt)))
        make = [Step(f'lmdb {name}', (script('scripts', 'make_lmdb.py'), '--input', f'demo_data/vimeo/{name}',
                                      '--output', f'lmdb/{name}.lmdb', '--layout', 'vimeo', '--compress', compress))
                for name, compress in (('sequences', 'fast'), ('sequences_BIx4', 'raw'))]
        sets = [*self.train_sets(ctx, self.task, self.total(ctx)), 'datasets.train.io_backend={"type": "lmdb"}',
                'datasets.train.generate_demo=null', 'datasets.train.dataroot_gt="lmdb/sequences.lmdb"',
                'datasets.train.dataroot_lq="lmdb/sequences_BIx4.lmdb"']
        return [[demo], make, [Step('train', (MAIN_TRAIN, '--opt', script(self.opt), *sets_argv(sets)))]]


@dataclass(frozen=True, kw_only=True)
class CardRow(Row):
    """The card: name, memory, and its bf16 matmul rate measured here (the speed rows' 100 %)."""

    def alone(self, ctx: Ctx) -> bool:
        return self.exclusive  # the speed rows read its rate

    def steps(self, ctx: Ctx) -> List[List[Step]]:
        return [[Step('card', (__file__, '--card', *(['--quick'] if ctx.quick else [])))]]

    def check(self, ctx: Ctx, out: Dict[str, str]) -> Result:
        r = result_line(out['card'])
        note = (f'{r["device"]}, {r["capability"]}, {r["sms"]} SMs, {r["memory_gib"]:.1f} GiB' if r['cuda']
                else f'CPU, {r["cores"]} cores')
        return Result('ok', note, tflops=r['bf16_tflops'])


@dataclass(frozen=True, kw_only=True)
class SpeedRow(Row):
    """One row of bench_gpu.py's table, in a process of its own: the bare loop as `bench_gpu.py --row` (which
    generates the images and counts the FLOPs of one iteration), the others as main_train.py itself."""
    config: str
    variant: str  # 'bare' or a row of bench_gpu.ROWS

    def needs_cuda(self, ctx: Ctx) -> bool:
        return self.cuda_only or not ctx.quick

    def alone(self, ctx: Ctx) -> bool:
        return self.exclusive and (not ctx.quick or self.variant != 'bare')  # the others read the bare row's FLOPs

    def sizes(self, ctx: Ctx) -> Tuple[int, int, int, int]:
        """(iterations, warm-up, images, workers): bench_gpu.py's --quick ones, else this check's."""
        given = {} if ctx.quick else dict(ctx.speed)
        return bench_gpu.sizes(argparse.Namespace(quick=ctx.quick, workers=None, **{k: given.get(k) for k in SPEED}))

    def steps(self, ctx: Ctx) -> List[List[Step]]:
        iters, warmup, images, workers = self.sizes(ctx)
        out = os.path.join(ctx.work, 'speed')
        args = ('--out', out, '--iters', str(iters), '--warmup', str(warmup), '--images', str(images),
                '--workers', str(workers), *(('--quick',) if ctx.quick else ()))
        if self.variant == 'bare':
            return [[Step('bench', (script('bench', 'bench_gpu.py'), '--row', self.config, 'bare', *args))]]
        data = os.path.join(out, 'data')
        cmd, _ = bench_gpu.ours_command(self.config, self.variant, ctx.quick, data, out, iters, warmup, workers)
        make = ([] if all(os.path.exists(os.path.join(data, d, '.complete')) for d in ('train', 'test')) else
                [[Step('images', (script('bench', 'bench_gpu.py'), '--data', out, '--images', str(images),
                                  *(('--quick',) if ctx.quick else ())))]])
        return make + [[Step('train', tuple(cmd[1:]))]]

    def check(self, ctx: Ctx, out: Dict[str, str]) -> Result:
        if self.variant == 'bare':
            r = result_line(out['bench'])
            flops = r['flops']
        else:
            task = bench_gpu.ours_task(self.config, self.variant)
            r = bench_gpu.ours_numbers(os.path.join(ctx.work, 'speed'), task, self.sizes(ctx)[1])
            bare = ctx.results.get(f'speed/{self.config} bare')
            flops = bare.flops if bare is not None else NAN
        tflops = flops / (r['ms'] / 1e3) / 1e12
        card = ctx.results.get('card/gpu')
        bare = ctx.results.get(f'speed/{self.config} bare')
        options = bench_gpu.ROWS.get(self.variant, {})
        what = ('the hand-written loop' if self.variant == 'bare' else
                ', '.join(f'{k.rsplit(".", 1)[-1]}={json.dumps(v).strip(chr(34))}' for k, v in options.items())
                or "KAIR's options as they are")
        log = out.get('train', '')
        compiled = [t.format(*m.groups()) for p, t in COMPILE_NOTES for m in re.finditer(p, log, re.M)]
        return Result('ok', '; '.join(compiled) or what, ms=r['ms'], data_ms=r['data_ms'], peak_gib=r['mem_gib'],
                      tflops=tflops, flops=flops,
                      share=100 * tflops / card.tflops if card and card.status == 'ok' else NAN,
                      ratio=r['ms'] / bare.ms if bare and bare.status == 'ok' and self.variant != 'bare' else NAN)


@dataclass(frozen=True, kw_only=True)
class MemoryRow(Row):
    """One training-step row of bench_video_gpu.py (`--child`), beside the official figure where there is one."""
    net: str
    checkpoint: str
    precision: str

    def needs_cuda(self, ctx: Ctx) -> bool:
        return self.cuda_only or not ctx.quick

    def steps(self, ctx: Ctx) -> List[List[Step]]:
        reps, warmup = (1, 0) if ctx.quick else (ctx.memory['reps'], ctx.memory['warmup'])
        return [[Step('bench', (script('bench', 'bench_video_gpu.py'), '--child', self.net, self.checkpoint,
                                self.precision, '--reps', str(reps), '--warmup', str(warmup),
                                *(['--quick'] if ctx.quick else [])))]]

    def check(self, ctx: Ctx, out: Dict[str, str]) -> Result:
        r = result_line(out['bench'])
        official = bench_video_gpu.OFFICIAL.get((self.net, self.precision))
        note = 'tiny network (--quick)' if ctx.quick else 'no official figure'
        if official and not ctx.quick:
            o_ms, o_gib = (float(v) for v in re.findall(r'[\d.]+', official))
            note = (f'official {self.precision} {official}: time x{r["ms"] / o_ms:.2f}, '
                    f'memory x{r["peak_gib"] / o_gib:.2f}')
        return Result('ok', note, ms=r['ms'], peak_gib=r['peak_gib'])


# ------------------------------------------------------------------------------------------------ plan

def demo_row(what: str, sets: Sequence[str] = (), **kw: Any) -> TrainRow:
    """A row of the demo (DnCNN, 20 iterations, validated at 10 and 20; --quick: tiny, 2 iterations)."""
    return TrainRow(name=f'demo/{what}', opt=DEMO, sets=tuple(sets), quick_sets=QUICK_DEMO, iters=20, validations=2,
                    **kw)


def short_name(group: str, path: str) -> str:
    """`train_esrgan_tiny.json` -> esrgan; `006_train_vrt_videodeblurring_gopro_rgbspike_tiny.json` ->
    006_gopro_rgbspike (the group and the task words go: the table stays narrow)."""
    stem = os.path.splitext(os.path.basename(path))[0].replace('train_', '').replace('_tiny', '')
    if group in ('vrt', 'rvrt'):
        stem = re.sub(r'video[a-z]+_(b[id]_)?', '', stem.replace(f'{group}_', '', 1))
    return stem


def spandrel_types() -> set:
    from models.networks.spandrel import ARCHITECTURES
    return {a.net_type for a in ARCHITECTURES}


def tail_rows() -> List[Row]:
    """A row for every tiny option file of the folders TAIL names (spandrel's architectures need spandrel)."""
    from utils.options import parse_json_file
    by_spandrel = spandrel_types()
    rows: List[Row] = []
    for group, pattern in TAIL:
        for path in sorted(glob(os.path.join(ROOT, pattern))):
            net = parse_json_file(path)['netG']['net_type']
            video = group in ('vrt', 'rvrt')
            rows.append(TrainRow(name=f'{group}/{short_name(group, path)}', opt=os.path.relpath(path, ROOT),
                                 needs=('spandrel',) if net in by_spandrel else (), estimate_s=30 if video else 20,
                                 timeout_s=300 if video else 180))
    return rows


def plan() -> List[Row]:
    """Every row, in the order they run (the most important first)."""
    fp32 = demo_row('fp32', expect=(('cuda', FUSED), ('cuda', r'TensorFloat-32 matmuls and convolutions on')),
                    notes=((FUSED, 'fused Adam'), (r'TensorFloat-32 matmuls and convolutions (on)', 'TF32 {0}')),
                    quick=True)
    compiled = (('any', r'train\.compile: the first iteration took'),)
    rows: List[Row] = [
        CardRow(name='card/gpu', exclusive=True, quick=True, estimate_s=15, timeout_s=120),
        # the compile rows first: the longest of the side-by-side rows
        demo_row('compile', ['train.compile=true'], expect=compiled, notes=COMPILE_NOTES, estimate_s=90, timeout_s=360),
        demo_row('compile-reduce-overhead', ['train.compile=true', 'train.compile_mode="reduce-overhead"'],
                 expect=compiled, notes=COMPILE_NOTES, cuda_only=True, quick=True, estimate_s=90, timeout_s=360),
        fp32,
        demo_row('fused-off', ['train.G_optimizer_fused=false'], absent=(('any', FUSED),)),
        demo_row('bf16', ['train.amp="bf16"']),
        demo_row('fp16', ['train.amp="fp16"'], cuda_only=True, quick=True),
        demo_row('channels_last', ['train.channels_last=true']),
        # the 2026 recipe losses and schedule under bf16 on the device: MS-SWD's directions drawn there each iteration
        demo_row('bf16-recipe-losses', ['train.amp="bf16"', 'train.G_scheduler_type="wsd"', RECIPE_LOSSES,
                                        'train.G_swd_scales=3', 'train.G_swd_patch_size=5',
                                        'train.G_st_pretrained_path="random"'], estimate_s=40, timeout_s=240),
        # sharpness-aware steps under AMP: fp16's GradScaler unscales the first pass before the weights move
        demo_row('sam-fp16', ['train.amp="fp16"', 'train.G_optimizer_sam="fsam"'], cuda_only=True),
        demo_row('sam-bf16', ['train.amp="bf16"', 'train.G_optimizer_sam="gsam"']),
        EnvLaunchRow(name='launch/env-world1', opt=DEMO, quick_sets=QUICK_DEMO, quick=True,
                     expect=(('cuda', r'mode=env backend=nccl world_size=1'),
                             ('cpu', r'mode=env backend=gloo world_size=1')),
                     notes=((r'mode=env backend=(\w+)', '{0}'),)),
        ResumeRow(name='resume/bit-exact', opt=DEMO, quick_sets=QUICK_DEMO, iters=40, quick_iters=4, quick=True,
                  estimate_s=45, timeout_s=300),
        ResumeRow(name='resume/deterministic', opt=DEMO, iters=40, deterministic=True, estimate_s=45, timeout_s=300),
        TestRow(name='test/tiles-x8', source=fp32, after=(fp32.name,), quick=True),
        ExportRow(name='export/onnx', source=fp32, after=(fp32.name,), quick=True, estimate_s=40),
    ]

    def speed(config: str) -> List[Row]:
        variants = ['bare', *bench_gpu.CONFIG_ROWS[config]]
        return [SpeedRow(name=f'speed/{config} {v}', config=config, variant=v, exclusive=True,
                         quick=config == 'dncnn' and v in ('bare', 'default'),
                         estimate_s=100 if v == 'compile' else 40 if config == 'swinir' else 25, timeout_s=300)
                for v in variants]
    memory = [MemoryRow(name=f'memory/{net} {ckpt} {prec}', net=net, checkpoint=ckpt, precision=prec, exclusive=True,
                        quick=(net, ckpt, prec) == ('vrt', 'KAIR', 'fp32'), estimate_s=30 if net == 'vrt' else 20,
                        timeout_s=240)
              for net, ckpt, prec in bench_video_gpu.ROWS]
    rvrt = 'options/rvrt/002_train_rvrt_videosr_bi_vimeo_tiny.json'
    rows += [LmdbRow(name='data/lmdb', opt=rvrt, needs=('lmdb',), estimate_s=40, timeout_s=300),
             TrainRow(name='log/wandb-offline', opt=DEMO, sets=('logging.use_wandb=true',), needs=('wandb',),
                      env=(('WANDB_MODE', 'offline'),), estimate_s=30)]
    # every tiny option file runs side by side with the rows above (in the shadow of the compile rows), before
    # the timed rows, which run alone
    rows += tail_rows()
    rows += speed(SPEED_ORDER[0]) + memory + [r for c in SPEED_ORDER[1:] for r in speed(c)]
    names = [r.name for r in rows]
    assert len(set(names)) == len(names), 'row names must be unique'
    for i, r in enumerate(rows):
        assert all(d in names[:i] for d in r.after), f'{r.name}: the rows it needs must come before it'
    return rows


def select(rows: Sequence[Row], quick: bool, only: Optional[Sequence[str]]) -> List[Row]:
    """The rows of this run: --quick's, then those matching --only (with the rows they need)."""
    chosen = [r for r in rows if r.quick or not quick]
    if only:
        names = {r.name for r in chosen if any(fnmatch.fnmatchcase(r.name, p) for p in only)}
        for r in reversed(chosen):
            if r.name in names:
                names.update(r.after)
        chosen = [r for r in chosen if r.name in names]
    return chosen


def skip_reason(row: Row, ctx: Ctx, installed: Callable[[str], bool]) -> Optional[str]:
    """Why a row cannot run here at all (before the budget is asked)."""
    if row.needs_cuda(ctx) and not ctx.cuda:
        return 'needs CUDA' + ('' if row.cuda_only else ' (--quick runs a tiny one)')
    missing = [m for m in row.needs if not installed(m)]
    if missing:
        return f'not installed: {", ".join(missing)}'
    return None


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# ------------------------------------------------------------------------------------------------ running

def first_error(text: str) -> str:
    """The line that says what went wrong: our one-line `error:`/`stopped:`, else the exception of a traceback."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if re.match(r'^(error|stopped): ', ln):
            return ln.split(': ', 1)[1]
    for ln in reversed(lines):
        if re.match(r'^[A-Za-z_][\w.]*(Error|Exception|Failed|Interrupt|Exit)\b', ln):
            return ln
    return lines[-1] if lines else 'no output'


def child_env(step: Step, ctx: Ctx, side_by_side: bool) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCH_VARS and not k.startswith(('SLURM_', 'TORCHELASTIC_'))}
    env.update(PYTHONUNBUFFERED='1', WANDB_SILENT='true')
    env.setdefault('WANDB_MODE', 'offline')
    if (side_by_side or ctx.quick) and 'OMP_NUM_THREADS' not in os.environ:  # --quick: nothing is measured
        env['OMP_NUM_THREADS'] = str(ctx.threads)
    env.update(dict(step.env))
    return env


class Processes:
    """The processes the check started (each the leader of its own session): stopped by their group id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: Dict[int, subprocess.Popen] = {}

    def start(self, cmd: List[str], **kw: Any) -> subprocess.Popen:
        with self.lock:
            proc = subprocess.Popen(cmd, start_new_session=True, **kw)
            self.live[proc.pid] = proc
            return proc

    def done(self, proc: subprocess.Popen) -> None:
        with self.lock:
            self.live.pop(proc.pid, None)

    @staticmethod
    def stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
        """SIGTERM to the process's group (main_train.py saves and exits), SIGKILL after `grace` seconds."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def stop_all(self) -> None:
        with self.lock:
            procs = list(self.live.values())
        for proc in procs:
            self.stop(proc, grace=3.0)


def run_row(row: Row, ctx: Ctx, deadline: float, procs: Processes) -> Result:
    """The row's processes, group after group, within its limit and the budget; then its check."""
    t0 = time.monotonic()
    folder = os.path.join(ctx.logs, slug(row.name))
    os.makedirs(folder, exist_ok=True)
    limit = min(t0 + row.timeout_s * ctx.scale(), deadline)
    out: Dict[str, str] = {}
    k = 0
    try:
        groups = row.steps(ctx)
    except Exception as e:  # a row that cannot say what to run (a missing file)
        return Result('failed', f'preparing: {type(e).__name__}: {first_error(str(e))}', seconds=0.0)
    for group in groups:
        started = []
        for step in group:
            k += 1
            path = os.path.join(folder, f'{k}_{slug(step.label)}.log')
            cmd = [sys.executable, *step.argv]
            f = open(path, 'w')
            f.write('$ ' + ''.join(f'{n}={shlex.quote(v)} ' for n, v in step.env) + shlex.join(cmd) + '\n')
            f.flush()
            proc = procs.start(cmd, cwd=ctx.work, env=child_env(step, ctx, not row.alone(ctx)), stdout=f,
                               stderr=subprocess.STDOUT)
            started.append((step, path, f, proc))
        timed_out = None
        for step, _, f, proc in started:
            try:
                proc.wait(timeout=max(0.0, limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = timed_out or step
                Processes.stop(proc)
            finally:
                procs.done(proc)
                f.close()
        for step, path, _, _ in started:
            with open(path, errors='replace') as log:
                out[step.label] = log.read()
        seconds = time.monotonic() - t0
        if timed_out is not None and limit >= deadline:  # cut short by the budget: not a finding about the row
            return Result('skipped', f'time budget: {timed_out.label} stopped after {seconds:.0f} s', seconds=seconds)
        if timed_out is not None:  # a hang, or far slower than it should be: a finding
            last = (out[timed_out.label].strip().splitlines() or [''])[-1][:200]
            return Result('failed', f'{timed_out.label}: stopped at its limit of {row.timeout_s * ctx.scale():.0f} s; '
                                    f'last line: {last}', seconds=seconds)
        for step, _, _, proc in started:
            if proc.returncode:
                return Result('failed', f'{step.label}: exit {proc.returncode}: {first_error(out[step.label])}',
                              seconds=seconds)
    try:
        result = row.check(ctx, out)
    except Exception as e:
        result = Result('failed', f'checking: {type(e).__name__}: {first_error(str(e))}')
    result.seconds = time.monotonic() - t0
    return result


def execute(rows: Sequence[Row], ctx: Ctx, jobs: int, deadline: float, procs: Processes,
            done: Callable[[Row, Result], None], installed: Callable[[str], bool] = installed) -> Dict[str, Result]:
    """Run `rows` in order: side by side up to `jobs`, exclusive rows alone; a row that does not fit the budget,
    cannot run here, or needs a row that did not succeed is skipped. `done(row, result)` after each."""
    results = ctx.results
    pending = list(rows)
    running: Dict[str, Row] = {}
    finished: 'queue.Queue[Tuple[Row, Result]]' = queue.Queue()

    def finish(row: Row, result: Result) -> None:
        result.log = slug(row.name)
        results[row.name] = result
        done(row, result)

    def start(row: Row) -> None:
        running[row.name] = row

        def work() -> None:
            try:
                result = run_row(row, ctx, deadline, procs)
            except BaseException as e:  # noqa: B902 (a row's thread must always report back)
                result = Result('failed', f'{type(e).__name__}: {first_error(str(e))}')
            finished.put((row, result))
        threading.Thread(target=work, name=row.name, daemon=True).start()

    while pending or running:
        for row in list(pending):
            failed = [d for d in row.after if d in results and results[d].status != 'ok']
            blocked = [d for d in row.after if d not in results]
            reason = skip_reason(row, ctx, installed)
            if reason is None and failed:
                reason = f'needs {failed[0]} ({results[failed[0]].status})'
            if reason is not None:
                pending.remove(row)
                finish(row, Result('skipped', reason))
                continue
            if row.alone(ctx) and (running or blocked):
                break
            if not row.alone(ctx) and blocked:
                continue
            if len(running) >= jobs or any(r.alone(ctx) for r in running.values()):
                break
            pending.remove(row)
            if time.monotonic() + row.estimate_s * ctx.scale() > deadline:
                finish(row, Result('skipped', 'time budget'))
                continue
            start(row)
            if row.alone(ctx):
                break
        if running:
            try:
                row, result = finished.get(timeout=1.0)  # a timeout, so that signals reach this thread
            except queue.Empty:
                continue
            del running[row.name]
            finish(row, result)
    return results


# ------------------------------------------------------------------------------------------------ output

def number(v: float, fmt: str, width: int) -> str:
    return f'{v:{width}{fmt}}' if isinstance(v, (int, float)) and math.isfinite(v) else f'{"-":>{width}}'


def cut(text: str, width: Optional[int]) -> str:
    return text if width is None or len(text) <= width else text[:width - 3] + '...'


def table(rows: Sequence[Row], results: Mapping[str, Result], note_width: Optional[int]) -> List[str]:
    """The table: card, train, speed, memory rows in plan order (rows not run: 'pending'). A row without
    numbers (failed, skipped, or nothing to measure) writes its note where the numbers would be."""
    order = {'card': 0, 'train': 1, 'speed': 2, 'memory': 3}
    shown = sorted(rows, key=lambda r: order[r.part])
    width = max([len(r.name) for r in shown] + [3])
    numbers = (('ms', '.1f', 7), ('data_ms', '.1f', 7), ('peak_gib', '.2f', 8), ('tflops', '.2f', 7),
               ('share', '.1f', 6), ('ratio', '.2f', 6))
    lines = [f'{"row":<{width}} {"result":<7} {"ms/step":>7} {"data ms":>7} {"peak GiB":>8} {"TFLOP/s":>7} '
             f'{"% bf16":>6} {"/ bare":>6}  note']
    for r in shown:
        res = results.get(r.name, Result('pending'))
        status = {'failed': 'FAILED'}.get(res.status, res.status)
        values = [getattr(res, key) for key, _, _ in numbers]
        if all(not math.isfinite(v) for v in values):
            lines.append(f'{r.name:<{width}} {status:<7}  {cut(res.note, note_width and note_width + 20)}'.rstrip())
            continue
        cells = ' '.join(number(v, fmt, w) for v, (_, fmt, w) in zip(values, numbers, strict=True))
        lines.append(f'{r.name:<{width}} {status:<7} {cells}  {cut(res.note, note_width)}'.rstrip())
    return lines


def summary(rows: Sequence[Row], results: Mapping[str, Result]) -> str:
    counts = {s: sum(1 for r in rows if r.name in results and results[r.name].status == s)
              for s in ('ok', 'failed', 'skipped')}
    return (f'{len(rows)} rows: {counts["ok"]} ok, {counts["failed"]} FAILED, {counts["skipped"]} skipped'
            + (f', {len(rows) - sum(counts.values())} not run' if len(rows) > sum(counts.values()) else ''))


def finite(value: Any) -> Any:
    """NaN and infinities as null (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def write_atomically(path: str, data: bytes) -> None:
    tmp = f'{path}.tmp-{os.getpid()}'
    with open(tmp, 'wb') as f:
        f.write(data)
    os.replace(tmp, path)


def write_outputs(out: str, header: Sequence[str], rows: Sequence[Row], results: Mapping[str, Result],
                  logs: str) -> None:
    """gpu_check.txt, gpu_check.json and gpu_check_logs.tar.gz under `out` (rewritten whole each time)."""
    failures = [f'{r.name}: {results[r.name].note}' for r in rows
                if r.name in results and results[r.name].status == 'failed']
    text = [*header, summary(rows, results), *(['FAILED rows (first error line):'] + failures if failures else []), '',
            *table(rows, results, None)]
    write_atomically(os.path.join(out, OUTPUTS[0]), ('\n'.join(text) + '\n').encode())
    data = {'header': list(header), 'rows': [{'name': r.name, 'part': r.part,
                                              **asdict(results.get(r.name, Result('pending')))} for r in rows]}
    write_atomically(os.path.join(out, OUTPUTS[1]), json.dumps(finite(data), indent=1).encode())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w:gz') as tar:
        if os.path.isdir(logs):
            tar.add(logs, arcname='logs')
    write_atomically(os.path.join(out, OUTPUTS[2]), buf.getvalue())


# ------------------------------------------------------------------------------------------------ children

def card_main(argv: List[str]) -> int:
    """`--card [--quick]`: the device and its bf16 matmul rate (8192^3 on CUDA, 512^3 elsewhere), as RESULT."""
    import torch
    from bench_gpu import matmul_tflops
    cuda = torch.cuda.is_available()
    device = torch.device('cuda' if cuda else 'cpu')
    info: Dict[str, Any] = {'cuda': cuda, 'torch': torch.__version__, 'cuda_version': torch.version.cuda,
                            'cores': os.cpu_count(), 'n': 8192 if cuda and '--quick' not in argv else 512}
    if cuda:
        props = torch.cuda.get_device_properties(device)
        info.update(device=props.name, capability=f'sm_{props.major}{props.minor}', sms=props.multi_processor_count,
                    memory_gib=props.total_memory / 2 ** 30)
    info['bf16_tflops'] = matmul_tflops(device, info['n'])
    print('RESULT ' + json.dumps(info), flush=True)
    return 0


def deterministic_main(argv: List[str]) -> int:
    """`--deterministic MAIN_TRAIN_ARGS`: main_train.py with deterministic kernels where torch has them (a kernel
    without one warns, in the log)."""
    import runpy

    import torch
    torch.use_deterministic_algorithms(True, warn_only=True)
    sys.argv = [MAIN_TRAIN, *argv]
    runpy.run_path(MAIN_TRAIN, run_name='__main__')  # ends the process with main_train's exit code
    return 0


def make_demo_main(argv: List[str]) -> int:
    """`--make_demo OPTION_FILE`: generate the demo data of every dataset section (in the current folder)."""
    from data.synthetic.demo import ensure_demo_data
    from option_rules import read_options
    for section in read_options(argv[0]).get('datasets', {}).values():
        ensure_demo_data(section)
    return 0


# ------------------------------------------------------------------------------------------------ main

def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--quick', action='store_true', help='the rows marked quick, tiny sizes, on any device (CPU)')
    p.add_argument('--cpu', action='store_true', help='without CUDA and --quick: run every row the CPU can (slow)')
    p.add_argument('--out', default=None, help='the table, results and logs (default: $OUT, else a new temp folder)')
    p.add_argument('--budget', type=float, default=None,
                   help='seconds for the whole check (default 480 on CUDA, 1800 with --quick, 7200 with --cpu)')
    p.add_argument('--jobs', type=int, default=None, help='rows side by side (default: cores - 2, 2 to 12)')
    p.add_argument('--only', nargs='+', default=None, metavar='PATTERN',
                   help="rows by name, e.g. 'demo/*' 'speed/swinir*' (with the rows they need)")
    p.add_argument('--list', action='store_true', help='print the rows of this run and what they need, run nothing')
    p.add_argument('--keep-work', action='store_true', help='keep the work folder (runs, data, logs unpacked)')
    p.add_argument('--speed-iters', type=int, default=SPEED['iters'], help='iterations per speed row (%(default)s)')
    p.add_argument('--speed-warmup', type=int, default=SPEED['warmup'], help='left out of the timings (%(default)s)')
    p.add_argument('--speed-images', type=int, default=SPEED['images'], help='480x480 training images (%(default)s)')
    p.add_argument('--memory-reps', type=int, default=MEMORY['reps'], help='timed steps per memory row (%(default)s)')
    p.add_argument('--memory-warmup', type=int, default=MEMORY['warmup'], help='steps before (default %(default)s)')
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    import torch
    cuda = torch.cuda.is_available()
    if not cuda and not args.quick and not args.cpu and not args.list:
        print('gpu_check.py: no CUDA GPU here, nothing run (--quick: the smoke test on any device; --cpu: every row '
              'the CPU can run)')
        return 0
    cores = usable_cores()
    jobs = args.jobs or (quick_jobs() if args.quick else min(12, max(2, cores - 2)))
    budget = args.budget or (480.0 if cuda and not args.quick else 1800.0 if args.quick else 7200.0)
    work = '' if args.list else tempfile.mkdtemp(prefix='gpu_check_work_')
    ctx = Ctx(cuda=cuda, quick=args.quick, work=work, threads=max(1, cores // jobs),
              speed={'iters': args.speed_iters, 'warmup': args.speed_warmup, 'images': args.speed_images},
              memory={'reps': args.memory_reps, 'warmup': args.memory_warmup})
    rows = select(plan(), args.quick, args.only)
    if args.list:
        for r in rows:
            why = skip_reason(r, ctx, installed)
            print(f'{r.name:<42} {r.part:<7} ~{r.estimate_s * ctx.scale():4.0f} s '
                  f'(limit {r.timeout_s * ctx.scale():4.0f} s)'
                  f'{" alone" if r.alone(ctx) else ""}{f"  skipped: {why}" if why else ""}')
        return 0
    out = args.out or os.environ.get('OUT') or tempfile.mkdtemp(prefix='gpu_check_')
    os.makedirs(out, exist_ok=True)
    os.makedirs(ctx.logs, exist_ok=True)
    header = [f'== gpu_check.py{" (quick)" if args.quick else ""}: '
              f'{"CUDA" if cuda else "CPU"}, torch {torch.__version__} (CUDA {torch.version.cuda}), {cores} cores, '
              f'{jobs} jobs, budget {budget:.0f} s, {len(rows)} rows; out {out}']
    print(header[0], flush=True)
    t0 = time.monotonic()
    deadline = t0 + budget - 5  # the last outputs are written inside the budget
    procs = Processes()
    count = [0]

    def done(row: Row, result: Result) -> None:
        count[0] += 1
        status = {'failed': 'FAILED'}.get(result.status, result.status)
        took = f' ({result.seconds:.0f} s)' if math.isfinite(result.seconds) else ''
        print(f'[{count[0]:3d}/{len(rows)}] {row.name}: {status}{took} {result.note}'.rstrip(), flush=True)
        write_outputs(out, header, rows, ctx.results, ctx.logs)

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f'signal {signum}')
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        execute(rows, ctx, jobs, deadline, procs, done)
    except KeyboardInterrupt:
        print('gpu_check.py: interrupted; stopping the rows that run', flush=True)
        procs.stop_all()
    finally:
        signal.signal(signal.SIGTERM, previous)
        write_outputs(out, header, rows, ctx.results, ctx.logs)
        if args.keep_work:
            print(f'work folder kept: {work}')
        else:
            shutil.rmtree(work, ignore_errors=True)
    failures = [f'  {r.name}: {ctx.results[r.name].note}' for r in rows
                if r.name in ctx.results and ctx.results[r.name].status == 'failed']
    print(f'\n== {summary(rows, ctx.results)} in {time.monotonic() - t0:.0f} s of the {budget:.0f} s budget; '
          f'{", ".join(OUTPUTS)} in {out}')
    if failures:
        print('FAILED rows (first error line):\n' + '\n'.join(failures))
    print()
    print('\n'.join(table(rows, ctx.results, NOTE_WIDTH)), flush=True)
    return 0


if __name__ == '__main__':
    entry(lambda: sys.exit(main()), card=card_main, deterministic=deterministic_main, make_demo=make_demo_main)
