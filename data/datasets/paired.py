"""BasicSR's PairedImageDataset (`dataset_type: paired`): LR/HR image pairs matched by file name.

What BasicSR's and traiNNer-redux's PairedImageDataset read: the HR folder `dataroot_H` (BasicSR's `dataroot_gt`)
and the LR folder `dataroot_L` (`dataroot_lq`), or lists of folders paired in order (traiNNer-redux); each HR file
`name.ext` is paired with the LR file `filename_tmpl.format(name).ext` (DIV2K's `{}x4`), or, with `meta_info_file`,
the HR files the meta file lists (its first word per line, relative to dataroot_H). A missing LR file, or folders
of different sizes, stop the run at start-up (BasicSR asserts the same). Patches, flips and rotations, and the
evaluation crop of HR to scale x LR, are `plain`'s (data/datasets/image.py).
"""
import os
from typing import Any, List, Optional, Tuple

from data.datasets.image import (CHANNELS, IMAGE_OPTIONS, META_INFO_FILE, DatasetPlain, folder_images, folders,
                                 meta_info_images, patch_size, scale)
from data.registry import DATASETS
from utils.errors import UserError
from utils.options import REQUIRED, Key, rule
from utils.options.foreign import BASICSR, REDUX, Foreign, Only


@rule('a file name template with one {} (the HR file\'s name), like "{}" or "{}x4"', pattern=r'\{\}')
def _template(v: Any) -> Optional[str]:
    try:
        v.format('name')
    except (IndexError, KeyError, ValueError):
        return 'must be a file name template with one {} for the HR file\'s name, e.g. "{}x4"'
    return None if '{}' in v else 'must contain {} (the HR file\'s name), e.g. "{}" or "{}x4"'


_FOLDERS = (str, list)
_DISK = Only({'type': 'disk'}, 'images are read from files (LMDB image sets: scripts/make_lmdb.py makes them for '
                               'the video datasets)')
# BasicSR's and traiNNer-redux's keys (the loader keys are the reader's); lq_size is turned into gt_size first
_KEYS = {'dataroot_gt': 'dataroot_H', 'dataroot_lq': 'dataroot_L', 'gt_size': 'H_size', 'use_hflip': 'use_hflip',
         'use_rot': 'use_rot', 'filename_tmpl': 'filename_tmpl', 'meta_info_file': 'meta_info_file',
         'crop_border': 'metric_border', 'scale': 'scale'}
_NOT_HERE = {'color': Only(None, 'Y-channel training is not offered here'),
             'mean': Only(None, 'inputs are not normalised here'), 'std': Only(None, 'inputs are not normalised here'),
             'io_backend': _DISK}
FOREIGN = [Foreign('PairedImageDataset', BASICSR, keys=_KEYS, unneeded=_NOT_HERE, passthrough=False),
           Foreign('PairedImageDataset', REDUX, keys={**_KEYS, 'meta_info': 'meta_info_file'}, passthrough=False,
                   unneeded={**_NOT_HERE, 'clip_size': Only(None), 'lq_resize_mode': Only(None, 'LR images are read '
                             'from dataroot_lq here (no on-the-fly downscaling)')})]


@DATASETS.register('paired', foreign=FOREIGN)
class DatasetPaired(DatasetPlain):
    """LR/HR pairs matched by name (`filename_tmpl`), from one folder each or lists of folders, or the HR files a
    meta info file lists (BasicSR's PairedImageDataset)."""

    OPTIONS = {
        **IMAGE_OPTIONS,
        'dataroot_H': Key(REQUIRED, _FOLDERS, help='folder (or list of folders) of the HR (target) images'),
        'dataroot_L': Key(REQUIRED, _FOLDERS, help='folder (or list of folders, one per dataroot_H folder) of the LR '
                                                   'inputs, matched to the HR files by name'),
        'filename_tmpl': Key('{}', (str,), _template, 'the LR file name of HR file "name.ext": '
                                                      'filename_tmpl.format(name).ext ("{}x4": DIV2K)'),
        'meta_info_file': META_INFO_FILE,
        'n_channels': CHANNELS,
        'H_size': patch_size(96),
        'scale': scale(1),
    }

    def list_files(self) -> Tuple[List[str], Optional[List[str]]]:
        opt, where = self.opt, self.where
        gt, lq = folders(opt, 'dataroot_H'), folders(opt, 'dataroot_L')
        if len(gt) != len(lq):
            raise UserError(f'{where}.dataroot_L: {len(lq)} folders for the {len(gt)} of dataroot_H; one LR folder '
                            f'per HR folder')
        if opt['meta_info_file'] is not None and len(gt) > 1:
            raise UserError(f'{where}.meta_info_file: lists the images of one dataroot_H folder; give one folder')
        paths_H: List[str] = []
        paths_L: List[str] = []
        for folder_H, folder_L in zip(gt, lq):
            names = meta_info_images(opt, folder_H) if opt['meta_info_file'] else \
                [os.path.relpath(p, folder_H) for p in folder_images(opt, 'dataroot_H', folder_H)]
            lq_files = {os.path.relpath(p, folder_L) for p in folder_images(opt, 'dataroot_L', folder_L)}
            if opt['meta_info_file'] is None and len(lq_files) != len(names):
                raise UserError(f'{where}.dataroot_L: {len(lq_files)} images in {folder_L} but {len(names)} in '
                                f'{folder_H}; the folders must pair up one to one')
            for name in names:
                stem, ext = os.path.splitext(name)
                lq_name = os.path.join(os.path.dirname(stem), opt['filename_tmpl'].format(os.path.basename(stem)) + ext)
                if lq_name not in lq_files:
                    raise UserError(f'{where}.dataroot_L: {os.path.join(folder_L, lq_name)} not found, the LR image of '
                                    f'{os.path.join(folder_H, name)} (filename_tmpl {opt["filename_tmpl"]!r})')
                paths_H.append(os.path.join(folder_H, name))
                paths_L.append(os.path.join(folder_L, lq_name))
        return paths_H, paths_L
