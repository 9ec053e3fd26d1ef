"""RVRT: Recurrent Video Restoration Transformer with Guided Deformable Attention (Liang et al., 2022).

Re-implementation from the paper whose `state_dict` matches what KAIR builds for its six RVRT option
files name for name and shape for shape (tests/data/kair/rvrt__*.netG.tsv), so released checkpoints
load with `strict=True`.

The video is cut into clips of `clip_size` frames. A shallow feature extractor runs per frame; then four
propagation modules (backward_1, forward_1, backward_2, forward_2) each walk over the clips, aligning
the previous clip's features to the current clip with guided deformable attention (GDA) and refining
them with a Swin-style transformer over the clip; a reconstruction module fuses all of them per frame.
SR configs (upscale > 1) work at the input resolution; deblurring/denoising (upscale == 1) work at 1/4
resolution (two stride-2 convolutions, the ×4 pixel-shuffle upsampler restores it), as in the paper.

Input N×T×C×H×W (C = 3, or 4 with a noise-level map when `nonblind_denoising`), T a multiple of
`clip_size`; output N×T×3×(H·upscale)×(W·upscale). Frames are mirror-padded inside to a multiple of the
attention window (at feature resolution) and the output is cropped back.
"""
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from einops.layers.torch import Rearrange
from torch import nn

from models.networks.layers.guided_attention import guided_deformable_attention
from models.networks.swinir import Mlp
from models.networks.layers.flow import SpyNet, flow_warp
from models.networks.vrt import RTMSA, TMSA, FrameConv3d, Upsample, checkpoint_plan
from models.registry import NETWORKS
from utils.errors import UserError

MODULES = ('backward_1', 'forward_1', 'backward_2', 'forward_2')
SPYNET_MIN_SIZE = 33  # SpyNet's 6-level pyramid needs frames larger than 32 pixels


def _channels_last(layer: nn.Module) -> nn.Sequential:
    """Apply a per-pixel layer (Linear, Mlp) to N×D×C×H×W: the reference wraps them like this, which puts
    the layer at index 1 of its state_dict names (`proj_q.1.weight`)."""
    return nn.Sequential(Rearrange('n d c h w -> n d h w c'), layer, Rearrange('n d h w c -> n d c h w'))


def swin_group(dim: int, depth: int, num_heads: int, window_size: Sequence[int], mlp_ratio: float,
               use_checkpoint_attn: bool, use_checkpoint_ffn: bool) -> RTMSA:
    """VRT's residual window-attention group (x + linear(blocks(x))) with RVRT's plain MLP (fc1/fc2).

    VRT's blocks have a gated MLP; RVRT's have Swin's. Assigning the new MLP to an existing attribute
    keeps its position among the block's modules, hence the state_dict order.
    """
    group = RTMSA(dim=dim, depth=depth, num_heads=num_heads, window_size=window_size, mlp_ratio=mlp_ratio,
                  qkv_bias=True, use_checkpoint_attn=use_checkpoint_attn, use_checkpoint_ffn=use_checkpoint_ffn)
    for block in group.residual_group.blocks:
        block.mlp = Mlp(dim, int(dim * mlp_ratio))
    return group


class ConvSwinStack(nn.Module):
    """Grouped input conv, LayerNorm, `num_blocks` residual Swin groups, LayerNorm (N×T×C×H×W in and out).

    The input conv fuses the concatenated features of several modules into `dim` channels; grouping it
    (`inputconv_groups`) is how the denoising config keeps that fusion cheap.
    """

    def __init__(self, in_channels: int, dim: int, groups: int, num_blocks: int, depth: int, num_heads: int,
                 window_size: Sequence[int], mlp_ratio: float, use_checkpoint_attn: bool, use_checkpoint_ffn: bool):
        super().__init__()
        self.main = nn.Sequential(
            Rearrange('n d c h w -> n c d h w'),
            FrameConv3d(in_channels, dim, kernel_size=(1, 3, 3), padding=(0, 1, 1), groups=groups),
            Rearrange('n c d h w -> n d h w c'),
            nn.LayerNorm(dim),
            Rearrange('n d h w c -> n c d h w'),
            nn.Sequential(*[swin_group(dim, depth, num_heads, window_size, mlp_ratio, use_checkpoint_attn,
                                       use_checkpoint_ffn) for _ in range(num_blocks)]),
            Rearrange('n c d h w -> n d h w c'),
            nn.LayerNorm(dim),
            Rearrange('n d h w c -> n d c h w'))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.main(x)


class GuidedDeformAttention(nn.Module):
    """Clip-to-clip alignment by guided deformable attention (paper Sec. 3.3).

    Each frame j of the current clip (the queries, and the guide) attends to all S frames of the previous
    clip, key frame r being previous frame (j + r) mod S (positions within a clip in propagation order).
    Sampling points are the optical flow from frame j to that key frame plus a bounded residue
    (`max_residue_magnitude`·tanh) predicted per deformable group and window position by `conv_offset`
    from [current features, the previous clip's values warped by the flows, the flows]. Keys come from
    the previous clip's features of the layer below (like the queries), values from its propagated
    features. The output goes through a projection and a residual MLP. Returns the aligned features
    and the mean sampling displacement per key frame: the refined flows the second layer reuses.
    """

    def __init__(self, dim: int, clip_size: int = 2, attention_window: Sequence[int] = (3, 3),
                 deformable_groups: int = 12, attention_heads: int = 12, max_residue_magnitude: float = 10.):
        super().__init__()
        self.clip_size = clip_size
        self.window = (int(attention_window[0]), int(attention_window[1]))
        self.deformable_groups = deformable_groups
        self.attention_heads = attention_heads
        self.max_residue_magnitude = max_residue_magnitude
        proj_dim = 2 * dim  # the listings fix the attention width at twice the feature width
        self.proj_q = _channels_last(nn.Linear(dim, proj_dim))
        self.proj_k = _channels_last(nn.Linear(dim, proj_dim))
        self.proj_v = _channels_last(nn.Linear(dim, proj_dim))
        self.mlp = _channels_last(Mlp(dim, 2 * dim))
        n_offsets = clip_size * deformable_groups * self.window[0] * self.window[1] * 2
        hidden = 64
        self.conv_offset = nn.Sequential(
            FrameConv3d((1 + clip_size) * dim + 2 * clip_size, hidden, kernel_size=1),
            nn.LeakyReLU(negative_slope=0.1, inplace=True),
            *[m for _ in range(4) for m in (FrameConv3d(hidden, hidden, kernel_size=(1, 3, 3), padding=(0, 1, 1)),
                                            nn.LeakyReLU(negative_slope=0.1, inplace=True))],
            FrameConv3d(hidden, n_offsets, kernel_size=1))
        self.proj = _channels_last(nn.Linear(proj_dim, dim))
        # zero residues at the start: sampling follows the optical flow until the offsets are learnt
        nn.init.zeros_(self.conv_offset[-1].weight)
        nn.init.zeros_(self.conv_offset[-1].bias)

    def key_frames(self, device: torch.device) -> torch.Tensor:
        """S×S indices: row j lists the previous clip's frames that current frame j attends to."""
        s = self.clip_size
        return (torch.arange(s, device=device).view(s, 1) + torch.arange(s, device=device).view(1, s)) % s

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                flows: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """q: current clip N×S×C×H×W; k, v: previous clip N×S×C×H×W; flows: N×S×S×2×H×W, (dx, dy) from
        current frame j to its key frame r (warps that frame onto j)."""
        n, s, c, h, w = q.shape
        g, kk = self.deformable_groups, self.window[0] * self.window[1]
        idx = self.key_frames(q.device)
        warped = flow_warp(v[:, idx].flatten(0, 2), flows.flatten(0, 2).permute(0, 2, 3, 1)).view(n, s, s * c, h, w)
        cond = torch.cat([q, warped, flows.flatten(2, 3)], 2)
        residue = self.max_residue_magnitude * torch.tanh(self.conv_offset(cond.transpose(1, 2)).transpose(1, 2))
        offset = residue.view(n, s, s, g, kk, 2, h, w) + flows.flip(3).view(n, s, s, 1, 1, 2, h, w)
        qp, kp, vp = self.proj_q(q), self.proj_k(k), self.proj_v(v)
        out = guided_deformable_attention(qp.flatten(0, 1), kp[:, idx].flatten(0, 1), vp[:, idx].flatten(0, 1),
                                          offset.flatten(0, 1), self.attention_heads, self.window)
        out = self.proj(out.view(n, s, -1, h, w))
        return out + self.mlp(out), offset.mean((3, 4)).flip(3)


@NETWORKS.register('rvrt')
class RVRT(nn.Module):
    """Recurrent Video Restoration Transformer.

    Three-entry lists (`num_blocks`, `depths`, `embed_dims`, `num_heads`) configure the feature extractor,
    the four propagation modules and the reconstruction; `inputconv_groups` the input-conv groups of those
    six transformer stacks, and `no_checkpoint_attn_blocks`/`no_checkpoint_ffn_blocks` are indices into
    the same six (0 feature extraction, 1-4 backward_1 … forward_2, 5 reconstruction) exempted from
    activation checkpointing (`checkpoint`: "memory" or "none" replaces those keys by a preset, see VRT).
    `img_size` is accepted for KAIR option files: sizes come from the input.
    Features are kept on the CPU between uses when a CUDA clip is longer than `cpu_cache_length` frames.
    """

    repeated_blocks = (TMSA,)  # compiled one block at a time with train.compile (models/compile.py)

    def __init__(self, upscale: int = 4, clip_size: int = 2, img_size: List[int] = [2, 64, 64],
                 window_size: List[int] = [2, 8, 8], num_blocks: List[int] = [1, 2, 1], depths: List[int] = [2, 2, 2],
                 embed_dims: List[int] = [144, 144, 144], num_heads: List[int] = [6, 6, 6], mlp_ratio: float = 2.,
                 inputconv_groups: List[int] = [1, 1, 1, 1, 1, 1], spynet_path: Optional[str] = None,
                 max_residue_magnitude: float = 10., deformable_groups: int = 12, attention_heads: int = 12,
                 attention_window: List[int] = [3, 3], nonblind_denoising: bool = False,
                 use_checkpoint_attn: bool = False, use_checkpoint_ffn: bool = False,
                 no_checkpoint_attn_blocks: List[int] = [], no_checkpoint_ffn_blocks: List[int] = [],
                 cpu_cache_length: int = 100, checkpoint: Optional[str] = None):
        super().__init__()
        in_chans = 3 + int(nonblind_denoising)
        self._check_args(upscale, clip_size, window_size, num_blocks, depths, embed_dims, num_heads,
                         inputconv_groups, deformable_groups, attention_heads, attention_window, in_chans)
        self.upscale = upscale
        self.clip_size = clip_size
        self.in_chans = in_chans
        self.window_size = list(window_size)
        self.cpu_cache_length = cpu_cache_length
        dim = embed_dims[1]
        ckpt_attn, ckpt_ffn = checkpoint_plan(checkpoint, 6, use_checkpoint_attn, use_checkpoint_ffn,
                                              no_checkpoint_attn_blocks, no_checkpoint_ffn_blocks)
        frame_window = [1, window_size[1], window_size[2]]

        def stack(i: int, stage: int, in_channels: int, window: Sequence[int]) -> ConvSwinStack:
            return ConvSwinStack(in_channels, embed_dims[stage], inputconv_groups[i], num_blocks[stage], depths[stage],
                                 num_heads[stage], window, mlp_ratio, ckpt_attn[i], ckpt_ffn[i])

        self.spynet = SpyNet(spynet_path, [5])
        if upscale == 1:
            self.feat_extract = nn.Sequential(
                Rearrange('n d c h w -> n c d h w'),
                FrameConv3d(in_chans, embed_dims[0], (1, 3, 3), (1, 2, 2), (0, 1, 1)),
                nn.LeakyReLU(negative_slope=0.1, inplace=True),
                FrameConv3d(embed_dims[0], embed_dims[0], (1, 3, 3), (1, 2, 2), (0, 1, 1)),
                nn.LeakyReLU(negative_slope=0.1, inplace=True),
                Rearrange('n c d h w -> n d c h w'),
                stack(0, 0, embed_dims[0], frame_window))
        else:
            self.feat_extract = stack(0, 0, in_chans, frame_window)
        self.backbone = nn.ModuleDict({name: stack(1 + i, 1, embed_dims[0] + (i + 1) * dim, window_size)
                                       for i, name in enumerate(MODULES)})
        self.deform_align = nn.ModuleDict({name: GuidedDeformAttention(
            dim, clip_size, attention_window, deformable_groups, attention_heads, max_residue_magnitude)
            for name in MODULES})
        self.reconstruction = stack(5, 2, embed_dims[0] + len(MODULES) * dim, frame_window)
        num_feat = 64
        self.conv_before_upsampler = nn.Sequential(FrameConv3d(embed_dims[2], num_feat, kernel_size=1),
                                                   nn.LeakyReLU(negative_slope=0.1, inplace=True))
        self.upsampler = Upsample(4 if upscale == 1 else upscale, num_feat)
        self.conv_last = FrameConv3d(num_feat, 3, kernel_size=(1, 3, 3), padding=(0, 1, 1))

    @staticmethod
    def _check_args(upscale, clip_size, window_size, num_blocks, depths, embed_dims, num_heads, inputconv_groups,
                    deformable_groups, attention_heads, attention_window, in_chans) -> None:
        if upscale < 1:
            raise UserError(f'netG.upscale: must be >= 1, got {upscale}')
        if clip_size < 1:
            raise UserError(f'netG.clip_size: must be >= 1, got {clip_size}')
        if len(window_size) != 3:
            raise UserError(f'netG.window_size: need [frames, height, width], got {window_size}')
        if len(attention_window) != 2 or any(a < 1 or a % 2 == 0 for a in attention_window):
            raise UserError(f'netG.attention_window: need two odd sizes [height, width], got {attention_window}')
        if not len(num_blocks) == len(depths) == len(embed_dims) == len(num_heads) == 3:
            raise UserError(f'netG.num_blocks/depths/embed_dims/num_heads: need 3 entries each (feature extraction, '
                            f'propagation, reconstruction), got {num_blocks}/{depths}/{embed_dims}/{num_heads}')
        if len(inputconv_groups) != 6:
            raise UserError(f'netG.inputconv_groups: need 6 entries (feature extraction, 4 propagation modules, '
                            f'reconstruction), got {inputconv_groups}')
        if embed_dims[0] != embed_dims[1]:
            raise UserError(f'netG.embed_dims: the propagation starts from the shallow features, so embed_dims[0] '
                            f'must equal embed_dims[1], got {embed_dims}')
        for i, (dim, heads) in enumerate(zip(embed_dims, num_heads)):
            if dim % heads:
                raise UserError(f'netG.embed_dims[{i}]={dim} must be divisible by num_heads[{i}]={heads}')
        for name, n in (('attention_heads', attention_heads), ('deformable_groups', deformable_groups)):
            if n < 1 or 2 * embed_dims[1] % n:
                raise UserError(f'netG.{name}: {n} must divide the attention width 2*embed_dims[1] = '
                                f'{2 * embed_dims[1]}')
        dim = embed_dims[1]
        ins = [embed_dims[0] if upscale == 1 else in_chans] + [embed_dims[0] + i * dim for i in range(1, 5)] \
            + [embed_dims[0] + 4 * dim]
        outs = [embed_dims[0]] + [dim] * 4 + [embed_dims[2]]
        for i, (g, cin, cout) in enumerate(zip(inputconv_groups, ins, outs)):
            if g < 1 or cin % g or cout % g:
                raise UserError(f'netG.inputconv_groups[{i}]: {g} must divide the conv\'s {cin} input and {cout} '
                                f'output channels')

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: N×T×C×H×W (RGB, then the noise-level map if nonblind); returns N×T×3×(H·upscale)×(W·upscale)."""
        n, t, c, h, w = x.shape
        if t % self.clip_size:
            raise UserError(f'RVRT: the number of frames ({t}) must be a multiple of netG.clip_size ({self.clip_size})')
        if c != self.in_chans:
            raise UserError(f'RVRT: input frames have {c} channels, the network takes {self.in_chans} '
                            f'(RGB{" + noise-level map" if self.in_chans == 4 else ""})')
        x = self._pad(x)
        hp, wp = x.shape[-2:]
        lq = x[:, :, :3]
        if self.upscale == 1:
            small = F.interpolate(lq.flatten(0, 1), scale_factor=0.25, mode='bicubic', align_corners=False)
            flows = self.compute_flows(small.view(n, t, 3, hp // 4, wp // 4))
        else:
            flows = self.compute_flows(lq)

        cache = x.is_cuda and t > self.cpu_cache_length
        park = (lambda f: f.cpu()) if cache else (lambda f: f)
        s = self.clip_size
        feats: Dict[str, List[torch.Tensor]] = {
            'shallow': [park(self.feat_extract(x[:, i:i + s])) for i in range(0, t, s)]}
        refined: Dict[str, List[torch.Tensor]] = {}
        for name in MODULES:
            feats[name] = self.propagate(feats, flows, name, refined, park)

        out = []
        for i in range(len(feats['shallow'])):
            hr = self.reconstruction(torch.cat([f[i].to(x.device) for f in feats.values()], 2))
            hr = self.conv_last(self.upsampler(self.conv_before_upsampler(hr.transpose(1, 2))))
            out.append(park(hr.transpose(1, 2)))
        out = torch.cat([o.to(x.device) for o in out], 1)
        if self.upscale == 1:
            out = out + lq
        else:
            base = F.interpolate(lq.flatten(0, 1), size=out.shape[-2:], mode='bilinear', align_corners=False)
            out = out + base.view(n, t, 3, *out.shape[-2:])
        return out[..., :h * self.upscale, :w * self.upscale]

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        """Mirror-pad H, W to a multiple of the attention window at feature resolution (×4 at 1/4 scale)."""
        n, t, c, h, w = x.shape
        factor = 4 if self.upscale == 1 else 1
        ph = -h % (self.window_size[1] * factor)
        pw = -w % (self.window_size[2] * factor)
        if not (ph or pw):
            return x
        mode = 'reflect' if ph < h and pw < w else 'replicate'
        return F.pad(x.flatten(0, 1), (0, pw, 0, ph), mode=mode).view(n, t, c, h + ph, w + pw)

    def compute_flows(self, frames: torch.Tensor) -> Dict[str, torch.Tensor]:
        """SpyNet flows between neighbours, N×(T-1)×2×H×W: 'backward' [t] warps frame t+1 onto t,
        'forward' [t] frame t onto t+1. Frames smaller than SpyNet can take are edge-padded for it."""
        n, t, _, h, w = frames.shape
        if t <= self.clip_size:  # a single clip: nothing to align
            return {}
        ref, supp = frames[:, :-1].flatten(0, 1), frames[:, 1:].flatten(0, 1)
        ph = 2 * (SPYNET_MIN_SIZE - 1) - h if h < SPYNET_MIN_SIZE else 0
        pw = 2 * (SPYNET_MIN_SIZE - 1) - w if w < SPYNET_MIN_SIZE else 0
        if ph or pw:
            ref, supp = (F.pad(f, (0, pw, 0, ph), mode='replicate') for f in (ref, supp))
        backward = self.spynet(ref, supp)[..., :h, :w].reshape(n, t - 1, 2, h, w)
        forward = self.spynet(supp, ref)[..., :h, :w].reshape(n, t - 1, 2, h, w)
        return {'backward': backward, 'forward': forward}

    def clip_flows(self, steps: torch.Tensor, i: int) -> torch.Tensor:
        """Flows N×S×S×2×H×W from each frame j of clip i to its key frames in clip i-1 (propagation order).

        `steps[:, a]` warps frame a onto frame a+1; longer flows are chained one step at a time:
        flow(a→b) = step(a-1→a) + warp(flow(a-1→b), step(a-1→a)).
        """
        s = self.clip_size
        memo: Dict[Tuple[int, int], torch.Tensor] = {}

        def flow(a: int, b: int) -> torch.Tensor:
            if (a, b) not in memo:
                step = steps[:, a - 1]
                memo[a, b] = step if a - 1 == b else step + flow_warp(flow(a - 1, b), step.permute(0, 2, 3, 1))
            return memo[a, b]

        return torch.stack([torch.stack([flow(i * s + j, (i - 1) * s + (j + r) % s) for r in range(s)], 1)
                            for j in range(s)], 1)

    def propagate(self, feats: Dict[str, List[torch.Tensor]], flows: Dict[str, torch.Tensor], name: str,
                  refined: Dict[str, List[torch.Tensor]],
                  park: Callable[[torch.Tensor], torch.Tensor] = lambda f: f) -> List[torch.Tensor]:
        """One propagation module over all clips; returns its features per clip (time order).

        A backward module is a forward one over the time-reversed video (clip order and the frames within
        each clip reversed). Clip i aligns clip i-1's output to itself, then adds the refinement of
        [shallow, earlier modules, aligned]. First-layer modules align with the SpyNet flows and hand
        their refined flows to the second layer of the same direction.
        """
        direction, layer = name.split('_')
        backward = direction == 'backward'
        order = list(range(len(feats['shallow'])))[::-1] if backward else list(range(len(feats['shallow'])))
        below = list(feats)[-1]
        device = self.conv_last.weight.device

        def get(key: str, clip: int) -> torch.Tensor:
            f = feats[key][clip].to(device)
            return f.flip(1) if backward else f

        steps = None
        if layer == '1' and len(order) > 1:
            steps = flows['backward'].flip(1) if backward else flows['forward']
            refined[direction] = []
        out: List[Optional[torch.Tensor]] = [None] * len(order)
        prop = torch.zeros_like(get('shallow', order[0]))
        for i, clip in enumerate(order):
            if i > 0:
                clip_flows = self.clip_flows(steps, i) if layer == '1' else refined[direction][i - 1].to(device)
                prop, new_flows = self.deform_align[name](get(below, clip), get(below, order[i - 1]), prop, clip_flows)
                if layer == '1':
                    refined[direction].append(park(new_flows))
            x = torch.cat([get(key, clip) for key in feats] + [prop], 2)
            prop = prop + self.backbone[name](x)
            out[clip] = park(prop.flip(1) if backward else prop)
        return out
