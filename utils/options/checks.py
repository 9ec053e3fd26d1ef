"""The vocabulary of value checks: one labelled check (or check maker) per meaning, for `Key(default, types,
check)` anywhere in the program.

The validator runs a key's check on every given value before anything is built, so a bad value ends the run
with one line naming `<file>: <section>.<key>`. A check gets a value of the key's types and returns the problem,
read after the value (`0 must be >= 1`), or None when it is fine; every one carries its `rule` label, so that
docs/options.md, `--describe` and options/schema.json say what it allows. Checks of one family's own quantities
(noise levels, frame counts, VGG layers) stay with that family and are written with `rule` the same way.
"""
import json
from typing import Any, List, Optional

from utils.options.keys import Check, rule
from utils.suggest import did_you_mean


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@rule('> 0', exclusiveMinimum=0)
def positive(v: Any) -> Optional[str]:
    """Greater than 0 (null passes: the key's types say whether null is allowed)."""
    return None if v is None or v > 0 else 'must be > 0'


@rule('>= 0', minimum=0)
def non_negative(v: Any) -> Optional[str]:
    """0 or more (null passes)."""
    return None if v is None or v >= 0 else 'must be >= 0'


def at_least(n: int, why: str = '') -> Check:
    """At least `n` (null passes: the key's types say whether null is allowed); `why`, when given, follows the
    message in brackets (`must be >= 1 (1: no pooling)`)."""
    told = f' ({why})' if why else ''
    return rule(f'>= {n}', minimum=n)(lambda v: None if v is None or v >= n else f'must be >= {n}{told}')


def above(n: float, why: str = '') -> Check:
    """Greater than `n` (null passes); `why`, when given, follows the message in brackets (`must be > 0 (null:
    train.total_iter)`)."""
    told = f' ({why})' if why else ''
    return rule(f'> {n}', exclusiveMinimum=n)(lambda v: None if v is None or v > n else f'must be > {n}{told}')


def between(low: float, high: float, what: str) -> Check:
    """From `low` to `high`, both included; `what` names the quantity."""
    return rule(f'{what} from {low} to {high}', minimum=low, maximum=high)(
        lambda v: None if low <= v <= high else f'must be {what} from {low} to {high}')


@rule('in [0, 1)', minimum=0, exclusiveMaximum=1)
def unit_interval(v: Any) -> Optional[str]:
    """A decay or momentum: 0 included, 1 not (at 1 nothing would ever change)."""
    return None if 0 <= v < 1 else 'must be in [0, 1)'


@rule('in [0, 1]', minimum=0, maximum=1)
def closed_unit(v: Any) -> Optional[str]:
    """A share or probability: 0 and 1 included."""
    return None if 0 <= v <= 1 else 'must be in [0, 1]'


@rule('in (0, 1)', exclusiveMinimum=0, exclusiveMaximum=1)
def open_unit(v: Any) -> Optional[str]:
    """Strictly between 0 and 1 (null passes: the key's types say whether null is allowed)."""
    return None if v is None or 0 < v < 1 else 'must be in (0, 1)'


@rule('in (0, 1]', exclusiveMinimum=0, maximum=1)
def up_to_one(v: Any) -> Optional[str]:
    """A share of a run or a decay factor per step: it may be all (1) but never none or more."""
    return None if 0 < v <= 1 else 'must be in (0, 1]'


@rule('in (0, 1]', exclusiveMinimum=0, maximum=1)
def learning_rate(v: Any) -> Optional[str]:
    """A learning rate of the optimizers here: above 1 they diverge at once."""
    return None if 0 < v <= 1 else 'must be in (0, 1]: Adam/AdamW with a learning rate above 1 diverge at once'


@rule('two numbers in [0, 1)', minItems=2, maxItems=2,
      items={'type': 'number', 'minimum': 0, 'exclusiveMaximum': 1})
def betas(v: List[Any]) -> Optional[str]:
    """Adam's two decays."""
    if len(v) == 2 and all(_is_number(b) and 0 <= b < 1 for b in v):
        return None
    return 'must be two numbers in [0, 1)'


def one_of(*choices: Any) -> Check:
    """One of `choices`, with a did-you-mean for a near miss."""
    @rule(f'one of {", ".join(json.dumps(c) for c in choices)}', enum=list(choices))
    def check(v: Any) -> Optional[str]:
        if v in choices:
            return None
        return f'must be one of {", ".join(map(str, choices))}{did_you_mean(v, map(str, choices))}'
    return check


def only(value: Any, why: str) -> Check:
    """The one value a key accepts here (KAIR's files carry the key); `why` says why."""
    return rule(f'only {json.dumps(value)}: {why}', const=value)(
        lambda v: None if v == value else f'must be {json.dumps(value)}: {why}')


@rule('a non-empty list of integers >= 1', minItems=1, items={'type': 'integer', 'minimum': 1})
def positive_ints(v: Any) -> Optional[str]:
    """A non-empty list of integers >= 1 (frame intervals, scale factors)."""
    return None if v and all(_is_int(x) and x >= 1 for x in v) else 'must be a non-empty list of integers >= 1'


@rule('no name twice', uniqueItems=True)
def distinct_names(v: List[Any]) -> Optional[str]:
    """A list of names in which none comes twice (metrics to score)."""
    twice = sorted({n for n in v if isinstance(n, str) and v.count(n) > 1})
    return f'names {twice[0]} twice' if twice else None
