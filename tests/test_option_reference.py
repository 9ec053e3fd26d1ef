"""The option reference (docs/options.md), the JSON Schema (options/schema.json) and `--describe` are generated
from the options' rules: they are up to date, every shipped option file validates against the schema, the
schema refuses the mistakes the loader refuses, and every registered name can be described."""
import glob
import importlib.util
import json
import os
import re
import sys

import jsonschema
import pytest

from conftest import ROOT, clean_env, run
from data.registry import DATASETS
from data.synthetic.demo import DEMO_DATA
from losses.registry import LOSSES
from metrics.registry import METRICS
from models.networks.layers.init import BN_INITS, WEIGHT_INITS
from models.optim import OPTIMIZERS
from models.registry import KAIR_SHARED_KEYS, MODELS, NETWORKS, network_options
from models.schedules import SCHEDULERS
from option_rules import option_rules
from utils.errors import OptionsError
from utils.options import IGNORED, parse_json_file, validate

PY = sys.executable
SCHEMA_PATH = os.path.join(ROOT, 'options', 'schema.json')
SHIPPED = sorted(p for p in glob.glob(os.path.join(ROOT, 'options', '**', '*.json'), recursive=True)
                 if p != SCHEMA_PATH)
REGISTRIES = (NETWORKS, DATASETS, LOSSES, OPTIMIZERS, SCHEDULERS, METRICS, MODELS, WEIGHT_INITS, BN_INITS, DEMO_DATA)


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, 'scripts', f'{name}.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def validator():
    with open(SCHEMA_PATH, encoding='utf-8') as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope='module')
def cat():
    from option_catalog import catalog
    return catalog()


def schema_problem(validator, data):
    """The most relevant schema error as 'key.path: message', or None when `data` validates."""
    errors = list(validator.iter_errors(data))
    if not errors:
        return None
    best = jsonschema.exceptions.best_match(errors)
    return f'{".".join(map(str, best.absolute_path))}: {best.message}'


def test_the_committed_reference_and_schema_are_what_the_rules_generate():
    """A key added, removed or re-documented without running the generator fails here (in a fresh process:
    networks that other tests register must not count)."""
    r = run([PY, 'scripts/option_reference.py', '--check'], env=clean_env(OMP_NUM_THREADS='1'))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout == ''


def test_check_exits_1_naming_the_stale_files_and_writing_rewrites_them(tmp_path, monkeypatch, capsys, cat):
    script = load_script('option_reference')
    monkeypatch.setattr(script, 'catalog', lambda: cat)  # built once for the module
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'options').mkdir()
    (tmp_path / 'docs' / 'options.md').write_text('# an old reference\n')
    monkeypatch.setattr(script, 'ROOT', str(tmp_path))
    assert script.main(['--check']) == 1
    err = capsys.readouterr().err
    assert err.strip() == ('option_reference: docs/options.md, options/schema.json are stale: run '
                           'python scripts/option_reference.py and commit the result')
    assert (tmp_path / 'docs' / 'options.md').read_text() == '# an old reference\n'  # --check writes nothing
    assert script.main([]) == 0
    assert script.main(['--check']) == 0
    assert sorted(os.listdir(tmp_path / 'options')) == ['schema.json']  # no temporary file left


def test_every_check_says_what_it_allows(cat):
    """Every declared key's check carries its `rule` label (utils/options/keys.py), so docs/options.md and
    `--describe` state what a value may be and options/schema.json can check it, instead of "checked when
    loaded"."""
    keys = [*cat.top, *(k for section in cat.sections.values() for k in section), *cat.loader, *cat.network_common,
            *(k for member in cat.all_members() for k in member.keys)]
    unlabelled = sorted({f'{k.check.__module__}: {k.key}' for k in keys if k.check is not None
                         and not getattr(k.check, 'allowed', None)})
    assert unlabelled == []


def test_the_generated_files_are_deterministic_and_the_reference_covers_every_member(cat):
    script = load_script('option_reference')
    first, again = script.reference(cat), script.reference(cat)
    assert first == again
    from option_schema import json_schema
    assert json.dumps(json_schema(cat)) == json.dumps(json_schema(cat))
    for name in NETWORKS.names() + DATASETS.names() + LOSSES.names() + METRICS.names():
        assert f'`{name}`' in first, name
    swinir = first.split('### `swinir`')[1].split('\n### ')[0]
    assert '| `upscale` | integer | `2` |  | super-resolution factor; inherits the top-level scale |' in swinir
    assert '| `window_size` | integer | `7` |  | attention window size |' in swinir
    ignored = first.split('## KAIR keys accepted and ignored')[1]
    assert all(f'`{k}`' in ignored for k in KAIR_SHARED_KEYS)
    assert '`train` of models `edvr`, `gan`, `plain`, `plain2`, `plain4`, `video_recurrent`: `fix_iter`, `fix_lr_mul`, `fix_keys`.' in ignored
    # a key whose declaration has no help says so, and <placeholders> are not swallowed as HTML
    assert '| no help text |' in first
    assert '&lt;path.root&gt;/&lt;task&gt;' in first


@pytest.mark.parametrize('path', SHIPPED, ids=[os.path.relpath(p, os.path.join(ROOT, 'options')) for p in SHIPPED])
def test_every_shipped_option_file_validates_against_the_schema(path, validator):
    assert schema_problem(validator, parse_json_file(path)) is None


DEMO = os.path.join(ROOT, 'options', 'train_dncnn_demo.json')
MISTAKES = {  # what the schema and the loader both refuse, by the key they name
    'netG.ncc': lambda d: d['netG'].update(ncc=3),
    'netG.nc': lambda d: d['netG'].update(nc='64'),
    'train.G_optimizer_lrr': lambda d: d['train'].update(G_optimizer_lrr=1e-4),
    'train.G_optimizer_lr': lambda d: d['train'].update(G_optimizer_lr=2),
    'train.G_lossfn_type': lambda d: d['train'].update(G_lossfn_type='l3'),
    'train.G_charbonnier_eps': lambda d: d['train'].update(G_lossfn_type='charbonnier', G_charbonnier_eps=-1),
    'train.G_scheduler_periods': lambda d: d['train'].update(G_scheduler_type='cosine_restart'),
    'datasets.train.H_sizee': lambda d: d['datasets']['train'].update(H_sizee=40),
    'datasets.test.dataloader_batch_size': lambda d: d['datasets']['test'].update(dataloader_batch_size=2),
    'netD.net_type': lambda d: d.update(model='gan'),
    'scal': lambda d: d.update(scal=2),
    'task': lambda d: d.update(task='a/b'),
    'val.lpips_net': lambda d: d.update(val={'metrics': ['lpips'], 'lpips_net': 'resnet'}),
}


@pytest.mark.parametrize('key', list(MISTAKES))
def test_the_schema_refuses_what_the_loader_refuses(key, validator):
    data = parse_json_file(DEMO)
    assert schema_problem(validator, data) is None
    MISTAKES[key](data)
    assert schema_problem(validator, data) is not None
    with pytest.raises(OptionsError, match=f'^<options>: {re.escape(key)}: '):
        validate(data, option_rules())


def test_what_the_loader_accepts_with_a_note_the_schema_accepts_too(validator):
    data = parse_json_file(DEMO)
    data['netG'].update(gc=32, upsample_mode='upconv')  # KAIR's shared keys DnCNN does not take
    data['train'].update(G_lossfn_type='l1', G_charbonnier_eps=1e-6)  # another loss's key: dropped with a note
    data['train'].update(G_extra_losses={'fft': 0.1}, G_fft_alpha=0.5)  # a loss G_extra_losses chooses
    data['val'] = {'metrics': ['niqe'], 'best_metric': 'niqe', 'lpips_net': 'vgg'}  # lpips not listed: dropped
    assert schema_problem(validator, data) is None
    notes = validate(data, option_rules())['_notes']
    assert any('gc, upsample_mode ignored' in n for n in notes) and any('G_charbonnier_eps' in n for n in notes)


def test_a_schema_pointer_is_accepted_and_ignored_by_the_loader(validator):
    data = {'$schema': '../schema.json', **parse_json_file(DEMO)}
    assert schema_problem(validator, data) is None
    opt = validate(data, option_rules())
    assert '$schema' not in opt
    assert opt == validate(parse_json_file(DEMO), option_rules())
    with pytest.raises(OptionsError, match=r'^<options>: \$schema: expected a string \(the path or URL of '
                                           r'options/schema\.json\), got 3$'):
        validate({**data, '$schema': 3}, option_rules())


def every_registered_name():
    return sorted({(r.kind, n) for r in REGISTRIES for n in r.names()})


def test_describe_works_for_every_registered_name_and_lists_each_key(cat):
    from option_catalog import describe
    for kind, name in every_registered_name():
        text = describe(name, cat)
        assert f'"{name}"' in text or f' {name}' in text, (kind, name)
        if kind == 'network':
            keys = [k for k, spec in network_options(name).items() if spec is not IGNORED and k != 'net_type']
            assert all(f'\n    {k} ' in text for k in keys if not k.startswith('init_')), name
        if kind == 'loss':
            assert all(f'\n    G_{k} ' in text for k in LOSSES.options(name, name)), name
    hat = describe('hat', cat)
    assert hat.startswith('network "hat": Chen et al., Activating More Pixels')
    assert 'chosen by: netG.net_type; netD.net_type (model gan)' in hat


def test_describe_shows_type_default_allowed_values_and_meaning(capsys):
    import main_train
    assert main_train.describe('charbonnier') == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ['loss "charbonnier": CharbonnierLoss with KAIR\'s `G_charbonnier_eps`.',
                       '  chosen by: train.G_lossfn_type; train.G_extra_losses; train.T_lossfn_type',
                       '  keys in train (written G_<key>):']
    assert out[3].split() == ['G_charbonnier_eps', 'number', '1e-09', 'eps', 'in', 'sqrt(diff^2', '+', 'eps)', '[>',
                              '0]']
    # BasicSR's class name finds our dataset, and a name both a model and a dataset carry shows both
    assert main_train.describe('RealESRGANDataset') == 0
    assert capsys.readouterr().out.startswith('dataset "realesrgan": Real-ESRGAN\'s training data')
    assert main_train.describe('plain') == 0
    out = capsys.readouterr().out
    assert out.startswith('model "plain": ') and '\n\ndataset "plain": ' in out


def test_every_scheduler_is_described_by_its_own_docstring_never_by_its_modules(cat, capsys):
    """`--describe scheduler` once showed models/schedules.py's docstring for CosineAnnealingLR, ExponentialLR,
    LinearLR, OneCycleLR and none (the registered functions had none of their own)."""
    import main_train
    import models.schedules
    from option_catalog import first_line
    module_line = first_line(models.schedules.__doc__)
    members = {m.name: m for m in cat.members['scheduler']}
    assert {'CosineAnnealingLR', 'ExponentialLR', 'LinearLR', 'OneCycleLR', 'none'} <= set(members)
    for name, member in members.items():
        own = first_line(SCHEDULERS.get(name, 'train.G_scheduler_type').__doc__)
        assert own and member.summary == own and own != module_line, name
    assert len({m.summary for m in members.values()}) == len(members)  # no two say the same
    assert main_train.describe('scheduler') == 0
    listing = capsys.readouterr().out
    assert module_line[:40] not in listing
    for name, member in members.items():
        assert f'  {name}' in listing and member.summary[:60] in listing, name


def test_describe_an_unknown_name_is_one_line_with_a_suggestion():
    r = run([PY, 'main_train.py', '--describe', 'charbonier'], env=clean_env(OMP_NUM_THREADS='1'))
    assert r.returncode == 2
    assert r.stdout == ''
    assert r.stderr == ('error: --describe: unknown name "charbonier" (did you mean "charbonnier"?); a kind '
                        '(network, model, dataset, loss, optimizer, scheduler, sharpness-aware, metric, init, demo) '
                        'lists its names; docs/options.md lists every name\n')


def test_describe_and_opt_are_one_or_the_other(capsys):
    import main_train
    assert main_train.parse_args(['--describe', 'hat']).describe == 'hat'
    for argv in (['--describe', 'hat', '--opt', DEMO], []):
        with pytest.raises(SystemExit) as e:
            main_train.parse_args(argv)
        assert e.value.code == 2
    assert 'one of the arguments --opt --describe is required' in capsys.readouterr().err


@pytest.mark.parametrize('kind', ['optimizer', 'weight initialiser', 'BatchNorm initialiser'])
def test_every_optimizer_and_initialiser_says_what_it_is_in_words_of_its_own(cat, kind):
    """`--describe optimizer` once showed one class docstring ("How one `<net>_optimizer_type` is built") for all 13
    optimizers, and `--describe init` "no help text" for every initialiser (lambdas and None)."""
    from option_catalog import NO_HELP
    members = cat.members[kind]
    assert len(members) >= 2
    for m in members:
        assert m.summary and m.summary != NO_HELP and not m.summary.startswith('How one'), m.name
    assert len({m.summary for m in members}) == len(members)  # no two say the same
