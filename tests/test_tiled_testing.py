"""Testing large images in tiles and with the x8 self-ensemble (`val.tile`, `val.tile_overlap`, `val.self_ensemble`)."""
import csv

import pytest
import torch
from torch import nn

from conftest import run_main, tiny_options
from option_rules import option_rules
from models.restorer import ConditionedRestorer, ImageRestorer
from models.video_restorer import VideoRestorer
from utils.errors import UserError
from utils.options import validate

pytestmark = pytest.mark.usefixtures('one_thread')
CPU = torch.device('cpu')


class PointwiseSR(nn.Module):
    """Each output pixel depends on one input pixel: tiles must reproduce the whole-image result."""

    def __init__(self, scale: int = 2):
        super().__init__()
        self.body = nn.Conv2d(3, 3 * scale * scale, 1)
        self.up = nn.PixelShuffle(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(self.body(x))


def _restorer(net, **kw):
    torch.manual_seed(0)
    return ImageRestorer(net, CPU, metric_border=0, **kw)


@pytest.mark.parametrize('size', [(37, 53), (16, 16), (64, 40)])
def test_tiles_reassemble_the_whole_image_result_at_any_size_and_scale(size):
    torch.manual_seed(0)
    net = PointwiseSR(2)
    L = torch.rand(2, 3, *size)
    whole = _restorer(net).test(L)
    tiled = _restorer(net, tile=16, tile_overlap=6).test(L)
    assert tiled.shape == (2, 3, size[0] * 2, size[1] * 2)
    assert torch.allclose(tiled, whole, atol=1e-6)


def test_a_convolutional_network_in_tiles_differs_only_near_the_seams():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 3, 3, padding=1))
    L = torch.rand(1, 3, 48, 48)
    whole = _restorer(net).test(L)
    tiled = _restorer(net, tile=32, tile_overlap=16).test(L)
    diff = (tiled - whole).abs()
    assert diff[..., :14, :14].max() < 1e-6    # covered by one tile only, away from its inner edge
    assert diff.mean() < 0.02


def test_the_x8_self_ensemble_averages_the_eight_flips_and_rotations():
    torch.manual_seed(0)
    net = nn.Conv2d(3, 3, 3, padding=1)   # not rotation-equivariant: every transform gives another output
    L = torch.rand(1, 3, 20, 24)
    got = _restorer(net, self_ensemble=True).test(L)
    expected = []
    with torch.no_grad():
        for k in range(4):
            for flip in (False, True):
                x = torch.rot90(L, k, (-2, -1))
                x = x.flip(-1) if flip else x
                y = net(x)
                y = y.flip(-1) if flip else y
                expected.append(torch.rot90(y, -k, (-2, -1)))
    assert torch.allclose(got, torch.stack(expected).mean(0), atol=1e-6)
    assert not torch.allclose(got, _restorer(net).test(L), atol=1e-3)


def test_tiles_and_ensemble_pass_the_second_input_of_plain2_networks_unchanged():
    class LevelShift(nn.Module):
        def forward(self, x, sigma):
            return x + sigma
    L, C = torch.rand(1, 3, 40, 40), torch.full((1, 1, 1, 1), 0.25)
    out = ConditionedRestorer(LevelShift(), CPU, 0, tile=16, tile_overlap=4, self_ensemble=True).test(L, C)
    assert torch.allclose(out, L + 0.25, atol=1e-6)


def test_an_overlap_as_large_as_the_tile_is_a_one_line_error():
    with pytest.raises(UserError, match=r'^val\.tile_overlap: 32 must be smaller than val\.tile 32$'):
        ImageRestorer(nn.Identity(), CPU, 0, tile=32, tile_overlap=32)


def test_video_models_refuse_the_image_tiling_options(tmp_path):
    raw = tiny_options(str(tmp_path), str(tmp_path / 'data'))
    raw['val'] = {'tile': 64}
    opt = validate(raw, option_rules())
    with pytest.raises(UserError, match=r'^val\.tile: image testing only; video models test in tiles with '
                                        r'val\.size_patch_testing'):
        VideoRestorer.from_options(nn.Identity(), opt, CPU)


@pytest.mark.slow  # ~15-25 s; runs in CI (CI=true) and with RUN_SLOW=1
def test_main_test_restores_in_tiles_and_with_the_ensemble_as_the_options_ask(tmp_path, tiny_run):
    opt = tiny_run.opt_path
    scores = {}
    for name, sets in (('whole', []), ('tiled', ['val.tile=48', 'val.tile_overlap=16']),
                       ('tiled_x8', ['val.tile=48', 'val.tile_overlap=16', 'val.self_ensemble=true'])):
        res = run_main('main_test', ['--opt', opt, '--out', str(tmp_path / name), '--no-images']
                       + [a for s in sets for a in ('--set', s)])
        assert res.returncode == 0, res.stderr[-2000:]
        with open(tmp_path / name / 'results.csv') as f:
            scores[name] = float(list(csv.reader(f))[-1][1])
    # a barely trained 3-layer DnCNN: tiles differ from the whole image within 3 pixels of their edges only
    assert 0 < abs(scores['tiled'] - scores['whole']) < 0.5, scores
    assert scores['tiled_x8'] != scores['tiled'], scores  # the ensemble reached the restorer
