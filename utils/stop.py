"""Stop requests from the outside world (preemption, time limits, Ctrl-C), acted on between iterations.

SIGTERM (preemption, `scancel`, torchrun shutting down), SIGUSR1 (SLURM's `--signal` before the
time limit) and a first SIGINT (Ctrl-C) only set a flag here; the loop agrees on it across ranks at
an iteration boundary, saves, and exits with EXIT_PREEMPTED (3: a job script requeues), or
EXIT_INTERRUPTED (130, what a shell reports for Ctrl-C: a person asked, nothing requeues) when any
rank got SIGINT. A second SIGINT ends the process at once: one line, exit 130, nothing saved.

The handlers are process-wide and installed once, as early as possible: `main_train.py` calls
`install()` before its heavy imports, so a stop requested during start-up (while torch is imported,
the ranks meet, the data are checked) is kept and acted on at the first safe point instead of
killing the process (143) or raising KeyboardInterrupt. This module imports nothing heavy.

"At once" holds even while the main thread is blocked in C++ (a collective waiting for a frozen
peer, where Python handlers cannot run): the C-level handler writes each signal's number to a
wake-up pipe (`signal.set_wakeup_fd`) that a small thread reads.
"""
import os
import signal
import threading
from typing import Any, Dict, Optional, Sequence

from utils.exit_codes import EXIT_INTERRUPTED, EXIT_PREEMPTED

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
AT_ONCE_LINE = ('stopped: SIGINT again (Ctrl-C): stopped at once, without saving; rerun the same command to '
                'resume from the newest complete checkpoint')


class TrainingStopped(Exception):
    """The run ended early on purpose; `code` is the process exit code."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class StopSignals:
    """Handlers that record the first stop signal; the `at_once`-th SIGINT ends the process with `at_once_line`
    and EXIT_INTERRUPTED. `restore()` puts the previous handlers back."""

    def __init__(self, signals: Sequence[int] = STOP_SIGNALS, at_once: int = 2, at_once_line: str = AT_ONCE_LINE):
        self.received: Optional[int] = None
        self.interrupts = 0  # SIGINTs seen by the Python handler
        self.at_once, self.at_once_line = at_once, at_once_line
        self._previous: Dict[int, Any] = {}
        self._exiting = threading.Lock()
        self._pid = os.getpid()  # a forked child (a loader worker) inherits the handlers: they ignore its signals
        for sig in signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        self._wakeup: Optional[int] = None
        if signal.SIGINT in self._previous:
            self._watch_interrupts()

    def _handle(self, signum: int, frame: Any) -> None:
        if os.getpid() != self._pid:
            return  # a forked child before its worker_init_fn: the group's Ctrl-C is the parent's to count
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts >= self.at_once:
                self._exit_at_once()
        if self.received is None:
            self.received = signum

    def _exit_at_once(self) -> None:
        if not self._exiting.acquire(blocking=False):
            return  # the watcher thread (or the handler) is already ending the process
        try:
            os.write(2, (self.at_once_line + '\n').encode())
        finally:
            os._exit(EXIT_INTERRUPTED)

    def _watch_interrupts(self) -> None:
        """Count SIGINTs from the wake-up pipe in a thread, so that the `at_once`-th one ends the process even
        while the main thread is blocked in C++. Only while our handler owns SIGINT (the relaunch launcher
        takes it over for a while). A library that sets its own wake-up fd leaves the Python handler in charge."""
        try:
            read, write = os.pipe()
            os.set_blocking(write, False)
            self._previous_wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except (ValueError, OSError):  # not the main thread, or no pipes: the Python handler alone
            return
        self._wakeup = write
        _WAKEUP_OWNERS.add(os.getpid())

        def watch() -> None:
            seen = 0
            while True:
                try:
                    data = os.read(read, 512)
                except OSError:
                    break
                if not data:
                    break
                for signum in data:
                    if signum == signal.SIGINT and signal.getsignal(signal.SIGINT) == self._handle:
                        seen += 1
                        if seen >= self.at_once:
                            self._exit_at_once()
            os.close(read)

        threading.Thread(target=watch, name='stop-signals', daemon=True).start()

    @property
    def requested(self) -> bool:
        return self.received is not None

    @property
    def interrupted(self) -> bool:
        """Ctrl-C (SIGINT) was among the signals: the exit code is EXIT_INTERRUPTED, not EXIT_PREEMPTED."""
        return self.interrupts > 0

    @property
    def code(self) -> int:
        return EXIT_INTERRUPTED if self.interrupted else EXIT_PREEMPTED

    def name(self) -> str:
        """The first signal received, e.g. `SIGTERM`, `SIGINT (Ctrl-C)`; '' if none."""
        if self.received is None:
            return ''
        return 'SIGINT (Ctrl-C)' if self.received == signal.SIGINT else signal.Signals(self.received).name

    def restore(self) -> None:
        global _installed
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self._wakeup is not None:
            try:
                signal.set_wakeup_fd(self._previous_wakeup)
            except ValueError:
                pass
            os.close(self._wakeup)  # the watcher reads EOF and ends
            self._wakeup = None
        if _installed is self:
            _installed = None


_installed: Optional[StopSignals] = None
_WAKEUP_OWNERS: set = set()  # processes whose wake-up fd feeds a StopSignals watcher


def _drop_inherited_wakeup_fd() -> None:
    """Right after a fork (loader workers): the child's signals must not be written into the parent's
    wake-up pipe, where the parent's watcher would count a worker's Ctrl-C as a second one of its own."""
    if _WAKEUP_OWNERS and os.getpid() not in _WAKEUP_OWNERS:
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:  # forked from another thread than the main one: nothing was inherited there
            pass


os.register_at_fork(after_in_child=_drop_inherited_wakeup_fd)


def install() -> StopSignals:
    """The process's stop-signal handlers: installed by the first call (call it as early as possible, from the
    main thread), the same object afterwards, so a signal received early is still known later."""
    global _installed
    if _installed is None:
        _installed = StopSignals()
    return _installed


def current() -> Optional[StopSignals]:
    """The handlers `install()` put in place, if any."""
    return _installed
