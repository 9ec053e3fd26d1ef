"""Start-up data checks: every file's header and size, and the dataset option values, when a dataset is built.

Bad files are reported together, one line per file (`<datasets.phase.key>: <file>: <problem>`), before
anything is trained or written; option values name `datasets.<phase>.<key>` in one line.
"""
import math
import os
import shutil
import struct
import zlib

import cv2
import numpy as np
import pytest

from data import checks
from data.datasets.image import DatasetDnCNN, DatasetPlain, DatasetSR
from data.registry import build_dataset
from tests.conftest import dataset_options, run_main, tiny_options, unchecked_section, write_options
from utils.errors import UserError
from utils.image import imread_uint, imwrite, list_images
from utils.image_header import ImageFileError, decode_limit_problem, read_image_size



def _rand(shape, seed=0):
    return np.random.default_rng(seed).integers(0, 256, shape).astype(np.uint8)


def _folder(folder, count, shape=(40, 48, 3), ext='.png'):
    for i in range(count):
        imwrite(os.path.join(folder, f'{i:03d}{ext}'), _rand(shape, i))
    return str(folder)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data) & 0xFFFFFFFF)


def oversized_png(path, height=40000, width=40000):
    """A PNG whose header says height x width (more pixels than OpenCV decodes); no pixel data."""
    ihdr = struct.pack('>IIBBBBB', width, height, 1, 0, 0, 0, 0)
    with open(path, 'wb') as f:
        f.write(b'\x89PNG\r\n\x1a\n' + _png_chunk(b'IHDR', ihdr) + _png_chunk(b'IDAT', b'') + _png_chunk(b'IEND', b''))
    return str(path)


def _opt(cls, phase='train', **kw):
    return unchecked_section(cls, phase, **kw)


def _error(fn, *args):
    with pytest.raises(UserError) as e:
        fn(*args)
    return str(e.value)


# ---- image headers ---------------------------------------------------------------------------------

@pytest.mark.parametrize('ext,params', [('.png', []), ('.jpg', []), ('.jpg', [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]),
                                        ('.bmp', []), ('.ppm', []), ('.pgm', []), ('.tif', []),
                                        ('.webp', []), ('.webp', [cv2.IMWRITE_WEBP_QUALITY, 101])])
def test_header_size_is_the_decoded_size_in_every_listed_format(tmp_path, ext, params):
    for shape in [(37, 53, 3), (1, 1, 3), (300, 21, 3)]:
        img = _rand(shape)[..., 0] if ext == '.pgm' else _rand(shape)
        path = str(tmp_path / f'{shape[0]}x{shape[1]}{ext}')
        assert cv2.imwrite(path, img, params)
        assert read_image_size(path) == imread_uint(path).shape[:2] == shape[:2]


def test_sixteen_bit_images_pass_and_float_tiffs_are_refused_from_the_header(tmp_path):
    cv2.imwrite(str(tmp_path / 'a.png'), _rand((9, 7, 3)).astype(np.uint16) * 257)
    assert read_image_size(str(tmp_path / 'a.png')) == (9, 7)
    cv2.imwrite(str(tmp_path / 'f.tif'), np.zeros((9, 7, 3), np.float32))
    with pytest.raises(ImageFileError, match='floating-point TIFF samples are not supported'):
        read_image_size(str(tmp_path / 'f.tif'))
    with pytest.raises(UserError, match=r'f\.tif: float32 samples are not supported'):
        imread_uint(str(tmp_path / 'f.tif'))      # was a TypeError traceback


def test_damaged_headers_name_the_problem(tmp_path):
    good_png = cv2.imencode('.png', _rand((20, 20, 3)))[1].tobytes()
    good_jpg = cv2.imencode('.jpg', _rand((20, 20, 3)))[1].tobytes()
    cases = {'empty.png': (b'', 'empty file'),
             'text.png': (b'not an image at all', 'not an image'),
             'cut.png': (good_png[:len(good_png) // 2], 'truncated PNG: no IEND chunk'),
             'cut.jpg': (good_jpg[:-3], 'truncated JPEG: no end-of-image marker'),
             'head.jpg': (good_jpg[:12], 'truncated JPEG: no frame header')}
    for name, (data, problem) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ImageFileError, match=problem):
            read_image_size(str(tmp_path / name))
        with pytest.raises(UserError):
            imread_uint(str(tmp_path / name))    # what the check predicts: reading it would fail
    (tmp_path / 'tail.png').write_bytes(good_png + b'trailing bytes')   # decoders ignore them
    assert read_image_size(str(tmp_path / 'tail.png')) == (20, 20) == imread_uint(str(tmp_path / 'tail.png')).shape[:2]


def test_oversized_png_is_a_one_line_user_error_naming_the_file_not_a_cv2_error(tmp_path):
    path = oversized_png(tmp_path / 'huge.png')
    assert read_image_size(path) == (40000, 40000)
    with pytest.raises(UserError) as e:
        imread_uint(path)
    assert str(e.value) == (f'cannot decode image {path}: 40000x40000 = 1,600,000,000 pixels is more than OpenCV '
                            f'decodes (1,073,741,824; OPENCV_IO_MAX_IMAGE_PIXELS)')


def test_opencv_limits_follow_its_environment_variables(monkeypatch):
    assert decode_limit_problem(32768, 32768) is None                   # exactly 1 << 30 pixels
    assert 'more than OpenCV decodes' in decode_limit_problem(32768, 32769)
    assert 'wider than OpenCV decodes' in decode_limit_problem(1, (1 << 20) + 1)
    monkeypatch.setenv('OPENCV_IO_MAX_IMAGE_PIXELS', '100')
    assert decode_limit_problem(10, 10) is None and 'more than OpenCV' in decode_limit_problem(10, 11)
    monkeypatch.setenv('OPENCV_IO_MAX_IMAGE_PIXELS', '2MB')
    assert decode_limit_problem(1024, 2048) is None and decode_limit_problem(1024, 2049)


# ---- image datasets: files ---------------------------------------------------------------------------

def test_every_bad_file_gets_one_line_in_a_single_error_when_the_dataset_is_built(tmp_path):
    h = _folder(tmp_path / 'H', 6)
    (tmp_path / 'H' / '001.png').write_bytes(b'')
    (tmp_path / 'H' / '003.png').write_bytes(open(os.path.join(h, '002.png'), 'rb').read()[:100])
    oversized_png(tmp_path / 'H' / '004.png')
    imwrite(os.path.join(h, '005.png'), _rand((20, 90, 3)))
    message = _error(DatasetDnCNN, _opt(DatasetDnCNN, dataroot_H=h, H_size=24))
    assert message.splitlines() == [
        f'datasets.train.dataroot_H: {h}/001.png: empty file',
        f'datasets.train.dataroot_H: {h}/003.png: truncated PNG: no IEND chunk at the end of the file',
        f'datasets.train.dataroot_H: {h}/004.png: 40000x40000 = 1,600,000,000 pixels is more than OpenCV decodes '
        f'(1,073,741,824; OPENCV_IO_MAX_IMAGE_PIXELS)',
        f'datasets.train.dataroot_H: {h}/005.png: 20x90 is smaller than the training patch (H_size 24)',
    ]


def test_the_start_up_check_reads_headers_only(tmp_path, monkeypatch):
    h = _folder(tmp_path / 'H', 3)
    _folder(tmp_path / 'H', 3, ext='.jpg')

    def no_decoding(*args, **kwargs):
        raise AssertionError('the start-up check decoded an image')
    monkeypatch.setattr(cv2, 'imdecode', no_decoding)
    monkeypatch.setattr(cv2, 'imread', no_decoding)
    monkeypatch.setattr(np, 'fromfile', no_decoding)
    assert len(DatasetDnCNN(_opt(DatasetDnCNN, dataroot_H=h, H_size=24))) == 6


def test_test_image_too_small_for_ssim_is_refused_at_start_up_and_by_the_metric(tmp_path):
    h = _folder(tmp_path / 'H', 3, shape=(16, 16, 3))
    imwrite(os.path.join(h, '001.png'), _rand((1, 1, 3)))
    message = _error(DatasetDnCNN, _opt(DatasetDnCNN, 'test', dataroot_H=h))
    assert message == f'datasets.test.dataroot_H: {h}/001.png: 1x1 is too small to evaluate: SSIM needs at least 11x11'
    message = _error(DatasetDnCNN, _opt(DatasetDnCNN, 'test', dataroot_H=h, metric_border=1))
    assert message == (f'datasets.test.dataroot_H: {h}/001.png: 1x1 is too small to evaluate: SSIM needs 11x11 '
                       f'after cropping the 1-pixel metric border, i.e. at least 13x13')
    from metrics.fidelity import calculate_ssim
    with pytest.raises(UserError, match=r'^cannot score a 1x1 image with SSIM: .*at least 13x13$'):
        calculate_ssim(_rand((1, 1, 3)), _rand((1, 1, 3)), crop_border=1)


def test_sr_test_images_are_checked_at_their_evaluated_size_with_the_scale_border(tmp_path):
    h = _folder(tmp_path / 'H', 3, shape=(16, 16, 3))
    imwrite(os.path.join(h, '000.png'), _rand((15, 40, 3)))   # evaluated as 14x40: 14 < 11 + 2*2
    imwrite(os.path.join(h, '001.png'), _rand((1, 9, 3)))     # nothing left after the crop to the scale
    message = _error(DatasetSR, _opt(DatasetSR, 'test', dataroot_H=h, scale=2))
    assert message.splitlines() == [
        f'datasets.test.dataroot_H: {h}/000.png: 15x40 (evaluated as 14x40) is too small to evaluate: SSIM needs '
        f'11x11 after cropping the 2-pixel metric border, i.e. at least 15x15',
        f'datasets.test.dataroot_H: {h}/001.png: 1x9 is smaller than the scale 2',
    ]


def test_paired_folders_are_checked_against_the_scale_and_the_patch(tmp_path):
    h, l = _folder(tmp_path / 'H', 3, shape=(64, 64, 3)), _folder(tmp_path / 'L', 3, shape=(32, 32, 3))
    imwrite(os.path.join(h, '001.png'), _rand((65, 64, 3)))   # one extra row: fine for evaluation only
    imwrite(os.path.join(h, '002.png'), _rand((40, 40, 3)))
    imwrite(os.path.join(l, '002.png'), _rand((20, 20, 3)))   # low-quality side smaller than 48 / 2
    message = _error(DatasetSR, _opt(DatasetSR, dataroot_H=h, dataroot_L=l, scale=2, H_size=48))
    assert message.splitlines() == [
        f'datasets.train.dataroot_H: {h}/001.png: 65x64 but its low-quality image {l}/001.png is 32x32; for '
        f'training an image must be exactly 2x the size of its low-quality image (scale 2)',
        f'datasets.train.dataroot_L: {l}/002.png: 20x20 is smaller than the training patch (H_size 48 / scale 2 = 24)',
    ]
    assert len(DatasetSR(_opt(DatasetSR, 'test', dataroot_H=h, dataroot_L=l, scale=2))) == 3
    imwrite(os.path.join(h, '000.png'), _rand((30, 64, 3)))
    message = _error(DatasetPlain, _opt(DatasetPlain, 'test', dataroot_H=h, dataroot_L=l, scale=2))
    assert message == (f'datasets.test.dataroot_H: {h}/000.png: 30x64 does not match its low-quality image '
                       f'{l}/000.png (32x32): with scale 2 it must be 64x64 (up to 1 more rows/columns)')


@pytest.mark.parametrize('phase', ['train', 'test'])
def test_every_pair_off_by_the_same_factor_is_one_line_naming_scale(tmp_path, phase):
    h, l = _folder(tmp_path / 'H', 5, shape=(64, 64, 3)), _folder(tmp_path / 'L', 5, shape=(16, 16, 3))
    message = _error(DatasetSR, _opt(DatasetSR, phase, dataroot_H=h, dataroot_L=l, scale=2, H_size=32))
    assert message == (f'scale: 2, but every image of datasets.{phase} is 4x its low-quality one (e.g. {h}/000.png '
                       f'64x64, {l}/000.png 16x16); set "scale": 4, or give the x2 low-quality folder')
    imwrite(os.path.join(l, '003.png'), _rand((32, 32, 3)))   # one pair at the scale: odd files, listed one by one
    assert len(_error(DatasetSR, _opt(DatasetSR, phase, dataroot_H=h, dataroot_L=l, scale=2,
                                      H_size=32)).splitlines()) == 4


def test_a_patch_larger_than_every_training_image_is_one_line_naming_h_size(tmp_path):
    h = _folder(tmp_path / 'H', 30, shape=(40, 48, 3))
    message = _error(DatasetDnCNN, _opt(DatasetDnCNN, dataroot_H=h, H_size=64))
    assert message == (f'datasets.train.H_size: 64 is larger than any training image allows (at most 40): every '
                       f'image of {h} is smaller than the patch')


def test_many_bad_files_are_listed_up_to_a_limit(tmp_path):
    h = _folder(tmp_path / 'H', checks.MAX_LINES + 7)
    for path in list_images(h)[1:]:
        open(path, 'wb').close()
    lines = _error(DatasetDnCNN, _opt(DatasetDnCNN, dataroot_H=h, H_size=24)).splitlines()
    assert len(lines) == checks.MAX_LINES + 1 and all(line.endswith(': empty file') for line in lines[:-1])
    assert lines[-1] == f'... and 6 more bad files (the first {checks.MAX_LINES} are listed)'


def test_the_check_runs_wherever_a_dataset_is_built(tmp_path):
    h = _folder(tmp_path / 'H', 2)
    open(os.path.join(h, '001.png'), 'wb').close()
    with pytest.raises(UserError, match='001.png: empty file'):
        build_dataset(_opt(DatasetSR, 'test', dataset_type='sr', dataroot_H=h))


def test_header_reads_go_to_threads_only_when_the_file_system_is_slow():
    import threading
    import time

    def where(path):
        return threading.current_thread().name

    def slow(path):                  # a network file system: every open waits
        time.sleep(0.002)
        return where(path), path
    paths = [str(i) for i in range(300)]
    assert set(checks.parallel_map(where, paths)) == {'MainThread'}
    out = checks.parallel_map(slow, paths)
    assert [p for _, p in out] == paths                                  # order kept
    assert {name for name, _ in out[checks.PROBE:]} != {'MainThread'}


# ---- option values ------------------------------------------------------------------------------------

@pytest.mark.parametrize('dataset_type,phase,over,message', [
    ('dncnn', 'train', {'H_size': 0}, 'datasets.train.H_size: 0 must be >= 1'),
    ('dncnn', 'test', {'H_size': -5}, 'datasets.test.H_size: -5 must be >= 1'),
    ('dncnn', 'train', {'sigma': -1}, 'datasets.train.sigma: -1 must be >= 0 (noise std on the 0..255 scale)'),
    ('dncnn', 'test', {'sigma_test': -2.5}, 'datasets.test.sigma_test: -2.5 must be >= 0 (noise std on the 0..255 '
                                            'scale)'),
    ('dncnn', 'train', {'sigma': math.nan}, 'datasets.train.sigma: NaN is not allowed: numbers must be finite'),
    ('sr', 'train', {'scale': 0}, 'scale: 0 must be > 0'),  # the top-level scale, which the section takes
    ('blindsr', 'train', {'lq_patchsize': 0}, 'datasets.train.lq_patchsize: 0 must be >= 1'),
    ('plain', 'train', {'n_channels': 2, 'dataroot_L': '.'}, 'datasets.train.n_channels: 2 must be one of 1, 3'),
    ('plain', 'test', {'use_rot': 'yes', 'dataroot_L': '.'}, 'datasets.test.use_rot: expected true/false, got "yes"'),
])
def test_dataset_option_values_are_one_line_errors_with_the_options(tmp_path, dataset_type, phase, over, message):
    with pytest.raises(UserError) as e:
        dataset_options(dataset_type, phase, dataroot_H=str(tmp_path), **over)
    assert str(e.value) == f'<options>: {message}'


def test_options_relating_two_keys_are_one_line_errors_at_construction(tmp_path):
    h = _folder(tmp_path / 'H', 2, shape=(96, 96, 3))
    assert _error(DatasetSR, _opt(DatasetSR, dataroot_H=h, scale=3, H_size=32)) == \
        'datasets.train.H_size: 32 is not divisible by scale 3'


@pytest.mark.parametrize('key, value', [('dataloader_prefetch_factor', 0), ('dataloader_batch_size', 0),
                                        ('dataloader_num_workers', -1)])
def test_loader_values_out_of_range_are_refused_with_the_options(tmp_path, key, value):
    with pytest.raises(UserError, match=rf'^<options>: datasets\.train\.{key}: {value} must be >= {value + 1}$'):
        dataset_options('dncnn', dataroot_H=str(tmp_path), **{key: value})


# ---- end to end: main_train.py ----------------------------------------------------------------------

def _copied_options(tmp_path, demo_images):
    """Tiny options on private copies of the demo images (no generate_demo: the folders are the user's)."""
    opt = tiny_options(str(tmp_path / 'exp'), demo_images)
    for phase in ('train', 'test'):
        section = opt['datasets'][phase]
        section.pop('generate_demo')
        section['dataroot_H'] = shutil.copytree(section['dataroot_H'], str(tmp_path / phase))
    return opt


def test_bad_test_images_end_the_run_at_start_up_with_one_line_each_and_nothing_written(tmp_path, demo_images):
    opt = _copied_options(tmp_path, demo_images)
    test = opt['datasets']['test']['dataroot_H']
    imwrite(os.path.join(test, '0002.png'), _rand((1, 1, 3)))
    with open(os.path.join(test, '0005.png'), 'r+b') as f:
        f.truncate(500)
    res = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o.json'), opt)])
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr == (
        f'error: datasets.test.dataroot_H: {test}/0002.png: 1x1 is too small to evaluate: SSIM needs at least '
        f'11x11\n'
        f'datasets.test.dataroot_H: {test}/0005.png: truncated PNG: no IEND chunk at the end of the file\n')
    assert not (tmp_path / 'exp').exists()


def test_oversized_training_image_ends_the_run_at_start_up_with_one_line(tmp_path, demo_images):
    opt = _copied_options(tmp_path, demo_images)
    train = opt['datasets']['train']['dataroot_H']
    oversized_png(os.path.join(train, '0010.png'))
    res = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o.json'), opt)])
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr == (f'error: datasets.train.dataroot_H: {train}/0010.png: 40000x40000 = 1,600,000,000 pixels '
                          f'is more than OpenCV decodes (1,073,741,824; OPENCV_IO_MAX_IMAGE_PIXELS)\n')
    assert not (tmp_path / 'exp').exists()


def test_a_dataset_scale_other_than_the_network_scale_ends_the_run_at_start_up(tmp_path, demo_images):
    """The options refuse a dataset scale that contradicts the top-level one (which the network uses)."""
    opt = _copied_options(tmp_path, demo_images)
    opt['scale'] = 2
    for section in opt['datasets'].values():
        section.update(dataset_type='sr')
        section.pop('sigma', None)
        section.pop('sigma_test', None)
    opt['netG'] = {'net_type': 'msrresnet1', 'in_nc': 3, 'out_nc': 3, 'nc': 8, 'nb': 1, 'upscale': 2}
    path = write_options(str(tmp_path / 'o.json'), opt)
    res = run_main('main_train', ['--opt', path, '--set', 'datasets.test.scale=4'])
    assert res.returncode == 2 and 'error: --set datasets.test.scale=4: datasets.test.scale: 4 differs from the top-level "scale": 2' \
        in res.stderr  # the --set argument that gave it, not the file
    assert res.stderr.count('\n') == 1, res.stderr[-2000:]
    assert not (tmp_path / 'exp').exists()


def test_dataset_option_value_ends_the_run_with_one_line_naming_the_key(tmp_path, demo_images):
    opt = _copied_options(tmp_path, demo_images)
    path = write_options(str(tmp_path / 'o.json'), opt)
    res = run_main('main_train', ['--opt', path, '--set', 'datasets.test.sigma_test=-5'])
    assert res.returncode == 2 and res.stderr == ('error: --set datasets.test.sigma_test=-5: datasets.test.sigma_test: '
                                                  '-5 must be >= 0 (noise std on the 0..255 scale)\n'), res.stderr[-2000:]
    assert not (tmp_path / 'exp').exists()


@pytest.mark.parametrize('key, value', [('metric_border', 2), ('metric_round_y', True)])
def test_scoring_options_in_a_training_section_are_refused_because_training_data_is_not_scored(tmp_path, key, value):
    h = _folder(tmp_path / 'H', 3)
    message = _error(DatasetDnCNN, _opt(DatasetDnCNN, dataroot_H=h, H_size=24, **{key: value}))
    assert message == (f'datasets.train.{key}: scoring options belong in the evaluation section (datasets.test); '
                       f'training data is not scored')
