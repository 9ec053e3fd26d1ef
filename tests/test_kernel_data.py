"""SR with a known blur kernel: KAIR's `usrnet` (model `plain4`) and `srmd` datasets."""
import os

import numpy as np
import pytest
import torch

from conftest import dataset_options, run_main, unchecked_section, write_options
from data.datasets.kernel import DatasetSRMD, DatasetUSRNet, circular_blur, load_pca, srmd_pca_basis, step_scales
from data.loader import build_train_loader
from data.sampler import ResumableDistributedSampler
from models.networks.usrnet import downsample, p2o
from models.restorer import KernelRestorer
from utils.errors import UserError

CPU = torch.device('cpu')


def _usrnet(demo_images, phase='train', **kw):
    folder = f'{demo_images}/{"train" if phase == "train" else "test"}'
    return DatasetUSRNet(dataset_options('usrnet', phase, dataroot_H=folder, H_size=48, **kw))


def _srmd(demo_images, phase='train', **kw):
    folder = f'{demo_images}/{"train" if phase == "train" else "test"}'
    return DatasetSRMD(dataset_options('srmd', phase, dataroot_H=folder, H_size=48, scale=2, **kw))


def test_usrnet_low_resolution_images_follow_the_degradation_usrnet_inverts(demo_images):
    ds = _usrnet(demo_images)
    checked = 0
    for seed in range(60):
        item = ds[(1, seed, seed)]
        if item['sigma'].item() != 0:
            continue
        H, k = item['H'][None].double(), item['k'][None].double()
        blurred = torch.fft.ifft2(p2o(k, H.shape[-2:]) * torch.fft.fft2(H)).real  # the network's own model
        assert torch.allclose(downsample(blurred, item['sf']), item['L'][None].double(), atol=1e-6)
        checked += 1
    assert checked >= 2


def test_usrnet_items_carry_kernel_scale_and_noise_level_drawn_from_their_seeds(demo_images):
    ds = _usrnet(demo_images, scales=[2, 4], sigma_max=30)
    a, b = ds[(0, 5, 9)], ds[(0, 5, 9)]
    assert all(torch.equal(a[key], b[key]) for key in ('L', 'H', 'k', 'sigma')) and a['sf'] == b['sf']
    assert a['k'].shape == (1, 25, 25) and a['k'].sum().item() == pytest.approx(1.0, abs=1e-5)
    assert a['L'].shape == (3, 48 // a['sf'], 48 // a['sf']) and a['H'].shape == (3, 48, 48)
    items = [ds[(0, s, s)] for s in range(90)]
    assert {it['sf'] for it in items} == {2, 4}
    levels = [round(it['sigma'].item() * 255) for it in items]
    assert 0 in levels and max(levels) <= 29 and len(set(levels)) > 10


def test_one_scale_per_optimizer_step_on_every_rank_and_micro_batch_as_in_one_process(demo_images):
    ds = _usrnet(demo_images)
    world, batch, accum = 2, 2, 2
    ranks = [list(ResumableDistributedSampler(ds, world, r, seed=3, step_size=world * batch * accum))
             for r in range(world)]
    single = list(ResumableDistributedSampler(ds, 1, 0, seed=3, step_size=world * batch * accum))
    per_step = batch * accum  # samples of one optimizer step on one rank
    for step in range(len(ranks[0]) // per_step):
        keys = [k for r in ranks for k in r[step * per_step:(step + 1) * per_step]]
        assert len(set(step_scales(ds, keys))) == 1
        assert sorted(keys) == sorted(single[step * world * per_step:(step + 1) * world * per_step])
    assert len(set(step_scales(ds, single))) > 1  # steps do differ


def test_usrnet_batches_collate_and_are_the_same_with_loader_workers(demo_images):
    ds = _usrnet(demo_images)
    opt = dataset_options('usrnet', dataroot_H=f'{demo_images}/train', H_size=48, dataloader_batch_size=2)
    batches = []
    for workers in (0, 2):
        loader, _ = build_train_loader(ds, {**opt, 'dataloader_num_workers': workers}, 1, 0, 5, CPU, 2)
        batches.append([next(iter(loader)) for _ in range(1)][0])
    a, b = batches
    assert a['L'].shape[0] == 2 and len(set(a['sf'].tolist())) == 1
    assert all(torch.equal(a[k], b[k]) for k in ('L', 'H', 'k', 'sigma', 'sf'))


def test_usrnet_evaluation_is_deterministic_at_the_validation_scale_without_noise(demo_images):
    a, b = _usrnet(demo_images, 'test', sf_validation=3), _usrnet(demo_images, 'test', sf_validation=3)
    x, y = a[2], b[2]
    assert torch.equal(x['L'], y['L']) and torch.equal(x['k'], y['k'])
    assert x['sf'] == 3 and x['sigma'].item() == 0 and x['H'].shape[-1] == 3 * x['L'].shape[-1]


@pytest.mark.parametrize('given, message', [
    ({'H_size': 50}, r'^datasets\.train\.H_size: 50 is not divisible by scale 3 of scales \[1, 2, 3, 4\]$'),
    ({'dataroot_L': 'somewhere'}, r'^datasets\.train\.dataroot_L: usrnet makes L from H with a known kernel'),
])
def test_usrnet_option_mistakes_are_one_line_errors(demo_images, given, message):
    with pytest.raises(UserError, match=message):
        DatasetUSRNet(unchecked_section(DatasetUSRNet, dataroot_H=f'{demo_images}/train', dataset_type='usrnet',
                                        **given))


@pytest.mark.parametrize('given, message', [
    ({'scales': [2, 'x']}, 'scales: [2, "x"] must be a non-empty list of integers >= 1'),
    ({'scales': []}, 'scales: [] must be a non-empty list of integers >= 1'),
    ({'sigma_max': 0}, 'sigma_max: 0 must be >= 1'),
    ({'sf_validation': 0}, 'sf_validation: 0 must be >= 1'),
])
def test_usrnet_option_values_are_one_line_errors_with_the_options(demo_images, given, message):
    with pytest.raises(UserError) as e:
        dataset_options('usrnet', dataroot_H=f'{demo_images}/train', **given)
    assert str(e.value) == f'<options>: datasets.train.{message}'


def test_the_kernel_restorer_feeds_one_scale_and_refuses_tiles():
    batch = {'L': torch.zeros(2, 3, 8, 8), 'k': torch.zeros(2, 1, 25, 25), 'sigma': torch.zeros(2, 1, 1, 1),
             'sf': torch.tensor([2, 2])}
    assert KernelRestorer.inputs(batch)[2] == 2
    with pytest.raises(ValueError, match='one scale factor'):
        KernelRestorer.inputs({**batch, 'sf': torch.tensor([2, 3])})
    opt = {'model': 'plain4', 'val': {'tile': 64, 'tile_overlap': 0, 'self_ensemble': False}, 'datasets': {}}
    with pytest.raises(UserError, match=r'^val\.tile: model plain4 restores whole images'):
        KernelRestorer.from_options(torch.nn.Identity(), opt, CPU)


def test_circular_blur_wraps_around_the_borders():
    img = np.zeros((8, 8, 1))
    img[0, 0] = 1.0
    k = np.zeros((3, 3))
    k[1, 0] = 1.0  # a true convolution with this kernel moves content one pixel to the left
    out = circular_blur(img, k)
    assert out[0, 7, 0] == pytest.approx(1.0) and out.sum() == pytest.approx(1.0)


def test_srmd_appends_the_kernel_pca_code_and_noise_level_as_maps(demo_images):
    ds = _srmd(demo_images, sigma=[0, 50])
    a, b = ds[(1, 4)], ds[(1, 4)]
    assert torch.equal(a['L'], b['L']) and a['L'].shape == (19, 24, 24) and a['H'].shape == (3, 48, 48)
    maps = a['L'][3:]
    assert torch.equal(maps, maps[:, :1, :1].expand_as(maps))  # constant maps
    levels = [ds[(1, s)]['L'][18, 0, 0].item() * 255 for s in range(60)]
    assert 0 in levels and 0 < max(levels) <= 50
    test = _srmd(demo_images, 'test', sigma_test=10)
    assert test[0]['L'][18, 0, 0].item() == pytest.approx(10 / 255)
    assert torch.equal(test[0]['L'], _srmd(demo_images, 'test', sigma_test=10)[0]['L'])


def test_the_srmd_pca_basis_is_orthonormal_and_captures_its_kernels():
    p = srmd_pca_basis(15, 15)
    assert p.shape == (15, 225) and np.allclose(p @ p.T, np.eye(15), atol=1e-10)
    assert np.array_equal(p, srmd_pca_basis.__wrapped__(15, 15))  # recomputed: identical
    from data.datasets.kernel import srmd_kernel
    k = srmd_kernel(np.random.default_rng(123), 3).reshape(-1)
    assert np.linalg.norm(p.T @ (p @ k) - k) < 0.05 * np.linalg.norm(k)


def test_a_pca_matrix_file_replaces_the_computed_basis_and_a_wrong_one_is_named(tmp_path, demo_images):
    p = np.random.default_rng(0).standard_normal((15, 225))
    np.save(tmp_path / 'p.npy', p)
    assert np.array_equal(load_pca(str(tmp_path / 'p.npy'), 'x'), p)
    ds = _srmd(demo_images, 'test', pca_path=str(tmp_path / 'p.npy'))
    assert np.array_equal(ds.pca, p)
    np.save(tmp_path / 'bad.npy', p[:5])
    with pytest.raises(UserError, match=r'^datasets\.test\.pca_path: .*bad\.npy holds a 5x225 matrix'):
        _srmd(demo_images, 'test', pca_path=str(tmp_path / 'bad.npy'))
    with pytest.raises(UserError, match=r'^datasets\.test\.pca_path: file not found'):
        _srmd(demo_images, 'test', pca_path=str(tmp_path / 'missing.npy'))


def test_usrnet_trains_with_plain4_and_main_test_scores_its_checkpoint(tmp_path, demo_images):
    import json
    with open(os.path.join(os.path.dirname(__file__), '..', 'options', 'zoo', 'train_usrnet_tiny.json')) as f:
        text = f.read()
    opt = json.loads(text[text.index('{'):])
    opt['path']['root'] = str(tmp_path / 'exp')
    opt['datasets']['train']['dataroot_H'] = f'{demo_images}/train'
    opt['datasets']['test']['dataroot_H'] = f'{demo_images}/test'
    opt['netG'].update(n_iter=2, nc=[8, 16, 16, 16])
    opt['train'].update(total_iter=4, checkpoint_test=4, checkpoint_save=4, checkpoint_print=2)
    opt['logging']['use_tensorboard'] = False
    path = write_options(str(tmp_path / 'o.json'), opt)
    res = run_main('main_train', ['--opt', path])
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'validation on 8 items' in res.stdout
    test = run_main('main_test', ['--opt', path, '--no-images', '--out', str(tmp_path / 'out')])
    assert test.returncode == 0, test.stderr[-2000:]
    assert (tmp_path / 'out' / 'results.csv').read_text().count('\n') == 8 + 2
