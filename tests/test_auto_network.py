"""`netG.net_type: "auto"`: the network is read from path.pretrained_netG (spandrel's detection) and
replaced by its explicit netG block before validation; then the run is like any other."""
import json
import re

import pytest
import torch

from conftest import clean_env, need_spandrel, run_main, tiny_options, write_options
from option_rules import read_options
from models.registry import build_network
from utils.errors import OptionsError

# Checkpoints of tiny networks of several families, each with the netG it was built from.
FAMILIES = {
    'span': {'num_in_ch': 3, 'num_out_ch': 3, 'feature_channels': 8, 'upscale': 4},
    'srvggnet': {'num_in_ch': 3, 'num_out_ch': 3, 'num_feat': 8, 'num_conv': 2, 'upscale': 4, 'act_type': 'prelu'},
    'plksr': {'dim': 16, 'n_blocks': 2, 'kernel_size': 7, 'upscaling_factor': 4, 'use_ea': True},
    'realplksr': {'dim': 16, 'n_blocks': 2, 'kernel_size': 7, 'upscaling_factor': 4, 'layer_norm': True},
    'nafnet': {'width': 8, 'enc_blk_nums': [1, 1], 'middle_blk_num': 1, 'dec_blk_nums': [1, 1]},
    'hat': {'upscale': 4, 'embed_dim': 16, 'depths': [1], 'num_heads': [2], 'window_size': 4, 'compress_ratio': 4,
            'squeeze_factor': 4, 'num_feat': 16},
    'esrgan': {'num_in_ch': 3, 'num_out_ch': 3, 'scale': 2, 'num_feat': 8, 'num_block': 1, 'num_grow_ch': 32},
    'rrdbnet': {'in_nc': 3, 'out_nc': 3, 'nf': 8, 'nb': 1, 'gc': 32, 'upscale': 4},
    'fdat': {'scale': 4, 'embed_dim': 16, 'num_groups': 1, 'depth_per_group': 1, 'num_heads': 2, 'window_size': 4,
             'mid_dim': 16},
    'realcugan': {'scale': 3, 'pro': True},  # one spandrel class per factor: the factor is detected too
    'swiftsrgan': {'num_channels': 8, 'num_blocks': 2, 'upscale_factor': 4},
    'kbnet_s': {'width': 8, 'middle_blk_num': 1, 'enc_blk_nums': [1, 1], 'dec_blk_nums': [1, 1], 'lightweight': True,
                'ffn_scale': 1.5},
    'kbnet_l': {'dim': 24, 'num_blocks': [1, 1, 1, 1], 'num_refinement_blocks': 1, 'heads': [1, 2, 4, 8]},
    'retinexformer': {'n_feat': 8, 'stage': 1, 'num_blocks': [1, 1, 1]},
    'mixdehazenet': {'embed_dims': [8, 16, 32, 16, 8], 'depths': [1, 1, 1, 1, 1]},
    'hvicidnet': {'channels': [8, 8, 16, 32], 'heads': [1, 1, 2, 4]},
}
SIDE = {'mixdehazenet': 48}  # its widest mirrored padding needs inputs of 40 pixels or more
SCALE = {'nafnet': 1, 'esrgan': 2, 'realcugan': 3, 'kbnet_s': 1, 'kbnet_l': 1, 'retinexformer': 1, 'mixdehazenet': 1,
         'hvicidnet': 1}


def checkpoint(tmp_path, net_type, wrap='params'):
    torch.manual_seed(0)
    net = build_network({'net_type': net_type, **FAMILIES[net_type]})
    path = str(tmp_path / f'{net_type}.pth')
    torch.save({wrap: net.state_dict()} if wrap else net.state_dict(), path)
    return net, path


def auto_options(tmp_path, pretrained, scale=4, name='auto', **netG):
    raw = {'task': 't', 'scale': scale, 'path': {'root': str(tmp_path / 'exp'), 'pretrained_netG': pretrained},
           'netG': {'net_type': 'auto', **netG}}
    return write_options(str(tmp_path / f'{name}.json'), raw)


@pytest.mark.parametrize('net_type', sorted(FAMILIES))
def test_auto_becomes_the_explicit_netG_of_the_checkpoints_network_and_its_weights_load_strictly(tmp_path, net_type):
    need_spandrel()
    net, path = checkpoint(tmp_path, net_type, wrap='params' if net_type != 'rrdbnet' else None)
    opt = read_options(auto_options(tmp_path, path, SCALE.get(net_type, 4), init_type='default'))
    netG = opt['netG']
    assert netG['net_type'] == net_type and netG['init_type'] == 'default'
    assert {k: netG[k] for k in FAMILIES[net_type]} == FAMILIES[net_type]
    note = [n for n in opt['_notes'] if n.startswith('netG: net_type "auto"')]
    assert len(note) == 1 and path in note[0]
    assert json.loads(note[0].split('the equivalent netG is ', 1)[1])['net_type'] == net_type
    rebuilt = build_network(netG)
    rebuilt.load_state_dict(torch.load(path)['params'] if net_type != 'rrdbnet' else torch.load(path), strict=True)
    x = torch.rand(2, 3, SIDE.get(net_type, 16), SIDE.get(net_type, 16))
    torch.testing.assert_close(rebuilt.eval()(x), net.eval()(x))


def test_auto_errors_are_one_line_naming_the_option_file(tmp_path):
    need_spandrel()
    _, path = checkpoint(tmp_path, 'span')
    cases = [
        (auto_options(tmp_path, None, name='unset'), r'netG\.net_type: "auto" reads the architecture from path\.pretrained_netG, '
                                       r'which is not set$'),
        (auto_options(tmp_path, str(tmp_path / 'missing.pth'), name='missing'), r'path\.pretrained_netG: .*missing\.pth: checkpoint '
                                                                 r'file not found$'),
        (auto_options(tmp_path, path, name='extra', feature_channels=8), r'netG\.feature_channels: with net_type "auto" the '
                                                           r'network\'s keys come from path\.pretrained_netG'),
    ]
    torch.save({'params': {'foo.weight': torch.zeros(3, 3)}}, str(tmp_path / 'odd.pth'))
    cases.append((auto_options(tmp_path, str(tmp_path / 'odd.pth')),
                  r'path\.pretrained_netG: .*odd\.pth: spandrel does not recognise this architecture'))
    for opt_path, message in cases:
        with pytest.raises(OptionsError) as e:
            read_options(opt_path)
        text = str(e.value)
        assert '\n' not in text and text.startswith(opt_path + ': ') and re.search(message, text), text


def test_a_detected_scale_that_contradicts_the_top_level_scale_is_an_options_error(tmp_path):
    need_spandrel()
    _, path = checkpoint(tmp_path, 'span')
    with pytest.raises(OptionsError, match=r'netG\.upscale: 4 differs from the top-level "scale": 2'):
        read_options(auto_options(tmp_path, path, scale=2))


FINE_TUNED = ['srvggnet', 'span', 'plksr', 'realplksr', 'hat']  # x4 families; srvggnet runs locally, all in CI


@pytest.mark.parametrize('net_type', [pytest.param(n, marks=[pytest.mark.slow] if n != 'srvggnet' else [])
                                      for n in FINE_TUNED])
def test_auto_fine_tunes_from_a_checkpoint_like_any_network(tmp_path, demo_images, net_type):
    """main_train with net_type auto: the note is logged, the weights load, training runs and saves, and what
    it saves is the checkpoint moved by 4 small steps (not a network trained from scratch)."""
    need_spandrel()
    _, path = checkpoint(tmp_path, net_type)
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=4, checkpoint_test=4, checkpoint_save=4,
                       G_optimizer_lr=1e-4)
    opt.update(scale=4, netG={'net_type': 'auto'})
    opt['path']['pretrained_netG'] = path
    for phase in ('train', 'test'):
        opt['datasets'][phase].update(dataset_type='sr')
        for key in ('sigma', 'sigma_test'):
            opt['datasets'][phase].pop(key, None)
    opt['datasets']['train']['H_size'] = 32
    opt['logging']['use_tensorboard'] = False
    res = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o.json'), opt)],
                   env=clean_env(OMP_NUM_THREADS='1'))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'net_type "auto"' in res.stdout and f'"net_type": "{net_type}"' in res.stdout, res.stdout[-3000:]
    netG = {'net_type': net_type, **FAMILIES[net_type]}
    torch.manual_seed(1)
    fresh = build_network(netG).eval()  # where training from scratch would have started
    net = build_network(netG).eval()
    x = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        net.load_state_dict(torch.load(path)['params'])
        start = net(x)
        net.load_state_dict(torch.load(tmp_path / 'exp' / 'tiny' / 'models' / '4_G.pth'))
        tuned = net(x)
        moved, from_fresh = (tuned - start).abs().mean().item(), (tuned - fresh(x)).abs().mean().item()
    assert 0 < moved < 0.4 * from_fresh, (moved, from_fresh)  # measured: 0.02 to 0.17
