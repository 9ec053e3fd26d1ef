"""`main_train.py --check --opt FILE`: everything a run does before its first step, one report, nothing written,
exit 0; or the first problem's one line and the run's exit code.

In the test's process (`run_main`). Evidence: the report's sections, the arithmetic of the memory estimate, and
the folders that do not exist afterwards (the run folder under path.root, demo data that were missing).
"""
import os
import re
import shutil
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import run_main, tiny_options, write_options

SECTIONS = ('options', 'launch', 'data', 'resume', 'network', 'memory')
ESTIMATE = re.compile(r'estimated \(no GPU here\): weights ([\d.]+) MiB \(2 network\(s\)\) \+ gradients ([\d.]+) MiB \+ '
                      r'optimizer state ([\d.]+) MiB \+ activations ([\d.]+) MiB \(([\d.]+) MiB saved for the backward '
                      r'pass at batch 1, x 4\) = ([\d.]+) MiB for one step')


def _options(tmp_path, data, **changes):
    opt = tiny_options(str(tmp_path / 'exp'), data)
    opt['netG'].update(nc=32, nb=4)  # weights of some size: the estimate's MiB show them
    for key, value in changes.items():
        section, name = key.split('.')
        opt[section][name] = value
    return write_options(str(tmp_path / 'o.json'), opt)


def _sections(report: str) -> dict:
    """{label: [lines]} of the report."""
    out, label = {}, None
    for line in report.splitlines()[1:]:
        head = line[2:11].strip()
        label = head or label
        out.setdefault(label, []).append(line[12:])
    return out


def test_a_clean_config_is_one_report_of_every_section_with_nothing_written(tmp_path, demo_images):
    path = _options(tmp_path, demo_images)
    res = run_main('main_train', ['--check', '--opt', path])
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stderr == ''
    title = res.stdout.splitlines()[0]
    assert title == f'--check {path}: the run would start; nothing was written'
    sections = _sections(res.stdout)
    assert tuple(sections)[:6] == SECTIONS, res.stdout
    run_folder = tmp_path / 'exp' / 'tiny'
    assert sections['options'] == [f'valid: model plain, netG dncnn; run folder {run_folder} (not there yet: the run '
                                   f'creates it)']
    assert sections['launch'][0].startswith('one process (no launcher detected), world size 1; device cpu, ')
    assert sections['launch'][0].endswith('loader workers per process: datasets.train 0, datasets.test 0')
    train, test, layout = sections['data']
    assert train == (f'datasets.train (dncnn): 64 items; dataroot_H {demo_images}/train: 64 files, 128x128 each; '
                     f'3-channel images (n_channels 3)')
    assert test.startswith(f'datasets.test (dncnn): 8 items; dataroot_H {demo_images}/test: 8 files, 128x128 each')
    assert layout == ('training samples 64, 16 iterations per epoch; batch 4 per process x 1 processes x 1 '
                      'accumulation = effective batch 4')
    assert sections['resume'] == ['none: a fresh start at iteration 0 of 8']
    assert sections['network'][0].startswith('DnCNN: 20,387 parameters; optimizer adam (Adam)')
    memory, = sections['memory']
    assert memory.startswith('one training step at batch 4 per process of 24x24 patches (H_size): estimated')
    weights, grads, state, activations, per_sample, total = (float(v) for v in ESTIMATE.search(memory).groups())
    mib = 20387 * 4 / 2 ** 20
    assert (weights, grads) == (round(2 * mib, 1), round(mib, 1))  # netG and its EMA; netG's gradients
    assert abs(state - 2 * mib) < 0.06  # Adam: two moments per weight (and a step count each)
    assert abs(activations - 4 * per_sample) < 0.2 and per_sample > 0
    assert abs(total - (weights + grads + state + activations)) < 0.3
    assert not (tmp_path / 'exp').exists()


def test_missing_demo_data_are_generated_aside_for_the_checks_and_removed(tmp_path):
    data = tmp_path / 'demo_data'
    path = _options(tmp_path, str(data))
    res = run_main('main_train', ['--check', '--opt', path])
    assert res.returncode == 0, res.stderr[-3000:]
    data_lines = _sections(res.stdout)['data']
    assert data_lines[0].startswith(f'datasets.train (dncnn): 64 items; dataroot_H {data}/train: 64 files')
    assert data_lines[-1] == ('demo data of datasets.train, datasets.test: not generated yet; the run generates them '
                              'first, before anything else; --check generated them into a temporary folder for its '
                              'checks and removed it')
    assert sorted(os.listdir(tmp_path)) == ['o.json']


def test_a_broken_data_folder_is_its_one_line_and_exit_2_with_nothing_written(tmp_path, demo_images):
    data = tmp_path / 'data'
    shutil.copytree(demo_images, data)
    with open(data / 'train' / '0007.png', 'r+b') as f:
        f.truncate(40)  # a file cut short: its header no longer holds
    path = _options(tmp_path, str(data))
    res = run_main('main_train', ['--check', '--opt', path])
    assert res.returncode == 2, res.stdout[-3000:] + res.stderr[-3000:]
    assert res.stdout == ''
    line, = res.stderr.strip().splitlines()
    assert line.startswith(f'error: datasets.train.dataroot_H: {data}/train/0007.png: '), line
    assert not (tmp_path / 'exp').exists()
    assert sorted(os.listdir(tmp_path)) == ['data', 'o.json']


def test_out_of_memory_in_the_checked_step_is_the_runs_line_and_exit_6(tmp_path, demo_images, monkeypatch):
    from models import step_memory

    def no_memory(model, batches):
        raise torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 1.00 GiB.')
    monkeypatch.setattr(step_memory, 'one_step', no_memory)
    res = run_main('main_train', ['--check', '--opt', _options(tmp_path, demo_images)])
    assert res.returncode == 6, res.stderr[-3000:]
    line, = res.stderr.strip().splitlines()
    assert line.startswith('error: out of memory in --check (the network, a training sample, one step): network '
                           'dncnn (20,387 parameters), batch 4 per process of 24x24 patches (H_size); '), line
    assert not (tmp_path / 'exp').exists()


def test_check_needs_an_option_file():
    res = run_main('main_train', ['--check', '--describe', 'dncnn'])
    assert res.returncode == 2 and 'error: --check: give --opt FILE, the option file of the run to check' in res.stderr


def test_on_a_gpu_one_real_step_is_measured_against_the_card(monkeypatch):
    """The CUDA branch without a GPU: the allocator's counters are faked, the step is the model's own calls."""
    from models import step_memory
    calls = []
    model = SimpleNamespace(backward=lambda b: calls.append('backward') or torch.zeros(()),
                            finalize_gradients=lambda step, loss: calls.append(f'finalize {step}'),
                            step=lambda step, loss, applied: calls.append(f'step {step} {applied}'))
    gib = 2 ** 30
    monkeypatch.setattr(torch.cuda, 'synchronize', lambda device=None: calls.append('sync'))
    monkeypatch.setattr(torch.cuda, 'reset_peak_memory_stats', lambda device=None: calls.append('reset'))
    monkeypatch.setattr(torch.cuda, 'max_memory_allocated', lambda device=None: 70 * gib)
    monkeypatch.setattr(torch.cuda, 'max_memory_reserved', lambda device=None: 75 * gib)
    monkeypatch.setattr(torch.cuda, 'get_device_properties', lambda device=None: SimpleNamespace(total_memory=80 * gib))
    text = step_memory.step_memory(model, [{'L': torch.zeros(2, 3, 8, 8)}], torch.device('cuda', 0))
    assert calls == ['sync', 'reset', 'backward', 'finalize 1', 'step 1 None', 'sync']
    assert text == ('measured, one real step (forward, backward, optimizer step): peak GPU memory 70.00 GiB allocated, '
                    '75.00 GiB reserved of the card\'s 80.00 GiB (under 10 % of the card left: validation and '
                    'fragmentation may need more)')


def test_the_launch_reported_is_the_runs_and_check_meets_no_other_process(tmp_path, demo_images):
    """Under a launcher (rank 1 of 2, its master nowhere) the check is this rank's, without a process group; with
    two gpu_ids (CPU test mode) the relaunch is reported and the layout is world size 2's."""
    from tests.conftest import clean_env
    path = _options(tmp_path, demo_images)
    res = run_main('main_train', ['--check', '--opt', path], env=clean_env(
        WORLD_SIZE='2', RANK='1', LOCAL_RANK='1', MASTER_ADDR='127.0.0.1', MASTER_PORT='9'))
    assert res.returncode == 0, res.stderr[-3000:]
    sections = _sections(res.stdout)
    assert sections['launch'][0].startswith('env launch, rank 1 of world size 2 (local rank 1); checked as this rank, '
                                            'without meeting the others; device cpu, ')
    assert 'batch 4 per process x 2 processes x 1 accumulation = effective batch 8' in sections['data'][2]
    res = run_main('main_train', ['--check', '--opt', path, '--set', 'gpu_ids=[0, 1]'],
                   env=clean_env(RESTORATION_CPU_PROCS_FROM_GPU_IDS='1'))
    assert res.returncode == 0, res.stderr[-3000:]
    assert _sections(res.stdout)['launch'][0].startswith(
        'gpu_ids [0, 1]: the run relaunches itself as 2 DDP processes, one per GPU (world size 2); checked as the '
        'first of them; device cpu, ')
    assert not (tmp_path / 'exp').exists()
