"""BasicSR's own files train here as BasicSR trains them: the same network, the same loss on the same batch and the
same learning rate at every iteration, against BasicSR 1.4.2's own numbers (tests/data/basicsr_reference: facts
recorded once with BasicSR itself; BasicSR is never imported here).

The files are BasicSR's (tests/data/anchor_options), read as a user gives them to main_train.py, with `--set` in the
file's own key names where a test needs another value (a shorter schedule, the VGG19 weights of the reference).
"""
import json
import os
from typing import Any, Dict, List, Sequence

import pytest
import torch

from anchor_runs import ANCHORS
from losses.perceptual import PerceptualLoss
from losses.registry import build_extra_losses, build_loss
from losses.adversarial import GANLoss
from models.registry import build_on_meta
from models.schedules import build_scheduler
from option_rules import read_options

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, 'data', 'basicsr_reference')
ARCHS = os.path.join(HERE, 'data', 'archs')
with open(os.path.join(REFERENCE, 'basicsr_numbers.json')) as _f:
    NUMBERS = json.load(_f)
TRAIN = os.path.join(ANCHORS, 'basicsr', 'options', 'train')
MSRRESNET = os.path.join(TRAIN, 'SRResNet_SRGAN', 'train_MSRResNet_x4.yml')
EDSR = os.path.join(TRAIN, 'EDSR', 'train_EDSR_Mx4.yml')
REALESRGAN = os.path.join(TRAIN, 'RealESRGAN', 'train_realesrgan_x4plus.yml')
BASICVSR = os.path.join(TRAIN, 'BasicVSR', 'train_BasicVSR_REDS.yml')
MSRGAN = os.path.join(TRAIN, 'SRResNet_SRGAN', 'train_MSRGAN_x4.yml')
NO_PRETRAINED = ['path.pretrain_network_g=null']


def _table(path: str) -> List[tuple]:
    """(name, shape) of each line of a state_dict table (tests/data/archs or basicsr_reference format)."""
    with open(path) as f:
        return [tuple(line.split('\t')[:2]) for line in f.read().splitlines()[1:] if line]


def _state(net: torch.nn.Module) -> List[tuple]:
    return [(k, str(tuple(v.shape))) for k, v in net.state_dict().items()]


@pytest.mark.parametrize('path, section, table', [
    (MSRRESNET, 'netG', os.path.join(REFERENCE, 'MSRResNet.tsv')),
    (EDSR, 'netG', os.path.join(ARCHS, 'edsr__EDSR_Mx4.tsv')),
    (REALESRGAN, 'netG', os.path.join(ARCHS, 'rrdbnet__RealESRGAN_x4plus.tsv')),
    (REALESRGAN, 'netD', os.path.join(REFERENCE, 'UNetDiscriminatorSN.tsv')),
    (MSRGAN, 'netD', os.path.join(REFERENCE, 'VGGStyleDiscriminator.tsv')),
    (BASICVSR, 'netG', os.path.join(ARCHS, 'basicvsr__BasicVSR_REDS4.tsv')),
], ids=['MSRResNet', 'EDSR', 'RealESRGAN-G', 'RealESRGAN-D', 'MSRGAN-D', 'BasicVSR'])
def test_basicsrs_files_build_the_state_dict_basicsr_builds(path, section, table):
    opt = read_options(path, NO_PRETRAINED + (['network_g.spynet_path=null'] if 'BasicVSR' in path else []))
    net = build_on_meta(opt[section], f'{section}.net_type')
    assert _state(net) == _table(table)


@pytest.fixture(scope='module')
def batch() -> Dict[str, torch.Tensor]:
    """The batch of the reference numbers (basicsr_numbers.json `batch`)."""
    torch.manual_seed(51)
    pred, target = torch.rand(2, 3, 32, 32), torch.rand(2, 3, 32, 32)
    return {'pred': pred, 'target': target, 'logits': torch.randn(2, 1, 4, 4)}


@pytest.fixture(scope='module')
def seeded_vgg19(tmp_path_factory) -> str:
    """The VGG19 weights of the reference perceptual loss: torchvision's VGG19 initialised with seed 7."""
    import torchvision
    torch.manual_seed(7)
    path = str(tmp_path_factory.mktemp('vgg') / 'vgg19-seed7.pth')
    torch.save(torchvision.models.vgg19(weights=None).state_dict(), path)
    return path


def _close(ours: torch.Tensor, theirs: float) -> None:
    assert abs(float(ours) - theirs) <= 1e-6 * max(1.0, abs(theirs)), (float(ours), theirs)


@pytest.mark.parametrize('path, reference', [(MSRRESNET, 'l1'), (BASICVSR, 'charbonnier')],
                         ids=['MSRResNet-L1', 'BasicVSR-Charbonnier'])
def test_the_pixel_loss_of_a_basicsr_file_is_basicsrs(path, reference, batch):
    opt = read_options(path, NO_PRETRAINED)
    _close(build_loss(opt['train'])(batch['pred'], batch['target']), NUMBERS['losses'][reference])


def test_the_real_esrgan_gan_files_losses_are_basicsrs(batch, seeded_vgg19):
    """Real-ESRGAN x4plus: L1 (weight 1), the VGG19 perceptual loss (Real-ESRGAN's five layers, weights 0.1, 0.1, 1,
    1, 1, weight 1) and the vanilla adversarial loss of netG (weight 0.1), each as BasicSR computes it."""
    opt = read_options(REALESRGAN, NO_PRETRAINED + [f'train.perceptual_opt.pretrained_path={seeded_vgg19}'])
    t = opt['train']
    assert (opt['model'], t['G_lossfn_type'], t['gan_type']) == ('gan', 'l1', 'gan')
    assert t['G_lossfn_weight'] == 1.0
    _close(build_loss(t)(batch['pred'], batch['target']), NUMBERS['losses']['l1'])
    perceptual = PerceptualLoss(t['F_feature_layer'], t['F_weights'], t['F_lossfn_type'], t['F_use_input_norm'],
                                t['F_use_range_norm'], t['F_pretrained_path'])
    _close(t['F_lossfn_weight'] * perceptual(batch['pred'], batch['target']), NUMBERS['losses']['perceptual_realesrgan'])
    gan = GANLoss(t['gan_type'])
    _close(t['D_lossfn_weight'] * gan(batch['logits'], True), NUMBERS['losses']['gan_vanilla_g'])
    _close(gan(batch['logits'], True, is_disc=True), NUMBERS['losses']['gan_vanilla_d_real'])


REDUX_NUMBERS = os.path.join(HERE, 'data', 'redux_reference', 'redux_numbers.json')
RGT = os.path.join(ANCHORS, 'traiNNer-redux', 'options', '_templates', 'train', 'RGT', 'RGT_gan.yml')


def test_a_traiNNer_redux_gan_templates_losses_are_traiNNer_reduxs(seeded_vgg19):
    """RGT_gan's losses as traiNNer-redux computes them (tests/data/redux_reference): its MS-SSIM (0.5), perceptual
    (charbonnier, 0.01) and HSLuv (charbonnier, 1.0) losses, weight by weight."""
    with open(REDUX_NUMBERS) as f:
        theirs = json.load(f)['losses']
    torch.manual_seed(52)
    pred, target = torch.rand(2, 3, 64, 64), torch.rand(2, 3, 64, 64)
    target[:, :, :8] = 0.5
    pred[:, :, :4] = 0.5
    pred[:, :, -4:] = 0.0
    target[:, :, -2:] = 0.0
    target[:, :, :, -3:] = 1.0
    opt = read_options(RGT, ['path.pretrain_network_g=null', f'train.losses[1].pretrained_path={seeded_vgg19}'])
    t = opt['train']
    _close(build_loss(t)(pred, target), 0.5 * theirs['mssim'])
    extra = build_extra_losses(t)
    _close(extra['vgg_perceptual'](pred, target), 0.01 * theirs['perceptual_charbonnier'])
    assert abs(float(extra['hsluv'](pred, target)) - theirs['hsluv_charbonnier']) < 1e-6  # float32 sums in another order


def _lrs(path: str, overrides: Sequence[str], iterations: int) -> List[float]:
    """The lr our schedule gives at iterations 1..N for the file with `overrides` (base lr 2e-4)."""
    opt = read_options(path, NO_PRETRAINED + ['train.optim_g.lr=2e-4', *overrides])
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=opt['train']['G_optimizer_lr'])
    scheduler = build_scheduler(optimizer, opt['train'], notes=False)
    out = []
    for _ in range(iterations):
        out.append(optimizer.param_groups[0]['lr'])
        scheduler.step()
    return out


COSINE = ['train.scheduler.periods=[5,5,5]', 'train.scheduler.restart_weights=[1,0.5,0.5]',
          'train.scheduler.eta_min=1e-7']
LR_CASES: Dict[str, Any] = {
    'multistep': (EDSR, ['train.scheduler.milestones=[4,8,8]', 'train.scheduler.gamma=0.5']),
    'multistep_warmup': (EDSR, ['train.scheduler.milestones=[3,8,8]', 'train.scheduler.gamma=0.5',
                                'train.warmup_iter=5']),
    'multistep_restarts': (EDSR, ['train.scheduler.milestones=[3,9]', 'train.scheduler.gamma=0.5',
                                  'train.scheduler.restarts=[0,6]', 'train.scheduler.restart_weights=[1,0.5]']),
    'cosine_restarts': (MSRRESNET, COSINE),
    'cosine_restarts_warmup': (MSRRESNET, COSINE + ['train.warmup_iter=4']),
}


@pytest.mark.parametrize('case', sorted(LR_CASES))
def test_the_learning_rate_at_every_iteration_is_basicsrs(case):
    """BasicSR's MultiStepLR (its MultiStepRestartLR: restarts, and after a warm-up the last warm-up lr, which its
    scheduler goes on multiplying) and CosineAnnealingRestartLR (restarts; a warm-up of the base lr, not of the
    cosine), iteration by iteration."""
    path, overrides = LR_CASES[case]
    theirs = NUMBERS['lr'][case]
    ours = _lrs(path, overrides, len(theirs))
    assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-18)


def test_the_models_and_losses_read_from_the_files_are_basicsrs():
    """What the three files ask for, as this project names it: MSRResNet's L1 and cosine restarts, Real-ESRGAN's GAN
    model with EMA 0.999 and the USM-sharpened targets, BasicVSR's Charbonnier (eps 1e-12) with the flow network
    frozen for 5000 iterations, then at lr x 0.125."""
    msr = read_options(MSRRESNET, NO_PRETRAINED)
    assert (msr['model'], msr['netG']['net_type'], msr['train']['G_lossfn_type'], msr['train']['G_scheduler_type']) == \
        ('plain', 'msrresnet', 'l1', 'CosineAnnealingRestartLR')
    real = read_options(REALESRGAN, NO_PRETRAINED)
    assert real['train']['E_decay'] == 0.999 and real['datasets']['train']['dataset_type'] == 'realesrgan'
    assert (real['datasets']['train']['l1_gt_usm'], real['datasets']['train']['gan_gt_usm']) == (True, False)
    vsr = read_options(BASICVSR, NO_PRETRAINED)
    t = vsr['train']
    assert (t['G_lossfn_type'], t['G_charbonnier_eps'], t['fix_flow'], t['flow_lr_mul']) == \
        ('charbonnier', 1e-12, 5000, 0.125)
