"""Our network's weights as spandrel reads them: the file chaiNNer, ComfyUI and other spandrel-based tools open.

A network whose state_dict names differ from the layout spandrel detects declares that layout itself, with a
`spandrel_state_dict()` method (models/networks/rrdb.py: KAIR's RRDB, whose dense blocks' last conv spandrel names
`conv5.0`; rcan.py: BasicSR's RCAN, which spandrel reads in the original code's layout); any other network's
state_dict is spandrel's as it is (KAIR's DnCNN, DRUNet, RRDBNet, SwinIR, BasicSR's RRDBNet, and the networks
spandrel builds for us). spandrel then detects the architecture as those tools do, and its model must give our
network's output: a network spandrel does not recognise, cannot load, or builds with other hyperparameters than ours
(those it cannot infer from the weights, such as window sizes or RRDB's growth channels, it takes at their defaults)
is one line, so that no file is written that those tools would misread (scripts/export.py --format spandrel).
"""
import json
import os
from typing import Any, Dict, Tuple

import torch
from torch import nn

from models.networks.spandrel import SPANDREL_REQUIREMENT
from utils.checkpoint import safetensors_data
from utils.errors import UserError, first_line

TOLERANCE = 1e-4  # max|spandrel's model - ours| on the same input: the same maths in another order


def spandrel_state(net: nn.Module) -> Dict[str, torch.Tensor]:
    """The weights in the layout spandrel detects: the network's `spandrel_state_dict()` where it declares one,
    else its state_dict."""
    declared = getattr(net, 'spandrel_state_dict', None)
    return dict(declared() if declared is not None else net.state_dict())


def spandrel_file(net: nn.Module, netG: Dict[str, Any], source: str) -> Tuple[bytes, Any]:
    """(the safetensors file of `net`'s weights in spandrel's layout, spandrel's descriptor read back from those
    bytes). Its metadata: `trained_as` (netG, JSON) and `source` (the weights file's name); not `net_type`, which
    would make our own tools read it in our layout."""
    from safetensors.torch import load as load_bytes
    kwargs = {k: v for k, v in netG.items() if not k.startswith('_')}
    metadata = {'trained_as': json.dumps(kwargs, sort_keys=True), 'source': os.path.basename(source)}
    data = safetensors_data(spandrel_state(net), metadata, f'netG ({netG["net_type"]})')
    return data, read_with_spandrel(load_bytes(data), netG['net_type'])


def read_with_spandrel(state: Dict[str, torch.Tensor], net_type: str) -> Any:
    """spandrel's descriptor of `state` (its model, architecture, scale), found and loaded as
    `spandrel.ModelLoader().load_from_state_dict` does; what it cannot do is one line naming netG."""
    try:
        import spandrel
    except ImportError:
        raise UserError(f'--format spandrel: checking the file needs spandrel, which is not installed here; '
                        f'pip install {SPANDREL_REQUIREMENT}') from None
    canonical = spandrel.canonicalize_state_dict(dict(state))
    support = next((s for s in spandrel.MAIN_REGISTRY.architectures('detection') if s.detect(canonical)), None)
    if support is None:
        raise UserError(f'netG ({net_type}): spandrel {spandrel.__version__} recognises none of its architectures in '
                        f'these weights, so chaiNNer and ComfyUI cannot open them; export it to ONNX instead '
                        f'(--format onnx; chaiNNer opens .onnx files)')
    arch = support.architecture.id
    try:
        return support.architecture.load(canonical)
    except Exception as e:  # a size mismatch or a missing key: spandrel's guess of a hyperparameter is not ours
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]  # torch: a heading, then what differs
        reason = lines[1] if len(lines) > 1 and lines[0].endswith(':') else first_line(e)
        raise UserError(f'netG ({net_type}): spandrel reads these weights as {arch} but cannot load them '
                        f'({reason[:200]}); it infers {arch}\'s hyperparameters from the weights and takes the '
                        f'others at their defaults') from None


def spandrel_size(descriptor: Any, h: int, w: int) -> Tuple[int, int]:
    """A size near h x w that spandrel's model takes as it is (its `size_requirements`: a minimum, a multiple, a
    square), which the tools would pad otherwise (with another padding than our network's own): cropped down to the
    multiple where that is enough, else padded up."""
    req = descriptor.size_requirements
    down = [s - s % req.multiple_of for s in (h, w)]
    if req.square:
        down = [min(down)] * 2
    if all(down) and req.check(down[1], down[0]):
        return down[0], down[1]
    pad_w, pad_h = req.get_padding(w, h)
    return h + pad_h, w + pad_w


def spandrel_difference(ours: torch.Tensor, descriptor: Any, x: torch.Tensor, net_type: str) -> float:
    """max|spandrel's model(x) - ours| (`ours`: our network's output on `x`, of a `spandrel_size`); another output
    shape or a difference above TOLERANCE is one line. The models' raw outputs are compared (the tools clamp theirs
    to [0, 1], which would hide a difference)."""
    arch = descriptor.architecture.id
    with torch.no_grad():
        try:
            theirs = descriptor.model.eval()(x.clone()).float()  # clone: some (RCAN) scale their input in place
        except Exception as e:  # whatever spandrel's model raises on an input it does not take
            raise UserError(f'netG ({net_type}): spandrel\'s {arch} built from these weights fails on a '
                            f'{"x".join(map(str, x.shape))} input: {first_line(e)[:200]}') from None
    if ours.shape != theirs.shape:
        raise UserError(f'netG ({net_type}): spandrel\'s {arch} built from these weights gives a '
                        f'{"x".join(map(str, theirs.shape))} output, ours {"x".join(map(str, ours.shape))}: '
                        f'spandrel reads another scale from them')
    diff = float((ours.double() - theirs.double()).abs().max()) if ours.numel() else 0.0
    if not diff <= TOLERANCE:  # NaN fails too
        raise UserError(f'netG ({net_type}): spandrel\'s {arch} built from these weights differs from ours by '
                        f'max|diff| = {diff:.3g} (tolerance {TOLERANCE:g}): it takes a hyperparameter it cannot '
                        f'infer from the weights (a window size, a growth, a residual scale) at another value '
                        f'than this netG\'s; nothing written')
    return diff
