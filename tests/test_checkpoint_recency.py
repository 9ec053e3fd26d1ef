"""The newest complete, loadable save wins and is never deleted; failed saves leave nothing behind.

Unit tests drive CheckpointDir directly; end-to-end tests run `main_train` in the test's process (`run_main`,
with `faults=` of tests/patched_main.py injected) and read what they leave in `models/`.
"""
import os
import re
import stat

import torch

from tests.conftest import run_main, tiny_options, write_options
from utils.checkpoint import CheckpointDir, load
from utils.errors import UserError
from utils.resume import find_resume_point
from utils.exit_codes import EXIT_NONFINITE, EXIT_SAVE_FAILED


def _save(ckpt: CheckpointDir, step: int) -> None:
    ckpt.save(step, {'G': {'w': torch.full((2,), float(step))}, 'state': {'iter': step}})


def _damage(path) -> None:
    with open(path, 'r+b') as f:
        f.seek(0)
        f.write(b'garbage!' * 8)


def _truncate(path) -> None:
    with open(path, 'r+b') as f:
        f.truncate(100)


def _start(ckpt: CheckpointDir, resume_state=None):
    """What a run does before training (single process): choose the resume point, then set aside."""
    point = find_resume_point({'path': {'resume_state': resume_state}}, ckpt)
    start = point.training['iter'] if point is not None else 0
    return point, ckpt.set_aside_after(start)


def _abandoned(folder) -> dict:
    return {d: sorted(os.listdir(os.path.join(folder, d))) for d in os.listdir(folder) if d.startswith('abandoned_')}


def test_falling_back_from_a_damaged_newest_save_moves_it_aside_and_pruning_keeps_the_new_history(tmp_path):
    ckpt = CheckpointDir(str(tmp_path))
    for step in (4, 8):
        _save(ckpt, step)
    _truncate(ckpt.path(8, 'state'))
    ckpt.keep_last = 1
    point, aside = _start(ckpt)
    assert point.path == ckpt.path(4, 'state')
    assert _abandoned(tmp_path) == {os.path.basename(aside): ['8_G.pth', '8_state.pth']}
    assert ckpt.complete_steps() == [4] and (tmp_path / 'latest').read_text().strip() == '4'
    _save(ckpt, 5)
    _save(ckpt, 6)
    assert ckpt.complete_steps() == [6]   # before: the damaged 8 was kept and 4, 5, 6 deleted
    point, aside = _start(ckpt)
    assert point.path == ckpt.path(6, 'state') and aside is None  # before: nothing loadable, iteration 0


def test_an_explicit_older_resume_moves_newer_saves_aside_and_the_next_plain_start_continues_it(tmp_path):
    ckpt = CheckpointDir(str(tmp_path))
    for step in (10, 12):
        _save(ckpt, step)
    point, aside = _start(ckpt, resume_state=ckpt.path(10, 'state'))
    assert point.training['iter'] == 10
    assert _abandoned(tmp_path) == {os.path.basename(aside): ['12_G.pth', '12_state.pth']}
    _save(ckpt, 11)
    point, aside = _start(ckpt)
    assert point.path == ckpt.path(11, 'state') and aside is None  # before: the abandoned 12


def test_a_set_aside_interrupted_half_way_leaves_no_complete_save_or_marker_in_the_abandoned_history(
        tmp_path, monkeypatch):
    from utils import checkpoint
    ckpt = CheckpointDir(str(tmp_path))
    for step in (4, 8):
        _save(ckpt, step)
    real, moves = os.replace, []

    def killed_after_one_move(src, dst):
        if 'abandoned_' in dst:
            if moves:
                raise KeyboardInterrupt('killed')
            moves.append(src)
        real(src, dst)
    monkeypatch.setattr(checkpoint.os, 'replace', killed_after_one_move)
    try:
        ckpt.set_aside_after(4)
    except KeyboardInterrupt:
        pass
    monkeypatch.setattr(checkpoint.os, 'replace', real)
    assert ckpt.complete_steps() == [4] and (tmp_path / 'latest').read_text().strip() == '4'
    ckpt.set_aside_after(4)                 # the next start finishes the move
    assert sorted(sum(_abandoned(tmp_path).values(), [])) == ['8_G.pth', '8_state.pth']


def test_a_marker_naming_an_abandoned_iteration_is_corrected_even_when_nothing_is_left_to_move(tmp_path):
    ckpt = CheckpointDir(str(tmp_path))
    _save(ckpt, 4)
    (tmp_path / 'latest').write_text('8\n')   # 8 was moved away before the marker was rewritten
    assert ckpt.set_aside_after(4) is None
    assert (tmp_path / 'latest').read_text().strip() == '4'


def test_with_no_loadable_save_the_damaged_ones_are_moved_aside_and_no_marker_names_a_missing_save(tmp_path):
    ckpt = CheckpointDir(str(tmp_path))
    _save(ckpt, 4)
    _truncate(ckpt.path(4, 'G'))
    point, aside = _start(ckpt)
    assert point is None and aside is not None
    assert ckpt.complete_steps() == [] and not (tmp_path / 'latest').exists()  # before: latest said 0


def test_two_set_asides_in_the_same_second_never_overwrite_each_other(tmp_path, monkeypatch):
    from utils import checkpoint
    monkeypatch.setattr(checkpoint.time, 'strftime', lambda fmt: '260101_000000')
    ckpt = CheckpointDir(str(tmp_path))
    _save(ckpt, 2)
    for value in (40.0, 41.0):
        ckpt.save(4, {'G': {'w': torch.full((2,), value)}, 'state': {'iter': 4}})
        ckpt.set_aside_after(2)
    folders = _abandoned(tmp_path)
    assert len(folders) == 2 and all(files == ['4_G.pth', '4_state.pth'] for files in folders.values())
    values = sorted(float(load(str(tmp_path / d / '4_G.pth'))['w'][0]) for d in folders)
    assert values == [40.0, 41.0]           # before: the second move replaced the first 4


def test_pruning_never_deletes_the_save_just_written(tmp_path):
    ckpt = CheckpointDir(str(tmp_path))
    _save(ckpt, 8)                          # a newer save that was not set aside
    ckpt.keep_last = 1
    _save(ckpt, 5)
    assert ckpt.complete_steps() == [5, 8]  # before: 5 was deleted right after it was written


def test_a_damaged_save_does_not_count_as_kept_in_place_of_a_good_one(tmp_path):
    ckpt = CheckpointDir(str(tmp_path))
    for step in (2, 4, 6):
        _save(ckpt, step)
    _truncate(ckpt.path(6, 'G'))            # damaged at rest while the run goes on
    ckpt.keep_last = 2
    _save(ckpt, 8)
    assert ckpt.complete_steps() == [4, 6, 8]  # 8 and 4 are the two good ones; before: [6, 8]
    _damage(ckpt.path(8, 'state'))
    point = find_resume_point({'path': {'resume_state': None}}, ckpt)
    assert point.path == ckpt.path(4, 'state')


def test_nothing_newer_than_the_start_means_nothing_is_moved(tmp_path):
    ckpt = CheckpointDir(str(tmp_path))
    _save(ckpt, 2)
    assert ckpt.set_aside_after(2) is None
    assert ckpt.complete_steps() == [2]


def test_a_failed_write_removes_the_files_of_its_step_and_keeps_older_saves(tmp_path, monkeypatch):
    from utils import checkpoint
    ckpt = CheckpointDir(str(tmp_path))
    _save(ckpt, 2)
    real = checkpoint.atomic_torch_save

    def full_disk(obj, path):
        if path.endswith('4_state.pth'):
            raise RuntimeError('[enforce fail at inline_container.cc] file write failed')
        real(obj, path)
    monkeypatch.setattr(checkpoint, 'atomic_torch_save', full_disk)
    try:
        _save(ckpt, 4)
    except RuntimeError:
        pass
    assert sorted(os.listdir(tmp_path)) == ['2_G.pth', '2_state.pth', 'latest']


def test_parts_of_an_incomplete_save_are_removed_and_complete_ones_kept(tmp_path):
    ckpt = CheckpointDir(str(tmp_path))
    _save(ckpt, 2)
    torch.save({'w': torch.zeros(1)}, ckpt.path(4, 'G'))  # killed before its state file
    assert ckpt.remove_incomplete() == ['4_G.pth']
    assert sorted(os.listdir(tmp_path)) == ['2_G.pth', '2_state.pth', 'latest']


def test_a_file_that_is_not_a_checkpoint_is_named_as_such_without_suggesting_unsafe_loading(tmp_path):
    path = tmp_path / 'weights.pth'
    path.write_text('not weights')
    try:
        load(str(path))
    except UserError as e:
        assert 'not a PyTorch checkpoint' in str(e) and 'allow-unsafe-load' not in str(e)
    else:
        raise AssertionError('loaded a text file')


def test_checkpoints_follow_the_umask_like_the_log_files(tmp_path):
    ckpt = CheckpointDir(str(tmp_path))
    _save(ckpt, 2)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(ckpt.path(2, 'G')).st_mode) == 0o666 & ~umask


def _opt(tmp_path, demo_images, **train):
    return write_options(str(tmp_path / 'o.json'), tiny_options(str(tmp_path / 'exp'), demo_images, **train))


def _models(tmp_path):
    return tmp_path / 'exp' / 'tiny' / 'models'


def _steps(tmp_path):
    return CheckpointDir(str(_models(tmp_path))).complete_steps()


def test_falling_back_from_a_damaged_save_then_pruning_never_loses_the_newest_good_save(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=8, checkpoint_save=4, checkpoint_test=100000,
                checkpoint_keep_last=0)
    assert run_main('main_train', ['--opt', path]).returncode == 0
    _damage(_models(tmp_path) / '8_state.pth')
    res = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=6', '--set', 'train.checkpoint_save=1',
                                  '--set', 'train.checkpoint_keep_last=1'])
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'at iteration 4 (epoch' in res.stdout and 'moved to' in res.stdout
    assert _steps(tmp_path) == [6]
    best = ['best', 'best_E.pth', 'best_G.pth']  # validated at 8, the end of the first run
    assert list(_abandoned(_models(tmp_path)).values()) == [['8_E.pth', '8_G.pth', '8_state.pth'] + best]
    res = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=7', '--set', 'train.checkpoint_keep_last=1'])
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'at iteration 6 (epoch' in res.stdout  # before: the damaged 8 made this start from iteration 0
    assert _steps(tmp_path) == [7]


def test_after_an_explicit_older_resume_the_next_plain_start_continues_the_new_history(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=4, checkpoint_save=1, checkpoint_test=100000,
                checkpoint_keep_last=0)
    assert run_main('main_train', ['--opt', path]).returncode == 0
    older = str(_models(tmp_path) / '2_state.pth')
    res = run_main('main_train', ['--opt', path, '--set', f'path.resume_state={older}',
                                  '--set', 'train.total_iter=3'])
    assert res.returncode == 0, res.stderr[-2000:]
    assert _steps(tmp_path) == [1, 2, 3]  # 3 and 4 of the abandoned history were moved aside
    aside = [f'{i}_{k}.pth' for i in (3, 4) for k in ('E', 'G', 'state')] + ['best', 'best_E.pth', 'best_G.pth']
    assert list(_abandoned(_models(tmp_path)).values()) == [aside]
    res = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=5'])
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'at iteration 3 (epoch' in res.stdout  # before: the abandoned 4


def test_a_full_disk_is_the_agreed_save_failure_leaves_no_half_save_and_a_restart_resumes(tmp_path, demo_images):
    """torch's zip writer reports a full disk as `unexpected pos`: the line says what it means."""
    path = _opt(tmp_path, demo_images, total_iter=8, checkpoint_save=2, checkpoint_test=100000)
    res = run_main('main_train', ['--opt', path], faults=dict(DISK_FULL_AT='4', FREE_MB='0.02'))
    assert res.returncode == EXIT_SAVE_FAILED, res.stderr[-2000:]
    assert res.stderr.count('\n') == 1, res.stderr
    assert re.match(r'error: checkpoint at iteration 4 failed: no space left on /\S* \(0\.02 MB free\); ',
                    res.stderr), res.stderr
    assert sorted(os.listdir(_models(tmp_path))) == ['2_E.pth', '2_G.pth', '2_state.pth', 'latest']
    res = run_main('main_train', ['--opt', path, '--set', 'train.save_failure="warn"'], faults=dict(DISK_FULL_AT='4'))
    assert res.returncode == 0, res.stderr[-2000:]
    assert not os.path.exists(_models(tmp_path) / '4_G.pth') and _steps(tmp_path)[-1] == 8
    assert 'at iteration 2 (epoch' in res.stdout


def test_weights_that_went_non_finite_are_never_saved_and_the_exit_names_the_newest_save(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=8, checkpoint_save=2, checkpoint_test=100000, E_decay=0.0)
    res = run_main('main_train', ['--opt', path, '--set', 'train.nan_policy="off"'], faults=dict(POISON_AT='3'))
    assert res.returncode == EXIT_NONFINITE, res.stderr[-2000:]
    assert 'iteration 4: the network weights are not finite; no checkpoint written' in res.stderr
    assert str(_models(tmp_path) / '2_state.pth') in res.stderr
    assert _steps(tmp_path) == [2]


def test_skipping_non_finite_steps_past_the_limit_stops_with_exit_4_naming_the_newest_save(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=20, checkpoint_save=2, checkpoint_test=100000,
                nan_policy='skip', nan_skip_limit=3)
    res = run_main('main_train', ['--opt', path], faults=dict(INJECT_NAN_FROM='5'))
    assert res.returncode == EXIT_NONFINITE, res.stderr[-2000:]
    assert 'iteration 7: 3 steps in a row skipped' in res.stderr and res.stderr.count('\n') == 1, res.stderr
    assert str(_models(tmp_path) / '6_state.pth') in res.stderr  # skipped steps leave the weights finite


def test_isolated_skips_never_reach_the_limit(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=6, checkpoint_save=6, checkpoint_test=100000,
                nan_policy='skip', nan_skip_limit=2)
    res = run_main('main_train', ['--opt', path], faults=dict(INJECT_NAN_AT='3'))
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'iteration 3: 1 step skipped, non-finite loss or gradients (train.nan_policy=skip, at most 1 in a row)' \
        in res.stdout
