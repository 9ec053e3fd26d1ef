"""Following a running job's `models/` folder from outside (`main_test.py --watch`): which checkpoints are complete
and not yet tested, which vanished before they were tested, when the job is done, and the table of results by
iteration (`results_by_iter.csv`) that lets a restarted watcher go on where it stopped.

Read-only towards the job: the folder is listed and files are read (copied elsewhere before they are loaded),
never written, renamed, deleted or locked, so the watcher can run on another GPU or machine (a shared file
system) and cannot slow, block or break the job. A checkpoint counts once its `{iter}_state.pth` exists:
utils/checkpoint.py writes every file of a save through a temporary file renamed into place, the state file
last, so a half-written save (temporary files, weights without a state file) is never seen as complete.
Pruning removes the state file first, then the weights: a checkpoint can vanish at any moment, also
between being listed and being read (the caller skips it with a line). A checkpoint is known by its
iteration and the time its state file was written: a job that resumes from an earlier save, or starts over
(`--fresh`), saves the same iterations again, and those are new checkpoints, tested again.
"""
import csv
import io
import os
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from utils.checkpoint import STATE_FILE, atomic_write_text
from utils.errors import UserError
from utils.options import parse_json_file

RESULTS_BY_ITER = 'results_by_iter.csv'
TEST_CURVES = 'test_curves.png'
Key = Tuple[int, int]  # (iteration, mtime of its state file in ns)


@dataclass(frozen=True)
class Checkpoint:
    """One complete save of the job: its iteration, the weights to test (`_E.pth` when the save has one, as
    main_test without --weights takes) and when its state file was written."""
    step: int
    weights: str
    saved_ns: int

    @property
    def key(self) -> Key:
        return self.step, self.saved_ns

    @property
    def state_file(self) -> str:
        return os.path.join(os.path.dirname(self.weights), f'{self.step}_state.pth')


def models_folder(given: str, default: str) -> str:
    """The models folder `--watch FOLDER` names (a run folder or its models/ folder; '' is `default`, the run of
    --opt); a folder that does not exist is a UserError."""
    folder = given or default
    if os.path.isdir(os.path.join(folder, 'models')):
        folder = os.path.join(folder, 'models')
    if not os.path.isdir(folder):
        hint = '' if given else ' (the models folder of the run of --opt: start the job first, or name its folder)'
        raise UserError(f'--watch {folder}: folder not found{hint}')
    return folder


def complete_checkpoints(models: str) -> List[Checkpoint]:
    """The complete saves in `models`, oldest iteration first; one that vanishes while being listed is left out."""
    try:
        names = set(os.listdir(models))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        m = STATE_FILE.match(name)
        if not m:
            continue
        step = int(m.group(1))
        weights = next((f'{step}_{kind}.pth' for kind in ('E', 'G') if f'{step}_{kind}.pth' in names), None)
        try:
            saved = os.stat(os.path.join(models, name)).st_mtime_ns
        except FileNotFoundError:
            continue  # pruned meanwhile
        if weights is not None:
            out.append(Checkpoint(step, os.path.join(models, weights), saved))
    return sorted(out, key=lambda c: c.key)


class Follower:
    """The complete checkpoints of a models folder still to be handled (tested, or skipped with a reason), and
    those that vanished before they were: one `poll()` per look at the folder, `done()` for each handled one."""

    def __init__(self, models: str, handled: Iterable[Key] = ()):
        self.models = models
        self.handled: Set[Key] = set(handled)
        self.waiting: Dict[Key, Checkpoint] = {}
        self.current: Dict[Key, Checkpoint] = {}

    def poll(self) -> Tuple[List[Checkpoint], List[Checkpoint]]:
        """(the complete checkpoints not handled yet, oldest first; those seen waiting before that are gone now:
        pruned by the job, or set aside by its resume, before they could be tested)."""
        self.current = {c.key: c for c in complete_checkpoints(self.models)}
        vanished = [c for k, c in self.waiting.items() if k not in self.current]
        self.waiting = {k: c for k, c in self.current.items() if k not in self.handled}
        return sorted(self.waiting.values(), key=lambda c: c.key), sorted(vanished, key=lambda c: c.key)

    def done(self, ckpt: Checkpoint) -> None:
        self.handled.add(ckpt.key)
        self.waiting.pop(ckpt.key, None)

    def reached(self, total_iter: int) -> bool:
        """Whether a checkpoint in the folder now (as of the last poll) is at `total_iter` or later and handled: the
        job's last checkpoint (an older history's, archived by --fresh or set aside, does not count)."""
        return any(k in self.handled for k, c in self.current.items() if c.step >= total_iter)


def job_total_iter(run_dir: str, default: int) -> int:
    """The `train.total_iter` the job trains to: from the newest options file it saved in `<run>/options/` (a
    restart with `--set train.total_iter=...` saves a new one), else `default` (the --opt file's)."""
    folder = os.path.join(run_dir, 'options')
    try:
        files = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith('.json')]
        newest = max(files, key=os.path.getmtime) if files else None
    except OSError:
        return default
    if newest is None:
        return default
    try:
        total = parse_json_file(newest)['train']['total_iter']
    except (UserError, KeyError, TypeError):
        return default
    return total if isinstance(total, int) and not isinstance(total, bool) else default


class IterTable:
    """`results_by_iter.csv`: one row per tested checkpoint and test set (iteration, set, weights file, when the
    checkpoint was saved, items, then the scores), kept in the order tested. Each append rewrites the file
    atomically (it stays small), so a kill at any moment leaves the rows of every checkpoint tested before."""

    FIXED = ('iteration', 'set', 'weights', 'saved_ns', 'items')

    def __init__(self, path: str, names: Sequence[str]):
        self.path = path
        self.columns = [*self.FIXED, *names]
        self.rows: List[List[str]] = []
        if not os.path.exists(path):
            return
        try:
            with open(path, newline='') as f:
                reader = csv.reader(f)
                table = [(reader.line_num, r) for r in reader if r]
        except (OSError, UnicodeDecodeError, csv.Error) as e:
            why = getattr(e, 'strerror', None) or e
            raise UserError(f'{path}: cannot read it ({why}); give another --out') from None
        if table and table[0][1] != self.columns:
            raise UserError(f'{path}: its columns are {", ".join(table[0][1])} but this run scores '
                            f'{", ".join(self.columns)}; give another --out, or move the file away')
        for line, row in table[1:]:
            self.check_row(row, f'{path}: line {line}')
        self.rows = [r for _, r in table[1:]]

    def check_row(self, row: List[str], where: str) -> None:
        """A row read back as the watch writes it (a damaged or hand-edited table is one UserError naming the
        line, not a traceback later): every column, whole numbers for iteration, saved_ns and items, numbers
        for the scores."""
        advice = 'fix or remove that line, or give another --out'
        if len(row) != len(self.columns):
            raise UserError(f'{where}: {len(row)} values for the {len(self.columns)} columns; {advice}')
        for name, value in zip(self.columns, row):
            if name in ('set', 'weights'):
                continue
            try:
                int(value) if name in self.FIXED else float(value)
            except ValueError:
                kind = 'a whole number' if name in self.FIXED else 'a number'
                raise UserError(f'{where}: {name} {value!r} is not {kind}; {advice}') from None

    def tested(self) -> Dict[Key, Set[str]]:
        """The test sets each checkpoint (iteration, saved_ns) has rows for."""
        out: Dict[Key, Set[str]] = {}
        for r in self.rows:
            out.setdefault((int(r[0]), int(r[3])), set()).add(r[1])
        return out

    def append(self, ckpt: Checkpoint, results: Sequence[Tuple[str, int, Sequence[float]]]) -> None:
        """Rows of `ckpt`: (set name, items, scores in the columns' order) each."""
        new = [[str(ckpt.step), name, os.path.basename(ckpt.weights), str(ckpt.saved_ns), str(items),
                *(f'{v:.6g}' for v in scores)] for name, items, scores in results]
        text = io.StringIO()
        csv.writer(text).writerows([self.columns, *self.rows, *new])
        atomic_write_text(self.path, text.getvalue())
        self.rows += new

    def records(self) -> List[Dict[str, Any]]:
        """The rows as dicts (iteration and scores as numbers), for the plot."""
        out = []
        for r in self.rows:
            row: Dict[str, Any] = dict(zip(self.columns, r))
            row['iteration'] = int(row['iteration'])
            for name in self.columns[len(self.FIXED):]:
                row[name] = float(row[name])
            out.append(row)
        return out


def lock_line(held: Optional[bool], before: Optional[bool], lock: str) -> Optional[str]:
    """What to say when the job's run lock changed from `before` to `held` (None: unknown), or None."""
    if held is False and before is not False:
        return (f'no job holds its run lock {lock} now (not started, stopped, or between restarts): waiting for '
                f'checkpoints')
    if held and before is False:
        return f'the job holds its run lock {lock} again: it runs'
    return None
