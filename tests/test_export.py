"""scripts/export.py: a run's checkpoint becomes ONNX (dynamic N/H/W, fp32 and fp16) and safetensors, and the
ONNX graph gives PyTorch's output in onnxruntime at sizes it was not traced at. Safetensors files load
wherever weights are read (main_test --weights, path.pretrained_netG). With --format spandrel it becomes the file
chaiNNer and ComfyUI open, which spandrel reads with our output (tests/test_spandrel_loads_ours.py: every network)."""
import csv
import json
import os
import re
import sys

import numpy as np
import pytest
import torch
from torch import nn

from conftest import need_module, need_spandrel, run, run_main, tiny_options, write_options
from models.model_plain import ModelPlain
from models.network_loading import build_eval_network, load_weights
from option_rules import read_options
from scripts import export
from utils.checkpoint import CheckpointDir, load
from utils.errors import UserError

PY = sys.executable
SCRIPT = os.path.join('scripts', 'export.py')
DIFF = r'max\|diff\| = ([0-9.e+-]+)'


def need_onnx():
    """onnx, onnxscript and onnxruntime, or a skip where they are missing (a failure under CI=true)."""
    for name in ('onnx', 'onnxscript', 'onnxruntime'):
        need_module(name)


def make_run(tmp_path, demo_images, netG=None, test_set=True, scale=1):
    """An option file and a run folder holding complete saves at iterations 4 and 8 (random weights; the EMA
    weights of 8 differ from its G weights), as training leaves them; returns (option file, opt)."""
    raw = tiny_options(str(tmp_path / 'exp'), demo_images)
    raw['scale'] = scale
    if netG is not None:
        raw['netG'] = netG
    if not test_set:
        del raw['datasets']['test']
    path = write_options(str(tmp_path / 'o.json'), raw)
    opt = read_options(path)
    ckpt = CheckpointDir(opt['path']['models'])
    from models.network_loading import build_checked_network
    for step in (4, 8):
        files = {}
        for kind in ('G', 'E'):
            torch.manual_seed(step * 100 + ord(kind))
            files[kind] = build_checked_network(opt['netG']).state_dict()
        files['state'] = {'iter': step}
        ckpt.save(step, files)
    return path, opt


def export_run(capsys, *argv):
    """scripts/export.py's main in this process: (exit code, stdout, stderr)."""
    code = export.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def onnx_vs_torch(onnx_path, net, shape):
    """max|onnxruntime - PyTorch| on a random input of `shape`."""
    import onnxruntime as ort
    x = torch.rand(*shape, generator=torch.Generator().manual_seed(3))
    session = ort.InferenceSession(onnx_path, providers=['CPUExecutionProvider'])
    out = session.run(['output'], {'input': x.numpy()})[0]
    with torch.no_grad():
        ref = net(x).numpy()
    assert out.shape == ref.shape
    return float(np.abs(out - ref).max())


def test_a_conv_net_run_exports_its_newest_ema_weights_to_onnx_fp16_and_safetensors(tmp_path, demo_images, capsys,
                                                                                    one_thread):
    need_onnx()
    import onnx
    opt_path, opt = make_run(tmp_path, demo_images)
    code, out, err = export_run(capsys, '--opt', opt_path, '--fp16')
    assert code == 0, err
    folder = os.path.join(opt['path']['task'], 'export')          # default: the run's export folder
    assert sorted(os.listdir(folder)) == ['8_E.onnx', '8_E.safetensors', '8_E_fp16.onnx']  # newest save, EMA
    assert 'on the first test input, 96x96' in out and '(traced at 2x3x64x64)' in out
    fp32, fp16 = (float(v) for v in re.findall(DIFF, out))
    assert fp32 <= 1e-4 and fp16 <= 1e-2

    newest = build_eval_network(opt['netG'], os.path.join(opt['path']['models'], '8_E.pth'), torch.device('cpu'), 'w')
    model = onnx.load(os.path.join(folder, '8_E.onnx'))
    (inp,), (outp,) = model.graph.input, model.graph.output
    assert (inp.name, outp.name) == ('input', 'output')
    dims = inp.type.tensor_type.shape.dim
    assert [bool(d.dim_param) for d in dims] == [True, False, True, True] and dims[1].dim_value == 3
    assert onnx_vs_torch(os.path.join(folder, '8_E.onnx'), newest, (3, 3, 37, 50)) <= 1e-4  # any N, H, W
    assert onnx_vs_torch(os.path.join(folder, '8_E_fp16.onnx'), newest, (1, 3, 21, 30)) <= 1e-2
    assert any(t.data_type == onnx.TensorProto.FLOAT16
               for t in onnx.load(os.path.join(folder, '8_E_fp16.onnx')).graph.initializer)

    from safetensors import safe_open
    with safe_open(os.path.join(folder, '8_E.safetensors'), 'pt') as f:
        meta = f.metadata()
    assert meta['net_type'] == 'dncnn' and json.loads(meta['netG'])['nc'] == 8 and meta['source'] == '8_E.pth'
    state = load(os.path.join(folder, '8_E.safetensors'))
    assert set(state) == set(newest.state_dict())
    assert all(torch.equal(state[k], v) for k, v in newest.state_dict().items())


def test_safetensors_load_through_main_test_and_pretrained_netG_with_identical_outputs(tmp_path, demo_images,
                                                                                       capsys, one_thread):
    need_onnx()
    opt_path, opt = make_run(tmp_path, demo_images)
    out_dir = tmp_path / 'out'
    assert export_run(capsys, '--opt', opt_path, '--weights', os.path.join(opt['path']['models'], '4_G.pth'),
                      '--out', out_dir, '--no-check')[0] == 0
    st = str(out_dir / '4_G.safetensors')
    tables = []
    for weights, name in ((os.path.join(opt['path']['models'], '4_G.pth'), 'pth'), (st, 'st')):
        res = run_main('main_test', ['--opt', opt_path, '--weights', weights, '--out', str(tmp_path / name),
                                     '--no-images'])
        assert res.returncode == 0, res.stderr[-2000:]
        with open(tmp_path / name / 'results.csv') as f:
            tables.append(list(csv.reader(f)))
    assert tables[0] == tables[1] and len(tables[0]) == 10
    assert export_run(capsys, '--opt', opt_path, '--weights', st, '--out', tmp_path / 'again', '--no-check')[0] == 0
    again = load(str(tmp_path / 'again' / '4_G.safetensors'))                  # --weights takes safetensors too
    assert all(torch.equal(again[k], v) for k, v in load(st).items())

    x = torch.rand(1, 3, 24, 24)
    from_pth = build_eval_network(opt['netG'], os.path.join(opt['path']['models'], '4_G.pth'), torch.device('cpu'), 'w')
    # channels-first as build_eval_network builds it: channels-last (the CPU default) rounds the convolutions
    # differently; what is compared is the weights each file loads
    started = ModelPlain(read_options(opt_path, [f'path.pretrained_netG={st}', f'path.pretrained_netE={st}',
                                                 'train.channels_last=false']), torch.device('cpu'))
    with torch.no_grad():
        assert torch.equal(started.net_g.eval()(x), from_pth(x))
        assert torch.equal(started.ema.module.eval()(x), from_pth(x))


def test_swinir_exports_with_dynamic_height_and_width_through_its_window_padding(tmp_path, demo_images, capsys,
                                                                                  one_thread):
    """Window 6: the random check input (48x80) and the trace input (64x64) are padded by different amounts,
    and the shifted-window mask is built for each size in the graph."""
    need_onnx()
    netG = {'net_type': 'swinir', 'upscale': 1, 'in_chans': 3, 'img_size': 12, 'window_size': 6, 'depths': [2],
            'embed_dim': 12, 'num_heads': [2], 'mlp_ratio': 2, 'upsampler': None}
    opt_path, opt = make_run(tmp_path, demo_images, netG, test_set=False)
    code, out, err = export_run(capsys, '--opt', opt_path, '--out', tmp_path / 'x')
    assert code == 0, err
    assert 'a random 48x80 image (no datasets.test section)' in out
    assert float(re.findall(DIFF, out)[0]) <= 1e-4
    net = build_eval_network(opt['netG'], str(tmp_path / 'x' / '8_E.safetensors'), torch.device('cpu'), 'w')
    assert onnx_vs_torch(str(tmp_path / 'x' / '8_E.onnx'), net, (2, 3, 25, 31)) <= 1e-4


@pytest.mark.parametrize('net_type', ['edsr', 'srvggnet'])
def test_a_new_architecture_exports_and_matches_pytorch_at_another_size(tmp_path, demo_images, capsys, one_thread,
                                                                        net_type):
    need_onnx()
    netG = {'edsr': {'net_type': 'edsr', 'num_feat': 8, 'num_block': 2, 'upscale': 2},
            'srvggnet': {'net_type': 'srvggnet', 'num_feat': 8, 'num_conv': 2, 'upscale': 2}}[net_type]
    if net_type == 'srvggnet':
        need_spandrel()
    opt_path, opt = make_run(tmp_path, demo_images, netG, test_set=False, scale=2)
    code, out, err = export_run(capsys, '--opt', opt_path, '--out', tmp_path / 'x')
    assert code == 0, err
    assert float(re.findall(DIFF, out)[0]) <= 1e-4
    net = build_eval_network(opt['netG'], str(tmp_path / 'x' / '8_E.safetensors'), torch.device('cpu'), 'w')
    assert onnx_vs_torch(str(tmp_path / 'x' / '8_E.onnx'), net, (2, 3, 19, 26)) <= 1e-4


def test_a_check_above_the_tolerance_fails_in_one_line_and_writes_nothing(tmp_path, demo_images, capsys, monkeypatch,
                                                                          one_thread):
    need_onnx()
    opt_path, opt = make_run(tmp_path, demo_images)
    real = export.onnx_output
    monkeypatch.setattr(export, 'onnx_output', lambda *a: real(*a) + 1e-3)   # as a wrong graph would
    code, out, err = export_run(capsys, '--opt', opt_path, '--out', tmp_path / 'x')
    assert code == 2 and err.count('\n') == 1
    assert '8_E.onnx: max|diff| = 0.001 against PyTorch exceeds 0.0001; nothing written' in err
    assert not os.path.exists(tmp_path / 'x') or os.listdir(tmp_path / 'x') == []


def test_a_failed_write_removes_the_files_written_before_it(tmp_path, monkeypatch):
    real = export.atomic_write_bytes

    def full_disk_on_the_second(path, *a, **k):
        if path.endswith('b.onnx'):
            raise OSError(28, 'No space left on device')
        real(path, *a, **k)
    monkeypatch.setattr(export, 'atomic_write_bytes', full_disk_on_the_second)
    with pytest.raises(OSError):
        export.write_all([(str(tmp_path / 'a.onnx'), b'1'), (str(tmp_path / 'b.onnx'), b'2')])
    assert os.listdir(tmp_path) == []


def test_a_network_whose_forward_branches_on_its_input_size_is_one_line_naming_it():
    need_onnx()

    class SizeBranch(nn.Module):
        def forward(self, x):
            return x * 2 if x.shape[-1] > 40 else x  # a different graph for large inputs

    with pytest.raises(UserError, match=r'^netG \(sizebranch\): cannot be exported to ONNX with dynamic height and '
                                        r'width: .+') as e:
        export.export_onnx(SizeBranch(), torch.rand(2, 3, 64, 64), 18, 'sizebranch')
    assert '\n' not in str(e.value)


def test_size_exports_a_network_whose_forward_depends_on_the_input_size_for_that_size():
    need_onnx()
    import onnxruntime as ort

    class SizeBranch(nn.Module):
        def forward(self, x):
            return x * 2 if x.shape[-1] > 40 else x

    with pytest.raises(UserError, match=r'; --size HxW exports it for one input size$'):
        export.export_onnx(SizeBranch(), torch.rand(2, 3, 64, 64), 18, 'sizebranch')
    model = export.export_onnx(SizeBranch(), torch.rand(2, 3, 48, 56), 18, 'sizebranch', dynamic='batch')
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims][1:] == [3, 48, 56] and dims[0].dim_param  # any batch
    x = np.random.default_rng(0).random((3, 3, 48, 56), dtype=np.float32)
    out = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider']).run(None, {'input': x})
    np.testing.assert_allclose(out[0], 2 * x, rtol=1e-6)


def test_a_run_of_a_network_that_pads_to_its_multiple_exports_with_size(tmp_path, demo_images, capsys, one_thread):
    """DRUNet pads its input to a multiple of 8 with a size-dependent branch: not with dynamic sizes, but at one."""
    need_onnx()
    netG = {'net_type': 'drunet', 'in_nc': 4, 'out_nc': 3, 'nc': [8, 8, 8, 8], 'nb': 1}
    opt_path, opt = make_run(tmp_path, demo_images, netG, test_set=False)
    code, out, err = export_run(capsys, '--opt', opt_path, '--out', tmp_path / 'd')
    assert code == 2 and 'netG (drunet): cannot be exported to ONNX with dynamic height and width' in err
    assert err.rstrip().endswith('--size HxW exports it for one input size') and err.count('\n') == 1
    code, out, err = export_run(capsys, '--opt', opt_path, '--out', tmp_path / 'x', '--size', '40x52')
    assert code == 0, err
    assert '(opset 18, 40x52 inputs)' in out and 'the graph takes any batch size' in out
    assert '(traced at 2x4x40x52)' in out
    assert float(re.findall(DIFF, out)[0]) <= 1e-4 and 'on a 1x4x40x52 input' in out
    net = build_eval_network(opt['netG'], str(tmp_path / 'x' / '8_E.safetensors'), torch.device('cpu'), 'w')
    assert onnx_vs_torch(str(tmp_path / 'x' / '8_E.onnx'), net, (3, 4, 40, 52)) <= 1e-4
    with pytest.raises(SystemExit):
        export.parse_args(['--opt', opt_path, '--size', '40'])
    assert "'40' is not HxW with positive integers, e.g. 256x256" in capsys.readouterr().err


def test_size_exports_one_image_at_a_time_a_network_that_also_depends_on_the_batch_size(tmp_path, demo_images, capsys,
                                                                                           one_thread):
    """Restormer pads to its multiple and reshapes by its batch size: at a fixed size its graph is for batch 1."""
    need_onnx()
    import onnx
    netG = {'net_type': 'restormer', 'dim': 8, 'num_blocks': [1, 1, 1, 1], 'num_refinement_blocks': 1,
            'heads': [1, 2, 2, 4]}
    opt_path, opt = make_run(tmp_path, demo_images, netG)
    code, out, err = export_run(capsys, '--opt', opt_path, '--out', tmp_path / 'x', '--size', '32x32')
    assert code == 0, err
    assert 'the graph takes one image at a time (batch 1): with a dynamic batch, its forward depends on' in out
    assert "on the first test input's top-left 32x32" in out
    assert float(re.findall(DIFF, out)[0]) <= 1e-4 and '(traced at 1x3x32x32)' in out
    dims = onnx.load(str(tmp_path / 'x' / '8_E.onnx')).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [1, 3, 32, 32]
    net = build_eval_network(opt['netG'], str(tmp_path / 'x' / '8_E.safetensors'), torch.device('cpu'), 'w')
    assert onnx_vs_torch(str(tmp_path / 'x' / '8_E.onnx'), net, (1, 3, 32, 32)) <= 1e-4


def test_a_network_that_replaces_its_own_weights_in_forward_is_one_line_naming_it():
    """SPAN re-parameterises its convolutions on every eval forward: torch.export would crash the process."""
    need_onnx()
    need_spandrel()
    from models.registry import build_network
    net = build_network({'net_type': 'span', 'num_in_ch': 3, 'num_out_ch': 3, 'feature_channels': 8}, 'netG').eval()
    with pytest.raises(UserError, match=r'^netG \(span\): cannot be exported to ONNX: its forward replaces its own '
                                        r'weights \(conv_1\.eval_conv\.weight'):
        export.export_onnx(net, torch.rand(2, 3, 64, 64), 18, 'span')


def test_window_attention_under_export_is_the_explicit_form_of_sdpa(monkeypatch):
    """What the exported graph computes (softmax(scale·q·kᵀ + bias + mask)·v written out) equals SDPA's result."""
    from models.networks.layers.window_attention import window_attention
    q, k, v = (torch.randn(4, 2, 16, 8) for _ in range(3))
    bias, mask = torch.randn(2, 16, 16), torch.randn(2, 16, 16)
    eager = window_attention(q, k, v, 0.3, bias, mask)
    monkeypatch.setattr(torch.compiler, 'is_exporting', lambda: True)
    assert torch.allclose(window_attention(q, k, v, 0.3, bias, mask), eager, atol=1e-5)


def test_bad_inputs_are_one_line(tmp_path, demo_images, capsys):
    need_onnx()
    raw = tiny_options(str(tmp_path / 'exp'), demo_images)
    opt_path = write_options(str(tmp_path / 'o.json'), raw)
    code, _, err = export_run(capsys, '--opt', opt_path)
    assert code == 2 and 'no checkpoint found; train first or pass --weights' in err and err.count('\n') == 1
    bad = tmp_path / 'bad.safetensors'
    bad.write_bytes(b'\x10\x00\x00\x00\x00\x00\x00\x00{"a": broken json')
    code, _, err = export_run(capsys, '--opt', opt_path, '--weights', bad)
    assert code == 2 and f'--weights: {bad}: damaged safetensors file' in err and err.count('\n') == 1

    ffdnet = dict(raw, model='plain2', netG={'net_type': 'ffdnet', 'in_nc': 3, 'out_nc': 3, 'nc': 8, 'nb': 3})
    ffdnet['datasets'] = {}
    code, _, err = export_run(capsys, '--opt', write_options(str(tmp_path / 'f.json'), ffdnet), '--weights', bad)
    assert code == 2 and err.count('\n') == 1
    assert 'model: "plain2" runs netG (ffdnet) with inputs other than one image (ConditionedRestorer)' in err


def test_missing_onnx_packages_are_one_line_saying_what_to_install(tmp_path, demo_images):
    need_onnx()  # onnx and onnxscript present: the one missing is onnxruntime
    opt_path, _ = make_run(tmp_path, demo_images)
    code = ("import sys, runpy; sys.modules['onnxruntime'] = None; "
            f"sys.argv = ['export.py', '--opt', {opt_path!r}]; runpy.run_path({SCRIPT!r}, run_name='__main__')")
    res = run([PY, '-c', code])
    assert res.returncode == 2 and res.stdout == ''
    assert res.stderr == ('error: export needs onnxruntime, which is not installed here; '
                          'pip install onnx onnxruntime onnxscript (pinned in requirements.txt)\n')


def test_a_safetensors_file_loads_as_a_state_dict_and_a_mismatch_is_one_line(tmp_path):
    from safetensors.torch import save_file
    from models.networks.dncnn import DnCNN
    net = DnCNN(in_nc=3, out_nc=3, nc=8, nb=3, act_mode='R')
    save_file(net.state_dict(), str(tmp_path / 'w.st'))        # recognised by its content, not its name
    state = load(str(tmp_path / 'w.st'))
    assert all(torch.equal(state[k], v) for k, v in net.state_dict().items())
    other = DnCNN(in_nc=3, out_nc=3, nc=16, nb=3, act_mode='R')
    with pytest.raises(UserError, match=r'^path\.pretrained_netG: .*w\.st does not fit netG'):
        load_weights(other, str(tmp_path / 'w.st'), True, 'params', 'path.pretrained_netG')


def test_format_spandrel_writes_the_file_chainner_and_comfyui_open_with_our_output(tmp_path, demo_images, capsys,
                                                                                  one_thread):
    """KAIR's RRDB, whose layout spandrel cannot load as it is: renamed, read back by spandrel's ModelLoader (what
    chaiNNer and ComfyUI call), its model gives the run's network's output. No ONNX tools are needed."""
    spandrel = need_spandrel()
    netG = {'net_type': 'rrdb', 'in_nc': 3, 'out_nc': 3, 'nc': 8, 'nb': 1, 'gc': 32}
    opt_path, opt = make_run(tmp_path, demo_images, netG, test_set=False, scale=2)
    code, out, err = export_run(capsys, '--opt', opt_path, '--format', 'spandrel')
    assert code == 0, err
    folder = os.path.join(opt['path']['task'], 'export')
    assert os.listdir(folder) == ['8_E_spandrel.safetensors']                 # the newest save's EMA weights, alone
    assert 'spandrel reads rrdb from' in out and 'as ESRGAN (scale 2)' in out
    assert re.search(r"spandrel's ESRGAN: max\|diff\| = \S+ against rrdb \(tolerance 0\.0001\) on a random 48x80 "
                     r"image", out)
    path = os.path.join(folder, '8_E_spandrel.safetensors')
    descriptor = spandrel.ModelLoader().load_from_file(path)
    ours = build_eval_network(opt['netG'], os.path.join(opt['path']['models'], '8_E.pth'), torch.device('cpu'), 'w')
    x = torch.rand(1, 3, 20, 28)
    with torch.no_grad():
        assert torch.allclose(descriptor.model.eval()(x), ours(x), rtol=0, atol=1e-6)
    from safetensors import safe_open
    with safe_open(path, 'pt') as f:
        meta = f.metadata()
    assert 'net_type' not in meta and meta['source'] == '8_E.pth'         # not read by our tools as our layout
    assert json.loads(meta['trained_as'])['net_type'] == 'rrdb'
    code, out, err = export_run(capsys, '--opt', opt_path, '--format', 'spandrel', '--no-check',
                                '--out', tmp_path / 'n')
    assert code == 0 and 'as ESRGAN (scale 2)' in out and 'max|diff|' not in out         # read by spandrel, not run
    unchecked, checked = load(str(tmp_path / 'n' / '8_E_spandrel.safetensors')), load(path)
    assert unchecked.keys() == checked.keys() and all(torch.equal(unchecked[k], v) for k, v in checked.items())


def test_format_spandrel_refuses_a_network_spandrel_does_not_recognise_and_onnx_options_in_one_line(
        tmp_path, demo_images, capsys):
    need_spandrel()
    netG = {'net_type': 'edsr', 'num_feat': 8, 'num_block': 1, 'upscale': 2}
    opt_path, opt = make_run(tmp_path, demo_images, netG, test_set=False, scale=2)
    code, out, err = export_run(capsys, '--opt', opt_path, '--format', 'spandrel', '--out', tmp_path / 'x')
    assert code == 2 and err.count('\n') == 1 and not os.path.exists(tmp_path / 'x')
    assert err.startswith('error: netG (edsr): spandrel 0.4.2 recognises none of its architectures in these weights, '
                          'so chaiNNer and ComfyUI cannot open them; export it to ONNX instead')
    for flag in (['--fp16'], ['--size', '32x32'], ['--opset', '17']):
        with pytest.raises(SystemExit):
            export.parse_args(['--opt', opt_path, '--format', 'spandrel', *flag])
        assert f'{flag[0]} is an option of the ONNX graph; --format spandrel writes weights only' in \
            capsys.readouterr().err
    assert export.parse_args(['--opt', opt_path]).opset == 18
