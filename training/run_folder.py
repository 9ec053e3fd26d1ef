"""The run folder `<root>/<task>` at a start: its lock, `--fresh`, the first writes, and a tidy `models/`.

Everything here runs once the start-up checks passed (main_train.train) and before the first iteration:
a second job on the same folder, a full disk or a half-written save of an earlier run is found here and
ends the run with one line, on every rank, before anything is trained.
"""
import argparse
import logging
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from utils import dist
from utils.checkpoint import CheckpointDir, atomic_write_text
from utils.diskspace import describe_write_error
from utils.errors import UserError
from utils.exit_codes import EXIT_SAVE_FAILED
from utils.logger import get_logger, log_to_file
from utils.options import dumps
from utils.runlock import RunLock
from utils.stop import TrainingStopped


def archive_task_dir(task_dir: str) -> Optional[str]:
    """Move an old run aside for --fresh (never deleted: a mistyped --fresh costs nothing); returns the new name."""
    if not os.path.exists(task_dir):
        return None
    dest = f'{task_dir.rstrip(os.sep)}_archived_{time.strftime("%y%m%d_%H%M%S")}'
    os.rename(task_dir, dest)
    return dest


def prepare_run_dir(opt: Dict[str, Any], state: dist.DistState, args: argparse.Namespace) -> Optional[RunLock]:
    """Rank 0: lock the run folder, archive for --fresh, create folders, start the log file, save the options.

    The lock comes first, before anything is written: a second job on the same folder ends on every
    rank with one line naming the holder (exit 2) and leaves no trace. Rank 0 gets the lock back and
    holds it until the process ends. A write that fails here (a full disk) ends every rank with one
    line and exit 5, as a failed checkpoint does.
    """
    task_dir = opt['path']['task']
    taken: List[RunLock] = []

    def lock_problem(e: BaseException) -> Optional[Tuple[str, str]]:
        if isinstance(e, UserError):  # held by another job
            return 'busy', str(e)
        return ('write', describe_write_error(e, task_dir)) if isinstance(e, OSError) else None  # no space for it
    outcome = dist.main_process_outcome(lambda: taken.append(RunLock.acquire(task_dir)), lock_problem)
    if outcome is not None and outcome[0] == 'busy':
        raise UserError(outcome[1])
    lock = taken[0] if taken else None
    try:
        if outcome is not None:
            raise _run_folder_failed(task_dir, outcome[1])
        archived = archive_task_dir(task_dir) if args.fresh and dist.is_main_process() else None
        dist.barrier()

        def write_folder() -> None:
            for key in ('task', 'models', 'options'):
                os.makedirs(opt['path'][key], exist_ok=True)
            log_to_file(task_dir)
            name = os.path.splitext(os.path.basename(opt['opt_path']))[0]
            atomic_write_text(os.path.join(opt['path']['options'], f'{name}_{time.strftime("%y%m%d_%H%M%S")}.json'),
                              dumps(opt) + '\n')
        write_error = dist.main_process_outcome(
            write_folder, lambda e: describe_write_error(e, task_dir) if isinstance(e, OSError) else None)
        if write_error is not None:
            raise _run_folder_failed(task_dir, write_error)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    if lock is not None and lock.warning:
        get_logger().warning(lock.warning)
    if archived:
        get_logger().info(f'--fresh: previous run moved to {archived}')
    return lock


def _run_folder_failed(task_dir: str, problem: str) -> TrainingStopped:
    return TrainingStopped(f'writing the run folder {task_dir} failed: {problem}; nothing trained yet',
                           EXIT_SAVE_FAILED)


def tidy_checkpoints(ckpt: CheckpointDir, start_iter: int, log: logging.Logger) -> None:
    """Rank 0: remove what interrupted or failed saves left, set aside saves newer than the start.

    After this `models/` holds one history ending at the iteration training continues from,
    so pruning and the next auto-resume, which go by iteration, go by recency too.
    """
    for name in ckpt.remove_stale_temp():
        log.warning(f'removed {name}: temporary file of an interrupted checkpoint write')
    aside = ckpt.set_aside_after(start_iter)  # first: newer saves are moved, never deleted
    if aside:
        log.warning(f'saves newer than iteration {start_iter}, which this run does not continue, moved '
                    f'to {aside}: {", ".join(sorted(os.listdir(aside)))}')
    for name in ckpt.remove_incomplete():
        log.warning(f'removed {name}: part of a checkpoint whose write did not complete')
