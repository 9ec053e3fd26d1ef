"""What a resumed run takes from the options file, end to end, and validation images on disk.

Runs are real `main_train.py` processes; evidence is their log lines and the files they leave.
"""
import os
import sys

import cv2
import torch

from tests.conftest import run, run_main, tiny_options, write_options
from utils.image import list_images

PY = sys.executable


def _opt(tmp_path, demo_images, **train):
    return write_options(str(tmp_path / 'o.json'), tiny_options(str(tmp_path / 'exp'), demo_images, **train))


def test_resume_with_an_edited_learning_rate_trains_at_the_new_rate_and_says_so(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=4, G_optimizer_lr=1e-3, G_scheduler_milestones=[6])
    first = run_main('main_train', ['--opt', path])
    assert first.returncode == 0, first.stderr[-3000:]
    assert 'lr:1.000e-03' in first.stdout

    res = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=8',
                                  '--set', 'train.G_optimizer_lr=1e-5'])
    assert res.returncode == 0, res.stderr[-3000:]
    assert 'resumed from' in res.stdout and 'at iteration 4' in res.stdout
    assert 'resume: train.G_optimizer_lr: checkpoint 0.001, options 1e-05; the options win' in res.stdout
    status = [ln for ln in res.stdout.splitlines() if 'iter:       6' in ln or 'iter:       8' in ln]
    assert len(status) == 2 and all('lr:5.000e-06' in ln for ln in status), status  # milestone 6 halves 1e-5



def test_a_state_file_from_before_the_batch_layout_was_recorded_resumes_at_the_next_epoch(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=4)
    assert run_main('main_train', ['--opt', path]).returncode == 0
    state_path = str(tmp_path / 'exp' / 'tiny' / 'models' / '4_state.pth')
    state = torch.load(state_path, weights_only=True)
    del state['batch_size'], state['accumulate_steps']  # as the first versions wrote it
    torch.save(state, state_path)
    res = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=6'])
    assert res.returncode == 0, res.stderr[-3000:]
    assert 'does not record the batch layout' in res.stdout and 'at iteration 4' in res.stdout
    assert 'Traceback' not in res.stderr

def test_a_resume_keeps_the_memory_format_its_checkpoint_trained_in(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=2, checkpoint_save=2)  # train.channels_last null: on, on a CPU
    first = run_main('main_train', ['--opt', path])
    assert first.returncode == 0, first.stderr[-3000:]
    assert 'memory format: channels-last (train.channels_last null: on for image networks on a CPU)' in first.stdout
    state_path = str(tmp_path / 'exp' / 'tiny' / 'models' / '2_state.pth')
    state = torch.load(state_path, weights_only=True)
    assert state['channels_last'] is True
    res = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=4', '--set', 'train.checkpoint_save=4'])
    assert res.returncode == 0, res.stderr[-3000:]
    assert 'resume: train.channels_last null: channels-last, the memory format the checkpoint trained in' in res.stdout
    assert torch.load(str(tmp_path / 'exp' / 'tiny' / 'models' / '4_state.pth'), weights_only=True)['channels_last']

    del state['channels_last']  # as runs wrote it before null meant channels-last on a CPU: they trained channels-first
    torch.save(state, state_path)
    models = tmp_path / 'exp' / 'tiny' / 'models'
    for name in os.listdir(models):
        if name.startswith('4_'):
            os.remove(str(models / name))
    res = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=4'])
    assert res.returncode == 0, res.stderr[-3000:]
    assert 'resume: train.channels_last null: channels-first, the memory format the checkpoint trained in' in res.stdout
    assert 'memory format: channels-first (train.channels_last)' in res.stdout


def test_a_cpu_resume_with_another_thread_count_says_its_bits_may_differ(tmp_path, demo_images):
    """The sums of a backward pass depend on the thread count (a run beside a busy process takes fewer): the state
    records it, and a resume that takes another count says the continuation is exact only up to float rounding."""
    from tests.conftest import clean_env
    path = _opt(tmp_path, demo_images, total_iter=2, checkpoint_save=2)
    assert run_main('main_train', ['--opt', path], env=clean_env(OMP_NUM_THREADS='1')).returncode == 0
    models = tmp_path / 'exp' / 'tiny' / 'models'
    assert torch.load(str(models / '2_state.pth'), weights_only=True)['cpu_threads'] == 1
    res = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=4', '--set', 'train.checkpoint_save=4'],
                   env=clean_env(OMP_NUM_THREADS='2'))
    assert res.returncode == 0, res.stderr[-3000:]
    assert ('resume: 2 torch threads, the checkpoint trained with 1: the run goes on as the uninterrupted one up to '
            'float rounding, not bit for bit (a backward pass sums per thread); OMP_NUM_THREADS=1 keeps the bits'
            in res.stdout)
    assert torch.load(str(models / '4_state.pth'), weights_only=True)['cpu_threads'] == 2
    res = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=6', '--set', 'train.checkpoint_save=6'],
                   env=clean_env(OMP_NUM_THREADS='2'))
    assert res.returncode == 0 and 'resume: 2 torch threads' not in res.stdout  # the same count: nothing to say
    from training.resume_plan import resumed_threads_note
    from utils.resume import ResumePoint
    point = ResumePoint('m/2_state.pth', {}, {'iter': 2, 'cpu_threads': 1})
    assert resumed_threads_note(point, None) == ''  # a GPU run: the thread count decides nothing
    assert resumed_threads_note(ResumePoint('m/2_state.pth', {}, {'iter': 2}), 2) == ''  # not recorded: unknown
    assert resumed_threads_note(None, 2) == ''


def test_save_img_writes_every_validation_image_once_from_rank_zero_under_two_processes(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=2, checkpoint_test=2, checkpoint_save=2)
    res = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'main_train.py',
               '--opt', path, '--set', 'val.save_img=true'])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    images = tmp_path / 'exp' / 'tiny' / 'images'
    tests = list_images(os.path.join(demo_images, 'test'))
    names = sorted(os.path.splitext(os.path.basename(p))[0] for p in tests)
    assert sorted(os.listdir(images)) == names
    for test_path in tests:
        name = os.path.splitext(os.path.basename(test_path))[0]
        assert os.listdir(images / name) == [f'{name}_2.png']  # KAIR's layout: images/<name>/<name>_<iter>.png
        saved = cv2.imread(str(images / name / f'{name}_2.png'))
        assert saved is not None and saved.shape == cv2.imread(test_path).shape


def test_without_save_img_no_validation_images_are_written(tmp_path, demo_images):
    path = _opt(tmp_path, demo_images, total_iter=2, checkpoint_test=2, checkpoint_save=2)
    res = run_main('main_train', ['--opt', path])
    assert res.returncode == 0, res.stderr[-3000:]
    assert not (tmp_path / 'exp' / 'tiny' / 'images').exists()
