"""Option files cannot write outside path.root, carry non-finite numbers, crash the parser or leak secrets.

Every user mistake here is one OptionsError line `<file or --set>: <key>: <message>`, raised before
anything is written.
"""
import os
import re

import pytest

from tests.conftest import run_main, tiny_options, write_options
from utils.errors import OptionsError
from option_rules import option_rules, read_options
from utils.options import MAX_DEPTH, REDACTED, SCHEMA, Key, validate


def _opts(tmp_path, **changes):
    """tiny options with outputs under tmp_path/exp; `a__b=v` sets opt['a']['b'] = v."""
    opt = tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'))
    for dotted, value in changes.items():
        node = opt
        *parents, last = dotted.split('__')
        for p in parents:
            node = node[p]
        node[last] = value
    return write_options(str(tmp_path / 'opt.json'), opt)


def _raw(tmp_path, text, name='opt.json'):
    """An option file with exactly this text (bytes allowed), for what json.dump cannot write."""
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(p)


def _one_line(excinfo):
    msg = str(excinfo.value)
    assert '\n' not in msg, msg
    return msg


# 1. task and path.root: the run folder is always strictly inside path.root ---------------------------

UNSAFE_TASKS = ['../x', '..', '.', '', '/', 'a/b', 'a\\b', 'a\0b', 'two words', 'x' * 256, '~', '$HOME']


@pytest.mark.parametrize('task', UNSAFE_TASKS + ['ABSOLUTE'], ids=repr)
def test_task_that_is_not_one_safe_folder_name_is_refused_before_anything_is_written(tmp_path, task):
    if task == 'ABSOLUTE':
        task = str(tmp_path / 'elsewhere')
    with pytest.raises(OptionsError, match=r'opt\.json: task: .*use one folder name of letters, digits and') as e:
        read_options(_opts(tmp_path, task=task))
    _one_line(e)
    assert sorted(os.listdir(tmp_path)) == ['opt.json']


@pytest.mark.parametrize('task', ['../x', '', '.', '/', '..'], ids=repr)
def test_task_override_is_checked_like_the_file(tmp_path, task):
    with pytest.raises(OptionsError, match=rf'^--set task={re.escape(task)}: task: '):  # the argument that gave it
        read_options(_opts(tmp_path), [f'task={task}'])


def test_safe_task_names_are_accepted_and_stay_inside_the_root(tmp_path):
    for task in ('dncnn_color-s25', 'a.b+c', '...', '0', 'x' * 255):
        opt = read_options(_opts(tmp_path, task=task))
        assert opt['path']['task'] == os.path.join(str(tmp_path / 'exp'), task)
    assert not (tmp_path / 'exp').exists()   # loading options creates nothing


def test_empty_path_root_is_refused_in_the_file_and_as_override(tmp_path):
    with pytest.raises(OptionsError, match=r'opt\.json: path\.root: "" must not be empty'):
        read_options(_opts(tmp_path, path__root=''))
    with pytest.raises(OptionsError, match=r'^--set path\.root=: path\.root: "" must not be empty'):
        read_options(_opts(tmp_path), ['path.root='])


def test_path_root_that_is_a_file_is_refused_naming_it(tmp_path):
    (tmp_path / 'afile').write_text('keep')
    with pytest.raises(OptionsError, match=r'opt\.json: path\.root: .*afile is a file, not a folder') as e:
        read_options(_opts(tmp_path, path__root=str(tmp_path / 'afile')))
    _one_line(e)
    with pytest.raises(OptionsError, match=r'path\.root: .*afile/sub cannot be created: .*afile is a file'):
        read_options(_opts(tmp_path), [f'path.root={tmp_path / "afile" / "sub"}'])
    assert (tmp_path / 'afile').read_text() == 'keep'


def test_run_folder_that_is_a_symlink_leading_outside_the_root_is_refused(tmp_path):
    (tmp_path / 'exp').mkdir()
    (tmp_path / 'outside').mkdir()
    os.symlink(str(tmp_path / 'outside'), str(tmp_path / 'exp' / 'tiny'))
    with pytest.raises(OptionsError, match=r'opt\.json: task: the run folder .*tiny leads to .*outside '
                                           r'\(a symbolic link\?\), which is not inside path\.root'):
        read_options(_opts(tmp_path))
    os.symlink(str(tmp_path / 'exp'), str(tmp_path / 'exp' / 'self'))   # the root itself
    with pytest.raises(OptionsError, match=r'task: the run folder .*self leads to'):
        read_options(_opts(tmp_path, task='self'))


def test_symlinked_root_and_a_run_folder_inside_it_are_fine(tmp_path):
    (tmp_path / 'real').mkdir()
    os.symlink(str(tmp_path / 'real'), str(tmp_path / 'exp'))
    opt = read_options(_opts(tmp_path))
    assert opt['path']['task'] == os.path.join(str(tmp_path / 'exp'), 'tiny')


def test_run_folder_that_exists_as_a_file_is_refused(tmp_path):
    (tmp_path / 'exp').mkdir()
    (tmp_path / 'exp' / 'tiny').write_text('not a folder')
    with pytest.raises(OptionsError, match=r'opt\.json: task: the run folder .*tiny exists and is not a folder'):
        read_options(_opts(tmp_path))


def test_cli_fresh_with_an_empty_task_exits_2_and_leaves_the_root_where_it_is(tmp_path):
    root = tmp_path / 'exp'
    (root / 'other_run').mkdir(parents=True)
    (root / 'other_run' / 'keep.txt').write_text('precious')
    res = run_main('main_train', ['--opt', _opts(tmp_path), '--fresh', '--set', 'task='])
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: ') and ': task: "" is empty' in lines[0], res.stderr
    assert sorted(os.listdir(tmp_path)) == ['exp', 'opt.json']          # nothing moved aside
    assert os.listdir(root) == ['other_run'] and (root / 'other_run' / 'keep.txt').read_text() == 'precious'


def test_control_characters_in_keys_and_paths_are_escaped_so_the_error_stays_one_line(tmp_path):
    with pytest.raises(OptionsError, match=r'opt\.json: train\.bad\\nkey: unknown key') as e:
        read_options(_opts(tmp_path, **{'train__bad\nkey': 1}))
    _one_line(e)
    (tmp_path / 'a\nfile').write_text('')
    with pytest.raises(OptionsError, match=r'path\.root: .*a\\nfile is a file, not a folder') as e:
        read_options(_opts(tmp_path, path__root=str(tmp_path / 'a\nfile')))
    _one_line(e)


# 2. non-finite numbers ----------------------------------------------------------------------------------

@pytest.mark.parametrize('constant', ['NaN', 'Infinity', '-Infinity'])
@pytest.mark.parametrize('key', ['train.G_optimizer_lr', 'train.G_lossfn_weight', 'dist_timeout',
                                 'netG.init_gain', 'datasets.train.sigma'])
def test_nan_and_infinity_in_the_file_are_refused_naming_the_key(tmp_path, constant, key):
    path = _opts(tmp_path, **{key.replace('.', '__'): float(constant.lower().replace('infinity', 'inf'))})
    assert constant in open(path).read()
    message = rf'opt\.json: {key}: {constant} is not allowed: numbers must be finite'
    with pytest.raises(OptionsError, match=message) as e:
        read_options(path)
    _one_line(e)


def test_non_finite_number_inside_a_list_names_its_index(tmp_path):
    with pytest.raises(OptionsError, match=r'opt\.json: train\.G_optimizer_betas\[1\]: NaN is not allowed'):
        read_options(_opts(tmp_path, train__G_optimizer_betas=[0.9, float('nan')]))


@pytest.mark.parametrize('number', ['1e400', '-1e400', '1' + '0' * 400])
def test_numbers_that_overflow_to_infinity_are_refused_naming_the_key(tmp_path, number):
    text = open(_opts(tmp_path, train__G_optimizer_lr=12345.5)).read().replace('12345.5', number)
    with pytest.raises(OptionsError, match=r'opt\.json: train\.G_optimizer_lr: .* is out of range: numbers must be '
                                           r'finite \(this one overflows to infinity\)'):
        read_options(_raw(tmp_path, text))


def test_integer_with_thousands_of_digits_is_a_one_line_error(tmp_path):
    text = open(_opts(tmp_path, train__total_iter=12345)).read().replace('12345', '9' * 5000)
    with pytest.raises(OptionsError, match=r'opt\.json: train\.total_iter: 9999999999999999\.\.\. \(5000 characters\) '
                                           r'is out of range') as e:
        read_options(_raw(tmp_path, text))
    assert len(_one_line(e)) < 300


@pytest.mark.parametrize('override, where', [
    ('train.G_optimizer_lr=Infinity', 'train.G_optimizer_lr'), ('train.G_optimizer_lr=NaN', 'train.G_optimizer_lr'),
    ('train.G_optimizer_lr=1e400', 'train.G_optimizer_lr'), ('dist_timeout=-Infinity', 'dist_timeout'),
    ('train.G_optimizer_betas=[0.9, 1e999]', r'train.G_optimizer_betas\[1\]'),
    ('train={"G_lossfn_weight": NaN}', 'train.G_lossfn_weight'),
])
def test_non_finite_override_values_are_refused_naming_the_key(tmp_path, override, where):
    with pytest.raises(OptionsError, match=rf'--set {where}: .* numbers must be finite'):
        read_options(_opts(tmp_path), [override])


def test_validate_refuses_non_finite_floats_passed_in_directly(tmp_path):
    raw = tiny_options(str(tmp_path), str(tmp_path), G_optimizer_lr=float('inf'))
    with pytest.raises(OptionsError, match=r'<options>: train\.G_optimizer_lr: Infinity is not allowed'):
        validate(raw, option_rules())


# 3. one-line errors instead of tracebacks ---------------------------------------------------------------

def test_non_utf8_option_file_is_a_one_line_error_with_its_position(tmp_path):
    path = _raw(tmp_path, b'{\n  "task": "caf\xe9"\n}')
    with pytest.raises(OptionsError, match=r'opt\.json:2:15: not a UTF-8 text file \(byte 0xe9\)') as e:
        read_options(path)
    _one_line(e)


@pytest.mark.parametrize('opening, closing', [('[', ']'), ('{"a": ', '}')], ids=['lists', 'objects'])
def test_json_nested_100000_deep_is_a_one_line_error(tmp_path, opening, closing):
    path = _raw(tmp_path, '{"task": ' + opening * 100000 + '1' + closing * 100000 + '}')
    with pytest.raises(OptionsError, match=r'opt\.json: invalid JSON: nested too deeply') as e:
        read_options(path)
    _one_line(e)


def test_json_nested_deeper_than_the_limit_but_parsable_is_refused_naming_the_key(tmp_path):
    value = 1
    for _ in range(MAX_DEPTH):
        value = [value]
    message = rf'opt\.json: train\.fix_keys(\[0\])*.*: nested more than {MAX_DEPTH} levels'
    with pytest.raises(OptionsError, match=message):
        read_options(_opts(tmp_path, train__fix_keys=value))


def test_deeply_nested_override_is_a_one_line_error(tmp_path):
    with pytest.raises(OptionsError, match=r'--set train\.fix_keys: value nested too deeply'):
        read_options(_opts(tmp_path), ['train.fix_keys=' + '[' * 100000])
    with pytest.raises(OptionsError, match=rf'--set train\.fix_keys(\[0\])*.*: nested more than {MAX_DEPTH} levels'):
        read_options(_opts(tmp_path), ['train.fix_keys=' + '[' * 80 + ']' * 80])


@pytest.mark.parametrize('seed', [2**70, 2**32, -1])
def test_manual_seed_outside_0_to_2_pow_32_is_refused(tmp_path, seed):
    message = rf'train\.manual_seed: {seed} must be in \[0, 2\*\*32\)'
    with pytest.raises(OptionsError, match=rf'opt\.json: {message}'):
        read_options(_opts(tmp_path, train__manual_seed=seed))
    with pytest.raises(OptionsError, match=rf'^--set train\.manual_seed={seed}: {message}'):
        read_options(_opts(tmp_path), [f'train.manual_seed={seed}'])


def test_manual_seed_bounds_and_null_are_accepted(tmp_path):
    for seed in (0, 2**32 - 1, None):
        assert read_options(_opts(tmp_path, train__manual_seed=seed))['train']['manual_seed'] == seed


@pytest.mark.parametrize('timeout', [1e300, 604801, 0, -5])
def test_dist_timeout_must_be_positive_and_at_most_7_days(tmp_path, timeout):
    message = r'dist_timeout: .* must be > 0 and at most 604800 seconds \(7 days\)'
    with pytest.raises(OptionsError, match=rf'opt\.json: {message}'):
        read_options(_opts(tmp_path, dist_timeout=timeout))
    with pytest.raises(OptionsError, match=rf'^--set dist_timeout={re.escape(str(timeout))}: {message}'):
        read_options(_opts(tmp_path), [f'dist_timeout={timeout}'])


def test_dist_timeout_of_exactly_7_days_is_accepted(tmp_path):
    assert read_options(_opts(tmp_path, dist_timeout=604800))['dist_timeout'] == 604800


@pytest.mark.parametrize('case', ['non-utf8', 'nested', 'seed'])
def test_cli_reports_parser_and_range_errors_in_one_line_and_exits_2(tmp_path, case):
    args = []
    if case == 'non-utf8':
        path = _raw(tmp_path, b'{"task": "\xff"}')
    elif case == 'nested':
        path = _raw(tmp_path, '[' * 100000)
    else:
        path, args = _opts(tmp_path), ['--set', f'train.manual_seed={2**70}']
    res = run_main('main_train', ['--opt', path, *args])
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: '), res.stderr
    assert not (tmp_path / 'exp').exists()


# 4. secrets are redacted in error messages like in saved options ------------------------------------------

@pytest.fixture
def secret_key_in_schema(monkeypatch):
    """A schema key that looks like a secret (none ships today; a future one must not leak)."""
    monkeypatch.setitem(SCHEMA['logging'], 'wandb_api_key', Key(None, (str, type(None)), lambda v: 'is never good'))
    return 'logging.wandb_api_key'


def test_wrongly_typed_secret_value_is_redacted_in_the_error(tmp_path, secret_key_in_schema):
    message = r'logging\.wandb_api_key: expected a string or null, got \*\*\*redacted'
    with pytest.raises(OptionsError, match=message) as e:
        read_options(_opts(tmp_path, logging__wandb_api_key=918273645))
    assert '918273645' not in str(e.value)
    with pytest.raises(OptionsError, match=r'logging\.wandb_api_key: \*\*\*redacted\*\*\* is never good') as e:
        read_options(_opts(tmp_path), ['logging.wandb_api_key=s3cr3t-value'])
    assert 's3cr3t' not in str(e.value)


def test_non_finite_secret_value_is_redacted_in_the_error(tmp_path):
    with pytest.raises(OptionsError, match=r'--set logging\.api_token: \*\*\*redacted\*\*\* is out of range') as e:
        read_options(_opts(tmp_path), ['logging.api_token=1e999'])
    assert '1e999' not in str(e.value)


@pytest.mark.parametrize('change', [
    {'netG__net_type': {'api_key': 's3cr3t-value'}},
    {'datasets__train__dataset_type': ['x', {'password': 's3cr3t-value'}]},
    {'train': [{'token': 's3cr3t-value'}]},
    {'train__G_optimizer_betas': [0.9, {'secret': 's3cr3t-value'}]},
    {'train__G_optimizer_lr': {'credential': 's3cr3t-value'}},
], ids=['netG.net_type', 'dataset_type', 'train', 'betas', 'lr'])
def test_secrets_nested_in_a_wrongly_typed_value_are_redacted(tmp_path, change):
    with pytest.raises(OptionsError) as e:
        read_options(_opts(tmp_path, **change))
    assert 's3cr3t' not in str(e.value) and REDACTED in str(e.value), str(e.value)


def test_unknown_secret_looking_key_is_reported_without_its_value(tmp_path):
    with pytest.raises(OptionsError, match=r'opt\.json: logging\.wandb_api_key: unknown key') as e:
        read_options(_opts(tmp_path, logging__wandb_api_key='s3cr3t-value'))
    assert 's3cr3t' not in str(e.value)


@pytest.mark.parametrize('override', ['wandb_api_key:s3cr3t-value', 'logging..token=s3cr3t-value',
                                      'train.total_iter.token=s3cr3t-value'])
def test_malformed_override_errors_do_not_echo_the_value(tmp_path, override):
    with pytest.raises(OptionsError, match=r'^--set ') as e:
        read_options(_opts(tmp_path), [override])
    assert 's3cr3t' not in str(e.value), str(e.value)


# 5. loading options only reads --------------------------------------------------------------------------

def test_loading_options_creates_no_file_or_folder(tmp_path):
    root = tmp_path / 'deep' / 'exp'
    opt = read_options(_opts(tmp_path, path__root=str(root)))
    assert opt['path']['models'] == os.path.join(str(root), 'tiny', 'models')
    assert sorted(os.listdir(tmp_path)) == ['opt.json']


# 7. values that passed validation and failed (or ran) later -------------------------------------------------

@pytest.mark.parametrize('key, value, message', [
    ('train__total_iter', 10 ** 31, r'train\.total_iter: a 103-bit integer must be in \[1, 10000000000\]'),
    ('gpu_ids', [-1], r'gpu_ids: \[-1\] must be a list of GPU indices'),
    ('gpu_ids', ['a'], r'gpu_ids: \["a"\] must be a list of GPU indices'),
    ('train__G_optimizer_lr', 1e308, r'train\.G_optimizer_lr: 1e\+308 must be in \(0, 1\]'),
])
def test_values_that_cannot_train_are_refused_by_the_options(tmp_path, key, value, message):
    with pytest.raises(OptionsError, match=message):
        read_options(_opts(tmp_path, **{key: value}))


@pytest.mark.parametrize('net, changes, message', [
    ('netG', {'nc': -16}, r'netG\.nc: -16 must not be negative'),
    ('netG', {'out_nc': -3}, r'netG\.out_nc: -3 must not be negative'),
    ('netG', {'nb': -1}, r'netG\.nb: -1 must not be negative'),
    ('netG', {'nc': 1000000}, r'netG \(dncnn\): [\d,]+ parameters, [\d,.]+ GB of float32 weights alone, more than '
                              r'this machine has [\d.]+ GB available'),
    ('netG', {'in_nc': 1000000000}, r'netG \(dncnn\): [\d,]+ parameters'),
])
def test_network_sizes_that_cannot_be_built_are_one_line_naming_the_key_or_the_size(net, changes, message):
    from models.network_loading import build_checked_network
    from utils.errors import UserError
    section = {'net_type': 'dncnn', 'in_nc': 3, 'out_nc': 3, 'nc': 8, 'nb': 3, 'act_mode': 'R', **changes}
    with pytest.raises(UserError, match=message):
        build_checked_network(section, net)


def test_a_negative_discriminator_width_stops_main_train_with_one_line_and_nothing_written(tmp_path, demo_images):
    import json

    from tests.conftest import ROOT
    with open(os.path.join(ROOT, 'options', 'gan', 'train_msrresnet_gan_tiny.json')) as f:
        text = f.read()
    opt = json.loads(text[text.index('{'):])
    opt['path']['root'] = str(tmp_path / 'exp')
    for phase in ('train', 'test'):
        opt['datasets'][phase]['dataroot_H'] = f'{demo_images}/{phase}'
    opt['train']['F_pretrained_path'] = 'random'
    opt['netD']['base_nc'] = -8
    res = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o.json'), opt)])
    assert res.returncode == 2 and res.stderr == 'error: netD.base_nc: -8 must not be negative (widths, counts and ' \
        'channel numbers are sizes)\n', res.stderr
    assert not (tmp_path / 'exp').exists()
