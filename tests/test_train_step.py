"""One optimizer step of the image model: finiteness of loss and gradients, clipping, loss scaling,
and what a resume takes from the checkpoint and what from the options."""
import logging

import pytest
import torch

from conftest import tiny_options
from option_rules import option_rules
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


@pytest.mark.parametrize('fused', [True, False], ids=['fused', 'torch-default'])
def test_a_skipped_step_leaves_weights_moments_and_average_untouched_and_advances_the_schedule(tmp_path, fused):
    """The verdict is a device bool: a fused optimizer skips on the device (its found_inf), others on the host."""
    model = _model(tmp_path, G_scheduler_milestones=[2], G_optimizer_fused=fused, E_decay=0.9)
    assert bool(model.optimizer.defaults.get('fused')) == fused
    loss = model.backward([_batch(2, 0)])
    applied_loss = loss.item()
    model.finalize_gradients(1, loss)
    model.step(1, loss, torch.tensor(True))  # one applied step: moments and average exist
    before = _params(model)
    moments = [t.clone() for state in model.optimizer.state.values() for t in state.values()]
    average = [p.clone() for p in model.ema.module.parameters()]
    loss = model.backward([_batch(2, 1)])
    next(model.net_g.parameters()).grad.fill_(float('nan'))
    verdict = model.finalize_gradients(2, loss)
    assert not bool(verdict)
    model.step(2, loss, verdict)
    assert all(torch.equal(a, b) for a, b in zip(before, _params(model)))
    assert all(torch.equal(a, b) for a, b in zip(moments, (t for st in model.optimizer.state.values()
                                                           for t in st.values())))  # step counts included
    assert all(torch.equal(a, b) for a, b in zip(average, model.ema.module.parameters()))
    assert model.current_lr() == pytest.approx(5e-4)  # milestone 2 passed: 1e-3 * 0.5
    assert model.log_losses()['G_loss'] == pytest.approx(applied_loss)  # the skipped step's loss is not counted


def test_fused_and_torch_default_adam_train_alike(tmp_path):
    runs = []
    for fused in (True, False):
        model = _model(tmp_path, seed=4, G_optimizer_fused=fused)
        for step in (1, 2, 3):
            loss = model.backward([_batch(2, step)])
            model.step(step, loss, model.finalize_gradients(step, loss))
        runs.append(_params(model))
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


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
    model.step(1, loss, torch.tensor(False))
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


@pytest.mark.parametrize('policy', ['skip', 'stop'])
def test_training_steps_never_read_the_device_and_skipped_steps_are_reported_at_the_next_check(tmp_path,
                                                                                              monkeypatch, policy):
    """A host read of a device value per iteration (bool(), .item(), .tolist()) makes the CPU wait for the GPU:
    none happens in `train_step`, NaN iterations included; the policy acts at the loop's check points."""
    import argparse

    from training.trainer import Trainer
    from utils import dist
    from utils.options import derive_paths
    from utils.exit_codes import EXIT_NONFINITE
    from utils.stop import TrainingStopped
    opt = validate(tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'), G_optimizer_fused=True, E_decay=0.9,
                                nan_policy=policy, nan_skip_limit=2), option_rules())
    derive_paths(opt)
    trainer = Trainer(opt, dist.detect({}), CPU, argparse.Namespace(fresh=False, allow_unsafe_load=False))
    try:
        torch.manual_seed(0)
        trainer.model = ModelPlain(opt, CPU)
        trainer.ckpt.complete_steps = lambda: []  # newest_save(): no checkpoint yet
        weights = []

        def forbidden(name):
            def read(self, *args, **kwargs):
                raise AssertionError(f'a training step read a tensor on the host: Tensor.{name}')
            return read
        with monkeypatch.context() as m:
            for name in ('item', '__bool__', 'tolist', '__float__', '__int__', 'numpy'):
                m.setattr(torch.Tensor, name, forbidden(name))
            m.setattr(dist, 'agree_any', lambda flags: [bool(f) for f in flags])  # host flags only
            for step in (1, 2, 3):
                trainer.agree_to_go_on(None)  # the iteration's one host collective: stop signals, unreadable data
                trainer.step = step
                batch = _batch(2, step)
                if step == 2:
                    batch['L'][0, 0, 0, 0] = float('nan')
                trainer.train_step([batch])
                weights.append(_params(trainer.model))
        assert all(torch.equal(a, b) for a, b in zip(weights[0], weights[1]))  # iteration 2 was not applied
        assert not all(torch.equal(a, b) for a, b in zip(weights[1], weights[2]))
        if policy == 'stop':
            with pytest.raises(TrainingStopped, match=r'^iteration 2: non-finite loss term G_loss '
                                                      r'\(train\.nan_policy=stop\); newest complete checkpoint: none'
                               ) as e:
                trainer.check_skipped_steps()
            assert e.value.code == EXIT_NONFINITE
        else:
            with monkeypatch.context() as m:
                warnings = []
                m.setattr(trainer.log, 'warning', warnings.append)
                trainer.check_skipped_steps()
                trainer.check_skipped_steps()  # counted once
            assert warnings == ['iteration 2: 1 step skipped, non-finite loss or gradients '
                                '(train.nan_policy=skip, at most 1 in a row)']
    finally:
        trainer.signals.restore()


def test_a_stop_on_a_non_finite_step_names_the_loss_terms_that_were_not_finite_then():
    """Kept on the device at the first skipped step (no host read), named when the run stops: which of the
    weighted terms went non-finite, or the gradients when every term was finite."""
    from utils.step_gate import StepGate, non_finite_words
    names = ['l_g_pix', 'l_g_fft', 'l_g_ssim']
    gate = StepGate(CPU, limit=10)
    inf, nan = float('inf'), float('nan')
    gate.decide(torch.tensor(True), 1, torch.tensor([1.0, 2.0, 3.0]))
    gate.decide(torch.tensor(False), 2, torch.tensor([1.0, inf, nan]))   # the first skipped step
    gate.decide(torch.tensor(False), 3, torch.tensor([nan, 2.0, 3.0]))   # later ones do not overwrite it
    skips = gate.take()
    assert (skips.first, skips.skipped) == (2, 2)
    assert non_finite_words(names, skips.terms) == 'non-finite loss terms l_g_fft, l_g_ssim'
    gate.decide(torch.tensor(False), 4, torch.tensor([1.0, 2.0, 3.0]))  # finite terms, inf/NaN gradients
    assert non_finite_words(names, gate.take().terms) == ('non-finite gradients (the loss terms were finite: '
                                                           'l_g_pix, l_g_fft, l_g_ssim)')
    gan = [None, 'D_loss', None]  # entries that are no loss are never named
    gate.decide(torch.tensor(False), 5, torch.tensor([nan, nan, 1.0]))
    assert non_finite_words(gan, gate.take().terms) == 'non-finite loss term D_loss'

