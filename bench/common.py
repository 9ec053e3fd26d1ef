"""What several benchmarks share: the `--quick`/`--reps` arguments, timing a call by its median and running
child processes a few at a time.

Not a benchmark itself (tests/test_benches.py runs only `bench_*.py`); the scripts import it from
their own folder, which Python puts first on sys.path when it runs them.
"""
import argparse
import functools
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, TypeVar

T = TypeVar('T')


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


def side_by_side(calls: Sequence[Callable[[], T]], jobs: int = 1) -> Iterator[T]:
    """Each call, started now in a thread, at most `jobs` at once; their results in the order given, each as soon
    as it and those before it are done (an exception is raised there). jobs > 1 is for --quick smoke runs,
    whose numbers are not measurements; measured rows run one at a time."""
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    futures = [pool.submit(call) for call in calls]
    pool.shutdown(wait=False)  # the queued calls still run
    return (future.result() for future in futures)


def quick_jobs() -> int:
    """How many child processes --quick runs at a time: 2, or 1 where this bench was given one core
    (OMP_NUM_THREADS=1, as a pytest-xdist worker of tests/test_benches.py gives it), so that a smoke run never
    takes more cores than its caller allows."""
    return 1 if os.environ.get('OMP_NUM_THREADS') == '1' else 2


def child_env(jobs: int, env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment of child processes run `jobs` at a time: with jobs > 1, OMP_NUM_THREADS=1 unless it is
    set, so that children side by side do not oversubscribe the cores."""
    env = dict(os.environ if env is None else env)
    if jobs > 1:
        env.setdefault('OMP_NUM_THREADS', '1')
    return env


def run_children(commands: Sequence[Sequence[str]], jobs: int = 1,
                 **kw: Any) -> Iterator[subprocess.CompletedProcess]:
    """`subprocess.run(command, **kw)` of each command, started now, `jobs` at a time (`side_by_side`), in the
    environment `child_env` gives."""
    kw['env'] = child_env(jobs, kw.get('env'))
    return side_by_side([functools.partial(subprocess.run, list(cmd), **kw) for cmd in commands], jobs)


def entry(main: Callable[[], Any], **children: Callable[[List[str]], Any]) -> None:
    """A benchmark script's start: `<script> --<name> ARGS` runs `children[name](ARGS)` (a process the
    benchmark starts itself) and exits with what it returns; anything else runs `main()`."""
    flag = sys.argv[1][2:] if len(sys.argv) > 1 and sys.argv[1].startswith('--') else ''
    if flag in children:
        sys.exit(children[flag](sys.argv[2:]))
    main()
