"""Distillation from a teacher (`train.teacher`, models/distill.py): a student distilled from a trained teacher ends
closer to it than trained alone; the teacher sees the student's batch in eval mode, without gradients, under the
step's autocast, in the GAN model too; feature adapters train and resume with the student; a resume with another
teacher file and every wrong option are one line. DDP against one process: tests/test_ddp_equivalence.py."""
import os

import pytest
import torch

from conftest import need_spandrel, run_main, straight_and_resumed, tiny_options, write_options
from models.model_gan import ModelGAN
from models.model_plain import ModelPlain
from models.registry import build_network
from option_rules import option_rules, read_options
from utils.image import imread_uint, list_images, uint2tensor
from utils.options import validate

CPU = torch.device('cpu')
TEACHER_NET = {'net_type': 'dncnn', 'in_nc': 3, 'out_nc': 3, 'nc': 8, 'nb': 3, 'act_mode': 'BR'}  # tiny_options'


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Small networks: one intra-op thread (conftest's `one_thread`)."""


def _teacher(tiny_run, step=8, kind='E'):
    return {'weights': os.path.join(tiny_run.models, f'{step}_{kind}.pth'), 'netG': dict(TEACHER_NET)}


def _student(tmp_path, demo_images, task, **train):
    """tiny_options' run with a smaller student (nc 4, no BatchNorm)."""
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, **train)
    opt['task'] = task
    opt['netG'].update(nc=4, act_mode='R')
    return write_options(str(tmp_path / f'{task}.json'), opt)


def _outputs(netG, weights, inputs):
    net = build_network(netG).eval()
    net.load_state_dict(torch.load(weights, weights_only=True))
    with torch.no_grad():
        return net(inputs)


def _noisy_test_images(demo_images):
    folder = os.path.join(demo_images, 'test')
    g = torch.Generator().manual_seed(0)
    H = torch.stack([uint2tensor(imread_uint(path))[:, :64, :64] for path in list_images(folder)])
    return H + torch.randn(H.shape, generator=g) * 25 / 255


def test_a_student_distilled_from_a_trained_teacher_ends_closer_to_it_than_trained_alone(tmp_path, demo_images):
    """The demo's data, seeds fixed. A tiny teacher (DnCNN nc 16, nb 4) trained 40 iterations; the same student
    (DnCNN nc 8, nb 3, another seed) trained 48 iterations on its L1 loss alone, and with the teacher's L1 loss
    beside it: on the noisy test images the distilled student's outputs are nearer the teacher's (the one trained
    alone, which learns the images on its own, drifts away from the teacher)."""
    constant = dict(E_decay=0, G_scheduler_milestones=[])
    teacher = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=40, checkpoint_save=40, checkpoint_test=40,
                           checkpoint_print=40, G_optimizer_lr=2e-3, **constant)
    teacher['task'] = 'teacher'
    teacher['netG'].update(nc=16, nb=4, act_mode='R')
    res = run_main('main_train', ['--opt', write_options(str(tmp_path / 'teacher.json'), teacher)])
    assert res.returncode == 0, res.stderr[-2000:]
    weights = str(tmp_path / 'exp' / 'teacher' / 'models' / '40_G.pth')
    train = dict(total_iter=48, checkpoint_save=48, checkpoint_test=48, checkpoint_print=48, G_optimizer_lr=5e-3,
                 manual_seed=8, **constant)
    student = {'net_type': 'dncnn', 'in_nc': 3, 'out_nc': 3, 'nc': 8, 'nb': 3, 'act_mode': 'R'}
    runs = {}
    for name, extra in (('alone', {}), ('distilled', {'teacher': {'weights': weights, 'netG': teacher['netG']}})):
        opt = tiny_options(str(tmp_path / 'exp'), demo_images, **train, **extra)
        opt.update(task=name, netG=student)
        res = run_main('main_train', ['--opt', write_options(str(tmp_path / f'{name}.json'), opt)])
        assert res.returncode == 0, res.stderr[-2000:]
        runs[name] = str(tmp_path / 'exp' / name / 'models' / '48_G.pth')
    assert 'l_g_distill' in res.stdout and 'distilled from' in res.stdout
    x = _noisy_test_images(demo_images)
    target = _outputs(teacher['netG'], weights, x)
    distance = {name: (_outputs(student, path, x) - target).abs().mean().item() for name, path in runs.items()}
    assert distance['distilled'] < 0.85 * distance['alone'], \
        f'mean |student - teacher| on the test images: distilled {distance["distilled"]:.5f}, alone ' \
        f'{distance["alone"]:.5f}'


def _model(tmp_path, tiny_run, cls=ModelPlain, opt=None, **train):
    if opt is None:
        opt = tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'), teacher=_teacher(tiny_run), **train)
        opt['netG'].update(nc=4, act_mode='R')
    torch.manual_seed(0)
    return cls(validate(opt, option_rules()), CPU)


def _batch(seed=0, size=24, scale=1):
    g = torch.Generator().manual_seed(seed)
    H = torch.rand(2, 3, size * scale, size * scale, generator=g)
    return {'L': torch.rand(2, 3, size, size, generator=g) if scale > 1 else H.clamp(0, 1), 'H': H}


def test_the_teacher_sees_the_students_batch_in_eval_mode_without_gradients_under_autocast(tmp_path, tiny_run):
    model = _model(tmp_path, tiny_run, amp='bf16', T_features={'model.2': 'model.3'})
    seen = {}

    def record(name):
        def hook(module, inputs, output):
            seen[name] = (inputs[0].detach().clone(), module.training, torch.is_grad_enabled(), output.dtype)
        return hook
    model.net_g.register_forward_hook(record('student'))
    model.distill.net.register_forward_hook(record('teacher'))
    model.distill.net.model[0].register_forward_hook(record('teacher conv'))
    loss = model.backward([_batch()])
    assert torch.equal(seen['student'][0], seen['teacher'][0])
    assert seen['student'][1:3] == (True, True) and seen['teacher'][1:3] == (False, False)
    assert seen['teacher conv'][3] == torch.bfloat16  # the step's autocast dtype
    assert not any(p.requires_grad or p.grad is not None for p in model.distill.net.parameters())
    adapter = model.distill.adapters[0]
    assert (adapter.in_channels, adapter.out_channels) == (4, 8) and adapter.weight.grad is not None
    assert any(adapter.weight is p for g in model.optimizer.param_groups for p in g['params'])
    model.step(1, loss)
    logged = model.log_losses()
    assert {'l_g_pix', 'l_g_distill', 'l_g_distill_feat'} <= set(logged)
    assert logged['G_loss'] == pytest.approx(logged['l_g_pix'] + logged['l_g_distill'] + logged['l_g_distill_feat'])


def test_a_gan_distils_its_generator_from_a_teacher(tmp_path):
    """ModelGAN with a teacher (an SR x4 MSRResNet's weights) and the EMA: the teacher's loss joins G's and is logged."""
    from tests.test_gan import _tiny
    opt = _tiny(tmp_path, str(tmp_path / 'data'))
    torch.manual_seed(1)
    weights = str(tmp_path / 'teacher.pth')
    torch.save(build_network(opt['netG']).state_dict(), weights)
    opt['train'].update(teacher={'weights': weights, 'netG': opt['netG']}, T_lossfn_weight=0.5, E_decay=0.9)
    model = _model(tmp_path, None, ModelGAN, opt)
    before = [p.detach().clone() for p in model.net_g.parameters()]
    loss = model.backward([_batch(size=24, scale=4)])
    model.step(1, loss)
    logged = model.log_losses()
    assert logged['l_g_distill'] > 0 and 'l_g_gan' in logged
    assert all(not torch.equal(a, b) for a, b in zip(before, model.net_g.parameters()))


def test_a_distilled_run_resumed_midway_is_bitwise_identical_and_keeps_its_adapters(tmp_path, tiny_run, demo_images):
    """Output and feature distillation with the EMA: 4 + 4 iterations equal 8 (weights, EMA, optimizer with the
    adapters' moments, schedule, adapters); the checkpoint names the teacher's file and digest, not its weights."""
    from tests.test_resume import _assert_same_run_state
    train = dict(teacher=_teacher(tiny_run), T_features={'model.2': 'model.3', 'model.3': 'model.5'},
                 T_feature_lossfn_type='l1', total_iter=8, checkpoint_save=4, checkpoint_test=8, checkpoint_print=4)
    paths = {task: _student(tmp_path, demo_images, task, **train) for task in ('straight', 'resumed')}
    straight_and_resumed(paths['straight'], paths['resumed'], 4)
    models = tmp_path / 'exp'
    _assert_same_run_state(models / 'straight' / 'models', models / 'resumed' / 'models', 8)
    saved = [torch.load(models / t / 'models' / '8_state.pth', weights_only=True)['model']['distill']
             for t in ('straight', 'resumed')]
    assert saved[0]['adapters'].keys() == saved[1]['adapters'].keys() == {'0.weight', '0.bias', '1.weight', '1.bias'}
    assert all(torch.equal(saved[0]['adapters'][k], saved[1]['adapters'][k]) for k in saved[0]['adapters'])
    first = torch.load(models / 'straight' / 'models' / '4_state.pth', weights_only=True)['model']['distill']
    assert not torch.equal(first['adapters']['0.weight'], saved[0]['adapters']['0.weight'])  # they trained
    assert saved[0]['teacher'] == {'weights': train['teacher']['weights'], 'sha256': saved[0]['teacher']['sha256']}
    assert len(saved[0]['teacher']['sha256']) == 64


def test_a_resume_with_another_teacher_file_is_one_line(tmp_path, tiny_run, demo_images):
    path = _student(tmp_path, demo_images, 'run', teacher=_teacher(tiny_run, 8), total_iter=2, checkpoint_save=2,
                    checkpoint_test=2)
    assert run_main('main_train', ['--opt', path]).returncode == 0
    other = _teacher(tiny_run, 4)
    res = run_main('main_train', ['--opt', path, '--set', 'train.total_iter=4', '--set',
                                  f'train.teacher.weights={other["weights"]}'])
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert (f'resume: the checkpoint was distilled from {_teacher(tiny_run)["weights"]} (sha256 ' in res.stderr
            and f'but train.teacher.weights is {other["weights"]}' in res.stderr and 'another teacher' in res.stderr)


@pytest.mark.parametrize('teacher, train, message', [
    (lambda w: {'netG': TEACHER_NET}, {}, '"act_mode": "BR"}} needs "weights": the path of the teacher\'s trained'),
    (lambda w: {'weights': w, 'netg': TEACHER_NET}, {}, 'has no key "netg" (did you mean "netG"?)'),
    (lambda w: {'weights': w, 'netG': {**TEACHER_NET, 'ncc': 8}}, {},
     'train.teacher: netG.ncc: unknown key (did you mean "nc"?)'),
    (lambda w: {'weights': 'missing.pth', 'netG': TEACHER_NET}, {},
     'train.teacher.weights: missing.pth: checkpoint file not found'),
    (lambda w: {'weights': w, 'netG': {**TEACHER_NET, 'nc': 16}}, {}, 'train.teacher.weights: '),
    (None, {'T_features': {'model.9': 'model.2'}}, 'train.T_features: netG (dncnn) has no module "model.9" (did you '
                                                   'mean "model.4"?); its modules include model, model.0, '),
    (None, {'T_lossfn_weight': 0}, 'train.teacher: nothing to distil: T_lossfn_weight is 0 and T_features is empty'),
    (None, {'T_lossfn_type': 'l3'}, 'train.T_lossfn_type: unknown loss "l3"'),
], ids=['no-weights', 'unknown-key', 'teacher-netG-key', 'missing-file', 'weights-do-not-fit', 'unknown-module',
        'nothing', 'unknown-loss'])
def test_a_wrong_teacher_option_is_one_line_before_anything_is_written(tmp_path, tiny_run, demo_images, teacher, train,
                                                                      message):
    given = _teacher(tiny_run) if teacher is None else teacher(_teacher(tiny_run)['weights'])
    path = _student(tmp_path, demo_images, 'bad', teacher=given, **train)
    res = run_main('main_train', ['--opt', path])
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert message in res.stderr, res.stderr
    assert not (tmp_path / 'exp' / 'bad').exists()


def test_features_that_do_not_fit_their_adapter_are_one_line_at_start_up(tmp_path, tiny_run, demo_images):
    """The start-up check runs a training sample through both networks: a pair whose feature maps do not have the
    channels or the size of its adapter (here an adapter made for 5 channels) stops the run with one line."""
    from data.registry import build_dataset
    from data.sampler import TrainKey
    from torch import nn
    from utils.errors import UserError
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, teacher=_teacher(tiny_run), T_features={'model.2': 'model.3'})
    opt['netG'].update(nc=4, act_mode='R')
    opt = validate(opt, option_rules())
    model = ModelPlain(opt, CPU)
    model.check_sample(build_dataset(opt['datasets']['train'])[TrainKey(0, 0)], 'datasets.train')  # fits
    model.distill.adapters[0] = nn.Conv2d(5, 8, 1)
    with pytest.raises(UserError, match=r'train\.T_features: "model\.2": "model\.3": netG\'s module gives \(4, 24, 24\), '
                                        r'the teacher\'s \(8, 24, 24\) for a sample of datasets\.train; .* \(5 and 8\)'):
        model.check_sample(build_dataset(opt['datasets']['train'])[TrainKey(0, 0)], 'datasets.train')


def test_a_teacher_without_its_netG_section_is_found_from_its_weights(tmp_path):
    """`train.teacher: {"weights": ...}`: the network spandrel recognises there (a tiny NAFNet) is the teacher's
    netG, completed like netG and noted."""
    need_spandrel()
    torch.manual_seed(0)
    netG = {'net_type': 'nafnet', 'width': 8, 'enc_blk_nums': [1, 1], 'middle_blk_num': 1, 'dec_blk_nums': [1, 1]}
    weights = str(tmp_path / 'nafnet.pth')
    torch.save({'params': build_network(netG).state_dict()}, weights)
    raw = {'task': 't', 'path': {'root': str(tmp_path / 'exp')}, 'netG': {'net_type': 'dncnn', 'in_nc': 3, 'out_nc': 3},
           'train': {'teacher': {'weights': weights}}}
    opt = read_options(write_options(str(tmp_path / 'o.json'), raw))
    found = opt['train']['teacher']['netG']
    assert {k: found[k] for k in netG} == netG and found['init_type'] == 'default'
    assert any(n.startswith('train.teacher.netG: net_type "auto": ') and weights in n for n in opt['_notes'])


def test_a_distillation_loss_that_draws_random_directions_draws_those_of_each_iteration(tmp_path, tiny_run):
    """T_lossfn_type may be any loss, ms_swd too: the model tells it the iteration as it tells its own losses, so its
    projections change every iteration, and are the same again for the same iteration (a resume)."""
    model = _model(tmp_path, tiny_run, T_lossfn_type='ms_swd', G_swd_scales=1)
    swd = model.distill.loss.base
    model.end_iteration(1)
    first = swd.directions(CPU).clone()
    model.end_iteration(2)
    assert not torch.equal(first, swd.directions(CPU))
    model.end_iteration(1)
    assert torch.equal(first, swd.directions(CPU))


def test_a_gan_stop_names_a_non_finite_distillation_term(tmp_path):
    """The GAN model's loss slots end with the teacher's terms: a stop on a non-finite one names it."""
    from tests.test_gan import _tiny
    from utils.step_gate import StepGate, non_finite_words
    opt = _tiny(tmp_path, str(tmp_path / 'data'))
    torch.manual_seed(1)
    weights = str(tmp_path / 'teacher.pth')
    torch.save(build_network(opt['netG']).state_dict(), weights)
    opt['train'].update(teacher={'weights': weights, 'netG': opt['netG']}, T_lossfn_weight=0.5)
    model = _model(tmp_path, None, ModelGAN, opt)
    model.backward([_batch(size=24, scale=4)])
    names, terms = model.iteration_losses()
    assert len(names) == len(terms) and names[-1] == 'l_g_distill'
    terms[-1] = float('nan')
    gate = StepGate(CPU, limit=10)
    gate.decide(torch.tensor(False), 1, terms)
    assert non_finite_words(names, gate.take().terms) == 'non-finite loss term l_g_distill'


def test_the_teachers_keys_without_a_teacher_are_one_warning_naming_them(tmp_path, caplog):
    import logging
    caplog.set_level(logging.INFO, logger='restoration')
    opt = tiny_options(str(tmp_path / 'exp'), str(tmp_path / 'data'), T_lossfn_weight=0.5,
                       T_features={'model.2': 'model.3'})
    model = ModelPlain(validate(opt, option_rules()), CPU)
    assert model.distill is None
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        'train.T_lossfn_weight, train.T_features: ignored: train.teacher is null (no teacher to distil from)']
