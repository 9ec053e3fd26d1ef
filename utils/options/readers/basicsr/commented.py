"""A translated BasicSR or traiNNer-redux file written as this project's JSON option file (JSON with comments), for
those who move for good (scripts/convert_options.py): each value commented with the key and line of the YAML file
it comes from (`Translation.origins`), or why the translation decided it; the log's summary and notes on top.

The data written are exactly `Translation.data`, so that the JSON file and the YAML file validate to the same
options and train the same weights; the comments are only read by people (the JSON reader strips them).
"""
import json
from typing import Any, List

from utils.options.readers.basicsr.context import Origin

INDENT = '  '


def _comment(origins: dict, ours: str) -> str:
    origin: Origin = origins.get(ours, Origin('', 0))
    if origin.key:
        where = f'{origin.key} (line {origin.line})' if origin.line else origin.key
        return f'{where}: {origin.why}' if origin.why else where
    return origin.why


def _lines(value: Any, ours: str, origins: dict, depth: int, out: List[str], head: str, last: bool) -> None:
    """`head` (`"key": ` or '') and `value` as lines of `out`, at `depth`, commented with the origin of `ours`."""
    pad = INDENT * depth
    comma = '' if last else ','
    comment = _comment(origins, ours) if ours else ''
    if isinstance(value, dict) and value:
        out.append(f'{pad}{head}{{' + (f'  // {comment}' if comment else ''))
        items = list(value.items())
        for i, (k, v) in enumerate(items):
            _lines(v, f'{ours}.{k}' if ours else k, origins, depth + 1, out, f'{json.dumps(k)}: ',
                   i == len(items) - 1)
        out.append(f'{pad}}}{comma}')
        return
    text = json.dumps(value, allow_nan=False)
    out.append(f'{pad}{head}{text}{comma}' + (f'  // {comment}' if comment else ''))


def commented_json(path: str, trainer: str, data: dict, origins: dict, header: List[str]) -> str:
    """The JSON option file of `data` (translated from `path`, a `trainer` file) with a comment per value naming
    its source (`origins`: {our dotted key: Origin}) and `header` lines (the log's summary and notes) on top."""
    out = [f'// Converted from {path} ({trainer} YAML) by scripts/convert_options.py.',
           '// Each value\'s comment names the key (and line) of that file it comes from. The notes of the conversion:']
    out.extend(f'//   {line}' for line in header)
    _lines(data, '', origins, 0, out, '', True)
    return '\n'.join(out) + '\n'
