"""LR images without targets (`dataset_type: lr_only`; BasicSR's and traiNNer-redux's SingleImageDataset): a test set
that main_test.py restores and writes, nothing scored against ground truth.

Every test template of traiNNer-redux, and BasicSR's `_woGT` test files, point their test set at a folder (or a list
of folders) of LR images alone: their test.py runs the network on each and saves the results. Here such a set is
found as `main_test.py --input` finds its inputs (data/inputs.py: headers checked up front, an unreadable file
skipped with a warning) and restored through the same loop (models/input_restore.py); results.md marks it as
having no ground truth. Validation marks its section `_targets: false` (data/registry.py `Targetless`), so it can be
neither a training set nor the set a training run validates on.
"""
import dataclasses
import os
from typing import Any, Dict

from data.datasets.image import CHANNELS, folders
from data.inputs import Found, find_inputs
from data.registry import DATASETS, Targetless
from utils.options import REQUIRED, Key
from utils.options.foreign import BASICSR, REDUX, Foreign, Only

_NO_SCORES = Only(..., 'no ground truth: nothing is scored, so no border is cropped')
_UNNEEDED = {'io_backend': Only({'type': 'disk'}, 'images are read from files'),
             'mean': Only(None, 'inputs are not normalised here'), 'std': Only(None, 'inputs are not normalised here'),
             'color': Only(None, 'Y-channel restoration is not offered here'), 'crop_border': _NO_SCORES}
_REFUSED = {'meta_info_file': 'every image of dataroot_lq is restored here (no list of them is read)'}
FOREIGN = [Foreign('SingleImageDataset', trainer, keys={'dataroot_lq': 'dataroot_L'}, unneeded=_UNNEEDED,
                   refused=_REFUSED, passthrough=False) for trainer in (BASICSR, REDUX)]


@DATASETS.register('lr_only', foreign=FOREIGN)
class LROnlyImages(Targetless):
    """The images of `dataroot_L` (one folder or a list of them), restored by main_test without targets."""

    OPTIONS: Dict[str, Any] = {
        'dataroot_L': Key(REQUIRED, (str, list), help='folder (or list of folders) of the LR images to restore; '
                                                      'no targets: restored and written, not scored'),
        'n_channels': CHANNELS,
    }


def lr_inputs(section: Dict[str, Any], clips: bool) -> Found:
    """The inputs of a validated `lr_only` section, as `--input` finds them (`clips`: a video network's, each
    folder of frames one clip). With several folders each one's outputs go under its index (`0/`, `1/`, ...), so
    that equal names in two folders stay apart."""
    roots = folders(section, 'dataroot_L')
    found = Found()
    for i, root in enumerate(roots):
        one = find_inputs(root, clips, f'{section["_where"]}.dataroot_L')
        prefix = '' if len(roots) == 1 else str(i)
        found.sources.extend(dataclasses.replace(s, name=os.path.join(prefix, s.name),
                                                 outputs=tuple(os.path.join(prefix, o) for o in s.outputs))
                             for s in one.sources)
        found.bad.extend(one.bad)
        found.converted.extend(one.converted)
    return found

