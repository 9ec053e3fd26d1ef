"""Non-blind video denoising datasets (KAIR's VRT 008 / RVRT 006 on DAVIS) and the `davis` demo data."""
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, clean_env, dataset_options
from data.datasets.video_denoising import (VideoRecurrentTestNonblindDenoisingDataset,
                                           VideoRecurrentTrainNonblindDenoisingDataset, add_noise)
from data.loader import build_train_loader, build_val_loader
from data.registry import build_dataset
from data.synthetic.davis import clip_frames, make_davis
from data.synthetic.demo import COMPLETE_MARKER, ensure_demo_data
from option_rules import option_rules
from utils.errors import UserError
from utils.image import imread_uint
from utils.options import validate

TRAIN = 'VideoRecurrentTrainNonblindDenoisingDataset'
TEST = 'VideoRecurrentTestNonblindDenoisingDataset'


@pytest.fixture(scope='module')
def davis(tmp_path_factory):
    root = tmp_path_factory.mktemp('data') / 'demo_data' / 'davis'
    for section in (_train_opt(root, generate_demo='davis'), _test_opt(root, generate_demo='davis')):
        ensure_demo_data(section)
    return root


def _train_opt(root, **over):
    given = {'dataroot_gt': str(root / 'train'), 'meta_info_file': str(root / 'meta_info_DAVIS_train_GT.txt'),
             'filename_tmpl': '05d', 'filename_ext': 'jpg', 'num_frame': 4, 'gt_size': 48,
             'sigma_min': 10, 'sigma_max': 40, **over}
    return dataset_options(TRAIN, 'train', **given)


def _test_opt(root, **over):
    return dataset_options(TEST, 'test', **{'dataroot_gt': str(root / 'test'), 'sigma': 20, **over})


def _clip(root, split, clip, frames):
    arr = np.stack([imread_uint(str(root / split / clip / f'{i:05d}.jpg')) for i in frames])
    return torch.from_numpy(arr.transpose(0, 3, 1, 2).astype(np.float32) / 255)


def test_davis_demo_is_deterministic_idempotent_and_laid_out_as_davis(davis, tmp_path):
    files = sorted(os.path.relpath(os.path.join(d, f), davis) for d, _, fs in os.walk(davis) for f in fs)
    assert COMPLETE_MARKER in files and 'meta_info_DAVIS_train_GT.txt' in files
    assert sum(f.startswith('train' + os.sep) for f in files) == 30
    assert sum(f.startswith('test' + os.sep) for f in files) == 12
    assert (davis / 'meta_info_DAVIS_train_GT.txt').read_text().splitlines() == [
        f'clip{c:02d} 10 (64,96,3) 0' for c in range(3)]
    frame = imread_uint(str(davis / 'train' / 'clip01' / '00004.jpg'))
    assert frame.shape == (64, 96, 3)
    assert np.abs(frame.astype(int) - clip_frames('train', 1)[4]).mean() < 6  # JPEG, chroma subsampled
    again = make_davis(str(tmp_path / 'again'))
    for name in ('train/clip02/00009.jpg', 'test/clip00/00000.jpg', 'meta_info_DAVIS_train_GT.txt'):
        assert (davis / name).read_bytes() == open(os.path.join(again, name), 'rb').read()


def test_training_l_is_h_plus_noise_with_the_level_map_as_4th_channel(davis):
    ds = build_dataset(_train_opt(davis))
    assert len(ds) == 30
    levels = []
    for seed in range(60):
        item = ds[(seed % 30, seed)]
        L, H = item['L'], item['H']
        assert L.shape == (4, 4, 48, 48) and H.shape == (4, 3, 48, 48) and L.dtype == torch.float32
        level = L[0, 3, 0, 0].item()
        assert torch.equal(L[:, 3], torch.full_like(L[:, 3], level)), 'one level for every pixel of every frame'
        assert 10 / 255 - 1e-7 <= level <= 40 / 255 + 1e-7
        assert (L[:, :3] - H).std().item() == pytest.approx(level, rel=0.08)
        levels.append(level * 255)
    assert min(levels) < 15 and max(levels) > 35
    fixed = build_dataset(_train_opt(davis, sigma_min=25, sigma_max=25))[(3, 1)]['L']
    assert torch.equal(fixed[:, 3], torch.full_like(fixed[:, 3], 25 / 255))
    clean = build_dataset(_train_opt(davis, sigma_min=0, sigma_max=0))[(3, 1)]
    assert torch.equal(clean['L'][:, :3], clean['H']) and not clean['L'][:, 3].any()


def test_the_same_key_gives_identical_items_whatever_the_global_rng(davis):
    ds = build_dataset(_train_opt(davis, random_reverse=True, interval_list=[1, 2]))
    first = ds[(7, 123)]
    for seed in range(4):
        random.seed(seed)
        torch.manual_seed(seed)
        np.random.seed(seed)
        again = ds[(7, 123)]
        assert torch.equal(again['L'], first['L']) and torch.equal(again['H'], first['H'])
    assert not torch.equal(ds[(7, 124)]['L'], first['L'])


def test_training_frames_are_consecutive_frames_of_one_clip(davis):
    ds = build_dataset(_train_opt(davis, gt_size=64, use_hflip=False, use_rot=False, random_reverse=True))
    directions = set()
    for seed in range(16):
        item = ds[(9, seed)]   # clip00, frame 9: the last frame, so the start moves back into the clip
        clip = _clip(davis, 'train', 'clip00', range(10))
        left = next(x for x in range(33) if any(torch.equal(item['H'][0], f[..., x:x + 64]) for f in clip))
        numbers = [next(i for i in range(10) if torch.equal(h, clip[i][..., left:left + 64])) for h in item['H']]
        step = numbers[1] - numbers[0]
        assert abs(step) == 1 and numbers == [numbers[0] + k * step for k in range(4)]
        directions.add(step)
        assert item['key'] == 'clip00/00009' and item['folder'] == 'clip00'
    assert directions == {1, -1}


def test_loaders_with_0_and_2_workers_give_identical_batches(davis):
    got = {}
    for workers in (0, 2):
        opt = _train_opt(davis, random_reverse=True, dataloader_num_workers=workers, dataloader_batch_size=3)
        loader, _ = build_train_loader(build_dataset(opt), opt, 1, 0, 5, torch.device('cpu'))
        got[workers] = [(b['L'], b['H']) for b in loader]
    assert len(got[0]) == 10
    for (l0, h0), (l2, h2) in zip(got[0], got[2]):
        assert torch.equal(l0, l2) and torch.equal(h0, h2)


def test_test_set_noise_is_seeded_by_the_clip_index_so_evaluation_is_deterministic(davis):
    ds = build_dataset(_test_opt(davis))
    assert len(ds) == 2
    item = ds[1]
    assert item['folder'] == 'clip01' and item['L'].shape == (6, 4, 64, 96)
    assert torch.equal(item['H'], _clip(davis, 'test', 'clip01', range(6)))
    assert torch.equal(item['L'], add_noise(item['H'], 20.0, 1))
    assert torch.equal(item['L'][:, 3], torch.full((6, 64, 96), 20 / 255))
    assert (item['L'][:, :3] - item['H']).std().item() == pytest.approx(20 / 255, rel=0.03)
    fresh = build_dataset(_test_opt(davis))
    loader = build_val_loader(fresh, 1, 0, num_workers=2)
    for index, batch in enumerate(loader):
        assert torch.equal(batch['L'][0], ds[index]['L'])
    noise0 = ds[0]['L'][:, :3] - ds[0]['H']
    assert not torch.equal(noise0, item['L'][:, :3] - item['H'])
    short = build_dataset(_test_opt(davis, num_frame=2, sigma=5))[0]
    assert short['L'].shape == (2, 4, 64, 96) and torch.equal(short['L'][:, 3], torch.full((2, 64, 96), 5 / 255))
    with pytest.raises(UserError, match=rf'^datasets.test.dataset_type: {TEST} yields whole clips'):
        ds.check_train_options()


def test_kairs_video_test_set_with_sigma_gives_the_same_noisy_clips(davis):
    """KAIR's VRT 008 file tests with VideoRecurrentTestDataset + `sigma` (dataroot_lq = the GT folder)."""
    kair = build_dataset(dataset_options('VideoRecurrentTestDataset', 'test', dataroot_gt=str(davis / 'test'),
                                         dataroot_lq=str(davis / 'test'), sigma=20))
    ours = build_dataset(_test_opt(davis))
    for i in range(len(ours)):
        assert torch.equal(kair[i]['L'], ours[i]['L']) and torch.equal(kair[i]['H'], ours[i]['H'])
    with pytest.raises(UserError, match=r'^<options>: datasets\.test\.sigma: -1 must be >= 0'):
        build_dataset(dataset_options('VideoRecurrentTestDataset', 'test', dataroot_gt=str(davis / 'test'),
                                      dataroot_lq=str(davis / 'test'), sigma=-1))


def test_kair_option_files_with_dataroot_lq_are_accepted_with_a_note(davis):
    raw = {'task': 't', 'netG': {'net_type': 'dncnn'}, 'datasets': {
        'train': {'dataset_type': TRAIN, 'dataroot_gt': str(davis / 'train'), 'dataroot_lq': 'unused',
                  'meta_info_file': str(davis / 'meta_info_DAVIS_train_GT.txt'), 'filename_tmpl': '05d',
                  'filename_ext': 'jpg', 'gt_size': 64, 'sigma_min': 0, 'sigma_max': 50},
        'test': {'dataset_type': TEST, 'dataroot_gt': str(davis / 'test'), 'dataroot_lq': str(davis / 'test'),
                 'sigma': 20, 'cache_data': True}}}
    opt = validate(raw, option_rules())
    assert 'dataroot_lq' not in opt['datasets']['train'] and any('dataroot_lq ignored' in n for n in opt['_notes'])
    assert build_dataset(opt['datasets']['train'])[(0, 0)]['L'].shape == (6, 4, 64, 64)
    assert len(build_dataset(opt['datasets']['test'])) == 2


def test_lmdb_built_by_the_script_gives_the_same_training_items(davis, tmp_path):
    r = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'make_lmdb.py'), '--input', str(davis / 'train'),
                        '--output', str(tmp_path / 'davis.lmdb'), '--layout', 'reds'],
                       env=clean_env(OMP_NUM_THREADS='1'), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    meta = (tmp_path / 'davis.lmdb' / 'meta_info.txt').read_text().splitlines()
    assert len(meta) == 30 and meta[0] == 'clip00/00000.png (64,96,3) 1'
    disk = build_dataset(_train_opt(davis, random_reverse=True))
    db = build_dataset(_train_opt(davis, random_reverse=True, io_backend={'type': 'lmdb'},
                                  dataroot_gt=str(tmp_path / 'davis.lmdb')))
    for key in [(0, 1), (17, 2), (29, 3), 5]:
        a, b = disk[key], db[key]
        assert torch.equal(a['L'], b['L']) and torch.equal(a['H'], b['H']) and a['key'] == b['key']


@pytest.mark.parametrize('cls, over, message', [
    (VideoRecurrentTrainNonblindDenoisingDataset, {'sigma_min': 30, 'sigma_max': 10},
     'datasets.train.sigma_min: 30 is larger than sigma_max 10'),
    (VideoRecurrentTrainNonblindDenoisingDataset, {'sigma_max': -1},
     '<options>: datasets.train.sigma_max: -1 must be >= 0 (noise std on the 0..255 scale)'),
    (VideoRecurrentTrainNonblindDenoisingDataset, {'sigma_min': True},
     '<options>: datasets.train.sigma_min: expected an integer or a number, got true'),
    (VideoRecurrentTrainNonblindDenoisingDataset, {'dataroot_gt': '{tmp}/nowhere'},
     'datasets.train.dataroot_gt: folder not found: {tmp}/nowhere'),
    (VideoRecurrentTrainNonblindDenoisingDataset, {'meta_info_file': '{tmp}/bad.txt'},
     'datasets.train.meta_info_file: {tmp}/bad.txt:1: expected "clip num_frames (h,w,c) [start_frame]", '
     'got "clip00 ten (64,96,3) 0"'),
    (VideoRecurrentTrainNonblindDenoisingDataset, {'meta_info_file': '{tmp}/missing.txt'},
     'datasets.train.dataroot_gt: clip bear listed in meta_info_file not found: {root}/train/bear'),
    (VideoRecurrentTrainNonblindDenoisingDataset, {'num_frame': 11},
     'datasets.train.num_frame: 11 frames at interval 1 need 11 frames but clip clip00 has 10'),
    (VideoRecurrentTrainNonblindDenoisingDataset, {'gt_size': 65},
     'datasets.train.gt_size: 65 is larger than the 64×96 frames of clip clip00 (meta_info_file)'),
    (VideoRecurrentTrainNonblindDenoisingDataset, {'scale': 2},
     '<options>: datasets.train.scale: 2 must be 1: denoising keeps the frame size'),
    (VideoRecurrentTrainNonblindDenoisingDataset, {'test_mode': True},
     '<options>: datasets.train.test_mode: true must be false: no clips are held out of the training set here; '
     'evaluate with VideoRecurrentTestNonblindDenoisingDataset'),
    (VideoRecurrentTestNonblindDenoisingDataset, {'sigma': -5},
     '<options>: datasets.test.sigma: -5 must be >= 0 (noise std on the 0..255 scale)'),
    (VideoRecurrentTestNonblindDenoisingDataset, {'num_frame': 0},
     '<options>: datasets.test.num_frame: 0 must be -1 (whole clips) or a positive integer'),
    (VideoRecurrentTestNonblindDenoisingDataset, {'dataroot_gt': '{root}/train/clip00'},
     'datasets.test.dataroot_gt: no clip folders with images in {root}/train/clip00'),
])
def test_bad_options_are_one_line_errors_naming_the_key(davis, tmp_path, cls, over, message):
    (tmp_path / 'bad.txt').write_text('clip00 ten (64,96,3) 0\n')
    (tmp_path / 'missing.txt').write_text('clip00 10 (64,96,3) 0\nbear 10 (64,96,3) 0\n')
    fill = {'tmp': str(tmp_path), 'root': str(davis)}
    over = {k: v.format(**fill) if isinstance(v, str) else v for k, v in over.items()}
    train = cls is VideoRecurrentTrainNonblindDenoisingDataset
    base = _train_opt(davis) if train else _test_opt(davis)
    given = {k: v for k, v in base.items() if not k.startswith('_') and k not in ('phase', 'dataset_type')}
    with pytest.raises(UserError) as e:  # a value alone: the options; values together and files: the dataset
        build_dataset(dataset_options(base['dataset_type'], 'train' if train else 'test', **{**given, **over}))
    assert str(e.value) == message.format(**fill)
