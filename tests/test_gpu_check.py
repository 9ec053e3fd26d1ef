"""bench/gpu_check.py, the one command a lent GPU runs: its plan, its scheduler, its checks, its outputs.

No GPU here, so what only happens on CUDA is checked by giving the rows a CUDA context (`Ctx(cuda=True)`)
and CUDA-like outputs: the commands a GPU run would start (their options validated as main_train.py would
validate them), and what the checks make of the logs and results such a run prints. The whole script
runs on the CPU in tests/test_benches.py (`--quick`).
"""
import glob
import json
import math
import os
import sys
import tarfile
import tempfile
import threading
import time
import types

import pytest
import torch

from conftest import ROOT, need_spandrel

sys.path.insert(0, os.path.join(ROOT, 'bench'))
import bench_gpu  # noqa: E402
import bench_video_gpu  # noqa: E402
import gpu_check as gc  # noqa: E402


def ctx(tmp_path, cuda=True, quick=False, **kw):
    return gc.Ctx(cuda=cuda, quick=quick, work=str(tmp_path), **kw)


def rows_by_name():
    return {r.name: r for r in gc.plan()}


def options_of(step):
    """(option file, --set list) of a main_train.py / main_test.py / export.py command."""
    argv = list(step.argv)
    return argv[argv.index('--opt') + 1], [argv[i + 1] for i, a in enumerate(argv) if a == '--set']


# ---------------------------------------------------------------------------------------------- the plan

def test_the_plan_has_every_row_the_issue_names():
    names = set(rows_by_name())
    assert {f'demo/{w}' for w in ('fp32', 'fused-off', 'bf16', 'fp16', 'channels_last', 'compile',
                                  'compile-reduce-overhead')} <= names
    assert {'card/gpu', 'launch/env-world1', 'resume/bit-exact', 'resume/deterministic', 'test/tiles-x8',
            'export/onnx', 'data/lmdb', 'log/wandb-offline'} <= names
    speed = {f'speed/{c} {v}' for c in bench_gpu.CONFIGS for v in ['bare', *bench_gpu.CONFIG_ROWS[c]]}
    memory = {f'memory/{n} {c} {p}' for n, c, p in bench_video_gpu.ROWS}
    assert speed | memory <= names
    assert 'speed/swinir compile' in speed and 'memory/vrt memory bf16' in memory


def test_every_tiny_option_file_has_a_row_and_spandrels_need_spandrel():
    rows = rows_by_name()
    files = {os.path.relpath(p, ROOT) for pattern in ('options/zoo/*_tiny.json', 'options/gan/*_tiny.json',
                                                      'options/vrt/*_tiny.json', 'options/rvrt/*_tiny.json',
                                                      'options/realesrgan/tiny/*.json', 'options/archs/*_tiny.json')
             for p in glob.glob(os.path.join(ROOT, pattern))}
    tail = {r.opt: r for r in rows.values() if isinstance(r, gc.TrainRow) and r.name.split('/')[0] in dict(gc.TAIL)}
    assert set(tail) == files and len(files) > 60
    assert tail['options/archs/train_hat_tiny.json'].needs == ('spandrel',)
    assert tail['options/archs/train_rcan_tiny.json'].needs == ()
    assert rows['vrt/006_gopro_rgbspike'].opt.endswith('006_train_vrt_videodeblurring_gopro_rgbspike_tiny.json')


def test_the_side_by_side_rows_come_first_then_the_timed_rows_swinir_first():
    rows = gc.plan()
    timed = [i for i, r in enumerate(rows) if r.exclusive and r.part != 'card']
    assert rows[0].name == 'card/gpu' and rows[0].exclusive
    assert all(not r.exclusive for r in rows[1:timed[0]]) and all(rows[i].exclusive for i in timed)
    assert timed == list(range(timed[0], len(rows)))  # nothing side by side after the first timed row
    assert rows[timed[0]].name == 'speed/swinir bare' and rows[timed[-1]].name.startswith('speed/msrresnet')
    first = [r.name for r in rows[1:4]]
    assert first[:2] == ['demo/compile', 'demo/compile-reduce-overhead']  # the longest start first


def test_quick_runs_one_row_of_each_kind_and_only_adds_the_rows_it_needs():
    quick = [r.name for r in gc.select(gc.plan(), True, None)]
    assert quick == ['card/gpu', 'demo/compile-reduce-overhead', 'demo/fp32', 'demo/fp16', 'launch/env-world1',
                     'resume/bit-exact', 'test/tiles-x8', 'export/onnx', 'memory/vrt KAIR fp32', 'speed/dncnn bare',
                     'speed/dncnn default']
    only = [r.name for r in gc.select(gc.plan(), False, ['export/*', 'memory/rvrt*'])]
    assert only == ['demo/fp32', 'export/onnx', 'memory/rvrt KAIR fp32', 'memory/rvrt KAIR bf16',
                    'memory/rvrt memory fp32']


@pytest.mark.parametrize('cuda', [True, False])
def test_a_row_that_cannot_run_here_says_why(tmp_path, cuda):
    rows = rows_by_name()
    here = ctx(tmp_path, cuda=cuda)
    missing = {'spandrel', 'lmdb', 'wandb'}
    reason = {name: gc.skip_reason(r, here, lambda m: m not in missing) for name, r in rows.items()}
    assert reason['archs/hat'] == 'not installed: spandrel' and reason['archs/rcan'] is None
    assert reason['data/lmdb'] == 'not installed: lmdb' and reason['log/wandb-offline'] == 'not installed: wandb'
    if cuda:
        assert reason['demo/fp16'] is None and reason['speed/swinir compile'] is None
    else:
        assert reason['demo/fp16'] == 'needs CUDA' and reason['demo/compile-reduce-overhead'] == 'needs CUDA'
        assert reason['speed/swinir compile'] == 'needs CUDA (--quick runs a tiny one)'
        assert gc.skip_reason(rows['speed/dncnn bare'], ctx(tmp_path, cuda=False, quick=True), lambda m: True) is None


def representative_rows():
    """Every row but the tail's, and the first tiny file of each tail group (the rest use the same overrides)."""
    rows, seen = [], set()
    for r in gc.plan():
        group = r.name.split('/')[0]
        if group in dict(gc.TAIL):
            if group in seen:
                continue
            seen.add(group)
        rows.append(r)
    return rows


@pytest.mark.parametrize('quick', [False, True])
def test_the_commands_a_gpu_run_starts_read_valid_options(tmp_path, quick):
    """The options of every main_train.py / main_test.py / export.py command, as the GPU run would build them,
    pass the same validation those scripts apply first (a typo in an override would fail a row there)."""
    from option_rules import read_options
    here = ctx(tmp_path, cuda=True, quick=quick)
    checked = 0
    for row in representative_rows():
        if 'spandrel' in row.needs:
            need_spandrel()
        for group in row.steps(here):
            for step in group:
                if '--opt' in step.argv:
                    opt, sets = options_of(step)
                    read_options(opt, sets)
                    checked += 1
    assert checked >= 25


def test_the_gpu_commands_of_the_timed_rows_are_the_benches_own(tmp_path):
    here = ctx(tmp_path)
    rows = rows_by_name()
    bare = rows['speed/swinir bare'].steps(here)[0][0].argv
    assert bare[0].endswith('bench_gpu.py') and bare[1] == '--row'
    args = bench_gpu.row_parser().parse_args(list(bare[2:]))
    assert (args.config, args.row, args.iters, args.warmup, args.images, args.quick) == \
        ('swinir', 'bare', gc.SPEED['iters'], gc.SPEED['warmup'], gc.SPEED['images'], False)
    compiled = rows['speed/swinir compile'].steps(here)
    assert [s.label for g in compiled for s in g] == ['images', 'train']  # no images yet: generated first
    opt, sets = options_of(compiled[-1][0])
    assert opt.endswith('train_swinir_sr_classical.json') and 'train.compile=true' in sets
    assert f'train.total_iter={gc.SPEED["iters"]}' in sets and 'datasets.train.dataloader_batch_size=8' in sets
    memory = rows['memory/vrt memory bf16'].steps(here)[0][0].argv
    assert memory[1:] == ('--child', 'vrt', 'memory', 'bf16', '--reps', str(gc.MEMORY['reps']),
                          '--warmup', str(gc.MEMORY['warmup']))


def test_the_env_launch_is_what_a_platform_injects_and_must_say_nccl_on_cuda(tmp_path):
    row = rows_by_name()['launch/env-world1']
    env = dict(row.steps(ctx(tmp_path))[0][0].env)
    assert {k: env[k] for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR')} == \
        {'RANK': '0', 'WORLD_SIZE': '1', 'LOCAL_RANK': '0', 'MASTER_ADDR': '127.0.0.1'}
    assert int(env['MASTER_PORT']) > 0
    child = gc.child_env(row.steps(ctx(tmp_path))[0][0], ctx(tmp_path), True)
    assert child['WORLD_SIZE'] == '1' and child['PYTHONUNBUFFERED'] == '1'
    log = 'distributed: mode=env backend=gloo world_size=1 rank=0 local_rank=0 master=127.0.0.1:5 device=cuda:0'
    result = row.check(ctx(tmp_path), {'train': log})
    assert result.status == 'failed' and 'backend=nccl' in result.note


def test_the_deterministic_resume_runs_main_train_through_the_check_itself(tmp_path):
    steps = rows_by_name()['resume/deterministic'].steps(ctx(tmp_path))
    assert [[s.label for s in g] for g in steps] == [['straight', 'first'], ['resumed']]
    for step in (s for g in steps for s in g):
        assert step.argv[0] == gc.__file__ and step.argv[1] == '--deterministic'
        assert dict(step.env)['CUBLAS_WORKSPACE_CONFIG'] == ':4096:8'
    _, sets = options_of(steps[1][0])
    assert 'train.total_iter=40' in sets and 'train.checkpoint_save=20' in sets and 'train.checkpoint_test=20' in sets


# ---------------------------------------------------------------------------------------------- checks

def write_history(task_dir, rows):
    os.makedirs(task_dir, exist_ok=True)
    with open(os.path.join(task_dir, 'history.jsonl'), 'w') as f:
        for r in rows:
            f.write(json.dumps(r) + '\n')


CUDA_LOG = ('distributed: mode=single backend=none world_size=1 rank=0 local_rank=0 master=- device=cuda:0\n'
            'TensorFloat-32 matmuls and convolutions on (the GPU has it; train.tf32 sets it)\n'
            'network DnCNN: 100 parameters; optimizer Adam (fused)\n')


def test_a_train_row_on_cuda_shows_the_fused_optimizer_tf32_its_times_and_peak_memory(tmp_path):
    here = ctx(tmp_path)
    row = rows_by_name()['demo/fp32']
    write_history(os.path.join(here.runs, row.task), [
        {'kind': 'train', 'iter': i, 'iter_time': t, 'data_time': 0.001, 'gpu_mem_gib': m}
        for i, t, m in ((5, 0.5, 0.3), (10, 0.02, 0.31), (15, 0.04, 0.31), (20, 0.03, 0.32))] + [
        {'kind': 'val', 'iter': 20, 'psnr': 27.123}])
    result = row.check(here, {'train': CUDA_LOG})
    assert result.status == 'ok' and result.note == 'PSNR 27.12; fused Adam; TF32 on'
    assert math.isclose(result.ms, 30.0) and math.isclose(result.peak_gib, 0.32)  # the first window left out
    unfused = row.check(here, {'train': CUDA_LOG.replace(' (fused)', '')})
    assert unfused.status == 'failed' and 'fused' in unfused.note
    on_cpu = row.check(ctx(tmp_path, cuda=False), {'train': CUDA_LOG})
    assert on_cpu.status == 'failed' and 'device=cpu' in on_cpu.note
    assert rows_by_name()['demo/fused-off'].check(here, {'train': CUDA_LOG}).note == 'the log shows /' + gc.FUSED + '/'


def test_a_train_row_that_stopped_short_fails(tmp_path):
    here = ctx(tmp_path)
    row = rows_by_name()['zoo/dncnn_bn']
    write_history(os.path.join(here.runs, row.task), [{'kind': 'train', 'iter': 3, 'iter_time': 1, 'data_time': 0}])
    assert row.check(here, {'train': CUDA_LOG}).note == 'history.jsonl ends at iteration 3 of 6'


def test_the_compile_rows_report_the_first_iteration_and_any_recompilation(tmp_path):
    here = ctx(tmp_path)
    row = rows_by_name()['demo/compile']
    write_history(os.path.join(here.runs, row.task), [{'kind': 'train', 'iter': 20, 'iter_time': 1, 'data_time': 0}])
    log = CUDA_LOG + ('train.compile: the first iteration took 23.5 s, compilation included (4 graphs)\n'
                      'WARNING: train.compile: 2 more graph(s) compiled at iteration 11: a recompilation\n')
    assert row.check(here, {'train': log}).note == 'first iteration 23.5 s (4 graphs); RECOMPILED 2 at 11'


def test_the_card_row_on_cuda(tmp_path, monkeypatch, capsys):
    """card_main's CUDA branch, with torch.cuda answering as an H100 would (the matmul on the CPU)."""
    props = types.SimpleNamespace(name='NVIDIA H100 80GB HBM3', major=9, minor=0, multi_processor_count=132,
                                  total_memory=85 * 2 ** 30)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'get_device_properties', lambda device: props)
    sizes = []
    monkeypatch.setattr(bench_gpu, 'matmul_tflops', lambda device, n: sizes.append((device.type, n)) or 790.5)
    assert gc.card_main([]) == 0
    assert sizes == [('cuda', 8192)]
    printed = capsys.readouterr().out
    result = gc.CardRow(name='card/gpu').check(ctx(tmp_path), {'card': printed})
    assert result.status == 'ok' and result.tflops == 790.5
    assert result.note == 'NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 85.0 GiB'  # the table's note keeps it whole


def test_the_speed_rows_give_tflops_the_share_of_the_card_and_the_ratio_to_the_bare_loop(tmp_path):
    here = ctx(tmp_path)
    rows = rows_by_name()
    here.results['card/gpu'] = gc.Result('ok', tflops=800.0)
    bare = rows['speed/swinir bare'].check(here, {'bench': 'x\nRESULT {"ms": 100.0, "data_ms": 2.0, '
                                                           '"mem_gib": 9.5, "flops": 8e12}\n'})
    assert (bare.status, bare.ms, bare.tflops, bare.share, bare.flops) == ('ok', 100.0, 80.0, 10.0, 8e12)
    here.results['speed/swinir bare'] = bare
    task = bench_gpu.ours_task('swinir', 'compile')
    write_history(os.path.join(here.work, 'speed', 'runs', task), [
        {'kind': 'train', 'iter': i, 'iter_time': 0.5 if i <= gc.SPEED['warmup'] else 0.025, 'data_time': 0.001,
         'gpu_mem_gib': 3.0} for i in range(10, gc.SPEED['iters'] + 1, 10)])
    log = 'train.compile: the first iteration took 41.0 s, compilation included (2 graphs)\n'
    ours = rows['speed/swinir compile'].check(here, {'train': log})
    assert math.isclose(ours.ms, 25.0) and math.isclose(ours.ratio, 0.25) and math.isclose(ours.tflops, 320.0)
    assert math.isclose(ours.share, 40.0) and ours.note == 'first iteration 41.0 s (2 graphs)'
    task = bench_gpu.ours_task('swinir', 'bf16')
    write_history(os.path.join(here.work, 'speed', 'runs', task), [
        {'kind': 'train', 'iter': gc.SPEED['iters'], 'iter_time': 0.05, 'data_time': 0.001, 'gpu_mem_gib': 3.0}])
    assert rows['speed/swinir bf16'].check(here, {'train': ''}).note == 'amp=bf16, channels_last=true'


def test_the_memory_rows_compare_with_the_official_figures(tmp_path):
    row = rows_by_name()['memory/vrt KAIR fp32']
    out = {'bench': 'RESULT {"ms": 1467.2, "peak_gib": 14.49}'}
    result = row.check(ctx(tmp_path), out)
    assert result.note == 'official fp32 1834 ms, 28.98 GiB: time x0.80, memory x0.50' and result.peak_gib == 14.49
    assert row.check(ctx(tmp_path, quick=True), out).note == 'tiny network (--quick)'


def test_the_test_and_export_rows_read_the_scores_and_differences(tmp_path):
    rows = rows_by_name()
    here = ctx(tmp_path)
    os.makedirs(os.path.join(here.work, 'test', 'test_tiles-x8'))
    assert rows['test/tiles-x8'].check(here, {'test': 'INFO: 8 items: PSNR 29.10 dB, SSIM 0.8'}).status == 'failed'
    open(os.path.join(here.work, 'test', 'test_tiles-x8', 'results.csv'), 'w').close()
    assert rows['test/tiles-x8'].check(here, {'test': 'INFO: 8 items: PSNR 29.10 dB, SSIM 0.8'}).note == \
        'PSNR 29.10 on 8 items, tiles 64/16, x8'
    log = ('20_E.onnx: max|diff| = 1.19e-07 against PyTorch\n20_E_fp16.onnx: max|diff| = 6.56e-06 against PyTorch\n'
           'wrote /x/20_E.onnx (0.33 MB)\n')
    assert rows['export/onnx'].check(here, {'export': log}).note == 'fp32 max|diff| 1.19e-07, fp16 max|diff| 6.56e-06'


def save_run(folder, step, weight, moment):
    os.makedirs(folder, exist_ok=True)
    torch.save({'w': torch.tensor([1.0, weight])}, os.path.join(folder, f'{step}_G.pth'))
    torch.save({'iter': step, 'epoch': 1, 'epoch_step': 2,
                'model': {'optimizer': {'state': {0: {'exp_avg': torch.tensor([moment])}}}, 'scheduler': {'n': 4}}},
               os.path.join(folder, f'{step}_state.pth'))


def test_resume_is_checked_on_weights_optimizer_and_position_bit_for_bit(tmp_path):
    save_run(tmp_path / 'a', 8, 2.0, 0.5)
    save_run(tmp_path / 'b', 8, 2.0, 0.5)
    assert gc.checkpoint_difference(str(tmp_path / 'a'), str(tmp_path / 'b'), 8) is None
    save_run(tmp_path / 'c', 8, 2.0, 0.5 + 2 ** -20)
    assert gc.checkpoint_difference(str(tmp_path / 'a'), str(tmp_path / 'c'), 8) == \
        'optimizer.state.0.exp_avg: max|diff| 9.54e-07'
    save_run(tmp_path / 'd', 8, 3.0, 0.5)
    assert gc.checkpoint_difference(str(tmp_path / 'a'), str(tmp_path / 'd'), 8) == 'G.w: max|diff| 1'


@pytest.mark.parametrize('text, line', [
    ('INFO: start\nerror: datasets.train.dataroot_H: /x: not found\n', 'datasets.train.dataroot_H: /x: not found'),
    ('Traceback (most recent call last):\n  File "x.py", line 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried\n',
     'torch.OutOfMemoryError: CUDA out of memory. Tried'),
    ('RuntimeError: a\n\nDuring handling of the above exception\nRuntimeError: CUDA error: an illegal memory access\n',
     'RuntimeError: CUDA error: an illegal memory access'),
    ('some output\nlast words\n', 'last words'),
    ('', 'no output'),
])
def test_a_failed_row_says_its_first_error_line(text, line):
    assert gc.first_error(text) == line


# ---------------------------------------------------------------------------------------------- scheduling

@pytest.fixture()
def recorded(monkeypatch):
    """run_row replaced by one that notes starts and ends (and fails rows named */fail); the rows pair/0 and
    pair/1 wait for each other, so they must have run side by side."""
    events, lock = [], threading.Lock()
    pair = threading.Barrier(2, timeout=60)

    def fake(row, ctx, deadline, procs):
        with lock:
            events.append(('start', row.name))
        if row.name.startswith('pair/'):
            pair.wait()
        time.sleep(0.01)
        with lock:
            events.append(('end', row.name))
        return gc.Result('failed' if row.name.endswith('/fail') else 'ok')
    monkeypatch.setattr(gc, 'run_row', fake)
    return events


def fake_rows(*specs):
    return [gc.Row(name=name, exclusive=ex, after=tuple(after), estimate_s=est) for name, ex, after, est in specs]


def test_timed_rows_run_alone_in_order_and_side_by_side_rows_at_most_jobs_at_once(tmp_path, recorded):
    rows = fake_rows(('card/a', True, (), 1), ('pair/0', False, (), 1), ('pair/1', False, (), 1),
                     *[(f'demo/{i}', False, (), 1) for i in range(4)],
                     ('speed/x', True, (), 1), ('speed/y', True, (), 1), ('zoo/late', False, (), 1))
    done = []
    results = gc.execute(rows, ctx(tmp_path), 2, time.monotonic() + 60, gc.Processes(),
                         lambda r, res: done.append(r.name))
    assert all(results[r.name].status == 'ok' for r in rows) and sorted(done) == sorted(r.name for r in rows)
    running, most = set(), 0
    for kind, name in recorded:
        if kind == 'start':
            exclusive = name.startswith(('card', 'speed'))
            assert not running if exclusive else not any(n.startswith(('card', 'speed')) for n in running)
            running.add(name)
            most = max(most, len(running))
        else:
            running.remove(name)
    assert most == 2
    starts = [n for k, n in recorded if k == 'start']
    assert starts.index('card/a') == 0 and starts.index('speed/x') < starts.index('speed/y') < starts.index('zoo/late')


def test_under_quick_timed_rows_run_side_by_side_but_those_reading_earlier_rows(tmp_path, recorded):
    """--quick measures nothing, so its timed rows need not run alone; the card (whose rate the speed rows read)
    and the speed rows that read the bare row's FLOPs still start alone, after the rows before them."""
    here = ctx(tmp_path, cuda=False, quick=True)
    rows = gc.select(gc.plan(), True, None)
    assert [r.name for r in rows if r.alone(here)] == ['card/gpu', 'speed/dncnn default']
    assert all(r.alone(ctx(tmp_path)) == r.exclusive for r in gc.plan())  # without --quick: every timed row alone
    results = gc.execute(rows, here, 2, time.monotonic() + 3600, gc.Processes(), lambda r, res: None,
                         installed=lambda m: True)
    assert {r.name for r in rows if results[r.name].status == 'ok'} == {r.name for r in rows if not r.cuda_only}
    running = set()
    for kind, name in recorded:
        if kind == 'end':
            running.remove(name)
            continue
        assert not running if name in ('card/gpu', 'speed/dncnn default') else \
            not running & {'card/gpu', 'speed/dncnn default'}
        running.add(name)
    recorded.clear()
    pair = fake_rows(('pair/0', True, (), 1), ('pair/1', True, (), 1))  # each waits for the other to start
    results = gc.execute(pair, here, 2, time.monotonic() + 60, gc.Processes(), lambda r, res: None)
    assert [results[r.name].status for r in pair] == ['ok', 'ok']


def test_rows_past_the_budget_and_rows_needing_a_failed_row_are_skipped(tmp_path, recorded):
    rows = fake_rows(('demo/fail', False, (), 1), ('test/x', False, ('demo/fail',), 1), ('demo/big', False, (), 100),
                     ('demo/small', False, (), 1))
    results = gc.execute(rows, ctx(tmp_path), 2, time.monotonic() + 30, gc.Processes(), lambda r, res: None)
    assert results['demo/fail'].status == 'failed'
    assert (results['test/x'].status, results['test/x'].note) == ('skipped', 'needs demo/fail (failed)')
    assert (results['demo/big'].status, results['demo/big'].note) == ('skipped', 'time budget')
    assert results['demo/small'].status == 'ok'


class Script(gc.Row):
    """A row of real processes: `python -c CODE` for each code given (one group each)."""

    def __init__(self, name, *codes, **kw):
        super().__init__(name=name, **kw)
        object.__setattr__(self, 'codes', codes)

    def steps(self, ctx):
        return [[gc.Step(f'step{i}', ('-c', code))] for i, code in enumerate(self.codes)]


def running(pid, wait=10.0):
    """Whether process `pid` still runs after `wait` seconds (a zombie waiting for its reaper has ended)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with open(f'/proc/{pid}/stat') as f:
                state = f.read().rsplit(')', 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state == 'Z':
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)


def test_a_row_past_its_limit_is_stopped_with_its_processes_and_fails(tmp_path):
    pid_file = tmp_path / 'pid'
    code = (f'import os, subprocess, sys, time; child = subprocess.Popen([sys.executable, "-c", "import time; '
            f'time.sleep(120)"]); open({str(pid_file)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}"); '
            f'print("started", flush=True); time.sleep(120)')
    here = ctx(tmp_path / 'work')
    os.makedirs(here.logs)
    row = Script('demo/slow', code, timeout_s=5)
    result = gc.run_row(row, here, time.monotonic() + 60, gc.Processes())
    assert result.status == 'failed' and result.note.startswith('step0: stopped at its limit of 5 s; ')
    assert result.note.endswith('last line: started')
    for pid in map(int, pid_file.read_text().split()):  # the row's process and its child are gone
        assert not running(pid)
    budget = gc.run_row(Script('demo/slower', 'import time; time.sleep(120)', timeout_s=100), here,
                        time.monotonic() + 2, gc.Processes())
    assert budget.status == 'skipped' and budget.note.startswith('time budget: step0 stopped after ')


def test_a_failing_process_fails_its_row_with_its_first_error_and_keeps_its_log(tmp_path):
    here = ctx(tmp_path / 'work')
    row = Script('demo/two', 'print("fine")', 'import sys; print("error: something is wrong"); sys.exit(2)',
                 'print("never")')
    result = gc.run_row(row, here, time.monotonic() + 60, gc.Processes())
    assert result.status == 'failed' and result.note == 'step1: exit 2: something is wrong'
    logs = sorted(os.listdir(os.path.join(here.logs, 'demo_two')))
    assert logs == ['1_step0.log', '2_step1.log']
    text = open(os.path.join(here.logs, 'demo_two', '2_step1.log')).read()
    assert text.startswith(f'$ {sys.executable} -c ') and text.endswith('error: something is wrong\n')


# ---------------------------------------------------------------------------------------------- outputs

def typical_results(rows, fail=False):
    out = {}
    for r in rows:
        if fail:
            out[r.name] = gc.Result('failed', 'RuntimeError: ' + 'x' * 300)
        elif r.part == 'train':
            out[r.name] = gc.Result('ok', 'PSNR 24.10; first iteration 23.1 s (4 graphs)' if 'compile' in r.name
                                    else 'PSNR 24.10', ms=123.4, data_ms=1.2, peak_gib=0.35)
        else:
            out[r.name] = gc.Result('ok', 'official fp32 1834 ms, 28.98 GiB: time x0.80, memory x0.50', ms=1834.2,
                                    data_ms=2.1, peak_gib=28.98, tflops=123.45, share=15.6, ratio=0.95)
    return out


@pytest.mark.parametrize('fail', [False, True])
def test_the_printed_table_of_every_row_fits_in_the_output_a_lent_gpu_returns(fail):
    """The run tool returns the last 12,000 characters of the output: the table is printed last, within them."""
    rows = gc.plan()
    text = '\n'.join(gc.table(rows, typical_results(rows, fail), gc.NOTE_WIDTH))
    assert len(text.splitlines()) == len(rows) + 1 and len(text) < 11_500


def test_the_outputs_are_three_files_the_json_without_nans_the_logs_in_one_archive(tmp_path):
    rows = fake_rows(('demo/a', False, (), 1), ('speed/b', True, (), 1))
    logs = tmp_path / 'work' / 'logs' / 'demo_a'
    logs.mkdir(parents=True)
    (logs / '1_train.log').write_text('hello\n')
    out = tmp_path / 'out'
    out.mkdir()
    results = {'demo/a': gc.Result('failed', 'exit 1: boom')}
    gc.write_outputs(str(out), ['== header'], rows, results, str(tmp_path / 'work' / 'logs'))
    assert sorted(os.listdir(out)) == sorted(gc.OUTPUTS)
    data = json.loads((out / 'gpu_check.json').read_text())
    assert data['rows'][0]['status'] == 'failed' and data['rows'][0]['ms'] is None
    assert data['rows'][1]['status'] == 'pending'
    text = (out / 'gpu_check.txt').read_text()
    assert 'FAILED rows (first error line):\ndemo/a: exit 1: boom' in text and 'speed/b' in text.splitlines()[-1]
    with tarfile.open(out / 'gpu_check_logs.tar.gz') as tar:
        assert tar.extractfile('logs/demo_a/1_train.log').read() == b'hello\n'


def test_the_whole_gpu_run_goes_through_every_row_to_the_table(tmp_path, monkeypatch, capsys):
    """main() as on a CUDA machine, each row's processes replaced by a result such a row gives: every row of
    the plan is run (or skipped for a missing module), timed rows alone, the outputs and the table last."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setenv('OUT', str(tmp_path / 'out'))
    started, running, lock = [], set(), threading.Lock()

    def fake(row, ctx, deadline, procs):
        with lock:
            assert not (running and (row.exclusive or any(r.exclusive for r in running)))
            assert deadline - time.monotonic() < 480 and (row.estimate_s, row.timeout_s) > (0, 0)
            running.add(row)
            started.append(row.name)
        steps = row.steps(ctx)  # the commands a GPU run would start, built with the CUDA context
        assert steps and all(step.argv for group in steps for step in group)
        time.sleep(0.001)
        with lock:
            running.remove(row)
        if row.part in ('speed', 'memory', 'card'):
            return gc.Result('ok', 'measured', ms=20.0, peak_gib=1.5, tflops=500.0)
        return gc.Result('ok', 'PSNR 24.00', ms=12.0, data_ms=0.5, peak_gib=0.3)
    monkeypatch.setattr(gc, 'run_row', fake)
    assert gc.main([]) == 0
    printed = capsys.readouterr().out.splitlines()
    rows = gc.plan()
    skipped = {r.name for r in rows if any(not gc.installed(m) for m in r.needs)}
    assert sorted(started) == sorted(r.name for r in rows if r.name not in skipped)
    assert printed[0].startswith('== gpu_check.py: CUDA, torch ') and f'budget 480 s, {len(rows)} rows' in printed[0]
    assert printed[-len(rows) - 1].startswith('row ') and any(printed[-1].startswith(f'{r.name} ') for r in rows if r.part == 'memory')
    assert sorted(os.listdir(tmp_path / 'out')) == sorted(gc.OUTPUTS)
    results = json.loads((tmp_path / 'out' / 'gpu_check.json').read_text())['rows']
    assert {r['name']: r['status'] for r in results} == {r.name: 'skipped' if r.name in skipped else 'ok' for r in rows}


def test_list_shows_the_plan_and_what_cannot_run_here_and_runs_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    assert gc.main(['--list', '--only', 'demo/fp*']) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ['demo/fp32', 'demo/fp16']
    assert lines[1].endswith('skipped: needs CUDA') and not os.listdir(tmp_path)


def test_without_cuda_or_quick_nothing_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    assert gc.main(['--out', str(tmp_path / 'out')]) == 0
    assert 'no CUDA GPU here, nothing run' in capsys.readouterr().out and not os.path.exists(tmp_path / 'out')
