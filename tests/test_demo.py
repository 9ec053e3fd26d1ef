"""The README's first command: the built-in demo trains DnCNN and beats the noisy input."""
import re
import sys

import pytest

from tests.conftest import run

PY = sys.executable
NOISY_INPUT_PSNR = 20.2   # sigma 25 gaussian noise on [0, 255] images: 20*log10(255/25) ≈ 20.17 dB


def _psnrs(log: str):
    return [float(x) for x in re.findall(r'validation on \d+ items: PSNR ([\d.]+) dB', log)]


def test_demo_command_runs_shortened_and_validates(tmp_path):
    res = run([PY, 'main_train.py', '--opt', 'options/train_dncnn_demo.json',
               '--set', f'path.root={tmp_path}', '--set', 'train.total_iter=20',
               '--set', 'train.checkpoint_test=20', '--set', 'train.checkpoint_print=10'], timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert len(_psnrs(res.stdout)) == 1
    assert (tmp_path / 'dncnn_demo_color_sigma25' / 'models' / '20_E.pth').exists()


@pytest.mark.slow
def test_full_demo_clearly_beats_the_noisy_input(tmp_path):
    res = run([PY, 'main_train.py', '--opt', 'options/train_dncnn_demo.json', '--set', f'path.root={tmp_path}'],
              timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    final = _psnrs(res.stdout)[-1]
    assert final > NOISY_INPUT_PSNR + 4, res.stdout[-3000:]
