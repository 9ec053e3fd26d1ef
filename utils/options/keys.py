"""How an option key is declared: `Key` (default, types, check, meaning), the two special defaults (`REQUIRED`,
`IGNORED`), `rule` (the label a check carries for the reference and the JSON Schema) and `Choice` (a type key
that names a registered member reading its own keys).

Every layer declares its keys with these where they are read (a network's constructor, a dataset's OPTIONS, a
loss's `options=`), so the validator, `--describe`, docs/options.md and options/schema.json see one declaration.
"""
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

from utils.registry import Registry


class _Required:
    def __repr__(self) -> str:
        return 'REQUIRED'


REQUIRED = _Required()  # the default of a key the user must give


class _Ignored:
    def __repr__(self) -> str:
        return 'IGNORED'


# The "default" of a key that KAIR's option files carry but that this section does not use (e.g. `gc`
# in a DnCNN netG): accepted with one warning line (in opt['_notes']) and dropped, as KAIR drops it.
IGNORED = _Ignored()

# A value check: the problem, read after the value (`0 must be >= 1`), or None when the value is fine.
Check = Callable[[Any], Optional[str]]


@dataclass(frozen=True)
class Key:
    """Schema entry: default value, accepted types (inferred from a non-None default), a check and a meaning.

    `check` returns an error text for an impossible value, or None when the value is fine; `help` is the
    key's meaning in one line, for the generated option reference (docs/options.md) and `--describe`.
    """
    default: Any
    types: Optional[Tuple[type, ...]] = None
    check: Optional[Check] = None
    help: str = ''


def rule(allowed: str, **schema: Any) -> Callable[[Check], Check]:
    """Label a check with what it allows: `allowed` in words ("> 0") for the option reference and
    `--describe`, and `schema`, the same rule as JSON Schema keywords (`exclusiveMinimum=0`) for
    options/schema.json. A check the schema cannot express fully gets the keywords of what it can (never
    stricter than the check); an unlabelled check is described by its docstring and not in the schema."""
    def label(check: Check) -> Check:
        check.allowed = allowed  # type: ignore[attr-defined]
        check.schema = schema  # type: ignore[attr-defined]
        return check
    return label


@dataclass(frozen=True)
class Choice:
    """A type key (`G_lossfn_type`) naming a member of `registry` that reads its own keys, which the
    section holds as `<prefix><key>` (charbonnier's `charbonnier_eps` is `G_charbonnier_eps` with prefix
    "G_"): the chosen member's keys are validated and filled, other members' keys are noted and dropped."""
    registry: Registry
    prefix: str


def inferred_types(default: Any) -> Optional[Tuple[type, ...]]:
    """The types a plain default (a schema value that is not a `Key`) admits: its own, an int for a float, a
    list for a list or tuple; None (any) for None, REQUIRED and IGNORED."""
    if default is None or default is REQUIRED or default is IGNORED:
        return None
    if isinstance(default, bool):
        return (bool,)
    if isinstance(default, float):
        return (int, float)
    if isinstance(default, (list, tuple)):
        return (list,)
    return (type(default),)
