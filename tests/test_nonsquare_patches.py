"""Training patches of [height, width] (data/patches.py): `H_size`, `gt_size` and `lq_patchsize` take a pair as well
as one integer; crops, scale checks, flips and batches follow, and a pair trains end to end.

The end-to-end runs train with a loss registered here that records the shapes it is given, so what the network
was trained on is checked, not only what a dataset returns.
"""
import os
import random

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import default_collate

from conftest import ROOT, clean_env, dataset_options, run_main, tiny_options, write_options
from data.datasets.transforms import augment
from data.patches import MIN_INPUT_SIDE, divided, fits, indivisible, patch_hw, times
from data.registry import build_dataset
from losses.registry import LOSSES
from option_rules import read_options
from utils.errors import OptionsError, UserError

SEEN = []  # shapes (output, target) the probe loss was called with


@LOSSES.register('test_shape_probe')
class ShapeProbe(nn.Module):
    """L1 that records the shapes of what it compares (`G_lossfn_type: "test_shape_probe"`)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        SEEN.append((tuple(x.shape), tuple(y.shape)))
        return (x - y).abs().mean()


def _trained_shapes(path, *sets):
    SEEN.clear()
    res = run_main('main_train', ['--opt', path, *[a for s in sets for a in ('--set', s)]],
                   env=clean_env(OMP_NUM_THREADS='1'))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return set(SEEN), res


def _sr_options(tmp_path, demo_images, **train_section):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=2, checkpoint_test=2, checkpoint_save=2,
                       G_scheduler_milestones=[], G_lossfn_type='test_shape_probe')
    opt['scale'] = 2
    opt['datasets']['train'].update(dataset_type='sr', scale=2, **train_section)
    del opt['datasets']['train']['sigma']
    opt['datasets']['test'] = {'name': 'test', 'dataset_type': 'sr', 'scale': 2,
                               'dataroot_H': os.path.join(demo_images, 'test')}
    opt['netG'] = {'net_type': 'imdn', 'in_nc': 3, 'out_nc': 3, 'nc': 8, 'nb': 1, 'upscale': 2}
    opt['logging']['use_tensorboard'] = False
    return write_options(str(tmp_path / 'o.json'), opt)


def test_the_patch_helpers_keep_the_form_given():
    assert patch_hw(24) == (24, 24) and patch_hw([16, 40]) == (16, 40)
    assert divided(24, 2) == 12 and divided([16, 40], 2) == [8, 20] and times([8, 20], 4) == [32, 80]
    assert not indivisible([16, 40], 2) and indivisible([16, 30], 4) and indivisible(30, 4)
    assert fits((16, 40), [16, 40]) and not fits((40, 16), [16, 40])


def test_an_image_dataset_trains_end_to_end_on_height_by_width_patches(tmp_path, demo_images):
    shapes, _ = _trained_shapes(_sr_options(tmp_path, demo_images, H_size=[16, 40]))
    # the x2 network's output and its target (L was 8x20): batches of 4, and the start-up check's one sample
    assert shapes == {((4, 3, 16, 40), (4, 3, 16, 40)), ((1, 3, 16, 40), (1, 3, 16, 40))}


def test_a_video_dataset_trains_end_to_end_on_height_by_width_patches(tmp_path):
    path = os.path.join(ROOT, 'options', 'basicvsr', 'train_BasicVSR_tiny.json')
    shapes, _ = _trained_shapes(path, 'datasets.train.gt_size=[136,160]', 'datasets.train.dataloader_batch_size=2',
                                'train.G_lossfn_type="test_shape_probe"', 'train.total_iter=2', 'train.checkpoint_test=2',
                                'train.checkpoint_save=2', f'path.root={tmp_path / "exp"}', 'logging.use_tensorboard=false',
                                'logging.curves=false')
    # (batch, frames, C, H, W), L was 34x40: batches of 2, and the start-up check's one sample
    assert shapes == {((2, 3, 3, 136, 160), (2, 3, 3, 136, 160)), ((1, 3, 3, 136, 160), (1, 3, 3, 136, 160))}


@pytest.mark.parametrize('key, value, message', [
    ('H_size', '[64,0]', 'datasets.train.H_size: [64, 0] must be [height, width], two integers >= 1'),
    ('H_size', '[64,32,8]', 'datasets.train.H_size: [64, 32, 8] must be [height, width], two integers >= 1'),
    ('H_size', '[64,-8]', 'datasets.train.H_size: [64, -8] must be [height, width], two integers >= 1'),
    ('H_size', '[16,41]', 'datasets.train.H_size: [16, 41] is not divisible by scale 2'),
])
def test_a_bad_pair_is_one_line_naming_the_key(tmp_path, demo_images, key, value, message):
    path = _sr_options(tmp_path, demo_images)
    res = run_main('main_train', ['--opt', path, '--set', f'datasets.train.{key}={value}'])
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert not os.path.exists(tmp_path / 'exp' / 'tiny')  # nothing written


def test_a_video_gt_size_pair_not_divisible_by_the_scale_is_one_line_naming_the_key(tmp_path):
    path = os.path.join(ROOT, 'options', 'basicvsr', 'train_BasicVSR_tiny.json')
    res = run_main('main_train', ['--opt', path, '--set', 'datasets.train.gt_size=[64,66]',
                                  '--set', f'path.root={tmp_path / "exp"}'])
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == ['error: datasets.train.gt_size: [64, 66] is not divisible by scale 4']


def test_a_square_pair_gives_the_items_of_the_integer(demo_images):
    for dataset_type, extra in (('sr', {'scale': 2}), ('dncnn', {}), ('plain', {'dataroot_L': f'{demo_images}/train'})):
        one = build_dataset(dataset_options(dataset_type, dataroot_H=f'{demo_images}/train', H_size=24, **extra))
        two = build_dataset(dataset_options(dataset_type, dataroot_H=f'{demo_images}/train', H_size=[24, 24], **extra))
        for seed in range(8):
            a, b = one[(seed % len(one), seed)], two[(seed % len(two), seed)]
            assert torch.equal(a['H'], b['H']) and torch.equal(a['L'], b['L']), (dataset_type, seed)


def test_a_wide_patch_is_flipped_but_never_rotated_and_batches_have_one_shape(demo_images):
    ds = build_dataset(dataset_options('sr', dataroot_H=f'{demo_images}/train', H_size=[16, 40], scale=2,
                                       use_rot=True))
    items = [ds[(seed % len(ds), seed)] for seed in range(24)]
    assert {tuple(i['H'].shape) for i in items} == {(3, 16, 40)}
    assert {tuple(i['L'].shape) for i in items} == {(3, 8, 20)}
    batch = default_collate(items[:4])
    assert batch['H'].shape == (4, 3, 16, 40) and batch['L'].shape == (4, 3, 8, 20)
    cached = build_dataset(dataset_options('sr', dataroot_H=f'{demo_images}/train', H_size=[16, 40], scale=2,
                                           cache_data=True))  # whole frames cached, cropped as they are read
    assert all(torch.equal(cached[(seed % len(ds), seed)]['H'], item['H']) for seed, item in enumerate(items))


def test_a_wide_patch_ends_as_one_of_its_four_flips_and_the_draws_do_not_depend_on_its_shape():
    wide, square = np.arange(2 * 6).reshape(2, 6, 1), np.arange(16).reshape(4, 4, 1)
    rotated = 0
    for seed in range(32):
        rng_wide, rng_square = random.Random(seed), random.Random(seed)
        (w,) = augment([wide], True, True, rng_wide)
        (s,) = augment([square], True, True, rng_square)
        assert rng_wide.random() == rng_square.random()  # three numbers drawn either way: later draws unchanged
        assert any(np.array_equal(w, f) for f in (wide, wide[::-1], wide[:, ::-1], wide[::-1, ::-1]))
        rotated += int(not any(np.array_equal(s, f) for f in (square, square[::-1], square[:, ::-1],
                                                              square[::-1, ::-1])))
    assert rotated, 'the square patch was never rotated: the draws that rotate it were never made'


def test_an_input_patch_under_eight_pixels_a_side_trains_with_one_warning_line(tmp_path, demo_images):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=1, checkpoint_test=1, checkpoint_save=1,
                       G_scheduler_milestones=[])
    opt['logging']['use_tensorboard'] = False
    path = write_options(str(tmp_path / 'o.json'), opt)
    warned = {}
    for size in (1, 8):
        res = run_main('main_train', ['--opt', path, '--set', f'datasets.train.H_size={size}', '--set', f'task=t{size}'],
                       env=clean_env(OMP_NUM_THREADS='1'))
        assert res.returncode == 0, res.stderr[-3000:]
        warned[size] = [line for line in (res.stdout + res.stderr).splitlines() if 'datasets.train.H_size' in line]
    assert len(warned[1]) == 1 and warned[8] == [], warned  # 8 is enough
    assert f'WARNING: datasets.train.H_size: 1 makes 1x1 input patches, under {MIN_INPUT_SIDE} pixels a side' \
        in warned[1][0]


def test_the_input_patch_of_a_scaled_dataset_is_what_the_warning_measures(demo_images, caplog):
    with caplog.at_level('WARNING', logger='restoration'):
        build_dataset(dataset_options('sr', dataroot_H=f'{demo_images}/train', H_size=[32, 16], scale=4))
    assert [r.getMessage() for r in caplog.records] == [
        'datasets.train.H_size: [32, 16] / scale 4 makes 8x4 input patches, under 8 pixels a side: a 3x3 convolution '
        'there sees mostly the zero padding at the border, so the network learns little (KAIR and BasicSR train on '
        '40 to 192 pixels)']


def test_the_options_keep_the_pair_as_written(tmp_path, demo_images):
    opt = read_options(_sr_options(tmp_path, demo_images, H_size=[16, 40]))
    assert opt['datasets']['train']['H_size'] == [16, 40]
    with pytest.raises(OptionsError, match=r'datasets\.train\.H_size: expected an integer or a list, got 16.5'):
        read_options(_sr_options(tmp_path, demo_images, H_size=16.5))
    with pytest.raises(UserError, match=r'^datasets\.train\.H_size: \[16, 4000\] is larger than any training image '
                                        r'allows: every image of .* is smaller than the patch$'):
        build_dataset(dataset_options('dncnn', dataroot_H=f'{demo_images}/train', H_size=[16, 4000]))
