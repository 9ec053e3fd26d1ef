"""Stop requests from the outside world (preemption, time limits), acted on between iterations.

SIGTERM (preemption, `scancel`, torchrun shutting down) and SIGUSR1 (SLURM's `--signal` before
the time limit) only set a flag here; the loop agrees on it across ranks at an iteration
boundary, saves, and exits with EXIT_PREEMPTED so a job script can requeue.
"""
import signal
from typing import Any, Dict, Optional, Sequence

EXIT_PREEMPTED = 3
EXIT_NONFINITE = 4
EXIT_SAVE_FAILED = 5


class TrainingStopped(Exception):
    """The run ended early on purpose; `code` is the process exit code."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class StopSignals:
    """Installs handlers that record the first stop signal; `restore()` puts the old ones back."""

    def __init__(self, signals: Sequence[int] = (signal.SIGTERM, signal.SIGUSR1)):
        self.received: Optional[int] = None
        self._previous: Dict[int, Any] = {}
        for sig in signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signum

    @property
    def requested(self) -> bool:
        return self.received is not None

    def name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else ''

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
