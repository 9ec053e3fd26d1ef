"""DataLoader construction for training (sharded, resumable) and evaluation (sharded, no padding).

Loader workers ignore the stop signals, SIGTERM, SIGUSR1 and SIGINT. SLURM, torchrun and
`kill -TERM -<pgid>` signal every process of a job, and a terminal's Ctrl-C every process of its
foreground group, workers included; a worker ended that way makes its rank fail with "DataLoader
worker ... is killed by signal" (or exited unexpectedly, for SIGINT's KeyboardInterrupt) before the
rank can act on the same signal (utils/stop.py: agree at the iteration boundary, save, exit 3 or
130). So the stop request is left to the rank. Workers still end with their rank: torch's worker
watchdog exits a worker whose parent is gone, and a normal shutdown stops them through the loader.
"""
import os
import signal
import sys
import warnings
from multiprocessing import resource_sharer
from types import TracebackType
from typing import Any, Dict, Mapping, Optional, Tuple, Type

import cv2
import torch
from torch.utils.data import DataLoader, Dataset

from data.sampler import ResumableDistributedSampler, ShardSampler
from utils import dist
from utils.cores import KEEP_WORKERS_ENV, fitted_workers
from utils.errors import UserError
from utils.logger import get_logger
from utils.stop import STOP_SIGNALS


# torch's UserWarning when a DataLoader starts more workers than the process's cores (`fit_workers` says it instead)
TORCH_WORKERS_WARNING = r'This DataLoader will create \d+ worker processes in total'


def ignore_stop_signals(worker_id: int) -> None:
    """`worker_init_fn` of every loader: leave the stop signals to the rank (see the module docstring).

    torch's worker loop installs its own SIGTERM handler (which re-raises SIGTERM from anyone but the
    parent) before it calls `worker_init_fn`, so the SIG_IGN set here is what stays in effect. The rank's
    wake-up fd (utils/stop.py), inherited through the fork, is dropped: the rank counts only its own Ctrl-Cs.
    The worker also stays quiet when its rank exits while taking a batch (see `quiet_when_the_rank_is_gone`).
    """
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.set_wakeup_fd(-1)
    sys.excepthook = quiet_when_the_rank_is_gone(sys.excepthook)


_RESOURCE_SHARER = os.path.normcase(os.path.abspath(resource_sharer.__file__))


def quiet_when_the_rank_is_gone(default: Any) -> Any:
    """An excepthook for a loader worker that drops one report: the rank went away in the middle of taking a batch.

    A worker hands each batch's shared-memory file descriptors to its rank through multiprocessing's
    resource sharer, a thread of the worker that answers the rank's connection and reports any error with
    `sys.excepthook`. A rank that exits at once (main_test's Ctrl-C, a second Ctrl-C in training) can close
    that connection halfway, and the worker would print a ConnectionResetError traceback under the rank's
    one-line message. Such an error means only that the rank is gone (a live rank fails on its own side), so
    it is not reported; every other exception goes to `default`.
    """
    def hook(kind: Type[BaseException], value: BaseException, tb: Optional[TracebackType]) -> None:
        if issubclass(kind, (ConnectionError, EOFError)) and _raised_in_resource_sharer(tb):
            return
        default(kind, value, tb)

    return hook


def _raised_in_resource_sharer(tb: Optional[TracebackType]) -> bool:
    while tb is not None:
        if os.path.normcase(os.path.abspath(tb.tb_frame.f_code.co_filename)) == _RESOURCE_SHARER:
            return True
        tb = tb.tb_next
    return False


def one_opencv_thread_per_worker(num_workers: int) -> None:
    """With loader workers, OpenCV runs one thread per process: each worker decodes one image at a time, and
    OpenCV's own pool of one thread per core in each of N workers would oversubscribe the cores N times.
    Set in the parent before the workers fork, which inherit it: calling cv2.setNumThreads in a forked
    child whose parent had used OpenCV's pool deadlocks."""
    if num_workers > 0:
        cv2.setNumThreads(1)


def fit_workers(asked: int, key: str, env: Mapping[str, str] = os.environ) -> int:
    """The loader workers to start for `key`'s `asked`: at most the cores this rank may count on (its affinity,
    shared with the ranks of its host that have the same cores: `dist.rank_cores`), with one log line when fewer,
    so that torch's own warning about more workers than cores never shows; `KEEP_LOADER_WORKERS=1` keeps them as
    asked (and silences that warning, which the line replaces). Collective when `asked` > 1: every rank reads the
    same options."""
    if asked <= 1:
        return asked  # the main process (0) or one worker: a rank always has a core
    usable = dist.rank_cores()
    used = fitted_workers(asked, usable, env)
    where = 'this process may use' if dist.get_world_size() == 1 else \
        'this rank\'s share of its host\'s cores (its affinity, divided among the ranks with the same cores)'
    if used < asked:
        get_logger().info(f'{key}: {asked} asked, {used} used: the cores {where} ({KEEP_WORKERS_ENV}=1 keeps {asked})')
    elif asked > usable:
        warnings.filterwarnings('ignore', message=TORCH_WORKERS_WARNING, category=UserWarning)
        get_logger().info(f'{key}: {asked} used as asked ({KEEP_WORKERS_ENV}=1), above the {usable} cores {where}')
    return used


def build_train_loader(dataset: Dataset, dataset_opt: Dict[str, Any], world_size: int, rank: int,
                       seed: int, device: torch.device, accumulate_steps: int = 1,
                       continuous: bool = False) -> Tuple[DataLoader, ResumableDistributedSampler]:
    """Loader over this rank's shard; batch size and workers are per process.

    The loader gets its own torch.Generator so iterating it never consumes the global RNG (which
    would otherwise make model-side randomness depend on how often loaders were created). A dataset
    with `uses_step_seed` gets keys with a seed per optimizer step (see ResumableDistributedSampler).
    `continuous` (the training loop): one iterator runs through every epoch, each of the whole
    optimizer steps the shard holds, so the workers never drain and restart at an epoch's end; its
    `len()` is still the batches of one epoch.
    """
    batch_size = dataset_opt['dataloader_batch_size']
    num_workers = fit_workers(dataset_opt['dataloader_num_workers'], f'{dataset_opt["_where"]}.dataloader_num_workers')
    check = getattr(dataset, 'check_train_options', None)
    if check is not None:
        check()
    sampler = ResumableDistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                          shuffle=dataset_opt['dataloader_shuffle'],
                                          seed=seed, drop_last=True,
                                          step_size=world_size * batch_size * accumulate_steps
                                          if getattr(dataset, 'uses_step_seed', False) else None)
    if continuous:
        per_step = batch_size * accumulate_steps
        sampler.per_epoch, sampler.continuous = sampler.num_samples // per_step * per_step, True
        sampler.per_step = per_step
    if sampler.num_samples < batch_size:
        raise UserError(f'{dataset_opt["_where"]}.dataloader_batch_size: each of the {world_size} process(es) gets '
                        f'{sampler.num_samples} of the {len(dataset)} training samples, fewer than one '
                        f'batch of {batch_size}; use a smaller batch size or more data')
    one_opencv_thread_per_worker(num_workers)
    extra: Dict[str, Any] = {}
    if num_workers > 0:
        extra['persistent_workers'] = dataset_opt['dataloader_persistent_workers']
        extra['prefetch_factor'] = dataset_opt['dataloader_prefetch_factor']
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers,
                        drop_last=True, pin_memory=device.type == 'cuda',
                        generator=torch.Generator().manual_seed(seed + rank),
                        worker_init_fn=ignore_stop_signals if num_workers > 0 else None, **extra)
    return loader, sampler


def build_val_loader(dataset: Dataset, world_size: int, rank: int, num_workers: int = 0,
                     persistent_workers: bool = False, prefetch_factor: int = 2) -> DataLoader:
    """Batch-1 loader over rank::world_size (every sample exactly once across ranks), in order.

    Evaluation items are whole images or clips of different sizes, so there is no batch size or
    shuffling to choose (the options refuse them in test sections); the worker keys are a test
    section's own (`persistent_workers`: workers kept between validations of a training run).
    """
    one_opencv_thread_per_worker(num_workers)
    extra: Dict[str, Any] = {}
    if num_workers > 0:
        extra.update(persistent_workers=persistent_workers, prefetch_factor=prefetch_factor,
                     worker_init_fn=ignore_stop_signals)
    return DataLoader(dataset, batch_size=1, sampler=ShardSampler(len(dataset), world_size, rank),
                      num_workers=num_workers, shuffle=False, drop_last=False,
                      generator=torch.Generator().manual_seed(0), **extra)


def val_loader_options(dataset_opt: Dict[str, Any]) -> Dict[str, Any]:
    """`build_val_loader`'s worker keywords from a validated test section (collective: `fit_workers`)."""
    return {'num_workers': fit_workers(dataset_opt['dataloader_num_workers'],
                                       f'{dataset_opt["_where"]}.dataloader_num_workers'),
            'persistent_workers': dataset_opt['dataloader_persistent_workers'],
            'prefetch_factor': dataset_opt['dataloader_prefetch_factor']}
