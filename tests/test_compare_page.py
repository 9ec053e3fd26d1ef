"""main_test's comparison page (index.html): the scores table and, per item, input | output | target under a
before/after slider with a magnifier, clips as a frame strip; a static page that opens from disk.

Two kinds of tests: the page's content read as HTML (rows, escaped names, every link a file on disk: no
browser needed), and the page in a real headless Chromium driven through chromedriver (`tests/webdriver.py`,
standard library only): every image loads, the table sorts, the slider moves (two screenshots differ inside the
slider and nowhere else), the magnifier shows the chosen pixels, the frame strip changes the frame. The
browser test needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them in CI); where they are
missing it is skipped with the command that installs them, and under CI=true it fails instead.
"""
import csv
import html.parser
import json
import os
import re
import urllib.parse

import numpy as np
import pytest

from tests.conftest import in_ci, run_main
from tests.webdriver import Browser
from utils.compare_page import frame_files, write_page
from utils.image import imread_uint, imwrite

W, H, K = 64, 48, 6  # the synthetic images' size; the page shows images this small enlarged K = 384 // W times


def pattern(frame: int = 0, seed: int = 0) -> np.ndarray:
    """An output image of 4x4 blocks, each of its own colour (so a magnified pixel says where it came from)."""
    y, x = np.mgrid[0:H, 0:W]
    return np.stack([(x // 4) * 16 + 8, (y // 4) * 20 + 8, np.full_like(x, 40 + 60 * frame + seed)], -1).astype(np.uint8)


def as_input(out: np.ndarray) -> np.ndarray:
    return 255 - out  # differs from the output at every pixel: the slider changes every pixel it sweeps


def as_target(out: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(out[..., [2, 0, 1]])


# name, frames, scores (psnr, lpips), kinds written: names that HTML, URLs and CSS must survive
ITEMS = [('a', 1, (9.5, 0.3), ('input', 'output', 'target')),
         ('<b>&amp;"x\'', 1, (100.0, 0.1), ('input', 'output', 'target')),
         ('b#1 %41?(2)', 1, (10.25, 0.2), ('output', 'target')),  # an input not comparable with the target
         ('clip', 3, (30.0, float('nan')), ('input', 'output', 'target'))]
COLUMNS, HIGHER = ('psnr', 'lpips'), {'psnr': True, 'lpips': False}


@pytest.fixture
def synthetic_page(tmp_path):
    """A results folder as main_test writes it, with the page written by `write_page`."""
    files = {}
    for i, (name, frames, _, kinds) in enumerate(ITEMS):
        for kind in kinds:
            paths = frame_files(name, frames, kind)
            for t, path in enumerate(paths):
                out = pattern(t, seed=10 * i)
                imwrite(str(tmp_path / path), {'input': as_input, 'output': lambda o: o, 'target': as_target}[kind](out))
            files.setdefault(name, {})[kind] = paths
    means = {'psnr': 37.4375, 'lpips': float('nan'), 'count': 4}
    path = write_page(str(tmp_path), COLUMNS, HIGHER, [(name, scores) for name, _, scores, _ in ITEMS], means, files,
                      notes=['input: <the input itself>'])
    assert path == str(tmp_path / 'index.html')
    return tmp_path


class Page(html.parser.HTMLParser):
    """The parts of a page the tests read: tags, text, links, the table's rows."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags, self.links, self.ids, self.text, self.frames = [], [], set(), [], []
        self.rows, self._row, self._part, self._cell = {'tbody': [], 'tfoot': []}, None, None, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        self.ids.add(a.get('id'))
        self.links += [a[k] for k in ('src', 'href') if k in a]
        if 'data-frames' in a:
            self.frames.append(json.loads(a['data-frames']))
        if tag in ('tbody', 'tfoot'):
            self._part = tag
        elif tag == 'tr' and self._part:
            self._row = []
        elif tag in ('td', 'th') and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ('td', 'th') and self._cell is not None:
            self._row.append(''.join(self._cell))
            self._cell = None
        elif tag == 'tr' and self._row is not None:
            self.rows[self._part].append(self._row)
            self._row = None
        elif tag in ('tbody', 'tfoot'):
            self._part = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def read_page(folder) -> Page:
    with open(os.path.join(folder, 'index.html'), encoding='utf-8') as f:
        return Page(f.read())


def assert_links_are_files(page: Page, folder) -> int:
    """Every src/href is a page anchor or a relative URL of a file in the folder; returns the files linked."""
    files = [u for u in page.links if not u.startswith('#')] + [u for f in page.frames for v in f.values() for u in v]
    for url in files:
        parts = urllib.parse.urlsplit(url)
        assert not parts.scheme and not parts.netloc and not url.startswith('/') and not parts.query, url
        assert os.path.isfile(os.path.join(folder, urllib.parse.unquote(parts.path))), url
    assert {u[1:] for u in page.links if u.startswith('#')} <= page.ids
    return len(set(files))


def test_the_page_lists_every_item_escapes_every_name_and_links_only_files_beside_it(synthetic_page):
    page = read_page(synthetic_page)
    assert [r[0] for r in page.rows['tbody']] == [name for name, *_ in ITEMS]  # dataset order, names as text
    assert page.rows['tbody'][2][1:] == ['10.2500', '0.2000'] and page.rows['tbody'][3][2] == 'nan'
    assert page.rows['tfoot'] == [['mean (4)', '37.4375', 'nan']]
    assert '<b>&amp;"x\'' in ''.join(page.text) and 'b' not in page.tags  # a name never becomes markup
    assert '<the input itself>' in ''.join(page.text)
    # 3 + 3 + 2 + 3 x 3 frames, each linked (the outputs of the clip twice: viewer and strip)
    assert assert_links_are_files(page, synthetic_page) == 17
    with open(synthetic_page / 'index.html', encoding='utf-8') as f:
        text = f.read()
    assert not re.search(r'https?:|data:|file:', text)  # nothing fetched from elsewhere, nothing embedded
    assert len(text) < 40_000


def test_main_test_writes_the_page_with_each_items_input_and_target_beside_the_outputs(tmp_path, tiny_run,
                                                                                      demo_images):
    from metrics.fidelity import calculate_psnr
    out = tmp_path / 'out'
    res = run_main('main_test', ['--opt', tiny_run.opt_path, '--out', str(out)])
    assert res.returncode == 0, res.stderr[-2000:]
    assert f'comparison page: {out / "index.html"}' in res.stdout
    with open(out / 'results.csv') as f:
        table = list(csv.reader(f))
    page = read_page(out)
    assert page.rows['tbody'] == table[1:-1]  # results.csv's rows, the same 4 decimals
    assert page.rows['tfoot'] == [['mean (8)', *table[-1][1:]]]
    assert assert_links_are_files(page, out) == 3 * 8
    names = [r[0] for r in table[1:-1]]
    assert sorted(os.listdir(out / 'input')) == sorted(os.listdir(out / 'target')) == [f'{n}.png' for n in names]
    # the target is the test image itself (denoising: H is the file), the input what the input's scores compare
    psnr = []
    for n in names:
        target = imread_uint(str(out / 'target' / f'{n}.png'))
        assert np.array_equal(target, imread_uint(os.path.join(demo_images, 'test', f'{n}.png')))
        psnr.append(calculate_psnr(imread_uint(str(out / 'input' / f'{n}.png')), target))
    logged = re.search(r'input: the input itself \(L against H\) on 8 items: PSNR ([\d.]+) dB', res.stdout)
    assert abs(np.mean(psnr) - float(logged.group(1))) < 0.006

    for flag, expected in (('--no-page', [f'{n}.png' for n in names] + ['results.csv', 'results.md']),
                           ('--no-images', ['results.csv', 'results.md'])):
        res = run_main('main_test', ['--opt', tiny_run.opt_path, '--out', str(tmp_path / flag), flag])
        assert res.returncode == 0, res.stderr[-2000:]
        assert sorted(os.listdir(tmp_path / flag)) == sorted(expected) and 'comparison page' not in res.stdout


@pytest.fixture(scope='module')
def input_page(tmp_path_factory, tiny_run, demo_images):
    """main_test --input on a folder of one's own (images of several formats and depths, a 2-frame video with
    --frames) scored by a no-reference metric: (the inputs' folder, the output folder, what main_test printed)."""
    import tests.extra_metrics  # noqa: F401  (registers `brightness`, a no-reference metric)
    from tests.test_main_test_inputs import _images, _video
    folder = tmp_path_factory.mktemp('input_page')
    inputs = _images(str(folder / 'mine'), demo_images)
    _video(os.path.join(inputs, 'clip.mp4'), 2)
    out = folder / 'out'
    res = run_main('main_test', ['--weights', tiny_run.folder, '--input', inputs, '--frames', '--out', str(out),
                                 '--set', 'val.metrics=["brightness"]'])
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return inputs, out, res


def test_main_test_input_writes_the_page_of_each_input_beside_its_output(input_page, tiny_run, tmp_path):
    """Inputs of one's own: input | output per item (the input at the output's size: DnCNN's is the input
    itself), in the output's bit depth; a TIFF output shown through its PNG copy; a video's frames (--frames) with
    theirs; the no-reference scores table as results.csv has it; nothing scored: no table."""
    from utils.video import FrameReader
    inputs, out, res = input_page
    assert f'comparison page: {out / "index.html"}' in res.stdout
    with open(out / 'results.csv') as f:
        table = list(csv.reader(f))
    page = read_page(out)
    assert table[0] == ['name', 'brightness'] and page.rows['tbody'] == table[1:-1]
    assert [r[0] for r in table[1:-1]] == ['clip.mp4[0:1]', 'clip.mp4[1:2]', 'a.png', 'c.jpg', 'deep.png',
                                           'deep.tif', 'sub/b.png']  # a video frame by frame: an image network
    assert assert_links_are_files(page, out) == 2 * 7  # each item's input and output
    frames = {f['output'][0]: f for f in page.frames}
    assert frames['deep.png'] == {'output': ['deep.png'], 'input': ['input/deep.png.png']}
    assert frames['preview/deep.tif.png'] == {'output': ['preview/deep.tif.png'], 'input': ['input/deep.tif.png']}
    assert frames['clip/000001.png'] == {'output': ['clip/000001.png'], 'input': ['input/clip/000001.png']}
    for name in ('a.png', 'deep.png', 'deep.tif', 'sub/b.png'):  # 16-bit stays 16-bit, here too
        shown = imread_uint(str(out / 'input' / f'{name}.png'), keep_16bit=True)
        assert np.array_equal(shown, imread_uint(os.path.join(inputs, name), keep_16bit=True)), name
    assert np.array_equal(imread_uint(str(out / 'preview' / 'deep.tif.png'), keep_16bit=True),
                          imread_uint(str(out / 'deep.tif'), keep_16bit=True))
    decoded = FrameReader(os.path.join(inputs, 'clip.mp4')).read(0, 2)
    assert np.array_equal(imread_uint(str(out / 'input' / 'clip' / '000001.png')), decoded[1])

    bare = run_main('main_test', ['--weights', tiny_run.folder, '--input', os.path.join(inputs, 'a.png'),
                                  '--out', str(tmp_path / 'bare')])
    assert bare.returncode == 0, bare.stderr[-2000:]
    page = read_page(tmp_path / 'bare')
    assert 'table' not in page.tags and len(page.frames) == 1  # nothing scored: the item alone
    assert sorted(os.listdir(tmp_path / 'bare')) == ['a.png', 'index.html', 'input']


# --- in a browser ---------------------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def browser():
    reason = Browser.missing()
    if reason:
        if in_ci():
            pytest.fail(f'CI=true: the browser test must run, but {reason}')
        pytest.skip(reason)
    with Browser(width=1100, height=1000) as b:
        yield b


# every <img> scrolled into view (they load lazily) and waited for: [src, naturalWidth]
LOAD_ALL = '''var done = arguments[arguments.length - 1], imgs = Array.from(document.images);
(async function () {
  for (const img of imgs) {
    img.scrollIntoView();
    if (!img.complete) await new Promise(function (r) { img.onload = img.onerror = r; });
  }
  done(imgs.map(function (i) { return [i.getAttribute("src"), i.naturalWidth]; }));
})();'''


def rect(b: Browser, css: str) -> dict:
    return b.run('var r = document.querySelector(arguments[0]).getBoundingClientRect();'
                 'return {x: r.left, y: r.top, w: r.width, h: r.height};', css)


def names_in_order(b: Browser) -> list:
    return b.run('return Array.from(document.querySelector("#scores tbody").rows, r => r.cells[0].textContent)')


def pixel(shot: np.ndarray, x: float, y: float) -> np.ndarray:
    return shot[int(y), int(x)].astype(int)


@pytest.mark.xdist_group('chromium')  # one browser for both (xdist's loadgroup)
def test_the_page_in_chromium_loads_every_image_sorts_slides_magnifies_and_steps_through_frames(browser,
                                                                                               synthetic_page):
    b = browser
    b.get((synthetic_page / 'index.html').as_uri())
    loaded = b.run_async(LOAD_ALL)
    assert len(loaded) == 2 + 2 + 2 + (2 + 3) and all(w == W for _, w in loaded), loaded

    # sorting: numbers numerically, best first, then reversed; the direction of each score; the mean row last
    by_psnr = ['<b>&amp;"x\'', 'clip', 'b#1 %41?(2)', 'a']
    b.click('#scores thead th:nth-child(2) button')
    assert names_in_order(b) == by_psnr
    b.click('#scores thead th:nth-child(2) button')
    assert names_in_order(b) == by_psnr[::-1]
    b.click('#scores thead th:nth-child(3) button')  # lpips: lower is better, first; NaN last
    assert names_in_order(b) == ['<b>&amp;"x\'', 'b#1 %41?(2)', 'a', 'clip']
    b.click('#scores thead th:nth-child(1) button')
    assert names_in_order(b)[0] == '<b>&amp;"x\''
    assert b.run('var t = document.getElementById("scores"); return t.rows[t.rows.length - 1].cells[0].textContent') \
        == 'mean (4)'

    # the slider: dragging its bar changes the slider and nothing else on the screen
    b.run('document.getElementById("item-0").scrollIntoView()')
    view = rect(b, '#item-0 .viewer')
    assert (view['w'], view['h']) == (W * K, H * K)
    before = b.screenshot()
    b.drag('#item-0 .handle', -W * K // 4, 0)
    after = b.screenshot()
    assert abs(int(b.run('return document.querySelector("#item-0 .split").value')) - 250) <= 6
    box = rect(b, '#item-0 .compare')
    changed = np.argwhere((before != after).any(-1))
    assert len(changed), 'moving the slider changed nothing on the screen'
    top, left, bottom, right = box['y'] - 2, box['x'] - 2, box['y'] + box['h'] + 2, box['x'] + box['w'] + 2
    assert top <= changed[:, 0].min() and changed[:, 0].max() <= bottom, (changed[:, 0].min(), box)
    assert left <= changed[:, 1].min() and changed[:, 1].max() <= right, (changed[:, 1].min(), box)
    x0, y0 = view['x'], view['y']
    swept = (before != after).any(-1)[int(y0) + 40:int(y0 + view['h']) - 2, int(x0 + W * K / 4) + 9:int(x0 + W * K / 2) - 9]
    assert swept.mean() > 0.99  # from the output back to the input, every pixel the bar swept
    out, row = pattern(0, 0), 30  # left of the bar the input, right of it the output
    assert np.abs(pixel(after, x0 + 8 * K + 2, y0 + row * K + 2) - as_input(out)[row, 8]).max() <= 2
    assert np.abs(pixel(after, x0 + 50 * K + 2, y0 + row * K + 2) - out[row, 50]).max() <= 2

    # the magnifier: a click on the image shows that region of input, output and target, the pixel at its centre
    assert b.run('return document.querySelector("#item-0 .zoom").hidden') is True
    px, py = 42, 26  # the middle of a 4x4 block: a pixel's rounding either way lands in the same colour
    b.click_at('#item-0 .viewer', round(px * K - view['w'] / 2), round(py * K - view['h'] / 2))
    assert b.run('return document.querySelector("#item-0 .zoom").hidden') is False
    shot = b.screenshot()
    for kind, image in (('input', as_input(out)), ('output', out), ('target', as_target(out))):
        lens = rect(b, f'#item-0 .lens[data-kind="{kind}"]')
        centre = pixel(shot, lens['x'] + lens['w'] / 2, lens['y'] + lens['h'] / 2)
        assert np.abs(centre - image[py, px]).max() <= 2, (kind, centre, image[py, px])

    # output | target: the slider's two sides change
    b.click('#item-0 input[value="output|target"]')
    assert b.run_async(LOAD_ALL)
    b.run('document.getElementById("item-0").scrollIntoView()')
    shot = b.screenshot()
    assert np.abs(pixel(shot, x0 + 8 * K + 2, y0 + row * K + 2) - out[row, 8]).max() <= 2
    assert np.abs(pixel(shot, x0 + 50 * K + 2, y0 + row * K + 2) - as_target(out)[row, 50]).max() <= 2

    # an item without an input: output | target only; a clip: its frame strip picks the frame everything shows
    assert b.run('return Array.from(document.querySelectorAll("#item-2 input[type=radio]"), r => r.value)') \
        == ['output|target']
    b.click('#item-3 .frame[data-frame="2"]')
    shown = b.run('return Array.from(document.querySelectorAll("#item-3 .viewer img"), i => i.getAttribute("src"))')
    assert shown == ['clip_002.png', 'input/clip_002.png']
    assert b.run('return document.querySelector("#item-3 .frameno").textContent') == 'frame 2 of 3'
    assert all(w == W for _, w in b.run_async(LOAD_ALL))


@pytest.mark.xdist_group('chromium')  # one browser for both (xdist's loadgroup)
def test_main_tests_page_opens_in_chromium_with_every_image_loaded(browser, tmp_path, tiny_run):
    res = run_main('main_test', ['--opt', tiny_run.opt_path, '--out', str(tmp_path)])
    assert res.returncode == 0, res.stderr[-2000:]
    browser.get((tmp_path / 'index.html').as_uri())
    loaded = browser.run_async(LOAD_ALL)
    assert len(loaded) == 2 * 8 and all(w > 0 for _, w in loaded), loaded


@pytest.mark.xdist_group('chromium')
def test_main_tests_page_of_inputs_of_ones_own_opens_in_chromium_with_every_image_loaded(browser, input_page):
    browser.get((input_page[1] / 'index.html').as_uri())
    loaded = browser.run_async(LOAD_ALL)
    assert len(loaded) == 2 * 7 and all(w > 0 for _, w in loaded), loaded
