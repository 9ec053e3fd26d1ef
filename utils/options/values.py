"""What any parsed option value must be, whatever it was read from: numbers finite, nesting at most
`MAX_DEPTH` deep; and how a value is shown in a message (JSON, secrets redacted, cut short).

A reader (readers/) and `--set` parse JSON text with `json_loads`, which keeps a non-finite number as a
`BadNumber` so that `check_values` can name its key; the validator runs `check_values` again on the whole
data (a caller may hand it data that no reader saw).
"""
import json
import math
from typing import Any, List, Optional, Tuple

from utils.options.messages import REDACTED, SECRET_KEY, redact

MAX_DEPTH = 64          # objects/lists nested deeper than this are refused (real option files use ~4)
SHOW_CHARS = 200        # values echoed in an error are cut to this length


class BadNumber:
    """Placeholder the JSON parser puts where a number has no finite float value (NaN, Infinity, 1e400)."""

    def __init__(self, text: str, constant: bool):
        self.text, self.constant = text, constant

    def problem(self) -> str:
        """Why the number is refused, read after it."""
        if self.constant:
            return 'is not allowed: numbers must be finite'
        return 'is out of range: numbers must be finite (this one overflows to infinity)'


def _parse_float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else BadNumber(text, constant=False)


def _parse_int(text: str) -> Any:
    # More digits than any finite float has; also stays below Python's int-from-string digit limit.
    return int(text) if len(text.lstrip('-')) <= 310 else BadNumber(text, constant=False)


def _parse_constant(text: str) -> Any:
    return BadNumber(text, constant=True)


def json_loads(text: str, **hooks: Any) -> Any:
    """json.loads that keeps non-finite numbers out (as `BadNumber` for `check_values`)."""
    return json.loads(text, parse_float=_parse_float, parse_int=_parse_int, parse_constant=_parse_constant,
                      **hooks)


def show(value: Any, key: str = '') -> str:
    """A value as it appears in an error message: JSON, secrets redacted like saved options, cut short."""
    if value is not None and not isinstance(value, (dict, list)) and SECRET_KEY.search(key):
        return REDACTED
    if isinstance(value, BadNumber):
        text = value.text
        return text if len(text) <= 24 else f'{text[:16]}... ({len(text)} characters)'
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**24:
        return f'{"-" if value < 0 else ""}a {value.bit_length()}-bit integer'
    try:
        text = json.dumps(redact(value, key))
    except (ValueError, TypeError, RecursionError):
        text = f'a value of type {type(value).__name__}'
    return text if len(text) <= SHOW_CHARS else text[:SHOW_CHARS] + '...'


def _number_problem(value: Any) -> Optional[str]:
    if isinstance(value, BadNumber):
        return value.problem()
    if isinstance(value, float) and not math.isfinite(value):
        return 'is not allowed: numbers must be finite'
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            return 'is out of range: numbers must be finite (this one overflows to infinity)'
    return None


def check_values(value: Any, where: str = '', depth: int = 1) -> Optional[Tuple[str, str]]:
    """(key path, message) for the first non-finite number or too deep nesting in `value`, else None.

    `where` is the key path of `value` and `depth` its nesting level (1: the top-level object).
    Iterative, so that a deeply nested value cannot exhaust the interpreter's stack here.
    """
    stack: List[Tuple[Any, str, str, int]] = [(value, where, where.rsplit('.', 1)[-1], depth)]
    while stack:
        v, path, key, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > MAX_DEPTH:
                shown = path if len(path) <= 80 else path[:80] + '...'
                return shown or 'top level', f'nested more than {MAX_DEPTH} levels deep'
            if isinstance(v, dict):
                items = [(k, f'{path}.{k}' if path else str(k), str(k)) for k in v]
                stack.extend((v[k], p, name, depth + 1) for k, p, name in reversed(items))
            else:
                stack.extend((x, f'{path}[{i}]', key, depth + 1) for i, x in reversed(list(enumerate(v))))
            continue
        problem = _number_problem(v)
        if problem:
            return path or 'top level', f'{show(v, key)} {problem}'
    return None
