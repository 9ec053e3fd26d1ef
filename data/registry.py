"""The registry of datasets (`datasets.<phase>.dataset_type`) and the keys each section accepts.

Datasets live in `data/datasets/<family>.py` and register themselves with `@DATASETS.register(...)`. Each
dataset class declares `OPTIONS: dict[str, default]` with the keys it reads (a default of
`REQUIRED` marks a key the user must give; a `Key(default, types, check)` adds the value's types and
rules, utils/options/checks.py and data/option_checks.py). The options validator uses it, through the entry
point, to reject unknown keys with a did-you-mean and to fill defaults, so a dataset never sees a
missing key.
"""
import os
from typing import Any, Dict, List, Optional

from torch.utils.data import Dataset

from utils.icc import ICC_MODES
from utils.options import REQUIRED, Key, at_least, one_of
from utils.registry import Registry

DATASETS = Registry('dataset type', 'data.datasets')

# Keys every dataset section accepts: they configure the loader, and (icc) how every dataset reads its image files.
LOADER_OPTIONS: Dict[str, Any] = {
    'name': Key('', (str,), help='the data set\'s name in logs and result folders'),
    'dataset_type': Key(REQUIRED, (str,), help='the dataset class: a dataset of data/datasets/'),
    'dataloader_shuffle': Key(True, (bool,), help='shuffle the training set each epoch'),
    'dataloader_num_workers': Key(0, (int,), at_least(0), 'loader worker processes, per training process; '
                                                             'more than the cores it may use start as many as '
                                                             'those (KEEP_LOADER_WORKERS=1 keeps them)'),
    # per process: the effective batch is this × world size × accumulation
    'dataloader_batch_size': Key(1, (int,), at_least(1), 'batch size per process (the effective batch is this '
                                                         '× world size × accumulate_steps)'),
    'dataloader_prefetch_factor': Key(2, (int,), at_least(1), 'batches each worker keeps ready'),
    'dataloader_persistent_workers': Key(True, (bool,), help='keep the workers alive between epochs'),
    # a synthetic data set to generate under the data roots if missing (inside demo_data/ only)
    'generate_demo': Key(None, (str, type(None)), help='a demo data generator that fills missing data roots '
                                                       'inside demo_data/ (null: none)'),
    # what happens to an image with a non-sRGB colour profile embedded: utils/icc.py, data/checks.py colour_profiles
    'icc': Key('convert', (str,), one_of(*ICC_MODES), 'images carrying a non-sRGB colour profile (Display P3, '
               'Adobe RGB): "convert" their pixels to sRGB as they are read, "refuse" them at start-up, or "ignore" '
               'the profile (the values as they are)'),
}


# What the usual dataset keys (KAIR's and BasicSR's names) mean, for the option reference and --describe where a
# dataset's own `Key` carries no help text.
DATASET_KEY_HELP: Dict[str, str] = {
    'dataroot_gt': 'folder (or LMDB) of the ground-truth frames', 'dataroot_lq': 'folder (or LMDB) of the input frames',
    'dataroot_L': 'folder of the low-quality inputs, paired with dataroot_H in sorted order',
    'dataroot_spike': 'folder of the spike streams, one file per frame (null: none)',
    'meta_info_file': 'text file listing the clips (BasicSR\'s meta info format)',
    'io_backend': 'where frames are read from: {"type": "disk"} or {"type": "lmdb"}',
    'num_frame': 'frames per clip', 'gt_size': 'training patch size of the ground truth, in pixels',
    'interval_list': 'frame steps a training clip is drawn with', 'random_reverse': 'training: reverse clips at random',
    'use_hflip': 'training: random horizontal flips',
    'use_rot': 'training: random vertical flips and 90° rotations (the rotations only of a square patch)',
    'filename_tmpl': 'format of the frame number in file names', 'filename_ext': 'frame file extension, without the dot',
    'test_mode': 'keep only the val_partition clips', 'val_partition': 'REDS clips held out for validation',
    'cache_data': 'decode every frame once into RAM, one copy per node shared by its processes',
    'n_channels': '1 for gray, 3 for colour images', 'scale': 'high-quality images are this many times the low-quality ones',
    'sigma': 'noise level(s) on the 0..255 scale', 'sigma_test': 'evaluation noise level on the 0..255 scale',
    'is_color': 'colour (true) or gray (false) images',
    'quality_factor': 'JPEG quality of the training inputs', 'quality_factor_test': 'JPEG quality of the evaluation inputs',
    'spike_format': 'spike file format', 'spike_size': '[H, W] of .dat spike planes (null: the input frame size)',
    'spike_repr': 'how spike planes become input channels', 'spike_repr_params': 'parameters of spike_repr (e.g. '
                                                                                 '{"num_bins": 4})',
    'pad_sequence': 'repeat the last frame once (VRT: 7 → 8 frames)',
    'mirror_sequence': 'append the clip\'s reversal (RVRT: 7 → 14 frames)',
    'temporal_scale': 'frame interpolation: input frames this far apart, the centre frame the target (1: restoration)',
}


# Loader keys of training sections only, with why a test section has none: evaluation goes through every
# item once, in order, one whole image or clip at a time (their sizes differ).
TRAIN_ONLY_OPTIONS: Dict[str, str] = {
    'dataloader_batch_size': 'evaluation takes one whole image or clip at a time (sizes differ); the batch size '
                             'is for datasets.train',
    'dataloader_shuffle': 'evaluation goes through every item once, in order; shuffling is for datasets.train',
}


class Targetless:
    """A dataset type whose items have no targets (LR images alone, BasicSR's SingleImageDataset): main_test
    restores them and scores nothing against ground truth, so it is a test set only, never a training set nor the
    set a training run validates on. Not a torch Dataset: its inputs are found as `--input`'s are (data/inputs.py)
    and restored through the same loop (models/input_restore.py)."""
    OPTIONS: Dict[str, Any] = {}


def has_targets(dataset_type: str, where: str = 'dataset_type') -> bool:
    """Whether the items of `dataset_type` come with targets (every type but the `Targetless` ones): validation
    records it in each section as `_targets`, which tells main_test how to run the set."""
    return not issubclass(DATASETS.get(dataset_type, where), Targetless)


def dataset_options(dataset_type: str, where: str = 'dataset_type') -> Dict[str, Any]:
    """The keys a `datasets.<phase>` section of `dataset_type` accepts, with their defaults."""
    return {**LOADER_OPTIONS, **DATASETS.get(dataset_type, where).OPTIONS}


def build_dataset(dataset_opt: Dict[str, Any]) -> Dataset:
    """Build the dataset for one validated `datasets.<phase>` section."""
    return DATASETS.get(dataset_opt['dataset_type'], f'{dataset_opt["_where"]}.dataset_type')(dataset_opt)


def _relative(path: str, roots: List[str]) -> str:
    """`path` relative to the first of `roots` it is in (the listing joined the names to the folder as given: cut it
    off), with the folder's index when there are several (so that two folders' equal names stay apart)."""
    for i, folder in enumerate(roots):
        root = os.path.join(folder, '')
        if path.startswith(root):
            name = path[len(root):]
            return name if len(roots) == 1 else f'{i}/{name}'
    return os.path.relpath(path, roots[0])


def training_files(dataset: Dataset) -> Optional[Dict[str, List[str]]]:
    """What a training set is made of, for a checkpoint to record and a resume to compare: per folder option
    (`dataroot_H`, `dataroot_L`) the image files relative to it; for clip datasets the `clip/frame` keys (or the
    Vimeo sequences) of the meta info file. None for a dataset that lists neither (nothing is compared)."""
    opt = getattr(dataset, 'opt', None) or {}
    out: Dict[str, List[str]] = {}
    for key, attr in (('dataroot_H', 'paths_H'), ('dataroot_L', 'paths_L')):
        paths = getattr(dataset, attr, None)
        if paths:  # an image dataset listed the folder(s) of option `key`: the option is a path or a list of them
            roots = opt[key] if isinstance(opt[key], list) else [opt[key]]
            out[key] = [_relative(p, roots) for p in paths]
    if out:
        return out
    keys = getattr(dataset, 'keys', None)
    if isinstance(keys, list) and keys and isinstance(keys[0], tuple):
        return {'meta_info_file': [f'{clip}/{frame}' for clip, frame in keys]}
    seqs = getattr(dataset, 'seqs', None)
    if isinstance(seqs, list) and seqs and isinstance(seqs[0], tuple):
        return {'meta_info_file': [seq for seq, _ in seqs]}
    return None
