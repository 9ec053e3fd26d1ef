"""Samplers that make training data order and augmentation reproducible and resumable.

The training sampler yields `(index, sample_seed)` keys: datasets derive all randomness of a
sample from its seed, which depends only on (seed, epoch, position in the epoch's global
permutation). Batches are therefore identical for any number of loader workers, and a resumed run
sees exactly the samples (and crops, flips, noise) the interrupted run would have seen.
"""
import hashlib
import math
from typing import Any, Dict, Iterator, Optional, Tuple

import torch
from torch.utils.data import Dataset, DistributedSampler, Sampler


def parse_key(key: Any) -> Tuple[int, Optional[int]]:
    """A dataset key as (index, seed): training keys are (index, seed[, step seed]) tuples, evaluation
    keys bare indices."""
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

    `set_start(k)` skips the first k samples of this rank's shard in the current epoch (used on
    resume); `set_epoch` resets it to 0. `len()` is the number of samples still to come.

    With `step_size` (samples per optimizer step over all ranks: world size x batch x accumulation)
    keys also carry a seed shared by every sample of one optimizer step, on every rank and in every
    micro-batch, for randomness drawn per batch (USRNet's scale factor). Rank r's positions are
    r, r + N, ..., so position // step_size is the step for any number of ranks: N ranks x batch b
    see the same step seeds as 1 rank x batch N*b.
    """

    def __init__(self, dataset: Dataset, num_replicas: int, rank: int, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = True, step_size: Optional[int] = None) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle,
                         seed=seed, drop_last=drop_last)
        self.start = 0
        self.step_size = step_size

    def _global_order(self) -> list:
        n = len(self.dataset)
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
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
        indices = self._global_order()
        positions = range(self.rank, self.total_size, self.num_replicas)
        for pos in positions[self.start:]:
            if self.step_size is None:
                yield indices[pos], sample_seed(self.seed, self.epoch, pos)
            else:
                yield (indices[pos], sample_seed(self.seed, self.epoch, pos),
                       step_seed(self.seed, self.epoch, pos // self.step_size))

    def __len__(self) -> int:
        return self.num_samples - self.start

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self.start = 0

    def set_start(self, start: int) -> None:
        if not 0 <= start <= self.num_samples:
            raise ValueError(f'start must be in [0, {self.num_samples}], got {start}')
        self.start = int(start)

    def state_dict(self) -> Dict[str, Any]:
        return {'epoch': self.epoch, 'start': self.start}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.set_epoch(int(state['epoch']))
        self.set_start(int(state['start']))


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
