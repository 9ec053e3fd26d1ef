"""BasicSR 1.4.2's own trainer as bench_peers.py runs it: installed into a scratch folder, its YAML, its log.

Not a benchmark itself (tests/test_benches.py runs only `bench_*.py`). BasicSR is never a dependency of the
project: `install` puts the registry's `basicsr-fixed` 1.4.2 (BasicSR 1.4.2 with its one import of the
`torchvision.transforms.functional_tensor` module that torchvision removed made to work) with `pip install
--no-deps --target <scratch>/site`, and then whatever its `train.py` fails to import, one package at a time,
into the same folder. Plain `basicsr==1.4.2` works too (`--peer-package`): that import is then patched in
place. Nothing outside the scratch folder is written: the experiment folders go where the YAML's
`path.experiments_root` says, and TensorBoard is off (BasicSR would put `tb_logger/` beside its package).
"""
import glob
import os
import re
import subprocess
import json
import sys
from typing import Any, Dict, List, Optional

PACKAGE = 'basicsr-fixed==1.4.2'
VERSION = '1.4.2'
# import names whose registry package has another name (what train.py's imports may miss on a bare machine)
PACKAGE_OF = {'cv2': 'opencv-python', 'yaml': 'pyyaml', 'skimage': 'scikit-image', 'PIL': 'Pillow',
              'tb_nightly': 'tb-nightly'}
REMOVED_IMPORT = 'torchvision.transforms.functional_tensor'  # gone from torchvision 0.17 on; basicsr 1.4.2 has it


def site(scratch: str) -> str:
    """The folder BasicSR is installed into (PYTHONPATH of its runs)."""
    return os.path.join(scratch, 'site')


def installed_version(scratch: str) -> Optional[str]:
    """BasicSR's version as installed in the scratch folder, or None where its train.py is not there."""
    version = os.path.join(site(scratch), 'basicsr', 'version.py')
    if not os.path.exists(os.path.join(site(scratch), 'basicsr', 'train.py')) or not os.path.exists(version):
        return None
    with open(version) as f:
        found = re.search(r"__version__ = '([^']+)'", f.read())
    return found.group(1) if found else None


def env(scratch: str, base: Dict[str, str]) -> Dict[str, str]:
    """`base` with the scratch install first on PYTHONPATH."""
    return {**base, 'PYTHONPATH': os.pathsep.join(p for p in (site(scratch), base.get('PYTHONPATH')) if p)}


def _missing_module(scratch: str) -> Optional[str]:
    """The module train.py's imports miss (None: they all import); any other import error is raised."""
    proc = subprocess.run([sys.executable, '-c', 'import basicsr.train'], env=env(scratch, dict(os.environ)),
                          capture_output=True, text=True, cwd=scratch)
    if proc.returncode == 0:
        return None
    found = re.search(r"ModuleNotFoundError: No module named '([^'.]+)", proc.stderr)
    if not found:
        raise RuntimeError(f'BasicSR in {site(scratch)} does not import: {proc.stderr.strip().splitlines()[-1]}')
    return found.group(1)


def _pip(scratch: str, package: str) -> None:
    print(f'BasicSR: pip install --no-deps --target {site(scratch)} {package}', flush=True)
    proc = subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-deps', '--disable-pip-version-check',
                           '--target', site(scratch), package], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f'pip install {package} into {site(scratch)} failed: '
                           f'{(proc.stderr or proc.stdout).strip().splitlines()[-1]}')


def _patch_removed_import(scratch: str) -> None:
    """basicsr 1.4.2's one import of a module torchvision no longer has, pointed at the module that holds it now."""
    for path in glob.glob(os.path.join(site(scratch), 'basicsr', '**', '*.py'), recursive=True):
        with open(path) as f:
            text = f.read()
        if REMOVED_IMPORT in text:
            with open(path, 'w') as f:
                f.write(text.replace(REMOVED_IMPORT, 'torchvision.transforms.functional'))
            print(f'BasicSR: patched {os.path.relpath(path, site(scratch))}: {REMOVED_IMPORT} -> '
                  'torchvision.transforms.functional', flush=True)


def install(scratch: str, package: str = PACKAGE) -> str:
    """BasicSR in the scratch folder (installed there first unless it is): its version."""
    version = installed_version(scratch)
    if version is None:
        os.makedirs(site(scratch), exist_ok=True)
        _pip(scratch, package)
        _patch_removed_import(scratch)
        version = installed_version(scratch)
    if version != VERSION:
        raise RuntimeError(f'BasicSR {version} in {site(scratch)}; this bench compares against {VERSION} '
                           f'(remove the folder to reinstall)')
    for _ in range(8):
        module = _missing_module(scratch)
        if module is None:
            return version
        _pip(scratch, PACKAGE_OF.get(module, module))
    raise RuntimeError(f'BasicSR in {site(scratch)} still misses {module} after installing it')


def options(name: str, network: Dict[str, Any], data: Dict[str, Any], iters: int, print_freq: int,
            experiments: str) -> str:
    """The YAML of one BasicSR run, written as BasicSR's own train_*.yml write it (SRModel, PairedImageDataset,
    Adam, L1, EMA), with no validation, no TensorBoard and no checkpoint before the end.

    `data`: gt, lq (folders), gt_size, batch, workers, enlarge (dataset_enlarge_ratio: BasicSR's files use 100 so
    that an epoch, whose end restarts the loader's workers, is long)."""
    opt = {
        'name': name, 'model_type': 'SRModel', 'scale': 4, 'num_gpu': 0, 'manual_seed': 1,
        'datasets': {'train': {
            'name': 'bench', 'type': 'PairedImageDataset', 'dataroot_gt': data['gt'], 'dataroot_lq': data['lq'],
            'filename_tmpl': '{}', 'io_backend': {'type': 'disk'}, 'gt_size': data['gt_size'], 'use_hflip': True,
            'use_rot': True, 'num_worker_per_gpu': data['workers'], 'batch_size_per_gpu': data['batch'],
            'dataset_enlarge_ratio': data['enlarge'], 'prefetch_mode': None}},
        'network_g': network,
        'path': {'pretrain_network_g': None, 'strict_load_g': True, 'resume_state': None,
                 'experiments_root': experiments},
        'train': {'ema_decay': 0.999,
                  'optim_g': {'type': 'Adam', 'lr': 1e-4, 'weight_decay': 0, 'betas': [0.9, 0.99]},
                  'scheduler': {'type': 'MultiStepLR', 'milestones': [10 ** 9], 'gamma': 0.5},
                  'total_iter': iters, 'warmup_iter': -1,
                  'pixel_opt': {'type': 'L1Loss', 'loss_weight': 1.0, 'reduction': 'mean'}},
        'logger': {'print_freq': print_freq, 'save_checkpoint_freq': 10 ** 9, 'use_tb_logger': False,
                   'wandb': {'project': None, 'resume_id': None}},
        'dist_params': {'backend': 'nccl', 'port': 29500},
    }
    return to_yaml(opt)


def to_yaml(opt: Dict[str, Any], indent: str = '') -> str:
    """Block-style YAML of nested dicts whose leaves are JSON scalars or lists (JSON's forms of them are YAML's
    flow forms; None is written as BasicSR's files write it, `~`). No YAML library: the project needs none."""
    lines = []
    for key, value in opt.items():
        if isinstance(value, dict):
            lines.append(f'{indent}{key}:\n{to_yaml(value, indent + "  ")}')
        else:
            lines.append(f'{indent}{key}: {"~" if value is None else json.dumps(value)}\n')
    return ''.join(lines)


def command(scratch: str, yml: str) -> List[str]:
    """BasicSR's own entry, as its README runs it: `python basicsr/train.py -opt FILE`."""
    return [sys.executable, os.path.join(site(scratch), 'basicsr', 'train.py'), '-opt', yml]


def last_iteration(log: str) -> int:
    """The last iteration BasicSR's message logger printed (0: none), once it logged the end of training."""
    if 'End of training' not in log:
        return 0
    return max((int(m) for m in re.findall(r'\biter:\s*(\d+),', log)), default=0)


# a status line of BasicSR's message logger: `2026-12-03 17:48:31,347 INFO: [name][epoch:  0, iter:       5, ...`
# (groups: the time to the second, the milliseconds, the iteration; STATUS_TIME: the first group's format)
STATUS_LINE = re.compile(r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) INFO: \[.*?\]\[epoch:\s*\d+, iter:\s*([\d,]+),',
                         re.MULTILINE)
STATUS_TIME = '%Y-%m-%d %H:%M:%S'
