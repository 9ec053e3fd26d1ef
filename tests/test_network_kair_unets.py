"""DRUNet, USRNet and RRDBNet behaviour on tiny configurations: shapes, USRNet's Fourier-domain data step
against the normal equations it solves, option errors and strict state_dict round trips.

The full KAIR configurations' state_dicts are checked by tests/test_kair_networks.py.
"""
import pytest
import torch
import torch.nn.functional as F

from models.networks.drunet import ResUNet
from models.networks.rrdbnet import RRDBNet
from models.networks.usrnet import DataStep, Spectra, USRNet, downsample, p2o, splits, upsample
from models.registry import build_network
from option_rules import option_rules
from utils.errors import UserError
from utils.options import validate

TINY_NC = [4, 8, 8, 8]


pytestmark = pytest.mark.usefixtures('one_thread')


def tiny_drunet(**kw) -> ResUNet:
    torch.manual_seed(0)
    return ResUNet(**{'in_nc': 2, 'out_nc': 1, 'nc': TINY_NC, 'nb': 1, 'bias': False, **kw}).eval()


def tiny_usrnet(**kw) -> USRNet:
    torch.manual_seed(0)
    return USRNet(**{'n_iter': 2, 'h_nc': 8, 'in_nc': 4, 'out_nc': 3, 'nc': TINY_NC, 'nb': 1, **kw}).eval()


def unpadded_unet(net: ResUNet, x: torch.Tensor) -> torch.Tensor:
    """The U-Net as the paper draws it: additive skips at every scale, no padding."""
    x1 = net.m_head(x)
    x2 = net.m_down1(x1)
    x3 = net.m_down2(x2)
    x4 = net.m_down3(x3)
    y = net.m_up3(net.m_body(x4) + x4)
    y = net.m_up1(net.m_up2(y + x3) + x2)
    return net.m_tail(y + x1)


def circular_blur(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """sum_j k[j] x[i - j + c] with c = (kh // 2, kw // 2): KAIR's wrap-mode convolution, written directly."""
    kh, kw = k.shape[-2:]
    out = torch.zeros_like(x)
    for a in range(kh):
        for b in range(kw):
            out = out + k[..., a:a + 1, b:b + 1] * torch.roll(x, (a - kh // 2, b - kw // 2), dims=(-2, -1))
    return out


@pytest.mark.parametrize('h, w', [(16, 24), (8, 8), (32, 16)])
def test_drunet_keeps_the_size_of_inputs_that_are_multiples_of_8_and_is_the_plain_unet_there(h, w):
    net = tiny_drunet()
    x = torch.rand(2, 2, h, w)
    with torch.no_grad():
        y = net(x)
        assert y.shape == (2, 1, h, w)
        assert torch.equal(y, unpadded_unet(net, x))


@pytest.mark.parametrize('h, w', [(13, 10), (7, 17), (1, 1)])
def test_drunet_pads_other_sizes_by_replication_and_crops_back_as_kairs_padded_testing_does(h, w):
    net = tiny_drunet()
    x = torch.rand(1, 2, h, w)
    padded = F.pad(x, (0, -w % 8, 0, -h % 8), mode='replicate')
    with torch.no_grad():
        y = net(x)
        assert y.shape == (1, 1, h, w)
        assert torch.allclose(y, unpadded_unet(net, padded)[..., :h, :w], atol=1e-6)


def test_drunet_bias_option_and_a_backward_pass():
    assert not any(name.endswith('bias') for name in tiny_drunet().state_dict())
    with_bias = tiny_drunet(bias=True).train()
    weights = [n for n in with_bias.state_dict() if n.endswith('weight')]
    assert all(n[:-len('weight')] + 'bias' in with_bias.state_dict() for n in weights)
    x = torch.rand(1, 2, 16, 16)
    with_bias(x).square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in with_bias.parameters())


@pytest.mark.parametrize('kw, key', [({'downsample_mode': 'avgpool'}, 'netG.downsample_mode'),
                                     ({'upsample_mode': 'pixelshuffle'}, 'netG.upsample_mode'),
                                     ({'act_mode': 'BR'}, 'netG.act_mode'),
                                     ({'nc': [8, 16, 32]}, 'netG.nc')])
@pytest.mark.parametrize('build', [tiny_drunet, tiny_usrnet])
def test_unsupported_unet_options_are_one_line_user_errors_naming_the_key(build, kw, key):
    with pytest.raises(UserError, match=rf'^{key}: ') as e:
        build(**kw)
    assert '\n' not in str(e.value)


def test_usrnet_prior_needs_one_more_input_channel_than_it_outputs():
    with pytest.raises(UserError, match=r'^netG\.in_nc: .*out_nc \+ 1 = 2, got 4'):
        tiny_usrnet(out_nc=1)


@pytest.mark.parametrize('kh, kw', [(5, 5), (4, 6), (1, 1)])
def test_p2o_of_a_centred_delta_is_all_ones(kh, kw):
    delta = torch.zeros(1, 1, kh, kw, dtype=torch.float64)
    delta[..., kh // 2, kw // 2] = 1
    otf = p2o(delta, (12, 10))
    assert otf.shape == (1, 1, 12, 10)
    assert torch.allclose(otf, torch.ones_like(otf), atol=1e-12)


@pytest.mark.parametrize('kh, kw', [(3, 3), (4, 5)])
def test_p2o_multiplication_is_circular_convolution_about_the_kernel_centre(kh, kw):
    x = torch.rand(2, 3, 12, 10, dtype=torch.float64)
    k = torch.rand(2, 1, kh, kw, dtype=torch.float64)
    blurred = torch.fft.ifft2(p2o(k, x.shape[-2:]) * torch.fft.fft2(x)).real
    assert torch.allclose(blurred, circular_blur(x, k), atol=1e-12)


def test_upsample_inserts_zeros_and_is_the_adjoint_of_downsample():
    y = torch.arange(1., 7.).reshape(1, 1, 2, 3)
    z = upsample(y, 3)
    assert z.shape == (1, 1, 6, 9) and torch.equal(z[..., ::3, ::3], y) and z.sum() == y.sum()
    x = torch.rand(1, 1, 6, 9)
    assert torch.allclose((upsample(y, 3) * x).sum(), (y * downsample(x, 3)).sum())


@pytest.mark.parametrize('sf', [1, 2, 3])
def test_the_mean_of_the_spectrum_blocks_is_the_spectrum_of_the_downsampled_image(sf):
    x = torch.rand(2, 3, 6 * sf, 4 * sf, dtype=torch.float64)
    blocks = splits(torch.fft.fft2(x), sf)
    assert blocks.shape == (2, 3, 6, 4, sf * sf)
    assert torch.allclose(blocks.mean(-1), torch.fft.fft2(downsample(x, sf)), atol=1e-10)


def test_splits_orders_the_blocks_column_major():
    a = torch.arange(16.).reshape(4, 4)
    assert splits(a, 2)[0, 0].tolist() == [a[0, 0], a[2, 0], a[0, 2], a[2, 2]]


@pytest.mark.parametrize('sf, ksize', [(1, 3), (2, 3), (2, 4), (3, 5)])
def test_the_data_step_solves_the_normal_equations_of_its_least_squares_problem(sf, ksize):
    """x = argmin ||y - S(k * x)||^2 + alpha ||x - z||^2  <=>  (A^T A + alpha I) x = A^T y + alpha z."""
    torch.manual_seed(sf)
    hr = (3 * sf, 4 * sf)
    y = torch.rand(2, 1, hr[0] // sf, hr[1] // sf, dtype=torch.float64)
    z = torch.rand(2, 1, *hr, dtype=torch.float64)
    k = torch.rand(2, 1, ksize, ksize, dtype=torch.float64)
    k = k / k.sum(dim=(-2, -1), keepdim=True)
    alpha = torch.tensor([0.3, 1e-4], dtype=torch.float64).view(2, 1, 1, 1)
    x = DataStep()(z, Spectra(y, k, sf), alpha)
    n = hr[0] * hr[1]
    for b in range(2):
        basis = torch.eye(n, dtype=torch.float64).view(n, 1, *hr)
        A = downsample(circular_blur(basis, k[b:b + 1]), sf).reshape(n, -1).T
        lhs = A.T @ A + alpha[b].item() * torch.eye(n, dtype=torch.float64)
        rhs = A.T @ y[b].reshape(-1) + alpha[b].item() * z[b].reshape(-1)
        assert torch.allclose(lhs @ x[b].reshape(-1), rhs, atol=1e-10)


def test_with_a_delta_kernel_and_sf_1_the_data_step_averages_y_and_z_and_tends_to_y_as_alpha_vanishes():
    y, z = torch.rand(2, 1, 3, 8, 8, dtype=torch.float64)
    delta = torch.zeros(1, 1, 3, 3, dtype=torch.float64)
    delta[..., 1, 1] = 1
    step, spectra = DataStep(), Spectra(y, delta, 1)
    alpha = torch.tensor(0.5, dtype=torch.float64).view(1, 1, 1, 1)
    assert torch.allclose(step(z, spectra, alpha), (y + alpha * z) / (1 + alpha), atol=1e-12)
    assert torch.allclose(step(z, spectra, torch.full_like(alpha, 1e-6)), y, atol=1e-5)


@pytest.mark.parametrize('sf, lr', [(2, (8, 6)), (3, (5, 7)), (1, (9, 8))])
def test_usrnet_output_shape_and_gradients(sf, lr):
    net = tiny_usrnet().train()
    y = torch.rand(2, 3, *lr)
    k = torch.rand(2, 1, 5, 5)
    k = k / k.sum(dim=(-2, -1), keepdim=True)
    sigma = torch.tensor([0.0, 10 / 255]).view(2, 1, 1, 1)
    out = net(y, k, sf, sigma)
    assert out.shape == (2, 3, lr[0] * sf, lr[1] * sf)
    out.square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())


def test_usrnet_hyper_parameters_are_positive_alphas_then_betas_per_iteration():
    net = tiny_usrnet(n_iter=3)
    sigma = torch.tensor([0.0, 0.1]).view(2, 1, 1, 1)
    with torch.no_grad():
        alphas, betas = net.hyper_parameters(sigma, 4)
        ab = net.h(torch.cat((sigma, torch.full_like(sigma, 4.0)), dim=1))
    assert alphas.shape == betas.shape == (2, 3, 1, 1)
    assert torch.equal(torch.cat((alphas, betas), 1), ab) and (ab > 0).all()


def test_rrdbnet_upscales_by_2_or_4_and_refuses_other_factors():
    torch.manual_seed(0)
    x = torch.rand(1, 3, 5, 6)
    for scale in (2, 4):
        net = RRDBNet(nf=8, nb=1, gc=4, upscale=scale).eval()
        with torch.no_grad():
            assert net(x).shape == (1, 3, 5 * scale, 6 * scale)
        assert ('upconv2.weight' in net.state_dict()) == (scale == 4)
    with pytest.raises(UserError, match=r'^netG\.upscale: rrdbnet supports 2 or 4, got 3$'):
        RRDBNet(nf=8, nb=1, gc=4, upscale=3)


def test_rrdbnet_takes_kairs_top_level_scale():
    netG = {'net_type': 'rrdbnet', 'in_nc': 3, 'out_nc': 3, 'nf': 8, 'nb': 1, 'gc': 4, 'act_mode': 'L', 'bias': True}
    opt = validate({'task': 't', 'scale': 2, 'netG': netG}, option_rules())
    assert opt['netG']['upscale'] == 2
    assert 'upconv2.weight' not in build_network(opt['netG']).state_dict()


@pytest.mark.parametrize('name', ['drunet', 'usrnet', 'rrdbnet'])
def test_a_saved_state_dict_loads_strictly_and_gives_the_same_output(name, tmp_path):
    def build(seed):
        torch.manual_seed(seed)
        if name == 'drunet':
            return tiny_drunet(bias=True), (torch.rand(1, 2, 16, 16),)
        if name == 'usrnet':
            k = torch.rand(1, 1, 3, 3)
            return tiny_usrnet(), (torch.rand(1, 3, 4, 4), k / k.sum(), 2, torch.full((1, 1, 1, 1), 0.05))
        return RRDBNet(nf=8, nb=1, gc=4, upscale=4), (torch.rand(1, 3, 4, 4),)

    net, inputs = build(0)
    torch.save(net.state_dict(), tmp_path / 'net.pth')
    other, _ = build(1)
    other.load_state_dict(torch.load(tmp_path / 'net.pth', weights_only=True), strict=True)
    with torch.no_grad():
        assert torch.equal(net.eval()(*inputs), other.eval()(*inputs))
