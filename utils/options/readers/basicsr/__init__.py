"""BasicSR's and traiNNer-redux's YAML option files, translated into this project's options.

    translation = read_basicsr_file('train_MSRResNet_x4.yml', vocabulary, ['train.total_iter=1000'])
    translation.data        # this project's option data (what a JSON option file would hold), to be validated
    translation.origins     # {our dotted key: Origin(their key, line, why)}: where each value comes from
    translation.notes       # lines for the log: what is approximated, what differs
    translation.unneeded    # [(their key, why)]: keys accepted that need nothing done here
    translation.summary()   # the one log line saying how the file was read

`vocabulary` is what the members declare (utils/options/foreign.py; option_rules.py collects it from the
registries): this package knows no network, dataset or loss. `--set` arguments use the file's own key names and are
applied to the file's data before it is translated. A key that cannot be honoured is one OptionsError naming the
file, its line and the key as the file spells it; so is a key nothing knows (with the nearest known one).

Which trainer wrote the file: BasicSR's files (and those of the repositories built on it: HAT, DAT, Real-ESRGAN, ...)
name their model class (`model_type`); traiNNer-redux's do not (it chooses the model from the file's contents).
The tables (loop.py, sections.py, losses.py) are exported for the generated mapping table of the docs.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from utils.options.foreign import BASICSR, REDUX, Vocabulary
from utils.options.overrides import apply_overrides
from utils.options.readers.basicsr.context import Context, Origin
from utils.options.readers.basicsr.loop import LOGGER, OTF_REFUSED, PATH, TOP_LEVEL
from utils.options.readers.basicsr.rules import Rule, custom, section_rules
from utils.options.readers.basicsr.sections import (LOADER, TRAIN, VAL, choose_model, datasets, network_d,
                                                    network_g, place_degradations, scan_border, train, val)
from utils.options.readers.yaml_file import YamlDocument, parse_yaml_file

__all__ = ['Translation', 'Origin', 'read_basicsr_file', 'translate', 'which_trainer', 'TABLES', 'mapping_rows']


@dataclass
class Translation:
    """An option file of another trainer as this project's option data, with where each value came from."""
    path: str
    trainer: str
    data: Dict[str, Any]
    origins: Dict[str, Origin]
    notes: List[str]
    unneeded: List[Tuple[str, str]]
    mapped: int
    spelling: Dict[str, str] = field(default_factory=dict)  # {our dotted key: `file:line: their.key`}
    overridden: Dict[str, str] = field(default_factory=dict)  # {our dotted key: the --set argument that gave it}
    test_file: bool = False  # no `train` section: a test file, whose path.pretrain_network_g is what it tests

    def summary(self) -> str:
        """The one log line: how the file was read."""
        keys = ', '.join(k for k, _ in self.unneeded) if self.unneeded else 'none'
        notes = f'; {len(self.notes)} note{"s" if len(self.notes) != 1 else ""} follow' if self.notes else ''
        return (f'{self.path}: read as {self.trainer} YAML: {self.mapped} keys mapped to this project\'s options, '
                f'{len(self.unneeded)} not needed here ({keys}; docs/option_files.md says why){notes}')


def which_trainer(data: Mapping[str, Any]) -> str:
    """BASICSR when the file names its model class (`model_type`), else REDUX."""
    return BASICSR if 'model_type' in data else REDUX


def _section(rule_fn: Any, ours: str, words: str) -> Rule:
    return custom(rule_fn, ours, words)


# our required keys as their files write them
REQUIRED_SPELLING = {'task': ('name',), 'netG.net_type': ('network_g', 'type'), 'netD.net_type': ('network_d', 'type')}
# the sections, read in this order (a network the project lacks is the first thing said), then the other keys
SECTIONS: Dict[str, Rule] = {
    'network_g': _section(network_g, 'netG', 'the network member\'s keys'),
    'network_d': _section(network_d, 'netD', 'the discriminator member\'s keys (with a GAN model)'),
    'datasets': _section(datasets, 'datasets', 'loader keys, then the dataset member\'s keys'),
    'train': _section(train, 'train', 'the train table'),
    'path': _section(lambda ctx, keys, value, section: section_rules(ctx, PATH, keys, ctx.section(keys, value),
                                                                      'path keys'), 'path', 'the path table'),
    'val': _section(val, 'val', 'the val table'),
    'logger': _section(lambda ctx, keys, value, section: section_rules(ctx, LOGGER, keys, ctx.section(keys, value),
                                                                        'logger keys'), 'logging', 'the logger table'),
}
SECTION_ORDER = tuple(SECTIONS)
# every table, for docs/option_files.md's generated mapping table: {section as the file writes it: {key: Rule}}
TABLES: Dict[str, Mapping[str, Rule]] = {
    '': {**SECTIONS, 'model_type': Rule(lambda *a: None, 'model', 'BasicSR\'s model class, by the model members\' '
                                                                   'declarations'), **TOP_LEVEL},
    'path': PATH, 'train': TRAIN, 'val': VAL, 'logger': LOGGER, 'datasets.<phase>': LOADER}


def mapping_rows() -> List[Tuple[str, str, str, str]]:
    """(their key as a file writes it, our key(s) it sets, how it is read, `mapped` / `not needed` / `refused` /
    `depends`) for every key of the translator's own tables, for the generated table of docs/option_files.md; the
    members' names and keys are in their `Foreign` declarations (option_rules.foreign_vocabulary())."""
    rows = []
    for section, table in TABLES.items():
        for key, rule in table.items():
            kind = ('not needed' if rule.words.startswith('not needed') else 'refused' if rule.words.startswith(
                'refused') else 'mapped' if rule.ours and not rule.words else 'depends')
            rows.append((f'{section}.{key}' if section else key, rule.ours, rule.words, kind))
    return rows


def translate(doc: YamlDocument, vocabulary: Vocabulary, overridden: Mapping[str, str] = (),
              testing: bool = False) -> Translation:
    """The document's data (their spelling, `--set` already applied) as this project's option data; `testing`:
    read for main_test (every dataset section but `train` a test set, Context)."""
    data = doc.data
    ctx = Context(doc, which_trainer(data), vocabulary, dict(overridden or {}), testing)
    for ours, theirs in REQUIRED_SPELLING.items():  # a missing required key is named as the file would write it
        ctx.spell(ours, theirs)
    choose_model(ctx, data)
    scan_border(ctx, data)
    for key in SECTION_ORDER:
        if key in data:
            SECTIONS[key].how(ctx, (key,), data[key], data)
        if key == 'network_g' and ctx.trainer == REDUX and data.get('high_order_degradation'):
            raise ctx.refuse(('high_order_degradation',), OTF_REFUSED, data['high_order_degradation'])
    for key, value in data.items():
        if key in SECTIONS or key == 'model_type':
            continue
        rule = TOP_LEVEL.get(key)
        if rule is None:
            raise ctx.unknown((key,), [*TOP_LEVEL, *SECTIONS, 'model_type'], 'top-level keys')
        rule.how(ctx, (key,), value, data)
    place_degradations(ctx)
    return Translation(doc.path, ctx.trainer, ctx.out, ctx.origins, ctx.notes, ctx.unneeded_keys, ctx.mapped,
                       ctx.spelling(), ctx.our_overridden(), test_file='train' not in data)


def read_basicsr_file(path: str, vocabulary: Vocabulary, overrides: Sequence[str] = (),
                      testing: bool = False) -> Translation:
    """Read a BasicSR or traiNNer-redux YAML option file, apply the `--set` overrides (the file's own key names),
    and translate it (see the module docstring); `testing`: for main_test (`translate`)."""
    doc = parse_yaml_file(path)
    overridden = apply_overrides(doc.data, overrides)
    return translate(doc, vocabulary, overridden, testing)

