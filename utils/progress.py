"""Progress of long loops: a tqdm bar on a terminal, plain log lines elsewhere (a log file or a batch
job's output would fill up with bar redraws). Only the caller's rank 0 should ask for either."""
import sys
from typing import Iterable, Iterator, Optional, TypeVar

T = TypeVar('T')


def progress(iterable: Iterable[T], total: Optional[int], desc: str, enabled: bool = True,
             lines: bool = True, every: float = 0.25) -> Iterator[T]:
    """Yield from `iterable`, showing progress when `enabled`: a tqdm bar if stderr is a terminal, else
    (with `lines`) one log line at each `every` fraction of `total`."""
    if not enabled:
        yield from iterable
        return
    if sys.stderr.isatty():
        from tqdm import tqdm
        yield from tqdm(iterable, total=total, desc=desc, leave=False, dynamic_ncols=True)
        return
    if not lines or not total:
        yield from iterable
        return
    from utils.logger import get_logger
    log, mark = get_logger(), every
    for i, item in enumerate(iterable, 1):
        yield item
        if i / total >= mark or i == total:
            log.info(f'{desc}: {i}/{total}')
            while mark <= i / total:
                mark += every
