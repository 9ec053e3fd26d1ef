"""16-bit images end to end: 16-bit PNG/TIFF/PNM files read at full precision (gray and colour), kept by the
image datasets and the frame cache, trained as floats over 65535, scored on their own range (PSNR/SSIM against
independent computations), and written back as 16-bit PNGs by validation (`val.save_img`) and main_test;
8-bit data keep their 8-bit path."""
import csv
import math
import os
import sys

import cv2
import numpy as np
import pytest
import torch

from conftest import need_module, run_main, tiny_options, unchecked_section, write_options
from data.checks import image_depths
from data.datasets.image import DatasetDnCNN, DatasetPlain, DatasetSR
from data.sampler import TrainKey
from metrics.fidelity import calculate_psnr, calculate_ssim, rgb2y
from models.restorer import ImageRestorer
from utils.image import bit_depth, encode_image, images_to_float, imread_uint, imresize_bicubic, tensor2uint, to_uint8
from utils.image_header import header_bit_depth

PY = sys.executable


def _image16(h=40, w=48, c=3, seed=0):
    """A smooth 16-bit image whose low byte matters (values not multiples of 257)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(y * 1200 + x * 700 + k * 9000) % 60000 for k in range(c)], -1)
    return (base + rng.integers(0, 300, (h, w, c))).astype(np.uint16)


def _write(path, img):
    """RGB (or gray HxWx1) array to a file through OpenCV (BGR order on disk)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = img[:, :, 0] if img.shape[2] == 1 else cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
    assert cv2.imwrite(path, data)
    return path


# --- reading ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('ext', ['.png', '.tif', '.pgm'])
def test_a_16_bit_file_is_read_exactly_in_gray_and_colour(tmp_path, ext):
    channels = 1 if ext == '.pgm' else 3
    img = _image16(c=channels)
    path = _write(str(tmp_path / f'a{ext}'), img)
    assert header_bit_depth(path) == 16
    got = imread_uint(path, channels, keep_16bit=True)
    assert got.dtype == np.uint16 and np.array_equal(got, img)
    eight = imread_uint(path, channels)  # without keep_16bit: 8 bits, as before (gray: OpenCV's own conversion)
    assert eight.dtype == np.uint8 and (channels == 1 or np.array_equal(eight, to_uint8(img)))
    if channels == 3:  # gray read of a colour file: OpenCV's grayscale, at 16 bits
        gray = imread_uint(path, 1, keep_16bit=True)
        assert gray.dtype == np.uint16 and gray.shape == (40, 48, 1)
        expected = cv2.cvtColor(cv2.cvtColor(img, cv2.COLOR_RGB2BGR), cv2.COLOR_BGR2GRAY)
        assert np.abs(gray[:, :, 0].astype(int) - expected.astype(int)).max() <= 8  # libpng's integer conversion


def test_8_bit_files_stay_8_bit_and_the_headers_say_which_is_which(tmp_path):
    img8 = (_image16() // 257).astype(np.uint8)
    for ext in ('.png', '.tif', '.jpg', '.bmp'):
        path = _write(str(tmp_path / f'b{ext}'), img8)
        assert header_bit_depth(path) == 8
        assert imread_uint(path, 3, keep_16bit=True).dtype == np.uint8
    paths = [_write(str(tmp_path / 'c16.png'), _image16()), str(tmp_path / 'b.png')]
    assert image_depths(paths) == {paths[0]: 16, paths[1]: 8}


def test_16_bit_images_become_floats_over_65535_and_go_back_exactly():
    img = _image16()
    t = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))
    f = images_to_float({'H': t})['H']
    assert f.dtype == torch.float32 and torch.equal(f, t.float() / 65535.0)
    assert np.array_equal(tensor2uint(f, 16), img)  # every 16-bit value survives the float round trip
    assert bit_depth(t) == 16 and bit_depth(t.float(), None) == 8
    assert np.array_equal(tensor2uint(torch.ones(3, 2, 2), 16), np.full((2, 2, 3), 65535, np.uint16))
    assert np.array_equal(imresize_bicubic(img, 0.5), np.clip(np.round(imresize_bicubic(img.astype(np.float64), 0.5)),
                                                              0, 65535).astype(np.uint16))
    png = encode_image(img)
    assert np.array_equal(cv2.cvtColor(cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_UNCHANGED),
                                       cv2.COLOR_BGR2RGB), img)


# --- datasets --------------------------------------------------------------------------------------------------

def _folders(tmp_path, n=4, size=48, scale=1, channels=3):
    H = [_image16(size, size, channels, seed=i) for i in range(n)]
    for i, img in enumerate(H):
        _write(str(tmp_path / 'H' / f'{i:02d}.png'), img)
        L = imresize_bicubic(img, 1 / scale) if scale > 1 else (img // 2)
        _write(str(tmp_path / 'L' / f'{i:02d}.png'), L.reshape(L.shape[0], L.shape[1], -1))
    return H


@pytest.mark.parametrize('cache', [False, True])
def test_paired_16_bit_folders_give_uint16_items_cropped_from_the_files(tmp_path, cache):
    H = _folders(tmp_path, scale=2)
    opt = unchecked_section(DatasetPlain, 'train', dataroot_H=str(tmp_path / 'H'), dataroot_L=str(tmp_path / 'L'),
                            H_size=16, scale=2, cache_data=cache, use_rot=False, use_hflip=False)
    ds = DatasetPlain(opt)
    assert (ds.cache is not None) == cache
    item = ds[TrainKey(1, 77)]
    assert item['H'].dtype == item['L'].dtype == torch.uint16 and item['H'].shape == (3, 16, 16)
    h = item['H'].numpy().transpose(1, 2, 0)
    found = [(y, x) for y in range(0, 33, 2) for x in range(0, 33, 2) if np.array_equal(H[1][y:y + 16, x:x + 16], h)]
    assert len(found) == 1  # a crop of the file, every bit of it
    whole = DatasetPlain({**opt, 'phase': 'test', '_where': 'datasets.test'})[1]
    assert np.array_equal(whole['H'].numpy().transpose(1, 2, 0), H[1])


def test_dncnn_keeps_a_16_bit_h_and_adds_the_noise_to_its_float_copy(tmp_path):
    H = _folders(tmp_path)
    ds = DatasetDnCNN(unchecked_section(DatasetDnCNN, 'test', dataroot_H=str(tmp_path / 'H'), sigma=25,
                                        sigma_test=25))
    item = ds[2]
    assert item['H'].dtype == torch.uint16 and np.array_equal(item['H'].numpy().transpose(1, 2, 0), H[2])
    noise = item['L'] - item['H'].float() / 65535.0
    assert abs(noise.std().item() - 25 / 255) < 0.01


def test_sr_makes_its_bicubic_l_from_the_16_bit_values(tmp_path):
    H = _folders(tmp_path)
    opt = unchecked_section(DatasetSR, 'test', dataroot_H=str(tmp_path / 'H'), scale=2)
    item = DatasetSR(opt)[0]
    expected = imresize_bicubic(H[0].astype(np.float64) / 65535.0, 0.5).astype(np.float32)
    assert np.array_equal(item['L'].numpy().transpose(1, 2, 0), expected)
    quantized = DatasetSR({**opt, 'quantize_L': True})[0]['L']
    assert quantized.dtype == torch.uint16 and np.array_equal(quantized.numpy().transpose(1, 2, 0),
                                                             imresize_bicubic(H[0], 0.5))


def test_gray_16_bit_training_items(tmp_path):
    _folders(tmp_path, channels=1)
    ds = DatasetDnCNN(unchecked_section(DatasetDnCNN, 'train', dataroot_H=str(tmp_path / 'H'), n_channels=1,
                                        H_size=16, sigma=15))
    item = ds[TrainKey(0, 3)]
    assert item['H'].dtype == torch.uint16 and item['H'].shape == (1, 16, 16)


# --- scores ------------------------------------------------------------------------------------------------------

def test_psnr_of_16_bit_images_is_that_of_their_values_over_65535():
    a = _image16(seed=1)
    b = np.clip(a.astype(np.int64) + np.random.default_rng(2).integers(-40, 41, a.shape), 0, 65535).astype(np.uint16)
    mse = np.mean((a / 65535.0 - b / 65535.0) ** 2)
    assert calculate_psnr(a, b) == pytest.approx(10 * math.log10(1 / mse), abs=1e-9)
    assert abs(calculate_psnr(to_uint8(a), to_uint8(b)) - calculate_psnr(a, b)) > 5  # 8-bit rounding: another score
    ya, yb = rgb2y(a, 65535.0), rgb2y(b, 65535.0)
    assert np.allclose(ya, rgb2y(a.astype(np.float64) / 257.0) * 257.0)  # Y of 8-bit data, x 257
    assert calculate_psnr(a, b, test_y_channel=True) == pytest.approx(
        10 * math.log10(65535.0 ** 2 / np.mean((ya - yb) ** 2)), abs=1e-9)


def test_ssim_of_16_bit_images_is_pytorch_msssims_ssim_with_data_range_65535():
    pm = need_module('pytorch_msssim')
    a = _image16(64, 64, seed=3)
    noise = np.random.default_rng(4).integers(-3000, 3001, a.shape)
    b = np.clip(a.astype(np.int64) + noise, 0, 65535).astype(np.uint16)
    theirs = pm.ssim(torch.from_numpy(a.transpose(2, 0, 1)[None].astype(np.float64)),
                     torch.from_numpy(b.transpose(2, 0, 1)[None].astype(np.float64)), data_range=65535.0,
                     size_average=True).item()
    assert calculate_ssim(a, b) == pytest.approx(theirs, abs=1e-5)  # its window is float32
    assert calculate_ssim(a.astype(np.float64) / 257.0, b.astype(np.float64) / 257.0) == pytest.approx(
        calculate_ssim(a, b), abs=1e-9)  # the same images on the 8-bit scale: the same SSIM


def test_the_restorer_scores_and_returns_16_bit_frames_for_16_bit_items():
    img = _image16(32, 32)
    H = torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))[None]
    L = H.float() / 65535.0 + 1e-4
    restorer = ImageRestorer(torch.nn.Identity(), torch.device('cpu'), metric_border=0)
    (name, E, Hs), = restorer.restore({'L': L, 'H': H, 'L_path': ['x.png']})
    assert E[0].dtype == Hs[0].dtype == np.uint16 and np.array_equal(Hs[0], img)
    assert np.array_equal(E[0], np.round(np.clip(L[0].numpy().transpose(1, 2, 0), 0, 1) * 65535).astype(np.uint16))
    psnr = restorer.score(E, Hs)[0]
    assert 70 < psnr < 90  # 1e-4 is 6.6 levels of 65535 (an 8-bit frame would score it as identical)
    (_, E16, H16), = restorer.restore({'L': H, 'H': torch.from_numpy(to_uint8(img).transpose(2, 0, 1))[None]})
    assert E16[0].dtype == H16[0].dtype == np.uint16  # a 16-bit input file is enough
    assert np.array_equal(H16[0], to_uint8(img).astype(np.uint16) * 257)  # the 8-bit target, exactly, on 16 bits
    (_, E8, H8), = restorer.restore({'L': L, 'H': torch.from_numpy(to_uint8(img).transpose(2, 0, 1))[None]})
    assert E8[0].dtype == H8[0].dtype == np.uint8


# --- end to end: main_train validation images and main_test ---------------------------------------------------

def _read16(path):
    img = cv2.imread(path, cv2.IMREAD_UNCHANGED)
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB) if img.ndim == 3 else img


def test_a_16_bit_run_writes_16_bit_validation_images_and_main_test_scores_them_on_their_range(tmp_path):
    for phase, n in (('train', 8), ('test', 2)):
        for i in range(n):
            _write(str(tmp_path / 'data' / phase / f'{i:02d}.png'), _image16(48, 48, seed=10 * i + len(phase)))
    opt = tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'), total_iter=4, checkpoint_test=4,
                       checkpoint_save=4, checkpoint_print=2)
    opt['val'] = {'save_img': True}
    path = write_options(str(tmp_path / 'o.json'), opt)
    res = run_main('main_train', ['--opt', path])
    assert res.returncode == 0, res.stderr[-2000:]
    saved = _read16(str(tmp_path / 'exp' / 'tiny' / 'images' / '00' / '00_4.png'))
    assert saved.dtype == np.uint16 and saved.shape == (48, 48, 3)
    res = run_main('main_test', ['--opt', path, '--out', str(tmp_path / 'out')])
    assert res.returncode == 0, res.stderr[-2000:]
    rows = list(csv.reader(open(tmp_path / 'out' / 'results.csv')))
    for row in rows[1:-1]:
        E = _read16(str(tmp_path / 'out' / f'{row[0]}.png'))
        gt = _read16(str(tmp_path / 'data' / 'test' / f'{row[0]}.png'))
        assert E.dtype == np.uint16
        mse = np.mean((E / 65535.0 - gt / 65535.0) ** 2)
        assert float(row[1]) == pytest.approx(10 * math.log10(1 / mse), abs=1e-4)  # the table's 4 decimals


@pytest.mark.slow  # two runs; the restorer's 8-bit frames are tested alone above
def test_8_bit_data_still_write_8_bit_images(tmp_path, demo_images):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=2, checkpoint_test=2, checkpoint_save=2)
    path = write_options(str(tmp_path / 'o.json'), opt)
    assert run_main('main_train', ['--opt', path]).returncode == 0
    assert run_main('main_test', ['--opt', path, '--out', str(tmp_path / 'out')]).returncode == 0
    assert cv2.imread(str(tmp_path / 'out' / '0000.png'), cv2.IMREAD_UNCHANGED).dtype == np.uint8
