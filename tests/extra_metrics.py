"""Two metrics of the tests of `val.metrics`, registered like any member of metrics/ (metrics/registry.py):

- `mean_abs_error`: full-reference, lower is better: the mean absolute difference in grey levels, times
  its `val.mae_weight`;
- `brightness`: no-reference: the frame's mean grey level; it refuses a reference, which it must never get.

Both compute on the device they are built for, as a real metric does. Run as a module, this is
main_train.py or main_test.py with them registered (also under torchrun, every rank):

    python -m tests.extra_metrics main_test --opt o.json --set 'val.metrics=["brightness"]'
"""
import importlib
import os
import sys
from typing import Optional

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from metrics.registry import METRICS  # noqa: E402
from utils.options import Key, positive  # noqa: E402


@METRICS.register('mean_abs_error')
class MeanAbsError:
    OPTIONS = {'mae_weight': Key(1.0, (int, float), positive)}
    higher_is_better = False
    needs_reference = True

    def __init__(self, device: torch.device, mae_weight: float):
        self.device, self.weight = device, mae_weight

    def __call__(self, restored: np.ndarray, reference: Optional[np.ndarray]) -> float:
        a, b = (torch.from_numpy(np.ascontiguousarray(x)).to(self.device, torch.float64) for x in (restored, reference))
        return self.weight * (a - b).abs().mean().item()


@METRICS.register('brightness')
class Brightness:
    higher_is_better = True
    needs_reference = False

    def __init__(self, device: torch.device):
        self.device = device

    def __call__(self, restored: np.ndarray, reference: Optional[np.ndarray]) -> float:
        if reference is not None:
            raise AssertionError('a no-reference metric was given a reference')
        return torch.from_numpy(np.ascontiguousarray(restored)).to(self.device, torch.float64).mean().item()


if __name__ == '__main__':
    from utils import dist
    entry = importlib.import_module(sys.argv[1])  # main_train or main_test
    dist.exit_now(entry.main(sys.argv[2:]))
