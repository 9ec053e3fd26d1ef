"""Random states saved in checkpoints: exact round trips, and CUDA states that follow the device."""
import random

import numpy as np
import torch

from utils.seed import rng_state, seed_everything, set_rng_state


def _draws():
    return random.random(), float(np.random.rand()), torch.rand(1).item()


def test_python_numpy_and_torch_generators_round_trip_exactly():
    seed_everything(5)
    _draws()
    saved = rng_state()
    expected = _draws()
    seed_everything(99)
    set_rng_state(saved)
    assert _draws() == expected


class FakeCuda:
    """Stands in for torch.cuda on a machine with 8 GPUs of which this process uses `current`."""

    def __init__(self, current: int):
        self.current = current
        self.states = {}

    def install(self, monkeypatch):
        monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
        monkeypatch.setattr(torch.cuda, 'current_device', lambda: self.current)
        monkeypatch.setattr(torch.cuda, 'get_rng_state', lambda device='cuda': torch.tensor([100 + device]))
        monkeypatch.setattr(torch.cuda, 'set_rng_state', lambda s, device='cuda': self.states.__setitem__(device, s))
        monkeypatch.setattr(torch.cuda, 'get_rng_state_all', lambda: [torch.tensor([100 + i]) for i in range(8)])


def test_only_the_current_devices_cuda_state_is_saved(monkeypatch):
    FakeCuda(current=3).install(monkeypatch)
    assert torch.equal(rng_state()['cuda'], torch.tensor([103]))


def test_a_cuda_state_saved_on_one_device_restores_on_the_current_device(monkeypatch):
    cuda = FakeCuda(current=0)
    cuda.install(monkeypatch)
    state = rng_state()
    state['cuda'] = torch.tensor([105])
    set_rng_state(state)
    assert list(cuda.states) == [0] and torch.equal(cuda.states[0], torch.tensor([105]))


def test_an_old_checkpoint_with_eight_device_states_resumes_where_one_gpu_is_visible(monkeypatch):
    cuda = FakeCuda(current=0)
    cuda.install(monkeypatch)
    state = rng_state()
    state['cuda'] = [torch.tensor([100 + i]) for i in range(8)]  # the former format: one per visible device
    set_rng_state(state)
    assert list(cuda.states) == [0] and torch.equal(cuda.states[0], torch.tensor([100]))


def test_an_old_list_without_an_entry_for_the_current_device_uses_its_first_state(monkeypatch):
    cuda = FakeCuda(current=5)
    cuda.install(monkeypatch)
    state = rng_state()
    state['cuda'] = [torch.tensor([100]), torch.tensor([101])]
    set_rng_state(state)
    assert list(cuda.states) == [5] and torch.equal(cuda.states[5], torch.tensor([100]))
