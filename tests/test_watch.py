"""`main_test.py --watch`: a running job's checkpoints each tested once as they are saved, never a half-written one;
pruned, deleted-while-loading and damaged checkpoints skipped with a line; results_by_iter.csv kept across restarts
of the watcher (and of the job); the end at the job's last checkpoint; Ctrl-C one line, the rows kept.

The following logic (utils/watch.py) is tested on fake checkpoint files, main_test --watch in this process on
copies of a finished run with checkpoints added, pruned and damaged, and (slow) beside a real 2-process job."""
import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, clean_env, copy_run, run_main, tiny_options, write_options
from utils.errors import UserError
from utils.watch import Follower, IterTable, complete_checkpoints, job_total_iter, lock_line, models_folder

PY = sys.executable


def _touch(folder, *names):
    for name in names:
        with open(os.path.join(folder, name), 'wb') as f:
            f.write(b'PK\x03\x04')


def _steps(checkpoints):
    return [c.step for c in checkpoints]


def test_only_complete_checkpoints_are_offered_each_once_oldest_first(tmp_path):
    models = str(tmp_path)
    _touch(models, '2_G.pth', '2_E.pth', '2_state.pth', '4_G.pth', '.4_E.pth.x1y2.tmp')  # 4: half-written
    follower = Follower(models)
    pending, vanished = follower.poll()
    assert _steps(pending) == [2] and vanished == []
    assert os.path.basename(pending[0].weights) == '2_E.pth'  # the EMA weights, as main_test takes without --weights
    follower.done(pending[0])
    assert follower.poll() == ([], [])
    _touch(models, '4_state.pth', '6_G.pth', '6_state.pth')  # 4 complete now (no EMA: its G), 6 too
    pending, _ = follower.poll()
    assert _steps(pending) == [4, 6] and os.path.basename(pending[0].weights) == '4_G.pth'
    assert follower.poll()[0] == pending  # not handled yet: offered again, never twice as new rows
    assert _steps(complete_checkpoints(str(tmp_path / 'missing'))) == []


def test_a_checkpoint_pruned_before_it_was_tested_is_reported_once_and_a_resaved_iteration_is_new(tmp_path):
    models = str(tmp_path)
    _touch(models, '2_G.pth', '2_state.pth', '4_G.pth', '4_state.pth')
    follower = Follower(models)
    assert _steps(follower.poll()[0]) == [2, 4]
    for name in ('2_state.pth', '2_G.pth'):  # the job's pruning: the state file first
        os.unlink(os.path.join(models, name))
    pending, vanished = follower.poll()
    assert _steps(pending) == [4] and _steps(vanished) == [2]
    assert follower.poll()[1] == []  # said once
    follower.done(pending[0])
    # the job resumed from an earlier save (or started over with --fresh) and saved iteration 4 again: a new checkpoint
    before = pending[0].saved_ns
    os.utime(os.path.join(models, '4_state.pth'), ns=(before + 10**9, before + 10**9))
    again, _ = follower.poll()
    assert _steps(again) == [4] and again[0].saved_ns != before


def test_the_end_is_the_jobs_last_checkpoint_handled_and_present(tmp_path):
    models = tmp_path / 'run' / 'models'
    models.mkdir(parents=True)
    _touch(str(models), '4_G.pth', '4_state.pth', '8_G.pth', '8_state.pth')
    follower = Follower(str(models))
    four, eight = follower.poll()[0]
    follower.done(four)
    assert not follower.reached(8)
    follower.done(eight)
    follower.poll()
    assert follower.reached(8) and not follower.reached(12)
    shutil.rmtree(models)  # --fresh moved the run aside: the new job has not reached its end
    models.mkdir()
    follower.poll()
    assert not follower.reached(8)
    # the total: the newest options file the job saved, else the default (--opt's)
    run = str(tmp_path / 'run')
    assert job_total_iter(run, 8) == 8
    (tmp_path / 'run' / 'options').mkdir()
    (tmp_path / 'run' / 'options' / 'a.json').write_text('{"train": {"total_iter": 100}}')
    assert job_total_iter(run, 8) == 100
    newer = tmp_path / 'run' / 'options' / 'b.json'
    newer.write_text('// resumed with --set train.total_iter=200\n{"train": {"total_iter": 200}}')
    os.utime(newer, (time.time() + 5, time.time() + 5))
    assert job_total_iter(run, 8) == 200


def test_results_by_iter_are_read_back_and_a_table_of_other_scores_is_refused(tmp_path):
    path = str(tmp_path / 'results_by_iter.csv')
    table = IterTable(path, ['psnr', 'ssim'])
    _touch(str(tmp_path), '4_E.pth', '4_state.pth')
    ckpt = complete_checkpoints(str(tmp_path))[0]
    table.append(ckpt, [('Set5', 5, [30.5, 0.9]), ('Set14', 14, [28.25, 0.8])])
    again = IterTable(path, ['psnr', 'ssim'])
    assert again.tested() == {ckpt.key: {'Set5', 'Set14'}}
    assert [(r['iteration'], r['set'], r['psnr']) for r in again.records()] == [(4, 'Set5', 30.5), (4, 'Set14', 28.25)]
    with open(path) as f:
        assert next(csv.reader(f)) == ['iteration', 'set', 'weights', 'saved_ns', 'items', 'psnr', 'ssim']
    assert sorted(os.listdir(tmp_path)) == ['4_E.pth', '4_state.pth', 'results_by_iter.csv']  # atomic: no temp file
    with pytest.raises(UserError, match=r'results_by_iter\.csv: its columns are iteration, .*, psnr, ssim but this '
                                        r'run scores .*, psnr, ssim, lpips; give another --out'):
        IterTable(path, ['psnr', 'ssim', 'lpips'])


@pytest.mark.parametrize('damage, line', [
    ('4,Set5,4_E.pth,123,5,30.5', r'line 3: 6 values for the 7 columns'),
    ('four,Set5,4_E.pth,123,5,30.5,0.9', r"line 3: iteration 'four' is not a whole number"),
    ('4,Set5,4_E.pth,12x3,5,30.5,0.9', r"line 3: saved_ns '12x3' is not a whole number"),
    ('4,Set5,4_E.pth,123,5,thirty,0.9', r"line 3: psnr 'thirty' is not a number")])
def test_a_damaged_results_by_iter_table_is_one_line_naming_the_file_and_the_line(tmp_path, damage, line):
    path = tmp_path / 'results_by_iter.csv'
    path.write_text('iteration,set,weights,saved_ns,items,psnr,ssim\n2,Set5,2_E.pth,100,5,29.5,0.85\n' + damage + '\n')
    with pytest.raises(UserError, match=re.escape(str(path)) + ': ' + line + '; fix or remove that line, or give '
                                                                              'another --out$'):
        IterTable(str(path), ['psnr', 'ssim']).tested()


def test_the_watch_folder_is_a_run_or_its_models_folder(tmp_path):
    (tmp_path / 'run' / 'models').mkdir(parents=True)
    assert models_folder(str(tmp_path / 'run'), 'x') == str(tmp_path / 'run' / 'models')
    assert models_folder('', str(tmp_path / 'run' / 'models')) == str(tmp_path / 'run' / 'models')
    with pytest.raises(UserError, match=r'^--watch .*nothing: folder not found$'):
        models_folder(str(tmp_path / 'nothing'), 'x')
    with pytest.raises(UserError, match=r'folder not found \(the models folder of the run of --opt: start the job'):
        models_folder('', str(tmp_path / 'none' / 'models'))


HOLD_LOCK = ('import sys, time; sys.path.insert(0, sys.argv[1]); from utils.runlock import RunLock; '
             'lock = RunLock.acquire(sys.argv[2]); print("held", flush=True); sys.stdin.read()')


def test_the_jobs_run_lock_is_seen_without_taking_it(tmp_path):
    """A job holding its run lock is seen from another process by a test that places no lock (F_GETLK): a job
    starting meanwhile is never refused."""
    from utils.runlock import RunLock, is_held
    task = str(tmp_path / 'task')
    assert is_held(task) is False  # no job ever ran: the lock file is not even created
    assert not os.path.exists(tmp_path / '.task.lock')
    job = subprocess.Popen([PY, '-c', HOLD_LOCK, ROOT, task], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline() == 'held\n'
        assert is_held(task) is True
        assert lock_line(True, False, 'L') == 'the job holds its run lock L again: it runs'
    finally:
        job.stdin.close()
        job.wait(timeout=30)
    assert is_held(task) is False
    assert lock_line(False, True, 'L').startswith('no job holds its run lock L now')
    assert lock_line(False, False, 'L') is None  # said once
    RunLock.acquire(task).release()  # the lock file of a finished job: free for the next, the test took nothing


# ------------------------------------------------------------------------------------ main_test --watch in-process

def _two_sets(run, tmp_path):
    """The run's option file with its test set twice, as two named sets (A: images 0-3, B: 4-7)."""
    import json
    with open(run.opt_path) as f:
        raw = json.load(f)
    test = raw['datasets']['test']
    data = os.path.dirname(test['dataroot_H'])
    for name, part in (('A', range(4)), ('B', range(4, 8))):
        folder = tmp_path / 'sets' / name
        folder.mkdir(parents=True)
        for i in part:
            shutil.copy(os.path.join(data, 'test', f'{i:04d}.png'), folder)
    raw['datasets']['test'] = [dict(test, name=n, generate_demo=None, dataroot_H=str(tmp_path / 'sets' / n))
                               for n in 'AB']
    return write_options(str(tmp_path / 'two.json'), raw)


def _save_as(models, source, step):
    """Checkpoint `step` as a copy of checkpoint `source`, written as the job writes: weights first, state last."""
    for kind in ('G', 'E', 'state'):
        shutil.copy(os.path.join(models, f'{source}_{kind}.pth'), os.path.join(models, f'{step}_{kind}.pth'))


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_watch_tests_each_complete_checkpoint_once_and_skips_pruned_vanishing_and_damaged_ones(tmp_path, tiny_run,
                                                                                             monkeypatch):
    """The finished tiny run (4 and 8) with more saves made by hand: 12 (deleted while it is being read), 16 (its
    weights damaged), 20 (fine), a half-written 24 (no state file) and a temporary file; while 4 is tested the job
    prunes 8. Two test sets: a row per checkpoint and set. The watch ends after the job's last checkpoint (the run's
    saved options say train.total_iter 8) and a second watch tests nothing again."""
    import models.watch_runs as testing
    run = copy_run(tiny_run, str(tmp_path))
    models = run.models
    for step in (12, 16, 20):
        _save_as(models, 8, step)
    with open(os.path.join(models, '16_E.pth'), 'r+b') as f:
        f.truncate(200)  # a zip cut short
    shutil.copy(os.path.join(models, '8_G.pth'), os.path.join(models, '24_G.pth'))
    shutil.copy(os.path.join(models, '8_G.pth'), os.path.join(models, '.24_E.pth.abcd.tmp'))
    opt = _two_sets(run, tmp_path)
    monkeypatch.setattr(testing, 'POLL_S', 0.05)
    evaluate_sets, copyfile = testing.evaluate_sets, shutil.copyfile
    calls = []

    def job_prunes_8_meanwhile(restorer, sets, **kw):
        calls.append(len(sets))
        if len(calls) == 1:
            for kind in ('state', 'G', 'E'):
                os.unlink(os.path.join(models, f'8_{kind}.pth'))
        return evaluate_sets(restorer, sets, **kw)

    def job_deletes_12_while_read(src, dst, **kw):
        if os.path.basename(src).startswith('12_'):
            for kind in ('state', 'G', 'E'):
                os.unlink(os.path.join(models, f'12_{kind}.pth'))
        return copyfile(src, dst, **kw)
    monkeypatch.setattr(testing, 'evaluate_sets', job_prunes_8_meanwhile)
    monkeypatch.setattr(testing.shutil, 'copyfile', job_deletes_12_while_read)
    res = run_main('main_test', ['--opt', opt, '--watch'])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = os.path.join(run.folder, 'results')
    rows = _rows(os.path.join(out, 'results_by_iter.csv'))
    assert [(r['iteration'], r['set'], r['weights'], r['items']) for r in rows] == [
        ('4', 'A', '4_E.pth', '4'), ('4', 'B', '4_E.pth', '4'),
        ('20', 'A', '20_E.pth', '4'), ('20', 'B', '20_E.pth', '4')]
    assert rows[2]['psnr'] != rows[0]['psnr']  # 20 has 8's weights, not 4's
    log = res.stdout
    assert re.search(r'WARNING: --watch: iteration 8: removed by the job before it was tested .*: skipped', log)
    assert re.search(r'WARNING: --watch: iteration 12: deleted by the job while being loaded \(pruned\): skipped', log)
    assert re.search(r'WARNING: --watch: iteration 16: .*16_E\.pth: damaged checkpoint .*: skipped', log)
    assert 'iteration 24' not in log  # never complete
    assert re.search(r"--watch: the job's last checkpoint \(iteration 8\) is tested; 2 checkpoint\(s\) tested", log)
    assert sorted(os.listdir(out)) == ['results_by_iter.csv', 'test_curves.png']
    assert res.stderr == ''

    # a restart of the watcher: nothing tested again, the table as it was
    monkeypatch.setattr(testing, 'evaluate_sets', evaluate_sets)
    again = run_main('main_test', ['--opt', opt, '--watch', run.folder])
    assert again.returncode == 0, again.stderr[-3000:]
    assert '--watch: 2 checkpoint(s) tested before (results_by_iter.csv): not again' in again.stdout
    assert '0 checkpoint(s) tested in this run' in again.stdout
    assert _rows(os.path.join(out, 'results_by_iter.csv')) == rows


@pytest.mark.parametrize('args, line', [
    (['--watch', 'no/such/folder'], 'error: --watch no/such/folder: folder not found'),
    (['--follow'], 'error: --follow: only with --watch'),
    (['--watch', '--weights', 'w.pth'], 'error: --weights and --watch: give one (--watch tests the checkpoints of a '
                                        'job as they come)'),
    (['--watch', '--no-images'], 'error: --no-images: not with --watch (it writes no images nor page, only '
                                 'results_by_iter.csv and test_curves.png)'),
    (['--watch', '--no-page'], 'error: --no-page: not with --watch (it writes no images nor page, only '
                               'results_by_iter.csv and test_curves.png)'),
    (['--frames'], "error: --frames: only with --input (it writes the frames of restored videos of one's own)"),
])
def test_watch_mistakes_are_one_line_and_exit_2(tmp_path, tiny_run, args, line):
    res = run_main('main_test', ['--opt', tiny_run.opt_path, *args], cwd=str(tmp_path))
    assert res.returncode == 2 and res.stderr == line + '\n'
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------------------ beside a real job

def _popen(cmd, tmp_path, name, **env):
    out, err = open(tmp_path / f'{name}.out', 'w'), open(tmp_path / f'{name}.err', 'w')
    return subprocess.Popen(cmd, cwd=ROOT, env=clean_env(OMP_NUM_THREADS='1', **env), stdout=out, stderr=err,
                            process_group=0)


def _wait_for(path, pattern, proc, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = path.read_text()
        if re.search(pattern, text):
            return text
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f'{pattern!r} not seen (exit {proc.poll()}): {text[-3000:]}')


def _finish(proc, timeout=240):
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_watch_tests_every_checkpoint_of_a_two_process_job_exactly_once_while_it_trains(tmp_path, demo_images):
    """A 2-process torchrun job (8 iterations, a checkpoint every 2, each file held in its temporary file for a
    while as a slow disk would), main_test --watch beside it, started first: every checkpoint is tested exactly
    once, some before the job ends, and the watch ends by itself after the last. Then Ctrl-C ends a --follow
    watcher with one line and exit 130, its table intact."""
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=8, checkpoint_save=2, checkpoint_test=8,
                       checkpoint_keep_last=0)
    path = write_options(str(tmp_path / 'o.json'), opt)
    models = tmp_path / 'exp' / 'tiny' / 'models'
    models.mkdir(parents=True)  # the folder the job will write into: the watcher starts before the job
    watcher = _popen([PY, 'main_test.py', '--opt', path, '--watch'], tmp_path, 'watch')
    job = None
    try:
        _wait_for(tmp_path / 'watch.out', r'every new complete checkpoint is tested once', watcher)
        job = _popen([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
                      os.path.join('tests', 'patched_main.py'), '--opt', path], tmp_path, 'job',
                     SLOW_SAVE_SECONDS='0.5')
        assert _finish(job) == 0, (tmp_path / 'job.err').read_text()[-3000:]
        table = tmp_path / 'exp' / 'tiny' / 'results' / 'results_by_iter.csv'
        while_training = _rows(table) if table.exists() else []
        assert _finish(watcher, 120) == 0, (tmp_path / 'watch.err').read_text()[-3000:]
    finally:
        for p in (watcher, job):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    rows = _rows(table)
    assert [r['iteration'] for r in rows] == ['2', '4', '6', '8']
    assert while_training and while_training == rows[:len(while_training)]
    assert 'SAVING' in (tmp_path / 'job.out').read_text()  # the watcher saw temporary files, and tested none
    assert (tmp_path / 'watch.err').read_text() == ''

    follow = _popen([PY, 'main_test.py', '--opt', path, '--watch', '--follow'], tmp_path, 'follow')
    try:
        _wait_for(tmp_path / 'follow.out', r'4 checkpoint\(s\) tested before', follow)
        os.killpg(follow.pid, signal.SIGINT)
        code = _finish(follow, 60)
    finally:
        if follow.poll() is None:
            os.killpg(follow.pid, signal.SIGKILL)
    assert code == 130
    assert (tmp_path / 'follow.err').read_text() == (f'stopped: SIGINT (Ctrl-C): --watch stopped; the rows of every '
                                                     f'checkpoint tested are in {table}\n')
    assert _rows(table) == rows


@pytest.mark.slow
def test_watch_under_two_processes_writes_the_rows_of_one_process(tmp_path, tiny_run):
    """Every rank takes its share of each test set (as main_test does): the same table as one process writes."""
    one = run_main('main_test', ['--opt', tiny_run.opt_path, '--watch', '--out', str(tmp_path / 'one')])
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'main_test.py',
                          '--opt', tiny_run.opt_path, '--watch', '--out', str(tmp_path / 'two')], cwd=ROOT,
                         env=clean_env(OMP_NUM_THREADS='1'), capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    assert 'world_size=2' in two.stdout
    assert _rows(tmp_path / 'two' / 'results_by_iter.csv') == _rows(tmp_path / 'one' / 'results_by_iter.csv')
