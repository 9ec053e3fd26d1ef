"""The run's history: one JSON line per print step and per validation in `<root>/<task>/history.jsonl`.

For whoever reads a run folder without TensorBoard (a login node, a colleague): plain text, one
object per line, the same numbers as the TensorBoard scalars. Written by rank 0 only.

Crash-safe by construction: each row is one `write` of a complete line on an append-only file, so a
killed run leaves complete lines (and at worst one partial last line, which readers skip). On
start the file is cut back to the iteration training continues from (`truncate_after`), so a
resumed run never repeats rows and the file is always one consistent history.
"""
import json
import math
import os
from typing import Any, Dict, List

HISTORY_FILE = 'history.jsonl'


def read_history(path: str) -> List[Dict[str, Any]]:
    """Every complete row of a history file, in order (a partial or damaged line is skipped)."""
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path, 'rb') as f:
        for line in f:
            if not line.endswith(b'\n'):
                break  # a write cut short by a kill: only the last line can be partial
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and 'iter' in row:
                rows.append(row)
    return rows


class History:
    """Appends rows to `<folder>/history.jsonl`; `truncate_after(step)` first, once per run start."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, HISTORY_FILE)

    def truncate_after(self, step: int) -> int:
        """Keep the rows up to iteration `step` (those of the checkpoint resumed), drop the rest and any
        partial line; atomically (a temporary file renamed over it). Returns how many rows were dropped."""
        if not os.path.exists(self.path):
            return 0
        rows = read_history(self.path)
        kept = [r for r in rows if r['iter'] <= step]
        with open(self.path, 'rb') as f:
            intact = f.read().endswith(b'\n') or os.path.getsize(self.path) == 0
        if len(kept) == len(rows) and intact:
            return 0
        tmp = f'{self.path}.tmp'
        with open(tmp, 'w') as f:
            f.writelines(_line(r) for r in kept)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        return len(rows) - len(kept)

    def append(self, row: Dict[str, Any]) -> None:
        """One complete line in one write (O_APPEND): never interleaved, never half a row but the last."""
        data = _line(row).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def _line(row: Dict[str, Any]) -> str:
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
    return json.dumps(clean, separators=(',', ':')) + '\n'
