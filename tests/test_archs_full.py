"""The full option files of today's architectures (options/archs/train_<net_type>_<task>.json).

Each net_type with a tiny demo file also ships a full file with the paper's training recipe; these tests
keep the two sets together and keep the full files' netG on a released configuration: where an official
state_dict table is here (tests/data/archs), netG's keys are exactly one table's kwargs, so the file
trains the network whose released checkpoints load with strict=True. (tests/test_options.py validates
every option file, these included.)
"""
import glob
import json
import os
import re
from typing import Any, Dict, List

import pytest

from utils.options import parse_json_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHS = os.path.join(ROOT, 'options', 'archs')
TSV_DIR = os.path.join(ROOT, 'tests', 'data', 'archs')
FULL = sorted(p for p in glob.glob(os.path.join(ARCHS, '*.json')) if not p.endswith('_tiny.json'))
TABLE_NET_TYPE = {'rrdbnet': 'esrgan'}  # table prefix → net_type where they differ
# netG keys that change how a network evaluates, not its weights (NAFNet's test-time local converter)
EVALUATION_ONLY = ('tlc',)


def net_type(path: str) -> str:
    return parse_json_file(path)['netG']['net_type']


def table_kwargs() -> Dict[str, List[Dict[str, Any]]]:
    """net_type → the kwargs of each official table of it."""
    out: Dict[str, List[Dict[str, Any]]] = {}
    for p in sorted(glob.glob(os.path.join(TSV_DIR, '*.tsv'))):
        prefix = os.path.basename(p).split('__')[0]
        with open(p) as f:
            header = f.readline()
        kwargs = json.loads(re.search(r'kwargs: (\{.*\})$', header.strip()).group(1))
        out.setdefault(TABLE_NET_TYPE.get(prefix, prefix), []).append(kwargs)
    return out


def test_every_tiny_architecture_file_has_a_full_one_of_the_same_net_type():
    """One full file per net_type, or one per released task where they differ (NAFNet: SIDD, GoPro, REDS)."""
    tiny = {net_type(p) for p in glob.glob(os.path.join(ARCHS, '*_tiny.json'))}
    full = [net_type(p) for p in FULL]
    assert len(tiny) == 36 and set(full) == tiny
    assert sorted(n for n in full if full.count(n) > 1) == ['nafnet'] * 3


@pytest.mark.parametrize('path', FULL, ids=os.path.basename)
def test_a_full_file_names_its_task_its_source_and_how_to_launch_it(path):
    with open(path) as f:
        text = f.read()
    name = os.path.basename(path)[:-len('.json')]
    assert parse_json_file(path)['task'] == name
    assert f'--opt options/archs/{name}.json' in text
    assert text.startswith('// ') and 'torchrun' in text


@pytest.mark.parametrize('path', [p for p in FULL if net_type(p) in table_kwargs()], ids=os.path.basename)
def test_a_tabled_net_type_trains_exactly_an_official_configuration(path):
    netG = {k: v for k, v in parse_json_file(path)['netG'].items() if k != 'net_type' and k not in EVALUATION_ONLY}
    assert netG in table_kwargs()[net_type(path)]
