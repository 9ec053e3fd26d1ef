"""Perceptual image quality: LPIPS and DISTS (full reference) and NIQE (no reference), as metrics and losses.

LPIPS and DISTS are checked against their authors' packages (`lpips`, `DISTS_pytorch`), given the same
random backbone (their torchvision download is replaced) and the released linear layers / alpha-beta
(as those packages ship them; NIQE's pristine model is in tests/data/iqa). NIQE is checked against a deliberately separate per-block
computation written here from the paper (scipy's filters and gamma, loops over blocks) with the
released pristine model, and by its behaviour: blur and noise make a natural-looking image less natural.
"""
import copy
import hashlib
import math
import os
import types

import numpy as np
import pytest
import torch
from torch import nn

from conftest import clean_env, need_module, run_main, tiny_options, train_options, write_options
from losses.registry import LOSSES, build_loss
from metrics.dists import DISTS
from metrics.imagenet import alexnet_features, backbone, vgg16_features
from metrics.lpips import LPIPS
from metrics.niqe import NIQE, gaussian_window
from metrics.registry import METRICS
from utils.errors import OptionsError, UserError
from utils.image import imresize_bicubic
from utils.weights import WEIGHTS, default_path

DATA = os.path.join(os.path.dirname(__file__), 'data', 'iqa')
FILES = ('dists', 'lpips_alex', 'lpips_vgg', 'niqe')


def released(name: str) -> str:
    """The released file of WEIGHTS[name]: the LPIPS and DISTS ones as the authors' packages ship them (the
    tests' reference packages), NIQE's pristine model from tests/data/iqa."""
    if name == 'niqe':
        return os.path.join(DATA, 'niqe_pris_params.npz')
    if name == 'dists':
        return os.path.join(os.path.dirname(need_module('DISTS_pytorch').__file__), 'weights.pt')
    return os.path.join(os.path.dirname(need_module('lpips').__file__), 'weights', 'v0.1', f'{name[len("lpips_"):]}.pth')


def frames(seed: int = 0, h: int = 48, w: int = 40):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    noise = rng.integers(-40, 41, (h, w, 3))
    return a, np.clip(a.astype(int) + noise, 0, 255).astype(np.uint8)


def natural_image(h: int = 192, w: int = 288) -> np.ndarray:
    """Gray noise with a natural image's power spectrum (falling about as 1/f^2.4): scale-invariant
    statistics, enough for NIQE to find it natural (about 5) and to notice damage."""
    rng = np.random.default_rng(0)
    f = np.hypot(np.fft.fftfreq(h)[:, None], np.fft.fftfreq(w)[None, :])
    f[0, 0] = 1
    img = np.real(np.fft.ifft2((rng.normal(size=(h, w)) + 1j * rng.normal(size=(h, w))) / f ** 1.2))
    img = (img - img.mean()) / img.std() * 45 + 120
    return np.clip(np.repeat(img[:, :, None], 3, axis=2), 0, 255).astype(np.uint8)


@pytest.mark.parametrize('name', FILES)
def test_the_released_files_have_the_digests_listed_in_utils_weights(name):
    with open(released(name), 'rb') as f:
        assert hashlib.sha256(f.read()).hexdigest() == WEIGHTS[name].sha256


@pytest.mark.parametrize('features, torchvision_name', [(alexnet_features, 'alexnet'), (vgg16_features, 'vgg16')])
def test_the_backbones_are_torchvisions_feature_stacks_so_its_files_load_as_they_are(features, torchvision_name):
    import torchvision
    with torch.device('meta'):
        theirs = getattr(torchvision.models, torchvision_name)().features
    ours = features()
    assert repr(ours) == repr(theirs)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}


def test_a_torchvision_file_fills_the_features_and_a_wrong_file_is_one_line(tmp_path):
    ref = alexnet_features()
    state = {f'features.{k}': torch.randn_like(v) for k, v in ref.state_dict().items()}
    state['classifier.1.weight'] = torch.zeros(2, 2)  # the classifier is ignored
    path = str(tmp_path / 'alexnet-owt-7be5be79.pth')
    torch.save(state, path)
    loaded = backbone('alexnet', path, 'val.lpips_backbone_path')
    assert all(torch.equal(loaded.state_dict()[k], state[f'features.{k}']) for k in ref.state_dict())
    assert not any(p.requires_grad for p in loaded.parameters()) and not loaded.training
    torch.save({'features.0.weight': torch.zeros(1)}, path)
    with pytest.raises(UserError, match=r"^val.lpips_backbone_path: .* is not torchvision's ImageNet AlexNet"):
        backbone('alexnet', path, 'val.lpips_backbone_path')


@pytest.mark.parametrize('name, build', [
    ('alexnet', lambda: LPIPS('cpu', 'alex', 'random', None)),
    ('vgg16', lambda: DISTS('cpu', 'random', None)),
    ('lpips_vgg', lambda: LPIPS('cpu', 'vgg', None, 'random')),
    ('dists', lambda: DISTS('cpu', None, 'random')),
    ('niqe', lambda: NIQE('cpu', 0, 'y', None)),
])
def test_a_missing_weights_file_is_one_line_naming_the_file_the_path_and_the_url(name, build, tmp_path, monkeypatch):
    monkeypatch.setenv('TORCH_HOME', str(tmp_path))
    with pytest.raises(UserError) as e:
        build()
    msg = str(e.value)
    assert '\n' not in msg
    assert f'put file {WEIGHTS[name].file} at {default_path(name)} (from {WEIGHTS[name].url})' in msg
    assert str(tmp_path) in default_path(name)


# --- LPIPS ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('net, torchvision_name', [('alex', 'alexnet'), ('vgg', 'vgg16')])
def test_lpips_equals_the_lpips_package_with_the_same_backbone_and_released_linear_layers(net, torchvision_name,
                                                                                          monkeypatch):
    lpips = need_module('lpips')
    ours = LPIPS('cpu', net, released(f'lpips_{net}'), 'random')
    same_backbone = types.SimpleNamespace(features=copy.deepcopy(ours.net.features))
    monkeypatch.setattr(lpips.pretrained_networks.tv, torchvision_name, lambda **kw: same_backbone)
    theirs = lpips.LPIPS(net=net, pnet_rand=True, verbose=False,
                         model_path=released(f'lpips_{net}')).eval()
    a, b = frames(0, 64, 48)
    c, d = frames(1, 64, 48)
    x = torch.from_numpy(np.stack([a, c])).permute(0, 3, 1, 2).float() / 255
    y = torch.from_numpy(np.stack([b, d])).permute(0, 3, 1, 2).float() / 255
    with torch.no_grad():
        expected = theirs(x, y, normalize=True).flatten()
    assert expected.min() > 0
    assert ours(a, b) == pytest.approx(float(expected[0]), abs=1e-5)
    assert ours(c, d) == pytest.approx(float(expected[1]), abs=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(ours.net(x, y), expected, atol=1e-5, rtol=0)


def test_lpips_is_zero_for_identical_frames_symmetric_and_scores_gray_frames():
    m = METRICS.get('lpips', 'val.metrics')(device='cpu', lpips_net='alex', lpips_path='random',
                                          lpips_backbone_path='random')
    a, b = frames(2)
    assert (m.higher_is_better, m.needs_reference) == (False, True)
    assert m(a, a) == 0.0
    assert m(a, b) == pytest.approx(m(b, a), abs=1e-6) and m(a, b) > 0
    assert m(a[:, :, 0], b[:, :, 0]) == pytest.approx(m(np.repeat(a[:, :, :1], 3, 2), np.repeat(b[:, :, :1], 3, 2)))


def test_a_frame_too_small_for_the_network_is_one_line():
    m = LPIPS('cpu', 'alex', 'random', 'random')
    a, b = frames(0, 12, 12)
    with pytest.raises(UserError, match=r'^cannot score a 12x12 image with LPIPS-alex: it is too small'):
        m(a, b)


def test_a_wrong_linear_layers_file_is_one_line(tmp_path):
    path = str(tmp_path / 'alex.pth')
    torch.save({'lin0.model.1.weight': torch.zeros(1, 64, 1, 1)}, path)
    with pytest.raises(UserError, match=r'^val.lpips_path: .* is not LPIPS v0.1 linear layers for AlexNet'):
        LPIPS('cpu', 'alex', path, 'random')


# --- DISTS ------------------------------------------------------------------------------------------------

def test_dists_equals_the_authors_package_with_the_same_backbone_and_released_alpha_beta(monkeypatch):
    need_module('DISTS_pytorch')
    from DISTS_pytorch import DISTS_pt
    ours = DISTS('cpu', released('dists'), 'random')
    vgg = vgg16_features()
    vgg.load_state_dict(ours.net.features.state_dict())  # L2 pooling has no parameters: the same indices
    monkeypatch.setattr(DISTS_pt.models, 'vgg16', lambda **kw: types.SimpleNamespace(features=vgg))
    theirs = DISTS_pt.DISTS(load_weights=False).eval()
    alpha_beta = torch.load(released('dists'), map_location='cpu')
    theirs.alpha.data, theirs.beta.data = alpha_beta['alpha'], alpha_beta['beta']
    a, b = frames(0, 64, 48)
    c, d = frames(1, 64, 48)
    x = torch.from_numpy(np.stack([a, c])).permute(0, 3, 1, 2).float() / 255
    y = torch.from_numpy(np.stack([b, d])).permute(0, 3, 1, 2).float() / 255
    expected = theirs(x, y).detach()
    assert expected.min() > 0
    assert ours(a, b) == pytest.approx(float(expected[0]), abs=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(ours.net(x, y), expected, atol=1e-5, rtol=0)


def test_dists_is_zero_for_identical_frames_and_grows_with_the_damage():
    m = METRICS.get('dists', 'val.metrics')(device='cpu', dists_path='random', dists_backbone_path='random')
    assert (m.higher_is_better, m.needs_reference) == (False, True)
    a = natural_image(64, 64)
    noisy = [np.clip(a + np.random.default_rng(0).normal(0, s, a.shape), 0, 255).astype(np.uint8) for s in (5, 40)]
    assert m(a, a) == pytest.approx(0.0, abs=1e-5)
    assert 0 < m(noisy[0], a) < m(noisy[1], a)


def test_a_wrong_alpha_beta_file_is_one_line(tmp_path):
    path = str(tmp_path / 'weights.pt')
    torch.save({'alpha': torch.zeros(3)}, path)
    with pytest.raises(UserError, match=r'^val.dists_path: .* is not DISTS alpha/beta'):
        DISTS('cpu', path, 'random')


# --- NIQE -------------------------------------------------------------------------------------------------

def reference_niqe(luma: np.ndarray, mu_p: np.ndarray, cov_p: np.ndarray) -> float:
    """NIQE written out block by block from Mittal et al. 2013 and the authors' MATLAB code, sharing nothing
    with metrics/niqe.py but the MATLAB bicubic resize (utils/image.py, tested against MATLAB elsewhere)."""
    from scipy.ndimage import convolve
    from scipy.special import gamma

    k = np.arange(7) - 3.0
    g = np.exp(-k ** 2 / (2 * (7 / 6) ** 2))
    window = np.outer(g, g) / np.outer(g, g).sum()
    shapes = np.arange(0.2, 10.001, 0.001)
    r_of = gamma(2 / shapes) ** 2 / (gamma(1 / shapes) * gamma(3 / shapes))

    def aggd(v):
        v = v.ravel()
        left, right = np.sqrt(np.mean(v[v < 0] ** 2)), np.sqrt(np.mean(v[v > 0] ** 2))
        gh = left / right
        r = np.mean(np.abs(v)) ** 2 / np.mean(v ** 2)
        rn = r * (gh ** 3 + 1) * (gh + 1) / (gh ** 2 + 1) ** 2
        alpha = shapes[np.argmin((r_of - rn) ** 2)]
        s = math.sqrt(gamma(1 / alpha) / gamma(3 / alpha))
        return alpha, left * s, right * s

    h, w = (luma.shape[0] // 96) * 96, (luma.shape[1] // 96) * 96
    img = luma[:h, :w]
    rows = [[] for _ in range((h // 96) * (w // 96))]
    for scale in (1, 2):
        mu = convolve(img, window, mode='nearest')
        sd = np.sqrt(np.abs(convolve(img * img, window, mode='nearest') - mu * mu))
        z = (img - mu) / (sd + 1)
        b = 96 // scale
        for n, (i, j) in enumerate((i, j) for i in range(h // 96) for j in range(w // 96)):
            blk = z[i * b:(i + 1) * b, j * b:(j + 1) * b]
            a, bl, br = aggd(blk)
            rows[n] += [a, (bl + br) / 2]
            for dy, dx in ((0, 1), (1, 0), (1, 1), (1, -1)):
                a, bl, br = aggd(blk * np.roll(np.roll(blk, dy, axis=0), dx, axis=1))
                rows[n] += [a, (br - bl) * gamma(2 / a) / gamma(1 / a), bl, br]
        img = imresize_bicubic(img / 255.0, 0.5) * 255.0
    f = np.array(rows)
    d = mu_p - f.mean(axis=0)
    return float(np.sqrt(d @ np.linalg.pinv((cov_p + np.cov(f.T)) / 2) @ d))


def test_niqe_equals_a_separate_block_by_block_computation_with_the_released_pristine_model():
    m = NIQE('cpu', 0, 'y', released('niqe'))
    p = np.load(released('niqe'))
    mu_p, cov_p = p['mu_pris_param'].ravel(), p['cov_pris_param']
    img = natural_image()
    for frame in (img, frames(4, 200, 300)[1]):
        luma = np.round(frame.astype(np.float64) @ np.array([65.481, 128.553, 24.966]) / 255 + 16)
        assert m(frame, None) == pytest.approx(reference_niqe(luma, mu_p, cov_p), rel=1e-9)


def test_niqe_gaussian_window_is_the_released_one():
    np.testing.assert_allclose(gaussian_window(), np.load(released('niqe'))['gaussian_window'],
                               atol=1e-15)


def test_niqe_rises_with_blur_and_noise_on_a_natural_looking_image():
    import cv2
    m = METRICS.get('niqe', 'val.metrics')(device='cpu', niqe_crop_border=0, niqe_convert_to='y',
                                         niqe_params_path=released('niqe'))
    assert (m.higher_is_better, m.needs_reference) == (False, False)
    img = natural_image()
    rng = np.random.default_rng(0)
    blurred = [cv2.GaussianBlur(img, (0, 0), s) for s in (1.0, 2.5)]
    noisy = [np.clip(img + rng.normal(0, s, img.shape), 0, 255).astype(np.uint8) for s in (10, 30)]
    clean = m(img, None)
    assert clean < m(blurred[0], None) < m(blurred[1], None)
    assert clean < m(noisy[0], None) < m(noisy[1], None)


def test_niqe_with_a_random_pristine_model_the_crop_and_gray_options_and_too_small_frames():
    img = natural_image()
    p = NIQE('cpu', 0, 'y', 'random')
    assert p.mu.shape == (36,) and np.all(np.linalg.eigvalsh(p.cov) > 0)
    assert math.isfinite(p(img)) and p(img) == NIQE('cpu', 0, 'y', 'random')(img)  # the random model is fixed
    cropped = NIQE('cpu', 8, 'y', 'random')
    assert cropped(img) == p(img[8:-8, 8:-8])
    gray = NIQE('cpu', 0, 'gray', 'random')
    assert gray(img) == p(img[:, :, 0])  # R = G = B: gray is the value itself (Y would be studio-swing)
    assert gray(img) != p(img)
    with pytest.raises(UserError, match=r'^cannot score a 96x150 image with NIQE: it needs at least two 96x96'):
        p(img[:96, :150])


# --- losses -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize('name, options', [
    ('lpips', {'G_lpips_net': 'alex', 'G_lpips_path': 'random', 'G_lpips_backbone_path': 'random'}),
    ('lpips', {'G_lpips_net': 'vgg', 'G_lpips_path': 'random', 'G_lpips_backbone_path': 'random'}),
    ('dists', {'G_dists_path': 'random', 'G_dists_backbone_path': 'random'}),
])
def test_the_losses_backpropagate_into_the_prediction_only_in_float32_also_under_autocast(name, options):
    loss = build_loss({'G_lossfn_type': name, 'G_lossfn_weight': 2.0, **options})
    assert set(LOSSES.options(name, 'train.G_lossfn_type')) == {k[2:] for k in options}
    assert not any(p.requires_grad for p in loss.parameters())
    loss.train()
    assert not loss.base.net.training  # frozen measure: always eval
    net = nn.Conv2d(3, 3, 3, padding=1)
    x = torch.rand(2, 3, 40, 40)
    target = torch.rand(2, 3, 40, 40)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        value = loss(net(x), target)
    assert value.dtype == torch.float32 and value.dim() == 0 and value > 0
    value.backward()
    assert net.weight.grad is not None and net.weight.grad.abs().sum() > 0
    video = loss(torch.rand(1, 2, 3, 40, 40), torch.rand(1, 2, 3, 40, 40))  # NxTxCxHxW: frames as images
    assert video.dim() == 0


def test_lpips_loss_is_the_metric_distance():
    loss = build_loss({'G_lossfn_type': 'lpips', 'G_lossfn_weight': 1.0, 'G_lpips_net': 'alex',
                       'G_lpips_path': released('lpips_alex'), 'G_lpips_backbone_path': 'random'})
    metric = LPIPS('cpu', 'alex', released('lpips_alex'), 'random')
    a, b = frames(5)
    t = lambda f: torch.from_numpy(f).permute(2, 0, 1)[None].float() / 255  # noqa: E731
    assert float(loss(t(a), t(b))) == pytest.approx(metric(a, b), abs=1e-6)



def test_the_loss_keys_are_typed_and_defaulted_by_the_option_checks():
    t = train_options(G_lossfn_type='lpips')
    assert (t['G_lpips_net'], t['G_lpips_path'], t['G_lpips_backbone_path']) == ('vgg', None, None)
    with pytest.raises(OptionsError, match='G_lpips_net'):
        train_options(G_lossfn_type='lpips', G_lpips_net='squeeze')


def test_a_run_trains_with_dists_as_the_loss_and_lpips_as_an_extra_and_a_missing_file_is_one_line(tmp_path,
                                                                                                   demo_images):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=2, checkpoint_save=2, checkpoint_test=2,
                       checkpoint_print=1, G_scheduler_milestones=[], G_lossfn_type='dists', G_dists_path='random',
                       G_dists_backbone_path='random', G_extra_losses={'lpips': 0.5}, G_lpips_net='vgg',
                       G_lpips_path='random', G_lpips_backbone_path='random')
    opt['logging']['use_tensorboard'] = False
    path = write_options(str(tmp_path / 'o.json'), opt)
    r = run_main('main_train', ['--opt', path], env=clean_env(OMP_NUM_THREADS='1'))
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / 'exp' / 'tiny' / 'models' / '2_G.pth').is_file()
    out = r.stdout + r.stderr
    assert 'train.G_dists_backbone_path is "random"' in out and 'train.G_lpips_path is "random"' in out
    assert 'l_g_lpips' in out
    opt['train']['G_dists_backbone_path'] = str(tmp_path / 'nowhere' / 'vgg16-397923af.pth')
    opt['path']['root'] = str(tmp_path / 'exp2')
    r = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o2.json'), opt)],
                 env=clean_env(OMP_NUM_THREADS='1'))
    assert r.returncode != 0 and 'Traceback' not in r.stderr
    assert (f'train.G_dists_backbone_path: torchvision\'s ImageNet VGG16 (LPIPS vgg, DISTS): weights not found; '
            f'nothing is downloaded here: put file vgg16-397923af.pth at {tmp_path}/nowhere/vgg16-397923af.pth '
            f'(from {WEIGHTS["vgg16"].url})') in r.stderr


def test_the_docs_list_every_perceptual_metric_file_where_utils_weights_looks_for_it():
    with open(os.path.join(os.path.dirname(DATA), '..', '..', 'docs', 'evaluation.md')) as f:
        page = f.read()
    for name in ('alexnet', 'vgg16', 'lpips_alex', 'lpips_vgg', 'dists', 'niqe'):
        w = WEIGHTS[name]
        assert f'| `{os.path.join(w.subfolder, w.file)}` |' in page and f'| {w.url} | {w.licence} |' in page


# --- through training and main_test ---------------------------------------------------------------------

def test_training_and_main_test_score_lpips_dists_and_niqe_with_the_files_in_the_default_folder(tmp_path, demo_images,
                                                                                               monkeypatch):
    """The three metrics end to end, with their files where a user puts them (torch's hub cache, no path in the
    options): validation logs and history.jsonl carry them, best_G follows LPIPS, and main_test's results.csv
    holds, for every restored image it wrote, exactly the scores the metrics give that image."""
    import csv

    import cv2
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    torch.manual_seed(0)
    for name, features in (('alexnet', alexnet_features), ('vgg16', vgg16_features)):  # random, torchvision's format
        os.makedirs(os.path.dirname(default_path(name)), exist_ok=True)
        torch.save({f'features.{k}': v for k, v in features().state_dict().items()}, default_path(name))
    for name in ('lpips_alex', 'dists', 'niqe'):
        os.makedirs(os.path.dirname(default_path(name)), exist_ok=True)
        with open(released(name), 'rb') as src, open(default_path(name), 'wb') as dst:
            dst.write(src.read())
    (tmp_path / 'test').mkdir()
    img = natural_image()  # two 96x96 blocks and more: NIQE can score it
    for k, frame in enumerate((img, np.ascontiguousarray(img[::-1, ::-1]))):
        cv2.imwrite(str(tmp_path / 'test' / f'im{k}.png'), frame)
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=2, checkpoint_test=2, checkpoint_save=2,
                       checkpoint_print=1, G_scheduler_milestones=[])
    opt['datasets']['test']['dataroot_H'] = str(tmp_path / 'test')
    opt['logging']['use_tensorboard'] = False
    opt['val'] = {'metrics': ['lpips', 'dists', 'niqe'], 'best_metric': 'lpips'}
    path = write_options(str(tmp_path / 'o.json'), opt)
    env = clean_env(OMP_NUM_THREADS='1', TORCH_HOME=str(tmp_path / 'torch_home'))
    r = run_main('main_train', ['--opt', path], env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    task = tmp_path / 'exp' / 'tiny'
    from utils.history import read_history
    val = [row for row in read_history(str(task / 'history.jsonl')) if row['kind'] == 'val']
    assert len(val) == 1 and all(np.isfinite(val[0][k]) for k in ('lpips', 'dists', 'niqe'))
    assert 'lpips' in r.stdout and 'niqe' in r.stdout
    with open(task / 'models' / 'best') as f:
        assert f.read().split()[::2] == ['2', 'lpips']
    out = tmp_path / 'out'
    r = run_main('main_test', ['--opt', path, '--out', str(out)], env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(out / 'results.csv') as f:
        rows = list(csv.DictReader(f))
    assert [row['name'] for row in rows] == ['im0', 'im1', 'mean']
    metrics = {'lpips': LPIPS('cpu', 'alex', None, None), 'dists': DISTS('cpu', None, None),
               'niqe': NIQE('cpu', 0, 'y', None)}
    for row in rows[:2]:
        restored = [p for p in os.listdir(out) if p.startswith(row['name']) and p.endswith('.png')]
        assert len(restored) == 1, os.listdir(out)
        E = cv2.imread(str(out / restored[0]))[:, :, ::-1].copy()
        H = cv2.imread(str(tmp_path / 'test' / f'{row["name"]}.png'))[:, :, ::-1].copy()
        # the table holds 4 decimals
        assert float(row['lpips']) == pytest.approx(metrics['lpips'](E, H), abs=6e-5)
        assert float(row['dists']) == pytest.approx(metrics['dists'](E, H), abs=6e-5)
        assert float(row['niqe']) == pytest.approx(metrics['niqe'](E, None), abs=6e-5)
    for key in ('lpips', 'dists', 'niqe'):
        assert float(rows[2][key]) == pytest.approx(np.mean([float(row[key]) for row in rows[:2]]), abs=1.1e-4)
