"""The tiny recipe files (options/recipes/) train under torchrun with 2 processes and their validation PSNR rises:
F-SAM's sharpness-aware steps, and distillation from a teacher the test trains first with the demo's option file
(then named with --set train.teacher). End-to-end runs: marked slow (CI, or RUN_SLOW=1)."""
import glob
import json
import os

import pytest

from conftest import ROOT, run_main, train_two_processes

RECIPES = sorted(glob.glob(os.path.join(ROOT, 'options', 'recipes', '*_tiny.json')))
DEMO = os.path.join(ROOT, 'options', 'train_dncnn_demo.json')


def test_there_is_a_tiny_recipe_for_distillation_and_for_sharpness_aware_steps():
    assert {'train_distill_dncnn_tiny.json', 'train_fsam_dncnn_tiny.json'} <= {os.path.basename(p) for p in RECIPES}


# The demo's option file made a teacher that learns in seconds (the recipe names the demo's full run, whose 10-layer
# DnCNN needs its 1000 iterations): 4 layers of 16 channels, a constant lr of 2e-3, 40 iterations on small patches.
TEACHER = {'net_type': 'dncnn', 'in_nc': 3, 'out_nc': 3, 'nc': 16, 'nb': 4, 'act_mode': 'R'}


def _demo_teacher(root: str) -> str:
    """The demo run as TEACHER: its weights (the recipe then names them, its netG and a feature of it with --set)."""
    sets = [f'path.root={root}', 'train.total_iter=40', 'train.checkpoint_save=40', 'train.checkpoint_test=40',
            f'netG.nc={TEACHER["nc"]}', f'netG.nb={TEACHER["nb"]}', 'train.G_optimizer_lr=0.002', 'train.E_decay=0',
            'train.G_scheduler_milestones=[]', 'datasets.train.H_size=24', 'datasets.train.dataloader_batch_size=4',
            'logging.use_tensorboard=false', 'logging.curves=false']
    res = run_main('main_train', ['--opt', DEMO, *[a for s in sets for a in ('--set', s)]])
    assert res.returncode == 0, res.stderr[-2000:]
    return os.path.join(root, 'dncnn_demo_color_sigma25', 'models', '40_G.pth')


@pytest.mark.slow
@pytest.mark.parametrize('path', RECIPES, ids=[os.path.basename(p)[len('train_'):-len('_tiny.json')] for p in RECIPES])
def test_a_tiny_recipe_trains_with_two_processes_and_its_psnr_rises(tmp_path, path):
    extra = []
    if 'distill' in os.path.basename(path):
        extra += [f'train.teacher.weights={_demo_teacher(str(tmp_path / "teacher"))}',
                  f'train.teacher.netG={json.dumps(TEACHER)}', 'train.T_features={"model.9": "model.5"}']
    res, psnr = train_two_processes(path, str(tmp_path / 'exp'), 40, extra)
    assert len(psnr) == 2 and psnr[-1] > psnr[0], res.stdout[-3000:]
    assert ('distilled from' if extra else 'sharpness-aware steps fsam') in res.stdout
