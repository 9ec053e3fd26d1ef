"""The JSON-with-comments reader: this project's and KAIR's option files (`//` and `/* */` comments allowed).

Errors name `file:line:col` of the user's file: comments are blanked out in place, so the JSON parser's
positions stay those of the file.
"""
import json
import re
from typing import Any, Dict, List, Tuple

from utils.options.messages import options_error
from utils.options.values import MAX_DEPTH, check_values, json_loads


def strip_json_comments(text: str) -> str:
    """Blank out `//` and `/* */` comments outside strings, keeping line/column positions.

    Comment characters are replaced by spaces (newlines kept) so that a JSON error still points at
    the right line and column of the user's file; `"http://x"` stays intact.
    """
    out: List[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == '\\' and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
        elif c == '"':
            in_string = True
            out.append(c)
            i += 1
        elif text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            if j < 0:
                raise ValueError(f'unterminated /* comment starting at offset {i}')
            out.append(re.sub(r'[^\n]', ' ', text[i:j + 2]))
            i = j + 2
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def _line_col(text: str, offset: int) -> Tuple[int, int]:
    line = text.count('\n', 0, offset) + 1
    return line, offset - (text.rfind('\n', 0, offset) + 1) + 1


def read_text(path: str) -> str:
    """The file's text; an unreadable or non-UTF-8 file is one line naming it (and the line and column)."""
    try:
        with open(path, 'rb') as f:
            raw = f.read()
    except OSError as e:
        raise options_error(f'{path}: cannot read option file: {e.strerror}') from None
    try:
        return raw.decode('utf-8')
    except UnicodeDecodeError as e:
        line = raw.count(b'\n', 0, e.start) + 1
        col = e.start - (raw.rfind(b'\n', 0, e.start) + 1) + 1
        raise options_error(f'{path}:{line}:{col}: not a UTF-8 text file (byte 0x{raw[e.start]:02x}); '
                            f'save the option file as UTF-8') from None


def parse_json_file(path: str) -> Dict[str, Any]:
    """Read a commented JSON file; syntax errors become `file:line:col: message`."""
    text = read_text(path)

    def no_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
        d: Dict[str, Any] = {}
        for k, v in pairs:
            if k in d:
                raise options_error(f'{path}: duplicate key "{k}"')
            d[k] = v
        return d

    try:
        stripped = strip_json_comments(text)
    except ValueError as e:
        off = int(re.search(r'offset (\d+)', str(e)).group(1))
        line, col = _line_col(text, off)
        raise options_error(f'{path}:{line}:{col}: unterminated /* comment') from None
    try:
        data = json_loads(stripped, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as e:
        raise options_error(f'{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}') from None
    except RecursionError:
        raise options_error(f'{path}: invalid JSON: nested too deeply (at most {MAX_DEPTH} levels)') from None
    if not isinstance(data, dict):
        raise options_error(f'{path}: the top level must be a JSON object')
    bad = check_values(data)
    if bad:
        raise options_error(f'{path}: {bad[0]}: {bad[1]}')
    return data
