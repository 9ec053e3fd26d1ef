"""Start-up: every user mistake is found before the run folder is written, and `--fresh` acts once per run
(end to end with a torchrun restart in tests/test_run_folder.py).

`main_train` runs in the test's process (`run_main`); evidence is the exit code, stderr and what exists on disk.
"""
import os

import pytest
import torch

from tests.conftest import run_main, tiny_options, write_options
from training.launcher import is_restart


@pytest.mark.parametrize('override, message', [
    ('netG.nc=0', 'netG (dncnn): parameter model.0.weight has no elements'),
    ('n_channels=1', "netG.in_nc: 3, but datasets.train gives 1-channel images (n_channels 1): netG's first "
                     "layer takes 3 channels and is given 1"),
    ('train.G_lossfn_type="ssimm"', 'G_lossfn_type'),
    ('model="gann"', 'model'),
    ('path.pretrained_netG="/nowhere/G.pth"', 'path.pretrained_netG: /nowhere/G.pth: checkpoint file not found'),
    ('train.accumulate_steps=17', 'train.accumulate_steps: 17 exceeds the 16 batches of 4 per epoch of each process '
                                  '(64 of the 64 training samples on each of 1 process(es))'),
], ids=['nc-0', 'gray-data-colour-net', 'unknown-loss', 'unknown-model', 'missing-weights', 'accumulation-over-epoch'])
def test_a_mistake_found_while_building_exits_2_with_one_line_and_writes_nothing(tmp_path, demo_images, console_held,
                                                                                 override, message):
    path = write_options(str(tmp_path / 'o.json'), tiny_options(str(tmp_path / 'exp'), demo_images))
    res = run_main('main_train', ['--opt', path, '--set', override])
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert res.stderr.count('\n') == 1 and res.stderr.startswith('error: ') and message in res.stderr, res.stderr
    assert res.stdout == ''  # the start-up lines of a start that did not happen are not shown
    assert not (tmp_path / 'exp').exists(), os.listdir(tmp_path / 'exp')


class _Indexes(torch.nn.Module):
    """Networks written elsewhere (spandrel's) index channels or assert sizes of their input."""

    def __init__(self, fails: str):
        super().__init__()
        self.fails = fails

    def forward(self, x):
        if self.fails == 'assert':
            assert x.shape[-1] % 64 == 0, 'the width must be a multiple of 64'
        return x * x[:, 3]


@pytest.mark.parametrize('fails, reason', [('index', 'IndexError: index 3 is out of bounds'),
                                           ('assert', 'AssertionError: the width must be a multiple of 64')])
def test_a_network_that_indexes_or_asserts_on_a_sample_is_one_line(tmp_path, demo_images, fails, reason):
    from models.model_plain import ModelPlain
    from option_rules import option_rules
    from utils.errors import UserError
    from utils.options import validate
    model = ModelPlain(validate(tiny_options(str(tmp_path / 'exp'), demo_images), option_rules()), torch.device('cpu'))
    model.net_g = _Indexes(fails)
    sample = {'L': torch.rand(3, 8, 8), 'H': torch.rand(3, 8, 8)}
    with pytest.raises(UserError, match=r'^netG \(dncnn\) cannot take a sample of datasets.train \(L \(3, 8, 8\), '
                                        r'H \(3, 8, 8\)\): ' + reason):
        model.check_sample(sample, 'datasets.train')


def test_rerunning_a_finished_run_writes_nothing_and_says_how_to_train_further(tmp_path, demo_images):
    path = write_options(str(tmp_path / 'o.json'), tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=2))
    assert run_main('main_train', ['--opt', path]).returncode == 0
    before = sorted(os.listdir(tmp_path / 'exp' / 'tiny')) + sorted(os.listdir(tmp_path / 'exp' / 'tiny' / 'options'))
    res = run_main('main_train', ['--opt', path])
    assert res.returncode == 0, res.stderr[-2000:]
    assert ('nothing to do: ' in res.stdout and 'is at iteration 2, train.total_iter is 2; raise train.total_iter to '
            'train further (e.g. --set train.total_iter=4), or --fresh to start over' in res.stdout), res.stdout
    assert sorted(os.listdir(tmp_path / 'exp' / 'tiny')) + sorted(os.listdir(tmp_path / 'exp' / 'tiny' / 'options')) \
        == before  # no second log file, no second options file


def test_a_long_start_up_shows_its_lines_after_a_few_seconds_and_then_live(capsys):
    import logging
    import time

    from utils import logger as logger_module
    log = logger_module.setup_logger(0)
    held = [h for h in log.handlers if isinstance(h, logger_module._HeldConsole)][0]
    held._timer.cancel()
    console = logger_module._HeldConsole(held.stream, hold_s=0.2)
    console.setFormatter(held.formatter)
    log.removeHandler(held)
    log.addHandler(console)
    log.info('checking 100000 images')
    assert 'checking' not in capsys.readouterr().out
    time.sleep(0.5)  # past the hold: shown without waiting for the checks, and later lines live
    log.info('still checking')
    out = capsys.readouterr().out
    assert 'checking 100000 images' in out and 'still checking' in out
    log.error('a failure is never held')
    logging.getLogger('restoration').removeHandler(console)


def test_a_network_whose_output_does_not_match_the_target_is_refused_before_training(tmp_path, demo_images):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images)
    opt['scale'] = 4  # the denoising dataset has no scale: its H is the size of L
    opt['netG'] = {'net_type': 'msrresnet1', 'in_nc': 3, 'out_nc': 3, 'nc': 8, 'nb': 1}
    path = write_options(str(tmp_path / 'o.json'), opt)
    res = run_main('main_train', ['--opt', path])
    assert res.returncode == 2, res.stderr[-2000:]
    assert 'but the target H is (3, 24, 24)' in res.stderr and res.stderr.count('\n') == 1, res.stderr
    assert not (tmp_path / 'exp').exists()


def test_the_log_file_holds_what_was_logged_before_the_run_folder_existed(tiny_run):
    (log,) = [f for f in os.listdir(tiny_run.folder) if f.startswith('train_') and f.endswith('.log')]
    text = open(os.path.join(tiny_run.folder, log)).read()
    for line in ('distributed: mode=single', 'training samples 64', 'network DnCNN', 'end of training'):
        assert line in text, text


@pytest.mark.parametrize('env, restart', [
    ({}, False),
    ({'TORCHELASTIC_RESTART_COUNT': '0'}, False),
    ({'TORCHELASTIC_RESTART_COUNT': '2'}, True),
    ({'SLURM_RESTART_COUNT': '0'}, False),
    ({'SLURM_RESTART_COUNT': '1'}, True),
])
def test_a_torchrun_restart_or_a_slurm_requeue_is_recognised_as_a_restart(env, restart):
    assert is_restart(env) is restart
