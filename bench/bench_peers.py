"""Side by side with BasicSR 1.4.2's own trainer: steady seconds per iteration, its train.py / our main_train.py.

The same networks (MSRResNet x4 with 64 features and 16 blocks = our `msrresnet1`; EDSR-M x4; RRDBNet with 6
blocks x4 = our `esrgan`; SwinIR lightweight x4; a small RCAN, 3 groups of 6 channel-attention blocks: a network
made of many small operations), each written as each trainer's own option files write it (a BasicSR YAML for its
trainer, our JSON for ours), on the same paired data (HR PNGs and their MATLAB-bicubic x1/4 LR PNGs, generated once
in the scratch folder), batch 4 of 96² GT patches (24² LR), flips and rotations, Adam (betas 0.9, 0.99), L1, EMA
0.999, the same loader workers (`--workers`, default 1) for both; no validation, no TensorBoard, no checkpoint
before the end.

Figure: steady seconds per iteration = (T(long run) - T(short run)) / (difference in iterations), T the wall
time of a whole process (start-up, imports and the final save are the same in both runs and cancel out); the
runs interleaved (BasicSR short, ours short, BasicSR long, ours long, repeated), the median over the reps. Beside
it, the same figure read inside each long run: the seconds between its first and last status lines (each logger's
own millisecond timestamps, a line every `--iters-short` iterations) over the iterations between them; it leaves
out start-up and the first iterations, whose time varies most on a shared machine. Cells:

  2cores  both trainers as they start by default (threads: their own choice; no pinning);
  1core   `taskset -c 0` and OMP_NUM_THREADS=1 for both (one torch thread each);
  busy    beside a busy process: a python doing matmuls on `--busy-threads` threads (default 1), unpinned,
          started by the bench before the cell's runs and killed after them.

The user's OMP_WAIT_POLICY, GOMP_SPINCOUNT and OMP_NUM_THREADS pass through wherever a cell does not set them
(unset, each trainer chooses: BasicSR leaves OpenMP's default spin and takes every core, ours samples its cores'
load, utils/wait_policy.py, and beside the busy process takes one thread per core left free); what each trainer
ran with (torch threads, the thread policy ours logged) is printed before the table.

BasicSR is installed by the bench into `--scratch` (default $TMPDIR/bench_peers) on the first full run and reused
(bench/peer_basicsr.py says how); it never enters requirements.txt. The data, BasicSR's experiment folders and
ours' run folders live there too (each run's folder is removed once its log is checked; the last log of each
trainer, network and cell is kept under logs/).

    python bench/bench_peers.py [--networks msrresnet rcan] [--cells 2cores busy] [--reps 2]
                                [--iters-short 5] [--iters-long 25] [--workers 1] [--scratch DIR]

`--quick` never installs BasicSR: where it is not in the scratch folder already (as in the test suite), it says so
in one line and times only ours, on a tiny MSRResNet (8 features, 1 block) with 1- and 2-iteration runs in every
cell, after checking that every network's JSON validates: a smoke test of every code path, not a measurement.
"""
import os

# The caller's environment, before any import can change it (importing main_train.py, as bench_loop.py does, sets
# OMP_WAIT_POLICY for its own process): every child process starts from this.
USER_ENV = dict(os.environ)

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple  # noqa: E402

import cv2  # noqa: E402
import peer_basicsr  # noqa: E402
from bench_gpu import make_images  # noqa: E402
from common import entry, parse_reps, reps_parser  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
SCALE = 4
DIV2K_MEAN = [0.4488, 0.4371, 0.404]


class Network(NamedTuple):
    """One network as each trainer's option files write it, and the overrides that make it tiny (--quick)."""
    ours: Dict[str, Any]
    basicsr: Dict[str, Any]
    tiny_ours: Dict[str, Any]
    tiny_basicsr: Dict[str, Any]


def _same(ours_type: str, basicsr_type: str, keys: Dict[str, Any], tiny: Dict[str, Any]) -> Network:
    """A network whose keys BasicSR and ours name alike."""
    return Network({'net_type': ours_type, **keys}, {'type': basicsr_type, **keys}, tiny, tiny)


NETWORKS: Dict[str, Network] = {
    'msrresnet': Network({'net_type': 'msrresnet1', 'in_nc': 3, 'out_nc': 3, 'nc': 64, 'nb': 16, 'upscale': SCALE},
                         {'type': 'MSRResNet', 'num_in_ch': 3, 'num_out_ch': 3, 'num_feat': 64, 'num_block': 16,
                          'upscale': SCALE},
                         {'nc': 8, 'nb': 1}, {'num_feat': 8, 'num_block': 1}),
    'edsr_m': _same('edsr', 'EDSR', {'num_in_ch': 3, 'num_out_ch': 3, 'num_feat': 64, 'num_block': 16,
                                     'upscale': SCALE, 'res_scale': 1, 'img_range': 255.0, 'rgb_mean': DIV2K_MEAN},
                    {'num_feat': 8, 'num_block': 1}),
    'rrdb6': _same('esrgan', 'RRDBNet', {'num_in_ch': 3, 'num_out_ch': 3, 'num_feat': 64, 'num_block': 6,
                                         'num_grow_ch': 32, 'scale': SCALE},
                   {'num_feat': 8, 'num_block': 1, 'num_grow_ch': 4}),
    'swinir_light': _same('swinir', 'SwinIR', {'upscale': SCALE, 'in_chans': 3, 'img_size': 64, 'window_size': 8,
                                               'img_range': 1.0, 'depths': [6, 6, 6, 6], 'embed_dim': 60,
                                               'num_heads': [6, 6, 6, 6], 'mlp_ratio': 2,
                                               'upsampler': 'pixelshuffledirect', 'resi_connection': '1conv'},
                          {'depths': [1], 'num_heads': [1], 'embed_dim': 6}),
    'rcan': _same('rcan', 'RCAN', {'num_in_ch': 3, 'num_out_ch': 3, 'num_feat': 64, 'num_group': 3, 'num_block': 6,
                                   'squeeze_factor': 16, 'upscale': SCALE, 'res_scale': 1, 'img_range': 255.0,
                                   'rgb_mean': DIV2K_MEAN},
                  {'num_feat': 8, 'num_group': 1, 'num_block': 1, 'squeeze_factor': 4}),
}
CELLS = ('2cores', '1core', 'busy')
TRAINERS = ('basicsr', 'ours')
RUN_TIMEOUT_S = 4 * 3600


class Setup(NamedTuple):
    """What every run of one bench invocation shares."""
    scratch: str
    data: Dict[str, Any]  # gt, lq, gt_size, batch, workers, enlarge (peer_basicsr.options' `data`)
    quick: bool
    print_freq: int


def paired_data(scratch: str, images: int, size: int) -> Tuple[str, str]:
    """`images` HR PNGs of size² and their MATLAB-bicubic x1/4 LR PNGs (same names), generated once."""
    from utils.image import imresize_bicubic
    folder = os.path.join(scratch, 'data', f'{images}x{size}')
    gt, lq = os.path.join(folder, 'HR'), os.path.join(folder, f'LR_bicubic_x{SCALE}')
    done = os.path.join(lq, '.complete')
    if not os.path.exists(done):
        make_images(gt, images, size)
        os.makedirs(lq, exist_ok=True)
        for name in sorted(n for n in os.listdir(gt) if n.endswith('.png')):
            cv2.imwrite(os.path.join(lq, name), imresize_bicubic(cv2.imread(os.path.join(gt, name)), 1 / SCALE))
        open(done, 'w').close()
    return gt, lq


def network(name: str, trainer: str, quick: bool) -> Dict[str, Any]:
    """A network's section in `trainer`'s option file (tiny with --quick)."""
    net = NETWORKS[name]
    if trainer == 'ours':
        return {**net.ours, **(net.tiny_ours if quick else {})}
    return {**net.basicsr, **(net.tiny_basicsr if quick else {})}


def ours_options(task: str, net: Dict[str, Any], setup: Setup, iters: int, root: str) -> Dict[str, Any]:
    """Our JSON of one run: the same data, batch, patch, augmentation, optimizer, loss and EMA as BasicSR's YAML."""
    d = setup.data
    return {
        'task': task, 'model': 'plain', 'scale': SCALE, 'n_channels': 3, 'path': {'root': root},
        'datasets': {'train': {
            'name': 'bench', 'dataset_type': 'sr', 'dataroot_H': d['gt'], 'dataroot_L': d['lq'],
            'H_size': d['gt_size'], 'use_hflip': True, 'use_rot': True, 'dataloader_batch_size': d['batch'],
            'dataloader_shuffle': True, 'dataloader_num_workers': d['workers']}},
        'netG': net,
        'train': {'manual_seed': 1, 'G_lossfn_type': 'l1', 'E_decay': 0.999, 'G_optimizer_type': 'adam',
                  'G_optimizer_lr': 1e-4, 'G_optimizer_betas': [0.9, 0.99], 'G_scheduler_type': 'MultiStepLR',
                  'G_scheduler_milestones': [10 ** 9], 'G_scheduler_gamma': 0.5, 'total_iter': iters,
                  'checkpoint_test': 10 ** 9, 'checkpoint_save': 10 ** 9, 'checkpoint_print': setup.print_freq},
        'logging': {'use_tensorboard': False, 'curves': False, 'use_wandb': False},
    }


def check_ours_options(setup: Setup) -> None:
    """Every network's JSON passes our option validation (what --quick cannot afford to train)."""
    from option_rules import read_options
    with tempfile.TemporaryDirectory() as tmp:
        for name in NETWORKS:
            for quick in (False, True):
                path = os.path.join(tmp, f'{name}.json')
                with open(path, 'w') as f:
                    json.dump(ours_options(name, network(name, 'ours', quick), setup, 2, tmp), f)
                read_options(path, [])
    print(f'our JSON of every network validates: {", ".join(NETWORKS)}')


def write_options(trainer: str, task: str, name: str, iters: int, setup: Setup,
                  env: Dict[str, str]) -> Tuple[str, List[str], Dict[str, str]]:
    """`trainer`'s option file of one run (under <scratch>/runs), the command that trains it, and its environment."""
    runs = os.path.join(setup.scratch, 'runs')
    os.makedirs(runs, exist_ok=True)
    net = network(name, trainer, setup.quick)
    if trainer == 'ours':
        opt_file = os.path.join(runs, f'{task}.json')
        with open(opt_file, 'w') as f:
            json.dump(ours_options(task, net, setup, iters, runs), f, indent=1)
        return opt_file, [sys.executable, os.path.join(ROOT, 'main_train.py'), '--opt', opt_file], env
    opt_file = os.path.join(runs, f'{task}.yml')
    with open(opt_file, 'w') as f:
        f.write(peer_basicsr.options(task, net, setup.data, iters, setup.print_freq, runs))
    return opt_file, peer_basicsr.command(setup.scratch, opt_file), peer_basicsr.env(setup.scratch, env)


def run_once(trainer: str, name: str, cell: str, iters: int, setup: Setup, prefix: List[str],
             env: Dict[str, str]) -> Tuple[float, str]:
    """One whole training process: its wall seconds and its log (checked to have trained `iters` iterations).
    Its run folder (both trainers write <scratch>/runs/<task>) goes once the log is read; the log stays in logs/."""
    task = f'{trainer}_{name}_{cell}_{iters}'
    folder = os.path.join(setup.scratch, 'runs', task)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(setup.scratch, 'logs'), exist_ok=True)
    log = os.path.join(setup.scratch, 'logs', f'{task}.log')
    opt_file, cmd, env = write_options(trainer, task, name, iters, setup, env)
    t0 = time.perf_counter()
    with open(log, 'w') as f:
        proc = subprocess.run(prefix + cmd, cwd=setup.scratch, env=env, stdout=f, stderr=subprocess.STDOUT,
                              timeout=RUN_TIMEOUT_S)
    seconds = time.perf_counter() - t0
    with open(log, errors='replace') as f:
        text = f.read()
    shutil.rmtree(folder, ignore_errors=True)
    os.remove(opt_file)
    last = trained_iterations(trainer, text)
    if proc.returncode or not iters - setup.print_freq < last <= iters:
        raise RuntimeError(f'{trainer} {name} ({cell}, {iters} iterations) exited {proc.returncode} after '
                           f'logging iteration {last}; see {log}')
    return seconds, text


def trained_iterations(trainer: str, log: str) -> int:
    """The last iteration a finished run logged (0: it did not finish)."""
    if trainer == 'basicsr':
        return peer_basicsr.last_iteration(log)
    found = re.search(r'end of training at iteration (\d+)', log)
    return int(found.group(1)) if found else 0


# a status line of ours (utils/logger.py, training/status.py): `26-12-03 17:48:52.123 INFO: <epoch:  0, iter:   5, ...`
OURS_STATUS = re.compile(r'^(\d\d-\d\d-\d\d \d\d:\d\d:\d\d)\.(\d{3}) INFO: <epoch:\s*\d+, iter:\s*([\d,]+),',
                         re.MULTILINE)
OURS_TIME = '%y-%m-%d %H:%M:%S'


def status_times(trainer: str, log: str) -> List[Tuple[int, float]]:
    """(iteration, seconds) of each status line a run logged, from its logger's timestamps (milliseconds)."""
    line, form = (peer_basicsr.STATUS_LINE, peer_basicsr.STATUS_TIME) if trainer == 'basicsr' else \
        (OURS_STATUS, OURS_TIME)
    return [(int(it.replace(',', '')), datetime.datetime.strptime(stamp, form).timestamp() + int(ms) / 1000)
            for stamp, ms, it in line.findall(log)]


def in_log(trainer: str, log: str) -> float:
    """Seconds per iteration between a run's first and last status lines."""
    times = status_times(trainer, log)
    if len(times) < 2:
        raise RuntimeError(f'{trainer}: fewer than 2 status lines with a timestamp in its log')
    (first_it, first_s), (last_it, last_s) = times[0], times[-1]
    return (last_s - first_s) / (last_it - first_it)


def ours_threads(log: str) -> str:
    """What ours logged about its CPU threads: the thread-policy line, else the thread count."""
    policy = re.search(r'INFO: (CPU: .*)', log)
    if policy:
        return policy.group(1).strip()
    count = re.search(r'device=cpu threads=(\d+)', log)
    return threads_text(count.group(1) if count else '?')


def threads_text(count: str) -> str:
    return f'{count} torch thread{"" if count == "1" else "s"}'


def torch_threads(prefix: List[str], env: Dict[str, str]) -> str:
    """The torch threads a process started so gets (BasicSR chooses none of its own)."""
    proc = subprocess.run(prefix + [sys.executable, '-c', 'import torch; print(torch.get_num_threads())'],
                          env=env, capture_output=True, text=True, timeout=120)
    return threads_text(proc.stdout.strip() or '?')


def burn(argv: Sequence[str]) -> None:
    """The busy process: matmuls on `threads` threads until its parent (the bench) is gone or kills it."""
    threads, parent = int(argv[0]), int(argv[1])
    import torch
    torch.set_num_threads(threads)
    a = torch.randn(256, 256)
    print('burning', flush=True)
    while os.getppid() == parent:
        for _ in range(20):
            a = torch.tanh(a @ a)


@contextmanager
def cell(name: str, busy_threads: int) -> Iterator[Tuple[List[str], Dict[str, str], str]]:
    """A cell's command prefix, environment and description; the busy process runs while the cell does."""
    env = dict(USER_ENV)
    user = ', '.join(f'{k}={USER_ENV.get(k, "unset")}' for k in ('OMP_NUM_THREADS', 'OMP_WAIT_POLICY', 'GOMP_SPINCOUNT'))
    if name == '1core':
        env['OMP_NUM_THREADS'] = '1'
        yield ['taskset', '-c', '0'], env, (f'taskset -c 0, OMP_NUM_THREADS=1 (set by the cell), '
                                            f'OMP_WAIT_POLICY={USER_ENV.get("OMP_WAIT_POLICY", "unset")}')
        return
    if name == '2cores':
        yield [], env, f'no pinning, {user} (as given)'
        return
    burner = subprocess.Popen([sys.executable, os.path.abspath(__file__), '--burn', str(busy_threads),
                               str(os.getpid())], stdout=subprocess.PIPE, text=True, env=USER_ENV)
    try:
        burner.stdout.readline()  # torch imported, the matmuls start
        yield [], env, f'beside a busy process ({busy_threads} thread(s) of matmuls, unpinned), {user} (as given)'
    finally:
        burner.kill()
        burner.wait()


class Figures(NamedTuple):
    """One trainer's steady seconds per iteration in one cell: medians over the reps."""
    whole: float  # (T(long) - T(short)) / difference in iterations, whole processes
    logged: float  # between the first and last status lines of the long runs


def measure(name: str, cell_name: str, trainers: Sequence[str], a: argparse.Namespace, setup: Setup, prefix: List[str],
            env: Dict[str, str]) -> Tuple[Dict[str, Figures], str]:
    """Each trainer's steady seconds per iteration (medians over reps), the runs interleaved; and what ours logged
    about its threads."""
    per_it: Dict[str, List[float]] = {t: [] for t in trainers}
    logged: Dict[str, List[float]] = {t: [] for t in trainers}
    threads = ''
    for rep in range(a.reps):
        seconds: Dict[Tuple[str, int], float] = {}
        for iters in (a.iters_short, a.iters_long):
            for trainer in trainers:
                seconds[trainer, iters], log = run_once(trainer, name, cell_name, iters, setup, prefix, env)
                threads = ours_threads(log) if trainer == 'ours' else threads
                if iters == a.iters_long:
                    logged[trainer].append(in_log(trainer, log))
                print(f'  {name} {cell_name} rep {rep + 1}/{a.reps}: {trainer} {iters} iterations '
                      f'{seconds[trainer, iters]:.2f} s', flush=True)
        for trainer in trainers:
            long_s, short_s = seconds[trainer, a.iters_long], seconds[trainer, a.iters_short]
            per_it[trainer].append((long_s - short_s) / (a.iters_long - a.iters_short))
    return {t: Figures(statistics.median(per_it[t]), statistics.median(logged[t])) for t in trainers}, threads


def table(results: Dict[Tuple[str, str], Dict[str, Figures]]) -> None:
    """network x cell -> BasicSR s/it, ours s/it, ours / BasicSR ('-' where BasicSR was not run), whole processes
    and in the logs."""
    print(f'{"":<22} {"whole processes":^37} {"in the logs (long runs)":^37}'.rstrip())
    print((f'{"network":<14} {"cell":<7} ' + 2 * f'{"BasicSR s/it":>12} {"ours s/it":>10} {"ours/BasicSR":>13} ').rstrip())
    order = {key: i for i, key in enumerate(list(NETWORKS) + list(CELLS))}
    for (name, cell_name), r in sorted(results.items(), key=lambda kv: (order[kv[0][0]], order[kv[0][1]])):
        row = f'{name:<14} {cell_name:<7} '
        for figure in Figures._fields:
            ours, peer = getattr(r['ours'], figure), getattr(r['basicsr'], figure) if 'basicsr' in r else None
            ratio = '-' if peer is None else f'{ours / peer:.2f}'
            row += f'{"-" if peer is None else f"{peer:.4f}":>12} {ours:>10.4f} {ratio:>13} '
        print(row.rstrip())


def arguments(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = reps_parser(__doc__, 'tiny MSRResNet, 1- and 2-iteration runs, every cell, never installs BasicSR',
                    'interleaved rep pairs per network and cell (default 2; --quick 1)')
    p.add_argument('--networks', nargs='+', choices=list(NETWORKS), default=None,
                   help=f'default: all ({", ".join(NETWORKS)}); --quick: msrresnet')
    p.add_argument('--cells', nargs='+', choices=CELLS, default=list(CELLS), help='default: all')
    p.add_argument('--iters-short', type=int, default=None, help='iterations of the short run (default 5; --quick 1)')
    p.add_argument('--iters-long', type=int, default=None, help='iterations of the long run (default 25; --quick 2)')
    p.add_argument('--workers', type=int, default=None, help='loader workers of both trainers (default 1; --quick 0)')
    p.add_argument('--images', type=int, default=None, help='HR images (default 32 of 480x480; --quick 4 of 64x64)')
    p.add_argument('--busy-threads', type=int, default=1, help='threads of the busy process of the busy cell')
    p.add_argument('--scratch', default=None, help='BasicSR, data and runs (default: $TMPDIR/bench_peers)')
    p.add_argument('--peer-package', default=peer_basicsr.PACKAGE,
                   help=f'what pip installs as BasicSR 1.4.2 (default {peer_basicsr.PACKAGE}; or basicsr==1.4.2)')
    a = parse_reps(p, argv, 2)
    a.networks = a.networks or (['msrresnet'] if a.quick else list(NETWORKS))
    a.iters_short = a.iters_short or (1 if a.quick else 5)
    a.iters_long = a.iters_long or (2 if a.quick else 25)
    a.workers = a.workers if a.workers is not None else (0 if a.quick else 1)
    a.images = a.images or (4 if a.quick else 32)
    a.scratch = os.path.abspath(a.scratch or os.path.join(tempfile.gettempdir(), 'bench_peers'))
    if a.iters_long <= a.iters_short:
        p.error('--iters-long must exceed --iters-short')
    return a


def peer(a: argparse.Namespace) -> Optional[str]:
    """BasicSR's version in the scratch folder (installed there first, except with --quick), or None."""
    if not a.quick:
        return peer_basicsr.install(a.scratch, a.peer_package)
    version = peer_basicsr.installed_version(a.scratch)
    if version is None:
        print(f'BasicSR: absent (not installed in {peer_basicsr.site(a.scratch)}; --quick never installs): '
              f'only ours is timed')
    return version


def main(argv: Optional[Sequence[str]] = None) -> None:
    a = arguments(argv)
    sys.path.insert(0, ROOT)
    from bench_loop import machine
    print(f'== bench_peers.py{" (quick)" if a.quick else ""}: {machine()}')
    os.makedirs(a.scratch, exist_ok=True)
    version = peer(a)
    if version:
        print(f'BasicSR {version}: {peer_basicsr.site(a.scratch)} (installed there by this bench, reused later)')
    gt, lq = paired_data(a.scratch, a.images, 64 if a.quick else 480)
    gt_size = 32 if a.quick else 96
    setup = Setup(a.scratch, {'gt': gt, 'lq': lq, 'gt_size': gt_size, 'batch': 4, 'workers': a.workers,
                              'enlarge': max(100, a.iters_long * 4 // a.images + 1)}, a.quick, a.iters_short)
    print(f'data: {a.images} HR PNGs and their bicubic x1/{SCALE} in {os.path.dirname(gt)}; batch 4 of {gt_size}² '
          f'GT patches; {a.workers} loader worker(s) each; runs of {a.iters_short} and {a.iters_long} iterations, '
          f'{a.reps} rep(s); logs in {os.path.join(a.scratch, "logs")}', flush=True)
    if a.quick:
        check_ours_options(setup)
    trainers = TRAINERS if version else ('ours',)
    results: Dict[Tuple[str, str], Dict[str, Figures]] = {}
    ran_with: List[str] = []
    for cell_name in a.cells:
        with cell(cell_name, a.busy_threads) as (prefix, env, described):
            threads = ''
            for name in a.networks:
                results[name, cell_name], threads = measure(name, cell_name, trainers, a, setup, prefix, env)
            basicsr = f'BasicSR {torch_threads(prefix, env)}' if version else 'BasicSR -'
            ran_with.append(f'{cell_name}: {described}; {basicsr}; ours {threads}')
    print('ran with:')
    for line in ran_with:
        print(f'  {line}')
    table(results)


if __name__ == '__main__':
    entry(main, burn=burn)
