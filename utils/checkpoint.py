"""Checkpoint files: atomic writes, safe loading, complete-save discovery and pruning.

Layout (KAIR-compatible weights): `models/{iter}_G.pth` and `models/{iter}_E.pth` are plain
state_dicts; `models/{iter}_state.pth` holds the rest of the training state and is written last,
so its presence marks a complete save. `models/latest` names the newest complete save and is
updated after it. Pruning only ever removes saves older than a complete newer one.
"""
import os
import pickle
import re
import tempfile
from typing import Any, Dict, List, Optional

import torch

from utils.errors import UserError

_STATE = re.compile(r'^(\d+)_state\.pth$')
UNSAFE_FLAG = '--allow-unsafe-load'


def atomic_write_bytes(path: str, write: Any) -> None:
    """Write through a temporary file in the same folder, fsync, then rename over `path`.

    A crash at any point leaves either the old file or the new one, never a truncated file.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix='.' + os.path.basename(path) + '.', suffix='.tmp', dir=folder)
    try:
        with os.fdopen(fd, 'wb') as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_torch_save(obj: Any, path: str) -> None:
    atomic_write_bytes(path, lambda f: torch.save(obj, f))


def atomic_write_text(path: str, text: str) -> None:
    atomic_write_bytes(path, lambda f: f.write(text.encode('utf-8')))


def load(path: str, allow_unsafe: bool = False) -> Any:
    """torch.load with `weights_only=True`; code-carrying pickles need an explicit opt-in."""
    try:
        return torch.load(path, map_location='cpu', weights_only=True)
    except pickle.UnpicklingError as e:
        if not allow_unsafe:
            reason = str(e).strip().splitlines()[0] if str(e).strip() else 'unsupported object'
            raise UserError(f'{path}: refusing to load a checkpoint that needs unrestricted unpickling '
                            f'({reason[:160]}); pass {UNSAFE_FLAG} if you trust this file') from None
        return torch.load(path, map_location='cpu', weights_only=False)
    except FileNotFoundError:
        raise UserError(f'{path}: checkpoint file not found') from None


def unwrap_params(state: Any, prefer: str = 'params') -> Dict[str, torch.Tensor]:
    """A bare state_dict, or the one under `params`/`params_ema` (BasicSR/VRT release format)."""
    if isinstance(state, dict) and ('params' in state or 'params_ema' in state):
        other = 'params_ema' if prefer == 'params' else 'params'
        state = state.get(prefer, state.get(other))
    if not isinstance(state, dict):
        raise UserError('checkpoint does not contain a state_dict')
    return {k[len('module.'):] if k.startswith('module.') else k: v for k, v in state.items()}


class CheckpointDir:
    """The `models/` folder of a run."""

    def __init__(self, folder: str, keep_last: int = 0):
        self.folder = folder
        self.keep_last = keep_last

    def path(self, step: int, kind: str) -> str:
        return os.path.join(self.folder, f'{step}_{kind}.pth')

    def complete_steps(self) -> List[int]:
        """Iterations with a training-state file, oldest first."""
        if not os.path.isdir(self.folder):
            return []
        return sorted(int(m.group(1)) for m in map(_STATE.match, os.listdir(self.folder)) if m)

    def latest_marker(self) -> Optional[int]:
        try:
            with open(os.path.join(self.folder, 'latest')) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def save(self, step: int, files: Dict[str, Any]) -> None:
        """Write `{step}_{kind}.pth` for each entry; 'state' last; then the marker; then prune."""
        kinds = sorted(files, key=lambda k: k == 'state')
        for kind in kinds:
            atomic_torch_save(files[kind], self.path(step, kind))
        atomic_write_text(os.path.join(self.folder, 'latest'), f'{step}\n')
        self.prune()

    def save_best(self, files: Dict[str, Any], step: int, psnr: float) -> None:
        """`best_G.pth` (and `best_E.pth`) by validation PSNR, then a `best` note naming the iteration."""
        for kind, obj in files.items():
            atomic_torch_save(obj, os.path.join(self.folder, f'best_{kind}.pth'))
        atomic_write_text(os.path.join(self.folder, 'best'), f'{step} {psnr:.4f}\n')

    def remove_stale_temp(self) -> List[str]:
        """Temporary files of a save that was killed before its rename (never a complete file)."""
        if not os.path.isdir(self.folder):
            return []
        stale = [n for n in os.listdir(self.folder) if n.startswith('.') and n.endswith('.tmp')]
        for name in stale:
            os.unlink(os.path.join(self.folder, name))
        return stale

    def prune(self) -> List[int]:
        """Remove all but the newest `keep_last` complete saves (0 keeps everything)."""
        steps = self.complete_steps()
        if self.keep_last <= 0 or len(steps) <= self.keep_last:
            return []
        removed = steps[:-self.keep_last]
        for step in removed:
            os.unlink(self.path(step, 'state'))  # first: the save stops counting as complete
            for name in os.listdir(self.folder):
                if name.endswith('.pth') and name.split('_', 1)[0] == str(step):
                    os.unlink(os.path.join(self.folder, name))
        return removed
