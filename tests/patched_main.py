"""main_train.py with faults injected from the environment, for the fault-tolerance tests.

The production code has no test hooks; this wrapper patches it from outside:
- INJECT_NAN_AT=k [INJECT_NAN_RANK=r]: the loss of iteration k is NaN (on rank r only, if given);
- INJECT_NAN_FROM=k: the loss of every iteration from k on is NaN (a run that does not recover);
- SLOW_SAVE_SECONDS=s: every checkpoint file stays in its temporary file for s seconds before
  the rename, and `SAVING <path>` is printed while it waits (so a test can SIGKILL mid-write);
- SAVE_FAIL_AT=k: writing checkpoint k fails like a full disk (OSError ENOSPC);
- DISK_FULL_AT=k: torch.save of `k_state.pth` fails as it does on a full disk (RuntimeError from
  the zip writer), after `k_G.pth` (and `k_E.pth`) were written;
- FREE_MB=m: every file system reports m MB free (shutil.disk_usage), as a full disk does: with
  DISK_FULL_AT the failure is then recognised as one for lack of space;
- FIRST_PASS_NAN_AT=k [INJECT_NAN_RANK=r]: with train.G_optimizer_sam, a gradient of the first pass of the
  k-th sharpness-aware step is NaN (on rank r only, if given), after the passes' all-reduce: the loss is finite;
- POISON_AT=k: after the optimizer step of iteration k a weight of netG becomes NaN (the loss
  and gradients of that iteration were finite);
- CRASH_AT=k [CRASH_RANK=r]: the process dies (os._exit) at its k-th iteration; only in the
  first attempt when started by torchrun (TORCHELASTIC_RESTART_COUNT=0), so restarts can succeed;
- OOM_AT=k [OOM_IN=forward|backward|step|evaluation] [OOM_RANK=r]: a CUDA out-of-memory error
  (torch.cuda.OutOfMemoryError, as the caching allocator raises it) comes out of netG's forward pass, the
  backward pass (a node of the graph), or the optimizer step of the k-th iteration, or (`evaluation`) out of the
  k-th network call of an evaluation (validation, main_test's test sets and --input, whose start-up probe is
  its first call); on rank r only, if given;
- RECORD_SAMPLES=prefix: each rank appends one JSON line per micro-batch to `<prefix>.<rank>.jsonl`:
  {"call": its n-th backward in this process, "micro": i, "samples": [file name + a hash of the input]},
  what identifies each training sample (the image, and its crop and noise).

`injected(env)` patches them in for a `with` block (tests/conftest.py's `run_main(..., faults=...)` runs the
loop in the test's process so); run as a script, for the whole process.
"""
import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
from typing import Any, Iterator, List, Mapping, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import main_train  # noqa: E402
from models.model_plain import ModelPlain  # noqa: E402
from models.restorer import ImageRestorer  # noqa: E402
from utils import checkpoint, dist  # noqa: E402


def _set_first(t, value):
    """Its first element set to `value`, in any memory format (a channels-last weight has no flat view)."""
    t[(0,) * t.dim()] = value


def _rank_matches(var: str) -> bool:
    return var not in os.environ or int(os.environ[var]) == dist.get_rank()


def out_of_memory() -> torch.cuda.OutOfMemoryError:
    """The error the CUDA caching allocator raises, with the first sentences of its message."""
    return torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity '
                                       'of 79.19 GiB of which 1.06 GiB is free. (injected by tests/patched_main.py)')


class _OutOfMemoryInBackward(torch.autograd.Function):
    """The identity in the forward pass; its node of the graph runs out of memory in the backward pass."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise out_of_memory()


@contextlib.contextmanager
def injected(env: Mapping[str, str]) -> Iterator[None]:
    """The faults `env` names, patched into the loop's classes and modules inside the block, undone after."""
    undo: List[Tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, value: Any) -> None:
        undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)
    try:
        install(env, patch)
        yield
    finally:
        for owner, name, value in reversed(undo):
            setattr(owner, name, value)


def install(env: Mapping[str, str] = os.environ, patch: Any = setattr) -> None:
    nan_at = int(env.get('INJECT_NAN_AT', 0))
    nan_from = int(env.get('INJECT_NAN_FROM', 0))
    crash_at = int(env.get('CRASH_AT', 0))
    slow = float(env.get('SLOW_SAVE_SECONDS', 0))
    original_backward = ModelPlain.backward
    calls = {'n': 0}

    record = env.get('RECORD_SAMPLES')
    oom_at, oom_in = int(env.get('OOM_AT', 0)), env.get('OOM_IN', 'forward')

    def out_of_memory_in_pass(model, kind):
        """netG's training forward for this iteration: raising in the forward pass, or in the backward one."""
        def predict(net, batch):
            if kind == 'forward':
                raise out_of_memory()
            return _OutOfMemoryInBackward.apply(ModelPlain.predict(model, net, batch))
        return predict

    def backward(self, batches):
        calls['n'] += 1
        if record:
            with open(f'{record}.{dist.get_rank()}.jsonl', 'a') as f:
                for i, batch in enumerate(batches):
                    samples = [f'{os.path.basename(path)}:{hashlib.sha1(x.numpy().tobytes()).hexdigest()[:12]}'
                               for path, x in zip(batch['H_path'], batch['L'])]
                    f.write(json.dumps({'call': calls['n'], 'micro': i, 'samples': samples}) + '\n')
        oom_here = oom_at and calls['n'] == oom_at and oom_in in ('forward', 'backward') and _rank_matches('OOM_RANK')
        if oom_here:
            self.predict = out_of_memory_in_pass(self, oom_in)
        try:
            loss = original_backward(self, batches)
        finally:
            if oom_here:
                del self.predict
        first_attempt = os.environ.get('TORCHELASTIC_RESTART_COUNT', '0') == '0'
        if crash_at and calls['n'] == crash_at and _rank_matches('CRASH_RANK') and first_attempt:
            print(f'CRASHING rank {dist.get_rank()}', flush=True)
            os._exit(17)
        if (nan_at and calls['n'] == nan_at or nan_from and calls['n'] >= nan_from) and _rank_matches('INJECT_NAN_RANK'):
            self.iteration_losses()[1].mul_(float('nan'))  # the terms a stop names went non-finite with the loss
            return loss * torch.tensor(float('nan'))
        return loss

    patch(ModelPlain, 'backward', backward)
    fail_at = env.get('SAVE_FAIL_AT')
    if fail_at:
        original_save = checkpoint.CheckpointDir.save

        def failing_save(self, step, files):
            if step == int(fail_at):
                raise OSError(28, 'No space left on device')
            return original_save(self, step, files)
        patch(checkpoint.CheckpointDir, 'save', failing_save)
    disk_full_at = env.get('DISK_FULL_AT')
    if disk_full_at:
        original_torch_save = checkpoint.atomic_torch_save

        def full_disk_save(obj, path):
            if os.path.basename(path) == f'{disk_full_at}_state.pth':
                raise RuntimeError('[enforce fail at inline_container.cc:664] . unexpected pos 128 vs 64')
            return original_torch_save(obj, path)
        patch(checkpoint, 'atomic_torch_save', full_disk_save)
    free_mb = env.get('FREE_MB')
    if free_mb:
        real_usage = shutil.disk_usage

        def full_disk_usage(path):
            usage, free = real_usage(path), int(float(free_mb) * 1e6)
            return type(usage)(usage.total, usage.total - free, free)
        patch(shutil, 'disk_usage', full_disk_usage)
    first_pass_nan_at = int(env.get('FIRST_PASS_NAN_AT', 0))
    if first_pass_nan_at:
        from models.sam import SAM
        original_perturb = SAM.perturb
        perturbs = {'n': 0}

        def poisoned_perturb(self, *args):
            perturbs['n'] += 1
            if perturbs['n'] == first_pass_nan_at and _rank_matches('INJECT_NAN_RANK'):
                _set_first(self.params[0].grad, float('nan'))
            return original_perturb(self, *args)
        patch(SAM, 'perturb', poisoned_perturb)
    if oom_at and oom_in == 'step':
        original_model_step = ModelPlain.step

        def step_out_of_memory(self, step, loss, applied=None):
            if step == oom_at and _rank_matches('OOM_RANK'):
                raise out_of_memory()
            return original_model_step(self, step, loss, applied)
        patch(ModelPlain, 'step', step_out_of_memory)
    if oom_at and oom_in == 'evaluation':
        original_forward = ImageRestorer._forward
        evaluations = {'n': 0}

        def forward_out_of_memory(self, *inputs):
            evaluations['n'] += 1
            if evaluations['n'] == oom_at and _rank_matches('OOM_RANK'):
                raise out_of_memory()
            return original_forward(self, *inputs)
        patch(ImageRestorer, '_forward', forward_out_of_memory)
    poison_at = int(env.get('POISON_AT', 0))
    if poison_at:
        original_step = ModelPlain.step

        def poisoning_step(self, step, loss, applied=None):
            original_step(self, step, loss, applied)
            if step == poison_at:
                with torch.no_grad():
                    _set_first(next(self.net_g.parameters()), float('nan'))
        patch(ModelPlain, 'step', poisoning_step)
    if slow:
        original = checkpoint.atomic_write_bytes

        def slow_write(path, write, **kwargs):
            if os.path.basename(os.path.dirname(path)) != 'models':  # checkpoints only, not the options file
                return original(path, write, **kwargs)

            def slowly(f):
                write(f)
                f.flush()
                print(f'SAVING {path}', flush=True)
                time.sleep(slow)
            original(path, slowly, **kwargs)
        patch(checkpoint, 'atomic_write_bytes', slow_write)


if __name__ == '__main__':
    install()
    dist.exit_now(main_train.main())
