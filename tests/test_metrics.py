import math

import numpy as np
import pytest

from metrics.fidelity import calculate_psnr, calculate_ssim, rgb2y


def _random_image(seed: int = 0, shape=(32, 40, 3)) -> np.ndarray:
    return np.random.default_rng(seed).integers(20, 236, shape).astype(np.uint8)


def test_psnr_of_identical_images_is_inf():
    img = _random_image()
    assert calculate_psnr(img, img) == math.inf


def test_psnr_of_constant_offset_matches_hand_computation():
    img = _random_image()
    # every pixel off by 5 -> MSE = 25 -> PSNR = 20*log10(255/5) = 34.1514 dB
    assert calculate_psnr(img, img + 5) == pytest.approx(20 * math.log10(255 / 5), abs=1e-12)


def test_psnr_is_computed_in_float_so_uint8_differences_do_not_wrap():
    a = np.zeros((8, 8, 1), np.uint8)
    b = np.full((8, 8, 1), 255, np.uint8)
    assert calculate_psnr(b, a) == pytest.approx(0.0)
    assert calculate_psnr(a, b) == pytest.approx(0.0)


def test_crop_border_ignores_errors_in_the_border():
    img = _random_image()
    noisy = img.copy()
    noisy[:2] = 0  # damage only the first two rows
    assert calculate_psnr(img, noisy) < 30
    assert calculate_psnr(img, noisy, crop_border=2) == math.inf
    assert calculate_ssim(img, noisy, crop_border=2) == pytest.approx(1.0)


def test_rgb2y_of_gray_rgb_equals_bt601_studio_range():
    gray = np.array([[0, 128, 255]], np.uint8)
    rgb = np.repeat(gray[..., None], 3, axis=2)
    y = rgb2y(rgb)
    assert y.dtype == np.float64 and y.shape == (1, 3)
    # (65.481 + 128.553 + 24.966) / 255 = 219 / 255: black -> 16, white -> 235
    np.testing.assert_allclose(y, 16 + gray.astype(float) * 219 / 255, atol=1e-9)


def test_rgb2y_weights_red_green_blue_in_that_order():
    img = np.zeros((1, 3, 3), np.uint8)
    img[0, 0, 0] = img[0, 1, 1] = img[0, 2, 2] = 255
    np.testing.assert_allclose(rgb2y(img)[0], [16 + 65.481, 16 + 128.553, 16 + 24.966])


def test_y_channel_psnr_uses_luma_only():
    img = _random_image()
    shifted = img.astype(np.int16)
    shifted[..., 0] += 10  # +10 red -> luma +10*65.481/255 everywhere
    shifted = shifted.astype(np.uint8)
    expected = 20 * math.log10(255 / (10 * 65.481 / 255))
    assert calculate_psnr(img, shifted, test_y_channel=True) == pytest.approx(expected, abs=1e-9)


def test_ssim_of_identical_images_is_one():
    img = _random_image()
    assert calculate_ssim(img, img) == pytest.approx(1.0)
    assert calculate_ssim(img[..., 0], img[..., 0]) == pytest.approx(1.0)


def test_ssim_drops_with_noise_and_is_averaged_over_channels():
    img = _random_image(1)
    noisy = img.copy()
    noisy[..., 2] = _random_image(2)[..., 2]  # destroy one channel only
    per_channel = [calculate_ssim(img[..., c], noisy[..., c]) for c in range(3)]
    assert per_channel[0] == pytest.approx(1.0) and per_channel[2] < 0.2
    assert calculate_ssim(img, noisy) == pytest.approx(np.mean(per_channel))


def test_ssim_of_constant_offset_matches_closed_form():
    # For b = a + d, sigmas and covariance are equal, so SSIM reduces to the luminance term
    # (2*mu1*mu2 + C1) / (mu1^2 + mu2^2 + C1); with constant images mu is exact.
    a = np.full((20, 20), 100, np.uint8)
    b = a + 20
    c1 = (0.01 * 255) ** 2
    expected = (2 * 100 * 120 + c1) / (100 ** 2 + 120 ** 2 + c1)
    assert calculate_ssim(a, b) == pytest.approx(expected, rel=1e-9)


def test_metrics_reject_mismatched_shapes():
    with pytest.raises(ValueError, match='shapes differ'):
        calculate_psnr(_random_image(shape=(8, 8, 3)), _random_image(shape=(8, 9, 3)))


def test_ssim_of_an_image_smaller_than_its_window_is_a_user_error_naming_the_size():
    from utils.errors import UserError
    tiny = _random_image(shape=(1, 1, 3))
    with pytest.raises(UserError) as e:
        calculate_ssim(tiny, tiny)
    assert str(e.value) == 'cannot score a 1x1 image with SSIM: it needs 11x11 pixels, i.e. images of at least 11x11'
    small = _random_image(shape=(12, 40, 3))
    with pytest.raises(UserError, match=r'^cannot score a 12x40 image with SSIM: it needs 11x11 pixels after cropping '
                                        r'the 1-pixel border, i.e. images of at least 13x13$'):
        calculate_ssim(small, small, crop_border=1, test_y_channel=True)
    assert calculate_ssim(small[:11, :11], small[:11, :11]) == pytest.approx(1.0)   # the smallest size it scores


def test_psnr_with_nothing_left_after_the_border_crop_is_a_user_error():
    from utils.errors import UserError
    img = _random_image(shape=(4, 9, 3))
    with pytest.raises(UserError, match=r'^cannot score a 4x9 image: nothing is left after cropping the 2-pixel border$'):
        calculate_psnr(img, img, crop_border=2)


def test_rounding_y_as_kairs_sr_test_scripts_do_changes_the_y_scores_only_slightly():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (32, 32, 3)).astype(np.uint8)
    b = np.clip(a.astype(int) + rng.integers(-6, 7, a.shape), 0, 255).astype(np.uint8)
    exact, rounded = calculate_psnr(a, b, 0, True), calculate_psnr(a, b, 0, True, round_y=True)
    assert exact != rounded and abs(exact - rounded) < 0.2
    y = lambda img: np.round(rgb2y(img))
    mse = np.mean((y(a) - y(b)) ** 2)
    assert rounded == pytest.approx(10 * np.log10(255 ** 2 / mse))
    assert calculate_psnr(a, b) == calculate_psnr(a, b, round_y=True)  # RGB scores are not affected
