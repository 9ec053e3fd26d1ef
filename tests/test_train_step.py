"""One optimizer step of the image model: finiteness of loss and gradients, clipping, loss scaling,
and what a resume takes from the checkpoint and what from the options."""
import logging

import pytest
import torch

from conftest import tiny_options
from main_train import option_rules
from models.model_plain import ModelPlain
from utils.options import validate

CPU = torch.device('cpu')


def _model(tmp_path, seed=0, **train):
    raw = tiny_options(str(tmp_path), str(tmp_path / 'data'), **{'E_decay': 0.0, **train})
    raw['netG']['act_mode'] = 'R'
    torch.manual_seed(seed)
    return ModelPlain(validate(raw, option_rules()), CPU)


def _batch(n, seed, size=16):
    g = torch.Generator().manual_seed(seed)
    H = torch.rand(n, 3, size, size, generator=g)
    return {'L': H + 0.1 * torch.randn(H.shape, generator=g), 'H': H}


def _params(model):
    return [p.detach().clone() for p in model.net_g.parameters()]


def test_a_finite_loss_with_non_finite_gradients_is_not_a_sound_step(tmp_path):
    model = _model(tmp_path)
    loss = model.backward([_batch(2, 0)])
    next(model.net_g.parameters()).grad[0].fill_(float('inf'))
    assert torch.isfinite(loss)
    assert not bool(model.finalize_gradients(1, loss))


def test_finite_loss_and_gradients_are_a_sound_step(tmp_path):
    model = _model(tmp_path)
    loss = model.backward([_batch(2, 0)])
    assert bool(model.finalize_gradients(1, loss))


def test_a_skipped_step_leaves_the_weights_untouched_and_advances_the_schedule(tmp_path):
    model = _model(tmp_path, G_scheduler_milestones=[1])
    before = _params(model)
    loss = model.backward([_batch(2, 0)])
    next(model.net_g.parameters()).grad.fill_(float('nan'))
    assert not bool(model.finalize_gradients(1, loss))
    model.skip_step()
    assert all(torch.equal(a, b) for a, b in zip(before, _params(model)))
    assert model.current_lr() == pytest.approx(5e-4)  # milestone 1 passed: 1e-3 * 0.5


def test_clipping_under_a_grad_scaler_sees_unscaled_gradients(tmp_path):
    """With loss scaling, the norm that clipping compares with max_norm must be the true one."""
    plain, scaled = _model(tmp_path, seed=3, G_optimizer_clipgrad=0.01), _model(tmp_path, seed=3,
                                                                                 G_optimizer_clipgrad=0.01)
    scaled.scaler = torch.amp.GradScaler('cpu', init_scale=2.0 ** 8)
    for m in (plain, scaled):
        loss = m.backward([_batch(2, 5)])
        assert bool(m.finalize_gradients(1, loss))
        m.step(1, loss)
    assert plain._grad_norm.item() > 0.01  # clipping was active
    torch.testing.assert_close(scaled._grad_norm, plain._grad_norm, rtol=1e-5, atol=0)
    for a, b in zip(plain.net_g.parameters(), scaled.net_g.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-9)
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_an_overflow_under_a_grad_scaler_is_left_to_the_scaler(tmp_path):
    """fp16 overflows are routine under loss scaling: the scaler skips the update and lowers the scale."""
    model = _model(tmp_path)
    model.scaler = torch.amp.GradScaler('cpu', init_scale=2.0 ** 8)
    before = _params(model)
    loss = model.backward([_batch(2, 0)])
    next(model.net_g.parameters()).grad.fill_(float('inf'))
    assert bool(model.finalize_gradients(1, loss))
    model.step(1, loss)
    assert all(torch.equal(a, b) for a, b in zip(before, _params(model)))
    assert model.scaler.get_scale() < 2.0 ** 8


def test_a_skipped_step_under_a_grad_scaler_keeps_the_scale_and_the_next_step_runs(tmp_path):
    model = _model(tmp_path)
    model.scaler = torch.amp.GradScaler('cpu', init_scale=2.0 ** 8)
    loss = model.backward([_batch(2, 0)])
    model.finalize_gradients(1, loss)
    model.skip_step()
    assert model.scaler.get_scale() == 2.0 ** 8
    loss = model.backward([_batch(2, 1)])
    model.finalize_gradients(2, loss)
    model.step(2, loss)


def _trained_state(tmp_path, **train):
    model = _model(tmp_path, seed=1, **train)
    for step in (1, 2, 3):
        model.step(step, model.backward([_batch(2, step)]))
    return model.state_files(), model.training_state()


def _resume(tmp_path, caplog, weights, training, **train):
    model = _model(tmp_path, seed=2, **train)
    with caplog.at_level(logging.WARNING):
        model.load_state(weights, training)
    return model, [r.getMessage() for r in caplog.records]


def test_resume_applies_edited_optimizer_and_schedule_options_and_logs_each_difference(tmp_path, caplog):
    weights, training = _trained_state(tmp_path, G_optimizer_lr=1e-3, G_scheduler_milestones=[6])
    model, log = _resume(tmp_path, caplog, weights, training, G_optimizer_lr=1e-5, G_optimizer_wd=1e-4,
                         G_scheduler_milestones=[2], G_scheduler_gamma=0.1)
    group = model.optimizer.param_groups[0]
    assert group['lr'] == pytest.approx(1e-6)  # 3 steps done: past the new milestone 2, 1e-5 * 0.1
    assert group['weight_decay'] == 1e-4
    assert model.scheduler.last_epoch == 3 and model.scheduler.milestones == [2]
    assert model.optimizer.state, 'the Adam moments come from the checkpoint'
    for key, old, new in [('G_optimizer_lr', '0.001', '1e-05'), ('G_optimizer_wd', '0.0', '0.0001'),
                          ('G_scheduler_milestones', '[6]', '[2]'), ('G_scheduler_gamma', '0.5', '0.1')]:
        assert f'resume: train.{key}: checkpoint {old}, options {new}; the options win' in log, log


def test_resume_with_unchanged_options_logs_no_difference(tmp_path, caplog):
    weights, training = _trained_state(tmp_path)
    model, log = _resume(tmp_path, caplog, weights, training)
    assert not [m for m in log if m.startswith('resume:')], log
    assert model.optimizer.param_groups[0]['lr'] == pytest.approx(1e-3)


def test_optimizer_reuse_false_resumes_weights_and_schedule_with_fresh_moments(tmp_path, caplog):
    weights, training = _trained_state(tmp_path)
    model, log = _resume(tmp_path, caplog, weights, training, G_optimizer_reuse=False)
    assert not model.optimizer.state
    assert model.scheduler.last_epoch == 3
    assert all(torch.equal(p, weights['G'][k]) for k, p in model.net_g.state_dict().items())
    assert any('G_optimizer_reuse is false' in m for m in log)


def test_a_changed_optimizer_type_starts_the_optimizer_state_afresh(tmp_path, caplog):
    weights, training = _trained_state(tmp_path)
    model, log = _resume(tmp_path, caplog, weights, training, G_optimizer_type='adamw')
    assert not model.optimizer.state
    assert any('train.G_optimizer_type: checkpoint adam, options adamw' in m for m in log)


def test_ema_switched_on_at_resume_starts_from_the_resumed_weights(tmp_path, caplog):
    weights, training = _trained_state(tmp_path)
    assert 'E' not in weights
    model, log = _resume(tmp_path, caplog, weights, training, E_decay=0.9)
    for k, v in model.ema.module.state_dict().items():
        assert torch.equal(v, weights['G'][k])
    assert any('no EMA weights' in m for m in log)
