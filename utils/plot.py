"""curves.png of a run: losses and lr, and validation PSNR/SSIM against the iteration, drawn from
history.jsonl alone, so any run folder can be plotted again without TensorBoard (the command:
scripts/plot_curves.py <root>/<task>, which calls `draw_run`).

During training rank 0 redraws it after every validation in a child process running `draw_run` too
(matplotlib's object API with the Agg canvas; no pyplot, no display), so the training loop
only pays for starting it (bench/bench_curves.py measures both). `main_test.py --watch` draws its
test_curves.png (scores of each test set against the checkpoint's iteration) with `watch_curves_figure`.
"""
import io
import math
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from utils.diskspace import describe_write_error
from utils.exit_codes import EXIT_USER_ERROR
from utils.history import HISTORY_FILE, read_history

CURVES_FILE = 'curves.png'
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# what `BackgroundPlotter`'s child process runs: `draw_run` of the folder given as its argument
CHILD_CODE = 'import sys; from utils.plot import draw_run; sys.exit(draw_run(sys.argv[1]))'
_NOT_LOSSES = {'kind', 'iter', 'epoch', 'lr', 'iter_time', 'data_time', 'samples_per_sec', 'time', 'D_skipped'}


def plot_rows(rows: Sequence[Dict[str, Any]], out: str, title: str = '') -> None:
    """Draw the curves of `rows` (history rows) to the PNG `out`, written atomically."""
    save_figure(curves_figure(rows, title), out)


def save_figure(fig: Any, out: str) -> None:
    """The figure as the PNG `out`, written atomically: drawn in memory first, so the temporary file beside `out`
    lives only for the write of its bytes."""
    data = io.BytesIO()
    fig.savefig(data, format='png')
    tmp = f'{out}.tmp.png'
    try:
        with open(tmp, 'wb') as f:
            f.write(data.getvalue())
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def watch_curves_figure(rows: Sequence[Dict[str, Any]], names: Sequence[str], title: str = '') -> Any:
    """`main_test.py --watch`'s plot: one panel per score of `names` (PSNR, SSIM, on Y, then `val.metrics`) against
    the checkpoint's iteration, a line per test set. `rows` are results_by_iter.csv's (utils/watch.py), in the order
    tested: where an iteration was tested twice (a job that resumed from an earlier save), the later row counts."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cols = min(len(names), 4)
    lines = -(-len(names) // cols)
    fig = Figure(figsize=(3.4 * cols, 3.0 * lines), dpi=80)
    FigureCanvasAgg(fig)
    axes = fig.subplots(lines, cols, squeeze=False).ravel()
    sets = list(dict.fromkeys(r['set'] for r in rows))
    labels = {'psnr': 'PSNR (dB)', 'ssim': 'SSIM', 'psnr_y': 'PSNR on Y (dB)', 'ssim_y': 'SSIM on Y'}
    for ax, name in zip(axes, names):
        for i, test_set in enumerate(sets):
            last = {r['iteration']: r[name] for r in rows if r['set'] == test_set}
            its = sorted(last)
            ax.plot(its, [last[k] for k in its], marker='o', markersize=3, color=f'C{i}', label=test_set)
        ax.set_title(labels.get(name, name), fontsize=9)
        ax.set_xlabel('iteration', fontsize=8)
        ax.grid(alpha=0.3)
    if sets:
        axes[0].legend(fontsize=7)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def curves_figure(rows: Sequence[Dict[str, Any]], title: str = '') -> Any:
    """The figure of `plot_rows`: training losses (log scale), the learning rate (the schedule as planned at each
    start, and the values logged at the print steps), validation PSNR with its best point and SSIM on its own
    axis, each in the legend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    train = [r for r in rows if r.get('kind') == 'train']
    val = [r for r in rows if r.get('kind') == 'val']
    fig = Figure(figsize=(12, 3.6), dpi=80)
    FigureCanvasAgg(fig)
    ax_loss, ax_lr, ax_val = fig.subplots(1, 3)
    losses = sorted({k for r in train for k, v in r.items() if k not in _NOT_LOSSES and isinstance(v, (int, float))})
    values = [r[k] for r in train for k in losses if isinstance(r.get(k), (int, float)) and math.isfinite(r[k])]
    # a log axis, unless a loss can be negative or zero (the psnr loss is minus a PSNR): then a symmetric log axis
    # that keeps every point, linear within the smallest magnitude
    log = all(v > 0 for v in values)
    for key in losses:
        pts = [(r['iter'], r[key]) for r in train if isinstance(r.get(key), (int, float)) and (r[key] > 0 or not log)]
        if pts:
            ax_loss.plot(*zip(*pts), label=key, linewidth=1)
    if losses:
        if log:
            ax_loss.set_yscale('log')
        else:
            nonzero = [abs(v) for v in values if v != 0]
            ax_loss.set_yscale('symlog', linthresh=min(nonzero) if nonzero else 1.0)
        ax_loss.legend(fontsize=7)
    ax_loss.set_title('training loss')
    lr = [(r['iter'], r['lr']) for r in train if isinstance(r.get('lr'), (int, float))]
    planned = schedule_points(rows)
    if planned:
        # the schedule's closed form, sampled densely and at each side of its jumps: its true shape
        ax_lr.plot(*zip(*planned), color='tab:gray', linewidth=1, label='schedule')
    if lr:
        # the logged values: each held until the next print
        ax_lr.plot(*zip(*lr), color='tab:green', drawstyle='steps-post', label='logged')
    positive = [v for _, v in lr + planned if v > 0]
    if positive and max(positive) > 10 * min(positive):
        ax_lr.set_yscale('log')
    if lr and planned:
        ax_lr.legend(fontsize=7)
    ax_lr.set_title('learning rate')
    handles = []
    ax_ssim = None
    for i, name in enumerate(sorted({r.get('test_set', '') for r in val})):
        pts = [r for r in val if r.get('test_set', '') == name and isinstance(r.get('psnr'), (int, float))]
        if not pts:
            continue
        label = f'{name} ' if name else ''
        its = [r['iter'] for r in pts]
        handles += ax_val.plot(its, [r['psnr'] for r in pts], marker='o', markersize=4, color=f'C{2 * i}',
                               label=f'{label}PSNR')
        best = max(pts, key=lambda r: r['psnr'])
        handles += ax_val.plot([best['iter']], [best['psnr']], marker='*', markersize=12, linestyle='none',
                               color=f'C{2 * i}', label=f'best {best["psnr"]:.2f} dB @ {best["iter"]}')
        _min_span(ax_val, [r['psnr'] for r in pts], 0.5)
        ssims = [r['ssim'] for r in pts if isinstance(r.get('ssim'), (int, float))]
        if len(ssims) == len(pts):
            ax_ssim = ax_ssim or ax_val.twinx()
            handles += ax_ssim.plot(its, ssims, marker='s', markersize=3, linestyle='--', color=f'C{2 * i + 1}',
                                    label=f'{label}SSIM (right axis)')
            _min_span(ax_ssim, ssims, 0.01)
    if handles:
        ax_val.legend(handles=handles, fontsize=7, loc='lower right')
    if ax_ssim is not None:
        ax_ssim.set_ylabel('SSIM', fontsize=8)
    ax_val.set_ylabel('PSNR (dB)', fontsize=8)
    ax_val.set_title('validation')
    for ax in (ax_loss, ax_lr, ax_val):
        ax.set_xlabel('iteration')
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def schedule_points(rows: Sequence[Dict[str, Any]]) -> List[Tuple[int, float]]:
    """(iteration, lr) of the schedule as planned: each start's `schedule` row (training/status.py) up to the next
    start, so a run resumed with other schedule options shows what was in force when."""
    plans = [r for r in rows if r.get('kind') == 'schedule' and isinstance(r.get('points'), list)]
    out: List[Tuple[int, float]] = []
    for i, plan in enumerate(plans):
        until = plans[i + 1]['iter'] if i + 1 < len(plans) else math.inf
        out += [(int(p[0]), float(p[1])) for p in plan['points']
                if isinstance(p, list) and len(p) == 2 and p[0] <= until and isinstance(p[1], (int, float))]
    return out


def _min_span(ax: Any, values: Sequence[float], span: float) -> None:
    """Y limits at least `span` wide around `values`: two close validations are not a wall-to-wall diagonal."""
    lo, hi = min(values), max(values)
    if hi - lo < span:
        mid = (lo + hi) / 2
        ax.set_ylim(mid - span / 2, mid + span / 2)


def plot_run(folder: str) -> str:
    """Write `<folder>/curves.png` from `<folder>/history.jsonl`; returns the image's path."""
    rows = read_history(os.path.join(folder, HISTORY_FILE))
    out = os.path.join(folder, CURVES_FILE)
    plot_rows(rows, out, os.path.basename(os.path.normpath(folder)))
    return out


def draw_run(folder: str) -> int:
    """`plot_run` as a process ends: 0 drawn, 2 a folder without history.jsonl, 1 a failed write, the problem in
    one line on stderr (the child runs beside training, on its stderr; the command line prints the same)."""
    if not os.path.isfile(os.path.join(folder, HISTORY_FILE)):
        sys.stderr.write(f'error: {folder}: no {HISTORY_FILE} (not a run folder, or a run from before the history '
                         f'file existed)\n')
        return EXIT_USER_ERROR
    try:
        plot_run(folder)
    except OSError as e:  # a full disk: one line, not a traceback
        sys.stderr.write(f'error: {os.path.join(folder, CURVES_FILE)}: {describe_write_error(e, folder)}\n')
        return 1
    return 0


class BackgroundPlotter:
    """Redraws curves.png in a child process (`draw_run`, as scripts/plot_curves.py draws): the training loop pays
    for starting it, not for matplotlib, and shares no interpreter lock with the drawing. A redraw
    asked for while one runs is dropped (the next validation draws again); `close` waits for the last."""

    def __init__(self, folder: str):
        self.folder = folder
        self._child: Optional[subprocess.Popen] = None

    def redraw(self) -> None:
        """Start drawing the folder's curves now, unless a drawing still runs (then the next validation draws)."""
        if self.drawing():
            return
        env = {**os.environ, 'MPLBACKEND': 'Agg', 'OMP_NUM_THREADS': '1',
               'PYTHONPATH': os.pathsep.join(filter(None, [_ROOT, os.environ.get('PYTHONPATH')]))}
        # from the repository, with the repository first on the path: a user's own `utils` package next to their
        # option files must never be imported instead of this one
        self._child = subprocess.Popen([sys.executable, '-c', CHILD_CODE, os.path.abspath(self.folder)], env=env,
                                       cwd=_ROOT, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL)  # errors: on stderr

    def drawing(self) -> bool:
        """Whether a redraw is running now."""
        return self._child is not None and self._child.poll() is None

    def close(self, timeout: float = 60.0) -> None:
        """Wait for the last drawing (at most `timeout` seconds, then it is killed): the run ends with its curves."""
        if self._child is not None:
            try:
                self._child.wait(timeout)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait()
            self._child = None
