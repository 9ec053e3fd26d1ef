"""KAIR's `blindsr` dataset: L made from H by the BSRGAN degradations, every sample fixed by its key."""
import cv2
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from conftest import dataset_options, unchecked_section
from data.datasets.blindsr import DatasetBlindSR
from data.loader import build_train_loader
from data.registry import build_dataset
from utils.errors import UserError

SMALL = dict(scale=2, lq_patchsize=12)


@pytest.fixture
def folder(tmp_path):
    """Six smooth colour images of different sizes (the smallest 40x44), written with cv2."""
    root = tmp_path / 'H'
    root.mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        noise = rng.integers(0, 256, (40 + 4 * i, 44 + 2 * i, 3)).astype(np.uint8)
        cv2.imwrite(str(root / f'{i:03d}.png'), cv2.GaussianBlur(noise, (0, 0), 1.5))
    return str(root)


def _ds(folder, phase='train', **kw):
    return build_dataset(dataset_options('blindsr', phase, dataroot_H=folder, **{**SMALL, **kw}))


def _same(a, b):
    return torch.equal(a['L'], b['L']) and torch.equal(a['H'], b['H'])


def test_the_dataset_is_registered_as_blindsr_with_kairs_keys(folder):
    ds = _ds(folder)
    assert isinstance(ds, DatasetBlindSR)
    assert set(DatasetBlindSR.OPTIONS) >= {'dataroot_H', 'dataroot_L', 'n_channels', 'H_size', 'scale',
                                           'degradation_type', 'shuffle_prob', 'use_sharp', 'lq_patchsize',
                                           'use_hflip', 'use_rot'}
    assert ds.patch_size == 24  # H_size defaults to lq_patchsize x scale


@pytest.mark.parametrize('kw', [dict(degradation_type='bsrgan', H_size=32),
                                dict(degradation_type='bsrgan_plus', H_size=32, shuffle_prob=0.5, use_sharp=True)])
def test_a_training_key_gives_the_same_tensors_every_time_and_other_keys_differ(folder, kw):
    ds = _ds(folder, **kw)
    a, b, c, d = ds[(2, 41)], ds[(2, 41)], ds[(2, 42)], _ds(folder, **kw)[(2, 41)]
    assert a['L'].shape == (3, 12, 12) and a['H'].shape == (3, 24, 24)
    assert a['L'].dtype == a['H'].dtype == torch.float32
    assert _same(a, b) and _same(a, d) and not torch.equal(a['L'], c['L'])
    assert 0 <= a['L'].min() and a['L'].max() <= 1 and a['H_path'].endswith('002.png')


def test_the_H_patch_is_a_patch_of_the_image_flipped_or_rotated(folder):
    ds = _ds(folder, H_size=24)
    img = cv2.cvtColor(cv2.imread(f'{folder}/001.png'), cv2.COLOR_BGR2RGB)
    for seed in range(6):
        H = np.round(ds[(1, seed)]['H'].numpy().transpose(1, 2, 0) * 255).astype(np.uint8)
        views = [img, img[::-1], img[:, ::-1], img[::-1, ::-1]]
        views += [v.transpose(1, 0, 2) for v in views]
        windows = [np.lib.stride_tricks.sliding_window_view(v, H.shape) for v in views]
        assert any((w == H).all(axis=(-3, -2, -1)).any() for w in windows)


def _loader_opt(workers):
    return {**dataset_options('blindsr', dataroot_H='x', **SMALL), 'dataloader_batch_size': 2,
            'dataloader_num_workers': workers, 'dataloader_persistent_workers': False}


def test_batches_do_not_depend_on_the_number_of_loader_workers(folder):
    ds = _ds(folder, degradation_type='bsrgan_plus', shuffle_prob=0.5)
    batches = {}
    for workers in (0, 2):
        loader, sampler = build_train_loader(ds, _loader_opt(workers), world_size=1, rank=0, seed=5,
                                             device=torch.device('cpu'))
        sampler.set_epoch(3)
        batches[workers] = [(b['L'], b['H']) for b in loader]
    assert len(batches[0]) == 3
    for (L0, H0), (L2, H2) in zip(batches[0], batches[2]):
        assert torch.equal(L0, L2) and torch.equal(H0, H2)


def test_items_made_in_spawned_worker_processes_are_bit_identical(folder):
    """Fresh interpreters (spawn): nothing inherited from this process decides a sample. Training keys
    (index, seed) and evaluation keys (index) alike: the key decides the mode."""
    ds = _ds(folder)
    keys = [(0, 7), (3, 8), (5, 9), 0, 4, 5]
    loader = DataLoader(ds, sampler=keys, batch_size=None, num_workers=2, multiprocessing_context='spawn')
    items = list(loader)
    assert len(items) == len(keys) and all(_same(item, ds[key]) for key, item in zip(keys, items))


def test_evaluation_is_the_same_for_every_instance_and_run(folder):
    a, b = _ds(folder, 'test'), _ds(folder, 'test', degradation_type='bsrgan')
    items = [a[i] for i in range(len(a))]
    assert all(_same(x, b[i]) for i, x in enumerate(items))
    assert items[0]['L'].shape == (3, 12, 12) and items[0]['H'].shape == (3, 24, 24)
    assert not torch.equal(items[0]['L'], items[1]['L'])
    plus = _ds(folder, 'test', degradation_type='bsrgan_plus')
    assert _same(plus[4], _ds(folder, 'test', degradation_type='bsrgan_plus')[4])


def test_an_evaluation_image_smaller_than_the_scored_patch_is_named_at_start_up(folder):
    with pytest.raises(UserError) as e:
        _ds(folder, 'test', scale=4, lq_patchsize=11)
    assert str(e.value).startswith('datasets.test.dataroot_H: ') and '000.png: 40x44 is smaller than the evaluated ' \
        'patch (lq_patchsize 11 x scale 4 = 44)' in str(e.value)


@pytest.mark.parametrize('key, value, message', [
    ('degradation_type', 'bsrgan+', '"bsrgan+" must be one of bsrgan, bsrgan_plus (did you mean "bsrgan"?)'),
    ('shuffle_prob', 1.5, '1.5 must be a probability from 0 to 1'),
    ('shuffle_prob', -0.1, '-0.1 must be a probability from 0 to 1'),
    ('lq_patchsize', 0, '0 must be >= 1'),
    ('n_channels', 1, '1 must be 3: the BSRGAN degradations are colour'),
    ('use_sharp', 'yes', 'expected true/false, got "yes"'),
])
def test_impossible_values_are_one_line_errors_naming_the_key(folder, key, value, message):
    with pytest.raises(UserError) as e:
        _ds(folder, **{key: value})
    assert str(e.value) == f'<options>: datasets.train.{key}: {message}'


@pytest.mark.parametrize('key, value, message', [
    ('H_size', 20, '20 is smaller than lq_patchsize x scale = 12 x 2 = 24'),
    ('H_size', 25, '25 is not divisible by scale 2'),
])
def test_values_that_contradict_another_key_are_one_line_errors_naming_the_key(folder, key, value, message):
    with pytest.raises(UserError) as e:
        DatasetBlindSR(unchecked_section(DatasetBlindSR, dataroot_H=folder, **{**SMALL, key: value}))
    assert str(e.value).startswith(f'datasets.train.{key}: {message}') and '\n' not in str(e.value)


def test_the_options_path_reports_the_same_errors(folder):
    with pytest.raises(UserError, match=r'^datasets\.train\.H_size: [^\n]*$'):
        _ds(folder, H_size=16)
    with pytest.raises(UserError, match=r'datasets\.train\.H_size: expected an integer or null'):
        _ds(folder, H_size=24.5)


def test_a_crop_at_least_twice_the_trained_patch_is_one_line_naming_both_keys(folder):
    """H_size 64 with lq_patchsize 8 at scale 4 would train on 32x32 patches of every 64x64 crop: one of the two
    keys is a mistake (a fuzz of the GAN demo file found it training silently)."""
    with pytest.raises(UserError) as e:
        _ds(folder, H_size=64, lq_patchsize=8, scale=4)
    assert str(e.value) == ('datasets.train.H_size: 64 is at least twice lq_patchsize x scale = 8 x 4 = 32 on a side: '
                            'the network would train on 32x32 patches of each 64x64 crop; lq_patchsize 16 (H_size / '
                            'scale) trains on the whole crop, or H_size null on the patch alone')
    with pytest.raises(UserError, match=r'^datasets\.train\.H_size: \[24, 48\] is at least twice lq_patchsize x '
                                        r'scale = 12 x 2 = 24 on a side'):
        _ds(folder, H_size=[24, 48])
    _ds(folder, 'test', H_size=64, lq_patchsize=8, scale=4)  # evaluation does not read H_size


def test_a_margin_around_the_trained_patch_is_one_warning_line_naming_both_keys(folder, caplog):
    with caplog.at_level('WARNING', logger='restoration'):
        _ds(folder, H_size=32)  # KAIR's BSRGAN files crop 320 for 72 x 4
        _ds(folder, H_size=24)
        _ds(folder, 'test', H_size=32)  # evaluation scores lq_patchsize x scale patches: H_size is not read there
    assert [r.getMessage() for r in caplog.records] == [
        'datasets.train.H_size: 32 crops are degraded whole, then the network trains on a lq_patchsize x scale = '
        '12 x 2 = 24 patch of each (a margin for the blurs, as KAIR\'s 320 for 72 x 4); lq_patchsize 16 (H_size / '
        'scale) trains on the whole crop']


def test_both_patch_sizes_take_height_and_width(folder):
    ds = _ds(folder, lq_patchsize=[8, 16])  # H_size null: lq_patchsize x scale = [16, 32]
    item = ds[(1, 3)]
    assert ds.patch_size == [16, 32] and item['L'].shape == (3, 8, 16) and item['H'].shape == (3, 16, 32)
    assert _ds(folder, lq_patchsize=[8, 16], H_size=[20, 36])[(1, 3)]['L'].shape == (3, 8, 16)
    assert _ds(folder, 'test', lq_patchsize=[8, 16])[0]['H'].shape == (3, 16, 32)
    with pytest.raises(UserError, match=r'^datasets\.train\.H_size: \[16, 30\] is smaller than lq_patchsize x scale '
                                        r'= \[8, 16\] x 2 = \[16, 32\]$'):
        _ds(folder, lq_patchsize=[8, 16], H_size=[16, 30])
