"""The loop's feed: micro-batch groups of one optimizer step each from the continuous train loader, and the one
line a training file that can no longer be read comes back as (the loop saves, then stops with it)."""
from typing import Any, Callable, Iterable, Iterator, List, Optional, Tuple

from utils.errors import UserError


def micro_batches(it: Iterator[Any], n: int) -> Iterator[List[Any]]:
    """Group a loader iterator into lists of `n` batches (one optimizer step each)."""
    while True:
        group = []
        for _ in range(n):
            try:
                group.append(next(it))
            except StopIteration:
                return
        yield group


def step_batches(loader: Iterable[Any], sampler: Any, accum: int,
                 position: Callable[[], Tuple[int, int]]) -> Iterator[List[Any]]:
    """The micro-batch groups of one optimizer step each, from where training stands on, across epochs.

    The train loader is continuous (data/loader.py): one iterator serves the whole run, so its
    workers keep preparing batches over epoch boundaries instead of draining and starting over.
    A loader that does end (a finite one) starts again where the loop has reached: `position()` gives
    (epoch, global sample position) then.
    """
    while True:
        epoch, at = position()
        sampler.set_epoch(epoch)
        sampler.set_position(at)
        steps = 0
        for group in micro_batches(iter(loader), accum):
            steps += 1
            yield group
        if not steps:
            raise RuntimeError(f'the train loader gave no complete step at epoch {epoch}')


def next_batches(groups: Iterator[List[Any]]) -> Tuple[Optional[List[Any]], Optional[str]]:
    """The next step's micro-batches, or the one line of a training file that can no longer be read (replaced
    by a damaged file, deleted since the start-up check; in a loader worker or here): the loop saves first."""
    try:
        return next(groups), None
    except UserError as e:
        return None, one_line(str(e))


def one_line(message: str) -> str:
    """A UserError raised in a DataLoader worker comes back wrapped in its traceback: keep the error."""
    if 'Original Traceback' in message:
        return message.strip().splitlines()[-1].split('UserError: ', 1)[-1]
    return message
