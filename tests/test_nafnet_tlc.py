"""NAFNet's test-time local converter (`netG.tlc`): in evaluation, every SCA global average becomes the local
average of the official NAFNetLocal (the released GoPro/REDS models); in training, nothing changes.

The reference below is written from NAFNetLocal's definition, independently of models/networks/layers/tlc.py:
each pool's window is fixed by a forward of a training-size input (its input's size there x int(1.5 · train)
// train), an input no larger than the window on both sides is averaged globally, and otherwise every
window lying inside the input is averaged (explicit loops, float64) and the map is padded back by repeating
its edge rows and columns (the extra one on the right/bottom). Networks have random weights (NAFNet's own
init makes every block an identity: beta = gamma = 0) and run in float64.
"""
import glob
import os

import pytest
import torch

from conftest import ROOT, need_spandrel
from models.registry import build_network, build_on_meta
from option_rules import read_options
from utils.errors import UserError

TINY = {'net_type': 'nafnet', 'width': 4, 'enc_blk_nums': [1, 1], 'middle_blk_num': 1, 'dec_blk_nums': [1, 1]}
GOPRO_DEPTH = {'net_type': 'nafnet', 'width': 4, 'enc_blk_nums': [1, 1, 1, 1], 'middle_blk_num': 1,
               'dec_blk_nums': [1, 1, 1, 1]}  # the GoPro model's four levels (padding to 16), narrow


@pytest.fixture(autouse=True)
def _spandrel():
    need_spandrel()


def _random(net):
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.3)
    return net


def _pair(netG, tlc):
    """(plain NAFNet, the same weights with `tlc`), float64."""
    plain = _random(build_network(netG).double())
    local = build_network({**netG, 'tlc': tlc}).double()
    local.load_state_dict(plain.state_dict())
    return plain, local


def _sca_pools(net):
    return [block.sca[0] for block in net.modules() if hasattr(block, 'sca')]


def _reference_pool(x, kernel):
    """NAFNetLocal's pooling from its definition, by explicit loops."""
    n, c, h, w = x.shape
    kh, kw = kernel
    if kh >= h and kw >= w:
        return x.mean(dim=(2, 3), keepdim=True)
    k1, k2 = min(h, kh), min(w, kw)
    rows, cols = h - k1 + 1, w - k2 + 1
    inner = torch.empty(n, c, rows, cols, dtype=x.dtype)
    for i in range(rows):
        for j in range(cols):
            inner[:, :, i, j] = x[:, :, i:i + k1, j:j + k2].mean(dim=(2, 3))
    top, left = (h - rows) // 2, (w - cols) // 2
    out = torch.empty_like(x)
    for i in range(h):
        for j in range(w):
            out[:, :, i, j] = inner[:, :, min(max(i - top, 0), rows - 1), min(max(j - left, 0), cols - 1)]
    return out


def _reference(plain, train_hw, x):
    """The official NAFNetLocal forward of `plain`'s weights: windows fixed by a training-size forward, then
    every SCA pool replaced by `_reference_pool`."""
    pools = [m for m in plain.modules() if isinstance(m, torch.nn.AdaptiveAvgPool2d)]
    seen = {}

    def record(module, inputs, output):
        seen[module] = inputs[0].shape[-2:]  # returns None: the output stays
    hooks = [p.register_forward_hook(record) for p in pools]
    with torch.no_grad():
        plain.eval()(torch.zeros(1, 3, *train_hw, dtype=torch.float64))
    for h in hooks:
        h.remove()
    base = [int(1.5 * s) for s in train_hw]
    kernels = {p: [seen[p][k] * base[k] // train_hw[k] for k in range(2)] for p in pools}
    hooks = [p.register_forward_hook(lambda m, inp, out: _reference_pool(inp[0], kernels[m])) for p in pools]
    try:
        with torch.no_grad():
            return plain(x)
    finally:
        for h in hooks:
            h.remove()


@pytest.mark.parametrize('hw', [(16, 40), (20, 100), (61, 70)], ids=['below', 'one-side-above', 'both-above'])
def test_tlc_equals_the_official_local_forward_below_and_above_the_switch_size(hw):
    """Trained on 32x32 crops: windows 48, 24 and 12 at the three levels; 16x40 fits every window (global
    pooling, as plain NAFNet), 20x100 exceeds the first level's in width only, 61x70 (padded to 64x72) every
    level's in both directions."""
    plain, local = _pair(TINY, [32, 32])
    x = torch.rand(2, 3, *hw, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ours = local.eval()(x)
    torch.testing.assert_close(ours, _reference(plain, (32, 32), x), rtol=1e-10, atol=1e-10)
    with torch.no_grad():
        differs = (ours - plain.eval()(x)).abs().max().item()
    assert (differs == 0) if hw == (16, 40) else (differs > 1e-3)


@pytest.mark.parametrize('hw', [(32, 384), (32, 400)], ids=['384-global', '400-local'])
def test_tlc_true_is_the_released_gopro_models_converter_which_switches_above_384_px(hw):
    """`tlc: true` is NAFNetLocal's default training size, 256x256: windows 384, 192, 96, 48, 24; a 32x400 input
    (the issue's case) is pooled locally at the first level, a 32x384 one is not."""
    plain, local = _pair(GOPRO_DEPTH, True)
    assert [p.kernel for p in _sca_pools(local)] == [(384, 384), (192, 192), (96, 96), (48, 48), (48, 48),
                                                     (96, 96), (192, 192), (384, 384), (24, 24)]
    x = torch.rand(1, 3, *hw, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    ours = local.eval()(x)
    torch.testing.assert_close(ours, _reference(plain, (256, 256), x), rtol=1e-10, atol=1e-10)
    with torch.no_grad():
        assert torch.equal(ours, plain.eval()(x)) == (hw == (32, 384))


def test_training_pools_globally_and_the_state_dict_is_nafnets():
    plain, local = _pair(TINY, [32, 32])
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert torch.equal(local.train()(x), plain.train()(x))  # a 64-px crop: local in evaluation, not here
    assert not torch.equal(local.eval()(x), plain.eval()(x))
    assert list(local.state_dict()) == list(plain.state_dict())


def test_the_released_gopro_table_is_built_with_tlc_on_the_meta_device():
    """NAFNetLocal has NAFNet's state_dict (tests/data/archs/nafnet__GoPro-width64.tsv): released weights load."""
    from test_arch_tables import read_table
    n_entries, n_params, kwargs, entries = read_table('nafnet__GoPro-width64.tsv')
    net = build_on_meta({'net_type': 'nafnet', **kwargs, 'tlc': True})
    assert sorted((k, str(tuple(v.shape))) for k, v in net.state_dict().items()) == sorted(e[:2] for e in entries)
    assert sum(p.numel() for p in net.parameters()) == n_params and len(_sca_pools(net)) == 36  # 31 encoder, 1 middle, 4 decoder blocks


@pytest.mark.parametrize('tlc', ['yes', [256], [0, 256], 1])
def test_a_tlc_value_of_another_kind_is_one_line(tlc):
    with pytest.raises(UserError, match=r'^netG\.tlc: must be false, true \(training crops of 256x256, as the '
                                        r'released GoPro/REDS models\) or the training crop size \[H, W\], got'):
        build_network({**TINY, 'tlc': tlc})


def test_the_gopro_and_reds_files_evaluate_with_tlc_and_the_sidd_file_without():
    """NAFNet's official GoPro/REDS files build NAFNetLocal (TLC); SIDD's builds NAFNet (its crops, 256 px,
    are whole test images there)."""
    files = {os.path.basename(p): read_options(p) for p in
             glob.glob(os.path.join(ROOT, 'options', 'archs', 'train_nafnet_*.json'))}
    assert {'train_nafnet_gopro.json', 'train_nafnet_reds.json', 'train_nafnet_sidd.json'} <= set(files)
    for name in ('train_nafnet_gopro.json', 'train_nafnet_reds.json'):
        netG = files[name]['netG']
        assert netG['tlc'] is True and (netG['width'], netG['enc_blk_nums'], netG['middle_blk_num'],
                                        netG['dec_blk_nums']) == (64, [1, 1, 1, 28], 1, [1, 1, 1, 1]), name
        assert files[name]['datasets']['train']['H_size'] == 256  # the training size tlc: true stands for
    assert files['train_nafnet_sidd.json']['netG']['tlc'] is None
