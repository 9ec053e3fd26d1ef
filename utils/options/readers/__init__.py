"""Readers of option files: each turns a file of one format into the plain dict the validator takes
(validate.py: JSON types, every number finite, nesting at most values.MAX_DEPTH deep), with the file's own
positions in its messages (`file:line:col: ...`) and nothing else of the format left in the result.

One module per format: jsonc.py (JSON with comments: this project's and KAIR's files), yaml_file.py (YAML, with
the line of each key) and basicsr/, which translates BasicSR's and traiNNer-redux's YAML files into this
project's options through the names the members declare (utils/options/foreign.py). `read_option_file` chooses the
reader; what it returns is then validated, overridden by `--set` and saved exactly like a JSON file's data.
"""
from typing import Any, Dict

from utils.options.messages import options_error
from utils.options.readers.jsonc import parse_json_file, strip_json_comments
from utils.options.readers.yaml_file import is_yaml_file

__all__ = ['parse_json_file', 'read_option_file', 'strip_json_comments']


def read_option_file(path: str) -> Dict[str, Any]:
    """The data of the option file at `path`, read by the reader of its format, so that every entry point reads
    every format the same way: JSON with comments (jsonc.py). BasicSR's and traiNNer-redux's YAML files (basicsr/)
    are translated into this project's options with the names the members declare, which this package does not
    know: option_rules.read_options reads them (with the vocabulary); here they are one line saying so."""
    if is_yaml_file(path):
        raise options_error(f'{path}: a BasicSR or traiNNer-redux YAML file: main_train.py --opt reads it (as '
                            f'option_rules.read_options does); here only this project\'s JSON option files are read')
    return parse_json_file(path)
