"""Colour-managed inputs: an image with a non-sRGB ICC profile embedded (Display P3, Adobe RGB; real profiles that
LittleCMS opens, tests/icc_profiles.py) is converted to sRGB as it is read (`datasets.*.icc: "convert"`, the
default), refused at start-up with one line (`"refuse"`) or read as its values are (`"ignore"`), the same way by
every reader: the image and video datasets, cache_data, LMDBs, make_lmdb, extract_subimages and main_test --input.
The conversion equals LittleCMS's own (Pillow's ImageCms) within one 8-bit level; 16-bit files stay 16-bit, within
a few 16-bit levels of the exact conversion; sRGB-tagged and untagged files are read unchanged."""
import io
import logging
import os
import shutil
import struct

import cv2
import numpy as np
import pytest
from PIL import ImageCms

import icc_profiles as ip
from data.inputs import FrameSource, find_inputs
from data.lmdb_util import decode_frame, make_lmdb_from_folder
from data.registry import build_dataset
from data.sampler import TrainKey
from scripts import extract_subimages as es
from tests.conftest import dataset_options, run_main, tiny_options, write_options
from utils import icc as icc_module
from utils.errors import OptionsError, UserError
from utils.icc import D65, SRGB_PRIMARIES, read_profile, rgb_to_pcs
from utils.image import imread_uint, to_uint8
from utils.image_header import ImageFileError, header_icc

PROFILES = {'Display P3': ip.display_p3, 'Adobe RGB (1998)': ip.adobe_rgb}


def _raw(path):
    """The file's values as OpenCV decodes them, RGB: what reading it without colour management gives."""
    return imread_uint(path, 3, keep_16bit=True, icc='ignore')


def _png(path, img, icc):
    return ip.write(str(path), ip.png_with_profile(img, icc))


def _builtin_srgb() -> bytes:
    return ImageCms.ImageCmsProfile(ImageCms.createProfile('sRGB')).tobytes()


# --- finding the profile in the header -----------------------------------------------------------------------------

@pytest.mark.parametrize('container', ['png', 'jpeg', 'tiff', 'webp'])
def test_the_profile_is_found_in_the_header_of_every_format_that_carries_one(tmp_path, container):
    icc = ip.display_p3()
    img = ip.colourful()
    write = {'png': ip.png_with_profile, 'jpeg': ip.jpeg_with_profile, 'tiff': ip.tiff_with_profile,
             'webp': ip.webp_with_profile}[container]
    path = ip.write(str(tmp_path / f'a.{container}'), write(img, icc))
    assert header_icc(path) == icc  # the JPEG's spans two APP2 segments
    plain = str(tmp_path / f'b.{"tif" if container == "tiff" else container}')
    assert cv2.imwrite(plain, img)
    assert header_icc(plain) is None


def test_a_damaged_profile_chunk_is_one_line_naming_the_file(tmp_path):
    png = ip.png_with_profile(ip.colourful(), ip.display_p3())
    start = png.index(b'iCCP') - 4
    n = struct.unpack('>I', png[start:start + 4])[0]
    damaged = png[:start + 8] + b'test\0\0' + b'\x00' * (n - 6) + png[start + 8 + n:]
    path = ip.write(str(tmp_path / 'd.png'), damaged)
    with pytest.raises(ImageFileError, match=r'd\.png: damaged colour profile: the iCCP chunk does not inflate'):
        header_icc(path)
    with pytest.raises(UserError, match=r'd\.png: damaged colour profile'):
        imread_uint(path)
    assert np.array_equal(imread_uint(path, icc='ignore'), ip.colourful())  # "ignore" does not look


# --- the conversion ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('name', PROFILES)
@pytest.mark.parametrize('container', ['png', 'jpeg', 'tiff', 'webp'])
def test_an_8_bit_image_with_a_wide_gamut_profile_is_converted_as_littlecms_converts_it(tmp_path, name, container):
    icc = PROFILES[name]()
    img = ip.colourful(64, 64)
    write = {'png': ip.png_with_profile, 'jpeg': ip.jpeg_with_profile, 'tiff': ip.tiff_with_profile,
             'webp': ip.webp_with_profile}[container]
    path = ip.write(str(tmp_path / f'a.{container}'), write(img, icc))
    raw = _raw(path)  # a JPEG's values are not img's
    expected = ip.littlecms_srgb(raw, icc)
    got = imread_uint(path)
    assert got.dtype == np.uint8 and got.shape == raw.shape
    assert np.abs(got.astype(int) - expected).max() <= 1
    assert np.abs(raw.astype(int) - expected).max() > 20  # without the conversion: far off
    assert np.array_equal(imread_uint(path, bgr=True), got[:, :, ::-1])
    assert np.array_equal(imread_uint(path, icc='ignore'), raw)


def _colorants(profile) -> np.ndarray:
    """The RGB -> connection space XYZ matrix (colorants as columns) of a profile, as LittleCMS reads it."""
    p = ImageCms.ImageCmsProfile(io.BytesIO(profile) if isinstance(profile, bytes) else profile).profile
    return np.array([p.red_colorant[0], p.green_colorant[0], p.blue_colorant[0]]).T


def _exact_srgb(values, icc, decode):
    """The conversion in float64, from the definitions: the profile's tone curve (`decode`, with the parameters the
    profile stores), its colorants and sRGB's as LittleCMS reads them, sRGB's curve."""
    to_srgb = np.linalg.inv(_colorants(ImageCms.createProfile('sRGB'))) @ _colorants(icc)
    linear = np.clip(decode(values) @ to_srgb.T, 0, 1)
    return np.where(linear <= 0.0031308, linear * 12.92, 1.055 * linear ** (1 / 2.4) - 0.055)


def test_the_srgb_the_conversion_aims_at_is_littlecms_own():
    assert np.abs(rgb_to_pcs(SRGB_PRIMARIES, D65) - _colorants(ImageCms.createProfile('sRGB'))).max() < 1e-9


def _stored_srgb_curve(v):
    """Display P3's curve with the parameters its profile stores (s15Fixed16: 2.4 is 2.39999...)."""
    g, a, b, c, d = (round(p * 65536) / 65536 for p in ip.SRGB_PARAMS)
    return np.where(v >= d, (a * v + b) ** g, c * v)


@pytest.mark.parametrize('name, decode', [('Display P3', _stored_srgb_curve),
                                          ('Adobe RGB (1998)', lambda v: v ** ip.ADOBE_GAMMA)])
def test_a_16_bit_image_stays_16_bit_and_is_converted_at_16_bit_precision(tmp_path, name, decode):
    icc = PROFILES[name]()
    img = ip.colourful(64, 64, bits=16)
    path = _png(tmp_path / 'deep.png', img, icc)
    got = imread_uint(path, 3, keep_16bit=True)
    assert got.dtype == np.uint16
    expected = _exact_srgb(img / 65535.0, icc, decode) * 65535
    assert np.abs(got - expected).max() <= 1  # through 8 bits it would be up to 128 levels off
    assert np.array_equal(imread_uint(path, 3), to_uint8(got))  # an 8-bit read: the 16-bit conversion, mapped
    gray = imread_uint(path, 1, keep_16bit=True)  # gray of a colour file: the gray of its sRGB colours
    assert gray.dtype == np.uint16 and np.array_equal(gray[:, :, 0], cv2.cvtColor(got, cv2.COLOR_RGB2GRAY))


def test_a_gray_image_with_a_gray_profile_is_converted_and_stays_gray(tmp_path):
    icc = ip.gray_gamma22()
    img = ip.colourful()[:, :, :1].copy()
    path = _png(tmp_path / 'g.png', img, icc)
    got = imread_uint(path, 1)
    assert got.shape == img.shape and np.abs(got.astype(int) - ip.littlecms_srgb(img, icc)).max() <= 1
    assert not np.array_equal(got, img)
    colour = imread_uint(path, 3)
    assert np.array_equal(colour, np.repeat(got, 3, axis=2))


def test_srgb_tagged_and_untagged_files_are_read_unchanged_and_profiles_are_parsed_once(tmp_path, monkeypatch):
    img = ip.colourful()
    tagged = [_png(tmp_path / 'table.png', img, ip.srgb_table()),
              _png(tmp_path / 'builtin.png', img, _builtin_srgb()),
              ip.write(str(tmp_path / 'builtin.jpg'), ip.jpeg_with_profile(img, _builtin_srgb()))]
    assert read_profile(ip.srgb_table()) is None and read_profile(_builtin_srgb()) is None
    for path in tagged:
        assert np.array_equal(imread_uint(path), _raw(path))
    read_profile.cache_clear()
    imread_uint(tagged[0])
    imread_uint(tagged[0])
    assert read_profile.cache_info().hits == 1 and read_profile.cache_info().misses == 1
    untagged = str(tmp_path / 'plain.png')
    cv2.imwrite(untagged, cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
    monkeypatch.setattr(icc_module, 'read_profile', lambda icc: pytest.fail('an untagged file parsed a profile'))
    assert np.array_equal(imread_uint(untagged), img)


def test_a_lookup_table_profile_goes_through_littlecms_at_8_bits_and_a_16_bit_image_with_one_is_refused(tmp_path):
    icc = ip.adobe_rgb_lut()
    img = ip.colourful(32, 32)
    path = _png(tmp_path / 'lut.png', img, icc)
    assert np.array_equal(imread_uint(path), ip.littlecms_srgb(img, icc))
    deep = _png(tmp_path / 'lut16.png', ip.colourful(bits=16), icc)
    with pytest.raises(UserError, match=r'cannot convert .*lut16\.png to sRGB: its profile "Adobe RGB lookup tables" '
                                        r'is made of lookup tables'):
        imread_uint(deep, keep_16bit=True)


def test_other_colour_spaces_are_refused_with_their_name_and_a_damaged_profile_is_named_as_such(tmp_path):
    cmyk = ip.profile(b'CMYK', {b'desc': ip.desc('U.S. Web Coated (SWOP) v2')})
    assert read_profile(cmyk).problem(8) == ('its profile "U.S. Web Coated (SWOP) v2" is of the colour space \'CMYK\': '
                                             'only RGB and gray ones are converted')
    path = ip.write(str(tmp_path / 'c.jpg'), ip.jpeg_with_profile(ip.colourful(), cmyk))
    with pytest.raises(UserError, match=r'cannot convert .*c\.jpg to sRGB: its profile "U\.S\. Web Coated'):
        imread_uint(path)
    truncated = _png(tmp_path / 't.png', ip.colourful(), ip.display_p3()[:200])
    with pytest.raises(UserError, match=r't\.png: damaged colour profile \(truncated tag table\)'):
        imread_uint(truncated)


# --- the datasets ---------------------------------------------------------------------------------------------------

def _paired_folders(tmp_path, tagged=(0, 2), icc=None, n=3):
    """H and L folders of `n` equal-size pairs (plain, scale 1); the H images `tagged` and their L images carry
    `icc` (Display P3)."""
    icc = icc or ip.display_p3()
    for side in ('H', 'L'):
        os.makedirs(tmp_path / side, exist_ok=True)
        for i in range(n):
            img = ip.colourful(32, 32, seed=i + (side == 'L') * 10)
            path = tmp_path / side / f'{i}.png'
            if i in tagged:
                _png(path, img, icc)
            else:
                cv2.imwrite(str(path), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
    return str(tmp_path / 'H'), str(tmp_path / 'L')


def _plain(H, L, phase='test', **given):
    return build_dataset(dataset_options('plain', phase, dataroot_H=H, dataroot_L=L, H_size=16, **given))


def test_convert_is_the_default_logged_once_per_dataset_and_every_item_and_the_cache_hold_converted_pixels(
        tmp_path, caplog):
    H, L = _paired_folders(tmp_path)
    with caplog.at_level(logging.INFO, logger='restoration'):
        data = _plain(H, L)
        cached = _plain(H, L, cache_data=True)
    lines = [r.getMessage() for r in caplog.records if 'colour profile' in r.getMessage()]
    assert lines == [f'datasets.test: 4 of 6 images carry a non-sRGB colour profile (the first: {H}/0.png, '
                     f'"Display P3"): converted to sRGB as they are read (datasets.test.icc "convert")'] * 2
    item = data[0]
    expected = ip.littlecms_srgb(_raw(f'{H}/0.png'), ip.display_p3())
    assert np.abs(item['H'].numpy().transpose(1, 2, 0).astype(int) - expected).max() <= 1
    for i in range(3):
        assert all(np.array_equal(data[i][k], cached[i][k]) for k in ('H', 'L'))
    assert np.array_equal(data[1]['H'].numpy().transpose(1, 2, 0), _raw(f'{H}/1.png'))  # untagged: as it is
    train = _plain(H, L, 'train', use_hflip=False, use_rot=False)
    patch = train[TrainKey(0, 5)]['H'].numpy().transpose(1, 2, 0)  # a training crop: of the converted image
    whole = data[0]['H'].numpy().transpose(1, 2, 0)
    assert any(np.array_equal(whole[y:y + 16, x:x + 16], patch) for y in range(17) for x in range(17))


def test_refuse_ends_the_start_up_with_one_line_naming_the_file_and_the_key(tmp_path):
    H, L = _paired_folders(tmp_path)
    with pytest.raises(UserError) as e:
        _plain(H, L, 'train', icc='refuse')
    assert str(e.value) == (f'datasets.train.icc: "refuse", but {H}/0.png carries a non-sRGB colour profile '
                            f'("Display P3") (and 3 more of its 6 images); convert the images to sRGB, or set it to '
                            f'"convert"')
    with pytest.raises(UserError, match=r'0\.png: carries a non-sRGB colour profile \("Display P3"\) and icc is '
                                        r'"refuse"'):
        imread_uint(f'{H}/0.png', icc='refuse')  # a file that changed after the start: when it is read
    with pytest.raises(OptionsError, match=r'datasets\.train\.icc: "srgb" must be one of convert, refuse, ignore'):
        dataset_options('plain', dataroot_H=H, dataroot_L=L, icc='srgb')


def test_ignore_reads_the_values_as_they_are_and_says_nothing(tmp_path, caplog):
    H, L = _paired_folders(tmp_path)
    with caplog.at_level(logging.INFO, logger='restoration'):
        data = _plain(H, L, icc='ignore')
    assert not [r for r in caplog.records if 'colour profile' in r.getMessage()]
    assert np.array_equal(data[0]['H'].numpy().transpose(1, 2, 0), _raw(f'{H}/0.png'))


def test_a_profile_that_cannot_be_converted_ends_the_start_up_with_one_line_per_file(tmp_path):
    H, L = _paired_folders(tmp_path, tagged=())
    _png(f'{H}/1.png', ip.colourful(32, 32, bits=16, seed=1), ip.adobe_rgb_lut())
    with pytest.raises(UserError) as e:
        _plain(H, L)
    assert str(e.value) == (f'datasets.test.icc: {H}/1.png: its profile "Adobe RGB lookup tables" is made of lookup '
                            f'tables, which LittleCMS converts at 8 bits per sample here: a 16-bit image would lose '
                            f'its precision; "ignore" reads its values as they are')


def test_a_video_dataset_converts_its_frames_and_refuses_them_by_the_same_key(tmp_path):
    for side in ('gt', 'lq'):
        for t in range(2):
            folder = tmp_path / side / 'clip'
            os.makedirs(folder, exist_ok=True)
            _png(folder / f'{t:08d}.png', ip.colourful(16, 16, seed=t), ip.adobe_rgb())
    given = dict(dataroot_gt=str(tmp_path / 'gt'), dataroot_lq=str(tmp_path / 'lq'))
    clip = build_dataset(dataset_options('VideoRecurrentTestDataset', 'test', **given))[0]
    expected = ip.littlecms_srgb(ip.colourful(16, 16, seed=1), ip.adobe_rgb()) / 255.0
    assert np.abs(clip['H'][1].numpy().transpose(1, 2, 0) - expected).max() <= 1 / 255 + 1e-6
    with pytest.raises(UserError, match=r'^datasets\.test\.icc: "refuse", but .*/gt/clip/00000000\.png carries a '
                                        r'non-sRGB colour profile \("Adobe RGB \(1998\)"\) \(and 3 more'):
        build_dataset(dataset_options('VideoRecurrentTestDataset', 'test', icc='refuse', **given))


def test_an_lmdb_keeps_converted_pixels_or_the_profile_the_reader_applies(tmp_path):
    """make_lmdb decodes every frame: it stores converted pixels. An LMDB of the files as they are keeps their
    profile, which the reading section's icc applies (decode_frame)."""
    folder = tmp_path / 'frames' / 'clip'
    os.makedirs(folder)
    img = ip.colourful(16, 16)
    _png(folder / '00000000.png', img, ip.display_p3())
    converted = imread_uint(str(folder / '00000000.png'), 3, bgr=True)
    make_lmdb_from_folder(tmp_path / 'frames', tmp_path / 'files.lmdb')
    import lmdb
    env = lmdb.open(str(tmp_path / 'files.lmdb'), readonly=True, lock=False)
    with env.begin() as txn:
        value = bytes(txn.get(b'clip/00000000'))
    env.close()
    assert np.array_equal(decode_frame(value, 'key clip/00000000'), converted)
    assert np.array_equal(decode_frame(value, 'key clip/00000000', 'ignore'), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
    with pytest.raises(UserError, match=r'^key clip/00000000: carries a non-sRGB colour profile'):
        decode_frame(value, 'key clip/00000000', 'refuse')
    from scripts.make_lmdb import make_lmdb_from_frames
    for compress in ('fast', 'raw'):
        out = tmp_path / f'{compress}.lmdb'
        make_lmdb_from_frames(str(tmp_path / 'frames'), str(out), compress=compress, show=lambda items, desc: items)
        env = lmdb.open(str(out), readonly=True, lock=False)
        with env.begin() as txn:
            stored = decode_frame(bytes(txn.get(b'clip/00000000')), 'k', 'ignore')  # no profile left to apply
        env.close()
        assert np.array_equal(stored, converted)
    with pytest.raises(UserError, match=r'^--icc: "refuse", but .*00000000\.png carries a non-sRGB colour profile'):
        make_lmdb_from_frames(str(tmp_path / 'frames'), str(tmp_path / 'no.lmdb'), icc='refuse',
                              show=lambda items, desc: items)
    assert not (tmp_path / 'no.lmdb').exists()


def test_sub_images_hold_converted_pixels_at_the_images_bit_depth(tmp_path):
    os.makedirs(tmp_path / 'in')
    img = ip.colourful(64, 64, bits=16)
    _png(tmp_path / 'in' / 'a.png', img, ip.display_p3())
    said = []
    es.extract(str(tmp_path / 'in'), str(tmp_path / 'out'), crop=32, step=32, thresh=0, say=said.append)
    whole = imread_uint(str(tmp_path / 'in' / 'a.png'), 3, keep_16bit=True)
    tile = cv2.imread(str(tmp_path / 'out' / 'a_s002.png'), cv2.IMREAD_UNCHANGED)
    assert tile.dtype == np.uint16 and header_icc(str(tmp_path / 'out' / 'a_s002.png')) is None
    assert np.array_equal(cv2.cvtColor(tile, cv2.COLOR_BGR2RGB), whole[:32, 32:])
    assert said[-1] == '1 of the images carries a non-sRGB colour profile: its sub-images are converted to sRGB (--icc convert)'
    es.extract(str(tmp_path / 'in'), str(tmp_path / 'same'), crop=32, step=32, thresh=0, say=said.append, icc='ignore')
    tile = cv2.imread(str(tmp_path / 'same' / 'a_s002.png'), cv2.IMREAD_UNCHANGED)
    assert np.array_equal(cv2.cvtColor(tile, cv2.COLOR_BGR2RGB), img[:32, 32:])
    with pytest.raises(UserError, match=r'a\.png: carries a non-sRGB colour profile'):
        es.extract(str(tmp_path / 'in'), str(tmp_path / 'no'), crop=32, step=32, thresh=0, say=said.append,
                   icc='refuse')
    assert not (tmp_path / 'no').exists()


def test_main_test_inputs_are_read_in_srgb_and_the_description_says_how_many(tmp_path):
    os.makedirs(tmp_path / 'in')
    img = ip.colourful()
    _png(tmp_path / 'in' / 'a.png', img, ip.display_p3())
    cv2.imwrite(str(tmp_path / 'in' / 'b.png'), img)
    _png(tmp_path / 'in' / 'c.png', ip.colourful(bits=16), ip.adobe_rgb_lut())
    found = find_inputs(str(tmp_path / 'in'), clips=False)
    assert found.describe() == (f'2 images, 1 of them with a non-sRGB colour profile, converted to sRGB (the first: '
                                f'{tmp_path}/in/a.png)')
    assert [(os.path.basename(p), problem.split(':')[0]) for p, problem in found.bad] == [
        ('c.png', 'its profile "Adobe RGB lookup tables" is made of lookup tables, which LittleCMS converts at 8 bits '
                  'per sample here')]
    (frame,) = FrameSource(3).read_frames(found.sources[0], 0, 1)
    assert np.abs(frame.astype(int) - ip.littlecms_srgb(img, ip.display_p3())).max() <= 1


# --- a whole run -----------------------------------------------------------------------------------------------------

def _run_with_profiles(tmp_path, demo_images, icc):
    """Tiny options on copies of the demo images, two training images and one test image re-saved with profiles."""
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=2, checkpoint_test=2, checkpoint_save=2)
    for phase, names, profile in (('train', ('0000.png', '0003.png'), ip.display_p3()),
                                  ('test', ('0001.png',), ip.adobe_rgb())):
        section = opt['datasets'][phase]
        section.pop('generate_demo')
        section['icc'] = icc
        folder = section['dataroot_H'] = shutil.copytree(section['dataroot_H'], str(tmp_path / phase))
        for name in names:
            _png(os.path.join(folder, name), imread_uint(os.path.join(folder, name)), profile)
    return write_options(str(tmp_path / 'o.json'), opt)


def test_a_run_logs_the_conversion_once_per_dataset(tmp_path, demo_images):
    res = run_main('main_train', ['--opt', _run_with_profiles(tmp_path, demo_images, 'convert')])
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if 'non-sRGB colour profile' in ln]
    assert len(lines) == 2, lines
    assert 'datasets.train: 2 of ' in lines[0] and '"Display P3"' in lines[0]
    assert 'datasets.test: 1 of ' in lines[1] and '"Adobe RGB (1998)"' in lines[1]


def test_a_run_with_icc_refuse_exits_2_with_one_line_and_writes_nothing(tmp_path, demo_images):
    res = run_main('main_train', ['--opt', _run_with_profiles(tmp_path, demo_images, 'refuse')])
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr == (f'error: datasets.train.icc: "refuse", but {tmp_path}/train/0000.png carries a non-sRGB '
                          f'colour profile ("Display P3") (and 1 more of its ' + res.stderr.split('of its ')[1])
    assert len(res.stderr.splitlines()) == 1
    assert not (tmp_path / 'exp').exists()
