"""BasicVSR, IconVSR, BasicVSR++ and EDVR: each released BasicSR configuration builds exactly its official
state_dict (names, shapes, dtypes and order: tests/data/archs/{basicvsr,iconvsr,basicvsrpp,edvr}__*.tsv, one
test per table), and the networks behave as the papers and BasicSR's code say: shapes, the keyframe padding,
the mirror-extended flow shortcut, the CPU cache, IconVSR's edvr_path, and one-line errors for bad sizes."""
import os

import pytest
import torch

from models.networks.basicvsr import BasicVSR, IconVSR
from models.networks.basicvsrpp import BasicVSRPlusPlus
from models.networks.edvr import EDVR
from models.registry import build_network, build_on_meta
from option_rules import option_rules
from tests.test_arch_tables import TSV_DIR, read_table
from utils.errors import UserError
from utils.options import validate

pytestmark = pytest.mark.usefixtures('one_thread')

TABLES = ['basicvsr__BasicVSR_REDS4', 'iconvsr__IconVSR_REDS', 'iconvsr__IconVSR_Vimeo90K_BIx4',
          'basicvsrpp__BasicVSRPP_REDS', 'edvr__EDVR_M_x4_SR_REDS', 'edvr__EDVR_M_woTSA_x4_SR_REDS',
          'edvr__EDVR_L_x4_SR_REDS', 'edvr__EDVR_L_deblur_REDS']
# the papers' parameter counts (BasicVSR/IconVSR: REDS models; EDVR-M and EDVR-L: the SR models)
PUBLISHED = {'basicvsr__BasicVSR_REDS4': 6.29e6, 'iconvsr__IconVSR_REDS': 8.69e6, 'basicvsrpp__BasicVSRPP_REDS': 7.32e6,
             'edvr__EDVR_M_x4_SR_REDS': 3.30e6, 'edvr__EDVR_L_x4_SR_REDS': 20.6e6}


def test_the_eight_tables_are_in_the_repository():
    assert all(os.path.isfile(os.path.join(TSV_DIR, f'{name}.tsv')) for name in TABLES)


@pytest.mark.parametrize('name', TABLES)
def test_the_official_kwargs_build_the_official_state_dict_in_its_order_on_the_meta_device(name):
    n_entries, n_params, kwargs, entries = read_table(f'{name}.tsv')
    family = name.split('__')[0]
    opt = validate({'task': 't', 'scale': 1 if kwargs.get('hr_in') else 4, 'netG': {'net_type': family, **kwargs}},
                   option_rules(), source=name)
    net = build_on_meta(opt['netG'])
    assert net is not None, 'builds without memory'
    mine = [(k, str(tuple(v.shape)), str(v.dtype).replace('torch.', '')) for k, v in net.state_dict().items()]
    assert mine == entries  # names, shapes, dtypes and order
    assert len(mine) == n_entries and sum(p.numel() for p in net.parameters()) == n_params
    if name in PUBLISHED:
        assert abs(n_params / PUBLISHED[name] - 1) < 0.005


def test_basicvsrpp_builds_its_deformable_alignment_on_a_machine_without_cuda():
    net = build_on_meta({'net_type': 'basicvsrpp'})
    assert set(net.deform_align) == {'backward_1', 'forward_1', 'backward_2', 'forward_2'}


def small(kind, **kw):
    torch.manual_seed(0)
    defaults = {'basicvsr': dict(num_feat=8, num_block=1), 'iconvsr': dict(num_feat=8, num_block=1),
                'basicvsrpp': dict(mid_channels=16, num_blocks=1),
                'edvr': dict(num_feat=16, num_extract_block=1, num_reconstruct_block=1, deformable_groups=2)}[kind]
    return build_network({'net_type': kind, **defaults, **kw}).eval()


def clip(t, h, w, seed=0):
    return torch.rand(1, t, 3, h, w, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize('kind, kw, shape, out', [
    ('basicvsr', {}, (1, 3, 3, 36, 40), (1, 3, 3, 144, 160)),
    ('iconvsr', {'keyframe_stride': 2, 'temporal_padding': 1}, (1, 3, 3, 34, 38), (1, 3, 3, 136, 152)),
    ('basicvsrpp', {}, (1, 3, 3, 36, 40), (1, 3, 3, 144, 160)),
    ('basicvsrpp', {'is_low_res_input': False}, (1, 2, 3, 144, 160), (1, 2, 3, 144, 160)),
    ('edvr', {}, (1, 5, 3, 16, 20), (1, 3, 64, 80)),
    ('edvr', {'with_tsa': False, 'num_frame': 3}, (1, 3, 3, 16, 20), (1, 3, 64, 80)),
    ('edvr', {'hr_in': True, 'with_predeblur': True}, (1, 5, 3, 64, 48), (1, 3, 64, 48)),
], ids=['basicvsr', 'iconvsr-odd-size', 'basicvsrpp', 'basicvsrpp-full-size', 'edvr', 'edvr-woTSA', 'edvr-deblur'])
def test_the_output_is_the_clip_x4_or_the_centre_frame(kind, kw, shape, out):
    with torch.no_grad():
        y = small(kind, **kw)(torch.rand(shape))
    assert tuple(y.shape) == out and torch.isfinite(y).all()


def test_at_initialisation_the_sliding_window_output_sits_near_the_bilinear_upsampling_of_the_centre_frame():
    """The residual tails start small (BasicSR's x0.1 residual-block init): the centre frame, not another, is the
    base of EDVR's output (and moving center_frame_idx moves it)."""
    x = clip(5, 16, 16)
    for centre in (2, 1):
        net = small('edvr', center_frame_idx=centre)
        with torch.no_grad():
            y = net(x)
        base = torch.nn.functional.interpolate(x[:, centre], scale_factor=4, mode='bilinear', align_corners=False)
        others = [torch.nn.functional.interpolate(x[:, t], scale_factor=4, mode='bilinear', align_corners=False)
                  for t in range(5) if t != centre]
        err = (y - base).abs().mean()
        assert all(err < (y - o).abs().mean() for o in others)


def test_iconvsr_pads_keyframe_windows_with_the_frames_basicsr_takes():
    """temporal_padding 2: frames 4, 3 before the first and -4, -5 after the last (3: 6, 5, 4 and -5, -6, -7)."""
    for p, before, after in ((2, [4, 3], [-4, -5]), (3, [6, 5, 4], [-5, -6, -7])):
        net = small('iconvsr', temporal_padding=p, keyframe_stride=3)
        t = 8
        x = torch.arange(t, dtype=torch.float32).view(1, t, 1, 1, 1).expand(1, t, 3, 36, 36)
        seen = []

        def record(frames, seen=seen):
            seen.append(frames[0, :, 0, 0, 0].tolist())  # each frame's value is its index
            return torch.zeros(1, 8, 36, 36)
        net.edvr.forward = record
        assert net.keyframes(t) == [0, 3, 6, 7]
        net.keyframe_features(x, net.keyframes(t))
        padded = [float(t + i if i < 0 else i) for i in before] + [float(i) for i in range(t)] + \
                 [float(t + i) for i in after]
        assert seen == [padded[i:i + 2 * p + 1] for i in (0, 3, 6, 7)]


def test_iconvsr_needs_the_frames_its_keyframe_padding_reads():
    with pytest.raises(ValueError, match=r'at least 5 frames'):
        small('iconvsr', temporal_padding=2)(clip(4, 36, 36))


@pytest.mark.parametrize('kind', ['basicvsr', 'basicvsrpp'])
def test_frames_spynet_cannot_take_are_refused_in_one_line(kind):
    with pytest.raises(ValueError, match=r'at least 33x33 pixels'):
        small(kind)(clip(3, 32, 48))


def test_basicvsrpp_reuses_the_backward_flows_for_a_mirror_extended_clip_with_the_same_result():
    net = small('basicvsrpp')
    half = clip(2, 33, 33)
    x = torch.cat([half, half.flip(1)], 1)
    calls = []
    spynet_forward = net.spynet.forward
    net.spynet.forward = lambda a, b: calls.append(1) or spynet_forward(a, b)
    with torch.no_grad():
        y = net(x)
        assert len(calls) == 1
        net.is_mirror_extended = lambda lqs: False  # both directions computed: the same flows, the same output
        y_both = net(x)
    assert len(calls) == 3 and torch.allclose(y, y_both, atol=1e-5)
    assert not BasicVSRPlusPlus.is_mirror_extended(clip(4, 36, 36))


def test_basicvsrpp_cpu_cache_path_extracts_frame_by_frame_and_gives_the_same_output():
    x = clip(3, 33, 33)
    with torch.no_grad():
        cached = small('basicvsrpp', cpu_cache_length=2)(x)
        whole = small('basicvsrpp', cpu_cache_length=100)(x)
    assert torch.allclose(cached, whole, atol=1e-5)


def test_basicvsrpp_second_order_alignment_starts_on_the_flows():
    """conv_offset's last layer starts at zero: offsets = the flows exactly, masks 1/2."""
    net = small('basicvsrpp')
    dcn = net.deform_align['forward_1']
    assert not dcn.conv_offset[-1].weight.any() and not dcn.conv_offset[-1].bias.any()
    x = torch.rand(1, 32, 8, 8)
    zero = torch.zeros(1, 2, 8, 8)
    with torch.no_grad():
        aligned = dcn(x, torch.rand(1, 48, 8, 8), zero, zero)
        plain = torch.nn.functional.conv2d(x * 0.5, dcn.weight, dcn.bias, padding=1)
    assert torch.allclose(aligned, plain, atol=1e-5)


def test_iconvsr_edvr_path_loads_a_trained_extractor_or_the_front_of_a_trained_edvr(tmp_path):
    torch.manual_seed(1)
    edvr = build_network({'net_type': 'edvr', 'num_feat': 16, 'num_frame': 3, 'num_reconstruct_block': 1})
    torch.save({'params': edvr.state_dict()}, tmp_path / 'edvr.pth')
    net = small('iconvsr', num_feat=16, temporal_padding=1, edvr_path=str(tmp_path / 'edvr.pth'))
    for k, v in net.edvr.state_dict().items():
        assert torch.equal(v, edvr.state_dict()[k]), k
    torch.save(net.edvr.state_dict(), tmp_path / 'extractor.pth')
    again = small('iconvsr', num_feat=16, temporal_padding=1, edvr_path=str(tmp_path / 'extractor.pth'))
    assert all(torch.equal(v, net.edvr.state_dict()[k]) for k, v in again.edvr.state_dict().items())
    with pytest.raises(UserError, match=r'^netG.edvr_path: .* does not hold an EDVR feature extractor for 5 frames'):
        small('iconvsr', num_feat=16, temporal_padding=2, edvr_path=str(tmp_path / 'edvr.pth'))
    with pytest.raises(UserError, match=r'^netG.edvr_path: file not found'):
        small('iconvsr', edvr_path=str(tmp_path / 'none.pth'))


@pytest.mark.parametrize('kw, match', [
    ({'hr_in': True}, r'netG.hr_in: full-size input needs with_predeblur'),
    ({'center_frame_idx': 5}, r'netG.center_frame_idx: 5 is not a frame'),
    ({'num_out_ch': 1}, r'netG.num_out_ch: 1 must equal num_in_ch 3'),
    ({'deformable_groups': 3}, r'netG.deformable_groups: 3 must divide num_feat 16'),
])
def test_edvr_arguments_that_cannot_work_are_user_errors(kw, match):
    with pytest.raises(UserError, match=match):
        small('edvr', **kw)


def test_edvr_refuses_frames_the_pyramid_cannot_halve_twice_and_other_window_lengths():
    net = small('edvr')
    with pytest.raises(ValueError, match='divisible by 4'):
        net(clip(5, 18, 16))
    with pytest.raises(ValueError, match='num_frame=5'):
        net(clip(3, 16, 16))


def test_the_networks_say_which_frame_sizes_they_take():
    """VideoRestorer pads frames only to this multiple (models/video_restorer.py)."""
    assert BasicVSR.size_multiple == IconVSR.size_multiple == 1
    assert small('basicvsrpp').size_multiple == 1 and small('basicvsrpp', is_low_res_input=False).size_multiple == 4
    assert small('edvr').size_multiple == 4 and small('edvr', hr_in=True, with_predeblur=True).size_multiple == 16
    assert isinstance(small('edvr'), EDVR)


def test_gradients_reach_every_parameter_of_each_network():
    """Nothing is built but unused (DDP without find_unused_parameters needs every parameter in the graph)."""
    cases = [('basicvsr', {}, clip(2, 33, 33)), ('iconvsr', {'temporal_padding': 1, 'keyframe_stride': 2},
                                                  clip(3, 33, 33)),
             ('basicvsrpp', {}, clip(3, 33, 33)), ('edvr', {}, clip(5, 16, 16))]
    for kind, kw, x in cases:
        net = small(kind, **kw).train()
        net(x).mean().backward()
        missing = [n for n, p in net.named_parameters() if p.grad is None]
        assert not missing, (kind, missing[:3])
