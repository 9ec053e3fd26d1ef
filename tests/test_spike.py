import numpy as np
import pytest

from data.datasets.spike import (read_spike_dat, read_spike_npy, representation_channels, spike_to_representation,
                        write_spike_dat)
from data.synthetic.gopro import integrate_and_fire
from utils.errors import UserError


def test_dat_writer_and_reader_are_exact_inverses(tmp_path):
    planes = (np.random.default_rng(0).random((5, 6, 12)) < 0.3).astype(np.uint8)
    path = tmp_path / 'a.dat'
    write_spike_dat(path, planes)
    assert path.stat().st_size == 5 * 6 * 12 // 8
    back = read_spike_dat(path, 6, 12)
    assert back.dtype == np.uint8 and back.shape == (5, 6, 12)
    np.testing.assert_array_equal(back, planes)


def test_dat_bit_order_is_lsb_first_and_rows_are_stored_bottom_up(tmp_path):
    # 2×8 frame = 2 bytes: byte 0 holds the BOTTOM image row, bit k = column k.
    path = tmp_path / 'hand.dat'
    path.write_bytes(bytes([0b00000101, 0b10000000]))
    frame = read_spike_dat(path, 2, 8)[0]
    expected = np.zeros((2, 8), np.uint8)
    expected[1, 0] = expected[1, 2] = 1  # byte 0 -> row 1 (bottom), bits 0 and 2
    expected[0, 7] = 1                   # byte 1 -> row 0 (top), bit 7
    np.testing.assert_array_equal(frame, expected)
    write_spike_dat(tmp_path / 'again.dat', expected[None])
    assert (tmp_path / 'again.dat').read_bytes() == bytes([0b00000101, 0b10000000])


def test_dat_file_of_wrong_length_names_the_file(tmp_path):
    path = tmp_path / 'short.dat'
    path.write_bytes(bytes(13))  # 4×8 frames are 4 bytes each
    with pytest.raises(UserError, match='short.dat.*multiple of H\\*W/8 = 4'):
        read_spike_dat(path, 4, 8)
    path.write_bytes(b'')
    with pytest.raises(UserError, match='short.dat'):
        read_spike_dat(path, 4, 8)


def test_dat_frame_size_must_be_a_multiple_of_8_pixels(tmp_path):
    path = tmp_path / 'x.dat'
    path.write_bytes(bytes(9))
    with pytest.raises(UserError, match='multiple of 8'):
        read_spike_dat(path, 3, 3)
    with pytest.raises(UserError, match='multiple of 8'):
        write_spike_dat(path, np.zeros((1, 3, 3), np.uint8))


def test_missing_spike_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match='nope.dat'):
        read_spike_dat(tmp_path / 'nope.dat', 8, 8)
    with pytest.raises(UserError, match='nope.npy'):
        read_spike_npy(tmp_path / 'nope.npy')


def test_npy_reader_accepts_bool_and_rejects_non_binary_or_wrong_rank(tmp_path):
    np.save(tmp_path / 'b.npy', np.ones((2, 3, 4), bool))
    planes = read_spike_npy(tmp_path / 'b.npy')
    assert planes.dtype == np.uint8 and planes.shape == (2, 3, 4) and planes.all()
    np.save(tmp_path / 'v.npy', np.full((2, 3, 4), 2, np.uint8))
    with pytest.raises(UserError, match='binary'):
        read_spike_npy(tmp_path / 'v.npy')
    np.save(tmp_path / 'r.npy', np.zeros((3, 4), np.uint8))
    with pytest.raises(UserError, match='T×H×W'):
        read_spike_npy(tmp_path / 'r.npy')


@pytest.mark.parametrize('kind,params,channels', [
    ('raw', {}, 8), ('raw', {'num_planes': 3}, 3),
    ('count', {}, 4), ('count', {'num_bins': 2, 'window': 10}, 2),
    ('interval', {}, 1), ('interval', {'num_bins': 3}, 3),
])
def test_representation_shape_matches_representation_channels(kind, params, channels):
    planes = (np.random.default_rng(1).random((20, 6, 5)) < 0.5).astype(np.uint8)
    rep = spike_to_representation(planes, kind, **params)
    assert representation_channels(kind, params) == channels
    assert rep.shape == (6, 5, channels) and rep.dtype == np.float32
    assert rep.min() >= 0 and rep.max() <= 1


def test_raw_takes_the_centred_planes():
    planes = np.zeros((7, 1, 1), np.uint8)
    planes[2, 0, 0] = planes[4, 0, 0] = 1
    rep = spike_to_representation(planes, 'raw', num_planes=3)  # planes 2, 3, 4
    np.testing.assert_array_equal(rep[0, 0], [1, 0, 1])


def test_count_is_the_firing_rate_of_each_sub_window():
    planes = np.zeros((8, 1, 2), np.uint8)
    planes[:4, 0, 0] = [1, 1, 1, 0]   # first half: 3 of 4
    planes[4:, 0, 0] = [1, 0, 0, 0]   # second half: 1 of 4
    planes[:, 0, 1] = 1
    rep = spike_to_representation(planes, 'count', num_bins=2)
    np.testing.assert_allclose(rep[0, 0], [0.75, 0.25])
    np.testing.assert_allclose(rep[0, 1], [1.0, 1.0])


def test_interval_is_one_over_the_mean_inter_spike_interval():
    planes = np.zeros((12, 1, 3), np.uint8)
    planes[1::3, 0, 0] = 1            # period 3 -> 1/3
    planes[[0, 2, 9], 0, 1] = 1       # intervals 2 and 7 -> mean 4.5
    planes[5, 0, 2] = 1               # a single spike: falls back to count/length
    rep = spike_to_representation(planes, 'interval')
    np.testing.assert_allclose(rep[0, :, 0], [1 / 3, 1 / 4.5, 1 / 12], rtol=1e-6)


def test_representation_errors_name_the_option():
    with pytest.raises(UserError, match='spike_repr: unknown representation "cuont".*did you mean "count"'):
        representation_channels('cuont', {})
    with pytest.raises(UserError, match='spike_repr_params: unknown key "numbins"'):
        representation_channels('count', {'numbins': 4})
    with pytest.raises(UserError, match='spike_repr_params.num_planes: needs 9 planes'):
        spike_to_representation(np.zeros((4, 2, 2), np.uint8), 'raw', num_planes=9)


def test_integrate_and_fire_rate_is_proportional_to_intensity():
    intensity = np.array([0.0, 0.1, 0.25, 0.5, 0.8, 1.0], np.float32)[None, :]
    steps = 400
    charge = np.random.default_rng(0).uniform(0, 1, intensity.shape).astype(np.float32)
    planes, charge_after = integrate_and_fire(np.repeat(intensity[None], steps, axis=0), 1.0, charge)
    rate = planes.mean(axis=0)[0]
    np.testing.assert_allclose(rate, intensity[0], atol=1.5 / steps)
    assert np.all(charge_after >= 0) and np.all(charge_after < 1)
