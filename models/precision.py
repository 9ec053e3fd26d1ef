"""The training step's number and memory formats: `train.amp` (autocast, loss scaling), `train.tf32` and
`train.channels_last`."""
import contextlib
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

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


# oneDNN runs a dense (not depthwise) convolution this large or larger far slower channels-last than channels-first on
# x86: forward and backward of a 16-channel 4 x 48² batch, 2 threads, an AVX-512 Xeon, channels-last / first: 0.93 at
# 13², 0.81 at 15², 1.87 at 17², 21 at 21² (PLKSR's and RealPLKSR's 17² convolutions: 8.5x the step); depthwise
# ones stay faster (0.3-0.7 up to 21²)
SLOW_CHANNELS_LAST_KERNEL = 17


def slow_channels_last(net: nn.Module) -> Optional[str]:
    """The first dense convolution weight of `net` with a side of SLOW_CHANNELS_LAST_KERNEL or more, as
    "<name> (<h>x<w>)", or None. Read from the 4-D parameters, so a network that calls F.conv2d is seen too."""
    for name, p in net.named_parameters():
        if p.dim() == 4 and p.shape[1] > 1 and max(p.shape[2:]) >= SLOW_CHANNELS_LAST_KERNEL:
            return f'{name} ({p.shape[2]}x{p.shape[3]})'
    return None


def memory_format(channels_last: Optional[bool], device: torch.device, image_batches: bool,
                  net: nn.Module) -> Tuple[bool, str]:
    """(whether netG and its 4-D inputs are channels-last, the line to log) for `train.channels_last`.

    null: on for a model of 4-D image batches on a CPU, where oneDNN's convolutions take 0.8-0.9 of their
    channels-first time (bench/bench_zoo.py: 0.81-0.98 of the step for convolutional configurations, 0.95-1.04
    for transformers that spend it in attention; the demo's DnCNN 0.7), which changes the step's rounding, not
    what it computes; but not for a network with a convolution that runs slower
    channels-last (`slow_channels_last`). Off on CUDA, where it is not measured yet, and for video models, whose
    5-D clips stay as they are (`device_batch`). A resumed run keeps the format of its checkpoint: the trainer sets
    the key from it before the model is built (training/resume_plan.py).
    """
    slow = slow_channels_last(net) if device.type == 'cpu' else None
    if channels_last is not None:
        on = channels_last
        why = 'train.channels_last' + (f'; {slow} runs slower so on a CPU' if on and slow else '')
    elif device.type != 'cpu':
        on, why = False, f'train.channels_last null: off on {device.type.upper()}'
    elif not image_batches:
        on, why = False, 'train.channels_last null: off for video models'
    elif slow:
        on, why = False, f'train.channels_last null: off, {slow} runs slower channels-last on a CPU'
    else:
        on, why = True, 'train.channels_last null: on for image networks on a CPU'
    return on, f'memory format: {"channels-last" if on else "channels-first"} ({why})'


def to_channels_last(net: nn.Module) -> None:
    """`net`'s 4-D weights and buffers in channels-last memory format, in place. Others stay as they are:
    `nn.Module.to(memory_format=...)` refuses a network with a 5-D weight (FFTformer's)."""
    for module in net.modules():
        for p in module.parameters(recurse=False):
            if p.dim() == 4:
                p.data = p.data.contiguous(memory_format=torch.channels_last)
        for name, b in module.named_buffers(recurse=False):
            if b.dim() == 4:
                setattr(module, name, b.contiguous(memory_format=torch.channels_last))


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
