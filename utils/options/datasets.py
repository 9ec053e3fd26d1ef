"""The `datasets` section of an option file: its phases in file order (`train`; the test sets as `test`, a list
of them, or BasicSR's `test_1`, `test_2`, ...), each section checked against its dataset type's keys, with
the top-level keys KAIR broadcasts into it (scale, n_channels, sigma, ...) filled in or checked against it.
"""
from typing import Any, Dict, List, Optional, Set, Tuple

from utils.options.rules import Rules
from utils.options.schema import GIVEN_INHERITED, INHERITED, TEST_SECTION, all_test_sets
from utils.options.validator import Validator
from utils.options.values import show
from utils.suggest import did_you_mean


def validate_datasets(v: Validator, opt: Dict[str, Any], data: Dict[str, Any], rules: Rules) -> Tuple[Set[str], bool]:
    """Fill `opt['datasets']` from the file's `datasets` (each phase's section validated and completed, its `phase`,
    `_where` and `_targets` added); returns (the top-level keys some section took, whether a section takes `scale`)."""
    datasets = data.get('datasets', {})
    if not isinstance(datasets, dict):
        v.not_a_section('datasets', datasets, 'phases: train, test')
    opt['datasets'] = {}
    used_top_level: Set[str] = set()
    scale_used = False
    for stored, where_set, section in dataset_sections(v, datasets):
        checked, used, takes_scale = _dataset_section(v, opt, rules, stored == 'train', where_set, section)
        checked['phase'] = 'train' if stored == 'train' else 'test'
        checked['_where'] = where_set
        checked['_targets'] = rules.targets(checked['dataset_type'], f'{where_set}.dataset_type')
        if stored == 'train' and not checked['_targets']:
            v.fail(f'{where_set}.dataset_type', f'{show(checked["dataset_type"])}: images without targets: a test set '
                   f'of main_test.py only (training learns from targets)')
        opt['datasets'][stored] = checked
        used_top_level |= used
        scale_used = scale_used or takes_scale
    check_test_set_names(v, all_test_sets(opt))
    return used_top_level, scale_used


def _dataset_section(v: Validator, opt: Dict[str, Any], rules: Rules, train: bool, where_set: str,
                     section: Any) -> Tuple[Dict[str, Any], Set[str], bool]:
    """(the section validated and completed, the top-level keys it took, whether its type takes `scale`)."""
    where = f'{where_set}.'
    if not isinstance(section, dict):
        v.not_a_section(where_set, section)
    if 'dataset_type' not in section:
        v.fail(f'{where}dataset_type', 'required key is missing')
    schema = v.named(f'{where}dataset_type', section['dataset_type'], rules.dataset)
    if not train:
        for key, why in rules.train_only_dataset_keys.items():
            if key in section:
                v.fail(f'{where}{key}', why)
        schema = {k: spec for k, spec in schema.items() if k not in rules.train_only_dataset_keys}
    section = dict(section)
    used: Set[str] = set()
    for inherited in INHERITED:  # KAIR propagates these top-level keys into datasets
        if inherited in schema and inherited not in section and opt[inherited] is not None:
            section[inherited] = opt[inherited]
            used.add(inherited)
    if 'scale' in schema and section['scale'] != opt['scale']:
        v.fail(f'{where}scale', f'{show(section["scale"])} differs from the top-level "scale": {opt["scale"]}; '
               f'the network works at scale {opt["scale"]}, so its output would not match these images '
               f'(leave {where}scale out to inherit it)')
    for key in GIVEN_INHERITED:
        if key in schema and opt[key] is not None and section[key] != opt[key]:
            v.fail(f'{where}{key}', f'{show(section[key])} differs from the top-level "{key}": '
                   f'{show(opt[key])}; give it in one place')
        if key in schema and key in section:
            used.add(key)
    return v.section(section, schema, where, nested=False), used, 'scale' in schema


def dataset_sections(v: Validator, datasets: Dict[str, Any]) -> List[Tuple[str, str, Any]]:
    """(key in the validated `datasets`, where in the file, section) of each dataset section, in file order.

    Test sets come as `test` (one section or a list of them: the preferred form) or as BasicSR's `test_1`,
    `test_2`, ... sections (`test_<anything>`; `val`, `val_<n>` are other names for them). They are kept as
    `test`, `test_2`, `test_3`, ... in file order: `datasets.test` is the first set, the one every reader of
    a single test set (validation during training among them) reads."""
    out: List[Tuple[str, str, Any]] = []
    tests: List[Tuple[str, Any]] = []
    family: Dict[str, str] = {}  # 'test'/'val' -> the first key of that name
    listed: Optional[str] = None
    named: Optional[str] = None
    for phase, section in datasets.items():
        if phase == 'train':
            out.append(('train', 'datasets.train', section))
            continue
        m = TEST_SECTION.fullmatch(phase)
        if m is None:
            v.fail(f'datasets.{phase}', f'unknown phase{did_you_mean(phase, ("train", "test", "test_1"))}; use '
                   f'"train" and "test" (one test set or a list of them; BasicSR\'s test_1, test_2, ... too)')
        family.setdefault(m.group(1), phase)
        if isinstance(section, list):
            if m.group(2):
                v.fail(f'datasets.{phase}', f'expected one test set (an object); a list of test sets goes in '
                       f'datasets.{m.group(1)}')
            if not section:
                v.fail(f'datasets.{phase}', 'an empty list: give at least one test set, or remove the key')
            listed = phase
            tests += [(f'datasets.{phase}[{i}]', s) for i, s in enumerate(section)]
        else:
            named = phase if m.group(2) else named
            tests.append((f'datasets.{phase}', section))
    if len(family) > 1:
        v.fail(f'datasets.{family["val"]}', f'"{family["val"]}" is another name for "{family["test"]}": '
               f'give only one of them')
    if listed is not None and named is not None:
        v.fail(f'datasets.{named}', f'several test sets go either in the list datasets.{listed} or in '
               f'test_1, test_2, ... sections, not both')
    out += [('test' if i == 0 else f'test_{i + 1}', where, section) for i, (where, section) in enumerate(tests)]
    return out


def _set_name_problem(name: str) -> Optional[str]:
    """Why `name` cannot name a folder of its own (None when it can)."""
    if name in ('.', '..') or any(c in name for c in '/\\\0'):
        return 'must be one folder name (no / or \\, not "." or "..")'
    return None


def check_test_set_names(v: Validator, sections: List[Dict[str, Any]]) -> None:
    """With several test sets each `name` names the set's row in results.md and its folder of results:
    given, one folder name, and not the name of another set."""
    if len(sections) < 2:
        return
    seen: Dict[str, str] = {}
    for s in sections:
        where, name = f'{s["_where"]}.name', s['name']
        if name == '':
            v.fail(where, 'required when there are several test sets: it names the set\'s row in results.md '
                          'and its results folder')
        problem = _set_name_problem(name)
        if problem:
            v.fail(where, f'{show(name)} {problem}')
        if name in seen:
            v.fail(where, f'{show(name)} is the name of {seen[name]} too; each test set needs its own name')
        seen[name] = s['_where']
