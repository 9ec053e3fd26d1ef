"""KAIR's `jpeg` dataset: L is H after a JPEG round trip at the quality factor (SwinIR's CAR models)."""
import sys

import cv2
import numpy as np
import pytest

from conftest import dataset_options, run, tiny_options, write_options
from data.datasets.jpeg import DatasetJPEG
from data.degradations.jpeg import jpeg_roundtrip
from metrics.fidelity import rgb2y
from utils.errors import UserError
from utils.image import imread_uint, tensor2uint


def _ds(demo_images, phase='train', **kw):
    folder = f'{demo_images}/{"train" if phase == "train" else "test"}'
    return DatasetJPEG(dataset_options('jpeg', phase, dataroot_H=folder, H_size=32, **kw))


def test_the_jpeg_round_trip_is_opencvs_encode_and_decode(demo_images):
    img = imread_uint(f'{demo_images}/test/0000.png')
    ok, data = cv2.imencode('.jpg', cv2.cvtColor(img, cv2.COLOR_RGB2BGR), [int(cv2.IMWRITE_JPEG_QUALITY), 10])
    expected = cv2.cvtColor(cv2.imdecode(data, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    assert np.array_equal(jpeg_roundtrip(img, 10), expected)
    assert not np.array_equal(jpeg_roundtrip(img, 10), jpeg_roundtrip(img, 90))


def test_gray_evaluation_compresses_the_opencv_gray_image_at_the_test_quality(demo_images):
    item = _ds(demo_images, 'test', quality_factor_test=20)[1]
    H = tensor2uint(item['H'])
    assert item['H'].shape[0] == 1 and np.array_equal(H, imread_uint(item['H_path'], 1))
    assert np.array_equal(tensor2uint(item['L']), jpeg_roundtrip(H, 20))


def test_gray_training_patches_are_luma_or_gray_per_sample_and_follow_their_seed(demo_images):
    ds = _ds(demo_images, quality_factor=30)
    a, b = ds[(2, 11)], ds[(2, 11)]
    assert a['H'].shape == (1, 32, 32) and a['L'].shape == (1, 32, 32)
    assert np.array_equal(a['L'].numpy(), b['L'].numpy())
    H = tensor2uint(a['H'])
    assert np.array_equal(tensor2uint(a['L']), jpeg_roundtrip(H, 30))
    colour = _ds(demo_images, quality_factor=30, is_color=True)  # same crop and flips for the same key
    kinds = []
    for seed in range(24):
        H = tensor2uint(ds[(2, seed)]['H'])[:, :, 0]
        rgb = tensor2uint(colour[(2, seed)]['H'])
        luma, gray = np.round(rgb2y(rgb)).astype(np.uint8), cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
        assert not np.array_equal(luma, gray)
        kinds.append('luma' if np.array_equal(H, luma) else 'gray' if np.array_equal(H, gray) else 'neither')
    assert 'neither' not in kinds and 4 <= kinds.count('luma') <= 20, kinds  # each about half the time


def test_colour_restoration_keeps_three_channels(demo_images):
    item = _ds(demo_images, is_color=True)[(0, 3)]
    assert item['H'].shape == (3, 32, 32) and item['L'].shape == (3, 32, 32)


@pytest.mark.parametrize('key, value', [('quality_factor', 0), ('quality_factor_test', 101)])
def test_a_quality_outside_1_to_100_is_a_one_line_error(demo_images, key, value):
    with pytest.raises(UserError, match=rf'^<options>: datasets\.train\.{key}: {value} must be a JPEG quality from 1 '
                                        rf'to 100$'):
        _ds(demo_images, **{key: value})


@pytest.mark.parametrize('is_color, in_nc, says', [(False, 3, '1-channel gray images (is_color false)'),
                                                   (True, 1, '3-channel colour images (is_color true)')])
def test_a_network_that_does_not_fit_the_gray_or_colour_choice_is_one_line_naming_is_color(tmp_path, demo_images,
                                                                                          is_color, in_nc, says):
    """KAIR's jpeg files choose gray or colour with the top-level `is_color` (training reads colour images
    either way): the start-up line names that key, not n_channels, which these sections do not read."""
    opt = tiny_options(str(tmp_path / 'exp'), demo_images)
    opt['is_color'] = is_color
    opt['netG'].update(in_nc=in_nc, out_nc=in_nc)
    for phase, section in opt['datasets'].items():
        opt['datasets'][phase] = {'name': section['name'], 'dataset_type': 'jpeg', 'dataroot_H': section['dataroot_H'],
                                  **({'H_size': 24, 'dataloader_batch_size': 2, 'dataloader_num_workers': 0}
                                     if phase == 'train' else {})}
    res = run([sys.executable, 'main_train.py', '--opt', write_options(str(tmp_path / 'o.json'), opt)])
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr == (f"error: netG.in_nc: {in_nc}, but datasets.train gives {says}: netG's first layer takes "
                          f"{in_nc} channels and is given {4 - in_nc}\n"), res.stderr
    assert not (tmp_path / 'exp').exists()
