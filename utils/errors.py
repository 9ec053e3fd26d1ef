"""Error types that separate user mistakes from bugs.

`main_train.py`/`main_test.py` print a `UserError` as one line and exit 2; anything else is a bug
and keeps its traceback.
"""
import sys


class UserError(Exception):
    """A mistake in the user's input (option file, paths, environment): reported without traceback."""


class OptionsError(UserError):
    """An invalid option file or override. The message names the file and the key."""


class InputShapeError(UserError, ValueError):
    """An input a network cannot take (too few frames, frames too small for its flow network, a size its layout
    cannot divide): the data's or the patch size's doing, not a bug. Networks raise it from forward; an evaluation
    names the item (models/evaluation.py), training's start-up check the training set."""


class WriteFailed(Exception):
    """A write of results that failed (rank 0's, raised on every rank: `dist.main_process_write`); the message is
    its one line (`no space left on <mount> (N MB free)`, or the OS error's first line). main_test exits 5."""


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def say(line: str) -> None:
    """`line` and its newline on stderr in one write. Under DDP every rank writes into its launcher's one stderr,
    and print() writes the text and the newline separately: with unbuffered stderr (PYTHONUNBUFFERED=1, `python -u`,
    as platforms and job scripts often set) two ranks' error lines came out merged into one. A write this small
    into a pipe is atomic."""
    sys.stderr.write(f'{line}\n')
    sys.stderr.flush()
