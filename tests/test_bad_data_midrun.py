"""A training file that goes bad during the run (its pixels no longer decode, it was deleted) costs no training:
every rank saves first, together, then exits 2 with one line naming the file; a restart with a changed training
set says what changed.

The start-up checks read headers only, so a file damaged behind a valid header, or one that disappears after
the start, is found when a batch needs it: in a loader worker (the error comes back wrapped by torch), on one
rank. The ranks learn it in the one host agreement before each iteration. Real runs; the files are damaged
or removed from the outside while training runs (the restart runs in the test's process: `run_main`).
"""
import os
import re
import shutil
import subprocess
import sys
import time

from tests.conftest import ROOT, clean_env, damage_pixels, free_port, run_main, tiny_options, write_options

PY = sys.executable
LONG = dict(total_iter=100000, checkpoint_save=100000, checkpoint_test=100000, checkpoint_print=1)
FAILED_LINE = (r'error: iteration (?P<failed>\d+): training data{rank}: {problem}; checkpoint saved at iteration '
               r'(?P<saved>\d+); replace or remove the file, then rerun the same command to resume')


def _copy_data(demo_images, dest):
    shutil.copytree(demo_images, dest)
    return str(dest)


def _options(tmp_path, data, name='o.json', **train):
    opt = tiny_options(str(tmp_path / 'exp'), data, **{**LONG, **train})
    opt['logging']['use_tensorboard'] = False
    # decoded per sample in a loader worker (no RAM cache, which would never read the file again)
    opt['datasets']['train'].update(dataloader_num_workers=1, cache_data=False)
    return write_options(str(tmp_path / name), opt)


def _start(cmd, out_path, env=None):
    with open(out_path, 'w') as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env or clean_env(), stdout=out, stderr=subprocess.PIPE, text=True)


def _wait_for(proc, out_path, pattern, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if re.search(pattern, out_path.read_text()):
            return
        time.sleep(0.05)
    raise AssertionError(f'{pattern!r} not seen (exit {proc.poll()}): {out_path.read_text()[-2000:]}')


def _our_lines(stderr):
    """stderr without the PNG decoder's own note (`libpng error: ...`, printed by the C library)."""
    assert 'Traceback' not in stderr, stderr[-3000:]
    return [ln for ln in stderr.splitlines() if not ln.startswith('libpng')]


def _models(tmp_path):
    return tmp_path / 'exp' / 'tiny' / 'models'


def test_an_image_that_stops_decoding_mid_run_is_saved_past_then_named_and_a_restart_says_the_set_changed(
        tmp_path, demo_images):
    data = _copy_data(demo_images, tmp_path / 'data')
    train_dir = os.path.join(data, 'train')
    path = _options(tmp_path, data)
    out = tmp_path / 'out.txt'
    proc = _start([PY, 'main_train.py', '--opt', path], out)
    try:
        _wait_for(proc, out, r'iter:\s+3,')
        for name in ('0005.png', '0040.png'):          # read within the epoch (16 iterations), in the worker
            damage_pixels(os.path.join(train_dir, name))
        _, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 2, err[-3000:]
    line, = _our_lines(err)
    problem = rf'cannot decode image {re.escape(train_dir)}/00(05|40)\.png \(corrupt or not an image\)'
    m = re.fullmatch(FAILED_LINE.format(rank='', problem=problem), line)
    assert m, line
    failed_at, saved_at = int(m['failed']), int(m['saved'])
    assert saved_at == failed_at - 1 and saved_at >= 3
    assert (_models(tmp_path) / 'latest').read_text().strip() == str(saved_at)   # before: nothing since the last save
    assert (_models(tmp_path) / f'{saved_at}_state.pth').exists()

    for name in ('0005.png', '0040.png'):               # the user removes the bad files and runs again
        os.remove(os.path.join(train_dir, name))
    res = run_main('main_train', ['--opt', path, '--set', f'train.total_iter={saved_at + 2}'])
    assert res.returncode == 0, res.stderr[-3000:]
    assert re.search(rf'resume: the training set changed since checkpoint {saved_at}: 2 files gone \(dataroot_H: '
                     rf'0005\.png, dataroot_H: 0040\.png\); continuing at the start of epoch \d', res.stdout), \
        res.stdout[-3000:]
    assert 'training samples 62' in res.stdout


def test_a_file_deleted_under_one_rank_makes_every_rank_save_and_exit_2_with_the_same_line(tmp_path, demo_images):
    """Each rank reads its own copy of the data; rank 1's copy loses every image mid-run. Rank 1 fails in its loader
    worker; rank 0 never sees a bad file, yet both stop at the same point, after rank 0 saved."""
    copies = [_copy_data(demo_images, tmp_path / f'data{r}') for r in (0, 1)]
    path = _options(tmp_path, copies[0])
    port = str(free_port())
    outs = [tmp_path / f'r{r}.txt' for r in (0, 1)]
    procs = [_start([PY, 'main_train.py', '--opt', path, '--set', f'datasets.train.dataroot_H={copies[r]}/train'],
                    outs[r], clean_env(WORLD_SIZE='2', RANK=str(r), LOCAL_RANK=str(r), MASTER_ADDR='127.0.0.1',
                                       MASTER_PORT=port)) for r in (0, 1)]
    try:
        _wait_for(procs[0], outs[0], r'iter:\s+3,')
        shutil.rmtree(os.path.join(copies[1], 'train'))
        errs = [p.communicate(timeout=240)[1] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [2, 2], [e[-2000:] for e in errs]
    lines = [_our_lines(e) for e in errs]
    assert lines[0] == lines[1] and len(lines[0]) == 1, lines
    problem = rf'cannot read image {re.escape(copies[1])}/train/\d+\.png: No such file or directory'
    m = re.fullmatch(FAILED_LINE.format(rank=r' \(rank 1\)', problem=problem), lines[0][0])
    assert m, lines[0][0]
    saved_at = int(m['saved'])
    assert (_models(tmp_path) / 'latest').read_text().strip() == str(saved_at)
    assert (_models(tmp_path) / f'{saved_at}_state.pth').exists()
