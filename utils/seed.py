"""Seeding and random-state capture in a form that loads with `torch.load(weights_only=True)`."""
import random
from typing import Any, Dict

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """The same seed on every rank: identical initial weights; data order comes from the sampler."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> Dict[str, Any]:
    """This process's python, numpy, torch (and its CUDA device's) generator states as plain types/tensors."""
    np_state = np.random.get_state()
    state = {
        'python': random.getstate(),
        'numpy': {'key': torch.from_numpy(np_state[1].astype(np.int64)), 'pos': int(np_state[2]),
                  'has_gauss': int(np_state[3]), 'cached_gaussian': float(np_state[4])},
        'torch': torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state['cuda'] = torch.cuda.get_rng_state(torch.cuda.current_device())
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    version, internal, gauss = state['python']
    random.setstate((version, tuple(internal), gauss))
    n = state['numpy']
    np.random.set_state(('MT19937', n['key'].numpy().astype(np.uint32), n['pos'], n['has_gauss'],
                         n['cached_gaussian']))
    torch.set_rng_state(state['torch'])
    if 'cuda' in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(_this_device(state['cuda']), torch.cuda.current_device())


def _this_device(saved: Any) -> torch.Tensor:
    """The saved CUDA generator state for this process's device.

    Only the current device's state is saved: a rank trains on one GPU, and a checkpoint made
    where 8 GPUs were visible must resume where one is. Older checkpoints hold a list with one
    state per visible device; the entry of the current index is used (the first if it is missing).
    """
    if isinstance(saved, (list, tuple)):
        index = torch.cuda.current_device()
        return saved[index] if index < len(saved) else saved[0]
    return saved
