"""main_test.py: a checkpoint evaluated on the test set gives restored images and a metrics table."""
import csv
import json
import os
import re
import subprocess
import sys

import pytest

from utils.exit_codes import EXIT_WRITE_FAILED
from tests.conftest import ROOT, clean_env, free_port, run, run_main, tiny_options, write_options

import tests.extra_metrics  # noqa: F401  (registers the two metrics: main_test in this process scores them)

PY = sys.executable
# the two metrics of tests/extra_metrics.py, one full-reference and one no-reference (`-m tests.extra_metrics`
# registers them in a process of its own)
METRICS = ['--set', 'val.metrics=["mean_abs_error", "brightness"]']


def _table(path):
    with open(path) as f:
        return list(csv.reader(f))


def _bytes(path):
    with open(path, 'rb') as f:
        return f.read()


def test_main_test_writes_images_and_a_table_identical_under_two_processes(tmp_path, tiny_run):
    opt = tiny_run.opt_path
    one = run_main('main_test', ['--opt', opt, '--out', str(tmp_path / 'one'), *METRICS])
    assert one.returncode == 0, one.stderr[-2000:]
    assert '8_E.pth' in one.stdout                       # newest checkpoint, EMA weights by default
    rows = _table(tmp_path / 'one' / 'results.csv')
    assert rows[0] == ['name', 'psnr', 'ssim', 'psnr_y', 'ssim_y', 'mean_abs_error', 'brightness']
    assert rows[-1][0] == 'mean'
    assert len(rows) == 2 + 8 and all(float(r[1]) > 10 for r in rows[1:])
    images = [f'{i:04d}.png' for i in range(8)]
    assert sorted(os.listdir(tmp_path / 'one')) == sorted(images + ['results.csv', 'results.md', 'index.html', 'input',
                                                                    'target'])
    noisy = re.findall(r'input: the input itself \(L against H\) on 8 items: PSNR ([\d.]+) dB', one.stdout)
    assert len(noisy) == 1 and 19.5 < float(noisy[0]) < 21, one.stdout  # sigma 25: about 20.2 dB

    two = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', '-m', 'tests.extra_metrics',
               'main_test', '--opt', opt, '--out', str(tmp_path / 'two'), *METRICS])
    assert two.returncode == 0, two.stderr[-2000:]
    assert _table(tmp_path / 'two' / 'results.csv') == rows  # dataset order, the same sums: the same means
    for path in [*images, *(f'{kind}/{name}' for kind in ('input', 'target') for name in images)]:
        assert _bytes(tmp_path / 'two' / path) == _bytes(tmp_path / 'one' / path), path  # rank 0 writes them all
    assert re.findall(r'input: the input itself \(L against H\) on 8 items: PSNR ([\d.]+) dB', two.stdout) == noisy


def test_main_test_without_a_checkpoint_says_so(tmp_path, demo_images):
    opt = write_options(str(tmp_path / 'o.json'), tiny_options(str(tmp_path / 'exp'), demo_images))
    res = run_main('main_test', ['--opt', opt])
    assert res.returncode == 2 and 'no checkpoint found' in res.stderr and res.stderr.count('\n') == 1


def test_a_target_of_another_size_than_the_output_is_one_line_naming_the_item(tmp_path, tiny_run, demo_images):
    """A network that restores at scale 1 (DnCNN) tested on x2 super-resolution pairs: the outputs are half their
    targets' size; one line names the test set, the item and both sizes (every rank stops together), no table."""
    with open(tiny_run.opt_path) as f:
        opt = json.load(f)
    opt['scale'] = 2
    opt['datasets'] = {'test': {'name': 'x2', 'dataset_type': 'sr', 'dataroot_H': os.path.join(demo_images, 'test')}}
    path = write_options(str(tmp_path / 'o.json'), opt)
    out = tmp_path / 'out'
    weights = os.path.join(tiny_run.models, '8_G.pth')
    res = run_main('main_test', ['--opt', path, '--weights', weights, '--out', str(out)])
    assert res.returncode == 2 and res.stderr.count('\n') == 1, res.stderr[-2000:]
    assert re.fullmatch(r"error: datasets\.test: 0000: the restored image is (\d+)x(\d+) but its target is (\d+)x(\d+) "
                        r"\(2x the output\); the network's output must be the target's size: check that netG restores "
                        r"at the data's scale and that dataroot_H holds the targets of these inputs\n", res.stderr)
    assert not (out / 'results.csv').exists() and not (out / 'results.md').exists()


@pytest.mark.slow
@pytest.mark.parametrize('args, name', [
    ([], 'results.csv'),                              # a test set's table, between its gather and the end
    (['--watch'], 'results_by_iter.csv'),             # the first checkpoint's rows, before the next look
    (['--input', 'DEMO_TEST', '--frames'], '0003.png')])  # an output of one's own, kept as the evaluation's error
def test_a_failed_write_of_rank_0_ends_every_rank_at_once_with_one_line_and_exit_5(tmp_path, tiny_run, demo_images,
                                                                                  args, name):
    """Two real processes (gloo): rank 0's write fails (a full disk, tests/failing_write.py) while rank 1 would go
    on into the next collective; both leave at once with the same line and exit 5, instead of rank 1 waiting in
    that collective until dist_timeout."""
    args = [os.path.join(demo_images, 'test') if a == 'DEMO_TEST' else a for a in args]
    port = str(free_port())
    cmd = [PY, os.path.join('tests', 'failing_write.py'), '--opt', tiny_run.opt_path, '--out', str(tmp_path / 'out'),
           *args]
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=clean_env(OMP_NUM_THREADS='1', WRITE_FAIL=name, WORLD_SIZE='2', RANK=str(r),
                                            LOCAL_RANK=str(r), MASTER_ADDR='127.0.0.1', MASTER_PORT=port))
             for r in (0, 1)]
    try:
        ends = [p.communicate(timeout=120) for p in procs]  # dist_timeout is 600 s: a rank left waiting fails here
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [EXIT_WRITE_FAILED] * 2, [e[1][-2000:] for e in ends]
    assert 'world_size=2' in ends[0][0]
    for _, err in ends:
        assert re.fullmatch(r'error: writing the results failed: no space left on /\S* \(\d+(\.\d+)? MB free\)\n',
                            err), err[-2000:]
