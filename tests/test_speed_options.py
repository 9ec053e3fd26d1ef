"""Speed options of the image model: mixed precision, channels_last, compile, gradient accumulation.

These pin down behaviour (dtypes, memory formats, saved state, gradients), not timings; the timings
are in bench/.
"""

import pytest
import torch

from conftest import run_main, tiny_options, write_options
from models.model_plain import ModelPlain
from models.precision import amp_setup, memory_format, to_channels_last
from option_rules import option_rules
from training.batches import micro_batches
from utils.errors import OptionsError, UserError
from utils.options import validate

CPU = torch.device('cpu')


def _opt(tmp_path, net=None, **train):
    raw = tiny_options(str(tmp_path), str(tmp_path / 'data'), E_decay=0.0, **train)
    raw['netG'] = net or {'net_type': 'dncnn', 'in_nc': 3, 'out_nc': 3, 'nc': 8, 'nb': 3, 'act_mode': 'R'}
    return validate(raw, option_rules())


def _model(tmp_path, seed=0, **train):
    torch.manual_seed(seed)
    return ModelPlain(_opt(tmp_path, **train), CPU)


def _batch(n, seed, size=16):
    g = torch.Generator().manual_seed(seed)
    H = torch.rand(n, 3, size, size, generator=g)
    return {'L': H + 0.1 * torch.randn(H.shape, generator=g), 'H': H}


def test_bf16_autocast_runs_the_forward_in_bf16_and_trains_with_finite_loss(tmp_path):
    model = _model(tmp_path, amp='bf16')
    dtypes = []
    model.net_g.model[0].register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    before = [p.detach().clone() for p in model.net_g.parameters()]
    for step in range(1, 4):
        loss = model.backward([_batch(4, step)])
        assert loss.dtype == torch.float32 and torch.isfinite(loss)
        model.step(step, loss)
    assert dtypes == [torch.bfloat16] * 3
    assert all(p.dtype == torch.float32 for p in model.net_g.parameters())  # master weights stay fp32
    assert any(not torch.equal(a, b) for a, b in zip(before, model.net_g.parameters()))
    assert model.scaler is None


def test_fp32_default_does_not_autocast(tmp_path):
    model = _model(tmp_path)
    dtypes = []
    model.net_g.model[0].register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    model.backward([_batch(2, 0)])
    assert dtypes == [torch.float32]


def test_fp16_on_cpu_is_refused_with_a_user_error_naming_train_amp(tmp_path):
    with pytest.raises(UserError, match=r'^train\.amp: "fp16" needs a CUDA device'):
        _model(tmp_path, amp='fp16')


def test_fp16_on_cpu_stops_main_train_with_one_line_and_exit_2(tmp_path, demo_images):
    opt = tiny_options(str(tmp_path / 'runs'), demo_images, amp='fp16')
    path = write_options(str(tmp_path / 'o.json'), opt)
    r = run_main('main_train', ['--opt', path])
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: train.amp: "fp16" needs a CUDA device'), r.stderr


def test_amp_setup_selects_autocast_dtype_and_grad_scaler_by_device_type():
    cuda = torch.device('cuda', 0)  # only the device type is inspected; no CUDA needed
    assert amp_setup('fp16', cuda) == (torch.float16, True)
    assert amp_setup('bf16', cuda) == (torch.bfloat16, False)
    assert amp_setup('bf16', CPU) == (torch.bfloat16, False)
    assert amp_setup('none', cuda) == (None, False)
    assert amp_setup('none', CPU) == (None, False)


def test_amp_option_rejects_unknown_values_with_a_suggestion(tmp_path):
    with pytest.raises(OptionsError, match=r'train\.amp: "bf61" must be one of none, bf16, fp16 \(did you mean "bf16"\?\)'):
        _opt(tmp_path, amp='bf61')


def test_grad_scaler_state_round_trips_through_training_state(tmp_path):
    # fp16 needs CUDA, which this machine lacks. torch's GradScaler also runs on CPU, so the
    # scaler code path (scale, unscale, step, update, save, load) is exercised with fp32 autocast-free
    # forwards by attaching a CPU scaler; only the device selection above is CUDA-specific.
    model = _model(tmp_path)
    assert 'grad_scaler' not in model.training_state()
    model.scaler = torch.amp.GradScaler('cpu', init_scale=2.0 ** 10, growth_interval=1)
    for step in (1, 2):
        model.step(step, model.backward([_batch(2, step)]))
    assert model.scaler.get_scale() == 2.0 ** 12  # grew once per finite step
    state = model.training_state()
    assert state['grad_scaler']['scale'] == 2.0 ** 12

    other = _model(tmp_path, seed=1)
    other.scaler = torch.amp.GradScaler('cpu', init_scale=1.0)
    other.load_state(model.state_files(), state)
    assert other.scaler.get_scale() == 2.0 ** 12
    assert other.scaler.state_dict() == model.scaler.state_dict()


def test_grad_scaler_unscales_before_the_optimizer_step(tmp_path):
    plain, scaled = _model(tmp_path, seed=3), _model(tmp_path, seed=3)
    scaled.scaler = torch.amp.GradScaler('cpu', init_scale=2.0 ** 8)
    for m in (plain, scaled):
        m.step(1, m.backward([_batch(2, 5)]))
    for a, b in zip(plain.net_g.parameters(), scaled.net_g.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_channels_last_converts_conv_weights_and_4d_inputs(tmp_path):
    model = _model(tmp_path, channels_last=True)
    convs = [m.weight for m in model.net_g.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous()
                         for w in convs)
    batch = model.to_device({**_batch(2, 0), 'L_path': ['a.png', 'b.png']})
    for k in ('L', 'H'):
        assert batch[k].is_contiguous(memory_format=torch.channels_last) and not batch[k].is_contiguous()
    assert batch['L_path'] == ['a.png', 'b.png']
    loss = model.backward([_batch(2, 0)])
    model.step(1, loss)
    assert torch.isfinite(loss)


def test_channels_last_null_is_on_for_image_models_on_a_cpu(tmp_path):
    model = _model(tmp_path)  # the key's default: null
    assert model.channels_last
    convs = [m.weight for m in model.net_g.modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous() for w in convs)
    assert model.to_device(_batch(2, 0))['L'].is_contiguous(memory_format=torch.channels_last)


def test_channels_last_null_is_off_on_cuda_and_for_video_models_and_an_explicit_value_wins():
    net = torch.nn.Conv2d(3, 3, 3)
    assert memory_format(None, CPU, True, net) == (
        True, 'memory format: channels-last (train.channels_last null: on for image networks on a CPU)')
    assert memory_format(None, CPU, False, net) == (
        False, 'memory format: channels-first (train.channels_last null: off for video models)')
    assert memory_format(None, torch.device('cuda'), True, net) == (
        False, 'memory format: channels-first (train.channels_last null: off on CUDA)')
    assert memory_format(False, CPU, True, net)[0] is False
    assert memory_format(True, torch.device('cuda'), False, net)[0] is True


def test_channels_last_null_is_off_for_a_network_with_a_dense_convolution_of_17x17_or_more():
    """oneDNN runs those channels-last at 1.9x (17x17) to 21x (21x21) their channels-first time (PLKSR: 8.5x the
    step); depthwise ones and smaller dense ones run faster channels-last."""
    plk = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(8, 8, 17))
    assert memory_format(None, CPU, True, plk) == (
        False, 'memory format: channels-first (train.channels_last null: off, 1.weight (17x17) runs slower '
               'channels-last on a CPU)')
    assert memory_format(True, CPU, True, plk) == (
        True, 'memory format: channels-last (train.channels_last; 1.weight (17x17) runs slower so on a CPU)')
    for fast in (torch.nn.Conv2d(8, 8, 15), torch.nn.Conv2d(8, 8, 21, groups=8)):
        assert memory_format(None, CPU, True, fast)[0] is True


def test_to_channels_last_converts_4d_weights_and_buffers_and_leaves_others():
    net = torch.nn.Conv2d(3, 4, 3)
    net.register_buffer('mask', torch.rand(1, 4, 5, 5))
    net.extra = torch.nn.Parameter(torch.rand(1, 2, 3, 4, 5))  # FFTformer keeps a 5-D weight: .to() refuses it
    to_channels_last(net)
    assert net.weight.is_contiguous(memory_format=torch.channels_last) and not net.weight.is_contiguous()
    assert net.mask.is_contiguous(memory_format=torch.channels_last) and not net.mask.is_contiguous()
    assert net.extra.is_contiguous() and isinstance(net.weight, torch.nn.Parameter)
    assert [n for n, _ in net.named_parameters()] == ['weight', 'bias', 'extra']


def test_channels_last_off_keeps_default_memory_format(tmp_path):
    model = _model(tmp_path, channels_last=False)
    assert all(p.is_contiguous() for p in model.net_g.parameters())
    assert model.to_device(_batch(2, 0))['L'].is_contiguous()


def test_channels_last_leaves_5d_video_batches_contiguous(tmp_path):
    model = _model(tmp_path, channels_last=True)
    clip = torch.rand(1, 3, 3, 8, 8)
    assert model.to_device({'L': clip})['L'].is_contiguous()


def test_compile_wraps_only_the_training_forward_and_keeps_weight_names(tmp_path):
    plain = _model(tmp_path)
    compiled = _model(tmp_path, compile=True)
    assert plain.net is plain.net_g
    assert isinstance(compiled.net, torch._dynamo.eval_frame.OptimizedModule)
    assert compiled.net._orig_mod is compiled.net_g
    assert list(compiled.state_files()['G']) == list(plain.state_files()['G'])


SWINIR = {'net_type': 'swinir', 'upscale': 1, 'in_chans': 3, 'img_size': 16, 'window_size': 4, 'img_range': 1.0,
          'depths': [2, 4], 'embed_dim': 12, 'num_heads': [2, 2], 'mlp_ratio': 2, 'upsampler': None,
          'resi_connection': '1conv', 'drop_path_rate': 0.1}  # a rate per block: stochastic depth's ramp


def test_a_network_with_repeated_blocks_is_compiled_block_by_block_in_place(tmp_path):
    from models.networks.swinir import SwinTransformerBlock
    plain = ModelPlain(_opt(tmp_path, net=SWINIR), CPU)
    model = ModelPlain(_opt(tmp_path, net=SWINIR, compile=True, compile_mode='max-autotune'), CPU)
    blocks = [m for m in model.net_g.modules() if isinstance(m, SwinTransformerBlock)]
    assert len(blocks) == 6 and all(b._compiled_call_impl is not None for b in blocks)
    assert model.net is model.net_g  # no wrapper: the blocks themselves are compiled
    assert list(model.state_files()['G']) == list(plain.state_files()['G'])


def test_compiled_training_compiles_once_and_evaluation_never(tmp_path, monkeypatch):
    """Regional compilation: one graph per kind of block (the first, without stochastic depth; shifted;
    unshifted), not one per block, none more over later iterations with the same shapes, and none for
    validation images of other sizes (they run eagerly)."""
    from models import compile as compile_module
    from models.compile import compiled_graphs
    monkeypatch.setattr(compile_module, 'BACKEND', 'eager')  # dynamo's graphs without code generation
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = ModelPlain(_opt(tmp_path, net=SWINIR, compile=True), CPU)
    start = compiled_graphs()
    counts = []
    for step in (1, 2, 3):
        loss = model.backward([_batch(2, step)])
        model.step(step, loss, model.finalize_gradients(step, loss))
        counts.append(compiled_graphs() - start)
    assert counts == [3, 3, 3], counts  # 6 blocks, 3 kinds
    images = [{'L': torch.rand(1, 3, size, size), 'H': torch.rand(1, 3, size, size), 'L_path': [f'{size}.png']}
              for size in (20, 28)]
    model.validate(images, len(images))
    assert compiled_graphs() - start == counts[0]


def test_compile_mode_is_checked_with_the_options(tmp_path):
    with pytest.raises(OptionsError, match=r'train\.compile_mode: "fast" must be one of default, max-autotune'):
        _opt(tmp_path, compile_mode='fast')


def test_accumulating_two_micro_batches_equals_one_batch_of_double_size(tmp_path):
    accum = _model(tmp_path, seed=11, accumulate_steps=2)
    single = _model(tmp_path, seed=11)
    b1, b2 = _batch(3, 1), _batch(3, 2)
    (group,) = list(micro_batches(iter([b1, b2]), accum.train_opt['accumulate_steps']))
    loss_a = accum.backward(group)
    loss_s = single.backward([{k: torch.cat([b1[k], b2[k]]) for k in ('L', 'H')}])
    torch.testing.assert_close(loss_a, loss_s, rtol=0, atol=1e-6)
    grads = [(a.grad, s.grad) for a, s in zip(accum.net_g.parameters(), single.net_g.parameters())]
    assert grads and all(a is not None for a, _ in grads)
    # Equal up to float32 summation order, not bit for bit: the last bias gradient sums 6x16x16 = 1536
    # pixel terms per channel, in two runs of 768 when accumulating (and in one run, or in per-thread
    # chunks, for the single batch, so it depends on the thread count). With one thread the two differ
    # by 1.4e-5 relative; rtol 1e-4 is the float32 bound for such a sum (1536 x 2^-24 = 9e-5). Real bugs
    # are far beyond it: not scaling the gradients by 1/2 is 100 % off, keeping only the last
    # micro-batch's gradients up to 60x.
    for a, s in grads:
        torch.testing.assert_close(a, s, rtol=1e-4, atol=1e-6)
