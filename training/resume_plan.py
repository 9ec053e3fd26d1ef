"""Where a resumed run goes on: the arithmetic of a checkpoint's saved state against this start's layout.

An epoch is counted in optimizer steps of the effective batch (`epoch_layout`). A resume may change the
number of processes, the batch per process, the accumulation, the seed or the training files. The data
order is a function of (seed, epoch, global sample position) (data/sampler.py), so each of these decides
whether the epoch goes on at the sample where the run stopped or the next epoch starts afresh. Kept here as
functions of plain values (the saved `training` record, the new layout), so that every case is testable
without a model, a loader or a process group; training/trainer.py's Trainer applies the result and logs the lines
these functions return.
"""
import logging
import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

from utils.errors import UserError
from utils.resume import ResumePoint

# (epoch, epoch_start, epoch_step): the epoch, the global position its steps started from in this process
# (0 but after a resume with another effective batch), and the steps done since
Position = Tuple[int, int, int]
# a log line and its level (logging.INFO, logging.WARNING), in the order the loop logs them
Note = Tuple[int, str]


def resumed_accumulation(point: Optional[ResumePoint], train_opt: Mapping[str, Any], world_size: int,
                         batch: int) -> Tuple[int, str]:
    """(`train.accumulate_steps` to train with, a log line or '').

    With `train.keep_effective_batch` on a resume with another number of processes (or batch), the
    accumulation that keeps the resumed run's effective batch, so that lr and schedule, tuned for that
    batch, still fit; a batch it cannot make with whole accumulation steps is a UserError.
    """
    accum = train_opt['accumulate_steps']
    if point is None or not train_opt['keep_effective_batch'] or 'batch_size' not in point.training:
        return accum, ''
    s = point.training
    saved = s['world_size'] * s['batch_size'] * s['accumulate_steps']
    per_step = world_size * batch
    if saved == per_step * accum:
        return accum, ''
    if saved % per_step:
        raise UserError(f'train.keep_effective_batch: {point.path} trained with an effective batch of {saved} '
                        f'({s["world_size"]} processes x batch {s["batch_size"]} x {s["accumulate_steps"]} '
                        f'accumulation), which {world_size} processes x batch {batch} cannot make with '
                        f'whole accumulation steps; change the batch per process or the number of processes, or '
                        f'set train.keep_effective_batch to false')
    return saved // per_step, (f'train.keep_effective_batch: {s["world_size"]} -> {world_size} processes, batch '
                               f'{s["batch_size"]} -> {batch} per process: train.accumulate_steps {accum} -> '
                               f'{saved // per_step}, the effective batch stays {saved}')


def resumed_memory_format(point: Optional[ResumePoint], channels_last: Optional[bool]) -> Tuple[Optional[bool], str]:
    """(`train.channels_last` to build the model with, a log line or '').

    A resume with the key null keeps the memory format its checkpoint trained in, which decides the convolutions'
    rounding: the run goes on as it would have without the stop. A checkpoint that does not record it was written
    before null meant channels-last on a CPU, in the channels-first format of those runs. An explicit value wins.
    """
    if point is None or channels_last is not None:
        return channels_last, ''
    saved = bool(point.training.get('channels_last', False))
    return saved, (f'resume: train.channels_last null: {"channels-last" if saved else "channels-first"}, the '
                   f'memory format the checkpoint trained in')


def resumed_threads_note(point: Optional[ResumePoint], threads: Optional[int]) -> str:
    """A warning where a CPU resume takes another intra-op thread count than its checkpoint trained with (`threads`:
    this start's, None on a GPU), or ''. The sums of a backward pass depend on how many threads share them, so the
    run then goes on as the uninterrupted one would only up to float rounding; the count comes from the usable
    cores and, where other programs keep some busy at start, from their load (utils/dist/group.py)."""
    saved = point.training.get('cpu_threads') if point is not None else None
    if threads is None or saved is None or saved == threads:
        return ''
    return (f'resume: {threads} torch thread{"s" if threads > 1 else ""}, the checkpoint trained with {saved}: the '
            f'run goes on as the uninterrupted one up to float rounding, not bit for bit (a backward pass sums '
            f'per thread); OMP_NUM_THREADS={saved} keeps the bits')


def choose_seed(manual_seed: Optional[int], point: Optional[ResumePoint]) -> Tuple[Optional[int], str]:
    """(the seed, a warning or ''): `train.manual_seed`, else the resumed run's seed (a resumed run must shuffle
    with the seed it started with), else None: the caller draws one on rank 0 for every rank."""
    if manual_seed is not None:
        if point is not None and point.training['seed'] != manual_seed:
            return manual_seed, (f'resume: train.manual_seed: checkpoint {point.training["seed"]}, options '
                                 f'{manual_seed}; the options win (data order and augmentation change from here)')
        return manual_seed, ''
    return (point.training['seed'] if point is not None else None), ''


def epoch_layout(loader_batches: int, accum: int, batch: int, world_size: int, samples: int,
                 training_samples: int) -> Tuple[int, int, str]:
    """(optimizer steps per epoch, effective batch, the log line that says both) of this start's layout: what
    every position above is counted in. `loader_batches`: the batches of `batch` of one process's epoch, of its
    `samples` (its share of the `training_samples`); an accumulation longer than an epoch is a UserError."""
    steps_per_epoch = loader_batches // accum
    if steps_per_epoch < 1:
        batches = samples // batch
        raise UserError(f'train.accumulate_steps: {accum} exceeds the {batches} batch'
                        f'{"es" if batches != 1 else ""} of {batch} per epoch of '
                        f'each process ({samples} of the {training_samples} training samples '
                        f'on each of {world_size} process(es))')
    effective_batch = batch * world_size * accum
    return steps_per_epoch, effective_batch, (
        f'training samples {training_samples}, {steps_per_epoch} iterations per epoch; '
        f'batch {batch} per process x {world_size} processes x {accum} '
        f'accumulation = effective batch {effective_batch}')


def continue_epoch(epoch: int, position: int, steps_per_epoch: int, effective_batch: int) -> Position:
    """Go on at global `position` of `epoch`, or at the start of the next epoch when no whole step is left."""
    size = effective_batch
    if (steps_per_epoch * size - position) // size >= 1:
        return epoch, position % size, position // size
    return epoch + 1, 0, 0


def steps_in_epoch(steps_per_epoch: int, effective_batch: int, epoch_start: int) -> int:
    """Optimizer steps of the current epoch (counted from its start position: fewer after a resume that
    changed the effective batch mid-epoch)."""
    return (steps_per_epoch * effective_batch - epoch_start) // effective_batch


def training_set_change(before: Any, now: Optional[Dict[str, List[str]]]) -> str:
    """What differs between the training files a checkpoint recorded (`before`) and those of this start ('' if
    nothing, or if either side does not know its files), e.g. `1 file gone (dataroot_H: 0007.png)`."""
    if not isinstance(before, dict) or now is None or before == now:
        return ''
    parts = []
    for what, keys in (('gone', lambda: {k: sorted(set(before[k]) - set(now.get(k, ()))) for k in before}),
                       ('new', lambda: {k: sorted(set(now[k]) - set(before.get(k, ()))) for k in now})):
        per_folder = {k: v for k, v in keys().items() if v}
        count = sum(len(v) for v in per_folder.values())
        if count:
            names = [f'{k}: {n}' for k, v in per_folder.items() for n in v]
            shown = ', '.join(names[:3]) + (f' and {count - 3} more' if count > 3 else '')
            parts.append(f'{count} file{"s" if count > 1 else ""} {what} ({shown})')
    return ', '.join(parts) or 'the same files in another order'


def resume_position(s: Mapping[str, Any], path: str, seed: int, files_changed: str, layout: Tuple[int, int, int],
                    steps_per_epoch: int, effective_batch: int) -> Tuple[Position, List[Note]]:
    """(where the resumed loop stands, the lines that say why), from the saved state `s` of checkpoint `path`.

    `layout` is this start's (world size, batch per process, accumulation). The same seed and training files
    give the same order: any layout goes on at the sample where the run stopped. A new seed, other files, or a
    state file without its layout (an older version) start the next epoch: its order is a fresh permutation.
    """
    notes: List[Note] = []
    # state files written before the batch layout was recorded lack it: the layout is unknown
    saved = (s['world_size'], s['batch_size'], s['accumulate_steps']) if 'batch_size' in s else None
    if saved is not None and s['seed'] == seed and not files_changed:
        # The order is a function of (seed, epoch, global position): any layout goes on at the sample where
        # the run stopped (the position in the epoch; older files give it as steps of their effective batch).
        saved_batch = saved[0] * saved[1] * saved[2]
        position = s['epoch_position'] if 'epoch_position' in s else s['epoch_step'] * saved_batch
        at = continue_epoch(s['epoch'], position, steps_per_epoch, effective_batch)
        if saved != layout:
            notes.append((logging.INFO, f'resume: (world size, batch per process, accumulation) {saved} -> {layout}: '
                                        f'epoch {s["epoch"]} goes on at its sample {position} of '
                                        f'{steps_per_epoch * effective_batch} (the same data order)'))
        if saved_batch != effective_batch:
            notes.append((logging.WARNING, f'resume: the effective batch changes {saved_batch} -> {effective_batch} '
                                           f'(lr and schedule are per iteration, as set); train.keep_effective_batch: '
                                           f'true keeps it by changing train.accumulate_steps'))
        return at, notes
    # A new seed or another training set has another order: the next epoch starts a fresh permutation.
    epoch = s['epoch'] + 1
    if saved is None:
        notes.append((logging.WARNING, f'resume: {path} does not record the batch layout (an older version wrote '
                                       f'it); continuing at the start of epoch {epoch}'))
    if files_changed:
        notes.append((logging.WARNING, f'resume: the training set changed since checkpoint {s["iter"]}: '
                                       f'{files_changed}; continuing at the start of epoch {epoch}'))
    return (epoch, 0, 0), notes


def is_better(value: float, best: Optional[float], higher_is_better: bool) -> bool:
    """Whether a validation's `value` beats the best so far (None: there is none yet); NaN never does."""
    if math.isnan(value):
        return False
    return best is None or (value > best if higher_is_better else value < best)


def resumed_best(saved: Mapping[str, Any], noted: Optional[Tuple[int, float, str]], step: int,
                 metric: str) -> Tuple[Dict[str, Any], str]:
    """(the best validation a resumed run goes on from, a warning or '').

    `saved` is the state file's record: {'metric', 'value', 'iter'}, or {'psnr', 'iter'} as written before
    `val.best_metric` existed (-inf: none yet). `noted` is the `best` note of the run's folder (iteration,
    value, metric): written at a validation after the save it resumes, it is newer when its iteration lies
    after the saved one, up to `step`. A `val.best_metric` other than the saved one restarts the tracking:
    the best_*.pth files of the old metric stay until the first validation replaces them.
    """
    if 'metric' in saved:
        best = dict(saved)
    else:
        psnr = saved['psnr']
        best = {'metric': 'psnr', 'value': None if psnr == float('-inf') else psnr, 'iter': saved['iter']}
    if noted is not None and noted[2] == best['metric'] and best['iter'] < noted[0] <= step:
        best = {'metric': noted[2], 'value': noted[1], 'iter': noted[0]}
    if best['metric'] == metric:
        return best, ''
    was = 'none yet' if best['value'] is None else f'{best["value"]:.4f} at iteration {best["iter"]}'
    return ({'metric': metric, 'value': None, 'iter': 0},
            f'val.best_metric changed from {best["metric"]} (best {was}) to {metric}: the best checkpoint is '
            f'chosen by {metric} from the next validation on (best_*.pth is replaced then)')
