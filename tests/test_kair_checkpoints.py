"""A KAIR-format checkpoint ({name: tensor}, or BasicSR's `params`/`params_ema`) of a zoo network loads
strictly into the same net_type, and main_test.py restores exactly what the network computes."""
import os

import numpy as np
import pytest
import torch

from conftest import ROOT, run_main
from data.registry import build_dataset
from option_rules import read_options
from models.registry import build_network
from utils.image import imread_uint, tensor2uint

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.mark.parametrize('layout', ['bare', 'params', 'params_ema'])
@pytest.mark.parametrize('config, inputs', [('train_msrresnet0_tiny', ('L',)), ('train_swinir_sr_tiny', ('L',)),
                                            ('train_ffdnet_tiny', ('L', 'C'))])
def test_main_test_reproduces_the_outputs_of_a_kair_checkpoint(tmp_path, demo_images, config, inputs, layout):
    path = os.path.join(ROOT, 'options', 'zoo', f'{config}.json')
    sets = [f'path.root={tmp_path / "exp"}', f'datasets.test.dataroot_H={demo_images}/test',
            'datasets.test.generate_demo=null']
    opt = read_options(path, sets)
    torch.manual_seed(0)
    net = build_network(opt['netG']).eval()
    state = net.state_dict()
    weights = tmp_path / 'kair.pth'
    torch.save(state if layout == 'bare' else {layout: state}, weights)

    res = run_main('main_test', ['--opt', path, '--weights', str(weights), '--out', str(tmp_path / 'out')]
                   + [a for s in sets for a in ('--set', s)])
    assert res.returncode == 0, res.stderr[-2000:]
    dataset = build_dataset(opt['datasets']['test'])
    for index in (0, 5):
        item = dataset[index]
        with torch.no_grad():
            expected = tensor2uint(net(*(item[k][None] for k in inputs))[0])
        name = os.path.splitext(os.path.basename(item['H_path']))[0]
        assert np.array_equal(imread_uint(str(tmp_path / 'out' / f'{name}.png')), expected)
