"""A write that fails for lack of space says so: `no space left on <mount> (N MB free)`, not torch's
`[enforce fail at inline_container.cc:672] . unexpected pos ...`, and not a traceback per log line.

On a real full file system: a small tmpfs mounted for the test (needs root, as CI has; skipped with that
reason elsewhere, a failure under CI=true), nearly filled by a filler file, so that what the run writes
first fits and what comes next does not.
"""
import os
import re
import subprocess

import cv2
import pytest
import torch

from tests.conftest import in_ci, run_main, tiny_options, write_options
from utils.checkpoint import atomic_torch_save, atomic_write_text
from utils.diskspace import NoSpaceLeft
from utils.exit_codes import EXIT_SAVE_FAILED

FS_SIZE = 1024 * 1024
PAGE = 4096


@pytest.fixture
def small_fs(tmp_path):
    """A 1 MB tmpfs; `fill(free)` leaves `free` bytes of it free."""
    mnt = tmp_path / 'fs'
    mnt.mkdir()
    why = None
    if os.geteuid() != 0:
        why = 'mounting a small file system needs root'
    else:
        res = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={FS_SIZE}', 'tmpfs', str(mnt)],
                             capture_output=True, text=True)
        if res.returncode:
            why = f'mount -t tmpfs failed: {res.stderr.strip()}'
    if why:
        if in_ci():
            pytest.fail(why)
        pytest.skip(why)

    def fill(free):
        with open(mnt / 'filler', 'wb') as f:
            f.write(b'\0' * (FS_SIZE - free))
        return str(mnt)
    try:
        yield fill
    finally:
        subprocess.run(['umount', '-l', str(mnt)], check=False)


def _line_pattern(mnt):
    return rf'no space left on {re.escape(mnt)} \((\d+\.\d\d|\d+\.\d|\d+) MB free\)'


def test_atomic_writes_on_a_full_file_system_say_no_space_left_on_its_mount_and_leave_nothing(small_fs):
    mnt = small_fs(8 * PAGE)
    big = {'w': torch.zeros(100_000)}                    # 400 kB: torch's zip writer fails without an errno
    with pytest.raises(NoSpaceLeft) as e:
        atomic_torch_save(big, os.path.join(mnt, 'x.pth'))
    assert re.fullmatch(_line_pattern(mnt), str(e.value)), str(e.value)
    assert 'enforce fail' not in str(e.value)
    with pytest.raises(NoSpaceLeft, match=_line_pattern(mnt)):   # a plain write: ENOSPC
        atomic_write_text(os.path.join(mnt, 'sub', 'y.txt'), 'x' * 100_000)
    assert sorted(os.listdir(mnt)) == ['filler', 'sub'] and os.listdir(os.path.join(mnt, 'sub')) == []
    atomic_write_text(os.path.join(mnt, 'z.txt'), 'fits')   # what fits is written as usual
    assert open(os.path.join(mnt, 'z.txt')).read() == 'fits'


def _options(tmp_path, root, demo_images):
    opt = tiny_options(root, demo_images, total_iter=8, checkpoint_save=4, checkpoint_test=100000, checkpoint_print=1)
    opt['logging']['use_tensorboard'] = False
    return write_options(str(tmp_path / 'o.json'), opt)


def test_a_checkpoint_on_a_full_disk_stops_the_run_with_one_line_naming_the_mount(tmp_path, small_fs, demo_images):
    """Room for the lock, the options, the log and the history (a page each), not for the first checkpoint."""
    mnt = small_fs(6 * PAGE)
    res = run_main('main_train', ['--opt', _options(tmp_path, mnt, demo_images)])
    assert res.returncode == EXIT_SAVE_FAILED, res.stderr[-3000:]
    assert 'Traceback' not in res.stderr and 'Logging error' not in res.stderr, res.stderr[-3000:]
    line, = res.stderr.splitlines()
    assert re.fullmatch(rf'error: checkpoint at iteration 4 failed: {_line_pattern(mnt)}; the previous checkpoints '
                        rf'are intact \(train\.save_failure="warn" would continue without it\)', line), line
    models = os.path.join(mnt, 'tiny', 'models')
    assert not [n for n in os.listdir(models) if n.endswith('.pth') or n.endswith('.tmp')]   # no half save


def test_no_room_for_the_run_folder_stops_every_rank_at_start_with_one_line_and_exit_5(tmp_path, small_fs,
                                                                                     demo_images):
    mnt = small_fs(PAGE)                                 # the lock file takes it
    res = run_main('main_train', ['--opt', _options(tmp_path, mnt, demo_images)])
    assert res.returncode == EXIT_SAVE_FAILED, res.stderr[-3000:]
    assert 'Traceback' not in res.stderr and 'Logging error' not in res.stderr, res.stderr[-3000:]
    line, = res.stderr.splitlines()
    assert re.fullmatch(rf'error: writing the run folder {re.escape(mnt)}/tiny failed: {_line_pattern(mnt)}; '
                        r'nothing trained yet', line), line
    assert 'start training' not in res.stdout


def test_validation_images_and_the_best_checkpoint_on_a_full_disk_say_no_space_left(tmp_path, small_fs, demo_images):
    """Validation at iteration 2 with `val.save_img`: the images that do not fit are logged (training goes on
    without them), then the best checkpoint, which does not fit either, stops the run (exit 5)."""
    mnt = small_fs(6 * PAGE)
    opt = tiny_options(mnt, demo_images, total_iter=8, checkpoint_save=100, checkpoint_test=2, checkpoint_print=1)
    opt['logging']['use_tensorboard'] = False
    opt['val'] = {'save_img': True}
    res = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o.json'), opt)])
    assert res.returncode == EXIT_SAVE_FAILED, res.stderr[-3000:]
    assert 'Traceback' not in res.stderr + res.stdout, res.stderr[-3000:]
    assert re.search(rf'ERROR: val\.save_img: writing validation images of iteration 2 failed: {_line_pattern(mnt)}$',
                     res.stdout, re.M), res.stdout[-3000:]
    line, = res.stderr.splitlines()
    assert re.fullmatch(rf'error: best checkpoint at iteration 2 failed: {_line_pattern(mnt)}; .*', line), line


def test_restoring_own_inputs_onto_a_full_disk_is_one_line_exit_5_and_leaves_no_partial_file(small_fs, tiny_run,
                                                                                              tmp_path):
    """main_test --input: a video's frames (--frames) fill the disk; the video's temporary file is removed, the
    frames written before are whole files."""
    from tests.test_main_test_inputs import _video
    mnt = small_fs(16 * PAGE)
    clip = _video(str(tmp_path / 'clip.mp4'), 20, size=(64, 64))
    res = run_main('main_test', ['--weights', os.path.join(tiny_run.models, '8_E.pth'), '--input', clip,
                                 '--out', os.path.join(mnt, 'out'), '--frames'])
    assert res.returncode == 5, res.stdout[-2000:] + res.stderr[-2000:]
    line, = res.stderr.splitlines()
    assert re.fullmatch(rf'error: writing the results failed: {_line_pattern(mnt)}', line), line
    left = [n for _, _, files in os.walk(os.path.join(mnt, 'out')) for n in files]
    assert 'clip.mp4' not in left and not [n for n in left if n.startswith('.')]  # no video, no temporary file
    for name in left:
        assert cv2.imread(os.path.join(mnt, 'out', 'clip', name)) is not None, name
