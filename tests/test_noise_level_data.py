"""Denoising with the noise level as an input: KAIR's `ffdnet` and `fdncnn` datasets and model `plain2`."""
import pytest
import torch
from torch import nn

from conftest import dataset_options, tiny_options
from data.datasets.noise_level import DatasetFDnCNN, DatasetFFDNet
from models.model_plain2 import ModelPlain2
from models.registry import NETWORKS
from option_rules import option_rules
from utils.errors import UserError
from utils.image import to_float_image
from utils.options import validate


def _ffdnet(demo_images, phase='train', **kw):
    folder = f'{demo_images}/{"train" if phase == "train" else "test"}'
    return DatasetFFDNet(dataset_options('ffdnet', phase, dataroot_H=folder, H_size=32, **kw))


def test_a_training_sample_draws_its_noise_level_from_the_range_and_its_seed(demo_images):
    ds = _ffdnet(demo_images, sigma=[10, 50])
    a, b, c = ds[(3, 7)], ds[(3, 7)], ds[(3, 8)]
    assert a['C'].shape == (1, 1, 1) and 10 / 255 <= a['C'].item() <= 50 / 255
    assert torch.equal(a['L'], b['L']) and torch.equal(a['C'], b['C'])
    assert not torch.equal(a['C'], c['C'])
    levels = [ds[(0, s)]['C'].item() * 255 for s in range(200)]
    assert min(levels) < 15 and max(levels) > 45
    noise = (a['L'] - to_float_image(a['H'])).std().item()  # H stays uint8: its float copy
    assert noise == pytest.approx(a['C'].item(), rel=0.1)


def test_evaluation_uses_sigma_test_with_noise_fixed_per_image(demo_images):
    ds = _ffdnet(demo_images, 'test', sigma_test=15)
    x, y = ds[2], ds[2]
    assert x['C'].item() == pytest.approx(15 / 255) and torch.equal(x['L'], y['L'])
    assert (x['L'] - to_float_image(x['H'])).std().item() == pytest.approx(15 / 255, rel=0.05)


def test_fdncnn_appends_the_noise_level_map_as_the_last_input_channel(demo_images):
    ds = DatasetFDnCNN(dataset_options('fdncnn', 'test', dataroot_H=f'{demo_images}/test', n_channels=1,
                                       sigma_test=25))
    item = ds[0]
    assert item['H'].shape[0] == 1 and item['L'].shape[0] == 2 and 'C' not in item
    assert torch.all(item['L'][1] == 25 / 255)


@pytest.mark.parametrize('key, value, message', [
    ('sigma', [50, 10], 'sigma: [50, 10] must be [min, max] with 0 <= min <= max'),
    ('sigma', [5], 'sigma: [5] must be [min, max]'),
    ('sigma_test', -1, 'sigma_test: -1 must be >= 0'),
])
def test_impossible_noise_levels_are_one_line_errors_naming_the_key(demo_images, key, value, message):
    with pytest.raises(UserError) as e:
        dataset_options('ffdnet', dataroot_H=f'{demo_images}/train', **{key: value})
    assert str(e.value).startswith(f'<options>: datasets.train.{message}') and '\n' not in str(e.value)


@NETWORKS.register('test_level_net')
class LevelNet(nn.Module):
    """Adds a learned multiple of the noise level: enough to see that C reaches the network."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        return x + self.w * sigma


def test_plain2_feeds_L_and_C_to_the_network_in_training_and_validation(tmp_path, demo_images):
    raw = tiny_options(str(tmp_path), demo_images, E_decay=0.0)
    raw['model'] = 'plain2'
    raw['netG'] = {'net_type': 'test_level_net'}
    for phase, section in raw['datasets'].items():
        section.update(dataset_type='ffdnet', H_size=24)
        section.pop('sigma', None)
    opt = validate(raw, option_rules())
    model = ModelPlain2(opt, torch.device('cpu'))
    batch = {'L': torch.zeros(2, 3, 8, 8), 'H': torch.ones(2, 3, 8, 8), 'C': torch.full((2, 1, 1, 1), 0.5)}
    loss = model.backward([batch])
    model.step(1, loss)
    assert model.net_g.w.grad is not None and model.net_g.w.item() != 0
    (name, E, H), = model.restorer.restore({'L': torch.zeros(1, 3, 8, 8), 'H': torch.zeros(1, 3, 8, 8),
                                            'C': torch.full((1, 1, 1, 1), 1.0), 'L_path': ['a.png']})
    assert name == 'a' and E[0].shape == (8, 8, 3)


def test_dpsr_adds_noise_to_the_bicubic_low_resolution_image_and_appends_its_level_map(demo_images):
    from data.datasets.image import DatasetSR
    from data.datasets.noise_level import DatasetDPSR
    common = dict(dataroot_H=f'{demo_images}/test', scale=4)
    noisy = DatasetDPSR(dataset_options('dpsr', 'test', sigma_test=10, **common))[3]
    clean = DatasetSR(dataset_options('sr', 'test', **common))[3]
    assert noisy['L'].shape == (4, 32, 32) and torch.equal(noisy['H'], clean['H'])
    assert torch.all(noisy['L'][3] == 10 / 255)
    assert (noisy['L'][:3] - clean['L']).std().item() == pytest.approx(10 / 255, rel=0.1)
    train = DatasetDPSR(dataset_options('dpsr', dataroot_H=f'{demo_images}/train', scale=4, H_size=32,
                                        sigma=[5, 40]))
    a, b = train[(1, 4)], train[(1, 4)]
    assert torch.equal(a['L'], b['L']) and a['L'].shape == (4, 8, 8) and 5 / 255 <= a['L'][3, 0, 0] <= 40 / 255
