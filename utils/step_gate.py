"""`train.nan_policy` without a host sync per iteration: each step's verdict is decided on the device.

Reading a device flag on the host (`bool(finite)`) every iteration makes the CPU wait for the GPU
to finish the step before it may queue the next one, which costs launch-bound networks a large
share of their speed. Here the verdict stays a device tensor: the ranks agree on it with a device
all-reduce (MIN), the model gates its update with it (a fused optimizer's `found_inf`, the EMA's
weight, the loss sums), and counters of what was skipped are kept on the device too. The loop
reads them at its check points (print steps, before a save or a validation, at the end), where it
reads the device anyway, and applies the policy then: "stop" ends the run naming the first
non-finite iteration, "skip" logs what was skipped and ends the run once `nan_skip_limit` steps in
a row were skipped. A non-finite step is never applied, so weights stay as they were whichever
iteration the check point falls on; nothing is saved past a verdict to stop.
"""
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import torch

from utils import dist
from utils.exit_codes import EXIT_NONFINITE
from utils.stop import TrainingStopped

# slots of the device counters
_SKIPPED, _FIRST, _LAST, _LONGEST, _LIMIT_AT, _RUN = range(6)


@dataclass(frozen=True)
class Skips:
    """What the gate counted since the previous check point (iterations are 1-based; 0: none)."""
    skipped: int          # steps not applied
    first: int            # first skipped iteration
    last: int             # last skipped iteration
    longest: int          # longest run of consecutive skipped steps
    limit_at: int         # iteration at which a run reached the limit
    ranks: List[int]      # ranks whose own loss or gradients were not finite
    terms: List[List[bool]] = field(default_factory=list)  # per rank: which loss terms were finite at `first`


class StepGate:
    """The device-side verdict of each step and the counts of skipped steps (see the module docstring)."""

    def __init__(self, device: torch.device, limit: int):
        self.limit = int(limit)
        self._counts = torch.zeros(6, dtype=torch.long, device=device)
        self._local = torch.zeros((), dtype=torch.long, device=device)  # this rank's own non-finite steps
        self._first_terms: Optional[torch.Tensor] = None  # this rank's finite loss terms at the first skipped step

    def decide(self, finite: torch.Tensor, step: int, terms: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The verdict for iteration `step` from this rank's `finite` (device bool): applied on every rank
        only if finite on every rank. `terms`: the step's loss terms (a device vector, the model's
        `iteration_losses`), whose finiteness at the first skipped step is kept for the stop's line. Device ops
        only; every rank must call it (one all-reduce)."""
        ok = finite.to(torch.long).reshape(())
        self._local += 1 - ok
        dist.all_reduce_min(ok)
        bad = 1 - ok
        c = self._counts
        run = (c[_RUN] + 1) * bad
        first_now = (c[_FIRST] == 0) & (bad == 1)
        if terms is not None:
            flags = torch.isfinite(terms.detach()).reshape(-1)
            if self._first_terms is None or self._first_terms.shape != flags.shape:
                self._first_terms = torch.ones_like(flags)
            self._first_terms.copy_(torch.where(first_now, flags, self._first_terms))
        first = torch.where(first_now, step, c[_FIRST])
        limit_at = torch.where((c[_LIMIT_AT] == 0) & (run >= self.limit), step, c[_LIMIT_AT])
        c.copy_(torch.stack([c[_SKIPPED] + bad, first, torch.where(bad == 1, step, c[_LAST]),
                             torch.maximum(c[_LONGEST], run), limit_at, run]))
        return ok.bool()

    def take(self) -> Skips:
        """Counts since the previous call (one host read), then start counting afresh; the current run of
        skipped steps carries over. A collective when a step was skipped: every rank must call it."""
        skipped, first, last, longest, limit_at, _ = self._counts.tolist()
        ranks: List[int] = []
        terms: List[List[bool]] = []
        if skipped:  # the same on every rank (the verdicts were agreed), so every rank gathers
            own = self._first_terms.tolist() if self._first_terms is not None else []
            local = dist.gather_objects((int(self._local.item()), own))
            ranks = [r for r, (n, _) in enumerate(local) if n]
            terms = [flags for _, flags in local]
        self._counts[:_RUN].zero_()
        self._local.zero_()
        if self._first_terms is not None:
            self._first_terms.fill_(True)
        return Skips(skipped, first, last, longest, limit_at, ranks, terms)

    def check(self, policy: str, world_size: int, names: Callable[[], List[Optional[str]]],
              newest_save: Callable[[], str]) -> str:
        """`train.nan_policy` applied to what was counted since the previous check (`take`: every rank calls it).

        "stop" ends the run at the first skipped step, and "skip" once `limit` steps in a row were skipped:
        TrainingStopped (exit 4) naming the iteration, what was not finite (`names`: the model's
        `iteration_losses` names) and `newest_save()`, the checkpoint a rerun resumes from. Otherwise the
        warning that says what "skip" skipped, or '' when nothing was.
        """
        s = self.take()
        if not s.skipped:
            return ''
        ranks = ''
        if s.ranks and world_size > 1:
            ranks = f' on rank{"s" if len(s.ranks) > 1 else ""} {", ".join(map(str, s.ranks))}'
        if policy == 'stop':
            what = non_finite_words(names(), s.terms)
            raise TrainingStopped(f'iteration {s.first}: {what}{ranks} (train.nan_policy=stop); '
                                  f'{newest_save()}', EXIT_NONFINITE)
        if s.limit_at:
            raise TrainingStopped(f'iteration {s.limit_at}: {self.limit} steps in a row skipped for non-finite '
                                  f'loss or gradients (train.nan_skip_limit); the run is not recovering; '
                                  f'{newest_save()}', EXIT_NONFINITE)
        where = f'iteration {s.first}' if s.skipped == 1 else f'iterations {s.first}-{s.last}'
        return (f'{where}: {s.skipped} step{"s" if s.skipped > 1 else ""} skipped, non-finite loss or '
                f'gradients{ranks} (train.nan_policy=skip, at most {s.longest} in a row)')


def non_finite_words(names: List[Optional[str]], terms: List[List[bool]]) -> str:
    """What was not finite at the first skipped step, from the gathered `Skips.terms` and the model's names of
    them (`iteration_losses`): the loss terms that were not finite on any rank, or the gradients when every
    term was finite (a finite loss can have inf/NaN gradients)."""
    bad = [name for i, name in enumerate(names) if name is not None and any(
        i < len(flags) and not flags[i] for flags in terms)]
    if bad:
        return f'non-finite loss term{"s" if len(bad) > 1 else ""} {", ".join(bad)}'
    if terms and any(terms):
        return f'non-finite gradients (the loss terms were finite: {", ".join(n for n in names if n is not None)})'
    return 'non-finite loss or gradients'

