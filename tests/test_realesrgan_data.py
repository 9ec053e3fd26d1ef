"""Real-ESRGAN's degradations: the `realesrgan` dataset draws every choice on the CPU from the sample's seed,
the model's device step (data/degradations/batch_transforms.py) runs them; the kernels and the torch JPEG they use."""
import glob
import json
import math
import os

import cv2
import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from conftest import ROOT, assert_frequencies, dataset_options, train_two_processes
from data.datasets.realesrgan import DatasetRealESRGAN
from data.degradations import batch_transforms
from data.degradations import kernels as kn
from data.degradations import realesrgan as rd
from data.degradations.bsrgan import usm_sharpen as usm_sharpen_cv2
from data.degradations.diffjpeg import CHROMA_TABLE, LUMA_TABLE, dct_matrix, jpeg, scaled_table
from data.registry import build_dataset
from data.sampler import ResumableDistributedSampler, TrainKey
from utils.errors import UserError
from utils.image import images_to_float

# pytest-xdist keeps this module on one worker: its generated images are made once for the module
pytestmark = pytest.mark.xdist_group('test_realesrgan_data')

SMALL = dict(scale=4, gt_size=48, crop_pad_size=96)


@pytest.fixture(scope='module')
def folder(tmp_path_factory):
    """Five smooth colour images, one smaller than crop_pad_size (it is padded)."""
    root = tmp_path_factory.mktemp('realesrgan') / 'H'
    root.mkdir()
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate([(100, 110), (120, 100), (96, 96), (130, 140), (60, 90)]):
        noise = rng.integers(0, 256, (h, w, 3)).astype(np.uint8)
        cv2.imwrite(str(root / f'{i:03d}.png'), cv2.GaussianBlur(noise, (0, 0), 2.0))
    return str(root)


def _ds(folder, phase='train', **kw):
    return build_dataset(dataset_options('realesrgan', phase, dataroot_H=folder, **{**SMALL, **kw}))


def _device_batch(ds, keys):
    """The items of `keys` collated and through the device step, as the model's to_device does on the CPU."""
    return batch_transforms.apply(images_to_float(default_collate([ds[TrainKey(*k)] for k in keys])))


# ---- kernels ----------------------------------------------------------------------------------------

def test_bessel_j1_matches_tabulated_values():
    # Abramowitz & Stegun, table 9.1, and the first zero of J1
    x = np.array([0.0, 1.0, 2.0, 5.0, 10.0, 3.8317059702075125, 40.0])
    expected = [0.0, 0.4400505857449335, 0.5767248077568734, -0.3275791375914652, 0.04347274616886144, 0.0,
                0.12603831803758863]
    np.testing.assert_allclose(kn.bessel_j1(x), expected, atol=1e-13)


def test_generalized_gaussian_and_plateau_kernels_with_beta_one_are_what_their_formulas_say():
    cov = kn.covariance(0.4, 4.0, 1.5)
    np.testing.assert_allclose(kn.generalized_gaussian_kernel(15, cov, 1.0), kn.gaussian_kernel(15, cov), atol=1e-15)
    heavy, flat = kn.generalized_gaussian_kernel(15, cov, 0.5), kn.generalized_gaussian_kernel(15, cov, 3.0)
    assert heavy[0, 0] > kn.gaussian_kernel(15, cov)[0, 0] > flat[0, 0]  # tails: β < 1 heavier, β > 1 lighter
    plateau = kn.plateau_kernel(15, np.eye(2) * 4.0, 2.0)
    d2 = ((np.mgrid[0:15, 0:15] - 7) ** 2).sum(0) / 4.0
    np.testing.assert_allclose(plateau, (1 / (1 + d2 ** 2)) / (1 / (1 + d2 ** 2)).sum(), atol=1e-15)


def test_the_sinc_kernel_passes_frequencies_below_its_cutoff_and_stops_those_above():
    k = kn.circular_lowpass_kernel(21, math.pi / 2)
    assert k.sum() == pytest.approx(1.0) and k.min() < 0  # ringing lobes
    np.testing.assert_allclose(k, k.T, atol=1e-15)
    np.testing.assert_allclose(k, k[::-1, ::-1], atol=1e-15)
    response = np.abs(np.fft.fft2(k, (256, 256)))
    freq = np.fft.fftfreq(256) * 2 * math.pi
    radius = np.hypot(*np.meshgrid(freq, freq))
    # a 21-tap truncation ripples (Gibbs) but keeps the pass band and the stop band apart
    assert response[radius < 0.35 * math.pi].min() > 0.8
    assert response[radius > 0.65 * math.pi].max() < 0.1


def test_kernels_are_padded_in_the_centre_and_the_pulse_is_the_identity():
    k = kn.isotropic_gaussian(7, 1.0)
    padded = kn.pad_kernel(k, 21)
    assert padded.shape == (21, 21) and np.array_equal(padded[7:14, 7:14], k) and padded.sum() == pytest.approx(1)
    x = torch.rand(1, 3, 30, 30)
    assert torch.equal(rd.filter2d(x, torch.from_numpy(kn.pulse_kernel(21)).float()), x)


def test_the_device_blur_is_opencvs_reflect_101_convolution():
    img = np.random.default_rng(1).random((40, 36, 3)).astype(np.float32)
    k = kn.anisotropic_gaussian(21, 0.7, 5.0, 1.0)
    ours = rd.filter2d(torch.from_numpy(img.transpose(2, 0, 1))[None], torch.from_numpy(k).float())
    ref = cv2.filter2D(img, -1, k.astype(np.float32), borderType=cv2.BORDER_REFLECT_101)
    np.testing.assert_allclose(ours[0].numpy().transpose(1, 2, 0), ref, atol=1e-5)


def test_the_device_usm_sharpening_is_the_opencv_one():
    img = np.clip(np.random.default_rng(2).random((64, 72, 3)).astype(np.float32) * 0.3 + 0.3, 0, 1)
    img[:, 36:] += 0.3
    ours = rd.usm_sharpen(torch.from_numpy(img.transpose(2, 0, 1)).unsqueeze(0))[0].numpy().transpose(1, 2, 0)
    np.testing.assert_allclose(ours, usm_sharpen_cv2(img), atol=2e-5)


# ---- JPEG -------------------------------------------------------------------------------------------

def test_the_dct_is_orthonormal_and_the_tables_follow_the_ijg_quality_scaling():
    d = dct_matrix()
    np.testing.assert_allclose(d @ d.T, np.eye(8), atol=1e-12)
    assert np.array_equal(scaled_table(LUMA_TABLE, 50), LUMA_TABLE)
    assert np.array_equal(scaled_table(CHROMA_TABLE, 100), np.ones((8, 8)))
    assert scaled_table(LUMA_TABLE, 10)[7, 7] == 255  # 99 x 5 clipped to the baseline maximum
    assert scaled_table(LUMA_TABLE, 75)[0, 0] == 8  # floor((16 x 50 + 50) / 100)


def _psnr(a, b):
    return 10 * np.log10(255.0 ** 2 / np.mean((a.astype(np.float64) - b) ** 2))


@pytest.mark.parametrize('quality', [30, 60, 90])
def test_the_torch_jpeg_is_close_to_opencvs_encoder_and_decoder(quality):
    """Same tables and subsampling; the decoders differ in chroma upsampling and integer arithmetic."""
    noise = np.random.default_rng(3).integers(0, 256, (56, 72, 3)).astype(np.uint8)  # not a multiple of 16
    img = cv2.GaussianBlur(noise, (0, 0), 2.0)
    ok, buf = cv2.imencode('.jpg', img[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
    ref = cv2.imdecode(buf, cv2.IMREAD_COLOR)[:, :, ::-1]
    ours = jpeg(torch.from_numpy(img.transpose(2, 0, 1).copy()).float()[None] / 255, quality)[0]
    ours = ours.numpy().transpose(1, 2, 0) * 255
    assert _psnr(ours, ref) > 36
    assert abs(_psnr(ours, img) - _psnr(ref, img)) < 2.5  # as much damage as the real codec


def test_jpeg_damage_falls_with_quality_each_image_gets_its_own_and_the_soft_rounding_has_gradients():
    img = torch.from_numpy(cv2.GaussianBlur(np.random.default_rng(4).random((32, 32, 3)).astype(np.float32),
                                            (0, 0), 1.0).transpose(2, 0, 1).copy())[None]
    errors = [(jpeg(img, q) - img).abs().mean().item() for q in (20, 50, 80, 100)]
    assert errors == sorted(errors, reverse=True)
    gray = img.mean(1, keepdim=True).expand(1, 3, 32, 32)  # no chroma to subsample: only the rounding is lost
    assert (jpeg(gray, 100) - gray).abs().max() < 1.5 / 255
    both = jpeg(torch.cat([img, img]), [20, 80])
    assert torch.equal(both[0], jpeg(img, 20)[0]) and torch.equal(both[1], jpeg(img, 80)[0])
    x = img.clone().requires_grad_(True)
    jpeg(x, 50, differentiable=True).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


# ---- the dataset ------------------------------------------------------------------------------------

def test_an_item_is_the_uint8_gt_crop_with_its_kernels_and_plan_and_the_device_step_makes_the_pair(folder):
    ds = _ds(folder)
    assert isinstance(ds, DatasetRealESRGAN)
    item = ds[TrainKey(0, 7)]
    assert item['H'].dtype == torch.uint8 and item['H'].shape == (3, 96, 96)
    assert {k: tuple(item[k].shape) for k in rd.KERNEL_KEYS} == {k: (21, 21) for k in rd.KERNEL_KEYS}
    assert item[batch_transforms.TRANSFORM_KEY] == 'realesrgan' and json.loads(item[rd.PLAN_KEY])['scale'] == 4
    out = _device_batch(ds, [(0, 7), (4, 8)])  # 004.png (60x90) is padded to 96x96
    assert out['L'].shape == (2, 3, 12, 12) and out['H'].shape == (2, 3, 48, 48)
    assert out['L'].dtype == torch.float32 and 0 <= out['L'].min() and out['L'].max() <= 1
    assert torch.equal((out['L'] * 255).round() / 255, out['L'])  # 8-bit like a saved image
    assert set(out) == {'L', 'H', 'H_pixel', 'H_perceptual', 'L_path', 'H_path'}  # BasicSR: no USM GT for the GAN
    # the GT patch is the item's crop at 4x the LR patch position
    plan = json.loads(item[rd.PLAN_KEY])
    t, l = plan['top'] * 4, plan['left'] * 4
    assert torch.equal(out['H'][0], item['H'][:, t:t + 48, l:l + 48].float() / 255)
    assert torch.equal(out['H_pixel'], out['H_perceptual']) and not torch.equal(out['H_pixel'], out['H'])


DEGRADATIONS_OFF = dict(kernel_list=['iso'], kernel_prob=[1], blur_sigma=[0.05, 0.05], kernel_list2=['iso'],
                        kernel_prob2=[1], sinc_prob=0, second_blur_prob=0, final_sinc_prob=0, resize_prob=[0, 0, 1],
                        resize_prob2=[0, 0, 1], gaussian_noise_prob=1, noise_range=[0, 0], gaussian_noise_prob2=1,
                        noise_range2=[0, 0], jpeg_range=[100, 100], jpeg_range2=[100, 100])


def _gray_image_folder(tmp_path):
    """A gray image (JPEG at quality 100 then loses only rounding) with structure at the LR pixel scale."""
    (tmp_path / 'H').mkdir()
    noise = np.random.default_rng(5).random((96, 96))
    gray = cv2.GaussianBlur(noise, (0, 0), 3.0)
    gray = np.round((gray - gray.min()) / np.ptp(gray) * 255).astype(np.uint8)
    cv2.imwrite(str(tmp_path / 'H' / 'gray.png'), np.repeat(gray[:, :, None], 3, 2))
    return str(tmp_path / 'H')


def _downscaled(full, plan):
    mode = plan['stage2']['mode']
    return torch.nn.functional.interpolate(full, size=(24, 24), mode=mode,
                                           **({} if mode == 'area' else {'align_corners': False}))


def test_with_every_degradation_off_the_lr_patch_is_the_gt_patch_downscaled_at_the_same_place(tmp_path):
    ds = _ds(_gray_image_folder(tmp_path), **DEGRADATIONS_OFF, gt_usm=False)
    for seed in range(6):
        item, out = ds[TrainKey(0, seed)], _device_batch(ds, [(0, seed)])
        plan = json.loads(item[rd.PLAN_KEY])
        t, l = plan['top'], plan['left']
        small = _downscaled(item['H'][None].float() / 255, plan)
        error = (out['L'][0] - small[0, :, t:t + 12, l:l + 12]).abs().mean().item()
        assert error < 1.5 / 255  # JPEG's rounding and the final 8 bits
        shift = 1 if l == 0 else -1
        assert (out['L'][0] - small[0, :, t:t + 12, l + shift:l + shift + 12]).abs().mean().item() > 3 * error


def test_the_degradations_start_from_the_sharpened_gt_as_real_esrgan_does(tmp_path):
    """Real-ESRGAN blurs its USM-sharpened GT first (Real-ESRNet too, with gt_usm): so does gt_usm, by default;
    the GT patch of the batch stays the plain one."""
    ds = _ds(_gray_image_folder(tmp_path), **DEGRADATIONS_OFF)
    for seed in range(3):
        item, out = ds[TrainKey(0, seed)], _device_batch(ds, [(0, seed)])
        plan = json.loads(item[rd.PLAN_KEY])
        t, l = plan['top'], plan['left']
        full = item['H'][None].float() / 255
        from_sharp = _downscaled(rd.usm_sharpen(full), plan)[0, :, t:t + 12, l:l + 12]
        from_plain = _downscaled(full, plan)[0, :, t:t + 12, l:l + 12]
        error = (out['L'][0] - from_sharp).abs().mean().item()
        assert error < 1.5 / 255 and (out['L'][0] - from_plain).abs().mean().item() > 2 * error
        assert torch.equal(out['H'][0], full[0, :, t * 4:(t + 12) * 4, l * 4:(l + 12) * 4])


def test_the_usm_keys_choose_which_losses_get_the_sharpened_gt(folder):
    ds = _ds(folder, l1_gt_usm=False, percep_gt_usm=False, gan_gt_usm=True)
    out = _device_batch(ds, [(1, 3)])
    assert set(out) == {'L', 'H', 'H_gan', 'L_path', 'H_path'}
    assert batch_transforms.target(out, 'pixel') is out['H'] and batch_transforms.target(out, 'gan') is out['H_gan']
    none = _device_batch(_ds(folder, l1_gt_usm=False, percep_gt_usm=False), [(1, 3)])
    assert set(none) == {'L', 'H', 'L_path', 'H_path'}


def test_a_sample_is_fixed_by_its_seed_alone_whatever_its_batch(folder):
    ds = _ds(folder)
    keys = [(0, 11), (1, 12), (2, 13), (3, 14)]
    together = _device_batch(ds, keys)
    alone = [_device_batch(ds, [k]) for k in keys]
    for i, one in enumerate(alone):
        assert torch.equal(together['L'][i], one['L'][0]) and torch.equal(together['H'][i], one['H'][0])
    assert not torch.equal(together['L'][0], _device_batch(ds, [(0, 99)])['L'][0])


def test_two_ranks_of_batch_b_make_the_samples_of_one_rank_of_batch_2b(folder):
    ds = _ds(folder)

    def first_batch(world, rank, batch):
        sampler = ResumableDistributedSampler(ds, num_replicas=world, rank=rank, seed=5)
        keys = list(sampler)[:batch]
        out = _device_batch(ds, keys)
        return {tuple(k): out['L'][i] for i, k in enumerate(keys)}

    one = first_batch(1, 0, 4)
    two = {**first_batch(2, 0, 2), **first_batch(2, 1, 2)}
    assert set(one) == set(two) and len(one) == 4
    assert all(torch.equal(one[k], two[k]) for k in one)


def test_batches_do_not_depend_on_the_number_of_loader_workers(folder):
    from data.loader import build_train_loader
    ds = _ds(folder)
    section = {**dataset_options('realesrgan', dataroot_H=folder, **SMALL), 'dataloader_batch_size': 2,
               'dataloader_num_workers': 0, 'dataloader_persistent_workers': False}
    pairs = {}
    for workers in (0, 2):
        loader, _ = build_train_loader(ds, {**section, 'dataloader_num_workers': workers}, world_size=1, rank=0,
                                       seed=3, device=torch.device('cpu'))
        pairs[workers] = [batch_transforms.apply(images_to_float(b)) for b in loader]
    assert len(pairs[0]) == 2
    assert all(torch.equal(a['L'], b['L']) and torch.equal(a['H'], b['H']) for a, b in zip(pairs[0], pairs[2]))


def test_the_device_step_runs_in_float32_under_autocast_and_gives_the_same_pair(folder):
    ds = _ds(folder)
    batch = images_to_float(default_collate([ds[TrainKey(2, 21)]]))
    plain = batch_transforms.apply(dict(batch))
    with torch.autocast('cpu', dtype=torch.bfloat16):
        mixed = batch_transforms.apply(dict(batch))
    assert mixed['L'].dtype == torch.float32 and torch.equal(mixed['L'], plain['L'])


def test_noise_of_a_stage_has_the_planned_strength_and_gray_noise_is_the_same_in_every_channel():
    flat = torch.full((1, 3, 128, 128), 0.5)
    stage = {'noise': 'gaussian', 'level': 10.0, 'gray': False, 'seed': 3}
    noise = rd.add_noise(flat, stage) - flat
    assert noise.std().item() == pytest.approx(10 / 255, rel=0.05)
    assert not torch.equal(noise[0, 0], noise[0, 1])
    gray = rd.add_noise(flat, {**stage, 'gray': True}) - flat
    assert torch.equal(gray[0, 0], gray[0, 1]) and torch.equal(gray[0, 1], gray[0, 2])
    assert torch.equal(rd.add_noise(flat, stage), rd.add_noise(flat, stage))
    # poisson: 2 grey levels -> counts at a peak of 2, so the shot noise of 0.5 is (Poisson(1) - 1) / 2, scaled
    two_levels = torch.cat([torch.full((1, 3, 64, 128), 0.0), torch.full((1, 3, 64, 128), 0.5)], 2)
    shot = rd.add_noise(two_levels, {'noise': 'poisson', 'level': 0.1, 'gray': False, 'seed': 4}) - two_levels
    assert torch.all(shot[:, :, :64] == 0)  # no photons, no noise (and clipping keeps it at 0)
    assert shot[:, :, 64:].std().item() == pytest.approx(0.1 * 0.5, rel=0.1)


def test_realesrgan_only_trains_and_has_no_L_folder(folder):
    with pytest.raises(UserError, match=r'^datasets\.test\.dataset_type: "realesrgan" only trains; evaluate on paired'):
        _ds(folder, 'test')
    with pytest.raises(UserError, match=r'datasets\.train\.dataroot_L: .* must be null: realesrgan makes L from H on the device'):
        _ds(folder, dataroot_L=folder)


@pytest.mark.parametrize('key, value, message', [
    ('kernel_prob', [0.5, 0.6, 0, 0, 0, 0], 'must be probabilities >= 0 that sum to 1'),
    ('kernel_list', ['iso', 'gaussian'], 'must be a list of distinct kernel kinds from iso, aniso'),
    ('resize_prob2', [0.5, 0.5], 'must be 3 probabilities >= 0 that sum to 1 (up, down, keep)'),
    ('resize_range', [0.5, 0.9], 'must be [min, max] with 0 < min <= 1 <= max'),
    ('noise_range2', [30, 1], 'must be [min, max] with 0 <= min <= max <= 255'),
    ('jpeg_range', [0, 95], 'must be [min, max] with 1 <= min <= max <= 100'),
    ('blur_kernel_size2', 20, 'must be an odd size >= 7'),
    ('second_blur_prob', 1.5, 'must be a probability from 0 to 1'),
    ('n_channels', 1, 'must be 3: the Real-ESRGAN degradations are colour'),
])
def test_impossible_values_are_one_line_errors_naming_the_key(folder, key, value, message):
    with pytest.raises(UserError) as e:
        _ds(folder, **{key: value})
    assert f'datasets.train.{key}: ' in str(e.value) and message in str(e.value) and '\n' not in str(e.value)


@pytest.mark.parametrize('kw, key, message', [
    (dict(kernel_prob2=[0.5, 0.5]), 'kernel_prob2', '2 probabilities for the 6 kernels of kernel_list2'),
    (dict(gt_size=50), 'gt_size', '50 is not divisible by scale 4'),
    (dict(crop_pad_size=40), 'crop_pad_size', '40 must be >= gt_size 48'),
    (dict(crop_pad_size=24, gt_size=24, resize_range=[1, 1]), 'crop_pad_size',
     '24 is too small for the first blur and the GT sharpening'),
    (dict(resize_range=[0.1, 1.5]), 'resize_range', 'gives 9 pixels, too few for the second blur'),
    (dict(crop_pad_size=80, gt_size=40, blur_kernel_size2=41, resize_range=[0.5, 1]), 'crop_pad_size',
     'the LR image (20 pixels at scale 4) is too small for the final sinc filter'),
])
def test_sizes_too_small_for_the_filters_are_named_at_start_up(folder, kw, key, message):
    with pytest.raises(UserError) as e:
        _ds(folder, **kw)
    assert str(e.value).startswith(f'datasets.train.{key}: ') and message in str(e.value)


def test_an_image_smaller_than_gt_size_is_named_at_start_up(folder):
    with pytest.raises(UserError, match=r'004\.png: 60x90 is smaller than gt_size 64'):
        _ds(folder, gt_size=64)


def test_gt_size_takes_height_and_width_and_the_device_step_cuts_such_pairs(folder):
    ds = _ds(folder, gt_size=[32, 64])
    batch = _device_batch(ds, [(0, 1), (1, 2), (3, 3)])
    assert batch['H'].shape == (3, 3, 32, 64) and batch['L'].shape == (3, 3, 8, 16)
    with pytest.raises(UserError, match=r'^datasets\.train\.crop_pad_size: 96 must be >= gt_size \[32, 100\]'):
        _ds(folder, gt_size=[32, 100])
    with pytest.raises(UserError, match=r'^datasets\.train\.gt_size: \[32, 62\] is not divisible by scale 4$'):
        _ds(folder, gt_size=[32, 62])


# ---- frequencies of the random choices --------------------------------------------------------------

N = 2000


def _bool(p):
    return {True: p, False: 1 - p}


def _uniform_in(values, bounds, name):
    """Within the bounds, and spread over them: each quarter holds a quarter of the draws."""
    lo, hi = bounds
    values = np.asarray(values)
    assert values.min() >= lo and values.max() <= hi, name
    assert_frequencies(list(np.minimum(((values - lo) / (hi - lo) * 4).astype(int), 3)), {q: 0.25 for q in range(4)}, name)


# Probabilities unlike the defaults, so that following the options is not following the code's constants.
CHOICES = dict(
    kernel_list=['iso', 'aniso', 'generalized_aniso', 'plateau_iso'], kernel_prob=[0.1, 0.2, 0.3, 0.4],
    kernel_list2=['generalized_iso', 'plateau_aniso'], kernel_prob2=[0.7, 0.3], sinc_prob=0.3, sinc_prob2=0.05,
    blur_kernel_size=15, blur_sigma=[0.5, 2.5], betag_range=[0.4, 3], betap_range=[0.5, 2], final_sinc_prob=0.6,
    resize_prob=[0.5, 0.2, 0.3], resize_range=[0.2, 1.6], resize_prob2=[0.1, 0.6, 0.3], resize_range2=[0.5, 1.2],
    gaussian_noise_prob=0.3, noise_range=[2, 20], poisson_scale_range=[0.1, 2], gray_noise_prob=0.7,
    gaussian_noise_prob2=0.8, noise_range2=[1, 9], gray_noise_prob2=0.2, jpeg_range=[40, 90], jpeg_range2=[60, 70],
    second_blur_prob=0.35)


@pytest.fixture(scope='module')
def record(folder):
    cfg = _ds(folder, **CHOICES).cfg
    rec = {}
    for seed in range(N):
        rd.draw_plan(np.random.default_rng(seed), cfg, rec)
    return rec


def test_the_kernels_follow_the_configured_kinds_sizes_and_ranges(record):
    c = CHOICES
    assert_frequencies(record['kernel1_sinc'], _bool(c['sinc_prob']), 'kernel1_sinc')
    assert_frequencies(record['kernel2_sinc'], _bool(c['sinc_prob2']), 'kernel2_sinc')
    assert_frequencies(record['kernel1_kind'], dict(zip(c['kernel_list'], c['kernel_prob'])), 'kernel1_kind')
    assert_frequencies(record['kernel2_kind'], dict(zip(c['kernel_list2'], c['kernel_prob2'])), 'kernel2_kind')
    assert_frequencies(record['kernel1_size'], {s: 1 / 5 for s in (7, 9, 11, 13, 15)}, 'kernel1_size')
    assert_frequencies(record['kernel2_size'], {s: 1 / 8 for s in range(7, 22, 2)}, 'kernel2_size')
    _uniform_in(record['kernel1_sigma'], c['blur_sigma'], 'kernel1_sigma')
    _uniform_in(record['kernel2_sigma'], [0.2, 1.5], 'kernel2_sigma (default blur_sigma2)')
    _uniform_in(record['kernel1_sigma_y'], c['blur_sigma'], 'kernel1_sigma_y (anisotropic kinds)')
    _uniform_in(record['kernel1_theta'], [-math.pi, math.pi], 'kernel1_theta (anisotropic kinds)')
    anisotropic = sum(kind.endswith('aniso') for kind in record['kernel1_kind'])
    assert len(record['kernel1_theta']) == anisotropic  # isotropic kinds draw no second sigma or angle
    betag = np.array(record['kernel1_betag'])
    assert betag.min() >= 0.4 and betag.max() <= 3
    assert_frequencies(list(betag < 1), _bool(0.5), 'betag below 1')  # half in [low, 1], half in [1, high]
    _uniform_in(betag[betag < 1], [0.4, 1], 'betag below 1')
    betap = np.array(record['kernel1_betap'])
    _uniform_in(betap[betap >= 1], [1, 2], 'betap above 1')
    assert 'kernel2_betag' in record and 'kernel1_betag' in record  # generalized kinds drawn in both stages
    cutoffs = np.array(record['kernel1_cutoff'])
    assert cutoffs.min() >= math.pi / 5 and cutoffs.max() <= math.pi
    assert_frequencies(record['final_sinc'], _bool(c['final_sinc_prob']), 'final_sinc')
    _uniform_in(record['final_sinc_cutoff'], [math.pi / 3, math.pi], 'final_sinc_cutoff')


def test_resizes_noises_jpeg_and_the_final_order_follow_the_configured_probabilities(record):
    c = CHOICES
    modes = {m: 1 / 3 for m in rd.INTERPOLATIONS}
    for suffix in ('', '2'):
        kinds = record[f'resize{suffix}']
        assert_frequencies(kinds, dict(zip(rd.RESIZE_KINDS, c[f'resize_prob{suffix}'])), f'resize{suffix}')
        lo, hi = c[f'resize_range{suffix}']
        scales = np.array(record[f'resize_scale{suffix}'])
        kinds = np.array(kinds)
        _uniform_in(scales[kinds == 'up'], [1, hi], f'up-scales{suffix}')
        _uniform_in(scales[kinds == 'down'], [lo, 1], f'down-scales{suffix}')
        assert np.all(scales[kinds == 'keep'] == 1)
        assert_frequencies(record[f'interpolation{suffix}'], modes, f'interpolation{suffix}')
        assert_frequencies(record[f'gaussian_noise{suffix}'], _bool(c[f'gaussian_noise_prob{suffix}']), f'gaussian{suffix}')
        _uniform_in(record[f'noise_sigma{suffix}'], c[f'noise_range{suffix}'], f'noise_sigma{suffix}')
        assert_frequencies(record[f'gray_noise{suffix}'], _bool(c[f'gray_noise_prob{suffix}']), f'gray_noise{suffix}')
        _uniform_in(record[f'jpeg_quality{suffix}'], c[f'jpeg_range{suffix}'], f'jpeg_quality{suffix}')
    _uniform_in(record['poisson_scale'], c['poisson_scale_range'], 'poisson_scale')
    _uniform_in(record['poisson_scale2'], [0.05, 2.5], 'poisson_scale2 (default)')
    assert_frequencies(record['second_blur'], _bool(c['second_blur_prob']), 'second_blur')
    assert_frequencies(record['sinc_before_jpeg'], _bool(rd.FINAL_SINC_FIRST_PROB), 'sinc_before_jpeg')
    assert_frequencies(record['final_interpolation'], modes, 'final_interpolation')
    for side in ('top', 'left'):  # the LR patch (12 of the 24 LR pixels here) anywhere in the degraded image
        assert_frequencies(record[f'crop_{side}'], {k: 1 / 13 for k in range(13)}, f'crop_{side}')


def test_the_plan_carries_the_choices_to_the_device_step(folder):
    cfg = _ds(folder, **CHOICES).cfg
    rec = {}
    plan, kernels = rd.draw_plan(np.random.default_rng(8), cfg, rec)
    assert plan['stage1']['size'] == int(96 * rec['resize_scale'][0])
    assert plan['stage2']['size'] == int(24 * rec['resize_scale2'][0])
    assert plan['stage2']['blur'] == rec['second_blur'][0] and plan['final']['sinc'] == rec['final_sinc'][0]
    assert plan['stage1']['mode'] == rec['interpolation'][0] and plan['stage2']['jpeg'] == rec['jpeg_quality2'][0]
    assert 0 <= plan['top'] <= 24 - 12 and 0 <= plan['left'] <= 24 - 12
    assert [k.shape for k in kernels] == [(15, 15), (21, 21), (21, 21)]
    assert all(k.sum() == pytest.approx(1.0) for k in kernels)


# ---- through the model ------------------------------------------------------------------------------

def _tiny_model(path, demo_images, tmp_path):
    """A shipped tiny file's model and training set, on the shared demo images."""
    from models.registry import MODELS
    from option_rules import option_rules
    from utils.options import validate
    with open(path) as f:
        text = f.read()
    opt = json.loads(text[text.index('{'):])
    opt['path']['root'] = str(tmp_path / 'exp')
    for phase in ('train', 'test'):
        opt['datasets'][phase]['dataroot_H'] = f'{demo_images}/{phase}'
    opt = validate(opt, option_rules())
    return MODELS.get(opt['model'], 'model')(opt, torch.device('cpu')), build_dataset(opt['datasets']['train'])


def test_the_model_degrades_on_its_device_in_the_sample_check_and_each_loss_takes_its_target(tmp_path, demo_images,
                                                                                             monkeypatch):
    """The GAN stage: L1 and perceptual losses against the sharpened GT, the discriminator on the plain GT."""
    path = os.path.join(ROOT, 'options', 'realesrgan', 'tiny', 'train_realesrgan_srvggnet_x4.json')
    model, ds = _tiny_model(path, demo_images, tmp_path)
    out, batch = model.check_sample(ds[TrainKey(0, 0)], 'datasets.train')
    assert out.shape == batch['H'].shape == (1, 3, 48, 48) and batch['L'].shape == (1, 3, 12, 12)  # the file's gt_size 48
    seen = {}
    monkeypatch.setattr(model.loss_fn, 'forward', lambda E, H: seen.setdefault('pixel', H).mean() * 0 + E.mean())
    real_percep = model.perceptual.forward
    monkeypatch.setattr(model.perceptual, 'forward', lambda E, H: (seen.setdefault('perceptual', H), real_percep(E, H))[1])
    real_d = model.net_D.forward
    monkeypatch.setattr(model.net_D, 'forward', lambda x: (seen.setdefault('d', []).append(x), real_d(x))[1])
    collated = default_collate([ds[TrainKey(i, 10 + i)] for i in range(2)])
    model.backward([collated])
    on_device = model.to_device(collated)
    assert torch.equal(seen['pixel'], on_device['H_pixel']) and torch.equal(seen['perceptual'], on_device['H_perceptual'])
    # D (one module without DDP) sees G's output, then the real images: the plain GT (gan_gt_usm false), then the fake
    assert len(seen['d']) == 3 and torch.equal(seen['d'][1], on_device['H'])
    assert not torch.equal(on_device['H_pixel'], on_device['H'])


def test_ldl_compares_with_the_plain_gt_while_the_pixel_loss_takes_the_sharpened_one(tmp_path, demo_images,
                                                                                     monkeypatch):
    """As LDL's released Real-ESRGAN+LDL model: its artifact map and loss use the plain GT, not l1_gt_usm's."""
    import models.model_gan as model_gan
    path = os.path.join(ROOT, 'options', 'realesrgan', 'tiny', 'train_realesrgan_x4plus_ldl.json')
    model, ds = _tiny_model(path, demo_images, tmp_path)
    seen = {}
    real_ldl = model_gan.ldl_loss
    monkeypatch.setattr(model_gan, 'ldl_loss', lambda E, E_ema, H: real_ldl(E, E_ema, seen.setdefault('ldl', H)))
    collated = default_collate([ds[TrainKey(i, 20 + i)] for i in range(2)])
    model.backward([collated])
    on_device = model.to_device(collated)
    assert torch.equal(seen['ldl'], on_device['H']) and not torch.equal(seen['ldl'], on_device['H_pixel'])


# ---- option files -----------------------------------------------------------------------------------

FILES = sorted(glob.glob(os.path.join(ROOT, 'options', 'realesrgan', '*', '*.json')))
TINY = [p for p in FILES if os.sep + 'tiny' + os.sep in p]


def test_the_realesrgan_option_files_validate_and_carry_the_papers_loss_weights():
    from option_rules import read_options
    names = sorted(os.path.relpath(p, os.path.join(ROOT, 'options', 'realesrgan')) for p in FILES)
    stems = ['train_realesrgan_srvggnet_x4.json', 'train_realesrgan_x4plus.json', 'train_realesrgan_x4plus_ldl.json',
             'train_realesrnet_srvggnet_x4.json', 'train_realesrnet_x4plus.json']
    assert names == [f'full/{s}' for s in stems] + [f'tiny/{s}' for s in stems]
    for path in FILES:
        opt = read_options(path)
        t, train = opt['train'], opt['datasets']['train']
        assert train['dataset_type'] == 'realesrgan' and opt['scale'] == 4 and t['G_lossfn_weight'] == 1.0
        assert opt['datasets']['test']['dataset_type'] == 'sr'
        assert opt['netG']['net_type'] == ('srvggnet' if 'srvggnet' in path else 'esrgan')
        if 'realesrgan_' in os.path.basename(path):
            assert opt['model'] == 'gan' and opt['netD']['net_type'] == 'discriminator_unet'
            assert t['F_feature_layer'] == [2, 7, 16, 25, 34] and t['F_weights'] == [0.1, 0.1, 1, 1, 1]
            assert t['F_lossfn_weight'] == 1.0 and t['gan_type'] == 'gan' and t['D_lossfn_weight'] == 0.1
            assert t['F_pretrained_path'] == ('random' if path in TINY else None)
            assert t['ldl_weight'] == (1.0 if path.endswith('_ldl.json') else 0) and t['E_decay'] > 0
        else:
            assert opt['model'] == 'plain' and train['l1_gt_usm']
        if path not in TINY:
            assert t['E_decay'] == 0.999 and train['gt_size'] == 256 and train['crop_pad_size'] == 400


@pytest.mark.slow
@pytest.mark.parametrize('path', TINY, ids=[os.path.basename(p)[len('train_'):-len('.json')] for p in TINY])
def test_a_tiny_realesrgan_file_trains_as_shipped_with_two_processes(tmp_path, path):
    res, psnr = train_two_processes(path, str(tmp_path / 'exp'), 20)
    assert len(psnr) == 2 and psnr[1] > psnr[0], res.stdout[-3000:]
    if 'realesrgan_' in os.path.basename(path):
        assert 'D_loss' in res.stdout and 'randomly initialised VGG19' in res.stdout
    if path.endswith('_ldl.json'):
        assert 'l_g_ldl' in res.stdout
