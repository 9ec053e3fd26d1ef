"""Real 2-process DDP on CPU (gloo): launched by torchrun and by hand-set environment variables.

The ranks' own reports are the evidence: rank 0 logs a digest of every rank's weights, the shard
worker gathers the indices each rank saw, and a rank that writes anything it should not would
write it into its own, separate output root.
"""
import glob
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, clean_env, free_port, run, tiny_options, write_options

PY = sys.executable


def _outputs(task_dir: str):
    return {
        'logs': glob.glob(os.path.join(task_dir, 'train_*.log')),
        'tb': glob.glob(os.path.join(task_dir, 'tb_logger', 'events.out.tfevents.*')),
        'options': glob.glob(os.path.join(task_dir, 'options', '*.json')),
        'wandb': glob.glob(os.path.join(task_dir, 'wandb', 'offline-run-*')),
        'models': sorted(os.listdir(os.path.join(task_dir, 'models'))) if os.path.isdir(
            os.path.join(task_dir, 'models')) else [],
    }


def _assert_trained_together(log: str, world_size: int = 2):
    assert f'world_size={world_size}' in log, log
    assert f'parameters identical on all {world_size} rank(s)' in log, log
    assert 'effective batch 8' in log  # 4 per process x 2 processes


def test_torchrun_two_processes_train_with_identical_weights(tmp_path, demo_images):
    opt = write_options(str(tmp_path / 'o.json'), tiny_options(str(tmp_path / 'exp'), demo_images))
    res = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
               'main_train.py', '--opt', opt], timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    _assert_trained_together(res.stdout)
    out = _outputs(str(tmp_path / 'exp' / 'tiny'))
    assert len(out['logs']) == 1 and len(out['tb']) == 1 and len(out['options']) == 1
    assert out['models'] == ['4_E.pth', '4_G.pth', '4_state.pth', '8_E.pth', '8_G.pth', '8_state.pth',
                             'best', 'best_E.pth', 'best_G.pth', 'latest']


def test_hand_set_env_two_processes_only_rank0_writes_anything(tmp_path, demo_images):
    """No launcher: the platform-style env vars alone. Rank 1 gets its own output root that must stay empty."""
    opt = tiny_options(str(tmp_path / 'exp'), demo_images)
    opt['logging']['use_wandb'] = True
    path = write_options(str(tmp_path / 'o.json'), opt)
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = clean_env(WORLD_SIZE='2', RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR='127.0.0.1',
                        MASTER_PORT=port)
        root = str(tmp_path / ('exp' if rank == 0 else 'rank1_root'))
        procs.append(subprocess.Popen([PY, 'main_train.py', '--opt', path, '--set', f'path.root={root}'],
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, o[-3000:] + e[-3000:]
    _assert_trained_together(outs[0][0])
    assert 'threads=1' in outs[0][0]  # one intra-op thread per rank when OMP_NUM_THREADS is unset
    out = _outputs(str(tmp_path / 'exp' / 'tiny'))
    assert len(out['logs']) == 1 and len(out['tb']) == 1 and len(out['wandb']) == 1
    assert '8_G.pth' in out['models']
    assert not (tmp_path / 'rank1_root').exists(), os.listdir(tmp_path / 'rank1_root')
    assert outs[1][0].strip() == ''  # rank 1 prints nothing on stdout


def test_shards_are_disjoint_within_an_epoch_and_change_between_epochs(tmp_path):
    res = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
               os.path.join('tests', 'ddp_shards_worker.py')], timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith('SHARDS '))
    shards = json.loads(line[len('SHARDS '):])
    for epoch in ('epoch0', 'epoch1'):
        a, b = set(shards['0'][epoch]), set(shards['1'][epoch])
        assert len(shards['0'][epoch]) == len(shards['1'][epoch]) == 10  # 22 samples, 11 each, whole batches of 2
        assert not a & b
    assert shards['0']['epoch0'] != shards['0']['epoch1']


def test_tensorboard_scalars_can_be_read_back(tiny_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(os.path.join(tiny_run.folder, 'tb_logger'))
    acc.Reload()
    tags = acc.Tags()['scalars']
    for tag in ('train/G_loss', 'train/lr', 'val/psnr', 'val/ssim_y', 'perf/iter_time', 'perf/samples_per_sec'):
        assert tag in tags, tags
    assert [e.step for e in acc.Scalars('train/G_loss')] == [2, 4, 6, 8]
    assert [e.step for e in acc.Scalars('val/psnr')] == [4, 8]
    assert acc.Tags()['images'], 'validation images are logged'
    lrs = [e.value for e in acc.Scalars('train/lr')]
    assert lrs[0] == pytest.approx(1e-3) and lrs[-1] == pytest.approx(5e-4)  # milestone 6, gamma 0.5
