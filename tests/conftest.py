"""Shared fixtures: the project root on sys.path, tiny option files, subprocess helpers."""
import importlib
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
from collections import Counter
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> Dict[str, str]:
    """The parent's environment without any launcher/cluster variables, plus `extra`."""
    drop = ('WORLD_SIZE', 'RANK', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT', 'LOCAL_WORLD_SIZE',
            'GROUP_RANK', 'ROLE_RANK', 'TORCHELASTIC_RUN_ID', 'CUDA_VISIBLE_DEVICES')
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith('SLURM_')}
    env.update(PYTHONPATH=ROOT, WANDB_MODE='offline', WANDB_SILENT='true', PYTHONUNBUFFERED='1')
    env.pop('WANDB_API_KEY', None)
    env.update(extra)
    return env


def tiny_options(root: str, data_root: str, **train: Any) -> Dict[str, Any]:
    """A DnCNN run small enough for a few seconds on CPU, on the generated demo images.

    The demo images are `<data_root>/train` and `<data_root>/test`, generated there when missing only
    if data_root lies in or is a folder named demo_data (as `demo_images` does); else read as they are.
    """
    t = {'manual_seed': 7, 'G_lossfn_type': 'l1', 'E_decay': 0.9, 'G_optimizer_lr': 1e-3,
         'G_scheduler_type': 'MultiStepLR', 'G_scheduler_milestones': [6], 'total_iter': 8,
         'checkpoint_test': 4, 'checkpoint_save': 4, 'checkpoint_print': 2}
    t.update(train)
    return {
        'task': 'tiny', 'model': 'plain', 'n_channels': 3, 'scale': 1,
        'path': {'root': root},
        'datasets': {
            'train': {'name': 'train_dataset', 'dataset_type': 'dncnn', 'generate_demo': 'images',
                      'dataroot_H': os.path.join(data_root, 'train'), 'H_size': 24, 'sigma': 25,
                      'dataloader_num_workers': 0, 'dataloader_batch_size': 4},
            'test': {'name': 'test_dataset', 'dataset_type': 'dncnn', 'generate_demo': 'images',
                     'dataroot_H': os.path.join(data_root, 'test'), 'sigma_test': 25},
        },
        'netG': {'net_type': 'dncnn', 'in_nc': 3, 'out_nc': 3, 'nc': 8, 'nb': 3, 'act_mode': 'BR'},
        'train': t,
        'logging': {'use_tensorboard': True, 'use_wandb': False},
    }


def train_options(**given: Any) -> Dict[str, Any]:
    """The `train` section as the options loader completes it: its defaults with `given` on top."""
    from option_rules import option_rules
    from utils.options import validate
    return validate({'task': 't', 'netG': {'net_type': 'dncnn'}, 'train': given}, option_rules())['train']


def dataset_options(dataset_type: str, phase: str = 'train', **given: Any) -> Dict[str, Any]:
    """A `datasets.<phase>` section as the options loader completes it (defaults, `_where`, `phase`).

    The top-level `scale` follows the section's, so that any scale can be given here.
    """
    from option_rules import option_rules
    from utils.options import validate
    raw = {'task': 't', 'netG': {'net_type': 'dncnn'}, 'datasets': {phase: {'dataset_type': dataset_type, **given}}}
    if 'scale' in given:
        raw['scale'] = given['scale']
    return validate(raw, option_rules())['datasets'][phase]


def unchecked_section(cls: type, phase: str = 'train', **given: Any) -> Dict[str, Any]:
    """A dataset section made by hand from the class's defaults, not validated: for the dataset's own checks."""
    from data.registry import LOADER_OPTIONS
    from utils.options import Key
    defaults = {k: v.default if isinstance(v, Key) else v for k, v in {**LOADER_OPTIONS, **cls.OPTIONS}.items()}
    return {**defaults, 'name': f'{phase}_dataset', '_where': f'datasets.{phase}', 'phase': phase,
            'dataset_type': 'x', **given}


def write_options(path: str, opt: Dict[str, Any]) -> str:
    with open(path, 'w') as f:
        json.dump(opt, f, indent=1)
    return path


def run(cmd: List[str], env: Optional[Dict[str, str]] = None, timeout: float = 300,
        cwd: str = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env or clean_env(), cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(autouse=True)
def restoration_logger_restored():
    """A test that sets up the project's logger in-process (propagate off, its own handlers) must not
    hide later tests' records from caplog: the logger is put back as it was after each test."""
    import logging
    log = logging.getLogger('restoration')
    saved = (list(log.handlers), log.propagate, log.level)
    yield
    for h in list(log.handlers):
        if h not in saved[0]:
            log.removeHandler(h)
            h.close()
    log.handlers[:] = saved[0]
    log.propagate, log.level = saved[1], saved[2]


@pytest.fixture(scope='session', autouse=True)
def private_tmpdir(tmp_path_factory: pytest.TempPathFactory):
    """TMPDIR inside pytest's base folder for the session: what the tests and the processes they start put
    in the temporary folder (torchrun's log folders, multiprocessing's, W&B's, TorchInductor's cache) is
    removed with it (pytest.ini's retention policy), instead of piling up in /tmp."""
    path = tmp_path_factory.getbasetemp() / 'tmp'
    path.mkdir(exist_ok=True)
    saved_env, saved_dir = os.environ.get('TMPDIR'), tempfile.tempdir
    os.environ['TMPDIR'] = tempfile.tempdir = str(path)
    yield str(path)
    tempfile.tempdir = saved_dir
    if saved_env is None:
        os.environ.pop('TMPDIR', None)
    else:
        os.environ['TMPDIR'] = saved_env


def group_members(pgid: int) -> List[int]:
    """Live (non-zombie) processes of the process group `pgid`, from /proc."""
    pids = []
    for entry in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open(f'/proc/{entry}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != 'Z':
            pids.append(int(entry))
    return pids


def damage_pixels(path: str) -> None:
    """Zero bytes inside an image file's pixel data, keeping its header and length (the start-up file checks
    pass): only decoding can tell."""
    with open(path, 'rb') as f:
        data = bytearray(f.read())
    mid = len(data) // 2
    data[mid:mid + 60] = bytes(60)
    with open(path, 'wb') as f:
        f.write(bytes(data))


VALIDATION_PSNR = re.compile(r'<iter:\s*(\d+)> validation on \d+ items: PSNR ([\d.]+) dB')


def train_two_processes(path: str, root: str, iters: int, extra: Sequence[str] = (),
                        timeout: float = 600) -> Tuple[subprocess.CompletedProcess, List[float]]:
    """A shipped option file trained end to end by torchrun with 2 CPU processes for `iters` iterations,
    validated half way and at the end: the run (checked to have succeeded with identical replicas) and its
    validation PSNRs. The zoo, video zoo and architecture tests check that those rise."""
    overrides = [f'path.root={root}', f'train.total_iter={iters}', f'train.checkpoint_test={iters // 2}',
                 f'train.checkpoint_save={iters}', 'logging.use_tensorboard=false', *extra]
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'main_train.py',
           '--opt', path] + [a for o in overrides for a in ('--set', o)]
    res = run(cmd, env=clean_env(OMP_NUM_THREADS='1'), timeout=timeout)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'world_size=2' in res.stdout and 'parameters identical on all 2 rank(s)' in res.stdout
    return res, [float(v) for _, v in VALIDATION_PSNR.findall(res.stdout)]


@pytest.fixture(scope='session')
def demo_images(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Generated demo images shared by the tests (the generator is deterministic and idempotent), in
    `<tmp>/demo_data/{train,test}`: generate_demo writes only inside a folder named demo_data."""
    from data.synthetic.demo import ensure_demo_data
    root = str(tmp_path_factory.mktemp('demo_images') / 'demo_data')
    for name in ('train', 'test'):
        ensure_demo_data(dataset_options('dncnn', name, generate_demo='images', dataroot_H=os.path.join(root, name)))
    return root


@pytest.fixture(scope='module')
def one_thread():
    """One intra-op thread for a test module of small networks: they gain nothing from two, and
    OpenMP threads competing with parallel tests for 2 cores can slow them down tens of times."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def in_ci(env: Optional[Mapping[str, str]] = None) -> bool:
    """CI=true (or 1): every test must run; a missing prerequisite is a failure, never a skip."""
    return (os.environ if env is None else env).get('CI', '').lower() in ('1', 'true')


def pytest_collection_modifyitems(config, items):
    """Long end-to-end tests run in CI (CI=true) or with RUN_SLOW=1; locally they are reported as skipped."""
    if in_ci() or os.environ.get('RUN_SLOW') == '1':
        return
    skip = pytest.mark.skip(reason='slow end-to-end test: runs in CI, or locally with RUN_SLOW=1')
    for item in items:
        if 'slow' in item.keywords:
            item.add_marker(skip)


def need_module(name: str) -> Any:
    """An installed module requirements.txt lists (spandrel, the tests' reference packages), or a skip where it is
    missing; a failure under CI=true, where a skipped test would hide a broken install."""
    if in_ci():
        return importlib.import_module(name)
    return pytest.importorskip(name)


def need_spandrel() -> Any:
    """The spandrel module (see need_module)."""
    return need_module('spandrel')


def noisy_batches(n: int = 2, size: int = 24) -> list:
    """`n` evaluation batches of 2 RGB images (H random, L = H + noise, clipped), seeded by batch index."""
    import torch  # conftest stays light: torch only for the tests that use this
    out = []
    for i in range(n):
        g = torch.Generator().manual_seed(i)
        H = torch.rand(2, 3, size, size, generator=g)
        out.append({'L': (H + 0.1 * torch.randn(H.shape, generator=g)).clamp(0, 1), 'H': H,
                    'L_path': [f'/x/{i}_{j}.png' for j in range(2)]})
    return out


def assert_frequencies(values: list, probs: dict, name: str) -> None:
    """Every outcome's count within 4 binomial standard deviations of n·p, and no outcome of probability 0."""
    n = len(values)
    assert n > 0, f'{name}: nothing recorded'
    counts = Counter(values)
    possible = {k for k, p in probs.items() if p > 0}
    assert set(counts) <= possible, f'{name}: unexpected outcomes {set(counts) - possible}'
    for outcome, p in probs.items():
        tol = 4 * math.sqrt(n * p * (1 - p)) + 1
        assert abs(counts[outcome] - n * p) <= tol, \
            f'{name}={outcome!r}: {counts[outcome]} of {n}, expected {n * p:.1f} ± {tol:.1f}'
