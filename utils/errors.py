"""Error types that separate user mistakes from bugs.

`main_train.py`/`main_test.py` print a `UserError` as one line and exit 2; anything else is a bug
and keeps its traceback.
"""


class UserError(Exception):
    """A mistake in the user's input (option file, paths, environment): reported without traceback."""


class OptionsError(UserError):
    """An invalid option file or override. The message names the file and the key."""
