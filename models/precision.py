"""The training step's number formats: `train.amp` (autocast, loss scaling) and `train.tf32`."""
import contextlib
from typing import Any, Dict, Optional, Tuple

import torch

from models.restorer import amp_dtype
from utils.logger import get_logger


def amp_setup(amp: str, device: torch.device) -> Tuple[Optional[torch.dtype], bool]:
    """(autocast dtype or None, whether a GradScaler is needed) for `train.amp` on `device`: fp16 (CUDA only,
    `amp_dtype`) needs loss scaling, bf16 has float32's range and needs no scaler."""
    return amp_dtype(amp, device, 'train.amp'), amp == 'fp16'


def tf32_setup(tf32: Optional[bool], device: torch.device) -> Optional[str]:
    """`train.tf32`: TensorFloat-32 for float32 matmuls and cuDNN convolutions (10-bit mantissa products,
    float32 accumulation; several times the float32 rate on tensor cores). null: on where the GPU has it
    (compute capability 8.0+, Ampere on). Process-wide; returns the line to log (None off CUDA)."""
    if device.type != 'cuda':
        return None
    on = torch.cuda.get_device_capability(device)[0] >= 8 if tf32 is None else bool(tf32)
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    how = 'the GPU has it' if tf32 is None and on else 'the GPU has none' if tf32 is None else 'train.tf32'
    return f'TensorFloat-32 matmuls and convolutions {"on" if on else "off"} ({how}; train.tf32 sets it)'


def step_precision(train_opt: Dict[str, Any], device: torch.device
                   ) -> Tuple[Optional[torch.dtype], Optional[torch.amp.GradScaler]]:
    """(autocast dtype or None, GradScaler or None) of the training step (`train.amp`), after `train.tf32` is
    set for the process (and logged)."""
    dtype, use_scaler = amp_setup(train_opt['amp'], device)
    tf32 = tf32_setup(train_opt['tf32'], device)
    if tf32:
        get_logger().info(tf32)
    return dtype, torch.amp.GradScaler(device.type) if use_scaler else None


def autocast(dtype: Optional[torch.dtype], device: torch.device) -> Any:
    """The mixed-precision context of a forward pass and its loss: autocast to `dtype`, nothing when None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)
