"""The video model: fix_iter without a graph change (also under 2-process DDP), whole-clip testing in
chunks and tiles, per-clip metrics, and the VRT option files."""
import logging
import math
import os
import sys

import numpy as np
import pytest
import torch
from torch import nn

from data.datasets.spike import representation_channels
from data.synthetic.gopro import make_gopro_spike
from models.evaluation import evaluate
from models.model_vrt import ModelVRT
from models.registry import build_network
from models.scoring import item_metrics
from models.video_restorer import VideoRestorer
from tests.conftest import ROOT, run, tiny_options, write_options
from option_rules import option_rules, read_options
from utils.errors import OptionsError, UserError
from utils.options import validate

PY = sys.executable
FULL = os.path.join(ROOT, 'options', 'vrt', '006_train_vrt_videodeblurring_gopro_rgbspike.json')
TINY = os.path.join(ROOT, 'options', 'vrt', '006_train_vrt_videodeblurring_gopro_rgbspike_tiny.json')
FIX_KEYS = ['spynet', 'deform']
SPIKE_CHANS = 2

# The smallest VRT the network accepts: 40x40 frames (SpyNet needs > 32 px, and 40/8 px at the 1/8
# scale with 4x4 windows), one block per stage, spikes as 2 extra channels.
MICRO_VRT = {'net_type': 'vrt', 'upscale': 1, 'img_size': [2, 40, 40], 'window_size': [2, 4, 4],
             'depths': [1] * 8, 'indep_reconsts': [7], 'embed_dims': [8] * 8, 'num_heads': [2] * 8,
             'pa_frames': 2, 'deformable_groups': 2, 'drop_path_rate': 0.0, 'spike_chans': SPIKE_CHANS,
             'use_checkpoint_attn': True, 'use_checkpoint_ffn': True}


pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture(scope='module')
def gopro(tmp_path_factory):
    """Small synthetic GoPro-like RGB+spike clips (48x48, 20 spike planes per frame)."""
    return make_gopro_spike(str(tmp_path_factory.mktemp('gopro') / 'gopro_spike'), train_clips=2, train_frames=4,
                            test_clips=2, test_frames=3, size=48)


def _spike_section(root, split):
    return {'dataroot_gt': f'{root}/{split}_GT', 'dataroot_lq': f'{root}/{split}_GT_blurred',
            'dataroot_spike': f'{root}/{split}_spike', 'spike_repr': 'count',
            'spike_repr_params': {'num_bins': SPIKE_CHANS}}


def micro_options(exp_root, data_root, val=None, **train):
    t = {'manual_seed': 3, 'G_lossfn_type': 'charbonnier', 'G_optimizer_lr': 1e-3, 'fix_iter': 2,
         'fix_lr_mul': 0.5, 'fix_keys': FIX_KEYS, 'G_scheduler_type': 'CosineAnnealingWarmRestarts',
         'G_scheduler_periods': 4, 'G_scheduler_eta_min': 1e-7, 'total_iter': 4, 'checkpoint_test': 4,
         'checkpoint_save': 1, 'checkpoint_print': 1, 'checkpoint_keep_last': 0}
    t.update(train)
    return {
        'task': 'micro_vrt', 'model': 'vrt', 'use_static_graph': True, 'find_unused_parameters': False,
        'path': {'root': exp_root},
        'datasets': {
            'train': {'name': 'train_dataset', 'dataset_type': 'VideoRecurrentTrainDataset',
                      **_spike_section(data_root, 'train'),
                      'meta_info_file': f'{data_root}/meta_info_GoPro_train_GT.txt', 'filename_tmpl': '06d',
                      'num_frame': 2, 'gt_size': 40, 'dataloader_num_workers': 0, 'dataloader_batch_size': 1},
            'test': {'name': 'test_dataset', 'dataset_type': 'VideoRecurrentTestDataset',
                     **_spike_section(data_root, 'test')},
        },
        'netG': dict(MICRO_VRT),
        'train': t,
        'val': val or {'num_frame_testing': 2, 'num_frame_overlapping': 1, 'size_patch_testing': 40},
        'logging': {'use_tensorboard': False, 'use_wandb': False},
    }


def micro_opt(tmp_path, data_root, val=None, **train):
    return read_options(write_options(str(tmp_path / 'o.json'), micro_options(str(tmp_path / 'exp'), data_root,
                                                                             val, **train)))


def build_model(tmp_path, data_root, val=None, **train):
    opt = micro_opt(tmp_path, data_root, val, **train)
    torch.manual_seed(0)
    return ModelVRT(opt, torch.device('cpu'))


def random_batch(seed=0, frames=2, size=40):
    g = torch.Generator().manual_seed(seed)
    return {'L': torch.rand(1, frames, 3 + SPIKE_CHANS, size, size, generator=g),
            'H': torch.rand(1, frames, 3, size, size, generator=g)}


def _is_fix(name):
    return any(k in name for k in FIX_KEYS)




def test_fix_keys_parameters_get_their_own_group_at_lr_times_fix_lr_mul_through_the_schedule(tmp_path, gopro):
    model = build_model(tmp_path, gopro)
    normal, fixed = model.optimizer.param_groups
    names = {id(p): n for n, p in model.net_g.named_parameters()}
    assert {names[id(p)] for p in fixed['params']} == {n for n in names.values() if _is_fix(n)}
    assert not any(_is_fix(names[id(p)]) for p in normal['params'])
    assert any('spynet' in names[id(p)] for p in fixed['params'])
    assert any('pa_deform.conv_offset' in names[id(p)] for p in fixed['params'])
    assert normal['lr'] == pytest.approx(1e-3) and fixed['lr'] == pytest.approx(5e-4)
    for t in range(1, 4):  # cosine schedule (period 4, eta_min 1e-7): each group from its own base lr
        model.optimizer.step()
        model.scheduler.step()
        for group, base in ((normal, 1e-3), (fixed, 5e-4)):
            assert group['lr'] == pytest.approx(1e-7 + 0.5 * (base - 1e-7) * (1 + math.cos(math.pi * t / 4)))
    assert model.current_lr() == normal['lr']


def test_fix_phase_drops_the_gradients_so_fix_params_get_no_update_no_decay_and_no_optimizer_state(
        tmp_path, gopro, caplog):
    model = build_model(tmp_path, gopro, G_optimizer_type='adamw', G_optimizer_wd=0.1)
    params = dict(model.net_g.named_parameters())
    assert all(p.requires_grad for p in params.values())
    before = {n: p.detach().clone() for n, p in params.items()}
    caplog.set_level(logging.INFO, logger='restoration')
    for step in (1, 2):
        loss = model.backward([random_batch(step)])
        # the graph reaches the fix_keys parameters (requires_grad is never switched off)...
        assert all(params[n].grad is not None for n in params if 'spynet.basic_module.0' in n)
        model.step(step, loss)
        # ...but their gradients are dropped before the optimizer sees them
        for n, p in params.items():
            if _is_fix(n):
                assert p.grad is None, n
                assert torch.equal(p, before[n]), n
                assert p not in model.optimizer.state, n
        assert not torch.equal(params['conv_first.weight'], before['conv_first.weight'])
    assert 'past train.fix_iter' not in caplog.text
    model.step(3, model.backward([random_batch(3)]))
    changed = [n for n in params if _is_fix(n) and not torch.equal(params[n], before[n])]
    assert any('spynet' in n for n in changed) and any('deform' in n for n in changed)
    fix_state = [model.optimizer.state[p] for n, p in params.items() if _is_fix(n)]
    assert all(int(s['step']) == 1 for s in fix_state)  # one real step: the fix phase left no trace
    assert int(model.optimizer.state[params['conv_first.weight']]['step']) == 3
    model.step(4, model.backward([random_batch(4)]))
    assert caplog.text.count('past train.fix_iter=2') == 1


def test_a_run_resumed_after_fix_iter_does_not_announce_the_unfreeze_again(tmp_path, gopro, caplog):
    caplog.set_level(logging.INFO, logger='restoration')
    a = build_model(tmp_path, gopro)
    for step in (1, 2, 3):
        a.step(step, a.backward([random_batch(step)]))
    assert 'iteration 3: past train.fix_iter=2' in caplog.text  # the first run announces it
    saved_after = a.training_state()
    b = build_model(tmp_path, gopro)
    b.load_state(a.state_files(), saved_after)
    caplog.clear()  # what the resumed run says, only
    b.step(4, b.backward([random_batch(4)]))
    assert 'past train.fix_iter' not in caplog.text
    c = build_model(tmp_path, gopro)  # resumed inside the fix phase: still frozen, announced on release
    c.load_state(b.state_files(), build_model(tmp_path, gopro).training_state())
    c.step(2, c.backward([random_batch(2)]))
    assert all(p.grad is None for p in c.fix_params)
    c.step(3, c.backward([random_batch(3)]))
    assert 'iteration 3: past train.fix_iter=2' in caplog.text


def test_a_fix_key_that_matches_no_parameter_is_a_user_error(tmp_path, gopro):
    with pytest.raises(UserError, match=r'train\.fix_keys: \[\'spynett\'\] match no parameter'):
        build_model(tmp_path, gopro, fix_keys=['spynet', 'spynett'])


@pytest.mark.parametrize('fix_iter', [0, -1])  # -1: KAIR's "never fix"
def test_without_fix_iter_fix_lr_mul_has_no_effect_and_every_parameter_trains_at_the_base_lr(tmp_path, gopro,
                                                                                              caplog, fix_iter):
    caplog.set_level(logging.INFO, logger='restoration')
    model = build_model(tmp_path, gopro, fix_iter=fix_iter, fix_lr_mul=0.125)
    (group,) = model.optimizer.param_groups
    assert group['lr'] == pytest.approx(1e-3)
    assert len(group['params']) == len(list(model.net_g.parameters()))
    assert caplog.text.count('train.fix_lr_mul: 0.125 has no effect without train.fix_iter > 0') == 1
    params = dict(model.net_g.named_parameters())
    before = {n: p.detach().clone() for n, p in params.items() if _is_fix(n)}
    model.step(1, model.backward([random_batch(1)]))
    assert any(not torch.equal(params[n], b) for n, b in before.items() if 'spynet' in n)  # never frozen


def test_without_fix_keys_there_is_one_param_group(tmp_path, gopro):
    model = build_model(tmp_path, gopro, fix_iter=0, fix_keys=[])
    assert len(model.optimizer.param_groups) == 1




def test_ddp_static_graph_trains_through_fix_iter_with_fix_params_frozen_then_trained(tmp_path, gopro):
    """2 processes (gloo), static graph, activation checkpointing: no stop at fix_iter=2 of 4 iterations."""
    torch.manual_seed(1)
    init = build_network(MICRO_VRT)
    init_path = str(tmp_path / 'init.pth')
    torch.save({'params': init.state_dict()}, init_path)
    opt = micro_options(str(tmp_path / 'exp'), gopro)
    opt['path']['pretrained_netG'] = init_path
    path = write_options(str(tmp_path / 'o.json'), opt)
    res = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'main_train.py',
               '--opt', path], timeout=240)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'world_size=2' in res.stdout
    assert 'parameters identical on all 2 rank(s)' in res.stdout, res.stdout[-2000:]
    assert 'iteration 3: past train.fix_iter=2' in res.stdout
    assert 'clip test_000 (3 frames)' in res.stdout and 'clip test_001 (3 frames)' in res.stdout

    models = str(tmp_path / 'exp' / 'micro_vrt' / 'models')
    G = {step: torch.load(os.path.join(models, f'{step}_G.pth'), weights_only=True) for step in (1, 2, 3, 4)}
    G[0] = init.state_dict()
    fix = [n for n in G[0] if _is_fix(n)]
    assert fix
    for step in (1, 2):
        for n in fix:
            assert torch.equal(G[step][n], G[0][n]), f'{n} changed at iteration {step} (fix phase)'
    assert not torch.equal(G[2]['conv_first.weight'], G[1]['conv_first.weight'])
    changed = [n for n in fix if not torch.equal(G[3][n], G[2][n])]
    assert any('spynet' in n for n in changed) and any('deform' in n for n in changed), changed




class PixelNet(nn.Module):
    """out[t] at (y, x) depends only on the input at (t, y, x), all channels (RGB + spikes): chunked and
    tiled testing must then equal whole-clip testing. Records the input shapes it is called with."""

    def __init__(self, in_chans):
        super().__init__()
        self.conv = nn.Conv2d(in_chans, 3, 1)
        self.calls = []

    def forward(self, x):
        self.calls.append(tuple(x.shape))
        n, t, c, h, w = x.shape
        return torch.sigmoid(self.conv(x.reshape(n * t, c, h, w))).reshape(n, t, 3, h, w)


class PositionNet(nn.Module):
    """out[t] = rgb[t] * (t + 1) / T: reveals which position of which input length each frame had."""

    def forward(self, x):
        t = x.shape[1]
        return x[:, :, :3] * (torch.arange(1, t + 1, dtype=x.dtype) / t).view(1, t, 1, 1, 1)


def video_restorer(tmp_path, data_root, net, **val):
    """The micro options' VideoRestorer around `net`, with `val` changed from micro_options' chunks and tiles."""
    opt = micro_opt(tmp_path, data_root, {'num_frame_testing': 2, 'num_frame_overlapping': 1,
                                          'size_patch_testing': 40, **val})
    return VideoRestorer.from_options(net, opt, torch.device('cpu'))


def _clip(frames, h, w, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(1, frames, 3 + SPIKE_CHANS, h, w, generator=g)


def test_chunked_and_tiled_testing_equals_whole_clip_testing_for_a_per_pixel_network(tmp_path, gopro):
    torch.manual_seed(0)
    net = PixelNet(3 + SPIKE_CHANS)
    L = _clip(8, 64, 72)
    whole = video_restorer(tmp_path, gopro, net, num_frame_testing=0, size_patch_testing=0).test_video(L)
    assert net.calls == [(1, 8, 5, 64, 72)]  # every channel reaches the network
    net.calls.clear()
    tiled = video_restorer(tmp_path, gopro, net, num_frame_testing=3, num_frame_overlapping=1,
                           size_patch_testing=40).test_video(L)
    # frames: chunks at 0, 2, 4, 5; rows at 0, 20, 24; columns at 0, 20, 32
    assert net.calls == [(1, 3, 5, 40, 40)] * 36
    assert tiled.shape == whole.shape == (1, 8, 3, 64, 72)
    assert torch.allclose(tiled, whole, atol=1e-6, rtol=0)
    assert torch.allclose(whole, net(L), atol=1e-6, rtol=0)


class CallCountNet(nn.Module):
    """Outputs the constant 0.1 * (number of this call): shows which tile each output pixel came from."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def forward(self, x):
        self.n += 1
        return torch.full_like(x[:, :, :3], 0.1 * self.n)


def test_tiles_drop_their_inner_10_pixel_borders_and_average_only_what_remains_as_kair_does(tmp_path, gopro):
    restorer = video_restorer(tmp_path, gopro, CallCountNet(), num_frame_testing=0, size_patch_testing=40)
    out = restorer.test_video(_clip(2, 40, 72))
    # tiles at columns 0, 20, 32 (overlap 20): tile 1 keeps 30..49, tile 2 keeps 42..71
    row = out[0, 0, 0, 0]
    assert torch.allclose(row[:30], torch.tensor(0.1)) and torch.allclose(row[30:42], torch.tensor(0.2))
    assert torch.allclose(row[42:50], torch.tensor(0.25)) and torch.allclose(row[50:], torch.tensor(0.3))
    assert torch.allclose(out, row.expand_as(out))


def test_frames_not_divisible_by_8_are_mirror_padded_for_the_network_and_cropped_back(tmp_path, gopro):
    net = PixelNet(3 + SPIKE_CHANS)
    L = _clip(3, 42, 45)
    out = video_restorer(tmp_path, gopro, net, num_frame_testing=0, size_patch_testing=0).test_video(L)
    # 3 frames -> 4 (window_size[0] = 2), 42x45 -> 48x48 (VRT's multiple of 8)
    assert net.calls == [(1, 4, 5, 48, 48)]
    assert torch.allclose(out, net(L), atol=1e-6, rtol=0)


def test_flip_seq_averages_each_frame_with_its_own_output_in_the_time_reversed_clip(tmp_path, gopro):
    restorer = video_restorer(tmp_path, gopro, PositionNet(), num_frame_testing=0, size_patch_testing=0,
                              flip_seq=True)
    n = 4
    L = _clip(n, 40, 40)
    (name, E, H), = restorer.restore({'L': L, 'H': L[:, :, :3], 'folder': ['clip_a']})
    assert name == 'clip_a' and len(E) == len(H) == n
    # clip + reversed clip = 2n frames; frame t sits at positions t and 2n-1-t: weight (2n+1)/(4n)
    expected = L[0, :, :3] * (2 * n + 1) / (4 * n)
    for t in range(n):
        assert np.abs(E[t].astype(int) - _uint8(expected[t]).astype(int)).max() <= 1


def test_pad_seq_appends_one_frame_and_drops_its_output(tmp_path, gopro):
    restorer = video_restorer(tmp_path, gopro, PositionNet(), num_frame_testing=0, size_patch_testing=0,
                              pad_seq=True)
    n = 3  # + 1 padded frame = 4: no temporal mirror padding on top
    L = _clip(n, 40, 40)
    (_, E, H), = restorer.restore({'L': L, 'H': L[:, :, :3], 'folder': ['c']})
    assert len(E) == len(H) == n
    for t in range(n):
        assert np.abs(E[t].astype(int) - _uint8(L[0, t, :3] * (t + 1) / (n + 1)).astype(int)).max() <= 1


def test_center_frame_only_returns_and_compares_only_the_centre_frame(tmp_path, gopro):
    net = PixelNet(3 + SPIKE_CHANS)
    whole = video_restorer(tmp_path, gopro, net, num_frame_testing=0, size_patch_testing=0)
    centre = video_restorer(tmp_path, gopro, net, num_frame_testing=0, size_patch_testing=0, center_frame_only=True)
    L, Hs = _clip(5, 40, 40), _clip(5, 40, 40, seed=1)[:, :, :3]
    (_, E_all, H_all), = whole.restore({'L': L, 'H': Hs, 'folder': ['c']})
    (_, E, H), = centre.restore({'L': L, 'H': Hs, 'folder': ['c']})
    assert len(E) == len(H) == 1
    assert np.array_equal(E[0], E_all[2]) and np.array_equal(H[0], H_all[2])
    (_, E1, H1), = centre.restore({'L': L, 'H': Hs[:, 2:3], 'folder': ['c']})  # GT given as the centre frame only
    assert np.array_equal(H1[0], H_all[2]) and np.array_equal(E1[0], E_all[2])


def test_time_reversal_also_reverses_the_spike_channels_within_each_frame(tmp_path, gopro):
    L = _clip(3, 8, 8)
    R = video_restorer(tmp_path, gopro, nn.Identity())._reverse_time(L)
    for t in range(3):
        assert torch.equal(R[0, t, :3], L[0, 2 - t, :3])
        assert torch.equal(R[0, t, 3:], L[0, 2 - t, 3:].flip(0))


def test_validation_reports_the_mean_over_clips_of_each_clips_mean_over_frames(tmp_path, gopro):
    """Clips of 2 and 4 frames with different errors: a mean over all frames would differ."""
    restorer = video_restorer(tmp_path, gopro, PositionNet(), num_frame_testing=0, size_patch_testing=0)
    batches = []
    for name, frames, seed in (('a', 2, 0), ('b', 4, 1)):
        L = _clip(frames, 40, 40, seed)
        H = (L[:, :, :3] * (torch.arange(1, frames + 1) / frames).view(1, frames, 1, 1, 1)
             + 0.02 * (seed + 1) * torch.randn(1, frames, 3, 40, 40, generator=torch.Generator().manual_seed(9))
             ).clamp(0, 1)
        batches.append({'L': L, 'H': H, 'folder': [name]})
    per_clip = [item_metrics(E, H, 0) for b in batches for _, E, H in restorer.restore(b)]
    frame_counts = [2, 4]
    res = evaluate(restorer, batches, len(batches), num_previews=1)
    m = res.means
    assert m['count'] == 2 and [(row.name, row.frames) for row in res.rows] == [('a', 2), ('b', 4)]
    assert m['psnr'] == pytest.approx((per_clip[0][0] + per_clip[1][0]) / 2)
    assert m['ssim_y'] == pytest.approx((per_clip[0][3] + per_clip[1][3]) / 2)
    by_frame = (per_clip[0][0] * frame_counts[0] + per_clip[1][0] * frame_counts[1]) / 6
    assert abs(m['psnr'] - by_frame) > 0.1
    assert list(res.previews) == ['a'] and res.previews['a'].shape == (40, 40, 3)


def test_the_model_validates_through_a_video_restorer_of_its_eval_network(tmp_path, gopro):
    model = build_model(tmp_path, gopro)
    assert isinstance(model.restorer, VideoRestorer) and model.restorer.net is model.eval_net is model.net_g
    assert model.restorer.metric_border == 0 and model.restorer.log_items
    assert model.restorer.window_size == tuple(MICRO_VRT['window_size'])
    assert model.restorer.spike_chans == SPIKE_CHANS


def test_a_clip_network_without_windows_or_spikes_gets_no_temporal_padding_and_no_spike_reversal(tmp_path, gopro):
    opt = micro_opt(tmp_path, gopro, {'num_frame_testing': 0, 'size_patch_testing': 0})
    for key in ('window_size', 'spike_chans'):
        del opt['netG'][key]
    net = PixelNet(3 + SPIKE_CHANS)
    restorer = VideoRestorer.from_options(net, opt, torch.device('cpu'))
    assert restorer.window_size == (1, 8, 8) and restorer.spike_chans == 0
    L = _clip(3, 42, 45)
    restorer.test_video(L)
    assert net.calls == [(1, 3, 5, 48, 48)]
    assert torch.equal(restorer._reverse_time(L), L.flip(1))


def test_impossible_tile_and_chunk_sizes_are_user_errors(tmp_path, gopro):
    with pytest.raises(UserError, match='val.num_frame_overlapping'):
        build_model(tmp_path, gopro, val={'num_frame_testing': 2, 'num_frame_overlapping': 2})
    with pytest.raises(UserError, match='val.size_patch_testing: 42 must be a multiple'):
        build_model(tmp_path, gopro, val={'size_patch_testing': 42})
    with pytest.raises(UserError, match='val.size_patch_testing: 20 must be larger'):
        build_model(tmp_path, gopro, val={'size_patch_testing': 20})


def _uint8(t):
    return (t.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()




@pytest.mark.parametrize('path', [FULL, TINY], ids=['full', 'tiny'])
def test_vrt_option_files_load_with_spike_chans_matching_the_spike_representation(path):
    opt = read_options(path)
    assert opt['model'] == 'vrt' and opt['use_static_graph'] and not opt['find_unused_parameters']
    assert opt['netG']['use_checkpoint_attn'] and opt['netG']['use_checkpoint_ffn']
    assert opt['train']['fix_keys'] == FIX_KEYS and 0 < opt['train']['fix_iter'] < opt['train']['total_iter']
    for phase in ('train', 'test'):
        ds = opt['datasets'][phase]
        assert ds['dataroot_spike']
        assert representation_channels(ds['spike_repr'], ds['spike_repr_params']) == opt['netG']['spike_chans']


# netG kwargs of the released 006_VRT_videodeblurring_GoPro checkpoint (../shared/vrt/006_videodeblurring_gopro.tsv)
PUBLISHED_006 = {'upscale': 1, 'img_size': [6, 192, 192], 'window_size': [6, 8, 8], 'depths': [8] * 7 + [4] * 4,
                 'indep_reconsts': [9, 10], 'embed_dims': [96] * 7 + [120] * 4, 'num_heads': [6] * 11,
                 'pa_frames': 2, 'deformable_groups': 16}


def test_full_option_file_is_the_published_gopro_configuration_plus_spike_channels():
    opt = read_options(FULL, ['netG.spynet_path=null'])
    assert {k: opt['netG'][k] for k in PUBLISHED_006} == PUBLISHED_006
    with torch.device('meta'):
        net = build_network(opt['netG'])
    extra = 96 * opt['netG']['spike_chans'] * 3 * 3  # conv_first: 96 filters of 1x3x3 per extra channel
    assert sum(p.numel() for p in net.parameters()) == 18_320_007 + extra
    t, v, ds = opt['train'], opt['val'], opt['datasets']['train']
    assert (t['G_optimizer_lr'], t['G_optimizer_betas'], t['fix_iter'], t['fix_lr_mul']) == (
        4e-4, [0.9, 0.99], 20000, 0.125)
    assert (t['total_iter'], t['G_scheduler_periods'], t['G_scheduler_eta_min']) == (300000, 300000, 1e-7)
    assert (v['num_frame_testing'], v['num_frame_overlapping'], v['size_patch_testing']) == (12, 2, 256)
    assert (ds['num_frame'], ds['gt_size'], ds['dataloader_batch_size']) == (6, 192, 1)


@pytest.mark.parametrize('value, ok', [(-1, True), (-2, False)])
def test_fix_iter_minus_one_is_accepted_as_kairs_never_fix_and_below_is_an_error(tmp_path, value, ok):
    raw = {**tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'), fix_iter=value), 'model': 'vrt'}
    if ok:
        assert validate(raw, option_rules())['train']['fix_iter'] == -1
    else:
        with pytest.raises(OptionsError, match=r'train\.fix_iter: -2 must be >= 0, or -1 \(never fix, as KAIR\)'):
            validate(raw, option_rules())


def test_an_image_model_drops_kairs_fix_keys_with_a_note_as_kair_does(tmp_path):
    opt = validate(tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'), fix_iter=5, fix_keys=['spynet']),
                   option_rules())
    assert 'fix_iter' not in opt['train'] and 'fix_keys' not in opt['train']
    assert any(n.startswith('train: fix_iter, fix_keys ignored') for n in opt['_notes'])
