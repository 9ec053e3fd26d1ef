"""BasicSR's video training sets: REDSDataset (EDVR: odd windows, the centre frame's GT), the names
REDSRecurrentDataset / Vimeo90KRecurrentDataset (flip_sequence), and the synthetic REDS set they train on here."""
import os

import numpy as np
import pytest
import torch

from data.datasets.video import REDSDataset, VideoRecurrentTrainDataset
from data.registry import DATASETS, build_dataset
from data.synthetic.reds import CLIPS, FRAMES, SIZE, make_reds
from data.synthetic.vimeo import make_vimeo
from tests.conftest import dataset_options
from utils.errors import OptionsError, UserError
from utils.image import imread_uint


@pytest.fixture(scope='module')
def reds(tmp_path_factory):
    return make_reds(str(tmp_path_factory.mktemp('reds') / 'reds'))


def reds_section(root, dataset_type='REDSDataset', gt_size=64, **kw):
    return dataset_options(dataset_type, dataroot_gt=f'{root}/train_sharp', dataroot_lq=f'{root}/train_sharp_bicubic/X4',
                           meta_info_file=f'{root}/meta_info_REDS_GT.txt', gt_size=gt_size, scale=4, **kw)


def test_the_synthetic_reds_set_has_basicsrs_layout_and_the_reds4_clips_again(reds):
    with open(os.path.join(reds, 'meta_info_REDS_GT.txt')) as f:
        assert f.read().splitlines() == [f'{c} {FRAMES} ({SIZE},{SIZE},3)' for c in CLIPS]
    gt = imread_uint(os.path.join(reds, 'train_sharp', '011', '00000005.png'), 3)
    assert gt.shape == (SIZE, SIZE, 3)
    assert imread_uint(os.path.join(reds, 'train_sharp_bicubic', 'X4', '011', '00000005.png'), 3).shape == (40, 40, 3)
    assert np.array_equal(imread_uint(os.path.join(reds, 'REDS4', 'GT', '011', '00000005.png'), 3), gt)
    assert sorted(os.listdir(os.path.join(reds, 'REDS4', 'sharp_bicubic'))) == ['000', '011']
    blur = imread_uint(os.path.join(reds, 'train_blur', '011', '00000005.png'), 3)
    assert blur.shape == gt.shape and not np.array_equal(blur, gt)


def test_reds_dataset_gives_a_centred_window_and_the_gt_of_its_centre_frame_only(reds):
    ds = build_dataset(reds_section(reds, num_frame=3, use_hflip=False, use_rot=False))
    assert isinstance(ds, REDSDataset) and {clip for clip, _ in ds.keys} == {'001', '002', '003'}  # REDS4 held out
    assert len(ds) == 3 * FRAMES
    index = ds.keys.index(('002', 3))
    item = ds[(index, 7)]
    assert item['L'].shape == (3, 3, 16, 16) and item['H'].shape == (3, 64, 64) and item['key'] == '002/00000003'
    # the LQ window is frames 2, 3, 4 at the crop the GT crop matches: find the crop in the centre GT frame
    gt = imread_uint(os.path.join(reds, 'train_sharp', '002', '00000003.png'), 3)
    H = item['H'].permute(1, 2, 0).numpy()
    hits = [(y, x) for y in range(0, SIZE - 63, 4) for x in range(0, SIZE - 63, 4)
            if np.array_equal(gt[y:y + 64, x:x + 64], H)]
    assert len(hits) == 1
    y, x = hits[0]
    for j, frame in enumerate((2, 3, 4)):
        lq = imread_uint(os.path.join(reds, 'train_sharp_bicubic', 'X4', '002', f'{frame:08d}.png'), 3)
        assert np.array_equal(lq[y // 4:y // 4 + 16, x // 4:x // 4 + 16], item['L'][j].permute(1, 2, 0).numpy())


def test_a_window_past_the_clip_end_moves_to_a_centre_whose_window_fits(reds):
    ds = build_dataset(reds_section(reds, num_frame=5))
    for frame in (0, 1, FRAMES - 1):
        index = ds.keys.index(('001', frame))
        for seed in range(6):
            centre = int(ds[(index, seed)]['key'].split('/')[1])
            assert 2 <= centre <= FRAMES - 3


def test_random_reverse_plays_the_window_backwards_with_the_same_centre(reds):
    """Whole frames (gt_size 160), no flips: the only randomness left is the reversal."""
    kw = dict(num_frame=3, use_hflip=False, use_rot=False, gt_size=SIZE)
    plain = build_dataset(reds_section(reds, **kw))
    reversing = build_dataset(reds_section(reds, random_reverse=True, **kw))
    index = plain.keys.index(('003', 2))
    a = plain[(index, 0)]
    outcomes = set()
    for seed in range(16):
        b = reversing[(index, seed)]
        assert torch.equal(b['H'], a['H']) and b['key'] == a['key']
        outcomes.add('reversed' if torch.equal(b['L'], a['L'].flip(0)) else 'forward' if torch.equal(b['L'], a['L'])
                     else 'other')
    assert outcomes == {'reversed', 'forward'}


def test_reds_dataset_takes_odd_windows_and_no_precomputed_flows(reds):
    with pytest.raises(OptionsError, match=r'num_frame: 4 must be odd'):
        reds_section(reds, num_frame=4)
    with pytest.raises(OptionsError, match=r'dataroot_flow: .* is not supported'):
        reds_section(reds, dataroot_flow='flows')


def test_basicsrs_name_of_the_recurrent_reds_set_is_the_same_dataset(reds):
    assert DATASETS.get('REDSRecurrentDataset', 'x') is VideoRecurrentTrainDataset
    ds = build_dataset(reds_section(reds, 'REDSRecurrentDataset', num_frame=6))
    item = ds[(0, 1)]
    assert item['L'].shape == (6, 3, 16, 16) and item['H'].shape == (6, 3, 64, 64)
    with pytest.raises(UserError, match=r'num_frame: 7 frames at interval 1 need 7 frames but clip 001 has 6'):
        build_dataset(reds_section(reds, 'REDSRecurrentDataset', num_frame=7))


def test_vimeo90k_recurrent_dataset_takes_every_frame_and_flip_sequence_appends_the_reversal(tmp_path):
    root = make_vimeo(str(tmp_path / 'vimeo'))
    common = dict(dataroot_gt=f'{root}/sequences', dataroot_lq=f'{root}/sequences_BIx4',
                  meta_info_file=f'{root}/meta_info_Vimeo90K_train_GT.txt', gt_size=32, scale=4)
    plain = build_dataset(dataset_options('Vimeo90KRecurrentDataset', **common))
    flipped = build_dataset(dataset_options('Vimeo90KRecurrentDataset', flip_sequence=True, **common))
    a, b = plain[(1, 3)], flipped[(1, 3)]
    assert a['L'].shape == (7, 3, 8, 8) and b['L'].shape == (14, 3, 8, 8) and b['H'].shape == (14, 3, 32, 32)
    assert torch.equal(b['L'][:7], a['L']) and torch.equal(b['L'][7:], a['L'].flip(0))
    assert torch.equal(b['H'][7:], a['H'].flip(0))
    with pytest.raises(OptionsError, match=r'num_frame: 5 must be -1'):
        dataset_options('Vimeo90KRecurrentDataset', num_frame=5, **common)
