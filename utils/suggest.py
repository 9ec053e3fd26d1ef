"""'Did you mean' hints for unknown names (option keys, registry names)."""
import difflib
from typing import Iterable


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean "x"?)' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ''
