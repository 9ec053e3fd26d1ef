"""README.md and docs/*.md say only what exists: every relative link (and its #anchor) leads somewhere, every
`options/...json` they name is a shipped option file that validates, and every `--set key=value` a command shows
is accepted by the option file that command names.

In-process and fast: the pages are parsed with regular expressions and each option file is validated once with
the loader every entry point uses (`option_rules.read_options`), as tests/test_options.py does.
"""
import glob
import json
import os
import re
import shlex
from functools import lru_cache
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

from option_rules import read_options
from tests.conftest import ROOT
from utils.errors import OptionsError

PAGES = ['README.md'] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, 'docs', '*.md')))
DEMO = 'options/train_dncnn_demo.json'
# Option paths the pages use as placeholders for "your option file"; a `--set` shown with one is checked against
# the demo file, which takes every key of the loop.
PLACEHOLDERS = {'options/x.json', 'X.json'}
# Named but not option files.
NOT_OPTION_FILES = {'options/schema.json': 'the JSON Schema of the option files, not an option file'}

FENCE = re.compile(r'^[ \t]*(```|~~~).*?^[ \t]*\1[ \t]*$', re.M | re.S)  # also indented, in a list item
INLINE_CODE = re.compile(r'`[^`\n]+`')
LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+"[^"]*")?\)')
REF_DEF = re.compile(r'^\[[^\]]+\]:\s+(\S+)', re.M)
OPTION_PATH = re.compile(r'(?<![\w/.])options/[\w./{},-]+?\.json\b')
ENTRY_POINTS = ('main_train.py', 'main_test.py', 'scripts/export.py', 'launch_train.sh', 'submit_job.sh')


def read(page: str) -> str:
    with open(os.path.join(ROOT, page), encoding='utf-8') as f:
        return f.read()


def prose(text: str) -> str:
    """The text without code blocks and inline code (a link inside code is an example, not a link)."""
    return INLINE_CODE.sub('', FENCE.sub('', text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: the rendered text lower-cased, punctuation but `-` and `_` dropped, spaces
    as `-`."""
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', heading)  # a link shows its text
    text = text.replace('`', '').replace('*', '').strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')


@lru_cache(maxsize=None)
def anchors(page: str) -> Set[str]:
    seen: Dict[str, int] = {}
    out = set()
    for line in FENCE.sub('', read(page)).splitlines():
        m = re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f'{s}-{n}')
    return out


def links(page: str) -> Iterator[str]:
    text = prose(read(page))
    yield from LINK.findall(text)
    yield from REF_DEF.findall(text)


def expand_braces(path: str) -> List[str]:
    """`train_{A,B}_{x,y}.json` -> the four names (the shell's brace expansion)."""
    m = re.search(r'\{([^{}]*)\}', path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(',') for p in expand_braces(path[:m.start()] + alt + path[m.end():])]


def option_paths(page: str) -> Iterator[str]:
    for raw in OPTION_PATH.findall(read(page)):
        yield from expand_braces(raw)


def commands(page: str) -> Iterator[str]:
    """Every command line shown: the lines of code blocks (backslash continuations joined) and inline code spans
    that run an entry point or hold a `--set`."""
    text = read(page)
    for block in FENCE.finditer(text):
        body = block.group(0).split('\n')[1:-1]
        for line in re.sub(r'\\\n\s*', ' ', '\n'.join(body)).splitlines():
            if '--set' in line or any(e in line for e in ENTRY_POINTS):
                yield line.strip()
    for span in INLINE_CODE.findall(FENCE.sub('', text)):
        if '--set' in span:
            yield span.strip('`')


def set_overrides(command: str) -> Tuple[Optional[str], List[str]]:
    """(the option file the command names or None, its `--set` overrides)."""
    command = command.split('#', 1)[0] if ' #' in command else command  # a trailing shell comment
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    opt, sets = None, []
    for i, w in enumerate(words):
        if w == '--opt' and i + 1 < len(words):
            opt = words[i + 1]
        elif w == '--set' and i + 1 < len(words):
            sets.append(words[i + 1])
        elif opt is None and w.endswith('.json') and (w.startswith('options/') or w in PLACEHOLDERS):
            opt = w  # launch_train.sh N FILE, sbatch submit_job.sh FILE
    return opt, sets


def is_placeholder_value(value: str) -> bool:
    return any(s in value for s in ('…', '...', '<', '>'))


@lru_cache(maxsize=None)
def validated(path: str, overrides: Tuple[str, ...] = ()) -> Optional[str]:
    """None when the option file with these overrides validates, else the loader's one-line error."""
    try:
        read_options(os.path.join(ROOT, path), list(overrides))
    except OptionsError as e:
        return str(e)
    return None


@lru_cache(maxsize=None)
def demo_value(key: str) -> str:
    """The demo file's validated value at a dotted key, as JSON: a stand-in where a page shows `key=…`."""
    node = read_options(os.path.join(ROOT, DEMO))
    for part in key.split('.'):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(key)
        node = node[part]
    return json.dumps(node)


# --- links -------------------------------------------------------------------------------------------------------

def test_the_pages_exist_and_the_readme_is_short():
    assert len(PAGES) > 10
    assert len(read('README.md').splitlines()) <= 200


@pytest.mark.parametrize('page', PAGES)
def test_every_relative_link_and_anchor_leads_somewhere(page):
    bad = []
    for target in links(page):
        if re.match(r'^[a-z][a-z0-9+.-]*:', target):  # https:, mailto:
            continue
        path, _, anchor = target.partition('#')
        file = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(os.path.join(ROOT, file)):
            bad.append(f'{target}: no file {file}')
        elif anchor and file.endswith('.md') and anchor not in anchors(file):
            bad.append(f'{target}: no heading with anchor #{anchor} in {file}')
    assert not bad, f'{page}: ' + '; '.join(bad)


def test_the_slugs_are_githubs():
    assert slug('Resuming and preemption') == 'resuming-and-preemption'
    assert slug('`cache_data`: RAM, one copy per node') == 'cache_data-ram-one-copy-per-node'
    assert slug('BasicVSR, IconVSR, BasicVSR++ and EDVR') == 'basicvsr-iconvsr-basicvsr-and-edvr'
    assert slug('Is my GPU waiting for data?') == 'is-my-gpu-waiting-for-data'


# --- option files --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('page', PAGES)
def test_every_option_file_named_exists_and_validates(page):
    bad = []
    for path in sorted(set(option_paths(page))):
        if path in PLACEHOLDERS or '...' in path:  # "options/x.json": your option file
            continue
        if path in NOT_OPTION_FILES:
            assert os.path.exists(os.path.join(ROOT, path)), path
            continue
        if not os.path.exists(os.path.join(ROOT, path)):
            bad.append(f'{path}: no such file')
        elif validated(path):
            bad.append(validated(path))
    assert not bad, f'{page}: ' + '; '.join(bad)


@pytest.mark.parametrize('page', PAGES)
def test_every_set_shown_is_a_key_the_named_option_file_accepts(page):
    bad = []
    for command in commands(page):
        opt, sets = set_overrides(command)
        if not sets:
            continue
        target = DEMO if opt is None or opt in PLACEHOLDERS else opt
        overrides = []
        for s in sets:
            key, eq, value = s.partition('=')
            if not eq:
                bad.append(f'`{command}`: --set {s} has no "="')
                continue
            if is_placeholder_value(value):  # `--set train.total_iter=…`: the key must exist
                try:
                    value = demo_value(key)
                except KeyError:
                    bad.append(f'`{command}`: {key} is not a key of {DEMO}')
                    continue
            overrides.append(f'{key}={value}')
        problem = validated(target, tuple(overrides))
        if problem:
            bad.append(f'`{command}`: {problem}')
    assert not bad, f'{page}: ' + '; '.join(bad)


def test_the_checks_catch_what_they_are_for():
    """The parsing above finds a broken link, a missing option file and a wrong --set key."""
    assert list(links('README.md'))  # the README links to its pages
    assert expand_braces('options/a/{x,y}_{1,2}.json') == ['options/a/x_1.json', 'options/a/x_2.json',
                                                            'options/a/y_1.json', 'options/a/y_2.json']
    assert set_overrides('python main_train.py --opt options/zoo/x.json --set a.b=1 --set "c=[1, 2]"') == (
        'options/zoo/x.json', ['a.b=1', 'c=[1, 2]'])
    assert set_overrides('./launch_train.sh 4 options/x.json --set train.total_iter=2') == (
        'options/x.json', ['train.total_iter=2'])
    assert validated(DEMO, ('train.total_iter=5',)) is None
    assert 'unknown key' in validated(DEMO, ('train.totl_iter=5',))
    assert 'no such' not in (validated(DEMO) or '')
    text = 'see [the page](docs/nowhere.md) and `[not a link](x.md)`\n```\n[nor](y.md)\n```\n'
    assert LINK.findall(prose(text)) == ['docs/nowhere.md']
    listed = '1. Train:\n\n   ```bash\n   python main_train.py --opt a.json \\\n       --set b=1\n   ```\n'
    assert prose(listed).strip() == '1. Train:'
