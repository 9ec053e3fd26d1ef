"""Error types that separate user mistakes from bugs.

`main_train.py`/`main_test.py` print a `UserError` as one line and exit 2; anything else is a bug
and keeps its traceback.
"""


class UserError(Exception):
    """A mistake in the user's input (option file, paths, environment): reported without traceback."""


class OptionsError(UserError):
    """An invalid option file or override. The message names the file and the key."""


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
