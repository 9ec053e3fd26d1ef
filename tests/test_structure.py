"""The architecture as rules: layers point down, and a network, model, dataset or loss is one new file.

Layers: main_train.py/main_test.py → training/ → models/ → losses/, data/ → metrics/ → utils/. utils/ knows
none of the others, metrics/ only utils/, losses/ only metrics/ and utils/, data/ not models/ or losses/;
training/ (what the train loop uses besides the model and the data) is known to the entry points only.
Registries find their members by module name, so nothing else is edited to add one, and each member
declares the option keys it reads.
"""
import ast
import os
import re
import sys
import textwrap

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

from conftest import ROOT, clean_env, run_main, tiny_options, write_options
from data.registry import DATASETS
from data.sampler import parse_key
from losses.registry import LOSSES, build_loss
from models.registry import NETWORKS, build_network
from option_rules import option_rules, read_options
from utils.errors import OptionsError, UserError
from utils.options import Key, positive, validate
from utils.registry import Registry


def imported_modules(path: str) -> set:
    """Absolute module names imported anywhere in the file (also inside functions)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f'{node.module}.{a.name}' for a in node.names)
    return names


def package_files(package: str) -> list:
    folder = os.path.join(ROOT, package)
    return sorted(os.path.join(d, f) for d, _, files in os.walk(folder) for f in files if f.endswith('.py'))


ENTRY_POINTS = ('main_train', 'main_test', 'option_rules')


@pytest.mark.parametrize('package, forbidden', [
    ('utils', ('training', 'models', 'data', 'losses', 'metrics') + ENTRY_POINTS),
    ('metrics', ('training', 'models', 'data', 'losses') + ENTRY_POINTS),
    ('losses', ('training', 'models', 'data') + ENTRY_POINTS),
    ('data', ('training', 'models', 'losses') + ENTRY_POINTS),
    ('models', ('training',) + ENTRY_POINTS),
    ('training', ENTRY_POINTS)])
def test_layers_only_import_downwards(package, forbidden):
    files = package_files(package)
    assert files
    upward = {os.path.relpath(p, ROOT): sorted(m for m in imported_modules(p) if m.split('.')[0] in forbidden)
              for p in files}
    assert {f: m for f, m in upward.items() if m} == {}


@pytest.mark.parametrize('folder, allowed, forbidden', [
    # the networks know nothing of what trains them: only their registry and each other
    ('models/networks', ('models.networks', 'models.registry'), ('models',)),
    # degradations are pure functions of images and seeds; datasets use them, never the reverse
    ('data/degradations', (), ('data.datasets', 'data.synthetic')),
    ('data/datasets', (), ('data.synthetic',)),
])
def test_rooms_inside_a_package_only_import_downwards(folder, allowed, forbidden):
    def refused(module: str) -> bool:
        inside = lambda prefixes: any(module == p or module.startswith(p + '.') for p in prefixes)
        return inside(forbidden) and not inside(allowed)
    files = package_files(folder)
    assert files
    upward = {os.path.relpath(p, ROOT): sorted(m for m in imported_modules(p) if refused(m)) for p in files}
    assert {f: m for f, m in upward.items() if m} == {}


PROJECT_PACKAGES = ('models', 'data', 'utils', 'losses', 'metrics', 'training', 'bench', 'scripts')
ENTRY_POINTS = ('main_train', 'main_test')


def production_files() -> list:
    """Every Python file of the project but the tests."""
    top = [os.path.join(ROOT, f) for f in sorted(os.listdir(ROOT)) if f.endswith('.py')]
    return top + [p for pkg in PROJECT_PACKAGES if os.path.isdir(os.path.join(ROOT, pkg)) for p in package_files(pkg)]


def private_uses(path: str) -> list:
    """`from <project module> import _name` and `<project module>._name` in one file."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    ours = {os.path.splitext(f)[0] for f in os.listdir(ROOT) if f.endswith('.py')} | set(PROJECT_PACKAGES)
    modules = set()  # local names bound to project modules
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update((a.asname or a.name).split('.')[0] for a in node.names if a.name.split('.')[0] in ours)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split('.')[0] in ours:
            for a in node.names:
                if a.name.startswith('_'):
                    found.append(f'from {node.module} import {a.name}')
                elif a.name.islower():  # possibly a module (`from utils import dist`)
                    modules.add(a.asname or a.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith('_') and not node.attr.startswith('__') \
                and isinstance(node.value, ast.Name) and node.value.id in modules:
            found.append(f'{node.value.id}.{node.attr}')
    return found


def test_no_module_uses_another_modules_private_names():
    """A helper two modules share is public where it belongs; `_names` stay inside their module."""
    uses = {os.path.relpath(p, ROOT): private_uses(p) for p in production_files()}
    assert {f: u for f, u in uses.items() if u} == {}


def test_no_entry_point_imports_another_and_options_are_read_through_option_rules():
    """main_test.py, the scripts and the library read options through option_rules.py, not the trainer
    (only the benchmarks of the train loop import it, to time it)."""
    importers = {os.path.relpath(p, ROOT): sorted(m for m in imported_modules(p) if m.split('.')[0] in ENTRY_POINTS)
                 for p in production_files() if not os.path.relpath(p, ROOT).startswith('bench' + os.sep)}
    assert {f: m for f, m in importers.items() if m} == {}
    for p in production_files():
        if os.path.relpath(p, ROOT).startswith('bench' + os.sep):
            with open(p) as f:
                assert 'main_train.read_options' not in f.read() and 'main_train import option_rules' not in f.read()


def test_every_registered_model_has_the_members_the_train_loop_calls_with_their_parameters():
    """models/interface.py's TrainingModel is the contract; a model missing a member, or taking other
    parameters, fails here instead of at some iteration of a run."""
    import inspect

    from models.interface import TrainingModel
    from models.registry import MODELS
    members = [n for n in TrainingModel.__dict__ if not n.startswith('_') or n == '__init__']
    members += list(TrainingModel.__annotations__)
    assert {'backward', 'step', 'validate', 'load_state', 'state_files', 'restorer_class'} <= set(members)
    for name in MODELS.names():
        cls = MODELS.get(name, 'model')
        for member in members:
            assert hasattr(cls, member), f'model {name}: no {member}'
            expected = TrainingModel.__dict__.get(member)
            if callable(expected):
                got = [p.name for p in inspect.signature(getattr(cls, member)).parameters.values()]
                want = [p.name for p in inspect.signature(expected).parameters.values()]
                assert got == want, f'model {name}.{member}{tuple(got)}: the loop calls it with {tuple(want)}'


@NETWORKS.register('test_two_conv')
class TwoConv(nn.Module):
    """A network defined outside models/: registering it is all it takes to train it."""

    def __init__(self, in_nc: int = 3, out_nc: int = 3, nc: int = 8):
        super().__init__()
        self.head = nn.Conv2d(in_nc, nc, 3, padding=1)
        self.tail = nn.Conv2d(nc, out_nc, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.tail(torch.relu(self.head(x)))


def test_a_registered_network_takes_its_options_from_its_signature():
    opt = validate({'task': 't', 'netG': {'net_type': 'test_two_conv', 'nc': 4}}, option_rules())
    assert opt['netG'] == {'net_type': 'test_two_conv', 'in_nc': 3, 'out_nc': 3, 'nc': 4,
                           'init_type': 'default', 'init_bn_type': 'uniform', 'init_gain': 1.0}
    net = build_network(opt['netG'])
    assert isinstance(net, TwoConv) and net.head.out_channels == 4
    with pytest.raises(OptionsError, match=r'^<options>: netG\.ncc: unknown key \(did you mean "nc"\?\)$'):
        validate({'task': 't', 'netG': {'net_type': 'test_two_conv', 'ncc': 4}}, option_rules())


def test_a_network_defined_in_a_test_module_trains_with_no_edit_elsewhere(tmp_path, demo_images):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=2, checkpoint_save=2, checkpoint_test=2,
                       G_scheduler_milestones=[])
    opt['netG'] = {'net_type': 'test_two_conv', 'nc': 6}
    opt['logging']['use_tensorboard'] = False
    path = write_options(str(tmp_path / 'o.json'), opt)
    r = run_main('main_train', ['--opt', path], env=clean_env(OMP_NUM_THREADS='1'))  # registered by this module
    assert r.returncode == 0, r.stderr[-2000:]
    weights = torch.load(tmp_path / 'exp' / 'tiny' / 'models' / '2_G.pth', weights_only=True)
    assert set(weights) == {'head.weight', 'head.bias', 'tail.weight', 'tail.bias'}
    assert weights['head.weight'].shape == (6, 3, 3, 3)


@LOSSES.register('test_scaled_l1')
class ScaledL1(nn.Module):
    """A loss with a parameter defined outside losses/: `G_lossfn_type: "test_scaled_l1"`, `G_l1_scale`."""

    OPTIONS = {'l1_scale': Key(1.0, (int, float), positive)}

    def __init__(self, l1_scale: float):
        super().__init__()
        self.scale = l1_scale

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.scale * (x - y).abs().mean()


def _train(**given):
    opt = validate({'task': 't', 'netG': {'net_type': 'dncnn'}, 'train': given}, option_rules())
    return opt['train'], opt['_notes']


def test_a_registered_loss_reads_its_declared_key_with_the_type_keys_prefix():
    train, notes = _train(G_lossfn_type='test_scaled_l1', G_l1_scale=3)
    assert train['G_l1_scale'] == 3 and notes == []
    assert build_loss(train).base.scale == 3
    assert _train(G_lossfn_type='test_scaled_l1')[0]['G_l1_scale'] == 1.0  # its default, filled in
    with pytest.raises(OptionsError, match=r'^<options>: train\.G_l1_scale: 0 must be > 0$'):
        _train(G_lossfn_type='test_scaled_l1', G_l1_scale=0)


def test_a_key_of_a_member_not_chosen_is_dropped_with_one_note():
    train, notes = _train(G_lossfn_type='l1', G_l1_scale=3)
    assert 'G_l1_scale' not in train
    assert notes == ['train.G_l1_scale: not read by G_lossfn_type l1 nor G_extra_losses none; ignored']
    train, notes = _train(G_scheduler_type='MultiStepLR', G_scheduler_periods=[4, 4], G_scheduler_eta_min=0.1)
    assert 'G_scheduler_periods' not in train and train['G_scheduler_milestones'] == []
    assert notes == ['train.G_scheduler_periods, train.G_scheduler_eta_min: not read by G_scheduler_type '
                     'MultiStepLR; ignored']
    train, notes = _train(G_scheduler_type=None, G_scheduler_gamma=0.1)
    assert notes == ['train.G_scheduler_gamma: not read by G_scheduler_type null; ignored']


def test_a_typo_is_still_an_unknown_key_with_a_suggestion_among_every_members_keys():
    with pytest.raises(OptionsError, match=r'^<options>: train\.G_scheduler_period: unknown key '
                                           r'\(did you mean "G_scheduler_periods"\?\)$'):
        _train(G_scheduler_period=4)


@pytest.mark.parametrize('value, message', [
    ('x', 'train.G_scheduler_milestones: expected a list, got "x"'),
    ([2, -1], 'train.G_scheduler_milestones: [2, -1] must be a list of non-negative integers'),
])
def test_a_members_key_is_typed_and_checked_with_the_options(tmp_path, value, message):
    opt = tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'), G_scheduler_milestones=value)
    with pytest.raises(OptionsError) as e:
        read_options(write_options(str(tmp_path / 'o.json'), opt))
    assert str(e.value) == f'{tmp_path / "o.json"}: {message}'


def test_a_loss_defined_in_a_test_module_trains_with_its_prefixed_key(tmp_path, demo_images):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=2, checkpoint_save=2, checkpoint_test=2,
                       G_scheduler_milestones=[], G_lossfn_type='test_scaled_l1', G_l1_scale=2.5)
    opt['logging']['use_tensorboard'] = False
    path = write_options(str(tmp_path / 'o.json'), opt)
    r = run_main('main_train', ['--opt', path], env=clean_env(OMP_NUM_THREADS='1'))  # registered by this module
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / 'exp' / 'tiny' / 'models' / '2_G.pth').is_file()
    saved = (tmp_path / 'exp' / 'tiny' / 'options').glob('*.json')
    assert any('"G_l1_scale": 2.5' in p.read_text() for p in saved)


@DATASETS.register('test_flat_noise')
class FlatNoise(Dataset):
    """A dataset defined outside data/ (README's example): flat grey patches with Gaussian noise, every
    item made from its key alone; its keys are typed where it is defined."""

    OPTIONS = {'patch': Key(24, (int,), positive), 'length': Key(16, (int,), positive),
               'noise': Key(25, (int, float), positive)}

    def __init__(self, opt: dict):
        self.opt = opt

    def __len__(self) -> int:
        return self.opt['length']

    def __getitem__(self, key) -> dict:
        index, seed = parse_key(key)  # a training key carries the sample's seed; an evaluation index none
        g = torch.Generator().manual_seed(index if seed is None else seed)
        size = self.opt['patch']
        H = torch.rand(3, 1, 1, generator=g).expand(3, size, size).clone()
        L = H + self.opt['noise'] / 255 * torch.randn(3, size, size, generator=g)
        return {'L': L, 'H': H, 'L_path': f'flat_{index}.png'}


def test_a_dataset_defined_in_a_test_module_trains_and_validates_with_its_typed_keys(tmp_path, demo_images):
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=2, checkpoint_save=2, checkpoint_test=2,
                       G_scheduler_milestones=[])
    opt['datasets'] = {'train': {'dataset_type': 'test_flat_noise', 'patch': 16, 'dataloader_batch_size': 2},
                       'test': {'dataset_type': 'test_flat_noise', 'length': 3, 'noise': 10}}
    opt['logging']['use_tensorboard'] = False
    path = write_options(str(tmp_path / 'o.json'), opt)
    r = run_main('main_train', ['--opt', path], env=clean_env(OMP_NUM_THREADS='1'))  # registered by this module
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'validation on 3 items' in r.stdout
    opt['datasets']['train']['patch'] = 0
    r = run_main('main_train', ['--opt', write_options(str(tmp_path / 'bad.json'), opt)],
                 env=clean_env(OMP_NUM_THREADS='1'))
    assert r.returncode == 2 and r.stderr.strip().endswith('datasets.train.patch: 0 must be > 0'), r.stderr


def _zoo(tmp_path, monkeypatch) -> Registry:
    """A package `zoo` with a registry whose members live in `zoo/network_*.py`, and a subfolder `zoo/layers/`
    that is no member (as models/networks/layers/ is not)."""
    pkg = tmp_path / 'zoo'
    pkg.mkdir()
    (pkg / '__init__.py').write_text('')
    (pkg / 'registry.py').write_text("from utils.registry import Registry\nNETS = Registry('network', 'zoo', 'network_*')\n")
    (pkg / 'network_small.py').write_text(textwrap.dedent("""
        from zoo.registry import NETS
        @NETS.register('small')
        class Small:
            pass
    """))
    (pkg / 'network_family.py').write_text(textwrap.dedent("""
        from zoo.registry import NETS
        @NETS.register('family_a', 'family_b')
        class Family:
            pass
    """))
    (pkg / 'helpers.py').write_text('raise RuntimeError("not a member module: never imported")\n')
    (pkg / 'network_layers').mkdir()
    (pkg / 'network_layers' / '__init__.py').write_text('raise RuntimeError("a subfolder: never imported")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == 'zoo' or m.startswith('zoo.')]:
        monkeypatch.delitem(sys.modules, name)
    import zoo.registry
    return zoo.registry.NETS


def test_a_lookup_imports_only_the_module_named_after_the_member(tmp_path, monkeypatch):
    nets = _zoo(tmp_path, monkeypatch)
    assert nets.get('small', 'netG.net_type').__name__ == 'Small'
    assert 'zoo.network_small' in sys.modules and 'zoo.network_family' not in sys.modules


def test_a_member_registered_under_another_file_name_is_found_by_scanning_the_member_modules(tmp_path, monkeypatch):
    nets = _zoo(tmp_path, monkeypatch)
    assert nets.get('family_b', 'netG.net_type').__name__ == 'Family'
    assert nets.names() == ['family_a', 'family_b', 'small']
    assert 'zoo.helpers' not in sys.modules and 'zoo.network_layers' not in sys.modules


def test_an_unknown_name_is_one_line_naming_the_key_with_a_suggestion_and_where_the_known_names_are(tmp_path,
                                                                                                 monkeypatch):
    nets = _zoo(tmp_path, monkeypatch)
    with pytest.raises(UserError) as e:
        nets.get('smal', 'netG.net_type')
    assert str(e.value) == ('netG.net_type: unknown network "smal" (did you mean "small"?); '
                            '3 known: --describe network lists them (or docs/options.md)')
    with pytest.raises(UserError, match='unknown network "../x"'):
        nets.get('../x', 'netG.net_type')
    with pytest.raises(UserError, match='unknown network "layers"'):
        nets.get('layers', 'netG.net_type')
    assert 'zoo.network_layers' not in sys.modules


def test_registering_another_object_under_a_taken_name_is_a_programming_error():
    reg = Registry('loss')
    reg.register('l1')(nn.L1Loss)
    reg.register('l1')(nn.L1Loss)  # the same object again (a module imported twice) is fine
    with pytest.raises(ValueError, match="loss 'l1' registered twice"):
        reg.register('l1')(nn.MSELoss)


@pytest.mark.parametrize('key, value, message', [
    ('model', 'gann', 'model: unknown model "gann" (did you mean "gan"?)'),
    ('train.G_lossfn_type', 'charbonier', 'train.G_lossfn_type: unknown loss "charbonier" (did you mean "charbonnier"?)'),
    ('train.G_optimizer_type', 'adamq', 'train.G_optimizer_type: unknown optimizer "adamq" (did you mean "adam"?)'),
    ('train.G_scheduler_type', 'MultiStepLr', 'train.G_scheduler_type: unknown scheduler "MultiStepLr" (did you mean'),
    ('netG.init_type', 'orthogonl', 'netG.init_type: unknown init "orthogonl" (did you mean "orthogonal"?)'),
    ('netG.init_bn_type', 'constnt', 'netG.init_bn_type: unknown init "constnt" (did you mean "constant"?)'),
])
def test_every_registered_name_in_the_options_is_checked_with_the_options(tmp_path, key, value, message):
    opt = tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'))
    *sections, last = key.split('.')
    node = opt
    for s in sections:
        node = node[s]
    node[last] = value
    with pytest.raises(OptionsError) as e:
        read_options(write_options(str(tmp_path / 'o.json'), opt))
    assert f'o.json: {message}' in str(e.value) and '\n' not in str(e.value)


def test_an_unknown_demo_generator_ends_the_run_before_anything_is_written(tmp_path):
    opt = tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'demo_data'))
    opt['datasets']['train']['generate_demo'] = 'image'
    r = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o.json'), opt)],
                 env=clean_env(OMP_NUM_THREADS='1'))
    assert r.returncode == 2 and r.stderr.count('\n') == 1, r.stderr
    assert 'datasets.train.generate_demo: unknown demo "image" (did you mean "images"?)' in r.stderr
    assert not (tmp_path / 'exp').exists() and not (tmp_path / 'demo_data').exists()


def test_every_registry_names_a_listing_that_describe_prints_whole_and_its_messages_stay_short():
    """An unknown name's line points at `--describe <kind>` instead of listing 60 names: that word must list
    exactly the registry's names, and the line must stay short whatever the registry holds."""
    import importlib

    import option_catalog
    cat = option_catalog.catalog()  # imports every member module
    registries = []
    for path in production_files():  # every module-level registry of the project, none left out by hand
        with open(path) as f:
            text = f.read()
        module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, '.')
        for name in re.findall(r'^([A-Z_]+) = Registry\(', text, re.M):
            registries.append(getattr(importlib.import_module(module), name))
    assert len(registries) >= 11 and all(isinstance(r, Registry) for r in registries)
    for registry in registries:
        assert registry.listing in option_catalog.KIND_WORDS
        listed = option_catalog.describe(registry.listing, cat)
        for name in registry.names():  # a line of its own, or an alias on its member's line
            assert re.search(rf'^  ({re.escape(name)} |\S+ \(also: ([^)]*, )?{re.escape(name)}[,)])', listed, re.M), \
                (registry.listing, name)
        with pytest.raises(UserError) as e:
            registry.get('zzzz', 'some.key')
        assert len(str(e.value)) < 200 and '\n' not in str(e.value), str(e.value)
