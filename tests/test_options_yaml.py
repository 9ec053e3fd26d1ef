"""BasicSR's and traiNNer-redux's YAML option files (utils/options/readers/basicsr/): read as those trainers read
them, every key honoured or refused in one line naming it as the file spells it, `--set` in the file's own names,
one log line saying how the file was read, and mistakes (YAML syntax, unknown keys, wrong types) named by file, line
and key before anything is written."""
import os
import re
import textwrap

import pytest

from anchor_runs import ANCHORS
from conftest import run_main
from option_rules import read_options, translate_foreign_file
from utils.errors import OptionsError
from utils.options import read_option_file

MSRRESNET = os.path.join(ANCHORS, 'basicsr', 'options', 'train', 'SRResNet_SRGAN', 'train_MSRResNet_x4.yml')
EDVR = os.path.join(ANCHORS, 'basicsr', 'options', 'train', 'EDVR', 'train_EDVR_M_x4_SR_REDS.yml')
REDUX = os.path.join(ANCHORS, 'traiNNer-redux', 'options', '_templates', 'train')
HAT = os.path.join(REDUX, 'HAT', 'HAT_M_fidelity.yml')
RGT = os.path.join(REDUX, 'RGT', 'RGT_gan.yml')

SMALL = '''\
name: small_run
model_type: SRModel
scale: 2
num_gpu: auto
manual_seed: 0
datasets:
  train:
    name: pairs
    type: PairedImageDataset
    dataroot_gt: /data/hr
    dataroot_lq: /data/lr
    io_backend:
      type: disk
    gt_size: 64
    use_hflip: true
    use_rot: false
    num_worker_per_gpu: 2
    batch_size_per_gpu: 8
network_g:
  type: EDSR
  num_feat: 16
  num_block: 2
  upscale: 2
train:
  optim_g:
    type: Adam
    lr: !!float 2e-4
    betas: [0.9, 0.99]
  scheduler:
    type: MultiStepLR
    milestones: [100]
    gamma: 0.5
  total_iter: 200
  warmup_iter: -1
  pixel_opt:
    type: L1Loss
    loss_weight: 1.0
    reduction: mean
logger:
  print_freq: 10
  save_checkpoint_freq: !!float 1e2
  use_tb_logger: false
'''


def _write(tmp_path, text: str, name: str = 'opt.yml') -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def _line_of(path: str, needle: str) -> int:
    with open(path) as f:
        return next(i for i, line in enumerate(f, 1) if needle in line)


def _refused(path: str, *overrides: str) -> str:
    with pytest.raises(OptionsError) as e:
        read_options(path, list(overrides))
    message = str(e.value)
    assert '\n' not in message
    return message


# --- read as BasicSR reads it -------------------------------------------------------------------------------------

def test_a_basicsr_file_becomes_this_projects_options(tmp_path):
    opt = read_options(_write(tmp_path, SMALL))
    train, data = opt['train'], opt['datasets']['train']
    assert (opt['task'], opt['model'], opt['scale'], opt['netG']['net_type']) == ('small_run', 'plain', 2, 'edsr')
    assert (opt['netG']['num_feat'], opt['netG']['num_block'], opt['netG']['upscale']) == (16, 2, 2)
    assert (data['dataset_type'], data['dataroot_H'], data['dataroot_L'], data['H_size']) == \
        ('paired', '/data/hr', '/data/lr', 64)
    assert (data['use_rot'], data['dataloader_batch_size'], data['dataloader_num_workers']) == (False, 8, 2)
    assert (train['G_optimizer_type'], train['G_optimizer_lr'], train['G_optimizer_betas']) == ('adam', 2e-4, [0.9, 0.99])
    assert (train['G_scheduler_type'], train['G_scheduler_milestones'], train['G_scheduler_gamma']) == \
        ('MultiStepRestartLR', [100], 0.5)
    assert (train['total_iter'], train['G_scheduler_warmup_iter'], train['manual_seed']) == (200, 0, 0)
    assert (train['G_lossfn_type'], train['G_lossfn_weight']) == ('l1', 1.0)
    assert (train['checkpoint_print'], train['checkpoint_save']) == (10, 100)  # !!float 1e2 is an iteration count
    assert opt['logging']['use_tensorboard'] is False


def test_one_log_line_says_how_the_file_was_read(tmp_path):
    path = _write(tmp_path, SMALL)
    summary = read_options(path)['_notes'][0]
    assert summary.startswith(f'{path}: read as BasicSR YAML: ') and 'keys mapped' in summary
    assert re.search(r'3 not needed here \(num_gpu, datasets.train.io_backend, datasets.train.reduction|'
                     r'not needed here \(.*num_gpu', summary)


def test_every_key_is_mapped_or_said_to_be_unneeded(tmp_path):
    """Nothing of the file is dropped silently: each key is a value of the options (with its origin) or in the
    log line's list."""
    t = translate_foreign_file(_write(tmp_path, SMALL))
    origins = {o.key for o in t.origins.values()}
    unneeded = {k for k, _ in t.unneeded}
    for key in ('name', 'scale', 'manual_seed', 'train.optim_g.lr', 'train.scheduler.milestones',
                'datasets.train.dataroot_gt', 'datasets.train.gt_size', 'logger.print_freq', 'network_g.num_block'):
        assert key in origins
    assert {'num_gpu', 'datasets.train.io_backend'} <= unneeded
    assert t.origins['train.G_optimizer_lr'].line == _line_of(t.path, 'lr: !!float')


def test_set_takes_the_files_own_key_names(tmp_path):
    path = _write(tmp_path, SMALL)
    opt = read_options(path, ['train.total_iter=1000', 'datasets.train.dataroot_gt=/elsewhere/hr',
                              'train.optim_g.lr=1e-3'])
    assert (opt['train']['total_iter'], opt['datasets']['train']['dataroot_H'], opt['train']['G_optimizer_lr']) == \
        (1000, '/elsewhere/hr', 1e-3)
    message = _refused(path, 'train.total_iter=0')
    assert message.startswith('--set train.total_iter=0: train.total_iter: ')


def test_a_traiNNer_redux_file_is_read_as_traiNNer_redux_reads_it():
    """HAT_M: its hat_m preset's sizes, lq_size as the LR patch, AdamW, charbonnier (eps 1e-12), EMA with its power
    warm-up (E_warmup_power, the same curve), bf16 AMP with channels-last."""
    opt = read_options(HAT)
    net, train, data = opt['netG'], opt['train'], opt['datasets']['train']
    assert (net['net_type'], net['embed_dim'], net['depths'], net['window_size'], net['upscale']) == \
        ('hat', 180, [6] * 6, 16, 4)
    assert (data['dataset_type'], data['H_size'], data['dataroot_H']) == \
        ('paired', 64 * 4, ['datasets/train/dataset1/hr', 'datasets/train/dataset1/hr2'])
    assert (train['G_optimizer_type'], train['G_optimizer_wd'], train['G_lossfn_type'], train['G_charbonnier_eps']) == \
        ('adamw', 0, 'charbonnier', 1e-12)
    assert (train['E_decay'], train['E_warmup_power'], train['E_warmup_iter'], train['amp'], train['channels_last']) == \
        (0.999, 0.75, 0, 'bf16', True)


def test_a_file_without_ema_power_keeps_its_trainers_own_ema(tmp_path):
    """BasicSR's EMA has no warm-up (E_warmup_power 0, with a note saying what ema_power would do); traiNNer-redux's
    default power is 10 (the average starts as the network after the first update)."""
    opt = read_options(_write(tmp_path, SMALL.replace('  total_iter: 200\n', '  total_iter: 200\n  ema_decay: 0.999\n')))
    assert (opt['train']['E_decay'], opt['train']['E_warmup_power']) == (0.999, 0)
    assert any('ema_decay: 0.999 without ema_power' in note for note in opt['_notes'])
    with open(HAT) as f:
        hat = f.read()
    assert 'ema_power: 0.75' in hat
    redux = _write(tmp_path, hat.replace('ema_power: 0.75', ''), 'redux.yml')
    assert read_options(redux)['train']['E_warmup_power'] == 10
    message = _refused(_write(tmp_path, hat.replace('ema_power: 0.75', 'ema_power: 0'), 'zero.yml'))
    assert 'ema_power' in message and 'expected a number > 0' in message


def test_a_traiNNer_redux_gan_template_trains_its_losses_against_its_discriminator():
    opt = read_options(RGT, ['path.pretrain_network_g=null'])
    t = opt['train']
    assert (opt['model'], opt['netD']['net_type']) == ('gan', 'dunet')
    assert (t['G_lossfn_type'], t['G_lossfn_weight']) == ('msssim_luma', 0.5)
    assert t['G_extra_losses'] == {'vgg_perceptual': 0.01, 'hsluv': 1.0}
    assert (t['G_vgg_criterion'], t['G_hsluv_criterion'], t['gan_type'], t['D_lossfn_weight']) == \
        ('charbonnier', 'charbonnier', 'gan', 0.1)
    assert (t['F_lossfn_weight'], t['ldl_weight'], t['D_optimizer_type']) == (0, 0.0, 'adamw')


# --- refused in one line ------------------------------------------------------------------------------------------

def test_a_network_this_project_lacks_is_one_line_naming_it_and_what_is_near(tmp_path):
    path = _write(tmp_path, SMALL.replace('type: EDSR', 'type: EDSRR'))
    message = _refused(path)
    assert message.startswith(f'{path}:{_line_of(path, "type: EDSRR")}: network_g.type: no network "EDSRR" here '
                              f'(did you mean "EDSR"?)')
    assert '--describe network' in message


def test_a_key_that_cannot_be_honoured_is_refused_naming_it(tmp_path):
    path = _write(tmp_path, SMALL.replace('    reduction: mean', '    reduction: none'))
    message = _refused(path)
    assert message.startswith(f'{path}:{_line_of(path, "type: L1Loss")}: train.pixel_opt.type: "L1Loss" with '
                              f'reduction: "none" is not supported here')


def test_traiNNer_redux_on_the_fly_degradations_are_refused_naming_the_key():
    path = os.path.join(REDUX, 'SPAN', 'SPAN_OTF_fidelity.yml')
    message = _refused(path)
    assert message.startswith(f'{path}:{_line_of(path, "high_order_degradation:")}: high_order_degradation: true: ')


# --- bad input ----------------------------------------------------------------------------------------------------

def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path):
    path = _write(tmp_path, SMALL.replace('  optim_g:\n', '  optim_g:\n   - oops\n'))
    message = _refused(path)
    assert re.match(re.escape(path) + r':\d+:\d+: invalid YAML: ', message), message


def test_a_duplicate_key_names_both_lines(tmp_path):
    path = _write(tmp_path, SMALL.replace('  total_iter: 200\n', '  total_iter: 200\n  total_iter: 300\n'))
    message = _refused(path)
    assert message == (f'{path}:{_line_of(path, "total_iter: 300")}: train.total_iter: duplicate key (also on line '
                       f'{_line_of(path, "total_iter: 200")}); YAML readers keep one of them silently')


@pytest.mark.parametrize('edit, line, message', [
    (('  total_iter: 200', '  totl_iter: 200'), 'totl_iter', 'train.totl_iter: unknown key (did you mean "total_iter"?)'),
    (('  num_block: 2', '  num_blok: 2'), 'num_blok', 'network_g.num_blok: unknown key (did you mean "num_block"?)'),
    # a wrong type names the key as the file spells it; YAML 1.1 reads 2e-4 (no dot) as a string
    (('lr: !!float 2e-4', 'lr: 2e-4'), 'lr: 2e-4', 'train.optim_g.lr: expected an integer or a number, got "2e-4"'),
    (('batch_size_per_gpu: 8', 'batch_size_per_gpu: eight'), 'eight',
     'datasets.train.batch_size_per_gpu: expected an integer, got "eight"'),
], ids=['unknown-train-key', 'unknown-network-key', 'string-lr', 'string-batch'])
def test_an_unknown_key_or_a_wrong_type_is_named_as_the_file_spells_it(tmp_path, edit, line, message):
    path = _write(tmp_path, SMALL.replace(*edit))
    assert _refused(path).startswith(f'{path}:{_line_of(path, line)}: {message}')


def test_a_bad_file_stops_main_train_before_anything_is_written(tmp_path):
    path = _write(tmp_path, SMALL.replace('  total_iter: 200', '  totl_iter: 200'))
    result = run_main('main_train', ['--opt', path], cwd=str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f'error: {path}:{_line_of(path, "totl_iter")}: train.totl_iter: '
                                                  f'unknown key (did you mean "total_iter"?) (train keys; '
                                                  f'docs/option_files.md lists the keys read from BasicSR files)']
    assert sorted(os.listdir(tmp_path)) == ['opt.yml']


def test_read_option_file_says_where_yaml_files_are_read(tmp_path):
    with pytest.raises(OptionsError, match='a BasicSR or traiNNer-redux YAML file'):
        read_option_file(_write(tmp_path, SMALL))


def test_edvrs_video_file_keeps_basicsrs_clip_datasets():
    opt = read_options(EDVR, ['path.pretrain_network_g=null'])
    assert (opt['model'], opt['datasets']['train']['dataset_type'], opt['val']['padding']) == \
        ('edvr', 'REDSDataset', 'reflection_circle')
    test = opt['datasets']['test']  # BasicSR's `val` section: this project's first test set
    assert (test['dataset_type'], test['num_frame']) == ('VideoRecurrentTestDataset', -1)
    assert test['meta_info_file'].endswith('meta_info_REDS4_test_GT.txt')
