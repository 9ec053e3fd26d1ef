"""BasicVSR and IconVSR (Chan et al., "BasicVSR: The Search for Essential Components in Video Super-Resolution
and Beyond", CVPR 2021) in BasicSR's layout, so BasicSR's released checkpoints load strictly
(tests/data/archs/basicvsr__*.tsv, iconvsr__*.tsv).

BasicVSR: bidirectional recurrent propagation at the input resolution. SpyNet estimates the flow between
neighbouring frames; a backward branch walks the clip from its last frame to its first, warping its hidden
state onto each frame with the flow and updating it from [frame, warped state] with a residual trunk; a
forward branch does the same from first to last. Each frame's two states are fused (1×1 conv) and
upsampled ×4 (two pixel shuffles) on top of the bilinearly upsampled frame.

IconVSR adds information refill and coupled propagation: at keyframes (every `keyframe_stride` frames and the
last) an EDVR feature extractor (PCD alignment + TSA fusion of the 2·temporal_padding+1 frames around it) gives
features that are fused into the propagated state (`backward_fusion`, `forward_fusion`), and the forward trunk
also sees the backward state of the frame. Frames are reflect-padded to a multiple of 4 for the extractor's
pyramid and the output cropped back.

Input N×T×3×H×W with H, W > 32 (SpyNet), output N×T×3×4H×4W (×4 only, as BasicSR). IconVSR needs
T >= 2·temporal_padding+1.
"""
import os
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from models.networks.edvr import PCDAlignment, PyramidAlignFuse, TSAFusion, lrelu
from models.networks.layers.basicsr import ConvResidualBlocks, ResidualBlockNoBN, residual_blocks
from models.networks.layers.flow import SpyNet, flow_warp
from models.registry import NETWORKS
from utils.options.foreign import Foreign
from utils.checkpoint import load as load_checkpoint, unwrap_params
from utils.errors import InputShapeError, UserError


def neighbour_flows(spynet: SpyNet, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(forward, backward) flows N×(T-1)×2×H×W between neighbouring frames of x (N×T×C×H×W): backward[:, i]
    warps frame i+1 onto frame i, forward[:, i] frame i onto frame i+1."""
    n, t, c, h, w = x.shape
    x1, x2 = x[:, :-1].reshape(-1, c, h, w), x[:, 1:].reshape(-1, c, h, w)
    backward = spynet(x1, x2).view(n, t - 1, 2, h, w)
    forward = spynet(x2, x1).view(n, t - 1, 2, h, w)
    return forward, backward


def warp(feat: torch.Tensor, flow: torch.Tensor) -> torch.Tensor:
    """feat (N×C×H×W) warped by flow (N×2×H×W)."""
    return flow_warp(feat, flow.permute(0, 2, 3, 1))


# a step of one direction's recurrence: (frame index, state warped to it) -> the new state
BackwardCell = Callable[[int, torch.Tensor], torch.Tensor]
# a step of the forward recurrence: (frame index, warped state, the backward state of that frame) -> (new state,
# the restored frame)
ForwardCell = Callable[[int, torch.Tensor, torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]


def propagate_both_ways(x: torch.Tensor, flows_forward: torch.Tensor, flows_backward: torch.Tensor, num_feat: int,
                        backward_cell: BackwardCell, forward_cell: ForwardCell) -> torch.Tensor:
    """BasicVSR's bidirectional propagation (Chan et al., CVPR 2021, Sec. 3.1), which IconVSR keeps: a state
    carried from the last frame to the first (warped by the backward flows), then one from the first to the last
    that also reads each frame's backward state; returns the frames `forward_cell` restores, stacked on dim 1.
    Each backward state is released as soon as the forward pass has used it."""
    n, t, _, h, w = x.shape
    backward: List[torch.Tensor] = [x.new_empty(0)] * t
    state = x.new_zeros(n, num_feat, h, w)
    for i in range(t - 1, -1, -1):
        if i < t - 1:
            state = warp(state, flows_backward[:, i])
        state = backward_cell(i, state)
        backward[i] = state
    outputs = []
    state = x.new_zeros(n, num_feat, h, w)
    for i in range(t):
        if i > 0:
            state = warp(state, flows_forward[:, i - 1])
        state, out = forward_cell(i, state, backward[i])
        backward[i] = x.new_empty(0)
        outputs.append(out)
    return torch.stack(outputs, 1)


class UpsampleX4(nn.Module):
    """Base of BasicVSR and IconVSR: their ×4 reconstruction tail (upconv1/2 + pixel shuffles, conv_hr, conv_last,
    plus the bilinearly upsampled frame), built last so that the state_dict order is BasicSR's."""

    upconv1: nn.Conv2d
    upconv2: nn.Conv2d
    conv_hr: nn.Conv2d
    conv_last: nn.Conv2d

    def build_upsampler(self, num_feat: int) -> None:
        self.upconv1 = nn.Conv2d(num_feat, num_feat * 4, 3, 1, 1)
        self.upconv2 = nn.Conv2d(num_feat, 64 * 4, 3, 1, 1)
        self.conv_hr = nn.Conv2d(64, 64, 3, 1, 1)
        self.conv_last = nn.Conv2d(64, 3, 3, 1, 1)

    def upsample(self, feat: torch.Tensor, frame: torch.Tensor) -> torch.Tensor:
        out = lrelu(F.pixel_shuffle(self.upconv1(feat), 2))
        out = lrelu(F.pixel_shuffle(self.upconv2(out), 2))
        out = self.conv_last(lrelu(self.conv_hr(out)))
        return out + F.interpolate(frame, scale_factor=4, mode='bilinear', align_corners=False)


SPYNET_MIN_SIZE = 33  # SpyNet resizes to a multiple of 32 and halves 5 times: 32 px would leave no flow


def _check_frames(x: torch.Tensor, least: int, name: str) -> None:
    if x.dim() != 5 or x.shape[2] != 3:
        raise InputShapeError(f'{name} takes N×T×3×H×W clips, got {tuple(x.shape)}')
    if x.shape[1] < least:
        raise InputShapeError(f'{name} needs at least {least} frames, got {x.shape[1]}')
    if min(x.shape[-2:]) < SPYNET_MIN_SIZE:
        raise InputShapeError(f'{name} needs frames of at least {SPYNET_MIN_SIZE}x{SPYNET_MIN_SIZE} pixels '
                              f'(SpyNet), got {x.shape[-2]}x{x.shape[-1]}')


@NETWORKS.register('basicvsr', foreign=[Foreign('BasicVSR')])
class BasicVSR(UpsampleX4):
    """BasicVSR with BasicSR's keywords: `num_feat` channels, `num_block` residual blocks per branch,
    `spynet_path` a local SpyNet weights file (null: SpyNet starts random; nothing is downloaded)."""

    repeated_blocks = (ResidualBlockNoBN,)
    size_multiple = 1  # any frame size: SpyNet resizes internally

    def __init__(self, num_feat: int = 64, num_block: int = 15, spynet_path: Optional[str] = None):
        super().__init__()
        self.num_feat = num_feat
        self.spynet = SpyNet(spynet_path)
        self.backward_trunk = ConvResidualBlocks(num_feat + 3, num_feat, num_block)
        self.forward_trunk = ConvResidualBlocks(num_feat + 3, num_feat, num_block)
        self.fusion = nn.Conv2d(2 * num_feat, num_feat, 1, 1, 0)
        self.build_upsampler(num_feat)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_frames(x, 2, 'BasicVSR')
        flows_forward, flows_backward = neighbour_flows(self.spynet, x)

        def backward_cell(i: int, state: torch.Tensor) -> torch.Tensor:
            return self.backward_trunk(torch.cat([x[:, i], state], 1))

        def forward_cell(i: int, state: torch.Tensor, back: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
            state = self.forward_trunk(torch.cat([x[:, i], state], 1))
            return state, self.upsample(lrelu(self.fusion(torch.cat([back, state], 1))), x[:, i])
        return propagate_both_ways(x, flows_forward, flows_backward, self.num_feat, backward_cell, forward_cell)


class EDVRFeatureExtractor(PyramidAlignFuse):
    """IconVSR's keyframe branch: EDVR's feature pyramid, PCD alignment (8 deformable groups) and TSA fusion of
    `num_input_frame` frames into the centre frame's features (no reconstruction). `load_path` loads a trained
    extractor, or a trained EDVR whose other weights (reconstruction, upsampling) are left out."""

    def __init__(self, num_input_frame: int, num_feat: int, load_path: Optional[str] = None):
        super().__init__()
        self.num_input_frame = num_input_frame
        self.center_frame_idx = num_input_frame // 2
        self.conv_first = nn.Conv2d(3, num_feat, 3, 1, 1)
        self.feature_extraction = residual_blocks(5, num_feat)
        self.conv_l2_1 = nn.Conv2d(num_feat, num_feat, 3, 2, 1)
        self.conv_l2_2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_l3_1 = nn.Conv2d(num_feat, num_feat, 3, 2, 1)
        self.conv_l3_2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.pcd_align = PCDAlignment(num_feat, deformable_groups=8)
        self.fusion = TSAFusion(num_feat, num_input_frame, self.center_frame_idx)
        if load_path:
            self.load_weights(load_path)

    def load_weights(self, path: str) -> None:
        """The extractor's weights from `path` (bare, `params` or `params_ema`); a full EDVR checkpoint gives its
        front part. Every extractor weight must be there with its shape: else one line naming the option."""
        if not os.path.isfile(path):
            raise UserError(f'netG.edvr_path: file not found: {path}')
        try:
            state = unwrap_params(load_checkpoint(path))
        except UserError as e:
            raise UserError(f'netG.edvr_path: {e}') from None
        own = self.state_dict()
        missing = [k for k in own if k not in state]
        wrong = [k for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
        if missing or wrong:
            what = f'missing {missing[:3]}' if missing else \
                f'{wrong[0]} is {tuple(state[wrong[0]].shape)}, the extractor\'s {tuple(own[wrong[0]].shape)}'
            raise UserError(f'netG.edvr_path: {path} does not hold an EDVR feature extractor for {self.num_input_frame} '
                            f'frames of {self.conv_first.out_channels} features ({what})')
        self.load_state_dict({k: state[k] for k in own})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, c, h, w = x.shape
        return self.align_and_fuse(lrelu(self.conv_first(x.reshape(n * t, c, h, w))), n, t)


@NETWORKS.register('iconvsr', foreign=[Foreign('IconVSR')])
class IconVSR(UpsampleX4):
    """IconVSR with BasicSR's keywords: keyframes every `keyframe_stride` frames (and the last), each refilled by
    the EDVR extractor over `temporal_padding` frames on each side (the clip mirrored at its ends as BasicSR does:
    frames 2p..p+1 before the first, -(p+2)..-(2p+1) after the last); `edvr_path` a trained extractor or EDVR."""

    repeated_blocks = (ResidualBlockNoBN,)
    size_multiple = 1  # frames are reflect-padded to a multiple of 4 inside and cropped back

    def __init__(self, num_feat: int = 64, num_block: int = 15, keyframe_stride: int = 5, temporal_padding: int = 2,
                 spynet_path: Optional[str] = None, edvr_path: Optional[str] = None):
        super().__init__()
        if keyframe_stride < 1:
            raise UserError(f'netG.keyframe_stride: must be >= 1, got {keyframe_stride}')
        if temporal_padding < 1:
            raise UserError(f'netG.temporal_padding: must be >= 1, got {temporal_padding}')
        if num_feat % 8:
            raise UserError(f'netG.num_feat: {num_feat} must be divisible by the 8 deformable groups of the EDVR '
                            f'extractor')
        self.num_feat = num_feat
        self.keyframe_stride = keyframe_stride
        self.temporal_padding = temporal_padding
        self.edvr = EDVRFeatureExtractor(2 * temporal_padding + 1, num_feat, edvr_path)
        self.spynet = SpyNet(spynet_path)
        self.backward_fusion = nn.Conv2d(2 * num_feat, num_feat, 3, 1, 1)
        self.backward_trunk = ConvResidualBlocks(num_feat + 3, num_feat, num_block)
        self.forward_fusion = nn.Conv2d(2 * num_feat, num_feat, 3, 1, 1)
        self.forward_trunk = ConvResidualBlocks(2 * num_feat + 3, num_feat, num_block)
        self.build_upsampler(num_feat)

    def keyframes(self, t: int) -> List[int]:
        idx = list(range(0, t, self.keyframe_stride))
        return idx if idx[-1] == t - 1 else idx + [t - 1]

    def keyframe_features(self, x: torch.Tensor, keyframes: List[int]) -> Dict[int, torch.Tensor]:
        p = self.temporal_padding
        before = x[:, [2 * p - k for k in range(p)]]       # p=2: frames 4, 3 (BasicSR's padding)
        after = x[:, [-(p + 2) - k for k in range(p)]]     # p=2: frames -4, -5
        padded = torch.cat([before, x, after], 1)
        return {i: self.edvr(padded[:, i:i + 2 * p + 1]) for i in keyframes}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_frames(x, 2 * self.temporal_padding + 1, f'IconVSR (temporal_padding {self.temporal_padding})')
        n, t, _, h_in, w_in = x.shape
        ph, pw = (4 - h_in % 4) % 4, (4 - w_in % 4) % 4
        if ph or pw:
            x = F.pad(x.reshape(n * t, 3, h_in, w_in), [0, pw, 0, ph], mode='reflect').view(n, t, 3, h_in + ph,
                                                                                           w_in + pw)
        keyframes = self.keyframes(t)
        flows_forward, flows_backward = neighbour_flows(self.spynet, x)
        refill = self.keyframe_features(x, keyframes)

        def backward_cell(i: int, state: torch.Tensor) -> torch.Tensor:
            if i in refill:  # keyframes: the EDVR features of the frame refill the state
                state = self.backward_fusion(torch.cat([state, refill[i]], 1))
            return self.backward_trunk(torch.cat([x[:, i], state], 1))

        def forward_cell(i: int, state: torch.Tensor, back: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
            if i in refill:
                state = self.forward_fusion(torch.cat([state, refill[i]], 1))
            state = self.forward_trunk(torch.cat([x[:, i], back, state], 1))
            return state, self.upsample(state, x[:, i])
        out = propagate_both_ways(x, flows_forward, flows_backward, self.num_feat, backward_cell, forward_cell)
        return out[..., :4 * h_in, :4 * w_in]
