"""Value checks that dataset option keys share, for `Key(default, types, check)` in a dataset's OPTIONS.

The options validator runs them on every given value before anything is built, so a bad value ends
the run with one line naming `<file>: datasets.<phase>.<key>`. A dataset then checks only what
relates several keys or looks at files. A check gets a value of the key's types and returns the
problem, read after the value (`0 must be >= 1`), or None when the value is fine.
"""
import json
from typing import Any, Callable, Optional

from utils.options import rule

Check = Callable[[Any], Optional[str]]
NOISE_SCALE = 'noise std on the 0..255 scale'


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def at_least(n: int) -> Check:
    """At least `n` (null passes: the key's types say whether null is allowed)."""
    return rule(f'>= {n}', minimum=n)(lambda v: None if v is None or v >= n else f'must be >= {n}')


def between(low: float, high: float, what: str) -> Check:
    """From `low` to `high`, both included; `what` names the quantity."""
    return rule(f'{what} from {low} to {high}', minimum=low, maximum=high)(
        lambda v: None if low <= v <= high else f'must be {what} from {low} to {high}')


@rule(f'>= 0 ({NOISE_SCALE})', minimum=0)
def noise_level(v: Any) -> Optional[str]:
    """A noise std (null passes)."""
    return None if v is None or v >= 0 else f'must be >= 0 ({NOISE_SCALE})'


@rule(f'[min, max] with 0 <= min <= max ({NOISE_SCALE})', minItems=2, maxItems=2,
      items={'type': 'number', 'minimum': 0})
def noise_range(v: Any) -> Optional[str]:
    """A training range of noise stds, [min, max]."""
    if len(v) == 2 and all(_is_number(x) and x >= 0 for x in v) and v[0] <= v[1]:
        return None
    return f'must be [min, max] with 0 <= min <= max ({NOISE_SCALE})'


@rule('a non-empty list of integers >= 1', minItems=1, items={'type': 'integer', 'minimum': 1})
def positive_ints(v: Any) -> Optional[str]:
    """A non-empty list of integers >= 1 (frame intervals, scale factors)."""
    return None if v and all(_is_int(x) and x >= 1 for x in v) else 'must be a non-empty list of integers >= 1'


def all_or_first(what: str) -> Check:
    """-1 (all frames of each `what`) or a positive number of frames (the first ones)."""
    return rule(f'-1 (whole {what}) or > 0', anyOf=[{'const': -1}, {'exclusiveMinimum': 0}])(
        lambda v: None if v == -1 or v > 0 else f'must be -1 (whole {what}) or a positive integer')


def only(value: Any, why: str) -> Check:
    """The one value a key accepts here (KAIR's files carry the key); `why` says why."""
    return rule(f'only {json.dumps(value)}: {why}', const=value)(
        lambda v: None if v == value else f'must be {json.dumps(value)}: {why}')


def int_format(example: str) -> Check:
    """A format spec for frame numbers, like `example`."""
    @rule(f'an integer format spec like {example}')
    def check(v: str) -> Optional[str]:
        try:
            format(1, v)
        except (ValueError, TypeError):
            return f'is not an integer format spec like {example}'
        return None
    return check


@rule('an extension without the dot, like "png"', pattern=r'^[^.]')
def extension(v: str) -> Optional[str]:
    """A file extension without the dot."""
    return None if v and not v.startswith('.') else 'must be an extension without the dot, like "png"'


def io_backend(*allowed: str) -> Check:
    """`{"type": <one of allowed>}`."""
    @rule(' or '.join(json.dumps({'type': kind}) for kind in allowed), required=['type'],
          properties={'type': {'enum': list(allowed)}}, additionalProperties=False)
    def check(v: Any) -> Optional[str]:
        if set(v) != {'type'} or v['type'] not in allowed:
            kinds = ' or '.join(json.dumps({'type': kind}) for kind in allowed)
            return f'must be {kinds} here'
        return None
    return check
