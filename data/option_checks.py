"""Value checks of the datasets' own quantities (noise levels, frame counts, file names, BasicSR's io_backend),
for `Key(default, types, check)` in a dataset's OPTIONS; the generic ones (`at_least`, `between`, `only`, ...)
are the options' vocabulary, utils/options/checks.py.

The options validator runs them on every given value before anything is built, so a bad value ends
the run with one line naming `<file>: datasets.<phase>.<key>`. A dataset then checks only what
relates several keys or looks at files. A check gets a value of the key's types and returns the
problem, read after the value (`0 must be >= 1`), or None when the value is fine.
"""
import json
from typing import Any, Optional

from utils.options import Check, rule

NOISE_SCALE = 'noise std on the 0..255 scale'


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


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


def all_or_first(what: str) -> Check:
    """-1 (all frames of each `what`) or a positive number of frames (the first ones)."""
    return rule(f'-1 (whole {what}) or > 0', anyOf=[{'const': -1}, {'exclusiveMinimum': 0}])(
        lambda v: None if v == -1 or v > 0 else f'must be -1 (whole {what}) or a positive integer')


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
