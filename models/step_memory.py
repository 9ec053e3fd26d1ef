"""What one training step needs in memory, for `main_train.py --check`: measured on a GPU, estimated elsewhere.

On a CUDA device one real step runs at the run's batch and patch (the first step's micro-batches: forward,
backward, optimizer step, through the model's own `backward`, `finalize_gradients` and `step`), and the
caching allocator's peak is the answer (`torch.cuda.max_memory_allocated` / `max_memory_reserved`): what the
run's first iteration will need, cuDNN's workspaces and the compiled graphs included. An out-of-memory error
there is the run's own (utils/oom.py), so the check ends with the line the run would end with.

Elsewhere (a login node without a GPU, a CPU run) the step is estimated instead of run at full size: weights
(every network the model trains, its EMA copy included) + gradients + optimizer state (allocated by one real
optimizer step) + activations, the tensors autograd saves for the backward pass (counted by a
`saved_tensors_hooks` pack hook, each storage once, weights left out) during one forward and backward at
batch 1, times the micro-batch size (activations grow linearly with the batch). It is a lower bound on a GPU:
the CUDA context, cuDNN workspaces and the allocator's fragmentation come on top.
"""
from typing import Any, Dict, List, Sequence

import torch

from models.compile import eager
from utils.memory import peak_memory, size


def storage_bytes(tensors: Sequence[torch.Tensor]) -> int:
    """Bytes of the distinct storages under `tensors` (views and shared weights counted once)."""
    seen: Dict[int, int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def optimizers(model: Any) -> List[torch.optim.Optimizer]:
    """The optimizers a model holds (netG's; a GAN's netD's too)."""
    return [v for v in vars(model).values() if isinstance(v, torch.optim.Optimizer)]


def one_step(model: Any, batches: Sequence[Dict[str, Any]]) -> None:
    """One real training step through the model's own calls, as the loop makes it (iteration 1, applied)."""
    loss = model.backward(batches)
    model.finalize_gradients(1, loss)
    model.step(1, loss, None)


def first_sample(batch: Dict[str, Any]) -> Dict[str, Any]:
    """A loader batch cut down to its first sample (tensors and lists alike)."""
    return {k: v[:1] if torch.is_tensor(v) or isinstance(v, (list, tuple)) else v for k, v in batch.items()}


def measured(model: Any, batches: Sequence[Dict[str, Any]], device: torch.device) -> str:
    """A CUDA device: one real step at the run's batch, and the allocator's peak against the card."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    one_step(model, batches)
    torch.cuda.synchronize(device)
    share = torch.cuda.max_memory_reserved(device) / torch.cuda.get_device_properties(device).total_memory
    tight = ' (under 10 % of the card left: validation and fragmentation may need more)' if share > 0.9 else ''
    return f'measured, one real step (forward, backward, optimizer step): {peak_memory(device)}{tight}'


def estimated(model: Any, batches: Sequence[Dict[str, Any]]) -> str:
    """Elsewhere: weights + gradients + optimizer state + activations counted at batch 1, times the batch."""
    nets = model.networks()
    weights = storage_bytes([t for net in nets for t in [*net.parameters(), *net.buffers()]])
    weight_ptrs = {p.untyped_storage().data_ptr() for net in nets for p in net.parameters()}
    saved: List[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in weight_ptrs:
            saved.append(t)
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), eager():
        one_step(model, [first_sample(batches[0])])
    per_sample = storage_bytes(saved)
    saved.clear()
    grads = storage_bytes([p.grad for net in nets for p in net.parameters() if p.grad is not None])
    state = storage_bytes([t for opt in optimizers(model) for s in opt.state.values() for t in s.values()
                           if torch.is_tensor(t)])
    batch = len(batches[0]['L'])
    activations = per_sample * batch
    total = weights + grads + state + activations
    return (f'estimated (no GPU here): weights {size(weights)} ({len(nets)} network(s)) + gradients {size(grads)} + optimizer state '
            f'{size(state)} + activations {size(activations)} ({size(per_sample)} saved for the backward pass at '
            f'batch 1, x {batch}) = {size(total)} for one step; on a GPU add the CUDA context (~0.5 GiB), '
            f'cuDNN workspaces and the allocator\'s slack')


def step_memory(model: Any, batches: Sequence[Dict[str, Any]], device: torch.device) -> str:
    """What one training step of `model` on the first step's micro-batches `batches` needs (this module's
    docstring says how)."""
    if device.type == 'cuda':
        return measured(model, batches, device)
    return estimated(model, batches)
