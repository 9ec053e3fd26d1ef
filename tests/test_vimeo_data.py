"""Vimeo-90K datasets (video SR and frame interpolation), the `vimeo` demo data and scripts/make_lmdb.py."""
import importlib.util
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, clean_env, dataset_options
from data.loader import build_train_loader
from data.registry import build_dataset
from data.synthetic.demo import COMPLETE_MARKER, ensure_demo_data
from data.synthetic.vimeo import SPLITS, bd_downsample, make_vimeo, septuplet
from utils.errors import UserError
from utils.image import images_to_float, imread_uint, imresize_bicubic, to_float_image

# pytest-xdist keeps this module on one worker: its generated Vimeo sets and LMDB are built once for the module
pytestmark = pytest.mark.xdist_group('test_vimeo_data')

TRAIN_SEQS = [f'{c}/{s}' for c, s in SPLITS['train']]
TEST_SEQS = [f'{c}/{s}' for c, s in SPLITS['test']]


@pytest.fixture(scope='module')
def vimeo(tmp_path_factory):
    return tmp_path_factory.mktemp('data') / 'demo_data' / 'vimeo'


@pytest.fixture(scope='module')
def vimeo_root(vimeo):
    """The demo data, generated through a dataset section as a training run does."""
    ensure_demo_data(_opt('VideoRecurrentTrainVimeoDataset', vimeo, generate_demo='vimeo'))
    return vimeo


def _opt(dataset_type, root, phase='train', **over):
    """A validated section on the demo data: x4 SR (BI) on the train or test list."""
    split = 'train' if 'Train' in dataset_type else 'test'
    given = {'dataroot_gt': str(root / 'sequences'), 'meta_info_file': str(root / f'meta_info_Vimeo90K_{split}_GT.txt')}
    if 'VFI' not in dataset_type:
        given['dataroot_lq'] = str(root / 'sequences_BIx4')
    if 'Train' in dataset_type:
        given['gt_size'] = 32
        if 'VFI' not in dataset_type:
            given['scale'] = 4
    given.update(over)
    return dataset_options(dataset_type, phase if 'Train' in dataset_type else 'test', **given)


def _frames(root, folder, seq, numbers):
    """The float frames im<n> of a sequence as T×3×H×W, as the datasets return them."""
    arr = np.stack([imread_uint(str(root / folder / seq / f'im{n}.png')) for n in numbers])
    return torch.from_numpy(arr.transpose(0, 3, 1, 2).astype(np.float32) / 255)


def _whole(root, **over):
    """Training items that are whole, unflipped frames (gt_size = frame size), so frames can be named."""
    return build_dataset(_opt('VideoRecurrentTrainVimeoDataset', root, gt_size=64, use_hflip=False,
                              use_rot=False, **over))


def _all_files(root):
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), 'rb').read()
            for d, _, files in os.walk(root) for f in files}


def test_vimeo_demo_is_deterministic_idempotent_and_laid_out_as_vimeo(vimeo_root, tmp_path):
    files = _all_files(vimeo_root)
    assert COMPLETE_MARKER in files
    for folder in ('sequences', 'sequences_BIx4', 'sequences_BDx4'):
        assert sum(f.startswith(folder + os.sep) for f in files) == 6 * 7
    assert files['meta_info_Vimeo90K_train_GT.txt'].decode().splitlines() == [f'{s} 7 (64,64,3)' for s in TRAIN_SEQS]
    assert files['meta_info_Vimeo90K_test_GT.txt'].decode().splitlines() == [f'{s} 7 (64,64,3)' for s in TEST_SEQS]
    gt = septuplet(4)
    for t in (0, 6):
        name = os.path.join('00002', '0002', f'im{t + 1}.png')
        np.testing.assert_array_equal(imread_uint(str(vimeo_root / 'sequences' / name)), gt[t])
        np.testing.assert_array_equal(imread_uint(str(vimeo_root / 'sequences_BIx4' / name)),
                                      imresize_bicubic(gt[t], 1 / 4))
        np.testing.assert_array_equal(imread_uint(str(vimeo_root / 'sequences_BDx4' / name)), bd_downsample(gt[t]))
    assert np.abs(gt[0].astype(int) - gt[6]).mean() > 5, 'the frames of a septuplet should move'
    stamp = os.stat(vimeo_root / 'sequences' / '00001' / '0001' / 'im1.png').st_mtime_ns
    make_vimeo(str(vimeo_root))
    assert os.stat(vimeo_root / 'sequences' / '00001' / '0001' / 'im1.png').st_mtime_ns == stamp
    assert _all_files(make_vimeo(str(tmp_path / 'again'))) == files


def test_vimeo_demo_refuses_paths_it_does_not_write(tmp_path):
    root = tmp_path / 'demo_data'
    with pytest.raises(UserError, match=r'^datasets.train.dataroot_gt: generate_demo "vimeo" needs a path ending in'):
        ensure_demo_data(_opt('VideoRecurrentTrainVimeoDataset', root, generate_demo='vimeo',
                              dataroot_gt=str(root / 'gt')))
    with pytest.raises(UserError, match=r'^datasets.train.dataroot_lq: generate_demo "vimeo" writes .*sequences_BDx4'):
        ensure_demo_data(_opt('VideoRecurrentTrainVimeoDataset', root, generate_demo='vimeo',
                              dataroot_lq=str(root / 'lq')))
    assert not root.exists()


@pytest.mark.parametrize('num_frame, numbers', [(7, [1, 2, 3, 4, 5, 6, 7]), (5, [2, 3, 4, 5, 6]), (3, [3, 4, 5]),
                                                (1, [4])])
def test_train_items_are_kair_s_centred_frames_of_the_septuplet(vimeo_root, num_frame, numbers):
    ds = _whole(vimeo_root, num_frame=num_frame)
    assert len(ds) == 4
    item = ds[(2, 11)]
    assert item['key'] == item['folder'] == TRAIN_SEQS[2]
    torch.testing.assert_close(to_float_image(item['H']), _frames(vimeo_root, 'sequences', TRAIN_SEQS[2], numbers),
                               rtol=0, atol=0)
    torch.testing.assert_close(to_float_image(item['L']), _frames(vimeo_root, 'sequences_BIx4', TRAIN_SEQS[2], numbers),
                               rtol=0, atol=0)


def test_crops_flips_and_reverse_depend_on_the_key_only(vimeo_root):
    ds = build_dataset(_opt('VideoRecurrentTrainVimeoDataset', vimeo_root, random_reverse=True))
    item = ds[(1, 5)]
    assert item['L'].shape == (7, 3, 8, 8) and item['H'].shape == (7, 3, 32, 32) and item['L'].dtype == torch.uint8
    for seed in range(6):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        again = ds[(1, 5)]
        assert torch.equal(again['L'], item['L']) and torch.equal(again['H'], item['H'])
    assert torch.equal(ds[3]['H'], ds[3]['H'])      # a bare index seeds with itself
    others = [ds[(1, s)]['H'] for s in range(6, 12)]
    assert sum(not torch.equal(o, item['H']) for o in others) >= 5


def test_interval_and_reverse_are_drawn_from_the_seed_and_stay_centred(vimeo_root):
    ds = _whole(vimeo_root, num_frame=3, interval_list=[1, 2, 3], random_reverse=True)
    gt = _frames(vimeo_root, 'sequences', TRAIN_SEQS[0], range(1, 8))
    seen = set()
    for seed in range(40):
        H = to_float_image(ds[(0, seed)]['H'])
        numbers = [next(n for n in range(7) if torch.equal(gt[n], frame)) + 1 for frame in H]
        assert numbers in ([3, 4, 5], [2, 4, 6], [1, 4, 7], [5, 4, 3], [6, 4, 2], [7, 4, 1])
        seen.add(tuple(numbers))
    assert len(seen) == 6


def test_mirror_sequence_appends_the_reversed_clip_and_pad_sequence_repeats_the_last_frame(vimeo_root):
    plain = _whole(vimeo_root, random_reverse=True)
    mirror = _whole(vimeo_root, random_reverse=True, mirror_sequence=True)
    pad = _whole(vimeo_root, random_reverse=True, pad_sequence=True)
    for key in [(0, 1), (3, 2), (2, 9)]:
        a, m, p = plain[key], mirror[key], pad[key]
        for name in ('L', 'H'):
            assert m[name].shape[0] == 14 and p[name].shape[0] == 8
            assert torch.equal(m[name], torch.cat([a[name], a[name].flip(0)]))
            assert torch.equal(p[name], torch.cat([a[name], a[name][-1:]]))
    test_pad = build_dataset(_opt('VideoTestVimeo90KDataset', vimeo_root, pad_sequence=True))[0]
    test_mirror = build_dataset(_opt('VideoTestVimeo90KDataset', vimeo_root, mirror_sequence=True))[0]
    whole = _frames(vimeo_root, 'sequences', TEST_SEQS[0], [1, 2, 3, 4, 5, 6, 7, 7])
    assert torch.equal(test_pad['H'], whole) and test_pad['L'].shape == (8, 3, 16, 16)
    assert torch.equal(test_mirror['H'], torch.cat([whole[:7], whole[:7].flip(0)]))
    assert test_mirror['L'].shape == (14, 3, 16, 16)


@pytest.mark.parametrize('dataset_type', ['VideoRecurrentTrainVimeoDataset', 'VideoRecurrentTrainVimeoVFIDataset'])
def test_loaders_with_0_and_2_workers_give_identical_batches(vimeo_root, dataset_type):
    # VFI: KAIR's 009 choices, colour jitter included (drawn from the sample's seed like every other choice)
    extra = {'mirror_sequence': True} if 'VFI' not in dataset_type else {'temporal_scale': 2, 'color_jitter': True}
    batches = {}
    for workers in (0, 2):
        opt = _opt(dataset_type, vimeo_root, random_reverse=True, dataloader_num_workers=workers,
                   dataloader_batch_size=2, **extra)
        loader, sampler = build_train_loader(build_dataset(opt), opt, 1, 0, 17, torch.device('cpu'))
        got = []
        for epoch in range(2):
            sampler.set_epoch(epoch)
            got += [(b['L'], b['H'], b['key']) for b in loader]
        batches[workers] = got
    assert len(batches[0]) == 4
    for (l0, h0, k0), (l2, h2, k2) in zip(batches[0], batches[2]):
        assert torch.equal(l0, l2) and torch.equal(h0, h2) and k0 == k2


def test_frame_interpolation_inputs_are_the_odd_frames_and_the_target_is_im4(vimeo_root):
    vfi = build_dataset(_opt('VideoRecurrentTrainVimeoVFIDataset', vimeo_root, gt_size=64, use_hflip=False,
                             use_rot=False, temporal_scale=2))
    item = vfi[(1, 3)]
    seq = TRAIN_SEQS[1]
    assert torch.equal(to_float_image(item['L']), _frames(vimeo_root, 'sequences', seq, [1, 3, 5, 7]))
    assert torch.equal(to_float_image(item['H']), _frames(vimeo_root, 'sequences', seq, [4]))
    # KAIR's name with temporal_scale 2 is the same data set
    kair = build_dataset(_opt('VideoRecurrentTrainVimeoDataset', vimeo_root, temporal_scale=2, scale=1,
                              dataroot_lq=str(vimeo_root / 'sequences')))
    crops = build_dataset(_opt('VideoRecurrentTrainVimeoVFIDataset', vimeo_root, temporal_scale=2))
    for key in [(0, 4), (3, 8)]:
        a, b = kair[key], crops[key]
        assert a['L'].shape == (4, 3, 32, 32) and a['H'].shape == (1, 3, 32, 32)
        assert torch.equal(a['L'], b['L']) and torch.equal(a['H'], b['H'])
    three = build_dataset(_opt('VideoRecurrentTrainVimeoVFIDataset', vimeo_root, gt_size=64, use_hflip=False,
                               use_rot=False, num_frame=3, random_reverse=True, temporal_scale=2))
    seen = set()
    for seed in range(12):
        it = images_to_float(three[(0, seed)])
        inputs = _frames(vimeo_root, 'sequences', TRAIN_SEQS[0], [3, 5])
        assert torch.equal(it['H'], _frames(vimeo_root, 'sequences', TRAIN_SEQS[0], [4]))
        seen.add(torch.equal(it['L'], inputs) or (torch.equal(it['L'], inputs.flip(0)) and 'reversed'))
    assert seen == {True, 'reversed'}


def _kair_vimeo_inputs(num_frame, temporal_scale):
    """KAIR's Vimeo frame choice, written out: `[i + (9 - num_frame) // 2 for i in range(num_frame)][::temporal_scale]`
    (dataset_video_train.py and dataset_video_test.py); the interpolation target is always im4."""
    return [i + (9 - num_frame) // 2 for i in range(num_frame)][::temporal_scale]


@pytest.mark.parametrize('temporal_scale', [1, 2])
@pytest.mark.parametrize('num_frame', [7, 5, 3])
def test_frame_interpolation_picks_kairs_frames_for_temporal_scale_1_and_2(vimeo_root, caplog, num_frame,
                                                                          temporal_scale):
    kair_inputs = _kair_vimeo_inputs(num_frame, temporal_scale)
    with caplog.at_level('WARNING', logger='restoration'):
        train = build_dataset(_opt('VideoRecurrentTrainVimeoVFIDataset', vimeo_root, gt_size=64, use_hflip=False,
                                   use_rot=False, num_frame=num_frame, temporal_scale=temporal_scale))
    # KAIR's default temporal_scale 1 feeds the target itself to the network: said once
    warned = [r.getMessage() for r in caplog.records if 'temporal_scale' in r.getMessage()]
    assert len(warned) == (4 in kair_inputs) and all('makes the target (the centre frame) one of the inputs' in w
                                                     for w in warned)
    item = images_to_float(train[(1, 3)])
    seq = TRAIN_SEQS[1]
    assert torch.equal(item['L'], _frames(vimeo_root, 'sequences', seq, kair_inputs))
    assert torch.equal(item['H'], _frames(vimeo_root, 'sequences', seq, [4]))
    if num_frame == 7:  # KAIR's 009 test set: VideoTestVimeo90KDataset with the same temporal_scale
        test = build_dataset(_opt('VideoTestVimeo90KDataset', vimeo_root, num_frame=7, temporal_scale=temporal_scale,
                                  dataroot_lq=str(vimeo_root / 'sequences')))[1]
        assert [os.path.basename(p) for p in test['lq_path']] == [f'im{i}.png' for i in kair_inputs]
        # interpolation (2): the target is im4 as in KAIR; restoration (1): every frame's target, of which
        # val.center_frame_only scores im4 alone (KAIR returns only im4)
        assert [os.path.basename(p) for p in test['gt_path']] == (['im4.png'] if temporal_scale == 2 else
                                                                  [f'im{i}.png' for i in kair_inputs])


def test_colour_jitter_changes_input_and_target_alike_and_only_slightly(vimeo_root):
    plain = build_dataset(_opt('VideoRecurrentTrainVimeoVFIDataset', vimeo_root, temporal_scale=2))
    jitter = build_dataset(_opt('VideoRecurrentTrainVimeoVFIDataset', vimeo_root, temporal_scale=2, color_jitter=True))
    a, b = images_to_float(plain[(2, 9)]), images_to_float(jitter[(2, 9)])
    assert jitter[(2, 9)]['L'].dtype == torch.uint8  # still the loader's format
    assert not torch.equal(a['L'], b['L']) and not torch.equal(a['H'], b['H'])
    assert (a['L'] - b['L']).abs().mean() < 0.05 and (a['H'] - b['H']).abs().mean() < 0.05  # +-5 % factors
    assert torch.equal(images_to_float(jitter[(2, 9)])['L'], b['L'])  # a function of the sample seed
    # one draw for the whole item: the same factors on an input frame and on the target when they are equal
    same = build_dataset(_opt('VideoRecurrentTrainVimeoVFIDataset', vimeo_root, temporal_scale=1, gt_size=64,
                              use_hflip=False, use_rot=False, color_jitter=True))[(0, 5)]
    assert torch.equal(same['L'][3], same['H'][0])  # im4 is both input and target at temporal_scale 1


@pytest.mark.parametrize('dataset_type, over', [('VideoTestVimeo90KVFIDataset', {}),
                                                ('VideoTestVimeo90KDataset', {'temporal_scale': 2})])
def test_frame_interpolation_test_sets_give_the_known_frames_and_the_middle_one(vimeo_root, dataset_type, over):
    if 'VFI' not in dataset_type:
        over = {**over, 'dataroot_lq': str(vimeo_root / 'sequences')}
    ds = build_dataset(_opt(dataset_type, vimeo_root, **over))
    assert len(ds) == 2
    item = ds[1]
    assert item['folder'] == TEST_SEQS[1]
    assert [os.path.basename(p) for p in item['lq_path']] == ['im1.png', 'im3.png', 'im5.png', 'im7.png']
    assert torch.equal(item['L'], _frames(vimeo_root, 'sequences', TEST_SEQS[1], [1, 3, 5, 7]))
    assert torch.equal(item['H'], _frames(vimeo_root, 'sequences', TEST_SEQS[1], [4]))


def test_a_height_by_width_gt_size_crops_every_frame_alike_and_batches(vimeo_root):
    ds = build_dataset(_opt('VideoRecurrentTrainVimeoDataset', vimeo_root, gt_size=[16, 48], pad_sequence=True))
    items = [ds[(i % len(ds), i)] for i in range(8)]
    assert {tuple(i['H'].shape) for i in items} == {(8, 3, 16, 48)} and {tuple(i['L'].shape) for i in items} == {
        (8, 3, 4, 12)}
    with pytest.raises(UserError, match=r'^datasets\.train\.gt_size: \[16, 50\] is not divisible by scale 4$'):
        build_dataset(_opt('VideoRecurrentTrainVimeoDataset', vimeo_root, gt_size=[16, 50]))


def test_frame_interpolation_items_have_the_shapes_of_vrt_s_interpolation_network(vimeo_root):
    from models.networks.vrt import VRT
    torch.manual_seed(0)
    net = VRT(upscale=1, img_size=[4, 64, 64], window_size=[4, 8, 8], depths=[1] * 8, indep_reconsts=[],
              embed_dims=[8] * 8, num_heads=[1] * 8, pa_frames=0, drop_path_rate=0.).eval()
    item = build_dataset(_opt('VideoRecurrentTrainVimeoVFIDataset', vimeo_root, gt_size=64, temporal_scale=2))[(0, 1)]
    with torch.no_grad():
        out = net(to_float_image(item['L'])[None])
    assert out.shape == item['H'][None].shape == (1, 1, 3, 64, 64)


def test_test_set_gives_whole_septuplets_deterministically_and_bd_is_another_lq_folder(vimeo_root):
    ds = build_dataset(_opt('VideoTestVimeo90KDataset', vimeo_root))
    item = ds[0]
    assert len(ds) == 2 and item['folder'] == TEST_SEQS[0]
    assert torch.equal(item['H'], _frames(vimeo_root, 'sequences', TEST_SEQS[0], range(1, 8)))
    assert torch.equal(item['L'], _frames(vimeo_root, 'sequences_BIx4', TEST_SEQS[0], range(1, 8)))
    again = build_dataset(_opt('VideoTestVimeo90KDataset', vimeo_root))[0]
    assert torch.equal(again['L'], item['L']) and torch.equal(again['H'], item['H'])
    assert torch.equal(build_dataset(_opt('VideoTestVimeo90KDataset', vimeo_root, num_frame=-1))[0]['L'], item['L'])
    bd = build_dataset(_opt('VideoTestVimeo90KDataset', vimeo_root, dataroot_lq=str(vimeo_root / 'sequences_BDx4')))[0]
    assert torch.equal(bd['H'], item['H']) and bd['L'].shape == item['L'].shape and not torch.equal(bd['L'], item['L'])
    three = build_dataset(_opt('VideoTestVimeo90KDataset', vimeo_root, num_frame=3))[0]
    assert [os.path.basename(p) for p in three['gt_path']] == ['im3.png', 'im4.png', 'im5.png']
    with pytest.raises(UserError, match=r'^datasets.test.dataset_type: VideoTestVimeo90KDataset yields whole'):
        ds.check_train_options()


def _run_make_lmdb(*args):
    r = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'make_lmdb.py'), *map(str, args)],
                       env=clean_env(OMP_NUM_THREADS='1'), capture_output=True, text=True, timeout=120)
    return r


@pytest.fixture(scope='module')
def vimeo_lmdb(vimeo_root, tmp_path_factory):
    out = tmp_path_factory.mktemp('lmdb')
    for folder, compress in (('sequences', 'fast'), ('sequences_BIx4', 'none')):
        r = _run_make_lmdb('--input', vimeo_root / folder, '--output', out / f'{folder}.lmdb', '--layout', 'vimeo',
                           '--compress', compress)
        assert r.returncode == 0, r.stderr
        assert 'make_lmdb: 42 frames' in r.stderr
    return out


def test_lmdb_built_by_the_script_holds_byte_equal_frames_under_basicsr_keys(vimeo_root, vimeo_lmdb):
    import cv2
    import lmdb
    meta = (vimeo_lmdb / 'sequences.lmdb' / 'meta_info.txt').read_text().splitlines()
    assert len(meta) == 42 and meta[0] == '00001/0001/im1.png (64,64,3) 1'
    assert (vimeo_lmdb / 'sequences_BIx4.lmdb' / 'meta_info.txt').read_text().splitlines()[-1] == \
        '00002/0003/im7.png (16,16,3) 0'
    for folder in ('sequences', 'sequences_BIx4'):
        env = lmdb.open(str(vimeo_lmdb / f'{folder}.lmdb'), readonly=True, lock=False)
        with env.begin() as txn:
            keys = [k.decode() for k, _ in txn.cursor()]
            assert keys == [f'{c}/{s}/im{i}' for c, s in SPLITS['train'] + SPLITS['test'] for i in range(1, 8)]
            for key in keys:
                img = cv2.imdecode(np.frombuffer(txn.get(key.encode()), np.uint8), cv2.IMREAD_COLOR)
                want = imread_uint(str(vimeo_root / folder / f'{key}.png'))
                assert img.dtype == np.uint8 and img[:, :, ::-1].tobytes() == want.tobytes()
        env.close()


@pytest.mark.parametrize('dataset_type', ['VideoRecurrentTrainVimeoDataset', 'VideoRecurrentTrainVimeoVFIDataset'])
def test_lmdb_backend_gives_the_same_training_items_as_the_folders(vimeo_root, vimeo_lmdb, dataset_type):
    lmdb_roots = {'dataroot_gt': str(vimeo_lmdb / 'sequences.lmdb')}
    if 'VFI' not in dataset_type:
        lmdb_roots['dataroot_lq'] = str(vimeo_lmdb / 'sequences_BIx4.lmdb')
    common = {'random_reverse': True, 'pad_sequence': 'VFI' not in dataset_type}
    if 'VFI' in dataset_type:
        common.pop('pad_sequence')
    disk = build_dataset(_opt(dataset_type, vimeo_root, **common))
    db = build_dataset(_opt(dataset_type, vimeo_root, io_backend={'type': 'lmdb'}, **lmdb_roots, **common))
    for key in [(0, 3), (1, 4), (3, 99), 2]:
        a, b = disk[key], db[key]
        assert torch.equal(a['L'], b['L']) and torch.equal(a['H'], b['H']) and a['key'] == b['key']


def _load_script():
    spec = importlib.util.spec_from_file_location('make_lmdb_script', os.path.join(ROOT, 'scripts', 'make_lmdb.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_lmdb_prints_plain_progress_lines_without_tqdm_and_reads_the_reds_layout(vimeo_root, tmp_path,
                                                                                       monkeypatch, capsys):
    script = _load_script()
    monkeypatch.setitem(sys.modules, 'tqdm', None)
    clips = tmp_path / 'reds'
    for c in ('000', '001'):
        for i in range(10):
            src = vimeo_root / 'sequences' / '00001' / '0001' / f'im{i % 7 + 1}.png'
            os.makedirs(clips / c, exist_ok=True)
            (clips / c / f'{i:08d}.png').write_bytes(src.read_bytes())
    (tmp_path / 'meta.txt').write_text('001 10 (64,64,3) 0\n')
    assert script.main(['--input', str(clips), '--output', str(tmp_path / 'r.lmdb'), '--meta-info',
                        str(tmp_path / 'meta.txt')]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(' (')[0] for ln in lines[:-1]] == [f'reds -> r.lmdb: {i}/10 frames' for i in range(1, 11)]
    meta = (tmp_path / 'r.lmdb' / 'meta_info.txt').read_text().splitlines()
    assert meta == [f'001/{i:08d}.png (64,64,3) 1' for i in range(10)]
    assert sorted(os.listdir(tmp_path)) == ['meta.txt', 'r.lmdb', 'reds']  # no temporary folder left


@pytest.mark.parametrize('args, message', [
    (['--input', '{tmp}/nowhere', '--output', '{tmp}/x.lmdb'], 'make_lmdb: --input: folder not found: {tmp}/nowhere'),
    (['--input', '{root}/sequences', '--output', '{tmp}/x.lmdb'],
     'make_lmdb: --input: no frames <clip>/<frame>.png in {root}/sequences (--layout reds)'),
    (['--input', '{root}/sequences', '--output', '{root}', '--layout', 'vimeo'],
     'make_lmdb: --output: {root} already exists; remove it or choose another path'),
    (['--input', '{root}/sequences', '--output', '{tmp}/x.lmdb', '--meta-info', '{tmp}/none.txt'],
     'make_lmdb: --meta-info: file not found: {tmp}/none.txt'),
])
def test_make_lmdb_problems_are_one_line_and_exit_2(vimeo_root, tmp_path, capsys, args, message):
    script = _load_script()
    fill = {'tmp': str(tmp_path), 'root': str(vimeo_root)}
    assert script.main([a.format(**fill) for a in args]) == 2
    assert capsys.readouterr().err == message.format(**fill) + '\n'
    assert not (tmp_path / 'x.lmdb').exists()


@pytest.mark.parametrize('dataset_type, over, message', [
    ('VideoRecurrentTrainVimeoDataset', {'meta_info_file': '{tmp}/bad.txt'},
     'datasets.train.meta_info_file: {tmp}/bad.txt:2: expected "<clip>/<seq> [num_frames (h,w,c)]" like '
     '"00001/0001 7 (256,448,3)", got "00001/0002 seven (64,64,3)"'),
    ('VideoTestVimeo90KDataset', {'meta_info_file': '{tmp}/noslash.txt'},
     'datasets.test.meta_info_file: {tmp}/noslash.txt:1: expected "<clip>/<seq> [num_frames (h,w,c)]" like '
     '"00001/0001 7 (256,448,3)", got "000 100 (64,64,3)"'),
    ('VideoRecurrentTrainVimeoDataset', {'meta_info_file': '{tmp}/none.txt'},
     'datasets.train.meta_info_file: file not found: {tmp}/none.txt'),
    ('VideoRecurrentTrainVimeoDataset', {'dataroot_lq': '{tmp}/nowhere'},
     'datasets.train.dataroot_lq: folder not found: {tmp}/nowhere'),
    ('VideoTestVimeo90KDataset', {'meta_info_file': '{tmp}/missing_seq.txt'},
     'datasets.test.dataroot_gt: sequence 00009/0001 listed in meta_info_file not found: {root}/sequences/00009/0001'),
    ('VideoRecurrentTrainVimeoDataset', {'num_frame': 8},
     'datasets.train.num_frame: 8 frames at interval 1 need 8 frames but sequence 00001/0001 has 7 (meta_info_file)'),
    ('VideoRecurrentTrainVimeoDataset', {'num_frame': 3, 'interval_list': [1, 4]},
     'datasets.train.num_frame: 3 frames at interval 4 need 9 frames but sequence 00001/0001 has 7 (meta_info_file)'),
    ('VideoRecurrentTrainVimeoDataset', {'pad_sequence': True, 'mirror_sequence': True},
     'datasets.train.pad_sequence: give pad_sequence (VRT, 7 → 8 frames) or mirror_sequence (RVRT, 7 → 14 frames), '
     'not both'),
    ('VideoRecurrentTrainVimeoDataset', {'temporal_scale': 3},
     '<options>: datasets.train.temporal_scale: 3 must be 1 (restoration) or 2 (frame interpolation)'),
    ('VideoRecurrentTrainVimeoDataset', {'temporal_scale': 2},
     'datasets.train.scale: frame interpolation keeps the frame size: scale must be 1, got 4'),
    ('VideoTestVimeo90KDataset', {'temporal_scale': 2, 'mirror_sequence': True},
     'datasets.test.mirror_sequence: not for frame interpolation: the network takes exactly the known frames; '
     'set it to false'),
    ('VideoRecurrentTrainVimeoVFIDataset', {'temporal_scale': 0},
     '<options>: datasets.train.temporal_scale: 0 must be >= 1'),
    ('VideoRecurrentTrainVimeoVFIDataset', {'color_jitter': 'yes'},
     '<options>: datasets.train.color_jitter: expected true/false, got "yes"'),
    ('VideoRecurrentTrainVimeoDataset', {'temporal_scale': 2, 'scale': 1, 'num_frame': 5},
     'datasets.train.num_frame: frame interpolation needs a window whose centre frame is not an input (every second '
     'frame is): 3 (im3, im5 → im4) or 7 (im1, im3, im5, im7 → im4), got 5'),
    ('VideoRecurrentTrainVimeoDataset', {'test_mode': True},
     '<options>: datasets.train.test_mode: true must be false: Vimeo-90K has no clips to hold out here (its test '
     'split is meta_info_Vimeo90K_test_GT.txt); evaluate with VideoTestVimeo90KDataset'),
    ('VideoRecurrentTrainVimeoDataset', {'gt_size': 128},
     'datasets.train.gt_size: 128 is larger than the 64×64 frames of sequence 00001/0001 (meta_info_file)'),
    ('VideoRecurrentTrainVimeoDataset', {'gt_size': 30}, 'datasets.train.gt_size: 30 is not divisible by scale 4'),
    ('VideoRecurrentTrainVimeoDataset', {'filename_tmpl': 'q'},
     '<options>: datasets.train.filename_tmpl: "q" is not an integer format spec like "d"'),
    ('VideoTestVimeo90KDataset', {'io_backend': {'type': 'lmdb'}},
     '<options>: datasets.test.io_backend: {{"type": "lmdb"}} must be {{"type": "disk"}} here'),
    ('VideoTestVimeo90KDataset', {'cache_data': True},
     '<options>: datasets.test.cache_data: true must be false: not supported for Vimeo-90K (KAIR refuses it too): '
     'sequences are read when needed'),
])
def test_bad_options_are_one_line_errors_naming_the_key(vimeo_root, tmp_path, dataset_type, over, message):
    (tmp_path / 'bad.txt').write_text('00001/0001 7 (64,64,3)\n00001/0002 seven (64,64,3)\n')
    (tmp_path / 'noslash.txt').write_text('000 100 (64,64,3)\n')
    (tmp_path / 'missing_seq.txt').write_text('00002/0002 7 (64,64,3)\n00009/0001 7 (64,64,3)\n')
    fill = {'tmp': str(tmp_path), 'root': str(vimeo_root)}
    over = {k: v.format(**fill) if isinstance(v, str) else v for k, v in over.items()}
    phase = 'train' if 'Train' in dataset_type else 'test'
    given = {k: v for k, v in _opt(dataset_type, vimeo_root).items()
             if not k.startswith('_') and k not in ('phase', 'dataset_type')}
    with pytest.raises(UserError) as e:  # a value alone: the options; values together and files: the dataset
        build_dataset(dataset_options(dataset_type, phase, **{**given, **over}))
    assert str(e.value) == message.format(**fill)


def test_a_missing_or_damaged_frame_is_named_when_the_set_is_built(vimeo_root, tmp_path):
    import shutil
    root = tmp_path / 'copy'
    shutil.copytree(vimeo_root, root)
    os.remove(root / 'sequences_BIx4' / '00001' / '0002' / 'im3.png')
    (root / 'sequences' / '00002' / '0001' / 'im5.png').write_bytes(b'')
    with pytest.raises(UserError) as e:
        build_dataset(_opt('VideoRecurrentTrainVimeoDataset', root))
    assert str(e.value).splitlines() == [
        f'datasets.train.dataroot_lq: {root}/sequences_BIx4/00001/0002/im3.png: cannot read: No such file or directory',
        f'datasets.train.dataroot_gt: {root}/sequences/00002/0001/im5.png: empty file',
    ]
