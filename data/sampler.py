"""Samplers that make training data order and augmentation reproducible and resumable.

The training sampler yields `TrainKey(index, seed[, step_seed])` keys; evaluation loaders yield
plain indices. The kind of key is what tells a dataset which item is asked for: a TrainKey, a
training sample (a random patch, augmentation, noise, all from its seed); an index, an evaluation
item (the whole image or clip, nothing random). Datasets derive all randomness of a sample from its seed, which depends only on (seed, epoch, position in the epoch's global
permutation). Batches are therefore identical for any number of loader workers, and a resumed run
sees exactly the samples (and crops, flips, noise) the interrupted run would have seen.

The data order is a function of (seed, epoch) and the global position alone: the sample at global
position p of epoch e is permutation(seed + e)[p] with seed sample_seed(seed, e, p), whatever the number
of ranks. Rank r of N takes positions r, r + N, ... from where the epoch stands, so an optimizer step of
N ranks x batch b x accumulation a consumes the next N·b·a consecutive positions, as one rank x batch b x
accumulation N·a does. A run resumed with another world size therefore goes on at the global position
where the interrupted run stopped (`set_position`): nothing replayed, nothing skipped.
"""
import hashlib
import math
from typing import Any, Dict, Iterator, Optional, Tuple

import torch
from torch.utils.data import Dataset, DistributedSampler, Sampler


class TrainKey(tuple):
    """The key of a training sample: `(index, seed)`, the item and the seed of all its randomness, and,
    from a sampler built with `step_size`, a third element: a seed shared by every sample of its
    optimizer step (e.g. one scale per batch). A tuple, so that a dataset may unpack `index, seed = key`."""

    def __new__(cls, index: int, seed: int, step_seed: Optional[int] = None) -> 'TrainKey':
        return super().__new__(cls, (index, seed) if step_seed is None else (index, seed, step_seed))

    def __getnewargs__(self) -> Tuple[int, ...]:  # pickling (keys go to loader workers): the fields
        return tuple(self)

    @property
    def index(self) -> int:
        return self[0]

    @property
    def seed(self) -> int:
        return self[1]

    @property
    def step_seed(self) -> Optional[int]:
        return self[2] if len(self) > 2 else None


def parse_key(key: Any) -> Tuple[int, Optional[int]]:
    """A dataset key as (index, seed): a TrainKey (or a tuple made by hand, read as one) gives its seed,
    an evaluation index gives None."""
    if isinstance(key, (tuple, list)):
        return int(key[0]), int(key[1])
    return int(key), None


def key_step_seed(key: Any) -> Optional[int]:
    """The optimizer step's seed of a training key from a sampler built with `step_size`, else None."""
    if isinstance(key, (tuple, list)) and len(key) > 2:
        return int(key[2])
    return None


def sample_seed(seed: int, epoch: int, position: int) -> int:
    """Deterministic 63-bit seed for the sample at `position` of `epoch`'s global order."""
    return _seed(f'{seed}:{epoch}:{position}')


def step_seed(seed: int, epoch: int, step: int) -> int:
    """Deterministic 63-bit seed shared by every sample of optimizer step `step` of `epoch`."""
    return _seed(f'{seed}:{epoch}:step{step}')


def _seed(text: str) -> int:
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, 'little') & ((1 << 63) - 1)


class ResumableDistributedSampler(DistributedSampler):
    """DistributedSampler that yields per-sample seeds and can skip the consumed part of an epoch.

    `set_position(p)` starts the current epoch at its global position p (used on resume: the samples
    the ranks consumed before, whatever their number); `set_start(k)` is the same for k samples of this
    rank's shard (p = k x world size); `set_epoch` resets it to 0. `len()` is the number of this rank's
    samples still to come in the epoch.

    With `per_epoch` an epoch uses only the first keys of the shard (the training loop's whole steps of
    `per_step` samples per rank), and with `continuous` one iteration runs on through the following
    epochs, so a loader's workers keep working across epoch boundaries: the keys are exactly those of
    iterating epoch by epoch. An epoch started at position p holds the whole steps left after p.

    With `step_size` (samples per optimizer step over all ranks: world size x batch x accumulation)
    keys also carry a seed shared by every sample of one optimizer step, on every rank and in every
    micro-batch, for randomness drawn per batch (USRNet's scale factor). Rank r's positions are
    r, r + N, ..., so position // step_size is the step for any number of ranks: N ranks x batch b
    see the same step seeds as 1 rank x batch N*b. (A resume at a position that is no multiple of
    step_size has steps of its own: each is seeded by its first position.)
    """

    def __init__(self, dataset: Dataset, num_replicas: int, rank: int, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = True, step_size: Optional[int] = None,
                 per_epoch: Optional[int] = None, continuous: bool = False) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle,
                         seed=seed, drop_last=drop_last)
        self.position = 0  # the global position the current epoch starts at
        self.per_step = 1  # this rank's samples per optimizer step (batch x accumulation; set by the loader)
        self.step_size = step_size
        if per_epoch is not None and not 0 <= per_epoch <= self.num_samples:
            raise ValueError(f'per_epoch must be in [0, {self.num_samples}], got {per_epoch}')
        # samples of this rank's shard an epoch uses (the loop's whole steps), and whether iteration runs on
        # into the following epochs (one loader iterator for the whole run: workers never drain)
        self.per_epoch = self.num_samples if per_epoch is None else int(per_epoch)
        self.continuous = continuous

    def _global_order(self, epoch: int) -> list:
        n = len(self.dataset)
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + epoch)
            indices = torch.randperm(n, generator=g).tolist()
        else:
            indices = list(range(n))
        if self.drop_last:
            return indices[:self.total_size]
        padding = self.total_size - len(indices)
        if padding > 0:
            indices += (indices * math.ceil(padding / len(indices)))[:padding]
        return indices

    def __iter__(self) -> Iterator[Tuple[int, ...]]:
        """This epoch's keys from `position` (`continuous`: then every following epoch's, without end)."""
        epoch, position = self.epoch, self.position
        while True:
            yield from self._epoch_keys(epoch, position)
            if not self.continuous or self.per_epoch == 0:
                return
            epoch, position = epoch + 1, 0

    def remaining(self, position: int) -> int:
        """This rank's keys in an epoch started at global `position`: the whole steps left before the epoch's
        end (its first `per_epoch` x world size positions), `per_step` keys each."""
        step = self.per_step * self.num_replicas
        return (self.per_epoch * self.num_replicas - position) // step * self.per_step

    def _epoch_keys(self, epoch: int, position: int) -> Iterator[TrainKey]:
        indices = self._global_order(epoch)
        n = self.num_replicas
        first = position + self.rank
        for pos in range(first, first + n * self.remaining(position), n):
            step = None if self.step_size is None else self._step_seed(epoch, position, pos)
            yield TrainKey(indices[pos], sample_seed(self.seed, epoch, pos), step)

    def _step_seed(self, epoch: int, start: int, pos: int) -> int:
        """The seed of the optimizer step holding `pos` in an epoch started at `start` (steps of step_size)."""
        assert self.step_size is not None
        first = start + (pos - start) // self.step_size * self.step_size
        if first % self.step_size == 0:
            return step_seed(self.seed, epoch, first // self.step_size)
        return _seed(f'{self.seed}:{epoch}:step@{first}')

    def __len__(self) -> int:
        """Keys left in the current epoch (a continuous sampler goes on into the next ones)."""
        return self.remaining(self.position)

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self.position = 0

    def set_position(self, position: int) -> None:
        """Start the current epoch at global position `position` (0 to the epoch's end)."""
        end = self.per_epoch * self.num_replicas
        if not 0 <= position <= end:
            raise ValueError(f'position must be in [0, {end}], got {position}')
        self.position = int(position)

    def set_start(self, start: int) -> None:
        """Skip the first `start` keys of this rank's shard (every rank the same number)."""
        if not 0 <= start <= self.per_epoch:
            raise ValueError(f'start must be in [0, {self.per_epoch}], got {start}')
        self.set_position(int(start) * self.num_replicas)

    def state_dict(self) -> Dict[str, Any]:
        return {'epoch': self.epoch, 'position': self.position}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.set_epoch(int(state['epoch']))
        self.set_position(int(state['position']))


class ShardSampler(Sampler[int]):
    """Indices rank::num_replicas without padding, so evaluation sees every sample exactly once.

    Ranks may get different counts; gather results per rank rather than assuming equal sizes.
    """

    def __init__(self, num_samples: int, num_replicas: int, rank: int) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f'rank must be in [0, {num_replicas}), got {rank}')
        self.num_samples = num_samples
        self.num_replicas = num_replicas
        self.rank = rank

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.num_samples, self.num_replicas))

    def __len__(self) -> int:
        return len(range(self.rank, self.num_samples, self.num_replicas))
