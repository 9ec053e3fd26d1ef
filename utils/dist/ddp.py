"""A trained network in DistributedDataParallel, with the run's top-level DDP flags.

Every model wraps its networks here (netG; a GAN's netD too), so the flags mean the same for each of them.
"""
from typing import Any, Mapping, Optional

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from utils.dist.group import is_initialized

def wrap_ddp(net: nn.Module, flags: Mapping[str, Any], device: torch.device,
             static_graph: Optional[bool] = None) -> nn.Module:
    """`net` in DDP when a process group exists (else `net` itself), with `flags` (the options' top level:
    broadcast_buffers, find_unused_parameters, use_static_graph, gradient_as_bucket_view);
    `static_graph`: None takes `use_static_graph`'s, a bool overrides it (a GAN's netD: two backward passes per
    iteration, which a static graph cannot take)."""
    if not is_initialized():
        return net
    # torch 2.14 deprecates `broadcast_buffers` (True is the default); False keeps its meaning
    # of "never sync buffers", which the newer `forward_sync_buffers=False` does not.
    buffers = {} if flags['broadcast_buffers'] else {'broadcast_buffers': False}
    return DistributedDataParallel(
        net, device_ids=[device.index] if device.type == 'cuda' else None,
        find_unused_parameters=flags['find_unused_parameters'],
        static_graph=flags['use_static_graph'] if static_graph is None else static_graph,
        gradient_as_bucket_view=flags['gradient_as_bucket_view'], **buffers)


def ddp_of(net: nn.Module) -> Optional[DistributedDataParallel]:
    """`net` if it is a DDP wrapper (its `no_sync` is what accumulation uses), else None."""
    return net if isinstance(net, DistributedDataParallel) else None
