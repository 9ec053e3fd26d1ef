"""spandrel reads our checkpoints of the networks we keep (SwinIR, RRDBNet, DnCNN, DRUNet).

We keep our own implementations of these (their state_dicts equal KAIR's, tests/test_kair_networks.py);
a checkpoint trained here should still open in the tools built on spandrel (chaiNNer, traiNNer-redux's
inference). Each test saves a state_dict of ours with random weights, lets spandrel detect it, and
compares the outputs. Where spandrel cannot load ours the test pins that (so a spandrel upgrade that
fixes it is noticed) and the docstring says why.

The file `scripts/export.py --format spandrel` writes (models/spandrel_file.py) is what those tools open: each of
our networks spandrel knows, in the layout spandrel detects (KAIR's RRDB and BasicSR's RCAN renamed by their own
`spandrel_state_dict`), loads through spandrel's file loader and computes what ours computes.
"""
import sys
from typing import Any, Dict

import pytest
import torch

from conftest import need_spandrel
from models.registry import build_network
from models.spandrel_file import spandrel_difference, spandrel_file, spandrel_size
from spandrel_tiny import TINY
from utils.errors import UserError


def detect(netG: Dict[str, Any]) -> Any:
    """(our network with seeded random weights, spandrel's descriptor of its state_dict)."""
    spandrel = need_spandrel()
    torch.manual_seed(0)
    net = build_network(dict(netG)).eval()
    return net, spandrel.ModelLoader().load_from_state_dict(dict(net.state_dict()))


def same_output(net: torch.nn.Module, model: torch.nn.Module, channels: int) -> None:
    x = torch.rand(1, channels, 16, 16)
    with torch.no_grad():
        assert torch.allclose(net(x), model.eval()(x), rtol=0, atol=1e-5)  # same maths, other op order


# channels: spandrel's input_channels (DRUNet's counts the image only: the noise-level map is the 4th channel)
@pytest.mark.parametrize('netG, arch, channels, scale', [
    (dict(net_type='swinir', upscale=2, in_chans=3, img_size=16, window_size=4, img_range=1.0, depths=[2, 2],
          embed_dim=24, num_heads=[2, 2], mlp_ratio=2, upsampler='pixelshuffle', resi_connection='1conv'),
     'SwinIR', 3, 2),
    (dict(net_type='rrdbnet', in_nc=3, out_nc=3, nf=16, nb=2, gc=32), 'ESRGAN', 3, 4),  # BSRGAN's names
    (dict(net_type='dncnn', in_nc=1, out_nc=1, nc=16, nb=17, act_mode='R'), 'DnCNN', 1, 1),
    (dict(net_type='dncnn', in_nc=1, out_nc=1, nc=16, nb=17, act_mode='BR'), 'DnCNN', 1, 1),
    (dict(net_type='drunet', in_nc=4, out_nc=3, nc=[16, 32, 64, 128], nb=2, bias=False), 'DRUNet', 3, 1),
], ids=['swinir', 'rrdbnet', 'dncnn', 'dncnn_bn', 'drunet'])
def test_spandrel_detects_our_checkpoint_and_computes_the_same(netG, arch, channels, scale):
    net, desc = detect(netG)
    assert (desc.architecture.id, desc.scale, desc.input_channels) == (arch, scale, channels)
    same_output(net, desc.model, netG.get('in_nc', netG.get('in_chans')))


def test_kair_rrdb_layout_is_detected_as_esrgan_but_spandrel_cannot_load_it():
    """KAIR's `rrdb` (the layout of rrdb_x4_psnr.pth / rrdb_x4_esrgan.pth) names each RDB's last conv
    `conv5.weight`; spandrel detects the old ESRGAN layout and then builds `conv5.0.weight` (the
    original ESRGAN code's one-layer conv_block), so loading fails. Our `rrdbnet` (BSRGAN names) and
    `esrgan` (BasicSR names) load."""
    with pytest.raises(RuntimeError, match=r'Missing key\(s\).*RDB1\.conv5\.0\.weight'):
        detect(dict(net_type='rrdb', in_nc=3, out_nc=3, nc=16, nb=2, gc=8, upscale=4))


def test_rrdbnet_with_a_growth_other_than_32_is_misread_by_spandrel():
    """spandrel reads nf and nb from the keys but assumes ESRGAN's growth channels (gc 32)."""
    with pytest.raises(RuntimeError, match=r'size mismatch for .*RDB1\.conv1'):
        detect(dict(net_type='rrdbnet', in_nc=3, out_nc=3, nf=16, nb=2, gc=8))


def test_drunet_with_biases_or_one_block_is_beyond_spandrel():
    """spandrel builds DRUNet without biases (as KAIR's released drunet_*.pth and train_drunet.json:
    `bias: false`), and detects it by keys of the second block of each level (nb >= 2); our
    constructor's default `bias: true`, or nb 1, is not readable by spandrel."""
    spandrel = need_spandrel()
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\).*m_head\.bias'):
        detect(dict(net_type='drunet', in_nc=4, out_nc=3, nc=[16, 32, 64, 128], nb=2, bias=True))
    with pytest.raises(spandrel.UnsupportedModelError):
        detect(dict(net_type='drunet', in_nc=4, out_nc=3, nc=[16, 32, 64, 128], nb=1, bias=False))


def test_dncnn_needs_at_least_eight_convolutions_for_spandrel():
    """spandrel recognises DnCNN by its first eight convolutions' keys; a shallower one is not detected."""
    spandrel = need_spandrel()
    with pytest.raises(spandrel.UnsupportedModelError):
        detect(dict(net_type='dncnn', in_nc=1, out_nc=1, nc=16, nb=5, act_mode='R'))


def spandrel_round_trip(netG: Dict[str, Any], channels: int, h: int, w: int, tmp_path: Any) -> Any:
    """(spandrel's descriptor of the file written for `netG` with seeded random weights, read back from disk by
    spandrel's ModelLoader as chaiNNer and ComfyUI read it, max|its output - ours| on a random input of about h x w,
    at a size spandrel's model takes without padding)."""
    spandrel = need_spandrel()
    torch.manual_seed(0)
    net = build_network(dict(netG)).eval()
    data, _ = spandrel_file(net, netG, 'w.pth')
    path = tmp_path / 'w_spandrel.safetensors'
    path.write_bytes(data)
    descriptor = spandrel.ModelLoader().load_from_file(str(path))
    x = torch.rand(1, channels, *spandrel_size(descriptor, h, w))
    with torch.no_grad():
        return descriptor, spandrel_difference(net(x), descriptor, x, netG['net_type'])


# Our own implementations of architectures spandrel knows: (netG, spandrel's architecture, scale, input channels)
OURS = [
    (dict(net_type='rrdb', in_nc=3, out_nc=3, nc=16, nb=2, gc=32, upscale=4), 'ESRGAN', 4, 3),  # KAIR's RRDB
    (dict(net_type='rrdb', in_nc=3, out_nc=3, nc=16, nb=1, gc=32, upscale=2), 'ESRGAN', 2, 3),
    (dict(net_type='rrdbnet', in_nc=3, out_nc=3, nf=16, nb=2, gc=32, upscale=4), 'ESRGAN', 4, 3),  # BSRGAN's
    (dict(net_type='esrgan', num_feat=16, num_block=2, scale=4), 'ESRGAN', 4, 3),  # BasicSR's / Real-ESRGAN's
    (dict(net_type='esrgan', num_feat=16, num_block=1, scale=2), 'ESRGAN', 2, 3),
    (dict(net_type='esrgan', num_feat=16, num_block=1, scale=1), 'ESRGAN', 1, 3),
    (dict(net_type='rcan', num_feat=32, num_group=2, num_block=2, upscale=4), 'RCAN', 4, 3),  # BasicSR's RCAN
    (dict(net_type='rcan', num_feat=32, num_group=3, num_block=1, squeeze_factor=8, upscale=3, img_range=1.0,
          rgb_mean=[0.5, 0.2, 0.1]), 'RCAN', 3, 3),
    (dict(net_type='swinir', upscale=2, in_chans=3, img_size=16, window_size=4, img_range=1.0, depths=[2, 2],
          embed_dim=24, num_heads=[2, 2], mlp_ratio=2, upsampler='pixelshuffle', resi_connection='1conv'),
     'SwinIR', 2, 3),
    (dict(net_type='dncnn', in_nc=1, out_nc=1, nc=16, nb=17, act_mode='BR'), 'DnCNN', 1, 1),
    (dict(net_type='fdncnn', in_nc=4, out_nc=3, nc=16, nb=8, act_mode='R'), 'DnCNN', 1, 4),
    (dict(net_type='drunet', in_nc=4, out_nc=3, nc=[16, 32, 64, 128], nb=2, bias=False), 'DRUNet', 1, 4),
]


@pytest.mark.parametrize('netG, arch, scale, channels', OURS,
                         ids=[f'{n["net_type"]}_x{s}' for n, _, s, _ in OURS])
def test_the_file_export_writes_for_spandrel_opens_there_and_computes_the_same(netG, arch, scale, channels, tmp_path,
                                                                              one_thread):
    descriptor, diff = spandrel_round_trip(netG, channels, 16, 20, tmp_path)
    assert (descriptor.architecture.id, descriptor.scale) == (arch, scale)
    assert diff <= 1e-5


def test_kair_rrdb_and_basicsr_rcan_declare_the_layout_spandrel_detects():
    """Their own state_dicts are not spandrel's (the test above pins KAIR's RRDB; BasicSR's RCAN is not even
    detected): the networks rename them."""
    spandrel = need_spandrel()
    rcan = build_network(dict(net_type='rcan', num_feat=32, num_group=2, num_block=2, upscale=2))
    with pytest.raises(spandrel.UnsupportedModelError):
        spandrel.ModelLoader().load_from_state_dict(dict(rcan.state_dict()))
    names = set(rcan.spandrel_state_dict())
    assert {'head.0.weight', 'body.0.body.1.body.3.conv_du.2.bias', 'body.0.body.2.weight', 'body.2.weight',
            'tail.0.0.weight', 'tail.1.weight', 'sub_mean.weight', 'add_mean.bias'} <= names
    assert not any('residual_group' in n or 'rcab' in n for n in names)
    rrdb = build_network(dict(net_type='rrdb', in_nc=3, out_nc=3, nc=8, nb=1, gc=32, upscale=4))
    assert 'model.1.sub.0.RDB1.conv5.0.weight' in rrdb.spandrel_state_dict()
    assert set(rrdb.spandrel_state_dict()) - set(rrdb.state_dict()) == {
        f'model.1.sub.0.RDB{i}.conv5.0.{kind}' for i in (1, 2, 3) for kind in ('weight', 'bias')}


# Hyperparameters spandrel cannot infer from the weights, at the values it assumes (TINY's are smaller), and the
# input side they need: the file of a network trained with other values is refused (test below)
SPANDREL_DEFAULTS = {
    'atd': (dict(depths=[2], category_size=256), 8),  # a block that is not the group's last: detected by its sigma
    'craft': (dict(window_size=16), 16),
    'dctlsa': (dict(num_head=5), 16),
    'ditn': (dict(patch_size=8), 8),
    'grl': (dict(window_size=8, stripe_size=[8, 8], anchor_window_down_factor=4), 16),
    'uformer': (dict(img_size=64), 64),  # a bottleneck as large as a window (spandrel takes squares of 128)
    'rgt': (dict(), 16),
    'realcugan': (dict(scale=2), 24),
}


@pytest.mark.parametrize('net_type', sorted(TINY))
def test_the_file_of_every_network_spandrel_builds_for_us_opens_there_and_computes_the_same(net_type, tmp_path,
                                                                                            one_thread):
    """Their state_dicts are spandrel's own; what spandrel must still read from them is every hyperparameter."""
    kwargs, side = TINY[net_type]
    extra, side = SPANDREL_DEFAULTS.get(net_type, ({}, side))
    descriptor, diff = spandrel_round_trip({'net_type': net_type, **kwargs, **extra}, 3, side, side, tmp_path)
    assert diff <= 1e-5


@pytest.mark.parametrize('netG, message', [
    (dict(net_type='edsr', num_feat=8, num_block=1, upscale=2),
     r'^netG \(edsr\): spandrel 0\.4\.2 recognises none of its architectures in these weights, so chaiNNer and ComfyUI '
     r'cannot open them; export it to ONNX instead \(--format onnx; chaiNNer opens \.onnx files\)$'),
    (dict(net_type='drunet', in_nc=4, out_nc=3, nc=[16, 32, 64, 128], nb=2, bias=True),
     r'^netG \(drunet\): spandrel reads these weights as DRUNet but cannot load them \(Unexpected key\(s\) in '
     r'state_dict: "m_head\.bias", .+\); it infers DRUNet\'s hyperparameters from the weights and takes the others at '
     r'their defaults$'),  # spandrel's DRUNet has no biases
    (dict(net_type='rrdb', in_nc=3, out_nc=3, nc=16, nb=1, gc=8, upscale=4),
     r'^netG \(rrdb\): spandrel reads these weights as ESRGAN but cannot load them \(size mismatch for '
     r'model\.1\.sub\.0\.RDB1\.conv1\.0\.weight: '),  # spandrel's growth is 32
    (dict(net_type='nafnet', **TINY['nafnet'][0], tlc=True),  # the same weights, another network at test time
     r'^netG\.tlc: spandrel builds NAFNet without the test-time local converter, so chaiNNer and ComfyUI would pool '
     r'globally; to write these weights for that, export with --set netG\.tlc=false$'),
], ids=['unknown', 'drunet_bias', 'rrdb_growth', 'nafnet_tlc'])
def test_a_network_spandrel_does_not_know_or_cannot_load_or_has_no_layout_for_is_one_line(netG, message):
    need_spandrel()
    net = build_network(dict(netG))
    with pytest.raises(UserError, match=message) as e:
        spandrel_file(net, netG, 'w.pth')
    assert '\n' not in str(e.value)


@pytest.mark.parametrize('netG, side', [
    (dict(net_type='rcan', num_feat=32, num_group=1, num_block=1, upscale=2, res_scale=0.5), 16),  # always 1 there
    (dict(net_type='craft', **TINY['craft'][0]), 16),  # window 4, spandrel's 16
], ids=['rcan_res_scale', 'craft_window'])
def test_a_network_spandrel_loads_with_other_hyperparameters_is_one_line(netG, side):
    """The weights load, but spandrel's model computes something else: no file that the tools would misread."""
    need_spandrel()
    torch.manual_seed(0)
    net = build_network(dict(netG)).eval()
    _, descriptor = spandrel_file(net, netG, 'w.pth')
    x = torch.rand(1, 3, side, side)
    message = (rf'^netG \({netG["net_type"]}\): spandrel\'s {descriptor.architecture.id} built from these '
               r'weights differs from ours by max\|diff\| = \S+ \(tolerance 0.0001\): it takes a hyperparameter it '
               r'cannot infer')
    with torch.no_grad(), pytest.raises(UserError, match=message):
        spandrel_difference(net(x), descriptor, x, netG['net_type'])
