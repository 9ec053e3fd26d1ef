"""Time to the first finished training step: `python main_train.py` on the demo config / a bare PyTorch script.

Both sides are fresh processes timed from just before launch to the end of their first optimizer
step, alternating rep by rep. Ours is the real `main_train.py --opt options/train_dncnn_demo.json`
(through bench_resume.py's wrapper, which prints a timestamp after the first `ModelPlain.step`;
outputs go to a temporary root). The bare side does the same work the way a hand-written script
would: import torch and cv2, a Dataset reading the demo PNGs (random crop, flips, gaussian noise),
a DataLoader with the demo's batch size and worker count, the demo's DnCNN as an nn.Sequential,
Adam, L1, one step. What ours adds is option parsing and validation, file header checks, the run
folder, logging, a checked sample through the network and the checkpoint/resume machinery.

Both sides construct torch.optim.Adam, whose first construction imports torch._dynamo (about 1.9 s
here): that cost is torch's, on both sides.

The demo images are generated in a temporary folder's demo_data/ (generate_demo writes only there),
so the benchmark leaves nothing in the project.

    python bench/bench_startup.py [--quick] [--reps 5]

`--quick` (one pair, and no uncounted warm-up pair first) is a smoke run, noisy.
"""
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence

from common import entry, parse_reps, reps_parser

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, '..')
DEMO = os.path.join(ROOT, 'options', 'train_dncnn_demo.json')


def bare(argv: Sequence[str]) -> None:
    """The hand-written script: what a first step costs without the framework."""
    data, nc, nb, patch, batch, workers, sigma, lr = argv
    import glob
    import random

    import cv2
    import numpy as np
    import torch
    from torch import nn

    class Patches(torch.utils.data.Dataset):
        def __init__(self, folder: str):
            self.paths = sorted(glob.glob(os.path.join(folder, '*.png')))

        def __len__(self) -> int:
            return len(self.paths)

        def __getitem__(self, i: int):
            img = cv2.cvtColor(cv2.imread(self.paths[i], cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
            p = int(patch)
            top, left = random.randint(0, img.shape[0] - p), random.randint(0, img.shape[1] - p)
            img = img[top:top + p, left:left + p]
            if random.random() < 0.5:
                img = img[:, ::-1]
            H = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))).float() / 255.0
            return {'L': H + torch.randn(H.shape) * float(sigma) / 255.0, 'H': H}

    loader = torch.utils.data.DataLoader(Patches(data), batch_size=int(batch), shuffle=True, drop_last=True,
                                         num_workers=int(workers))
    layers: List[nn.Module] = [nn.Conv2d(3, int(nc), 3, padding=1), nn.ReLU(inplace=True)]
    for _ in range(int(nb) - 2):
        layers += [nn.Conv2d(int(nc), int(nc), 3, padding=1), nn.ReLU(inplace=True)]
    layers.append(nn.Conv2d(int(nc), 3, 3, padding=1))
    net = nn.Sequential(*layers)
    opt = torch.optim.Adam(net.parameters(), lr=float(lr))
    for batch_ in loader:
        loss = nn.functional.l1_loss(batch_['L'] - net(batch_['L']), batch_['H'])
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f'FIRST_STEP {time.time():.6f} 1', flush=True)
        break


def timed(cmd: List[str], env: Dict[str, str]) -> float:
    """Seconds from launch to the FIRST_STEP line; the process is killed then (ours would train on).

    The process gets its own session and is killed with its process group: its DataLoader workers
    hold the output pipes and would otherwise linger for seconds, until their watchdog notices.
    """
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    lines = []
    for ln in proc.stdout:
        lines.append(ln)
        if ln.startswith('FIRST_STEP '):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
            return float(ln.split()[1]) - t0
    _, err = proc.communicate(timeout=60)
    raise RuntimeError(f'{" ".join(cmd)} failed ({proc.returncode}):\n{"".join(lines)[-2000:]}\n{err[-2000:]}')


def main(argv: Sequence[str] = None) -> None:
    a = parse_reps(reps_parser(__doc__, 'smoke run: one pair, no warm-up pair',
                               'interleaved pairs (default 5; --quick 1)'), argv, 5)
    warmup = 0 if a.quick else 1  # the first pair warms the page cache and is not counted
    sys.path.insert(0, ROOT)
    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.join(ROOT, 'tests'))
    from bench_loop import machine
    from conftest import clean_env
    from data.synthetic.demo import ensure_demo_data
    from option_rules import read_options
    print(machine())
    env = clean_env()
    times: Dict[str, List[float]] = {'ours': [], 'bare': []}
    with tempfile.TemporaryDirectory() as tmp:
        data = [f'datasets.{name}.dataroot_H="{os.path.join(tmp, "demo_data", name)}"' for name in ('train', 'test')]
        opt = read_options(DEMO, data)
        ds, g, t = opt['datasets']['train'], opt['netG'], opt['train']
        for section in opt['datasets'].values():
            ensure_demo_data(section)
        bare_cmd = [sys.executable, os.path.abspath(__file__), '--bare', ds['dataroot_H'],
                    str(g['nc']), str(g['nb']), str(ds['H_size']), str(ds['dataloader_batch_size']),
                    str(ds['dataloader_num_workers']), str(ds['sigma']), str(t['G_optimizer_lr'])]
        for i in range(a.reps + warmup):
            ours_cmd = [sys.executable, os.path.join(HERE, 'bench_resume.py'), '--child', '--opt', DEMO,
                        '--set', f'path.root="{os.path.join(tmp, str(i))}"'] + \
                       [arg for override in data for arg in ('--set', override)]
            ours, base = timed(ours_cmd, env), timed(bare_cmd, env)
            if i >= warmup:
                times['ours'].append(ours)
                times['bare'].append(base)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f'time from launch to the first finished step, demo DnCNN config, {a.reps} interleaved reps, medians:')
    print(f'  main_train.py      {med["ours"]:6.2f} s   (reps: {", ".join(f"{x:.2f}" for x in times["ours"])})')
    print(f'  bare PyTorch       {med["bare"]:6.2f} s   (reps: {", ".join(f"{x:.2f}" for x in times["bare"])})')
    print(f'  ours / bare        {med["ours"] / med["bare"]:6.2f}     goal <= 1.5')


if __name__ == '__main__':
    entry(main, bare=bare)
