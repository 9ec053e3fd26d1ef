"""The architectures spandrel builds (models/networks/spandrel.py): one net_type each, netG keys checked
against the constructor's signature, spandrel imported only when one of them is used."""
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, clean_env, family, need_spandrel, run_main, tiny_options, write_options
from models.registry import build_network
from option_rules import option_rules
from spandrel_tiny import SAME_SIZE, TINY
from utils.errors import OptionsError, UserError
from utils.options import validate


def spandrel_net_types():
    from models.networks.spandrel import ARCHITECTURES
    return [a.net_type for a in ARCHITECTURES]


def test_importing_models_and_listing_every_network_does_not_import_spandrel():
    code = ('import sys; from models.registry import NETWORKS; names = NETWORKS.names(); '
            'assert "hat" in names and "realplksr" in names, names; '
            'assert not any(m.split(".")[0] == "spandrel" for m in sys.modules), "spandrel imported"')
    res = subprocess.run([sys.executable, '-c', code], cwd=ROOT, env=clean_env(), capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


def test_every_spandrel_net_type_has_a_tiny_configuration_here():
    assert set(spandrel_net_types()) == set(TINY)
    assert set(LOCAL) <= set(TINY)


# Locally the seven net_types of the first spandrel change (window attention: HAT, DAT; convolutions: SPAN, PLKSR,
# RealPLKSR, SRVGGNet; a U-Net: NAFNet); the other 24 run in CI and with RUN_SLOW=1 (up to 15 s each on 2 cores).
LOCAL = ('hat', 'dat', 'span', 'plksr', 'realplksr', 'srvggnet', 'nafnet')


@pytest.mark.parametrize('net_type', family(sorted(TINY), LOCAL))
def test_a_tiny_spandrel_network_validates_builds_and_trains_a_step(net_type):
    need_spandrel()
    kwargs, side = TINY[net_type]
    scale = 1 if net_type in SAME_SIZE else 4
    opt = validate({'task': 't', 'scale': scale, 'netG': {'net_type': net_type, **kwargs}}, option_rules())
    torch.manual_seed(0)
    net = build_network(opt['netG'])
    x = torch.rand(2, 3, side, side)  # 2: BatchNorm layers (DAT) need more than one value per channel
    y = net(x)
    assert y.shape == (2, 3, side * scale, side * scale)
    y.mean().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())
    assert all(p.numel() for p in net.parameters())  # the trainer refuses empty parameters


@pytest.mark.parametrize('net_type, key', [('span', 'upscale'), ('plksr', 'upscaling_factor'),
                                           ('realplksr', 'upscaling_factor'), ('safmn', 'upscaling_factor'),
                                           ('omnisr', 'up_scale'), ('moesr', 'scale'), ('seemore', 'scale'),
                                           ('esrgan', 'scale'), ('swiftsrgan', 'upscale_factor'), ('fdat', 'scale'),
                                           ('realcugan', 'scale')])
def test_every_name_of_the_sr_factor_inherits_the_top_level_scale_and_a_contradiction_is_one_line(net_type, key):
    """SwinIR says `upscale`, PLKSR `upscaling_factor`, Omni-SR `up_scale`, MoESR `scale`: whatever the name,
    the network works at the datasets' scale, as KAIR's `upscale` does."""
    need_spandrel()
    kwargs = {k: v for k, v in (TINY[net_type][0] if net_type in TINY else {}).items() if k != key}
    opt = validate({'task': 't', 'scale': 2, 'netG': {'net_type': net_type, **kwargs}}, option_rules())
    assert opt['netG'][key] == 2
    with pytest.raises(OptionsError, match=rf'netG\.{key}: 3 differs from the top-level "scale": 2; .*'
                                           rf'leave netG\.{key} out to inherit it'):
        validate({'task': 't', 'scale': 2, 'netG': {'net_type': net_type, **kwargs, key: 3}}, option_rules())
    if net_type in TINY:
        x = torch.rand(1, 3, TINY[net_type][1], TINY[net_type][1])
        assert build_network(opt['netG'])(x).shape[-1] == 2 * x.shape[-1]


def test_an_unknown_netG_key_of_a_spandrel_network_is_one_line_with_did_you_mean():
    need_spandrel()
    with pytest.raises(OptionsError) as e:
        validate({'task': 't', 'scale': 4, 'netG': {'net_type': 'hat', 'embed_dims': 16}}, option_rules())
    assert str(e.value) == '<options>: netG.embed_dims: unknown key (did you mean "embed_dim"?)'


def test_an_unknown_key_exits_2_with_one_line(tmp_path):
    """Through main_train.py: exit status 2, one error line, nothing else printed on stderr."""
    need_spandrel()
    import json
    path = tmp_path / 'o.json'
    path.write_text(json.dumps({'task': 't', 'scale': 4, 'path': {'root': str(tmp_path / 'exp')},
                                'netG': {'net_type': 'srvggnet', 'num_feats': 8}}))
    res = subprocess.run([sys.executable, 'main_train.py', '--opt', str(path)], cwd=ROOT, env=clean_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and 'netG.num_feats: unknown key (did you mean "num_feat"?)' in lines[0], res.stderr


def test_options_that_spandrel_refuses_are_one_user_error():
    need_spandrel()
    with pytest.raises(UserError, match=r'^netG \(realplksr\): in_ch and out_ch must be 3'):
        build_network({'net_type': 'realplksr', 'in_ch': 1})
    with pytest.raises(UserError, match=r'^netG\.upsampler: realplksr takes'):
        build_network({'net_type': 'realplksr', 'upsampler': 'nearest'})


def test_real_cugan_builds_the_class_of_its_factor_and_another_factor_is_one_line(tmp_path, demo_images):
    """spandrel has one Real-CUGAN class per factor; a run without a top-level scale (1) stops at start-up."""
    need_spandrel()
    for scale in (2, 3, 4):
        opt = validate({'task': 't', 'scale': scale, 'netG': {'net_type': 'realcugan'}}, option_rules())
        assert type(build_network(opt['netG'])).__name__ == f'UpCunet{scale}x'
    opt = tiny_options(str(tmp_path / 'exp'), demo_images)
    opt['netG'] = {'net_type': 'realcugan'}
    res = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o.json'), opt)])
    assert res.returncode == 2 and res.stderr.count('\n') == 1, res.stderr[-2000:]
    assert 'netG.scale: realcugan upscales by 2, 3 or 4, got 1 (set the top-level "scale")' in res.stderr
    assert not (tmp_path / 'exp').exists()


def test_without_spandrel_a_spandrel_net_type_is_one_line_naming_the_requirement(monkeypatch):
    monkeypatch.setitem(sys.modules, 'spandrel.architectures.SPAN', None)
    with pytest.raises(OptionsError, match=r'netG\.net_type: "span" is built by spandrel, which is not installed '
                                           r'here .*pip install spandrel==0\.4\.2$'):
        validate({'task': 't', 'scale': 4, 'netG': {'net_type': 'span'}}, option_rules())
