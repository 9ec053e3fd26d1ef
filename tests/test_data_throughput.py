"""The fast data path: images leave the workers as uint8 crops and are scaled in the train step, giving
bit for bit the tensors of the straightforward reference path (decode the whole frame, float32, crop,
augment: bench/loader_baselines.py, which bench/bench_loader.py times against); and the log says
when the network waits for data.
"""
import logging
import os
import sys
import types

import cv2
import numpy as np
import pytest
import torch

from conftest import dataset_options
from data.registry import build_dataset
from data.synthetic.gopro import make_gopro_spike
from models.model_plain import ModelPlain
from training.trainer import Trainer
from utils.image import images_to_float, imwrite, to_float_image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'bench'))
import loader_baselines  # noqa: E402

KEYS = [(0, 11), (3, 12345), (7, 99), (2, 4)]


def test_to_device_scales_uint8_images_and_leaves_other_tensors():
    fake = types.SimpleNamespace(device=torch.device('cpu'), channels_last=False, _warned_5d=False)
    H = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    L = torch.rand(2, 4, 4, 4)
    out = ModelPlain.to_device(fake, {'H': H, 'L': L, 'key': ['a', 'b']})
    assert out['H'].dtype == torch.float32 and torch.equal(out['H'], H.float() / 255.0)
    assert out['L'] is L and out['key'] == ['a', 'b']
    assert torch.equal(to_float_image(H), out['H']) and images_to_float({'x': 1})['x'] == 1


def _images(folder, count=8, size=(120, 136), seed=0):
    rng = np.random.default_rng(seed)
    for i in range(count):
        imwrite(os.path.join(folder, f'{i:03d}.png'), rng.integers(0, 256, (*size, 3)).astype(np.uint8))
    return str(folder)


def test_image_patches_equal_the_reference_path_bit_for_bit(tmp_path):
    H = _images(tmp_path / 'H')
    L = str(tmp_path / 'L')
    os.makedirs(L)
    for name in sorted(os.listdir(H)):
        img = cv2.imread(os.path.join(H, name))
        cv2.imwrite(os.path.join(L, name), cv2.resize(img, (img.shape[1] // 4, img.shape[0] // 4),
                                                      interpolation=cv2.INTER_AREA))
    section = dataset_options('sr', dataroot_H=H, dataroot_L=L, H_size=64, scale=4)
    ours = build_dataset(section)
    ref = loader_baselines.BaselinePairedImages(ours.paths_H, ours.paths_L, 64, 4, True, True)
    for key in KEYS:
        a, b = images_to_float(ours[key]), ref[key]
        for k in ('L', 'H'):
            assert a[k].dtype == b[k].dtype == torch.float32 and torch.equal(a[k], b[k]), (key, k)


@pytest.fixture(scope='module')
def gopro(tmp_path_factory):
    return make_gopro_spike(str(tmp_path_factory.mktemp('gopro')), train_clips=2, train_frames=10, test_clips=1,
                            test_frames=4, size=64)


@pytest.mark.parametrize('spikes', [False, True], ids=['rgb', 'rgb+spike'])
def test_video_clips_equal_the_reference_path_bit_for_bit(gopro, spikes):
    extra = {'dataroot_spike': f'{gopro}/train_spike', 'spike_repr': 'count', 'spike_repr_params': {'num_bins': 4}} \
        if spikes else {}
    section = dataset_options('VideoRecurrentTrainDataset', dataroot_gt=f'{gopro}/train_GT',
                              dataroot_lq=f'{gopro}/train_GT_blurred', filename_tmpl='06d',
                              meta_info_file=f'{gopro}/meta_info_GoPro_train_GT.txt', gt_size=32, num_frame=4,
                              interval_list=[1, 2], random_reverse=True, **extra)
    ours, ref = build_dataset(section), loader_baselines.BaselineVideoClips(section)
    for key in KEYS:
        a, b = images_to_float(ours[key]), ref[key]
        for k in ('L', 'H'):
            assert a[k].dtype == b[k].dtype == torch.float32 and torch.equal(a[k], b[k]), (key, k)


def _trainer(main=True):
    model = types.SimpleNamespace(log_losses=lambda: {'G_loss': 0.1}, current_lr=lambda: 1e-3)
    reporter = types.SimpleNamespace(scalars=lambda *a: None, row=lambda *a: None)
    t = types.SimpleNamespace(model=model, reporter=reporter, effective_batch=4, train_opt={'total_iter': 100},
                              step=10, epoch=0, main=main, print_windows=0, data_hinted=False, device=torch.device('cpu'),
                              log=logging.getLogger('restoration'))
    return t


def test_the_log_says_once_when_the_network_waits_for_data(caplog):
    t = _trainer()
    with caplog.at_level(logging.INFO, logger='restoration'):
        Trainer.print_status(t, 1.0, 0.9, 1.0)   # first window: worker start-up, no hint
        Trainer.print_status(t, 1.0, 0.1, 1.0)   # the network is the bottleneck
        assert not [r for r in caplog.records if 'waits for data' in r.getMessage()]
        Trainer.print_status(t, 1.0, 0.5, 1.0)
        Trainer.print_status(t, 1.0, 0.5, 1.0)
    hints = [r.getMessage() for r in caplog.records if 'waits for data' in r.getMessage()]
    assert hints == ['data loading takes 50 % of each iteration: the network waits for data; see docs/speed.md '
                     '"Is my GPU waiting for data?" (more dataloader_num_workers, cache_data, LMDB frames stored raw)']
