"""Progress of long loops: a tqdm bar on a terminal, plain log lines elsewhere (a log file or a batch
job's output would fill up with bar redraws). Only the caller's rank 0 should ask for either."""
import sys
from typing import Callable, Iterable, Iterator, Optional, TypeVar

T = TypeVar('T')


def progress(iterable: Iterable[T], total: Optional[int], desc: str, enabled: bool = True,
             lines: bool = True, every: float = 0.25, say: Optional[Callable[[str], None]] = None,
             unit: str = 'it') -> Iterator[T]:
    """Yield from `iterable`, showing progress when `enabled`: a tqdm bar (counting `unit`s) if stderr is a
    terminal, else (with `lines`) one line at each `every` fraction of `total`, given to `say` (default: the
    log). Scripts without a log pass `say` (a print to stderr)."""
    if not enabled:
        yield from iterable
        return
    if sys.stderr.isatty():
        from tqdm import tqdm
        yield from tqdm(iterable, total=total, desc=desc, leave=False, dynamic_ncols=True, unit=unit)
        return
    if not lines or not total:
        yield from iterable
        return
    if say is None:
        from utils.logger import get_logger
        say = get_logger().info
    parts, shown = max(1, round(1 / every)), 0  # whole parts: no float drift skipping a line
    for i, item in enumerate(iterable, 1):
        yield item
        part = i * parts // total
        if part > shown or i == total:
            say(f'{desc}: {i}/{total}')
            shown = part


class Steps:
    """Progress through a known number of named steps (an export: build, trace, translate, check, write): a
    tqdm bar on a terminal, ticked with each step's name; off a terminal nothing (the caller's own lines say
    what happens). `say` prints a line above the bar without breaking it."""

    def __init__(self, total: int, desc: str, enabled: bool = True):
        self.bar = None
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True, unit='step')

    def start(self, name: str) -> None:
        """Show that step `name` is running."""
        if self.bar is not None:
            self.bar.set_postfix_str(name)

    def done(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def say(self, text: str, file: Optional[object] = None) -> None:
        if self.bar is not None:
            self.bar.write(text, file=file or sys.stdout)
        else:
            print(text, file=file or sys.stdout, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> 'Steps':
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
