"""KAIR's option files load unchanged: every key its 35 training files use is accepted here, and then
honoured or noted in the log.

tests/data/kair/option_keys.tsv lists those keys (format: tests/data/kair/README.md); options/ holds KAIR's
train_usrnet.json and vrt/009 file, the two that needed work: `use_flip` (which KAIR's USRNet dataset never
reads: noted) and `temporal_scale` / `color_jitter` (KAIR's Vimeo interpolation sets: honoured).
"""
import json
import os
from typing import List

import numpy as np
import pytest
import torch

from conftest import dataset_options
from data.registry import DATASETS, build_dataset
from data.registry import dataset_options as section_keys
from data.synthetic.demo import ensure_demo_data
from models.registry import MODELS, model_options
from option_rules import read_options
from utils.image import images_to_float, imread_uint
from utils.options import DYNAMIC_SECTIONS, SCHEMA

KAIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'kair')


def _kair_keys() -> List[str]:
    with open(os.path.join(KAIR, 'option_keys.tsv')) as f:
        return [line.split('\t')[0] for line in f if line.strip() and not line.startswith('#')]


def _model_keys(model: str, section: str) -> set:
    """The keys model `model` takes in `section`: its own and, in `train`, every member's its type keys can choose."""
    extra = model_options(model)
    keys = set(extra.get(section, {}))
    if section == 'train':
        for choice in extra.get('choices', {}).values():
            keys |= {choice.prefix + k for name in choice.registry.names() for k in choice.registry.options(name, '')}
    return keys


def _accepted(path: str) -> bool:
    """Whether some section of the kind `path` names accepts its last key (a dataset key: some dataset type)."""
    section, key = path.split('.')[0], path.split('.')[-1]
    if path == section:
        return key in SCHEMA or key in DYNAMIC_SECTIONS
    if section == 'datasets':
        return any(key in section_keys(name) for name in DATASETS.names())
    if section in ('train', 'path'):
        return key in SCHEMA[section] or any(key in _model_keys(m, section) for m in MODELS.names())
    if section in ('netG', 'netD'):
        return key == 'net_type'  # the rest are network arguments: tests/test_kair_networks.py
    return key in SCHEMA[section]


def test_every_key_of_kairs_training_option_files_is_accepted():
    keys = _kair_keys()
    assert len(keys) == 130 and 'datasets.<train>.use_flip' in keys and 'datasets.<train>.temporal_scale' in keys
    assert [k for k in keys if not _accepted(k)] == []


def test_kairs_usrnet_file_loads_unchanged_and_the_log_notes_use_flip():
    opt = read_options(os.path.join(KAIR, 'options', 'train_usrnet.json'))
    assert 'datasets.train (usrnet): use_flip ignored: not read by this datasets.train, which KAIR ignores too' \
        in opt['_notes']
    assert 'use_flip' not in opt['datasets']['train'] and opt['datasets']['train']['scales'] == [1, 2, 3, 4]


@pytest.fixture(scope='module')
def vimeo(tmp_path_factory):
    root = tmp_path_factory.mktemp('kair_009') / 'demo_data' / 'vimeo'
    ensure_demo_data(dataset_options('VideoRecurrentTrainVimeoDataset', dataroot_gt=str(root / 'sequences'),
                                     dataroot_lq=str(root / 'sequences_BIx4'), generate_demo='vimeo',
                                     meta_info_file=str(root / 'meta_info_Vimeo90K_train_GT.txt')))
    return root


def _frames(root, seq, numbers):
    arr = np.stack([imread_uint(str(root / 'sequences' / seq / f'im{n}.png')) for n in numbers])
    return torch.from_numpy(arr.transpose(0, 3, 1, 2).astype(np.float32) / 255)


def test_kairs_vrt_009_file_loads_unchanged_and_interpolates_frame_4_from_1_3_5_7(vimeo):
    opt = read_options(os.path.join(KAIR, 'options', 'vrt', '009_train_vrt_videofi_vimeo_4frames.json'))
    assert opt['_notes'] == []
    train, test = opt['datasets']['train'], opt['datasets']['test']
    assert (train['temporal_scale'], train['color_jitter'], test['temporal_scale']) == (2, True, 2)
    # the same sections on the demo septuplets (disk instead of KAIR's LMDB, whole 64x64 frames, no jitter or
    # flips so that frames can be named)
    local = {'dataroot_gt': str(vimeo / 'sequences'), 'dataroot_lq': str(vimeo / 'sequences')}
    train = build_dataset({**train, **local, 'io_backend': {'type': 'disk'}, 'gt_size': 64, 'color_jitter': False,
                           'use_hflip': False, 'use_rot': False, 'random_reverse': False,
                           'meta_info_file': str(vimeo / 'meta_info_Vimeo90K_train_GT.txt')})
    test = build_dataset({**test, **local, 'meta_info_file': str(vimeo / 'meta_info_Vimeo90K_test_GT.txt')})
    item = images_to_float(train[(0, 5)])
    assert torch.equal(item['L'], _frames(vimeo, train.seqs[0][0], [1, 3, 5, 7]))
    assert torch.equal(item['H'], _frames(vimeo, train.seqs[0][0], [4]))
    first = test[0]
    assert [os.path.basename(p) for p in first['lq_path'] + first['gt_path']] == \
        ['im1.png', 'im3.png', 'im5.png', 'im7.png', 'im4.png']


def test_the_kair_files_here_are_kairs_keys():
    """The two files use only keys KAIR's files use (they are KAIR's, not ours)."""
    listed = set(_kair_keys())
    for name in ('train_usrnet.json', os.path.join('vrt', '009_train_vrt_videofi_vimeo_4frames.json')):
        with open(os.path.join(KAIR, 'options', name)) as f:
            data = json.load(f)
        paths = set()
        for key, value in data.items():
            if key == 'datasets':
                paths |= {f'datasets.<{phase}>.{k}' for phase, sec in value.items() for k in sec}
            elif key in ('netG', 'netD'):
                paths.add(f'{key}.net_type')
            elif isinstance(value, dict):
                paths |= {f'{key}.{k}' for k in value}
            else:
                paths.add(key)
        assert paths <= listed, sorted(paths - listed)
