"""scripts/convert_options.py: a BasicSR YAML file as this project's JSON option file, whose comments name each value's
YAML key and line; the JSON and the YAML train to identical weights; what training refuses is refused (one line,
exit 2, nothing written)."""
import os
import sys

import cv2
import numpy as np
import torch

from conftest import ROOT, run_main
from option_rules import read_options
from utils.options import read_option_file

sys.path.insert(0, os.path.join(ROOT, 'scripts'))
import convert_options  # noqa: E402

TINY = '''\
name: tiny_convert
model_type: SRModel
scale: 2
num_gpu: 1
manual_seed: 10
datasets:
  train:
    name: pairs
    type: PairedImageDataset
    dataroot_gt: {hr}
    dataroot_lq: {lr}
    io_backend:
      type: disk
    gt_size: 32
    use_hflip: true
    use_rot: true
    num_worker_per_gpu: 0
    batch_size_per_gpu: 2
network_g:
  type: MSRResNet
  num_feat: 8
  num_block: 1
  upscale: 2
train:
  ema_decay: 0.9
  optim_g:
    type: Adam
    lr: !!float 1e-3
    betas: [0.9, 0.99]
  scheduler:
    type: CosineAnnealingRestartLR
    periods: [2, 2]
    restart_weights: [1, 0.5]
    eta_min: !!float 1e-7
  total_iter: 3
  warmup_iter: -1
  pixel_opt:
    type: CharbonnierLoss
    loss_weight: 1.0
    reduction: mean
logger:
  print_freq: 1
  save_checkpoint_freq: 3
  use_tb_logger: false
'''


def _tiny_yaml(tmp_path) -> str:
    rng = np.random.default_rng(3)
    for kind in ('hr', 'lr'):
        os.makedirs(tmp_path / 'data' / kind, exist_ok=True)
    for i in range(3):
        hr = cv2.resize(rng.integers(0, 256, (5, 5, 3)).astype(np.uint8), (48, 48), interpolation=cv2.INTER_CUBIC)
        cv2.imwrite(str(tmp_path / 'data' / 'hr' / f'{i}.png'), hr)
        cv2.imwrite(str(tmp_path / 'data' / 'lr' / f'{i}.png'), cv2.resize(hr, (24, 24), interpolation=cv2.INTER_AREA))
    path = tmp_path / 'tiny.yml'
    path.write_text(TINY.format(hr=tmp_path / 'data' / 'hr', lr=tmp_path / 'data' / 'lr'))
    return str(path)


def test_the_json_reads_back_validates_and_names_each_values_source(tmp_path):
    yml = _tiny_yaml(tmp_path)
    out = str(tmp_path / 'tiny.json')
    assert convert_options.main([yml, '-o', out, '--set', 'train.total_iter=5']) == 0
    text = open(out).read()
    assert text.startswith(f'// Converted from {yml} (BasicSR YAML)') and 'read as BasicSR YAML' in text
    lines = TINY.splitlines()
    lr, total = (next(i for i, line in enumerate(lines, 1) if line.strip().startswith(k)) for k in ('lr:', 'total_iter'))
    assert f'"G_optimizer_lr": 0.001,  // train.optim_g.lr (line {lr})' in text
    assert f'"total_iter": 5,  // train.total_iter (line {total})' in text  # --set in the file's own key names
    data = read_option_file(out)
    assert data['train']['total_iter'] == 5 and data['netG']['net_type'] == 'msrresnet'
    opt = read_options(out)  # our JSON reader and validator
    assert opt['train']['G_scheduler_type'] == 'CosineAnnealingRestartLR' and opt['scale'] == 2


def test_the_json_and_the_yaml_train_to_identical_weights(tmp_path):
    yml = _tiny_yaml(tmp_path)
    out = str(tmp_path / 'tiny.json')
    assert convert_options.main([yml, '-o', out]) == 0
    weights = {}
    for name, opt in (('yaml', yml), ('json', out)):
        cwd = tmp_path / name  # the runs' folders: <cwd>/experiments/tiny_convert
        cwd.mkdir()
        res = run_main('main_train', ['--opt', opt], cwd=str(cwd))
        assert res.returncode == 0, res.stderr[-2000:]
        weights[name] = torch.load(cwd / 'experiments' / 'tiny_convert' / 'models' / '3_G.pth', map_location='cpu')
    assert weights['yaml'].keys() == weights['json'].keys()
    for key, tensor in weights['yaml'].items():
        assert torch.equal(tensor, weights['json'][key]), key
    assert not all(torch.equal(t, torch.zeros_like(t)) for t in weights['yaml'].values())


def test_what_training_refuses_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys):
    yml = _tiny_yaml(tmp_path)
    out = tmp_path / 'refused.json'
    assert convert_options.main([yml, '-o', str(out), '--set', 'network_g.type=ECBSR']) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'network_g.type: no network "ECBSR" here' in err, err
    assert not out.exists()
    assert convert_options.main([yml, '-o', str(out), '--set', 'train.optim_g.lr="fast"']) == 2
    assert 'train.optim_g.lr' in capsys.readouterr().err and not out.exists()  # refused by validation, in their name
