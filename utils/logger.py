"""Run outputs behind one rank-0 gate: log file, console, TensorBoard and W&B.

Every rank builds a `Reporter`; only rank 0's writes anything. Other ranks keep warnings and
errors on stderr (prefixed with their rank) so a failing rank is never silent.
"""
import logging
import os
import sys
import threading
import time
from typing import Any, Dict, Mapping, Optional

import numpy as np

from utils.diskspace import describe_write_error
from utils.errors import first_line
from utils.history import History
from utils.options import dumps
from utils.plot import BackgroundPlotter


# milliseconds, as KAIR's logger writes them: seconds between two status lines are then a timing to read
_FORMAT = logging.Formatter('%(asctime)s.%(msecs)03d %(levelname)s: %(message)s', '%y-%m-%d %H:%M:%S')


class _Buffer(logging.Handler):
    """Keeps rank 0's records until the run folder may be written (after every check passed)."""

    def __init__(self) -> None:
        super().__init__()
        self.records = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


HOLD_S = 3.0  # how long start-up lines wait on the console for the checks to pass


class _HeldConsole(logging.StreamHandler):
    """Rank 0's console during start-up: lines wait until the start-up checks passed (`show`), so that a
    user mistake shows as its one `error:` line alone instead of after the banner and the first steps of
    a start that did not happen. A start-up that takes longer than HOLD_S (large data sets to check or
    cache) shows what it held and goes on live, so a long start is never silent. Errors pass at once.
    """

    def __init__(self, stream: Any, hold_s: Optional[float] = None):
        super().__init__(stream)
        self.held: list = []
        self.shown = False
        self._timer = threading.Timer(HOLD_S if hold_s is None else hold_s, self.show)
        self._timer.daemon = True
        self._timer.start()

    def emit(self, record: logging.LogRecord) -> None:  # called with the handler's lock held
        if self.shown or record.levelno >= logging.ERROR:
            super().emit(record)
        else:
            self.held.append(record)

    def show(self) -> None:
        """Show what was held, and every later line as it comes."""
        self._timer.cancel()
        self.acquire()
        try:
            if not self.shown:
                self.shown = True
                for record in self.held:
                    super().emit(record)
                self.held = []
        finally:
            self.release()

    def close(self) -> None:
        """A closed console shows nothing more: held lines (a start-up that failed) stay unshown."""
        self._timer.cancel()
        super().close()


def show_console() -> None:
    """The start-up checks passed: rank 0's held console lines are shown, and later ones as they come."""
    for h in get_logger().handlers:
        if isinstance(h, _HeldConsole):
            h.show()


def setup_logger(rank: int, buffered: bool = True) -> logging.Logger:
    """Rank 0: INFO to stdout (`buffered`: kept for the log file); other ranks: WARNING to stderr.

    Nothing is written to disk here: the start-up checks run before the run folder exists, and
    `log_to_file` later replays what they logged into the file. With `buffered`, console lines also wait
    for the checks (see _HeldConsole): `log_to_file` shows them.
    """
    logger = logging.getLogger('restoration')
    for h in list(logger.handlers):
        logger.removeHandler(h)
        h.close()
    logger.propagate = False
    if rank == 0:
        logger.setLevel(logging.INFO)
        console = _HeldConsole(sys.stdout) if buffered else logging.StreamHandler(sys.stdout)
        console.setFormatter(_FORMAT)
        logger.addHandler(console)
        if buffered:
            logger.addHandler(_Buffer())
    else:
        logger.setLevel(logging.WARNING)
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter(f'[rank {rank}] %(levelname)s: %(message)s'))
        logger.addHandler(h)
    return logger


class _LogFile(logging.FileHandler):
    """The run's log file. A line that cannot be written (a full disk) is not a traceback per line on stderr, as
    logging's own handler prints: the console gets one warning saying why, and the file is tried again with the
    next line (what its buffer kept goes in first); a later failure after a success warns again."""

    failing = False
    _ok = True

    def emit(self, record: logging.LogRecord) -> None:
        self._ok = True
        super().emit(record)  # calls handleError if the write fails
        if self._ok:
            self.failing = False

    def handleError(self, record: logging.LogRecord) -> None:
        self._ok = False
        if self.failing:
            return
        self.failing = True
        problem = describe_write_error(sys.exc_info()[1] or OSError('write failed'), self.baseFilename)
        warning = logging.LogRecord(record.name, logging.WARNING, __file__, 0,
                                    f'log file {self.baseFilename}: {problem}; log lines go to the console only '
                                    f'until it can be written again', None, None)
        for h in get_logger().handlers:
            if h is not self:
                h.handle(warning)


def log_to_file(folder: str, name: str = 'train') -> str:
    """Rank 0: from now on also log to `<folder>/<name>_<time>.log`, starting with what was logged so far."""
    logger = get_logger()
    path = os.path.join(folder, f'{name}_{time.strftime("%y%m%d_%H%M%S")}.log')
    fh = _LogFile(path)
    fh.setFormatter(_FORMAT)
    for h in list(logger.handlers):
        if isinstance(h, _Buffer):
            logger.removeHandler(h)
            for record in h.records:
                fh.handle(record)
    logger.addHandler(fh)
    show_console()
    return path


def get_logger() -> logging.Logger:
    return logging.getLogger('restoration')


def wandb_mode(env: Mapping[str, str] = os.environ) -> str:
    """W&B mode: WANDB_MODE when set; without it and without a key, offline (online would fail)."""
    if env.get('WANDB_MODE'):
        return env['WANDB_MODE']
    return 'online' if env.get('WANDB_API_KEY') else 'offline'


class Reporter:
    """Scalars and images to TensorBoard and W&B, history rows and curves.png, written by rank 0 only.

    `start_iter` is the iteration the run continues from: history rows after it (from a run that
    went further than its last checkpoint) are dropped first.
    """

    def __init__(self, opt: Dict[str, Any], enabled: bool, wandb_id: Optional[str] = None, start_iter: int = 0):
        self.enabled = enabled
        self.tb = None
        self.tb_dir: Optional[str] = None
        self.wandb_run = None
        self.history: Optional[History] = None
        self.plotter: Optional[BackgroundPlotter] = None
        if not enabled:
            return
        self.history = History(opt['path']['task'])
        self.history_failing = False
        try:
            dropped = self.history.truncate_after(start_iter)
        except OSError as e:  # a full disk: the history is not training state, the run goes on without it
            dropped = 0
            self._history_failed(e)
        if dropped:
            get_logger().info(f'{self.history.path}: {dropped} rows after iteration {start_iter} dropped '
                              f'(the run went past its last checkpoint)')
        log_opt = opt['logging']
        if log_opt['curves']:
            self.plotter = BackgroundPlotter(opt['path']['task'])
        if log_opt['use_tensorboard']:
            self.tb_dir = opt['path']['tb_logger']
        if log_opt['use_wandb']:
            import json
            import wandb
            mode = wandb_mode()
            if mode == 'offline' and 'WANDB_MODE' not in os.environ:
                get_logger().info('W&B: no WANDB_API_KEY in the environment, logging offline')
            kwargs = dict(project=log_opt['wandb_project'], name=log_opt['wandb_name'] or opt['task'],
                          entity=log_opt['wandb_entity'], dir=opt['path']['task'], config=json.loads(dumps(opt)),
                          id=wandb_id, resume='allow' if wandb_id else None)
            try:
                self.wandb_run = wandb.init(mode=mode, **kwargs)
            except Exception as e:  # wandb raises CommError/UsageError/... when the server cannot be reached
                if mode != 'online':
                    raise
                get_logger().warning(f'W&B: online init failed ({first_line(e)}); logging offline instead '
                                     f'(upload later with `wandb sync`)')
                self.wandb_run = wandb.init(mode='offline', **kwargs)

    def _tensorboard(self) -> Any:
        """The TensorBoard writer, made at the first write: importing tensorboard takes ~0.5 s that need not
        come before the first training step (bench/bench_startup.py)."""
        if self.tb is None and self.tb_dir is not None:
            from torch.utils.tensorboard import SummaryWriter
            self.tb = SummaryWriter(log_dir=self.tb_dir)
        return self.tb

    @property
    def wandb_id(self) -> Optional[str]:
        return self.wandb_run.id if self.wandb_run is not None else None

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        if not self.enabled:
            return
        tb = self._tensorboard()
        if tb is not None:
            for k, v in values.items():
                tb.add_scalar(k, v, step)
        if self.wandb_run is not None:
            self.wandb_run.log(dict(values), step=step)

    def images(self, step: int, images: Mapping[str, np.ndarray]) -> None:
        """HWC uint8 images (e.g. restored validation samples)."""
        if not self.enabled or not images:
            return
        tb = self._tensorboard()
        if tb is not None:
            for k, img in images.items():
                tb.add_image(k, img, step, dataformats='HWC')
        if self.wandb_run is not None:
            import wandb
            self.wandb_run.log({k: wandb.Image(img) for k, img in images.items()}, step=step)

    def row(self, row: Dict[str, Any]) -> None:
        """One line of history.jsonl (a print step or a validation); a row that cannot be written (a full disk)
        is missing, said once until writing works again."""
        if self.history is None:
            return
        try:
            self.history.append(row)
        except OSError as e:
            self._history_failed(e)
        else:
            self.history_failing = False

    def _history_failed(self, e: OSError) -> None:
        if not self.history_failing:
            self.history_failing = True
            get_logger().warning(f'{self.history.path}: {describe_write_error(e, self.history.path)}; rows are '
                                 f'missing until it can be written again')

    def redraw_curves(self) -> None:
        """curves.png from the history, in the background."""
        if self.plotter is not None:
            self.plotter.redraw()

    def close(self) -> None:
        if self.plotter is not None:
            self.plotter.close()
            self.plotter = None
        if self.tb is not None:
            self.tb.close()
            self.tb = None
        self.tb_dir = None
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None
