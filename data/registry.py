"""The registry of datasets (`datasets.<phase>.dataset_type`) and the keys each section accepts.

Datasets live in `data/datasets/<family>.py` and register themselves with `@DATASETS.register(...)`. Each
dataset class declares `OPTIONS: dict[str, default]` with the keys it reads (a default of
`REQUIRED` marks a key the user must give; a `Key(default, types, check)` adds the value's types and
rules, data/option_checks.py). The options validator uses it, through the entry
point, to reject unknown keys with a did-you-mean and to fill defaults, so a dataset never sees a
missing key.
"""
import os
from typing import Any, Dict, List, Optional

from torch.utils.data import Dataset

from data.option_checks import at_least
from utils.options import REQUIRED, Key
from utils.registry import Registry

DATASETS = Registry('dataset type', 'data.datasets')

# Keys every dataset section accepts: they configure the loader, not the dataset.
LOADER_OPTIONS: Dict[str, Any] = {
    'name': '',
    'dataset_type': REQUIRED,
    'dataloader_shuffle': True,
    'dataloader_num_workers': Key(0, (int,), at_least(0)),
    # per process: the effective batch is this × world size × accumulation
    'dataloader_batch_size': Key(1, (int,), at_least(1)),
    'dataloader_prefetch_factor': Key(2, (int,), at_least(1)),
    'dataloader_persistent_workers': True,
    'generate_demo': None,             # a synthetic data set to generate under the data roots if missing (inside demo_data/ only)
}


# Loader keys of training sections only, with why a test section has none: evaluation goes through every
# item once, in order, one whole image or clip at a time (their sizes differ).
TRAIN_ONLY_OPTIONS: Dict[str, str] = {
    'dataloader_batch_size': 'evaluation takes one whole image or clip at a time (sizes differ); the batch size '
                             'is for datasets.train',
    'dataloader_shuffle': 'evaluation goes through every item once, in order; shuffling is for datasets.train',
}


def dataset_options(dataset_type: str, where: str = 'dataset_type') -> Dict[str, Any]:
    """The keys a `datasets.<phase>` section of `dataset_type` accepts, with their defaults."""
    return {**LOADER_OPTIONS, **DATASETS.get(dataset_type, where).OPTIONS}


def build_dataset(dataset_opt: Dict[str, Any]) -> Dataset:
    """Build the dataset for one validated `datasets.<phase>` section."""
    return DATASETS.get(dataset_opt['dataset_type'], f'{dataset_opt["_where"]}.dataset_type')(dataset_opt)


def training_files(dataset: Dataset) -> Optional[Dict[str, List[str]]]:
    """What a training set is made of, for a checkpoint to record and a resume to compare: per folder option
    (`dataroot_H`, `dataroot_L`) the image files relative to it; for clip datasets the `clip/frame` keys (or the
    Vimeo sequences) of the meta info file. None for a dataset that lists neither (nothing is compared)."""
    opt = getattr(dataset, 'opt', None) or {}
    out: Dict[str, List[str]] = {}
    for key, attr in (('dataroot_H', 'paths_H'), ('dataroot_L', 'paths_L')):
        paths = getattr(dataset, attr, None)
        if paths and opt.get(key):
            root = os.path.join(opt[key], '')  # the listing joined the names to the folder as given: cut it off
            out[key] = [p[len(root):] if p.startswith(root) else os.path.relpath(p, opt[key]) for p in paths]
    if out:
        return out
    keys = getattr(dataset, 'keys', None)
    if isinstance(keys, list) and keys and isinstance(keys[0], tuple):
        return {'meta_info_file': [f'{clip}/{frame}' for clip, frame in keys]}
    seqs = getattr(dataset, 'seqs', None)
    if isinstance(seqs, list) and seqs and isinstance(seqs[0], tuple):
        return {'meta_info_file': [seq for seq, _ in seqs]}
    return None
