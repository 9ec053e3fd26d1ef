"""DnCNN / MSRResNet shapes and KAIR-compatible parameter names; weight initialisation."""
import pytest
import torch
from torch import nn

from models.networks.dncnn import DnCNN
from models.networks.layers.init import init_weights
from models.networks.msrresnet import MSRResNet
from models.registry import build_network
from utils.errors import UserError


def kair_dncnn_keys(nb: int, bn: bool) -> list:
    """The state_dict keys KAIR's DnCNN produces: flat Sequential, conv[/BN]/ReLU per block."""
    keys = ['model.0.weight', 'model.0.bias']
    idx = 2
    for _ in range(nb - 2):
        keys += [f'model.{idx}.weight', f'model.{idx}.bias']
        if bn:
            keys += [f'model.{idx + 1}.{n}' for n in
                     ('weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked')]
            idx += 3
        else:
            idx += 2
    keys += [f'model.{idx}.weight', f'model.{idx}.bias']
    return keys


def test_dncnn_state_dict_names_match_kair_for_default_br_network():
    keys = list(DnCNN(in_nc=1, out_nc=1, nc=64, nb=17, act_mode='BR').state_dict())
    assert keys == kair_dncnn_keys(17, bn=True)
    assert keys[-2:] == ['model.47.weight', 'model.47.bias']
    assert 'model.3.running_var' in keys


def test_dncnn_state_dict_names_match_kair_without_batchnorm():
    keys = list(DnCNN(nb=17, act_mode='R').state_dict())
    assert keys == kair_dncnn_keys(17, bn=False)
    assert keys[-1] == 'model.32.bias'


def test_dncnn_uses_kair_batchnorm_eps():
    bn = DnCNN(nb=3).model[3]
    assert isinstance(bn, nn.BatchNorm2d) and bn.eps == 1e-4


def test_dncnn_output_is_input_minus_predicted_noise():
    net = DnCNN(in_nc=3, out_nc=3, nc=8, nb=4).eval()
    x = torch.rand(2, 3, 12, 10)
    assert net(x).shape == x.shape
    tail = net.model[-1]
    nn.init.zeros_(tail.weight)
    nn.init.zeros_(tail.bias)
    assert torch.equal(net(x), x)
    nn.init.constant_(tail.bias, 0.25)
    assert torch.allclose(net(x), x - 0.25)


def test_dncnn_rejects_unknown_act_mode():
    with pytest.raises(UserError, match='netG.act_mode'):
        DnCNN(act_mode='BX')


def test_registry_builds_dncnn_from_netg_options():
    net = build_network({'net_type': 'dncnn', 'in_nc': 1, 'out_nc': 1, 'nc': 8, 'nb': 3, 'act_mode': 'R',
                         'init_type': 'orthogonal'})
    assert isinstance(net, DnCNN) and len(net.model) == 5


@pytest.mark.parametrize('scale', [2, 3, 4])
def test_msrresnet_upscales_by_factor(scale):
    net = MSRResNet(in_nc=3, out_nc=3, nc=8, nb=2, upscale=scale).eval()
    assert net(torch.rand(1, 3, 7, 5)).shape == (1, 3, 7 * scale, 5 * scale)


def test_msrresnet_state_dict_names_match_basicsr():
    keys = set(MSRResNet(nc=8, nb=2, upscale=4).state_dict())
    expected = {f'{m}.{p}' for m in ('conv_first', 'upconv1', 'upconv2', 'HRconv', 'conv_last',
                                     'recon_trunk.0.conv1', 'recon_trunk.0.conv2',
                                     'recon_trunk.1.conv1', 'recon_trunk.1.conv2') for p in ('weight', 'bias')}
    assert keys == expected
    assert 'upconv2.weight' not in MSRResNet(nc=8, nb=2, upscale=2).state_dict()
    assert MSRResNet(nc=8, nb=1, upscale=3).upconv1.weight.shape[0] == 8 * 9


def test_msrresnet_adds_bilinear_upsampled_input():
    net = MSRResNet(nc=8, nb=1, upscale=2).eval()
    nn.init.zeros_(net.conv_last.weight)
    nn.init.zeros_(net.conv_last.bias)
    x = torch.rand(1, 3, 6, 6)
    expected = nn.functional.interpolate(x, scale_factor=2, mode='bilinear', align_corners=False)
    assert torch.allclose(net(x), expected)


def test_msrresnet_rejects_unsupported_upscale():
    with pytest.raises(UserError, match='netG.upscale'):
        MSRResNet(upscale=8)


@pytest.mark.parametrize('init_type', ['orthogonal', 'normal', 'uniform', 'xavier_normal', 'xavier_uniform',
                                       'kaiming_normal', 'kaiming_uniform'])
def test_init_types_reinitialise_conv_weights_and_zero_biases(init_type):
    torch.manual_seed(0)
    net = DnCNN(nc=8, nb=3)
    nn.init.constant_(net.model[0].bias, 3.0)
    before = net.model[0].weight.clone()
    init_weights(net, init_type, 'uniform', gain=1.0)
    assert not torch.equal(net.model[0].weight, before)
    assert torch.count_nonzero(net.model[0].bias) == 0


def test_normal_init_follows_kair_range_and_gain():
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 16, 3)
    init_weights(conv, 'normal', gain=0.5)
    assert conv.weight.abs().max() <= 0.5
    assert 0.03 < conv.weight.std() < 0.07  # N(0, 0.1) scaled by 0.5


def test_orthogonal_init_gives_orthonormal_rows():
    conv = nn.Conv2d(4, 8, 3)
    init_weights(conv, 'orthogonal')
    w = conv.weight.reshape(8, -1)
    assert torch.allclose(w @ w.t(), torch.eye(8), atol=1e-5)


def test_batchnorm_init_types():
    net = DnCNN(nc=8, nb=3)
    init_weights(net, 'orthogonal', 'constant')
    bn = net.model[3]
    assert torch.equal(bn.weight, torch.ones(8)) and torch.equal(bn.bias, torch.zeros(8))
    init_weights(net, 'orthogonal', 'uniform')
    assert bn.weight.min() >= 0.1 and bn.weight.max() <= 1.0 and not torch.equal(bn.weight, torch.ones(8))


def test_default_init_leaves_weights_untouched():
    net = DnCNN(nc=8, nb=3)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    init_weights(net, 'default')
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


def test_unknown_init_type_names_the_option_with_suggestion():
    with pytest.raises(UserError, match=r'netG.init_type: unknown init "orthogonl" \(did you mean "orthogonal"\?\)'):
        init_weights(DnCNN(nc=8, nb=3), 'orthogonl')
    with pytest.raises(UserError, match='netG.init_bn_type'):
        init_weights(DnCNN(nc=8, nb=3), 'default', 'constnt')
