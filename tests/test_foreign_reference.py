"""docs/option_files.md's list of what BasicSR's and traiNNer-redux's files name that is not supported
(foreign_reference.NOT_SUPPORTED, generated into the doc) is what the anchor files' refusals show: every refused
training file (tests/test_basicsr_anchor_training.py REFUSED) is listed, and every network listed is refused."""
import os

import yaml

from anchor_runs import ANCHORS
from foreign_reference import NOT_SUPPORTED, foreign_section
from option_rules import foreign_vocabulary
from test_basicsr_anchor_training import REFUSED
from utils.options.foreign import TRAINERS, lookup

LISTED = {name for names, _ in NOT_SUPPORTED.values() for name in names}
FILE_BUGS = {'network_g.ema_decay'}  # a key EDVR does not take: BasicSR fails on those files too


def _value(data: dict, dotted: str):
    for part in dotted.split('.'):
        data = data[part]
    return data


def test_every_refused_anchor_file_is_listed_as_not_supported():
    for name, (key, _) in REFUSED.items():
        if key in FILE_BUGS:
            continue
        with open(os.path.join(ANCHORS, name)) as f:
            data = yaml.safe_load(f)
        if key == 'high_order_degradation':
            assert key in LISTED, name
        elif key == 'train.perceptual_opt':
            assert f'perceptual_opt with {data["model_type"]}' in LISTED, name
        else:
            assert _value(data, key) in LISTED, (name, key, _value(data, key))


def test_every_network_listed_is_one_this_project_does_not_build():
    vocabulary = foreign_vocabulary()
    for what, (names, _) in NOT_SUPPORTED.items():
        if what.startswith('networks'):
            for name in names:
                assert not any(lookup(vocabulary, 'network', name, t) for t in TRAINERS), name


def test_the_doc_holds_the_generated_section():
    with open(os.path.join(os.path.dirname(ANCHORS), '..', '..', 'docs', 'option_files.md')) as f:
        assert foreign_section() in f.read()  # scripts/option_reference.py --check keeps it current
