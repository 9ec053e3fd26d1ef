"""RVRT: KAIR's state_dicts, output shapes of every head, and guided deformable attention against a slow
reference written here (explicit loops, bilinear sampling by hand)."""
import json
import math
import os
import re

import pytest
import torch
import torch.nn.functional as F

from models.networks.layers.guided_attention import guided_deformable_attention
from models.networks.rvrt import RVRT, GuidedDeformAttention
from models.networks.vrt import SpyNet, flow_warp
from models.registry import build_network
from utils.errors import UserError

pytestmark = pytest.mark.usefixtures('one_thread')

TSV_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'kair')
# Named explicitly: a missing listing fails its own test instead of shrinking a glob to nothing.
TSV_NAMES = ['rvrt__001_train_rvrt_videosr_bi_reds_30frames.netG.tsv',
             'rvrt__002_train_rvrt_videosr_bi_vimeo_14frames.netG.tsv',
             'rvrt__003_train_rvrt_videosr_bd_vimeo_14frames.netG.tsv',
             'rvrt__004_train_rvrt_videodeblurring_dvd.netG.tsv',
             'rvrt__005_train_rvrt_videodeblurring_gopro.netG.tsv',
             'rvrt__006_train_rvrt_videodenoising_davis.netG.tsv']


def read_listing(name):
    with open(os.path.join(TSV_DIR, name)) as f:
        header, *lines = f.read().splitlines()
    m = re.search(r'(\d+) entries, (\d+) parameters, .*netG options: (\{.*\})$', header)
    assert m, header
    return int(m.group(1)), int(m.group(2)), json.loads(m.group(3)), [tuple(ln.split('\t')) for ln in lines]


def tiny(**overrides):
    """An RVRT small enough for CPU tests (windows of 4 px, 8 channels, one block per stage)."""
    kw = dict(upscale=4, clip_size=2, window_size=[2, 4, 4], num_blocks=[1, 1, 1], depths=[1, 1, 1],
              embed_dims=[8, 8, 8], num_heads=[2, 2, 2], deformable_groups=2, attention_heads=2,
              inputconv_groups=[1, 1, 1, 1, 1, 1])
    kw.update(overrides)
    return kw


@pytest.mark.parametrize('name', TSV_NAMES)
def test_kair_options_build_exactly_kairs_state_dict_and_parameter_count(name):
    n_entries, n_params, netG, entries = read_listing(name)
    with torch.device('meta'):
        net = build_network(netG)
    assert isinstance(net, RVRT)
    mine = [(k, str(tuple(v.shape)), str(v.dtype).replace('torch.', '')) for k, v in net.state_dict().items()]
    missing = sorted({e[0] for e in entries} - {m[0] for m in mine})
    unexpected = sorted({m[0] for m in mine} - {e[0] for e in entries})
    assert not missing and not unexpected, (missing[:5], unexpected[:5])
    assert mine == entries
    assert len(mine) == n_entries and sum(p.numel() for p in net.parameters()) == n_params


@pytest.mark.parametrize('name, overrides, frames, chans, out_shape', [
    ('sr_x4', dict(), 4, 3, (1, 4, 3, 64, 64)),
    ('deblurring', dict(upscale=1), 4, 3, (1, 4, 3, 16, 16)),
    ('nonblind_denoising', dict(upscale=1, nonblind_denoising=True, inputconv_groups=[1, 2, 4, 8, 8, 4]), 4, 4,
     (1, 4, 3, 16, 16)),
    ('clip_size_3', dict(clip_size=3, window_size=[3, 4, 4]), 6, 3, (1, 6, 3, 64, 64)),
])
def test_forward_backward_gives_one_output_frame_per_input_frame_and_trains_every_parameter(
        name, overrides, frames, chans, out_shape):
    torch.manual_seed(0)
    net = RVRT(**tiny(**overrides))
    x = torch.rand(1, frames, chans, 16, 16, requires_grad=True)
    y = net(x)
    assert y.shape == out_shape
    y.square().mean().backward()
    assert torch.isfinite(x.grad).all() and x.grad[:, :, :3].abs().sum() > 0
    assert [n for n, p in net.named_parameters() if p.grad is None] == [], name


@pytest.mark.parametrize('upscale, size, out_size', [(4, (18, 14), (72, 56)), (1, (18, 14), (18, 14))])
def test_frames_of_any_size_are_padded_inside_and_cropped_back(upscale, size, out_size):
    net = RVRT(**tiny(upscale=upscale)).eval()
    with torch.no_grad():
        assert net(torch.rand(1, 2, 3, *size)).shape == (1, 2, 3, *out_size)


@pytest.mark.parametrize('overrides, chans', [(dict(upscale=1), 3), (dict(upscale=1, nonblind_denoising=True), 4),
                                               (dict(upscale=4), 3)])
def test_the_network_output_is_added_to_the_rgb_input_upsampled_bilinearly(overrides, chans):
    net = RVRT(**tiny(**overrides)).eval()
    torch.nn.init.zeros_(net.conv_last.weight)
    torch.nn.init.zeros_(net.conv_last.bias)
    x = torch.rand(1, 2, chans, 16, 16)
    up = overrides['upscale']
    expected = F.interpolate(x[0, :, :3], scale_factor=up, mode='bilinear', align_corners=False)[None]
    with torch.no_grad():
        torch.testing.assert_close(net(x), expected if up > 1 else x[:, :, :3], rtol=0, atol=1e-6)


def test_propagation_carries_information_across_clips_in_both_directions():
    torch.manual_seed(0)
    net = RVRT(**tiny(upscale=1)).eval()
    x = torch.rand(1, 4, 3, 16, 16)
    with torch.no_grad():
        y = net(x)
        last_changed = net(torch.cat([x[:, :3], torch.rand(1, 1, 3, 16, 16)], 1))
        first_changed = net(torch.cat([torch.rand(1, 1, 3, 16, 16), x[:, 1:]], 1))
    assert (last_changed[:, 0] - y[:, 0]).abs().max() > 1e-4  # backward propagation: clip 1 -> clip 0
    assert (first_changed[:, 3] - y[:, 3]).abs().max() > 1e-4  # forward propagation: clip 0 -> clip 1


def test_flows_to_the_previous_clip_chain_the_neighbour_flows():
    net = RVRT(**tiny(clip_size=3, window_size=[3, 4, 4]))
    step = torch.tensor([0.5, -0.25]).view(1, 1, 2, 1, 1)
    steps = step.expand(1, 5, 2, 20, 20)  # a uniform motion of (0.5, -0.25) px per frame
    flows = net.clip_flows(steps, 1)  # frame j of clip 1 (frame 3 + j) to previous frames (j + r) mod 3
    assert flows.shape == (1, 3, 3, 2, 20, 20)
    for j in range(3):
        for r in range(3):
            frames_apart = 3 + j - (j + r) % 3
            inside = flows[0, j, r, :, 7:-7, 7:-7]  # away from the zero padding at the borders
            torch.testing.assert_close(inside, (frames_apart * step[0, 0]).expand_as(inside), rtol=0, atol=1e-6)


@pytest.mark.parametrize('frames', [3, 5])
def test_a_frame_count_not_a_multiple_of_clip_size_is_a_one_line_user_error(frames):
    net = RVRT(**tiny())
    with pytest.raises(UserError) as e:
        net(torch.rand(1, frames, 3, 16, 16))
    assert str(e.value) == f'RVRT: the number of frames ({frames}) must be a multiple of netG.clip_size (2)'


def test_a_wrong_channel_count_is_a_one_line_user_error():
    with pytest.raises(UserError, match=r'^RVRT: input frames have 3 channels, the network takes 4 '):
        RVRT(**tiny(nonblind_denoising=True))(torch.rand(1, 2, 3, 16, 16))


def test_checkpointing_changes_neither_outputs_nor_gradients_and_exempts_the_listed_stacks():
    x = torch.rand(1, 4, 3, 16, 16)
    results = []
    for ckpt in (False, True):
        torch.manual_seed(0)
        net = RVRT(**tiny(upscale=1, use_checkpoint_attn=ckpt, use_checkpoint_ffn=ckpt, no_checkpoint_attn_blocks=[0],
                          no_checkpoint_ffn_blocks=[5]))
        y = net(x)
        y.square().mean().backward()
        results.append((y.detach(), [p.grad for p in net.parameters()]))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=0, atol=1e-6)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    flags = {name: (blk.use_checkpoint_attn, blk.use_checkpoint_ffn) for name, blk in net.named_modules()
             if name.endswith('residual_group.blocks.0')}
    assert flags['feat_extract.6.main.5.0.residual_group.blocks.0'] == (False, True)  # stack 0: no attn checkpoint
    assert flags['reconstruction.main.5.0.residual_group.blocks.0'] == (True, False)  # stack 5: no ffn checkpoint
    assert flags['backbone.forward_2.main.5.0.residual_group.blocks.0'] == (True, True)


def test_a_spynet_checkpoint_is_loaded_from_spynet_path(tmp_path):
    torch.manual_seed(1)
    spynet = SpyNet()
    torch.save({'params': {k: v for k, v in spynet.state_dict().items() if k not in ('mean', 'std')}},
               tmp_path / 'spynet.pth')
    net = RVRT(**tiny(spynet_path=str(tmp_path / 'spynet.pth')))
    for k, v in spynet.state_dict().items():
        assert torch.equal(net.spynet.state_dict()[k], v), k
    with pytest.raises(UserError, match=r'^netG.spynet_path: SpyNet .*: weights not found; nothing is downloaded '
                                        r'here: put file spynet_sintel_final-3d2a1287.pth at .*missing.pth \(from '
                                        r'https://github.com/JingyunLiang/VRT/releases/download/v0.0/'):
        RVRT(**tiny(spynet_path=str(tmp_path / 'missing.pth')))


def bilinear(img, y, x):
    """img (C,H,W) at the real pixel position (y, x); zero outside the image."""
    _, h, w = img.shape
    y0, x0 = math.floor(y), math.floor(x)
    out = img.new_zeros(img.shape[0])
    for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            if 0 <= yy < h and 0 <= xx < w:
                out += wy * wx * img[:, yy, xx]
    return out


def reference_attention(q, k, v, offset, heads, window):
    """guided_deformable_attention written out: for every query pixel, sample M·K keys/values per group
    by hand, then a softmax per head."""
    b, m, d, h, w = k.shape
    g, kk = offset.shape[2], offset.shape[3]
    kh, kw = window
    dg, hd = d // g, d // heads
    out = torch.zeros_like(q)
    for bi in range(b):
        for y in range(h):
            for x in range(w):
                keys, values = q.new_zeros(m * kk, d), q.new_zeros(m * kk, d)
                for mi in range(m):
                    for gi in range(g):
                        ch = slice(gi * dg, (gi + 1) * dg)
                        for i in range(kh):
                            for j in range(kw):
                                kappa = i * kw + j
                                py = y + i - kh // 2 + float(offset[bi, mi, gi, kappa, 0, y, x])
                                px = x + j - kw // 2 + float(offset[bi, mi, gi, kappa, 1, y, x])
                                keys[mi * kk + kappa, ch] = bilinear(k[bi, mi, ch], py, px)
                                values[mi * kk + kappa, ch] = bilinear(v[bi, mi, ch], py, px)
                for hi in range(heads):
                    ch = slice(hi * hd, (hi + 1) * hd)
                    attn = torch.softmax(keys[:, ch] @ q[bi, ch, y, x] / math.sqrt(hd), 0)
                    out[bi, ch, y, x] = attn @ values[:, ch]
    return out


@pytest.mark.parametrize('groups, heads, window, h, w', [(2, 2, (3, 3), 5, 4), (2, 4, (3, 3), 5, 4),
                                                        (4, 2, (1, 3), 5, 4), (2, 2, (3, 3), 1, 6)])
def test_guided_deformable_attention_matches_the_loop_reference(groups, heads, window, h, w):
    torch.manual_seed(0)
    b, m, d = 2, 2, 8
    kk = window[0] * window[1]
    q, k, v = torch.randn(b, d, h, w), torch.randn(b, m, d, h, w), torch.randn(b, m, d, h, w)
    offset = 3 * torch.randn(b, m, groups, kk, 2, h, w)  # many sampling points fall outside the frame
    torch.testing.assert_close(guided_deformable_attention(q, k, v, offset, heads, window),
                               reference_attention(q, k, v, offset, heads, window), rtol=0, atol=1e-5)


def _gda(seed=0, residues=True):
    torch.manual_seed(seed)
    gda = GuidedDeformAttention(dim=4, clip_size=2, attention_window=(3, 3), deformable_groups=2, attention_heads=2,
                                max_residue_magnitude=2.)
    if residues:
        torch.nn.init.normal_(gda.conv_offset[-1].weight, std=0.05)
        torch.nn.init.normal_(gda.conv_offset[-1].bias, std=0.5)
    n, s, c, h, w = 1, 2, 4, 5, 6
    q, k, v = torch.randn(n, s, c, h, w), torch.randn(n, s, c, h, w), torch.randn(n, s, c, h, w)
    return gda, q, k, v


def test_the_attention_module_samples_at_flow_plus_residue_in_the_documented_layout():
    gda, q, k, v = _gda()
    n, s, c, h, w = q.shape
    g, kk = 2, 9
    flows = 1.5 * torch.randn(n, s, s, 2, h, w)
    with torch.no_grad():
        out, refined = gda(q, k, v, flows)
        # current frame j attends to previous frames j and 1 - j, in that order (clip_size 2)
        key = [[0, 1], [1, 0]]
        cond = torch.stack([torch.cat([q[:, j]] + [flow_warp(v[:, key[j][r]], flows[:, j, r].permute(0, 2, 3, 1))
                                                   for r in range(s)]
                                      + [flows[:, j, r] for r in range(s)], 1) for j in range(s)], 1)
        raw = 2. * torch.tanh(gda.conv_offset(cond.transpose(1, 2)).transpose(1, 2))
        offset = torch.zeros(n * s, s, g, kk, 2, h, w)
        for j in range(s):
            for r in range(s):
                for gi in range(g):
                    for kappa in range(kk):
                        ch = ((r * g + gi) * kk + kappa) * 2
                        offset[j, r, gi, kappa, 0] = flows[0, j, r, 1] + raw[0, j, ch]      # dy
                        offset[j, r, gi, kappa, 1] = flows[0, j, r, 0] + raw[0, j, ch + 1]  # dx
        qp, kp, vp = gda.proj_q(q), gda.proj_k(k), gda.proj_v(v)
        keys = torch.stack([torch.stack([kp[0, key[j][r]] for r in range(s)]) for j in range(s)])
        values = torch.stack([torch.stack([vp[0, key[j][r]] for r in range(s)]) for j in range(s)])
        expected = reference_attention(qp[0], keys, values, offset, 2, (3, 3))
        expected = gda.proj(expected[None])
        expected = expected + gda.mlp(expected)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(refined, offset.mean((2, 3)).flip(2)[None], rtol=0, atol=1e-6)


def local_window_attention(gda, q, k, v, shift=(0, 0)):
    """Plain 3x3 neighbourhood attention (zero padded) of each current frame over both previous frames,
    the neighbourhoods centred at (y + dy, x + dx) for the integer `shift` = (dx, dy)."""
    n, s, c, h, w = q.shape
    dx, dy = shift
    qp, kp, vp = gda.proj_q(q), gda.proj_k(k), gda.proj_v(v)
    d, heads = qp.shape[2], gda.attention_heads

    def windows(f):  # the 3x3 neighbourhood of (y + dy, x + dx), zero outside the frame
        pad = 1 + max(abs(dx), abs(dy))
        f = F.pad(f.flatten(0, 1), (pad,) * 4)
        return torch.stack([f[..., pad + dy + i:pad + dy + i + h, pad + dx + j:pad + dx + j + w]
                            for i in (-1, 0, 1) for j in (-1, 0, 1)], 2).view(n, s, d, 9, h * w)

    key = torch.tensor([[0, 1], [1, 0]])
    kw, vw = windows(kp)[:, key], windows(vp)[:, key]  # n, j, r, d, 9, hw
    kw, vw = (t.permute(0, 1, 3, 2, 4, 5).reshape(n, s, heads, d // heads, s * 9, h * w) for t in (kw, vw))
    qh = qp.reshape(n, s, heads, d // heads, 1, h * w)
    attn = ((qh * kw).sum(3, keepdim=True) / math.sqrt(d // heads)).softmax(4)
    out = gda.proj((attn * vw).sum(4).view(n, s, d, h, w))
    return out + gda.mlp(out)


@pytest.mark.parametrize('shift', [(0, 0), (1, 2), (-2, 1), (3, -1)])
def test_with_zero_residues_the_attention_is_local_window_attention_around_the_flow(shift):
    gda, q, k, v = _gda(residues=False)
    assert not gda.conv_offset[-1].weight.any() and not gda.conv_offset[-1].bias.any()  # the initial state
    n, s, c, h, w = q.shape
    flows = torch.tensor(shift, dtype=torch.float32).view(1, 1, 1, 2, 1, 1).expand(n, s, s, 2, h, w)
    with torch.no_grad():
        out, refined = gda(q, k, v, flows)
        expected = local_window_attention(gda, q, k, v, shift)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(refined, flows, rtol=0, atol=1e-6)


def test_whole_clip_testing_pads_time_to_a_multiple_of_both_window_and_clip_size():
    from models.video_restorer import VideoRestorer
    opt = {'netG': {'net_type': 'rvrt', 'window_size': [2, 8, 8], 'clip_size': 3},
           'val': {'tile': 0, 'self_ensemble': False, 'num_frame_testing': 0, 'num_frame_overlapping': 2,
                   'size_patch_testing': 0, 'pad_seq': False, 'flip_seq': False, 'center_frame_only': False,
                   'metrics': [], 'amp': 'none'}}
    restorer = VideoRestorer.from_options(torch.nn.Identity(), opt, torch.device('cpu'))
    assert restorer.window_size == (6, 8, 8)
