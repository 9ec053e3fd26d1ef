"""KAIR's GAN discriminators (`netD.net_type`): KAIR's state_dicts from KAIR's options, and behaviour.

The listings under tests/data/kair/*.netD.tsv are what KAIR's `define_D` builds for its option files
(format: that folder's README.md, with `netD options:` in the header). KAIR's option files write the
same netD keys for every discriminator and its builder passes each one only those it uses, so a
network is built here from the keys in its constructor's signature and the rest must be among them.
"""
import glob
import inspect
import json
import os
import re
from typing import Any, Dict, List, Tuple

import pytest
import torch
from torch import nn

from models.registry import NETWORKS, build_network
from utils.errors import UserError

TSV_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'kair')
TSV_FILES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(TSV_DIR, '*.netD.tsv')))
KAIR_NETD_KEYS = ('in_nc', 'base_nc', 'act_mode', 'n_layers', 'norm_type')

VGG_SIZES = {'discriminator_vgg_96': 96, 'discriminator_vgg_128': 128, 'discriminator_vgg_192': 192,
             'discriminator_vgg_128_SN': 128}
SN_NETS = ('discriminator_vgg_128_SN', 'discriminator_patchgan', 'discriminator_unet')
# Small widths where the network takes them; vgg_128_SN takes no options (KAIR's builder passes none).
SMALL = {'discriminator_vgg_96': {'base_nc': 8}, 'discriminator_vgg_128': {'base_nc': 8},
         'discriminator_vgg_192': {'base_nc': 8}, 'discriminator_vgg_128_SN': {},
         'discriminator_patchgan': {'base_nc': 8}, 'discriminator_unet': {'base_nc': 8}}

pytestmark = pytest.mark.usefixtures('one_thread')


def read_listing(name: str) -> Tuple[int, int, Dict[str, Any], List[Tuple[str, ...]]]:
    """(entries, parameters, netD options, [(name, shape, dtype)])."""
    with open(os.path.join(TSV_DIR, name)) as f:
        header, *lines = f.read().splitlines()
    m = re.search(r'(\d+) entries, (\d+) parameters, scale \d+, n_channels \w+, netD options: (\{.*\})$', header)
    assert m, header
    return int(m.group(1)), int(m.group(2)), json.loads(m.group(3)), [tuple(ln.split('\t')) for ln in lines]


def constructor_keys(net_type: str) -> set:
    params = inspect.signature(NETWORKS.get(net_type, 'netD.net_type').__init__).parameters
    return {k for k, p in params.items() if k != 'self' and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def listing(net: nn.Module) -> List[Tuple[str, str, str]]:
    return [(k, str(tuple(v.shape)), str(v.dtype).replace('torch.', '')) for k, v in net.state_dict().items()]


def small(net_type: str, **kw: Any) -> nn.Module:
    torch.manual_seed(0)
    return build_network({'net_type': net_type, **SMALL[net_type], **kw}).train()


def test_the_netd_listings_are_in_the_repository():
    assert TSV_FILES == ['swinir__train_swinir_sr_realworld_x4_gan.netD.tsv', 'train_bsrgan_x4_gan.netD.tsv',
                         'train_msrresnet_gan.netD.tsv']


@pytest.mark.parametrize('name', TSV_FILES)
def test_kair_netd_options_build_exactly_kairs_state_dict(name):
    n_entries, n_params, netD, entries = read_listing(name)
    accepted = constructor_keys(netD['net_type'])
    kwargs = {k: v for k, v in netD.items() if k in accepted}
    with torch.device('meta'):
        net = build_network({'net_type': netD['net_type'], **kwargs})
    mine = listing(net)
    missing = sorted({e[0] for e in entries} - {m[0] for m in mine})
    unexpected = sorted({m[0] for m in mine} - {e[0] for e in entries})
    assert not missing and not unexpected, (missing[:5], unexpected[:5])
    assert mine == entries
    assert len(mine) == n_entries and sum(p.numel() for p in net.parameters()) == n_params
    ignored = set(netD) - {'net_type'} - accepted
    assert ignored <= set(KAIR_NETD_KEYS), ignored


@pytest.mark.parametrize('net_type', sorted(SMALL))
def test_every_constructor_takes_only_kairs_netd_keys_with_kairs_defaults(net_type):
    params = inspect.signature(NETWORKS.get(net_type, 'netD.net_type').__init__).parameters
    defaults = {k: p.default for k, p in params.items() if k != 'self'}
    kair = {'in_nc': 3, 'base_nc': 64, 'act_mode': 'BL', 'n_layers': 3, 'norm_type': 'spectral'}
    assert defaults == {k: kair[k] for k in defaults}
    expected = {'discriminator_vgg_128_SN': set(), 'discriminator_unet': {'in_nc', 'base_nc'},
                'discriminator_patchgan': {'in_nc', 'base_nc', 'n_layers', 'norm_type'}}
    assert set(defaults) == expected.get(net_type, {'in_nc', 'base_nc', 'act_mode'})


@pytest.mark.parametrize('net_type', sorted(VGG_SIZES))
def test_a_vgg_discriminator_gives_one_logit_per_image_of_its_size_and_backpropagates(net_type):
    net = small(net_type)
    size = VGG_SIZES[net_type]
    x = torch.randn(2, 3, size, size, requires_grad=True)
    out = net(x)
    assert out.shape == (2, 1)
    out.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert all(p.grad is not None for p in net.parameters())


@pytest.mark.parametrize('net_type', sorted(VGG_SIZES))
@pytest.mark.parametrize('shape', [(64, 64), (256, 256), (96, 128)])
def test_a_vgg_discriminator_refuses_another_input_size_in_one_line_naming_its_size(net_type, shape):
    net = small(net_type)
    size = VGG_SIZES[net_type]
    if shape == (size, size):
        shape = (size + 32, size + 32)
    with pytest.raises(UserError) as e:
        net(torch.randn(1, 3, *shape))
    message = str(e.value)
    assert '\n' not in message and message.startswith(f'{net_type} needs {size}x{size} inputs')
    assert f'got {shape[0]}x{shape[1]}' in message


def patch_map_side(side: int, n_layers: int) -> int:
    """4x4 kernels, padding 2: each strided conv gives floor(side/2)+1, each of the two stride-1 convs side+1."""
    for _ in range(n_layers):
        side = side // 2 + 1
    return side + 2


@pytest.mark.parametrize('n_layers', [1, 2, 3])
@pytest.mark.parametrize('norm_type', ['batch', 'instance', 'spectral', 'batchspectral', 'instancespectral', 'none'])
def test_patchgan_gives_a_patch_map_for_any_size_and_backpropagates(n_layers, norm_type):
    net = small('discriminator_patchgan', in_nc=1, n_layers=n_layers, norm_type=norm_type)
    x = torch.randn(2, 1, 40, 52, requires_grad=True)
    out = net(x)
    assert out.shape == (2, 1, patch_map_side(40, n_layers), patch_map_side(52, n_layers))
    out.mean().backward()
    assert x.grad.abs().sum() > 0 and all(p.grad is not None for p in net.parameters())


@pytest.mark.parametrize('norm_type, norm, spectral', [
    ('batch', nn.BatchNorm2d, False), ('instance', nn.InstanceNorm2d, False), ('spectral', None, True),
    ('batchspectral', nn.BatchNorm2d, True), ('instancespectral', nn.InstanceNorm2d, True), ('none', None, False)])
def test_patchgan_norm_type_picks_the_norm_between_convs_and_whether_convs_are_spectrally_normalised(
        norm_type, norm, spectral):
    net = small('discriminator_patchgan', norm_type=norm_type)
    norms = [m for m in net.modules() if isinstance(m, (nn.BatchNorm2d, nn.InstanceNorm2d))]
    assert len(norms) == (3 if norm else 0) and all(type(m) is norm for m in norms)
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 5 and all(hasattr(c, 'weight_orig') == spectral for c in convs)
    names = list(net.state_dict())
    assert names[0] == ('model.child0.0.bias' if spectral else 'model.child0.0.weight')
    assert f'model.child4.0.{"weight_orig" if spectral else "weight"}' in names
    if norm is nn.BatchNorm2d:
        assert 'model.child1.1.running_mean' in names


def test_patchgan_with_three_layers_judges_70x70_patches():
    net = small('discriminator_patchgan', in_nc=1, n_layers=3, norm_type='none').eval()
    x = torch.randn(1, 1, 160, 160, requires_grad=True)
    out = net(x)
    out[0, 0, out.shape[2] // 2, out.shape[3] // 2].backward()
    rows, cols = torch.nonzero(x.grad[0, 0], as_tuple=True)
    assert rows.max() - rows.min() + 1 == 70 and cols.max() - cols.min() + 1 == 70


def test_patchgan_refuses_a_norm_type_kair_does_not_define():
    with pytest.raises(UserError, match=r'^netD\.norm_type: "3" is not supported for discriminator_patchgan; use '):
        build_network({'net_type': 'discriminator_patchgan', 'norm_type': 3})


@pytest.mark.parametrize('shape', [(32, 32), (24, 40)])
def test_unet_discriminator_gives_one_logit_per_pixel_and_backpropagates(shape):
    net = small('discriminator_unet', in_nc=1)
    x = torch.randn(2, 1, *shape, requires_grad=True)
    out = net(x)
    assert out.shape == (2, 1, *shape)
    out.mean().backward()
    assert x.grad.abs().sum() > 0 and all(p.grad is not None for p in net.parameters())


def test_unet_discriminator_refuses_sizes_not_divisible_by_8_in_one_line():
    with pytest.raises(UserError, match=r'^discriminator_unet needs input sizes divisible by 8 .*got 30x32$'):
        small('discriminator_unet')(torch.randn(1, 3, 30, 32))


def spectral_modules(net: nn.Module) -> List[nn.Module]:
    return [m for m in net.modules() if hasattr(m, 'weight_u')]


def largest_singular_value(m: nn.Module) -> float:
    w = m.weight.detach()
    return torch.linalg.matrix_norm(w.reshape(w.shape[0], -1), ord=2).item()


@pytest.mark.parametrize('net_type', SN_NETS)
def test_spectrally_normalised_discriminators_normalise_every_layer_they_run_to_spectral_norm_1(net_type):
    net = small(net_type)
    expected = {'discriminator_vgg_128_SN': 12, 'discriminator_patchgan': 5, 'discriminator_unet': 8}[net_type]
    layers = spectral_modules(net)
    assert len(layers) == expected
    size = VGG_SIZES.get(net_type, 32)
    x = torch.randn(1, 3, size, size)

    before = [m.weight_v.clone() for m in layers]  # v, not u: u has one element in the one-output layers
    net.eval()
    net(x)
    assert all(torch.equal(b, m.weight_v) for b, m in zip(before, layers))  # eval: no power iteration
    net.train()
    net(x)
    assert all(not torch.equal(b, m.weight_v) for b, m in zip(before, layers))  # the forward runs every one

    for m in layers:  # more power iterations, cheaply: the estimate does not depend on the input
        probe = torch.zeros(1, m.in_features) if isinstance(m, nn.Linear) else torch.zeros(1, m.in_channels, 4, 4)
        with torch.no_grad():
            for _ in range(100):
                m(probe)
        assert largest_singular_value(m) == pytest.approx(1.0, abs=0.02)


def test_the_unlisted_discriminators_have_kairs_layer_names_and_shapes():
    with torch.device('meta'):
        vgg96 = dict((n, s) for n, s, _ in listing(build_network({'net_type': 'discriminator_vgg_96'})))
        vgg128 = dict((n, s) for n, s, _ in listing(build_network({'net_type': 'discriminator_vgg_128'})))
        vgg192 = dict((n, s) for n, s, _ in listing(build_network({'net_type': 'discriminator_vgg_192'})))
        sn = listing(build_network({'net_type': 'discriminator_vgg_128_SN'}))
    assert {n: s for n, s in vgg128.items() if n != 'classifier.0.weight'} == \
        {n: s for n, s in vgg96.items() if n != 'classifier.0.weight'}
    assert vgg128['classifier.0.weight'] == '(100, 8192)'
    assert vgg192['features.28.weight'] == '(512, 512, 3, 3)' and vgg192['features.31.weight'] == '(512, 512, 4, 4)'
    assert vgg192['features.32.running_var'] == '(512,)' and vgg192['classifier.0.weight'] == '(100, 4608)'
    assert len(vgg192) == len(vgg96) + 14
    conv_names = [f'conv{i}.{p}' for i in range(10) for p in ('bias', 'weight_orig', 'weight_u', 'weight_v')]
    linear_names = [f'linear{i}.{p}' for i in range(2) for p in ('bias', 'weight_orig', 'weight_u', 'weight_v')]
    assert [n for n, _, _ in sn] == conv_names + linear_names
    shapes = dict((n, s) for n, s, _ in sn)
    assert shapes['conv0.weight_orig'] == '(64, 3, 3, 3)' and shapes['conv9.weight_orig'] == '(512, 512, 4, 4)'
    assert shapes['linear0.weight_orig'] == '(100, 8192)' and shapes['linear1.weight_orig'] == '(1, 100)'


@pytest.mark.parametrize('net_type', ['discriminator_vgg_96', 'discriminator_vgg_128', 'discriminator_vgg_192'])
def test_a_vgg_discriminator_refuses_an_act_mode_kair_cannot_build(net_type):
    with pytest.raises(UserError, match=rf'^netD\.act_mode: "CBL" is not supported for {net_type}; use BL'):
        build_network({'net_type': net_type, 'act_mode': 'CBL'})
