"""Inference apart from training: the network main_test builds, and validation through the same restorer."""
import numpy as np
import pytest
import torch
from torch import nn

from option_rules import option_rules, read_options
from models.model_plain import ModelPlain
from models.evaluation import describe_input, evaluate
from models.network_loading import build_eval_network
from models.restorer import ImageRestorer
from models.scoring import item_metrics
from models.video_restorer import VideoRestorer
from tests.conftest import noisy_batches, tiny_options, write_options
from utils.errors import UserError
from utils.image import imresize_bicubic, tensor2uint
from utils.options import validate

CPU = torch.device('cpu')


def _opt(tmp_path, **train):
    return read_options(write_options(str(tmp_path / 'o.json'),
                                      tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'), **train)))


def _trained(opt, steps=2):
    torch.manual_seed(0)
    model = ModelPlain(opt, CPU)
    for step, batch in enumerate(noisy_batches(steps), 1):
        model.step(step, model.backward([batch]))
    return model


def _evaluate(restorer, batches, **kw):
    """The one evaluation loop (validation and main_test) over a list of batches, in one process."""
    return evaluate(restorer, batches, len(batches), **kw)


def _scores(res):
    return res.means, [(row.name, row.scores) for row in res.rows]


def test_validation_uses_the_ema_network_when_there_is_one_else_netg(tmp_path):
    with_ema = ModelPlain(_opt(tmp_path, E_decay=0.9), CPU)
    assert type(with_ema.restorer) is ModelPlain.restorer_class is ImageRestorer
    assert with_ema.restorer.net is with_ema.ema.module
    without = ModelPlain(_opt(tmp_path, E_decay=0.0), CPU)
    assert without.restorer.net is without.net_g


@pytest.mark.parametrize('kind', ['E', 'G'])
def test_the_saved_weights_restored_for_testing_score_exactly_as_validation_did(tmp_path, kind):
    opt = _opt(tmp_path, E_decay=0.9)
    model = _trained(opt)
    path = str(tmp_path / f'2_{kind}.pth')
    torch.save(model.state_files()[kind], path)
    net = build_eval_network(opt['netG'], path, CPU, '--weights')
    assert not net.training and not any(m.training for m in net.modules())
    restorer = ModelPlain.restorer_class.from_options(net, opt, CPU)
    batches = noisy_batches()
    expected = (model.validate(batches, len(batches)) if kind == 'E'
                else _evaluate(ImageRestorer(model.net_g, CPU, 0), batches))
    assert _scores(_evaluate(restorer, batches)) == _scores(expected)
    assert model.net_g.training  # validation leaves the training network in train mode


def test_weights_of_another_network_are_a_user_error(tmp_path):
    opt = _opt(tmp_path)
    path = str(tmp_path / 'other_G.pth')
    torch.save({'conv.weight': torch.zeros(1)}, path)
    with pytest.raises(UserError, match=r'--weights: .*other_G.pth does not fit netG'):
        build_eval_network(opt['netG'], path, CPU, '--weights')


@pytest.mark.parametrize('scale, given, border, round_y', [(1, {}, 0, False), (4, {}, 4, True), (2, {}, 2, True),
                                                          (1, {'metric_border': 3, 'metric_round_y': True}, 3, True),
                                                          (4, {'metric_border': 0, 'metric_round_y': False}, 0, False)])
def test_scoring_follows_kairs_test_scripts_per_task_unless_the_test_set_says_otherwise(tmp_path, scale, given,
                                                                                         border, round_y):
    raw = tiny_options(str(tmp_path), str(tmp_path / 'data'), E_decay=0.0)
    raw['scale'] = scale
    if scale > 1:  # super-resolution: a test set that works at the scale
        raw['datasets']['test'] = {'dataset_type': 'sr', 'dataroot_H': raw['datasets']['test']['dataroot_H']}
    raw['datasets']['test'].update(given)
    restorer = ImageRestorer.from_options(nn.Identity(), validate(raw, option_rules()), CPU)
    assert (restorer.metric_border, restorer.round_y) == (border, round_y)


# ---- the inputs' own scores: the baseline a restoration has to beat -----------------------------------

def _srnoisy_batches(n=2, size=32, scale=4):
    out = []
    for i in range(n):
        g = torch.Generator().manual_seed(10 + i)
        H = torch.rand(2, 3, size, size, generator=g)
        out.append({'L': torch.rand(2, 3, size // scale, size // scale, generator=g), 'H': H,
                    'L_path': [f'/x/{i}_{j}.png' for j in range(2)]})
    return out


def test_validation_scores_the_inputs_themselves_when_asked_from_the_same_pass_over_the_data():
    """An identity network restores nothing: its scores are the inputs' scores, L against H."""
    restorer = ImageRestorer(nn.Identity(), CPU, 0)
    asked = _evaluate(restorer, noisy_batches(), score_input=True)
    plain = _evaluate(restorer, noisy_batches())
    assert plain.input is None and _scores(asked) == _scores(plain)
    m = plain.means
    assert asked.input == {**m, 'upscale': 1.0}
    assert asked.input['count'] == 4 and 15 < asked.input['psnr'] < 30
    assert describe_input(asked.input) == (
        f'the input itself (L against H) on 4 items: PSNR {m["psnr"]:.2f} dB, SSIM {m["ssim"]:.4f}; '
        f'Y: PSNR {m["psnr_y"]:.2f} dB, SSIM {m["ssim_y"]:.4f}')


def test_super_resolution_inputs_are_scored_after_matlab_bicubic_upscaling_with_the_test_sets_border():
    restorer = ImageRestorer(nn.Upsample(scale_factor=4), CPU, metric_border=4, round_y=True)
    res = _evaluate(restorer, _srnoisy_batches(), score_input=True).input
    expected = []
    for batch in _srnoisy_batches():
        for j in range(2):
            up = imresize_bicubic(batch['L'][j].permute(1, 2, 0).double().numpy(), 4)
            E = tensor2uint(torch.from_numpy(up).permute(2, 0, 1))
            expected.append(item_metrics([E], [tensor2uint(batch['H'][j])], 4, True))
    assert res['upscale'] == 4 and res['count'] == 4
    assert [res[k] for k in ('psnr', 'ssim', 'psnr_y', 'ssim_y')] == pytest.approx(np.mean(expected, axis=0).tolist())
    assert describe_input(res).startswith('the input upscaled by bicubic x4 (against H) on 4 items: PSNR ')


def test_extra_input_channels_are_left_out_and_inputs_of_no_fitting_size_are_not_scored():
    H = torch.rand(2, 3, 16, 16)
    noisy = (H + 0.05).clamp(0, 1)
    level_map = torch.full((2, 1, 16, 16), 0.1)
    items = ImageRestorer(nn.Identity(), CPU, 0).input_items({'L': torch.cat([noisy, level_map], 1), 'H': H})
    assert [(name, up) for name, _, _, up in items] == [('image_0', 1), ('image_1', 1)]
    assert np.array_equal(items[1][1][0], tensor2uint(noisy[1])) and np.array_equal(items[1][2][0], tensor2uint(H[1]))
    assert ImageRestorer(nn.Identity(), CPU, 0).input_items({'L': torch.rand(2, 3, 5, 5), 'H': H}) == []


def _video_restorer(**val):
    v = {'num_frame_testing': 0, 'num_frame_overlapping': 0, 'size_patch_testing': 0, 'pad_seq': False,
         'flip_seq': False, 'center_frame_only': False, **val}
    return VideoRestorer(nn.Identity(), CPU, v, window_size=(1, 8, 8), spike_chans=0)


def test_video_inputs_are_scored_frame_by_frame_and_frame_interpolation_has_no_input_score():
    H = torch.rand(1, 5, 3, 16, 16)
    L = torch.cat([(H + 0.02).clamp(0, 1), torch.rand(1, 5, 4, 16, 16)], 2)  # RGB + 4 spike channels
    (name, frames, gt, up), = _video_restorer().input_items({'L': L, 'H': H, 'folder': ['clip_a']})
    assert (name, len(frames), len(gt), up) == ('clip_a', 5, 5, 1)
    assert np.array_equal(frames[3], tensor2uint(L[0, 3, :3]))
    (_, frames, gt, _), = _video_restorer(center_frame_only=True).input_items({'L': L, 'H': H})
    assert len(frames) == len(gt) == 1 and np.array_equal(gt[0], tensor2uint(H[0, 2]))
    sr = _video_restorer().input_items({'L': torch.rand(1, 5, 3, 4, 4), 'H': H})
    assert [item[3] for item in sr] == [4]
    vfi = _video_restorer()  # frames 1, 3, 5, 7 in, frame 4 out: no input frame is the target's
    assert vfi.input_items({'L': torch.rand(1, 4, 3, 16, 16), 'H': torch.rand(1, 1, 3, 16, 16)}) == []
    vfi.restore = lambda batch: []  # only the input scores matter here
    assert _evaluate(vfi, [{'L': torch.rand(1, 4, 3, 16, 16), 'H': torch.rand(1, 1, 3, 16, 16)}],
                     score_input=True).input is None
    assert describe_input(None).startswith('no input-vs-target score')
