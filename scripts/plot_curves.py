"""Draw a run folder's curves.png (losses, lr, validation scores against the iteration) from its history.jsonl.

    python scripts/plot_curves.py <root>/<task>            # writes <root>/<task>/curves.png

Any run folder can be plotted again without TensorBoard; training runs this same command in a child process
after every validation (utils/plot.py `BackgroundPlotter`). Prints the image's path; exit 2 for a folder without
history.jsonl, 1 for a failed write (one line on stderr: it runs beside training, on its stderr).
"""
import argparse
import os
import sys
from typing import List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from utils.plot import CURVES_FILE, draw_run  # noqa: E402


def main(argv: Optional[List[str]] = None) -> int:
    """Plot one run folder; a user mistake or a full disk is one line on stderr, not a traceback."""
    p = argparse.ArgumentParser(description='Draw <run folder>/curves.png from its history.jsonl.')
    p.add_argument('folder', help='a run folder, <path.root>/<task>')
    args = p.parse_args(argv)
    code = draw_run(args.folder)
    if code == 0:
        print(os.path.join(args.folder, CURVES_FILE))
    return code


if __name__ == '__main__':
    sys.exit(main())
