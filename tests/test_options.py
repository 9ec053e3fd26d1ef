"""Option files: commented JSON, validation with did-you-mean, overrides, redaction."""
import json
import glob
import os

import pytest
import torch

from tests.conftest import ROOT, tiny_options, write_options
from utils.errors import OptionsError
from option_rules import option_rules, read_options
from utils.options import dumps, strip_json_comments, validate

DEMO = os.path.join(ROOT, 'options', 'train_dncnn_demo.json')


def _write(tmp_path, text: str) -> str:
    p = tmp_path / 'opt.json'
    p.write_text(text)
    return str(p)


def _opts(tmp_path, **changes):
    opt = tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'))
    for dotted, value in changes.items():
        node = opt
        *parents, last = dotted.split('__')
        for p in parents:
            node = node[p]
        node[last] = value
    return write_options(str(tmp_path / 'opt.json'), opt)


def test_comments_are_removed_but_slashes_inside_strings_are_kept():
    text = '{"url": "http://x.org/a//b", // trailing comment\n "s": "/* not a comment */" /* block */}'
    assert json.loads(strip_json_comments(text)) == {'url': 'http://x.org/a//b', 's': '/* not a comment */'}


def test_escaped_quote_does_not_end_a_string():
    text = r'{"a": "say \"//hi\"", "b": 1 // c' + '\n}'
    assert json.loads(strip_json_comments(text)) == {'a': 'say "//hi"', 'b': 1}


def test_comment_stripping_keeps_line_and_column_of_later_errors(tmp_path):
    path = _write(tmp_path, '{\n  /* a\n  comment */ "a": 1,\n  "b": [1, 2,, 3]\n}')
    with pytest.raises(OptionsError, match=r'opt\.json:4:14: invalid JSON'):
        read_options(path)


def test_demo_option_file_loads_with_defaults_filled():
    opt = read_options(DEMO)
    assert opt['netG']['net_type'] == 'dncnn'
    assert opt['train']['G_optimizer_betas'] == [0.9, 0.999]           # default filled in
    assert opt['datasets']['train']['dataloader_batch_size'] == 16
    assert opt['path']['models'].endswith(os.path.join('dncnn_demo_color_sigma25', 'models'))


def test_unknown_key_is_an_error_with_did_you_mean(tmp_path):
    with pytest.raises(OptionsError, match=r'train\.G_optimizer_lrr: unknown key \(did you mean "G_optimizer_lr"\?\)'):
        read_options(_opts(tmp_path, train__G_optimizer_lrr=1e-3))


def test_unknown_top_level_section_suggests_the_right_one(tmp_path):
    opt = tiny_options(str(tmp_path), str(tmp_path))
    opt['netg'] = opt.pop('netG')
    with pytest.raises(OptionsError, match=r'netg: unknown key \(did you mean "netG"\?\)'):
        read_options(write_options(str(tmp_path / 'o.json'), opt))


def test_unknown_network_kwarg_is_checked_against_the_constructor(tmp_path):
    with pytest.raises(OptionsError, match=r'netG\.nbb: unknown key \(did you mean "nb"\?\)'):
        read_options(_opts(tmp_path, netG__nbb=4))


def test_unknown_dataset_key_names_the_phase(tmp_path):
    with pytest.raises(OptionsError, match=r'datasets\.train\.dataroot_h: unknown key \(did you mean "dataroot_H"\?\)'):
        read_options(_opts(tmp_path, datasets__train__dataroot_h='x'))


@pytest.mark.parametrize('key, value, why', [
    ('dataloader_batch_size', 4, 'evaluation takes one whole image or clip at a time'),
    ('dataloader_shuffle', True, 'evaluation goes through every item once, in order'),
])
def test_training_only_loader_keys_in_a_test_section_are_refused_not_ignored(tmp_path, key, value, why):
    with pytest.raises(OptionsError, match=rf'datasets\.test\.{key}: {why}'):
        read_options(_opts(tmp_path, **{f'datasets__test__{key}': value}))
    assert key in read_options(_opts(tmp_path, **{f'datasets__train__{key}': value}))['datasets']['train']


def test_test_sections_take_their_own_worker_keys_and_the_validation_loader_uses_them(tmp_path):
    from data.loader import build_val_loader, val_loader_options
    opt = read_options(_opts(tmp_path, datasets__test__dataloader_num_workers=2,
                             datasets__test__dataloader_prefetch_factor=5,
                             datasets__test__dataloader_persistent_workers=False))
    loader = build_val_loader(list(range(3)), 1, 0, **val_loader_options(opt['datasets']['test']))
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (2, 5, False)
    assert loader.batch_size == 1 and list(loader) == [torch.tensor([0]), torch.tensor([1]), torch.tensor([2])]


def test_unknown_network_and_dataset_types_suggest_names(tmp_path):
    with pytest.raises(OptionsError, match=r'netG\.net_type: unknown network "dncn" \(did you mean "dncnn"\?\)'):
        read_options(_opts(tmp_path, netG__net_type='dncn'))
    with pytest.raises(OptionsError, match=r'datasets\.train\.dataset_type: unknown dataset type "plian"'):
        read_options(_opts(tmp_path, datasets__train__dataset_type='plian'))


def test_wrong_type_and_impossible_value_name_file_and_key(tmp_path):
    with pytest.raises(OptionsError, match=r'opt\.json: train\.total_iter: expected an integer, got "100"'):
        read_options(_opts(tmp_path, train__total_iter='100'))
    with pytest.raises(OptionsError, match=r'opt\.json: train\.E_decay: 1\.5 must be in \[0, 1\)'):
        read_options(_opts(tmp_path, train__E_decay=1.5))
    with pytest.raises(OptionsError, match=r'train\.checkpoint_save: 0 must be > 0'):
        read_options(_opts(tmp_path, train__checkpoint_save=0))
    with pytest.raises(OptionsError, match=r'datasets\.train\.dataloader_batch_size: expected an integer'):
        read_options(_opts(tmp_path, datasets__train__dataloader_batch_size=True))


def test_missing_required_key_is_reported(tmp_path):
    opt = tiny_options(str(tmp_path), str(tmp_path))
    del opt['task']
    with pytest.raises(OptionsError, match=r'task: required key is missing'):
        read_options(write_options(str(tmp_path / 'o.json'), opt))


def test_duplicate_keys_are_rejected(tmp_path):
    with pytest.raises(OptionsError, match=r'duplicate key "task"'):
        read_options(_write(tmp_path, '{"task": "a", "task": "b"}'))


def test_overrides_parse_json_values_and_fall_back_to_strings(tmp_path):
    path = _opts(tmp_path)
    opt = read_options(path, ['train.total_iter=100', 'task=other_run', 'train.G_scheduler_milestones=[1, 2]',
                              'datasets.train.sigma=15', 'logging.wandb_name=null'])
    assert opt['train']['total_iter'] == 100
    assert opt['task'] == 'other_run'
    assert opt['train']['G_scheduler_milestones'] == [1, 2]
    assert opt['datasets']['train']['sigma'] == 15
    assert opt['logging']['wandb_name'] is None


def test_override_of_an_unknown_key_is_an_error(tmp_path):
    with pytest.raises(OptionsError, match=r'^--set train\.totl_iter=5: train\.totl_iter: unknown key \(did you mean "total_iter"\?\)'):
        read_options(_opts(tmp_path), ['train.totl_iter=5'])


def test_override_without_equals_is_an_error(tmp_path):
    with pytest.raises(OptionsError, match=r'--set train.total_iter: expected KEY.PATH=VALUE'):
        read_options(_opts(tmp_path), ['train.total_iter'])


def test_top_level_scale_propagates_into_datasets_like_kair(tmp_path):
    opt = tiny_options(str(tmp_path), str(tmp_path))
    opt['scale'] = 2
    opt['datasets']['train'].update(dataset_type='sr', H_size=24)
    del opt['datasets']['train']['sigma']
    loaded = read_options(write_options(str(tmp_path / 'o.json'), opt))
    assert loaded['datasets']['train']['scale'] == 2


def test_saved_options_redact_secrets_and_drop_internal_keys(tmp_path):
    opt = read_options(_opts(tmp_path))
    opt['logging']['wandb_api_key_note'] = 'abc123'   # anything that looks like a secret
    text = dumps(opt)
    assert 'abc123' not in text and '***redacted***' in text
    assert '_where' not in text
    assert json.loads(text)['train']['total_iter'] == 8


def test_cli_reports_option_errors_in_one_line_and_exits_2(tmp_path):
    from tests.conftest import run
    import sys
    res = run([sys.executable, 'main_train.py', '--opt', _opts(tmp_path, train__G_lossfn_wieght=2)])
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and 'did you mean "G_lossfn_weight"' in lines[0], res.stderr
    assert not (tmp_path / 'exp').exists()   # nothing written for a bad option file


def test_null_is_refused_where_the_default_is_not_null(tmp_path):
    with pytest.raises(OptionsError, match=r'datasets\.train\.dataloader_batch_size: expected an integer, got null'):
        read_options(_opts(tmp_path, datasets__train__dataloader_batch_size=None))
    with pytest.raises(OptionsError, match=r'netG\.nc: expected an integer, got null'):
        read_options(_opts(tmp_path, netG__nc=None))


def test_malformed_types_and_sections_are_one_line_errors(tmp_path):
    with pytest.raises(OptionsError, match=r'netG\.net_type: expected a string, got \["dncnn"\]'):
        read_options(_opts(tmp_path, netG__net_type=['dncnn']))
    with pytest.raises(OptionsError, match=r'train\.G_optimizer_betas: \[0\.9, "x"\] must be two numbers in \[0, 1\)'):
        read_options(_opts(tmp_path, train__G_optimizer_betas=[0.9, 'x']))
    for section, value, kind in [('train', [], 'a list: []'), ('netG', 'dncnn', 'a string: "dncnn"'),
                                 ('datasets.train', [1, 2], 'a list: [1, 2]'), ('datasets', 3, 'a number: 3')]:
        opt = tiny_options(str(tmp_path), str(tmp_path))
        *parents, last = section.split('.')
        node = opt
        for name in parents:
            node = node[name]
        node[last] = value
        with pytest.raises(OptionsError) as e:  # what was given, where a section belongs: not "required key"
            read_options(write_options(str(tmp_path / 'o.json'), opt))
        holds = 'phases: train, test' if section == 'datasets' else 'keys'
        assert str(e.value) == (f'{tmp_path}/o.json: {section}: expected a section (an object of {holds}, {{...}}), '
                                f'got {kind}')


def test_a_dataset_scale_that_contradicts_the_top_level_scale_is_refused(tmp_path):
    raw = tiny_options(str(tmp_path), str(tmp_path))
    raw['scale'] = 2
    raw['datasets']['test'].update(dataset_type='sr', scale=4)
    raw['datasets']['test'].pop('sigma_test')
    with pytest.raises(OptionsError, match=r'datasets\.test\.scale: 4 differs from the top-level "scale": 2'):
        validate(raw, option_rules())


def test_nan_skip_limit_must_be_positive(tmp_path):
    raw = tiny_options(str(tmp_path), str(tmp_path), nan_skip_limit=0)
    with pytest.raises(OptionsError, match=r'train\.nan_skip_limit'):
        validate(raw, option_rules())


def test_sr_networks_take_the_top_level_scale_as_kair_gives_it_and_a_contradiction_is_refused(tmp_path):
    sr = {'net_type': 'msrresnet1', 'nc': 8, 'nb': 1}
    assert read_options(_opts(tmp_path, scale=2, netG=sr))['netG']['upscale'] == 2
    assert read_options(_opts(tmp_path, scale=2, netG={**sr, 'upscale': 2}))['netG']['upscale'] == 2
    with pytest.raises(OptionsError, match=r'netG\.upscale: 4 differs from the top-level "scale": 2; '):
        read_options(_opts(tmp_path, scale=2, netG={**sr, 'upscale': 4}))


def test_top_level_sigma_and_sigma_test_fill_the_datasets_as_in_kair_and_a_contradiction_is_refused(tmp_path):
    opt = read_options(_opts(tmp_path, sigma=15, sigma_test=30, datasets__train__sigma=15,
                             datasets__test__sigma_test=30))
    assert opt['datasets']['train']['sigma'] == 15 and opt['datasets']['test']['sigma_test'] == 30
    raw = tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'))
    for section in raw['datasets'].values():
        section.pop('sigma', None)
        section.pop('sigma_test', None)
    raw.update(sigma=15, sigma_test=30)
    opt = read_options(write_options(str(tmp_path / 'o.json'), raw))
    assert [opt['datasets'][p][k] for p in ('train', 'test') for k in ('sigma', 'sigma_test')] == [15, 30, 15, 30]
    assert opt['_notes'] == []
    with pytest.raises(OptionsError, match=r'datasets\.train\.sigma: 25 differs from the top-level "sigma": 15; '):
        read_options(_opts(tmp_path, sigma=15))


def test_a_top_level_key_no_dataset_takes_is_noted_not_silently_dropped(tmp_path):
    assert read_options(_opts(tmp_path, is_color=False))['_notes'] == ['is_color: no dataset section takes it; ignored']


def test_a_file_without_a_train_section_says_once_that_training_runs_on_defaults(tmp_path):
    import utils.options as options
    raw = tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'))
    del raw['train']
    opt = read_options(write_options(str(tmp_path / 'o.json'), raw))
    assert options.training_notes(opt) == [
        'train: the option file has no train section: every train key takes its default (G_lossfn_type "l1", '
        'G_optimizer_type "adam", G_optimizer_lr 0.0001, G_scheduler_type "MultiStepLR", total_iter 1000000, ...)']
    assert opt['_notes'] == []  # main_test reads such files too: the note is the training run's
    # decided from the file: a train key given on the command line leaves every other one at its default
    assert options.training_notes(read_options(str(tmp_path / 'o.json'), ['train.total_iter=5'])) == [
        'train: the option file has no train section: every train key takes its default (G_lossfn_type "l1", '
        'G_optimizer_type "adam", G_optimizer_lr 0.0001, G_scheduler_type "MultiStepLR", total_iter 5, ...)']
    assert options.training_notes(read_options(_opts(tmp_path))) == []
    assert options.training_notes(read_options(_opts(tmp_path), ['train.total_iter=5'])) == []


def test_a_mistake_in_a_set_argument_names_the_argument_not_the_option_file(tmp_path):
    path = _opts(tmp_path)
    for given, message in [
            ('train.G_optimizer_lr=abc', '--set train.G_optimizer_lr=abc: train.G_optimizer_lr: expected an integer or '
                                         'a number, got "abc"'),
            ('train.nosuch=1', '--set train.nosuch=1: train.nosuch: unknown key'),
            ('netG.net_type="dncn"', '--set netG.net_type="dncn": netG.net_type: unknown network "dncn" (did you mean '
                                    '"dncnn"?); '),
            ('datasets.train=[1,2]', '--set datasets.train=[1,2]: datasets.train: expected a section (an object of '
                                     'keys, {...}), got a list: [1, 2]'),
            ('datasets.train={"name": "x"}', '--set datasets.train={"name": "x"}: datasets.train.dataset_type: '
                                             'required key is missing'),  # a key inside the section it gave
            (f'path.root={path}', f'--set path.root={path}: path.root: {path} is a file, not a folder'),
            ('logging.wandb_api_key=[1]', '--set logging.wandb_api_key=***redacted***: logging.')]:  # not echoed
        with pytest.raises(OptionsError) as e:
            read_options(path, [given])
        assert str(e.value).startswith(message) and '[1]' not in str(e.value), str(e.value)
    with pytest.raises(OptionsError) as e:  # the file's own mistake still names the file, beside an override
        read_options(_opts(tmp_path, train__G_optimizer_lr='abc'), ['train.total_iter=5'])
    assert str(e.value).startswith(f'{tmp_path}/opt.json: train.G_optimizer_lr: expected'), str(e.value)


def test_a_section_a_set_argument_made_is_its_mistake_not_the_option_files(tmp_path):
    """An unknown section only a `--set` gave (a fuzz of malformed options found it named after the file)."""
    path = _opts(tmp_path)
    for given, message in [
            ('foo.bar=1', '--set foo.bar=1: foo: unknown key'),
            ('datasets.foo.bar=1', '--set datasets.foo.bar=1: datasets.foo: unknown phase'),
            ('foo.api_key=x', '--set foo.api_key=***redacted***: foo: unknown key')]:
        with pytest.raises(OptionsError) as e:
            read_options(path, [given])
        assert str(e.value).startswith(message), str(e.value)
    with pytest.raises(OptionsError) as e:  # the first argument that made the section is the one named
        read_options(path, ['foo.a=1', 'foo.b=2'])
    assert str(e.value).startswith('--set foo.a=1: foo: unknown key'), str(e.value)
    with pytest.raises(OptionsError) as e:  # a section of the file stays the file's, beside an override in it
        read_options(_opts(tmp_path, train__G_optimizer_lr='abc'), ['train.total_iter=5', 'netG.nc=4'])
    assert str(e.value).startswith(f'{tmp_path}/opt.json: train.G_optimizer_lr: expected'), str(e.value)


def test_a_top_level_scale_that_nothing_takes_is_noted_and_scoring_stays_at_scale_one(tmp_path):
    from models.restorer import ImageRestorer
    opt = read_options(_opts(tmp_path, scale=2))  # DnCNN data and network: nothing works at scale 2
    assert opt['_notes'] == ['scale: 2, but neither netG (dncnn) nor a dataset section takes it; ignored']
    restorer = ImageRestorer.from_options(torch.nn.Identity(), opt, torch.device('cpu'))
    assert restorer.metric_border == 0 and not restorer.round_y


@pytest.mark.parametrize('path', sorted(p for p in glob.glob(os.path.join(ROOT, 'options', '**', '*.json'), recursive=True)
                                       if os.path.basename(p) != 'schema.json'),  # the options' JSON Schema
                         ids=lambda p: os.path.relpath(p, os.path.join(ROOT, 'options')))
def test_every_option_file_in_the_repository_validates(path):
    opt = read_options(path)
    assert opt['task'] and opt['netG']['net_type']
