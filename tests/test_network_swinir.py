"""SwinIR: the output of every head, padding of odd sizes, shifted-window masks, input normalisation,
checkpoint round-trip and option errors, on tiny configurations.

The full-size KAIR configurations are checked name for name by tests/test_kair_networks.py.
"""
import pytest
import torch
import torch.nn.functional as F

from models.networks.swinir import (RGB_MEAN, SwinIR, SwinTransformerBlock, relative_position_index,
                                   shifted_window_mask, window_partition, window_reverse)
from models.registry import build_network
from utils.errors import UserError


pytestmark = pytest.mark.usefixtures('one_thread')


def tiny(**overrides) -> SwinIR:
    kw = dict(upscale=1, in_chans=3, img_size=16, window_size=4, img_range=1., depths=[2, 2], embed_dim=12,
              num_heads=[2, 2], mlp_ratio=2, upsampler=None, resi_connection='1conv')
    kw.update(overrides)
    torch.manual_seed(0)
    return SwinIR(**kw).eval()


def zero_(conv: torch.nn.Conv2d) -> None:
    torch.nn.init.zeros_(conv.weight)
    torch.nn.init.zeros_(conv.bias)


def test_registered_as_swinir_and_built_from_netG_options():
    net = build_network({'net_type': 'swinir', 'upscale': 2, 'img_size': 16, 'window_size': 4, 'depths': [2],
                         'embed_dim': 12, 'num_heads': [2], 'upsampler': 'pixelshuffle'})
    assert isinstance(net, SwinIR) and net(torch.rand(1, 3, 8, 8)).shape == (1, 3, 16, 16)


@pytest.mark.parametrize('upsampler, upscale, in_chans, resi_connection', [
    ('pixelshuffle', 2, 3, '1conv'), ('pixelshuffle', 3, 3, '1conv'), ('pixelshuffle', 4, 3, '3conv'),
    ('pixelshuffle', 8, 1, '1conv'), ('pixelshuffledirect', 2, 3, '1conv'), ('pixelshuffledirect', 3, 1, '3conv'),
    ('nearest+conv', 2, 3, '1conv'), ('nearest+conv', 4, 3, '1conv'), (None, 1, 1, '1conv'), ('', 1, 3, '3conv'),
])
def test_each_head_gives_the_upscaled_shape_and_trains(upsampler, upscale, in_chans, resi_connection):
    net = tiny(upsampler=upsampler, upscale=upscale, in_chans=in_chans, resi_connection=resi_connection).train()
    x = torch.rand(2, in_chans, 16, 16, requires_grad=True)
    y = net(x)
    assert y.shape == (2, in_chans, 16 * upscale, 16 * upscale)
    y.square().mean().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    assert all(p.grad is not None for p in net.parameters())


def test_heads_own_the_modules_of_their_state_dict():
    heads = {'pixelshuffle': {'conv_before_upsample.0', 'upsample.0', 'upsample.2', 'conv_last'},
             'pixelshuffledirect': {'upsample.0'},
             'nearest+conv': {'conv_before_upsample.0', 'conv_up1', 'conv_up2', 'conv_hr', 'conv_last'},
             None: {'conv_last'}}
    for upsampler, expected in heads.items():
        net = tiny(upsampler=upsampler, upscale=1 if upsampler is None else 4)
        body = {'conv_first', 'patch_embed', 'layers', 'norm', 'conv_after_body'}
        names = {k.rsplit('.', 1)[0] for k in net.state_dict() if k.split('.')[0] not in body}
        assert names == expected, upsampler
    assert 'conv_up2.weight' not in tiny(upsampler='nearest+conv', upscale=2).state_dict()


def test_3conv_closes_each_rstb_and_the_body_with_a_quarter_width_bottleneck():
    sd = tiny(embed_dim=24, num_heads=[2, 2], resi_connection='3conv').state_dict()
    for prefix in ('layers.0.conv', 'layers.1.conv', 'conv_after_body'):
        assert [tuple(sd[f'{prefix}.{i}.weight'].shape) for i in (0, 2, 4)] == [(6, 24, 3, 3), (6, 6, 1, 1),
                                                                             (24, 6, 3, 3)]


@pytest.mark.parametrize('h, w', [(13, 10), (5, 16), (17, 3), (1, 1)])
@pytest.mark.parametrize('upsampler, upscale', [('pixelshuffle', 2), (None, 1)])
def test_odd_sizes_are_reflect_padded_to_the_window_and_cropped_back(h, w, upsampler, upscale):
    net = tiny(upsampler=upsampler, upscale=upscale)
    x = torch.rand(1, 3, h, w)
    with torch.no_grad():
        y = net(x)
        ph, pw = -h % 4, -w % 4
        padded = F.pad(x, (0, pw, 0, ph), mode='reflect' if ph < h and pw < w else 'replicate')
        whole = net(padded)
    assert y.shape == (1, 3, h * upscale, w * upscale)
    torch.testing.assert_close(y, whole[:, :, :h * upscale, :w * upscale])


def test_sizes_other_than_img_size_get_their_own_mask():
    net = tiny()
    group = net.layers[0].residual_group
    assert group.mask_for((16, 16), torch.device('cpu')) is None  # the stored buffer serves img_size
    torch.testing.assert_close(group.blocks[1].attn_mask, shifted_window_mask(16, 16, 4, 2))
    assert group.mask_for((24, 8), torch.device('cpu')).shape == (12, 16, 16)
    with torch.no_grad():
        assert net(torch.rand(1, 3, 24, 8)).shape == (1, 3, 24, 8)


def test_alternate_blocks_shift_and_only_they_store_a_mask():
    net = tiny(depths=[4, 2], num_heads=[2, 2])
    blocks = [b for layer in net.layers for b in layer.residual_group.blocks]
    assert [b.shift_size for b in blocks] == [0, 2, 0, 2, 0, 2]
    assert [k for k in net.state_dict() if k.endswith('attn_mask')] == [
        'layers.0.residual_group.blocks.1.attn_mask', 'layers.0.residual_group.blocks.3.attn_mask',
        'layers.1.residual_group.blocks.1.attn_mask']
    assert net.layers[0].residual_group.blocks[1].attn_mask.shape == (16, 16, 16)


def test_mask_separates_exactly_the_regions_that_the_cyclic_shift_brings_together():
    h, w, ws, s = 12, 8, 4, 2
    mask = shifted_window_mask(h, w, ws, s)
    # A pixel's region: which of the three bands (rest, last window minus shift, last shift) per axis.
    rows = torch.tensor([0 if i < h - ws else 1 if i < h - s else 2 for i in range(h)])
    cols = torch.tensor([0 if j < w - ws else 1 if j < w - s else 2 for j in range(w)])
    region = (rows[:, None] * 3 + cols[None, :]).float()
    label = window_partition(region.view(1, h, w, 1), ws).squeeze(-1)  # (nW, N): regions on the shifted grid
    same = label[:, :, None] == label[:, None, :]
    assert torch.equal(mask == 0, same) and torch.equal(mask[~same], torch.full_like(mask[~same], -100.))
    assert mask.shape == (h * w // ws ** 2, ws * ws, ws * ws)
    assert torch.equal(mask[0], torch.zeros(ws * ws, ws * ws))  # interior windows are a single region
    assert not torch.equal(mask[-1], torch.zeros(ws * ws, ws * ws))  # the corner window holds four


def test_a_shifted_block_never_mixes_pixels_from_opposite_borders():
    torch.manual_seed(0)
    block = SwinTransformerBlock(12, (8, 8), num_heads=2, window_size=4, shift_size=2).eval()
    x = torch.randn(1, 64, 12)
    far, near = x.clone(), x.clone()
    change = torch.randn(12) * 3  # not constant over channels, which LayerNorm would remove
    far[0, 7 * 8 + 7] += change  # pixel (7,7): in the same shifted window as (0,0), another region
    near[0, 1 * 8 + 1] += change  # pixel (1,1): same window, same region as (0,0)
    with torch.no_grad():
        out, out_far, out_near = (block(t, (8, 8)) for t in (x, far, near))
    torch.testing.assert_close(out_far[0, 0], out[0, 0], rtol=0, atol=1e-6)
    assert (out_near[0, 0] - out[0, 0]).abs().max() > 1e-3


def test_window_partition_round_trips_and_relative_index_counts_offsets():
    x = torch.randn(2, 8, 12, 5)
    windows = window_partition(x, 4)
    assert windows.shape == (12, 16, 5) and torch.equal(windows[0], x[0, :4, :4].reshape(16, 5))
    assert torch.equal(window_reverse(windows, 4, 8, 12), x)
    idx = relative_position_index(3)
    assert idx.shape == (9, 9) and idx.dtype == torch.int64
    assert sorted(set(idx.flatten().tolist())) == list(range(25))
    assert set(idx.diagonal().tolist()) == {2 * 5 + 2}  # zero offset: the table centre
    assert idx[0, 8] == (0 - 2 + 2) * 5 + (0 - 2 + 2) and idx[8, 0] == 4 * 5 + 4  # (dy, dx) = (-2,-2), (2,2)


def test_colour_inputs_are_centred_on_the_rgb_mean_and_gray_ones_not():
    colour, gray = tiny(upsampler='pixelshuffle', upscale=2), tiny(upsampler='pixelshuffle', upscale=2, in_chans=1)
    assert torch.equal(colour.mean.flatten(), torch.tensor(RGB_MEAN)) and colour.mean.shape == (1, 3, 1, 1)
    assert torch.equal(gray.mean, torch.zeros(1, 1, 1, 1))
    assert 'mean' not in colour.state_dict()  # not in KAIR's checkpoints either
    for net, chans in ((colour, 3), (gray, 1)):
        zero_(net.conv_last)  # the SR head then outputs the mean it added back
        with torch.no_grad():
            y = net(torch.rand(1, chans, 8, 8))
        torch.testing.assert_close(y, net.mean.expand(1, chans, 16, 16))


@pytest.mark.parametrize('in_chans', [1, 3])
@pytest.mark.parametrize('img_range', [1., 255.])
def test_img_range_scales_the_centred_input_and_the_restoration_head_adds_the_input(in_chans, img_range):
    net = tiny(in_chans=in_chans, img_range=img_range)
    seen = []
    net.conv_first.register_forward_hook(lambda m, inp, out: seen.append(inp[0]))
    zero_(net.conv_last)
    x = torch.rand(1, in_chans, 16, 16)
    with torch.no_grad():
        y = net(x)
    torch.testing.assert_close(seen[0], (x - net.mean) * img_range)
    torch.testing.assert_close(y, x)


def test_drop_path_grows_linearly_over_all_blocks():
    net = tiny(depths=[2, 3], num_heads=[2, 2], drop_path_rate=0.2)
    rates = [getattr(b.drop_path, 'drop_prob', 0.) for layer in net.layers for b in layer.residual_group.blocks]
    assert rates == pytest.approx([0., 0.05, 0.1, 0.15, 0.2])


def test_params_checkpoint_loads_strictly_into_a_fresh_model(tmp_path):
    src = tiny(upsampler='pixelshuffle', upscale=2)
    torch.save({'params': src.state_dict()}, tmp_path / 'net.pth')
    torch.manual_seed(1)
    dst = SwinIR(upscale=2, img_size=16, window_size=4, depths=[2, 2], embed_dim=12, num_heads=[2, 2], mlp_ratio=2,
                 upsampler='pixelshuffle').eval()
    dst.load_state_dict(torch.load(tmp_path / 'net.pth', weights_only=True)['params'], strict=True)
    x = torch.rand(1, 3, 12, 20)
    with torch.no_grad():
        assert torch.equal(src(x), dst(x))
    other = tiny(upsampler='pixelshuffle', upscale=2, img_size=24)  # img_size fixes the stored masks
    with pytest.raises(RuntimeError, match='attn_mask'):
        other.load_state_dict(src.state_dict(), strict=True)


def test_activation_checkpointing_changes_memory_not_results():
    plain, ckpt = tiny(upsampler='pixelshuffle', upscale=2), tiny(upsampler='pixelshuffle', upscale=2,
                                                                  use_checkpoint=True)
    x = torch.rand(1, 3, 12, 12)
    for net in (plain, ckpt):
        net(x).square().mean().backward()
    torch.testing.assert_close(plain(x), ckpt(x))
    for (name, p), q in zip(plain.named_parameters(), ckpt.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def test_absolute_position_embedding_is_a_parameter_resized_for_other_sizes():
    net = tiny(ape=True)
    assert next(iter(net.state_dict())) == 'absolute_pos_embed'
    assert net.absolute_pos_embed.shape == (1, 256, 12)
    with torch.no_grad():
        assert net(torch.rand(1, 3, 16, 16)).shape == (1, 3, 16, 16)
        assert net(torch.rand(1, 3, 9, 21)).shape == (1, 3, 9, 21)


def test_an_img_size_within_one_window_uses_one_unshifted_window_of_that_size():
    net = tiny(img_size=3)
    block = net.layers[0].residual_group.blocks[1]
    assert (block.window_size, block.shift_size, block.attn_mask) == (3, 0, None)
    assert block.attn.relative_position_bias_table.shape == (25, 2)
    with torch.no_grad():
        assert net(torch.rand(1, 3, 7, 5)).shape == (1, 3, 7, 5)


@pytest.mark.parametrize('overrides, key', [
    (dict(upsampler='bicubic'), 'upsampler'), (dict(upsampler='pixelshuffle', upscale=5), 'upscale'),
    (dict(upsampler='nearest+conv', upscale=3), 'upscale'), (dict(upsampler=None, upscale=2), 'upscale'),
    (dict(resi_connection='2conv'), 'resi_connection'), (dict(num_heads=[2]), 'num_heads'),
    (dict(num_heads=[5, 2]), 'num_heads'), (dict(patch_size=2), 'patch_size'), (dict(window_size=0), 'window_size'),
])
def test_impossible_options_are_one_line_user_errors_naming_the_key(overrides, key):
    with pytest.raises(UserError, match=rf'^netG\.{key}: [^\n]+$'):
        tiny(**overrides)
