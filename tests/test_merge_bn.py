"""KAIR's `merge_bn`: BatchNorm folded into the convolutions at `merge_bn_startpoint`, then training goes on."""
import sys

import pytest
import torch

from conftest import clean_env, run, run_main, tiny_options, write_options
from models.merge_bn import count_foldable, fold_batchnorm
from models.networks.dncnn import DnCNN
from tests.test_resume import _assert_same_run_state, _models

PY = sys.executable


def _trained_bn_dncnn():
    torch.manual_seed(0)
    net = DnCNN(in_nc=3, out_nc=3, nc=8, nb=4, act_mode='BR')
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):  # statistics and affine terms far from their start
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.2, 3.0)
                m.weight.uniform_(0.5, 2.0)
                m.bias.uniform_(-0.3, 0.3)
    return net.eval()


def test_folding_keeps_the_eval_output_and_gives_the_state_dict_of_the_network_without_batchnorm():
    net = _trained_bn_dncnn()
    x = torch.rand(2, 3, 24, 24)
    before = net(x)
    assert count_foldable(net) == 2 and fold_batchnorm(net) == 2
    assert torch.allclose(net(x), before, atol=1e-5)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())
    plain = DnCNN(in_nc=3, out_nc=3, nc=8, nb=4, act_mode='R')
    assert [(k, v.shape) for k, v in net.state_dict().items()] == [(k, v.shape) for k, v in plain.state_dict().items()]
    plain.load_state_dict(net.state_dict())  # KAIR's published DnCNN format
    assert torch.allclose(plain.eval()(x), before, atol=1e-5)


def _options(tmp_path, demo_images, task, **train):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, **train)
    opt.update(task=task, merge_bn=True, merge_bn_startpoint=3)
    opt['logging']['use_tensorboard'] = False
    return write_options(str(tmp_path / f'{task}.json'), opt)


@pytest.mark.slow  # ~15-25 s; runs in CI (CI=true) and with RUN_SLOW=1
def test_training_folds_batchnorm_after_the_startpoint_and_resumes_bit_exactly(tmp_path, demo_images):
    train = dict(total_iter=8, checkpoint_save=4, checkpoint_test=4, checkpoint_print=2)
    straight = run_main('main_train', ['--opt', _options(tmp_path, demo_images, 'straight', **train)])
    assert straight.returncode == 0, straight.stderr[-2000:]
    assert 'iteration 3: merge_bn folded BatchNorm into the convolutions' in straight.stdout
    models = _models(tmp_path, 'straight')
    weights = torch.load(models / '8_G.pth', weights_only=True)
    assert not any('running_mean' in k for k in weights)
    DnCNN(in_nc=3, out_nc=3, nc=8, nb=3, act_mode='R').load_state_dict(weights)  # strict

    resumed = _options(tmp_path, demo_images, 'resumed', **train)
    assert run_main('main_train', ['--opt', resumed, '--set', 'train.total_iter=4']).returncode == 0
    second = run_main('main_train', ['--opt', resumed])
    assert second.returncode == 0, second.stderr[-2000:]
    assert 'resumed from' in second.stdout and 'merge_bn folded' not in second.stdout.split('resumed from')[1]
    _assert_same_run_state(models, _models(tmp_path, 'resumed'), 8)

    test = run_main('main_test', ['--opt', resumed, '--no-images', '--out', str(tmp_path / 'results')])
    assert test.returncode == 0, test.stderr[-2000:]


def test_two_processes_keep_identical_weights_across_the_fold(tmp_path, demo_images):
    path = _options(tmp_path, demo_images, 'ddp', total_iter=6, checkpoint_save=6, checkpoint_test=6)
    res = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'main_train.py',
               '--opt', path], env=clean_env(OMP_NUM_THREADS='1'))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert 'merge_bn folded' in res.stdout and 'parameters identical on all 2 rank(s)' in res.stdout


@pytest.mark.parametrize('change, message', [
    ({'netG': {'net_type': 'dncnn', 'in_nc': 3, 'out_nc': 3, 'nc': 8, 'nb': 3, 'act_mode': 'R'}},
     'merge_bn: netG (dncnn) has no BatchNorm after a convolution to fold'),
])
def test_merge_bn_on_a_network_without_batchnorm_is_a_one_line_error(tmp_path, demo_images, change, message):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images)
    opt.update(merge_bn=True, **change)
    res = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o.json'), opt)])
    assert res.returncode == 2 and message in res.stderr and res.stderr.count('\n') == 1, res.stderr
    assert not (tmp_path / 'exp').exists()


def test_a_folded_checkpoint_is_not_resumed_with_merge_bn_turned_off(tmp_path, demo_images):
    path = _options(tmp_path, demo_images, 'folded', total_iter=4, checkpoint_save=4, checkpoint_test=4)
    assert run_main('main_train', ['--opt', path]).returncode == 0
    res = run_main('main_train', ['--opt', path, '--set', 'merge_bn=false', '--set', 'train.total_iter=6'])
    assert res.returncode == 2 and 'keep "merge_bn": true to resume it' in res.stderr, res.stderr[-2000:]


def test_with_merge_bn_testing_loads_weights_saved_before_or_after_the_fold(tmp_path):
    from models.network_loading import build_eval_network
    netG = {'net_type': 'dncnn', 'in_nc': 3, 'out_nc': 3, 'nc': 8, 'nb': 4, 'act_mode': 'BR'}
    net = _trained_bn_dncnn()
    x = torch.rand(1, 3, 24, 24)
    expected = net(x)
    torch.save(net.state_dict(), tmp_path / 'unfolded.pth')
    fold_batchnorm(net)
    torch.save(net.state_dict(), tmp_path / 'folded.pth')
    for name, has_bn in (('unfolded.pth', True), ('folded.pth', False)):
        loaded = build_eval_network(netG, str(tmp_path / name), torch.device('cpu'), '--weights', merge_bn=True)
        assert any(isinstance(m, torch.nn.BatchNorm2d) for m in loaded.modules()) == has_bn
        assert torch.allclose(loaded(x), expected, atol=1e-5)


def test_a_pretrained_netG_saved_after_the_fold_starts_training_folded(tmp_path, demo_images):
    net = DnCNN(in_nc=3, out_nc=3, nc=8, nb=3, act_mode='BR')
    fold_batchnorm(net)
    torch.save(net.state_dict(), tmp_path / 'folded_G.pth')
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=2, checkpoint_save=2, checkpoint_test=2)
    opt.update(merge_bn=True, merge_bn_startpoint=1)
    opt['path']['pretrained_netG'] = str(tmp_path / 'folded_G.pth')
    res = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o.json'), opt)])
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'netG is built folded' in res.stdout and 'folded BatchNorm into the convolutions' not in res.stdout
    weights = torch.load(tmp_path / 'exp' / 'tiny' / 'models' / '2_G.pth', weights_only=True)
    assert set(weights) == set(net.state_dict())
