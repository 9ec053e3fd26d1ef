"""What a run folder shows without TensorBoard: history.jsonl, curves.png, and progress lines."""
import json
import logging
import os
import signal
import subprocess
import sys
import time

import cv2
import pytest

from conftest import ROOT, clean_env, copy_run, run, run_main, tiny_options, write_options
from utils.history import History, read_history
from utils.plot import CURVES_FILE, BackgroundPlotter
from utils.progress import progress

PY = sys.executable


def _run_folder(tmp_path):
    return tmp_path / 'exp' / 'tiny'


def _train_rows(rows):
    return [r for r in rows if r['kind'] == 'train']


def test_history_rows_match_the_tensorboard_scalars_of_the_same_run(tiny_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    rows = read_history(os.path.join(tiny_run.folder, 'history.jsonl'))
    train, val = _train_rows(rows), [r for r in rows if r['kind'] == 'val']
    assert [r['iter'] for r in train] == [2, 4, 6, 8] and [r['iter'] for r in val] == [4, 8]
    events = EventAccumulator(os.path.join(tiny_run.folder, 'tb_logger'))
    events.Reload()

    def scalars(tag):
        return {e.step: e.value for e in events.Scalars(tag)}
    for tag, key, kind in (('train/G_loss', 'G_loss', train), ('train/lr', 'lr', train),
                           ('perf/iter_time', 'iter_time', train), ('val/psnr', 'psnr', val),
                           ('val/ssim_y', 'ssim_y', val)):
        tb = scalars(tag)
        assert sorted(tb) == [r['iter'] for r in kind]
        assert all(abs(tb[r['iter']] - r[key]) <= 1e-6 * max(1.0, abs(r[key])) for r in kind), tag  # TB stores float32
    assert all(r['test_set'] == 'test_dataset' and r['items'] == 8 for r in val)
    # the planned schedule (curves.png's lr panel) is what the log then showed at each print step
    plans = [r for r in rows if r['kind'] == 'schedule']
    assert len(plans) == 1 and plans[0]['iter'] == 0
    planned = {it: lr for it, lr in plans[0]['points']}
    assert all(planned[r['iter']] == pytest.approx(r['lr']) for r in train)


def test_after_sigkill_and_resume_the_history_has_each_iteration_once(tmp_path, demo_images):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=400, checkpoint_save=4, checkpoint_test=1000,
                       checkpoint_print=1)
    opt['logging']['use_tensorboard'] = False
    path = write_options(str(tmp_path / 'o.json'), opt)
    history = _run_folder(tmp_path) / 'history.jsonl'
    proc = subprocess.Popen([PY, 'main_train.py', '--opt', path], cwd=ROOT, env=clean_env(OMP_NUM_THREADS='1'),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # killed between two saves, with rows past the last one
            its = [r['iter'] for r in read_history(str(history))]
            if its and its[-1] >= 6 and its[-1] % 4 in (2, 3):
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    killed_at = read_history(str(history))[-1]['iter']
    with open(history, 'ab') as f:
        f.write(b'{"kind":"train","iter":9')  # as if the kill had cut a write short
    res = run_main('main_train', ['--opt', path, '--set', f'train.total_iter={killed_at + 4}'])
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'rows after iteration' in res.stdout
    its = [r['iter'] for r in _train_rows(read_history(str(history)))]
    assert its == list(range(1, killed_at + 5)), (killed_at, its)
    with open(history, 'rb') as f:
        assert all(json.loads(line) for line in f)  # every line complete


def test_curves_png_is_drawn_at_validation_and_again_from_the_history_alone(tmp_path, tiny_run):
    copy_run(tiny_run, str(tmp_path))  # the drawing is removed below
    curves = _run_folder(tmp_path) / 'curves.png'
    img = cv2.imread(str(curves))
    assert curves.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n' and img is not None and img.shape[1] > 400
    curves.unlink()
    for name in os.listdir(_run_folder(tmp_path)):  # nothing but the history is needed
        if name != 'history.jsonl':
            p = _run_folder(tmp_path) / name
            if p.is_file():
                p.unlink()
    res = run([PY, os.path.join('scripts', 'plot_curves.py'), str(_run_folder(tmp_path))])
    assert res.returncode == 0 and res.stdout.strip() == str(curves), res.stderr
    assert cv2.imread(str(curves)) is not None
    bad = run([PY, os.path.join('scripts', 'plot_curves.py'), str(tmp_path)])
    assert bad.returncode == 2 and bad.stderr.count('\n') == 1 and 'no history.jsonl' in bad.stderr


def test_curves_are_drawn_from_a_working_directory_with_its_own_utils_package(tmp_path, monkeypatch):
    """A user's project folder often has a `utils` package: the plotting child must still import ours."""
    folder = tmp_path / 'runs' / 'tiny'
    folder.mkdir(parents=True)
    h = History(str(folder))
    for it in (2, 4):
        h.append({'kind': 'train', 'iter': it, 'epoch': 0, 'lr': 1e-3, 'G_loss': 1.0 / it, 'time': 0.0})
    h.append({'kind': 'val', 'iter': 4, 'epoch': 0, 'psnr': 20.0, 'ssim': 0.5, 'psnr_y': 20.0, 'ssim_y': 0.5,
              'time': 0.0})
    (tmp_path / 'utils').mkdir()
    (tmp_path / 'utils' / '__init__.py').write_text('')
    (tmp_path / 'utils' / 'plot.py').write_text('raise SystemExit("the user\'s utils.plot ran")\n')
    monkeypatch.chdir(tmp_path)
    plotter = BackgroundPlotter(os.path.join('runs', 'tiny'))  # relative to the user's working directory
    plotter.redraw()
    plotter.close()
    assert (folder / CURVES_FILE).stat().st_size > 0


def test_without_logging_curves_no_drawing_starts_and_the_history_is_still_written(tmp_path, monkeypatch):
    from option_rules import read_options
    from utils.logger import Reporter
    started = []
    monkeypatch.setattr(BackgroundPlotter, 'redraw', lambda self: started.append(self.folder))
    raw = tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'))
    for curves in (True, False):
        raw['logging'].update(curves=curves, use_tensorboard=False)
        raw['task'] = f'curves_{str(curves).lower()}'
        opt = read_options(write_options(str(tmp_path / 'o.json'), raw))
        os.makedirs(opt['path']['task'], exist_ok=True)
        reporter = Reporter(opt, True)
        reporter.row({'kind': 'val', 'iter': 4, 'epoch': 0, 'psnr': 20.0, 'ssim': 0.5, 'psnr_y': 20.0,
                      'ssim_y': 0.5})
        reporter.redraw_curves()
        reporter.close()
    assert started == [str(tmp_path / 'exp' / 'curves_true')]  # no drawing for curves_false
    assert [r['iter'] for r in read_history(os.path.join(opt['path']['task'], 'history.jsonl'))] == [4]


def test_curves_show_lr_steps_as_steps_ssim_on_its_own_labelled_axis_and_close_validations_at_scale():
    from utils.plot import curves_figure
    rows = [{'kind': 'train', 'iter': it, 'lr': 1e-3 if it <= 50 else 5e-4, 'G_loss': 1.0 / it} for it in (10, 50, 60)]
    rows += [{'kind': 'val', 'iter': it, 'test_set': 'set5', 'psnr': p, 'ssim': s}
             for it, p, s in ((40, 20.36, 0.2887), (80, 20.40, 0.2891))]
    fig = curves_figure(rows)
    ax_loss, ax_lr, ax_val, ax_ssim = fig.axes
    assert ax_lr.lines[0].get_drawstyle() == 'steps-post'  # a milestone is a step, not a slope
    assert [t.get_text() for t in ax_val.get_legend().get_texts()] == [
        'set5 PSNR', 'best 20.40 dB @ 80', 'set5 SSIM (right axis)']
    assert ax_ssim.get_ylabel() == 'SSIM' and ax_ssim.lines[0].get_color() != ax_val.lines[0].get_color()
    low, high = ax_val.get_ylim()
    assert high - low >= 0.5  # 0.04 dB apart is not drawn corner to corner


def test_curves_draw_the_planned_schedule_of_each_start_until_the_next_and_the_logged_lr():
    from utils.plot import curves_figure, schedule_points
    rows = [{'kind': 'schedule', 'iter': 0, 'points': [[0, 0.05], [5, 1.0], [10, 0.5], [20, 0.0]]},
            {'kind': 'train', 'iter': 5, 'lr': 1.0, 'G_loss': 0.5},
            {'kind': 'schedule', 'iter': 10, 'points': [[10, 0.2], [20, 0.1]]},  # resumed with a lower lr
            {'kind': 'train', 'iter': 15, 'lr': 0.15, 'G_loss': 0.4}]
    assert schedule_points(rows) == [(0, 0.05), (5, 1.0), (10, 0.5), (10, 0.2), (20, 0.1)]
    ax_lr = curves_figure(rows).axes[1]
    assert [line.get_label() for line in ax_lr.lines] == ['schedule', 'logged']
    assert list(ax_lr.lines[0].get_xdata()) == [0, 5, 10, 10, 20]
    assert ax_lr.get_yscale() == 'log'  # 0.05 .. 1.0: more than tenfold


def test_curves_keep_every_point_of_a_negative_loss_on_a_symmetric_log_axis():
    """The psnr loss is minus a PSNR: a log axis would drop it (and a G_loss it makes negative) from the plot."""
    from utils.plot import curves_figure
    rows = [{'kind': 'train', 'iter': it, 'lr': 1e-3, 'G_loss': -20.0 - it / 10, 'l_g_pix': -20.1 - it / 10,
             'l_g_fft_l1': 0.1} for it in (10, 20, 30)]
    ax_loss = curves_figure(rows).axes[0]
    assert ax_loss.get_yscale() == 'symlog'
    assert sorted(line.get_label() for line in ax_loss.lines) == ['G_loss', 'l_g_fft_l1', 'l_g_pix']
    assert all(len(line.get_xdata()) == 3 for line in ax_loss.lines)
    positive = [{**r, 'G_loss': 1.0, 'l_g_pix': 0.5} for r in rows]
    assert curves_figure(positive).axes[0].get_yscale() == 'log'


def test_truncation_keeps_rows_up_to_the_resumed_iteration_and_drops_a_partial_line(tmp_path):
    h = History(str(tmp_path))
    for it in (2, 4, 6):
        h.append({'kind': 'train', 'iter': it, 'loss': float('nan')})
    with open(h.path, 'ab') as f:
        f.write(b'{"kind":"tr')
    assert len(read_history(h.path)) == 3 and read_history(h.path)[0]['loss'] is None  # NaN as null: valid JSON
    assert h.truncate_after(4) == 1
    assert [r['iter'] for r in read_history(h.path)] == [2, 4]
    assert open(h.path, 'rb').read().endswith(b'\n')
    assert h.truncate_after(4) == 0


def test_progress_is_plain_lines_off_a_terminal_and_silent_when_disabled(caplog):
    caplog.set_level(logging.INFO, logger='restoration')
    assert list(progress(range(8), 8, 'testing')) == list(range(8))
    assert [r.getMessage() for r in caplog.records] == ['testing: 2/8', 'testing: 4/8', 'testing: 6/8', 'testing: 8/8']
    caplog.clear()
    assert list(progress(range(8), 8, 'testing', enabled=False)) == list(range(8))
    assert list(progress(range(8), 8, 'validation', lines=False)) == list(range(8))
    assert not caplog.records
