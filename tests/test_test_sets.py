"""Several test sets in one run: `datasets.test` a list (or BasicSR's `test_1`, `test_2`, ...), every key of every
set validated and named in errors, one network load for all of them, a results.csv per set and one results.md
with a row per set; the shipped SR benchmark files on generated stand-ins of their folder layout."""
import csv
import json
import os
import shutil

import jsonschema
import numpy as np
import pytest

from tests.conftest import ROOT, run_main, tiny_options, write_options
from option_rules import option_rules, read_options
from utils.errors import OptionsError
from utils.options import all_test_sets, training_notes, validate

BENCHMARKS = {s: os.path.join(ROOT, 'options', 'test', f'test_sr_benchmarks_x{s}.json') for s in (2, 3, 4)}


def _sets(*names, **extra):
    return [{'name': n, 'dataset_type': 'dncnn', 'dataroot_H': f'/d/{n}', **extra} for n in names]


def _validate(datasets, **top):
    return validate({'task': 't', 'netG': {'net_type': 'dncnn'}, 'datasets': datasets, **top}, option_rules())


def test_a_list_of_test_sets_and_basicsrs_numbered_sections_validate_to_the_same_sets_in_file_order():
    listed = _validate({'train': {'dataset_type': 'dncnn', 'dataroot_H': '/d/t'}, 'test': _sets('A', 'B', 'C')})
    numbered = _validate(dict(zip(('test_1', 'test_2', 'test_3'), _sets('A', 'B', 'C'))))
    for opt in (listed, numbered):
        assert [s['name'] for s in all_test_sets(opt)] == ['A', 'B', 'C']
        assert opt['datasets']['test']['name'] == 'A'  # what validation during training (and every one-set reader) uses
        assert list(opt['datasets']) == [*(['train'] if 'train' in opt['datasets'] else []), 'test', 'test_2', 'test_3']
        assert all(s['phase'] == 'test' and s['sigma'] == 25.0 for s in all_test_sets(opt))  # defaults filled in each
    assert [s['_where'] for s in all_test_sets(listed)] == ['datasets.test[0]', 'datasets.test[1]', 'datasets.test[2]']
    assert [s['_where'] for s in all_test_sets(numbered)] == ['datasets.test_1', 'datasets.test_2', 'datasets.test_3']
    assert training_notes(listed)[0] == ('datasets: 3 test sets; validation during training uses the first, '
                                         'datasets.test[0] ("A"); main_test.py tests them all')
    one = _validate({'test': _sets('A')[0]})
    assert all_test_sets(one) == [one['datasets']['test']]
    assert not [n for n in training_notes(one) if n.startswith('datasets')]


@pytest.mark.parametrize('datasets, error', [
    ({'test': [*_sets('A'), {'name': 'B', 'dataset_type': 'dncnn'}]},
     r'datasets\.test\[1\]\.dataroot_H: required key is missing'),
    ({'test_1': _sets('A')[0], 'test_2': {**_sets('B')[0], 'dataroot_h': 'x'}},
     r'datasets\.test_2\.dataroot_h: unknown key \(did you mean "dataroot_H"\?\)'),
    ({'test': [*_sets('A'), {**_sets('B')[0], 'sigma_test': -1}]}, r'datasets\.test\[1\]\.sigma_test: -1 '),
    ({'test': [*_sets('A'), {**_sets('B')[0], 'dataloader_batch_size': 2}]},
     r'datasets\.test\[1\]\.dataloader_batch_size: evaluation takes one whole image'),
    ({'test': [*_sets('A'), {**_sets('B')[0], 'dataset_type': 'dncn'}]},
     r'datasets\.test\[1\]\.dataset_type: unknown dataset type "dncn"'),
    ({'test': _sets('A', 'A')}, r'datasets\.test\[1\]\.name: "A" is the name of datasets\.test\[0\] too'),
    ({'test': [*_sets('A'), {**_sets('B')[0], 'name': ''}]}, r'datasets\.test\[1\]\.name: required when there are '
                                                             r'several test sets'),
    ({'test': _sets('A', 'a/b')}, r'datasets\.test\[1\]\.name: "a/b" must be one folder name'),
    ({'test': []}, r'datasets\.test: an empty list: give at least one test set'),
    ({'test': _sets('A', 'B'), 'test_3': _sets('C')[0]}, r'datasets\.test_3: several test sets go either in the list '
                                                         r'datasets\.test or in test_1, test_2, \.\.\. sections'),
    ({'test_1': _sets('A', 'B')}, r'datasets\.test_1: expected one test set \(an object\)'),
    ({'test': _sets('A')[0], 'val_2': _sets('B')[0]}, r'datasets\.val_2: "val_2" is another name for "test"'),
    ({'tset': _sets('A')[0]}, r'datasets\.tset: unknown phase \(did you mean "test"\?\)'),
])
def test_every_key_of_every_test_set_is_validated_and_the_error_names_the_set(datasets, error):
    with pytest.raises(OptionsError, match=f'^<options>: {error}'):
        _validate(datasets)


def test_set_reaches_an_item_of_the_list_of_test_sets_as_the_errors_name_it(tmp_path):
    raw = tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'))
    raw['datasets']['test'] = [dict(raw['datasets']['test'], name=n) for n in ('A', 'B')]
    path = write_options(str(tmp_path / 'o.json'), raw)
    opt = read_options(path, ['datasets.test[1].dataroot_H=/elsewhere', 'datasets.test[0].metric_border=2'])
    assert [(s['dataroot_H'], s['metric_border']) for s in all_test_sets(opt)] == \
        [(raw['datasets']['test'][0]['dataroot_H'], 2), ('/elsewhere', None)]
    with pytest.raises(OptionsError, match=r'^--set datasets\.test\[2\]\.name: "datasets\.test" has 2 items '
                                           r'\(indices 0 to 1\)$'):
        read_options(path, ['datasets.test[2].name=C'])
    with pytest.raises(OptionsError, match=r'"datasets\.test" is a list: name an item, e\.g\. '
                                           r'datasets\.test\[0\]\.name$'):
        read_options(path, ['datasets.test.name=C'])


def test_the_schema_takes_a_list_of_test_sets_and_numbered_sections(tmp_path):
    with open(os.path.join(ROOT, 'options', 'schema.json')) as f:
        schema = jsonschema.Draft202012Validator(json.load(f))
    base = {'task': 't', 'netG': {'net_type': 'dncnn'}}
    assert not list(schema.iter_errors({**base, 'datasets': {'test': _sets('A', 'B')}}))
    assert not list(schema.iter_errors({**base, 'datasets': dict(zip(('test_1', 'test_2'), _sets('A', 'B')))}))
    assert list(schema.iter_errors({**base, 'datasets': {'test': []}}))
    assert list(schema.iter_errors({**base, 'datasets': {'test': [{**_sets('A')[0], 'dataroot_h': 'x'}]}}))


def _table(path):
    with open(path) as f:
        return list(csv.reader(f))


def _markdown_rows(path):
    """results.md's first table as {set: cells}."""
    with open(path) as f:
        lines = f.read().split('\n\n## ')[0].splitlines()
    rows = [[c.strip() for c in line.strip('|').split('|')] for line in lines if line.startswith('| ')]
    return rows[0], {r[0]: r for r in rows[1:]}


def test_three_test_sets_run_with_one_network_load_into_their_own_tables_and_one_results_md(tmp_path, tiny_run,
                                                                                         demo_images):
    """BasicSR's numbered sections, each set with its own images and scoring (a border of 2 on B): each set's
    results.csv holds exactly what testing that set alone gives, and results.md a row per set."""
    images = sorted(f for f in os.listdir(os.path.join(demo_images, 'test')) if f.endswith('.png'))
    folders = {}
    for name, part in (('A', images[:2]), ('B', images[2:5]), ('C', images[5:])):
        folders[name] = tmp_path / 'sets' / name
        folders[name].mkdir(parents=True)
        for f in part:
            shutil.copy(os.path.join(demo_images, 'test', f), folders[name])
    with open(tiny_run.opt_path) as f:
        raw = json.load(f)
    one = dict(raw['datasets'].pop('test'), generate_demo=None)
    for i, name in enumerate('ABC', 1):
        raw['datasets'][f'test_{i}'] = dict(one, name=name, dataroot_H=str(folders[name]),
                                            **({'metric_border': 2} if name == 'B' else {}))
    path = write_options(str(tmp_path / 'three.json'), raw)
    res = run_main('main_test', ['--opt', path, '--out', str(tmp_path / 'out')])
    assert res.returncode == 0, res.stderr[-2000:]
    assert '8_E.pth on 3 test sets: A (2 items), B (3 items), C (3 items)' in res.stdout
    out = tmp_path / 'out'
    assert sorted(os.listdir(out)) == ['A', 'B', 'C', 'results.md']
    assert sorted(os.listdir(out / 'B')) == sorted(images[2:5] + ['results.csv', 'index.html', 'input', 'target'])
    assert (out / 'B' / 'index.html').read_text().count('<tr') == 3 + 2  # its page: header, 3 items, the mean
    head, rows = _markdown_rows(out / 'results.md')
    assert head == ['set', 'items', 'PSNR (dB)', 'SSIM', 'PSNR Y (dB)', 'SSIM Y', 'scored']
    assert list(rows) == ['A', 'B', 'C']
    assert [rows[n][1] for n in 'ABC'] == ['2', '3', '3']
    assert [rows[n][-1] for n in 'ABC'] == ['border 0 px, Y unrounded', 'border 2 px, Y unrounded',
                                            'border 0 px, Y unrounded']
    for name in 'ABC':
        mean = _table(out / name / 'results.csv')[-1]
        assert [f'{float(v):.2f}' for v in mean[1:4:2]] == [rows[name][2], rows[name][4]]  # PSNR, PSNR Y
    # B alone (a test set of its own, with its border) scores what it scored among the three
    alone = write_options(str(tmp_path / 'alone.json'), {**raw, 'datasets': {'test': raw['datasets']['test_2']}})
    res = run_main('main_test', ['--opt', alone, '--out', str(tmp_path / 'alone'), '--no-images'])
    assert res.returncode == 0, res.stderr[-2000:]
    assert _table(tmp_path / 'alone' / 'results.csv') == _table(out / 'B' / 'results.csv')
    assert sorted(os.listdir(tmp_path / 'alone')) == ['results.csv', 'results.md']  # one set: its folder is the output


def _benchmark_layout(root, scale, rng):
    """Tiny stand-ins of the five benchmark sets in EDSR's layout: HR and LR_bicubic/X<scale> (MATLAB bicubic),
    Manga109 HR only."""
    import cv2

    from utils.image import imresize_bicubic
    for name, count in (('Set5', 2), ('Set14', 1), ('B100', 1), ('Urban100', 1), ('Manga109', 2)):
        hr = root / 'testsets' / name / 'HR'
        hr.mkdir(parents=True)
        lr = root / 'testsets' / name / 'LR_bicubic' / f'X{scale}'
        if name != 'Manga109':
            lr.mkdir(parents=True)
        for i in range(count):
            img = cv2.GaussianBlur((rng.random((50, 46, 3)) * 255).astype(np.uint8), (5, 5), 2)
            cv2.imwrite(str(hr / f'img_{i:03d}.png'), img)
            if name != 'Manga109':  # 50x46 is not a multiple of 4: LR of the image's bottom-right-cropped copy
                h, w = img.shape[0] // scale * scale, img.shape[1] // scale * scale
                cv2.imwrite(str(lr / f'img_{i:03d}x{scale}.png'), imresize_bicubic(img[:h, :w], 1 / scale))


def test_the_sr_benchmark_file_tests_a_trained_model_on_its_five_sets_in_one_command(tmp_path):
    """`--opt <the run's options> --test-sets options/test/test_sr_benchmarks_x4.json` on generated stand-ins of the
    standard layout, relative to the folder main_test runs in: five rows (Set5 ... Manga109), Manga109's LR made
    from its HR; the run's own test set is not tested."""
    import torch

    from models.registry import build_network
    _benchmark_layout(tmp_path, 4, np.random.default_rng(0))
    tiny = os.path.join(ROOT, 'options', 'zoo', 'train_swinir_sr_tiny.json')  # x2 as shipped: the run trains x4
    torch.manual_seed(0)
    torch.save(build_network(read_options(tiny, ['scale=4'])['netG']).state_dict(), tmp_path / 'w.pth')
    args = ['--opt', tiny, '--set', 'scale=4', '--weights', 'w.pth', '--test-sets', BENCHMARKS[4], '--no-images']
    res = run_main('main_test', args, cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr[-2000:]
    results = tmp_path / 'experiments' / 'train_swinir_sr_tiny' / 'results'
    head, rows = _markdown_rows(results / 'results.md')
    assert list(rows) == ['Set5', 'Set14', 'B100', 'Urban100', 'Manga109']
    assert [rows[n][1] for n in rows] == ['2', '1', '1', '1', '2']
    assert all(r[-1] == 'border 4 px, Y rounded' for r in rows.values())  # the scale, KAIR's SR convention
    assert sorted(os.listdir(results)) == ['B100', 'Manga109', 'Set14', 'Set5', 'Urban100', 'results.md']
    assert 'bicubic x4 of the input' in (results / 'results.md').read_text()
    # a x2 run with the x4 file: one line naming both files, nothing written
    res = run_main('main_test', ['--opt', tiny, '--weights', 'w.pth', '--test-sets', BENCHMARKS[4]], cwd=str(tmp_path))
    assert res.returncode == 2 and res.stderr.count('\n') == 1
    assert 'test_sr_benchmarks_x4.json: scale: 4: its test sets are made for scale 4, but' in res.stderr
    assert 'train_swinir_sr_tiny.json restores at scale 2' in res.stderr


@pytest.mark.parametrize('scale', [2, 3, 4])
def test_the_benchmark_files_name_the_five_sets_in_the_standard_layout_for_their_scale(scale):
    opt = read_options(BENCHMARKS[scale])
    sets = all_test_sets(opt)
    assert opt['scale'] == scale and [s['name'] for s in sets] == ['Set5', 'Set14', 'B100', 'Urban100', 'Manga109']
    assert [s['dataroot_H'] for s in sets] == [f'testsets/{s["name"]}/HR' for s in sets]
    assert [s['dataroot_L'] for s in sets[:4]] == [f'testsets/{s["name"]}/LR_bicubic/X{scale}' for s in sets[:4]]
    assert sets[4]['dataroot_L'] is None and sets[4]['quantize_L']  # made from HR, rounded like the packaged files
    assert all(s['dataset_type'] == 'sr' and s['metric_border'] is None for s in sets)  # border: the scale
    with open(BENCHMARKS[scale]) as f:
        comments = f.read().split('{', 1)[0]
    for source in ('Bevilacqua', 'Zeyde', 'Berkeley Segmentation Dataset', 'Huang', 'Manga109', 'EDSR'):
        assert source in comments  # where each set comes from


def test_a_test_sets_file_without_test_sets_is_one_line(tmp_path, tiny_run):
    empty = write_options(str(tmp_path / 'none.json'), {'task': 'x', 'netG': {'net_type': 'dncnn'}})
    res = run_main('main_test', ['--opt', tiny_run.opt_path, '--test-sets', empty])
    assert res.returncode == 2 and res.stderr.count('\n') == 1
    assert 'none.json: datasets.test: no test set in this file' in res.stderr
