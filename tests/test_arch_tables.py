"""Today's architectures: the official kwargs of each released configuration build exactly the
official state_dict (names, shapes, dtypes), so the released checkpoints load with strict=True.

The tables are under tests/data/archs (format: its README.md). Each network is built through the
options validator from the header's kwargs, as a user's option file would be.
"""
import glob
import json
import os
import re

import pytest

from conftest import family, need_spandrel
from option_rules import option_rules
from models.registry import build_network, build_on_meta
from utils.options import NETWORK_SCALE_KEYS, validate

TSV_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'archs')
TSV_FILES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(TSV_DIR, '*.tsv')))
NET_TYPE = {'rrdbnet': 'esrgan'}  # table prefix → our net_type where they differ
SPANDREL = ('hat', 'dat', 'span', 'plksr', 'realplksr', 'srvggnet', 'nafnet')


def read_table(name):
    """(entries, parameters, kwargs, [(name, shape, dtype)])."""
    with open(os.path.join(TSV_DIR, name)) as f:
        header, *lines = f.read().splitlines()
    m = re.search(r': (\d+) entries, (\d+) parameters, .*kwargs: (\{.*\})$', header)
    assert m, header
    return int(m.group(1)), int(m.group(2)), json.loads(m.group(3)), [tuple(ln.split('\t')) for ln in lines]


def test_the_tables_are_in_the_repository():
    assert {'hat__HAT_SRx4.tsv', 'realplksr__x4_layernorm_default.tsv', 'nafnet__SIDD-width32.tsv'} <= set(TSV_FILES)


# Locally one table per net_type, its smallest configuration (the builder and every kwarg name it reads); the
# larger ones of the same net_type (HAT-L: 8 s to build on CPU) run in CI and with RUN_SLOW=1.
LOCAL = {'dat__DAT_light_x4.tsv', 'edsr__EDSR_Mx4.tsv', 'hat__HAT-S_SRx4.tsv', 'nafnet__SIDD-width32.tsv',
         'plksr__PLKSR_tiny_X4_DIV2K.tsv', 'rcan__RCAN_x4.tsv', 'realplksr__x4_layernorm_default.tsv',
         'restormer__biasfree_gray_denoise.tsv', 'rrdbnet__RealESRGAN_x4plus_anime_6B.tsv', 'span__spanx4_ch48.tsv',
         'srvggnet__realesr-animevideov3.tsv', 'basicvsr__BasicVSR_REDS4.tsv', 'basicvsrpp__BasicVSRPP_REDS.tsv',
         'edvr__EDVR_M_x4_SR_REDS.tsv', 'iconvsr__IconVSR_REDS.tsv'}


def test_every_net_type_with_a_table_has_one_that_runs_locally():
    assert {name.split('__')[0] for name in LOCAL} == {name.split('__')[0] for name in TSV_FILES}


@pytest.mark.parametrize('name', family(TSV_FILES, LOCAL))
def test_the_official_kwargs_build_exactly_the_official_state_dict(name):
    family = name.split('__')[0]
    if family in SPANDREL:
        need_spandrel()
    n_entries, n_params, kwargs, entries = read_table(name)
    netG = {'net_type': NET_TYPE.get(family, family), **kwargs}
    scale = next((kwargs[k] for k in NETWORK_SCALE_KEYS if k in kwargs), 1)  # the table's SR factor, whatever its name
    opt = validate({'task': 't', 'scale': scale, 'netG': netG}, option_rules(), source=name)
    net = build_on_meta(opt['netG'])  # no memory, when the constructor allows it
    net = build_network(opt['netG']) if net is None else net
    mine = [(k, str(tuple(v.shape)), str(v.dtype).replace('torch.', '')) for k, v in net.state_dict().items()]
    missing = sorted({e[0] for e in entries} - {m[0] for m in mine})
    unexpected = sorted({m[0] for m in mine} - {e[0] for e in entries})
    assert not missing and not unexpected, (missing[:5], unexpected[:5])
    assert sorted(mine) == sorted(entries)  # the order is cosmetic (README of the facts)
    assert len(mine) == n_entries and sum(p.numel() for p in net.parameters()) == n_params
