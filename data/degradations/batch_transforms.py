"""Device-side batch transforms: the part of a dataset's work that runs on the device in the training step.

Some datasets are cheapest when the heavy part of making a sample runs on the GPU over the batch
(Real-ESRGAN's degradations: convolutions, resizes, JPEG). Such a dataset's items carry the name of
their dataset type under `TRANSFORM_KEY`, with whatever the transform needs (drawn on the CPU from the
sample's seed), and its class defines `device_transform(batch) -> batch`. The model applies it once the
batch is on its device (`apply`), in the one training loop and in the start-up sample check alike; a
batch without the key passes through unchanged. The transform takes the key out, so applying twice is
applying once.

A transform may also give a loss its own target: `H_<loss>` beside `H` (e.g. a sharpened GT for the
pixel loss); `target` is what a model compares that loss's output with.
"""
from typing import Any, Dict

import torch

from data.registry import DATASETS

TRANSFORM_KEY = 'device_transform'


def apply(batch: Dict[str, Any]) -> Dict[str, Any]:
    """The batch through its dataset's device transform (a batch without one: unchanged)."""
    names = batch.get(TRANSFORM_KEY)
    if names is None:
        return batch
    name = names if isinstance(names, str) else names[0]  # collated: one name per item, all the same
    rest = {k: v for k, v in batch.items() if k != TRANSFORM_KEY}
    return DATASETS.get(name, TRANSFORM_KEY).device_transform(rest)


def target(batch: Dict[str, Any], loss: str) -> torch.Tensor:
    """The target of `loss` ('pixel', 'perceptual', 'gan'): `H_<loss>` where a transform set one, else H."""
    return batch.get(f'H_{loss}', batch['H'])
