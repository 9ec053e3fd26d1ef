"""`train.G_param_key` (BasicSR's `path.param_key_g`): which entry of a BasicSR-format weights file (`params`, or
`params_ema`, its EMA weights) `path.pretrained_netG` loads."""
import torch

from models.generator import build_generator
from tests.conftest import train_options


def _opt(path, key):
    from option_rules import option_rules
    from utils.options import validate
    raw = {'task': 't', 'netG': {'net_type': 'dncnn', 'in_nc': 1, 'out_nc': 1, 'nc': 4, 'nb': 2, 'act_mode': 'R'},
           'path': {'pretrained_netG': path}, 'train': {'G_param_key': key}}
    return validate(raw, option_rules())


def test_g_param_key_chooses_the_entry_of_a_basicsr_file(tmp_path):
    from models.registry import NETWORKS
    net = NETWORKS.get('dncnn', 'netG')(in_nc=1, out_nc=1, nc=4, nb=2, act_mode='R')
    plain = {k: torch.zeros_like(v) for k, v in net.state_dict().items()}
    ema = {k: torch.ones_like(v) for k, v in net.state_dict().items()}
    path = str(tmp_path / 'w.pth')
    torch.save({'params': plain, 'params_ema': ema}, path)
    for key, want in (('params', 0.0), ('params_ema', 1.0)):
        built, _ = build_generator(_opt(path, key), torch.device("cpu"), False)
        assert all(float(v.float().mean()) == want for v in built.state_dict().values()), key
    assert train_options()['G_param_key'] == 'params'


def test_param_key_g_of_a_yaml_file_is_g_param_key(tmp_path):
    from option_rules import read_options
    w = tmp_path / 'w.pth'
    w.write_bytes(b'')
    text = (f'name: t\nmodel_type: SRModel\nscale: 2\nnetwork_g:\n  type: EDSR\n  num_feat: 8\n  num_block: 1\n'
            f'  upscale: 2\npath:\n  pretrain_network_g: {w}\n  param_key_g: params_ema\n  strict_load_g: true\n'
            f'train:\n  total_iter: 2\n  optim_g:\n    type: Adam\n    lr: 0.0001\n  pixel_opt:\n    type: L1Loss\n'
            f'    loss_weight: 1.0\n')
    (tmp_path / 'o.yml').write_text(text)
    assert read_options(str(tmp_path / 'o.yml'))['train']['G_param_key'] == 'params_ema'
