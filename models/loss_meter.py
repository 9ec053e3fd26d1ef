"""The losses a log line prints, summed on the device between two log lines.

The train loop must not read the device on its hot path, so a step's losses are added to device sums (only
where the loop applied the step) and read once per log line, after one all-reduce over the ranks.
"""
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from utils import dist


class LossMeter:
    """Sums of the applied steps' loss values since the last `take`, one device vector of `slots` entries; what
    each slot holds is its model's (ModelPlain: the loss, the step count, the loss terms; ModelGAN: G's and D's
    parts and their step counts)."""

    def __init__(self, slots: int, device: torch.device):
        self.sums = torch.zeros(slots, device=device)

    def add(self, values: torch.Tensor, applied: Optional[torch.Tensor]) -> None:
        """Add a step's `values` (one per slot) where `applied`, the loop's device bool (None: applied)."""
        self.sums += values if applied is None else torch.where(applied, values, torch.zeros_like(values))

    def take(self) -> List[float]:
        """Collective: the sums over every rank since the last call (the log line's one host read); they restart
        from zero."""
        total = self.sums.clone()
        dist.all_reduce_sum(total)
        self.sums.zero_()
        return total.tolist()


class MeanLosses(LossMeter):
    """ModelPlain's log: the mean loss of the applied steps and, with more than one term (G_extra_losses, a
    teacher), each term's mean (`term_names`, in the order of the loss's terms). Slots: the loss, the step
    count, then each term."""

    def __init__(self, term_names: Sequence[str], device: torch.device):
        self.term_names = list(term_names)
        self.terms_logged = len(self.term_names) > 1
        super().__init__(2 + (len(self.term_names) if self.terms_logged else 0), device)
        self._one = torch.ones(1, device=device)

    def count(self, loss: torch.Tensor, terms: Optional[torch.Tensor], applied: Optional[torch.Tensor]) -> None:
        """A step's loss and its terms (None when they are not logged), where `applied`."""
        self.add(torch.cat([loss.reshape(1), self._one, *([terms] if terms is not None else [])]), applied)

    def labelled(self, loss: torch.Tensor, terms: Optional[torch.Tensor]) -> Tuple[List[Optional[str]], torch.Tensor]:
        """One step's loss as the log names it: each term (`l_g_pix`, `l_g_<name>`, ...) when they are logged,
        else `G_loss`."""
        if terms is not None:
            return [f'l_g_{name}' for name in self.term_names], terms
        return ['G_loss'], loss.reshape(1)

    def means(self) -> Dict[str, float]:
        """Collective: `G_loss` and each term's `l_g_<name>` over the applied steps since the last call (NaN
        without one)."""
        total, steps, *terms = self.take()
        out = {'G_loss': total / steps if steps else float('nan')}
        for name, value in zip(self.term_names, terms):
            out[f'l_g_{name}'] = value / steps if steps else float('nan')
        return out
