"""Choosing the checkpoint a run continues from.

An explicit `path.resume_state` wins; otherwise the newest complete save in the task's `models/`
folder is used, falling back to older ones (with a warning) when the newest cannot be read.
Rank 0 decides and broadcasts the choice so every rank loads the same iteration.

Nothing is written here: a run that then fails its checks leaves the folder as it was. Once the
run folder is its own, rank 0 calls `CheckpointDir.set_aside_after(<resumed iteration, or 0>)`,
which moves the saves this run does not continue (newer than the resume point) out of the way.
"""
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch

from utils import dist
from utils.checkpoint import STATE_FILE, CheckpointDir, load
from utils.errors import UserError
from utils.logger import get_logger


@dataclass
class ResumePoint:
    path: str
    weights: Dict[str, Any]    # 'G' (and 'E', 'D') state_dicts
    training: Dict[str, Any]   # the loop's training-state dict


def _read(ckpt: CheckpointDir, step: int, allow_unsafe: bool) -> ResumePoint:
    state_path = ckpt.path(step, 'state')
    training = load(state_path, allow_unsafe)
    weights = {'G': load(ckpt.path(step, 'G'), allow_unsafe)}
    for kind in ('E', 'D'):  # the EMA copy and a GAN's discriminator, when the run has them
        if os.path.exists(ckpt.path(step, kind)):
            weights[kind] = load(ckpt.path(step, kind), allow_unsafe)
    return ResumePoint(state_path, weights, training)


def _explicit(path: str) -> CheckpointDir:
    m = STATE_FILE.match(os.path.basename(path))
    if not m:
        raise UserError(f'path.resume_state: expected a file named <iter>_state.pth, got {path}')
    if not os.path.isfile(path):
        raise UserError(f'path.resume_state: file not found: {path}')
    return CheckpointDir(os.path.dirname(path) or '.')


def find_resume_point(opt: Dict[str, Any], ckpt: CheckpointDir, allow_unsafe: bool = False) -> Optional[ResumePoint]:
    """The checkpoint to continue from, identical on every rank, or None for a fresh start."""
    explicit = opt['path']['resume_state']
    if explicit:
        folder = _explicit(explicit)
        step = int(STATE_FILE.match(os.path.basename(explicit)).group(1))
        try:
            return _read(folder, step, allow_unsafe)
        except UserError:
            raise
        except Exception as e:
            raise UserError(f'path.resume_state: cannot read {explicit}: {e}') from None

    candidates: List[int] = ckpt.complete_steps()[::-1]
    candidates = dist.broadcast_object(candidates)
    log = get_logger()
    for step in candidates:
        try:
            point = _read(ckpt, step, allow_unsafe)
        except UserError as e:
            if 'unrestricted unpickling' in str(e):
                raise
            ok, err = False, str(e)
        except Exception as e:  # truncated/corrupt file: torch raises several types
            ok, err = False, f'{type(e).__name__}: {e}'
        else:
            ok, err = True, ''
        # All ranks must agree: a file readable on one rank but not on another is not a resume point.
        flag = torch.tensor([0.0 if ok else 1.0])
        dist.all_reduce_max(flag)
        if flag.item() == 0:
            return point
        log.warning(f'resume: checkpoint {step} in {ckpt.folder} is damaged ({err.splitlines()[0][:200] if err else "on another rank"}); '
                    f'trying the previous one')
    return None
