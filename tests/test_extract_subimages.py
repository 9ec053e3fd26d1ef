"""scripts/extract_subimages.py on generated images: which tiles, their sizes, HR/LR alignment, parallel
workers, and one line for each bad input with nothing left behind."""
import importlib.util
import os
import sys

import cv2
import numpy as np
import pytest

from conftest import ROOT, clean_env, run
from utils.errors import UserError
from utils.image import IMG_EXTENSIONS

PY = sys.executable
SCRIPT = os.path.join(ROOT, 'scripts', 'extract_subimages.py')


def load_script():
    spec = importlib.util.spec_from_file_location('extract_subimages', SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


es = load_script()


def textured(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Smooth colour fields plus noise: every tile differs, and downscaling is not trivially exact."""
    small = rng.uniform(0, 255, (h // 16 + 2, w // 16 + 2, 3)).astype(np.float32)
    base = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)
    return np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)


# HR sizes: a multiple of 4, one that is not (2 and 3 pixels off), one smaller than the crop
SIZES = {'0001': (360, 500), '0002': (243, 302), '0003': (100, 90)}
SCALES = (2, 4)


@pytest.fixture
def div2k(tmp_path):
    """DIV2K's layout: HR/0001.png, X2/0001x2.png, X4/0001x4.png (LR = INTER_AREA of the HR cut to a multiple
    of the scale, floor(HR / scale) pixels, as DIV2K's bicubic files)."""
    rng = np.random.default_rng(35)
    (tmp_path / 'HR').mkdir()
    for s in SCALES:
        (tmp_path / f'X{s}').mkdir()
    for stem, (h, w) in SIZES.items():
        hr = textured(rng, h, w)
        cv2.imwrite(str(tmp_path / 'HR' / f'{stem}.png'), hr)
        for s in SCALES:
            cut = hr[:h - h % s, :w - w % s]
            lr = cv2.resize(cut, (w // s, h // s), interpolation=cv2.INTER_AREA)
            cv2.imwrite(str(tmp_path / f'X{s}' / f'{stem}x{s}.png'), lr)
    return tmp_path


def lows(root, suffix='_sub'):
    return [es.LowRes(str(root / f'X{s}'), str(root / f'X{s}{suffix}'), s) for s in SCALES]


def test_tile_starts_cover_the_image_and_add_an_edge_tile_beyond_the_threshold():
    assert es.tile_starts(1000, 480, 240, 0) == [0, 240, 480, 520]     # 40 px left over: one tile flush
    assert es.tile_starts(1000, 480, 240, 40) == [0, 240, 480]         # ... not more than thresh: dropped
    assert es.tile_starts(1000, 480, 240, 39) == [0, 240, 480, 520]
    assert es.tile_starts(960, 480, 240, 0) == [0, 240, 480]           # exact fit: nothing added
    assert es.tile_starts(480, 480, 240, 0) == [0]
    assert es.tile_starts(479, 480, 240, 0) == []                      # smaller than a tile: none
    assert es.tile_starts(1356, 480, 240, 0) == [0, 240, 480, 720, 876]  # a DIV2K height


def test_counts_sizes_and_every_lr_tile_is_its_hr_tile_downscaled(div2k):
    crop, step = 120, 60
    n, tiles, small = es.extract(str(div2k / 'HR'), str(div2k / 'HR_sub'), lows(div2k), crop, step, 0, 3, workers=1,
                                 say=lambda _: None)
    grid = 4  # lcm of the scales: tiles are placed on the part of the HR image every scale divides
    expected = {}
    for stem, (h, w) in SIZES.items():
        tops = es.tile_starts(h - h % grid, crop, step, 0)
        lefts = es.tile_starts(w - w % grid, crop, step, 0)
        expected.update({f'{stem}_s{i + 1:03d}.png': (t, l) for i, (t, l) in
                         enumerate((t, l) for t in tops for l in lefts)})
    assert (n, small) == (3, ['0003'])
    assert tiles == len(expected) == 5 * 8 + 3 * 4  # 0001: 8 columns, the last flush with the edge
    hr_names = sorted(os.listdir(div2k / 'HR_sub'))
    assert hr_names == sorted(expected)
    for s in SCALES:  # the same names in every folder: the sr dataset pairs them in sorted order
        assert sorted(os.listdir(div2k / f'X{s}_sub')) == hr_names
    assert sorted(os.listdir(div2k)) == ['HR', 'HR_sub', 'X2', 'X2_sub', 'X4', 'X4_sub']  # no temporary folder
    for name, (top, left) in expected.items():
        hr = cv2.imread(str(div2k / 'HR' / f'{name[:4]}.png'))
        tile = cv2.imread(str(div2k / 'HR_sub' / name))
        assert tile.shape == (crop, crop, 3)
        np.testing.assert_array_equal(tile, hr[top:top + crop, left:left + crop])
        for s in SCALES:
            lr_tile = cv2.imread(str(div2k / f'X{s}_sub' / name))
            assert lr_tile.shape == (crop // s, crop // s, 3)
            # the LR tile shows exactly the HR tile's content: it is the HR tile downscaled
            np.testing.assert_array_equal(lr_tile, cv2.resize(tile, (crop // s, crop // s),
                                                              interpolation=cv2.INTER_AREA))


def test_the_command_line_in_parallel_writes_what_one_process_writes(div2k):
    """Default 480/240 tiles, 2 worker processes, off a terminal: progress lines, then the summary line."""
    rng = np.random.default_rng(7)
    big = textured(rng, 700, 1000)
    cv2.imwrite(str(div2k / 'HR' / '0004.png'), big)
    for s in SCALES:
        cv2.imwrite(str(div2k / f'X{s}' / f'0004x{s}.png'),
                    cv2.resize(big, (1000 // s, 700 // s), interpolation=cv2.INTER_AREA))
    args = ['--input', div2k / 'HR', '--output', div2k / 'par', '--lr', div2k / 'X4', div2k / 'X4_par', 4,
            '--workers', 2]
    r = run([PY, SCRIPT, *map(str, args)], env=clean_env(OMP_NUM_THREADS='1'))
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[-1] == (f'extract_subimages: 4 images -> 8 sub-images of 480x480 in {div2k / "par"}; x4: 120x120 '
                         f'in {div2k / "X4_par"}; 3 images smaller than 480 skipped (0001, ...)')
    assert lines[:-1] == [f'HR -> 480x480: {i}/4' for i in range(1, 5)]  # no bar redraws in a log
    es.extract(str(div2k / 'HR'), str(div2k / 'one'), [es.LowRes(str(div2k / 'X4'), str(div2k / 'X4_one'), 4)],
               workers=1, say=lambda _: None)
    for a, b in (('par', 'one'), ('X4_par', 'X4_one')):
        names = sorted(os.listdir(div2k / a))
        assert names == sorted(os.listdir(div2k / b)) == [f'0004_s{i:03d}.png' for i in range(1, 9)]
        for name in names:
            assert (div2k / a / name).read_bytes() == (div2k / b / name).read_bytes()


def test_bit_depth_and_gray_are_kept(tmp_path):
    (tmp_path / 'in').mkdir()
    img = np.random.default_rng(1).integers(0, 65536, (100, 130), dtype=np.uint16)
    cv2.imwrite(str(tmp_path / 'in' / 'a.png'), img)
    es.extract(str(tmp_path / 'in'), str(tmp_path / 'out'), crop=64, step=64, thresh=0, say=lambda _: None)
    assert len(os.listdir(tmp_path / 'out')) == 2 * 3  # rows at 0, 36; columns at 0, 64, 66
    tiles = [cv2.imread(str(tmp_path / 'out' / f'a_s{i:03d}.png'), cv2.IMREAD_UNCHANGED) for i in range(1, 7)]
    assert [t.dtype for t in tiles] == [np.uint16] * 6 and tiles[0].shape == (64, 64)
    np.testing.assert_array_equal(tiles[5], img[36:, 66:])


def test_its_image_extensions_are_the_projects():
    assert es.IMAGE_EXTENSIONS == IMG_EXTENSIONS


def bad(div2k, change=None, **given):
    """The UserError message of a run on `div2k` after `change`, checking nothing is left behind."""
    if change is not None:
        change(div2k)
    before = sorted(os.listdir(div2k))
    kwargs = dict(crop=120, step=60, thresh=0, workers=1, say=lambda _: None)
    kwargs.update(given)
    with pytest.raises(UserError) as e:
        es.extract(str(div2k / 'HR'), str(div2k / 'HR_sub'), kwargs.pop('lows', lows(div2k)), **kwargs)
    assert sorted(os.listdir(div2k)) == before  # no output, no temporary folder
    return str(e.value)


def test_bad_input_is_one_line_naming_it_and_leaves_nothing(div2k):
    hr = str(div2k / 'HR')
    assert bad(div2k, lambda d: cv2.imwrite(str(d / 'X4' / '0009x4.png'), np.zeros((8, 8, 3), np.uint8))) == \
        f'--lr {div2k / "X4"}: 0009x4.png matches no HR image in {hr} (by name, with or without the x4 suffix)'
    os.remove(div2k / 'X4' / '0009x4.png')
    # a wrong LR size is found by the worker after other images' tiles were written: all of it is removed
    assert bad(div2k, lambda d: cv2.imwrite(str(d / 'X2' / '0002x2.png'), np.zeros((120, 150, 3), np.uint8))) == \
        f'{div2k / "X2" / "0002x2.png"}: 150x120 is not its HR image {hr}/0002.png (302x243) / 2 = 151x121'
    assert bad(div2k, lambda d: (d / 'X2' / '0002x2.png').write_bytes(b'not a png')) == \
        f'{div2k / "X2" / "0002x2.png"}: cannot be read as an image'
    assert bad(div2k, crop=90) == f'--crop-size: 90 is not a multiple of the LR scale 4 (--lr {div2k / "X4"}); ' \
                                  f'the LR tiles would not start on whole pixels'
    assert bad(div2k, thresh=120) == '--thresh-size: must be >= 0 and smaller than --crop-size 120, got 120'
    (div2k / 'HR_sub').mkdir()
    assert bad(div2k) == f'--output: {div2k / "HR_sub"} already exists; remove it or choose another folder'
    os.rmdir(div2k / 'HR_sub')
    assert bad(div2k, lows=[es.LowRes(str(div2k / 'X4'), str(div2k / 'HR' / 'x4'), 4)]) == \
        f'--lr {div2k / "X4"}: {div2k / "HR" / "x4"} is inside the input folder {hr}'
    assert bad(div2k, lambda d: os.remove(d / 'X4' / '0002x4.png')) == \
        f'--lr {div2k / "X4"}: no LR image for 0002.png (expected 0002x4.<ext> or the same name)'


def test_command_line_mistakes_exit_2_with_one_line(tmp_path):
    r = run([PY, SCRIPT, '--input', str(tmp_path / 'missing'), '--output', str(tmp_path / 'out')])
    assert (r.returncode, r.stdout, r.stderr) == (2, '', f'extract_subimages: --input: folder not found: '
                                                          f'{tmp_path / "missing"}\n')
    (tmp_path / 'in').mkdir()
    r = run([PY, SCRIPT, '--input', str(tmp_path / 'in'), '--output', str(tmp_path / 'out'),
             '--lr', str(tmp_path / 'in'), str(tmp_path / 'lr'), 'four'])
    assert (r.returncode, r.stderr) == (2, f'extract_subimages: --lr {tmp_path / "in"}: the scale must be an '
                                           f'integer, got \'four\'\n')
    assert not os.path.exists(tmp_path / 'out')
