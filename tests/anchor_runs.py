"""Tiny-data versions of BasicSR's and traiNNer-redux's training files (tests/data/anchor_options): what
tests/test_basicsr_anchor_training.py runs.

`tiny_file` edits a file only where a CPU run on tiny data needs it (tests/data/anchor_options/README.md): the data
folders (tiny generated data, `TinyData`), the patch (16 LR pixels, or what the network or a fixed-size discriminator
needs at least; at most 5 frames of a training clip),
batch 2 (`batch`: 1 for the recurrent video files, whose every sample is a clip through 30-block branches),
loader workers 0, 2 iterations with a checkpoint at 2, no validation, no pretrained or resume path (the
VGG19 of a perceptual loss random: `pretrained_path: random`), AMP and compile off. Everything else (network,
losses, optimizer, schedule, degradations) is the file's.
"""
import copy
import os
from dataclasses import dataclass
from typing import Any, Dict, List

import cv2
import numpy as np
import yaml

ANCHORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'anchor_options')
TRAIN_FILES = sorted(os.path.relpath(os.path.join(root, name), ANCHORS)
                     for folder in ('basicsr/options/train', 'traiNNer-redux/options/_templates/train')
                     for root, _, names in os.walk(os.path.join(ANCHORS, folder)) for name in names
                     if name.endswith('.yml'))
LR_PATCH = 16
LR_SIZE = 40  # LR side of the tiny image pairs: a 16-pixel patch, and the 32 of a 128-pixel VGG discriminator at x4
IMAGES = 3
CLIP_FRAMES = 30  # BasicVSR++ trains on 30-frame windows
CLIP_LR = 36  # LR side of the clips (x4): SpyNet's flows need at least 33 pixels
CLIP_PATCH = 5  # frames of a training clip (BasicVSR's 15 or 30 frames of a patch: the patch in time)
CLIPS = ('001', '002')  # not REDS4's held-out clips (000, 011, 015, 020)


def _image(rng: np.random.Generator, size: int) -> np.ndarray:
    """A smooth random RGB image (a few blurred blobs), uint8."""
    small = rng.integers(0, 256, (max(2, size // 8), max(2, size // 8), 3)).astype(np.uint8)
    return cv2.GaussianBlur(cv2.resize(small, (size, size), interpolation=cv2.INTER_CUBIC), (5, 5), 1.0)


def _write(path: str, img: np.ndarray) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    cv2.imwrite(path, img)


@dataclass
class TinyData:
    """Generated once per session under `root`: image pairs per scale, GT images, REDS- and Vimeo-like clips."""
    root: str

    def make(self) -> 'TinyData':
        from data.synthetic.vimeo import make_vimeo
        rng = np.random.default_rng(51)
        for scale in (1, 2, 3, 4):
            for i in range(IMAGES):
                hr = _image(rng, LR_SIZE * scale)
                name = f'{i:04d}.png'
                _write(os.path.join(self.hr(scale), name), hr)
                _write(os.path.join(self.lr(scale), name), cv2.resize(hr, (LR_SIZE, LR_SIZE),
                                                                      interpolation=cv2.INTER_AREA))
            with open(self.meta(scale), 'w') as f:
                f.writelines(f'{i:04d}.png ({LR_SIZE * scale},{LR_SIZE * scale},3)\n' for i in range(IMAGES))
        for clip in CLIPS:
            for t in range(CLIP_FRAMES):
                hr = _image(rng, CLIP_LR * 4)
                _write(os.path.join(self.root, 'reds', 'gt', clip, f'{t:08d}.png'), hr)
                _write(os.path.join(self.root, 'reds', 'lq', clip, f'{t:08d}.png'),
                       cv2.resize(hr, (CLIP_LR, CLIP_LR), interpolation=cv2.INTER_AREA))
        with open(self.reds_meta, 'w') as f:
            f.writelines(f'{clip} {CLIP_FRAMES} ({CLIP_LR * 4},{CLIP_LR * 4},3)\n' for clip in CLIPS)
        make_vimeo(os.path.join(self.root, 'vimeo'), size=CLIP_LR * 4)
        return self

    def hr(self, scale: int) -> str:
        return os.path.join(self.root, f'x{scale}', 'hr')

    def lr(self, scale: int) -> str:
        return os.path.join(self.root, f'x{scale}', 'lr')

    def meta(self, scale: int) -> str:
        return os.path.join(self.root, f'x{scale}', 'meta_info.txt')

    @property
    def reds_meta(self) -> str:
        return os.path.join(self.root, 'reds', 'meta_info_REDS_GT.txt')


def _same_shape(old: Any, new: str) -> Any:
    """`new` as a list when the file gives a list of folders (traiNNer-redux), else as one path."""
    return [new] if isinstance(old, list) else new


def _data(train: Dict[str, Any], data: TinyData, scale: int) -> None:
    """The training section's data folders → the tiny data of its kind."""
    kind = train['type'].lower()
    if kind in ('pairedimagedataset', 'realesrgandataset', 'pairedvideodataset'):
        train['dataroot_gt'] = _same_shape(train.get('dataroot_gt'), data.hr(scale))
        if 'dataroot_lq' in train:
            train['dataroot_lq'] = _same_shape(train['dataroot_lq'], data.lr(scale))
        for key in ('meta_info_file', 'meta_info'):
            if train.get(key):
                train[key] = data.meta(scale)
        if 'filename_tmpl' in train:
            train['filename_tmpl'] = '{}'
    elif kind in ('redsdataset', 'redsrecurrentdataset'):
        train.update(dataroot_gt=os.path.join(data.root, 'reds', 'gt'), dataroot_lq=os.path.join(data.root, 'reds', 'lq'),
                     meta_info_file=data.reds_meta)
    elif kind == 'vimeo90krecurrentdataset':
        root = os.path.join(data.root, 'vimeo')
        lq = 'sequences_BDx4' if 'BD' in str(train.get('dataroot_lq')) else 'sequences_BIx4'
        train.update(dataroot_gt=os.path.join(root, 'sequences'), dataroot_lq=os.path.join(root, lq),
                     meta_info_file=os.path.join(root, 'meta_info_Vimeo90K_train_GT.txt'))


# networks that take more than 16 LR pixels: SpyNet's flows (at least 33), Real-CUGAN's reflect padding
LR_PATCH_OF = {'BasicVSR': CLIP_LR, 'IconVSR': CLIP_LR, 'BasicVSRPlusPlus': CLIP_LR, 'realcugan': 32}
# discriminators of a fixed input size (the GT patch): BasicSR's VGG-style one, 128 unless input_size says
FIXED_INPUT = {'VGGStyleDiscriminator': 128}


def _patch(opt: Dict[str, Any], train: Dict[str, Any], scale: int) -> None:
    """16 LR pixels (or what the network needs at least); with a discriminator of a fixed input size, that size."""
    net_d = opt.get('network_d') if isinstance(opt.get('network_d'), dict) else {}
    fixed = net_d.get('input_size', FIXED_INPUT.get(net_d.get('type'), 0))
    gt = max(LR_PATCH_OF.get(opt['network_g']['type'], LR_PATCH) * scale, fixed)
    if 'lq_size' in train:
        train['lq_size'] = gt // scale
    elif 'gt_size' in train or 'gt_size' not in opt:
        train['gt_size'] = gt
    if 'gt_size' in opt:  # BasicSR's Real-ESRGAN models: the GT patch is a top-level key
        opt['gt_size'] = gt
    if isinstance(train.get('num_frame'), int) and train['num_frame'] > CLIP_PATCH:  # the patch in time
        train['num_frame'] = CLIP_PATCH


def _no_pretrained(opt: Dict[str, Any]) -> None:
    path = opt.get('path') or {}
    for key in ('pretrain_network_g', 'pretrain_network_d', 'resume_state'):
        if path.get(key) is not None:
            path[key] = None
    for key in ('spynet_path', 'edvr_path'):
        if (opt.get('network_g') or {}).get(key):
            opt['network_g'][key] = None
    train = opt.get('train') or {}
    perceptual: List[Dict[str, Any]] = [train['perceptual_opt']] if train.get('perceptual_opt') else []
    perceptual += [loss for loss in train.get('losses') or [] if str(loss.get('type')).lower() == 'perceptualloss']
    for loss in perceptual:
        loss['pretrained_path'] = 'random'


def tiny_options(path: str, data: TinyData, batch: int = 2) -> Dict[str, Any]:
    """The file at `path` (relative to ANCHORS) edited for a CPU run on tiny data."""
    with open(os.path.join(ANCHORS, path)) as f:
        opt = copy.deepcopy(yaml.safe_load(f))
    scale = opt.get('scale', 1)
    datasets = opt.get('datasets') or {}
    for phase in [p for p in datasets if p != 'train']:
        del datasets[phase]
    opt.pop('val', None)
    if 'train' in datasets:
        train = datasets['train']
        _data(train, data, scale)
        _patch(opt, train, scale)
        train['batch_size_per_gpu'] = batch
        train['num_worker_per_gpu'] = 0
    opt.setdefault('train', {})['total_iter'] = 2
    opt.setdefault('logger', {})['save_checkpoint_freq'] = 2
    _no_pretrained(opt)
    for key in ('use_amp', 'use_compile'):
        if key in opt:
            opt[key] = False
    return opt


def tiny_file(path: str, data: TinyData, folder: str, batch: int = 2) -> str:
    """`tiny_options` written as YAML into `folder`, under the file's own name; its path."""
    out = os.path.join(folder, os.path.basename(path))
    with open(out, 'w') as f:
        yaml.safe_dump(tiny_options(path, data, batch), f, sort_keys=False)
    return out
