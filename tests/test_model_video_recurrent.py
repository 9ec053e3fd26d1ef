"""BasicSR's video training schedules, iteration by iteration: model `video_recurrent`'s fix_flow / flow_lr_mul
(BasicVSR, IconVSR, BasicVSR++) and model `edvr`'s tsa_iter / dcn_lr_mul: which parameters get gradients and
updates at each iteration and at which learning rate; and the sliding-window evaluation of EDVR."""
import logging
import math

import pytest
import torch
from torch import nn

from models.model_edvr import ModelEDVR
from models.model_video_recurrent import ModelVideoRecurrent
from models.video_restorer import SlidingWindowRestorer, VideoRestorer, window_indices
from option_rules import option_rules
from utils.errors import UserError
from utils.options import derive_paths, validate

pytestmark = pytest.mark.usefixtures('one_thread')

LR = 1e-3
ICONVSR = {'net_type': 'iconvsr', 'num_feat': 8, 'num_block': 1, 'keyframe_stride': 2, 'temporal_padding': 1}
EDVR = {'net_type': 'edvr', 'num_feat': 16, 'num_extract_block': 1, 'num_reconstruct_block': 1,
        'deformable_groups': 2}


def options(tmp_path, model, netG, val=None, **train):
    t = {'manual_seed': 1, 'G_lossfn_type': 'charbonnier', 'G_charbonnier_eps': 1e-12, 'G_optimizer_lr': LR,
         'G_scheduler_type': 'CosineAnnealingWarmRestarts', 'G_scheduler_periods': [4],
         'G_scheduler_restart_weights': [1], 'G_scheduler_eta_min': 1e-7, 'total_iter': 4, **train}
    opt = validate({'task': 'schedule', 'model': model, 'scale': 4, 'path': {'root': str(tmp_path)}, 'netG': netG,
                    'train': t, 'val': val or {}}, option_rules())
    derive_paths(opt)
    return opt


def build(tmp_path, model, netG, val=None, **train):
    torch.manual_seed(0)
    cls = ModelVideoRecurrent if model == 'video_recurrent' else ModelEDVR
    return cls(options(tmp_path, model, netG, val, **train), torch.device('cpu'))


def batch(step, frames, size, centre_only=False):
    g = torch.Generator().manual_seed(step)
    H = torch.rand(1, frames, 3, 4 * size, 4 * size, generator=g)
    L = torch.nn.functional.interpolate(H.flatten(0, 1), scale_factor=0.25, mode='area').view(1, frames, 3, size, size)
    return {'L': L, 'H': H[:, frames // 2] if centre_only else H}


def cosine(base, t, period=4, eta_min=1e-7):
    return eta_min + 0.5 * (base - eta_min) * (1 + math.cos(math.pi * t / period))


def run_schedule(model, make_batch, steps):
    """Per iteration: the names with a gradient when the optimizer steps, the names whose value changed, and each
    group's lr at that step."""
    params = dict(model.net_g.named_parameters())
    record = []
    for step in range(1, steps + 1):
        before = {n: p.detach().clone() for n, p in params.items()}
        lrs = [g['lr'] for g in model.optimizer.param_groups]
        loss = model.backward([make_batch(step)])
        model.finalize_gradients(step, loss)
        with_grad = {n for n, p in params.items() if p.grad is not None}
        model.step(step, loss)
        changed = {n for n, p in params.items() if not torch.equal(p, before[n])}
        record.append((with_grad, changed, lrs))
    return record


def test_fix_flow_freezes_spynet_and_the_edvr_extractor_then_spynet_trains_at_flow_lr_mul(tmp_path, caplog):
    """IconVSR, fix_flow 2, flow_lr_mul 0.5, cosine over 4 iterations. BasicSR's selections: "spynet" or "edvr" in
    the name are frozen first; only "spynet" gets the lower lr (the extractor trains at the normal lr)."""
    caplog.set_level(logging.INFO, logger='restoration')
    model = build(tmp_path, 'video_recurrent', ICONVSR, fix_flow=2, flow_lr_mul=0.5)
    names = dict(model.net_g.named_parameters())
    frozen = {n for n in names if 'spynet' in n or 'edvr' in n}
    flow = {n for n in names if 'spynet' in n}
    assert flow and frozen - flow and set(names) - frozen
    normal_group, flow_group = model.optimizer.param_groups
    by_id = {id(p): n for n, p in names.items()}
    assert {by_id[id(p)] for p in flow_group['params']} == flow
    assert {by_id[id(p)] for p in normal_group['params']} == set(names) - flow

    record = run_schedule(model, lambda s: batch(s, 3, 33), 3)
    for step, (with_grad, changed, lrs) in enumerate(record, 1):
        assert lrs == pytest.approx([cosine(LR, step - 1), cosine(LR * 0.5, step - 1)])  # each from its own base
        if step <= 2:  # the frozen start: no gradient, no update
            assert with_grad == set(names) - frozen and not (changed & frozen)
            assert changed  # the rest trains
        else:
            assert with_grad == set(names)
            assert any('spynet' in n for n in changed) and any('edvr' in n for n in changed)
    # no optimizer state from the frozen start either: one Adam step for them, three for the others
    assert int(model.optimizer.state[names['spynet.basic_module.0.basic_module.0.weight']]['step']) == 1
    assert int(model.optimizer.state[names['edvr.conv_first.weight']]['step']) == 1
    assert int(model.optimizer.state[names['conv_last.weight']]['step']) == 3
    assert caplog.text.count('iteration 3: past train.fix_flow=2') == 1
    assert model.current_lr() == model.optimizer.param_groups[0]['lr']


def test_without_fix_flow_and_flow_lr_mul_one_group_trains_everything_from_the_first_iteration(tmp_path):
    model = build(tmp_path, 'video_recurrent', {'net_type': 'basicvsr', 'num_feat': 8, 'num_block': 1})
    (group,) = model.optimizer.param_groups
    with_grad, changed, lrs = run_schedule(model, lambda s: batch(s, 2, 33), 1)[0]
    names = {n for n, _ in model.net_g.named_parameters()}
    assert with_grad == names and any('spynet' in n for n in changed) and lrs == [pytest.approx(LR)]


def test_flow_lr_mul_applies_without_fix_flow_as_in_basicsr(tmp_path):
    model = build(tmp_path, 'video_recurrent', {'net_type': 'basicvsr', 'num_feat': 8, 'num_block': 1},
                  flow_lr_mul=0.125)
    assert [g['lr'] for g in model.optimizer.param_groups] == pytest.approx([LR, LR * 0.125])


@pytest.mark.parametrize('train, match', [
    ({'fix_flow': 3}, r'train.fix_flow: 3, but netG \(edvr\) has no flow network'),
    ({'flow_lr_mul': 0.25}, r'train.flow_lr_mul: 0.25, but netG \(edvr\) has no flow network'),
])
def test_flow_keys_on_a_network_without_a_flow_network_are_user_errors(tmp_path, train, match):
    with pytest.raises(UserError, match=match):
        build(tmp_path, 'video_recurrent', EDVR, **train)


def test_tsa_iter_trains_only_the_fusion_module_first_and_dcn_lr_mul_scales_the_deformable_convolutions(tmp_path,
                                                                                                     caplog):
    caplog.set_level(logging.INFO, logger='restoration')
    model = build(tmp_path, 'edvr', EDVR, tsa_iter=2, dcn_lr_mul=0.5)
    names = dict(model.net_g.named_parameters())
    fusion = {n for n in names if 'fusion' in n}
    dcn = {n for n in names if 'dcn' in n}
    assert fusion and dcn and any(n.endswith('conv_offset.weight') for n in dcn)
    normal_group, dcn_group = model.optimizer.param_groups
    assert {n for n, p in names.items() if any(p is q for q in dcn_group['params'])} == dcn
    record = run_schedule(model, lambda s: batch(s, 5, 16, centre_only=True), 4)
    for step, (with_grad, changed, lrs) in enumerate(record, 1):
        assert lrs == pytest.approx([cosine(LR, step - 1), cosine(LR * 0.5, step - 1)])
        if step <= 2:
            assert with_grad == fusion and changed and changed <= fusion
        else:
            assert with_grad == set(names) and changed - fusion
    assert caplog.text.count('iteration 3: past train.tsa_iter=2') == 1


def test_a_run_resumed_after_the_frozen_start_does_not_announce_the_release_again(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger='restoration')
    a = build(tmp_path, 'edvr', EDVR, tsa_iter=1)
    run_schedule(a, lambda s: batch(s, 5, 16, centre_only=True), 2)
    assert 'iteration 2: past train.tsa_iter=1' in caplog.text  # the first run announces it
    b = build(tmp_path, 'edvr', EDVR, tsa_iter=1)
    b.load_state(a.state_files(), a.training_state())
    caplog.clear()  # what the resumed run says, only
    run_schedule(b, lambda s: batch(s + 2, 5, 16, centre_only=True), 1)
    assert 'past train.tsa_iter' not in caplog.text


# BasicSR's generate_frame_indices docstring: centre 0 of a 5-frame window under each padding.
BASICSR_EXAMPLES = {'replicate': [0, 0, 0, 1, 2], 'reflection': [2, 1, 0, 1, 2],
                    'reflection_circle': [4, 3, 0, 1, 2], 'circle': [3, 4, 0, 1, 2]}


@pytest.mark.parametrize('padding', sorted(BASICSR_EXAMPLES))
def test_window_indices_pad_the_clip_ends_as_basicsr(padding):
    assert window_indices(0, 10, 5, 2, padding) == BASICSR_EXAMPLES[padding]
    mirrored = [9 - i for i in BASICSR_EXAMPLES[padding]][::-1]  # the other end, by symmetry
    assert window_indices(9, 10, 5, 2, padding) == mirrored
    assert window_indices(4, 10, 5, 2, padding) == [2, 3, 4, 5, 6]


class WindowProbe(nn.Module):
    """Returns its window's frame at `position`, upscaled x4: each output frame says which frame it came from."""

    size_multiple = 4

    def __init__(self, position):
        super().__init__()
        self.position = position
        self.calls = []

    def forward(self, x):
        self.calls.append(tuple(x.shape))
        return torch.nn.functional.interpolate(x[:, self.position], scale_factor=4, mode='nearest')


def test_sliding_window_testing_restores_each_frame_from_its_own_padded_window(tmp_path):
    opt = options(tmp_path, 'edvr', EDVR, {'padding': 'replicate', 'size_patch_testing': 0})
    t = 6
    L = (torch.arange(t, dtype=torch.float32) / 10).view(1, t, 1, 1, 1).expand(1, t, 3, 16, 20).contiguous()
    net = WindowProbe(position=2)
    restorer = SlidingWindowRestorer.from_options(net, opt, torch.device('cpu'))
    E = restorer.test_video(L)
    assert E.shape == (1, t, 3, 64, 80) and len(net.calls) == t and net.calls[0] == (1, 5, 3, 16, 20)
    assert torch.allclose(E[0, :, 0, 0, 0], L[0, :, 0, 0, 0])  # frame t's window has frame t at its centre
    spy = []
    net.forward = lambda x: spy.append(x[0, :, 0, 0, 0].mul(10).round().int().tolist()) or \
        torch.nn.functional.interpolate(x[:, 2], scale_factor=4)
    restorer.test_video(L)
    assert spy[0] == window_indices(0, t, 5, 2, 'replicate') == [0, 0, 0, 1, 2]
    assert spy[-1] == [3, 4, 5, 5, 5]


def test_sliding_window_testing_refuses_temporal_chunks(tmp_path):
    opt = options(tmp_path, 'edvr', EDVR, {'num_frame_testing': 10})
    with pytest.raises(UserError, match=r'val.num_frame_testing: 10: a sliding-window network restores each frame'):
        SlidingWindowRestorer.from_options(WindowProbe(2), opt, torch.device('cpu'))


def test_a_network_that_takes_any_size_is_tested_on_unpadded_frames(tmp_path):
    """BasicVSR/BasicVSR++ (size_multiple 1): REDS's 180-row frames are not mirror-padded to 184 as VRT's are."""
    class AnySize(nn.Module):
        size_multiple = 1

        def __init__(self):
            super().__init__()
            self.calls = []

        def forward(self, x):
            self.calls.append(tuple(x.shape[-2:]))
            return torch.nn.functional.interpolate(x.flatten(0, 1), scale_factor=4).view(*x.shape[:3], *(
                4 * s for s in x.shape[-2:]))
    opt = options(tmp_path, 'video_recurrent', {'net_type': 'basicvsr', 'num_feat': 8, 'num_block': 1})
    net = AnySize()
    restorer = VideoRestorer.from_options(net, opt, torch.device('cpu'))
    assert restorer.test_video(torch.rand(1, 3, 3, 45, 38)).shape == (1, 3, 3, 180, 152)
    assert net.calls == [(45, 38)]


# Each full option file: the table its netG builds, and BasicSR's recipe values (options/train/*/*.yml)
FULL = {
    'basicvsr/train_BasicVSR_REDS.json': ('basicvsr__BasicVSR_REDS4', dict(G_optimizer_lr=2e-4, total_iter=300000,
                                                                          fix_flow=5000, flow_lr_mul=0.125)),
    'basicvsr/train_BasicVSR_Vimeo90K_BIx4.json': ('basicvsr__BasicVSR_REDS4', dict(fix_flow=5000, flow_lr_mul=0.125)),
    'basicvsr/train_BasicVSR_Vimeo90K_BDx4.json': ('basicvsr__BasicVSR_REDS4', dict(fix_flow=5000, flow_lr_mul=0.125)),
    'basicvsr/train_IconVSR_REDS.json': ('iconvsr__IconVSR_REDS', dict(fix_flow=5000, flow_lr_mul=0.125)),
    'basicvsr/train_IconVSR_Vimeo90K_BIx4.json': ('iconvsr__IconVSR_Vimeo90K_BIx4', dict(fix_flow=5000)),
    'basicvsr/train_IconVSR_Vimeo90K_BDx4.json': ('iconvsr__IconVSR_Vimeo90K_BIx4', dict(fix_flow=5000)),
    'basicvsrpp/train_BasicVSRPP_REDS.json': ('basicvsrpp__BasicVSRPP_REDS', dict(
        G_optimizer_lr=1e-4, total_iter=600000, fix_flow=5000, flow_lr_mul=0.25, G_scheduler_periods=[600000])),
    'edvr/train_EDVR_M_x4_SR_REDS_woTSA.json': ('edvr__EDVR_M_woTSA_x4_SR_REDS', dict(
        G_optimizer_lr=4e-4, G_scheduler_periods=[150000] * 4, G_lossfn_type='charbonnier_sum')),
    'edvr/train_EDVR_M_x4_SR_REDS.json': ('edvr__EDVR_M_x4_SR_REDS', dict(
        tsa_iter=50000, dcn_lr_mul=1, G_scheduler_periods=[50000, 100000, 150000, 150000, 150000])),
    'edvr/train_EDVR_L_x4_SR_REDS.json': ('edvr__EDVR_L_x4_SR_REDS', dict(
        tsa_iter=50000, G_scheduler_restart_weights=[1, 0.5, 0.5, 0.5, 0.5])),
    'edvr/train_EDVR_L_deblur_REDS.json': ('edvr__EDVR_L_deblur_REDS', dict(G_optimizer_lr=2e-4)),
}


@pytest.mark.parametrize('path', sorted(FULL))
def test_each_full_option_file_builds_its_released_table_and_carries_basicsrs_recipe(path):
    import os
    from models.registry import build_on_meta
    from option_rules import read_options
    from tests.conftest import ROOT
    from tests.test_arch_tables import read_table
    table, recipe = FULL[path]
    opt = read_options(os.path.join(ROOT, 'options', path))
    netG = {k: (None if k in ('spynet_path', 'edvr_path') else v) for k, v in opt['netG'].items()}  # files not here
    _, _, kwargs, entries = read_table(f'{table}.tsv')
    assert {k: netG[k] for k in kwargs} == kwargs
    net = build_on_meta(netG)
    assert [(k, str(tuple(v.shape)), str(v.dtype).replace('torch.', '')) for k, v in net.state_dict().items()] == entries
    assert {k: opt['train'][k] for k in recipe} == recipe
    assert opt['model'] == ('edvr' if table.startswith('edvr') else 'video_recurrent')
    if table.startswith(('basicvsr', 'iconvsr')):
        assert opt['netG']['spynet_path'].endswith('spynet_sintel_final-3d2a1287.pth') and opt['train']['E_decay'] == 0.999


@pytest.mark.slow  # an end-to-end main_test.py run: ~20 s of CPU
def test_main_test_writes_every_frame_of_every_clip_and_the_table_for_edvr(tmp_path):
    """The tiny EDVR file's test set (2 REDS4-like clips of 6 frames) through main_test.py with given weights: one
    PNG per frame, one row per clip (the mean over its frames), the mean row; the input scored by bicubic x4."""
    import csv
    import os
    from data.synthetic.reds import make_reds
    from models.registry import build_network
    from option_rules import read_options
    from conftest import ROOT, run_main
    reds = make_reds(str(tmp_path / 'demo_data' / 'reds'))
    tiny = os.path.join(ROOT, 'options', 'edvr', 'train_EDVR_tiny.json')
    torch.manual_seed(0)
    weights = tmp_path / 'w.pth'
    torch.save({'params': build_network(read_options(tiny)['netG']).state_dict()}, weights)
    sets = [f'path.root={tmp_path / "exp"}', f'datasets.test.dataroot_gt={reds}/REDS4/GT',
            f'datasets.test.dataroot_lq={reds}/REDS4/sharp_bicubic', 'datasets.test.num_frame=-1',
            f'datasets.train.dataroot_gt={reds}/train_sharp', f'datasets.train.dataroot_lq={reds}/train_sharp_bicubic/X4',
            f'datasets.train.meta_info_file={reds}/meta_info_REDS_GT.txt']
    res = run_main('main_test', ['--opt', tiny, '--weights', str(weights), '--out', str(tmp_path / 'out')]
              + [a for s in sets for a in ('--set', s)])
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    frames = [f'{c}_{t:03d}.png' for c in ('000', '011') for t in range(6)]
    assert sorted(os.listdir(tmp_path / 'out')) == sorted(frames + ['results.csv', 'results.md', 'index.html', 'input',
                                                                    'target'])
    assert sorted(os.listdir(tmp_path / 'out' / 'input')) == sorted(os.listdir(tmp_path / 'out' / 'target')) == frames
    with open(tmp_path / 'out' / 'results.csv') as f:
        rows = list(csv.reader(f))
    assert rows[0][:5] == ['name', 'psnr', 'ssim', 'psnr_y', 'ssim_y']
    assert [r[0] for r in rows[1:]] == ['000', '011', 'mean']
    assert 'input: the input upscaled by bicubic x4' in res.stdout


def test_main_test_on_frames_too_small_for_the_flow_network_ends_in_one_line_naming_the_clip(tmp_path):
    """BasicVSR's SpyNet needs frames of 33 pixels or more: a test set of 16x16 LR clips is the data's doing, told
    as one line that names the test set and the clip (exit 2), not as a traceback from inside the network."""
    import os
    import cv2
    import numpy as np
    from models.registry import build_network
    from option_rules import read_options
    from conftest import ROOT, run_main
    for clip in ('000', '011'):
        for side, folder in ((64, 'GT'), (16, 'LQ')):
            os.makedirs(tmp_path / folder / clip)
            for t in range(3):
                cv2.imwrite(str(tmp_path / folder / clip / f'{t:08d}.png'),
                            np.random.default_rng(t).integers(0, 256, (side, side, 3), dtype=np.uint8))
    tiny = os.path.join(ROOT, 'options', 'basicvsr', 'train_BasicVSR_tiny.json')
    weights = tmp_path / 'w.pth'
    torch.save({'params': build_network(read_options(tiny)['netG']).state_dict()}, weights)
    sets = [f'path.root={tmp_path / "exp"}', f'datasets.test.dataroot_gt={tmp_path / "GT"}',
            f'datasets.test.dataroot_lq={tmp_path / "LQ"}', 'datasets.test.generate_demo=null']
    res = run_main('main_test', ['--opt', tiny, '--weights', str(weights), '--out', str(tmp_path / 'out')]
                   + [a for s in sets for a in ('--set', s)])
    assert res.returncode == 2 and 'Traceback' not in res.stderr, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1] == (
        'error: datasets.test: on clip 000 (3 frames of 16x16): BasicVSR needs frames of at least 33x33 pixels '
        '(SpyNet), got 16x16')
