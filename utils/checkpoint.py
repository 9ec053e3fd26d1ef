"""Checkpoint files: atomic writes, safe loading, complete-save discovery and pruning.

Layout (KAIR-compatible weights): `models/{iter}_G.pth` and `models/{iter}_E.pth` are plain
state_dicts; `models/{iter}_state.pth` holds the rest of the training state and is written last,
so its presence marks a complete save. `models/latest` names the newest complete save and is
updated after it. Pruning only ever removes saves older than the one just written and older than
the newest `keep_last` intact ones; saves a run does not continue are moved aside, never deleted.
"""
import os
import pickle
import re
import tempfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Tuple

import torch

from utils.diskspace import NoSpaceLeft, no_space, object_bytes
from utils.errors import UserError, first_line

STATE_FILE = re.compile(r'^(\d+)_state\.pth$')
_SAVE_FILE = re.compile(r'^(\d+)_[A-Za-z]+\.pth$')
UNSAFE_FLAG = '--allow-unsafe-load'
# Files are created 0600 by mkstemp; they get the permissions any file of the user gets (the umask).
_UMASK = os.umask(0)
os.umask(_UMASK)


def new_file_mode() -> int:
    """The permissions any new file of the user gets (0666 less the umask): what an atomically written file is
    given, since mkstemp creates its temporary file 0600."""
    return 0o666 & ~_UMASK


def atomic_write_bytes(path: str, write: Any, size: Any = None) -> None:
    """Write through a temporary file in the same folder, fsync, then rename over `path`.

    A crash at any point leaves either the old file or the new one, never a truncated file. A write
    that fails for lack of space (`size`: the bytes written, or a function giving them, for failures
    that carry no errno) raises NoSpaceLeft: `no space left on <mount> (N MB free)`.
    """
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix='.' + os.path.basename(path) + '.', suffix='.tmp', dir=folder)
        with os.fdopen(fd, 'wb') as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, new_file_mode())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)  # first: the free space counted below is the space without this partial file
        message = no_space(e, folder, size) if isinstance(e, Exception) else None
        if message:
            raise NoSpaceLeft(message) from e
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_torch_save(obj: Any, path: str) -> None:
    atomic_write_bytes(path, lambda f: torch.save(obj, f), size=lambda: object_bytes(obj))


def atomic_write_text(path: str, text: str) -> None:
    data = text.encode('utf-8')
    atomic_write_bytes(path, lambda f: f.write(data), size=len(data))


def _looks_like_checkpoint(path: str) -> bool:
    """torch.save writes a zip archive (or, before torch 1.6, a pickle starting with its protocol byte)."""
    with open(path, 'rb') as f:
        head = f.read(4)
    return head.startswith(b'PK\x03\x04') or head[:1] == b'\x80'


def _intact(path: str) -> bool:
    """Cheap structural check, no unpickling: the header of a torch file and, for the zip format
    (torch >= 1.6), a readable central directory at the end. Catches truncated and overwritten files."""
    try:
        with open(path, 'rb') as f:
            head = f.read(4)
        if head[:1] == b'\x80':  # legacy pickle format: the header is all there is to check cheaply
            return True
        if not head.startswith(b'PK\x03\x04'):
            return False
        with zipfile.ZipFile(path) as z:
            return bool(z.namelist())
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return False


def is_safetensors(path: str) -> bool:
    """A safetensors file: an 8-byte little-endian header length, then a JSON header starting with '{'."""
    with open(path, 'rb') as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b'{' and 2 <= int.from_bytes(head[:8], 'little') <= os.path.getsize(path)


def load_safetensors(path: str) -> Dict[str, torch.Tensor]:
    """The tensors of a safetensors file (a bare state_dict; it holds no code, so it is always safe to load)."""
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise UserError(f'{path}: reading a .safetensors file needs the safetensors package; '
                        f'pip install safetensors') from None
    try:
        return load_file(path, device='cpu')
    except Exception as e:  # safetensors raises its own SafetensorError (an Exception) for damaged files
        raise UserError(f'{path}: damaged safetensors file ({first_line(e)[:200]})') from None


def safetensors_metadata(path: str) -> Dict[str, str]:
    """The string metadata in a safetensors file's header (what scripts/export.py says the file is); {} if none."""
    try:
        from safetensors import safe_open
    except ImportError:
        raise UserError(f'{path}: reading a .safetensors file needs the safetensors package; '
                        f'pip install safetensors') from None
    try:
        with safe_open(path, framework='pt') as f:
            return dict(f.metadata() or {})
    except Exception as e:  # safetensors' own SafetensorError for a damaged header
        raise UserError(f'{path}: damaged safetensors file ({first_line(e)[:200]})') from None


def safetensors_data(state: Dict[str, Any], metadata: Dict[str, str], what: str) -> bytes:
    """`state` as the bytes of a safetensors file with `metadata` (strings, as the format requires); an entry that
    is not a tensor is one line naming `what` holds it. Tensors are copied: safetensors refuses tensors that share
    memory."""
    from safetensors.torch import save
    odd = [k for k, v in state.items() if not torch.is_tensor(v)]
    if odd:
        raise UserError(f'{what}: state_dict entry {odd[0]} is not a tensor; safetensors holds tensors only')
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in state.items()}
    return save(tensors, metadata={'format': 'pt', **metadata})


def load(path: str, allow_unsafe: bool = False) -> Any:
    """torch.load with `weights_only=True`; code-carrying pickles need an explicit opt-in. A
    `.safetensors` file (recognised by its content) is read with the safetensors package.

    Every failure is one line naming the file: missing, not a checkpoint at all, damaged, or a
    pickle that needs unrestricted unpickling (only then is `--allow-unsafe-load` suggested).
    """
    try:
        if is_safetensors(path):
            return load_safetensors(path)
        if not _looks_like_checkpoint(path):
            raise UserError(f'{path}: not a PyTorch checkpoint (torch.save writes a zip archive) nor a '
                            f'safetensors file; is this the right file?')
        return torch.load(path, map_location='cpu', weights_only=True)
    except pickle.UnpicklingError as e:
        if not allow_unsafe:
            reason = str(e).strip().splitlines()[0] if str(e).strip() else 'unsupported object'
            raise UserError(f'{path}: refusing to load a checkpoint that needs unrestricted unpickling '
                            f'({reason[:160]}); pass {UNSAFE_FLAG} if you trust this file') from None
        return torch.load(path, map_location='cpu', weights_only=False)
    except FileNotFoundError:
        raise UserError(f'{path}: checkpoint file not found') from None
    except IsADirectoryError:
        raise UserError(f'{path}: is a folder, not a checkpoint file') from None
    except (RuntimeError, EOFError, KeyError, ValueError, OSError) as e:
        raise UserError(f'{path}: damaged checkpoint ({first_line(e)[:200]})') from None


def unwrap_params(state: Any, prefer: str = 'params') -> Dict[str, torch.Tensor]:
    """A bare state_dict, or the one under `params`/`params_ema` (BasicSR/VRT release format)."""
    if isinstance(state, dict) and ('params' in state or 'params_ema' in state):
        other = 'params_ema' if prefer == 'params' else 'params'
        state = state.get(prefer, state.get(other))
    if not isinstance(state, dict):
        raise UserError('checkpoint does not contain a state_dict')
    return {k[len('module.'):] if k.startswith('module.') else k: v for k, v in state.items()}


def newest_weights(folder: str) -> str:
    """The weights of the newest complete save in a run's `models/` folder: its EMA file (`_E.pth`) when
    it has one, else `_G.pth`. What main_test.py and scripts/export.py use when no file is named."""
    ckpt = CheckpointDir(folder)
    steps = ckpt.complete_steps()
    if not steps:
        raise UserError(f'{folder}: no checkpoint found; train first or pass --weights')
    for kind in ('E', 'G'):
        if os.path.exists(ckpt.path(steps[-1], kind)):
            return ckpt.path(steps[-1], kind)
    raise UserError(f'{folder}: checkpoint {steps[-1]} has no weights file')


class CheckpointDir:
    """The `models/` folder of a run."""

    def __init__(self, folder: str, keep_last: int = 0):
        self.folder = folder
        self.keep_last = keep_last

    def path(self, step: int, kind: str) -> str:
        return os.path.join(self.folder, f'{step}_{kind}.pth')

    def _names(self) -> List[str]:
        return os.listdir(self.folder) if os.path.isdir(self.folder) else []

    def complete_steps(self) -> List[int]:
        """Iterations with a training-state file, oldest first."""
        return sorted(int(m.group(1)) for m in map(STATE_FILE.match, self._names()) if m)

    def save(self, step: int, files: Dict[str, Any]) -> None:
        """Write `{step}_{kind}.pth` for each entry; 'state' last; then the marker; then prune.

        If any write fails (a full disk raises RuntimeError from torch.save), the files of this
        step written so far are removed before the error propagates: no half save stays behind.
        """
        kinds = sorted(files, key=lambda k: k == 'state')
        written = []
        try:
            for kind in kinds:
                atomic_torch_save(files[kind], self.path(step, kind))
                written.append(self.path(step, kind))
        except BaseException:
            for path in written:
                os.unlink(path)
            raise
        atomic_write_text(os.path.join(self.folder, 'latest'), f'{step}\n')
        self.prune(written=step)

    def remove_incomplete(self) -> List[str]:
        """Files of saves that never got their state file (killed or failed mid-save): never resumable."""
        complete = set(self.complete_steps())
        partial = [n for n in self._names() if (m := _SAVE_FILE.match(n)) and int(m.group(1)) not in complete]
        for name in partial:
            os.unlink(os.path.join(self.folder, name))
        return partial

    def set_aside_after(self, step: int) -> Optional[str]:
        """Move every save newer than `step` (complete, damaged or partial) into `abandoned_<time>/`.

        Run when training continues from `step`: what came after it belongs to a history this run
        does not continue (a damaged newest save it fell back from, or the later saves of a run
        resumed from an explicit older `path.resume_state`). Afterwards the folder holds one
        history, so iteration order is recency order for pruning and for the next auto-resume.
        Nothing is deleted and nothing is overwritten (a second set-aside in the same second gets
        its own folder). `latest` is corrected first, and state files move before the other files
        of their save: a run killed half-way leaves no marker and no complete save pointing into
        the abandoned history, and the next start finishes the move. Returns the folder or None.
        """
        self._correct_latest(step)
        newer = [n for n in self._names() if (m := _SAVE_FILE.match(n)) and int(m.group(1)) > step]
        if not newer:
            return None
        newer.sort(key=lambda n: (not STATE_FILE.match(n), n))  # state files first
        best = self.read_best()
        if best is not None and best[0] > step:
            newer += sorted(n for n in self._names() if n.startswith('best'))
        dest = self._new_folder(f'abandoned_{time.strftime("%y%m%d_%H%M%S")}')
        for name in newer:
            os.replace(os.path.join(self.folder, name), os.path.join(dest, name))
        return dest

    def _correct_latest(self, step: int) -> None:
        """`latest` names the newest complete save up to `step`, or is removed when there is none."""
        marker = os.path.join(self.folder, 'latest')
        try:
            with open(marker) as f:
                current: Optional[str] = f.read().strip()
        except OSError:
            current = None
        kept = [s for s in self.complete_steps() if s <= step]
        if kept and current != str(kept[-1]):
            atomic_write_text(marker, f'{kept[-1]}\n')
        elif not kept and current is not None:
            os.unlink(marker)

    def _new_folder(self, name: str) -> str:
        """`name`, or `name_2`, `name_3`, ... : a folder created now, never an existing one."""
        for i in range(1, 1000):
            path = os.path.join(self.folder, name if i == 1 else f'{name}_{i}')
            try:
                os.mkdir(path)
                return path
            except FileExistsError:
                continue
        raise OSError(f'{self.folder}: cannot create a new folder named {name}_<n>')

    def read_best(self) -> Optional[Tuple[int, float, str]]:
        """(iteration, score, metric) of `best_*.pth` from the `best` note, or None; a note written before
        `val.best_metric` existed has no metric: it was PSNR."""
        try:
            with open(os.path.join(self.folder, 'best')) as f:
                step, value, *metric = f.read().split()
            return int(step), float(value), metric[0] if metric else 'psnr'
        except (OSError, ValueError, IndexError):
            return None

    def save_best(self, files: Dict[str, Any], step: int, value: float, metric: str = 'psnr') -> None:
        """`best_G.pth` (and `best_E.pth`) by the validation score `metric` (`val.best_metric`), then a `best`
        note naming the iteration, the score and the metric."""
        for kind, obj in files.items():
            atomic_torch_save(obj, os.path.join(self.folder, f'best_{kind}.pth'))
        atomic_write_text(os.path.join(self.folder, 'best'), f'{step} {value:.6g} {metric}\n')

    def remove_stale_temp(self) -> List[str]:
        """Temporary files of a save that was killed before its rename (never a complete file)."""
        stale = [n for n in self._names() if n.startswith('.') and n.endswith('.tmp')]
        for name in stale:
            os.unlink(os.path.join(self.folder, name))
        return stale

    def intact(self, step: int) -> bool:
        """The G and state files of `step` exist and every file of it passes the cheap check."""
        names = [n for n in self._names() if (m := _SAVE_FILE.match(n)) and int(m.group(1)) == step]
        if f'{step}_G.pth' not in names or f'{step}_state.pth' not in names:
            return False
        return all(_intact(os.path.join(self.folder, n)) for n in names)

    def prune(self, written: Optional[int] = None) -> List[int]:
        """Keep the newest `keep_last` intact saves (0 keeps everything); remove complete saves older than them.

        `written`, the save just made, always stays and counts as intact. Saves newer than it are
        not this run's history (they are set aside at the next start): never counted, never removed.
        A damaged save does not count as kept, so it never costs a good one; damaged saves newer
        than the oldest kept one are left in place, older ones go with the rest.
        """
        steps = self.complete_steps()
        if self.keep_last <= 0 or not steps:
            return []
        if written is None:
            written = steps[-1]
        kept = []
        for step in reversed([s for s in steps if s <= written]):
            if step == written or self.intact(step):
                kept.append(step)
                if len(kept) == self.keep_last:
                    break
        if len(kept) < self.keep_last:
            return []
        removed = [s for s in steps if s < kept[-1]]
        for step in removed:
            os.unlink(self.path(step, 'state'))  # first: the save stops counting as complete
            for name in self._names():
                m = _SAVE_FILE.match(name)
                if m and int(m.group(1)) == step:
                    os.unlink(os.path.join(self.folder, name))
        return removed
