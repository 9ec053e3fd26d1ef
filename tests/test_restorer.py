"""Inference apart from training: the network main_test builds, and validation through the same restorer."""
import pytest
import torch
from torch import nn

from main_train import option_rules, read_options
from models.model_plain import ModelPlain
from models.restorer import ImageRestorer, build_eval_network
from tests.conftest import tiny_options, write_options
from utils.errors import UserError
from utils.options import validate

CPU = torch.device('cpu')


def _opt(tmp_path, **train):
    return read_options(write_options(str(tmp_path / 'o.json'),
                                      tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'), **train)))


def _batches(n=2, size=24):
    out = []
    for i in range(n):
        g = torch.Generator().manual_seed(i)
        H = torch.rand(2, 3, size, size, generator=g)
        out.append({'L': (H + 0.1 * torch.randn(H.shape, generator=g)).clamp(0, 1), 'H': H,
                    'L_path': [f'/x/{i}_{j}.png' for j in range(2)]})
    return out


def _trained(opt, steps=2):
    torch.manual_seed(0)
    model = ModelPlain(opt, CPU)
    for step, batch in enumerate(_batches(steps), 1):
        model.step(step, model.backward([batch]))
    return model


def _scores(res):
    return {k: v for k, v in res.items() if k not in ('images', 'encoded')}


def test_validation_uses_the_ema_network_when_there_is_one_else_netg(tmp_path):
    with_ema = ModelPlain(_opt(tmp_path, E_decay=0.9), CPU)
    assert type(with_ema.restorer) is ModelPlain.restorer_class is ImageRestorer
    assert with_ema.restorer.net is with_ema.ema.module
    without = ModelPlain(_opt(tmp_path, E_decay=0.0), CPU)
    assert without.restorer.net is without.net_g


@pytest.mark.parametrize('kind', ['E', 'G'])
def test_the_saved_weights_restored_for_testing_score_exactly_as_validation_did(tmp_path, kind):
    opt = _opt(tmp_path, E_decay=0.9)
    model = _trained(opt)
    path = str(tmp_path / f'2_{kind}.pth')
    torch.save(model.state_files()[kind], path)
    net = build_eval_network(opt['netG'], path, CPU, '--weights')
    assert not net.training and not any(m.training for m in net.modules())
    restorer = ModelPlain.restorer_class.from_options(net, opt, CPU)
    expected = model.validate(_batches()) if kind == 'E' else ImageRestorer(model.net_g, CPU, 0).validate(_batches())
    assert _scores(restorer.validate(_batches())) == _scores(expected)
    assert model.net_g.training  # validation leaves the training network in train mode


def test_weights_of_another_network_are_a_user_error(tmp_path):
    opt = _opt(tmp_path)
    path = str(tmp_path / 'other_G.pth')
    torch.save({'conv.weight': torch.zeros(1)}, path)
    with pytest.raises(UserError, match=r'--weights: .*other_G.pth does not fit netG'):
        build_eval_network(opt['netG'], path, CPU, '--weights')


@pytest.mark.parametrize('scale, given, border, round_y', [(1, {}, 0, False), (4, {}, 4, True), (2, {}, 2, True),
                                                          (1, {'metric_border': 3, 'metric_round_y': True}, 3, True),
                                                          (4, {'metric_border': 0, 'metric_round_y': False}, 0, False)])
def test_scoring_follows_kairs_test_scripts_per_task_unless_the_test_set_says_otherwise(tmp_path, scale, given,
                                                                                         border, round_y):
    raw = tiny_options(str(tmp_path), str(tmp_path / 'data'), E_decay=0.0)
    raw['scale'] = scale
    if scale > 1:  # super-resolution: a test set that works at the scale
        raw['datasets']['test'] = {'dataset_type': 'sr', 'dataroot_H': raw['datasets']['test']['dataroot_H']}
    raw['datasets']['test'].update(given)
    restorer = ImageRestorer.from_options(nn.Identity(), validate(raw, option_rules()), CPU)
    assert (restorer.metric_border, restorer.round_y) == (border, round_y)
