"""`train.compile`: torch.compile of the training forward, block by block where the network repeats one.

Compiling a whole transformer (SwinIR: 36 blocks, VRT: hundreds) traces and optimises every block
separately, which takes minutes and recompiles for every new input shape. A network class that
names its repeated block in `repeated_blocks` (SwinIR's Swin block, VRT's TMSA, RRDB, ...) is
compiled regionally instead: each block module is compiled in place (`nn.Module.compile`: the
state_dict keeps its names) with static shapes, and since blocks of one kind run the same code,
one compilation serves all of them (a guard failure, e.g. shifted and unshifted windows, adds one
more). Other networks, small convnets, are compiled whole, around the training forward only.

Evaluation (whole images of any size, the EMA copy, main_test) runs eagerly: `eager()` around it
keeps compiled blocks from recompiling for every validation size. `compiled_graphs()` counts the
graphs compiled so far, so the loop can say what the first iteration cost and when training
recompiles.
"""
import contextlib
from typing import Iterator, List, Optional, Tuple

import torch
from torch import nn

MODES = ('default', 'max-autotune', 'reduce-overhead')
BACKEND = 'inductor'  # tests count graphs with 'eager', which compiles nothing


def repeated_blocks(net: nn.Module) -> List[nn.Module]:
    """The modules of `net` of the types its class names in `repeated_blocks` (none: compile it whole)."""
    kinds = tuple(getattr(type(net), 'repeated_blocks', ()))
    return [m for m in net.modules() if kinds and isinstance(m, kinds)]


def compile_training_net(net_g: nn.Module, training_net: nn.Module, mode: Optional[str]) -> Tuple[nn.Module, str]:
    """(the module the training forward calls, a line for the log) with `train.compile` on.

    `training_net` is net_g or its DDP wrapper. Regional compilation changes the blocks of net_g in
    place and returns `training_net` itself; whole compilation wraps `training_net` (net_g unchanged).
    """
    options = {'backend': BACKEND, 'mode': None if mode in (None, 'default') else mode}
    if BACKEND != 'inductor':
        options.pop('mode')
    blocks = repeated_blocks(net_g)
    if blocks:
        for block in blocks:
            block.compile(dynamic=False, **options)
        kinds = sorted({type(b).__name__ for b in blocks})
        return training_net, (f'train.compile: {len(blocks)} {"/".join(kinds)} blocks compiled regionally (one '
                              f'compilation per kind of block; mode {mode or "default"})')
    return torch.compile(training_net, dynamic=False, **options), \
        f'train.compile: the training forward compiled whole (mode {mode or "default"})'


def compiled_graphs() -> int:
    """Graphs TorchDynamo compiled in this process so far (first compilations and recompilations)."""
    from torch._dynamo.utils import counters
    return int(counters['stats']['unique_graphs'])


@contextlib.contextmanager
def eager() -> Iterator[None]:
    """Run compiled modules eagerly inside (evaluation: sizes vary, and compiling for each is waste)."""
    with torch.compiler.set_stance('force_eager'):
        yield
