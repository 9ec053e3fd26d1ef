"""`--set KEY.PATH=VALUE`: changes to an option file's data from the command line, applied before validation,
and remembered so that a mistake in one is reported against the argument rather than the file."""
import json
import re
from typing import Any, Dict, Iterable, List, Tuple

from utils.options.messages import REDACTED, SECRET_KEY, options_error
from utils.options.values import MAX_DEPTH, SHOW_CHARS, check_values, json_loads


def parse_override(text: str) -> Tuple[List[str], Any]:
    """`a.b.c=value` → (['a','b','c'], value); value parsed as JSON, else kept as a string."""
    if '=' not in text:
        shown = REDACTED if SECRET_KEY.search(text) else text
        raise options_error(f'--set {shown}: expected KEY.PATH=VALUE')
    key, raw = text.split('=', 1)
    parts = key.strip().split('.')
    if not all(parts):
        raise options_error(f'--set {key}: empty key in "{key}"')
    try:
        value = json_loads(raw)
    except json.JSONDecodeError:
        value = raw
    except RecursionError:
        raise options_error(f'--set {key}: value nested too deeply (at most {MAX_DEPTH} levels)') from None
    bad = check_values(value, '.'.join(parts), depth=len(parts) + 1)
    if bad:
        raise options_error(f'--set {bad[0]}: {bad[1]}')
    return parts, value


_INDEXED = re.compile(r'([^\[\]]+)((?:\[\d+\])+)')  # `test[1]`: an item of a list (several test sets)


def _steps(part: str) -> List[Any]:
    """One dotted part of a --set key as steps: `test[1]` -> ['test', 1]; a plain key -> [key]."""
    m = _INDEXED.fullmatch(part)
    if m is None:
        return [part]
    return [m.group(1), *(int(i) for i in re.findall(r'\d+', m.group(2)))]


def apply_overrides(data: Dict[str, Any], overrides: Iterable[str]) -> Dict[str, str]:
    """Set each `KEY.PATH=VALUE` in `data`: missing sections are created; `[i]` names an item of a list (as the
    errors name them: `--set datasets.test[1].dataroot_H=...`), which must exist. Returns {KEY.PATH as messages
    name it: the argument as shown in messages (secrets redacted)}, so that a mistake in an override is reported
    against the argument, not the file (the last of several overrides of one key wins). A section an override
    creates is named after it too (the first that created it): an unknown section `--set foo.bar=1` makes is
    the argument's mistake."""
    given: Dict[str, str] = {}
    for text in overrides:
        parts, value = parse_override(text)
        steps = [step for part in parts for step in _steps(part)]
        argument = (f'{text.split("=", 1)[0]}={REDACTED}' if SECRET_KEY.search(parts[-1]) else
                    text if len(text) <= SHOW_CHARS else text[:SHOW_CHARS] + '...')
        node: Any = data
        path = ''
        for i, step in enumerate(steps):
            shown = f'--set {text.split("=", 1)[0]}'
            if isinstance(step, int):
                if not isinstance(node, list):
                    raise options_error(f'{shown}: "{path}" is not a list')
                if step >= len(node):
                    raise options_error(f'{shown}: "{path}" has {len(node)} item{"s" if len(node) != 1 else ""} '
                                        f'(indices 0 to {len(node) - 1})')
            elif not isinstance(node, dict):
                hint = f': name an item, e.g. {path}[0].{step}' if isinstance(node, list) else ''
                raise options_error(f'{shown}: "{path}" is {"a list" if isinstance(node, list) else "not a section"}'
                                    f'{hint}')
            path = f'{path}[{step}]' if isinstance(step, int) else f'{path}.{step}' if path else step
            if i == len(steps) - 1:
                node[step] = value
                given[path] = argument
                break
            nxt = node[step] if isinstance(step, int) else node.get(step)
            if nxt is None:
                nxt = node[step] = {}
                given.setdefault(path, argument)
            node = nxt
    return given
