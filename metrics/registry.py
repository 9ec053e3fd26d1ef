"""The metrics `val.metrics` names, one registry; a new metric is one module of this package.

A member is a class registered with `@METRICS.register(name)` that declares the `val` keys it reads in an
`OPTIONS` attribute, named with its own prefix (`lpips_net`, `lpips_path`), and is built as
`cls(device=device, **METRICS.read(name, val_section, '', where))`. An instance scores one restored
frame (HWC uint8 RGB, or HW / HW1 gray) against its reference (None for no-reference metrics) and
follows the `Metric` protocol.
"""
from typing import Optional, Protocol

import numpy as np

from utils.registry import Registry

METRICS = Registry('metric', 'metrics', '*')


class Metric(Protocol):
    higher_is_better: bool  # which way `val.best_metric` counts as better
    needs_reference: bool   # False for no-reference scores (NIQE): they also score the inputs alone

    def __call__(self, restored: np.ndarray, reference: Optional[np.ndarray]) -> float:
        """The score of one frame; `reference` is None exactly when `needs_reference` is False."""
