"""esrgan, rcan, edsr, restormer (written from the papers with the official names): their outputs.

Where spandrel has the architecture (ESRGAN, RCAN under the original/old key names), the same random
weights are loaded into spandrel's network by name mapping and the outputs must agree in float64:
an implementation written independently of ours.
"""
import pytest
import torch

from conftest import need_spandrel
from models.registry import build_network
from utils.errors import UserError


def random_weights(net):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn_like(p) * 0.1)
    return net.double().eval()


@pytest.mark.parametrize('scale', [4, 2, 1])
def test_esrgan_equals_spandrels_esrgan_loaded_from_our_checkpoint(scale):
    """spandrel's loader reads our BasicSR-named state_dict (detecting scale and pixel-unshuffle) and
    builds its own (old-name) ESRGAN: same outputs."""
    spandrel = need_spandrel()
    ours = random_weights(build_network({'net_type': 'esrgan', 'scale': scale, 'num_feat': 8, 'num_block': 2,
                                         'num_grow_ch': 32}))  # spandrel's loader assumes growth 32
    theirs = spandrel.ModelLoader().load_from_state_dict(ours.state_dict())
    assert theirs.architecture.id == 'ESRGAN' and theirs.scale == scale
    x = torch.rand(1, 3, 8, 8, dtype=torch.float64)
    y = ours(x)
    assert y.shape == (1, 3, 8 * scale, 8 * scale)
    torch.testing.assert_close(y, theirs.model.double().eval()(x.clone()), rtol=1e-10, atol=1e-10)


def test_rcan_equals_spandrels_original_rcan_with_the_same_weights():
    """The original RCAN (spandrel) shifts the mean with 1x1 convs (sub_mean/add_mean) where BasicSR's
    layout subtracts a plain attribute; the other weights map one to one in state_dict order."""
    need_spandrel()
    from spandrel.architectures.RCAN import RCAN
    ours = random_weights(build_network({'net_type': 'rcan', 'num_feat': 16, 'num_group': 2, 'num_block': 2,
                                         'squeeze_factor': 4, 'upscale': 4}))
    theirs = RCAN(scale=4, n_resgroups=2, n_resblocks=2, n_feats=16, reduction=4).double().eval()
    names = [k for k in theirs.state_dict() if not k.startswith(('sub_mean', 'add_mean'))]
    sd = ours.state_dict()
    assert [tuple(v.shape) for v in sd.values()] == [tuple(theirs.state_dict()[k].shape) for k in names]
    theirs.load_state_dict(dict(zip(names, sd.values())), strict=False)
    x = torch.rand(1, 3, 8, 8, dtype=torch.float64)
    # both hold the mean as float32 constants (255·mean rounded there, mean here): 1e-7 apart
    torch.testing.assert_close(ours(x), theirs(x.clone()), rtol=1e-6, atol=1e-6)


def test_edsr_and_rcan_keep_the_mean_out_of_the_state_dict_and_upscale_by_2_3_4():
    for net_type, extra in (('edsr', {'num_block': 2}), ('rcan', {'num_group': 1, 'num_block': 1, 'squeeze_factor': 4})):
        for scale in (2, 3, 4):
            net = build_network({'net_type': net_type, 'num_feat': 8, 'upscale': scale, **extra})
            assert not any('mean' in k for k in net.state_dict())
            assert net(torch.rand(1, 3, 5, 6)).shape == (1, 3, 5 * scale, 6 * scale)
        with pytest.raises(UserError, match=f'netG.upscale: {net_type} supports scales 2\\^n and 3, got 5'):
            build_network({'net_type': net_type, 'num_feat': 8, 'upscale': 5, **extra})


def test_edsr_is_the_mean_plus_the_upsampled_residual_of_its_body():
    """With the last conv zeroed, EDSR outputs the mean image (the normalisation is undone exactly)."""
    net = build_network({'net_type': 'edsr', 'num_feat': 8, 'num_block': 1, 'upscale': 2})
    with torch.no_grad():
        net.conv_last.weight.zero_()
        net.conv_last.bias.zero_()
    y = net(torch.rand(1, 3, 4, 4))
    torch.testing.assert_close(y, torch.tensor([0.4488, 0.4371, 0.4040]).view(1, 3, 1, 1).expand(1, 3, 8, 8))


TINY_RESTORMER = {'dim': 8, 'num_blocks': [1, 1, 1, 1], 'num_refinement_blocks': 1, 'heads': [1, 2, 2, 4]}


@pytest.mark.parametrize('config', [{'LayerNorm_type': 'WithBias'}, {'LayerNorm_type': 'BiasFree'},
                                    {'inp_channels': 1, 'out_channels': 1, 'LayerNorm_type': 'BiasFree'},
                                    {'inp_channels': 6, 'out_channels': 3, 'dual_pixel_task': True}])
def test_restormer_restores_at_the_input_size_and_trains(config):
    net = build_network({'net_type': 'restormer', **TINY_RESTORMER, **config})
    c = config.get('inp_channels', 3)
    x = torch.rand(2, c, 16, 24)
    y = net(x)
    assert y.shape == (2, config.get('out_channels', 3), 16, 24)
    y.mean().backward()
    assert all(p.grad is not None for p in net.parameters())


def test_restormer_without_dual_pixels_adds_the_input_and_its_bias_free_norm_does_not_centre():
    net = build_network({'net_type': 'restormer', **TINY_RESTORMER, 'LayerNorm_type': 'BiasFree'})
    with torch.no_grad():
        net.output.weight.zero_()
    x = torch.rand(1, 3, 8, 8)
    torch.testing.assert_close(net(x), x)
    norm = net.encoder_level1[0].norm1
    assert not hasattr(norm.body, 'bias')
    v = torch.full((1, 8, 1, 1), 2.0) + torch.arange(8.).view(1, 8, 1, 1)  # mean 5.5, population var 5.25
    torch.testing.assert_close(norm(v), v / (5.25 + 1e-5) ** 0.5)
    with pytest.raises(UserError, match='divisible by 8'):
        net(torch.rand(1, 3, 12, 8))
