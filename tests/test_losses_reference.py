"""The new losses against independent computations on fixed tensors: the focal frequency loss against its
authors' package and a numpy DFT, MS-SSIM against pytorch_msssim and a numpy version of Wang's definition,
the luma losses against metrics/fidelity.rgb2y, the hinge loss and LDL's artifact map against loops, the summed
Charbonnier loss against numpy."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from numpy.lib.stride_tricks import sliding_window_view

from conftest import need_module
from losses.adversarial import GANLoss
from losses.frequency import FocalFrequencyLoss
from losses.ldl import artifact_map, ldl_loss
from losses.luma import rgb_to_y
from losses.msssim import MIN_SIZE, MSSSIMLoss
from losses.registry import LOSSES
from metrics.fidelity import rgb2y


def _pair(*shape, seed=0, noise=0.2):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(*shape, generator=g)
    return x, (x + noise * torch.randn(*shape, generator=g)).clamp(0, 1)


# --- focal frequency loss (Jiang et al. 2021) --------------------------------------------------------------

FFL_CASES = [{}, {'alpha': 0.0}, {'alpha': 2.0}, {'patch_factor': 2}, {'ave_spectrum': True},
             {'log_matrix': True}, {'batch_matrix': True}, {'patch_factor': 4, 'log_matrix': True, 'alpha': 0.5}]


@pytest.mark.parametrize('kw', FFL_CASES, ids=lambda kw: '-'.join(f'{k}={v}' for k, v in kw.items()) or 'defaults')
def test_focal_frequency_loss_is_the_authors_value_and_gradient(kw):
    ffl = need_module('focal_frequency_loss')
    x, y = _pair(2, 3, 16, 24)
    x.requires_grad_(True)
    ours = FocalFrequencyLoss(**{f'fft_{k}': v for k, v in kw.items()})(x, y)
    theirs_x = x.detach().clone().requires_grad_(True)
    theirs = ffl.FocalFrequencyLoss(**kw)(theirs_x, y)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    ours.backward()
    theirs.backward()
    assert torch.allclose(x.grad, theirs_x.grad, rtol=1e-5, atol=1e-10)


def _numpy_ffl(x, y, alpha, p):
    """The paper's formula with numpy's FFT, one spectrum (image, channel, patch) at a time."""
    n, c, h, w = x.shape
    values = []
    for i in range(n):
        for ch in range(c):
            for r in range(p):
                for s in range(p):
                    cut = (i, ch, slice(r * h // p, (r + 1) * h // p), slice(s * w // p, (s + 1) * w // p))
                    d = np.abs(np.fft.fft2(x[cut], norm='ortho') - np.fft.fft2(y[cut], norm='ortho'))
                    weight = d ** alpha
                    values.append((weight / weight.max() * d ** 2).mean())
    return float(np.mean(values))


@pytest.mark.parametrize('alpha, p', [(1.0, 1), (1.0, 2), (0.5, 4)])
def test_focal_frequency_loss_is_the_papers_formula_on_numpys_fft(alpha, p):
    x, y = _pair(2, 3, 16, 16, seed=1)
    ours = FocalFrequencyLoss(fft_alpha=alpha, fft_patch_factor=p)(x, y).item()
    assert ours == pytest.approx(_numpy_ffl(x.double().numpy(), y.double().numpy(), alpha, p), rel=1e-5)


def test_alpha_zero_is_the_plain_frequency_l2_loss_which_parseval_makes_the_pixel_mse():
    x, y = _pair(2, 3, 20, 12, seed=2)
    loss = FocalFrequencyLoss(fft_alpha=0.0)
    assert loss(x, y).item() == pytest.approx(F.mse_loss(x, y).item(), rel=1e-5)
    assert loss(x, x).item() == 0.0
    assert FocalFrequencyLoss()(x, x).item() == 0.0  # identical spectra: weight 0/0 is 0, not NaN


def test_frequency_l1_loss_is_the_mean_absolute_real_and_imaginary_difference_of_numpys_rfft2():
    """SAFMN's and FFTformer's FFT loss: rfft2 per image and channel, unnormalised, L1 over (real, imag)."""
    x, y = _pair(2, 3, 20, 13, seed=4)
    diff = np.fft.rfft2(x.double().numpy()) - np.fft.rfft2(y.double().numpy())
    expected = np.mean(np.stack([np.abs(diff.real), np.abs(diff.imag)]))
    loss = LOSSES.get('fft_l1', 'test')()
    assert loss(x, y).item() == pytest.approx(expected, rel=1e-5)
    assert loss(x, x).item() == 0.0
    with torch.autocast('cpu', dtype=torch.bfloat16):
        value = loss(x.bfloat16(), y.bfloat16())
    assert value.dtype == torch.float32 and value.item() == pytest.approx(
        float(np.mean(np.abs(torch.view_as_real(torch.fft.rfft2(x.bfloat16().float())
                                                - torch.fft.rfft2(y.bfloat16().float())).numpy()))), rel=1e-5)


def test_psnr_loss_is_minus_the_mean_psnr_of_the_images_as_nafnet_trains():
    x, y = _pair(3, 3, 8, 8, seed=5)
    x[1] = y[1] + 0.001  # a nearly perfect image counts as much as the others, not by its tiny MSE
    mse = ((x.double().numpy() - y.double().numpy()) ** 2).reshape(3, -1).mean(axis=1)
    loss = LOSSES.get('psnr', 'test')()
    assert loss(x, y).item() == pytest.approx(float(np.mean(10 * np.log10(mse + 1e-8))), rel=1e-5)
    x.requires_grad_(True)
    loss(x, y).backward()
    assert torch.isfinite(x.grad).all() and x.grad[1].abs().mean() > x.grad[0].abs().mean()


def test_focal_frequency_loss_is_float32_under_autocast_and_refuses_a_patch_factor_not_dividing_the_size():
    x, y = _pair(1, 3, 16, 16, seed=3)
    loss = FocalFrequencyLoss()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        value = loss(x.bfloat16(), y.bfloat16())
    assert value.dtype == torch.float32
    assert value.item() == pytest.approx(loss(x.bfloat16().float(), y.bfloat16().float()).item(), rel=1e-6)
    with pytest.raises(ValueError, match=r'fft_patch_factor 3 must divide the image size, got 16x16'):
        FocalFrequencyLoss(fft_patch_factor=3)(x, y)


# --- MS-SSIM (Wang, Simoncelli, Bovik 2003) ----------------------------------------------------------------

def _numpy_msssim(x, y):
    """Wang's definition in float64 with a 2-D window: cs at every scale, luminance at the coarsest, 2x2
    means between scales (an odd last row/column paired with itself, as his MATLAB code does)."""
    weights = [0.0448, 0.2856, 0.3001, 0.2363, 0.1333]
    g = np.exp(-((np.arange(11) - 5) ** 2) / (2 * 1.5 ** 2))
    win = np.outer(g, g) / np.outer(g, g).sum()
    c1, c2 = 0.01 ** 2, 0.03 ** 2

    def filt(a):
        return np.tensordot(sliding_window_view(a, (11, 11)), win, axes=([-2, -1], [0, 1]))

    def down(a):
        a = np.pad(a, ((0, a.shape[0] % 2), (0, a.shape[1] % 2)), mode='edge')
        return (a[0::2, 0::2] + a[1::2, 0::2] + a[0::2, 1::2] + a[1::2, 1::2]) / 4

    out = np.ones(x.shape[:2])
    for i in range(x.shape[0]):
        for c in range(x.shape[1]):
            a, b = x[i, c], y[i, c]
            for j, wj in enumerate(weights):
                mu_a, mu_b = filt(a), filt(b)
                var_a, var_b = filt(a * a) - mu_a ** 2, filt(b * b) - mu_b ** 2
                cov = filt(a * b) - mu_a * mu_b
                cs = (2 * cov + c2) / (var_a + var_b + c2)
                if j < 4:
                    out[i, c] *= max(cs.mean(), 0) ** wj
                    a, b = down(a), down(b)
                else:
                    lum = (2 * mu_a * mu_b + c1) / (mu_a ** 2 + mu_b ** 2 + c1)
                    out[i, c] *= max((lum * cs).mean(), 0) ** wj
    return 1 - out.mean()


def test_msssim_loss_is_one_minus_pytorch_msssims_index_with_its_gradient():
    pm = need_module('pytorch_msssim')
    x, y = _pair(2, 3, 176, 192, seed=4)
    x.requires_grad_(True)
    ours = MSSSIMLoss()(x, y)
    theirs_x = x.detach().clone().requires_grad_(True)
    theirs = 1 - pm.ms_ssim(theirs_x, y, data_range=1.0, size_average=True)
    assert ours.item() == pytest.approx(theirs.item(), abs=5e-6)  # float32 roundings of the variances
    ours.backward()
    theirs.backward()
    assert torch.allclose(x.grad, theirs_x.grad, rtol=1e-3, atol=1e-3 * theirs_x.grad.abs().max().item())


@pytest.mark.parametrize('size', [(176, 176), (165, 171)], ids=['even', 'odd'])
def test_msssim_loss_is_wangs_definition_computed_in_numpy(size):
    x, y = _pair(1, 2, *size, seed=5, noise=0.1)
    assert MSSSIMLoss()(x, y).item() == pytest.approx(_numpy_msssim(x.double().numpy(), y.double().numpy()),
                                                      abs=1e-5)


def test_msssim_is_zero_for_identical_images_and_refuses_an_image_too_small_for_five_scales():
    x, _ = _pair(1, 3, MIN_SIZE, MIN_SIZE, seed=6)
    assert MIN_SIZE == 161 and abs(MSSSIMLoss()(x, x).item()) < 1e-6
    with pytest.raises(ValueError, match=r"MS-SSIM's 5 scales of an 11x11 window need images of at least "
                                         r'161x161, got 96x160'):
        MSSSIMLoss()(x[..., :96, :160], x[..., :96, :160])


def test_msssim_loss_is_float32_under_autocast():
    x, y = _pair(1, 3, 176, 176, seed=7)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        value = MSSSIMLoss()(x, y)
    assert value.dtype == torch.float32
    assert value.item() == pytest.approx(MSSSIMLoss()(x, y).item(), abs=1e-7)


# --- luma losses ---------------------------------------------------------------------------------------------

def _y(t):
    """metrics/fidelity.rgb2y of each image ([0, 255] RGB -> [16, 235] luma), scaled back to [0, 1]."""
    return np.stack([rgb2y(img.transpose(1, 2, 0) * 255.0) / 255.0 for img in t.double().numpy()])


def test_luma_losses_compare_the_bt601_luma_that_the_metrics_score():
    x, y = _pair(2, 3, 8, 10, seed=8)
    yx, yy = _y(x), _y(y)
    assert np.allclose(rgb_to_y(x)[:, 0].double().numpy(), yx, atol=1e-6)
    l1_y = LOSSES.get('l1_y', 'test')()
    assert l1_y(x, y).item() == pytest.approx(np.abs(yx - yy).mean(), rel=1e-5)
    eps = 1e-3
    charbonnier_y = LOSSES.get('charbonnier_y', 'test')(charbonnier_eps=eps)
    assert charbonnier_y(x, y).item() == pytest.approx(np.sqrt((yx - yy) ** 2 + eps).mean(), rel=1e-5)
    assert LOSSES.options('charbonnier_y', 'test').keys() == LOSSES.options('charbonnier', 'test').keys()


def test_luma_losses_pass_gray_images_through_and_take_video_batches():
    x, y = _pair(2, 1, 8, 8, seed=9)
    assert LOSSES.get('l1_y', 'test')()(x, y).item() == pytest.approx(F.l1_loss(x, y).item(), rel=1e-6)
    v, w = _pair(2, 4, 3, 8, 8, seed=10)  # N, T, C, H, W
    frames = LOSSES.get('l1_y', 'test')()(v.flatten(0, 1), w.flatten(0, 1))
    assert LOSSES.get('l1_y', 'test')()(v, w).item() == pytest.approx(frames.item(), rel=1e-6)
    with pytest.raises(ValueError, match='RGB \\(3 channels\\) or gray \\(1 channel\\) images, got 4 channels'):
        rgb_to_y(torch.zeros(1, 4, 8, 8))


# --- hinge loss ----------------------------------------------------------------------------------------------

def test_hinge_loss_has_margins_for_d_and_none_for_g():
    pred = torch.tensor([[-2.0], [0.5], [3.0]])
    hinge = GANLoss('hinge')
    assert hinge(pred, True, is_disc=True).item() == pytest.approx((3.0 + 0.5 + 0.0) / 3)  # relu(1 - x)
    assert hinge(pred, False, is_disc=True).item() == pytest.approx((0.0 + 1.5 + 4.0) / 3)  # relu(1 + x)
    assert hinge(pred, True).item() == pytest.approx(-(-2.0 + 0.5 + 3.0) / 3)  # G: -mean D(fake)


# --- LDL's artifact map (Liang et al. 2022) ------------------------------------------------------------------

def _loop_artifact_map(sr, ema, hr):
    """Pixel by pixel: sample variance of the channel-summed residual in the reflect-padded 7x7 window, times
    the image's residual variance ** (1/5), zero where the EMA output's residual is the larger."""
    out = np.zeros((sr.shape[0], 1) + sr.shape[2:])
    for i in range(sr.shape[0]):
        r = np.abs(hr[i] - sr[i]).sum(0)
        r_ema = np.abs(hr[i] - ema[i]).sum(0)
        padded = np.pad(r, 3, mode='reflect')
        patch = r.var(ddof=1) ** (1 / 5)
        for a in range(r.shape[0]):
            for b in range(r.shape[1]):
                if r_ema[a, b] <= r[a, b]:
                    out[i, 0, a, b] = padded[a:a + 7, b:b + 7].var(ddof=1) * patch
    return out


def test_ldl_artifact_map_and_loss_match_a_pixel_loop():
    g = torch.Generator().manual_seed(11)
    # values on a 1/64 grid: residuals are exact in float32, so the EMA comparison is the same in both
    hr, sr, ema = (torch.randint(0, 65, (2, 3, 10, 12), generator=g).float() / 64 for _ in range(3))
    expected = _loop_artifact_map(sr.double().numpy(), ema.double().numpy(), hr.double().numpy())
    m = artifact_map(sr, ema, hr)
    assert m.shape == (2, 1, 10, 12) and (m == 0).any() and (m > 0).any()
    assert np.allclose(m.double().numpy(), expected, rtol=1e-4, atol=1e-6)
    sr.requires_grad_(True)
    loss = ldl_loss(sr, ema, hr)
    assert loss.item() == pytest.approx(np.abs(expected * (sr.detach().double().numpy() - hr.double().numpy())).mean(),
                                        rel=1e-4)
    grad, = torch.autograd.grad(loss, sr)  # the map is a weight: d/dSR of mean |M (SR - HR)| = M sign(SR - HR) / n
    expected_grad = torch.from_numpy(expected).float() * torch.sign(sr.detach() - hr) / sr.numel()
    assert torch.allclose(grad, expected_grad, rtol=1e-4, atol=1e-9)
    assert math.isclose(ldl_loss(hr, ema, hr).item(), 0.0, abs_tol=0.0)


def test_charbonnier_sum_is_the_sum_over_every_pixel_as_basicsrs_reduction_sum():
    x, y = _pair(2, 3, 8, 8)
    eps = 1e-12
    total = LOSSES.get('charbonnier_sum', 'test')(charbonnier_eps=eps)(x, y)
    expected = np.sqrt((x.double().numpy() - y.double().numpy()) ** 2 + eps).sum()
    assert total.item() == pytest.approx(expected, rel=1e-5)
    mean = LOSSES.get('charbonnier', 'test')(charbonnier_eps=eps)(x, y)
    assert total.item() == pytest.approx(mean.item() * x.numel(), rel=1e-5)
    assert LOSSES.options('charbonnier_sum', 'test').keys() == LOSSES.options('charbonnier', 'test').keys()
