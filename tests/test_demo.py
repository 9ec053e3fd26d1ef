"""The README's first command: the built-in demo trains DnCNN and beats the noisy input (the command itself in a
process of its own, as a user runs it; what its log says in the test's process: `run_main`)."""
import re
import sys

import pytest

from tests.conftest import run, run_main

PY = sys.executable
# The demo's noisy validation inputs as images (clipped to [0, 255], rounded) against the clean ones, as the
# log gives it; the noise alone, unclipped, would be 20*log10(255/25) ≈ 20.17 dB.
NOISY_INPUT_PSNR = 20.42


def _psnrs(log: str):
    return [float(x) for x in re.findall(r'validation on \d+ items: PSNR ([\d.]+) dB', log)]


def test_demo_command_runs_shortened_and_validates(tmp_path):
    res = run([PY, 'main_train.py', '--opt', 'options/train_dncnn_demo.json',
               '--set', f'path.root={tmp_path}', '--set', 'train.total_iter=20',
               '--set', 'train.checkpoint_test=10', '--set', 'train.checkpoint_print=10'], timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert len(_psnrs(res.stdout)) == 2
    assert (tmp_path / 'dncnn_demo_color_sigma25' / 'models' / '20_E.pth').exists()


def test_the_log_gives_the_noisy_inputs_psnr_once_at_the_first_validation(tmp_path):
    """The number README compares against, in the log itself: the gain is visible."""
    res = run_main('main_train', ['--opt', 'options/train_dncnn_demo.json', '--set', f'path.root={tmp_path}',
                                  '--set', 'train.total_iter=4', '--set', 'train.checkpoint_test=2',
                                  '--set', 'train.checkpoint_print=2'])
    assert res.returncode == 0, res.stderr[-3000:]
    found = re.findall(r'<iter:(\d+)> validation input: the input itself \(L against H\) on 8 items: PSNR ([\d.]+) dB',
                       res.stdout)
    assert len(found) == 1 and found[0][0] == '2', res.stdout[-3000:]
    assert float(found[0][1]) == pytest.approx(NOISY_INPUT_PSNR, abs=0.02)
    assert len(_psnrs(res.stdout)) == 2


@pytest.mark.slow
def test_full_demo_clearly_beats_the_noisy_input(tmp_path):
    res = run([PY, 'main_train.py', '--opt', 'options/train_dncnn_demo.json', '--set', f'path.root={tmp_path}'],
              timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    final = _psnrs(res.stdout)[-1]
    assert final > NOISY_INPUT_PSNR + 4, res.stdout[-3000:]
