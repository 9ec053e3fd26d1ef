"""A CUDA out-of-memory error at any step ends every rank together with one line: where it happened (forward,
backward, optimizer step, validation, start-up, main_test's test sets and --input), the network and its
parameters, the batch and patch (or the item), the peak memory, and the option keys that lower it; exit code 6;
nothing written after it, the newest checkpoint intact and named.

No GPU needed: tests/patched_main.py raises `torch.cuda.OutOfMemoryError` (what the CUDA caching allocator
raises) where a real one comes from: netG's forward, a node of the backward graph, the optimizer step, the
evaluation's network call. With 2 real gloo ranks only one rank raises, in the middle of a step where the other
is inside (or about to enter) a collective: both still end at once, well before `dist_timeout`.
"""
import os
import re
import subprocess
import sys
import time

import pytest
import torch

from models.out_of_memory import evaluation_keys, training_keys
from tests.conftest import ROOT, clean_env, dataset_options, free_port, run_main, tiny_options, train_options, \
    write_options
from utils.exit_codes import EXIT_OUT_OF_MEMORY, MEANING
from utils.oom import OutOfMemory, is_out_of_memory, on_out_of_memory, pass_of, tried

PY = sys.executable
PATCHED = os.path.join('tests', 'patched_main.py')
KEYS = ('lower it with datasets.train.dataloader_batch_size (now 4; 2 with train.accumulate_steps 2 keeps the '
        'effective batch), datasets.train.H_size (now 24x24), train.amp: "bf16"')
STEP_LINE = (r'error: out of memory in the {where} of iteration 3{rank}: network dncnn \(1,043 parameters\), batch 4 '
             r'per process of 24x24 patches \(H_size\); peak memory [\d.]+ GiB \(the process\'s resident size, cpu\)'
             r'[^;]*; this machine has [\d.]+ GiB available \(the failed allocation asked for 2\.00 GiB more\); '
             + re.escape(KEYS) + r'; no checkpoint written after it; newest complete checkpoint: '
             r'(?P<newest>\S+/2_state\.pth)')
VALIDATION_LINE = (r'error: out of memory in validation at iteration 4, on item (?P<item>\d+) of datasets\.test '
                   r'\(128x128 input\){rank}: network dncnn \(1,043 parameters\); peak memory .*; lower it with '
                   r'val\.tile \(now 0: whole images; e\.g\. 256\), val\.amp: "bf16"; no checkpoint written after '
                   r'it; newest complete checkpoint: (?P<newest>\S+/4_state\.pth)')


def _options(tmp_path, demo_images, **train):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, **{'checkpoint_save': 2, **train})
    opt['logging']['use_tensorboard'] = False
    opt['dist_timeout'] = 120  # a rank left waiting in a collective would take this long: the test waits less
    return write_options(str(tmp_path / 'o.json'), opt)


def _models(tmp_path):
    return tmp_path / 'exp' / 'tiny' / 'models'


def _one_line(stderr: str) -> str:
    assert 'Traceback' not in stderr, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def _intact(tmp_path, saved: int) -> None:
    """The newest complete checkpoint is the last one before the failure, loadable, and nothing came after it."""
    models = _models(tmp_path)
    assert (models / 'latest').read_text().strip() == str(saved)
    assert sorted(os.listdir(models)) == sorted(['latest', *(f'{i}_{k}.pth' for i in range(2, saved + 1, 2)
                                                             for k in ('G', 'E', 'state'))])
    assert torch.load(models / f'{saved}_state.pth', weights_only=True)['iter'] == saved


@pytest.mark.parametrize('phase, where', [('forward', 'forward pass'), ('backward', 'backward pass'),
                                          ('step', 'optimizer step')])
def test_out_of_memory_in_a_training_step_is_one_line_exit_6_and_the_last_checkpoint_intact(
        tmp_path, demo_images, phase, where):
    res = run_main('main_train', ['--opt', _options(tmp_path, demo_images)],
                   faults={'OOM_AT': '3', 'OOM_IN': phase})
    assert res.returncode == EXIT_OUT_OF_MEMORY == 6, res.stderr[-3000:]
    line = _one_line(res.stderr)
    m = re.fullmatch(STEP_LINE.format(where=where, rank=''), line)
    assert m, line
    assert m['newest'] == str(_models(tmp_path) / '2_state.pth')
    _intact(tmp_path, 2)
    assert 'iter:       3' not in res.stdout


def test_out_of_memory_in_validation_names_the_item_and_the_tile_key(tmp_path, demo_images):
    res = run_main('main_train', ['--opt', _options(tmp_path, demo_images)],
                   faults={'OOM_AT': '2', 'OOM_IN': 'evaluation'})  # the second validation item of iteration 4
    assert res.returncode == EXIT_OUT_OF_MEMORY, res.stderr[-3000:]
    line = _one_line(res.stderr)
    m = re.fullmatch(VALIDATION_LINE.format(rank=''), line)
    assert m and m['item'] == '0001', line
    _intact(tmp_path, 4)  # saved before validating, as always


def test_out_of_memory_at_start_up_ends_the_run_before_anything_is_written(tmp_path, demo_images, monkeypatch):
    from models.model_plain import ModelPlain

    def no_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 512.00 MiB.')
    monkeypatch.setattr(ModelPlain, 'check_sample', no_memory)
    res = run_main('main_train', ['--opt', _options(tmp_path, demo_images)])
    assert res.returncode == EXIT_OUT_OF_MEMORY, res.stderr[-3000:]
    line = _one_line(res.stderr)
    assert line.startswith('error: out of memory at start-up (netG built, one training sample through it): network '
                           'dncnn (1,043 parameters), batch 4 per process of 24x24 patches (H_size); '), line
    assert '(the failed allocation asked for 512.00 MiB more)' in line
    assert line.endswith('no checkpoint written after it; newest complete checkpoint: none')
    assert not (tmp_path / 'exp').exists()


def _two_ranks(path, faults, timeout=100):
    """Both ranks' exit codes and stderr. TORCH_CPP_LOG_LEVEL as main_train.py sets it before torch is imported
    (tests/patched_main.py imports torch first)."""
    port = str(free_port())
    procs = [subprocess.Popen([PY, PATCHED, '--opt', path], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=clean_env(WORLD_SIZE='2', RANK=str(r), LOCAL_RANK=str(r),
                                                       MASTER_ADDR='127.0.0.1', MASTER_PORT=port,
                                                       TORCH_CPP_LOG_LEVEL='ERROR', **faults))
             for r in (0, 1)]
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()
    return [p.returncode for p in procs], [err for _, err in outs]


@pytest.mark.parametrize('phase, rank, where', [('backward', 1, 'backward pass'), ('forward', 0, 'forward pass')])
def test_out_of_memory_on_one_of_two_ranks_mid_step_ends_both_at_once_with_its_line(
        tmp_path, demo_images, phase, rank, where):
    """Rank `rank` alone runs out of memory in iteration 3 while the other is in DDP's gradient all-reduce (or
    waits for it): both end within seconds (dist_timeout is 120 s, the test waits 100), with the same line and
    code. Rank 0 hosts the store the line goes through: it departing is the harder case."""
    path = _options(tmp_path, demo_images)
    start = time.monotonic()
    codes, errs = _two_ranks(path, {'OOM_AT': '3', 'OOM_IN': phase, 'OOM_RANK': str(rank)})
    assert codes == [EXIT_OUT_OF_MEMORY] * 2, [e[-2000:] for e in errs]
    lines = [_one_line(e) for e in errs]
    assert lines[0] == lines[1], lines
    assert re.fullmatch(STEP_LINE.format(where=where, rank=rf' \(rank {rank} of 2\)'), lines[0]), lines[0]
    _intact(tmp_path, 2)
    assert time.monotonic() - start < 100


def test_out_of_memory_in_validation_on_one_of_two_ranks_is_agreed_in_the_evaluation(tmp_path, demo_images):
    path = _options(tmp_path, demo_images)
    codes, errs = _two_ranks(path, {'OOM_AT': '2', 'OOM_IN': 'evaluation', 'OOM_RANK': '1'})
    assert codes == [EXIT_OUT_OF_MEMORY] * 2, [e[-2000:] for e in errs]
    lines = [_one_line(e) for e in errs]
    assert lines[0] == lines[1], lines
    m = re.fullmatch(VALIDATION_LINE.format(rank=', rank 1 of 2'), lines[0])
    assert m and m['item'] == '0003', lines[0]  # rank 1 restores items 0001, 0003, ...: its second
    _intact(tmp_path, 4)


def test_main_test_out_of_memory_on_a_test_set_and_on_inputs_names_the_flags(tmp_path, tiny_run, demo_images):
    out = tmp_path / 'results'
    res = run_main('main_test', ['--opt', tiny_run.opt_path, '--out', str(out)],
                   faults={'OOM_AT': '3', 'OOM_IN': 'evaluation'})
    assert res.returncode == EXIT_OUT_OF_MEMORY, res.stderr[-3000:]
    line = _one_line(res.stderr)
    assert re.fullmatch(r'error: out of memory in main_test, on item 0002 of datasets\.test \(128x128 input\): '
                        r'network dncnn \(1,043 parameters\); peak memory .*; lower it with --tile 256 \(val\.tile, '
                        r'now whole images\), --amp bf16 \(val\.amp\)', line), line
    assert not (out / 'results.csv').exists()
    res = run_main('main_test', ['--opt', tiny_run.opt_path, '--input', os.path.join(demo_images, 'test'), '--out',
                                 str(tmp_path / 'mine')], faults={'OOM_AT': '2', 'OOM_IN': 'evaluation'})
    assert res.returncode == EXIT_OUT_OF_MEMORY, res.stderr[-3000:]
    line = _one_line(res.stderr)
    assert line.startswith(f'error: out of memory in main_test --input {os.path.join(demo_images, "test")}, on item '
                           f'0000.png (128x128 input): network dncnn'), line
    assert line.endswith('lower it with --tile 256 (val.tile, now whole images), --amp bf16 (val.amp)'), line


def test_the_keys_named_are_the_networks_own_and_the_runs_values():
    """Activation checkpointing is named where the network declares it (SwinIR-like: use_checkpoint; VRT, RVRT:
    checkpoint) and not already on; mixed precision where it is off; video models tile with size_patch_testing."""
    def opt(net_type, netG=None, model='plain', **train):
        return {'model': model, 'netG': {'net_type': net_type, **(netG or {})}, 'train': train_options(**train),
                'datasets': {'train': dataset_options('dncnn', dataroot_H='x', H_size=48, dataloader_batch_size=6)},
                'val': {'tile': 0, 'size_patch_testing': 128, 'amp': 'none'}}
    assert training_keys(opt('swinir', {'use_checkpoint': False})) == [
        'datasets.train.dataloader_batch_size (now 6; 3 with train.accumulate_steps 2 keeps the effective batch)',
        'datasets.train.H_size (now 48x48)', 'netG.use_checkpoint: true', 'train.amp: "bf16"']
    assert 'netG.use_checkpoint: true' not in training_keys(opt('swinir', {'use_checkpoint': True}))
    assert 'netG.checkpoint: "memory"' in training_keys(opt('vrt', {'checkpoint': None}))
    assert not any('checkpoint' in k or 'amp' in k for k in training_keys(opt('dncnn', amp='bf16')))
    assert evaluation_keys(opt('vrt', model='vrt'), flags=False) == [
        'val.size_patch_testing (now 128; e.g. 64)', 'val.amp: "bf16"']


def test_an_out_of_memory_error_is_told_apart_and_its_pass_read_from_its_traceback():
    assert MEANING[EXIT_OUT_OF_MEMORY] == 'out of memory'
    assert is_out_of_memory(torch.cuda.OutOfMemoryError('CUDA out of memory.'))
    assert is_out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate "
                                         "memory: you tried to allocate 1099511627776 bytes."))
    assert not is_out_of_memory(RuntimeError('mat1 and mat2 shapes cannot be multiplied'))

    class Failing(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, in_forward):
            if in_forward:
                raise torch.cuda.OutOfMemoryError('CUDA out of memory.')
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            raise torch.cuda.OutOfMemoryError('CUDA out of memory.')
    x = torch.ones(2, requires_grad=True)
    errors = []
    for in_forward in (False, True):
        try:
            Failing.apply(x, in_forward).sum().backward()
        except Exception as e:
            errors.append(e)
    assert pass_of(errors[0]) == 'backward'
    assert pass_of(errors[1]) == 'forward'  # raised inside a custom Function's forward: torch/autograd frames too
    with pytest.raises(OutOfMemory, match=r'^said: 2\.00 GiB$'):
        with on_out_of_memory(lambda e: OutOfMemory(f'said: {tried(e)}')):
            raise torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 ...')
    with pytest.raises(ValueError):
        with on_out_of_memory(lambda e: OutOfMemory('never')):
            raise ValueError('not memory')


FOLLOWER = '''
import sys, threading, time
import torch.distributed as dist
from utils.dist import departure
dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{port}', rank=0, world_size=1)
store = dist.group.WORLD.get_group_store()
departure.watch(poll_s=0.05)
store.set(departure.KEY, '[1, 6, "out of memory on rank 1"]')  # as rank 1 announces it (`depart`)
time.sleep(0.5)  # the watcher has said the line and acknowledged; it waits for the departed rank's "done"
threading.Timer(1.0, lambda: store.set(departure.DONE, '1')).start()
try:
    raise RuntimeError('Connection closed by peer')  # what the collective says once the departed rank has left
except Exception:
    departure.await_departure()
    raise
'''


def test_an_error_that_another_ranks_departure_causes_ends_with_its_line_and_code_not_a_traceback():
    """The departed rank leaves once every rank has acknowledged its line, closing the connections of the
    collective the others' main threads wait in: their error must wait for the watcher's exit, not print a
    traceback (seen under load: exit 1 and a gloo traceback on rank 0 instead of exit 6)."""
    res = subprocess.run([PY, '-c', FOLLOWER.format(port=free_port())], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=clean_env())
    assert (res.returncode, res.stderr.strip()) == (EXIT_OUT_OF_MEMORY, 'error: out of memory on rank 1'), res.stderr
