"""Run a training script as N DDP ranks on this node, exiting with the code of the rank that failed first.

    python scripts/launch.py --nproc N main_train.py --opt options/x.json [main_train.py args...]

What `launch_train.sh N` runs: torch's elastic launch API (what torchrun runs), standalone rendezvous, no
restarts, one process per GPU or N CPU processes. Exit codes, signals and the line naming the failing rank:
training/launcher.py; the codes themselves: utils/exit_codes.py.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

if __name__ == '__main__':
    # Before importing torch (seconds), so that a stop during start-up is kept (see utils/stop.py) and ends
    # the launcher with 3, not 143.
    from utils import stop as _early_stop
    _early_stop.install()

import argparse  # noqa: E402
from typing import Optional, Sequence  # noqa: E402

from training.launcher import launch_local  # noqa: E402
from utils.exit_codes import EXIT_USER_ERROR  # noqa: E402

PROG = 'python scripts/launch.py'


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse `--nproc N SCRIPT ARGS...` and launch; a missing script is one line and exit 2, before any rank."""
    parser = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description='Run `python -u SCRIPT ARGS...` as N DDP ranks on this node (torch elastic launch, '
                    'standalone rendezvous, no restarts) and exit with the first failing rank\'s exit code.')
    parser.add_argument('--nproc', type=int, required=True, help='number of ranks (one per GPU, or CPU processes)')
    parser.add_argument('script', help='the training script, e.g. main_train.py')
    parser.add_argument('args', nargs=argparse.REMAINDER, help='arguments for the script')
    a = parser.parse_args(argv)
    if a.nproc < 1:
        parser.error(f'--nproc must be a positive integer, got {a.nproc}')
    if not os.path.isfile(a.script):
        print(f'{PROG}: script not found: {a.script}', file=sys.stderr)
        return EXIT_USER_ERROR
    return launch_local(a.nproc, a.script, a.args)


if __name__ == '__main__':
    sys.exit(main())
