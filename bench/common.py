"""What several benchmarks share: the `--quick`/`--reps` arguments and timing a call by its median.

Not a benchmark itself (tests/test_benches.py runs only `bench_*.py`); the scripts import it from
their own folder, which Python puts first on sys.path when it runs them.
"""
import argparse
import statistics
import sys
import time
from typing import Any, Callable, List, Optional, Sequence


def reps_parser(doc: str, quick: str, reps: str) -> argparse.ArgumentParser:
    """The parser of a benchmark (described by the first line of its docstring `doc`) with `--quick`
    (help `quick`) and `--reps` (help `reps`); add its own arguments, then `parse_reps`."""
    p = argparse.ArgumentParser(description=doc.split('\n')[0])
    p.add_argument('--quick', action='store_true', help=quick)
    p.add_argument('--reps', type=int, default=None, help=reps)
    return p


def parse_reps(p: argparse.ArgumentParser, argv: Optional[Sequence[str]], default: int,
               quick: int = 1) -> argparse.Namespace:
    """The arguments, `reps` filled in: as given, else `quick` with --quick, else `default`."""
    a = p.parse_args(argv)
    a.reps = a.reps or (quick if a.quick else default)
    return a


def median_seconds(fn: Callable[[], Any], reps: int, warmup: int = 0) -> float:
    """The median wall time of `reps` calls of `fn`, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def entry(main: Callable[[], Any], **children: Callable[[List[str]], Any]) -> None:
    """A benchmark script's start: `<script> --<name> ARGS` runs `children[name](ARGS)` (a process the
    benchmark starts itself) and exits with what it returns; anything else runs `main()`."""
    flag = sys.argv[1][2:] if len(sys.argv) > 1 and sys.argv[1].startswith('--') else ''
    if flag in children:
        sys.exit(children[flag](sys.argv[2:]))
    main()
