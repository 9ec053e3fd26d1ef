"""Export a trained netG to ONNX (fp32, optionally fp16) and safetensors, checked with onnxruntime; or, with
`--format spandrel`, to the weights file chaiNNer and ComfyUI open, checked with spandrel.

    python scripts/export.py --opt options/train_dncnn_demo.json [--weights W.pth|W.safetensors]
                             [--set KEY.PATH=VALUE] [--out DIR] [--fp16] [--opset 18] [--no-check] [--size HxW]
    python scripts/export.py --opt X.json --format spandrel [--weights W] [--set K=V] [--out DIR] [--no-check]

main_test.py's conventions: the option file the model was trained with (`--set` overrides), and
without `--weights` the newest checkpoint of the run (its EMA weights when present). The network is
built as main_test builds it (`build_eval_network`: strict weights, `merge_bn` folded) and written to
`--out` (default `<root>/<task>/export/`) as

  <name>.onnx          input 'input' [N, C, H, W] with dynamic N, H and W, output 'output';
  <name>_fp16.onnx     with --fp16: fp16 weights and arithmetic, float32 input and output;
  <name>.safetensors   the state_dict, with metadata `net_type` and `netG` (JSON): what the file is;

`<name>` is the weights file's name without extension (e.g. 8_E). With `--size HxW` the height and width
are fixed (the batch stays dynamic where the network allows it, else it is 1): the way to export a network
whose forward pads or branches on the input size, for a deployment that feeds tiles of one size. The
graph is traced by torch.export with symbolic sizes (here, not inside torch.onnx.export, which would
quietly narrow the dynamic sizes of a forward that branches on them: here that is one line naming the
net_type) and translated by
`torch.onnx.export(dynamo=True)` (onnxscript). Before anything is written, onnxruntime
(CPU) runs it on the test set's first input (or a fixed random image), cropped to at most 96 pixels a
side and at a size other than the trace size (the dynamic height and width are what is checked; with
`--size`, at that size, with another batch size than the trace's unless the graph takes batch 1 only), and
`max|diff|` against PyTorch is printed; above 1e-4 (fp32) or 1e-2 (fp16) nothing is written and the
exit code is 2. Files are written atomically, and a failure removes the ones this run wrote.

`--format spandrel` writes `<name>_spandrel.safetensors` alone: the weights in the layout spandrel detects (renamed
where the network declares another, models/spandrel_file.py) with metadata `trained_as` (our netG, JSON) and
`source`. spandrel reads it before it is written, and its model must give our network's output on the check
input (--no-check: it is only read); a network spandrel does not know, or reads otherwise, is one line (exit 2).
Exit codes: 0 done, 2 a problem (one line on stderr), 5 a write failed for lack of space.
"""
import argparse
import contextlib
import copy
import io
import json
import logging
import os
import sys
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from data.registry import build_dataset  # noqa: E402
from models.network_loading import build_eval_network  # noqa: E402
from models.registry import MODELS  # noqa: E402
from models.restorer import ImageRestorer  # noqa: E402
from models.spandrel_file import TOLERANCE as SPANDREL_TOLERANCE  # noqa: E402
from models.spandrel_file import spandrel_difference, spandrel_file, spandrel_size  # noqa: E402
from option_rules import read_options  # noqa: E402
from utils.checkpoint import UNSAFE_FLAG, atomic_write_bytes, newest_weights, safetensors_data  # noqa: E402
from utils.diskspace import NoSpaceLeft  # noqa: E402
from utils.errors import UserError, first_line  # noqa: E402
from utils.exit_codes import EXIT_USER_ERROR, EXIT_WRITE_FAILED  # noqa: E402
from utils.image import to_float_image  # noqa: E402
from utils.progress import Steps  # noqa: E402

FP32_TOLERANCE = 1e-4   # max|ONNX - PyTorch| of the fp32 file: float rounding only
FP16_TOLERANCE = 1e-2   # the fp16 file against PyTorch fp32: 1% of the [0, 1] range, about 2.5 of 255 levels
CHECK_SIDE = 96         # the check input is cropped to at most this many pixels a side (onnxruntime on CPU)
CROP_STEP = 32          # ... by multiples of this, so that its divisibility by 2, 4, .., 32 is kept
TRACE_SIDES = (64, 32)  # the trace input's side: the first whose square is not the check size
RANDOM_CHECK = (48, 80)  # the check size without a test image: multiples of 16, not square
MIN_SIDE = 16           # the exported graph is for inputs at least this high and wide (see min_side)
REQUIREMENT = 'pip install onnx onnxruntime onnxscript (pinned in requirements.txt)'
DEFAULT_OPSET = 18
ONNX_ONLY = ('--fp16', '--opset', '--size')  # options of the ONNX graph: refused with --format spandrel


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--opt', required=True, help='the option file the model was trained with')
    p.add_argument('--weights', default=None,
                   help='a _G.pth/_E.pth or .safetensors file (default: newest of the run)')
    p.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE')
    p.add_argument('--out', default=None, help='output folder (default: <root>/<task>/export)')
    p.add_argument('--format', choices=('onnx', 'spandrel'), default='onnx',
                   help='onnx (default): <name>.onnx and <name>.safetensors; spandrel: <name>_spandrel.safetensors, '
                        'the weights chaiNNer and ComfyUI open')
    p.add_argument('--fp16', action='store_true', help='also write <name>_fp16.onnx')
    p.add_argument('--opset', type=int, default=None, help=f'ONNX opset (default {DEFAULT_OPSET})')
    p.add_argument('--no-check', action='store_true',
                   help='write without running onnxruntime (spandrel: without comparing its output with ours)')
    p.add_argument('--size', type=fixed_size, default=None, metavar='HxW',
                   help='fix the input height and width (the batch stays dynamic where the network allows it, '
                        'else it is 1), e.g. 256x256: for networks whose forward depends on the input size')
    p.add_argument(UNSAFE_FLAG, dest='allow_unsafe_load', action='store_true')
    args = p.parse_args(argv)
    given = [flag for flag, value in zip(ONNX_ONLY, (args.fp16, args.opset, args.size)) if value not in (False, None)]
    if args.format == 'spandrel' and given:
        p.error(f'{given[0]} is an option of the ONNX graph; --format spandrel writes weights only')
    if args.opset is None:
        args.opset = DEFAULT_OPSET
    return args


def fixed_size(text: str) -> Tuple[int, int]:
    """--size's value: HxW, each at least 1."""
    parts = text.lower().split('x')
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f'{text!r} is not HxW with positive integers, e.g. 256x256')
    return int(parts[0]), int(parts[1])


def import_onnx_tools(check: bool, fp16: bool) -> None:
    """The exporter's dependencies (not needed for training, so not imported by anything else): one line
    naming what to install when one is missing."""
    names = ['onnx', 'onnxscript'] + (['onnxruntime'] if check or fp16 else [])
    for name in names:
        try:
            __import__(name)
        except ImportError:
            raise UserError(f'export needs {name}, which is not installed here; {REQUIREMENT}') from None


def check_model_type(opt: Dict[str, Any]) -> None:
    """Only networks fed one image (the model's restorer runs `net(L)`) have an [N, C, H, W] -> image graph."""
    cls = MODELS.get(opt['model'], 'model').restorer_class
    if cls.inputs is not ImageRestorer.inputs or cls.restore is not ImageRestorer.restore:
        raise UserError(f'model: "{opt["model"]}" runs netG ({opt["netG"]["net_type"]}) with inputs other than one '
                        f'image ({cls.__name__}); export handles networks fed one [N, C, H, W] image')


def channel_candidates(net: nn.Module, opt: Dict[str, Any]) -> List[int]:
    """Channel counts netG may take, likeliest first: those of its first convolution (an input conv with
    extra map channels, e.g. FDnCNN's noise level), then the options' n_channels."""
    first = next((m.in_channels for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Conv3d))), None)
    return list(dict.fromkeys(c for c in (first, int(opt['n_channels'])) if c))


def torch_output(net: nn.Module, x: torch.Tensor, net_type: str) -> torch.Tensor:
    """net(x) in PyTorch (float32, no grad); a failure is one line, not a traceback."""
    try:
        with torch.no_grad():
            return net(x).float()
    except Exception as e:  # whatever the network raises on an input it does not take
        raise UserError(f'netG ({net_type}): PyTorch itself fails on a {shape_text(x)} input: '
                        f'{first_line(e)[:300]}') from None


def check_input(opt: Dict[str, Any], net: nn.Module,
                size: Optional[Tuple[int, int]] = None) -> Tuple[torch.Tensor, str]:
    """(1xCxHxW float input, what it is): the test set's first input, cropped from its bottom/right to at
    most CHECK_SIDE a side by multiples of CROP_STEP (with `size`, to exactly that size, when it is that large),
    or else a fixed random image (RANDOM_CHECK or `size`) with the first of `channel_candidates` that the
    network takes."""
    test = opt['datasets']['test'] if 'test' in opt['datasets'] else None
    reason = 'no datasets.test section'
    if test is not None:
        try:
            dataset = build_dataset(test)
            L = to_float_image(dataset[0]['L']) if len(dataset) else None
            reason = 'datasets.test is empty'
        except (UserError, OSError) as e:
            L, reason = None, f'datasets.test: {first_line(e)[:160]}'
        if L is not None and L.dim() == 3:
            if size is None:
                h, w = (s - CROP_STEP * max(0, -(-(s - CHECK_SIDE) // CROP_STEP)) for s in L.shape[-2:])
                return L[None, :, :h, :w].float().contiguous(), f'the first test input, {h}x{w}'
            h, w = size
            if L.shape[-2] >= h and L.shape[-1] >= w:
                return L[None, :, :h, :w].float().contiguous(), f'the first test input\'s top-left {h}x{w}'
            reason = f'the first test input, {L.shape[-2]}x{L.shape[-1]}, is smaller than {h}x{w}'
        elif L is not None:
            reason = f'datasets.test gives {L.dim()}-d inputs'
    side = size or RANDOM_CHECK
    candidates = channel_candidates(net, opt)
    for channels in candidates:
        x = torch.rand(1, channels, *side, generator=torch.Generator().manual_seed(0))
        try:
            torch_output(net, x, opt['netG']['net_type'])
        except UserError:
            if channels != candidates[-1]:
                continue
            raise
        return x, f'a random {side[0]}x{side[1]} image ({reason})'
    raise UserError(f'netG ({opt["netG"]["net_type"]}): no input channel count to check it with; give a datasets.test')


def trace_input(x: torch.Tensor, size: Optional[Tuple[int, int]] = None) -> torch.Tensor:
    """A fixed random input of batch 2 (torch.export specialises sizes 0 and 1) and a square side other than
    the check input's, so that the check runs the graph at sizes it was not traced at; or of the fixed `size`."""
    if size is None:
        side = next(s for s in TRACE_SIDES if (s, s) != tuple(x.shape[-2:]))
        size = (side, side)
    return torch.rand(2, x.shape[1], *size, generator=torch.Generator().manual_seed(1))


@contextlib.contextmanager
def quiet() -> Any:
    """The exporter's progress prints, warnings and torch.export's guard logs stay out of the output: a
    failure is reported as one line by `export_onnx`."""
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):  # torch.export prints a failed graph to stderr
            warnings.simplefilter('ignore')
            yield
    finally:
        logging.disable(logging.NOTSET)


class SizeDependent(UserError):
    """torch.export found that the forward depends on a size the graph was to leave dynamic (`reason`: what)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def export_onnx(net: nn.Module, x: torch.Tensor, opset: int, net_type: str, dynamic: str = 'any') -> Any:
    """The onnx.ModelProto of `net` for inputs like `x` with dynamic batch, height and width (`dynamic` 'any'),
    a dynamic batch at the height and width of `x` ('batch'), or exactly the sizes of `x` ('none').

    torch.export traces with symbolic sizes, non-strict first (as torch.onnx does), then strict (dynamo).
    A forward that branches on its input's size violates the dynamic dims: that is one line naming the
    net_type and torch's reason. torch.export is called here rather than by torch.onnx.export, which on
    such a violation silently narrows the dims to what was traced (a graph wrong at other sizes).
    """
    check_no_self_modification(net, x, net_type)
    hint, shapes = '', None
    if dynamic == 'none':
        fail = f'netG ({net_type}): cannot be exported to ONNX for {shape_text(x)} inputs'
    elif dynamic == 'batch':
        fail = f'netG ({net_type}): cannot be exported to ONNX at {x.shape[-2]}x{x.shape[-1]} with a dynamic batch'
        shapes = ({0: torch.export.Dim('batch')},)
    else:
        side = min_side(net)
        shapes = ({0: torch.export.Dim('batch'), 2: torch.export.Dim('height', min=side),
                   3: torch.export.Dim('width', min=side)},)
        fail = f'netG ({net_type}): cannot be exported to ONNX with dynamic height and width'
        hint = '; --size HxW exports it for one input size'
    program = None
    with quiet(), torch.no_grad(), size_oblivious():
        try:
            program = torch.export.export(net, (x,), dynamic_shapes=shapes, strict=False)
        except Exception as e:  # torch.export raises many kinds; a constraint violation is torch's UserError
            if type(e).__name__ == 'UserError' or 'Constraints violated' in str(e):
                reason = export_reason(e)
                raise SizeDependent(f'{fail}: {reason}{hint}', reason) from None
            first = e
        if program is None:
            try:
                program = torch.export.export(net, (x,), dynamic_shapes=shapes, strict=True)
            except Exception:
                raise UserError(f'{fail}: {export_reason(first)}{hint}') from None
        try:
            onnx_program = torch.onnx.export(program, (x,), None, dynamo=True, input_names=['input'],
                                             output_names=['output'], opset_version=opset, verbose=False,
                                             optimize=True)
        except Exception as e:
            raise UserError(f'netG ({net_type}): the traced graph cannot be translated to ONNX opset {opset}: '
                            f'{export_reason(e)}') from None
    return onnx_program.model_proto


def check_no_self_modification(net: nn.Module, x: torch.Tensor, net_type: str) -> None:
    """A forward that replaces its own weights in eval mode (SPAN re-parameterises its convolutions on every
    call) cannot be traced: torch.export crashes the process on it (torch 2.14), so it is refused first."""
    before = {name: t.data_ptr() for name, t in [*net.named_parameters(), *net.named_buffers()]}
    torch_output(net, x[:1], net_type)
    after = {name: t.data_ptr() for name, t in [*net.named_parameters(), *net.named_buffers()]}
    changed = [name for name in before if after.get(name) != before[name]]
    if changed:
        raise UserError(f'netG ({net_type}): cannot be exported to ONNX: its forward replaces its own weights '
                        f'({changed[0]}, re-parameterisation on every call), which torch.export cannot trace')


def size_oblivious() -> Any:
    """torch.export's size-oblivious reasoning, as torch.onnx.export sets it: guards that hold for every size
    of at least 2 (a reshape's view check on a padded size, say) are not refused as if they narrowed the
    dims. A real branch on a size still is (tests/test_export.py)."""
    from torch.fx.experimental import _config
    return _config.patch(backed_size_oblivious=True)


def min_side(net: nn.Module) -> int:
    """The smallest height and width the graph is traced for: MIN_SIDE, or the network's padding multiple or
    window when larger. A lower bound lets torch.export prove that a pad to the next multiple of a window
    is smaller than the input (reflect padding requires it) instead of failing on that guard."""
    sizes = [getattr(net, name, 0) for name in ('pad_multiple', 'window_size')]
    return max([MIN_SIDE] + [s for s in sizes if isinstance(s, int)])


def export_reason(e: BaseException) -> str:
    """The telling line of an export error: torch wraps the cause in a long report."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if any('Constraints violated' in ln for ln in lines):  # the first violated guard says what branched
        detail = next((ln[2:] for ln in lines if ln.startswith('- ')), lines[0])
        return f'its forward depends on the input size ({detail})'[:400]
    for i, ln in enumerate(lines):
        if ln.startswith('## Exception summary') and i + 1 < len(lines):
            return lines[i + 1][:300]
    return f'{type(e).__name__}: {lines[0] if lines else ""}'[:300]


def to_fp16(model: Any) -> Any:
    """The fp32 graph with fp16 weights and arithmetic, float32 input and output (onnxruntime's converter
    keeps numerically fragile ops in fp32). Converting the graph, not re-exporting a half network, needs no
    fp16 CPU kernels in PyTorch and gives the same graph structure as the fp32 file."""
    from onnxruntime.transformers.float16 import convert_float_to_float16
    with quiet():
        return convert_float_to_float16(copy.deepcopy(model), keep_io_types=True)


def serialize(model: Any, name: str) -> bytes:
    try:
        return model.SerializeToString()
    except ValueError as e:  # protobuf's 2 GB limit for one message
        raise UserError(f'{name}: the ONNX model is too large for one file ({first_line(e)[:120]})') from None


def onnx_output(data: bytes, x: torch.Tensor, name: str) -> np.ndarray:
    """`output` of the serialized model on `x` in onnxruntime (CPU); a failure is one line."""
    import onnxruntime as ort
    try:
        session = ort.InferenceSession(data, providers=['CPUExecutionProvider'])
        return session.run(['output'], {'input': x.numpy()})[0]
    except Exception as e:  # onnxruntime raises its own exception types
        raise UserError(f'{name}: onnxruntime cannot run the exported graph on a {shape_text(x)} input: '
                        f'{first_line(e)[:300]}') from None


def shape_text(x: Any) -> str:
    return 'x'.join(str(s) for s in x.shape)


def compare(name: str, out: np.ndarray, ref: torch.Tensor, tolerance: float, x: torch.Tensor,
            traced: torch.Tensor, say: Callable[[str], None] = print) -> float:
    """max|ONNX - PyTorch|, said; a different shape or a difference above `tolerance` is a UserError."""
    if tuple(out.shape) != tuple(ref.shape):
        raise UserError(f'{name}: onnxruntime gives a {shape_text(out)} output for the {shape_text(x)} input, '
                        f'PyTorch {shape_text(ref)} (a size fixed at the trace size {shape_text(traced)}?)')
    diff = float(np.abs(out.astype(np.float64) - ref.double().numpy()).max()) if out.size else 0.0
    say(f'{name}: max|diff| = {diff:.3g} against PyTorch (tolerance {tolerance:g}) on a {shape_text(x)} input '
        f'(traced at {shape_text(traced)})')
    if not diff <= tolerance:  # NaN fails too
        raise UserError(f'{name}: max|diff| = {diff:.3g} against PyTorch exceeds {tolerance:g}; nothing written')
    return diff


def safetensors_bytes(net: nn.Module, netG: Dict[str, Any], source: str) -> bytes:
    """The state_dict as safetensors, with metadata saying what network it is (all strings, as the format
    requires): `net_type` and `netG`, which main_test and path.pretrained_netG read."""
    kwargs = {k: v for k, v in netG.items() if not k.startswith('_')}
    metadata = {'net_type': str(netG['net_type']), 'netG': json.dumps(kwargs, sort_keys=True),
                'source': os.path.basename(source)}
    return safetensors_data(net.state_dict(), metadata, f'netG ({netG["net_type"]})')


def write_all(files: List[Tuple[str, bytes]]) -> None:
    """Each file atomically; if one fails, the ones written before it are removed: all or none."""
    written: List[str] = []
    try:
        for path, data in files:
            atomic_write_bytes(path, lambda f, data=data: f.write(data), size=len(data))
            written.append(path)
    except BaseException:
        for path in written:
            os.unlink(path)
        raise


def run_export(opt: Dict[str, Any], args: argparse.Namespace, say: Optional[Callable[[str], None]] = None) -> List[str]:
    """Build, export, check, write; returns the paths written. Progress: a bar of these steps on a terminal
    (utils/progress.py `Steps`), and the lines given to `say` (default: printed above the bar)."""
    if args.format == 'spandrel':
        with Steps(3, 'export', enabled=say is None) as steps:
            return spandrel_steps(opt, args, say or steps.say, steps)
    with Steps(3 + args.fp16 + (not args.no_check), 'export', enabled=say is None) as steps:
        return export_steps(opt, args, say or steps.say, steps)


def load_network(opt: Dict[str, Any], args: argparse.Namespace, steps: Steps) -> Tuple[str, nn.Module]:
    """(the weights file, netG built from it as main_test builds it), for a model that feeds netG one image; starts
    the step `steps` shows while it builds."""
    check_model_type(opt)
    weights = args.weights or newest_weights(opt['path']['models'])
    steps.start(f'building {opt["netG"]["net_type"]}')
    net = build_eval_network(opt['netG'], weights, torch.device('cpu'), '--weights', args.allow_unsafe_load,
                             opt['merge_bn'])
    return weights, net


def export_steps(opt: Dict[str, Any], args: argparse.Namespace, say: Callable[[str], None], steps: Steps) -> List[str]:
    import_onnx_tools(not args.no_check, args.fp16)
    net_type = opt['netG']['net_type']
    weights, net = load_network(opt, args, steps)
    x, what = check_input(opt, net, args.size)
    steps.done()
    if args.size is not None:
        sizes = f'{args.size[0]}x{args.size[1]} inputs'
    else:
        sizes = f'inputs of at least {min_side(net)}x{min_side(net)} pixels'
    traced = trace_input(x, args.size)
    say(f'exporting {net_type} from {weights} (opset {args.opset}, {sizes})')
    steps.start('tracing and translating to ONNX')
    if args.size is None:
        model = export_onnx(net, traced, args.opset, net_type)
        say('the graph takes any batch size')
    else:
        try:
            model = export_onnx(net, traced, args.opset, net_type, dynamic='batch')
            say('the graph takes any batch size')
        except SizeDependent as e:  # a forward that also depends on the batch size: one image at a time
            traced = traced[:1]
            model = export_onnx(net, traced, args.opset, net_type, dynamic='none')
            say(f'the graph takes one image at a time (batch 1): with a dynamic batch, {e.reason}')
    name = os.path.splitext(os.path.basename(weights))[0]
    out_dir = args.out or os.path.join(opt['path']['task'], 'export')
    files = [(os.path.join(out_dir, f'{name}.onnx'), serialize(model, f'{name}.onnx'))]
    steps.done()
    if args.fp16:
        steps.start('converting to fp16')
        files.append((os.path.join(out_dir, f'{name}_fp16.onnx'), serialize(to_fp16(model), f'{name}_fp16.onnx')))
        steps.done()
    if not args.no_check:
        say(f'checking with onnxruntime on {what}')
        steps.start('checking with onnxruntime')
        ref = torch_output(net, x, net_type)
        for (path, data), tol in zip(files, (FP32_TOLERANCE, FP16_TOLERANCE)):
            compare(os.path.basename(path), onnx_output(data, x, os.path.basename(path)), ref, tol, x, traced, say)
        steps.done()
    steps.start('writing')
    files.append((os.path.join(out_dir, f'{name}.safetensors'), safetensors_bytes(net, opt['netG'], weights)))
    write_all(files)
    steps.done()
    for path, data in files:
        say(f'wrote {path} ({len(data) / 1e6:.2f} MB)')
    return [path for path, _ in files]


def spandrel_steps(opt: Dict[str, Any], args: argparse.Namespace, say: Callable[[str], None],
                   steps: Steps) -> List[str]:
    """--format spandrel: the weights in the layout spandrel detects, read back from the file's bytes as chaiNNer
    and ComfyUI read them, checked against netG (unless --no-check), written."""
    net_type = opt['netG']['net_type']
    weights, net = load_network(opt, args, steps)
    steps.done()
    steps.start('reading it with spandrel')
    data, descriptor = spandrel_file(net, opt['netG'], weights)
    arch = descriptor.architecture.id
    say(f'spandrel reads {net_type} from {weights} as {arch} (scale {descriptor.scale})')
    if not args.no_check:
        x, what = check_input(opt, net)
        size = spandrel_size(descriptor, *x.shape[-2:])
        if size != tuple(x.shape[-2:]):  # of a size spandrel's model takes without padding
            x, what = check_input(opt, net, size)
        diff = spandrel_difference(torch_output(net, x, net_type), descriptor, x, net_type)
        say(f'spandrel\'s {arch}: max|diff| = {diff:.3g} against {net_type} (tolerance {SPANDREL_TOLERANCE:g}) on '
            f'{what}')
    steps.done()
    steps.start('writing')
    name = os.path.splitext(os.path.basename(weights))[0]
    path = os.path.join(args.out or os.path.join(opt['path']['task'], 'export'), f'{name}_spandrel.safetensors')
    write_all([(path, data)])
    steps.done()
    say(f'wrote {path} ({len(data) / 1e6:.2f} MB): chaiNNer and ComfyUI (models/upscale_models) open it')
    return [path]


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        opt = read_options(args.opt, args.set)
        run_export(opt, args)
    except UserError as e:
        print(f'error: {e}', file=sys.stderr)
        return EXIT_USER_ERROR
    except NoSpaceLeft as e:
        print(f'error: writing the export failed: {e}', file=sys.stderr)
        return EXIT_WRITE_FAILED
    return 0


if __name__ == '__main__':
    sys.exit(main())
