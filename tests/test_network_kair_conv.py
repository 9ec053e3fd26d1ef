"""KAIR's convolutional image networks (msrresnet0, dpsr, srmd, fdncnn, ffdnet, rrdb, imdn): behaviour.

The state_dicts of KAIR's option files are checked in test_kair_networks.py; here: output shapes per
scale and upsampling mode, FFDNet's noise map and odd sizes, user errors, strict round trips, and each
forward against a functional reference written from the paper over the state_dict names (so a KAIR
checkpoint computes what KAIR computes).
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models.networks.layers.kair import ResBlock, ShortcutBlock, conv, downsampler, sequential
from models.registry import build_network
from utils.errors import UserError

SR_NETS = ('msrresnet0', 'dpsr', 'rrdb', 'srmd', 'imdn')
ALL_NETS = SR_NETS + ('fdncnn', 'ffdnet')
TINY = {'msrresnet0': {'nc': 4, 'nb': 1}, 'dpsr': {'nc': 4, 'nb': 1}, 'rrdb': {'nc': 4, 'nb': 1, 'gc': 2},
        'srmd': {'nc': 4, 'nb': 3}, 'imdn': {'nc': 8, 'nb': 1}, 'fdncnn': {'nc': 4, 'nb': 3},
        'ffdnet': {'nc': 4, 'nb': 3}}


pytestmark = pytest.mark.usefixtures('one_thread')


def tiny(net_type: str, **kw) -> nn.Module:
    torch.manual_seed(0)
    return build_network({'net_type': net_type, **TINY[net_type], **kw}).eval()


def run(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    if net.__class__.__name__ == 'FFDNet':
        return net(x, torch.full((x.shape[0], 1, 1, 1), 0.1))
    return net(x)


def in_nc(net: nn.Module) -> int:
    first = net.model[0]
    return (first.in_channels - 1) // 4 if net.__class__.__name__ == 'FFDNet' else first.in_channels  # 4·c + map


@pytest.mark.parametrize('upsample_mode', ['upconv', 'pixelshuffle', 'convtranspose'])
@pytest.mark.parametrize('upscale', [2, 3, 4])
@pytest.mark.parametrize('net_type', SR_NETS)
def test_sr_networks_upscale_by_the_scale_with_each_upsample_mode(net_type, upscale, upsample_mode):
    net = tiny(net_type, upscale=upscale, upsample_mode=upsample_mode)
    x = torch.rand(2, in_nc(net), 5, 6)
    assert net(x).shape == (2, 3, 5 * upscale, 6 * upscale)


@pytest.mark.parametrize('upscale', [1, 8])
@pytest.mark.parametrize('net_type', ['msrresnet0', 'dpsr', 'rrdb'])
def test_srresnet_layouts_take_one_x2_step_per_factor_of_2(net_type, upscale):
    net = tiny(net_type, upscale=upscale)
    assert sum(isinstance(m, nn.Upsample) for m in net.model) == upscale.bit_length() - 1
    assert net(torch.rand(1, in_nc(net), 3, 4)).shape == (1, 3, 3 * upscale, 4 * upscale)


@pytest.mark.parametrize('net_type', ['fdncnn', 'ffdnet'])
@pytest.mark.parametrize('size', [(6, 8), (7, 9), (1, 1)])
def test_denoisers_keep_the_size(net_type, size):
    net = tiny(net_type, in_nc=4 if net_type == 'fdncnn' else 3, out_nc=3)
    x = torch.rand(2, in_nc(net), *size)
    assert run(net, x).shape == (2, 3, *size)


@pytest.mark.parametrize('net_type', SR_NETS)
def test_unsupported_upsample_mode_is_a_user_error(net_type):
    with pytest.raises(UserError, match=rf'^netG\.upsample_mode: "bicubic" is not supported for {net_type}; '
                                        r'use upconv, pixelshuffle or convtranspose$'):
        tiny(net_type, upsample_mode='bicubic')


@pytest.mark.parametrize('net_type, upscale', [('msrresnet0', 5), ('dpsr', 6), ('rrdb', 0), ('srmd', 8),
                                               ('srmd', 1), ('imdn', 8)])
def test_unsupported_upscale_is_a_user_error(net_type, upscale):
    with pytest.raises(UserError, match=rf'^netG\.upscale: {net_type} supports .*, got {upscale}$'):
        tiny(net_type, upscale=upscale)


@pytest.mark.parametrize('net_type', ALL_NETS)
@pytest.mark.parametrize('act_mode', ['BX', 'RB', '', 'CR'])
def test_unsupported_act_mode_is_a_user_error(net_type, act_mode):
    with pytest.raises(UserError, match=rf'^netG\.act_mode: "{act_mode}" is not supported for {net_type}'):
        tiny(net_type, act_mode=act_mode)


@pytest.mark.parametrize('net_type', ['msrresnet0', 'dpsr', 'rrdb'])
def test_a_norm_before_a_pixel_shuffle_is_refused(net_type):
    # KAIR sizes that norm for the channels before the shuffle: its network cannot run.
    with pytest.raises(UserError, match=r'^netG\.act_mode: "BR" with upsample_mode pixelshuffle'):
        tiny(net_type, act_mode='BR', upsample_mode='pixelshuffle')
    net = tiny(net_type, act_mode='BR', upsample_mode='upconv')
    assert net(torch.rand(2, in_nc(net), 4, 4)).shape == (2, 3, 16, 16)


@pytest.mark.parametrize('net_type', ['srmd', 'fdncnn', 'ffdnet'])
def test_plain_stacks_need_two_convs(net_type):
    with pytest.raises(UserError, match=rf'^netG\.nb: {net_type} needs at least 2 conv layers, got 1$'):
        tiny(net_type, nb=1)


@pytest.mark.parametrize('net_type', ALL_NETS)
def test_a_saved_state_dict_loads_strict_and_gives_the_same_output(net_type, tmp_path):
    net = tiny(net_type, act_mode='BR' if net_type in ('fdncnn', 'srmd') else 'R')
    x = torch.rand(1, in_nc(net), 6, 5)
    net.train()
    run(net, x)  # move the BatchNorm running statistics away from their initial values
    net.eval()
    torch.save(net.state_dict(), tmp_path / 'w.pth')
    torch.manual_seed(1)
    other = build_network({'net_type': net_type, **TINY[net_type],
                           'act_mode': 'BR' if net_type in ('fdncnn', 'srmd') else 'R'}).eval()
    assert not torch.equal(run(other, x), run(net, x))
    other.load_state_dict(torch.load(tmp_path / 'w.pth', weights_only=True), strict=True)
    assert torch.equal(run(other, x), run(net, x))


def test_kair_batchnorm_and_leaky_relu_settings():
    bns = [m for m in tiny('msrresnet0', act_mode='BL').modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns and all(m.momentum == 0.9 and m.eps == 1e-4 for m in bns)
    slopes = {m.negative_slope for m in tiny('rrdb', act_mode='L').modules() if isinstance(m, nn.LeakyReLU)}
    assert slopes == {0.2}
    imdn = tiny('imdn')
    assert {m.negative_slope for m in imdn.model[1].sub[0].modules() if isinstance(m, nn.LeakyReLU)} == {0.05}


def test_sequential_numbers_layers_as_kair_does():
    single = conv(3, 4, 'C')
    assert isinstance(single, nn.Conv2d)
    net = sequential(conv(3, 4, 'CR'), ShortcutBlock(sequential(ResBlock(4), conv(4, 4))), conv(4, 2, 'C2'))
    assert list(net.state_dict()) == ['0.weight', '0.bias', '2.sub.0.res.0.weight', '2.sub.0.res.0.bias',
                                      '2.sub.0.res.2.weight', '2.sub.0.res.2.bias', '2.sub.1.weight', '2.sub.1.bias',
                                      '3.weight', '3.bias']
    assert isinstance(net[4], nn.PixelShuffle)


@pytest.mark.parametrize('mode, conv_index', [('strideconv', 0), ('maxpool', 1), ('avgpool', 1)])
def test_downsamplers_halve_the_size(mode, conv_index):
    down = downsampler(mode, 4, 6, 2, 'R')
    assert down(torch.rand(1, 4, 8, 6)).shape == (1, 6, 4, 3)
    assert list(down.state_dict()) == [f'{conv_index}.weight', f'{conv_index}.bias']


def test_fdncnn_predicts_the_clean_image_without_residual_subtraction():
    net = tiny('fdncnn')
    tail = net.model[-1]
    nn.init.zeros_(tail.weight)
    nn.init.constant_(tail.bias, 0.25)
    assert torch.equal(net(torch.rand(1, 2, 5, 5)), torch.full((1, 1, 5, 5), 0.25))


def first_layer_input(net: nn.Module, *args: torch.Tensor) -> torch.Tensor:
    seen = []
    handle = net.model[0].register_forward_hook(lambda m, inp, out: seen.append(inp[0]))
    net(*args)
    handle.remove()
    return seen[0]


def test_ffdnet_concatenates_the_noise_level_map_to_the_sub_images():
    net = tiny('ffdnet', in_nc=3, out_nc=3)
    x = torch.rand(2, 3, 6, 8)
    sigma = torch.tensor([15.0, 50.0]).view(2, 1, 1, 1) / 255
    inp = first_layer_input(net, x, sigma)
    assert inp.shape == (2, 13, 3, 4)
    # sub-image (i, j) of channel c is at 4c + 2i + j (KAIR's pixel unshuffle order)
    assert torch.equal(inp[:, 4 * 1 + 2 * 1 + 0], x[:, 1, 1::2, 0::2])
    assert torch.equal(inp[:, -1], sigma.view(2, 1, 1).expand(2, 3, 4))
    one_for_all = first_layer_input(net, x, torch.full((1, 1, 1, 1), 0.1))
    assert torch.equal(one_for_all[:, -1], torch.full((2, 3, 4), 0.1))
    spatial = torch.rand(2, 1, 3, 4)
    assert torch.equal(first_layer_input(net, x, spatial)[:, -1:], spatial)


def test_ffdnet_pads_odd_sizes_by_replication_and_crops():
    net = tiny('ffdnet')
    x = torch.rand(1, 1, 7, 9)
    sigma = torch.full((1, 1, 1, 1), 0.2)
    padded = torch.cat([x, x[..., -1:, :]], -2)
    padded = torch.cat([padded, padded[..., -1:]], -1)
    assert torch.equal(net(x, sigma), net(padded, sigma)[..., :7, :9])


def _c(sd, name: str, t: torch.Tensor, padding: int = 1) -> torch.Tensor:
    bias = sd[name + '.bias'] if name + '.bias' in sd else None
    return F.conv2d(t, sd[name + '.weight'], bias, padding=padding)


def test_msrresnet0_forward_is_srresnet_without_bn_over_its_state_dict():
    net = tiny('msrresnet0', nb=2, upscale=4, upsample_mode='upconv')
    sd = net.state_dict()
    x = torch.rand(1, 3, 5, 4)
    head = _c(sd, 'model.0', x)
    t = head
    for i in range(2):
        t = t + _c(sd, f'model.1.sub.{i}.res.2', F.relu(_c(sd, f'model.1.sub.{i}.res.0', t)))
    h = head + _c(sd, 'model.1.sub.2', t)
    for i in (3, 6):
        h = F.relu(_c(sd, f'model.{i}', F.interpolate(h, scale_factor=2, mode='nearest')))
    expected = _c(sd, 'model.10', F.relu(_c(sd, 'model.8', h)))
    assert 'model.10.bias' not in sd
    torch.testing.assert_close(net(x), expected, rtol=0, atol=1e-6)


def test_rrdb_forward_is_esrgan_over_its_state_dict():
    net = tiny('rrdb', nb=1, upscale=2, upsample_mode='pixelshuffle', act_mode='L')
    sd = net.state_dict()
    x = torch.rand(1, 3, 4, 5)

    def rdb(t, p):
        feats = [t]
        for k in range(1, 5):
            feats.append(F.leaky_relu(_c(sd, f'{p}.conv{k}.0', torch.cat(feats, 1)), 0.2))
        return _c(sd, f'{p}.conv5', torch.cat(feats, 1)) * 0.2 + t

    head = _c(sd, 'model.0', x)
    t = head
    for k in (1, 2, 3):
        t = rdb(t, f'model.1.sub.0.RDB{k}')
    t = t * 0.2 + head
    h = head + _c(sd, 'model.1.sub.1', t)
    h = F.leaky_relu(F.pixel_shuffle(_c(sd, 'model.2', h), 2), 0.2)
    expected = _c(sd, 'model.7', F.leaky_relu(_c(sd, 'model.5', h), 0.2))
    torch.testing.assert_close(net(x), expected, rtol=0, atol=1e-6)


def test_imdn_forward_is_information_multi_distillation_over_its_state_dict():
    net = tiny('imdn', upscale=3)
    sd = net.state_dict()
    x = torch.rand(1, 3, 4, 5)
    head = _c(sd, 'model.0', x)
    p = 'model.1.sub.0'
    kept, rest = [], head
    for k in (1, 2, 3):
        out = F.leaky_relu(_c(sd, f'{p}.conv{k}.0', rest), 0.05)
        kept.append(out[:, :2])
        rest = out[:, 2:]
    kept.append(_c(sd, f'{p}.conv4', rest))
    t = head + _c(sd, f'{p}.conv1x1', torch.cat(kept, 1), padding=0)
    h = head + _c(sd, 'model.1.sub.1', t)
    expected = F.pixel_shuffle(_c(sd, 'model.2', h), 3)
    torch.testing.assert_close(net(x), expected, rtol=0, atol=1e-6)


def test_srmd_forward_is_a_plain_stack_with_a_shuffle_over_its_state_dict():
    net = tiny('srmd', in_nc=19, upscale=2)
    sd = net.state_dict()
    x = torch.rand(1, 19, 4, 5)
    h = x
    for i in (0, 2):
        h = F.relu(_c(sd, f'model.{i}', h))
    torch.testing.assert_close(net(x), F.pixel_shuffle(_c(sd, 'model.4', h), 2), rtol=0, atol=1e-6)


def test_ffdnet_forward_over_its_state_dict():
    net = tiny('ffdnet')
    sd = net.state_dict()
    x = torch.rand(1, 1, 6, 4)
    sub = torch.stack([x[:, 0, i::2, j::2] for i in (0, 1) for j in (0, 1)], 1)
    h = torch.cat([sub, torch.full((1, 1, 3, 2), 0.3)], 1)
    for i in (0, 2):
        h = F.relu(_c(sd, f'model.{i}', h))
    out = _c(sd, 'model.4', h)
    expected = torch.zeros(1, 1, 6, 4)
    for k, (i, j) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        expected[:, 0, i::2, j::2] = out[:, k]
    torch.testing.assert_close(net(x, torch.full((1, 1, 1, 1), 0.3)), expected, rtol=0, atol=1e-6)
