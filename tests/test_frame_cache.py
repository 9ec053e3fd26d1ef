"""`cache_data`: decoded frames held in RAM never change what a dataset yields, a corrupt file still
fails with one line naming it, and a cache that cannot fit is refused before it is filled.

Under DDP a node holds one copy: two real ranks (gloo, env://, tests/frame_cache_worker.py) map the
same memory file, which only the first decoded; a refusal or a corrupt file is the same line on both;
a SIGKILL leaves nothing behind.

Also the other fast storage: LMDB frames stored raw (`--compress raw`) give the same items as PNG frames.
"""
import json
import os
import re
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from conftest import ROOT, clean_env, damage_pixels, free_port, run, run_main, tiny_options, unchecked_section, write_options
from data import frame_cache
from data.datasets.image import DatasetDnCNN, DatasetPlain, DatasetSR
from data.datasets.video import VideoRecurrentTrainDataset
from data.frame_cache import FrameCache
from data.lmdb_util import decode_frame, encode_raw_frame, make_lmdb_from_folder
from data.loader import build_train_loader
from data.synthetic.gopro import make_gopro_spike
from frame_cache_worker import mapping_of
from utils.errors import UserError
from utils.image import imread_uint, imwrite
from utils.memory import MemoryBudget

PY = sys.executable
TRAIN_KEYS = [(0, 11), (3, 12345), (5, 7)]


def _images(folder, count=6, seed=0):
    """Colour, gray and RGBA PNGs of a few sizes: every conversion imread_uint makes."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        h, w = 40 + 4 * i, 48 + 8 * (i % 2)
        channels = (3, 1, 4)[i % 3]
        imwrite(os.path.join(folder, f'{i:03d}.png'), rng.integers(0, 256, (h, w, channels)).astype(np.uint8))
    return str(folder)


def _items_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if torch.is_tensor(a[k]):
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


@pytest.mark.parametrize('cls, extra', [
    (DatasetDnCNN, {'H_size': 24}),
    (DatasetSR, {'H_size': 24, 'scale': 2}),
    (DatasetPlain, {'H_size': 24}),
], ids=['dncnn', 'sr', 'plain'])
@pytest.mark.parametrize('n_channels', [3, 1])
def test_cached_image_datasets_yield_the_same_training_and_evaluation_items(tmp_path, cls, extra, n_channels):
    root = _images(tmp_path / 'H')
    if cls is DatasetPlain:
        extra = dict(extra, dataroot_L=root)
    opts = dict(dataroot_H=root, n_channels=n_channels, **extra)
    for phase, keys in (('train', TRAIN_KEYS), ('test', [0, 4])):
        plain = cls(unchecked_section(cls, phase, **opts))
        cached = cls(unchecked_section(cls, phase, cache_data=True, **opts))
        assert plain.cache is None and cached.cache is not None
        for key in keys:
            _items_equal(plain[key], cached[key])


def test_the_cache_holds_what_the_reader_returns_in_one_shared_read_only_buffer(tmp_path):
    root = _images(tmp_path / 'H', count=3)
    ds = DatasetDnCNN(unchecked_section(DatasetDnCNN, 'train', dataroot_H=root, H_size=24, cache_data=True))
    sizes = [imread_uint(p, 3).size for p in ds.paths_H]
    assert ds.cache.buffer.size == sum(sizes)
    for path in ds.paths_H:
        frame = ds.cache.get(path)
        np.testing.assert_array_equal(frame, imread_uint(path, 3, bgr=True))
        assert not frame.flags.writeable and frame.base is not None  # a view, not a copy


def test_a_single_process_caches_in_a_memory_file_of_its_own_that_it_cannot_write(tmp_path):
    root = _images(tmp_path / 'H', count=3)
    cache = DatasetDnCNN(unchecked_section(DatasetDnCNN, 'train', dataroot_H=root, H_size=24, cache_data=True)).cache
    assert (cache.owner, cache.node_ranks) == (0, 1)
    assert mapping_of(cache.buffer)['name'].startswith('/memfd:frame_cache datasets.train')  # no file in /dev/shm
    assert not cache.buffer.flags.writeable
    with pytest.raises(ValueError):
        cache.buffer.flags.writeable = True  # mapped read-only once filled: not even the array's owner can write


def test_without_memfd_create_the_cache_is_anonymous_shared_memory_with_the_same_items(tmp_path, monkeypatch):
    root = _images(tmp_path / 'H')
    plain = DatasetDnCNN(unchecked_section(DatasetDnCNN, 'train', dataroot_H=root, H_size=24))

    def no_memfd(*args):
        raise OSError(38, 'Function not implemented')
    monkeypatch.setattr(os, 'memfd_create', no_memfd)
    cached = DatasetDnCNN(unchecked_section(DatasetDnCNN, 'train', dataroot_H=root, H_size=24, cache_data=True))
    assert mapping_of(cached.cache.buffer)['name'].startswith('/dev/zero')  # MAP_SHARED|MAP_ANONYMOUS
    for key in TRAIN_KEYS:
        _items_equal(plain[key], cached[key])


def test_a_fill_over_many_rounds_caches_the_same_frames(tmp_path, monkeypatch):
    root = _images(tmp_path / 'H')
    whole = DatasetDnCNN(unchecked_section(DatasetDnCNN, 'train', dataroot_H=root, H_size=24, cache_data=True))
    monkeypatch.setattr(frame_cache, 'ROUND_S', 0.0)  # one frame per round
    rounds = DatasetDnCNN(unchecked_section(DatasetDnCNN, 'train', dataroot_H=root, H_size=24, cache_data=True))
    np.testing.assert_array_equal(whole.cache.buffer, rounds.cache.buffer)


@pytest.fixture(scope='module')
def gopro(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('gopro'))
    return make_gopro_spike(root, train_clips=2, train_frames=8, test_clips=1, test_frames=4, size=64)


def _video(root, **over):
    opt = unchecked_section(VideoRecurrentTrainDataset, 'train', dataroot_gt=f'{root}/train_GT',
                            dataroot_lq=f'{root}/train_GT_blurred', meta_info_file=f'{root}/meta_info_GoPro_train_GT.txt',
                            filename_tmpl='06d', gt_size=32, num_frame=4, interval_list=[1, 2], random_reverse=True)
    opt.update(over)
    return VideoRecurrentTrainDataset(opt)


@pytest.mark.parametrize('spikes', [False, True], ids=['rgb', 'rgb+spike'])
def test_cached_video_clips_are_the_same_items(gopro, spikes):
    extra = {'dataroot_spike': f'{gopro}/train_spike', 'spike_repr': 'count', 'spike_repr_params': {'num_bins': 4}} \
        if spikes else {}
    plain, cached = _video(gopro, **extra), _video(gopro, cache_data=True, **extra)
    assert len(cached.cache.index) == 2 * len(cached)  # every GT and LQ frame
    for key in TRAIN_KEYS + [(9, 3), 2]:
        _items_equal(plain[key], cached[key])


def test_forked_loader_workers_read_the_cache_filled_before_they_started(gopro):
    cached, plain = _video(gopro, cache_data=True), _video(gopro)
    opt = {'dataloader_batch_size': 2, 'dataloader_num_workers': 2, 'dataloader_shuffle': True,
           'dataloader_persistent_workers': False, 'dataloader_prefetch_factor': 2, '_where': 'datasets.train'}
    batches = [list(build_train_loader(ds, opt, 1, 0, 5, torch.device('cpu'))[0]) for ds in (cached, plain)]
    assert len(batches[0]) == len(batches[1]) == len(plain) // 2
    for a, b in zip(*batches):
        assert torch.equal(a['L'], b['L']) and torch.equal(a['H'], b['H']) and a['key'] == b['key']


def _test_clips(root, cls=None, **over):
    from data.datasets.video import VideoRecurrentTestDataset
    cls = cls or VideoRecurrentTestDataset
    given = {'dataroot_gt': f'{root}/test_GT', 'dataroot_lq': f'{root}/test_GT_blurred'}
    if cls is not VideoRecurrentTestDataset:  # the denoising set reads GT folders only
        given = {'dataroot_gt': f'{root}/test_GT', 'sigma': 10}
    return cls(unchecked_section(cls, 'test', **{**given, **over}))


@pytest.mark.parametrize('kind', ['recurrent', 'recurrent+sigma', 'denoising'])
def test_cache_data_of_whole_clip_test_sets_holds_their_frames_and_yields_the_same_clips(gopro, tmp_path, kind):
    """KAIR's test sections say `cache_data: true`: honoured, as for training (one copy per node); every item
    is then read from RAM, so removing the files after the fill changes nothing."""
    import shutil
    from data.datasets.video_denoising import VideoRecurrentTestNonblindDenoisingDataset
    root = str(tmp_path / 'gopro')
    shutil.copytree(gopro, root)
    cls = VideoRecurrentTestNonblindDenoisingDataset if kind == 'denoising' else None
    extra = {'sigma': 10} if kind == 'recurrent+sigma' else {}
    plain, cached = _test_clips(root, cls, **extra), _test_clips(root, cls, cache_data=True, **extra)
    assert plain.cache is None and cached.cache is not None
    frames = sum(len(c[1]) for c in cached.clips)
    assert len(cached.cache.index) == (2 * frames if kind == 'recurrent' else frames)  # LQ unread with sigma
    items = [plain[i] for i in range(len(plain))]
    shutil.rmtree(root)
    for i, item in enumerate(items):
        _items_equal(item, cached[i])


def test_a_corrupt_image_fails_while_the_cache_fills_naming_the_file(tmp_path):
    root = _images(tmp_path / 'H')
    bad = os.path.join(root, '002.png')
    damage_pixels(bad)
    with pytest.raises(UserError, match=r'^datasets\.train: cannot decode image .*002\.png \(corrupt'):
        DatasetDnCNN(unchecked_section(DatasetDnCNN, 'train', dataroot_H=root, H_size=24, cache_data=True))


def test_a_corrupt_frame_fails_while_the_cache_fills_naming_the_file(gopro, tmp_path):
    import shutil
    root = str(tmp_path / 'gopro')
    shutil.copytree(gopro, root)
    bad = f'{root}/train_GT_blurred/train_001/000005.png'
    damage_pixels(bad)
    with pytest.raises(UserError, match=r'^datasets\.train: cannot decode image .*train_001/000005\.png'):
        _video(root, cache_data=True)


def test_main_train_with_a_corrupt_cached_image_exits_2_with_one_line_and_writes_nothing(tmp_path, demo_images):
    import shutil
    data = str(tmp_path / 'data')
    shutil.copytree(demo_images, data)
    damage_pixels(os.path.join(data, 'train', sorted(os.listdir(os.path.join(data, 'train')))[3]))
    opt = tiny_options(str(tmp_path / 'exp'), data)
    opt['datasets']['train']['cache_data'] = True
    res = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o.json'), opt)])
    assert res.returncode == 2, res.stderr[-2000:]
    ours = [ln for ln in res.stderr.splitlines() if not ln.startswith('libpng')]  # the decoder's own note
    assert len(ours) == 1 and ours[0].startswith('error: '), res.stderr
    assert 'cannot decode image' in ours[0] and os.path.join(data, 'train') in ours[0], res.stderr
    assert not (tmp_path / 'exp').exists()


def test_a_cache_larger_than_the_available_memory_is_refused_before_filling(tmp_path, monkeypatch):
    root = _images(tmp_path / 'H')
    monkeypatch.setattr(frame_cache, 'memory_budget', lambda: MemoryBudget(1000))
    with pytest.raises(UserError, match=r'datasets\.train: the decoded frames need .* GiB but this machine has .* '
                                        r'available; set cache_data to false'):
        DatasetDnCNN(unchecked_section(DatasetDnCNN, 'train', dataroot_H=root, H_size=24, cache_data=True))


def test_cache_data_is_true_false_or_auto_and_an_lmdb_is_never_cached(gopro, tmp_path):
    with pytest.raises(UserError, match=r'datasets\.train\.cache_data: must be true, false or "auto", got \'yes\''):
        _video(gopro, cache_data='yes')
    for name, folder in (('gt', 'train_GT'), ('lq', 'train_GT_blurred')):
        make_lmdb_from_folder(f'{gopro}/{folder}', tmp_path / f'{name}.lmdb')
    lmdb = {'io_backend': {'type': 'lmdb'}, 'dataroot_gt': str(tmp_path / 'gt.lmdb'), 'dataroot_lq': str(tmp_path / 'lq.lmdb')}
    with pytest.raises(UserError, match=r'cache_data: works with io_backend disk.*--compress raw'):
        _video(gopro, cache_data=True, **lmdb)
    assert _video(gopro, cache_data='auto', **lmdb).cache is None  # read from mapped memory already


def test_cache_data_auto_caches_what_fits_in_half_the_available_memory(tmp_path, monkeypatch, caplog):
    import logging
    root = _images(tmp_path / 'H')
    opts = dict(dataroot_H=root, H_size=24)
    plain = DatasetDnCNN(unchecked_section(DatasetDnCNN, 'train', **opts))
    with caplog.at_level(logging.INFO, logger='restoration'):
        auto = DatasetDnCNN(unchecked_section(DatasetDnCNN, 'train', cache_data='auto', **opts))
        assert auto.cache is not None and 'cache_data "auto": the decoded frames' in caplog.text
        for key in TRAIN_KEYS:
            _items_equal(plain[key], auto[key])
        need = sum(h * w * c for _, (h, w, c), _ in auto.cache.index.values())
        monkeypatch.setattr(frame_cache, 'memory_budget', lambda: MemoryBudget(2 * need - 1))  # just over half
        assert DatasetDnCNN(unchecked_section(DatasetDnCNN, 'train', cache_data='auto', **opts)).cache is None
        assert 'exceed 50% of the' in caplog.text and 'decoded per sample' in caplog.text
        monkeypatch.setattr(frame_cache, 'memory_budget', lambda: MemoryBudget(2 * need))
        assert DatasetDnCNN(unchecked_section(DatasetDnCNN, 'train', cache_data='auto', **opts)).cache is not None


def test_lmdb_frames_stored_raw_give_the_items_of_png_frames_and_of_the_folder(gopro, tmp_path):
    for kind, raw in (('png', False), ('raw', True)):
        for name, folder, exts in (('gt', 'train_GT', ['.png']), ('lq', 'train_GT_blurred', ['.png']),
                                   ('spike', 'train_spike', ['.npy'])):
            make_lmdb_from_folder(f'{gopro}/{folder}', tmp_path / kind / f'{name}.lmdb', exts, raw=raw)
    spikes = {'spike_repr': 'count', 'spike_repr_params': {'num_bins': 2}}
    disk = _video(gopro, dataroot_spike=f'{gopro}/train_spike', **spikes)
    sets = {kind: _video(gopro, io_backend={'type': 'lmdb'}, dataroot_gt=str(tmp_path / kind / 'gt.lmdb'),
                         dataroot_lq=str(tmp_path / kind / 'lq.lmdb'), dataroot_spike=str(tmp_path / kind / 'spike.lmdb'),
                         **spikes) for kind in ('png', 'raw')}
    raw_size = os.path.getsize(tmp_path / 'raw' / 'gt.lmdb' / 'data.mdb')
    assert raw_size > os.path.getsize(tmp_path / 'png' / 'gt.lmdb' / 'data.mdb')  # really the pixels
    for key in TRAIN_KEYS:
        _items_equal(disk[key], sets['png'][key])
        _items_equal(disk[key], sets['raw'][key])


def test_raw_frame_values_round_trip_and_a_truncated_one_names_the_key():
    frame = np.random.default_rng(0).integers(0, 256, (5, 7, 3)).astype(np.uint8)
    np.testing.assert_array_equal(decode_frame(encode_raw_frame(frame), 'x'), frame)
    with pytest.raises(UserError, match=r'^where: raw frame of \d+ bytes does not hold the 5x7x3 pixels'):
        decode_frame(encode_raw_frame(frame)[:-1], 'where')
    with pytest.raises(UserError, match=r'^key 1 in x\.lmdb is not an image'):
        decode_frame(b'not a png', 'key 1 in x.lmdb')


def test_make_lmdb_compress_raw_writes_decoded_frames_the_datasets_read(gopro, tmp_path):
    out = tmp_path / 'gt.lmdb'
    res = run([PY, 'scripts/make_lmdb.py', '--input', f'{gopro}/train_GT', '--output', str(out), '--compress', 'raw'])
    assert res.returncode == 0, res.stderr
    lines = (out / 'meta_info.txt').read_text().splitlines()
    assert lines[0] == 'train_000/000000.raw (64,64,3) raw' and len(lines) == 16
    ds = _video(gopro, io_backend={'type': 'lmdb'}, dataroot_gt=str(out), dataroot_lq=str(out),
                dataroot_spike=None)
    ref = _video(gopro, dataroot_lq=f'{gopro}/train_GT')
    for key in TRAIN_KEYS:
        _items_equal(ref[key], ds[key])


def test_frame_cache_refuses_a_frame_that_decodes_to_another_size_than_its_header():
    with pytest.raises(UserError, match=r'^w: a decodes to 2x2x3 but its header says 3x3x3'):
        FrameCache({'a': (3, 3, 3)}, lambda p: np.zeros((2, 2, 3), np.uint8), 'w')


# --- Two ranks of one node (real processes, gloo, env://) --------------------------------------------------------

WORKER = os.path.join(ROOT, 'tests', 'frame_cache_worker.py')


def _start_ranks(scenario, folder, **popen):
    port, second = str(free_port()), str(free_port())
    return [subprocess.Popen([PY, WORKER, scenario, folder], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=clean_env(WORLD_SIZE='2', RANK=str(rank), LOCAL_RANK=str(rank),
                                                      MASTER_ADDR='127.0.0.1', MASTER_PORT=port, SLOW_FILL_PORT=second,
                                                      OMP_NUM_THREADS='1'),
                             **popen)
            for rank in (0, 1)]


def _report(stdout):
    return json.loads(next(ln for ln in stdout.splitlines() if ln.startswith('REPORT '))[len('REPORT '):])


def _two_ranks(scenario, folder):
    """Both ranks' reports and stderr; they must finish well within the worker's dist timeout (60 s)."""
    procs = _start_ranks(scenario, folder)
    outs = [p.communicate(timeout=50) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out[-2000:] + err[-3000:]
    return [_report(out) for out, _ in outs], [err for _, err in outs]


def test_two_ranks_of_a_node_map_one_copy_that_only_the_first_rank_decoded(tmp_path):
    root = _images(tmp_path / 'H')
    (r0, r1), _ = _two_ranks('share', root)
    assert r0['decoded'] == 2 * r0['files'] and r1['decoded'] == 0  # train and test set, decoded on rank 0 only
    for phase in ('train', 'test'):
        m0, m1 = r0['mappings'][phase], r1['mappings'][phase]
        assert (m0['dev'], m0['inode']) == (m1['dev'], m1['inode'])  # the same file, hence the same pages
        assert m0['name'].startswith(f'/memfd:frame_cache datasets.{phase}')
    assert r0['mappings']['train']['inode'] != r0['mappings']['test']['inode']
    assert (r0['owner'], r1['owner'], r0['node_ranks'], r1['node_ranks']) == (0, 0, 2, 2)
    one_copy_kb = -(-r0['bytes'] // 4096) * 4
    assert r0['memory']['cache_pss_kb'] + r1['memory']['cache_pss_kb'] <= one_copy_kb + 8  # not two copies
    assert r0['same_items'] and r1['same_items']  # bit-identical to decoding per sample, on both ranks


def test_a_fill_longer_than_the_collective_timeout_does_not_time_out_the_waiting_rank(tmp_path):
    root = _images(tmp_path / 'H')
    (r0, r1), _ = _two_ranks('slow_fill', root)  # 3 s of decoding on rank 0, 2 s timeout, rounds of 0.5 s
    assert (r0['decoded'], r1['decoded'], r1['owner']) == (6, 0, 0) and r1['same_items']


def test_a_rank_that_cannot_open_the_first_ranks_copy_warns_once_and_decodes_its_own(tmp_path):
    root = _images(tmp_path / 'H')
    (r0, r1), (_, err1) = _two_ranks('no_proc', root)
    assert (r0['owner'], r1['owner']) == (0, 1) and r0['decoded'] == r1['decoded'] == r0['files']
    assert r0['mappings']['train']['inode'] != r1['mappings']['train']['inode']
    warnings = [ln for ln in err1.splitlines() if 'WARNING' in ln]
    assert len(warnings) == 1 and 'cannot map the copy of rank 0 on this node (Permission denied)' in warnings[0]
    assert r0['same_items'] and r1['same_items']


def test_ranks_on_different_nodes_each_decode_a_copy_of_their_own(tmp_path):
    root = _images(tmp_path / 'H')
    (r0, r1), _ = _two_ranks('two_nodes', root)
    assert (r0['owner'], r1['owner'], r0['node_ranks'], r1['node_ranks']) == (0, 1, 1, 1)
    assert r0['decoded'] == r1['decoded'] == r0['files']
    assert r0['mappings']['train']['inode'] != r1['mappings']['train']['inode']
    assert r0['same_items'] and r1['same_items']


def test_one_nodes_refusal_stops_every_rank_with_its_line(tmp_path):
    root = _images(tmp_path / 'H')
    (r0, r1), _ = _two_ranks('two_nodes_one_short', root)
    assert r0['error'] == r1['error'] and 'but this machine has 0.00 GiB available' in r0['error']


def test_a_cache_too_large_for_the_node_is_refused_with_the_same_line_on_both_ranks(tmp_path):
    root = _images(tmp_path / 'H')
    start = time.monotonic()
    (r0, r1), _ = _two_ranks('refuse', root)
    assert time.monotonic() - start < 30  # no rank waited for a collective to time out
    assert r0['error'] == r1['error']
    assert re.fullmatch(r'datasets\.train: the decoded frames need [0-9.]+ GiB \(one copy per node, for its 2 training '
                        r'processes\) but this machine has 0\.00 GiB available; set cache_data to false \(frames are '
                        r'then decoded per sample\)', r0['error']), r0['error']


def test_a_corrupt_file_while_the_cache_fills_is_the_same_line_on_both_ranks(tmp_path):
    root = _images(tmp_path / 'H')
    damage_pixels(os.path.join(root, '004.png'))
    (r0, r1), _ = _two_ranks('share', root)
    assert r0['error'] == r1['error']
    assert re.fullmatch(r'datasets\.train: cannot decode image .*004\.png \(corrupt or not an image\)', r0['error'])


def _holders(dev_inode):
    """Pids of the processes that map or hold open the file (device, inode), among those we may inspect."""
    dev, inode = dev_inode
    pids = set()
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open(f'/proc/{pid}/maps') as f:
                if any(ln.split()[3:5] == [dev, str(inode)] for ln in f if len(ln.split()) > 5):
                    pids.add(int(pid))
            for fd in os.listdir(f'/proc/{pid}/fd'):
                st = os.stat(f'/proc/{pid}/fd/{fd}')
                if st.st_ino == inode and f'{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}' == dev:
                    pids.add(int(pid))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return pids


def _dev_shm():
    return set(os.listdir('/dev/shm')) if os.path.isdir('/dev/shm') else set()


def test_sigkilled_ranks_and_their_loader_workers_leave_nothing_behind(tmp_path):
    root = _images(tmp_path / 'H')
    before = _dev_shm()
    procs = _start_ranks('hold', root, start_new_session=True)
    try:
        reports, deadline = [], time.monotonic() + 50
        for p in procs:
            line = ''
            while not line.startswith('REPORT ') and time.monotonic() < deadline:
                if select.select([p.stdout], [], [], 1.0)[0]:
                    line = p.stdout.readline()
                    assert line or p.poll() is None, p.stderr.read()[-3000:]
            reports.append(_report(line))
        m = reports[0]['mappings']['train']
        assert m['name'].startswith('/memfd:'), m
        cache = (m['dev'], m['inode'])
        assert (reports[1]['mappings']['train']['dev'], reports[1]['mappings']['train']['inode']) == cache
        ranks_and_workers = {p.pid for p in procs} | {w for r in reports for w in r['workers']}
        assert _holders(cache) == ranks_and_workers  # one copy, mapped by both ranks and their forked workers
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)  # each rank leads its own process group, with its workers
        for p in procs:
            p.wait(timeout=30)
    gone_by = time.monotonic() + 10
    while _holders(cache) and time.monotonic() < gone_by:  # workers die with the group; their exit may lag a little
        time.sleep(0.1)
    assert not _holders(cache)  # nobody holds the memory file: the kernel has freed it
    new = _dev_shm() - before
    time.sleep(0.5)
    assert not new & _dev_shm()  # nothing left in /dev/shm (names that came and went were others' transients)


def test_two_rank_training_caches_both_sets_once_per_node(tmp_path, demo_images):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=4)
    for phase in ('train', 'test'):
        opt['datasets'][phase]['cache_data'] = True
    res = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'main_train.py',
               '--opt', write_options(str(tmp_path / 'o.json'), opt)], env=clean_env(OMP_NUM_THREADS='1'), timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for phase in ('train', 'test'):
        assert re.search(rf'datasets\.{phase}: caching \d+ decoded frames in RAM: [0-9.]+ GiB per node, '
                         r'one copy shared by its 2 training processes', res.stdout), res.stdout[-3000:]
    assert 'cannot map the copy' not in res.stderr  # rank 1 mapped both copies of rank 0


if __name__ == '__main__':
    sys.exit(pytest.main([__file__, '-q']))
