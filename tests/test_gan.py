"""Model `gan`: generator and discriminator trained in one loop, under DDP, resumable bit for bit."""
import glob
import json
import os
import re
import sys

import pytest
import torch

from conftest import ROOT, clean_env, run, run_main, write_options
from option_rules import option_rules, read_options
from losses.adversarial import GANLoss
from losses.perceptual import PerceptualLoss
from models.model_gan import ModelGAN
from tests.test_resume import _assert_same_run_state, _assert_same_tensors, _load
from utils.errors import OptionsError, UserError
from utils.options import validate

PY = sys.executable
TINY = sorted(glob.glob(os.path.join(ROOT, 'options', 'gan', '*_tiny.json')))
CPU = torch.device('cpu')


def _tiny(tmp_path, demo_images, name='train_msrresnet_gan_tiny.json', **train):
    with open(os.path.join(ROOT, 'options', 'gan', name)) as f:
        text = f.read()
    opt = json.loads(text[text.index('{'):])
    opt['path']['root'] = str(tmp_path / 'exp')
    for phase in ('train', 'test'):
        opt['datasets'][phase]['dataroot_H'] = f'{demo_images}/{phase}'
    opt['train'].update({'F_pretrained_path': 'random', 'total_iter': 6, 'checkpoint_test': 6, 'checkpoint_save': 6,
                         'checkpoint_print': 2, **train})
    opt['logging']['use_tensorboard'] = False
    return opt


def _model(tmp_path, demo_images, **train):
    return ModelGAN(validate(_tiny(tmp_path, demo_images, **train), option_rules()), CPU)


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {'L': torch.rand(2, 3, 24, 24, generator=g), 'H': torch.rand(2, 3, 96, 96, generator=g)}


def test_the_gan_model_needs_a_netd_and_other_models_refuse_one(tmp_path, demo_images):
    opt = _tiny(tmp_path, demo_images)
    netD = opt.pop('netD')
    with pytest.raises(OptionsError, match=r'netD\.net_type: required key is missing \(model gan trains a discriminator\)'):
        validate(opt, option_rules())
    plain = {**opt, 'model': 'plain', 'path': {'root': opt['path']['root']}, 'train': {}}
    validate(plain, option_rules())
    with pytest.raises(OptionsError, match=r'netD: model plain trains no discriminator'):
        validate({**plain, 'netD': netD}, option_rules())
    with pytest.raises(OptionsError, match=r'train\.D_lossfn_weight: unknown key'):
        validate({**plain, 'train': {'D_lossfn_weight': 0.1}}, option_rules())


def test_f_lossfn_type_is_checked_with_the_options_before_anything_is_built(tmp_path, demo_images):
    """KAIR's two feature distances; anything else is the options' one line, like every other type key."""
    assert isinstance(_model(tmp_path, demo_images, F_lossfn_type='l2').perceptual.lossfn, torch.nn.MSELoss)
    with pytest.raises(OptionsError, match=r'train\.F_lossfn_type: "l3" must be one of l1, l2$'):
        validate(_tiny(tmp_path, demo_images, F_lossfn_type='l3'), option_rules())


def test_netd_keys_kair_ignores_are_noted_and_a_typo_is_an_error(tmp_path, demo_images):
    opt = _tiny(tmp_path, demo_images)
    opt['netD'].update(n_layers=3, norm_type='batch')  # KAIR writes them for every discriminator
    checked = validate(opt, option_rules())
    assert 'netD (discriminator_vgg_96): n_layers, norm_type ignored' in checked['_notes'][0]
    opt['netD']['base_ncc'] = 8
    with pytest.raises(OptionsError, match=r'netD\.base_ncc: unknown key \(did you mean "base_nc"\?\)'):
        validate(opt, option_rules())
    opt['netD'] = {'net_type': 'discriminator_vgg_69'}
    with pytest.raises(OptionsError, match=r'netD\.net_type: unknown network "discriminator_vgg_69" \(did you mean'):
        validate(opt, option_rules())


def test_missing_vgg_weights_are_one_line_naming_the_file_and_nothing_is_written(tmp_path, demo_images):
    opt = _tiny(tmp_path, demo_images)
    missing = str(tmp_path / 'nowhere' / 'vgg19-dcbb9e9d.pth')
    opt['train']['F_pretrained_path'] = missing
    res = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o.json'), opt)])
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.count('\n') == 1 and missing in res.stderr and 'download.pytorch.org' in res.stderr
    assert not (tmp_path / 'exp').exists()


@pytest.mark.parametrize('change, expected', [
    ({'netD': {'in_nc': 1}}, r'netD \(discriminator_vgg_96\) cannot take netG\'s output \(3, 96, 96\) for a sample of '
                             r'datasets\.train: .*check netD\.in_nc against datasets\.train: 3-channel images \(n_channels 3\)'),
    ({'H_size': 128}, r'netD \(discriminator_vgg_96\) cannot take netG\'s output \(3, 128, 128\) .*needs 96x96 inputs'),
    ({'n_channels': 1, 'netG': {'in_nc': 1, 'out_nc': 1}, 'netD': {'in_nc': 1}, 'train': {'F_use_input_norm': False}},
     r'train\.F_lossfn_weight: the VGG19 perceptual loss cannot take netG\'s output \(1, 96, 96\) .*'
     r'F_use_input_norm'),  # gray images reach VGG19 as 3 channels only through the normalisation's broadcast
], ids=['netD-in_nc', 'netD-patch-size', 'perceptual-gray'])
def test_a_netd_or_perceptual_loss_that_does_not_fit_the_data_is_one_line_at_start_up(tmp_path, demo_images, change,
                                                                                      expected):
    opt = _tiny(tmp_path, demo_images)
    for section in ('netG', 'netD', 'train'):
        opt[section].update(change.get(section, {}))
    if 'H_size' in change:
        opt['datasets']['train']['H_size'] = change['H_size']
    if 'n_channels' in change:
        opt['n_channels'] = change['n_channels']
    res = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o.json'), opt)])
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.count('\n') == 1 and re.search(expected, res.stderr), res.stderr
    assert not (tmp_path / 'exp').exists()


def test_the_default_vgg_file_is_torchvisions_cache_and_never_fetched(tmp_path, demo_images, monkeypatch):
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path / 'hub'))
    opt = _tiny(tmp_path, demo_images)
    opt['train']['F_pretrained_path'] = None
    with pytest.raises(UserError, match=rf'VGG19 .*weights not found.*put file vgg19-dcbb9e9d\.pth at {tmp_path}/hub/checkpoints/vgg19-dcbb9e9d\.pth'):
        ModelGAN(validate(opt, option_rules()), CPU)


def test_vgg_weights_from_a_file_are_used(tmp_path):
    from torchvision.models import vgg19
    net = vgg19(weights=None)
    torch.save(net.state_dict(), tmp_path / 'vgg.pth')
    loss = PerceptualLoss([2, 7], [0.1, 1.0], 'l1', True, False, str(tmp_path / 'vgg.pth'))
    assert torch.equal(loss.vgg.features[2].weight, net.features[2].weight)
    assert not any(p.requires_grad for p in loss.parameters())
    x, y = torch.rand(1, 3, 32, 32, requires_grad=True), torch.rand(1, 3, 32, 32)
    loss(x, y).backward()
    assert x.grad is not None and loss.vgg.features[0].weight.grad is None


def test_several_perceptual_layers_compare_features_before_the_activation_as_kair_does(tmp_path):
    """KAIR's [2, 7, 16, 25, 34] (BSRGAN, SwinIR real-world GAN): each feature is the conv output itself,
    not what torchvision's in-place ReLU after it leaves in the same tensor."""
    from torch import nn
    from torchvision.models import vgg19
    torch.manual_seed(0)
    net = vgg19(weights=None)
    torch.save(net.state_dict(), tmp_path / 'vgg.pth')
    layers, weights = [2, 7, 16, 25, 34], [0.1, 0.1, 1.0, 1.0, 1.0]
    loss = PerceptualLoss(layers, weights, 'l1', True, False, str(tmp_path / 'vgg.pth'))
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)

    def reference(x):  # every layer out of place: each stored feature is its own tensor
        x, feats = (x - mean) / std, []
        for i, layer in enumerate(net.features[:35]):
            x = torch.relu(x) if isinstance(layer, nn.ReLU) else layer(x)
            if i in layers:
                feats.append(x)
        return feats

    x = torch.rand(2, 3, 48, 48, requires_grad=True)
    y = torch.rand(2, 3, 48, 48)
    ours, ref = loss.vgg(x), reference(x)
    for i, a, b in zip(layers, ours, ref):
        assert torch.equal(a, b), f'layer {i}'
        assert (a < 0).any(), f'layer {i}: a conv output before its ReLU has negative values'
    value = loss(x, y)
    expected = sum(w * torch.nn.functional.l1_loss(a, b) for w, a, b in zip(weights, ref, reference(y)))
    assert torch.allclose(value, expected, rtol=1e-6, atol=0)
    grad, = torch.autograd.grad(value, x)
    expected_grad, = torch.autograd.grad(expected, x)
    assert torch.allclose(grad, expected_grad, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize('gan_type, real, fake', [('gan', 0.2201, 1.7201), ('lsgan', 0.5, 2.5), ('wgan', -1.5, 1.5),
                                                  ('softplusgan', 0.2201, 1.7201), ('ragan', 0.2201, 1.7201)])
def test_adversarial_losses_of_real_and_fake_targets(gan_type, real, fake):
    pred = torch.tensor([[1.0], [2.0]])
    loss = GANLoss(gan_type)
    assert loss(pred, True).item() == pytest.approx(real, abs=1e-4)
    assert loss(pred, False).item() == pytest.approx(fake, abs=1e-4)


def test_g_steps_follow_d_update_ratio_and_d_init_iters_while_d_steps_every_iteration(tmp_path, demo_images):
    model = _model(tmp_path, demo_images, D_update_ratio=2, D_init_iters=2)
    steps = []
    for it in range(1, 7):
        g0 = [p.detach().clone() for p in model.net_g.parameters()]
        d0 = [p.detach().clone() for p in model.net_d.parameters()]
        loss = model.backward([_batch(it)])
        model.step(it, loss)
        model.end_iteration(it)
        g_moved = any(not torch.equal(a, b) for a, b in zip(g0, model.net_g.parameters()))
        d_moved = any(not torch.equal(a, b) for a, b in zip(d0, model.net_d.parameters()))
        assert d_moved
        steps.append(g_moved)
    assert steps == [False, False, False, True, False, True]  # even iterations after the first 2
    logged = model.log_losses()
    assert {'G_loss', 'l_g_pix', 'l_g_percep', 'l_g_gan', 'D_loss', 'D_real', 'D_fake'} <= set(logged)


def test_losses_logged_with_accumulation_are_means_over_the_micro_batches(tmp_path, demo_images):
    """Two micro-batches of the same data log what one does: the iteration's loss is their mean, not their sum."""
    logged = []
    for n in (1, 2):
        torch.manual_seed(0)
        model = _model(tmp_path, demo_images, accumulate_steps=n)
        model.step(1, model.backward([_batch(3)] * n))
        logged.append(model.log_losses())
    once, twice = logged
    assert set(once) == {'G_loss', 'l_g_pix', 'l_g_percep', 'l_g_gan', 'D_loss', 'D_real', 'D_fake'} == set(twice)
    for key in once:
        assert twice[key] == pytest.approx(once[key], rel=1e-5), key
    assert once['G_loss'] == pytest.approx(once['l_g_pix'] + once['l_g_percep'] + once['l_g_gan'], rel=1e-6)


def test_the_g_step_gives_no_gradient_to_d_and_the_d_step_none_to_g(tmp_path, demo_images):
    model = _model(tmp_path, demo_images, gan_type='ragan')
    model.backward([_batch()])
    assert all(p.grad is not None for p in model.net_d.parameters())
    assert all(p.requires_grad for p in model.net_d.parameters())  # unfrozen after the G step
    g_grads = [p.grad.clone() for p in model.net_g.parameters()]
    model.optimizer.zero_grad(set_to_none=True)
    model._update_g = False
    model.optimizer_d.zero_grad(set_to_none=True)
    with torch.no_grad():
        E = model.net_g(_batch()['L'])
    model._discriminator_backward(E, _batch()['H'], 1, True, torch.zeros(8))
    assert all(p.grad is None for p in model.net_g.parameters()) and any(g.abs().sum() > 0 for g in g_grads)


@pytest.mark.slow  # ~15-25 s; runs in CI (CI=true) and with RUN_SLOW=1
def test_checkpoints_hold_g_d_and_e_and_resume_bit_exactly(tmp_path, demo_images):
    straight = _tiny(tmp_path, demo_images, total_iter=8, checkpoint_save=4, checkpoint_test=4)
    straight['task'] = 'straight'
    resumed = dict(straight, task='resumed')
    pa = write_options(str(tmp_path / 'a.json'), straight)
    pb = write_options(str(tmp_path / 'b.json'), resumed)
    assert run_main('main_train', ['--opt', pa]).returncode == 0
    first = run_main('main_train', ['--opt', pb, '--set', 'train.total_iter=4'])
    assert first.returncode == 0, first.stderr[-2000:]
    second = run_main('main_train', ['--opt', pb])
    assert second.returncode == 0, second.stderr[-2000:]
    assert 'resumed from' in second.stdout
    a, b = tmp_path / 'exp' / 'straight' / 'models', tmp_path / 'exp' / 'resumed' / 'models'
    assert {p.name for p in a.glob('8_*.pth')} == {'8_G.pth', '8_D.pth', '8_E.pth', '8_state.pth'}
    _assert_same_run_state(a, b, 8)
    _assert_same_tensors(_load(a / '8_D.pth'), _load(b / '8_D.pth'), 'D')
    sa, sb = _load(a / '8_state.pth'), _load(b / '8_state.pth')
    _assert_same_tensors(sa['model']['optimizer_d'], sb['model']['optimizer_d'], 'optimizer_d')
    _assert_same_tensors(sa['model']['scheduler_d'], sb['model']['scheduler_d'], 'scheduler_d')


@pytest.mark.slow  # half a minute on 2 idle cores (2 ranks); runs in CI
def test_two_processes_keep_g_d_and_e_identical_and_only_rank_zero_writes(tmp_path, demo_images):
    """With gradient accumulation (both networks skip the all-reduce of the first micro-batch) and bf16.

    bf16 autocast on a CPU without bf16 instructions is 10 to 40 times slower than fp32, so the run is kept
    small: one 96x96 patch per rank and micro-batch, and the perceptual loss on VGG19's first conv only
    (the tiny file's conv1_2 and conv2_2 at 96x96 took three minutes here)."""
    opt = _tiny(tmp_path, demo_images, total_iter=4, checkpoint_save=4, checkpoint_test=4, accumulate_steps=2,
                amp='bf16', F_feature_layer=[0], F_weights=[1.0])
    opt['datasets']['train']['dataloader_batch_size'] = 1
    path = write_options(str(tmp_path / 'o.json'), opt)
    res = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'main_train.py', '--opt', path],
              env=clean_env(OMP_NUM_THREADS='1'), timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'world_size=2' in res.stdout and 'parameters identical on all 2 rank(s)' in res.stdout
    # both ranks score their half of the inputs in the first validation, summed over ranks
    assert '<iter:4> validation input: the input upscaled by bicubic x4 (against H) on 8 items: PSNR' in res.stdout
    models = tmp_path / 'exp' / 'train_msrresnet_gan_tiny' / 'models'
    assert sorted(p.name for p in models.glob('4_*.pth')) == ['4_D.pth', '4_E.pth', '4_G.pth', '4_state.pth']


PSNR = re.compile(r'<iter:\s*(\d+)> validation on \d+ items: PSNR ([\d.]+) dB')


@pytest.mark.slow
@pytest.mark.parametrize('path', TINY, ids=[os.path.basename(p)[len('train_'):-len('_tiny.json')] for p in TINY])
def test_a_tiny_gan_config_trains_as_shipped_with_two_processes_offline_and_its_psnr_rises(tmp_path, path):
    """No VGG19 file anywhere (an empty torch hub folder): the tiny files use a random one."""
    overrides = [f'path.root={tmp_path / "exp"}', 'train.total_iter=20', 'train.checkpoint_test=10',
                 'train.checkpoint_save=20', 'logging.use_tensorboard=false']
    res = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'main_train.py', '--opt', path]
              + [a for o in overrides for a in ('--set', o)],
              env=clean_env(OMP_NUM_THREADS='1', TORCH_HOME=str(tmp_path / 'empty_torch_home')), timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'parameters identical on all 2 rank(s)' in res.stdout and 'D_loss' in res.stdout
    assert 'train.F_pretrained_path is "random": the perceptual loss uses a randomly initialised VGG19' in res.stdout
    psnr = [float(v) for _, v in PSNR.findall(res.stdout)]
    assert len(psnr) == 2 and psnr[1] > psnr[0], res.stdout[-3000:]


def test_tiny_gan_files_need_no_vgg19_file_and_the_full_files_need_the_real_one(tmp_path, monkeypatch):
    """Tiny files are smoke demos that run offline as shipped; full files train for real."""
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path / 'hub'))  # no cached VGG19
    for path in TINY:
        opt = read_options(path)
        assert opt['train']['F_pretrained_path'] == 'random', path
        ModelGAN(opt, CPU)
    full = glob.glob(os.path.join(ROOT, 'options', 'gan', 'full', '*.json'))
    assert len(full) == 4
    for path in full:
        opt = read_options(path)
        assert opt['train']['F_pretrained_path'] is None and opt['train']['F_lossfn_weight'] > 0, path
        with pytest.raises(UserError, match=r'VGG19 .*weights not found.*put file vgg19-dcbb9e9d\.pth at .*hub/checkpoints/vgg19-dcbb9e9d\.pth'):
            ModelGAN(opt, CPU)


def test_every_gan_option_file_validates():
    for path in glob.glob(os.path.join(ROOT, 'options', 'gan', '**', '*.json'), recursive=True):
        opt = read_options(path)
        assert opt['model'] == 'gan' and opt['netD']['net_type'].startswith('discriminator_')


def _adaptive_decisions(model, losses, applied=None):
    from models.model_gan import _ADV
    out = []
    for v in losses:
        model._iteration_parts[_ADV] = v
        out.append(not bool(model._adaptive_d_step(applied)))
    return out


def test_adaptive_d_skips_d_while_the_smoothed_adversarial_loss_rises_beyond_the_threshold(tmp_path, demo_images):
    """traiNNer-redux's adaptive_d: a moving average of G's adversarial loss (decay 0.5 here, starting at the first
    value); D's step is skipped when it rises by more than the factor D_adaptive_threshold in one iteration."""
    model = _model(tmp_path, demo_images, D_adaptive=True, D_adaptive_decay=0.5, D_adaptive_threshold=1.1)
    # averages 1, 1, 1.5 (+50 %: skip), 1.25, 1.125, 1.0625, 1.53 (+44 %: skip)
    assert _adaptive_decisions(model, [1.0, 1.0, 2.0, 1.0, 1.0, 1.0, 2.0]) == [False, False, True, False, False,
                                                                              False, True]
    assert model._adaptive.tolist() == pytest.approx([0.5 * 1.0625 + 0.5 * 2.0, 1.0])
    # a hinge loss below zero: a rise towards zero is a rise (beyond 10 % of |average|)
    model._adaptive.zero_()
    assert _adaptive_decisions(model, [-1.0, -0.5, -0.9]) == [False, True, False]  # -1, -0.75, -0.825
    # a step not applied (non-finite) leaves the average as it was
    before = model._adaptive.clone()
    _adaptive_decisions(model, [5.0], applied=torch.tensor(False))
    assert torch.equal(model._adaptive, before)


def test_adaptive_d_uses_the_mean_over_the_ranks(tmp_path, demo_images, monkeypatch):
    """Every rank takes the same decision from the same number: the mean of the ranks' adversarial losses, which
    is the adversarial loss of one process with the whole batch."""
    from models import model_gan
    model = _model(tmp_path, demo_images, D_adaptive=True, D_adaptive_decay=0.5, D_adaptive_threshold=1.1)
    monkeypatch.setattr(model_gan.dist, 'get_world_size', lambda: 2)
    monkeypatch.setattr(model_gan.dist, 'all_reduce_sum', lambda t: t.add_(1.0))  # the other rank's loss: 1.0
    assert _adaptive_decisions(model, [1.0, 3.0]) == [False, True]  # means 1.0, then 2.0: average 1.5
    assert model._adaptive[0].item() == pytest.approx(1.5)


def test_adaptive_d_holds_d_still_when_it_skips_logs_the_share_and_resumes(tmp_path, demo_images):
    model = _model(tmp_path, demo_images, D_adaptive=True, D_adaptive_threshold=1.0, D_adaptive_decay=0.5)
    skipped = []
    for it in range(1, 7):
        d0 = [p.detach().clone() for p in model.net_d.parameters()]
        model.step(it, model.backward([_batch(it)]))
        model.end_iteration(it)
        skip = model._iteration_parts[9].item() == 1.0
        assert skip == all(torch.equal(a, b) for a, b in zip(d0, model.net_d.parameters())), it
        skipped.append(skip)
    assert any(skipped) and not all(skipped), skipped
    assert model.log_losses()['D_skipped'] == pytest.approx(sum(skipped) / 6)
    state = model.training_state()
    resumed = _model(tmp_path, demo_images, D_adaptive=True, D_adaptive_threshold=1.0, D_adaptive_decay=0.5)
    resumed.load_state(model.state_files(), state)
    assert torch.equal(resumed._adaptive, model._adaptive) and model._adaptive[1] == 1


def test_without_adaptive_d_nothing_is_skipped_or_logged(tmp_path, demo_images):
    model = _model(tmp_path, demo_images)
    model.step(1, model.backward([_batch(1)]))
    assert 'D_skipped' not in model.log_losses() and model._adaptive.tolist() == [0.0, 0.0]
