"""DataLoader construction for training (sharded, resumable) and evaluation (sharded, no padding)."""
from typing import Any, Dict, Tuple

import torch
from torch.utils.data import DataLoader, Dataset

from data.sampler import ResumableDistributedSampler, ShardSampler
from utils.errors import UserError


def _where(dataset_opt: Dict[str, Any]) -> str:
    return dataset_opt.get('_where') or 'datasets.train'


def build_train_loader(dataset: Dataset, dataset_opt: Dict[str, Any], world_size: int, rank: int,
                       seed: int, device: torch.device) -> Tuple[DataLoader, ResumableDistributedSampler]:
    """Loader over this rank's shard; batch size and workers are per process.

    The loader gets its own torch.Generator so iterating it never consumes the global RNG (which
    would otherwise make model-side randomness depend on how often loaders were created).
    """
    where = _where(dataset_opt)
    batch_size = int(dataset_opt['dataloader_batch_size'])
    num_workers = int(dataset_opt['dataloader_num_workers'])
    if batch_size < 1:
        raise UserError(f'{where}.dataloader_batch_size: must be >= 1, got {batch_size}')
    if num_workers < 0:
        raise UserError(f'{where}.dataloader_num_workers: must be >= 0, got {num_workers}')
    check = getattr(dataset, 'check_train_options', None)
    if check is not None:
        check()
    sampler = ResumableDistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                          shuffle=bool(dataset_opt.get('dataloader_shuffle', True)),
                                          seed=seed, drop_last=True)
    if sampler.num_samples < batch_size:
        raise UserError(f'{where}.dataloader_batch_size: each of the {world_size} process(es) gets '
                        f'{sampler.num_samples} of the {len(dataset)} training samples, fewer than one '
                        f'batch of {batch_size}; use a smaller batch size or more data')
    extra: Dict[str, Any] = {}
    if num_workers > 0:
        extra['persistent_workers'] = bool(dataset_opt.get('dataloader_persistent_workers', True))
        extra['prefetch_factor'] = int(dataset_opt.get('dataloader_prefetch_factor', 2))
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers,
                        drop_last=True, pin_memory=device.type == 'cuda',
                        generator=torch.Generator().manual_seed(seed + rank), **extra)
    return loader, sampler


def build_val_loader(dataset: Dataset, world_size: int, rank: int, num_workers: int = 0) -> DataLoader:
    """Batch-1 loader over rank::world_size (every sample exactly once across ranks)."""
    return DataLoader(dataset, batch_size=1, sampler=ShardSampler(len(dataset), world_size, rank),
                      num_workers=num_workers, shuffle=False, drop_last=False,
                      generator=torch.Generator().manual_seed(0))
