"""KAIR's image networks: the options of each KAIR option file build exactly KAIR's state_dict.

The reference listings are under tests/data/kair (format: its README.md). Each is checked through the
options validator, as a user's KAIR option file would be: netG keys that KAIR's builder ignores for
the network are accepted with one warning, the rest must be constructor arguments.
"""
import glob
import json
import os
import re

import pytest
import torch

from option_rules import option_rules
from models.registry import build_network
from utils.options import validate

TSV_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'kair')
TSV_FILES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(TSV_DIR, '*.netG.tsv')))


def read_listing(name):
    """(entries, parameters, top-level scale and n_channels, netG options, [(name, shape, dtype)])."""
    with open(os.path.join(TSV_DIR, name)) as f:
        header, *lines = f.read().splitlines()
    m = re.search(r'(\d+) entries, (\d+) parameters, scale (\d+), n_channels (\w+), netG options: (\{.*\})$', header)
    assert m, header
    top = {'scale': int(m.group(3))}
    if m.group(4) != 'None':
        top['n_channels'] = int(m.group(4))
    return int(m.group(1)), int(m.group(2)), top, json.loads(m.group(5)), [tuple(ln.split('\t')) for ln in lines]


def test_the_listings_are_in_the_repository():
    assert 'train_dncnn.netG.tsv' in TSV_FILES


@pytest.mark.parametrize('name', TSV_FILES)
def test_kair_options_build_exactly_kairs_state_dict(name):
    n_entries, n_params, top, netG, entries = read_listing(name)
    opt = validate({'task': 't', **top, 'netG': netG}, option_rules(), source=name)
    with torch.device('meta'):
        net = build_network(opt['netG'])
    mine = [(k, str(tuple(v.shape)), str(v.dtype).replace('torch.', '')) for k, v in net.state_dict().items()]
    missing = sorted({e[0] for e in entries} - {m[0] for m in mine})
    unexpected = sorted({m[0] for m in mine} - {e[0] for e in entries})
    assert not missing and not unexpected, (missing[:5], unexpected[:5])
    assert mine == entries
    assert len(mine) == n_entries and sum(p.numel() for p in net.parameters()) == n_params
    ignored = sorted(set(netG) - set(opt['netG']))
    assert bool(opt['_notes']) == bool(ignored)
    assert all(k in opt['_notes'][0] for k in ignored)
