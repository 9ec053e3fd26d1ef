"""Loader batches as the training step takes them: on the device, as float images, transformed there."""
from typing import Any, Dict, Tuple

import torch

from data import batch_augment
from utils.image import images_to_float
from utils.logger import get_logger


def device_batch(batch: Dict[str, Any], device: torch.device, channels_last: bool,
                 warned_5d: bool) -> Tuple[Dict[str, Any], bool]:
    """(The batch on the device, whether the note on 5-D batches was logged: `warned_5d` says whether it was
    before, so that it is logged once).

    uint8 images are scaled to [0, 1] there: loaders pass images as uint8 (pinned on CUDA, so the copy overlaps
    the previous step), a quarter of the bytes of float32. Then the dataset's device-side transform, if its items
    name one (data/degradations/batch_transforms.py: Real-ESRGAN's degradations run here, on the device, in
    float32 whatever `train.amp` says), and the iteration's batch augmentation, if its items carry one
    (`train.use_moa`, data/batch_augment.py). `channels_last`: the 4-D images in channels-last memory format,
    as `train.channels_last` puts netG's weights; a 5-D (video) batch stays as it is.
    """
    nb = device.type == 'cuda'
    out = images_to_float({k: v.to(device, non_blocking=nb) if torch.is_tensor(v) else v for k, v in batch.items()})
    out = batch_augment.apply(out)
    if channels_last:
        for k, v in out.items():
            if torch.is_tensor(v) and v.dim() == 4:
                out[k] = v.contiguous(memory_format=torch.channels_last)
            elif torch.is_tensor(v) and v.dim() == 5 and not warned_5d:
                warned_5d = True
                get_logger().info(f'train.channels_last: 5-D (video) batch "{k}" left as it is; '
                                  f'only 4-D batches and 2-D conv weights use channels_last')
    return out, warned_5d
