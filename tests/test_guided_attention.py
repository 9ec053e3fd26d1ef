"""RVRT's guided deformable attention keeps only its inputs for backward and runs in bounded chunks:
the same outputs and gradients as plain autograd through the same operations, a fraction of the memory.
(Its values against a loop reference: tests/test_network_rvrt.py.)"""
import pytest
import torch

from models.networks.layers import guided_attention
from models.networks.layers.guided_attention import gda_rows, guided_deformable_attention

HEADS, WINDOW = 2, (3, 3)


def _inputs(seed=0, b=3, m=2, d=8, groups=2, h=7, w=6, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, d, h, w, generator=g, dtype=dtype)
    k, v = (torch.randn(b, m, d, h, w, generator=g, dtype=dtype) for _ in range(2))
    offset = 2 * torch.randn(b, m, groups, WINDOW[0] * WINDOW[1], 2, h, w, generator=g, dtype=dtype)
    return [t.requires_grad_() for t in (q, k, v, offset)]


def _grads(out, leaves, seed=1):
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    return torch.autograd.grad(out, leaves, g)


def test_outputs_and_gradients_are_those_of_plain_autograd_bit_for_bit():
    leaves = _inputs()
    ours = guided_deformable_attention(*leaves, HEADS, WINDOW)
    plain = gda_rows(*leaves, HEADS, WINDOW, 0)
    assert ours.grad_fn is not None and torch.equal(ours, plain)
    for a, b in zip(_grads(ours, leaves), _grads(plain, leaves)):
        assert torch.equal(a, b)


@pytest.mark.parametrize('budget_rows', [1, 3, 7 * 2])  # chunks of 1 row, of 3 rows, of 2 whole frames
def test_chunks_of_frames_and_rows_give_the_same_outputs_and_gradients(monkeypatch, budget_rows):
    leaves = _inputs()
    plain = gda_rows(*leaves, HEADS, WINDOW, 0)
    per_row = 2 * 2 * 8 * 9 * 6 * 8  # m * (k and v) * d * K * w * float64 bytes
    monkeypatch.setattr(guided_attention, 'CHUNK_BYTES', per_row * budget_rows)
    assert len(guided_attention._chunks(3, 2, 8, 9, 7, 6, 8)) > 1
    ours = guided_deformable_attention(*leaves, HEADS, WINDOW)
    with torch.no_grad():
        inference = guided_deformable_attention(*leaves, HEADS, WINDOW)
    torch.testing.assert_close(ours, plain, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(inference, plain, rtol=1e-12, atol=1e-12)
    for a, b in zip(_grads(ours, leaves), _grads(plain, leaves)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _saved_bytes(fn):
    """Bytes autograd keeps for backward while `fn()`'s graph is alive (storages counted once)."""
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(seen.values()), out


def test_backward_keeps_only_the_inputs_not_the_sampled_keys_and_values():
    leaves = _inputs(b=2, d=16, h=12, w=12, dtype=torch.float32)
    inputs = sum(t.numel() * t.element_size() for t in leaves)
    ours, _ = _saved_bytes(lambda: guided_deformable_attention(*leaves, HEADS, WINDOW))
    plain, _ = _saved_bytes(lambda: gda_rows(*leaves, HEADS, WINDOW, 0))
    assert ours <= inputs  # q, k, v, offset: nothing else
    assert plain > 4 * ours  # sampled keys and values (M·K times k and v), twice, plus the sampling grid


def test_under_bf16_autocast_the_recomputation_runs_in_the_forward_passs_precision():
    leaves = _inputs(dtype=torch.float32)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        ours = guided_deformable_attention(*leaves, HEADS, WINDOW)
        plain = gda_rows(*leaves, HEADS, WINDOW, 0)
    assert ours.dtype == plain.dtype == torch.bfloat16 and torch.equal(ours, plain)
    for a, b in zip(_grads(ours, leaves), _grads(plain, leaves)):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)
