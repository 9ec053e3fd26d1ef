"""The community trainers' 2026 losses (issue 45) against independent computations: the wavelet loss against
PyWavelets' Haar transform, the Oklab and CIE L* consistency losses against colour-science's conversions and
OpenCV's blur, MS-SWD against numpy/scipy with colour-science's Lab, the structure-texture loss against OpenCV's
Sobel and resize around torchvision's VGG19; then that each trains a toy under fp32 and bf16 autocast, that
MS-SWD's directions are the same on every rank and after a resume, their keys, and a plain model with all of
them in G_extra_losses."""
import copy
import functools
import math

import cv2
import numpy as np
import pytest
import torch

from conftest import need_module, run_main, tiny_options, write_options
from losses.color_consistency import LStarConsistencyLoss, OklabConsistencyLoss, rgb_to_oklab
from losses.color import rgb_to_lstar
from losses.ms_swd import MSSWDLoss
from losses.registry import LOSSES
from losses.structure_texture import StructureTextureLoss
from losses.wavelet import WaveletLoss, haar
from models.model_plain import ModelPlain
from option_rules import option_rules
from tests.test_losses_recipes import _hwc, _pair, steps_and_logs_each_extra_loss
from utils.errors import OptionsError, UserError
from utils.options import validate

NEW_LOSSES = ('wavelet', 'oklab_consistency', 'lstar_consistency', 'ms_swd', 'structure_texture')
CPU = torch.device('cpu')


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Small tensors: one intra-op thread (conftest's `one_thread`)."""


# --- wavelet ------------------------------------------------------------------------------------------------

def test_the_haar_bands_are_pywavelets_dwt2_coefficients_at_every_level_odd_sizes_included():
    pywt = need_module('pywt')
    x = torch.rand(2, 3, 13, 18, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ours = haar(x, 3)
    for i in range(2):
        for c in range(3):
            theirs = pywt.wavedec2(x[i, c].numpy(), 'haar', mode='symmetric', level=3)  # [cA3, (cH3, cV3, cD3), ...]
            assert np.allclose(ours[-1][0][i, c].numpy(), theirs[0], atol=1e-12)
            for level, details in zip((2, 1, 0), theirs[1:]):
                for band, coeffs in zip(ours[level][1:], details):
                    assert np.allclose(band[i, c].numpy(), coeffs, atol=1e-12)


def test_the_wavelet_loss_is_the_weighted_l1_of_pywavelets_sub_bands_of_each_image():
    pywt = need_module('pywt')
    x, y = _pair(2, 3, 20, 24, seed=2)
    weights = [0.5, 1.0, 2.0, 3.0]

    def expected(levels):
        terms = np.zeros((levels, 4))  # per level: |ΔLL| (used at the last only), |ΔLH|, |ΔHL|, |ΔHH|
        for a, b in zip(x.double().numpy().reshape(-1, 20, 24), y.double().numpy().reshape(-1, 20, 24)):
            ca, cb = pywt.wavedec2(a, 'haar', level=levels), pywt.wavedec2(b, 'haar', level=levels)
            terms[-1, 0] += np.abs(ca[0] - cb[0]).mean()
            for k, (da, db) in enumerate(zip(ca[1:], cb[1:])):  # coarsest first
                terms[levels - 1 - k, 1:] += [np.abs(p - q).mean() for p, q in zip(da, db)]
        terms /= 6  # the mean over the 6 images x channels (every band of a level has the same size)
        return weights[0] * terms[-1, 0] + sum(w * terms[:, j].sum() for j, w in enumerate(weights[1:], 1))
    for levels in (1, 2):
        assert WaveletLoss(levels, weights)(x, y).item() == pytest.approx(expected(levels), rel=1e-5)
    video = torch.stack([x, y], 1)  # N, T, C, H, W: frames as images
    assert WaveletLoss(2, weights)(video, video.flip(1)).item() == pytest.approx(expected(2), rel=1e-5)
    assert WaveletLoss()(x, x).item() == 0.0
    detail_only = WaveletLoss(2, [0, 1, 1, 1])
    assert detail_only(x, x + 0.3).item() == pytest.approx(0.0, abs=1e-6)  # a brightness shift is all LL
    with pytest.raises(ValueError, match=r'G_wavelet_levels 3 halves the image 3 times; 6x8 is too small'):
        WaveletLoss(3)(torch.rand(1, 3, 6, 8), torch.rand(1, 3, 6, 8))


# --- Oklab and CIE L* consistency ------------------------------------------------------------------------------

def _colour():
    colour = need_module('colour')
    return colour, colour.CCS_ILLUMINANTS['CIE 1931 2 Degree Standard Observer']['D65']


def test_oklab_and_cie_lstar_of_srgb_are_colour_sciences():
    colour, d65 = _colour()
    rgb = torch.rand(3, 9, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    xyz = colour.sRGB_to_XYZ(_hwc(rgb))
    assert np.abs(_hwc(rgb_to_oklab(rgb)) - colour.XYZ_to_Oklab(xyz)).max() < 3e-4
    assert np.abs(rgb_to_lstar(rgb)[0].numpy() - colour.XYZ_to_Lab(xyz, d65)[..., 0]).max() < 0.02
    white = rgb_to_oklab(torch.ones(3, 1, 1, dtype=torch.float64)).flatten()
    assert white.tolist() == pytest.approx([1.0, 0.0, 0.0], abs=1e-6)  # Ottosson's matrices map white to L 1, a = b = 0


def _blur_pool(plane, sigma, k):
    """OpenCV's Gaussian blur (reflect-101 borders, 2 ceil(3 sigma) + 1 taps), then k x k means."""
    r = math.ceil(3 * sigma)
    out = cv2.GaussianBlur(plane, (2 * r + 1, 2 * r + 1), sigma, borderType=cv2.BORDER_REFLECT_101)
    h, w = (out.shape[0] // k) * k, (out.shape[1] // k) * k
    return out[:h, :w].reshape(h // k, k, w // k, k).mean((1, 3))


@pytest.mark.parametrize('sigma, k', [(3.0, 1), (1.5, 2)])
def test_the_consistency_losses_compare_the_blurred_oklab_chroma_and_cie_lstar_as_colour_science_converts(sigma, k):
    colour, d65 = _colour()
    x, y = _pair(2, 3, 26, 22, seed=4)
    y = (y * torch.tensor([1.1, 1.0, 0.85]).view(3, 1, 1)).clamp(0, 1)  # a colour cast beside the noise
    ab, lstar = [], []
    for a, b in zip(x, y):
        oa, ob = (colour.XYZ_to_Oklab(colour.sRGB_to_XYZ(_hwc(t))) for t in (a, b))
        pa, pb = ([_blur_pool(np.ascontiguousarray(o[..., c]), sigma, k) for c in (1, 2)] for o in (oa, ob))
        ab.append(np.sqrt((pa[0] - pb[0]) ** 2 + (pa[1] - pb[1]) ** 2 + 1e-12).mean())
        la, lb = (_blur_pool(np.ascontiguousarray(colour.XYZ_to_Lab(colour.sRGB_to_XYZ(_hwc(t)), d65)[..., 0]),
                             sigma, k) for t in (a, b))
        lstar.append(np.abs(la - lb).mean() / 100)
    assert OklabConsistencyLoss(sigma, k)(x, y).item() == pytest.approx(np.mean(ab), rel=5e-3)
    assert LStarConsistencyLoss(sigma, k)(x, y).item() == pytest.approx(np.mean(lstar), rel=5e-3)


def test_oklab_consistency_ignores_brightness_lstar_sees_it_and_both_keep_finite_gradients_everywhere():
    gray = torch.full((1, 3, 12, 12), 0.3)
    assert OklabConsistencyLoss()(gray, gray + 0.4).item() < 1e-5  # a brighter gray: no chroma either way
    assert LStarConsistencyLoss()(gray, gray + 0.4).item() > 0.2
    cast = gray * torch.tensor([1.2, 1.0, 0.8]).view(3, 1, 1)
    assert OklabConsistencyLoss()(gray, cast).item() > 0.02
    for loss in (OklabConsistencyLoss(1.0), LStarConsistencyLoss(1.0)):
        x = torch.tensor([-0.2, 0.0, 0.02, 0.5, 1.0, 1.3]).view(1, 3, 2, 1).repeat(1, 1, 4, 8).requires_grad_(True)
        loss(x, torch.rand(1, 3, 8, 8)).backward()  # black, out-of-range and identical pixels
        assert torch.isfinite(x.grad).all(), type(loss).__name__
        x.grad = None
        loss(x, x.detach()).backward()
        assert torch.isfinite(x.grad).all()
    with pytest.raises(ValueError, match=r'G_consistency_blur 3 blurs 9 pixels each side, more than an image of 8x8'):
        OklabConsistencyLoss()(torch.rand(1, 3, 8, 8), torch.rand(1, 3, 8, 8))
    with pytest.raises(ValueError, match='compares the colour of RGB images'):
        LStarConsistencyLoss()(torch.rand(1, 1, 16, 16), torch.rand(1, 1, 16, 16))


# --- MS-SWD --------------------------------------------------------------------------------------------------

def _numpy_ms_swd(x, y, directions, colour, d65):
    """He et al.'s MS-SWD / 100 per image, in numpy and scipy: pyramid, Lab, patches, projections, sorted L1."""
    ndimage = need_module('scipy.ndimage')
    taps = np.array([1, 4, 6, 4, 1]) / 16.0
    scales, _, _, k, _ = directions.shape
    out = []
    for a, b in zip(x.double().numpy(), y.double().numpy()):
        total = 0.0
        for s in range(scales):
            pa, pb = (colour.XYZ_to_Lab(colour.sRGB_to_XYZ(t.transpose(1, 2, 0)), d65).transpose(2, 0, 1)
                      for t in (a, b))
            proj = []
            for lab in (pa, pb):
                padded = np.pad(lab, ((0, 0), (k // 2, k // 2), (k // 2, k // 2)), mode='reflect')
                patches = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(1, 2))  # C, H, W, k, k
                vectors = patches.transpose(1, 2, 0, 3, 4).reshape(-1, 3 * k * k)  # pixel, (C, k, k)
                proj.append(np.sort(vectors @ directions[s].reshape(len(directions[s]), -1).double().numpy().T, axis=0))
            total += np.abs(proj[0] - proj[1]).mean()
            # next level: the binomial filter with mirrored borders, every second pixel
            a, b = (ndimage.convolve1d(ndimage.convolve1d(t, taps, axis=1, mode='mirror'), taps, axis=2,
                                       mode='mirror')[:, ::2, ::2] for t in (a, b))
        out.append(total / scales / 100)
    return np.mean(out)


@pytest.mark.parametrize('scales, patch, projections', [(3, 3, 24), (2, 1, 8)])
def test_ms_swd_is_the_papers_definition_in_numpy_with_colour_sciences_lab(scales, patch, projections):
    colour, d65 = _colour()
    x, y = _pair(2, 3, 28, 24, seed=5, noise=0.15)
    loss = MSSWDLoss(scales, projections, patch)
    loss.set_iteration(11)
    d = loss.directions(CPU)
    assert d.shape == (scales, projections, 3, patch, patch)
    assert torch.allclose(d.flatten(2).norm(dim=2), torch.ones(scales, projections))
    assert loss(x, y).item() == pytest.approx(_numpy_ms_swd(x, y, d, colour, d65), rel=2e-3)


def test_ms_swd_compares_distributions_pixel_order_does_not_matter_at_one_scale_of_pixel_colours():
    x, y = _pair(1, 3, 16, 16, seed=6, noise=0.3)
    loss = MSSWDLoss(1, 32, 1)
    shuffled = y.flatten(2)[..., torch.randperm(256, generator=torch.Generator().manual_seed(0))].view_as(y)
    assert loss(x, shuffled).item() == pytest.approx(loss(x, y).item(), rel=1e-5)
    assert loss(y, shuffled).item() == pytest.approx(0.0, abs=1e-6)
    assert loss(x, y).item() > 0.01
    assert MSSWDLoss()(x.repeat(1, 1, 6, 6), x.repeat(1, 1, 6, 6)).item() == 0.0
    with pytest.raises(ValueError, match=r'G_swd_scales 5 and G_swd_patch_size 11 need a larger image than 64x64 \(its '
                                         r'level 5 is 4 pixels a side, the patches need 6\)'):
        MSSWDLoss()(torch.rand(1, 3, 64, 64), torch.rand(1, 3, 64, 64))


def test_ms_swd_directions_come_from_the_seed_and_the_iteration_alone():
    """The same directions in every process that reaches iteration k (a rank, a resumed run), for every call within
    it (micro-batches), new ones at the next iteration; the batch mean over ranks is the whole batch's loss."""
    straight, resumed = MSSWDLoss(2, 16, 3, swd_seed=3), MSSWDLoss(2, 16, 3, swd_seed=3)
    for step in range(5):
        straight.set_iteration(step)
        straight.directions(CPU)
    resumed.set_iteration(4)
    first = straight.directions(CPU)
    assert torch.equal(resumed.directions(CPU), first) and straight.directions(CPU) is first
    straight.set_iteration(5)
    assert not torch.equal(straight.directions(CPU), first)
    other = MSSWDLoss(2, 16, 3, swd_seed=4)
    other.set_iteration(4)
    assert not torch.equal(other.directions(CPU), first)
    x, y = _pair(4, 3, 20, 20, seed=7)
    halves = (resumed(x[:2], y[:2]) + resumed(x[2:], y[2:])) / 2
    assert halves.item() == pytest.approx(resumed(x, y).item(), rel=1e-6)  # 2 ranks x 2 images = 1 rank x 4


# --- structure-texture ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _structure_texture():
    """One loss for the tests that only call it (building a random VGG19 takes seconds); frozen, so shared."""
    torch.manual_seed(0)
    return StructureTextureLoss([2, 7, 16], [0.1, 0.5, 1.0], 0.7, 1.3, 0.2, 'random')


def test_the_structure_texture_loss_is_traiNNer_reduxs_definition_around_torchvisions_vgg19():
    loss = _structure_texture()
    vgg = copy.deepcopy(loss.vgg.features)  # torchvision's VGG19 layers with the same random weights, run here
    x, y = _pair(2, 3, 32, 40, seed=8)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)

    def features(t):
        out, h = [], (t - mean) / std
        for i, layer in enumerate(vgg):
            h = layer(h.clone())  # torchvision's ReLUs work in place: keep each conv output as it was
            if i in (2, 7, 16):
                out.append(h.clone().double().numpy())
        return out
    with torch.no_grad():
        fx, fy = features(x), features(y)
    expected = 0.0
    kx = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]]) / 4.0
    for i in range(2):
        img, gt = _hwc(x[i]), _hwc(y[i])
        luma = gt @ np.array([0.299, 0.587, 0.114])
        gx = cv2.filter2D(luma, cv2.CV_64F, kx, borderType=cv2.BORDER_CONSTANT)
        gy = cv2.filter2D(luma, cv2.CV_64F, kx.T, borderType=cv2.BORDER_CONSTANT)
        mag = np.sqrt(gx ** 2 + gy ** 2 + 1e-8)
        w_s = 0.2 + 0.8 * mag / (mag.max() + 1e-8)
        structure = (w_s[..., None] * np.sqrt((img - gt) ** 2 + 1e-12)).mean()
        texture = 0.0
        for weight, a, b in zip([0.1, 0.5, 1.0], fx, fy):
            w_t = cv2.resize((1 - w_s).astype(np.float32), a.shape[-1:-3:-1], interpolation=cv2.INTER_LINEAR)
            texture += weight * (w_t * np.abs(a[i] - b[i]).mean(0)).mean()
        expected += (0.7 * structure + 1.3 * texture) / 2  # the per-image means: every image has the same size
    assert loss(x, y).item() == pytest.approx(expected, rel=1e-4)
    flat = torch.full((1, 3, 16, 16), 0.5)
    assert StructureTextureLoss(st_pretrained_path='random')(flat + 0.1, flat).item() > 0  # no edge: floor x pixel


def test_structure_weights_are_one_at_the_strongest_edge_and_the_floor_where_the_target_is_flat():
    from losses.structure_texture import structure_weight
    step = torch.zeros(1, 3, 8, 8)
    step[..., 4:] = 1.0
    w = structure_weight(step, 0.1)[0, 0]
    assert w.max().item() == pytest.approx(1.0, abs=1e-6) and w[:, 1].tolist() == pytest.approx([0.1] * 8, abs=1e-4)
    pixel_only = StructureTextureLoss(st_perceptual_weight=0.0)
    assert pixel_only.vgg is None  # no VGG19 built when its term is off
    x = torch.rand(1, 3, 8, 8, requires_grad=True)
    pixel_only(x, step).backward()
    assert torch.isfinite(x.grad).all()


# --- training: a toy, fp32 and bf16 autocast ------------------------------------------------------------------

def _make(name):
    if name == 'structure_texture':
        return _structure_texture()
    kw = {'ms_swd': dict(swd_scales=2, swd_projections=16, swd_patch_size=3)}
    return LOSSES.get(name, 'test')(**kw.get(name, {}))


@pytest.mark.parametrize('name', NEW_LOSSES)
@pytest.mark.parametrize('amp', [False, True], ids=['fp32', 'bf16'])
def test_each_new_loss_trains_a_toy_network_toward_its_target(name, amp):
    """A 1x1 convolution (a colour transform) fitted to undo a colour cast and a brightness change with the loss
    alone, 16 Adam steps (under bf16 autocast too, the loss computing in float32 inside): the loss falls by half."""
    loss = _make(name)
    g = torch.Generator().manual_seed(1)
    target = 0.05 + 0.6 * torch.rand(2, 3, 32, 32, generator=g)
    degraded = target * torch.tensor([0.6, 0.9, 1.3]).view(3, 1, 1) + 0.1  # invertible by the convolution
    net = torch.nn.Conv2d(3, 3, 1)
    with torch.no_grad():
        net.weight.copy_(torch.eye(3).view(3, 3, 1, 1))
        net.bias.zero_()
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    values = []
    for step in range(16):
        if hasattr(loss, 'set_iteration'):
            loss.set_iteration(step)
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=amp):
            value = loss(net(degraded), target)
        assert value.dtype == torch.float32
        opt.zero_grad()
        value.backward()
        opt.step()
        values.append(value.item())
    assert all(math.isfinite(v) for v in values) and np.mean(values[-3:]) < 0.5 * values[0], values


# --- options and the model ------------------------------------------------------------------------------------

def _train(**given):
    return validate({'task': 't', 'netG': {'net_type': 'dncnn'}, 'train': given}, option_rules())['train']


def test_each_new_loss_is_a_registered_name_with_its_own_prefixed_keys():
    t = _train(G_extra_losses={name: 1.0 for name in NEW_LOSSES})
    assert (t['G_wavelet_levels'], t['G_wavelet_weights']) == (2, [1.0, 1.0, 1.0, 1.0])
    assert (t['G_consistency_blur'], t['G_consistency_downscale']) == (3.0, 1)
    assert (t['G_swd_scales'], t['G_swd_projections'], t['G_swd_patch_size'], t['G_swd_seed']) == (5, 128, 11, 0)
    assert (t['G_st_layers'], t['G_st_layer_weights'], t['G_st_floor']) == ([2, 7, 16, 25, 34], [0.1, 0.1, 1.0, 1.0,
                                                                                               1.0], 0.1)
    for bad, message in [({'G_wavelet_weights': [1, 1, 1]}, r'G_wavelet_weights: .* must be four numbers >= 0'),
                         ({'G_wavelet_levels': 0}, r'G_wavelet_levels: .* must be >= 1'),
                         ({'G_consistency_blur': -1}, r'G_consistency_blur: .* must be >= 0'),
                         ({'G_consistency_downscale': 0}, r'G_consistency_downscale: .* must be >= 1'),
                         ({'G_swd_patch_size': 4}, r'G_swd_patch_size: .* must be an odd integer >= 1'),
                         ({'G_swd_projections': 0}, r'G_swd_projections: .* must be >= 1'),
                         ({'G_st_floor': 1.5}, r'G_st_floor: .* must be in \[0, 1\]'),
                         ({'G_st_layers': [7, 2]}, r'G_st_layers: .* in increasing order')]:
        with pytest.raises(OptionsError, match=message):
            _train(G_extra_losses={name: 1.0 for name in NEW_LOSSES}, **bad)
    with pytest.raises(UserError, match=r'^train\.G_st_layer_weights: 2 weights for 5 G_st_layers entries$'):
        StructureTextureLoss(st_layer_weights=[1, 1], st_pretrained_path='random')


def _options(tmp_path, demo_images, losses=NEW_LOSSES, **train):
    extra = {name: 0.5 for name in losses}
    return tiny_options(str(tmp_path / 'exp'), demo_images, G_extra_losses=extra, G_swd_scales=2, G_swd_patch_size=3,
                        G_swd_projections=16, G_consistency_blur=1.0, G_st_pretrained_path='random',
                        G_st_layers=[2, 7], G_st_layer_weights=[1.0, 1.0], **train)


def test_a_plain_model_trains_with_every_new_loss_and_logs_each_term(tmp_path, demo_images):
    torch.manual_seed(0)
    model = ModelPlain(validate(_options(tmp_path, demo_images), option_rules()), CPU)
    model.end_iteration(5)  # what the loop says before the first iteration of a run resumed at 5
    assert model.extra_losses['ms_swd'].base.step == 5
    steps_and_logs_each_extra_loss(model, 6, 0.5)


def test_an_ms_swd_that_cannot_take_the_training_patch_is_one_line_naming_its_key(tmp_path, demo_images):
    model = ModelPlain(validate(tiny_options(str(tmp_path / 'exp'), demo_images, G_extra_losses={'ms_swd': 1}),
                                option_rules()), CPU)
    sample = {'L': torch.rand(3, 24, 24), 'H': torch.rand(3, 24, 24)}
    with pytest.raises(UserError, match=r"^train\.G_extra_losses\.ms_swd cannot take netG's output \(3, 24, 24\) for a "
                                        r"sample of datasets\.train: G_swd_scales 5 and G_swd_patch_size 11 need a "
                                        r"larger image than 24x24"):
        model.check_sample(sample, 'datasets.train')


def test_a_run_with_the_new_losses_and_wsd_resumed_midway_is_bitwise_identical_to_a_straight_one(tmp_path,
                                                                                                 demo_images):
    """Through main_train: MS-SWD's directions, the wsd schedule and the other losses continue exactly after a
    resume (the directions of iteration k are drawn from the seed and k, not from a state the resume lost; the
    structure-texture loss, deterministic, is left out: it builds a VGG19 in each of the three runs)."""
    from tests.test_resume import _assert_same_run_state, _models
    run = dict(total_iter=6, checkpoint_save=3, checkpoint_test=100, checkpoint_print=3, G_scheduler_type='wsd',
               G_scheduler_warmup_iter=1, G_scheduler_decay_ratio=0.5, G_scheduler_total_iter=6)
    a = _options(tmp_path, demo_images, [n for n in NEW_LOSSES if n != 'structure_texture'], **run)
    a['task'] = 'straight'
    b = dict(a, task='resumed')
    pa, pb = write_options(str(tmp_path / 'a.json'), a), write_options(str(tmp_path / 'b.json'), b)
    assert run_main('main_train', ['--opt', pa]).returncode == 0
    assert run_main('main_train', ['--opt', pb, '--set', 'train.total_iter=3']).returncode == 0
    second = run_main('main_train', ['--opt', pb])
    assert second.returncode == 0, second.stderr[-2000:]
    assert 'resumed from' in second.stdout
    _assert_same_run_state(_models(tmp_path, 'straight'), _models(tmp_path, 'resumed'), 6)
