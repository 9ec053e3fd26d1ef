"""Batch augmentation (`train.use_moa`, data/batch_augment.py): each augmentation against a per-sample
reference on the drawn parameters, the draws as functions of (seed, iteration, sample position) only, so a
sample is augmented alike in any batch (N ranks x b = 1 rank x N*b, tested with two real processes) and a
resumed run continues bit for bit; the start-up refusals (CutBlur at another scale, items with inputs of
their own); no host read of a device value in the step."""
import json
import math
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, default_collate

from conftest import clean_env, run, run_main, tiny_options, write_options
from data.batch_augment import (PARAMS_KEY, PARTNER, PLAN_KEY, BatchAugmented, apply, check_batch, cutblur, cutmix,
                                iteration_plan, mixup, resizemix)
from data.registry import DATASETS
from data.sampler import TrainKey, parse_key, step_seed
from models.model_plain import ModelPlain
from option_rules import option_rules
from utils.errors import OptionsError, UserError
from utils.options import validate

PY = sys.executable
CPU = torch.device('cpu')


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Small tensors: one intra-op thread (conftest's `one_thread`)."""


class Pairs(Dataset):
    """Training pairs made from the key alone: H random from the seed, L its `scale`-times box downscale
    (or H itself plus 0.5 at scale 1), as a dataset gives them (uint8 H, float L)."""

    def __init__(self, n=6, size=16, scale=2, frames=0):
        self.n, self.size, self.scale, self.frames = n, size, scale, frames

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        index, seed = parse_key(key)
        g = torch.Generator().manual_seed(((seed or 0) * 31 + index) % 2 ** 62)
        shape = ((self.frames,) if self.frames else ()) + (3, self.size, self.size)
        H = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
        Hf = H.float() / 255
        L = F.avg_pool2d(Hf.reshape(-1, self.size, self.size), self.scale).reshape(
            *shape[:-2], self.size // self.scale, -1) if self.scale > 1 else Hf * 0.5
        return {'L': L, 'H': H, 'L_path': f'item{index}', 'H_path': f'item{index}'}


def _batch(ds, keys):
    return default_collate([ds[k] for k in keys])


def _float(batch):
    from utils.image import images_to_float
    return images_to_float(batch)


def _params(*rows):
    return torch.tensor(rows, dtype=torch.float32)


# --- each augmentation against a per-sample reference ------------------------------------------------------------

def _images(n=3, scale=2, size=16, seed=0, frames=0):
    ds = Pairs(n, size, scale, frames)
    batch = _float(_batch(ds, [TrainKey(i, seed + i) for i in range(n)]))
    partner = _float(_batch(ds, [TrainKey(i, seed + 100 + i) for i in range(n)]))
    return ({k: batch[k] for k in ('L', 'H')}, {k: partner[k] for k in ('L', 'H')})


def _f32(x):
    return np.float32(x)


def test_mixup_is_lam_times_the_sample_plus_one_minus_lam_times_its_partner_in_input_and_target():
    batch, partner = _images()
    params = _params([0.4, 0, 0, 0], [0.55, 0, 0, 0], [0.6, 0, 0, 0])
    out = mixup(batch, partner, params, {'aug': 'mixup'})
    for k in ('L', 'H'):
        for i, lam in enumerate((0.4, 0.55, 0.6)):
            lam = params[i, 0].item()
            torch.testing.assert_close(out[k][i], lam * batch[k][i] + (1 - lam) * partner[k][i], rtol=0, atol=1e-6)


def _cutmix_box(lam, fy, fx, h, w):
    """traiNNer-redux's rand_bbox on L's grid, in float32 as the device computes it."""
    ratio = np.sqrt(_f32(1) - _f32(lam))
    half_h, half_w = int(np.floor(_f32(h) * ratio)) // 2, int(np.floor(_f32(w) * ratio)) // 2
    cy, cx = int(np.floor(_f32(fy) * _f32(h))), int(np.floor(_f32(fx) * _f32(w)))
    return (min(max(cy - half_h, 0), h), min(max(cy + half_h, 0), h), min(max(cx - half_w, 0), w),
            min(max(cx + half_w, 0), w))


@pytest.mark.parametrize('scale', [1, 2, 4])
def test_cutmix_replaces_the_same_box_of_input_and_target_by_the_partners(scale):
    batch, partner = _images(scale=scale, size=32)
    rows = [[0.1, 0.5, 0.5, 0], [0.85, 0.02, 0.97, 0], [0.5, 0.9, 0.1, 0]]
    out = cutmix(batch, partner, _params(*rows), {'aug': 'cutmix'})
    h = 32 // scale
    for i, (lam, fy, fx, _) in enumerate(rows):
        t, b, l, r = _cutmix_box(lam, fy, fx, h, h)
        assert b > t and r > l
        for k, s in (('L', 1), ('H', scale)):
            expected = batch[k][i].clone()
            expected[:, s * t:s * b, s * l:s * r] = partner[k][i][:, s * t:s * b, s * l:s * r]
            assert torch.equal(out[k][i], expected), (k, i)


@pytest.mark.parametrize('scale', [1, 4])
def test_resizemix_pastes_the_whole_partner_resized_by_tau_at_the_drawn_place(scale):
    batch, partner = _images(scale=scale, size=32)
    rows = [[0, 0.0, 0.0, 0], [0, 0.99, 0.5, 0], [0, 0.3, 0.999, 0]]
    tau = 0.7
    out = resizemix(batch, partner, _params(*rows), {'aug': 'resizemix', 'tau': tau})
    h = 32 // scale
    th = round(tau * h)
    for i, (_, fy, fx, _) in enumerate(rows):
        top, left = int(np.floor(_f32(fy) * _f32(h - th + 1))), int(np.floor(_f32(fx) * _f32(h - th + 1)))
        for k, s in (('L', 1), ('H', scale)):
            small = F.interpolate(partner[k][i:i + 1], size=(s * th, s * th), mode='bicubic', antialias=True)[0]
            expected = batch[k][i].clone()
            expected[:, s * top:s * (top + th), s * left:s * (left + th)] = small
            torch.testing.assert_close(out[k][i], expected, rtol=0, atol=1e-6, msg=f'{k} {i}')


def test_cutblur_gives_the_input_the_targets_pixels_inside_or_outside_the_box_and_keeps_the_target():
    batch, _ = _images(scale=1, size=20)
    rows = [[0.7, 0.5, 0.5, 1], [0.68, 0.0, 1.0, 0], [0.72, 0.99, 0.2, 1]]
    out = cutblur(batch, None, _params(*rows), {'aug': 'cutblur'})
    assert torch.equal(out['H'], batch['H'])
    for i, (ratio, fy, fx, inside) in enumerate(rows):
        c = int(np.floor(_f32(20) * _f32(ratio)))
        top, left = int(np.floor(_f32(fy) * _f32(20 - c + 1))), int(np.floor(_f32(fx) * _f32(20 - c + 1)))
        box = (slice(None), slice(top, top + c), slice(left, left + c))
        if inside:
            expected = batch['L'][i].clone()
            expected[box] = batch['H'][i][box]
        else:
            expected = batch['H'][i].clone()
            expected[box] = batch['L'][i][box]
        assert torch.equal(out['L'][i], expected), i


def test_clips_are_mixed_alike_in_every_frame():
    batch, partner = _images(n=2, scale=2, size=16, frames=3)
    rows = _params([0.3, 0.4, 0.6, 0], [0.7, 0.1, 0.2, 0])
    out = cutmix(batch, partner, rows, {'aug': 'cutmix'})
    for t in range(3):
        frame = cutmix({k: v[:, t] for k, v in batch.items()}, {k: v[:, t] for k, v in partner.items()}, rows,
                       {'aug': 'cutmix'})
        for k in ('L', 'H'):
            assert torch.equal(out[k][:, t], frame[k])


# --- the draws: a function of the seeds ---------------------------------------------------------------------------

ALL = ['none', 'mixup', 'cutmix', 'resizemix', 'cutblur']


def test_the_iteration_draws_one_augmentation_with_the_given_probabilities():
    probs = [0.4, 0.084, 0.084, 0.084, 0.348]
    n = 5000
    counts = {a: 0 for a in ALL}
    for s in range(n):
        counts[iteration_plan(s, ALL, probs)['aug']] += 1
    for a, p in zip(ALL, probs):
        assert abs(counts[a] - n * p) < 5 * math.sqrt(n * p * (1 - p)), (a, counts)
    assert iteration_plan(7, ALL, [0, 0, 1, 0, 0]) == {'aug': 'cutmix'}
    tau = iteration_plan(3, ALL, [0, 0, 0, 1, 0])['tau']
    assert 0.5 <= tau <= 0.9


def test_an_item_carries_its_iterations_plan_its_draws_and_its_partner_all_from_its_key():
    ds = BatchAugmented(Pairs(), ALL, [0, 0.5, 0.5, 0, 0])
    key = TrainKey(2, 12345, 99)
    a, b = ds[key], ds[key]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) if torch.is_tensor(a[k]) else a[k] == b[k] for k in a)
    plan = json.loads(a[PLAN_KEY])
    assert plan == iteration_plan(99, ALL, [0, 0.5, 0.5, 0, 0]) and plan['aug'] in ('mixup', 'cutmix')
    # every item of the iteration has the same plan; each its own draws and partner
    others = [ds[TrainKey(i, 1000 + i, 99)] for i in range(6)]
    assert {o[PLAN_KEY] for o in others} == {a[PLAN_KEY]}
    assert len({tuple(o[PARAMS_KEY].tolist()) for o in others}) == 6
    partners = [o[PARTNER + 'H_path'] for o in others]
    assert all(p != f'item{i}' for i, p in enumerate(partners))  # another item than the sample
    one = BatchAugmented(Pairs(n=1), ALL, [0, 1, 0, 0, 0])[TrainKey(0, 5, 6)]
    assert one[PARTNER + 'H_path'] == 'item0'  # a one-item set mixes an item with another crop of itself
    assert PLAN_KEY not in BatchAugmented(Pairs(), ALL, [0, 1, 0, 0, 0])[3]  # evaluation keys: untouched


@pytest.mark.parametrize('aug', ['mixup', 'cutmix', 'resizemix', 'cutblur'])
def test_a_sample_is_augmented_alike_in_any_batch_so_n_ranks_of_b_equal_one_rank_of_n_times_b(aug):
    """The sampler gives rank r of N the positions r, r + N, ...: here one batch of the 4 keys of a step
    against the two halves rank 0 and rank 1 of 2 get, each through the whole device path."""
    scale = 1 if aug == 'cutblur' else 2
    ds = BatchAugmented(Pairs(scale=scale), [aug], [1.0])
    keys = [TrainKey(i, 500 + 7 * i, 42) for i in (3, 0, 5, 1)]
    whole = apply(_float(_batch(ds, keys)))
    ranks = [apply(_float(_batch(ds, keys[r::2]))) for r in range(2)]
    for k in ('L', 'H'):
        assert not torch.equal(whole[k], _float(_batch(Pairs(scale=scale), keys))[k]) or k == 'H'
        for r in range(2):
            assert torch.equal(whole[k][r::2], ranks[r][k]), (k, r)


class _Transformed(Pairs):
    """A dataset with a device transform: L and a loss target H_pixel are made on the device."""

    OPTIONS: dict = {}  # a registered dataset declares its keys (none here): the option tools list every member

    def __getitem__(self, key):
        item = super().__getitem__(key)
        del item['L']
        return {**item, 'device_transform': 'test_moa_transform'}

    @staticmethod
    def device_transform(batch):
        H = batch['H']
        return {**batch, 'L': F.avg_pool2d(H, 2), 'H_pixel': H.flip(-1)}


DATASETS.register('test_moa_transform')(_Transformed)


def test_the_partner_goes_through_the_datasets_device_transform_and_loss_targets_are_mixed_too():
    ds = BatchAugmented(_Transformed(), ['mixup'], [1.0])
    batch = _float(_batch(ds, [TrainKey(i, 50 + i, 8) for i in range(3)]))
    out = apply(batch)
    lam = batch[PARAMS_KEY][:, 0].view(-1, 1, 1, 1)
    H, P = batch['H'], batch[PARTNER + 'H']
    torch.testing.assert_close(out['H'], lam * H + (1 - lam) * P, rtol=0, atol=1e-6)
    torch.testing.assert_close(out['H_pixel'], lam * H.flip(-1) + (1 - lam) * P.flip(-1), rtol=0, atol=1e-6)
    torch.testing.assert_close(out['L'], lam * F.avg_pool2d(H, 2) + (1 - lam) * F.avg_pool2d(P, 2), rtol=0, atol=1e-6)
    assert not any(k.startswith('moa') for k in out)


# --- start-up checks ------------------------------------------------------------------------------------------------

def test_what_each_augmentation_needs_is_one_line_naming_the_option():
    good = {'L': torch.rand(1, 3, 8, 8), 'H': torch.rand(1, 3, 16, 16)}
    check_batch(good, ['mixup', 'cutmix', 'resizemix'])
    with pytest.raises(UserError, match=r'^train.moa_augs: "cutblur" pastes target pixels into the input, so it needs '
                                        r'the input at the target\'s size: networks restoring at scale 1 .* here L is '
                                        r'8x8 and H 16x16 \(scale 2\); remove "cutblur"'):
        check_batch(good, ['mixup', 'cutblur'])
    check_batch({'L': torch.rand(1, 3, 8, 8), 'H': torch.rand(1, 3, 8, 8)}, ['cutblur'])
    with pytest.raises(UserError, match=r'also C \(network inputs of their own'):
        check_batch({**good, 'C': torch.rand(1, 1, 1, 1)}, ['mixup'])
    with pytest.raises(UserError, match=r'L has \(4,\) channels/frames and H \(3,\)'):
        check_batch({'L': torch.rand(1, 4, 8, 8), 'H': torch.rand(1, 3, 8, 8)}, ['cutblur'])
    with pytest.raises(UserError, match=r'H \(20x20\) is not an integer multiple of L \(8x8\)'):
        check_batch({'L': torch.rand(1, 3, 8, 8), 'H': torch.rand(1, 3, 20, 20)}, ['mixup'])
    check_batch({'L': torch.rand(1, 4, 8, 8), 'H': torch.rand(1, 3, 8, 8)}, [])  # only 'none' chosen: nothing
    with pytest.raises(UserError, match=r'^train.moa_probs: 2 probabilities for the 3 augmentations'):
        BatchAugmented(Pairs(), ['none', 'mixup', 'cutmix'], [0.5, 0.5])


def _options(**train):
    return validate({'task': 't', 'netG': {'net_type': 'dncnn'}, 'train': train}, option_rules())['train']


def test_the_options_are_traiNNer_redux_names_and_defaults_checked_alone():
    t = _options()
    assert (t['use_moa'], t['moa_augs'], t['moa_probs']) == (False, ALL, [0.4, 0.084, 0.084, 0.084, 0.348])
    with pytest.raises(OptionsError, match=r'train.moa_augs: .* must be a list of distinct names from none, mixup'):
        _options(moa_augs=['none', 'mixupp'])
    with pytest.raises(OptionsError, match=r'train.moa_probs: .* must be probabilities >= 0 that sum to 1'):
        _options(moa_probs=[0.5, 0.6])


def _write(tmp_path, demo_images, name, sr=False, **train):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, use_moa=True, **train)
    opt['task'] = name
    if sr:
        opt['scale'] = 2
        opt['datasets']['train'].update(dataset_type='sr', H_size=24, scale=2)
        del opt['datasets']['train']['sigma']
        opt['datasets']['test'] = {'name': 'test', 'dataset_type': 'sr', 'scale': 2,
                                   'dataroot_H': os.path.join(demo_images, 'test')}
        opt['netG'] = {'net_type': 'imdn', 'in_nc': 3, 'out_nc': 3, 'nc': 8, 'nb': 1, 'upscale': 2}
    return write_options(str(tmp_path / f'{name}.json'), opt)


def test_cutblur_at_another_scale_and_items_with_inputs_of_their_own_are_refused_at_start_up(tmp_path, demo_images):
    res = run_main('main_train', ['--opt', _write(tmp_path, demo_images, 'sr', sr=True)])
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert res.stderr.strip().splitlines() == [
        'error: train.moa_augs: "cutblur" pastes target pixels into the input, so it needs the input at the target\'s '
        'size: networks restoring at scale 1 (denoising, deblurring, JPEG) or taking a pre-upsampled LR; here L is '
        '12x12 and H 24x24 (scale 2); remove "cutblur" from train.moa_augs and its probability from train.moa_probs']
    assert not os.path.exists(tmp_path / 'exp' / 'sr')  # nothing written
    path = _write(tmp_path, demo_images, 'ffdnet')
    opt = json.load(open(path))
    opt.update(model='plain2', netG={'net_type': 'ffdnet', 'in_nc': 3, 'out_nc': 3, 'nc': 8, 'nb': 3})
    opt['datasets']['train'].update(dataset_type='ffdnet', sigma=[0, 50])
    opt['datasets']['test'].update(dataset_type='ffdnet', sigma_test=25)
    res = run_main('main_train', ['--opt', write_options(path, opt)])
    assert res.returncode == 2 and 'train.use_moa: the batch augmentations (mixup, cutmix, resizemix, cutblur) mix ' \
                                   'input/target image pairs, but the training items carry also C' in res.stderr


# --- in the loop: no host reads, SR training, resume, DDP ------------------------------------------------------

def test_a_training_step_with_each_augmentation_never_reads_the_device(tmp_path, monkeypatch):
    opt = validate(tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'), use_moa=True, G_optimizer_fused=True),
                   option_rules())
    opt['netG']['act_mode'] = 'R'
    torch.manual_seed(0)
    model = ModelPlain(opt, CPU)

    def forbidden(name):
        def read(self, *args, **kwargs):
            raise AssertionError(f'a training step read a tensor on the host: Tensor.{name}')
        return read
    ds = BatchAugmented(Pairs(scale=1, size=24), ALL, [0.2] * 5)
    seen = set()
    steps = [next(s for s in range(1000) if iteration_plan(s, ALL, [0.2] * 5)['aug'] == aug) for aug in ALL]
    with monkeypatch.context() as m:
        for step in steps:
            batch = _batch(ds, [TrainKey(i, 10 * step + i, step) for i in range(4)])
            seen.add(json.loads(batch[PLAN_KEY][0])['aug'])
            for name in ('item', '__bool__', 'tolist', '__float__', '__int__', 'numpy'):
                m.setattr(torch.Tensor, name, forbidden(name))
            loss = model.backward([batch])
            model.step(step + 1, loss)
            m.undo()
    assert seen == set(ALL)


@pytest.mark.slow  # ~10 s; the augmentations at scale 2 are tested alone above
def test_an_sr_network_trains_with_mixup_cutmix_and_resizemix(tmp_path, demo_images):
    path = _write(tmp_path, demo_images, 'srmix', sr=True, moa_augs=['mixup', 'cutmix', 'resizemix'],
                  moa_probs=[0.3, 0.3, 0.4], total_iter=6, checkpoint_test=6, checkpoint_save=6)
    res = run_main('main_train', ['--opt', path], env=clean_env(OMP_NUM_THREADS='1'))
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'validation on' in res.stdout


def _models(tmp_path, task):
    return tmp_path / 'exp' / task / 'models'


def _same_files(a, b, step):
    for kind in ('G', 'E', 'state'):
        x = torch.load(a / f'{step}_{kind}.pth', weights_only=True)
        y = torch.load(b / f'{step}_{kind}.pth', weights_only=True)
        if kind == 'state':
            x, y = x['model']['optimizer']['state'], y['model']['optimizer']['state']
        for k in x:
            for xa, ya in (zip(x[k].values(), y[k].values()) if isinstance(x[k], dict) else [(x[k], y[k])]):
                assert torch.equal(xa, ya), (kind, k)


@pytest.mark.slow  # three runs, ~30 s; runs in CI (CI=true) and with RUN_SLOW=1
def test_a_resumed_run_with_batch_augmentation_is_bitwise_identical_to_a_straight_one(tmp_path, demo_images):
    """Two loader workers, EMA on; interrupted mid-epoch (16 iterations per epoch)."""
    train = dict(total_iter=8, checkpoint_save=4, checkpoint_test=8, checkpoint_print=4,
                 moa_probs=[0.2, 0.2, 0.2, 0.2, 0.2])
    for name in ('straight', 'resumed'):
        path = _write(tmp_path, demo_images, name, **train)
        opt = json.load(open(path))
        opt['datasets']['train']['dataloader_num_workers'] = 2
        write_options(path, opt)
    env = clean_env(OMP_NUM_THREADS='1')
    assert run_main('main_train', ['--opt', str(tmp_path / 'straight.json')], env=env).returncode == 0
    first = run_main('main_train', ['--opt', str(tmp_path / 'resumed.json'), '--set', 'train.total_iter=4'], env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    second = run_main('main_train', ['--opt', str(tmp_path / 'resumed.json')], env=env)
    assert second.returncode == 0 and 'at iteration 4 (epoch 0, 4 iterations into it)' in second.stdout
    _same_files(_models(tmp_path, 'straight'), _models(tmp_path, 'resumed'), 8)


def test_two_ranks_with_batch_augmentation_train_the_weights_of_one_process_with_the_whole_batch(tmp_path, demo_images):
    """torchrun with 2 processes (gloo) x batch 2 against 1 process x batch 4; the steps cover every augmentation."""
    iters, probs, seed = 6, [0.1, 0.2, 0.2, 0.2, 0.3], 10
    # the sampler's step seeds (data/sampler.py): the augmentations these 6 steps draw
    drawn = {iteration_plan(step_seed(seed, 0, s), ALL, probs)['aug'] for s in range(iters)}
    assert drawn >= {'mixup', 'cutmix', 'resizemix', 'cutblur'}, drawn
    weights = {}
    for name, procs, batch in (('ddp', 2, 2), ('single', 1, 4)):
        opt = tiny_options(str(tmp_path / name), demo_images, E_decay=0.0, total_iter=iters, checkpoint_save=iters,
                           checkpoint_print=iters, manual_seed=seed, use_moa=True, moa_probs=probs)
        opt['netG']['act_mode'] = 'R'  # no BatchNorm: its batch statistics differ with the batch per rank
        opt['datasets']['train']['dataloader_batch_size'] = batch
        del opt['datasets']['test']
        path = write_options(str(tmp_path / f'{name}.json'), opt)
        launcher = ([PY, '-m', 'torch.distributed.run', '--standalone', f'--nproc_per_node={procs}'] if procs > 1
                    else [PY])
        res = run([*launcher, 'main_train.py', '--opt', path], env=clean_env(OMP_NUM_THREADS='1'))
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        weights[name] = torch.load(tmp_path / name / 'tiny' / 'models' / f'{iters}_G.pth', weights_only=True)
    for k in weights['single']:
        torch.testing.assert_close(weights['ddp'][k], weights['single'][k], rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f'{k}: {m}')
