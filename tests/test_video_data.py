import os
import pickle
import random
import sys

import numpy as np
import pytest
import torch

from conftest import dataset_options, unchecked_section
from data import lmdb_util
from data.datasets.spike import read_spike_npy, spike_to_representation
from data.datasets.video import VideoRecurrentTestDataset, VideoRecurrentTrainDataset
from data.lmdb_util import make_lmdb_from_folder
from data.registry import build_dataset
from data.synthetic.demo import COMPLETE_MARKER, ensure_demo_data
from data.synthetic.gopro import luminance, make_gopro_spike, sharp_frames
from utils.errors import UserError
from utils.image import imread_uint, imwrite, to_float_image

SIZE = 32          # pattern frames: R = 8*y, G = 8*x, B = 8*frame index
BITS = 10          # spike plane k = bit k of y*SIZE + x
CLIPS = {'a': 10, 'b': 8}


def pattern_frame(frame: int) -> np.ndarray:
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    return np.stack([yy * 8, xx * 8, np.full_like(yy, frame * 8)], axis=2).astype(np.uint8)


def pattern_spikes() -> np.ndarray:
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    idx = yy * SIZE + xx
    return np.stack([(idx >> k) & 1 for k in range(BITS)]).astype(np.uint8)


@pytest.fixture
def pattern_root(tmp_path):
    """A GoPro/REDS-layout data set where RGB and spikes both encode each pixel's coordinates."""
    for clip, n in CLIPS.items():
        for i in range(n):
            for split in ('gt', 'lq'):
                imwrite(str(tmp_path / split / clip / f'{i:08d}.png'), pattern_frame(i))
            os.makedirs(tmp_path / 'spike' / clip, exist_ok=True)
            np.save(tmp_path / 'spike' / clip / f'{i:08d}.npy', pattern_spikes())
    # BasicSR's 3-field lines and KAIR's 4-field lines (with start frame) are both accepted.
    (tmp_path / 'meta.txt').write_text('a 10 (32,32,3)\nb 8 (32,32,3) 0\n')
    return tmp_path


def make_opt(cls, root, **over):
    opt = unchecked_section(cls, 'train', dataroot_gt=str(root / 'gt'), dataroot_lq=str(root / 'lq'))
    if cls is VideoRecurrentTrainDataset:
        opt.update(meta_info_file=str(root / 'meta.txt'), gt_size=16, num_frame=3)
        opt['dataset_type'] = 'VideoRecurrentTrainDataset'
    else:
        opt['dataset_type'] = 'VideoRecurrentTestDataset'
    opt.update(over)
    return opt


SPIKE_RAW = {'spike_repr': 'raw', 'spike_repr_params': {'num_planes': BITS}}


def decode_coords(lq: torch.Tensor):
    """T×C×h×w with pattern RGB + raw spike planes → (index from RGB, index from spikes)."""
    arr = to_float_image(lq).numpy()
    y = np.round(arr[:, 0] * 255 / 8).astype(int)
    x = np.round(arr[:, 1] * 255 / 8).astype(int)
    bits = np.round(arr[:, 3:3 + BITS]).astype(int)
    from_spikes = sum(bits[:, k] << k for k in range(BITS))
    return y * SIZE + x, from_spikes


def frame_indices(t: torch.Tensor):
    return [int(round(v)) for v in (to_float_image(t)[:, 2, 0, 0].numpy() * 255 / 8)]


def test_spikes_stay_aligned_with_rgb_under_crop_flip_and_rotation(pattern_root):
    ds = VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root,
                                             dataroot_spike=str(pattern_root / 'spike'), **SPIKE_RAW))
    assert ds.spike_channels == BITS
    transposed = flipped = 0
    for seed in range(24):  # keys cover both clips
        item = ds[(seed % len(ds), seed)]
        assert item['L'].shape == (3, 3 + BITS, 16, 16)
        from_rgb, from_spikes = decode_coords(item['L'])
        np.testing.assert_array_equal(from_rgb, from_spikes)
        torch.testing.assert_close(to_float_image(item['H']), item['L'][:, :3])
        y = from_rgb[0] // SIZE
        transposed += int(y[0, 1] != y[0, 0])       # rows vary along the width: rotated
        flipped += int(from_rgb[0, 0, 0] > from_rgb[0, -1, -1])
    assert transposed and flipped, 'augmentation never rotated/flipped: the alignment check was vacuous'


def test_a_height_by_width_crop_keeps_spikes_aligned_and_is_flipped_but_never_rotated(pattern_root):
    ds = VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root, gt_size=[12, 24],
                                             dataroot_spike=str(pattern_root / 'spike'), **SPIKE_RAW))
    flipped = 0
    for seed in range(24):
        item = ds[(seed % len(ds), seed)]
        assert item['L'].shape == (3, 3 + BITS, 12, 24) and item['H'].shape == (3, 3, 12, 24)
        from_rgb, from_spikes = decode_coords(item['L'])
        np.testing.assert_array_equal(from_rgb, from_spikes)
        y = from_rgb[0] // SIZE
        assert (y == y[:, :1]).all()  # rows stay rows: never transposed
        flipped += int(from_rgb[0, 0, 0] > from_rgb[0, -1, -1])
    assert flipped, 'augmentation never flipped: the alignment check was vacuous'
    plain = VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root, gt_size=[12, 24]))
    cached = VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root, gt_size=[12, 24],
                                                 cache_data=True))  # whole frames cached, cropped as they are read
    for seed in range(6):
        a, b = plain[(seed, seed)], cached[(seed, seed)]
        assert torch.equal(a['L'], b['L']) and torch.equal(a['H'], b['H']) and a['H'].shape == (3, 3, 12, 24)
    with pytest.raises(UserError, match=r'^datasets\.train\.gt_size: \[12, 40\] is larger than the 32×32 frames of '
                                        r'clip a \(meta_info_file\)$'):
        VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root, gt_size=[12, 40]))


def test_train_item_shapes_follow_num_frame_gt_size_and_scale(pattern_root, tmp_path):
    item = VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root,
                                               num_frame=5, gt_size=24))[(3, 7)]
    assert item['L'].shape == (5, 3, 24, 24) and item['H'].shape == (5, 3, 24, 24)
    # frames leave the worker as uint8 (scaled to [0, 1] in the train step); with spikes L is float32
    assert item['L'].dtype == item['H'].dtype == torch.uint8 and item['folder'] == 'a' and item['key'] == 'a/00000003'
    # SR layout: LQ frames are 1/scale of GT.
    for clip, n in CLIPS.items():
        for i in range(n):
            imwrite(str(tmp_path / 'lq_x2' / clip / f'{i:08d}.png'), pattern_frame(i)[::2, ::2])
    ds = VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root, scale=2, gt_size=16,
                                             dataroot_lq=str(tmp_path / 'lq_x2'), num_frame=4))
    item = ds[(0, 1)]
    assert item['H'].shape == (4, 3, 16, 16) and item['L'].shape == (4, 3, 8, 8)
    assert len(ds) == sum(CLIPS.values())


def test_interval_and_reverse_are_drawn_from_the_key_seed_only(pattern_root):
    ds = VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root, num_frame=3,
                                             interval_list=[1, 2, 3], random_reverse=True))
    seen_intervals, directions = set(), set()
    for seed in range(40):
        random.seed(seed * 7919)           # global RNG state must not matter
        np.random.seed(seed)
        first = ds[(2, seed)]
        random.seed(12345)
        again = ds[(2, seed)]
        torch.testing.assert_close(first['L'], again['L'])
        frames = frame_indices(first['H'])
        steps = {b - a for a, b in zip(frames, frames[1:])}
        assert len(steps) == 1 and abs(steps.pop()) in (1, 2, 3)
        assert all(0 <= f < CLIPS['a'] for f in frames)
        seen_intervals.add(abs(frames[1] - frames[0]))
        directions.add(frames[1] > frames[0])
    assert seen_intervals == {1, 2, 3} and directions == {True, False}


def test_start_near_the_clip_end_is_moved_back_inside_the_clip(pattern_root):
    ds = VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root, num_frame=4))
    last_of_a = CLIPS['a'] - 1
    for seed in range(10):
        frames = frame_indices(ds[(last_of_a, seed)]['H'])
        assert frames == list(range(frames[0], frames[0] + 4)) and frames[-1] <= last_of_a


def test_integer_keys_are_deterministic(pattern_root):
    ds = VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root))
    torch.testing.assert_close(ds[4]['L'], ds[4]['L'])


def test_reds_validation_clips_are_held_out_unless_test_mode(tmp_path):
    for clip in ('000', '001', '240'):
        for i in range(3):
            for split in ('gt', 'lq'):
                imwrite(str(tmp_path / split / clip / f'{i:08d}.png'), pattern_frame(i))
    (tmp_path / 'meta.txt').write_text('000 3 (32,32,3)\n001 3 (32,32,3)\n240 3 (32,32,3)\n')
    clips = lambda **over: {k[0] for k in VideoRecurrentTrainDataset(  # noqa: E731
        make_opt(VideoRecurrentTrainDataset, tmp_path, **over)).keys}
    assert clips() == {'001', '240'}
    assert clips(test_mode=True) == {'000'}
    assert clips(val_partition='official') == {'000', '001'}
    with pytest.raises(UserError, match=r'^<options>: datasets\.train\.val_partition: "x" must be one of REDS4, '
                                        r'official$'):
        dataset_options('VideoRecurrentTrainDataset', dataroot_gt='gt', dataroot_lq='lq', meta_info_file='m',
                        val_partition='x')


def test_test_dataset_returns_whole_clips_with_spikes(pattern_root):
    opt = make_opt(VideoRecurrentTestDataset, pattern_root, dataroot_spike=str(pattern_root / 'spike'), **SPIKE_RAW)
    ds = build_dataset(opt)
    assert isinstance(ds, VideoRecurrentTestDataset) and len(ds) == 2
    item = ds[1]
    assert item['folder'] == 'b'
    assert item['L'].shape == (8, 3 + BITS, SIZE, SIZE) and item['H'].shape == (8, 3, SIZE, SIZE)
    assert [os.path.basename(p) for p in item['lq_path']] == [f'{i:08d}.png' for i in range(8)]
    assert frame_indices(item['L']) == list(range(8))
    from_rgb, from_spikes = decode_coords(item['L'])
    np.testing.assert_array_equal(from_rgb, from_spikes)
    short = VideoRecurrentTestDataset(make_opt(VideoRecurrentTestDataset, pattern_root, num_frame=4))
    assert short[0]['L'].shape == (4, 3, SIZE, SIZE)
    with pytest.raises(TypeError):
        ds[(0, 1)]


def test_lmdb_backend_reads_the_same_items_as_disk(pattern_root, tmp_path):
    for name, exts in (('gt', ['.png']), ('lq', ['.png']), ('spike', ['.npy'])):
        assert make_lmdb_from_folder(pattern_root / name, tmp_path / f'{name}.lmdb', exts) == sum(CLIPS.values())
    spikes = dict(SPIKE_RAW, num_frame=4, interval_list=[1, 2], random_reverse=True)
    disk = VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root,
                                               dataroot_spike=str(pattern_root / 'spike'), **spikes))
    lmdb_ds = VideoRecurrentTrainDataset(make_opt(
        VideoRecurrentTrainDataset, pattern_root, io_backend={'type': 'lmdb'}, dataroot_gt=str(tmp_path / 'gt.lmdb'),
        dataroot_lq=str(tmp_path / 'lq.lmdb'), dataroot_spike=str(tmp_path / 'spike.lmdb'), **spikes))
    assert not any(os.path.realpath(tmp_path / 'gt.lmdb') == k for k in lmdb_util._ENVS), \
        'the environment must be opened lazily, not in __init__'
    for key in [(0, 3), (9, 4), (12, 5), 17]:
        a, b = disk[key], lmdb_ds[key]
        torch.testing.assert_close(a['L'], b['L'])
        torch.testing.assert_close(a['H'], b['H'])
        assert a['key'] == b['key']
    clone = pickle.loads(pickle.dumps(lmdb_ds))   # what a spawned DataLoader worker receives
    torch.testing.assert_close(clone[(1, 2)]['L'], disk[(1, 2)]['L'])


def test_lmdb_dataset_works_in_forked_workers_after_the_main_process_read(pattern_root, tmp_path):
    for name in ('gt', 'lq'):
        make_lmdb_from_folder(pattern_root / name, tmp_path / f'{name}.lmdb')
    ds = VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root, io_backend={'type': 'lmdb'},
                                             dataroot_gt=str(tmp_path / 'gt.lmdb'), dataroot_lq=str(tmp_path / 'lq.lmdb')))
    expected = [ds[(i, i)]['H'] for i in range(4)]   # opens the environments in this process
    loader = torch.utils.data.DataLoader(ds, sampler=[(i, i) for i in range(4)], batch_size=None, num_workers=2,
                                         multiprocessing_context='fork')
    for got, want in zip(loader, expected):
        torch.testing.assert_close(got['H'], want)


def test_missing_lmdb_package_is_a_user_error(pattern_root, monkeypatch):
    monkeypatch.setitem(sys.modules, 'lmdb', None)
    with pytest.raises(UserError, match='pip install lmdb'):
        VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root, io_backend={'type': 'lmdb'}))


def test_missing_folders_clips_and_frames_name_the_key_and_path(pattern_root):
    with pytest.raises(UserError, match=r'datasets.train.dataroot_lq: folder not found: .*nowhere'):
        VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root,
                                            dataroot_lq=str(pattern_root / 'nowhere')))
    with pytest.raises(UserError, match=r'datasets.train.dataroot_lq: .*00000000.png is a file, not a folder'):
        VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root,
                                            dataroot_lq=str(pattern_root / 'lq' / 'a' / '00000000.png')))
    os.remove(pattern_root / 'lq' / 'b' / '00000005.png')
    with pytest.raises(UserError, match=r'datasets.train.dataroot_lq: frame b/00000005 not found: .*00000005.png'):
        VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root))
    (pattern_root / 'meta2.txt').write_text('a 10 (32,32,3)\nzz 4 (32,32,3)\n')
    with pytest.raises(UserError, match=r'dataroot_gt: clip zz .*not found: .*zz'):
        VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root,
                                            meta_info_file=str(pattern_root / 'meta2.txt')))
    os.remove(pattern_root / 'spike' / 'a' / '00000002.npy')
    with pytest.raises(UserError, match=r'datasets.train.dataroot_spike: .*a.*00000002'):
        VideoRecurrentTestDataset(make_opt(VideoRecurrentTestDataset, pattern_root,
                                           dataroot_spike=str(pattern_root / 'spike')))


def test_bad_options_are_user_errors(pattern_root):
    (pattern_root / 'bad.txt').write_text('a ten (32,32,3)\n')
    cases = [
        ({'meta_info_file': str(pattern_root / 'bad.txt')}, r'meta_info_file: .*bad.txt:1'),
        ({'meta_info_file': str(pattern_root / 'none.txt')}, r'meta_info_file: file not found'),
        ({'num_frame': 9}, r'num_frame: 9 frames .* clip b has 8'),
        ({'dataroot_spike': str(pattern_root / 'spike'), 'spike_repr': 'cnt'}, r'datasets.train.spike_repr: unknown'),
    ]
    for over, msg in cases:
        with pytest.raises(UserError, match=msg):
            VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root, **over))


def test_train_option_checks_run_before_any_worker_starts(pattern_root):
    VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root, gt_size=32)).check_train_options()
    with pytest.raises(UserError, match=r'datasets.train.gt_size: 48 is larger than the 32×32 frames of clip a'):
        VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root, gt_size=48)).check_train_options()
    with pytest.raises(UserError, match=r'gt_size: 15 is not divisible by scale 2'):
        VideoRecurrentTrainDataset(make_opt(VideoRecurrentTrainDataset, pattern_root, gt_size=15,
                                            scale=2)).check_train_options()
    with pytest.raises(UserError, match=r'dataset_type: VideoRecurrentTestDataset yields whole clips'):
        VideoRecurrentTestDataset(make_opt(VideoRecurrentTestDataset, pattern_root)).check_train_options()


def test_spike_frames_of_another_size_than_the_lq_frames_are_rejected(pattern_root):
    opt = make_opt(VideoRecurrentTestDataset, pattern_root, dataroot_spike=str(pattern_root / 'spike'), **SPIKE_RAW)
    ds = VideoRecurrentTestDataset(opt)
    bad = pattern_root / 'spike' / 'a' / '00000000.npy'
    np.save(bad, np.zeros((BITS, 16, 16), np.uint8))
    with pytest.raises(UserError, match=r'dataroot_spike: .*00000000.npy: spike frames are 16×16 but the LQ frames are 32×32'):
        ds[0]                               # replaced after the start-up check: found when read
    with pytest.raises(UserError) as e:
        VideoRecurrentTestDataset(opt)      # at start-up: from the .npy header
    assert str(e.value) == f'datasets.train.dataroot_spike: {bad}: spike frames are 16×16 but the LQ frames are 32×32'


@pytest.fixture(scope='module')
def gopro_root(tmp_path_factory):
    root = tmp_path_factory.mktemp('demo') / 'demo_data' / 'GoPro'
    for split in ('train', 'test'):
        ensure_demo_data(unchecked_section(VideoRecurrentTestDataset, split, generate_demo='gopro_spike',
                                           dataroot_gt=str(root / f'{split}_GT'),
                                           dataroot_lq=str(root / f'{split}_GT_blurred'),
                                           dataroot_spike=str(root / f'{split}_spike')))
    return root


def _all_files(root):
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), 'rb').read()
            for d, _, files in os.walk(root) for f in files}


def test_gopro_spike_demo_is_deterministic_and_idempotent(gopro_root, tmp_path):
    files = _all_files(gopro_root)
    assert COMPLETE_MARKER in files and 'meta_info_GoPro_train_GT.txt' in files
    assert sum(f.startswith('train_GT_blurred') for f in files) == 4 * 12
    assert sum(f.startswith('test_spike') for f in files) == 2 * 8
    stamp = os.stat(gopro_root / 'train_GT' / 'train_000' / '000000.png').st_mtime_ns
    make_gopro_spike(str(gopro_root))   # already complete: left alone
    assert os.stat(gopro_root / 'train_GT' / 'train_000' / '000000.png').st_mtime_ns == stamp
    assert _all_files(make_gopro_spike(str(tmp_path / 'again'))) == files


def test_gopro_spike_blur_is_the_mean_of_sharp_frames_and_gt_the_middle_one(gopro_root):
    sharp = sharp_frames('train', 1, 12)
    assert sharp.shape == (60, 96, 96, 3)
    for f in (0, 7):
        group = sharp[f * 5:(f + 1) * 5]
        blurred = imread_uint(str(gopro_root / 'train_GT_blurred' / 'train_001' / f'{f:06d}.png'))
        np.testing.assert_array_equal(blurred, np.round(group.astype(np.float64).mean(axis=0)))
        gt = imread_uint(str(gopro_root / 'train_GT' / 'train_001' / f'{f:06d}.png'))
        np.testing.assert_array_equal(gt, group[2])
        assert np.abs(blurred.astype(int) - gt).max() > 20, 'frames should actually be blurred by the motion'


def test_gopro_spike_rates_follow_the_blurred_frame_luminance(gopro_root):
    planes = read_spike_npy(gopro_root / 'test_spike' / 'test_001' / '000003.npy')
    assert planes.shape == (20, 96, 96)
    rate = spike_to_representation(planes, 'count', num_bins=1)[..., 0]
    lum = luminance(imread_uint(str(gopro_root / 'test_GT_blurred' / 'test_001' / '000003.png')))
    assert abs(rate.mean() - lum.mean()) < 0.02
    assert np.corrcoef(rate.ravel(), lum.ravel())[0, 1] > 0.8


def test_gopro_spike_demo_feeds_both_video_datasets(gopro_root):
    common = {'spike_repr': 'count', 'spike_repr_params': {'num_bins': 4}}
    train = build_dataset(make_opt(VideoRecurrentTrainDataset, gopro_root, dataroot_gt=str(gopro_root / 'train_GT'),
                                   dataroot_lq=str(gopro_root / 'train_GT_blurred'),
                                   dataroot_spike=str(gopro_root / 'train_spike'), filename_tmpl='06d',
                                   meta_info_file=str(gopro_root / 'meta_info_GoPro_train_GT.txt'),
                                   num_frame=6, gt_size=64, **common))
    assert len(train) == 48 and train[(5, 0)]['L'].shape == (6, 7, 64, 64)
    test = build_dataset(make_opt(VideoRecurrentTestDataset, gopro_root, dataroot_gt=str(gopro_root / 'test_GT'),
                                  dataroot_lq=str(gopro_root / 'test_GT_blurred'),
                                  dataroot_spike=str(gopro_root / 'test_spike'), **common))
    assert len(test) == 2 and test[0]['L'].shape == (8, 7, 96, 96) and test[0]['H'].shape == (8, 3, 96, 96)


def test_gopro_spike_demo_rejects_a_layout_it_does_not_write(tmp_path):
    root = tmp_path / 'demo_data'
    with pytest.raises(UserError, match='datasets.train.dataroot_gt: .*train_GT or test_GT'):
        ensure_demo_data(unchecked_section(VideoRecurrentTestDataset, generate_demo='gopro_spike',
                                           dataroot_gt=str(root / 'gt')))
    with pytest.raises(UserError, match='datasets.train.dataroot_lq: .*train_GT_blurred'):
        ensure_demo_data(unchecked_section(VideoRecurrentTestDataset, generate_demo='gopro_spike',
                                           dataroot_gt=str(root / 'train_GT'), dataroot_lq=str(root / 'blurred')))
    assert not root.exists()


# ---- start-up checks: every frame's header, spike headers, option values ---------------------------

def test_bad_frames_and_spike_files_get_one_line_each_when_the_train_set_is_built(pattern_root):
    gt, lq, spike = pattern_root / 'gt', pattern_root / 'lq', pattern_root / 'spike'
    (gt / 'a' / '00000003.png').write_bytes(b'')
    imwrite(str(lq / 'b' / '00000002.png'), pattern_frame(2)[:16])
    np.save(spike / 'a' / '00000005.npy', pattern_spikes()[:4])
    np.save(spike / 'b' / '00000006.npy', pattern_spikes().astype(np.int64))
    opt = make_opt(VideoRecurrentTrainDataset, pattern_root, dataroot_spike=str(spike), **SPIKE_RAW)
    with pytest.raises(UserError) as e:
        VideoRecurrentTrainDataset(opt)
    assert str(e.value).splitlines() == [
        f'datasets.train.dataroot_gt: {gt}/a/00000003.png: empty file',
        f'datasets.train.dataroot_lq: {lq}/b/00000002.png: 16x32 but the other LQ frames of clip b are 32x32; '
        f'the frames of a clip must have one size',
        f'datasets.train.dataroot_spike: {spike}/a/00000005.npy: 4 spike planes, but spike_repr "raw" with '
        f'spike_repr_params num_planes=10 needs at least 10',
        f'datasets.train.dataroot_spike: {spike}/b/00000006.npy: spike stream must be uint8 or bool, got int64',
    ]


def test_training_frames_must_be_scale_times_the_lq_frames_and_hold_the_patch(pattern_root, tmp_path):
    for clip, n in CLIPS.items():
        for i in range(n):
            imwrite(str(tmp_path / 'lq_x2' / clip / f'{i:08d}.png'), pattern_frame(i)[::2, ::2])
    imwrite(str(tmp_path / 'lq_x2' / 'a' / '00000001.png'), pattern_frame(1)[::2, ::2][:, :15])
    imwrite(str(pattern_root / 'gt' / 'a' / '00000001.png'), pattern_frame(1)[:, :30])
    message = str(pytest.raises(UserError, VideoRecurrentTrainDataset, make_opt(
        VideoRecurrentTrainDataset, pattern_root, scale=2, gt_size=16, dataroot_lq=str(tmp_path / 'lq_x2'))).value)
    assert message == (f'datasets.train.dataroot_gt: {pattern_root}/gt/a/00000001.png: 32x30 but the other GT frames '
                       f'of clip a are 32x32; the frames of a clip must have one size')
    imwrite(str(pattern_root / 'gt' / 'a' / '00000001.png'), pattern_frame(1))
    message = str(pytest.raises(UserError, VideoRecurrentTrainDataset, make_opt(
        VideoRecurrentTrainDataset, pattern_root, scale=2, gt_size=16, dataroot_lq=str(tmp_path / 'lq_x2'))).value)
    assert message == (f'datasets.train.dataroot_lq: {tmp_path}/lq_x2/a/00000001.png: 16x15 but the other LQ frames '
                       f'of clip a are 16x16; the frames of a clip must have one size')
    imwrite(str(tmp_path / 'lq_x2' / 'a' / '00000001.png'), pattern_frame(1)[::2, ::2])
    message = str(pytest.raises(UserError, VideoRecurrentTrainDataset, make_opt(
        VideoRecurrentTrainDataset, pattern_root, scale=4, gt_size=16, dataroot_lq=str(tmp_path / 'lq_x2'))).value)
    assert message == (f'scale: 4, but every GT frame of datasets.train is 2x its low-quality one (e.g. '
                       f'{pattern_root}/gt/a/00000000.png 32x32, {tmp_path}/lq_x2/a/00000000.png 16x16); set '
                       f'"scale": 2, or give the x4 low-quality folder')  # one line, not one per frame
    imwrite(str(tmp_path / 'lq_x2' / 'a' / '00000001.png'), pattern_frame(1)[::4, ::4])  # one frame at the scale
    message = str(pytest.raises(UserError, VideoRecurrentTrainDataset, make_opt(
        VideoRecurrentTrainDataset, pattern_root, scale=4, gt_size=16, dataroot_lq=str(tmp_path / 'lq_x2'))).value)
    assert message.splitlines()[0] == (f'datasets.train.dataroot_gt: {pattern_root}/gt/a/00000000.png: 32x32 but its '
                                       f'LQ frame {tmp_path}/lq_x2/a/00000000.png is 16x16; for training GT frames '
                                       f'must be exactly scale 4 x the LQ frames')


def test_test_clips_are_checked_for_ssim_and_a_whole_lq_to_gt_factor(tmp_path):
    for i in range(3):
        imwrite(str(tmp_path / 'gt' / 'c' / f'{i:08d}.png'), pattern_frame(i)[:10, :10])
        imwrite(str(tmp_path / 'lq' / 'c' / f'{i:08d}.png'), pattern_frame(i)[:10, :10])
        imwrite(str(tmp_path / 'gt' / 'd' / f'{i:08d}.png'), pattern_frame(i))
        imwrite(str(tmp_path / 'lq' / 'd' / f'{i:08d}.png'), pattern_frame(i)[:16, :8])
    message = str(pytest.raises(UserError, VideoRecurrentTestDataset, make_opt(
        VideoRecurrentTestDataset, tmp_path, num_frame=2, _where='datasets.test')).value)
    gt = tmp_path / 'gt'
    assert message.splitlines() == [
        f'datasets.test.dataroot_gt: {gt}/c/00000000.png: 10x10 is too small to evaluate: SSIM needs at least 11x11',
        f'datasets.test.dataroot_gt: {gt}/c/00000001.png: 10x10 is too small to evaluate: SSIM needs at least 11x11',
        f'datasets.test.dataroot_gt: {gt}/d/00000000.png: 32x32 is not a whole multiple of its LQ frame '
        f'{tmp_path}/lq/d/00000000.png (16x8) with the same factor for height and width',
        f'datasets.test.dataroot_gt: {gt}/d/00000001.png: 32x32 is not a whole multiple of its LQ frame '
        f'{tmp_path}/lq/d/00000001.png (16x8) with the same factor for height and width',
    ]


def test_spike_dat_files_are_checked_from_their_length(pattern_root):
    from data.datasets.spike import write_spike_dat
    for clip, n in CLIPS.items():
        for i in range(n):
            write_spike_dat(pattern_root / 'spike' / clip / f'{i:08d}.dat', pattern_spikes())
    bad = pattern_root / 'spike' / 'b' / '00000004.dat'
    bad.write_bytes(bad.read_bytes()[:-3])
    opt = make_opt(VideoRecurrentTestDataset, pattern_root, dataroot_spike=str(pattern_root / 'spike'),
                   spike_format='dat', **SPIKE_RAW)
    message = str(pytest.raises(UserError, VideoRecurrentTestDataset, opt).value)
    assert message == (f'datasets.train.dataroot_spike: {bad}: 1277 bytes is not a positive multiple of H*W/8 = 128 '
                       f'(frame size 32×32): wrong spike_size or truncated file')
    os.remove(bad)
    write_spike_dat(bad, pattern_spikes())
    assert len(VideoRecurrentTestDataset(opt)) == 2


@pytest.mark.parametrize('dataset_type,over,message', [
    ('VideoRecurrentTrainDataset', {'gt_size': 0}, 'gt_size: 0 must be >= 1'),
    ('VideoRecurrentTrainDataset', {'num_frame': -1}, 'num_frame: -1 must be >= 1: the number of frames of each '
                                                      'random training window (-1, all frames, is for Vimeo training '
                                                      'sets and for test sets)'),
    ('VideoRecurrentTrainDataset', {'num_frame': 0}, 'num_frame: 0 must be >= 1: the number of frames of each random '
                                                     'training window'),
    ('VideoRecurrentTrainDataset', {'interval_list': [1, 0]}, 'interval_list: [1, 0] must be a non-empty list of '
                                                              'integers >= 1'),
    ('VideoRecurrentTrainDataset', {'filename_ext': '.png'}, 'filename_ext: ".png" must be an extension without the '
                                                             'dot, like "png"'),
    ('VideoRecurrentTrainDataset', {'filename_tmpl': 'q'}, 'filename_tmpl: "q" is not an integer format spec like '
                                                           '"08d"'),
    ('VideoRecurrentTrainDataset', {'random_reverse': 'no'}, 'random_reverse: expected true/false, got "no"'),
    ('VideoRecurrentTrainDataset', {'io_backend': {'type': 'ceph'}}, 'io_backend: {"type": "ceph"} must be '
                                                                     '{"type": "disk"} or {"type": "lmdb"} here'),
    ('VideoRecurrentTrainDataset', {'spike_format': 'aedat'}, 'spike_format: "aedat" must be one of npy, dat (did you '
                                                              'mean "dat"?)'),
    ('VideoRecurrentTrainDataset', {'spike_size': [32, 0]}, 'spike_size: [32, 0] must be [H, W] with positive '
                                                            'integers'),
    ('VideoRecurrentTestDataset', {'num_frame': 0}, 'num_frame: 0 must be -1 (whole clips) or a positive integer'),
    ('VideoRecurrentTestDataset', {'io_backend': {'type': 'lmdb'}}, 'io_backend: {"type": "lmdb"} must be '
                                                                    '{"type": "disk"} here'),
    ('VideoRecurrentTestDataset', {'sigma': -1}, 'sigma: -1 must be >= 0 (noise std on the 0..255 scale)'),
])
def test_video_option_values_are_one_line_errors_with_the_options(dataset_type, over, message):
    meta = {'meta_info_file': 'meta.txt'} if 'Train' in dataset_type else {}
    with pytest.raises(UserError) as e:
        dataset_options(dataset_type, dataroot_gt='gt', dataroot_lq='lq', **meta, **over)
    assert str(e.value) == f'<options>: datasets.train.{message}'


@pytest.mark.parametrize('cls,over,message', [
    (VideoRecurrentTrainDataset, {'gt_size': 15, 'scale': 2}, 'datasets.train.gt_size: 15 is not divisible by scale 2'),
    (VideoRecurrentTrainDataset, {'gt_size': 48}, 'datasets.train.gt_size: 48 is larger than the 32×32 frames of '
                                                  'clip a (meta_info_file)'),
    (VideoRecurrentTestDataset, {'spike_repr': 'count', 'spike_repr_params': {'num_bins': 4, 'window': 2}},
     'datasets.train.spike_repr_params.num_bins: 4 bins need a window of at least 4 planes, got window 2'),
])
def test_video_option_values_are_one_line_errors_at_construction(pattern_root, cls, over, message):
    opt = make_opt(cls, pattern_root, dataroot_spike=str(pattern_root / 'spike'), **{**SPIKE_RAW, **over})
    with pytest.raises(UserError) as e:
        cls(opt)
    assert str(e.value) == message
