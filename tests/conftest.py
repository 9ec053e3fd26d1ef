"""Shared fixtures: the project root on sys.path, tiny option files, the entry points in this process or in
a subprocess, and the marks that keep the local run near 10 minutes.

How a test runs `main_train.py` / `main_test.py`:

- `run_main('main_train', ['--opt', path, ...])` runs the entry point's `main()` in the pytest process and
  returns what `run([PY, 'main_train.py', ...])` would (`returncode`, `stdout`, `stderr`): a new process costs
  ~5 s of imports on 2 cores, the run itself often less. What `main()` changes in the process is put back
  after it (`process_state_kept`: environment, cwd, argv, torch threads, random states, signal handlers and
  the stop handlers, the project's logger, warnings, OpenCV threads, LMDB handles). `faults=` patches the
  loop like `tests/patched_main.py` does from the environment (a NaN loss, a failed save...).
- `run([PY, 'main_train.py', ...])` (a real process) only where the process is the point: signals and exit
  codes of the process, DDP and launchers (torchrun, srun, launch_train.sh), start-up behaviour (what is
  imported, held console lines), a process killed mid-run, and the README's commands themselves.
- A checkpoint that many tests only read comes from a session fixture (`tiny_run`): trained once, copied
  (`copy_run`) by a test that writes into it.

Which tests run where: everything in CI (`CI=true`, where a skip is a failure) and with `RUN_SLOW=1`.
Locally, a test marked `@pytest.mark.slow` (a long end-to-end run) is skipped, and a test that checks a family
member by member (every tiny option file, every architecture table, every bench's quick mode) runs for the
members `family()` names as representatives, one per kind of code path; the others show as skipped:

    @pytest.mark.parametrize('name', family(TABLES, local={'edsr__x2.tsv', 'swinir__classical_x2.tsv'}))
"""
import contextlib
import importlib
import io
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections import Counter
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from utils.cores import usable_cores  # noqa: E402  (imports no torch: the wait policy below is set before torch)

# The pytest process computes as the entry points do (main_train.py sets this before importing torch): OpenMP's idle
# threads sleep instead of spinning, so that two pytest workers, and the processes they start, do not burn each
# other's cores waiting. Set before torch is imported, unless the user set it; then `clean_env` keeps it out of the
# processes the tests start, which must see the environment the user gave. (This module is imported twice, as
# `conftest` and as `tests.conftest`: the marker variable says which value is ours to both.)
WAIT_POLICY_MARK = 'TESTS_SET_OMP_WAIT_POLICY'
if 'OMP_WAIT_POLICY' not in os.environ:
    os.environ.update(OMP_WAIT_POLICY='PASSIVE', **{WAIT_POLICY_MARK: '1'})
# Bytecode caches are written (into the gitignored __pycache__ folders) even where PYTHONDONTWRITEBYTECODE is set, as
# it is in some images: the suite starts hundreds of Python processes, and without caches each one compiles the
# project's modules again, and pytest rewrites every test module on every run (collection took 22 s of CPU
# instead of 11 on 2 cores). `clean_env` leaves the variable out of the processes the tests start.
sys.dont_write_bytecode = False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def free_ports(n: int) -> List[int]:
    """`n` distinct free ports: each socket stays bound until all are chosen (successive `free_port` calls may
    return the same port again, and two scenarios that should fail apart then meet and train together)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in sockets:
            s.bind(('127.0.0.1', 0))
        return [s.getsockname()[1] for s in sockets]


def clean_env(**extra: str) -> Dict[str, str]:
    """The parent's environment without any launcher/cluster variables or pytest's own, plus `extra`."""
    drop = ('WORLD_SIZE', 'RANK', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT', 'LOCAL_WORLD_SIZE',
            'GROUP_RANK', 'ROLE_RANK', 'TORCHELASTIC_RUN_ID', 'CUDA_VISIBLE_DEVICES')
    env = {k: v for k, v in os.environ.items()
           if k not in drop and not k.startswith(('SLURM_', 'PYTEST_XDIST_'))
           and k not in ('PYTEST_CURRENT_TEST', 'PYTEST_VERSION')}
    if env.pop(WAIT_POLICY_MARK, None):
        env.pop('OMP_WAIT_POLICY', None)
    env.pop('PYTHONDONTWRITEBYTECODE', None)
    env.update(PYTHONPATH=ROOT, WANDB_MODE='offline', WANDB_SILENT='true', PYTHONUNBUFFERED='1')
    env.pop('WANDB_API_KEY', None)
    env.update(extra)
    return env


def tiny_options(root: str, data_root: str, **train: Any) -> Dict[str, Any]:
    """A DnCNN run small enough for a few seconds on CPU, on the generated demo images, without curves.png.

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
        # no curves.png: each drawing is a process importing matplotlib, ~2 s of CPU (tiny_run draws them)
        'logging': {'use_tensorboard': True, 'use_wandb': False, 'curves': False},
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


ENTRY_POINTS = ('main_train', 'main_test')


@contextlib.contextmanager
def process_state_kept(env: Mapping[str, str], cwd: str, argv: Sequence[str]) -> Iterator[None]:
    """Inside: the process looks to the code as a new one started with `env`, in `cwd`, with `argv`; after: what
    an entry point changes in its process is as it was before (environment, working folder, argv, torch's
    intra-op threads and grad mode, Python/NumPy/torch random states, the stop-signal handlers, the wake-up fd
    and `utils.stop`'s installed handlers, the project's logger, warning filters, OpenCV's threads, LMDB
    environments opened meanwhile)."""
    import logging
    import random
    import signal

    import cv2
    import numpy as np
    import torch

    from utils import stop
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), list(sys.argv)
    threads, grad, cv_threads = torch.get_num_threads(), torch.is_grad_enabled(), cv2.getNumThreads()
    rngs = random.getstate(), np.random.get_state(), torch.get_rng_state()
    handlers = {s: signal.getsignal(s) for s in stop.STOP_SIGNALS}
    stops = stop.current()
    log = logging.getLogger('restoration')
    log_state = list(log.handlers), log.propagate, log.level
    lmdb = sys.modules.get('data.lmdb_util')
    lmdb_envs = lmdb.opened_environments() if lmdb is not None else set()
    try:
        os.environ.clear()
        os.environ.update(env)
        if 'OMP_NUM_THREADS' in env:  # what a new process's torch would have read at start-up
            torch.set_num_threads(int(env['OMP_NUM_THREADS']))
        os.chdir(cwd)
        sys.argv[:] = argv
        with warnings.catch_warnings():  # a new interpreter's filters (pytest sets its own for each test)
            warnings.resetwarnings()
            warnings.filterwarnings('default', category=DeprecationWarning, module='__main__')
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter('ignore', category, append=True)
            warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: \
                sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))
            yield
    finally:
        installed = stop.current()
        if installed is not None and installed is not stops:
            installed.restore()  # the handlers before it, the wake-up fd, and no installed handlers
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for h in list(log.handlers):
            if h not in log_state[0]:
                log.removeHandler(h)
                try:  # as logging.shutdown() at a process's exit: a log file on a full disk fails its flush
                    h.flush()
                    h.close()
                except (OSError, ValueError):
                    pass
        log.handlers[:] = log_state[0]
        log.propagate, log.level = log_state[1], log_state[2]
        lmdb = sys.modules.get('data.lmdb_util')
        if lmdb is not None:
            lmdb.close_environments_opened_since(lmdb_envs)
        random.setstate(rngs[0])
        np.random.set_state(rngs[1])
        torch.set_rng_state(rngs[2])
        torch.set_num_threads(threads)
        torch.set_grad_enabled(grad)
        cv2.setNumThreads(cv_threads)
        sys.argv[:] = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def run_main(entry: str, args: Sequence[str], env: Optional[Mapping[str, str]] = None, cwd: str = ROOT,
             faults: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
    """`python <entry>.py <args>` run in this process: what `run` of that command returns (exit code, stdout,
    stderr), without the ~5 s of a new interpreter importing torch. `entry`: main_train or main_test.

    `env` as for `run` (default `clean_env()`). `faults`: variables of tests/patched_main.py (INJECT_NAN_AT,
    SAVE_FAIL_AT, ...; not CRASH_AT, which ends the process), patched in for this run. A traceback ends the
    run with exit code 1 and the traceback on its stderr, as it would a process. Use `run` where the process
    itself is tested (see this module's docstring)."""
    if entry not in ENTRY_POINTS:
        raise ValueError(f'entry {entry!r}: one of {ENTRY_POINTS}')
    if faults and 'CRASH_AT' in faults:
        raise ValueError('CRASH_AT ends the process: run tests/patched_main.py in a subprocess')
    main = importlib.import_module(entry).main
    env = {**(env or clean_env()), **(faults or {})}
    out, err = io.StringIO(), io.StringIO()
    with process_state_kept(env, cwd, [f'{entry}.py', *args]), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if faults:
                from tests.patched_main import injected
                with injected(os.environ):
                    code = main(list(args))
            else:
                code = main(list(args))
        except SystemExit as e:  # argparse's usage errors
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
        except Exception:  # what the interpreter would print before exiting 1
            traceback.print_exc()
            code = 1
    return subprocess.CompletedProcess([entry, *args], code, out.getvalue(), err.getvalue())


@pytest.fixture(autouse=True)
def restoration_logger_restored():
    """Every test starts with the project's logger as a new process has it (no handlers, propagating, no level
    of its own) and leaves it as it was: a test that sets it up in-process (propagate off, its own handlers,
    INFO) must neither hide later tests' records from caplog nor let caplog catch INFO records a test did not
    ask for (what a test sees must not depend on which tests ran before it on the same worker)."""
    import logging
    log = logging.getLogger('restoration')
    saved = (list(log.handlers), log.propagate, log.level)
    log.handlers[:] = []
    log.propagate, log.level = True, logging.NOTSET
    yield
    for h in list(log.handlers):
        if h not in saved[0]:
            log.removeHandler(h)
            try:
                h.close()
            except (OSError, ValueError):  # a log file on a full disk
                pass
    log.handlers[:] = saved[0]
    log.propagate, log.level = saved[1], saved[2]


@pytest.fixture(autouse=True)
def lmdb_environments_closed():
    """LMDB environments a test opened through data/lmdb_util.py's per-process cache are closed after it: LMDB
    refuses a second open of one environment in a process, so a later test opening the same folder itself
    would fail only when it happens to run after this one on the same worker."""
    lmdb = sys.modules.get('data.lmdb_util')
    before = lmdb.opened_environments() if lmdb is not None else set()
    yield
    lmdb = sys.modules.get('data.lmdb_util')
    if lmdb is not None:
        lmdb.close_environments_opened_since(before)


@pytest.fixture
def console_held(monkeypatch):
    """Start-up lines stay held on the console however long a loaded machine takes to start (3 s otherwise,
    `utils.logger.HOLD_S`): a test that a failed start-up shows its one error line alone cannot flake."""
    from utils import logger
    monkeypatch.setattr(logger, 'HOLD_S', 3600.0)


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


def straight_and_resumed(straight: str, resumed: str, stop_at: int) -> None:
    """Two option files of the same run under two tasks: the first trained straight through, the second stopped at
    iteration `stop_at` (`--set train.total_iter`) and resumed to the end, for the tests of bit-exact resume."""
    assert run_main('main_train', ['--opt', straight]).returncode == 0
    assert run_main('main_train', ['--opt', resumed, '--set', f'train.total_iter={stop_at}']).returncode == 0
    res = run_main('main_train', ['--opt', resumed])
    assert res.returncode == 0 and 'resumed from' in res.stdout, res.stderr[-2000:]


@pytest.fixture(scope='session')
def demo_images(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Generated demo images shared by the tests (the generator is deterministic and idempotent), in
    `<tmp>/demo_data/{train,test}`: generate_demo writes only inside a folder named demo_data."""
    from data.synthetic.demo import ensure_demo_data
    root = str(tmp_path_factory.mktemp('demo_images') / 'demo_data')
    for name in ('train', 'test'):
        ensure_demo_data(dataset_options('dncnn', name, generate_demo='images', dataroot_H=os.path.join(root, name)))
    return root


class TrainedRun:
    """A finished run: its option file, its run folder (`<path.root>/<task>`) and what training printed."""

    def __init__(self, opt_path: str, folder: str, result: subprocess.CompletedProcess):
        self.opt_path, self.folder, self.result = opt_path, folder, result

    @property
    def models(self) -> str:
        return os.path.join(self.folder, 'models')


@pytest.fixture(scope='session')
def tiny_run(tmp_path_factory: pytest.TempPathFactory, demo_images: str) -> TrainedRun:
    """The run of `tiny_options` (8 iterations, prints every 2, validations and saves at 4 and 8, TensorBoard
    on) with curves.png drawn, trained once per session for the tests that read what a run leaves (history, TensorBoard,
    log file, checkpoints for main_test). Read-only: a test that writes into a run folder takes `copy_run`."""
    base = tmp_path_factory.mktemp('tiny_run')
    opt = tiny_options(str(base / 'exp'), demo_images)
    opt['logging']['curves'] = True  # the default of an option file: curves.png drawn at each validation
    path = write_options(str(base / 'o.json'), opt)
    res = run_main('main_train', ['--opt', path])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return TrainedRun(path, str(base / 'exp' / 'tiny'), res)


def copy_run(trained: TrainedRun, dest: str) -> TrainedRun:
    """A copy of a finished run under `dest` (`dest/exp/<task>` and `dest/o.json`, whose path.root points to it),
    to resume, extend or damage without touching the original."""
    with open(trained.opt_path) as f:
        opt = json.load(f)
    opt['path']['root'] = os.path.join(dest, 'exp')
    folder = os.path.join(opt['path']['root'], os.path.basename(trained.folder))
    shutil.copytree(trained.folder, folder)
    return TrainedRun(write_options(os.path.join(dest, 'o.json'), opt), folder, trained.result)


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


def run_everything() -> bool:
    """CI (CI=true) or RUN_SLOW=1: slow tests and every member of a family run."""
    return in_ci() or os.environ.get('RUN_SLOW') == '1'


def family(members: Sequence[Any], local: Any, key: Any = None) -> List[Any]:
    """Parameters of a test that checks each member of a family (every tiny option file, every architecture
    table, every bench): all run in CI and with RUN_SLOW=1, and locally the `local` ones (members whose `key`,
    by default the member itself, is in `local`), a few that stand for the rest; the others are marked
    `family` and reported as skipped. Choose members that differ: one per kind of code path."""
    local = set(local)
    unknown = local - {member if key is None else key(member) for member in members}
    if unknown:
        raise ValueError(f'family: local members {sorted(unknown)} are not members')
    return [member if (member if key is None else key(member)) in local
            else pytest.param(member, marks=pytest.mark.family) for member in members]


def pytest_xdist_auto_num_workers(config) -> int:
    """`pytest -n auto` (pytest.ini's default): one worker per usable core, at most 8 (each may start 2-rank DDP runs
    of a GiB or two); none on one core, where a worker would only add its start-up.

    Why parallel on 2 cores: run one at a time, the tests keep about 1.2 cores busy (many wait on processes,
    signals and timeouts); two workers cut the wall time by a third (docs/testing.md has the figures)."""
    cores = usable_cores()
    return min(cores, 8) if cores >= 2 else 0


def pytest_configure(config) -> None:
    """A pytest-xdist worker computes on its share of the cores: torch's intra-op threads of the workers add up to
    the usable cores, as DDP ranks do (`utils.dist.group.init`), instead of each taking them all."""
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '0'))
    if workers > 1:
        import torch
        torch.set_num_threads(max(1, usable_cores() // workers))


def pytest_collection_modifyitems(config, items):
    """Long end-to-end tests and the other members of a family run in CI (CI=true) or with RUN_SLOW=1; locally
    they are reported as skipped. Where they run on pytest-xdist workers, they run first: xdist hands tests out in
    this order, and a run of minutes started last would leave the other workers idle at the end."""
    if run_everything():
        if os.environ.get('PYTEST_XDIST_WORKER'):
            items.sort(key=lambda item: 'slow' not in item.keywords)  # stable: the order within each part is kept
        return
    slow = pytest.mark.skip(reason='slow end-to-end test: runs in CI, or locally with RUN_SLOW=1')
    member = pytest.mark.skip(reason='one of a family whose representatives run locally: all run in CI, or '
                                     'locally with RUN_SLOW=1')
    for item in items:
        if 'slow' in item.keywords:
            item.add_marker(slow)
        elif 'family' in item.keywords:
            item.add_marker(member)


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
