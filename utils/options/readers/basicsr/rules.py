"""The vocabulary of the translator's own tables: how one of their keys is read (`Rule`), built by `to`, `unneeded` and
`custom`. A table is {their key: Rule}; its rules carry words for the generated mapping table of
docs/option_files.md (`ours`, `words`)."""
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Tuple

from utils.options.foreign import Refusal
from utils.options.readers.basicsr.context import Context
from utils.options.readers.yaml_file import KeyPath
from utils.options.values import show

# how(ctx, their key path, value, the section it is in)
How = Callable[[Context, KeyPath, Any, Mapping[str, Any]], None]
ANY = object()


@dataclass(frozen=True)
class Rule:
    """How one of their keys is read: `how` does it; `ours` names our key(s) it sets ('' when none), `words` says
    how, for the docs table (empty for a plain rename)."""
    how: How
    ours: str = ''
    words: str = ''


def to(ours: str, convert: Optional[Callable[[Any], Any]] = None, words: str = '') -> Rule:
    """Their key is our key `ours` (dotted), its value passed through `convert` (which may raise Refusal)."""
    def how(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
        if convert is not None:
            try:
                value = convert(value)
            except Refusal as e:
                raise ctx.refuse(keys, str(e), value) from None
        ctx.put(ours, value, keys)
    return Rule(how, ours, words)


def unneeded(why: str, only: Any = ANY, otherwise: str = '') -> Rule:
    """Their key needs nothing done here (`why`, listed in the log line). With `only` (a value or a tuple of
    values), another value is refused with `otherwise`."""
    allowed: Tuple[Any, ...] = only if isinstance(only, tuple) else (only,)

    def how(ctx: Context, keys: KeyPath, value: Any, section: Mapping[str, Any]) -> None:
        if only is not ANY and value not in allowed:
            raise ctx.refuse(keys, otherwise or f'only {" or ".join(show(v) for v in allowed)} is supported here',
                             value)
        ctx.unneeded(keys, why)
    words = f'not needed: {why}' + (f' (only {", ".join(show(v) for v in allowed)}; else refused: {otherwise})'
                                    if only is not ANY else '')
    return Rule(how, '', words)


def custom(how: How, ours: str, words: str) -> Rule:
    """A rule that reads other keys of the section too (their words say how)."""
    return Rule(how, ours, words)


# --- value conversions ----------------------------------------------------------------------------------------------


def iterations(value: Any) -> Any:
    """A count of iterations: BasicSR's files write `!!float 5e3`, which BasicSR turns into an int."""
    if isinstance(value, float) and not isinstance(value, bool) and math.isfinite(value) and value == int(value):
        return int(value)
    return value


def no_warmup(value: Any) -> Any:
    """BasicSR's warm-up length, -1 (or any value below 1) for none: ours counts 0 for none."""
    value = iterations(value)
    if isinstance(value, int) and not isinstance(value, bool) and value < 1:
        return 0
    return value


def section_rules(ctx: Context, table: Mapping[str, Rule], keys: KeyPath, section: Mapping[str, Any],
                  what: str, skip: Tuple[str, ...] = ()) -> None:
    """Read every key of their `section` at `keys` by `table`; a key the table does not have is an error with the
    nearest one (`what`: the section, in words)."""
    for key, value in section.items():
        if key in skip:
            continue
        rule = table.get(key)
        if rule is None:
            raise ctx.unknown(keys + (key,), sorted(table), what)
        rule.how(ctx, keys + (key,), value, section)
