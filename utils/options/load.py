"""An option file from the disk to the options a run reads: read (readers/), `--set` overrides applied,
validated and completed (validate.py), the run folders added (run_folder.py). main_test's `--test-sets` swaps
in the test sets of another option file first."""
import copy
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from utils.options.messages import options_error
from utils.options.overrides import apply_overrides
from utils.options.readers import read_option_file
from utils.options.rules import Rules
from utils.options.run_folder import derive_paths
from utils.options.schema import SCHEMA, TEST_SECTION, missing_sections
from utils.options.validate import validate
from utils.options.values import show


def load_options(path: str, rules: Rules, overrides: Sequence[str] = (), test_sets: Optional[str] = None,
                 replaced: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Parse, override, validate and complete an option file (see `options_from_data`)."""
    return options_from_data(read_option_file(path), rules, path, overrides, test_sets, replaced)


def options_from_data(data: Dict[str, Any], rules: Rules, source: str, overrides: Sequence[str] = (),
                      test_sets: Optional[str] = None, replaced: Optional[Mapping[str, Any]] = None,
                      spelling: Optional[Mapping[str, str]] = None,
                      given: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """Override, validate and complete an option file's data (`source`: what errors name, and `opt_path`); with
    `test_sets`, an option file whose test sets replace those of the data (`with_test_sets`). `replaced`:
    top-level sections put in place of the data's after the overrides (netG "auto" resolved); their mistakes
    are reported against the file. Data translated from another trainer's file (readers/basicsr/) comes with
    `spelling` (how that file names our keys) and `given` (our keys its `--set` arguments gave)."""
    data = copy.deepcopy(data)
    sections = set(data)
    shown = source
    sets_scale = None
    if test_sets is not None:
        data, sets_scale = with_test_sets(data, test_sets)
        shown = f'{source} with the test sets of {test_sets}'
    overridden = {**(given or {}), **apply_overrides(data, overrides)}
    data.update(replaced or {})
    ours = data.get('scale', SCHEMA['scale'].default)
    if sets_scale is not None and sets_scale != ours:  # its low-quality folders are made for its scale
        raise options_error(f'{test_sets}: scale: {show(sets_scale)}: its test sets are made for scale '
                            f'{show(sets_scale)}, but {source} restores at scale {show(ours)}; use the test sets '
                            f'of scale {show(ours)}')
    opt = validate(data, rules, source=shown, overridden=overridden, spelling=spelling)
    opt['_missing'] = missing_sections(sections)  # from the file: a `--set train.x=...` adds no train section
    opt['opt_path'] = source
    derive_paths(opt, source=source, overridden=overridden)
    return opt


def with_test_sets(data: Dict[str, Any], test_sets: str) -> Tuple[Dict[str, Any], Any]:
    """(the parsed option file `data` with the test sets of the option file `test_sets` in place of its own, the
    `scale` that file gives or None): `main_test.py --test-sets`, a trained run's options plus a shipped benchmark
    file such as options/test/test_sr_benchmarks_x4.json. Only the test sections are taken."""
    given = read_option_file(test_sets)
    sections = given.get('datasets')
    tests = {k: v for k, v in sections.items() if TEST_SECTION.fullmatch(k)} if isinstance(sections, dict) else {}
    if not tests:
        raise options_error(f'{test_sets}: datasets.test: no test set in this file (--test-sets takes an option file '
                            f'whose datasets.test lists the sets)')
    own = data.get('datasets')
    kept = {k: v for k, v in own.items() if not TEST_SECTION.fullmatch(k)} if isinstance(own, dict) else {}
    return {**data, 'datasets': {**kept, **tests}}, given.get('scale')
