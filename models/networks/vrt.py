"""VRT: A Video Restoration Transformer (Liang et al., 2022).

Re-implementation whose `state_dict` matches the official JingyunLiang/VRT `network_vrt.py`
name for name and shape for shape, so released checkpoints load with `strict=True`
(checked against tests/data/vrt/*.tsv by tests/test_network_vrt.py).

Input: N×T×C×H×W with C = in_chans (+1 noise-level map if `nonblind_denoising`) + `spike_chans`.
Output: N×T×out_chans×(H·upscale)×(W·upscale); the frame-interpolation variant (`pa_frames=0`)
returns one frame, N×1×out_chans×H×W.
"""
import functools
import math
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
# Parameter-free, but it sits inside nn.Sequential as in the official model, which fixes the indices of
# the neighbouring LayerNorm/Linear in the state_dict (`reshape.1.weight`).
from einops.layers.torch import Rearrange
from torch import nn
from torch.utils.checkpoint import checkpoint

from models.networks.layers.deform_conv import deform_conv2d
# SpyNet and flow_warp live in layers/flow.py (shared with RVRT and the BasicVSR family); imported here by name
from models.networks.layers.flow import SpyNet, flow_warp  # noqa: F401
from models.networks.layers.kair import DropPath
from models.networks.layers.window_attention import window_attention
from models.registry import NETWORKS
from utils.errors import InputShapeError, UserError


class FrameConv3d(nn.Conv3d):
    """Conv3d with a 1×k×k kernel run as a per-frame Conv2d: same parameters, faster on CPU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, d, h, w = x.shape
        y = F.conv2d(x.transpose(1, 2).reshape(n * d, c, h, w), self.weight.squeeze(2), self.bias,
                     self.stride[1:], self.padding[1:], self.dilation[1:], self.groups)
        return y.view(n, d, *y.shape[1:]).transpose(1, 2)


def window_partition(x: torch.Tensor, window_size: Sequence[int]) -> torch.Tensor:
    """(B,D,H,W,C) -> (B*num_windows, Wd*Wh*Ww, C)."""
    b, d, h, w, c = x.shape
    x = x.view(b, d // window_size[0], window_size[0], h // window_size[1], window_size[1],
               w // window_size[2], window_size[2], c)
    return x.permute(0, 1, 3, 5, 2, 4, 6, 7).reshape(-1, math.prod(window_size), c)


def window_reverse(windows: torch.Tensor, window_size: Sequence[int], b: int, d: int, h: int,
                   w: int) -> torch.Tensor:
    """Inverse of `window_partition`."""
    x = windows.view(b, d // window_size[0], h // window_size[1], w // window_size[2],
                     window_size[0], window_size[1], window_size[2], -1)
    return x.permute(0, 1, 4, 2, 5, 3, 6, 7).reshape(b, d, h, w, -1)


def get_window_size(x_size: Sequence[int], window_size: Sequence[int],
                    shift_size: Sequence[int]) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """Shrink windows (and drop shifts) along axes shorter than the window, as the official code."""
    use_window, use_shift = list(window_size), list(shift_size)
    for i in range(len(x_size)):
        if x_size[i] <= window_size[i]:
            use_window[i] = x_size[i]
            use_shift[i] = 0
    return tuple(use_window), tuple(use_shift)


@functools.lru_cache(maxsize=32)
def compute_mask(d: int, h: int, w: int, window_size: Tuple[int, ...], shift_size: Tuple[int, ...],
                 device: torch.device) -> torch.Tensor:
    """Attention mask for shifted windows: -100 between tokens from different pre-shift regions.

    Cached (as in the official code): every block group at a scale needs the same constant mask.
    Built outside inference mode so that a mask first made during inference also serves training.
    """
    with torch.inference_mode(False), torch.no_grad():
        img_mask = torch.zeros((1, d, h, w, 1), device=device)
        cnt = 0
        for ds in (slice(-window_size[0]), slice(-window_size[0], -shift_size[0]), slice(-shift_size[0], None)):
            for hs in (slice(-window_size[1]), slice(-window_size[1], -shift_size[1]),
                       slice(-shift_size[1], None)):
                for ws in (slice(-window_size[2]), slice(-window_size[2], -shift_size[2]),
                           slice(-shift_size[2], None)):
                    img_mask[:, ds, hs, ws, :] = cnt
                    cnt += 1
        mask_windows = window_partition(img_mask, window_size).squeeze(-1)
        attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
        return attn_mask.masked_fill(attn_mask != 0, -100.0).masked_fill(attn_mask == 0, 0.0)


class Mlp_GEGLU(nn.Module):
    """Gated (GEGLU) feed-forward: fc2(gelu(fc11(x)) * fc12(x))."""

    def __init__(self, in_features: int, hidden_features: Optional[int] = None,
                 out_features: Optional[int] = None):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc11 = nn.Linear(in_features, hidden_features)
        self.fc12 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc11(x)) * self.fc12(x))


class WindowAttention(nn.Module):
    """Window self-attention with relative position bias, plus (if `mut_attn`) mutual attention.

    Mutual attention splits a 2-frame window into its two frames and lets each frame query the
    other (implicit motion estimation / alignment); the query/key features get a fixed sine position
    encoding since the relative bias would be meaningless across frames.
    """

    def __init__(self, dim: int, window_size: Sequence[int], num_heads: int, qkv_bias: bool = False,
                 qk_scale: Optional[float] = None, mut_attn: bool = True):
        super().__init__()
        self.dim = dim
        self.window_size = tuple(window_size)
        self.num_heads = num_heads
        self.scale = qk_scale or (dim // num_heads) ** -0.5
        self.mut_attn = mut_attn
        wd, wh, ww = window_size
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * wd - 1) * (2 * wh - 1) * (2 * ww - 1), num_heads))
        self.register_buffer('relative_position_index', self.get_position_index(window_size))
        self.qkv_self = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(2 * dim if mut_attn else dim, dim)
        if mut_attn:
            self.register_buffer('position_bias',
                                 self.get_sine_position_encoding(window_size[1:], dim // 2, normalize=True))
            self.qkv_mut = nn.Linear(dim, dim * 3, bias=qkv_bias)
        nn.init.trunc_normal_(self.relative_position_bias_table, std=.02)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        b_, n, c = x.shape
        qkv = self.qkv_self(x).reshape(b_, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        x_out = self.attention(qkv[0], qkv[1], qkv[2], mask, (b_, n, c), relative_position_encoding=True)
        if self.mut_attn:
            qkv = self.qkv_mut(x + self.position_bias.repeat(1, 2, 1))
            qkv = qkv.reshape(b_, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
            (q1, q2), (k1, k2), (v1, v2) = (torch.chunk(qkv[i], 2, dim=2) for i in range(3))
            x1_aligned = self.attention(q2, k1, v1, mask, (b_, n // 2, c), relative_position_encoding=False)
            x2_aligned = self.attention(q1, k2, v2, mask, (b_, n // 2, c), relative_position_encoding=False)
            x_out = torch.cat([torch.cat([x1_aligned, x2_aligned], 1), x_out], 2)
        return self.proj(x_out)

    def attention(self, q, k, v, mask, x_shape, relative_position_encoding: bool = True) -> torch.Tensor:
        b_, n, c = x_shape
        bias = None
        if relative_position_encoding:
            index = self.relative_position_index[:n, :n].reshape(-1)
            bias = self.relative_position_bias_table[index].reshape(n, n, -1).permute(2, 0, 1)
        out = window_attention(q, k, v, self.scale, bias, None if mask is None else mask[:, :n, :n])
        return out.transpose(1, 2).reshape(b_, n, c)

    @staticmethod
    def get_position_index(window_size: Sequence[int]) -> torch.Tensor:
        coords = torch.stack(torch.meshgrid(*(torch.arange(s) for s in window_size), indexing='ij'))
        coords = torch.flatten(coords, 1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += window_size[0] - 1
        rel[:, :, 1] += window_size[1] - 1
        rel[:, :, 2] += window_size[2] - 1
        rel[:, :, 0] *= (2 * window_size[1] - 1) * (2 * window_size[2] - 1)
        rel[:, :, 1] *= 2 * window_size[2] - 1
        return rel.sum(-1)

    @staticmethod
    def get_sine_position_encoding(hw: Sequence[int], num_pos_feats: int = 64, temperature: float = 10000,
                                   normalize: bool = False, scale: Optional[float] = None) -> torch.Tensor:
        scale = 2 * math.pi if scale is None else scale
        not_mask = torch.ones([1, hw[0], hw[1]])
        y_embed = not_mask.cumsum(1, dtype=torch.float32)
        x_embed = not_mask.cumsum(2, dtype=torch.float32)
        if normalize:
            eps = 1e-6
            y_embed = y_embed / (y_embed[:, -1:, :] + eps) * scale
            x_embed = x_embed / (x_embed[:, :, -1:] + eps) * scale
        dim_t = torch.arange(num_pos_feats, dtype=torch.float32)
        dim_t = temperature ** (2 * (dim_t // 2) / num_pos_feats)
        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_embed = torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)
        return pos_embed.flatten(2).permute(0, 2, 1).contiguous()


CHECKPOINT_PRESETS = ('memory', 'none')


def checkpoint_plan(preset: Optional[str], stages: int, use_attn: bool, use_ffn: bool, no_attn: Sequence[int],
                    no_ffn: Sequence[int]) -> Tuple[List[bool], List[bool]]:
    """Per stage, whether its attention and its feed-forward parts recompute their activations in backward.

    null: KAIR's keys (`use_checkpoint_attn/ffn`, minus the `no_checkpoint_*_blocks` stages); `checkpoint:
    "memory"` checkpoints both parts of every stage (least memory, about a third more compute), "none" no
    part (fastest, most memory). A preset replaces KAIR's keys.
    """
    if preset is not None and preset not in CHECKPOINT_PRESETS:
        raise UserError(f'netG.checkpoint: must be "memory", "none" or null (KAIR\'s use_checkpoint_* keys decide), '
                        f'got {preset!r}')
    if preset is not None:
        return [preset == 'memory'] * stages, [preset == 'memory'] * stages
    return [use_attn and i not in no_attn for i in range(stages)], [use_ffn and i not in no_ffn for i in range(stages)]


def _maybe_checkpoint(enabled: bool, fn, *args):
    """Recompute `fn` in backward instead of storing activations (only when a graph is recorded)."""
    if enabled and torch.is_grad_enabled():
        return checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)


class TMSA(nn.Module):
    """Temporal mutual self attention block: (shifted) window attention + GEGLU feed-forward."""

    def __init__(self, dim: int, num_heads: int, window_size: Sequence[int] = (6, 8, 8),
                 shift_size: Sequence[int] = (0, 0, 0), mut_attn: bool = True, mlp_ratio: float = 2.,
                 qkv_bias: bool = True, qk_scale: Optional[float] = None, drop_path: float = 0.,
                 use_checkpoint_attn: bool = False, use_checkpoint_ffn: bool = False):
        super().__init__()
        self.window_size = tuple(window_size)
        self.shift_size = tuple(shift_size)
        self.use_checkpoint_attn = use_checkpoint_attn
        self.use_checkpoint_ffn = use_checkpoint_ffn
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window_size=self.window_size, num_heads=num_heads, qkv_bias=qkv_bias,
                                    qk_scale=qk_scale, mut_attn=mut_attn)
        self.drop_path = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp_GEGLU(dim, int(dim * mlp_ratio))

    def forward_part1(self, x: torch.Tensor, mask_matrix: torch.Tensor) -> torch.Tensor:
        b, d, h, w, c = x.shape
        window_size, shift_size = get_window_size((d, h, w), self.window_size, self.shift_size)
        x = self.norm1(x)
        pad_d1 = (window_size[0] - d % window_size[0]) % window_size[0]
        pad_b = (window_size[1] - h % window_size[1]) % window_size[1]
        pad_r = (window_size[2] - w % window_size[2]) % window_size[2]
        x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b, 0, pad_d1), mode='constant')
        _, dp, hp, wp, _ = x.shape
        shifted = any(i > 0 for i in shift_size)
        if shifted:
            x = torch.roll(x, shifts=tuple(-s for s in shift_size), dims=(1, 2, 3))
        attn_windows = self.attn(window_partition(x, window_size), mask=mask_matrix if shifted else None)
        x = window_reverse(attn_windows.view(-1, *window_size, c), window_size, b, dp, hp, wp)
        if shifted:
            x = torch.roll(x, shifts=shift_size, dims=(1, 2, 3))
        if pad_d1 > 0 or pad_r > 0 or pad_b > 0:
            x = x[:, :d, :h, :w, :]
        return self.drop_path(x)

    def forward_part2(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop_path(self.mlp(self.norm2(x)))

    def forward(self, x: torch.Tensor, mask_matrix: torch.Tensor) -> torch.Tensor:
        x = x + _maybe_checkpoint(self.use_checkpoint_attn, self.forward_part1, x, mask_matrix)
        return x + _maybe_checkpoint(self.use_checkpoint_ffn, self.forward_part2, x)


class TMSAG(nn.Module):
    """A group of TMSA blocks; odd blocks use windows shifted by half a window."""

    def __init__(self, dim: int, depth: int, num_heads: int, window_size: Sequence[int] = (6, 8, 8),
                 shift_size: Optional[Sequence[int]] = None, mut_attn: bool = True, mlp_ratio: float = 2.,
                 qkv_bias: bool = False, qk_scale: Optional[float] = None, drop_path=0.,
                 use_checkpoint_attn: bool = False, use_checkpoint_ffn: bool = False):
        super().__init__()
        self.window_size = tuple(window_size)
        self.shift_size = tuple(i // 2 for i in window_size) if shift_size is None else tuple(shift_size)
        self.blocks = nn.ModuleList([
            TMSA(dim=dim, num_heads=num_heads, window_size=window_size,
                 shift_size=(0, 0, 0) if i % 2 == 0 else self.shift_size, mut_attn=mut_attn,
                 mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, qk_scale=qk_scale,
                 drop_path=drop_path[i] if isinstance(drop_path, list) else drop_path,
                 use_checkpoint_attn=use_checkpoint_attn, use_checkpoint_ffn=use_checkpoint_ffn)
            for i in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, d, h, w = x.shape
        window_size, shift_size = get_window_size((d, h, w), self.window_size, self.shift_size)
        x = x.permute(0, 2, 3, 4, 1)
        dp, hp, wp = (math.ceil(s / ws) * ws for s, ws in zip((d, h, w), window_size))
        attn_mask = compute_mask(dp, hp, wp, window_size, shift_size, x.device).to(x.dtype)
        for blk in self.blocks:
            x = blk(x, attn_mask)
        return x.permute(0, 4, 1, 2, 3)


class RTMSA(nn.Module):
    """Residual TMSA group (self attention only) used in the reconstruction stage."""

    def __init__(self, dim: int, depth: int, num_heads: int, window_size: Sequence[int], mlp_ratio: float = 2.,
                 qkv_bias: bool = True, qk_scale: Optional[float] = None, drop_path=0.,
                 use_checkpoint_attn: bool = False, use_checkpoint_ffn: bool = False):
        super().__init__()
        self.residual_group = TMSAG(dim=dim, depth=depth, num_heads=num_heads, window_size=window_size,
                                    mut_attn=False, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, qk_scale=qk_scale,
                                    drop_path=drop_path, use_checkpoint_attn=use_checkpoint_attn,
                                    use_checkpoint_ffn=use_checkpoint_ffn)
        self.linear = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.linear(self.residual_group(x).transpose(1, 4)).transpose(1, 4)


class DCNv2PackFlowGuided(nn.Module):
    """Flow-guided deformable alignment (BasicVSR++): DCN offsets = optical flow + bounded residue.

    The residue and the modulation mask are predicted from the flow-warped neighbour features, the
    current frame and the flows. With `pa_frames` 4/6 the input holds 2/3 neighbours on the channel
    axis and the (dim×dim) weight acts as a grouped convolution over them, as in the official code.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, stride: int = 1,
                 padding: int = 1, dilation: int = 1, deformable_groups: int = 1,
                 max_residue_magnitude: float = 10, pa_frames: int = 2):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = (kernel_size, kernel_size)
        self.stride, self.padding, self.dilation = stride, padding, dilation
        self.deformable_groups = deformable_groups
        self.max_residue_magnitude = max_residue_magnitude
        self.pa_frames = pa_frames
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels))
        self.conv_offset = nn.Sequential(
            nn.Conv2d((1 + pa_frames // 2) * in_channels + pa_frames, out_channels, 3, 1, 1),
            nn.LeakyReLU(negative_slope=0.1, inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, 1, 1),
            nn.LeakyReLU(negative_slope=0.1, inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, 1, 1),
            nn.LeakyReLU(negative_slope=0.1, inplace=True),
            nn.Conv2d(out_channels, 3 * kernel_size * kernel_size * deformable_groups, 3, 1, 1))
        self.init_weights()

    def init_weights(self) -> None:
        stdv = 1. / math.sqrt(self.in_channels * self.kernel_size[0] * self.kernel_size[1])
        nn.init.uniform_(self.weight, -stdv, stdv)
        nn.init.zeros_(self.bias)
        nn.init.zeros_(self.conv_offset[-1].weight)
        nn.init.zeros_(self.conv_offset[-1].bias)

    def forward(self, x: torch.Tensor, x_flow_warpeds: List[torch.Tensor], x_current: torch.Tensor,
                flows: List[torch.Tensor]) -> torch.Tensor:
        out = self.conv_offset(torch.cat(x_flow_warpeds + [x_current] + flows, dim=1))
        o1, o2, mask = torch.chunk(out, 3, dim=1)
        offset = self.max_residue_magnitude * torch.tanh(torch.cat((o1, o2), dim=1))
        chunks = torch.chunk(offset, len(flows), dim=1)
        offset = torch.cat([o + f.flip(1).repeat(1, o.size(1) // 2, 1, 1) for o, f in zip(chunks, flows)], dim=1)
        return deform_conv2d(x, offset, self.weight, self.bias, self.stride, self.padding, self.dilation,
                             torch.sigmoid(mask))


class Stage(nn.Module):
    """Resize (none/down/up) + TMSA groups (mutual+self, then self) + parallel warping."""

    def __init__(self, in_dim: int, dim: int, depth: int, num_heads: int, window_size: Sequence[int],
                 mul_attn_ratio: float = 0.75, mlp_ratio: float = 2., qkv_bias: bool = True,
                 qk_scale: Optional[float] = None, drop_path=0., pa_frames: int = 2, deformable_groups: int = 16,
                 reshape: str = 'none', max_residue_magnitude: float = 10,
                 use_checkpoint_attn: bool = False, use_checkpoint_ffn: bool = False):
        super().__init__()
        self.pa_frames = pa_frames
        if reshape == 'none':
            self.reshape = nn.Sequential(Rearrange('n c d h w -> n d h w c'), nn.LayerNorm(dim),
                                         Rearrange('n d h w c -> n c d h w'))
        elif reshape == 'down':
            self.reshape = nn.Sequential(
                Rearrange('n c d (h neih) (w neiw) -> n d h w (neiw neih c)', neih=2, neiw=2),
                nn.LayerNorm(4 * in_dim), nn.Linear(4 * in_dim, dim), Rearrange('n d h w c -> n c d h w'))
        elif reshape == 'up':
            self.reshape = nn.Sequential(
                Rearrange('n (neiw neih c) d h w -> n d (h neih) (w neiw) c', neih=2, neiw=2),
                nn.LayerNorm(in_dim // 4), nn.Linear(in_dim // 4, dim), Rearrange('n d h w c -> n c d h w'))
        else:
            raise ValueError(f'unknown reshape {reshape!r}')
        common = dict(dim=dim, num_heads=num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, qk_scale=qk_scale,
                      drop_path=drop_path, use_checkpoint_attn=use_checkpoint_attn,
                      use_checkpoint_ffn=use_checkpoint_ffn)
        self.residual_group1 = TMSAG(depth=int(depth * mul_attn_ratio), mut_attn=True,
                                     window_size=(2, window_size[1], window_size[2]), **common)
        self.linear1 = nn.Linear(dim, dim)
        self.residual_group2 = TMSAG(depth=depth - int(depth * mul_attn_ratio), mut_attn=False,
                                     window_size=window_size, **common)
        self.linear2 = nn.Linear(dim, dim)
        if pa_frames:
            self.pa_deform = DCNv2PackFlowGuided(dim, dim, 3, padding=1, deformable_groups=deformable_groups,
                                                 max_residue_magnitude=max_residue_magnitude, pa_frames=pa_frames)
            self.pa_fuse = Mlp_GEGLU(dim * (1 + 2), dim * (1 + 2), dim)

    def forward(self, x: torch.Tensor, flows_backward: List[torch.Tensor],
                flows_forward: List[torch.Tensor]) -> torch.Tensor:
        x = self.reshape(x)
        x = self.linear1(self.residual_group1(x).transpose(1, 4)).transpose(1, 4) + x
        x = self.linear2(self.residual_group2(x).transpose(1, 4)).transpose(1, 4) + x
        if self.pa_frames:
            x = x.transpose(1, 2)
            x_backward, x_forward = self.get_aligned_feature(x, flows_backward, flows_forward)
            x = self.pa_fuse(torch.cat([x, x_backward, x_forward], 2).permute(0, 1, 3, 4, 2)).permute(0, 4, 1, 2, 3)
        return x

    def get_aligned_feature(self, x: torch.Tensor, flows_backward: List[torch.Tensor],
                            flows_forward: List[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
        """Align the next `pa_frames//2` and previous `pa_frames//2` frames to every frame (N,T,C,H,W).

        Neighbours beyond the clip (and their flows) are zeros; the last frame's backward and the
        first frame's forward result are zeros, as in the official get_aligned_feature_{2,4,6}frames.
        """
        n = x.size(1)
        m = self.pa_frames // 2

        def align(target: int, step: int, flows: List[torch.Tensor]) -> torch.Tensor:
            # step=+1: neighbours target+1..target+m with flows[j][:, target]; step=-1: target-1..target-m
            # with flows[j][:, target-j-1] (flows[j] maps frame t to t+j+1, or t+j+1 to t for forward).
            feats, warpeds, used = [], [], []
            for j in range(m):
                src = target + step * (j + 1)
                idx = target if step > 0 else target - j - 1
                if 0 <= src < n:
                    feat, flow = x[:, src], flows[j][:, idx]
                else:
                    feat, flow = torch.zeros_like(x[:, 0]), torch.zeros_like(flows[j][:, 0])
                feats.append(feat)
                used.append(flow)
                warpeds.append(flow_warp(feat, flow.permute(0, 2, 3, 1), 'bilinear'))
            return self.pa_deform(torch.cat(feats, 1), warpeds, x[:, target], used)

        zeros = torch.zeros_like(x[:, 0])
        x_backward = [align(t, +1, flows_backward) for t in range(n - 1)] + [zeros]
        x_forward = [zeros] + [align(t, -1, flows_forward) for t in range(1, n)]
        return torch.stack(x_backward, 1), torch.stack(x_forward, 1)


class Upsample(nn.Sequential):
    """Per-frame pixel-shuffle upsampler for ×2^n and ×3 (Conv3d with 1×3×3 kernels)."""

    def __init__(self, scale: int, num_feat: int):
        m: List[nn.Module] = []
        if (scale & (scale - 1)) == 0:
            steps, factor = int(math.log2(scale)), 2
        elif scale == 3:
            steps, factor = 1, 3
        else:
            raise UserError(f'netG.upscale: {scale} is not supported; use 1, 3 or a power of 2')
        for _ in range(steps):
            m.append(FrameConv3d(num_feat, factor * factor * num_feat, kernel_size=(1, 3, 3), padding=(0, 1, 1)))
            m.append(Rearrange('n c d h w -> n d c h w'))
            m.append(nn.PixelShuffle(factor))
            m.append(Rearrange('n d c h w -> n c d h w'))
            m.append(nn.LeakyReLU(negative_slope=0.1, inplace=True))
        m.append(FrameConv3d(num_feat, num_feat, kernel_size=(1, 3, 3), padding=(0, 1, 1)))
        super().__init__(*m)


@NETWORKS.register('vrt')
class VRT(nn.Module):
    """Video Restoration Transformer.

    Official keywords (see Liang et al. 2022 / JingyunLiang/VRT) plus `spike_chans`: extra input
    channels per frame (e.g. a spike-camera representation) that, like the noise-level map of
    `nonblind_denoising`, are only concatenated to conv_first's input; flows, pre-alignment and the
    residual use the RGB channels alone. With `spike_chans=0` the model is the official one.

    `depths`/`embed_dims`/`num_heads` have one entry per stage: 7 U-shaped stages at scales
    1, 1/2, 1/4, 1/8, 1/4, 1/2, 1, then one reconstruction group (stage8) per further entry;
    `indep_reconsts` lists indices (>= 7) of groups that attend within single frames.
    `no_checkpoint_*_blocks` are stage indices exempted from activation checkpointing; `checkpoint`
    ("memory", "none") replaces KAIR's checkpoint keys by a preset (`checkpoint_plan`).
    `recal_all_flows` is accepted for option-file compatibility; like the official code, the
    (t,t+2)/(t,t+3) flows are always composed from the (t,t+1) flows.
    """

    repeated_blocks = (TMSA,)  # compiled one block at a time with train.compile (models/compile.py)

    def __init__(self, upscale: int = 4, in_chans: int = 3, out_chans: int = 3, img_size: List[int] = [6, 64, 64],
                 window_size: List[int] = [6, 8, 8],
                 depths: List[int] = [8, 8, 8, 8, 8, 8, 8, 4, 4, 4, 4, 4, 4], indep_reconsts: List[int] = [11, 12],
                 embed_dims: List[int] = [120, 120, 120, 120, 120, 120, 120, 180, 180, 180, 180, 180, 180],
                 num_heads: List[int] = [6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6], mul_attn_ratio: float = 0.75,
                 mlp_ratio: float = 2., qkv_bias: bool = True, qk_scale: Optional[float] = None,
                 drop_path_rate: float = 0.2, spynet_path: Optional[str] = None, pa_frames: int = 2,
                 deformable_groups: int = 16, recal_all_flows: bool = False, nonblind_denoising: bool = False,
                 use_checkpoint_attn: bool = False, use_checkpoint_ffn: bool = False,
                 no_checkpoint_attn_blocks: List[int] = [], no_checkpoint_ffn_blocks: List[int] = [],
                 spike_chans: int = 0, checkpoint: Optional[str] = None):
        super().__init__()
        self._check_args(upscale, img_size, window_size, depths, indep_reconsts, embed_dims, num_heads,
                         pa_frames, deformable_groups, spike_chans)
        self.in_chans = in_chans
        self.out_chans = out_chans
        self.upscale = upscale
        self.pa_frames = pa_frames
        self.recal_all_flows = recal_all_flows
        self.nonblind_denoising = nonblind_denoising
        self.spike_chans = spike_chans
        self.window_size = list(window_size)

        extra_chans = int(nonblind_denoising) + spike_chans
        conv_first_in_chans = in_chans * (1 + 2 * 4 if pa_frames else 1) + extra_chans
        self.conv_first = FrameConv3d(conv_first_in_chans, embed_dims[0], kernel_size=(1, 3, 3),
                                      padding=(0, 1, 1))

        if pa_frames:
            self.spynet = SpyNet(spynet_path, [2, 3, 4, 5])

        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, sum(depths), device='cpu')]
        reshapes = ['none', 'down', 'down', 'down', 'up', 'up', 'up']
        scales = [1, 2, 4, 8, 4, 2, 1]
        ckpt_attn, ckpt_ffn = checkpoint_plan(checkpoint, len(depths), use_checkpoint_attn, use_checkpoint_ffn,
                                              no_checkpoint_attn_blocks, no_checkpoint_ffn_blocks)
        for i in range(7):
            setattr(self, f'stage{i + 1}', Stage(
                in_dim=embed_dims[i - 1], dim=embed_dims[i], depth=depths[i], num_heads=num_heads[i],
                mul_attn_ratio=mul_attn_ratio, window_size=window_size, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
                qk_scale=qk_scale, drop_path=dpr[sum(depths[:i]):sum(depths[:i + 1])], pa_frames=pa_frames,
                deformable_groups=deformable_groups, reshape=reshapes[i],
                max_residue_magnitude=10 / scales[i], use_checkpoint_attn=ckpt_attn[i],
                use_checkpoint_ffn=ckpt_ffn[i]))

        self.stage8 = nn.ModuleList([nn.Sequential(
            Rearrange('n c d h w -> n d h w c'), nn.LayerNorm(embed_dims[6]), nn.Linear(embed_dims[6], embed_dims[7]),
            Rearrange('n d h w c -> n c d h w'))])
        for i in range(7, len(depths)):
            self.stage8.append(RTMSA(
                dim=embed_dims[i], depth=depths[i], num_heads=num_heads[i],
                window_size=[1, window_size[1], window_size[2]] if i in indep_reconsts else window_size,
                mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, qk_scale=qk_scale,
                drop_path=dpr[sum(depths[:i]):sum(depths[:i + 1])], use_checkpoint_attn=ckpt_attn[i],
                use_checkpoint_ffn=ckpt_ffn[i]))

        self.norm = nn.LayerNorm(embed_dims[-1])
        self.conv_after_body = nn.Linear(embed_dims[-1], embed_dims[0])

        if pa_frames:
            if upscale == 1:
                self.conv_last = FrameConv3d(embed_dims[0], out_chans, kernel_size=(1, 3, 3), padding=(0, 1, 1))
            else:
                num_feat = 64
                self.conv_before_upsample = nn.Sequential(
                    FrameConv3d(embed_dims[0], num_feat, kernel_size=(1, 3, 3), padding=(0, 1, 1)),
                    nn.LeakyReLU(inplace=True))
                self.upsample = Upsample(upscale, num_feat)
                self.conv_last = FrameConv3d(num_feat, out_chans, kernel_size=(1, 3, 3), padding=(0, 1, 1))
        else:
            num_feat = 64
            self.linear_fuse = nn.Conv2d(embed_dims[0] * img_size[0], num_feat, kernel_size=1, stride=1)
            self.conv_last = nn.Conv2d(num_feat, out_chans, kernel_size=7, stride=1, padding=0)
            self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    @staticmethod
    def _check_args(upscale, img_size, window_size, depths, indep_reconsts, embed_dims, num_heads, pa_frames,
                    deformable_groups, spike_chans) -> None:
        if len(depths) < 8 or not (len(depths) == len(embed_dims) == len(num_heads)):
            raise UserError(f'netG.depths/embed_dims/num_heads: need equal lengths >= 8 (7 stages + '
                            f'reconstruction), got {len(depths)}/{len(embed_dims)}/{len(num_heads)}')
        if len(img_size) != 3 or len(window_size) != 3:
            raise UserError(f'netG.img_size/window_size: need [frames, height, width], got {img_size}/{window_size}')
        if pa_frames not in (0, 2, 4, 6):
            raise UserError(f'netG.pa_frames: must be 0, 2, 4 or 6, got {pa_frames}')
        if pa_frames == 0 and upscale != 1:
            raise UserError(f'netG.upscale: the frame-interpolation variant (pa_frames=0) needs upscale 1, '
                            f'got {upscale}')
        if upscale < 1:
            raise UserError(f'netG.upscale: must be >= 1, got {upscale}')
        bad = [i for i in indep_reconsts if not 7 <= i < len(depths)]
        if bad:
            raise UserError(f'netG.indep_reconsts: indices {bad} are not reconstruction groups '
                            f'(7..{len(depths) - 1})')
        for i, (dim, heads) in enumerate(zip(embed_dims, num_heads)):
            if dim % heads or dim % 2:
                raise UserError(f'netG.embed_dims[{i}]={dim} must be even and divisible by num_heads[{i}]={heads}')
            if pa_frames and i < 7 and (pa_frames // 2 * dim) % deformable_groups:
                raise UserError(f'netG.deformable_groups: {deformable_groups} must divide pa_frames/2 * '
                                f'embed_dims[{i}] = {pa_frames // 2 * dim}')
            if pa_frames and i < 7 and dim % (pa_frames // 2):
                raise UserError(f'netG.embed_dims[{i}]={dim} must be divisible by pa_frames/2 = {pa_frames // 2} '
                                f'(the alignment convolution is grouped per neighbour)')
        if spike_chans < 0:
            raise UserError(f'netG.spike_chans: must be >= 0, got {spike_chans}')

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: N×T×C×H×W (RGB, then the noise-level map if nonblind, then the spike channels)."""
        t, h, w = x.shape[1], x.shape[-2], x.shape[-1]
        if self.pa_frames and t < self.pa_frames // 2 + 1:
            raise InputShapeError(f'VRT with pa_frames={self.pa_frames} needs >= {self.pa_frames // 2 + 1} frames, '
                                  f'got {t}')
        min_size = max(8 * max(self.window_size[1:]), 33 if self.pa_frames else 0)
        if h % 8 or w % 8 or min(h, w) < min_size:
            raise InputShapeError(f'VRT needs frame height/width divisible by 8 and >= {min_size} (8x window size '
                                  f'at the 1/8 scale{", > 32 for SpyNet" if self.pa_frames else ""}); got {h}x{w}')
        x, extra = x[:, :, :self.in_chans], x[:, :, self.in_chans:]
        if self.pa_frames:
            x_lq = x
            flows_backward, flows_forward = self.get_flows(x)
            x_backward, x_forward = self.get_aligned_image_2frames(x, flows_backward[0], flows_forward[0])
            x = torch.cat([x, x_backward, x_forward, extra], 2)
            x = self.conv_first(x.transpose(1, 2))
            x = x + self.conv_after_body(
                self.forward_features(x, flows_backward, flows_forward).transpose(1, 4)).transpose(1, 4)
            if self.upscale == 1:
                return self.conv_last(x).transpose(1, 2) + x_lq
            x = self.conv_last(self.upsample(self.conv_before_upsample(x))).transpose(1, 2)
            _, _, c, h, w = x.shape
            return x + F.interpolate(x_lq, size=(c, h, w), mode='trilinear', align_corners=False)

        # frame interpolation: the network predicts one frame from the (mean-removed) clip
        x_mean = x.mean([1, 3, 4], keepdim=True)
        x = torch.cat([x - x_mean, extra], 2)
        x = self.conv_first(x.transpose(1, 2))
        x = x + self.conv_after_body(self.forward_features(x, [], []).transpose(1, 4)).transpose(1, 4)
        x = torch.cat(torch.unbind(x, 2), 1)
        x = self.conv_last(F.pad(self.lrelu(self.linear_fuse(x)), (3, 3, 3, 3), mode='reflect'))
        x = torch.stack(torch.split(x, dim=1, split_size_or_sections=3), 1)
        return x + x_mean

    def get_flows(self, x: torch.Tensor) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        """Flows at 4 scales; for pa_frames 4/6 followed by the composed (t,t±2) / (t,t±3) flows."""
        flows_backward, flows_forward = self.get_flow_2frames(x)
        if self.pa_frames >= 4:
            fb2, ff2 = self.get_flow_4frames(flows_forward, flows_backward)
            if self.pa_frames == 6:
                fb3, ff3 = self.get_flow_6frames(flows_forward, flows_backward, ff2, fb2)
                return flows_backward + fb2 + fb3, flows_forward + ff2 + ff3
            return flows_backward + fb2, flows_forward + ff2
        return flows_backward, flows_forward

    def get_flow_2frames(self, x: torch.Tensor) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        """Flows between frames t and t+1 (backward: t+1 -> t warps onto t; forward: the reverse)."""
        b, n, c, h, w = x.size()
        x_1 = x[:, :-1].reshape(-1, c, h, w)
        x_2 = x[:, 1:].reshape(-1, c, h, w)
        flows_backward = [f.view(b, n - 1, 2, h // (2 ** i), w // (2 ** i))
                          for i, f in enumerate(self.spynet(x_1, x_2))]
        flows_forward = [f.view(b, n - 1, 2, h // (2 ** i), w // (2 ** i))
                         for i, f in enumerate(self.spynet(x_2, x_1))]
        return flows_backward, flows_forward

    @staticmethod
    def get_flow_4frames(flows_forward, flows_backward):
        """Flows between t and t+2 composed from (t,t+1) and (t+1,t+2)."""
        d = flows_forward[0].shape[1]
        flows_backward2, flows_forward2 = [], []
        for flows in flows_backward:
            flow_list = []
            for i in range(d - 1, 0, -1):
                flow_n1, flow_n2 = flows[:, i - 1], flows[:, i]
                flow_list.insert(0, flow_n1 + flow_warp(flow_n2, flow_n1.permute(0, 2, 3, 1)))
            flows_backward2.append(torch.stack(flow_list, 1))
        for flows in flows_forward:
            flow_list = []
            for i in range(1, d):
                flow_n1, flow_n2 = flows[:, i], flows[:, i - 1]
                flow_list.append(flow_n1 + flow_warp(flow_n2, flow_n1.permute(0, 2, 3, 1)))
            flows_forward2.append(torch.stack(flow_list, 1))
        return flows_backward2, flows_forward2

    @staticmethod
    def get_flow_6frames(flows_forward, flows_backward, flows_forward2, flows_backward2):
        """Flows between t and t+3 composed from (t,t+2) and (t+2,t+3)."""
        d = flows_forward2[0].shape[1]
        flows_backward3, flows_forward3 = [], []
        for flows, flows2 in zip(flows_backward, flows_backward2):
            flow_list = []
            for i in range(d - 1, 0, -1):
                flow_n1, flow_n2 = flows2[:, i - 1], flows[:, i + 1]
                flow_list.insert(0, flow_n1 + flow_warp(flow_n2, flow_n1.permute(0, 2, 3, 1)))
            flows_backward3.append(torch.stack(flow_list, 1))
        for flows, flows2 in zip(flows_forward, flows_forward2):
            flow_list = []
            for i in range(2, d + 1):
                flow_n1, flow_n2 = flows2[:, i - 1], flows[:, i - 2]
                flow_list.append(flow_n1 + flow_warp(flow_n2, flow_n1.permute(0, 2, 3, 1)))
            flows_forward3.append(torch.stack(flow_list, 1))
        return flows_backward3, flows_forward3

    @staticmethod
    def get_aligned_image_2frames(x: torch.Tensor, flows_backward: torch.Tensor,
                                  flows_forward: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Pre-align each frame's neighbours (4 nearest pixels each); zeros where there is no neighbour."""
        n = x.size(1)
        zeros = torch.zeros_like(x[:, 0]).repeat(1, 4, 1, 1)
        x_backward = [flow_warp(x[:, i], flows_backward[:, i - 1].permute(0, 2, 3, 1), 'nearest4')
                      for i in range(1, n)] + [zeros]
        x_forward = [zeros] + [flow_warp(x[:, i], flows_forward[:, i].permute(0, 2, 3, 1), 'nearest4')
                               for i in range(0, n - 1)]
        return torch.stack(x_backward, 1), torch.stack(x_forward, 1)

    def forward_features(self, x: torch.Tensor, flows_backward: List[torch.Tensor],
                         flows_forward: List[torch.Tensor]) -> torch.Tensor:
        """U-shaped stages 1-7 (each using the flows of its scale) + reconstruction stage 8."""
        x1 = self.stage1(x, flows_backward[0::4], flows_forward[0::4])
        x2 = self.stage2(x1, flows_backward[1::4], flows_forward[1::4])
        x3 = self.stage3(x2, flows_backward[2::4], flows_forward[2::4])
        x4 = self.stage4(x3, flows_backward[3::4], flows_forward[3::4])
        x = self.stage5(x4, flows_backward[2::4], flows_forward[2::4])
        x = self.stage6(x + x3, flows_backward[1::4], flows_forward[1::4])
        x = self.stage7(x + x2, flows_backward[0::4], flows_forward[0::4])
        x = x + x1
        for layer in self.stage8:
            x = layer(x)
        return self.norm(x.permute(0, 2, 3, 4, 1)).permute(0, 4, 1, 2, 3)
