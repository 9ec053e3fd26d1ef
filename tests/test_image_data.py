import hashlib
import logging
import os
import random

import cv2
import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from conftest import ROOT, run_main, unchecked_section
from data.datasets.image import DatasetDnCNN, DatasetPlain, DatasetSR
from data.datasets.transforms import augment, paired_random_crop, random_crop
from data.loader import build_train_loader, build_val_loader
from data.registry import DATASETS
from data.synthetic.demo import COMPLETE_MARKER, ensure_demo_data
from utils.errors import UserError
from utils.image import (imread_uint, imresize_bicubic, imwrite, list_images, tensor2uint, to_float_image,
                         uint2tensor)
from utils.logger import get_logger


def _rand(shape, seed=0):
    return np.random.default_rng(seed).integers(0, 256, shape).astype(np.uint8)


def _write_folder(folder, count, shape=(40, 48, 3), seed=0):
    for i in range(count):
        imwrite(os.path.join(folder, f'{i:03d}.png'), _rand(shape, seed + i))
    return str(folder)


# ---- image I/O and conversion -------------------------------------------------------------------

def test_list_images_is_sorted_recursive_and_skips_other_files(tmp_path):
    for name in ('b.png', 'a.JPG', 'sub/c.bmp', 'notes.txt'):
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b'x')
    assert list_images(str(tmp_path)) == [str(tmp_path / 'a.JPG'), str(tmp_path / 'b.png'),
                                          str(tmp_path / 'sub/c.bmp')]


def test_imwrite_takes_rgb_and_imread_returns_rgb(tmp_path):
    img = np.zeros((4, 5, 3), np.uint8)
    img[..., 0] = 200  # red
    path = str(tmp_path / 'new/dir/red.png')
    imwrite(path, img)
    assert cv2.imread(path)[0, 0].tolist() == [0, 0, 200]  # on disk: BGR
    back = imread_uint(path)
    assert back.dtype == np.uint8 and back.shape == (4, 5, 3)
    np.testing.assert_array_equal(back, img)


def test_imread_gray_gives_one_channel_and_gray_files_expand_to_rgb(tmp_path):
    gray = _rand((6, 7, 1))
    path = str(tmp_path / 'g.png')
    imwrite(path, gray)
    np.testing.assert_array_equal(imread_uint(path, n_channels=1), gray)
    rgb = imread_uint(path, n_channels=3)
    assert rgb.shape == (6, 7, 3) and (rgb == gray).all()


def test_gray_reading_of_a_colour_file_is_opencvs_grayscale_decode_as_kair_reads_it(tmp_path):
    path = str(tmp_path / 'c.png')
    imwrite(path, _rand((40, 48, 3)))
    gray = imread_uint(path, 1)
    assert gray.shape == (40, 48, 1)
    assert np.array_equal(gray[:, :, 0], cv2.imread(path, cv2.IMREAD_GRAYSCALE))
    converted = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2GRAY)
    assert np.abs(gray[:, :, 0].astype(int) - converted).max() <= 1  # libpng's conversion, not cvtColor's


def test_gray_and_colour_reads_of_a_rotated_jpeg_have_the_same_size(tmp_path):
    """EXIF orientation is ignored in both modes, so the header checks' sizes hold for gray reads too."""
    from PIL import Image
    path = str(tmp_path / 'rotated.jpg')
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees on display
    Image.fromarray(_rand((40, 48, 3))).save(path, exif=exif.tobytes())
    assert cv2.imread(path, cv2.IMREAD_GRAYSCALE).shape == (48, 40)  # OpenCV's default would rotate
    assert imread_uint(path, 1).shape[:2] == imread_uint(path, 3).shape[:2] == (40, 48)


def test_imread_of_an_unreadable_file_is_a_user_error_naming_the_path(tmp_path):
    bad = tmp_path / 'broken.png'
    bad.write_bytes(b'not a png')
    with pytest.raises(UserError, match='broken.png'):
        imread_uint(str(bad))
    with pytest.raises(UserError, match='missing.png'):
        imread_uint(str(tmp_path / 'missing.png'))


def test_uint2tensor_and_tensor2uint_round_trip():
    img = _rand((5, 6, 3))
    t = uint2tensor(img)
    assert t.dtype == torch.float32 and t.shape == (3, 5, 6)
    assert float(t.max()) <= 1.0
    np.testing.assert_array_equal(tensor2uint(t), img)
    np.testing.assert_array_equal(tensor2uint(t[None]), img)


def test_tensor2uint_clamps_and_rounds_without_modifying_its_input():
    t = torch.tensor([-0.5, 0.4 / 255, 1.6 / 255, 2.0]).view(1, 1, 4)
    before = t.clone()
    assert tensor2uint(t)[0, :, 0].tolist() == [0, 0, 2, 255]
    assert torch.equal(t, before)


# ---- MATLAB bicubic ------------------------------------------------------------------------------

def test_imresize_output_size_is_ceil_of_scaled_size():
    img = np.zeros((96, 45, 3), np.uint8)
    assert imresize_bicubic(img, 1 / 3).shape == (32, 15, 3)
    assert imresize_bicubic(img, 1 / 4).shape == (24, 12, 3)
    assert imresize_bicubic(img[..., 0], 2).shape == (192, 90)


def test_imresize_keeps_constant_images_constant():
    img = np.full((30, 21, 3), 77, np.uint8)
    for scale in (1 / 2, 1 / 3, 1 / 4, 2):
        out = imresize_bicubic(img, scale)
        assert (out == 77).all()


def test_imresize_by_one_is_the_identity():
    img = _rand((9, 11, 3))
    np.testing.assert_array_equal(imresize_bicubic(img, 1), img)


def test_imresize_half_uses_matlab_antialiased_cubic_weights():
    # MATLAB imresize(x, 0.5) is, away from the borders, an 8-tap filter with these weights
    # (Keys cubic a=-0.5 stretched by 2 and halved: 0.5*cubic(d/2) at d = ±0.5, ±1.5, ±2.5, ±3.5)
    # evaluated at output o over inputs 2o-3 .. 2o+4.
    taps = np.array([-0.01171875, -0.03515625, 0.11328125, 0.43359375,
                     0.43359375, 0.11328125, -0.03515625, -0.01171875])
    x = np.random.default_rng(0).uniform(0, 1, (1, 40))
    out = imresize_bicubic(x, 0.5)[0]
    for o in range(2, 18):
        assert out[o] == pytest.approx(float(taps @ x[0, 2 * o - 3:2 * o + 5]), abs=1e-12)


def test_imresize_double_uses_matlab_cubic_weights():
    # Upscaling x2: output pixel centres fall at 1/4 and 3/4 between inputs.
    impulse = np.zeros((1, 16))
    impulse[0, 8] = 1.0
    out = imresize_bicubic(impulse, 2.0)[0]
    np.testing.assert_allclose(out[13:21], [-0.0234375, -0.0703125, 0.2265625, 0.8671875,
                                            0.8671875, 0.2265625, -0.0703125, -0.0234375], atol=1e-12)
    assert np.count_nonzero(np.abs(out) > 1e-15) == 8


def test_imresize_half_of_a_smooth_ramp_matches_area_averaging():
    # On a linear ramp, a symmetric normalised kernel centred between two pixels returns the mean
    # of those pixels, which is exactly what INTER_AREA's 2x2 average gives. So in float the
    # interior must agree to rounding error; only the 2-pixel border differs (mirror padding
    # breaks linearity there), and after uint8 rounding values may differ by at most 1 level.
    yy, xx = np.mgrid[0:64, 0:64]
    ramp = np.stack([xx * 2 + yy * 1.5 + 10, 200 - xx * 1.2, yy * 3.0], axis=2)
    ours = imresize_bicubic(ramp, 0.5)
    area = cv2.resize(ramp, (32, 32), interpolation=cv2.INTER_AREA)
    np.testing.assert_allclose(ours[2:-2, 2:-2], area[2:-2, 2:-2], atol=1e-9)
    assert np.abs(ours - area).max() < 0.5
    ours8 = imresize_bicubic(ramp.astype(np.uint8), 0.5).astype(int)
    area8 = cv2.resize(ramp.astype(np.uint8), (32, 32), interpolation=cv2.INTER_AREA).astype(int)
    assert np.abs(ours8 - area8).max() <= 1


# ---- transforms ----------------------------------------------------------------------------------

def test_paired_random_crop_keeps_gt_and_lq_aligned_for_all_images():
    # lq pixel (y, x) stores its own coordinates; gt pixel stores the coordinates of its lq pixel
    lq = np.stack(np.mgrid[0:20, 0:30], axis=2).astype(np.int32)
    gt = np.repeat(np.repeat(lq, 4, axis=0), 4, axis=1)
    gts, lqs = paired_random_crop([gt, gt + 1000], [lq, lq + 1000], 32, 4, random.Random(3))
    assert gts[0].shape == (32, 32, 2) and lqs[0].shape == (8, 8, 2)
    np.testing.assert_array_equal(gts[0][::4, ::4], lqs[0])
    np.testing.assert_array_equal(gts[1], gts[0] + 1000)
    np.testing.assert_array_equal(lqs[1], lqs[0] + 1000)


def test_paired_random_crop_is_determined_by_the_rng():
    gt = _rand((50, 60, 5))
    a = paired_random_crop([gt], [gt], 16, 1, random.Random(1))[0][0]
    b = paired_random_crop([gt], [gt], 16, 1, random.Random(1))[0][0]
    c = paired_random_crop([gt], [gt], 16, 1, random.Random(2))[0][0]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_paired_random_crop_rejects_small_images_and_scale_mismatch_naming_the_key():
    img = _rand((10, 10, 3))
    with pytest.raises(UserError, match=r'datasets\.train\.H_size.*smaller than the patch size 16'):
        paired_random_crop([img], [img], 16, 1, random.Random(0), where='datasets.train.H_size')
    with pytest.raises(UserError, match='not 2x the low-quality size'):
        paired_random_crop([_rand((20, 20, 3))], [img[:9]], 8, 2, random.Random(0))


def test_random_crop_cuts_the_same_window_from_every_image():
    a = _rand((30, 40, 1))
    out = random_crop([a, a.copy()], 12, random.Random(5))
    assert out[0].shape == (12, 12, 1)
    np.testing.assert_array_equal(out[0], out[1])


def test_augment_applies_one_transform_to_all_arrays_of_any_channel_count():
    base = _rand((6, 6, 1))
    many = np.repeat(base, 7, axis=2)
    seen = set()
    for seed in range(64):
        one, seven = augment([base, many], True, True, random.Random(seed))
        assert one.flags['C_CONTIGUOUS'] and seven.flags['C_CONTIGUOUS']
        np.testing.assert_array_equal(seven, np.repeat(one, 7, axis=2))
        seen.add(one.tobytes())
    assert len(seen) == 8  # all dihedral transforms occur


def test_augment_with_flags_off_is_the_identity():
    img = _rand((5, 7, 3))
    for seed in range(10):
        np.testing.assert_array_equal(augment([img], False, False, random.Random(seed))[0], img)


# ---- datasets ------------------------------------------------------------------------------------

def _opt(cls, **kw):
    return unchecked_section(cls, 'train', **kw)


def _test_opt(cls, **kw):
    """A `datasets.test` section: evaluation, so H_size does not constrain the images."""
    return unchecked_section(cls, 'test', **kw)


def test_dataset_types_are_registered():
    assert DATASETS.get('plain', '') is DatasetPlain and DATASETS.get('sr', '') is DatasetSR
    assert DATASETS.get('dncnn', '') is DatasetDnCNN and DATASETS.get('denoising', '') is DatasetDnCNN


def test_missing_or_empty_folder_is_a_user_error_naming_the_option(tmp_path):
    with pytest.raises(UserError, match=r'^datasets\.train\.dataroot_H: folder not found: .*nope'):
        DatasetDnCNN(_opt(DatasetDnCNN, dataroot_H=str(tmp_path / 'nope')))
    (tmp_path / 'empty').mkdir()
    with pytest.raises(UserError, match=r'^datasets\.train\.dataroot_H: no images'):
        DatasetDnCNN(_opt(DatasetDnCNN, dataroot_H=str(tmp_path / 'empty')))
    imwrite(str(tmp_path / 'one.png'), _rand((8, 8, 3)))  # an image where its folder belongs: said as it is
    with pytest.raises(UserError) as e:
        DatasetDnCNN(_opt(DatasetDnCNN, dataroot_H=str(tmp_path / 'one.png')))
    assert str(e.value) == (f'datasets.train.dataroot_H: {tmp_path}/one.png is a file, not a folder; give the folder '
                            f'that holds the data')


def test_paired_folders_must_have_the_same_number_of_images(tmp_path):
    h = _write_folder(tmp_path / 'H', 3)
    l = _write_folder(tmp_path / 'L', 2)
    with pytest.raises(UserError, match='dataroot_L: 2 images'):
        DatasetPlain(_opt(DatasetPlain, dataroot_H=h, dataroot_L=l))


def test_plain_dataset_train_crops_pairs_identically_and_eval_returns_whole_images(tmp_path):
    h = _write_folder(tmp_path / 'H', 2)
    l = str(tmp_path / 'L')
    for p in list_images(h):  # L == H so that alignment is visible
        imwrite(os.path.join(l, os.path.basename(p)), imread_uint(p))
    ds = DatasetPlain(_opt(DatasetPlain, dataroot_H=h, dataroot_L=l, H_size=16))
    item = ds[(1, 12345)]
    assert item['H'].shape == (3, 16, 16)
    assert torch.equal(item['H'], item['L'])
    assert item['H_path'].endswith('001.png') and item['L_path'].startswith(l)
    assert torch.equal(ds[(1, 12345)]['H'], item['H'])
    full = ds[0]
    assert full['H'].shape == (3, 40, 48) and full['L'].dtype == torch.uint8  # scaled where it is used


def test_dncnn_training_sample_is_a_function_of_its_seed(tmp_path):
    h = _write_folder(tmp_path / 'H', 2)
    ds = DatasetDnCNN(_opt(DatasetDnCNN, dataroot_H=h, H_size=24, sigma=25))
    a, b, c = ds[(0, 7)], ds[(0, 7)], ds[(0, 8)]
    assert a['L'].shape == a['H'].shape == (3, 24, 24)
    assert torch.equal(a['L'], b['L']) and torch.equal(a['H'], b['H'])
    assert not torch.equal(a['L'], c['L'])
    noise_std = float((a['L'] - to_float_image(a['H'])).std()) * 255  # H stays uint8: its float copy
    assert 22 < noise_std < 28


def test_dncnn_eval_noise_uses_sigma_test_and_is_fixed_per_index(tmp_path):
    h = _write_folder(tmp_path / 'H', 2, shape=(64, 64, 3))
    ds = DatasetDnCNN(_opt(DatasetDnCNN, dataroot_H=h, sigma=25, sigma_test=50))
    first, again, other = ds[0], ds[0], ds[1]
    assert first['H'].shape == (3, 64, 64)
    assert torch.equal(first['L'], again['L'])
    noise0, noise1 = first['L'] - to_float_image(first['H']), other['L'] - to_float_image(other['H'])
    assert not torch.allclose(noise0, noise1)
    assert 47 < float(noise0.std()) * 255 < 53


def test_dncnn_reads_a_fixed_noisy_set_when_dataroot_l_is_given(tmp_path):
    h = _write_folder(tmp_path / 'H', 2)
    l = _write_folder(tmp_path / 'L', 2, seed=100)
    ds = DatasetDnCNN(_test_opt(DatasetDnCNN, dataroot_H=h, dataroot_L=l))
    item = ds[1]
    np.testing.assert_array_equal(tensor2uint(item['L']), imread_uint(list_images(l)[1]))
    assert item['L_path'] == list_images(l)[1]


def test_dncnn_gray_images(tmp_path):
    h = _write_folder(tmp_path / 'H', 1, shape=(32, 32, 1))
    ds = DatasetDnCNN(_opt(DatasetDnCNN, dataroot_H=h, n_channels=1, H_size=16))
    assert ds[(0, 1)]['L'].shape == (1, 16, 16)


def test_sr_dataset_downscales_h_with_matlab_bicubic_kept_in_floating_point_as_kair_does(tmp_path):
    h = _write_folder(tmp_path / 'H', 1, shape=(42, 50, 3))
    ds = DatasetSR(_opt(DatasetSR, dataroot_H=h, scale=4, H_size=32))
    item = ds[0]
    assert item['H'].shape == (3, 40, 48)  # cropped to a multiple of the scale
    img_H = imread_uint(list_images(h)[0])[:40, :48]
    expected = imresize_bicubic(img_H / 255.0, 0.25).transpose(2, 0, 1)
    np.testing.assert_allclose(item['L'].numpy(), expected, atol=1e-6)
    assert (item['L'] * 255 - (item['L'] * 255).round()).abs().max() > 0.1  # not quantised
    train = ds[(0, 99)]
    assert train['H'].shape == (3, 32, 32) and train['L'].shape == (3, 8, 8)
    quantised = DatasetSR(_opt(DatasetSR, dataroot_H=h, scale=4, H_size=32, quantize_L=True))[0]
    np.testing.assert_array_equal(tensor2uint(quantised['L']), imresize_bicubic(img_H, 0.25))


def test_sr_training_patch_not_divisible_by_the_scale_is_refused_when_the_training_set_is_built(tmp_path):
    h = _write_folder(tmp_path / 'H', 1)
    with pytest.raises(UserError, match=r'^datasets\.train\.H_size: 32 is not divisible by scale 3$'):
        DatasetSR(_opt(DatasetSR, dataroot_H=h, scale=3, H_size=32))
    ds = DatasetSR(_test_opt(DatasetSR, dataroot_H=h, scale=3, H_size=32))
    assert ds[0]['L'].shape == (3, 13, 16)  # evaluation does not use H_size
    with pytest.raises(UserError, match=r'datasets\.test\.H_size: 32 is not divisible by scale 3'):
        ds[(0, 1)]                          # nor is a test set trained on without the loader's check


def test_training_images_smaller_than_the_patch_are_refused_when_the_training_set_is_built(tmp_path):
    h = _write_folder(tmp_path / 'H', 3, shape=(80, 80, 3))
    imwrite(os.path.join(h, '001.png'), _rand((20, 70, 3)))
    with pytest.raises(UserError) as e:
        DatasetDnCNN(_opt(DatasetDnCNN, dataroot_H=h, H_size=64))
    assert str(e.value) == (f'datasets.train.dataroot_H: {os.path.join(h, "001.png")}: 20x70 is smaller than '
                            f'the training patch (H_size 64)')
    ds = DatasetDnCNN(_test_opt(DatasetDnCNN, dataroot_H=h, H_size=64))
    with pytest.raises(UserError, match=r'datasets\.test\.H_size .*smaller than the patch size 64'):
        ds[(1, 1)]                          # the crop itself still refuses


# ---- loaders -------------------------------------------------------------------------------------

class _SeededDataset(Dataset):
    """Returns noise drawn from the sample seed, like the real datasets do."""

    def __len__(self) -> int:
        return 20

    def __getitem__(self, key):
        index, seed = key
        g = torch.Generator().manual_seed(seed)
        return {'x': torch.rand(3, generator=g), 'index': index}


def _loader_opt(**kw):
    opt = {'dataloader_batch_size': 3, 'dataloader_num_workers': 0, 'dataloader_shuffle': True,
           'dataloader_prefetch_factor': 2, 'dataloader_persistent_workers': False,
           '_where': 'datasets.train'}
    opt.update(kw)
    return opt


def _batches(num_workers, start=0):
    loader, sampler = build_train_loader(_SeededDataset(), _loader_opt(dataloader_num_workers=num_workers),
                                         world_size=2, rank=1, seed=11, device=torch.device('cpu'))
    sampler.set_epoch(1)
    sampler.set_start(start)
    return [(b['index'].tolist(), b['x']) for b in loader]


def test_train_batches_do_not_depend_on_the_number_of_workers():
    serial, parallel = _batches(0), _batches(2)
    assert len(serial) == 3  # 10 samples per rank, batch 3, drop_last
    assert [i for i, _ in serial] == [i for i, _ in parallel]
    for (_, a), (_, b) in zip(serial, parallel):
        assert torch.equal(a, b)


def test_resumed_loader_replays_the_rest_of_the_epoch_exactly():
    full, resumed = _batches(0), _batches(0, start=3)
    assert [i for i, _ in resumed] == [i for i, _ in full[1:]]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(resumed, full[1:]))


def test_iterating_the_train_loader_does_not_touch_the_global_rng():
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    _batches(0)
    assert torch.equal(torch.rand(1), expected)


def test_train_loader_rejects_a_shard_smaller_than_one_batch():
    with pytest.raises(UserError, match=r'dataloader_batch_size: each of the 4 process\(es\) gets 5 of the 20'):
        build_train_loader(_SeededDataset(), _loader_opt(dataloader_batch_size=8), world_size=4, rank=0,
                           seed=0, device=torch.device('cpu'))


def test_train_loader_runs_the_dataset_training_checks_up_front(tmp_path):
    h = _write_folder(tmp_path / 'H', 4)
    ds = DatasetSR(_test_opt(DatasetSR, dataroot_H=h, scale=3, H_size=32))
    with pytest.raises(UserError, match='not divisible by scale 3'):
        build_train_loader(ds, _loader_opt(dataloader_batch_size=1), 1, 0, 0, torch.device('cpu'))
    small = DatasetSR(_test_opt(DatasetSR, dataroot_H=h, scale=2, H_size=46))   # images are 40x48
    with pytest.raises(UserError, match=r'^datasets\.test\.H_size: 46 is larger than any training image allows'):
        build_train_loader(small, _loader_opt(dataloader_batch_size=1), 1, 0, 0, torch.device('cpu'))


def test_val_loader_shards_cover_every_sample_once():
    class Plain(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return i
    seen = [int(x) for rank in range(2) for x in build_val_loader(Plain(), 2, rank)]
    assert sorted(seen) == [0, 1, 2, 3, 4]


# ---- demo data -----------------------------------------------------------------------------------

def _digest(folder):
    h = hashlib.sha256()
    for p in list_images(folder):
        h.update(os.path.basename(p).encode())
        with open(p, 'rb') as f:
            h.update(f.read())
    return h.hexdigest()


def _demo(generator, phase, target):
    return unchecked_section(DatasetDnCNN, phase, generate_demo=generator, dataroot_H=target)


def test_demo_images_are_deterministic_and_sized_by_phase(tmp_path):
    demo = tmp_path / 'demo_data'
    a, b, v = str(demo / 'a'), str(demo / 'b'), str(demo / 'v')
    ensure_demo_data(_demo('images', 'train', a))
    ensure_demo_data(_demo('images', 'train', b))
    ensure_demo_data(_demo('images', 'test', v))
    assert len(list_images(a)) == 64 and len(list_images(v)) == 8
    assert _digest(a) == _digest(b)
    assert imread_uint(list_images(v)[0]).shape == (128, 128, 3)
    assert not np.array_equal(imread_uint(list_images(a)[0]), imread_uint(list_images(v)[0]))
    assert os.listdir(demo) and all('.tmp-' not in n for n in os.listdir(demo))


def test_demo_images_are_not_flat(tmp_path):
    target = str(tmp_path / 'demo_data' / 'v')
    ensure_demo_data(_demo('images', 'test', target))
    for p in list_images(target):
        img = imread_uint(p).astype(float)
        assert img.std() > 20
        assert np.abs(np.diff(img, axis=1)).max() > 50  # has edges


def test_complete_demo_folder_is_not_regenerated(tmp_path):
    target = str(tmp_path / 'demo_data' / 'v')
    opt = _demo('images', 'test', target)
    ensure_demo_data(opt)
    first = list_images(target)[0]
    os.remove(first)
    ensure_demo_data(opt)
    assert not os.path.exists(first)  # marker present -> left alone


def test_partial_temp_folder_of_a_killed_run_does_not_count_as_complete(tmp_path):
    target = str(tmp_path / 'demo_data' / 'v')
    stale = tmp_path / 'demo_data' / 'v.tmp-999999999-deadbeef'  # pid that cannot exist
    stale.mkdir(parents=True)
    imwrite(str(stale / '0000.png'), _rand((8, 8, 3)))
    ensure_demo_data(_demo('images', 'test', target))
    assert len(list_images(target)) == 8
    assert os.path.isfile(os.path.join(target, COMPLETE_MARKER))
    assert not stale.exists()  # cleaned up


def test_demo_refuses_to_overwrite_a_folder_that_is_not_a_finished_demo(tmp_path):
    target = tmp_path / 'demo_data' / 'mine'
    target.mkdir(parents=True)
    (target / 'photo.png').write_bytes(b'x')
    with pytest.raises(UserError, match='not a complete generated demo folder'):
        ensure_demo_data(_demo('images', 'test', str(target)))
    assert os.listdir(target) == ['photo.png']


def test_unknown_demo_generator_is_a_user_error_with_a_hint(tmp_path):
    with pytest.raises(UserError, match=r'datasets\.train\.generate_demo: unknown demo "image" \(did you mean "images"\?\)'):
        ensure_demo_data(_demo('image', 'train', str(tmp_path / 'demo_data' / 'train')))


def test_demo_images_train_a_dataset(tmp_path):
    target = str(tmp_path / 'demo_data' / 'v')
    ensure_demo_data(_demo('images', 'test', target))
    ds = DatasetDnCNN(_opt(DatasetDnCNN, dataroot_H=target, H_size=64))
    assert len(ds) == 8 and ds[(3, 5)]['L'].shape == (3, 64, 64)


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.mark.parametrize('root', ['mydata', 'demo_data_old', 'x/demo_dta', 'demo_data'],
                         ids=['other-folder', 'similar-name', 'typo', 'demo_data-itself'])
def test_demo_data_is_generated_only_inside_a_folder_named_demo_data_and_other_paths_are_read_as_they_are(
        tmp_path, root):
    target = tmp_path / root / 'train' if root != 'demo_data' else tmp_path / 'demo_data'
    lines = _Lines()
    get_logger().addHandler(lines)
    try:
        assert ensure_demo_data(_demo('images', 'train', str(target))) is False
    finally:
        get_logger().removeHandler(lines)
    assert not os.listdir(tmp_path)  # nothing written: the folder is the user's
    assert lines.lines == [f'datasets.train.generate_demo: "images" did not apply: datasets.train.dataroot_H '
                           f'{target} is not inside a folder named demo_data, so it is read as it is (demo data '
                           f'are generated only under demo_data/)']
    with pytest.raises(UserError, match=rf'^datasets\.train\.dataroot_H: folder not found: {target}$'):
        DatasetDnCNN(_opt(DatasetDnCNN, dataroot_H=str(target), H_size=64, generate_demo='images'))
    assert ensure_demo_data(_demo('images', 'train', str(tmp_path / 'a' / 'demo_data' / 'b' / 'train'))) is True


def test_generating_demo_data_is_one_log_line_saying_where_and_an_existing_set_says_nothing(tmp_path):
    """A typo inside demo_data/ (`demo_data/imges/train`) makes new data in the typo's folder: the line says
    where, so it is seen at the start of the run."""
    target = tmp_path / 'demo_data' / 'imges' / 'train'
    lines = _Lines()
    get_logger().addHandler(lines)
    get_logger().setLevel(logging.INFO)  # the autouse fixture puts the logger back after the test
    try:
        assert ensure_demo_data(_demo('images', 'train', str(target))) is True
        assert lines.lines == [f'datasets.train.dataroot_H: generate_demo wrote 64 files of synthetic demo data '
                               f'into {target}']
        ensure_demo_data(_demo('images', 'train', str(target)))  # complete already: nothing written, nothing said
        assert len(lines.lines) == 1
    finally:
        get_logger().removeHandler(lines)


def test_a_typo_in_the_data_path_of_a_copy_of_the_demo_file_is_folder_not_found_not_made_up_data(tmp_path,
                                                                                                  console_held):
    """`generate_demo` stays in the copy; the typo's folder is read as given, so the run stops at once."""
    with open(os.path.join(ROOT, 'options', 'train_dncnn_demo.json')) as f:
        text = f.read()
    assert text.count('"demo_data/images/train"') == 1
    opt = tmp_path / 'my_denoiser.json'
    opt.write_text(text.replace('"demo_data/images/train"', '"demo_dta/images/train"'))
    res = run_main('main_train', ['--opt', str(opt)], cwd=str(tmp_path))
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert res.stderr == 'error: datasets.train.dataroot_H: folder not found: demo_dta/images/train\n'
    assert res.stdout == ''  # the start-up lines (the generator's note among them) wait for the checks: one line
    assert sorted(os.listdir(tmp_path)) == ['demo_data', 'my_denoiser.json']  # the test set's demo images only
    assert os.listdir(tmp_path / 'demo_data' / 'images') == ['test']


def test_loader_workers_decode_with_one_opencv_thread_after_the_parent_used_opencvs_pool():
    """8 workers x one OpenCV thread per core would oversubscribe the cores; and setting the thread count
    inside a forked worker whose parent had used OpenCV's pool deadlocks (so it is set before the fork).
    In a subprocess, so that a regression is a failure after 120 s rather than a hung suite."""
    import subprocess
    import sys
    code = '''
import sys, cv2, numpy as np, torch
sys.path.insert(0, sys.argv[1])
from data.loader import build_train_loader, build_val_loader
class D(torch.utils.data.Dataset):
    def __len__(self): return 4
    def __getitem__(self, key): return torch.tensor(cv2.getNumThreads())
cv2.setNumThreads(2)
for _ in range(3): cv2.resize(np.random.rand(600, 600, 3).astype(np.float32), (300, 300), interpolation=cv2.INTER_CUBIC)
opt = {'dataloader_batch_size': 2, 'dataloader_num_workers': 2, 'dataloader_shuffle': False,
       'dataloader_prefetch_factor': 2, 'dataloader_persistent_workers': False, '_where': 'datasets.train'}
train, _ = build_train_loader(D(), opt, 1, 0, 0, torch.device('cpu'))
print(sorted(set(int(x) for b in train for x in b)), sorted(set(int(x) for x in build_val_loader(D(), 1, 0, 2))))
'''
    res = subprocess.run([sys.executable, '-c', code, ROOT], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == '[1] [1]'
