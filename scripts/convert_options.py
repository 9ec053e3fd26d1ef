"""Convert a BasicSR or traiNNer-redux YAML option file into this project's JSON option file, for those who move for
good: main_train.py reads the YAML file itself; the JSON file it writes trains the same weights, and its comments
name the YAML key (and line) each value comes from.

    python scripts/convert_options.py train_MSRResNet_x4.yml [-o train_MSRResNet_x4.json]
                                      [--set train.total_iter=1000 ...]

`--set` takes the YAML file's own key names, as `main_train.py --opt FILE.yml --set` does. The file is checked as
training checks it first (what training refuses is refused here, with the same one line and exit code 2), and the
JSON file is written atomically: there is never a half-written file. Default output: the YAML file's name with
`.json`, beside it.
"""
import argparse
import os
import sys
from typing import Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from option_rules import read_options_data, translate_foreign_file  # noqa: E402
from utils.checkpoint import atomic_write_text  # noqa: E402
from utils.errors import UserError, say  # noqa: E402
from utils.exit_codes import EXIT_USER_ERROR  # noqa: E402
from utils.options.readers.basicsr.commented import commented_json  # noqa: E402
from utils.options.readers.yaml_file import is_yaml_file  # noqa: E402


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('yaml', metavar='FILE.yml', help='a BasicSR or traiNNer-redux option file')
    p.add_argument('-o', '--out', default=None, metavar='OUT.json', help='the JSON option file to write (default: '
                                                                         'FILE.json beside FILE.yml)')
    p.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE',
                   help='override a key of the YAML file, in its own spelling (train.total_iter=1000)')
    return p.parse_args(argv)


def convert(path: str, overrides: Sequence[str] = ()) -> str:
    """The JSON option file's text for the YAML file at `path` (with `--set` overrides), after the translated
    options validated as main_train validates them (a UserError otherwise)."""
    if not is_yaml_file(path):
        raise UserError(f'{path}: not a YAML file (.yml, .yaml); this project\'s JSON option files need no conversion')
    translation = translate_foreign_file(path, overrides)
    read_options_data(translation.data, path, (), None, None, translation.spelling, translation.overridden)
    header = [translation.summary(), *translation.notes]
    return commented_json(path, translation.trainer, translation.data, translation.origins,
                          [' '.join(line.split()) for line in header])


def main(argv: Optional[Sequence[str]] = None) -> int:
    """0 written; 2 refused (one line on stderr, nothing written)."""
    args = parse_args(argv)
    out = args.out or os.path.splitext(args.yaml)[0] + '.json'
    try:
        text = convert(args.yaml, args.set)
        atomic_write_text(out, text)
    except UserError as e:
        say(f'error: {e}')
        return EXIT_USER_ERROR
    print(f'{args.yaml} -> {out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
