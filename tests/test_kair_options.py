"""KAIR's option files load unchanged: every key its 35 training files use is accepted here, and then
honoured or noted in the log.

tests/data/kair/options/ holds the 35 files exactly as KAIR ships them (comments included; MIT, LICENSE-KAIR
beside them) and tests/data/kair/option_keys.tsv lists the keys they use (format: tests/data/kair/README.md).
Each file is loaded here through the project's option reader, so a change that refuses one of them fails
this test (RVRT 002/003's `num_frame: -1`, "all frames", was refused once). Files that needed work:
`use_flip` (which KAIR's USRNet dataset never reads: noted), `temporal_scale` / `color_jitter` (KAIR's Vimeo
interpolation sets: honoured) and `num_frame: -1` of the Vimeo training sets (the whole septuplet).
"""
import glob
import os
import re
from typing import Any, Dict, List, Set

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
from utils.errors import UserError
from utils.options import DYNAMIC_SECTIONS, SCHEMA, parse_json_file

KAIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'kair')
KAIR_FILES = sorted(os.path.relpath(p, os.path.join(KAIR, 'options'))
                    for p in glob.glob(os.path.join(KAIR, 'options', '**', '*.json'), recursive=True))


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


def _key_paths(data: Dict[str, Any]) -> Set[str]:
    """A KAIR option file's key paths as option_keys.tsv writes them (`datasets.<train>.x`, `netG.net_type`)."""
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
    return paths


def test_the_kair_files_here_are_kairs_35_with_their_licence():
    """All 35 files, with KAIR's licence, and together exactly the keys KAIR's files use."""
    assert len(KAIR_FILES) == 35
    assert {f.split(os.sep)[0] for f in KAIR_FILES if os.sep in f} == {'swinir', 'vrt', 'rvrt'}
    with open(os.path.join(KAIR, 'options', 'LICENSE-KAIR')) as f:
        assert 'MIT License' in f.read()
    used: Set[str] = set()
    for name in KAIR_FILES:
        used |= _key_paths(parse_json_file(os.path.join(KAIR, 'options', name)))
    assert used == set(_kair_keys())


def _honoured_or_noted(section: str, key: str, opt: Dict[str, Any]) -> bool:
    """A key of the file is in the validated options (read by what the section builds) or named in a note."""
    node: Any = opt
    for part in section.split('.') if section else []:
        node = node[part]
    if key in node:
        return True
    return any(re.search(rf'\b{re.escape(key)}\b', note) for note in opt['_notes'])


@pytest.mark.parametrize('name', KAIR_FILES)
def test_every_kair_option_file_loads_unchanged_and_each_key_is_honoured_or_noted(name):
    path = os.path.join(KAIR, 'options', name)
    opt = read_options(path)
    data = parse_json_file(path)
    missing = []
    for key, value in data.items():
        if key == 'datasets':
            missing += [f'datasets.{phase}.{k}' for phase, sec in value.items() for k in sec
                        if not _honoured_or_noted(f'datasets.{phase}', k, opt)]
        elif isinstance(value, dict):
            missing += [f'{key}.{k}' for k in value if not _honoured_or_noted(key, k, opt)]
        elif not _honoured_or_noted('', key, opt):
            missing.append(key)
    assert missing == []


@pytest.mark.parametrize('name', ['002_train_rvrt_videosr_bi_vimeo_14frames.json',
                                  '003_train_rvrt_videosr_bd_vimeo_14frames.json'])
def test_rvrts_vimeo_files_train_on_whole_septuplets_mirrored_to_14_frames(name, vimeo):
    """`num_frame: -1` is KAIR's "all frames": its recurrent Vimeo set always stacks im1..im7 (RVRT then
    mirrors them to 14); test sets read every frame too."""
    opt = read_options(os.path.join(KAIR, 'options', 'rvrt', name))
    train, test = opt['datasets']['train'], opt['datasets']['test']
    assert train['num_frame'] == -1 and test['num_frame'] == -1 and train['mirror_sequence']
    lq = 'sequences_BIx4' if '_bi_' in name else 'sequences_BDx4'
    dataset = build_dataset({**train, 'dataroot_gt': str(vimeo / 'sequences'), 'dataroot_lq': str(vimeo / lq),
                             'io_backend': {'type': 'disk'}, 'gt_size': 64, 'use_hflip': False, 'use_rot': False,
                             'random_reverse': False, 'meta_info_file': str(vimeo / 'meta_info_Vimeo90K_train_GT.txt')})
    item = images_to_float(dataset[(1, 3)])
    frames = _frames(vimeo, dataset.seqs[1][0], range(1, 8))
    assert torch.equal(item['H'], torch.cat([frames, frames.flip(0)]))
    assert item['L'].shape == (14, 3, 16, 16)


def test_minus_one_in_a_training_set_of_long_clips_says_where_it_belongs():
    """GoPro/REDS/DAVIS training draws windows from ~100-frame clips: -1 has no meaning there (in KAIR and
    BasicSR it breaks their window arithmetic), so it is refused with one line naming where it belongs."""
    for dataset_type in ('VideoRecurrentTrainDataset', 'VideoRecurrentTrainNonblindDenoisingDataset'):
        with pytest.raises(UserError, match=r'datasets\.train\.num_frame: -1 must be >= 1: the number of frames '
                                            r'of each random training window \(-1, all frames, is for Vimeo'):
            dataset_options(dataset_type, dataroot_gt='g', dataroot_lq='l', meta_info_file='m', num_frame=-1)


def test_whole_sequences_need_one_length_and_consecutive_frames(vimeo, tmp_path):
    meta = tmp_path / 'meta.txt'
    meta.write_text('00001/0001 7 (64,64,3)\n00001/0002 5 (64,64,3)\n')
    section = dataset_options('VideoRecurrentTrainVimeoDataset', dataroot_gt=str(vimeo / 'sequences'),
                              dataroot_lq=str(vimeo / 'sequences_BIx4'), meta_info_file=str(meta), num_frame=-1,
                              gt_size=64)
    with pytest.raises(UserError, match='num_frame: -1 stacks whole sequences, which then need one length to be '
                                        'batched, but 00001/0002 has 5 frames and 00001/0001 7'):
        build_dataset(section)
    meta.write_text('00001/0001 7 (64,64,3)\n')
    with pytest.raises(UserError, match=r'num_frame: -1 stacks whole sequences of consecutive frames: '
                                        r'interval_list must be \[1\], got \[1, 2\]'):
        build_dataset({**section, 'interval_list': [1, 2]})


def test_whole_septuplets_for_interpolation_are_im1_3_5_7_to_im4(vimeo):
    section = dataset_options('VideoRecurrentTrainVimeoVFIDataset', dataroot_gt=str(vimeo / 'sequences'),
                              meta_info_file=str(vimeo / 'meta_info_Vimeo90K_train_GT.txt'), num_frame=-1,
                              temporal_scale=2, gt_size=64, use_hflip=False, use_rot=False)
    dataset = build_dataset(section)
    item = images_to_float(dataset[(0, 1)])
    assert torch.equal(item['L'], _frames(vimeo, dataset.seqs[0][0], [1, 3, 5, 7]))
    assert torch.equal(item['H'], _frames(vimeo, dataset.seqs[0][0], [4]))
