"""The new losses in the models: `G_extra_losses` (ModelPlain and its subclasses, ModelGAN), LDL
(`ldl_weight`), the hinge loss and pix2pixHD's multi-scale discrimination (`D_num_scales`): their options,
their start-up checks, a few training iterations that log every term, and today's training kept to the bit
when none of them is used."""
import copy
import re
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import clean_env, run, run_main, tiny_options, write_options
from losses.frequency import FocalFrequencyLoss
from losses.ldl import ldl_loss
from losses.registry import LOSSES
from models.model_gan import ModelGAN
from models.model_plain import ModelPlain
from models.registry import build_network
from option_rules import option_rules
from tests.test_gan import _batch, _tiny
from utils.errors import OptionsError, UserError
from utils.options import validate

PY = sys.executable
CPU = torch.device('cpu')
PATCHGAN = {'net_type': 'discriminator_patchgan', 'in_nc': 3, 'base_nc': 8, 'n_layers': 2}


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Small networks: one intra-op thread (conftest's `one_thread`)."""


def _plain_opt(tmp_path, demo_images, **train):
    return tiny_options(str(tmp_path / 'exp'), demo_images, **train)


def _gan_opt(tmp_path, demo_images, netD=None, **train):
    """test_gan's tiny GAN; without the perceptual loss unless asked (a random VGG19 takes seconds to build)."""
    opt = _tiny(tmp_path, demo_images, **{'F_lossfn_weight': 0.0, **train})
    if netD is not None:
        opt['netD'] = dict(netD)
    return opt


def _plain_batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {'L': torch.rand(4, 3, 24, 24, generator=g), 'H': torch.rand(4, 3, 24, 24, generator=g)}


def _train(model, batches):
    for it, batch in enumerate(batches, 1):
        loss = model.backward([batch])
        model.step(it, loss)
        model.end_iteration(it)


# --- options ------------------------------------------------------------------------------------------------

def test_extra_losses_read_their_own_prefixed_keys(tmp_path, demo_images):
    train = validate(_plain_opt(tmp_path, demo_images, G_extra_losses={'fft': 0.1, 'charbonnier_y': 1},
                                G_fft_alpha=0.5), option_rules())['train']
    assert train['G_extra_losses'] == {'fft': 0.1, 'charbonnier_y': 1}
    assert (train['G_fft_alpha'], train['G_fft_patch_factor'], train['G_charbonnier_eps']) == (0.5, 1, 1e-9)
    notes = validate(_plain_opt(tmp_path, demo_images, G_fft_alpha=0.5), option_rules())['_notes']
    assert 'train.G_fft_alpha: not read by G_lossfn_type l1 nor G_extra_losses none; ignored' in notes  # by neither
    assert validate(_plain_opt(tmp_path, demo_images), option_rules())['train']['G_extra_losses'] == {}
    shared = validate(_plain_opt(tmp_path, demo_images, G_lossfn_type='charbonnier', G_charbonnier_eps=1e-6,
                                 G_extra_losses={'charbonnier_y': 1}), option_rules())
    model = ModelPlain(shared, CPU)  # one key read by the losses both type keys chose
    assert model.loss_fn.base.eps == 1e-6 == model.extra_losses['charbonnier_y'].base.base.eps


@pytest.mark.parametrize('train, message', [
    ({'G_extra_losses': {'fftt': 0.1}}, r'train\.G_extra_losses: unknown loss "fftt" \(did you mean "fft"\?\); \d+ known: --describe loss'),
    ({'G_extra_losses': {'fft': -1}}, r'train\.G_extra_losses: \{"fft": -1\} the weight of "fft" must be a number >= 0'),
    ({'G_extra_losses': {'fft': '0.1'}}, r'the weight of "fft" must be a number >= 0'),
    ({'G_extra_losses': {'fft': True}}, r'the weight of "fft" must be a number >= 0'),
    ({'G_extra_losses': ['fft']}, r'train\.G_extra_losses: expected an object, got \["fft"\]'),
    ({'G_extra_losses': {'fft': 1}, 'G_fft_alpha': -1}, r'train\.G_fft_alpha: -1 must be >= 0'),
    ({'G_extra_losses': {'fft': 1}, 'G_fft_patch_factor': 0}, r'train\.G_fft_patch_factor: 0 must be >= 1'),
], ids=['unknown-name', 'negative', 'string', 'bool', 'list', 'fft_alpha', 'patch_factor'])
def test_a_bad_extra_loss_is_one_line_naming_the_key(tmp_path, demo_images, train, message):
    with pytest.raises(OptionsError, match=message) as e:
        validate(_plain_opt(tmp_path, demo_images, **train), option_rules())
    assert '\n' not in str(e.value)


@pytest.mark.parametrize('train, message', [
    ({'D_num_scales': 0}, r'train\.D_num_scales: 0 must be >= 1'),
    ({'ldl_weight': -0.5}, r'train\.ldl_weight: -0\.5 must be >= 0'),
    ({'gan_type': 'hinj'}, r'train\.gan_type: "hinj" must be one of gan, ragan, lsgan, wgan, softplusgan, hinge'),
], ids=['D_num_scales', 'ldl_weight', 'gan_type'])
def test_bad_gan_keys_are_one_line(tmp_path, demo_images, train, message):
    with pytest.raises(OptionsError, match=message):
        validate(_gan_opt(tmp_path, demo_images, **train), option_rules())


def test_ldl_without_the_ema_generator_is_one_line_naming_ldl_weight(tmp_path, demo_images):
    opt = validate(_gan_opt(tmp_path, demo_images, ldl_weight=1.0, E_decay=0.0), option_rules())
    with pytest.raises(UserError, match=r'^train\.ldl_weight: 1\.0 needs the EMA generator .* set train\.E_decay > 0'
                       ) as e:
        ModelGAN(opt, CPU)
    assert '\n' not in str(e.value)


# --- start-up checks ---------------------------------------------------------------------------------------

def test_a_pixel_loss_that_cannot_take_the_training_patch_ends_the_run_with_one_line_before_anything_is_written(
        tmp_path, demo_images):
    opt = _plain_opt(tmp_path, demo_images, G_lossfn_type='msssim')
    res = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o.json'), opt)])
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.count('\n') == 1, res.stderr
    assert re.search(r"train\.G_lossfn_type \(msssim\) cannot take netG's output \(3, 24, 24\) for a sample of "
                     r"datasets\.train: MS-SSIM's 5 scales of an 11x11 window need images of at least 161x161, "
                     r"got 24x24", res.stderr), res.stderr
    assert not (tmp_path / 'exp').exists()


def test_an_extra_loss_that_cannot_take_the_sample_names_its_key(tmp_path, demo_images):
    model = ModelPlain(validate(_plain_opt(tmp_path, demo_images, G_extra_losses={'fft': 1}, G_fft_patch_factor=5),
                                option_rules()), CPU)
    sample = {k: v[0] for k, v in _plain_batch().items()}
    with pytest.raises(UserError, match=r"^train\.G_extra_losses\.fft cannot take netG's output \(3, 24, 24\) for a "
                                        r"sample of datasets\.train: fft_patch_factor 5 must divide the image size"):
        model.check_sample(sample, 'datasets.train')


def test_a_discriminator_that_cannot_take_a_downscaled_copy_is_one_line_at_start_up(tmp_path, demo_images):
    model = ModelGAN(validate(_gan_opt(tmp_path, demo_images, D_num_scales=2), option_rules()), CPU)
    sample = {k: v[0] for k, v in _batch().items()}
    with pytest.raises(UserError, match=r"^netD \(discriminator_vgg_96\) cannot take netG's output \(3, 96, 96\) "
                                        r"average-pooled 1 time\(s\) to \(48, 48\) \(copy 1 of train\.D_num_scales 2\) "
                                        r"for a sample of datasets\.train: discriminator_vgg_96 needs 96x96 inputs"):
        model.check_sample(sample, 'datasets.train')


# --- training with the new terms ---------------------------------------------------------------------------

def test_the_plain_model_adds_each_extra_loss_with_its_weight_and_logs_it(tmp_path, demo_images):
    torch.manual_seed(0)
    opt = validate(_plain_opt(tmp_path, demo_images, G_extra_losses={'fft': 0.5, 'l1_y': 2.0, 'msssim': 0},
                              G_fft_alpha=0.0), option_rules())
    model = ModelPlain(opt, CPU)
    assert list(model.extra_losses) == ['fft', 'l1_y']  # weight 0: left out
    batch = _plain_batch()
    with torch.no_grad():
        out = copy.deepcopy(model.net_g).train()(batch['L'])  # BatchNorm on batch statistics, as in training
    expected = {'l_g_pix': F.l1_loss(out, batch['H']).item(),
                'l_g_fft': 0.5 * F.mse_loss(out, batch['H']).item(),  # alpha 0: the pixel MSE (Parseval)
                'l_g_l1_y': 2.0 * LOSSES.get('l1_y', 'test')()(out, batch['H']).item()}
    _train(model, [batch])
    logged = model.log_losses()
    assert set(logged) == {'G_loss', *expected}
    for key, value in expected.items():
        assert logged[key] == pytest.approx(value, rel=1e-5), key
    assert logged['G_loss'] == pytest.approx(sum(expected.values()), rel=1e-6)
    assert set(model.log_losses()) == set(logged)  # a window without steps: the same keys (NaN)


def test_a_gan_with_extra_losses_ldl_hinge_and_two_scales_trains_and_logs_every_term(tmp_path, demo_images):
    torch.manual_seed(0)
    opt = validate(_gan_opt(tmp_path, demo_images, netD=PATCHGAN, gan_type='hinge', D_num_scales=2, ldl_weight=2.0,
                            G_extra_losses={'fft': 0.1, 'charbonnier_y': 0.5}), option_rules())
    model = ModelGAN(opt, CPU)
    with torch.no_grad():  # an EMA that differs from netG: LDL's map must come from the EMA's output
        for p in model.ema.module.parameters():
            p.add_(0.01 * torch.randn_like(p))
    batch = _batch(1)
    with torch.no_grad():
        E = copy.deepcopy(model.net_g)(batch['L'])
        E_ema = model.ema.module(batch['L'])
        # each copy of D judges the image average-pooled k times (3x3, stride 2; its own test below), in the
        # model's order (G's step, then D's on real and fake): spectral norm's power iteration moves at each call
        judges = copy.deepcopy(list(model.net_d.scales))
        g_fakes, reals, fakes = [], [], []
        fake, real = E.double().numpy(), batch['H'].double().numpy()
        for judge in judges:
            g_fakes.append(judge(torch.from_numpy(fake).float()))
            reals.append(judge(torch.from_numpy(real).float()))
            fakes.append(judge(torch.from_numpy(fake).float()))
            fake, real = _pool_loop(fake), _pool_loop(real)
    expected_ldl = 2.0 * ldl_loss(E, E_ema, batch['H']).item()
    expected_fft = 0.1 * FocalFrequencyLoss()(E, batch['H']).item()
    # hinge (Lim & Ye 2017), averaged over the scales: G -mean D(fake); D mean relu(1 - D(real)) + relu(1 + D(fake))
    expected_gan = opt['train']['D_lossfn_weight'] * np.mean([-f.mean().item() for f in g_fakes])
    expected_d = (np.mean([F.relu(1 - r).mean().item() for r in reals])
                  + np.mean([F.relu(1 + f).mean().item() for f in fakes]))
    _train(model, [batch])
    logged = model.log_losses()
    assert logged['l_g_ldl'] == pytest.approx(expected_ldl, rel=1e-5)
    assert logged['l_g_fft'] == pytest.approx(expected_fft, rel=1e-5)
    assert logged['l_g_gan'] == pytest.approx(expected_gan, rel=1e-4, abs=1e-7)
    assert logged['D_loss'] == pytest.approx(expected_d, rel=1e-4)
    assert logged['D_real'] == pytest.approx(np.mean([r.mean().item() for r in reals]), rel=1e-4, abs=1e-7)
    assert logged['D_fake'] == pytest.approx(np.mean([f.mean().item() for f in fakes]), rel=1e-4, abs=1e-7)
    terms = ('l_g_pix', 'l_g_percep', 'l_g_gan', 'l_g_ldl', 'l_g_fft', 'l_g_charbonnier_y')  # percep: 0 here
    assert set(logged) == {'G_loss', *terms, 'D_loss', 'D_real', 'D_fake'}
    assert logged['G_loss'] == pytest.approx(sum(logged[k] for k in terms), rel=1e-6)
    assert all(p.grad is None or not p.requires_grad for p in model.ema.module.parameters())
    g0 = [p.detach().clone() for p in model.net_g.parameters()]
    _train(model, [_batch(2), _batch(3)])
    logged = model.log_losses()
    assert all(np.isfinite(v) for v in logged.values()) and set(logged) >= set(terms)
    assert any(not torch.equal(a, b) for a, b in zip(g0, model.net_g.parameters()))


def _pool_loop(x):
    """3x3 windows with stride 2 centred on the even pixels, averaging the pixels inside the image."""
    n, c, h, w = x.shape
    out = np.zeros((n, c, (h + 1) // 2, (w + 1) // 2))
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            win = x[:, :, max(2 * i - 1, 0):2 * i + 2, max(2 * j - 1, 0):2 * j + 2]
            out[:, :, i, j] = win.mean(axis=(2, 3))
    return out


@pytest.mark.parametrize('gan_type', ['gan', 'ragan'])
def test_d_num_scales_copies_of_netd_each_judge_the_image_pooled_once_more(tmp_path, demo_images, gan_type):
    torch.manual_seed(0)
    opt = validate(_gan_opt(tmp_path, demo_images, netD=PATCHGAN, D_num_scales=3, gan_type=gan_type), option_rules())
    model = ModelGAN(opt, CPU)
    copies = list(model.net_d.scales)
    assert not torch.equal(copies[0].model.child0[0].bias, copies[1].model.child0[0].bias)  # each its own init
    seen = [[] for _ in copies]
    for k, net in enumerate(copies):
        net.register_forward_pre_hook(lambda _, args, k=k: seen[k].append(args[0].detach().clone()))
    batch = _batch()
    model.optimizer_d.zero_grad(set_to_none=True)
    model._update_g = False
    with torch.no_grad():
        E = model.net_g(batch['L'])
    model._discriminator_backward(E, batch['H'], 1, True, torch.zeros_like(model.loss_meter.sums))
    real = batch['H'].double().numpy()
    for k in range(3):
        assert all(p.grad is not None for p in copies[k].parameters()), k
        reals = [x for x in seen[k] if x.shape[-1] == 96 >> k and torch.allclose(
            x.double(), torch.from_numpy(real), atol=1e-6)]
        assert len(reals) == 1, f'copy {k} judged the real image once'
        real = _pool_loop(real)
    model.step(1, model.backward([batch]))
    files = model.state_files()['D']
    assert {key.split('.')[1] for key in files} == {'0', '1', '2'}
    fresh = ModelGAN(opt, CPU)
    fresh.load_state(model.state_files(), model.training_state())
    assert all(torch.equal(files[k], v) for k, v in fresh.net_d.state_dict().items())


def test_one_scale_keeps_the_bare_discriminator_and_its_checkpoint_layout(tmp_path, demo_images):
    model = ModelGAN(validate(_gan_opt(tmp_path, demo_images, netD=PATCHGAN), option_rules()), CPU)
    assert list(model.state_files()['D']) == list(build_network(model.opt['netD']).state_dict())


# --- today's behaviour when none of them is used -----------------------------------------------------------

def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_the_plain_model_without_extra_losses_takes_the_steps_of_a_plain_l1_loop(tmp_path, demo_images):
    torch.manual_seed(0)
    model = ModelPlain(validate(_plain_opt(tmp_path, demo_images), option_rules()), CPU)
    net = copy.deepcopy(model.net_g).train()
    adam = torch.optim.Adam(net.parameters(), **model.optimizer.defaults)
    batches = [_plain_batch(i) for i in range(3)]
    for batch in batches:
        adam.zero_grad()
        F.l1_loss(net(batch['L']), batch['H']).backward()
        adam.step()
    _train(model, batches)
    assert _same(model.net_g, net)


def test_the_gan_model_with_one_scale_and_no_new_term_takes_the_steps_of_the_classic_gan_loop(tmp_path,
                                                                                              demo_images):
    """Pixel + perceptual + adversarial BCE for G with D frozen, then BCE on real and fake for D: each new
    key at its default leaves the model's arithmetic as it was, to the bit."""
    torch.manual_seed(0)
    opt = validate(_gan_opt(tmp_path, demo_images, F_lossfn_weight=1.0), option_rules())  # netD with BatchNorm
    model = ModelGAN(opt, CPU)
    t = opt['train']
    g, d = copy.deepcopy(model.net_g).train(), copy.deepcopy(model.net_d).train()
    adam_g = torch.optim.Adam(g.parameters(), **model.optimizer.defaults)
    adam_d = torch.optim.Adam(d.parameters(), **model.optimizer_d.defaults)

    def bce(pred, real):
        return F.binary_cross_entropy_with_logits(pred, torch.full_like(pred, float(real)))

    batches = [_batch(i) for i in range(3)]
    fmt = torch.channels_last if model.channels_last else torch.contiguous_format  # as the model moves its batches
    for batch in batches:
        batch = {k: v.contiguous(memory_format=fmt) for k, v in batch.items()}
        adam_g.zero_grad()
        adam_d.zero_grad()
        E = g(batch['L'])
        d.requires_grad_(False)
        loss = (torch.zeros(()) + F.l1_loss(E, batch['H']) + t['F_lossfn_weight'] * model.perceptual(E, batch['H'])
                + t['D_lossfn_weight'] * bce(d(E), True))
        loss.backward()
        d.requires_grad_(True)
        bce(d(batch['H']), True).backward()
        bce(d(E.detach()), False).backward()
        adam_g.step()
        adam_d.step()
    _train(model, batches)
    assert _same(model.net_g, g) and _same(model.net_d, d)


# --- end to end --------------------------------------------------------------------------------------------

@pytest.mark.slow  # ~25 s: two runs of main_train; the in-process tests above check the same terms
def test_main_train_logs_the_new_terms_of_a_gan_and_a_plain_run(tmp_path, demo_images):
    gan = _gan_opt(tmp_path, demo_images, netD=PATCHGAN, gan_type='hinge', D_num_scales=2, ldl_weight=1.0,
                   G_extra_losses={'fft': 0.1, 'l1_y': 0.5}, total_iter=4, checkpoint_print=2, checkpoint_save=4,
                   checkpoint_test=4)
    plain = _plain_opt(tmp_path, demo_images, G_extra_losses={'fft': 0.1, 'charbonnier_y': 1.0}, total_iter=4)
    for name, opt, terms in (('gan', gan, ('l_g_ldl', 'l_g_fft', 'l_g_l1_y', 'l_g_gan', 'D_loss')),
                             ('plain', plain, ('l_g_pix', 'l_g_fft', 'l_g_charbonnier_y'))):
        res = run_main('main_train', ['--opt', write_options(str(tmp_path / f'{name}.json'), opt)],
                       env=clean_env(OMP_NUM_THREADS='1'))
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        lines = [ln for ln in res.stdout.splitlines() if 'iter:' in ln and 'G_loss' in ln]
        assert len(lines) == 2, res.stdout[-3000:]
        for term in terms:
            assert all(re.search(rf'{term}: -?\d\.\d+e[+-]\d+', ln) for ln in lines), (term, lines)


@pytest.mark.slow  # two processes; runs in CI (CI=true) and with RUN_SLOW=1
def test_two_processes_keep_both_scales_of_d_identical_with_ldl_and_extra_losses(tmp_path, demo_images):
    opt = _gan_opt(tmp_path, demo_images, netD=PATCHGAN, gan_type='ragan', D_num_scales=2, ldl_weight=1.0,
                   G_extra_losses={'fft': 0.1}, total_iter=4, checkpoint_save=4, checkpoint_test=4,
                   accumulate_steps=2)
    res = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', 'main_train.py', '--opt',
               write_options(str(tmp_path / 'o.json'), opt)], env=clean_env(OMP_NUM_THREADS='1'), timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'parameters identical on all 2 rank(s)' in res.stdout and 'l_g_ldl' in res.stdout
