"""'Did you mean' hints for unknown names (option keys, registry names)."""
import difflib
from typing import Iterable


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean "x"?)' for the closest choice, or '' when nothing is close.

    A choice that differs only in case wins (`dataroot_h` → `dataroot_H`, not `dataroot_L`).
    """
    choices = [str(c) for c in choices]
    same_case = [c for c in choices if c.lower() == str(name).lower()]
    close = same_case or difflib.get_close_matches(str(name), choices, n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ''
