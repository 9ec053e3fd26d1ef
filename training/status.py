"""What the train loop says about itself: iteration timing, the status line of each print window, the planned
lr schedule curves.png draws, and the one-time notes (peak GPU memory, compilation, waiting for data).

The loop (training/trainer.py) decides when; here is what each line holds, so its wording and arithmetic
live in one place and are checked without a model (a status line is also a history.jsonl row).
"""
import logging
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

DATA_WAIT_HINT = 0.25  # share of an iteration spent waiting for data above which the log says so, once


class Timing:
    """Iteration and data-wait times averaged over a print window; seconds per iteration since the start."""

    def __init__(self) -> None:
        self.steps, self.t0 = 0, time.time()
        self.iter_time = self.data_time = 0.0
        self.last = 0.0  # seconds of the last iteration
        self.window = 0
        self._tick = self.t0

    def tick(self) -> None:
        """An iteration starts: from here the loop waits for its data."""
        self._tick = time.time()

    def data_ready(self) -> None:
        """The iteration's batches are here: the wait since `tick` is data time."""
        self.data_time += time.time() - self._tick

    def step_done(self) -> None:
        """The iteration is done: its time since `tick` counts for the window and the whole run."""
        self.last = time.time() - self._tick
        self.iter_time += self.last
        self.window += 1
        self.steps += 1

    def take(self) -> Tuple[float, float, float]:
        """(mean iteration time, mean data time) of the window, and overall seconds per iteration; resets the window."""
        n = max(self.window, 1)
        out = (self.iter_time / n, self.data_time / n, (time.time() - self.t0) / max(self.steps, 1))
        self.iter_time = self.data_time = 0.0
        self.window = 0
        return out


def hms(seconds: float) -> str:
    """`h:mm:ss`, as the status line's eta shows it."""
    s = int(seconds)
    return f'{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}'


def window_perf(effective_batch: int, iter_time: float, data_time: float,
                device: torch.device) -> Dict[str, float]:
    """The print window's performance numbers, as history.jsonl and the `perf/` scalars record them; on a GPU the
    peak memory since the start too: what the run needs of the card."""
    perf = {'iter_time': iter_time, 'data_time': data_time,
            'samples_per_sec': effective_batch / max(iter_time, 1e-9)}
    if device.type == 'cuda':
        perf['gpu_mem_gib'] = torch.cuda.max_memory_allocated(device) / 2 ** 30
    return perf


def status_line(epoch: int, step: int, lr: float, losses: Mapping[str, float], perf: Mapping[str, float],
                eta: float) -> str:
    """The log line of a print window: where the run is, its losses, its speed (`window_perf`) and the time left."""
    loss_txt = ' '.join(f'{k}: {v:.3e}' for k, v in losses.items())
    gpu = f' mem: {perf["gpu_mem_gib"]:.2f} GiB' if 'gpu_mem_gib' in perf else ''
    return (f'<epoch:{epoch:3d}, iter:{step:8,d}, lr:{lr:.3e}> {loss_txt} '
            f'time/iter: {perf["iter_time"]:.3f}s data: {perf["data_time"]:.3f}s '
            f'{perf["samples_per_sec"]:.1f} samples/s{gpu} eta: {hms(eta)}')


def data_wait_hint(data_time: float, iter_time: float) -> Optional[str]:
    """The warning, once per run, when the network waits for data more than `DATA_WAIT_HINT` of each iteration."""
    if not data_time > DATA_WAIT_HINT * iter_time:
        return None
    return (f'data loading takes {100 * data_time / iter_time:.0f} % of each iteration: the network '
            f'waits for data; see docs/speed.md "Is my GPU waiting for data?" (more '
            f'dataloader_num_workers, cache_data, LMDB frames stored raw)')


def peak_memory_line(device: torch.device) -> str:
    """After the first iteration on a GPU: what the run needs of the card, before it runs for hours."""
    total_mem = torch.cuda.get_device_properties(device).total_memory
    return (f'first iteration: peak GPU memory {torch.cuda.max_memory_allocated(device) / 2**30:.2f} '
            f'GiB of the card\'s {total_mem / 2**30:.1f} GiB (video networks: netG.checkpoint "memory" '
            f'needs least)')


def compilation_note(graphs: int, seen: Optional[int], first_seconds: float, step: int) -> Optional[Tuple[int, str]]:
    """`train.compile`: (level, line) on what the first iteration cost (`seen` None), or on a later compilation
    (a recompilation means the inputs or the modules changed between iterations; each costs about as much as
    the first); None when nothing was compiled since."""
    if seen is None:
        return logging.INFO, (f'train.compile: the first iteration took {first_seconds:.1f} s, compilation '
                              f'included ({graphs} graphs)')
    if graphs > seen:
        return logging.WARNING, (f'train.compile: {graphs - seen} more graph(s) compiled at iteration {step}: a '
                                 f'recompilation (input shapes or module attributes changed)')
    return None


def schedule_row(model: Any, first: int, total: int, points: int = 400) -> Dict[str, Any]:
    """The history row of the lr schedule `model` plans from iteration `first` to `total` (curves.png draws it in
    the lr panel): `points` evenly spaced iterations, each iteration where a phase begins (the end of the
    warm-up, a decay's start: corners drawn where they are) and each side of every step of the schedule (a
    milestone's drop is drawn where it happens), from the schedule's closed form; rank 0 writes it at every
    start."""
    corners = [i for i in model.lr_phases() if first <= i <= total]  # where a phase begins: drawn exactly
    its = sorted({first, total, *corners, *range(first, total + 1, max(1, (total - first) // points or 1))})
    lrs = model.lr_schedule(its)
    fine = _jumps(model, its, lrs)
    if fine:
        its = sorted(set(its) | set(fine))
        lrs = model.lr_schedule(its)
    return {'kind': 'schedule', 'iter': first, 'points': [[i, lr] for i, lr in zip(its, lrs)]}


def _jumps(model: Any, its: Sequence[int], lrs: Sequence[float]) -> List[int]:
    """Where the lr jumps between two samples (milestones, restarts): the iterations each side of the jump."""
    fine: List[int] = []
    for (a, x), (b, y) in zip(zip(its, lrs), zip(its[1:], lrs[1:])):
        if b - a > 1 and abs(y - x) > 0.1 * max(abs(x), abs(y)):
            lo, hi = a, b  # bisect the jump to the iteration where it happens
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if abs(model.lr_schedule([mid])[0] - x) <= 0.1 * max(abs(x), abs(y)):
                    lo = mid
                else:
                    hi = mid
            fine += [lo, hi]
    return fine
