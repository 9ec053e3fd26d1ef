"""BasicSR's and traiNNer-redux's TEST option files run by main_test.py as its own JSON test options run: their test
sets (`test_1`, `test_2`, ..., traiNNer-redux's `val`), the network they name, the weights of
path.pretrain_network_g with param_key_g and strict_load_g, results.md with a row per set; a file naming what this
project lacks is refused in one line."""
import os

import cv2
import numpy as np
import pytest
import torch
import yaml

from anchor_runs import ANCHORS
from conftest import run_main
from option_rules import read_options
from utils.errors import UserError

BASICSR_TEST = os.path.join(ANCHORS, 'basicsr', 'options', 'test')
REDUX_TEST = os.path.join(ANCHORS, 'traiNNer-redux', 'options', '_templates', 'test')
TEST_FILES = sorted(os.path.relpath(os.path.join(root, name), ANCHORS)
                    for folder in (BASICSR_TEST, REDUX_TEST) for root, _, names in os.walk(folder)
                    for name in names if name.endswith('.yml'))


def _pairs(root, scale: int, count: int = 2, lr: int = 12) -> tuple:
    """`count` smooth HR images and their area-downscaled LR images, in root/hr and root/lr."""
    rng = np.random.default_rng(scale + count)
    for kind in ('hr', 'lr'):
        os.makedirs(os.path.join(root, kind), exist_ok=True)
    for i in range(count):
        small = rng.integers(0, 256, (4, 4, 3)).astype(np.uint8)
        hr = cv2.resize(small, (lr * scale, lr * scale), interpolation=cv2.INTER_CUBIC)
        cv2.imwrite(os.path.join(root, 'hr', f'{i}.png'), hr)
        cv2.imwrite(os.path.join(root, 'lr', f'{i}.png'), cv2.resize(hr, (lr, lr), interpolation=cv2.INTER_AREA))
    return os.path.join(root, 'hr'), os.path.join(root, 'lr')


def _write_yaml(path, data) -> str:
    with open(path, 'w') as f:
        yaml.safe_dump(data, f, sort_keys=False)
    return str(path)


def _save_weights(opt_path: str, weights: str, entries: tuple = ('params',)) -> torch.nn.Module:
    """A network of the file's network_g, initialised at random, saved as BasicSR saves it ({entry: state_dict})."""
    from models.network_loading import build_checked_network
    torch.manual_seed(0)
    net = build_checked_network(read_options(opt_path, testing=True)['netG'])
    state = net.state_dict()
    torch.save({e: state if i == 0 else {k: v + 0.5 for k, v in state.items()}  # other entries: other weights
                for i, e in enumerate(entries)}, weights)
    return net


def _run_with_fresh_weights(tmp_path, data: dict, name: str) -> tuple:
    """(output folder, log) of main_test on `data` written as tmp_path/name, its path.pretrain_network_g a network
    of its network_g initialised at random (`_save_weights`); the run must succeed."""
    weights = str(tmp_path / 'net_g.pth')
    data['path']['pretrain_network_g'] = weights
    opt_path = _write_yaml(tmp_path / name, data)
    _save_weights(opt_path, weights)
    out = tmp_path / 'out'
    res = run_main('main_test', ['--opt', opt_path, '--out', str(out)], cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr[-2000:]
    return out, res.stdout + res.stderr


def _results_rows(path) -> list:
    """The lines of results.md's first table (the network's scores), header included."""
    with open(path) as f:
        text = f.read()
    table = text[text.index('\n|'):].strip().split('\n\n')[0]
    return table.splitlines()


def test_a_basicsr_test_file_runs_its_sets_with_its_weights_and_writes_results_md(tmp_path):
    with open(os.path.join(BASICSR_TEST, 'SRResNet_SRGAN', 'test_MSRResNet_x4.yml')) as f:
        data = yaml.safe_load(f)
    hr, lr = _pairs(str(tmp_path / 'data'), 4)
    for section in data['datasets'].values():  # edited to the tiny data only
        section.update(dataroot_gt=hr, dataroot_lq=lr)
        section.pop('filename_tmpl', None)
    data['network_g'].update(num_feat=8, num_block=1)
    weights = str(tmp_path / 'net_g.pth')
    data['path'].update(pretrain_network_g=weights, param_key_g='params_ema')
    opt_path = _write_yaml(tmp_path / 'test_MSRResNet_x4.yml', data)
    _save_weights(opt_path, weights, ('params_ema', 'params'))  # param_key_g picks params_ema
    out = tmp_path / 'out'
    res = run_main('main_test', ['--opt', opt_path, '--out', str(out)], cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'read as BasicSR YAML' in res.stdout + res.stderr
    rows = _results_rows(out / 'results.md')
    assert [r.split('|')[1].strip() for r in rows[2:]] == ['Set5', 'Set14', 'DIV2K100'], rows
    assert all(float(r.split('|')[3]) > 5 for r in rows[2:]), rows  # PSNR of each set
    assert sorted(os.listdir(out / 'Set5')) == ['0.png', '1.png', 'index.html', 'input', 'results.csv', 'target']

    zeros = run_main('main_test', ['--opt', opt_path, '--out', str(tmp_path / 'zeros'),
                                   '--set', 'path.param_key_g=params'], cwd=str(tmp_path))
    assert zeros.returncode == 0, zeros.stderr[-2000:]
    assert _results_rows(tmp_path / 'zeros' / 'results.md')[2:] != rows[2:]  # the other entry: other scores


def test_a_traiNNer_redux_test_template_runs_like_its_own(tmp_path):
    """UltraCompact's test template, its LR-only validation folder made a paired one of tiny data (scored against
    targets), its weights a .safetensors of the network as traiNNer-redux writes them."""
    from safetensors.torch import save_file
    with open(os.path.join(REDUX_TEST, 'Compact', 'UltraCompact.yml')) as f:
        data = yaml.safe_load(f)
    hr, lr = _pairs(str(tmp_path / 'data'), 4)
    data['datasets']['val'].update(type='pairedimagedataset', dataroot_gt=[hr], dataroot_lq=[lr])
    data['use_amp'] = False  # CPU
    weights = str(tmp_path / 'net_g_ema_1000.safetensors')
    data['path']['pretrain_network_g'] = weights
    opt_path = _write_yaml(tmp_path / 'UltraCompact.yml', data)
    torch.manual_seed(0)
    from models.network_loading import build_checked_network
    save_file(build_checked_network(read_options(opt_path, testing=True)['netG']).state_dict(), weights)
    out = tmp_path / 'out'
    res = run_main('main_test', ['--opt', opt_path, '--out', str(out)], cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'read as traiNNer-redux YAML' in res.stdout + res.stderr
    rows = _results_rows(out / 'results.md')
    assert len(rows) == 3 and float(rows[2].split('|')[3]) > 5, rows
    assert os.path.exists(out / 'results.csv') and os.path.exists(out / 'index.html')


def test_a_test_file_naming_a_network_this_project_lacks_is_refused_in_one_line(tmp_path):
    path = os.path.join(REDUX_TEST, 'ArtCNN', 'ArtCNN_R16F96.yml')
    res = run_main('main_test', ['--opt', path, '--out', str(tmp_path / 'out')], cwd=str(tmp_path))
    assert res.returncode == 2 and res.stderr.count('\n') == 1, res.stderr[-2000:]
    assert 'network_g.type: no network "artcnn_r16f96" here' in res.stderr
    assert not (tmp_path / 'out').exists()


def _lr_images(folder, count: int = 2, size: tuple = (10, 12)) -> str:
    """`count` tiny random LR images (h x w = `size`) in `folder`, without targets."""
    rng = np.random.default_rng(count)
    os.makedirs(folder, exist_ok=True)
    for i in range(count):
        cv2.imwrite(os.path.join(folder, f'{i}.png'), rng.integers(0, 256, (*size, 3)).astype(np.uint8))
    return str(folder)


def test_a_traiNNer_redux_lr_only_test_template_restores_every_image(tmp_path):
    """UltraCompact's test template as traiNNer-redux ships it (a SingleImageDataset of two LR folders), edited only
    to tiny data, CPU and its weights: every image restored (LR x scale), written under its folder's index, and
    results.md lists the set as restored without ground truth (no scores, not zeros)."""
    from safetensors.torch import save_file
    with open(os.path.join(REDUX_TEST, 'Compact', 'UltraCompact.yml')) as f:
        data = yaml.safe_load(f)
    assert data['datasets']['val']['type'] == 'singleimagedataset'
    data['datasets']['val']['dataroot_lq'] = [_lr_images(tmp_path / 'lr'), _lr_images(tmp_path / 'lr2', 3)]
    data['use_amp'] = False  # CPU
    weights = str(tmp_path / 'net_g_ema_1000.safetensors')
    data['path']['pretrain_network_g'] = weights
    opt_path = _write_yaml(tmp_path / 'UltraCompact.yml', data)
    from models.network_loading import build_checked_network
    save_file(build_checked_network(read_options(opt_path, testing=True)['netG']).state_dict(), weights)
    out = tmp_path / 'out'
    res = run_main('main_test', ['--opt', opt_path, '--out', str(out)], cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr[-2000:]
    assert '5 images restored (no ground truth: not compared)' in res.stdout + res.stderr
    written = sorted(os.path.relpath(os.path.join(r, n), out) for r, _, ns in os.walk(out) for n in ns
                     if n.endswith('.png') and not r.startswith(str(out / 'input')))
    assert written == ['0/0.png', '0/1.png', '1/0.png', '1/1.png', '1/2.png'], written
    assert all(cv2.imread(str(out / w)).shape == (40, 48, 3) for w in written)  # 10x12 LR x scale 4
    rows = _results_rows(out / 'results.md')
    assert rows[0] == '| set | items | scored |' and rows[2] == '| Val Dataset | 5 | no ground truth: restored, not ' \
                                                                  'compared |', rows
    assert not (out / 'results.csv').exists()  # nothing scored


def test_a_file_with_a_paired_set_and_an_lr_only_set_scores_one_and_restores_the_other(tmp_path):
    """BasicSR's test_MSRResNet_x4_woGT.yml, its first set made a paired one: the paired set scored (save_img false:
    its images not written, as their test.py), the LR-only set restored and written all the same, one note saying
    so; results.md a row each, the LR-only one with its count and no scores."""
    with open(os.path.join(BASICSR_TEST, 'SRResNet_SRGAN', 'test_MSRResNet_x4_woGT.yml')) as f:
        data = yaml.safe_load(f)
    hr, lr = _pairs(str(tmp_path / 'data'), 4)
    data['datasets']['test_1'].update(type='PairedImageDataset', dataroot_gt=hr, dataroot_lq=lr)
    data['datasets']['test_2']['dataroot_lq'] = _lr_images(tmp_path / 'lr_only', 3)
    data['network_g'].update(num_feat=8, num_block=1)
    data['val']['save_img'] = False
    out, log = _run_with_fresh_weights(tmp_path, data, 'mixed.yml')
    assert 'the restored images of the sets without ground truth are written all the same' in log
    rows = _results_rows(out / 'results.md')
    assert [r.split('|')[1].strip() for r in rows[2:]] == ['Set5', 'Set14'], rows
    assert float(rows[2].split('|')[3]) > 5 and 'border 4 px' in rows[2], rows
    assert rows[3].split('|')[2].strip() == '3' and rows[3].count('—') == 4 and 'no ground truth' in rows[3], rows
    assert sorted(os.listdir(out / 'Set5')) == ['results.csv']
    assert sorted(n for n in os.listdir(out / 'Set14') if n.endswith('.png')) == ['0.png', '1.png', '2.png']


def test_lr_only_sets_cannot_train_nor_validate_training(tmp_path):
    """A set without targets is a test set of main_test only: refused in one line as a training set, as the set a
    training run validates on (JSON and YAML alike)."""
    woGT = os.path.join(BASICSR_TEST, 'SRResNet_SRGAN', 'test_MSRResNet_x4_woGT.yml')
    with pytest.raises(UserError, match=r'datasets\.test_1\.type: "SingleImageDataset": LR images without targets '
                                        r'cannot validate training'):
        read_options(woGT)
    base = {'task': 't', 'model': 'plain', 'scale': 2, 'netG': {'net_type': 'msrresnet'},
            'datasets': {'train': {'dataset_type': 'lr_only', 'dataroot_L': str(tmp_path)}}}
    path = tmp_path / 'o.json'
    path.write_text(__import__('json').dumps(base))
    with pytest.raises(UserError, match=r'datasets\.train\.dataset_type: "lr_only": images without targets: a test '
                                        r'set of main_test\.py only'):
        read_options(str(path))
    base['datasets'] = {'test': {'dataset_type': 'lr_only', 'dataroot_L': str(tmp_path)}}
    path.write_text(__import__('json').dumps(base))
    with pytest.raises(UserError, match=r'datasets\.test\.dataset_type: lr_only: images without targets cannot '
                                        r'validate training'):
        read_options(str(path))
    assert not read_options(str(path), testing=True)['datasets']['test']['_targets']


@pytest.mark.parametrize('name', ['BasicVSR/test_BasicVSR_Vimeo90K_BDx4.yml', 'BasicVSR/test_IconVSR_Vimeo90K_BIx4.yml',
                                  'EDVR/test_EDVR_L_x4_SR_Vimeo90K.yml'])
def test_basicsr_vimeo90k_test_files_score_the_centre_frame_of_each_septuplet(name):
    """BasicSR's VideoTestVimeo90KDataset is this project's: the same centred window of each listed septuplet; its
    GT is the centre frame (im4) alone, so the centre frame is what is scored (val.center_frame_only)."""
    opt = read_options(os.path.join(BASICSR_TEST, name), testing=True)
    test = next(s for s in opt['datasets'].values() if s['phase'] == 'test')
    assert (test['dataset_type'], test['num_frame'], opt['val']['center_frame_only']) == \
        ('VideoTestVimeo90KDataset', 7, True)
    assert any('the centre frame is what is scored' in note for note in opt['_notes'])
    if name.startswith('EDVR'):
        assert opt['val']['padding'] == 'reflection_circle'


def test_a_basicsr_vimeo90k_test_file_runs_scoring_im4(tmp_path):
    """test_BasicVSR_Vimeo90K_BDx4.yml on two tiny septuplets: one row per sequence, its target im4."""
    with open(os.path.join(BASICSR_TEST, 'BasicVSR', 'test_BasicVSR_Vimeo90K_BDx4.yml')) as f:
        data = yaml.safe_load(f)
    rng = np.random.default_rng(0)
    seqs = ['00001/0001', '00002/0003']
    for seq in seqs:
        for kind, side in (('gt', 144), ('lq', 36)):  # SpyNet needs frames over 32 px
            os.makedirs(tmp_path / kind / seq)
            for i in range(1, 8):
                small = rng.integers(0, 256, (4, 4, 3)).astype(np.uint8)
                cv2.imwrite(str(tmp_path / kind / seq / f'im{i}.png'),
                            cv2.resize(small, (side, side), interpolation=cv2.INTER_CUBIC))
    (tmp_path / 'meta.txt').write_text(''.join(f'{s} 7 (144,144,3)\n' for s in seqs))
    data['datasets']['test_1'].update(dataroot_gt=str(tmp_path / 'gt'), dataroot_lq=str(tmp_path / 'lq'),
                                      meta_info_file=str(tmp_path / 'meta.txt'))
    data['network_g'].update(num_feat=4, num_block=1, spynet_path=None)
    out, _ = _run_with_fresh_weights(tmp_path, data, 'vimeo.yml')
    rows = _results_rows(out / 'results.md')
    assert len(rows) == 3 and rows[2].split('|')[2].strip() == '2', rows
    for seq in seqs:
        folder, name = seq.split('/')
        target = cv2.imread(str(out / 'target' / folder / f'{name}.png'))
        assert np.array_equal(target, cv2.imread(str(tmp_path / 'gt' / seq / 'im4.png')))


def test_traiNNer_redux_rcan_unshuffle_template_restores_with_weights_in_its_layout(tmp_path):
    """traiNNer-redux's rcan family is spandrel's RCAN (`rcan_original`: the original code's head/body/tail, no mean
    shift): RCAN_unshuffle's test template at scale 2 (where its pixel-unshuffle head acts), tiny, loads weights of
    that layout strictly and restores each LR image at LR x 2."""
    from safetensors.torch import save_file
    from spandrel.architectures.RCAN import RCAN
    with open(os.path.join(REDUX_TEST, 'RCAN', 'RCAN_unshuffle.yml')) as f:
        data = yaml.safe_load(f)
    data.update(scale=2, use_amp=False)
    data['datasets']['val']['dataroot_lq'] = [_lr_images(tmp_path / 'lr')]
    data['network_g'].update(n_resgroups=1, n_resblocks=1, n_feats=16)
    weights = str(tmp_path / 'net_g_ema_1000.safetensors')
    data['path']['pretrain_network_g'] = weights
    opt_path = _write_yaml(tmp_path / 'RCAN_unshuffle.yml', data)
    netG = read_options(opt_path, testing=True)['netG']
    assert (netG['net_type'], netG['norm'], netG['unshuffle_mod'], netG['scale']) == ('rcan_original', False, True, 2)
    torch.manual_seed(0)
    theirs = RCAN(scale=2, n_resgroups=1, n_resblocks=1, n_feats=16, norm=False, unshuffle_mod=True)
    assert 'head.1.weight' in theirs.state_dict()  # the unshuffle head: a conv after PixelUnshuffle
    save_file(theirs.state_dict(), weights)
    out = tmp_path / 'out'
    res = run_main('main_test', ['--opt', opt_path, '--out', str(out)], cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr[-2000:]
    assert [cv2.imread(str(out / f'{i}.png')).shape for i in range(2)] == [(20, 24, 3)] * 2


@pytest.mark.parametrize('name', TEST_FILES)
def test_every_anchor_test_file_translates_or_is_refused_in_one_line(name):
    """Read only (no run): every test file of tests/data/anchor_options gives validated options, or one line naming
    the file, its key and why (a network, a model or a dataset type this project lacks; LR-only sets)."""
    try:
        opt = read_options(os.path.join(ANCHORS, name), testing=True)
    except UserError as e:
        message = str(e)
        assert '\n' not in message and message.startswith(os.path.join(ANCHORS, name)), message
        assert any(w in message for w in ('type: no network', 'model_type: no model', 'type: no dataset type',
                                          'unknown key')), message
        return
    assert [s['name'] for s in opt['datasets'].values() if s['phase'] == 'test']


def test_how_many_anchor_test_files_translate():
    """The counts of the parametrized test above (printed): LR-only sets (every traiNNer-redux test template),
    BasicSR's Vimeo-90K test sets and traiNNer-redux's rcan_unshuffle run."""
    translated, refused = [], []
    for name in TEST_FILES:
        try:
            read_options(os.path.join(ANCHORS, name), testing=True)
            translated.append(name)
        except UserError:
            refused.append(name)
    print(f'anchor test files: {len(translated)} translate, {len(refused)} refused')
    assert (len(translated), len(refused)) == (51, 29)
