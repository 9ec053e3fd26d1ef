"""Losses, optimizer, iteration-based lr schedules (incl. resume), EMA and KAIR's weight regularisers."""
import logging
import math

import numpy as np
import pytest
import torch
from torch import nn

from conftest import train_options
from losses.pixel import CharbonnierLoss
from losses.registry import build_loss
from metrics.fidelity import calculate_ssim
from models.ema import ModelEMA
from models.optim import build_optimizer
from models.regularizers import apply_regularizers, regularize_clip, regularize_orth
from models.schedules import build_scheduler
from utils.errors import OptionsError, UserError

def t(given):
    """`given` validated (with the keys of the loss, optimizer and schedule it chooses filled in); when the
    validator refuses it, the defaults with `given` on top, unchecked (so that bad names reach the builders)."""
    try:
        return train_options(**given)
    except OptionsError:
        return {**train_options(), **given}


X = torch.tensor([[0.0, 1.0], [2.0, 4.0]])
Y = torch.tensor([[1.0, 1.0], [0.0, 1.0]])  # differences 1, 0, 2, 3


@pytest.mark.parametrize('kind, expected', [('l1', 6 / 4), ('l2', 14 / 4), ('l2sum', 14.0)])
def test_pixel_losses_match_hand_computed_values(kind, expected):
    assert build_loss(t({'G_lossfn_type': kind}))(X, Y).item() == pytest.approx(expected)


def test_loss_weight_scales_the_loss():
    assert build_loss(t({'G_lossfn_type': 'l1', 'G_lossfn_weight': 2.5}))(X, Y).item() == pytest.approx(2.5 * 1.5)


def test_charbonnier_is_mean_sqrt_of_squared_diff_plus_eps():
    eps = 0.25
    expected = sum(math.sqrt(d * d + eps) for d in (1, 0, 2, 3)) / 4
    assert CharbonnierLoss(eps)(X, Y).item() == pytest.approx(expected)
    loss = build_loss(t({'G_lossfn_type': 'charbonnier', 'G_charbonnier_eps': eps, 'G_lossfn_weight': 1.0}))
    assert loss(X, Y).item() == pytest.approx(expected)


def test_charbonnier_default_eps_is_vrt_1e9():
    assert build_loss(t({'G_lossfn_type': 'charbonnier'})).base.eps == 1e-9


def test_unknown_loss_names_option_and_suggests():
    with pytest.raises(UserError, match=r'train.G_lossfn_type: unknown loss "charbonier" \(did you mean "charbonnier"\?\)'):
        build_loss(t({'G_lossfn_type': 'charbonier'}))


def test_ssim_loss_is_one_minus_the_ssim_metric_validation_reports():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (32, 40, 3)).astype(np.float64)
    b = np.clip(a + rng.normal(0, 20, a.shape), 0, 255)
    to_t = lambda img: torch.from_numpy(img / 255.0).permute(2, 0, 1)[None]
    loss = build_loss(t({'G_lossfn_type': 'ssim'}))
    assert loss(to_t(a).float(), to_t(b).float()).item() == pytest.approx(1 - calculate_ssim(a, b), abs=1e-5)
    assert loss(to_t(a).float(), to_t(a).float()).item() == pytest.approx(0, abs=1e-6)


def _groups():
    a, b = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(3))
    return [{'params': [a]}, {'params': [b], 'lr': 0.01}]


def test_optimizer_reads_kair_keys_and_keeps_group_lr():
    opt = build_optimizer(_groups(), t({'G_optimizer_type': 'adamw', 'G_optimizer_lr': 2e-4,
                                      'G_optimizer_betas': [0.8, 0.99], 'G_optimizer_wd': 0.05}))
    assert isinstance(opt, torch.optim.AdamW)
    assert [g['lr'] for g in opt.param_groups] == [2e-4, 0.01]
    assert opt.param_groups[0]['betas'] == (0.8, 0.99) and opt.param_groups[0]['weight_decay'] == 0.05


def test_adam_defaults_betas_and_zero_weight_decay():
    opt = build_optimizer(_groups(), t({'G_optimizer_type': 'adam', 'G_optimizer_lr': 1e-3}))
    assert type(opt) is torch.optim.Adam
    assert opt.param_groups[0]['betas'] == (0.9, 0.999) and opt.param_groups[0]['weight_decay'] == 0


def test_unknown_optimizer_is_a_user_error():
    with pytest.raises(UserError, match=r'train.G_optimizer_type: unknown optimizer "adamq" \(did you mean'):
        build_optimizer(_groups(), t({"G_optimizer_type": "adamq"}))


def _opt(lrs=(1.0,)):
    return torch.optim.SGD([{'params': [nn.Parameter(torch.zeros(1))], 'lr': lr} for lr in lrs])


def lr_sequence(train_opt, n, lrs=(1.0,), group=0):
    """lr in force for iterations 0..n-1 when step() is called once after each iteration."""
    opt = _opt(lrs)
    sched = build_scheduler(opt, t(train_opt))
    seq = []
    for _ in range(n):
        seq.append(opt.param_groups[group]['lr'])
        opt.step()
        sched.step()
    return seq


def test_multistep_decays_after_each_milestone():
    seq = lr_sequence({'G_scheduler_type': 'MultiStepLR', 'G_scheduler_milestones': [3, 5],
                       'G_scheduler_gamma': 0.5}, 7)
    assert seq == [1, 1, 1, 0.5, 0.5, 0.25, 0.25]


def test_multistep_matches_torch_multisteplr():
    opt = _opt()
    ref = torch.optim.lr_scheduler.MultiStepLR(opt, [2, 4, 4, 7], 0.3)
    expected = []
    for _ in range(10):
        expected.append(opt.param_groups[0]['lr'])
        opt.step()
        ref.step()
    got = lr_sequence({'G_scheduler_type': 'multistep', 'G_scheduler_milestones': [2, 4, 4, 7],
                       'G_scheduler_gamma': 0.3}, 10)
    assert got == pytest.approx(expected)


def test_milestones_out_of_order_are_used_sorted_and_one_warning_line_says_so(caplog):
    import logging
    given = {'G_scheduler_type': 'MultiStepLR', 'G_scheduler_milestones': [5, 3], 'G_scheduler_gamma': 0.5}
    with caplog.at_level(logging.WARNING, logger='restoration'):
        seq = lr_sequence(given, 7)
    assert seq == [1, 1, 1, 0.5, 0.5, 0.25, 0.25]
    assert [r.getMessage() for r in caplog.records] == [
        'train.G_scheduler_milestones: [5, 3] are not in increasing order; they are used sorted: [3, 5]']
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger='restoration'):
        lr_sequence({**given, 'G_scheduler_milestones': [3, 5, 5]}, 2)  # repeated: in order (torch counts both)
    assert caplog.records == []


def test_cosine_restart_with_period_list_follows_basicsr():
    opt = {'G_scheduler_type': 'CosineAnnealingWarmRestarts', 'G_scheduler_periods': [4, 4],
           'G_scheduler_restart_weights': [1, 0.5], 'G_scheduler_eta_min': 0.0}
    seq = lr_sequence(opt, 11)
    assert seq[0] == pytest.approx(1.0)
    assert seq[2] == pytest.approx(0.5)             # half way through the first period
    assert seq[4] == pytest.approx(0.0, abs=1e-12)  # end of period 1 reaches eta_min
    assert seq[5] == pytest.approx(0.5 * 0.5 * (1 + math.cos(math.pi / 4)))  # restart at weight 0.5
    assert seq[8] == pytest.approx(0.0, abs=1e-12)
    assert seq[9:] == [0.0, 0.0]                    # after the last period: stays at eta_min


def test_cosine_restart_with_int_period_matches_torch_warm_restarts():
    opt = _opt((1.0, 0.1))
    ref = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=5, T_mult=1, eta_min=0.01)
    expected = []
    for _ in range(12):
        expected.append([g['lr'] for g in opt.param_groups])
        opt.step()
        ref.step()
    train_opt = {'G_scheduler_type': 'cosine_restart', 'G_scheduler_periods': 5, 'G_scheduler_eta_min': 0.01}
    for g in (0, 1):
        assert lr_sequence(train_opt, 12, (1.0, 0.1), g) == pytest.approx([e[g] for e in expected])
    assert expected[5] == pytest.approx([1.0, 0.1])  # restart at the period boundary


def test_int_period_rejects_restart_weights_it_cannot_honour():
    with pytest.raises(UserError, match='G_scheduler_restart_weights'):
        build_scheduler(_opt(), t({'G_scheduler_type': 'CosineAnnealingWarmRestarts', 'G_scheduler_periods': 5,
                                 'G_scheduler_restart_weights': 2}))


def test_period_list_needs_one_weight_per_period():
    with pytest.raises(UserError, match='one weight per period'):
        build_scheduler(_opt(), t({'G_scheduler_type': 'CosineAnnealingWarmRestarts', 'G_scheduler_periods': [3, 3],
                                 'G_scheduler_restart_weights': [1]}))


def test_warmup_ramps_linearly_then_follows_schedule():
    seq = lr_sequence({'G_scheduler_type': 'MultiStepLR', 'G_scheduler_milestones': [6],
                       'G_scheduler_gamma': 0.1, 'G_scheduler_warmup_iter': 4}, 8)
    assert seq == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 0.1, 0.1])


def test_warmup_scales_each_group_from_its_own_base_lr():
    train_opt = {'G_scheduler_type': 'none', 'G_scheduler_warmup_iter': 2}
    assert lr_sequence(train_opt, 3, (1.0, 0.2), group=1) == pytest.approx([0.1, 0.2, 0.2])


def test_no_scheduler_keeps_lr_constant():
    assert lr_sequence({'G_scheduler_type': None}, 3, (0.3,)) == [0.3, 0.3, 0.3]


def test_unknown_scheduler_type_suggests_a_known_name():
    with pytest.raises(UserError, match=r'train.G_scheduler_type: unknown scheduler "MultiStepLr" \(did you mean'):
        build_scheduler(_opt(), t({'G_scheduler_type': 'MultiStepLr'}))


@pytest.mark.parametrize('train_opt', [
    {'G_scheduler_type': 'MultiStepLR', 'G_scheduler_milestones': [4, 9], 'G_scheduler_gamma': 0.5,
     'G_scheduler_warmup_iter': 3},
    {'G_scheduler_type': 'CosineAnnealingWarmRestarts', 'G_scheduler_periods': [5, 6],
     'G_scheduler_restart_weights': [1, 0.7], 'G_scheduler_eta_min': 1e-3, 'G_scheduler_warmup_iter': 2},
    {'G_scheduler_type': 'CosineAnnealingWarmRestarts', 'G_scheduler_periods': 4, 'G_scheduler_eta_min': 1e-3},
    {'G_scheduler_type': 'wsd', 'G_scheduler_warmup_iter': 2, 'G_scheduler_decay_ratio': 0.5,
     'G_scheduler_eta_min': 1e-5, 'total_iter': 12},
    {'G_scheduler_type': 'wsd', 'G_scheduler_decay_ratio': 0.75, 'G_scheduler_decay_shape': 'cosine',
     'total_iter': 12},
    {'G_scheduler_type': 'knee', 'G_scheduler_warmup_iter': 3, 'G_scheduler_explore_ratio': 0.3,
     'G_scheduler_total_iter': 12},
])
def test_resumed_scheduler_continues_the_uninterrupted_lr_sequence(train_opt):
    lrs, n, split = (1e-3, 5e-4), 14, 6
    full = [lr_sequence(train_opt, n, lrs, g) for g in (0, 1)]

    opt = _opt(lrs)
    sched = build_scheduler(opt, t(train_opt))
    for _ in range(split):
        opt.step()
        sched.step()
    state = sched.state_dict()

    opt2 = _opt(lrs)  # fresh run built from the same options, before any step
    sched2 = build_scheduler(opt2, t(train_opt))
    sched2.load_state_dict(state)
    resumed = [[], []]
    for _ in range(n - split):
        for g in (0, 1):
            resumed[g].append(opt2.param_groups[g]['lr'])
        opt2.step()
        sched2.step()
    assert resumed == [full[0][split:], full[1][split:]]
    assert sched2.get_last_lr() == [g['lr'] for g in opt2.param_groups]


class _Wrapper(nn.Module):
    """Stands in for DistributedDataParallel: the real network lives in `.module`."""

    def __init__(self, module):
        super().__init__()
        self.module = module


def _bn_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3))


def test_ema_copy_is_frozen_eval_and_independent():
    net = _bn_net()
    ema = ModelEMA(net, 0.9)
    assert not ema.module.training
    assert not any(p.requires_grad for p in ema.module.parameters())
    with torch.no_grad():
        net[0].weight.add_(1.0)
    assert not torch.equal(ema.module[0].weight, net[0].weight)


def test_ema_update_follows_formula_and_copies_buffers_through_ddp_wrapper():
    net = _bn_net()
    ema = ModelEMA(_Wrapper(net), 0.9)
    old = {k: v.clone() for k, v in ema.module.named_parameters()}
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p))
    net.train()(torch.randn(4, 2, 5, 5))  # changes BN running stats
    ema.update(_Wrapper(net))
    for name, p in net.named_parameters():
        assert torch.allclose(dict(ema.module.named_parameters())[name], 0.9 * old[name] + 0.1 * p)
    assert torch.equal(ema.module[1].running_mean, net[1].running_mean)
    assert torch.equal(ema.module[1].running_var, net[1].running_var)
    assert ema.module[1].num_batches_tracked.item() == 1


def test_ema_state_dict_is_a_plain_network_state_dict():
    net = _bn_net()
    ema = ModelEMA(net, 0.5)
    with torch.no_grad():
        net[0].weight.fill_(2.0)
    ema.update(net)
    fresh = _bn_net()
    fresh.load_state_dict(ema.state_dict())
    other = ModelEMA(_bn_net(), 0.5)
    other.load_state_dict(ema.state_dict())
    assert torch.equal(fresh[0].weight, ema.module[0].weight)
    assert torch.equal(other.module[0].weight, ema.module[0].weight)


def test_clip_regularizer_nudges_only_values_beyond_1_5():
    conv = nn.Conv2d(1, 1, 1)
    with torch.no_grad():
        conv.weight.fill_(2.0)
        conv.bias.fill_(-1.7)
    lin = nn.Linear(2, 1)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 1.6]]))
    regularize_clip(nn.Sequential(conv, lin))
    assert conv.weight.item() == pytest.approx(2.0 - 1e-4)
    assert conv.bias.item() == pytest.approx(-1.7 + 1e-4)
    assert lin.weight.tolist()[0] == pytest.approx([1.0, 1.6 - 1e-4])


def test_orth_regularizer_pulls_extreme_singular_values_by_1e4():
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3)
    c_out, c_in, kh, kw = conv.weight.shape
    mat = lambda w: w.permute(2, 3, 1, 0).reshape(kh * kw * c_in, c_out).double()
    u, _, vh = torch.linalg.svd(mat(conv.weight), full_matrices=False)
    s = torch.tensor([3.0, 1.0, 0.7, 0.1], dtype=torch.float64)
    with torch.no_grad():
        conv.weight.copy_(((u * s) @ vh).reshape(kh, kw, c_in, c_out).permute(3, 2, 0, 1))
    bias = conv.bias.clone()
    regularize_orth(conv)
    new_s = torch.linalg.svdvals(mat(conv.weight))
    assert new_s.tolist() == pytest.approx([3.0 - 1e-4, 1.0, 0.7, 0.1 + 1e-4], abs=2e-6)
    assert torch.equal(conv.bias, bias)


def test_apply_regularizers_runs_only_on_configured_steps():
    conv = nn.Conv2d(1, 1, 1)
    with torch.no_grad():
        conv.weight.fill_(2.0)
    opt = {'G_regularizer_orthstep': None, 'G_regularizer_clipstep': 5}
    assert apply_regularizers(conv, 3, opt) == [] and conv.weight.item() == 2.0
    assert apply_regularizers(conv, 10, opt) == ['clip']
    assert conv.weight.item() == pytest.approx(2.0 - 1e-4)
    assert apply_regularizers(conv, 6, {'G_regularizer_orthstep': 3, 'G_regularizer_clipstep': 2}) == ['orth', 'clip']


def test_adam_is_fused_on_cuda_by_default_and_as_asked_elsewhere():
    from models.optim import use_fused
    t = {'G_optimizer_fused': None}
    assert use_fused(t, torch.device('cuda')) and not use_fused(t, torch.device('cpu'))
    assert use_fused({'G_optimizer_fused': True}, torch.device('cpu'))
    assert not use_fused({'D_optimizer_fused': False}, torch.device('cuda'), 'D')


def test_tf32_is_a_cuda_setting_and_silent_elsewhere():
    from models.precision import tf32_setup
    assert tf32_setup(None, torch.device('cpu')) is None and tf32_setup(True, torch.device('cpu')) is None


def test_milestones_the_run_never_reaches_are_one_warning_line(caplog):
    caplog.set_level(logging.INFO, logger='restoration')
    build_scheduler(_opt(), t({'G_scheduler_type': 'MultiStepLR', 'G_scheduler_milestones': [700, 900],
                               'total_iter': 500}))
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        'train.G_scheduler_milestones: 700, 900, all at or beyond train.total_iter 500: the learning rate never '
        'decays (milestones count iterations, not epochs; G_scheduler_type null gives a constant rate)']
    caplog.clear()
    for milestones in ([200, 500], [200, 900]):  # KAIR's files end on a milestone at total_iter: one is reached
        build_scheduler(_opt(), t({'G_scheduler_type': 'MultiStepLR', 'G_scheduler_milestones': milestones,
                                   'total_iter': 500}))
    build_scheduler(_opt(), t({'G_scheduler_type': 'MultiStepLR', 'G_scheduler_milestones': [700],
                               'total_iter': 500}), notes=False)  # a model rebuilding its schedule says it once
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
