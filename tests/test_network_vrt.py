"""VRT: official checkpoint layout, output shapes of every head, and checkpointing equivalence."""
import glob
import json
import os
import re

import pytest
import torch

import torch.nn.functional as F

from models.networks.vrt import TMSA, VRT, DCNv2PackFlowGuided, FrameConv3d, Rearrange, SpyNet, flow_warp
from models.registry import build_network
from utils.errors import UserError

# The reference VRT state_dict of each published configuration (format: tests/data/vrt/README.md).
# Named explicitly: a missing listing fails its own test instead of shrinking a glob to nothing.
TSV_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'vrt')
TSV_NAMES = ['001_videosr_bi_reds_6frames.tsv', '002_videosr_bi_reds_16frames.tsv', '006_videodeblurring_gopro.tsv',
             '008_videodenoising_davis.tsv', '009_videofi_vimeo_4frames.tsv']


pytestmark = pytest.mark.usefixtures('one_thread')


def _read_tsv(path):
    with open(path) as f:
        header, *lines = f.read().splitlines()
    m = re.search(r'(\d+) entries, (\d+) parameters, netG kwargs: (\{.*\})$', header)
    entries = [tuple(line.split('\t')) for line in lines]
    return int(m.group(1)), int(m.group(2)), json.loads(m.group(3)), entries


def tiny(**overrides):
    """A VRT small enough for CPU tests (40x40 frames: SpyNet needs > 32 px, 1/8 scale >= window)."""
    kw = dict(upscale=1, img_size=[3, 40, 40], window_size=[2, 4, 4], depths=[2] * 7 + [1, 1],
              indep_reconsts=[8], embed_dims=[12] * 7 + [16, 16], num_heads=[2] * 9, deformable_groups=2,
              pa_frames=2, drop_path_rate=0.)
    kw.update(overrides)
    return kw


def test_the_reference_state_dict_listings_are_in_the_repository():
    assert sorted(glob.glob(os.path.join(TSV_DIR, '*.tsv'))) == [os.path.join(TSV_DIR, n) for n in TSV_NAMES]


@pytest.mark.parametrize('name', TSV_NAMES)
def test_state_dict_matches_official_names_shapes_and_parameter_count(name):
    n_entries, n_params, kwargs, entries = _read_tsv(os.path.join(TSV_DIR, name))
    with torch.device('meta'):
        net = VRT(**kwargs)
    sd = net.state_dict()
    mine = [(k, str(tuple(v.shape)), str(v.dtype).replace('torch.', '')) for k, v in sd.items()]
    assert len(mine) == n_entries == len(entries)
    missing = sorted(set(e[0] for e in entries) - set(sd))
    unexpected = sorted(set(sd) - set(e[0] for e in entries))
    assert not missing and not unexpected, (missing[:5], unexpected[:5])
    assert mine == entries
    assert sum(p.numel() for p in net.parameters()) == n_params


def test_params_checkpoint_loads_strictly_into_a_fresh_model(tmp_path):
    torch.manual_seed(0)
    src = VRT(**tiny(upscale=4))
    torch.save({'params': src.state_dict()}, tmp_path / 'net.pth')
    dst = VRT(**tiny(upscale=4))
    dst.load_state_dict(torch.load(tmp_path / 'net.pth', weights_only=True)['params'], strict=True)
    for k, v in src.state_dict().items():
        assert torch.equal(v, dst.state_dict()[k]), k


def test_registered_as_vrt_and_buildable_from_netG_options():
    net = build_network({'net_type': 'vrt', 'init_type': 'default', **tiny()})
    assert isinstance(net, VRT)


@pytest.mark.parametrize('name, overrides, frames, chans, out_shape', [
    ('sr_x4', dict(upscale=4), 2, 3, (1, 2, 3, 160, 160)),
    ('deblurring', dict(), 2, 3, (1, 2, 3, 40, 40)),
    ('nonblind_denoising', dict(nonblind_denoising=True), 2, 4, (1, 2, 3, 40, 40)),
    ('frame_interpolation_pa0', dict(pa_frames=0, img_size=[4, 40, 40]), 4, 3, (1, 1, 3, 40, 40)),
    ('pa_frames_4', dict(pa_frames=4), 3, 3, (1, 3, 3, 40, 40)),
    ('pa_frames_6', dict(pa_frames=6), 4, 3, (1, 4, 3, 40, 40)),
    ('spike_chans', dict(spike_chans=5), 2, 8, (1, 2, 3, 40, 40)),
])
def test_forward_backward_shapes_for_each_head(name, overrides, frames, chans, out_shape):
    torch.manual_seed(0)
    net = VRT(**tiny(**overrides))
    x = torch.rand(1, frames, chans, 40, 40, requires_grad=True)
    y = net(x)
    assert y.shape == out_shape
    y.square().mean().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert x.grad[:, :, :3].abs().sum() > 0
    assert all(p.grad is not None for n, p in net.named_parameters() if not n.startswith('spynet')), name


@pytest.mark.parametrize('overrides, chans', [(dict(), 3), (dict(nonblind_denoising=True), 4),
                                               (dict(spike_chans=2), 5)])
def test_restoration_heads_add_the_network_output_to_the_rgb_input(overrides, chans):
    net = VRT(**tiny(**overrides))
    torch.nn.init.zeros_(net.conv_last.weight)
    torch.nn.init.zeros_(net.conv_last.bias)
    x = torch.rand(1, 2, chans, 40, 40)
    with torch.no_grad():
        assert torch.equal(net(x), x[:, :, :3])


def test_sr_head_adds_the_network_output_to_the_upsampled_input():
    net = VRT(**tiny(upscale=4))
    torch.nn.init.zeros_(net.conv_last.weight)
    torch.nn.init.zeros_(net.conv_last.bias)
    x = torch.rand(1, 2, 3, 40, 40)
    with torch.no_grad():
        expected = torch.stack([F.interpolate(x[:, t], scale_factor=4, mode='bilinear') for t in range(2)], 1)
        assert torch.allclose(net(x), expected, atol=1e-5)


def test_flow_warp_moves_content_by_the_flow():
    x = torch.rand(1, 2, 6, 7, dtype=torch.float64)
    flow = torch.zeros(1, 6, 7, 2, dtype=torch.float64)
    assert torch.allclose(flow_warp(x, flow), x)
    flow[..., 0] = 1.0  # sample one pixel to the right
    assert torch.allclose(flow_warp(x, flow)[..., :-1], x[..., 1:])
    four = flow_warp(x, flow + 0.5, 'nearest4')  # floor/ceil neighbours in x and y
    assert four.shape == (1, 8, 6, 7)
    assert torch.allclose(four[:, :2, :-1, :-1], x[..., :-1, 1:])  # (floor x, floor y)
    assert torch.allclose(four[:, 6:, :-1, :-2], x[..., 1:, 2:])  # (ceil x, ceil y)


def test_flow_guided_dcn_at_init_samples_along_the_flow():
    """conv_offset's last layer starts at zero, so offsets equal the (x, y) flow and the mask is 0.5."""
    torch.manual_seed(0)
    dcn = DCNv2PackFlowGuided(4, 6, 3, padding=1, deformable_groups=2, pa_frames=2).double()
    torch.nn.init.normal_(dcn.bias)
    x = torch.rand(1, 4, 8, 9, dtype=torch.float64)
    flow = torch.zeros(1, 2, 8, 9, dtype=torch.float64)
    flow[:, 0] = 2.0  # x displacement of two pixels
    out = dcn(x, [x], x, [flow])
    shifted = torch.zeros_like(x)
    shifted[..., :-2] = x[..., 2:]
    expected = F.conv2d(shifted, dcn.weight * 0.5, padding=1) + dcn.bias.view(1, -1, 1, 1)
    # column 0 differs only because its left tap samples real pixel x=1 rather than zero padding
    assert torch.allclose(out[..., 1:], expected[..., 1:], atol=1e-12)


def test_attention_masks_cached_under_inference_mode_also_serve_training():
    net = VRT(**tiny(pa_frames=0, img_size=[2, 40, 40]))
    x = torch.rand(1, 2, 3, 48, 40)
    with torch.inference_mode():
        net(x)
    net(x).mean().backward()
    assert net.conv_first.weight.grad is not None


def test_spike_channels_feed_only_conv_first_and_leave_the_official_layout_otherwise():
    plain, spiky = VRT(**tiny()), VRT(**tiny(spike_chans=4))
    assert spiky.conv_first.in_channels == plain.conv_first.in_channels + 4 == 3 * 9 + 4
    diff = {k: (tuple(v.shape), tuple(spiky.state_dict()[k].shape)) for k, v in plain.state_dict().items()
            if tuple(v.shape) != tuple(spiky.state_dict()[k].shape)}
    assert set(diff) == {'conv_first.weight'}
    torch.manual_seed(0)
    seen = []
    spiky.spynet.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape[1]))
    x = torch.rand(1, 2, 3 + 4, 40, 40, requires_grad=True)
    out = spiky(x)
    out.sum().backward()
    assert out.shape[2] == 3
    assert seen and set(seen) == {3}  # optical flow sees RGB only
    assert x.grad[:, :, 3:].abs().sum() > 0  # the spike channels are used


def test_activation_checkpointing_does_not_change_outputs_or_gradients():
    torch.manual_seed(0)
    kw = tiny(depths=[2] * 7 + [2, 1])
    ref = VRT(**kw).double()
    ckpt = VRT(**kw, use_checkpoint_attn=True, use_checkpoint_ffn=True).double()
    ckpt.load_state_dict(ref.state_dict())
    assert ckpt.stage1.residual_group1.blocks[0].use_checkpoint_attn
    assert ckpt.stage8[1].residual_group.blocks[0].use_checkpoint_ffn
    x = torch.rand(1, 2, 3, 40, 40, dtype=torch.float64)
    grads = []
    for net in (ref, ckpt):
        xi = x.clone().requires_grad_()
        out = net(xi)
        loss = out.square().mean()
        params = [p for n, p in net.named_parameters() if not n.startswith('spynet')]
        grads.append((out.detach(), torch.autograd.grad(loss, [xi] + params)))
    (o1, g1), (o2, g2) = grads
    assert torch.allclose(o1, o2, rtol=0, atol=1e-12)
    for a, b in zip(g1, g2):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12)


def test_no_checkpoint_blocks_exempt_the_listed_stages():
    with torch.device('meta'):
        net = VRT(**tiny(use_checkpoint_attn=True, use_checkpoint_ffn=True,
                         no_checkpoint_attn_blocks=[0, 8], no_checkpoint_ffn_blocks=[1]))
    blk = lambda stage: stage.residual_group1.blocks[0]  # noqa: E731
    assert not blk(net.stage1).use_checkpoint_attn and blk(net.stage1).use_checkpoint_ffn
    assert blk(net.stage2).use_checkpoint_attn and not blk(net.stage2).use_checkpoint_ffn
    assert net.stage8[1].residual_group.blocks[0].use_checkpoint_attn
    assert not net.stage8[2].residual_group.blocks[0].use_checkpoint_attn


def test_a_checkpoint_preset_replaces_kairs_keys_for_every_stage_and_keeps_the_state_dict():
    from models.networks.rvrt import RVRT
    from utils.errors import UserError
    kair = tiny(use_checkpoint_attn=True, use_checkpoint_ffn=False, no_checkpoint_attn_blocks=[0])
    with torch.device('meta'):
        nets = {preset: VRT(**kair, checkpoint=preset) for preset in (None, 'memory', 'none')}
    blocks = {p: [b for b in net.modules() if isinstance(b, TMSA)] for p, net in nets.items()}
    assert all(b.use_checkpoint_attn and b.use_checkpoint_ffn for b in blocks['memory'])
    assert not any(b.use_checkpoint_attn or b.use_checkpoint_ffn for b in blocks['none'])
    assert {b.use_checkpoint_attn for b in blocks[None]} == {True, False}  # KAIR's keys: stage 0 exempt
    assert list(nets['memory'].state_dict()) == list(nets[None].state_dict())
    with torch.device('meta'):
        rvrt = RVRT(upscale=4, clip_size=2, img_size=[2, 16, 16], window_size=[2, 8, 8], num_blocks=[1, 1, 1],
                    depths=[1, 1, 1], embed_dims=[8, 8, 8], num_heads=[2, 2, 2], inputconv_groups=[1] * 6,
                    deformable_groups=4, attention_heads=4, checkpoint='memory')
    assert all(b.use_checkpoint_attn and b.use_checkpoint_ffn for b in rvrt.modules() if isinstance(b, TMSA))
    with pytest.raises(UserError, match=r'netG\.checkpoint: must be "memory", "none" or null'):
        VRT(**tiny(), checkpoint='all')


def test_rearrange_splits_and_merges_axes_like_einops():
    x = torch.arange(2 * 3 * 1 * 4 * 6).view(2, 3, 1, 4, 6)
    down = Rearrange('n c d (h neih) (w neiw) -> n d h w (neiw neih c)', neih=2, neiw=2)(x)
    expected = x.view(2, 3, 1, 2, 2, 3, 2).permute(0, 2, 3, 5, 6, 4, 1).reshape(2, 1, 2, 3, 12)
    assert torch.equal(down, expected)
    up = Rearrange('n (neiw neih c) d h w -> n d (h neih) (w neiw) c', neih=2, neiw=2)(
        down.permute(0, 4, 1, 2, 3))
    assert torch.equal(up.permute(0, 4, 1, 2, 3), x)


def test_frame_conv3d_equals_conv3d_with_the_same_parameters():
    torch.manual_seed(0)
    ref = torch.nn.Conv3d(5, 7, kernel_size=(1, 3, 3), padding=(0, 1, 1))
    fast = FrameConv3d(5, 7, kernel_size=(1, 3, 3), padding=(0, 1, 1))
    fast.load_state_dict(ref.state_dict())
    x = torch.randn(2, 5, 3, 9, 10)
    assert torch.allclose(fast(x), ref(x), atol=1e-5)


def test_released_spynet_weights_without_mean_std_buffers_load(tmp_path):
    src = SpyNet()
    released = {k: v for k, v in src.state_dict().items() if k not in ('mean', 'std')}
    torch.save({'params': released}, tmp_path / 'spynet_sintel_final.pth')
    net = VRT(**tiny(spynet_path=str(tmp_path / 'spynet_sintel_final.pth')))
    assert torch.equal(net.spynet.basic_module[0].basic_module[0].weight, src.basic_module[0].basic_module[0].weight)
    assert torch.allclose(net.spynet.mean.flatten(), torch.tensor([0.485, 0.456, 0.406]))


def test_spynet_loads_a_local_params_file_and_rejects_a_missing_one(tmp_path):
    torch.manual_seed(0)
    src = SpyNet()
    torch.save({'params': src.state_dict()}, tmp_path / 'spynet.pth')
    loaded = SpyNet(str(tmp_path / 'spynet.pth'))
    assert torch.equal(loaded.basic_module[3].basic_module[2].weight, src.basic_module[3].basic_module[2].weight)
    with pytest.raises(UserError, match='netG.spynet_path'):
        VRT(**tiny(spynet_path=str(tmp_path / 'missing.pth')))


def test_inconsistent_options_are_user_errors_naming_the_key():
    with pytest.raises(UserError, match='netG.pa_frames'):
        VRT(**tiny(pa_frames=3))
    with pytest.raises(UserError, match='netG.depths'):
        VRT(**tiny(depths=[2] * 8))
    with pytest.raises(UserError, match='netG.indep_reconsts'):
        VRT(**tiny(indep_reconsts=[3]))
