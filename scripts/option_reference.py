"""Write the option reference (docs/options.md), the options' JSON Schema (options/schema.json) and the BasicSR /
traiNNer-redux mapping table of docs/option_files.md (foreign_reference.py) from the options' rules, or check that
they are up to date.

    python scripts/option_reference.py           # (re)write both files
    python scripts/option_reference.py --check   # exit 1 when either differs from what the rules give

Both are generated from option_catalog.py (the schema by option_schema.py), which reads the `Key`s that
utils/options/schema.py, the models, networks (constructor signatures), datasets, losses, optimizers,
schedulers and metrics declare: never edit them by hand; add a key where it is read and run this script. The output is deterministic (sorted names,
no dates), so `--check` in the test suite catches a key added without regenerating.
Exit codes: 0 written / up to date, 1 stale (--check), 2 a file cannot be written.
"""
import argparse
import json
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from option_catalog import NO_HELP, Catalog, KeyInfo, Member, catalog  # noqa: E402
from option_schema import json_schema  # noqa: E402
from foreign_reference import with_foreign_section  # noqa: E402
from models.registry import KAIR_SHARED_D_KEYS, KAIR_SHARED_KEYS, MODELS  # noqa: E402
from data.registry import TRAIN_ONLY_OPTIONS  # noqa: E402
from utils.options import GIVEN_INHERITED, INHERITED, SCHEMA_POINTER  # noqa: E402

DOC = os.path.join('docs', 'options.md')
SCHEMA_FILE = os.path.join('options', 'schema.json')
FOREIGN_DOC = os.path.join('docs', 'option_files.md')  # only its part between foreign_reference's markers
KINDS = {  # kind: (heading, anchor, what chooses it)
    'network': ('Networks', 'networks', '`netG.net_type` (and `netD.net_type` for model gan)'),
    'dataset': ('Datasets', 'datasets', '`datasets.<phase>.dataset_type`'),
    'loss': ('Losses', 'losses', '`train.G_lossfn_type` and the keys of `train.G_extra_losses`; each reads '
                                 '`train.G_<key>`'),
    'optimizer': ('Optimizers', 'optimizers', '`train.G_optimizer_type` (`D_optimizer_type`); each reads '
                                              '`train.G_optimizer_<key>` (`D_optimizer_<key>`)'),
    'scheduler': ('Schedulers', 'schedulers', '`train.G_scheduler_type` (`D_scheduler_type`); each reads '
                                              '`train.G_scheduler_<key>` (`D_scheduler_<key>`)'),
    'metric': ('Metrics', 'metrics', '`val.metrics` (a list); each reads its own `val.<key>`'),
}


def md(text: str) -> str:
    """`text` for markdown: < and > escaped outside `code` spans (a bare <task> would be read as HTML)."""
    parts = text.split('`')
    return '`'.join(p if i % 2 else p.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')
                    for i, p in enumerate(parts))


def cell(text: str) -> str:
    return text.replace('|', '\\|').replace('\n', ' ')


def code(text: str) -> str:
    return f'`{text}`' if text else ''


def table(keys: Sequence[KeyInfo], reader: Optional[Dict[str, str]] = None) -> List[str]:
    """A markdown table of keys; `reader` adds a "read by" column."""
    head = ['key', 'type', 'default', 'allowed'] + (['read by'] if reader is not None else []) + ['meaning']
    rows = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for k in keys:
        cols = [code(k.key), k.type_words(), code(k.default_words()) if not (k.required or k.ignored)
                else k.default_words(), k.allowed_words()]
        if reader is not None:
            cols.append(reader.get(k.key, ''))
        cols.append(k.help or ('accepted and ignored' if k.ignored else NO_HELP))
        cols = [cols[0], md(cols[1]), cols[2], *(md(c) for c in cols[3:])]
        rows.append('| ' + ' | '.join(cell(c) for c in cols) + ' |')
    return rows


def readers(models: Sequence[str]) -> str:
    every = MODELS.names()
    if sorted(models) == every:
        return 'every model'
    return ('model ' if len(models) == 1 else 'models ') + ', '.join(models)


def model_rows(cat: Catalog, section: str) -> Tuple[List[KeyInfo], Dict[str, str]]:
    """The keys the models add to `section` ('train' or 'path'), one row per distinct declaration, with
    the models that read it."""
    rows: List[Tuple[KeyInfo, List[str]]] = []
    for model in cat.members['model']:
        for k in model.keys:
            is_path = k.key.startswith('path.')
            if is_path != (section == 'path'):
                continue
            info = KeyInfo(k.key[5:] if is_path else k.key, k.default, k.types, k.check, k.help, k.type_text)
            if info.ignored:
                continue
            same = next((r for r in rows if r[0] == info), None)
            if same is None:
                rows.append((info, [model.name]))
            else:
                same[1].append(model.name)
    keyed: Dict[str, str] = {}
    out: List[KeyInfo] = []
    for info, models in rows:
        shown = info if sum(r[0].key == info.key for r in rows) == 1 else \
            KeyInfo(f'{info.key} ({", ".join(models)})', info.default, info.types, info.check, info.help,
                    info.type_text)
        out.append(shown)
        keyed[shown.key] = readers(models)
    return out, keyed


def member_section(m: Member) -> List[str]:
    also = f' (also `{"`, `".join(m.aliases)}`)' if m.aliases else ''
    lines = ['', f'### `{m.name}`{also}', '', md(m.summary) or NO_HELP]
    for extra in m.extra:
        lines += ['', md(extra[0].upper() + extra[1:] + ('' if extra.endswith('.') else '.'))]
    site = m.sites[0] if m.sites else None
    keys = m.written(site) if site is not None else []
    lines.append('')
    if keys:
        lines += table(keys)
    else:
        lines.append('No keys of its own.')
    return lines


def reference(cat: Catalog) -> str:
    L: List[str] = [
        '# Option reference',
        '',
        '<!-- Generated by scripts/option_reference.py from the options\' rules; do not edit by hand: add or change a '
        'key where it is declared and run `python scripts/option_reference.py` (the test suite runs it with '
        '--check). -->',
        '',
        'Every key an option file may hold, generated from the `Key`s the code declares where the key is read (the '
        'training loop\'s in `utils/options/schema.py`, the models\', and each network\'s, dataset\'s, loss\'s, optimizer\'s, '
        'scheduler\'s and metric\'s own), so it never disagrees with the loader. '
        '`python main_train.py --describe <name>` prints one member\'s part of it; `options/schema.json` is the same '
        'rules as a JSON Schema for editors (see [Data preparation and tools]'
        '(data_preparation.md#editor-completion-the-json-schema)).',
        '',
        '- **type**: what the loader accepts (a network key without a typed default: its constructor\'s annotation).',
        '- **default**: the value when the key is absent; *required*: no default; *ignored*: KAIR writes it, nothing '
        'here reads it (accepted with one note in the log).',
        '- **allowed**: the value check the loader runs.',
        '- **meaning**: the key\'s own help text; *no help text* where its declaration has none (a network '
        'constructor argument that neither the network\'s docstring nor models/registry.py\'s `NETWORK_KEY_HELP` '
        'explains).',
        '',
        'Besides checking each value, the loader checks keys against each other (a section\'s `scale` against the '
        'top-level one, `val.best_metric` against `val.metrics`, ...) and the files they name; see '
        '[option_files.md](option_files.md).',
        '',
        '## Contents',
        '',
        '- [Top level](#top-level) · [path](#path) · [train](#train) · [val](#val) · [logging](#logging)',
        '- ' + ' · '.join(f'[{KINDS[k][0]}](#{KINDS[k][1]})' for k in KINDS)
        + ' · [Models](#models) · [Other names](#other-names) · [KAIR keys accepted and ignored]'
          '(#kair-keys-accepted-and-ignored)',
        '',
        '## Top level',
        '',
        f'`{SCHEMA_POINTER}` (a string: the path or URL of options/schema.json, for editors) is accepted and ignored. '
        f'{", ".join(f"`{k}`" for k in INHERITED)} fill the dataset sections (and `scale` the network\'s factor key) '
        f'that take them; {", ".join(f"`{k}`" for k in GIVEN_INHERITED)} only when not null.',
        '',
        *table(cat.top),
    ]
    model_path, path_readers = model_rows(cat, 'path')
    L += ['', '## path', '', 'Read by the loop; the models add the weights they start from.', '',
          *table(cat.sections['path'] + model_path, {**{k.key: 'the loop' for k in cat.sections['path']},
                                                      **path_readers})]
    model_train, train_readers = model_rows(cat, 'train')
    L += ['', '## train', '',
          'The training loop\'s keys, then the ones each model reads (`model`). The type keys choose a loss, optimizer '
          'or schedule, which reads its own keys with the type key\'s prefix: see [Losses](#losses), '
          '[Optimizers](#optimizers), [Schedulers](#schedulers). Keys of members that are not chosen are dropped '
          'with a note.', '',
          *table(cat.sections['train'] + model_train, {**{k.key: 'the loop' for k in cat.sections['train']},
                                                        **train_readers})]
    L += ['', '## val', '', 'Validation during training and `main_test.py`; `metrics` adds [metrics](#metrics), each '
          'reading its own keys here.', '', *table(cat.sections['val'])]
    L += ['', '## logging', '', *table(cat.sections['logging'])]

    # members
    for kind, (heading, _, chosen) in KINDS.items():
        L += ['', f'## {heading}', '', f'Chosen by {chosen}.']
        if kind == 'network':
            L += ['', 'Every `netG` and `netD` also takes these keys (weight initialisation, not passed to the '
                      'constructor); a network\'s own keys are its constructor\'s arguments. `net_type: "auto"` reads '
                      'the architecture and its keys from the checkpoint in `path.pretrained_netG` (only the keys '
                      'below may accompany it).', '', *table(cat.network_common)]
        if kind == 'dataset':
            L += ['', 'Every `datasets.<phase>` section (phases `train` and `test`; `val` is another name for `test`; '
                      '`test` may be a list of test sets, or BasicSR\'s `test_1`, `test_2`, ... sections: '
                      '[evaluation.md](evaluation.md#several-test-sets-in-one-run)) '
                      'takes these loader keys; test sections refuse '
                  + ', '.join(f'`{k}`' for k in TRAIN_ONLY_OPTIONS) + '.', '', *table(cat.loader)]
        for m in cat.members[kind]:
            L += member_section(m)
    L += ['', '## Models', '', 'Chosen by the top-level `model`. Their `train` and `path` keys are in [train](#train) '
          'and [path](#path).']
    for m in cat.members['model']:
        also = f' (also `{"`, `".join(m.aliases)}`)' if m.aliases else ''
        L += ['', f'### `{m.name}`{also}', '', md(m.summary) or NO_HELP, '']
        L += [f'- {md(line)}' for line in m.extra]
    L += ['', '## Other names', '']
    for kind, key in (('weight initialiser', '`netG.init_type`, `netD.init_type`'),
                      ('BatchNorm initialiser', '`netG.init_bn_type`, `netD.init_bn_type`'),
                      ('demo data generator', '`datasets.<phase>.generate_demo`')):
        L += [f'- {key}: ' + ', '.join(f'`{m.name}`' + (f' (`{"`, `".join(m.aliases)}`)' if m.aliases else '')
                                      for m in cat.members[kind])]
    ignored: Dict[Tuple[str, ...], List[str]] = {}  # the same keys ignored by several models: one line
    for m in cat.members['model']:
        keys = tuple(k.key for k in m.keys if k.ignored)
        if keys:
            ignored.setdefault(keys, []).append(m.name)
    L += ['', '## KAIR keys accepted and ignored', '',
          'KAIR\'s option files write these keys where nothing here reads them; they are accepted with one note in '
          'the log and dropped, as KAIR drops them. A misspelt key is an error with a did-you-mean, never ignored.', '',
          '- `netG`: ' + ', '.join(f'`{k}`' for k in KAIR_SHARED_KEYS) + ' where the network\'s constructor does not '
          'take them.',
          '- `netD`: ' + ', '.join(f'`{k}`' for k in KAIR_SHARED_D_KEYS) + ' where the discriminator does not take '
          'them.']
    for keys, models in ignored.items():
        L.append(f'- `train` of {"model" if len(models) == 1 else "models"} ' + ', '.join(f'`{m}`' for m in models)
                 + ': ' + ', '.join(f'`{k}`' for k in keys) + '.')
    L += ['- `train`: the keys of losses, optimizers and schedules that the type keys do not choose (e.g. '
          '`G_charbonnier_eps` with `G_lossfn_type: "l1"`); `val`: the keys of metrics `val.metrics` does not list.',
          '- top level: ' + ', '.join(f'`{k}`' for k in GIVEN_INHERITED) + ' when no dataset section takes them; '
          '`scale` when neither netG nor a dataset takes it.', '']
    return '\n'.join(L)


def outputs() -> Dict[str, str]:
    """{path relative to the project: text} of every generated file; docs/option_files.md, where it exists, with
    its generated part (foreign_reference.py) replaced."""
    cat = catalog()
    schema = json.dumps(json_schema(cat), indent=1, ensure_ascii=False) + '\n'
    out = {DOC: reference(cat), SCHEMA_FILE: schema}
    try:
        with open(os.path.join(ROOT, FOREIGN_DOC), encoding='utf-8') as f:
            out[FOREIGN_DOC] = with_foreign_section(f.read())
    except FileNotFoundError:
        pass
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--check', action='store_true', help='exit 1 when docs/options.md or options/schema.json is stale')
    args = p.parse_args(argv)
    stale = []
    for rel, text in outputs().items():
        path = os.path.join(ROOT, rel)
        try:
            with open(path, encoding='utf-8') as f:
                current: Optional[str] = f.read()
        except FileNotFoundError:
            current = None
        if current == text:
            continue
        if args.check:
            stale.append(rel)
            continue
        tmp = f'{path}.tmp-{os.getpid()}'
        try:
            with open(tmp, 'w', encoding='utf-8') as f:
                f.write(text)
            os.replace(tmp, path)
        except OSError as e:
            if os.path.exists(tmp):
                os.unlink(tmp)
            print(f'option_reference: cannot write {rel}: {e.strerror}', file=sys.stderr)
            return 2
        print(f'option_reference: wrote {rel}', file=sys.stderr)
    if stale:
        print(f'option_reference: {", ".join(stale)} {"is" if len(stale) == 1 else "are"} stale: run '
              f'python scripts/option_reference.py and commit the result', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
