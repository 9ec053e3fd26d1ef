"""spandrel reads our checkpoints of the networks we keep (SwinIR, RRDBNet, DnCNN, DRUNet).

We keep our own implementations of these (their state_dicts equal KAIR's, tests/test_kair_networks.py);
a checkpoint trained here should still open in the tools built on spandrel (chaiNNer, traiNNer-redux's
inference). Each test saves a state_dict of ours with random weights, lets spandrel detect it, and
compares the outputs. Where spandrel cannot load ours the test pins that (so a spandrel upgrade that
fixes it is noticed) and the docstring says why.
"""
from typing import Any, Dict

import pytest
import torch

from conftest import need_spandrel
from models.registry import build_network


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
