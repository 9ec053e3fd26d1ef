"""Benchmarks never rot: every bench/bench_*.py (and bench/gpu_check.py) runs with --quick, prints its whole
table, writes nothing into the project, and bench/run_all.sh runs it.

A benchmark is not a test, but one nobody runs breaks silently when the code under it changes
(bench_loop.py crashed for a while once the Reporter wrote history.jsonl). `--quick` is each
script's smallest, fewest-reps mode that still goes through every row; here it runs as a user would
run it, in a fresh process from the project root. New scripts are found by the glob and must say
below what their output ends with.
"""
import copy
import glob
import os
import re
import subprocess
import sys
import time
from typing import Any, Dict, List, NamedTuple, Set

import pytest
import torch

from conftest import ROOT, clean_env, family

BENCH_DIR = os.path.join(ROOT, 'bench')
BENCHES = sorted(os.path.basename(p) for pattern in ('bench_*.py', 'gpu_check.py')
                 for p in glob.glob(os.path.join(BENCH_DIR, pattern)))
NUM = r'\d+\.\d+'  # a measured number (nan or inf would not match)


class Expected(NamedTuple):
    """What a bench's --quick output shows: `lines`, regexes that match lines of its output in this
    order, the last one its last line (the results table ends the run); `slow`: it runs in CI or with
    RUN_SLOW=1 only: those over ~20 s on 2 cores, and enough of the others (7-13 s each) that the
    benches left in a local default run take under a minute together."""
    lines: List[str]
    slow: bool


EXPECTED: Dict[str, Expected] = {
    'bench_curves.py': Expected([
        rf'^200 history rows; draw in this process: first {NUM} s',
        rf'^redraw\(\) blocks the caller: median {NUM} ms',
        rf'^training step alone {NUM} ms, during a draw {NUM} ms \(x{NUM}, \d+ steps\)$',
    ], slow=False),
    'bench_data.py': Expected([
        rf'^data wait, demo config, workers={w}\b.*: steady state \(2 iters\): data wait +{NUM} % of step time'
        for w in (1, 0, 2)
    ], slow=False),
    'bench_data_prep.py': Expected([
        r'^== bench_data_prep.py \(quick\): ',
        r'^sr x4, 192² patches from 4 HR PNGs of 512x384 ',
        *[rf'^  {row} +(-|{NUM} s) +(-|[\d.]+ MB) +(-|[\d.]+ MB) +{NUM} +{NUM}$' for row in (
            'PNG folders, as downloaded', 'extract_subimages 240/120', 'cache_data: true')],
        r'^clips of 6 frames, 192² patches, 320x256 frames ',
        *[rf'^  {row} +(-|{NUM} s) +(-|[\d.]+ MB) +(-|[\d.]+ MB) +{NUM} +{NUM}$' for row in (
            'PNG frame folders', 'make_lmdb --compress fast', 'make_lmdb --compress raw', 'cache_data: true')],
        r'^== done \d\d:\d\d:\d\d$',
    ], slow=True),
    'bench_ddp.py': Expected([
        rf'^DDP 2 proc x 1 thread / 1 proc x 2 threads \(samples/s\) +2x1 +{NUM} \| 1x2 +{NUM} \| ratio +{NUM}',
    ], slow=False),
    'bench_deform_conv.py': Expected([
        line for shape in (r'official VRT stage1 \(C=120, dg=12, 32x32\)',
                           r'tiny CPU config \(C=16, dg=4, 32x32, batch 2\)')
        for line in (rf'^{shape}:$', rf'^  torchvision +{NUM} ms/iter +peak RSS growth +-?{NUM} MiB$',
                     rf'^  torch +{NUM} ms/iter', rf'^  torch before +{NUM} ms/iter',
                     rf'^  ratio torchvision/torch = {NUM}, torch/torch before = {NUM} \(time\), -?{NUM} \(peak RSS')
    ], slow=True),
    'bench_gpu.py': Expected([
        r'^== bench_gpu.py \(quick\): CPU, torch .*; bf16 matmul ',
        r'^config +row +ms/iter +data ms +peak GiB +TFLOP/s +% bf16 peak +/ bare$',
        *[rf'^{config} +{row} +{NUM} +{NUM} +nan +{NUM} +{NUM} +{NUM}$'
          for config, rows in (('dncnn', ('bare', 'ours default', 'ours cache', 'ours bf16')),
                               ('msrresnet', ('bare', 'ours default', 'ours cache', 'ours bf16')),
                               ('swinir', ('bare', 'ours default', 'ours bf16'))) for row in rows],
    ], slow=True),
    'bench_inference.py': Expected([
        r'^== bench_inference.py \(quick\): CPU, \d+ threads, torch ',
        rf'^images/s, DnCNN demo, 2x 48x48, tile 32 +tiles off +{NUM} img/s \| tiles on +{NUM} img/s \| on / off {NUM}$',
        rf'^frames/s, clip net, 4x 48x48, tile 32 +tiles off +{NUM} fr/s \| tiles on +{NUM} fr/s \| on / off {NUM}$',
        rf'^peak RSS, main_test.py --input, 64x64 video: 10 frames {NUM} MiB \| 50 frames {NUM} MiB \| 50 / 10 {NUM}$',
    ], slow=False),
    'bench_loader.py': Expected([
        r'^== bench_loader.py \(quick\)',
        r'^outputs identical$',  # both sides bitwise equal before anything is timed
        r'^per worker ', *[rf'^  {kind}.* \| +{NUM} \| +{NUM} \| +{NUM} \|' for kind in ('image patches', 'spike')],
        r'^per process ', *[rf'^  {kind}.* \| +{NUM} \| +{NUM} \| +{NUM} \|' for kind in ('image patches', 'spike')],
        r'^decoders ', rf'^  blurred LQ frame PNG +\| +320x256 +\| +{NUM} \| +{NUM} \| +{NUM} \| +{NUM} \| {NUM}$',
        r'^where a sample', r'^  spike\+RGB clips, ours cache_data +baseline .* ours .*spikes +\d+ %',
        r'^cache fill ', *[rf'^  {kind} +\| +\d+ \| +{NUM} \| +{NUM} \| {NUM} \(\d+ threads?\)$'
                           for kind in ('image patches, ours cache_data', r'clips, ours cache_data / base frame folders',
                                        'spike\\+RGB clips, ours cache_data')],
        r'^== done \d\d:\d\d:\d\d$',
    ], slow=False),
    'bench_losses.py': Expected([
        r'^== bench_losses.py \(quick\): (cpu|cuda), batch 2 of 3x96x96, amp off, 1 rep\(s\)',
        r'^row +ms fwd\+bwd +/ l1 +/ msrresnet step +peak MiB$',
        *[rf'^{row} +{NUM} +{NUM} +{NUM} +(nan|{NUM})$' for row in (
            'l1', 'charbonnier', 'fft', 'color lab', 'sobel', 'wavelet', 'oklab_consistency', 'lstar_consistency',
            'ms_swd', 'ms_swd patch 1', 'structure_texture', 'msrresnet x4 step')],
    ], slow=True),
    'bench_loop.py': Expected([
        rf'^{row} .* ratio +{NUM} \(paired +{NUM}\)' for row in (
            r'framework loop / bare PyTorch loop', r'framework \(nan_policy=off\) / bare loop')
    ] + [rf'^per-step overhead \(tiny net .* overhead +-?\d+ us = -?{NUM} % of a demo bare step$'] + [
        rf'^{row} +on +{NUM} ms/step \| off +{NUM} ms/step \| ratio +{NUM} \(paired +{NUM}\)' for row in (
            r'EMA on \(E_decay 0.99\) / off', 'amp bf16 / fp32', 'channels_last on / off',
            *[rf'SAM {m} / adam alone' for m in ('sam', 'fsam', 'gsam', 'looksam')], r'teacher \(distillation\) on / off',
            r'batch augment \(use_moa\) on / off')
    ], slow=False),
    'bench_peers.py': Expected([
        r'^== bench_peers.py \(quick\): ',
        r'^BasicSR: absent \(not installed in .*; --quick never installs\): only ours is timed$',
        r'^our JSON of every network validates: msrresnet, edsr_m, rrdb6, swinir_light, rcan$',
        r'^ran with:$',
        *[rf'^  {cell}: .*; BasicSR -; ours .*\d+ torch threads?' for cell in ('2cores', '1core', 'busy')],
        r'^ +whole processes +in the logs \(long runs\)$',
        r'^network +cell +BasicSR s/it +ours s/it +ours/BasicSR +BasicSR s/it +ours s/it +ours/BasicSR$',
        *[rf'^msrresnet +{cell} +- +-?{NUM} +- +- +{NUM} +-$' for cell in ('2cores', '1core', 'busy')],
    ], slow=True),
    'bench_resume.py': Expected([
        rf'^  fresh : first step done after {NUM} s', rf'^  resume: first step done after {NUM} s',
        rf'^time to first step, resume / fresh start +ratio +{NUM}',
    ], slow=True),
    'bench_startup.py': Expected([
        rf'^  main_train.py +{NUM} s', rf'^  bare PyTorch +{NUM} s', rf'^  ours / bare +{NUM} ',
    ], slow=True),
    'bench_vrt_step.py': Expected([
        r'^tiny VRT of the same layout \(--quick\)',
        *[rf'^  deform conv {impl} +checkpointing {ckpt}: forward +{NUM} s, forward\+backward +{NUM} s, '
          rf'peak RSS +{NUM} GiB' for ckpt in ('off', 'on ') for impl in ('torch', 'torchvision', 'torch, before')],
        *[rf'^checkpointing {ckpt}: torch / torchvision: fwd\+bwd time {NUM} .* fwd\+bwd time {NUM}$'
          for ckpt in ('off', 'on ')],
    ], slow=True),
    'bench_video_gpu.py': Expected([
        r'^== bench_video_gpu.py \(quick\): ',
        r'^block +side +MiB kept for backward +ms fwd\+bwd$',
        *[rf'^{block} +{side} +{NUM} +{NUM}$' for block in ('RVRT GDA call', 'VRT attention block')
          for side in ('ours', 'before')],
        rf'^RVRT GDA call: kept for backward ours / before = 0\.[0-3]\d\d, time {NUM}$',  # the memory gain, pinned
        rf'^VRT attention block: kept for backward ours / before = {NUM}, time {NUM}$',
        r'^network +checkpointing +precision +ms/step +peak GiB',
        *[rf'^{net} +{ckpt} +{prec} +{NUM} +nan +-$' for net, ckpt, prec in (
            ('vrt', 'KAIR', 'fp32'), ('vrt', 'KAIR', 'bf16'), ('vrt', 'memory', 'fp32'), ('vrt', 'memory', 'bf16'),
            ('rvrt', 'KAIR', 'fp32'), ('rvrt', 'KAIR', 'bf16'), ('rvrt', 'memory', 'fp32'),
            ('basicvsrpp', 'BasicSR', 'fp32'), ('basicvsrpp', 'BasicSR', 'bf16'))],
    ], slow=True),
    'gpu_check.py': Expected([
        r'^== gpu_check.py \(quick\): CPU, torch .*, 11 rows; out ',
        r'^== 11 rows: 9 ok, 0 FAILED, 2 skipped in \d+ s of the 1800 s budget; ',
        r'^row +result +ms/step +data ms +peak GiB +TFLOP/s +% bf16 +/ bare  note$',
        rf'^card/gpu +ok +- +- +- +{NUM} +- +-  CPU, \d+ cores$',
        r'^demo/compile-reduce-overhead +skipped  needs CUDA$',
        rf'^demo/fp32 +ok +{NUM} +{NUM} +- +- +- +-  PSNR {NUM}$',
        r'^demo/fp16 +skipped  needs CUDA$',
        rf'^launch/env-world1 +ok +{NUM} +{NUM} +- +- +- +-  PSNR {NUM}; gloo$',
        r'^resume/bit-exact +ok +4 = 2 \+ 2 bit for bit: weights, EMA, optimizer, schedule$',
        rf'^test/tiles-x8 +ok +PSNR {NUM} on 8 items, tiles 64/16, x8$',
        r'^export/onnx +ok +fp32 max\|diff\| \S+, fp16 max\|diff\| \S+$',
        rf'^speed/dncnn bare +ok +{NUM} +{NUM} +- +{NUM} +{NUM} +-  the hand-written loop$',
        rf'^speed/dncnn default +ok +{NUM} +{NUM} +- +{NUM} +{NUM} +{NUM}  KAIR\'s options as they are$',
        rf'^memory/vrt KAIR fp32 +ok +{NUM} +- +- +- +- +-  tiny network \(--quick\)$',
    ], slow=True),
    'bench_zoo.py': Expected([
        rf'^swinir__train_swinir_car_jpeg +swinir +[\d,]+ +1x1x16x16 +{NUM} +{NUM} +{NUM} +last$',
        rf'^train_usrnet +usrnet +[\d,]+ +1x3x16x16 +{NUM} +{NUM} +{NUM} +last$',
        rf'^hat__HAT_SRx4 +hat +20,772,507 +1x3x16x16 +{NUM} +{NUM} +{NUM} +last$',
        rf'^plksr__PLKSR_X4_DIV2K +plksr +[\d,]+ +1x3x16x16 +{NUM} +{NUM} +{NUM} +first$',  # 17x17 convolutions
        rf'^restormer__withbias_derain_deblur +restormer +26,126,644 +1x3x16x16 +{NUM} +{NUM} +{NUM} +last$',
        rf'^uformer__tiny +uformer +[\d,]+ +1x3x64x64 +{NUM} +{NUM} +{NUM} +last$',
        rf'^basicvsr__BasicVSR_REDS4 +basicvsr +6,291,311 +1x2x3x33x33 +{NUM} +{NUM}$',
        rf'^basicvsrpp__BasicVSRPP_REDS +basicvsrpp +7,322,927 +1x3x3x33x33 +{NUM} +{NUM}$',
        rf'^edvr__EDVR_L_deblur_REDS +edvr +23,602,019 +1x5x3x64x64 +{NUM} +{NUM}$',
        rf'^iconvsr__IconVSR_Vimeo90K_BIx4 +iconvsr +8,711,375 +1x7x3x33x33 +{NUM} +{NUM}$',
        rf'^  plain {NUM} s/iter, gan {NUM} s/iter, gan / plain = {NUM}$',
    ], slow=True),
}


def new_files_in_project() -> Set[str]:
    """Untracked and ignored files in the checkout, as git lists them: bytecode caches aside, and the demo data that
    shipped option files generate under demo_data/ on first use (by design, and possibly meanwhile by a test on
    another pytest-xdist worker)."""
    out = subprocess.run(['git', 'status', '--porcelain', '--ignored', '--untracked-files=all'], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return {line[3:] for line in out.splitlines()
            if line[:2] in ('??', '!!') and '__pycache__' not in line and '.pytest_cache' not in line
            and not line[3:].startswith('demo_data/')}


# Of the benches that are not slow, those a local run still runs: the training loop's (the one most likely to break
# when main_train.py changes) and the curves' (a plotting child); the others run in CI and with RUN_SLOW=1.
LOCAL = ('bench_loop.py', 'bench_curves.py')


def bench_params() -> List[Any]:
    """One test per bench file; the slow ones marked, and the others a family of which LOCAL run locally."""
    return [pytest.param(name, marks=[pytest.mark.slow]) if name in EXPECTED and EXPECTED[name].slow else member
            for name, member in zip(BENCHES, family(BENCHES, LOCAL))]


def test_the_glob_finds_the_benchmarks_and_not_their_helpers():
    assert {'bench_loop.py', 'gpu_check.py'} <= set(BENCHES) and 'loader_baselines.py' not in BENCHES


@pytest.mark.parametrize('name', bench_params())
def test_a_bench_runs_quick_prints_its_table_last_and_writes_nothing_into_the_project(name, tmp_path):
    assert name in EXPECTED, f'bench/{name}: say in EXPECTED what its --quick output ends with (and whether it is slow)'
    expected = EXPECTED[name]
    before = new_files_in_project()
    t0 = time.perf_counter()
    # TMPDIR: whatever the bench writes through tempfile lands in this test's folder; OMP_NUM_THREADS: the cores
    # this pytest process computes on (one on each xdist worker of a 2-core machine), which the bench keeps to
    proc = subprocess.run([sys.executable, os.path.join('bench', name), '--quick'], cwd=ROOT,
                          env=clean_env(TMPDIR=str(tmp_path), OMP_NUM_THREADS=str(torch.get_num_threads())),
                          capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - t0
    tail = f'{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}'
    assert proc.returncode == 0, f'bench/{name} --quick exited {proc.returncode}:\n{tail}'
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    at = 0
    for pattern in expected.lines:
        found = next((i for i in range(at, len(lines)) if re.search(pattern, lines[i])), None)
        assert found is not None, f'bench/{name} --quick: no line matching {pattern!r} (after line {at}):\n{tail}'
        at = found + 1
    assert at == len(lines), f'bench/{name} --quick: {lines[-1]!r} printed after its table:\n{tail}'
    failed_writes = [ln for ln in (proc.stdout + proc.stderr).splitlines() if '[Errno ' in ln]
    assert not failed_writes, f'bench/{name} --quick: an OS error between its rows: {failed_writes[0]}'
    written = sorted(new_files_in_project() - before)
    assert not written, f'bench/{name} --quick wrote into the project (outputs belong under a temp dir): {written}'
    print(f'bench/{name} --quick: {seconds:.1f} s')


def test_run_all_runs_every_bench():
    with open(os.path.join(BENCH_DIR, 'run_all.sh')) as f:
        script = f.read()
    missing = [name for name in BENCHES if not re.search(rf'^python bench/{re.escape(name)} "\$\{{ARGS\[@\]\}}"$',
                                                          script, re.M)]
    assert not missing, f'bench/run_all.sh does not run {missing} (with "${{ARGS[@]}}", which is --quick under QUICK=1)'


def test_quick_children_run_two_at_a_time_one_thread_each_results_in_order(tmp_path, monkeypatch):
    """common.run_children, which --quick uses for the benches' child processes: with jobs=2 the first two
    commands run side by side (each waits for the other's file), the results come back in the order given,
    and each child gets one OpenMP thread unless the caller set it; with jobs=1 they run one after another. A bench
    given one core (OMP_NUM_THREADS=1) runs its --quick children one at a time."""
    sys.path.insert(0, BENCH_DIR)
    try:
        from common import quick_jobs, run_children
    finally:
        sys.path.remove(BENCH_DIR)
    monkeypatch.setenv('OMP_NUM_THREADS', '1')  # a caller that gives the bench one core gets one child at a time
    assert quick_jobs() == 1
    monkeypatch.delenv('OMP_NUM_THREADS', raising=False)
    assert quick_jobs() == 2
    wait = ('import os, sys, time\nopen(sys.argv[1], "w").close()\nt = time.monotonic()\n'
            'while not os.path.exists(sys.argv[2]) and time.monotonic() - t < 60: time.sleep(0.01)\n'
            'print(os.path.exists(sys.argv[2]), os.environ.get("OMP_NUM_THREADS"))')
    a, b = str(tmp_path / 'a'), str(tmp_path / 'b')
    cmds = [[sys.executable, '-c', wait, a, b], [sys.executable, '-c', wait, b, a],
            [sys.executable, '-c', 'print("third")']]
    out = [p.stdout.strip() for p in run_children(cmds, 2, capture_output=True, text=True)]
    assert out == ['True 1', 'True 1', 'third']
    os.remove(a)
    os.remove(b)
    one = [[sys.executable, '-c', 'import os; print(os.environ.get("OMP_NUM_THREADS"))']]
    assert [p.stdout.strip() for p in run_children(one, 2, capture_output=True, text=True,
                                                   env={**os.environ, 'OMP_NUM_THREADS': '3'})] == ['3']
    alone = [[sys.executable, '-c', f'import os; print(os.path.exists({a!r}))'],
             [sys.executable, '-c', f'open({a!r}, "w").close()']]
    assert [p.stdout.strip() for p in run_children(alone, 1, capture_output=True, text=True)] == ['False', '']


def test_bench_loop_leaves_the_options_of_a_row_as_they_were_so_that_the_next_row_starts_from_the_same(tmp_path):
    """bench_loop times several rows against one `base` options dict: a framework runner that changed it (the
    loop sets `train.total_iter` to the iterations it runs) made every later row start from another run (and
    log, between the rows, that the demo's milestones lie beyond that run's end)."""
    sys.path.insert(0, BENCH_DIR)
    try:
        import bench_loop
    finally:
        sys.path.remove(BENCH_DIR)
    base = bench_loop.demo_options(str(tmp_path), *bench_loop.QUICK_DEMO)
    before = copy.deepcopy(base)
    run, trainer = bench_loop.framework(base, bench_loop.make_batches(base, 2))
    run(2)
    assert trainer.step == 2
    assert base == before


def test_bench_peers_reads_each_trainers_steady_time_from_its_own_status_lines():
    """The in-log figure of bench_peers: seconds between the first and last status lines over the iterations
    between them, from each logger's millisecond timestamps (a line each trainer writes as in these excerpts);
    a log without two such lines is an error, not a figure."""
    sys.path.insert(0, BENCH_DIR)
    try:
        import bench_peers
    finally:
        sys.path.remove(BENCH_DIR)
    basicsr = ('2026-12-03 17:48:28,396 INFO: Start training from epoch: 0, iter: 0\n'
               '2026-12-03 17:48:31,347 INFO: [basic..][epoch:  0, iter:       5, lr:(1.000e-04,)] [eta: 0:00:06, '
               'time (data): 0.590 (0.029)] l_pix: 1.1684e-01 \n'
               '2026-12-03 17:48:34,082 INFO: [basic..][epoch:  0, iter:      10, lr:(1.000e-04,)] [eta: 0:00:06, '
               'time (data): 0.568 (0.017)] l_pix: 9.6973e-02 \n'
               '2026-12-03 17:48:59,847 INFO: [basic..][epoch:  9, iter:   1,005, lr:(1.000e-04,)] [eta: 0:00:00, '
               'time (data): 0.552 (0.009)] l_pix: 6.9398e-02 \n'
               '2026-12-03 17:49:00,000 INFO: End of training. Time consumed: 0:00:13\n')
    assert bench_peers.in_log('basicsr', basicsr) == pytest.approx((28.500) / 1000)
    ours = ('26-12-03 17:48:49.001 INFO: start training at iteration 0 of 25\n'
            '26-12-03 17:48:52.250 INFO: <epoch:  0, iter:       5, lr:1.000e-04> G_loss: 1.253e-01 time/iter: 0.517s '
            'data: 0.017s 7.7 samples/s eta: 0:00:10\n'
            '26-12-03 17:48:54.000 INFO: validation ...\n'
            '26-12-03 17:49:03.000 INFO: <epoch:  3, iter:      25, lr:1.000e-04> G_loss: 7.180e-02 time/iter: 0.578s '
            'data: 0.005s 6.9 samples/s eta: 0:00:00\n')
    assert bench_peers.in_log('ours', ours) == pytest.approx(10.75 / 20)
    with pytest.raises(RuntimeError, match='fewer than 2 status lines'):
        bench_peers.in_log('ours', ours.replace('.250 INFO', ' INFO'))



def test_bench_peers_reads_a_real_run_of_ours(tiny_run):
    """The same figure from the log a run of ours writes (8 iterations, a status line every 2): our log lines
    carry milliseconds, so two status lines a fraction of a second apart are a timing."""
    sys.path.insert(0, BENCH_DIR)
    try:
        import bench_peers
    finally:
        sys.path.remove(BENCH_DIR)
    [log] = glob.glob(os.path.join(tiny_run.folder, '*.log'))
    with open(log) as f:
        text = f.read()
    times = bench_peers.status_times('ours', text)
    assert [it for it, _ in times] == [2, 4, 6, 8]
    assert all(b > a for (_, a), (_, b) in zip(times, times[1:]))
    assert 0 < bench_peers.in_log('ours', text) < 60
    assert any(s % 1 for _, s in times)  # milliseconds, not whole seconds
