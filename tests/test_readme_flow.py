"""README.md's "Train on your own images (super-resolution x4)", steps 2 to 6, run as the README writes them (the
commands are read from it), on a few generated images in place of one's own; each step's output is checked.

Training adds `--set train.total_iter=300` and `--set datasets.train.H_size=48`: KAIR's full MSRResNet from its
initialisation moves at the pace of Adam's steps at lr 1e-4 (hundreds of iterations before its output is as good
as bicubic upscaling, thousands on photographs), so the patch is a quarter of the file's to make each step 4x
cheaper. The images are black-and-white pixel art, blocks of 4x4 pixels on the x4 grid: bicubic upscaling of
their low-resolution versions blurs every edge (10.7 dB), while nearest-neighbour upsampling with more contrast,
which MSRResNet's `upconv` and the clipping of its output make easy to learn, restores them exactly; after 300
iterations the validated EMA scores about 2 dB above the input (measured: 10.9 dB at 200 iterations, against
10.7).
"""
import os
import re
import shlex
import sys
import warnings

import cv2
import numpy as np
import pytest

from tests.conftest import ROOT, clean_env, need_module, run, run_main

ITERATIONS = 300
SECTION = '## Train on your own images'


def readme_commands():
    """The `python ...` commands of the numbered steps of the README's section, in order, as lists of words."""
    with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
        text = f.read()
    section = text[text.index(SECTION):]
    steps = re.search(r'^1\. .*?(?=\n\n[^\s\d])', section, flags=re.M | re.S).group(0)
    return [shlex.split(c) for c in re.findall(r'(?:`|^ *)(python [^`\n]+)', steps, flags=re.M)]


def pixel_art(path, height, width, seed):
    """Black and white blocks of 4x4 pixels."""
    rng = np.random.default_rng(seed)
    small = (rng.random((height // 4, width // 4, 1)) < 0.5).astype(np.uint8).repeat(3, axis=2) * 255
    cv2.imwrite(str(path), np.kron(small, np.ones((4, 4, 1), dtype=np.uint8)))


def command(script):
    """The README's commands that run `script`, as lists of words."""
    found = [w for w in readme_commands() if w[1] == script]
    assert found, f'README.md: no `python {script}` command in "{SECTION}"'
    return found


def psnr_of(line_start, out):
    return [float(v) for v in re.findall(re.escape(line_start) + r'.*?: PSNR ([\d.]+) dB', out)]


@pytest.mark.slow
def test_the_readme_flow_trains_evaluates_exports_and_restores_ones_own_images(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.symlink(os.path.join(ROOT, 'options'), 'options')  # the README's paths are relative to the repository
    # step 2: training images (large enough for step 3's 480x480 sub-images) and two held-out ones
    os.makedirs('datasets/my_hr')
    os.makedirs('testsets/set5')
    for k in range(3):
        pixel_art(f'datasets/my_hr/photo{k}.png', 512, 512, k)
    for k in range(2):
        pixel_art(f'testsets/set5/held_out{k}.png', 128, 96, 10 + k)

    # step 3: sub-images
    (extract,) = command('scripts/extract_subimages.py')
    from scripts import extract_subimages
    assert extract_subimages.main(extract[2:]) == 0
    sub = extract[extract.index('--output') + 1]
    assert sorted(os.listdir(sub))[:2] == ['photo0_s001.png', 'photo0_s002.png'] and len(os.listdir(sub)) == 12

    # step 4: training, on the sub-images as the README says
    (train,) = command('main_train.py')
    train = [w.replace('=datasets/my_hr', f'={sub}') for w in train] + [
        '--set', f'train.total_iter={ITERATIONS}', '--set', 'datasets.train.H_size=48']
    res = run([sys.executable, os.path.join(ROOT, train[1]), *train[2:]], cwd=str(tmp_path), timeout=1200,
              env=clean_env())
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'worker processes' not in res.stderr  # torch's warning about more loader workers than cores
    (given,) = psnr_of('validation input: the input upscaled by bicubic x4', res.stdout)
    (final,) = psnr_of(f'<iter:{ITERATIONS}> validation on 2 items', res.stdout)
    assert final > given, res.stdout[-3000:]
    assert f'weights: EMA (decay {1 - ITERATIONS ** -0.75:.6g} at iteration {ITERATIONS})' in res.stdout
    run_folder = os.path.join('experiments', 'train_msrresnet0')
    assert os.path.isfile(os.path.join(run_folder, 'models', f'{ITERATIONS}_E.pth'))

    # step 5: evaluation and export
    test, restore = command('main_test.py')
    evaluated = run_main('main_test', test[2:], cwd=str(tmp_path))
    assert evaluated.returncode == 0, evaluated.stdout[-3000:] + evaluated.stderr[-3000:]
    results = os.path.join(run_folder, 'results', 'test_dataset')
    with open(os.path.join(results, 'results.md'), encoding='utf-8') as f:
        table = f.read()
    assert f'`{os.path.join(run_folder, "models", f"{ITERATIONS}_E.pth")}`' in table
    assert re.search(rf'\| test_dataset \| 2 \| {final:.2f} \|', table), table
    assert os.path.isfile(os.path.join(results, 'index.html'))
    (export,) = command('scripts/export.py')
    for name in ('onnx', 'onnxscript', 'onnxruntime'):
        need_module(name)
    from scripts import export as export_script
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # torch.onnx's exporter's own deprecation notes
        assert export_script.main(export[2:]) == 0
    assert sorted(os.listdir(os.path.join(run_folder, 'export'))) == [f'{ITERATIONS}_E.onnx',
                                                                     f'{ITERATIONS}_E.safetensors']

    # step 6: one's own images, without targets
    inp, out = restore[restore.index('--input') + 1], restore[restore.index('--out') + 1]
    os.makedirs(inp)
    for k in range(2):
        pixel_art(os.path.join(inp, f'mine{k}.png'), 48, 64, 20 + k)
    restored = run_main('main_test', restore[2:], cwd=str(tmp_path))
    assert restored.returncode == 0, restored.stdout[-3000:] + restored.stderr[-3000:]
    for k in range(2):
        img = cv2.imread(os.path.join(out, f'mine{k}.png'))
        given_img = cv2.imread(os.path.join(inp, f'mine{k}.png'))
        assert img.shape == (192, 256, 3)
        assert img.std() > 40 and abs(float(img.mean()) - float(given_img.mean())) < 30  # neither constant nor dark
    assert os.path.isfile(os.path.join(out, 'index.html'))
