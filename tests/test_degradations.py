"""Blur kernels (data/degradations/kernels.py) and BSRGAN's degradation pipelines (data/degradations/bsrgan.py)."""
import math
import random

import cv2
import numpy as np
import pytest

from conftest import assert_frequencies
from data.degradations import bsrgan as dg
from data.degradations import kernels as kn


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _image(size: int = 64, seed: int = 0) -> np.ndarray:
    """A smooth random RGB image in [0, 1] (float32), like a natural H patch."""
    noise = np.random.default_rng(seed).random((size, size, 3)).astype(np.float32)
    return np.clip(cv2.GaussianBlur(noise, (0, 0), 2.0) * 2 - 0.5, 0, 1)


# ---- kernels ----------------------------------------------------------------------------------

@pytest.mark.parametrize('size', [7, 15, 21])
def test_isotropic_gaussians_sum_to_one_and_are_symmetric_about_the_centre(size):
    k = kn.isotropic_gaussian(size, 1.7)
    assert k.shape == (size, size) and k.dtype == np.float64
    assert k.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(k, k[::-1], atol=1e-15)
    np.testing.assert_allclose(k, k[:, ::-1], atol=1e-15)
    np.testing.assert_allclose(k, k.T, atol=1e-15)
    assert np.unravel_index(k.argmax(), k.shape) == (size // 2, size // 2)


@pytest.mark.parametrize('size', [8, 21])
def test_anisotropic_gaussians_are_point_symmetric_centred_and_oriented_by_theta(size):
    k = kn.anisotropic_gaussian(size, math.pi / 6, 4.0, 0.8)
    assert k.shape == (size, size) and k.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(k, k[::-1, ::-1], atol=1e-15)
    assert kn.centroid(k) == pytest.approx(((size - 1) / 2, (size - 1) / 2), abs=1e-9)
    assert not np.allclose(k, k.T)
    cov = kn.covariance(math.pi / 6, 4.0, 0.8)
    values, vectors = np.linalg.eigh(cov)
    np.testing.assert_allclose(values, [0.8, 4.0])
    np.testing.assert_allclose(np.abs(vectors[:, 1]), [math.cos(math.pi / 6), math.sin(math.pi / 6)])


def test_a_gaussian_kernel_on_a_large_grid_has_the_requested_covariance():
    cov = kn.covariance(1.1, 3.0, 1.2)
    k = kn.gaussian_kernel(41, cov)
    y, x = np.mgrid[0:41, 0:41] - 20.0
    second = np.array([[(k * x * x).sum(), (k * x * y).sum()], [(k * x * y).sum(), (k * y * y).sum()]])
    np.testing.assert_allclose(second, cov, atol=1e-6)


@pytest.mark.parametrize('sf', [1, 2, 3, 4])
def test_the_usrnet_kernel_is_symmetric_about_the_anchor_minus_half_of_sf_minus_one(sf):
    k = kn.shifted_anisotropic_gaussian(_rng(sf), sf, size=15)
    assert k.shape == (15, 15) and k.sum() == pytest.approx(1.0, abs=1e-12) and k.dtype == np.float64
    twice_mean = 2 * (15 // 2) - (sf - 1)  # the mean is 7 - (sf-1)/2 in x and y
    for i in range(15):
        for j in range(15):
            mi, mj = twice_mean - i, twice_mean - j
            if 0 <= mi < 15 and 0 <= mj < 15:
                assert k[i, j] == pytest.approx(k[mi, mj], rel=1e-9, abs=1e-18)
    noisy = kn.shifted_anisotropic_gaussian(_rng(sf), sf, size=15, noise_level=0.2)
    assert noisy.sum() == pytest.approx(1.0) and not np.allclose(noisy, k)


@pytest.mark.parametrize('sf', [2, 3, 4])
def test_blur_with_the_shifted_kernel_then_decimation_samples_the_block_centres(sf):
    """On linear ramps every correctly normalised and aligned downscale gives the block means, which is
    what cv2's area downscale computes; without the shift the result is (sf-1)/2 pixels off."""
    n = 96
    y, x = np.mgrid[0:n, 0:n].astype(np.float32)
    ramps = np.stack([x, y, x + 2 * y], axis=2)
    area = cv2.resize(ramps, (n // sf, n // sf), interpolation=cv2.INTER_AREA)
    cov = np.eye(2) * (0.6 * sf) ** 2
    inner = slice(4, n // sf - 4)  # away from the mirrored borders, where the ramp bends
    shifted = dg.convolve(ramps, kn.shifted_gaussian(25, cov, sf))[0::sf, 0::sf]
    np.testing.assert_allclose(shifted[inner, inner], area[inner, inner], atol=1e-3)
    centred = dg.convolve(ramps, kn.gaussian_kernel(25, cov))[0::sf, 0::sf]
    offset = centred[inner, inner] - area[inner, inner]
    np.testing.assert_allclose(offset[..., 0], -(sf - 1) / 2, atol=1e-3)


def test_convolution_is_not_correlation():
    """A kernel with all its mass right of the anchor moves content to the right (true convolution)."""
    img = np.zeros((9, 9, 3), np.float32)
    img[4, 4] = 1
    k = np.zeros((3, 3))
    k[1, 2] = 1
    out = dg.convolve(img, k)
    assert out[4, 5, 0] == 1 and out.sum() == 3


@pytest.mark.parametrize('size', [9, 21, 31])
def test_motion_kernels_are_normalised_nonnegative_trajectories_centred_on_the_anchor(size):
    kernels = [kn.motion_kernel(_rng(s), size) for s in range(20)]
    for k in kernels:
        assert k.shape == (size, size) and k.dtype == np.float64 and k.min() >= 0
        assert k.sum() == pytest.approx(1.0, abs=1e-12)
        assert kn.centroid(k) == pytest.approx(((size - 1) / 2, (size - 1) / 2), abs=1e-9)
        assert (k > 0).sum() >= size // 3  # a path, not a dot
    assert np.array_equal(kernels[3], kn.motion_kernel(_rng(3), size))
    assert not np.array_equal(kernels[3], kernels[4])
    with pytest.raises(ValueError):
        kn.motion_kernel(_rng(), 8)


def test_random_kernels_use_only_the_given_generator():
    random.seed(1)
    np.random.seed(1)
    state, py_state = np.random.get_state(), random.getstate()
    draw = [kn.random_isotropic_gaussian(_rng(5), 11, (0.5, 2)), kn.random_anisotropic_gaussian(_rng(5), 11, (0.5, 6)),
            kn.shifted_anisotropic_gaussian(_rng(5), 3), kn.motion_kernel(_rng(5))]
    assert np.random.get_state()[1].tolist() == state[1].tolist() and random.getstate() == py_state
    np.random.seed(2)
    again = [kn.random_isotropic_gaussian(_rng(5), 11, (0.5, 2)), kn.random_anisotropic_gaussian(_rng(5), 11, (0.5, 6)),
             kn.shifted_anisotropic_gaussian(_rng(5), 3), kn.motion_kernel(_rng(5))]
    assert all(np.array_equal(a, b) for a, b in zip(draw, again))


def test_bsrgan_kernel_sizes_are_the_odd_sizes_7_to_21():
    assert dg.KERNEL_SIZES == (7, 9, 11, 13, 15, 17, 19, 21)


# ---- pipelines --------------------------------------------------------------------------------

def _bsrgan(img, sf, seed, lq=8, **kw):
    return dg.bsrgan(img, sf, _rng(seed), lq, **kw)


def _plus(img, sf, seed, lq=8, **kw):
    return dg.bsrgan_plus(img, sf, _rng(seed), kw.pop('shuffle_prob', 0.5), kw.pop('use_sharp', True), lq, **kw)


@pytest.mark.parametrize('pipeline', [_bsrgan, _plus])
def test_the_same_seed_gives_bit_identical_pairs_and_other_seeds_differ(pipeline):
    img = _image(64)
    L1, H1 = pipeline(img, 4, 123)
    L2, H2 = pipeline(img.copy(), 4, 123)
    assert L1.tobytes() == L2.tobytes() and H1.tobytes() == H2.tobytes()
    others = [pipeline(img, 4, s)[0] for s in range(124, 128)]
    assert all(not np.array_equal(L1, L) for L in others)


@pytest.mark.parametrize('pipeline', [_bsrgan, _plus])
@pytest.mark.parametrize('sf', [1, 2, 3, 4])
def test_L_is_the_lq_patch_and_H_is_sf_times_larger_float32_in_0_1(pipeline, sf):
    img = _image(10 * sf + 3)
    for seed in range(3):
        L, H = pipeline(img, sf, seed, lq=8)
        assert L.shape == (8, 8, 3) and H.shape == (8 * sf, 8 * sf, 3)
        assert L.dtype == np.float32 and H.dtype == np.float32
        assert 0 <= L.min() and L.max() <= 1


@pytest.mark.parametrize('pipeline', [_bsrgan, _plus])
def test_the_H_patch_is_cut_where_the_L_patch_is_in_the_whole_degraded_image(pipeline):
    """The crop is the last draw, so the same seed without a crop gives the whole L it was cut from."""
    sf, lq = 3, 7
    img = _image(60, seed=4)
    sharp = dg.usm_sharpen(img) if pipeline is _plus else img
    for seed in range(4):
        L_all, H_all = pipeline(img, sf, seed, lq=None)
        assert L_all.shape == (20, 20, 3) and np.array_equal(H_all, sharp)
        L, H = pipeline(img, sf, seed, lq=lq)
        top, left = [(t, l) for t in range(0, 60 - lq * sf + 1) for l in range(0, 60 - lq * sf + 1)
                     if np.array_equal(H, sharp[t:t + lq * sf, l:l + lq * sf])][0]
        assert top % sf == 0 and left % sf == 0
        assert np.array_equal(L, L_all[top // sf:top // sf + lq, left // sf:left // sf + lq])


@pytest.mark.parametrize('pipeline, sf, tolerance', [(_bsrgan, 2, 0.3), (_plus, 2, 0.3), (_bsrgan, 4, 0.75),
                                                     (_plus, 4, 0.75)])
def test_L_content_is_aligned_with_H(pipeline, sf, tolerance):
    """A blob's centre in L, mapped to H (LR pixel i ↔ H position sf·i + (sf-1)/2), lands on the blob's
    centre in H, on average over random degradations (tolerance: half the misalignment of a
    decimation that ignores the block centre)."""
    n = 32 * sf
    y, x = np.mgrid[0:n, 0:n].astype(np.float32)
    cx, cy = 0.48 * n, 0.52 * n
    blob = 0.25 + 0.5 * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * (2 * sf) ** 2))
    img = np.repeat(blob[:, :, None], 3, 2).astype(np.float32)
    errors = []
    for seed in range(40):
        L, _ = pipeline(img, sf, seed, lq=None, use_sharp=False) if pipeline is _plus else pipeline(img, sf, seed, lq=None)
        ly, lx = np.mgrid[0:L.shape[0], 0:L.shape[1]] * sf + (sf - 1) / 2
        weight = (L.mean(2) - np.median(L)) * ((np.abs(lx - cx) < 8 * sf) & (np.abs(ly - cy) < 8 * sf))
        errors.append(((weight * lx).sum() / weight.sum() - cx, (weight * ly).sum() / weight.sum() - cy))
    assert np.abs(np.mean(errors, axis=0)).max() < tolerance


@pytest.mark.parametrize('pipeline', [_bsrgan, _plus])
def test_the_pipelines_leave_the_global_random_state_alone(pipeline):
    random.seed(3)
    np.random.seed(3)
    state, py_state = np.random.get_state()[1].tolist(), random.getstate()
    pipeline(_image(32), 2, 0)
    assert np.random.get_state()[1].tolist() == state and random.getstate() == py_state


def test_an_image_too_small_for_the_patch_is_a_value_error():
    with pytest.raises(ValueError, match='too small for an L patch of 16 at scale 4'):
        dg.bsrgan(_image(60), 4, _rng(), 16)
    with pytest.raises(ValueError, match='shuffle_prob'):
        dg.bsrgan_plus(_image(64), 4, _rng(), 1.5)


def test_usm_sharpening_adds_contrast_at_edges_and_leaves_flat_areas():
    img = np.full((64, 160, 3), 0.3, np.float32)
    img[:, 80:] = 0.7
    sharp = dg.usm_sharpen(img)
    assert sharp[10, 78, 0] < 0.29 and sharp[10, 81, 0] > 0.71
    np.testing.assert_allclose(sharp[:, :20], img[:, :20], atol=1e-6)
    np.testing.assert_allclose(sharp[:, -20:], img[:, -20:], atol=1e-6)


# ---- frequencies of the random choices --------------------------------------------------------

N = 2000


def _bool(p):
    return {True: p, False: 1 - p}


def _uniform(values):
    return {v: 1 / len(values) for v in values}


def _records(run):
    record = {}
    tiny = _image(16)
    for seed in range(N):
        run(tiny, seed, record)
    return record


def test_bsrgan_choices_follow_the_configured_probabilities():
    rec = _records(lambda img, seed, record: dg.bsrgan(img, 4, _rng(seed), 2, record=record))
    assert len(rec['halve']) == N and len(rec['blur']) == 2 * N and len(rec['noise_kind']) == N
    assert_frequencies(rec['halve'], _bool(dg.HALVE_PROB), 'halve')
    assert_frequencies(rec['halve_method'], dg.HALVE_METHOD_PROBS, 'halve_method')
    assert_frequencies(rec['blur'], dg.BLUR_KIND_PROBS, 'blur')
    assert_frequencies(rec['kernel_size'], _uniform(dg.KERNEL_SIZES), 'kernel_size')
    assert_frequencies(rec['random_scale'], dg.RANDOM_SCALE_STEP_PROBS, 'random_scale')
    assert_frequencies(rec['interpolation'], dg.INTERPOLATION_PROBS, 'interpolation')
    assert_frequencies(rec['noise_kind'], dg.NOISE_KIND_PROBS, 'noise_kind')
    assert_frequencies(rec['noise_level'], _uniform(range(dg.NOISE_LEVEL_RANGE[0], dg.NOISE_LEVEL_RANGE[1] + 1)), 'noise_level')
    assert_frequencies(rec['jpeg'], _bool(dg.JPEG_PROB), 'jpeg')
    assert_frequencies(rec['camera'], _bool(dg.CAMERA_PROB), 'camera')
    assert len(rec['jpeg_quality']) == N + sum(rec['jpeg'])  # the last JPEG always happens
    lo, hi = dg.JPEG_QUALITY_RANGE
    assert set(rec['jpeg_quality']) == set(range(lo, hi + 1))
    orders = rec['order']
    assert all(o.index('random_scale') < o.index('downscale') for o in orders)
    assert_frequencies([o.index('gaussian_noise') for o in orders], _uniform(range(7)), 'position of gaussian_noise')
    assert_frequencies([o.index('jpeg') for o in orders], _uniform(range(7)), 'position of jpeg')


def test_bsrgan_probabilities_given_as_arguments_are_followed():
    rec = _records(lambda img, seed, record: dg.bsrgan(img, 4, _rng(seed), 2, camera_prob=0.6, jpeg_prob=0.3,
                                                       halve_prob=0.0, record=record))
    assert_frequencies(rec['camera'], _bool(0.6), 'camera')
    assert_frequencies(rec['jpeg'], _bool(0.3), 'jpeg')
    assert not any(rec['halve'])


def test_bsrgan_plus_choices_and_shuffle_follow_the_configured_probabilities():
    shuffle_prob = 0.3
    rec = _records(lambda img, seed, record: dg.bsrgan_plus(img, 2, _rng(seed), shuffle_prob, False, 2, record=record))
    assert_frequencies(rec['shuffle'], _bool(shuffle_prob), 'shuffle')
    assert_frequencies(rec['poisson'], _bool(dg.PLUS_POISSON_PROB), 'poisson')
    assert_frequencies(rec['speckle'], _bool(dg.PLUS_SPECKLE_PROB), 'speckle')
    assert_frequencies(rec['camera'], _bool(dg.PLUS_CAMERA_PROB), 'camera')
    assert_frequencies(rec['jpeg'], _bool(dg.PLUS_JPEG_PROB), 'jpeg')
    assert_frequencies(rec['poisson_gray'], _bool(dg.POISSON_GRAY_PROB), 'poisson_gray')
    assert_frequencies(rec['noise_kind'], dg.NOISE_KIND_PROBS, 'noise_kind')
    assert_frequencies(rec['speckle_kind'], dg.NOISE_KIND_PROBS, 'speckle_kind')
    assert_frequencies(rec['blur'], dg.BLUR_KIND_PROBS, 'blur')
    assert_frequencies(rec['interpolation'], dg.INTERPOLATION_PROBS, 'interpolation')
    assert len(rec['poisson']) == len(rec['camera']) == 2 * N
    fixed = [o for o, s in zip(rec['order'], rec['shuffle']) if not s]
    shuffled = [o for o, s in zip(rec['order'], rec['shuffle']) if s]
    for order in fixed:  # blur, resize, JPEG and the second blur, resize keep their places
        assert [order[i] for i in (0, 1, 6, 7, 8)] == ['blur', 'resize', 'jpeg', 'blur', 'resize']
        assert sorted(order[2:6]) == sorted(order[9:13]) == sorted(dg.PLUS_STEPS[2:6])
    assert_frequencies([o[2] for o in fixed], _uniform(dg.PLUS_STEPS[2:6]), 'third step without the shuffle')
    assert_frequencies([o.index('jpeg') for o in shuffled], _uniform(range(13)), 'position of jpeg with the shuffle')


@pytest.mark.parametrize('shuffle_prob', [0.0, 1.0])
def test_a_shuffle_probability_of_0_or_1_always_or_never_shuffles(shuffle_prob):
    record = {}
    for seed in range(50):
        dg.bsrgan_plus(_image(16), 2, _rng(seed), shuffle_prob, False, 2, record=record)
    assert set(record['shuffle']) == {bool(shuffle_prob)}
