"""The recipe losses (issue 37) against independent computations: the colour loss against KAIR's YCbCr
matrix in numpy and OpenCV's Lab, the Sobel loss against cv2.Sobel, the gradient-variance loss, the cosine
and NCC losses against numpy, the MS-SSIM + L1 mix against pytorch_msssim, the contextual loss against a
numpy version of Mechrez et al.'s formulas; then their options and a training step with all of them."""
import copy

import cv2
import numpy as np
import pytest
import torch

from conftest import need_module, tiny_options
from losses.color import ColorLoss
from losses.contextual import ContextualLoss, contextual_loss
from losses.cosine import CosineLoss
from losses.gradient_variance import GradientVarianceLoss
from losses.msssim_l1 import MSSSIML1Loss
from losses.ncc import NCCLoss
from losses.registry import LOSSES
from losses.sobel import SobelLoss
from models.model_plain import ModelPlain
from option_rules import option_rules
from utils.errors import OptionsError
from utils.options import validate

RECIPE_LOSSES = ('color', 'sobel', 'gradient_variance', 'cosine', 'ncc', 'msssim_l1', 'contextual')


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Small tensors: one intra-op thread (conftest's `one_thread`)."""


def _pair(*shape, seed=0, noise=0.2):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(*shape, generator=g)
    return x, (x + noise * torch.randn(*shape, generator=g)).clamp(0, 1)


def _hwc(t):
    """One CHW tensor as an HWC float64 array."""
    return t.double().numpy().transpose(1, 2, 0)


# --- colour ------------------------------------------------------------------------------------------------

KAIR_YCBCR = np.array([[65.481, -37.797, 112.0], [128.553, -74.203, -93.786], [24.966, 112.0, -18.214]]) / 255.0


def test_color_loss_in_ycbcr_is_the_l1_of_kairs_cb_and_cr():
    x, y = _pair(2, 3, 9, 11, seed=1)

    def cbcr(t):  # KAIR's rgb2ycbcr on [0, 255] RGB (its matrix, offsets 16/128/128), back to [0, 1]
        return np.stack([(_hwc(img) * 255.0 @ KAIR_YCBCR + [16, 128, 128])[..., 1:] / 255.0 for img in t])
    expected = np.abs(cbcr(x) - cbcr(y)).mean()
    assert ColorLoss()(x, y).item() == pytest.approx(expected, rel=1e-5)
    assert ColorLoss()(x, x).item() == 0.0


def test_color_loss_in_lab_is_the_l1_of_opencvs_a_and_b_over_100():
    x, y = _pair(2, 3, 8, 10, seed=2)

    def ab(t):
        return np.stack([cv2.cvtColor(_hwc(img).astype(np.float32), cv2.COLOR_RGB2Lab)[..., 1:] for img in t])
    expected = np.abs(ab(x).astype(np.float64) - ab(y)).mean() / 100.0
    assert ColorLoss('lab')(x, y).item() == pytest.approx(expected, rel=2e-3)


def test_color_loss_ignores_brightness_in_ycbcr_sees_a_colour_cast_and_has_finite_gradients_everywhere():
    gray = torch.full((1, 3, 4, 4), 0.3)
    assert ColorLoss()(gray, gray + 0.4).item() == pytest.approx(0.0, abs=1e-7)  # brighter gray: same chroma
    assert ColorLoss()(gray, gray * torch.tensor([1.2, 1.0, 0.8]).view(3, 1, 1)).item() > 0.01
    for space in ('ycbcr', 'lab'):
        x = torch.tensor([-0.2, 0.0, 0.02, 0.5, 1.0, 1.3]).view(1, 3, 2, 1).repeat(1, 1, 1, 2).requires_grad_(True)
        ColorLoss(space)(x, torch.rand(1, 3, 2, 2)).backward()
        assert torch.isfinite(x.grad).all(), space
    with pytest.raises(ValueError, match='chroma of RGB images'):
        ColorLoss()(torch.rand(1, 1, 4, 4), torch.rand(1, 1, 4, 4))


# --- Sobel and gradient variance ----------------------------------------------------------------------------

def test_sobel_loss_is_the_l1_of_opencvs_sobel_responses_of_every_channel():
    x, y = _pair(2, 3, 12, 9, seed=3)

    def grads(t):  # cv2.Sobel's default border is reflect-101, as the loss's
        return np.stack([[cv2.Sobel(np.ascontiguousarray(img[c]), cv2.CV_64F, dx, 1 - dx, ksize=3)
                          for dx in (1, 0) for c in range(3)] for img in t.double().numpy()])
    expected = np.abs(grads(x) - grads(y)).mean()
    assert SobelLoss()(x, y).item() == pytest.approx(expected, rel=1e-5)
    video = torch.stack([x, y], 1)  # N, T, C, H, W: frames as images
    assert SobelLoss()(video, video.flip(1)).item() == pytest.approx(expected, rel=1e-5)


def _numpy_gradient_variance(x, y, p):
    """The paper's loss, image by image with OpenCV's filter (zero padding) and numpy's variance."""
    kx = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]], dtype=np.float64)

    def variances(img):
        gray = img[0] * 0.2989 + img[1] * 0.5870 + img[2] * 0.1140 if img.shape[0] == 3 else img[0]
        out = []
        for k in (kx, kx.T):
            g = cv2.filter2D(gray, cv2.CV_64F, k, borderType=cv2.BORDER_CONSTANT)
            h, w = g.shape
            out.append([g[i:i + p, j:j + p].var(ddof=1) for i in range(0, h, p) for j in range(0, w, p)])
        return np.array(out)
    vx = np.stack([variances(img) for img in x.double().numpy()])
    vy = np.stack([variances(img) for img in y.double().numpy()])
    return ((vx[:, 0] - vy[:, 0]) ** 2).mean() + ((vx[:, 1] - vy[:, 1]) ** 2).mean()


@pytest.mark.parametrize('channels, patch', [(3, 8), (3, 4), (1, 6)])
def test_gradient_variance_loss_is_the_papers_definition_in_numpy(channels, patch):
    x, y = _pair(2, channels, 24, 48, seed=4, noise=0.1)
    loss = LOSSES.get('gradient_variance', 'test')(gv_patch_size=patch)
    assert loss(x, y).item() == pytest.approx(_numpy_gradient_variance(x, y, patch), rel=1e-4)


def test_gradient_variance_is_zero_for_equal_images_and_refuses_a_patch_not_dividing_the_image():
    x, _ = _pair(1, 3, 16, 16, seed=5)
    assert GradientVarianceLoss()(x, x).item() == 0.0
    assert GradientVarianceLoss()(x, 0.5 * x).item() > 0  # lower-contrast edges: lower gradient variance
    with pytest.raises(ValueError, match='gv_patch_size 8 must divide the image size, got 20x16'):
        GradientVarianceLoss()(torch.rand(1, 3, 20, 16), torch.rand(1, 3, 20, 16))


# --- cosine and NCC --------------------------------------------------------------------------------------------

def test_cosine_loss_is_one_minus_the_mean_cosine_of_the_colour_vectors():
    x, y = _pair(2, 3, 7, 5, seed=6)
    y = y.clamp(min=0.05)  # no black pixel: numpy's formula has no epsilon
    a, b = x.double().numpy(), y.double().numpy()
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert CosineLoss()(x, y).item() == pytest.approx(1 - cos.mean(), rel=1e-5)
    assert CosineLoss()(x, 0.5 * x).item() == pytest.approx(0.0, abs=1e-6)  # darker, same colour
    black = torch.zeros(1, 3, 2, 2, requires_grad=True)
    value = CosineLoss()(black, torch.rand(1, 3, 2, 2))
    value.backward()
    assert value.item() == 1.0 and torch.isfinite(black.grad).all()  # no direction: orthogonal, not NaN
    with pytest.raises(ValueError, match='at least 2 channels'):
        CosineLoss()(torch.rand(1, 1, 2, 2), torch.rand(1, 1, 2, 2))


def test_ncc_loss_is_one_minus_numpys_correlation_coefficient_per_image_and_channel():
    x, y = _pair(2, 3, 10, 6, seed=7, noise=0.5)
    a, b = x.double().numpy(), y.double().numpy()
    r = [np.corrcoef(a[i, c].ravel(), b[i, c].ravel())[0, 1] for i in range(2) for c in range(3)]
    assert NCCLoss()(x, y).item() == pytest.approx(1 - np.mean(r), rel=1e-5)
    assert NCCLoss()(x, 3 * x + 0.2).item() == pytest.approx(0.0, abs=1e-6)  # gain and offset: no loss
    assert NCCLoss()(x, 1 - x).item() == pytest.approx(2.0, abs=1e-6)  # inverted
    flat = torch.full((1, 1, 4, 4), 0.5, requires_grad=True)
    value = NCCLoss()(flat, torch.rand(1, 1, 4, 4))
    value.backward()
    assert value.item() == 1.0 and torch.isfinite(flat.grad).all()  # no correlation, not NaN


# --- MS-SSIM + L1 ------------------------------------------------------------------------------------------

def test_msssim_l1_is_zhaos_mix_of_pytorch_msssims_index_and_the_l1():
    pm = need_module('pytorch_msssim')
    x, y = _pair(2, 3, 176, 192, seed=8)  # even at every scale: pytorch_msssim pools odd sizes otherwise
    theirs = 1 - pm.ms_ssim(x, y, data_range=1.0, size_average=True).item()
    l1 = (x - y).abs().mean().item()
    assert MSSSIML1Loss()(x, y).item() == pytest.approx(0.84 * theirs + 0.16 * l1, abs=5e-6)
    assert MSSSIML1Loss(0.5)(x, y).item() == pytest.approx(0.5 * theirs + 0.5 * l1, abs=5e-6)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert MSSSIML1Loss()(x, y).dtype == torch.float32


# --- contextual loss ------------------------------------------------------------------------------------------

def _numpy_cx(fx, fy, h):
    """-log CX for one image's features (C, N each), Mechrez et al.'s equations one after the other."""
    mu = fy.mean(axis=1, keepdims=True)
    x, y = fx - mu, fy - mu
    x = x / np.maximum(np.linalg.norm(x, axis=0, keepdims=True), 1e-12)
    y = y / np.maximum(np.linalg.norm(y, axis=0, keepdims=True), 1e-12)
    n = x.shape[1]
    d = np.maximum(np.array([[1 - x[:, i] @ y[:, j] for j in range(n)] for i in range(n)]), 0)
    rel = d / (d.min(axis=1, keepdims=True) + 1e-5)
    w = np.exp((1 - rel) / h)
    cx = w / w.sum(axis=1, keepdims=True)
    return -np.log(cx.max(axis=0).mean())


def test_contextual_loss_of_feature_maps_is_mechrez_et_als_formula_in_numpy():
    g = torch.Generator().manual_seed(9)
    fx, fy = torch.randn(2, 16, 5, 6, generator=g), torch.randn(2, 16, 5, 6, generator=g)
    for h in (0.5, 0.1):
        ours = contextual_loss(fx, fy, h).double().numpy()
        theirs = [_numpy_cx(a.reshape(16, -1), b.reshape(16, -1), h) for a, b in zip(fx.double().numpy(),
                                                                                     fy.double().numpy())]
        assert np.allclose(ours, theirs, rtol=1e-4)


def test_contextual_loss_compares_sets_the_order_of_the_target_features_does_not_matter():
    g = torch.Generator().manual_seed(10)
    fx, fy = torch.randn(1, 8, 4, 4, generator=g), torch.randn(1, 8, 4, 4, generator=g)
    shuffled = fy.flatten(2)[..., torch.randperm(16, generator=g)].view(1, 8, 4, 4)
    assert contextual_loss(fx, shuffled, 0.5).item() == pytest.approx(contextual_loss(fx, fy, 0.5).item(), rel=1e-5)
    assert contextual_loss(fy, shuffled, 0.5).item() < 1e-3  # the same features, anywhere: no loss
    assert contextual_loss(fx, fy, 0.5).item() > 0.1


def test_contextual_loss_on_images_runs_the_perceptual_vgg19_at_its_layers():
    torch.manual_seed(0)
    loss = ContextualLoss([2, 7], [1.0, 0.5], 0.5, 'random')
    assert [i for i, _ in enumerate(loss.vgg.features)][-1] == 7 and loss.vgg.layers == [2, 7]
    x, y = _pair(2, 3, 16, 16, seed=11)
    fx, fy = loss.vgg(x), loss.vgg(y)
    expected = sum(w * np.mean([_numpy_cx(a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1), 0.5)
                                for a, b in zip(f.double().numpy(), t.double().numpy())])
                   for w, f, t in zip([1.0, 0.5], fx, fy))
    assert loss(x, y).item() == pytest.approx(expected, rel=1e-4)
    gray = x[:, :1]
    assert loss(gray, gray).item() < 1e-3  # gray repeated to RGB


# --- options and training --------------------------------------------------------------------------------------

def _train(**given):
    return validate({'task': 't', 'netG': {'net_type': 'dncnn'}, 'train': given}, option_rules())['train']


def test_each_recipe_loss_is_a_registered_name_with_its_own_prefixed_keys():
    t = _train(G_lossfn_type='color', G_color_space='lab')
    assert t['G_color_space'] == 'lab'
    assert _train(G_lossfn_type='msssim_l1')['G_msssim_l1_alpha'] == 0.84
    assert _train(G_extra_losses={'gradient_variance': 0.1})['G_gv_patch_size'] == 8
    t = _train(G_extra_losses={'contextual': 0.1})
    assert (t['G_cx_layers'], t['G_cx_weights'], t['G_cx_band_width'], t['G_cx_pretrained_path']) == (
        [12, 21], 1.0, 0.5, None)
    for bad, message in [({'G_color_space': 'hsv'}, 'G_color_space: .* must be "ycbcr" or "lab"'),
                         ({'G_msssim_l1_alpha': 1.5}, 'G_msssim_l1_alpha: .* must be in \\[0, 1\\]'),
                         ({'G_gv_patch_size': 1}, 'G_gv_patch_size: .* must be >= 2'),
                         ({'G_cx_band_width': 0}, 'G_cx_band_width: .* must be > 0')]:
        with pytest.raises(OptionsError, match=message):
            _train(G_extra_losses={'color': 1, 'msssim_l1': 1, 'gradient_variance': 1, 'contextual': 1}, **bad)


def test_vgg_layers_out_of_order_are_refused_when_the_options_are_read_not_when_the_loss_is_built():
    """The contextual and the perceptual loss take their VGG19 layers in increasing order, each once: one labelled
    check of both (losses/perceptual.py `vgg_layers`) says so before anything is built."""
    for layers in ([21, 12], [12, 12]):
        with pytest.raises(OptionsError, match=r'train\.G_cx_layers: \[.*\] must be a VGG19 layer index or a list of '
                                               r'them in increasing order \(e\.g\. \[12, 21\]: conv3_2, conv4_2\)$'):
            _train(G_extra_losses={'contextual': 1}, G_cx_layers=layers)
    assert _train(G_extra_losses={'contextual': 1}, G_cx_layers=21)['G_cx_layers'] == 21


def test_a_plain_model_trains_with_every_recipe_loss_and_logs_each_term(tmp_path, demo_images):
    torch.manual_seed(0)
    extra = {name: 0.5 for name in RECIPE_LOSSES if name != 'msssim_l1'}  # MS-SSIM needs 161x161 patches
    opt = validate(tiny_options(str(tmp_path / 'exp'), demo_images, G_extra_losses=extra,
                                G_cx_pretrained_path='random', G_cx_layers=[2]), option_rules())
    steps_and_logs_each_extra_loss(ModelPlain(opt, torch.device('cpu')), 1, 0.5)


def steps_and_logs_each_extra_loss(model, step, weight):
    """One training step of `model` (every G_extra_losses weight `weight`) on a random 24x24 batch: each extra
    loss is logged on its own as its weighted value on netG's output, and every weight of netG moves."""
    g = torch.Generator().manual_seed(0)
    batch = {'L': torch.rand(4, 3, 24, 24, generator=g), 'H': torch.rand(4, 3, 24, 24, generator=g)}
    with torch.no_grad():
        out = copy.deepcopy(model.net_g).train()(batch['L'])
    expected = {f'l_g_{name}': weight * loss(out, batch['H']).item() for name, loss in
                ((n, m.base) for n, m in model.extra_losses.items())}
    before = [p.detach().clone() for p in model.net_g.parameters()]
    loss = model.backward([batch])
    model.step(step, loss)
    logged = model.log_losses()
    assert set(logged) == {'G_loss', 'l_g_pix', *expected}
    for key, value in expected.items():
        assert np.isfinite(logged[key]) and logged[key] == pytest.approx(value, rel=1e-4), key
    assert all(not torch.equal(a, b) for a, b in zip(before, model.net_g.parameters()))
