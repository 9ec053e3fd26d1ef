"""How the options speak: one-line errors that name where the mistake is (the option file or the `--set`
argument, then the key), and secrets redacted wherever a value is shown or saved."""
import re
from typing import Any, Mapping, Optional

from utils.errors import OptionsError

SECRET_KEY = re.compile(r'(api[_-]?key|token|secret|password|passwd|credential)', re.I)
REDACTED = '***redacted***'
_LINE_BREAKING = re.compile('[\x00-\x1f\x7f\x85\u2028\u2029]')


def options_error(message: str) -> OptionsError:
    """An OptionsError whose message is one line: control characters from keys or paths are escaped."""
    return OptionsError(_LINE_BREAKING.sub(lambda m: m.group().encode('unicode_escape').decode('ascii'), message))


def redact(value: Any, key: str = '') -> Any:
    """Copy of `value` with secret-looking entries (api keys, tokens, passwords) replaced."""
    if isinstance(value, dict):
        return {k: redact(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if value is not None and SECRET_KEY.search(key):
        return REDACTED
    return value


def source_of(where: str, source: str, overridden: Mapping[str, str]) -> str:
    """What a message about option `where` names: the `--set` argument that gave it (or a section above it),
    else the option file (`source`)."""
    keys = [k for k in overridden if where == k or where.startswith((k + '.', k + '['))]
    return f'--set {overridden[max(keys, key=len)]}' if keys else source


def located(where: str, source: str, overridden: Mapping[str, str],
            spelling: Optional[Mapping[str, str]] = None) -> str:
    """`source: where` as messages begin, the source being the option file or the `--set` argument. `spelling`: for
    options translated from another trainer's file, {our key: `file:line: their.key`} (readers/basicsr/), so that a
    message names the key as the file spells it; a key without an entry is named under its nearest section's."""
    if spelling:
        if where in spelling:
            return spelling[where]
        above = [k for k in spelling if where.startswith(k + '.')]
        if above:
            k = max(above, key=len)
            return f'{spelling[k]}.{where[len(k) + 1:]}'
    return f'{source_of(where, source, overridden)}: {where}'


def kind_of(value: Any) -> str:
    """A JSON value's kind in words, for "expected a section" messages."""
    return ('a list' if isinstance(value, list) else 'a string' if isinstance(value, str) else
            'null' if value is None else 'true/false' if isinstance(value, bool) else
            'a number' if isinstance(value, (int, float)) else f'a {type(value).__name__}')
