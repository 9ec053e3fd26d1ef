"""main_test.py whose rank 0 finds the disk full when it writes a file of the name `WRITE_FAIL` gives: the rename of
the file's temporary file into place fails with ENOSPC, as on a full disk. For the tests that every rank leaves at
once, with one line, when a write of rank 0 fails between collectives.

    WRITE_FAIL=results.csv python tests/failing_write.py --opt o.json
"""
import errno
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import main_test  # noqa: E402
from utils import dist  # noqa: E402


def install(name: str) -> None:
    replace = os.replace

    def failing(src, dst, *args, **kwargs):
        if os.path.basename(dst) == name and dist.is_main_process():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), dst)
        return replace(src, dst, *args, **kwargs)
    os.replace = failing


if __name__ == '__main__':
    install(os.environ['WRITE_FAIL'])
    dist.exit_now(main_test.main(sys.argv[1:]))
