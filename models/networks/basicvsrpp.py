"""BasicVSR++ (Chan et al., "BasicVSR++: Improving Video Super-Resolution with Enhanced Propagation and
Alignment", CVPR 2022) in BasicSR's layout (class BasicVSRPlusPlus), so checkpoints with BasicSR's names load
strictly (tests/data/archs/basicvsrpp__BasicVSRPP_REDS.tsv).

Second-order grid propagation: per-frame features are propagated four times (backward_1, forward_1,
backward_2, forward_2), each branch seeing the frame's features and every earlier branch's output. At each
step the state is aligned by flow-guided deformable alignment: SpyNet's flow to the previous frame (and the
flow to the one before, composed from two steps) warps the last two states; from [warped states, current
features, flows] a small conv stack predicts offset residues (bounded by `max_residue_magnitude`·tanh, added
to the flows) and modulation masks for a modulated deformable convolution (16 groups: 8 on the previous state
with the first flow, 8 on the state before with the second). A residual trunk updates the state. The five
feature streams of each frame are fused by `reconstruction` and upsampled ×4 on top of the bilinear
upsampling of the frame (`is_low_res_input` false: full-size input, stride-2 convs down to 1/4 and the output
at the input size, flows computed on a bicubic ×1/4 copy).

The deformable alignment is always built (BasicSR builds it only where CUDA is available and skips
alignment elsewhere); it runs through torchvision's `deform_conv2d` on CUDA and the pure-PyTorch path on CPU.
A mirror-extended clip (second half = first half reversed, as Vimeo-90K training uses) reuses the backward
flows for the forward branches (one comparison of the two halves per forward, a host read). A clip longer
than `cpu_cache_length` frames has its features extracted frame by frame and kept on the CPU between uses
(inference on long sequences on a GPU: memory instead of speed; on a CPU the moves are no-ops and the result
is the same as without).

Input N×T×3×H×W, H and W larger than 32 at the flows' resolution (SpyNet's limit; BasicSR asserts 64) and
multiples of 4 for full-size input; output N×T×3×4H×4W (N×T×3×H×W when `is_low_res_input` is false), on the
CPU when the features were cached there without autograd (inference).
"""
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from models.networks.layers.basicsr import ConvResidualBlocks, ResidualBlockNoBN
from models.networks.layers.deform_conv import ModulatedDeformConvPack
from models.networks.layers.flow import SpyNet, flow_warp
from models.registry import NETWORKS
from utils.options.foreign import Foreign
from utils.errors import InputShapeError, UserError

BRANCHES = ('backward_1', 'forward_1', 'backward_2', 'forward_2')
# SpyNet resizes frames to a multiple of 32 and halves them 5 times: up to 32 px nothing is left of them. BasicSR
# asserts 64 here (frames of 33-63 px reach SpyNet upsampled to 64, the same pyramid): we take what SpyNet takes.
MIN_FLOW_SIZE = 33


def lrelu(x: torch.Tensor) -> torch.Tensor:
    return F.leaky_relu(x, 0.1)


def warp(feat: torch.Tensor, flow: torch.Tensor) -> torch.Tensor:
    return flow_warp(feat, flow.permute(0, 2, 3, 1))


class SecondOrderDeformableAlignment(ModulatedDeformConvPack):
    """Flow-guided deformable alignment of [state t-1, state t-2] (2C channels in, C out, 16 groups): offsets =
    flows (as (dy, dx) per tap) + max_residue_magnitude·tanh(residue), masks = sigmoid, both from `conv_offset`
    over [extra features, flow t-1, flow t-2]."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, padding: int = 1,
                 deformable_groups: int = 16, max_residue_magnitude: float = 10):
        super().__init__(in_channels, out_channels, kernel_size, padding=padding, deformable_groups=deformable_groups)
        self.max_residue_magnitude = max_residue_magnitude
        self.conv_offset = nn.Sequential(
            nn.Conv2d(3 * out_channels + 4, out_channels, 3, 1, 1), nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, 1, 1), nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, 1, 1), nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(out_channels, 3 * kernel_size * kernel_size * deformable_groups, 3, 1, 1))
        nn.init.zeros_(self.conv_offset[-1].weight)  # sampling follows the flows until the residues are learnt
        nn.init.zeros_(self.conv_offset[-1].bias)

    def forward(self, x: torch.Tensor, extra_feat: torch.Tensor, flow_1: torch.Tensor,
                flow_2: torch.Tensor) -> torch.Tensor:
        o1, o2, mask = torch.chunk(self.conv_offset(torch.cat([extra_feat, flow_1, flow_2], 1)), 3, dim=1)
        offset = self.max_residue_magnitude * torch.tanh(torch.cat((o1, o2), 1))
        off_1, off_2 = torch.chunk(offset, 2, dim=1)
        off_1 = off_1 + flow_1.flip(1).repeat(1, off_1.size(1) // 2, 1, 1)
        off_2 = off_2 + flow_2.flip(1).repeat(1, off_2.size(1) // 2, 1, 1)
        return self.deform(x, torch.cat([off_1, off_2], 1), torch.sigmoid(mask))


@NETWORKS.register('basicvsrpp', foreign=[Foreign('BasicVSRPlusPlus')])
class BasicVSRPlusPlus(nn.Module):
    """BasicVSR++ with BasicSR's keywords: `mid_channels`, `num_blocks` per propagation branch,
    `max_residue_magnitude`, `is_low_res_input`, `spynet_path` (a local SpyNet weights file; null: random),
    `cpu_cache_length`."""

    repeated_blocks = (ResidualBlockNoBN,)

    def __init__(self, mid_channels: int = 64, num_blocks: int = 7, max_residue_magnitude: float = 10,
                 is_low_res_input: bool = True, spynet_path: Optional[str] = None, cpu_cache_length: int = 100):
        super().__init__()
        if mid_channels % 16:
            raise UserError(f'netG.mid_channels: {mid_channels} must be divisible by 16 (the deformable alignment\'s '
                            f'groups: 8 per aligned state)')
        if cpu_cache_length < 1:
            raise UserError(f'netG.cpu_cache_length: must be >= 1 (frames), got {cpu_cache_length}')
        self.mid_channels = mid_channels
        self.is_low_res_input = is_low_res_input
        self.cpu_cache_length = cpu_cache_length
        self.size_multiple = 1 if is_low_res_input else 4
        self.spynet = SpyNet(spynet_path)
        if is_low_res_input:
            self.feat_extract = ConvResidualBlocks(3, mid_channels, 5)
        else:
            self.feat_extract = nn.Sequential(
                nn.Conv2d(3, mid_channels, 3, 2, 1), nn.LeakyReLU(0.1, inplace=True),
                nn.Conv2d(mid_channels, mid_channels, 3, 2, 1), nn.LeakyReLU(0.1, inplace=True),
                ConvResidualBlocks(mid_channels, mid_channels, 5))
        self.deform_align = nn.ModuleDict()
        self.backbone = nn.ModuleDict()
        for i, name in enumerate(BRANCHES):
            self.deform_align[name] = SecondOrderDeformableAlignment(
                2 * mid_channels, mid_channels, 3, padding=1, deformable_groups=16,
                max_residue_magnitude=max_residue_magnitude)
            self.backbone[name] = ConvResidualBlocks((2 + i) * mid_channels, mid_channels, num_blocks)
        self.reconstruction = ConvResidualBlocks(5 * mid_channels, mid_channels, 5)
        self.upconv1 = nn.Conv2d(mid_channels, mid_channels * 4, 3, 1, 1)
        self.upconv2 = nn.Conv2d(mid_channels, 64 * 4, 3, 1, 1)
        self.conv_hr = nn.Conv2d(64, 64, 3, 1, 1)
        self.conv_last = nn.Conv2d(64, 3, 3, 1, 1)

    @staticmethod
    def is_mirror_extended(lqs: torch.Tensor) -> bool:
        """Whether the second half of the clip is the first half reversed (frame i equals frame T-1-i)."""
        t = lqs.size(1)
        return t % 2 == 0 and torch.equal(lqs[:, :t // 2], lqs[:, t // 2:].flip(1))

    def compute_flows(self, lqs: torch.Tensor, mirrored: bool) -> Dict[str, torch.Tensor]:
        """{'backward': N×(T-1)×2×h×w flows warping frame i+1 onto i, 'forward': frame i onto i+1}."""
        n, t, c, h, w = lqs.shape
        if min(h, w) < MIN_FLOW_SIZE:
            raise InputShapeError(f'BasicVSR++ needs frames of at least {MIN_FLOW_SIZE}x{MIN_FLOW_SIZE} pixels for '
                                  f'its flows (SpyNet, at the low resolution), got {h}x{w}')
        x1, x2 = lqs[:, :-1].reshape(-1, c, h, w), lqs[:, 1:].reshape(-1, c, h, w)
        backward = self.spynet(x1, x2).view(n, t - 1, 2, h, w)
        forward = backward.flip(1) if mirrored else self.spynet(x2, x1).view(n, t - 1, 2, h, w)
        return {'backward': backward, 'forward': forward}

    def propagate(self, feats: Dict[str, List[torch.Tensor]], flows: torch.Tensor, name: str,
                  on: Callable[[torch.Tensor], torch.Tensor], park: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Run branch `name` over the clip (backward: last frame first), appending its states to feats[name] in
        time order. `on` brings a tensor to the compute device, `park` puts a kept one where it waits."""
        n, t1, _, h, w = flows.shape
        frames = list(range(t1 + 1))
        flow_idx = list(range(-1, t1))
        if name.startswith('backward'):
            frames = frames[::-1]
            flow_idx = frames
        earlier = [k for k in feats if k not in ('spatial', name)]
        states: List[torch.Tensor] = []
        state = on(flows.new_zeros(n, self.mid_channels, h, w))
        for i, idx in enumerate(frames):
            current = on(feats['spatial'][idx])
            if i > 0:
                flow_n1 = on(flows[:, flow_idx[i]])
                cond_n1 = warp(state, flow_n1)
                if i > 1:
                    feat_n2 = on(states[-2])
                    flow_n2 = flow_n1 + warp(on(flows[:, flow_idx[i - 1]]), flow_n1)
                    cond_n2 = warp(feat_n2, flow_n2)
                else:
                    feat_n2, flow_n2, cond_n2 = (torch.zeros_like(v) for v in (state, flow_n1, cond_n1))
                state = self.deform_align[name](torch.cat([state, feat_n2], 1),
                                                torch.cat([cond_n1, current, cond_n2], 1), flow_n1, flow_n2)
            feat = torch.cat([current] + [on(feats[k][idx]) for k in earlier] + [state], 1)
            state = state + self.backbone[name](feat)
            states.append(park(state))
        feats[name] = states[::-1] if name.startswith('backward') else states

    def forward(self, lqs: torch.Tensor) -> torch.Tensor:
        if lqs.dim() != 5 or lqs.shape[2] != 3:
            raise InputShapeError(f'BasicVSR++ takes N×T×3×H×W clips, got {tuple(lqs.shape)}')
        n, t, c, h, w = lqs.shape
        if t < 2:
            raise InputShapeError(f'BasicVSR++ needs at least 2 frames, got {t}')
        if not self.is_low_res_input and (h % 4 or w % 4):
            raise InputShapeError(f'BasicVSR++ with full-size input needs height and width divisible by 4, '
                                  f'got {h}x{w}')
        device = lqs.device
        cache = t > self.cpu_cache_length  # frame by frame, features kept on the CPU (no-op moves on a CPU)

        def on(x: torch.Tensor) -> torch.Tensor:
            return x.to(device, non_blocking=True) if cache else x

        def park(x: torch.Tensor) -> torch.Tensor:
            return x.cpu() if cache else x

        if self.is_low_res_input:
            lqs_flow = lqs
        else:
            lqs_flow = F.interpolate(lqs.reshape(-1, c, h, w), scale_factor=0.25, mode='bicubic').view(
                n, t, c, h // 4, w // 4)
        feats: Dict[str, List[torch.Tensor]] = {}
        if cache:
            feats['spatial'] = [park(self.feat_extract(lqs[:, i])) for i in range(t)]
        else:
            spatial = self.feat_extract(lqs.reshape(-1, c, h, w))
            spatial = spatial.view(n, t, *spatial.shape[1:])
            feats['spatial'] = [spatial[:, i] for i in range(t)]
        flows = {k: park(v) for k, v in self.compute_flows(lqs_flow, self.is_mirror_extended(lqs)).items()}
        for name in BRANCHES:
            self.propagate(feats, flows[name.split('_')[0]], name, on, park)
        return self.upsample(lqs, feats, on, park)

    def upsample(self, lqs: torch.Tensor, feats: Dict[str, List[torch.Tensor]],
                 on: Callable[[torch.Tensor], torch.Tensor], park: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Each frame's five feature streams → reconstruction → ×4 (or ×1) output plus the frame's upsampling."""
        outputs = []
        for i in range(lqs.size(1)):
            hr = self.reconstruction(torch.cat([on(feats[k][i]) for k in ('spatial',) + BRANCHES], 1))
            hr = lrelu(F.pixel_shuffle(self.upconv1(hr), 2))
            hr = lrelu(F.pixel_shuffle(self.upconv2(hr), 2))
            hr = self.conv_last(lrelu(self.conv_hr(hr)))
            if self.is_low_res_input:
                hr = hr + F.interpolate(lqs[:, i], scale_factor=4, mode='bilinear', align_corners=False)
            else:
                hr = hr + lqs[:, i]
            outputs.append(hr if torch.is_grad_enabled() else park(hr))  # training: the loss is on the device
        return torch.stack(outputs, 1)
