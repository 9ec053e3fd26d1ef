"""Sharpness-aware steps (`train.G_optimizer_sam`, models/sam.py): each method steps as pytorch-optimizer's class does,
in the model too (two passes, the first one's gradient unscaled under a GradScaler), without a host read; a
non-finite first pass skips the step and leaves the state as it was; the options are one-line errors; a resumed
run continues bit for bit. DDP and accumulation against one process: tests/test_ddp_equivalence.py."""
import os
import sys

import pytest
import torch
from torch import nn

from conftest import clean_env, run, run_main, straight_and_resumed, tiny_options, write_options
from models.model_plain import ModelPlain
from models.sam import SAM_METHODS, build_sam, trained_parameters
from option_rules import option_rules
from utils.options import validate

PY = sys.executable
CPU = torch.device('cpu')
STEPS = 6


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Small networks: one intra-op thread (conftest's `one_thread`)."""


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 3, 3, padding=1))


def _data():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(2, 3, 8, 8, generator=g), torch.randn(2, 3, 8, 8, generator=g)) for _ in range(STEPS)]


def _loss(net, x, y):
    return ((net(x) - y) ** 2).mean()


def _ours(method, keys):
    """Our method's steps on the toy problem: the model's order of calls (models/model_plain.py)."""
    net, data = _net(), _data()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    if method is None:
        for x, y in data:
            opt.zero_grad()
            _loss(net, x, y).backward()
            opt.step()
        return net
    options = {k: v.default for k, v in SAM_METHODS.options(method, 'test').items()}
    options.update(keys)
    sam = build_sam(method, {f'G_sam_{k}': v for k, v in options.items()}, trained_parameters(opt.param_groups), [])
    for step, (x, y) in enumerate(data, 1):
        opt.zero_grad()
        _loss(net, x, y).backward()
        ran = sam.due(step)
        if ran:
            sam.perturb()
            opt.zero_grad()
            _loss(net, x, y).backward()
            sam.restore()
        sam.edit_gradients(step, ran)
        opt.step()
        sam.commit(None)
    return net


def _library(name, keys):
    """pytorch-optimizer's class of the same method, stepped as its docstring says."""
    import pytorch_optimizer as po
    net, data = _net(), _data()
    if name == 'gsam':  # its step takes the model and a closure giving (outputs, loss); rho from a schedule
        base = torch.optim.Adam(net.parameters(), lr=1e-2)
        rho = type('ConstantRho', (), {'step': lambda self: keys['rho']})()
        opt = po.GSAM(net.parameters(), base, net, rho, alpha=keys['alpha'])
        for x, y in data:
            def closure(x=x, y=y):
                base.zero_grad()
                with torch.enable_grad():
                    loss = _loss(net, x, y)
                loss.backward()
                return None, loss.detach()
            opt.step(closure)
        return net
    cls = {'sam': po.SAM, 'fsam': po.FriendlySAM, 'looksam': po.LookSAM}[name]
    opt = cls(net.parameters(), torch.optim.Adam, lr=1e-2, **keys)
    for x, y in data:
        def closure(x=x, y=y):
            opt.zero_grad()
            loss = _loss(net, x, y)
            loss.backward()
            return loss
        closure()
        opt.step(closure)
    return net


def _distance(a, b):
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize('method, keys', [
    ('sam', dict(rho=0.05)),
    ('sam', dict(rho=0.5, adaptive=True)),
    ('fsam', dict(rho=0.05, sigma=1.0, lmbda=0.9)),
    ('fsam', dict(rho=0.1, sigma=0.5, lmbda=0.6, adaptive=True)),
    ('gsam', dict(rho=0.05, alpha=0.4)),
    ('looksam', dict(rho=0.1, k=3, alpha=0.7)),
], ids=['sam', 'asam', 'fsam', 'fsam-adaptive', 'gsam', 'looksam-k3'])
def test_each_method_steps_as_pytorch_optimizer_does(method, keys):
    """Six steps of Adam wrapped by our method and by the library's class from the same start on the same batches
    (LookSAM: two full steps and four reusing ones) give the same weights; they differ from Adam's alone."""
    ours, theirs, adam = _ours(method, keys), _library(method, keys), _ours(None, {})
    differs = _distance(ours, adam)
    assert _distance(ours, theirs) < 1e-6, (_distance(ours, theirs), differs)
    assert differs > 1e-4, f'{method} changed nothing against Adam alone ({differs})'


# --- in the model ---------------------------------------------------------------------------------------------

def _model(tmp_path, **train) -> ModelPlain:
    opt = validate(tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'), **train), option_rules())
    opt['netG']['act_mode'] = 'R'
    torch.manual_seed(0)
    return ModelPlain(opt, CPU)


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    H = torch.rand(4, 3, 24, 24, generator=g)
    return {'L': (H + 0.1 * torch.randn(H.shape, generator=g)).clamp(0, 1), 'H': H}


def _train_step(model, step, batch, applied=None):
    loss = model.backward([batch])
    finite = model.finalize_gradients(step, loss)
    model.step(step, loss, finite if applied is None else applied)
    model.end_iteration(step)
    return finite


def _snapshot(model):
    weights = [p.detach().clone() for p in model.net_g.parameters()]
    moments = {k: v.clone() for s in model.optimizer.state.values() for k, v in s.items() if torch.is_tensor(v)}
    state = {k: v.clone() for k, v in model.sam.state_dict().items()}
    return weights, moments, state


@pytest.mark.parametrize('method', ['fsam', 'looksam'])
def test_a_non_finite_first_pass_skips_the_step_and_keeps_the_state(tmp_path, monkeypatch, method):
    """A NaN in the first pass's gradient (the loss was finite): the verdict is "not applied", and the weights, the
    optimizer's moments and the method's own state (F-SAM's average, LookSAM's reused part) stay as they were."""
    from models.sam import SAM
    model = _model(tmp_path, G_optimizer_sam=method, G_sam_k=2, nan_policy='skip', E_decay=0)
    good = 2  # LookSAM k 2: a full step and a reusing one; the third is full
    for step in range(1, good + 1):
        assert bool(_train_step(model, step, _batch(step)))
    before = _snapshot(model)
    original = SAM.perturb

    def poisoned(self, *args):
        self.params[0].grad[0, 0, 0, 0] = float('nan')  # a channels-last weight has no flat view
        return original(self, *args)
    monkeypatch.setattr(SAM, 'perturb', poisoned)
    finite = _train_step(model, good + 1, _batch(good + 1))
    assert not bool(finite) and not bool(model.sam.first_pass_finite)
    after = _snapshot(model)
    for a, b in zip(before, after):
        for x, y in zip(a.values() if isinstance(a, dict) else a, b.values() if isinstance(b, dict) else b):
            assert torch.equal(x, y)
    monkeypatch.undo()
    assert bool(_train_step(model, good + 2, _batch(good + 2)))  # and it goes on


@pytest.mark.parametrize('method', ['sam', 'fsam', 'gsam', 'looksam'])
def test_a_sharpness_aware_step_never_reads_the_device(tmp_path, monkeypatch, method):
    """Both passes, the gradient edits and the gated step with the fused optimizer: no tensor is read on the host."""
    model = _model(tmp_path, G_optimizer_sam=method, G_sam_k=2, G_optimizer_fused=True, G_optimizer_clipgrad=1.0)

    def forbidden(name):
        def read(self, *args, **kwargs):
            raise AssertionError(f'a training step read a tensor on the host: Tensor.{name}')
        return read
    before = [p.detach().clone() for p in model.net_g.parameters()]
    for step in (1, 2, 3):
        batch = _batch(step)
        with monkeypatch.context() as m:
            for name in ('item', '__bool__', 'tolist', '__float__', '__int__', 'numpy'):
                m.setattr(torch.Tensor, name, forbidden(name))
            loss = model.backward([batch])
            finite = model.finalize_gradients(step, loss)
            model.step(step, loss, finite)
        model.end_iteration(step)
    assert all(not torch.equal(a, b) for a, b in zip(before, model.net_g.parameters()))


def test_under_a_grad_scaler_the_perturbation_is_taken_from_unscaled_gradients(tmp_path):
    """fp16's GradScaler (here on the CPU, in float32): the steps equal those without it (F-SAM's average and the
    perturbation come from true gradients), and an overflow of the first pass skips the step and backs the
    scale off."""
    plain, scaled = (_model(tmp_path, G_optimizer_sam='fsam', E_decay=0) for _ in range(2))
    scaled.scaler = torch.amp.GradScaler('cpu', init_scale=2.0 ** 12)
    scaled._build_sam()
    for step in (1, 2, 3):
        for model in (plain, scaled):
            _train_step(model, step, _batch(step))
    for a, b in zip(plain.net_g.parameters(), scaled.net_g.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(plain.sam.momentum, scaled.sam.momentum, rtol=1e-5, atol=1e-8)
    before = _snapshot(scaled)
    from models.sam import SAM
    original = SAM.perturb

    def overflowed(self, *args):  # as if an fp16 gradient of the first pass had overflowed
        self.params[0].grad[0, 0, 0, 0] = float('inf')
        return original(self, *args)
    SAM.perturb = overflowed
    try:
        _train_step(scaled, 4, _batch(4))
    finally:
        SAM.perturb = original
    assert scaled.scaler.get_scale() == 2.0 ** 11
    for a, b in zip(before, _snapshot(scaled)):
        for x, y in zip(a.values() if isinstance(a, dict) else a, b.values() if isinstance(b, dict) else b):
            assert torch.equal(x, y)


def test_bf16_autocast_takes_sharpness_aware_steps(tmp_path):
    model = _model(tmp_path, G_optimizer_sam='sam', amp='bf16', E_decay=0)
    before = [p.detach().clone() for p in model.net_g.parameters()]
    for step in (1, 2):
        assert bool(_train_step(model, step, _batch(step)))
    assert all(torch.isfinite(p).all() and not torch.equal(a, p) for a, p in zip(before, model.net_g.parameters()))


def test_the_second_pass_leaves_batchnorm_statistics_as_the_first_left_them(tmp_path):
    """netG with BatchNorm: after a step its running statistics are those of one forward pass, not of two."""
    model = _model(tmp_path, G_optimizer_sam='sam', E_decay=0)
    model.opt['netG']['act_mode'] = 'BR'
    torch.manual_seed(0)
    bn = ModelPlain(model.opt, CPU)
    reference = ModelPlain(dict(model.opt, train={**model.opt['train'], 'G_optimizer_sam': None}), CPU)
    reference.net_g.load_state_dict(bn.net_g.state_dict())
    batch = _batch(5)
    for m in (bn, reference):
        m.backward([batch])
    for (name, a), b in zip(bn.net_g.named_buffers(), reference.net_g.buffers()):
        assert torch.equal(a, b), name


# --- options ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('train, message', [
    ({'G_optimizer_sam': 'fsma'}, 'train.G_optimizer_sam: unknown sharpness-aware method "fsma" (did you mean "fsam"?)'),
    ({'G_optimizer_sam': 'gsam', 'G_sam_rho': 0.02, 'G_sam_rho_min': 0.05},
     'train.G_optimizer_sam gsam: G_sam_rho_min 0.05 is above G_sam_rho 0.02'),
    ({'G_optimizer_sam': 'looksam', 'G_sam_k': 0}, 'train.G_sam_k: 0 must be > 0'),
])
def test_a_wrong_sharpness_aware_option_is_one_line(tmp_path, demo_images, train, message):
    path = write_options(str(tmp_path / 'o.json'), tiny_options(str(tmp_path / 'exp'), demo_images, **train))
    res = run_main('main_train', ['--opt', path])
    assert res.returncode == 2 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_a_gan_refuses_sharpness_aware_steps_in_one_line(tmp_path):
    from models.model_gan import ModelGAN
    from tests.test_gan import _tiny
    from utils.errors import UserError
    opt = validate(_tiny(tmp_path, str(tmp_path / 'data'), G_optimizer_sam='sam'), option_rules())
    with pytest.raises(UserError, match='train.G_optimizer_sam: sam is not available with model "gan"'):
        ModelGAN(opt, CPU)


# --- resume and the gate across ranks ---------------------------------------------------------------------------

def test_a_looksam_run_resumed_midway_is_bitwise_identical_to_a_straight_one(tmp_path, demo_images):
    """LookSAM (k 3: full steps at 1, 4, 7) with the EMA: 4 + 4 iterations equal 8; its reused part is resumed."""
    from tests.test_resume import _assert_same_run_state
    train = dict(G_optimizer_sam='looksam', G_sam_k=3, total_iter=8, checkpoint_save=4, checkpoint_test=8,
                 checkpoint_print=4)
    paths = {}
    for task in ('straight', 'resumed'):
        opt = tiny_options(str(tmp_path / 'exp'), demo_images, **train)
        opt['task'] = task
        paths[task] = write_options(str(tmp_path / f'{task}.json'), opt)
    straight_and_resumed(paths['straight'], paths['resumed'], 4)
    models = tmp_path / 'exp'
    _assert_same_run_state(models / 'straight' / 'models', models / 'resumed' / 'models', 8)
    state = torch.load(models / 'resumed' / 'models' / '8_state.pth', weights_only=True)['model']['sam']
    straight = torch.load(models / 'straight' / 'models' / '8_state.pth', weights_only=True)['model']['sam']
    assert state['method'] == 'looksam' and torch.equal(state['state']['gv'], straight['state']['gv'])
    assert state['state']['gv'].abs().sum() > 0


@pytest.mark.slow  # two processes, ~10 s; runs in CI (CI=true) and with RUN_SLOW=1
def test_a_non_finite_first_pass_on_one_rank_skips_the_step_on_every_rank(tmp_path, demo_images):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, G_optimizer_sam='fsam', nan_policy='skip', total_iter=4,
                       checkpoint_save=4, checkpoint_test=4, checkpoint_print=1)
    path = write_options(str(tmp_path / 'o.json'), opt)
    res = run([PY, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2', os.path.join('tests',
               'patched_main.py'), '--opt', path],
              env=clean_env(OMP_NUM_THREADS='1', FIRST_PASS_NAN_AT='2', INJECT_NAN_RANK='1'))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'iteration 2: 1 step skipped, non-finite loss or gradients on rank' in res.stdout
    assert 'parameters identical on all 2 rank(s)' in res.stdout
