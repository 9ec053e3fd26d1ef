"""What rank 0 reports to TensorBoard and W&B when the outside world does not cooperate."""
import glob
import os
import sys

from tests.conftest import clean_env, free_port, run, tiny_options, write_options

PY = sys.executable


def test_online_wandb_without_a_reachable_server_falls_back_to_offline_with_one_warning(tmp_path, demo_images):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=2, checkpoint_test=2, checkpoint_save=2)
    opt['logging']['use_wandb'] = True
    path = write_options(str(tmp_path / 'o.json'), opt)
    env = clean_env(WANDB_MODE='online', WANDB_API_KEY='x' * 40, WANDB_INIT_TIMEOUT='3',
                    WANDB_BASE_URL=f'http://127.0.0.1:{free_port()}')  # nothing listens there
    res = run([PY, 'main_train.py', '--opt', path], env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    warnings = [ln for ln in res.stdout.splitlines() if 'W&B: online init failed' in ln]
    assert len(warnings) == 1 and 'logging offline instead' in warnings[0], res.stdout[-3000:]
    assert glob.glob(os.path.join(str(tmp_path), 'exp', 'tiny', 'wandb', 'offline-run-*'))
