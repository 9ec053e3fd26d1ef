"""Training recipes: the optimizers (torch's and pytorch-optimizer's, schedule-free ones included), the lr
schedules, the EMA's warm-up and switch, and what each does at a resume: the continuation is bit-exact."""
import inspect
import io
import math

import pytest
import torch

from conftest import tiny_options, train_options
from models.ema import ModelEMA
from models.model_plain import ModelPlain
from models.optim import OPTIMIZERS, averaging, build_optimizer, gated_step
from models.schedules import build_scheduler
from option_rules import option_rules
from utils.errors import OptionsError, UserError
from utils.options import validate

CPU = torch.device('cpu')
ALL = OPTIMIZERS.names()
SCHEDULE_FREE = [n for n in ALL if OPTIMIZERS.get(n, 'test').schedule_free]
# a value other than the default for each key an optimizer reads, to see it reach the constructor
OTHER = {'betas': None, 'wd': 0.03, 'eps': 1e-7, 'momentum_decay': 0.005, 'decoupled_wd': True, 'momentum': 0.8,
         'dampening': 0.1, 'nesterov': False, 'weight_decouple': True, 'max_grad_norm': 2.0, 'shampoo_beta': 0.9,
         'precondition_frequency': 3, 'max_precondition_dim': 512, 'merge_dims': True, 'precondition_1d': True,
         'normalize_gradient': True, 'correct_bias': False, 'kahan_sum': False, 'beta3': 0.95, 'd0': 1e-5,
         'd_coef': 0.5, 'growth_rate': 1.05, 'bias_correction': True, 'safeguard_warmup': True, 'r': 0.5,
         'weight_lr_power': 1.0, 'sf_momentum': 0.85, 'foreach': False, 'fused': False}


def test_the_optimizers_of_the_issue_are_all_there():
    assert set(ALL) == {'adam', 'adamw', 'nadam', 'radam', 'sgd', 'adan', 'soap', 'adopt', 'stableadamw', 'lion',
                        'prodigy', 'adamw_sf', 'adan_sf'}
    assert SCHEDULE_FREE == ['adamw_sf', 'adan_sf']


@pytest.mark.parametrize('name', ALL)
def test_each_optimizer_key_reaches_the_constructor_keyword_of_that_name(name):
    """Every declared key is a keyword of the library's constructor (checked against the pinned signature, not
    guessed) and arrives in the parameter group with the value the options give."""
    import pytorch_optimizer as po
    kind = OPTIMIZERS.get(name, 'test')
    declared = OPTIMIZERS.options(name, 'test')
    given = {}
    for key, spec in declared.items():
        value = OTHER[key]
        if key == 'betas':
            value = [0.5, 0.6, 0.7] if len(spec.default) == 3 else [0.5, 0.6]
        given[f'G_optimizer_{key}'] = value
    t = train_options(G_optimizer_type=name, G_optimizer_lr=2e-3, **given)
    p = torch.nn.Parameter(torch.zeros(3, 4))
    opt = build_optimizer([p], t)
    group = opt.param_groups[0]
    assert group['lr'] == 2e-3
    classes = {'adan_sf': [po.ScheduleFreeWrapper, po.Adan]}.get(name, [type(opt)])
    keywords = {k for c in classes for k in inspect.signature(c.__init__).parameters}
    for key, keyword in kind.keywords.items():
        assert keyword in keywords, f'{name}: {keyword} is no keyword of {classes}'
        want = given[f'G_optimizer_{key}']
        if name == 'adan_sf' and keyword in ('momentum', 'r', 'weight_lr_power'):  # the wrapper's own
            assert getattr(opt, keyword) == want, keyword
            continue
        assert group[keyword] == (tuple(want) if isinstance(want, list) else want), keyword
    assert ('fused' in declared) == (name in ('adam', 'adamw', 'sgd'))


def test_a_combination_the_library_refuses_is_one_line_naming_the_key():
    with pytest.raises(UserError, match=r'^train\.G_optimizer_type sgd: Nesterov momentum requires a momentum'):
        build_optimizer([torch.nn.Parameter(torch.zeros(2))],
                        train_options(G_optimizer_type='sgd', G_optimizer_momentum=0.0, G_optimizer_nesterov=True))


def test_keys_of_another_optimizer_are_noted_and_dropped_and_a_bad_value_names_its_key():
    checked = train_options(G_optimizer_type='adan', G_optimizer_momentum=0.5)
    assert 'G_optimizer_momentum' not in checked and checked['G_optimizer_betas'] == [0.98, 0.92, 0.99]
    from utils.errors import OptionsError
    with pytest.raises(OptionsError, match=r'train\.G_optimizer_betas: \[0\.9, 0\.99\] must be three numbers'):
        train_options(G_optimizer_type='adan', G_optimizer_betas=[0.9, 0.99])


# ---------------------------------------------------------------------------------------------------------------
# A tiny image model trained a few steps in the process: resume and the schedule-free switch, bit for bit.

def _model(tmp_path, seed=0, **train):
    raw = tiny_options(str(tmp_path), str(tmp_path / 'data'), **{'E_decay': 0.0, **train})
    raw['netG']['act_mode'] = 'R'
    torch.manual_seed(seed)
    return ModelPlain(validate(raw, option_rules()), CPU)


def _batch(step):
    g = torch.Generator().manual_seed(step)
    H = torch.rand(2, 3, 16, 16, generator=g)
    return {'L': H + 0.1 * torch.randn(H.shape, generator=g), 'H': H}


def _train(model, steps):
    for step in steps:
        loss = model.backward([_batch(step)])
        model.step(step, loss, model.finalize_gradients(step, loss))
        model.end_iteration(step)


def _saved(model):
    """What the loop writes at a save (inside `eval_weights`), through torch.save and a weights-only load."""
    buf = io.BytesIO()
    with model.eval_weights():
        torch.save({'weights': model.state_files(), 'training': model.training_state()}, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def _tensors(model):
    out = [p.detach().clone() for p in model.net_g.parameters()]
    if model.ema is not None:
        out += [p.detach().clone() for p in model.ema.module.parameters()]
    return out


def _recipe(name):
    """Options that exercise the step: lr fitting the optimizer, a warm-up into a cosine, the EMA's warm-up and
    (where it may be combined) its switch, crossing the resume point at iteration 3."""
    lr = {'sgd': 0.05, 'prodigy': 1.0, 'lion': 1e-4}.get(name, 2e-3)
    train = dict(G_optimizer_type=name, G_optimizer_lr=lr, G_scheduler_type='cosine', G_scheduler_warmup_iter=2,
                 G_scheduler_total_iter=8, E_decay=0.9, E_warmup_iter=4, G_optimizer_clipgrad=1.0)
    if name not in SCHEDULE_FREE:
        train['E_switch_iter'] = 4
    if name == 'soap':
        train['G_optimizer_precondition_frequency'] = 2  # an eigenbasis update on each side of the resume
    return train


@pytest.mark.parametrize('name', ALL)
def test_each_optimizer_resumes_bit_exactly(tmp_path, name, one_thread):
    """Straight: 6 iterations with a save after the 3rd. Resumed: a model built with another seed, loaded from that
    save, 3 more iterations. Weights, EMA and optimizer state end identical to the last bit."""
    straight = _model(tmp_path, seed=1, **_recipe(name))
    _train(straight, (1, 2, 3))
    saved = _saved(straight)
    _train(straight, (4, 5, 6))
    resumed = _model(tmp_path, seed=2, **_recipe(name))
    resumed.load_state(saved['weights'], saved['training'])
    _train(resumed, (4, 5, 6))
    for a, b in zip(_tensors(straight), _tensors(resumed)):
        assert torch.equal(a, b)
    buf_a, buf_b = io.BytesIO(), io.BytesIO()
    torch.save(straight.training_state(), buf_a)
    torch.save(resumed.training_state(), buf_b)
    from tests.test_resume import _assert_same_tensors
    _assert_same_tensors(torch.load(io.BytesIO(buf_a.getvalue()), weights_only=True),
                         torch.load(io.BytesIO(buf_b.getvalue()), weights_only=True))
    assert not any(torch.equal(a, b) for a, b in zip(_tensors(straight)[:1], saved['weights']['G'].values()))


@pytest.mark.parametrize('name', SCHEDULE_FREE)
def test_a_schedule_free_optimizer_is_saved_and_validated_at_its_averaged_weights(tmp_path, name, one_thread):
    """Inside `eval_weights` netG holds the library's `eval()` weights (the average x); `averaged` computes the same
    x without switching, for the EMA; after the context netG is back at its training point."""
    model = _model(tmp_path, **_recipe(name))
    _train(model, (1, 2, 3))
    sf = model.averaging
    assert sf is not None and sf.training
    training_point = [p.detach().clone() for p in model.net_g.parameters()]
    x = [t.clone() for t in sf.averaged(list(model.net_g.parameters()))]
    with model.eval_weights():
        assert not sf.training
        evaluated = [p.detach().clone() for p in model.net_g.parameters()]
        saved = {k: v.clone() for k, v in model.state_files()['G'].items()}
    assert all(torch.equal(a, b) for a, b in zip(x, evaluated))  # the same operation as the library's eval()
    assert all(torch.equal(a, b) for a, b in zip(evaluated, saved.values()))
    assert not all(torch.equal(a, b) for a, b in zip(evaluated, training_point))
    assert sf.training
    for a, b in zip(training_point, model.net_g.parameters()):  # back, up to the rounding of the round trip
        torch.testing.assert_close(b.detach(), a, rtol=1e-5, atol=1e-6)


def test_the_ema_of_a_schedule_free_run_averages_its_evaluation_point(tmp_path, one_thread):
    model = _model(tmp_path, G_optimizer_type='adamw_sf', E_decay=0.5)
    _train(model, (1, 2))
    before = [p.detach().clone() for p in model.ema.module.parameters()]
    _train(model, (3,))
    x = model.averaging.averaged(list(model.net_g.parameters()))
    for e0, e1, xi in zip(before, model.ema.module.parameters(), x):
        torch.testing.assert_close(e1, torch.lerp(e0, xi, 0.5), rtol=0, atol=1e-7)


def test_the_ema_switch_cannot_be_combined_with_a_schedule_free_optimizer(tmp_path):
    with pytest.raises(UserError, match=r'train\.E_switch_iter: 4 cannot be combined with the schedule-free '
                                        r'G_optimizer_type adan_sf'):
        _model(tmp_path, G_optimizer_type='adan_sf', E_decay=0.9, E_switch_iter=4)


@pytest.mark.parametrize('key', ['E_warmup_iter', 'E_switch_iter'])
def test_the_ema_keys_need_the_ema(tmp_path, key):
    with pytest.raises(UserError, match=rf'train\.{key}: 5 needs the EMA: set train\.E_decay > 0'):
        _model(tmp_path, **{key: 5})


def test_the_ema_decay_ramps_from_zero_over_its_warm_up():
    ema = ModelEMA(torch.nn.Linear(2, 2), 0.99, warmup_iter=4)
    assert [ema.decay_at(s) for s in (0, 1, 2, 4, 9)] == [0.0, 0.99 / 4, 0.99 / 2, 0.99, 0.99]
    assert ModelEMA(torch.nn.Linear(2, 2), 0.99).decay_at(1) == 0.99


def test_the_ema_switch_copies_the_average_into_netg_every_n_iterations(tmp_path, one_thread):
    model = _model(tmp_path, E_decay=0.9, E_switch_iter=2, E_warmup_power=0)  # no warm-up: step 1's average is not netG
    for step in (1, 2, 3):
        _train(model, (step,))
        same = all(torch.equal(p, e) for p, e in zip(model.net_g.parameters(), model.ema.module.parameters()))
        assert same == (step % 2 == 0), step


def test_a_resumed_schedule_free_optimizer_is_back_at_its_training_point(tmp_path, one_thread):
    straight = _model(tmp_path, G_optimizer_type='adamw_sf')
    _train(straight, (1, 2))
    saved = _saved(straight)
    assert saved['training']['optimizer']['param_groups'][0]['train_mode'] is False  # written at x
    resumed = _model(tmp_path, seed=3, G_optimizer_type='adamw_sf')
    resumed.load_state(saved['weights'], saved['training'])
    assert resumed.averaging.training
    assert all(torch.equal(a, b) for a, b in zip(straight.net_g.parameters(), resumed.net_g.parameters()))


def test_an_optimizer_state_written_by_another_optimizer_starts_afresh(tmp_path, caplog, one_thread):
    straight = _model(tmp_path, G_optimizer_type='adan')
    _train(straight, (1,))
    saved = _saved(straight)
    other = _model(tmp_path, G_optimizer_type='adan_sf')
    with caplog.at_level('WARNING'):
        other.load_state(saved['weights'], saved['training'])
    assert 'train.G_optimizer_type: checkpoint adan, options adan_sf: the optimizer state starts afresh' in caplog.text
    _train(other, (2,))


def test_resume_keeps_the_optimizers_own_state_in_its_groups_and_takes_hyperparameters_from_the_options(
        tmp_path, caplog, one_thread):
    """Prodigy's step-size estimate lives in its parameter group: it comes from the checkpoint, an edited
    G_optimizer_d_coef from the options (logged)."""
    model = _model(tmp_path, G_optimizer_type='prodigy', G_optimizer_lr=1.0)
    _train(model, (1, 2, 3))
    saved = _saved(model)
    d, step = (saved['training']['optimizer']['param_groups'][0][k] for k in ('d', 'step'))
    assert d != 1e-6  # moved from d0
    resumed = _model(tmp_path, G_optimizer_type='prodigy', G_optimizer_lr=1.0, G_optimizer_d_coef=0.5)
    with caplog.at_level('WARNING'):
        resumed.load_state(saved['weights'], saved['training'])
    group = resumed.optimizer.param_groups[0]
    assert group['d'] == d and group['step'] == step and group['d_coef'] == 0.5
    assert 'resume: train.G_optimizer_d_coef: checkpoint 1.0, options 0.5; the options win' in caplog.text


# ---------------------------------------------------------------------------------------------------------------
# Schedules: against torch's schedulers where torch has them, by formula where the warm-up changes them.

def _sgd(lrs=(1.0,)):
    return torch.optim.SGD([{'params': [torch.nn.Parameter(torch.zeros(1))], 'lr': lr} for lr in lrs])


def _ours(n, lrs=(1.0,), **train):
    opt = _sgd(lrs)
    sched = build_scheduler(opt, train_options(**train))
    seq = []
    for _ in range(n):
        seq.append([g['lr'] for g in opt.param_groups])
        opt.step()
        sched.step()
    return seq, sched


def _torch(n, make, lrs=(1.0,)):
    opt = _sgd(lrs)
    sched = make(opt)
    seq = []
    for _ in range(n):
        seq.append([g['lr'] for g in opt.param_groups])
        opt.step()
        sched.step()
    return seq


@pytest.mark.parametrize('case', ['cosine', 'linear', 'exponential', 'onecycle-cos', 'onecycle-linear'])
def test_schedules_without_warm_up_follow_torch(case):
    lrs, n = (0.1, 0.02), 30
    S = torch.optim.lr_scheduler
    if case == 'cosine':
        ours, _ = _ours(n, lrs, G_scheduler_type='cosine', G_scheduler_eta_min=1e-3, G_scheduler_total_iter=20)
        ref = _torch(n, lambda o: S.CosineAnnealingLR(o, T_max=20, eta_min=1e-3), lrs)
        ref[21:] = [[1e-3, 1e-3]] * (n - 21)  # torch's closed form climbs again past T_max; ours stays at eta_min
    elif case == 'linear':
        ours, _ = _ours(n, (0.1,), G_scheduler_type='LinearLR', G_scheduler_eta_min=1e-3, G_scheduler_total_iter=20)
        ref = _torch(n, lambda o: S.LinearLR(o, start_factor=1.0, end_factor=1e-2, total_iters=20), (0.1,))
    elif case == 'exponential':
        ours, _ = _ours(n, lrs, G_scheduler_type='exponential', G_scheduler_gamma=0.9)
        ref = _torch(n, lambda o: S.ExponentialLR(o, gamma=0.9), lrs)
    else:
        anneal = case.split('-')[1]
        ours, _ = _ours(n, (0.1,), G_scheduler_type='OneCycleLR', G_scheduler_total_iter=n, G_scheduler_pct_start=0.25,
                        G_scheduler_div_factor=10, G_scheduler_final_div_factor=100, G_scheduler_anneal=anneal)
        ref = _torch(n, lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=n, pct_start=0.25, div_factor=10,
                                               final_div_factor=100, anneal_strategy=anneal, cycle_momentum=False),
                     (0.1,))
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), i


def test_warm_up_then_cosine_reaches_the_base_lr_at_the_end_of_the_warm_up_and_eta_min_at_the_end():
    seq, _ = _ours(14, G_scheduler_type='cosine', G_scheduler_warmup_iter=4, G_scheduler_eta_min=0.01,
                   G_scheduler_total_iter=12)
    lr = [s[0] for s in seq]
    assert lr[:5] == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0])  # the warm-up, then the cosine's start
    assert lr[8] == pytest.approx(0.01 + 0.99 * 0.5)  # half way from iteration 4 to 12
    assert lr[12:] == pytest.approx([0.01, 0.01])


@pytest.mark.parametrize('kind', ['linear', 'exponential'])
def test_the_decays_start_where_the_warm_up_ends(kind):
    extra = {'G_scheduler_gamma': 0.5} if kind == 'exponential' else {'G_scheduler_total_iter': 7}
    seq, _ = _ours(7, G_scheduler_type=kind, G_scheduler_warmup_iter=3, **extra)
    lr = [s[0] for s in seq]
    assert lr[:4] == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0])
    assert lr[4] == pytest.approx(0.5 if kind == 'exponential' else 0.75)


def test_warm_up_multiplies_onecycle_and_the_step_schedules():
    plain, _ = _ours(6, G_scheduler_type='onecycle', G_scheduler_total_iter=20)
    warm, _ = _ours(6, G_scheduler_type='onecycle', G_scheduler_total_iter=20, G_scheduler_warmup_iter=4)
    assert [w[0] for w in warm] == pytest.approx([p[0] * min(1, (i + 1) / 4) for i, p in enumerate(plain)])


def test_a_schedule_that_ends_within_its_warm_up_is_refused():
    with pytest.raises(UserError, match=r'train\.G_scheduler_total_iter: the schedule ends at iteration 5 \(null: '
                                        r'train\.total_iter\), not after train\.G_scheduler_warmup_iter 5'):
        build_scheduler(_sgd(), train_options(G_scheduler_type='cosine', G_scheduler_warmup_iter=5, total_iter=5))


def test_a_schedule_without_an_end_ends_at_total_iter_and_a_resume_logs_a_changed_end():
    _, sched = _ours(3, G_scheduler_type='cosine', total_iter=100)
    assert sched.end_iter == 100
    longer = build_scheduler(_sgd(), train_options(G_scheduler_type='cosine', total_iter=200))
    assert longer.differences(sched.state_dict()) == [
        'train.G_scheduler_total_iter: checkpoint 100, options 200; the options win']
    longer.load_state_dict(sched.state_dict())
    assert longer.last_epoch == 3


def test_the_planned_schedule_is_what_the_log_shows_after_each_iteration():
    seq, sched = _ours(10, G_scheduler_type='MultiStepLR', G_scheduler_milestones=[4], G_scheduler_warmup_iter=2)
    assert sched.planned(range(0, 9)) == pytest.approx([s[0] for s in seq[:9]])


# Warmup-stable-decay and the knee (issue 45): their definitions written out here, the plan curves.png draws, and
# bad phases as one line naming the key.

WSD_SHAPES = {'linear': lambda p: 1 - p, 'cosine': lambda p: (1 + math.cos(math.pi * p)) / 2,
              '1-sqrt': lambda p: 1 - math.sqrt(p)}


@pytest.mark.parametrize('shape', list(WSD_SHAPES))
def test_wsd_warms_up_holds_the_lr_then_decays_over_the_last_share_of_the_run(shape):
    lrs, eta = (0.1, 0.02), 1e-3
    seq, _ = _ours(44, lrs, G_scheduler_type='wsd', G_scheduler_warmup_iter=4, G_scheduler_decay_ratio=0.25,
                   G_scheduler_decay_shape=shape, G_scheduler_eta_min=eta, total_iter=40)

    def expected(base, t):  # the last quarter of 40 iterations decays: from iteration 30 to 40
        if t < 4:
            return base * (t + 1) / 4
        if t < 30:
            return base
        return eta + (base - eta) * WSD_SHAPES[shape](min(1.0, (t - 30) / 10))
    assert seq == [pytest.approx([expected(b, t) for b in lrs], rel=1e-12) for t in range(44)]
    assert seq[35][0] < 0.1 and seq[40][0] == pytest.approx(eta)


def test_knee_is_traiNNer_reduxs_kneelr_one_iteration_later_and_decays_to_eta_min():
    """traiNNer-redux's KneeLR: lr(step) = peak while step <= explore_ratio x total, then peak - peak / decay_steps x
    (step - explore_steps), its step counted from 1 (the lr of its first iteration is that of step 1). Here the
    first iteration has step 0, as torch's LinearLR (and `linear`) count: the same curve, one iteration later."""
    total, ratio = 30, 0.4
    explore = int(total * ratio)

    def kneelr(step, peak=0.1):
        return peak if step <= explore else peak - peak / (total - explore) * (step - explore)
    seq, _ = _ours(total + 1, (0.1,), G_scheduler_type='KneeLR', G_scheduler_explore_ratio=ratio, total_iter=total)
    assert [s[0] for s in seq] == pytest.approx([kneelr(t) for t in range(total + 1)], rel=1e-12, abs=1e-15)
    warm, _ = _ours(total + 1, (0.1,), G_scheduler_type='knee', G_scheduler_explore_ratio=ratio, total_iter=total,
                    G_scheduler_warmup_iter=5, G_scheduler_eta_min=0.01)
    lr = [s[0] for s in warm]
    assert lr[:6] == pytest.approx([0.02, 0.04, 0.06, 0.08, 0.1, 0.1])  # the warm-up inside the explore phase
    assert lr[explore] == 0.1 and lr[explore + 9] == pytest.approx(0.1 - 0.09 / 18 * 9) and lr[total] == 0.01


@pytest.mark.parametrize('kind, train', [
    ('wsd', dict(G_scheduler_decay_ratio=0.3, G_scheduler_warmup_iter=7)),
    ('knee', dict(G_scheduler_explore_ratio=0.55, G_scheduler_warmup_iter=7, G_scheduler_eta_min=1e-4))])
def test_curves_draw_the_wsd_and_knee_plans_with_their_corners_where_they_are(kind, train):
    """What main_train writes as the run's planned schedule and curves.png's lr panel draws: the closed form at 400
    evenly spaced iterations and exactly at each phase's start, so the warm-up's end and the knee are corners."""
    from training.status import schedule_row
    from utils.plot import curves_figure
    sched = build_scheduler(_sgd((0.1,)), train_options(G_scheduler_type=kind, total_iter=100_003, **train))
    trainer = type('Run', (), {'step': 0, 'model': type('Model', (), {'lr_schedule': staticmethod(sched.planned),
                                                                         'lr_phases': staticmethod(sched.phases)})})
    row = schedule_row(trainer.model, trainer.step, 100_003)
    start = 100_003 - round(0.3 * 100_003) if kind == 'wsd' else round(0.55 * 100_003)
    assert sched.phases() == [7, start, 100_003]
    drawn = curves_figure([row]).axes[1].lines[0]
    x, y = list(drawn.get_xdata()), list(drawn.get_ydata())
    assert {7, start, 100_003} <= set(x) and len(x) >= 400
    assert y == [sched.lr_at(0.1, i) for i in x]
    assert y[x.index(7) - 1] < 0.1 == y[x.index(7)] == y[x.index(start)] and y[-1] == (0.0 if kind == 'wsd' else 1e-4)
    assert all(v == 0.1 for i, v in zip(x, y) if 7 <= i <= start)  # the stable phase is flat
    assert all(a >= b for a, b in zip(y[x.index(start):], y[x.index(start) + 1:]))  # then it only falls


@pytest.mark.parametrize('train, message', [
    (dict(G_scheduler_type='wsd', G_scheduler_decay_ratio=0), r'train\.G_scheduler_decay_ratio: .*must be in \(0, 1]'),
    (dict(G_scheduler_type='wsd', G_scheduler_decay_ratio=1.5), r'train\.G_scheduler_decay_ratio: .*in \(0, 1]'),
    (dict(G_scheduler_type='wsd', G_scheduler_decay_shape='sqrt'),
     r'train\.G_scheduler_decay_shape: .*must be one of linear, cosine, 1-sqrt'),
    (dict(G_scheduler_type='knee', G_scheduler_explore_ratio=1), r'train\.G_scheduler_explore_ratio: .*must be in '
                                                                  r'\[0, 1\)'),
    (dict(G_scheduler_type='knee', G_scheduler_explore_ratio=-0.1), r'train\.G_scheduler_explore_ratio: .*must be in'),
])
def test_wsd_and_knee_keys_out_of_range_are_one_line_naming_the_key(train, message):
    with pytest.raises(OptionsError, match=message):
        train_options(**train)


@pytest.mark.parametrize('train, message', [
    (dict(G_scheduler_type='wsd', G_scheduler_warmup_iter=50, total_iter=50),
     r'^train\.G_scheduler_total_iter: the schedule ends at iteration 50 \(null: train\.total_iter\), not after '
     r'train\.G_scheduler_warmup_iter 50$'),
    (dict(G_scheduler_type='knee', G_scheduler_warmup_iter=80, G_scheduler_total_iter=60, total_iter=100),
     r'^train\.G_scheduler_total_iter: the schedule ends at iteration 60'),
    (dict(G_scheduler_type='wsd', G_scheduler_decay_ratio=0.9, G_scheduler_warmup_iter=20, total_iter=100),
     r'^train\.G_scheduler_decay_ratio: a decay over the last 0\.9 of 100 iterations starts the decay at iteration '
     r'10, before train\.G_scheduler_warmup_iter 20 ends$'),
    (dict(G_scheduler_type='wsd', G_scheduler_decay_ratio=0.004, total_iter=100),
     r'^train\.G_scheduler_decay_ratio: a decay over the last 0\.004 of 100 iterations leaves no iteration to decay '
     r'over'),
    (dict(G_scheduler_type='knee', G_scheduler_explore_ratio=0.1, G_scheduler_warmup_iter=20, total_iter=100),
     r'^train\.G_scheduler_explore_ratio: an explore phase of 0\.1 of 100 iterations starts the decay at iteration '
     r'10, before train\.G_scheduler_warmup_iter 20 ends$'),
    (dict(G_scheduler_type='knee', G_scheduler_explore_ratio=0.999, total_iter=100),
     r'^train\.G_scheduler_explore_ratio: an explore phase of 0\.999 of 100 iterations leaves no iteration'),
])
def test_wsd_and_knee_phases_that_do_not_fit_the_run_are_one_line_naming_the_key(train, message):
    with pytest.raises(UserError, match=message):
        build_scheduler(_sgd(), train_options(**train))


def test_a_resumed_wsd_run_notes_an_edited_decay_and_continues_on_the_new_one():
    _, sched = _ours(12, G_scheduler_type='wsd', G_scheduler_decay_ratio=0.5, total_iter=20)
    edited = build_scheduler(_sgd(), train_options(G_scheduler_type='wsd', G_scheduler_decay_ratio=0.25,
                                                   G_scheduler_decay_shape='linear', total_iter=20))
    assert edited.differences(sched.state_dict()) == [
        'train.G_scheduler_decay_ratio: checkpoint 0.5, options 0.25; the options win',
        'train.G_scheduler_decay_shape: checkpoint 1-sqrt, options linear; the options win']
    edited.load_state_dict(sched.state_dict())
    assert edited.get_last_lr() == [1.0]  # iteration 12: still stable on the edited schedule (decay from 15)


# ---------------------------------------------------------------------------------------------------------------
# The skip verdict and the device.

class _Counting(torch.optim.SGD):
    steps = 0

    def step(self, closure=None):
        type(self).steps += 1
        return super().step(closure)


def test_without_a_host_verdict_an_unfused_optimizer_steps_without_reading_the_device(monkeypatch):
    """nan_policy "stop" on CUDA (ModelPlain.host_verdict False): the run stops at the next check point anyway, so the
    verdict is not read per iteration; with a host verdict (CPU, or "skip") a False verdict skips the step."""
    opt = _Counting([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    opt.param_groups[0]['params'][0].grad = torch.ones(2)
    verdict = torch.tensor(False)
    gated_step(opt, verdict)
    assert _Counting.steps == 0
    monkeypatch.setattr(torch.Tensor, '__bool__', lambda self: (_ for _ in ()).throw(AssertionError('host read')))
    gated_step(opt, verdict, host_verdict=False)
    assert _Counting.steps == 1


def test_on_cpu_the_verdict_is_read_whatever_the_policy(tmp_path):
    assert _model(tmp_path).host_verdict  # CPU: a read costs nothing
    assert _model(tmp_path, nan_policy='skip').host_verdict


def test_averaging_is_only_for_the_schedule_free_optimizers():
    p = torch.nn.Parameter(torch.zeros(2))
    assert averaging(torch.optim.Adam([p])) is None
    assert averaging(build_optimizer([p], train_options(G_optimizer_type='adan'))) is None
    assert averaging(build_optimizer([p], train_options(G_optimizer_type='adamw_sf'))).wrapper is False
    assert averaging(build_optimizer([p], train_options(G_optimizer_type='adan_sf'))).wrapper is True


def test_schedule_free_optimizers_with_the_library_default_lr_learn(tmp_path, one_thread):
    """A sanity check of the wiring (not of the method): 30 steps lower the training loss."""
    for name in SCHEDULE_FREE:
        model = _model(tmp_path, G_optimizer_type=name, G_optimizer_lr=2.5e-3, G_scheduler_warmup_iter=5)
        first = model.backward([_batch(0)]).item()
        model.optimizer.zero_grad()
        _train(model, [0] * 30)
        with model.eval_weights():
            last = model.backward([_batch(0)]).item()
        assert last < 0.8 * first, name
        assert math.isfinite(last)


def _forbid_host_reads(m):
    def forbidden(name):
        def read(self, *args, **kwargs):
            raise AssertionError(f'a training step read a tensor on the host: Tensor.{name}')
        return read
    for name in ('item', '__bool__', 'tolist', '__float__', '__int__', 'numpy'):
        m.setattr(torch.Tensor, name, forbidden(name))


@pytest.mark.parametrize('name', ['adamw_sf', 'adan_sf', 'adan', 'adopt', 'stableadamw', 'lion'])
def test_recipe_steps_never_read_the_device(tmp_path, monkeypatch, name, one_thread):
    """As on CUDA under nan_policy "stop" (host_verdict off): the optimizer's step, the schedule, the EMA's warm-up,
    switch and schedule-free averaging, NaN iteration included, with no host read of a device value. (Prodigy reads
    its step-size estimate on the host inside the library. torch's NAdam and RAdam read their step counts, which
    torch keeps in host memory unless `capturable`: no wait for the GPU, but a read this test cannot tell apart.)"""
    model = _model(tmp_path, nan_policy='stop', **_recipe(name))
    model.host_verdict = False
    _train(model, (1,))  # the optimizer's state is created on the first step (the library may look at shapes)
    with monkeypatch.context() as m:
        _forbid_host_reads(m)
        for step in (2, 3, 4):
            batch = _batch(step)
            if step == 3:
                batch['L'][0, 0, 0, 0] = float('nan')
            loss = model.backward([batch])
            model.step(step, loss, model.finalize_gradients(step, loss))


def test_a_gan_step_with_adaptive_d_never_reads_the_device(tmp_path, demo_images, monkeypatch):
    from tests.test_gan import _batch as gan_batch, _model as gan_model
    model = gan_model(tmp_path, demo_images, D_adaptive=True, G_optimizer_fused=True, D_optimizer_fused=True,
                      E_warmup_iter=3)
    with monkeypatch.context() as m:
        _forbid_host_reads(m)
        for step in (1, 2, 3):
            loss = model.backward([gan_batch(step)])
            model.step(step, loss, model.finalize_gradients(step, loss))
            model.end_iteration(step)


# ---------------------------------------------------------------------------------------------------------------
# Through the real loop.

def test_a_schedule_free_run_resumed_from_a_save_is_bitwise_identical_to_a_straight_run(tmp_path, demo_images):
    """The loop switches to the averaged weights around each save and validation and back: a run stopped at a save
    and resumed makes the same switches, and ends with the same weights, EMA and optimizer state."""
    from conftest import run_main, write_options
    from tests.test_resume import _assert_same_run_state
    train = dict(G_optimizer_type='adamw_sf', G_scheduler_type='cosine', G_scheduler_warmup_iter=2,
                 G_scheduler_total_iter=8, E_warmup_iter=3, total_iter=8, checkpoint_save=4, checkpoint_test=2)
    a = tiny_options(str(tmp_path / 'exp'), demo_images, **train)
    a['task'], a['logging']['use_tensorboard'] = 'straight', False
    b = dict(a, task='resumed')
    pa, pb = write_options(str(tmp_path / 'a.json'), a), write_options(str(tmp_path / 'b.json'), b)
    assert run_main('main_train', ['--opt', pa]).returncode == 0
    first = run_main('main_train', ['--opt', pb, '--set', 'train.total_iter=4'])
    assert first.returncode == 0, first.stderr[-2000:]
    second = run_main('main_train', ['--opt', pb])
    assert second.returncode == 0 and 'at iteration 4 ' in second.stdout, second.stderr[-2000:]
    assert 'schedule-free: validated and saved at its averaged weights' in second.stdout
    _assert_same_run_state(tmp_path / 'exp' / 'straight' / 'models', tmp_path / 'exp' / 'resumed' / 'models', 8)


# the demo's lr for each optimizer: Adam's 1e-3 where the method takes Adam-like steps
DEMO_LR = {'sgd': 0.05, 'lion': 1e-4, 'prodigy': 1.0, 'adamw_sf': 2.5e-3, 'adan_sf': 2.5e-3}


@pytest.mark.slow  # ~25 s each on 2 idle cores; runs in CI (CI=true) and with RUN_SLOW=1
@pytest.mark.parametrize('name', ALL)
def test_the_demo_trains_200_iterations_with_each_optimizer_and_its_psnr_rises(tmp_path, name):
    """options/train_dncnn_demo.json for 200 iterations of 4 patches with each optimizer (its lr from DEMO_LR, a
    20-iteration warm-up), validated at 100 and 200: netG's PSNR rises between the two and beats the noisy input's
    (the `validation input:` line, 20.42 dB). Two changes from the file as shipped make 200 iterations telling:
    KAIR's orthogonal initialisation (KAIR's DnCNN files use it; from PyTorch's default one, DnCNN's output stays
    near zero for the first few hundred iterations with every optimizer but Adam) and no EMA (validated weights
    that lag 100 iterations behind would show the start of the run)."""
    import re
    from conftest import clean_env, run_main
    sets = (f'path.root={tmp_path}', 'train.total_iter=200', 'train.checkpoint_test=100', 'train.checkpoint_save=200',
            'train.checkpoint_print=100', f'train.G_optimizer_type={name}',
            f'train.G_optimizer_lr={DEMO_LR.get(name, 1e-3)}', 'train.G_scheduler_warmup_iter=20', 'train.E_decay=0',
            'netG.init_type=orthogonal',
            'datasets.train.dataloader_batch_size=4', 'logging.use_tensorboard=false')
    res = run_main('main_train', ['--opt', 'options/train_dncnn_demo.json', *[a for s in sets for a in ('--set', s)]],
                   env=clean_env(OMP_NUM_THREADS='1'))
    assert res.returncode == 0, res.stderr[-3000:]
    noisy = [float(v) for v in re.findall(r'validation input: [^\n]*? items: PSNR ([\d.]+) dB', res.stdout)]
    psnr = [float(v) for v in re.findall(r'validation on \d+ items: PSNR ([\d.]+) dB', res.stdout)]
    assert len(noisy) == 1 and len(psnr) == 2, res.stdout[-3000:]
    assert psnr[1] > psnr[0] + 0.1 and psnr[1] > noisy[0] + 0.5, (name, noisy, psnr)
