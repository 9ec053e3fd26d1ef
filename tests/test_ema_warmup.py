"""The EMA's decay warms up (`E_warmup_power`, traiNNer-redux's `ema_power`) where netG trains from its
initialisation, so that validation scores weights that have left their random start; `E_warmup_power: 0` is
KAIR's netE exactly; the validation line says which weights it scored."""
import copy

import pytest
import torch

from models.ema import ModelEMA
from models.generator import DEFAULT_WARMUP_POWER, warmup_power
from tests.conftest import tiny_options
from utils.errors import UserError

CPU = torch.device('cpu')


def test_the_decay_of_iteration_t_is_min_of_e_decay_and_one_minus_t_to_the_minus_power():
    """ema-pytorch's schedule with update_every 1 and no update_after_step (what traiNNer-redux builds): its
    t-th update has 1 - (1 + (t - 1))^-power, the first a copy."""
    ema = ModelEMA(torch.nn.Linear(2, 2), 0.999, warmup_power=0.75)
    assert ema.decay_at(1) == 0.0
    assert ema.decay_at(300) == pytest.approx(1 - 300 ** -0.75) == pytest.approx(0.986127, abs=1e-6)
    assert ema.decay_at(9_999) < 0.999 == ema.decay_at(10_001) == ema.decay_at(10 ** 6)
    assert ModelEMA(torch.nn.Linear(2, 2), 0.999, warmup_power=10).decay_at(2) == 0.999  # traiNNer-redux's default
    assert ModelEMA(torch.nn.Linear(2, 2), 0.999).decay_at(1) == 0.999  # none: KAIR's netE
    with pytest.raises(ValueError, match='two warm-ups'):
        ModelEMA(torch.nn.Linear(2, 2), 0.999, warmup_iter=5, warmup_power=0.75)


def test_the_first_update_makes_the_average_netg_and_later_ones_average(tmp_path):
    net = torch.nn.Linear(3, 3)
    ema = ModelEMA(net, 0.9, warmup_power=0.75)
    start = [p.detach().clone() for p in ema.module.parameters()]
    with torch.no_grad():
        for p in net.parameters():
            p.add_(1.0)
    ema.update(net, step=1)
    assert all(torch.equal(e, p) for e, p in zip(ema.module.parameters(), net.parameters()))
    assert not any(torch.equal(e, s) for e, s in zip(ema.module.parameters(), start))
    before = [p.detach().clone() for p in ema.module.parameters()]
    with torch.no_grad():
        for p in net.parameters():
            p.add_(1.0)
    ema.update(net, step=2)
    d = 1 - 2 ** -0.75
    for e, b, p in zip(ema.module.parameters(), before, net.parameters()):
        torch.testing.assert_close(e, d * b + (1 - d) * p)
    assert ema.describe() == f'EMA (decay {d:.6g} at iteration 2)'


def _opt(**train):
    return {'train': {'E_decay': 0.999, 'E_warmup_power': None, 'E_warmup_iter': 0, **train},
            'path': {'pretrained_netG': None, 'pretrained_netE': None}}


def test_null_warms_up_a_fresh_start_only():
    assert warmup_power(_opt()) == DEFAULT_WARMUP_POWER == 0.75
    loaded = _opt()
    loaded['path']['pretrained_netG'] = 'g.pth'  # GAN fine-tuning: the average starts at trained weights
    assert warmup_power(loaded) == 0
    loaded = _opt()
    loaded['path']['pretrained_netE'] = 'e.pth'
    assert warmup_power(loaded) == 0
    assert warmup_power(_opt(E_warmup_iter=100)) == 0  # the linear ramp is the warm-up
    assert warmup_power(_opt(E_warmup_power=0)) == 0
    assert warmup_power(_opt(E_warmup_power=2 / 3)) == 2 / 3
    loaded = _opt(E_warmup_power=0.75)
    loaded['path']['pretrained_netG'] = 'g.pth'
    assert warmup_power(loaded) == 0.75  # asked for: netE starts as the loaded netG, then follows it


def test_an_explicit_warm_up_that_would_do_nothing_or_undo_another_key_is_one_line():
    with pytest.raises(UserError, match=r'^train\.E_warmup_power: 0\.75 and train\.E_warmup_iter: 100 are two '
                                        r'warm-ups of the EMA decay: set one of them to 0$'):
        warmup_power(_opt(E_warmup_power=0.75, E_warmup_iter=100))
    opt = _opt(E_warmup_power=0.75)
    opt['path']['pretrained_netE'] = 'e.pth'
    with pytest.raises(UserError, match=r'^train\.E_warmup_power: 0\.75 starts the average afresh at iteration 1 '
                                        r'\(decay 0\), replacing path\.pretrained_netE'):
        warmup_power(opt)


def _model(tmp_path, **train):
    from models.model_plain import ModelPlain
    from option_rules import option_rules
    from utils.options import validate
    return ModelPlain(validate(tiny_options(str(tmp_path), str(tmp_path / 'data'), **train), option_rules()), CPU)


def test_the_warm_up_needs_the_ema(tmp_path):
    with pytest.raises(UserError, match=r'train\.E_warmup_power: 0\.75 needs the EMA: set train\.E_decay > 0'):
        _model(tmp_path, E_decay=0.0, E_warmup_power=0.75)


def test_the_start_up_line_says_the_plan_and_kairs_netE_is_one_key_away(tmp_path):
    assert _model(tmp_path).network_info().endswith(
        '; EMA decay min(0.9, 1 - t^-0.75) at iteration t (E_warmup_power; 0: 0.9 throughout)')
    kair = _model(tmp_path, E_warmup_power=0)
    assert kair.network_info().endswith('; EMA decay 0.9') and kair.ema.decay_at(1) == 0.9
    assert kair.scored_weights() == 'EMA (decay 0.9)'  # before any update
    assert _model(tmp_path, E_decay=0.0).scored_weights() == 'netG'
    assert _model(tmp_path, E_decay=0.0, G_optimizer_type='adamw_sf').scored_weights() == \
        'netG (its schedule-free average)'


def test_validation_says_which_weights_it_scored(tiny_run):
    """tiny_options: E_decay 0.9 from initialised weights, so the default warm-up."""
    out = tiny_run.result.stdout
    assert '<iter:4> validation on 8 items: PSNR' in out
    assert f'; weights: EMA (decay {1 - 4 ** -0.75:.6g} at iteration 4)\n' in out
    assert f'; weights: EMA (decay {1 - 8 ** -0.75:.6g} at iteration 8)\n' in out  # below E_decay 0.9 until 22
