"""`val.metrics`: metrics scored next to PSNR/SSIM, everywhere those are reported, and `val.best_metric`.

The metrics are the two of tests/extra_metrics.py, registered like any member of metrics/: a full-reference
one where lower is better (`mean_abs_error`) and a no-reference one (`brightness`).
"""
import json
import os
import pickle

import numpy as np
import pytest
import torch
from torch import nn

from models.evaluation import METRICS, describe_input, evaluate
from models.restorer import ImageRestorer
from models.scoring import build_metrics
from option_rules import option_rules
from tests.conftest import free_port, noisy_batches, run_main, tiny_options, write_options
from tests.extra_metrics import Brightness, MeanAbsError  # registered: main_train / main_test (run_main) score them
from training.resume_plan import is_better, resumed_best
from utils.errors import OptionsError
from utils.history import read_history
from utils.image import tensor2uint
from utils.options import validate

CPU = torch.device('cpu')
BOTH = ['mean_abs_error', 'brightness']


def _val(**val):
    return validate({'task': 't', 'netG': {'net_type': 'dncnn'}, 'val': val}, option_rules())


def test_chosen_metrics_get_their_keys_filled_and_other_metrics_keys_are_noted_and_dropped():
    assert _val()['val']['metrics'] == [] and 'mae_weight' not in _val()['val']  # the default: PSNR/SSIM only
    opt = _val(metrics=BOTH, best_metric='mean_abs_error')
    assert opt['val']['mae_weight'] == 1.0 and opt['val']['best_metric'] == 'mean_abs_error'
    opt = _val(metrics=['brightness'], mae_weight=2)
    assert 'mae_weight' not in opt['val'] and opt['_notes'] == ['val.mae_weight: not read by metrics brightness; ignored']
    assert build_metrics(_val(metrics=BOTH, mae_weight=2)['val'], CPU)['mean_abs_error'].weight == 2


def test_the_perceptual_metrics_of_metrics_are_chosen_the_same_way():
    opt = _val(metrics=['lpips', 'niqe'], best_metric='lpips')['val']
    assert (opt['lpips_net'], opt['lpips_path'], opt['niqe_crop_border']) == ('alex', None, 0)
    assert not any(k.startswith('dists_') for k in opt)
    assert _val(metrics=['niqe'], lpips_net='vgg')['_notes'] == ['val.lpips_net: not read by metrics niqe; ignored']


@pytest.mark.parametrize('val, message', [
    ({'metrics': ['brightnes']}, 'val.metrics: unknown metric "brightnes" (did you mean "brightness"?); '),
    ({'metrics': ['brightness', 'brightness']}, 'val.metrics: ["brightness", "brightness"] names brightness twice'),
    ({'metrics': 'brightness'}, 'val.metrics: expected a list, got "brightness"'),
    ({'metrics': ['mean_abs_error'], 'mae_weight': 0}, 'val.mae_weight: 0 must be > 0'),
    ({'best_metric': 'brightness'}, 'val.best_metric: "brightness" is not scored; use one of psnr, ssim, psnr_y, '
                                    'ssim_y (or add it to val.metrics)'),
    ({'metrics': ['brightness'], 'best_metric': 'PSNR'}, 'val.best_metric: "PSNR" is not scored (did you mean "psnr"?); '
                                                         'use one of psnr, ssim, psnr_y, ssim_y, brightness'),
])
def test_a_bad_metric_option_is_one_line_naming_the_key(val, message):
    with pytest.raises(OptionsError) as e:
        _val(**val)
    assert str(e.value).startswith(f'<options>: {message}') and '\n' not in str(e.value)


def _batches():
    return noisy_batches(3, 20)


def test_metrics_score_the_frames_psnr_scores_with_its_border_and_a_no_reference_one_scores_the_input_alone():
    """An identity network: the restored images are the inputs, so the input scores equal the item scores."""
    border = 3
    metrics = {'mean_abs_error': MeanAbsError(CPU, 1.0), 'brightness': Brightness(CPU)}
    res = evaluate(ImageRestorer(nn.Identity(), CPU, border, metrics=metrics), _batches(), 6, score_input=True)
    plain = evaluate(ImageRestorer(nn.Identity(), CPU, border), _batches(), 6)
    assert res.names == (*METRICS, 'mean_abs_error', 'brightness')
    assert res.higher_is_better == {**dict.fromkeys(METRICS, True), 'mean_abs_error': False, 'brightness': True}
    assert [row.scores[:4] for row in res.rows] == [row.scores for row in plain.rows]  # PSNR/SSIM unchanged
    inner = (slice(border, -border), slice(border, -border))
    for row, (E, H) in zip(res.rows, [(tensor2uint(b['L'][j]), tensor2uint(b['H'][j])) for b in _batches()
                                      for j in range(2)]):
        mae = np.abs(E[inner].astype(float) - H[inner].astype(float)).mean()
        assert row.scores[4:] == pytest.approx([mae, E[inner].mean()], rel=1e-12)
    means = np.mean([row.scores for row in res.rows], axis=0)
    assert [res.means[k] for k in res.names] == pytest.approx(means.tolist(), rel=1e-12)
    assert res.input == {**res.means, 'upscale': 1.0}
    assert describe_input(res.input, res.names).endswith(
        f'; mean_abs_error {res.means["mean_abs_error"]:.4f}, brightness {res.means["brightness"]:.4f}')


def _evaluate_as_rank(rank, port, out):
    """Rank `rank` of 2 (gloo): its shard of `_batches()` (round r: batch 2r + rank) through `evaluate`."""
    torch.distributed.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=2)
    try:
        metrics = {'mean_abs_error': MeanAbsError(CPU, 1.0), 'brightness': Brightness(CPU)}
        res = evaluate(ImageRestorer(nn.Identity(), CPU, 2, metrics=metrics), _batches()[rank::2], 3, score_input=True)
        with open(f'{out}.{rank}', 'wb') as f:
            pickle.dump((res.means, res.input, [(row.name, row.scores) for row in res.rows]), f)
    finally:
        torch.distributed.destroy_process_group()


def test_two_ranks_give_exactly_the_means_of_one_process(tmp_path):
    """Rows come back in dataset order on every rank, so the float64 sums are the same sums in the same order."""
    metrics = {'mean_abs_error': MeanAbsError(CPU, 1.0), 'brightness': Brightness(CPU)}
    one = evaluate(ImageRestorer(nn.Identity(), CPU, 2, metrics=metrics), _batches(), 3, score_input=True)
    torch.multiprocessing.spawn(_evaluate_as_rank, args=(free_port(), str(tmp_path / 'res')), nprocs=2)
    for rank in (0, 1):
        with open(tmp_path / f'res.{rank}', 'rb') as f:
            assert pickle.load(f) == (one.means, one.input, [(row.name, row.scores) for row in one.rows])


def test_the_best_validation_counts_the_way_the_metric_says_and_a_nan_never_wins():
    assert is_better(30.0, None, True) and is_better(31.0, 30.0, True) and not is_better(29.0, 30.0, True)
    assert is_better(0.1, 0.2, False) and not is_better(0.3, 0.2, False)
    assert not is_better(float('nan'), None, True) and not is_better(float('nan'), 0.2, False)


def test_resume_goes_on_from_the_saved_best_converting_the_record_of_earlier_versions():
    old = {'psnr': 28.5, 'iter': 4}  # what the state file held before val.best_metric
    assert resumed_best(old, None, 8, 'psnr') == ({'metric': 'psnr', 'value': 28.5, 'iter': 4}, '')
    assert resumed_best({'psnr': float('-inf'), 'iter': 0}, None, 8, 'psnr')[0]['value'] is None
    # the `best` note of a validation after the save resumed is newer; an old note has no metric: it was PSNR
    assert resumed_best(old, (6, 29.0, 'psnr'), 8, 'psnr')[0] == {'metric': 'psnr', 'value': 29.0, 'iter': 6}
    assert resumed_best(old, (10, 29.0, 'psnr'), 8, 'psnr')[0]['iter'] == 4  # after the resumed save: abandoned
    saved = {'metric': 'mean_abs_error', 'value': 3.25, 'iter': 4}
    assert resumed_best(saved, (6, 3.0, 'psnr'), 8, 'mean_abs_error') == (saved, '')  # another metric's note


def test_another_best_metric_on_resume_restarts_the_best_tracking_with_a_warning():
    best, note = resumed_best({'psnr': 28.5, 'iter': 4}, None, 8, 'mean_abs_error')
    assert best == {'metric': 'mean_abs_error', 'value': None, 'iter': 0}
    assert note == ('val.best_metric changed from psnr (best 28.5000 at iteration 4) to mean_abs_error: the best '
                    'checkpoint is chosen by mean_abs_error from the next validation on (best_*.pth is replaced then)')


def _opt(tmp_path, demo_images, **val):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, checkpoint_test=2, total_iter=8)
    opt['val'] = val
    return write_options(str(tmp_path / 'o.json'), opt)


def test_training_reports_the_metrics_and_keeps_the_checkpoint_of_the_lowest_error(tmp_path, demo_images):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    opt = _opt(tmp_path, demo_images, metrics=BOTH, best_metric='mean_abs_error')
    res = run_main('main_train', ['--opt', opt, '--set', 'logging.curves=true'])  # the metrics' curves drawn too
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    task = tmp_path / 'exp' / 'tiny'
    val = [r for r in read_history(str(task / 'history.jsonl')) if r['kind'] == 'val']
    assert [r['iter'] for r in val] == [2, 4, 6, 8] and all(set(BOTH) <= set(r) for r in val)
    line = (f'<iter:8> validation on 8 items: PSNR {val[-1]["psnr"]:.2f} dB, SSIM {val[-1]["ssim"]:.4f}; '
            f'Y: PSNR {val[-1]["psnr_y"]:.2f} dB, SSIM {val[-1]["ssim_y"]:.4f}; '
            f'mean_abs_error {val[-1]["mean_abs_error"]:.4f}, brightness {val[-1]["brightness"]:.4f}')
    assert line in res.stdout
    assert 'validation input: the input itself (L against H) on 8 items: PSNR ' in res.stdout
    assert len({r['mean_abs_error'] for r in val}) == 4  # the lowest and the highest differ
    best = min(val, key=lambda r: r['mean_abs_error'])
    with open(task / 'models' / 'best') as f:
        assert f.read().split() == [str(best['iter']), f'{best["mean_abs_error"]:.6g}', 'mean_abs_error']
    state = torch.load(task / 'models' / '8_state.pth', map_location='cpu', weights_only=True)
    assert state['best'] == {'metric': 'mean_abs_error', 'value': best['mean_abs_error'], 'iter': best['iter']}
    assert f'best mean_abs_error {best["mean_abs_error"]:.4f} at iteration {best["iter"]}' in res.stdout
    acc = EventAccumulator(str(task / 'tb_logger'))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars('val/brightness')] == [
        (r['iter'], pytest.approx(r['brightness'], rel=1e-6)) for r in val]
    assert os.path.exists(task / 'curves.png')

    # a checkpoint of an earlier version (best = {'psnr', 'iter'}, a note without metric) resumes; choosing
    # PSNR again restarts nothing, and the best is PSNR's from then on
    state['best'] = {'psnr': 1.0, 'iter': 4}
    torch.save(state, task / 'models' / '8_state.pth')
    with open(task / 'models' / 'best', 'w') as f:
        f.write('4 1.0000\n')
    res = run_main('main_train', ['--opt', opt, '--set', 'train.total_iter=10',
                                  '--set', 'val.best_metric=psnr'])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'val.best_metric changed' not in res.stdout + res.stderr
    last = read_history(str(task / 'history.jsonl'))[-1]
    with open(task / 'models' / 'best') as f:
        assert f.read().split() == ['10', f'{last["psnr"]:.6g}', 'psnr']  # beats the 1 dB of the old record

    res = run_main('main_train', ['--opt', opt, '--set', 'train.total_iter=12'])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f'resume: val.best_metric changed from psnr (best {last["psnr"]:.4f} at iteration 10) to mean_abs_error' \
        in res.stdout + res.stderr
    with open(task / 'models' / 'best') as f:
        assert f.read().split()[::2] == ['12', 'mean_abs_error']  # the first validation after the change


def test_main_test_writes_a_column_per_metric_and_their_input_scores(tmp_path, demo_images):
    opt = _opt(tmp_path, demo_images)
    assert run_main('main_train', ['--opt', opt, '--set', 'train.total_iter=2']).returncode == 0
    res = run_main('main_test', ['--opt', opt, '--no-images', '--out', str(tmp_path / 'out'),
                                 '--set', json.dumps(BOTH).join(['val.metrics=', ''])])
    assert res.returncode == 0, res.stderr[-2000:]
    with open(tmp_path / 'out' / 'results.csv') as f:
        rows = [line.rstrip('\n').split(',') for line in f]
    assert rows[0] == ['name', *METRICS, *BOTH] and rows[-1][0] == 'mean' and len(rows) == 10
    mean = dict(zip(rows[0][1:], rows[-1][1:]))
    assert f'; mean_abs_error {mean["mean_abs_error"]}, brightness {mean["brightness"]}; table: ' in res.stdout
    assert 'input: the input itself (L against H) on 8 items: PSNR ' in res.stdout
    assert res.stdout.split('input: ')[-1].count('mean_abs_error') == 1


def test_a_test_image_a_metric_cannot_score_stops_the_run_at_start_up_with_one_line(tmp_path, demo_images):
    """NIQE needs two 96x96 blocks; the demo's 128x128 test images hold one: the run stops before it writes
    anything (exit 2), not at its first validation."""
    opt = _opt(tmp_path, demo_images, metrics=['niqe'], niqe_params_path='random')
    res = run_main('main_train', ['--opt', opt])
    assert res.returncode == 2, res.stdout[-3000:] + res.stderr[-3000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: datasets.test: its first item cannot be scored: ') \
        and 'NIQE' in lines[0], res.stderr
    assert not (tmp_path / 'exp').exists()
