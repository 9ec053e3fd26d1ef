"""The end-of-training check that every rank holds the same parameters: DDP must leave identical replicas, and a
divergence (a rank that skipped an all-reduce, a non-deterministic broadcast) is a bug worth stopping on."""
import hashlib
from typing import Iterable

import torch

from utils import dist


def parameter_digest(net: torch.nn.Module) -> str:
    """sha1 over every parameter, bit for bit."""
    h = hashlib.sha1()
    for name, t in net.named_parameters():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def check_replicas(networks: Iterable[torch.nn.Module]) -> str:
    """The line saying the parameters of `networks` (netG, its EMA, a GAN's netD) are identical on every rank;
    RuntimeError when they are not. A collective: every rank calls it.

    Buffers are not compared: with BatchNorm each rank's running statistics take one step on
    its own data after the last broadcast, and checkpoints take rank 0's.
    """
    digests = dist.gather_objects(''.join(parameter_digest(net) for net in networks))
    if len(set(digests)) != 1:
        raise RuntimeError(f'network parameters differ across ranks: {digests}')
    return f'parameters identical on all {len(digests)} rank(s): sha1 {digests[0][:16]}'
