"""Readers of option files: each turns a file of one format into the plain dict the validator takes
(validate.py: JSON types, every number finite, nesting at most values.MAX_DEPTH deep), with the file's own
positions in its messages (`file:line:col: ...`) and nothing else of the format left in the result.

One module per format: jsonc.py (JSON with comments: this project's and KAIR's files). A reader of another
format (BasicSR's YAML, say) goes beside it, and `read_option_file` chooses the reader; what it returns is then
validated, overridden by `--set` and saved exactly like a JSON file's data.
"""
from typing import Any, Dict

from utils.options.readers.jsonc import parse_json_file, strip_json_comments

__all__ = ['parse_json_file', 'read_option_file', 'strip_json_comments']


def read_option_file(path: str) -> Dict[str, Any]:
    """The data of the option file at `path`, read by the reader of its format (one format so far: JSON with
    comments), so that every entry point reads every format the same way."""
    return parse_json_file(path)
