"""Name → class registry for datasets (`datasets.<phase>.dataset_type`).

Each dataset class declares `OPTIONS: dict[str, default]` with the keys it reads (a default of
`REQUIRED` marks a key the user must give). The options validator uses it to reject unknown
keys with a did-you-mean and to fill defaults, so a dataset never sees a missing key.
"""
import importlib
from typing import Any, Callable, Dict, Type

from torch.utils.data import Dataset

from utils.errors import UserError
from utils.suggest import did_you_mean

DATASETS: Dict[str, Type[Dataset]] = {}

_DATASET_MODULES = ('data.image_datasets', 'data.video_datasets')


class _Required:
    def __repr__(self) -> str:
        return 'REQUIRED'


REQUIRED = _Required()

# Keys every dataset section accepts: they configure the loader, not the dataset.
LOADER_OPTIONS: Dict[str, Any] = {
    'name': '',
    'dataset_type': REQUIRED,
    'dataloader_shuffle': True,
    'dataloader_num_workers': 0,
    'dataloader_batch_size': 1,        # per process: the effective batch is this × world size × accumulation
    'dataloader_prefetch_factor': 2,
    'dataloader_persistent_workers': True,
    'generate_demo': None,             # name of a synthetic data set to generate under the data roots if missing
}


def register_dataset(*names: str) -> Callable[[type], type]:
    def deco(cls: type) -> type:
        for name in names:
            if name in DATASETS:
                raise ValueError(f'dataset {name!r} registered twice')
            DATASETS[name] = cls
        return cls
    return deco


def dataset_class(dataset_type: str, where: str = 'dataset_type') -> Type[Dataset]:
    for mod in _DATASET_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
    if dataset_type not in DATASETS:
        raise UserError(f'{where}: unknown dataset type "{dataset_type}"{did_you_mean(dataset_type, DATASETS)}; '
                        f'known: {", ".join(sorted(DATASETS))}')
    return DATASETS[dataset_type]


def build_dataset(dataset_opt: Dict[str, Any]) -> Dataset:
    """Build the dataset for one validated `datasets.<phase>` section."""
    return dataset_class(dataset_opt['dataset_type'])(dataset_opt)
