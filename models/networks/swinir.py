"""SwinIR: Image Restoration Using Swin Transformer (Liang et al., ICCVW 2021).

Shallow conv features, then residual Swin Transformer blocks (RSTB: window attention groups closed by
a conv and a residual), then one of the paper's reconstruction heads:

- `pixelshuffle` (classical SR): conv + LeakyReLU to 64 channels, pixel-shuffle stages, conv;
- `pixelshuffledirect` (lightweight SR): one conv straight to `upscale²·C` channels and a shuffle;
- `nearest+conv` (real-world SR, ×2/×4): nearest upsampling + convs, which gives fewer artefacts;
- null/"" (denoising, JPEG artefact removal): a conv added to the input (global residual).

Module names, parameter and buffer shapes follow KAIR/the official code (tests/data/kair/swinir__*),
including the per-block `relative_position_index` and the `attn_mask` of shifted blocks for
`img_size`, so released checkpoints load with `strict=True`.
"""
import math
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from models.networks.layers.kair import DropPath
from models.networks.layers.window_attention import window_attention
from models.registry import NETWORKS
from utils.options.foreign import REDUX, Foreign
from utils.errors import UserError

UPSAMPLERS = ('pixelshuffle', 'pixelshuffledirect', 'nearest+conv', None)
RESI_CONNECTIONS = ('1conv', '3conv')
NUM_FEAT = 64  # channels of the SR heads (fixed in the paper's models)
RGB_MEAN = (0.4488, 0.4371, 0.4040)  # DIV2K mean, subtracted from 3-channel inputs
MASKED = -100.0  # added to the logits of token pairs from different regions (as in released masks)


def window_partition(x: torch.Tensor, window_size: int) -> torch.Tensor:
    """(B,H,W,C) -> (B·nW, ws·ws, C), windows in row-major order."""
    b, h, w, c = x.shape
    x = x.view(b, h // window_size, window_size, w // window_size, window_size, c)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, window_size * window_size, c)


def window_reverse(windows: torch.Tensor, window_size: int, h: int, w: int) -> torch.Tensor:
    """Inverse of `window_partition`: (B·nW, ws·ws, C) -> (B,H,W,C)."""
    c = windows.shape[-1]
    x = windows.view(-1, h // window_size, w // window_size, window_size, window_size, c)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, h, w, c)


def relative_position_index(window_size: int) -> torch.Tensor:
    """(N,N) index into the (2ws-1)² bias table of the offset between every two tokens of a window."""
    coords = torch.stack(torch.meshgrid(torch.arange(window_size), torch.arange(window_size), indexing='ij'))
    coords = coords.flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window_size - 1)
    return rel[:, :, 0] * (2 * window_size - 1) + rel[:, :, 1]


def shifted_window_mask(h: int, w: int, window_size: int, shift_size: int,
                        device: Optional[torch.device] = None) -> torch.Tensor:
    """(nW, N, N) mask for windows shifted by `shift_size` on an h×w map: 0 within a region, -100 across.

    After the cyclic shift, a window at the border holds tokens from up to 4 regions that are not
    neighbours in the image; they must not attend to each other.
    """
    region = torch.zeros((1, h, w, 1), device=device)
    bands = (slice(0, -window_size), slice(-window_size, -shift_size), slice(-shift_size, None))
    for i, hs in enumerate(bands):
        for j, ws in enumerate(bands):
            region[:, hs, ws, :] = 3 * i + j
    windows = window_partition(region, window_size).squeeze(-1)
    diff = windows.unsqueeze(1) - windows.unsqueeze(2)
    return diff.masked_fill(diff != 0, MASKED).masked_fill(diff == 0, 0.0)


class WindowAttention(nn.Module):
    """Multi-head self attention within a window, with a learned relative position bias per head."""

    def __init__(self, dim: int, window_size: int, num_heads: int, qkv_bias: bool = True,
                 qk_scale: Optional[float] = None, attn_drop: float = 0., proj_drop: float = 0.):
        super().__init__()
        self.window_size = window_size
        self.num_heads = num_heads
        self.scale = qk_scale or (dim // num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window_size - 1) ** 2, num_heads))
        self.register_buffer('relative_position_index', relative_position_index(window_size))
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        nn.init.trunc_normal_(self.relative_position_bias_table, std=.02)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x: (B·nW, N, C); mask: (nW, N, N) or None."""
        b_, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b_, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        out = window_attention(q, k, v, self.scale, bias.permute(2, 0, 1), mask,
                               self.attn_drop.p if self.training else 0.0)
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(b_, n, c)))


class Mlp(nn.Module):
    """Transformer feed-forward: Linear, GELU, Linear."""

    def __init__(self, dim: int, hidden: int, drop: float = 0.):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class SwinTransformerBlock(nn.Module):
    """(Shifted) window attention and MLP, each pre-normed and residual.

    A map no larger than a window gets one unshifted window of its size, as in Swin; that decides
    the bias table shape, so it follows `input_resolution` (the `img_size` the network is built for).
    The `attn_mask` buffer serves inputs of that size; other sizes bring their own mask.
    """

    def __init__(self, dim: int, input_resolution: Tuple[int, int], num_heads: int, window_size: int,
                 shift_size: int, mlp_ratio: float = 4., qkv_bias: bool = True, qk_scale: Optional[float] = None,
                 drop: float = 0., attn_drop: float = 0., drop_path: float = 0.):
        super().__init__()
        self.input_resolution = tuple(input_resolution)
        if min(self.input_resolution) <= window_size:
            window_size, shift_size = min(self.input_resolution), 0
        self.window_size, self.shift_size = window_size, shift_size
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window_size, num_heads, qkv_bias, qk_scale, attn_drop, drop)
        self.drop_path = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop)
        mask = shifted_window_mask(*self.input_resolution, window_size, shift_size) if shift_size else None
        self.register_buffer('attn_mask', mask)

    def forward(self, x: torch.Tensor, x_size: Tuple[int, int], mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x: (B, H·W, C). `mask` replaces the `attn_mask` buffer for inputs not of `input_resolution`."""
        h, w = x_size
        b, _, c = x.shape
        y = self.norm1(x).view(b, h, w, c)
        s = self.shift_size
        if s:
            y = torch.roll(y, shifts=(-s, -s), dims=(1, 2))
            mask = self.attn_mask if mask is None else mask
        else:
            mask = None
        y = window_reverse(self.attn(window_partition(y, self.window_size), mask), self.window_size, h, w)
        if s:
            y = torch.roll(y, shifts=(s, s), dims=(1, 2))
        x = x + self.drop_path(y.reshape(b, h * w, c))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class BasicLayer(nn.Module):
    """`depth` Swin blocks at one resolution; odd blocks shift their windows by half a window."""

    def __init__(self, dim: int, input_resolution: Tuple[int, int], depth: int, num_heads: int, window_size: int,
                 mlp_ratio: float, qkv_bias: bool, qk_scale: Optional[float], drop: float, attn_drop: float,
                 drop_path: Sequence[float], use_checkpoint: bool = False):
        super().__init__()
        self.input_resolution = tuple(input_resolution)
        self.use_checkpoint = use_checkpoint
        self.blocks = nn.ModuleList([
            SwinTransformerBlock(dim, input_resolution, num_heads, window_size,
                                 0 if i % 2 == 0 else window_size // 2, mlp_ratio, qkv_bias, qk_scale, drop,
                                 attn_drop, drop_path[i])
            for i in range(depth)])

    def mask_for(self, x_size: Tuple[int, int], device: torch.device) -> Optional[torch.Tensor]:
        """The shifted-window mask for an input not of `input_resolution` (None: blocks use their buffer).

        Built once per forward and shared by the group's shifted blocks rather than cached: for a
        large test image it is big (nW·N² floats). Under graph export it is always built, from the
        symbolic size, so that the graph serves every size.
        """
        shifted = [blk for blk in self.blocks if blk.shift_size]
        if not shifted or (not torch.compiler.is_exporting() and tuple(x_size) == self.input_resolution):
            return None
        return shifted_window_mask(*x_size, shifted[0].window_size, shifted[0].shift_size, device)

    def forward(self, x: torch.Tensor, x_size: Tuple[int, int]) -> torch.Tensor:
        mask = self.mask_for(x_size, x.device)
        for blk in self.blocks:
            if self.use_checkpoint and torch.is_grad_enabled():
                x = checkpoint(blk, x, x_size, mask, use_reentrant=False)
            else:
                x = blk(x, x_size, mask)
        return x


class PatchEmbed(nn.Module):
    """(B,C,H,W) -> (B, H·W, C): every pixel is a token (SwinIR's patch size is 1)."""

    def __init__(self, embed_dim: int, norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(embed_dim) if norm else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(2).transpose(1, 2)
        return x if self.norm is None else self.norm(x)


class PatchUnEmbed(nn.Module):
    """(B, H·W, C) -> (B,C,H,W)."""

    def forward(self, x: torch.Tensor, x_size: Tuple[int, int]) -> torch.Tensor:
        return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], *x_size)


def residual_conv(dim: int, resi_connection: str) -> nn.Module:
    """The conv closing each RSTB and the body: one 3×3, or ("3conv") a 3×3/1×1/3×3 bottleneck at dim/4
    that saves parameters."""
    if resi_connection == '1conv':
        return nn.Conv2d(dim, dim, 3, 1, 1)
    return nn.Sequential(nn.Conv2d(dim, dim // 4, 3, 1, 1), nn.LeakyReLU(negative_slope=0.2, inplace=True),
                         nn.Conv2d(dim // 4, dim // 4, 1, 1, 0), nn.LeakyReLU(negative_slope=0.2, inplace=True),
                         nn.Conv2d(dim // 4, dim, 3, 1, 1))


class RSTB(nn.Module):
    """Residual Swin Transformer Block: Swin blocks, then a conv in image space, plus the input."""

    def __init__(self, dim: int, input_resolution: Tuple[int, int], depth: int, num_heads: int, window_size: int,
                 mlp_ratio: float, qkv_bias: bool, qk_scale: Optional[float], drop: float, attn_drop: float,
                 drop_path: Sequence[float], use_checkpoint: bool, resi_connection: str):
        super().__init__()
        self.residual_group = BasicLayer(dim, input_resolution, depth, num_heads, window_size, mlp_ratio, qkv_bias,
                                         qk_scale, drop, attn_drop, drop_path, use_checkpoint)
        self.conv = residual_conv(dim, resi_connection)
        self.patch_embed = PatchEmbed(dim, norm=False)
        self.patch_unembed = PatchUnEmbed()

    def forward(self, x: torch.Tensor, x_size: Tuple[int, int]) -> torch.Tensor:
        y = self.patch_unembed(self.residual_group(x, x_size), x_size)
        return self.patch_embed(self.conv(y)) + x


def pixelshuffle_stages(scale: int, num_feat: int) -> nn.Sequential:
    """Conv + PixelShuffle(2) per factor 2 of `scale`, or one conv + PixelShuffle(3) for ×3."""
    layers: List[nn.Module] = []
    if scale == 3:
        layers += [nn.Conv2d(num_feat, 9 * num_feat, 3, 1, 1), nn.PixelShuffle(3)]
    else:
        for _ in range(int(math.log2(scale))):
            layers += [nn.Conv2d(num_feat, 4 * num_feat, 3, 1, 1), nn.PixelShuffle(2)]
    return nn.Sequential(*layers)


def _check_options(upscale: int, img_size: int, patch_size: int, window_size: int, depths: Sequence[int],
                   embed_dim: int, num_heads: Sequence[int], upsampler: Optional[str], resi_connection: str) -> None:
    """Reject option combinations the architecture cannot build, naming the netG key."""
    if upsampler not in UPSAMPLERS:
        raise UserError(f'netG.upsampler: {upsampler!r} is not a SwinIR upsampler; use "pixelshuffle" (classical '
                        f'SR), "pixelshuffledirect" (lightweight SR), "nearest+conv" (real-world SR) or null '
                        f'(denoising/JPEG: no upsampling)')
    can = {'pixelshuffle': 'a power of 2 or 3', 'pixelshuffledirect': 'any positive integer',
           'nearest+conv': '2 or 4', None: 'only 1'}[upsampler]
    ok = {'pixelshuffle': upscale >= 1 and (upscale & (upscale - 1) == 0 or upscale == 3),
          'pixelshuffledirect': upscale >= 1, 'nearest+conv': upscale in (2, 4), None: upscale == 1}[upsampler]
    if not ok:
        name = f'"{upsampler}"' if upsampler else 'null'
        raise UserError(f'netG.upscale: {upscale!r} is not possible with upsampler {name} (upscale: {can})')
    if resi_connection not in RESI_CONNECTIONS:
        raise UserError(f'netG.resi_connection: {resi_connection!r} is not "1conv" or "3conv"')
    if patch_size != 1:
        raise UserError(f'netG.patch_size: SwinIR embeds every pixel as a token; only 1 is supported, '
                        f'got {patch_size}')
    for key, value in (('img_size', img_size), ('window_size', window_size), ('embed_dim', embed_dim)):
        if value < 1:
            raise UserError(f'netG.{key}: must be positive, got {value}')
    if len(num_heads) != len(depths) or not depths:
        raise UserError(f'netG.num_heads: one entry per RSTB is needed (depths has {len(depths)}), '
                        f'got {len(num_heads)}')
    if any(embed_dim % h for h in num_heads):
        raise UserError(f'netG.num_heads: embed_dim {embed_dim} must be divisible by every entry of {list(num_heads)}')


_SIXES = [6] * 6


# BasicSR's SwinIR, and traiNNer-redux's presets of it (its swinir_* functions build spandrel's SwinIR, the same
# network and weight names): their defaults where ours differ
@NETWORKS.register('swinir', foreign=[Foreign('SwinIR')] + [
    Foreign(name, REDUX, keys={'scale': 'upscale'}, defaults=defaults, unneeded={'start_unshuffle': 1})
    for name, defaults in (
        ('swinir_s', dict(embed_dim=60, window_size=8, mlp_ratio=2.0, upsampler='pixelshuffledirect')),
        ('swinir_m', dict(img_size=48, embed_dim=180, depths=_SIXES, num_heads=_SIXES, window_size=8, mlp_ratio=2.0,
                          upsampler='pixelshuffle')),
        ('swinir_l', dict(embed_dim=240, depths=[6] * 9, num_heads=[8] * 9, window_size=8, mlp_ratio=2.0,
                          upsampler='nearest+conv', resi_connection='3conv')))])
class SwinIR(nn.Module):
    """Image restoration with residual Swin Transformer blocks (classical/lightweight/real-world SR,
    denoising, JPEG artefact removal); the upsampler picks the head.

    Inputs of any size are reflect-padded to a multiple of the window and the output cropped back.
    `img_size` fixes only the buffers stored in checkpoints (attention masks, and the absolute
    position embedding if `ape`). `img_range` scales the mean-subtracted input (255 for JPEG CAR).
    """

    repeated_blocks = (SwinTransformerBlock,)  # compiled one block at a time with train.compile (models/compile.py)

    def __init__(self, upscale: int = 2, in_chans: int = 3, img_size: int = 64, window_size: int = 7,
                 img_range: float = 1., depths: Sequence[int] = (6, 6, 6, 6), embed_dim: int = 96,
                 num_heads: Sequence[int] = (6, 6, 6, 6), mlp_ratio: float = 4., upsampler: Optional[str] = None,
                 resi_connection: str = '1conv', patch_size: int = 1, qkv_bias: bool = True,
                 qk_scale: Optional[float] = None, drop_rate: float = 0., attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.1, ape: bool = False, patch_norm: bool = True,
                 use_checkpoint: bool = False):
        super().__init__()
        upsampler = upsampler or None  # KAIR writes null, the paper's code ''
        _check_options(upscale, img_size, patch_size, window_size, depths, embed_dim, num_heads, upsampler,
                       resi_connection)
        self.upscale, self.upsampler, self.img_range = upscale, upsampler, float(img_range)
        self.window_size = window_size
        self.patches_resolution = (img_size // patch_size, img_size // patch_size)
        mean = RGB_MEAN if in_chans == 3 else (0.,)
        self.register_buffer('mean', torch.tensor(mean).view(1, -1, 1, 1), persistent=False)

        self.conv_first = nn.Conv2d(in_chans, embed_dim, 3, 1, 1)
        self.patch_embed = PatchEmbed(embed_dim, norm=patch_norm)
        self.patch_unembed = PatchUnEmbed()
        self.absolute_pos_embed = None
        if ape:
            self.absolute_pos_embed = nn.Parameter(torch.zeros(1, math.prod(self.patches_resolution), embed_dim))
            nn.init.trunc_normal_(self.absolute_pos_embed, std=.02)
        self.pos_drop = nn.Dropout(drop_rate)
        n = sum(depths)
        dpr = [drop_path_rate * i / (n - 1) if n > 1 else 0. for i in range(n)]  # stochastic depth grows linearly
        self.layers = nn.ModuleList([
            RSTB(embed_dim, self.patches_resolution, d, h, window_size, mlp_ratio, qkv_bias, qk_scale, drop_rate,
                 attn_drop_rate, dpr[sum(depths[:i]):sum(depths[:i + 1])], use_checkpoint, resi_connection)
            for i, (d, h) in enumerate(zip(depths, num_heads))])
        self.norm = nn.LayerNorm(embed_dim)
        self.conv_after_body = residual_conv(embed_dim, resi_connection)
        self._build_head(upsampler, upscale, embed_dim, in_chans)
        self.apply(_init_transformer_weights)
        # Windows shrink to the map for a tiny img_size (see SwinTransformerBlock): pad to fit them too.
        block_window = self.layers[0].residual_group.blocks[0].window_size
        self.pad_multiple = math.lcm(window_size, block_window)

    def _build_head(self, upsampler: Optional[str], upscale: int, embed_dim: int, out_chans: int) -> None:
        if upsampler in ('pixelshuffle', 'nearest+conv'):
            self.conv_before_upsample = nn.Sequential(nn.Conv2d(embed_dim, NUM_FEAT, 3, 1, 1),
                                                      nn.LeakyReLU(inplace=True))
        if upsampler == 'pixelshuffle':
            self.upsample = pixelshuffle_stages(upscale, NUM_FEAT)
            self.conv_last = nn.Conv2d(NUM_FEAT, out_chans, 3, 1, 1)
        elif upsampler == 'pixelshuffledirect':
            self.upsample = nn.Sequential(nn.Conv2d(embed_dim, upscale ** 2 * out_chans, 3, 1, 1),
                                          nn.PixelShuffle(upscale))
        elif upsampler == 'nearest+conv':
            self.conv_up1 = nn.Conv2d(NUM_FEAT, NUM_FEAT, 3, 1, 1)
            if upscale == 4:
                self.conv_up2 = nn.Conv2d(NUM_FEAT, NUM_FEAT, 3, 1, 1)
            self.conv_hr = nn.Conv2d(NUM_FEAT, NUM_FEAT, 3, 1, 1)
            self.conv_last = nn.Conv2d(NUM_FEAT, out_chans, 3, 1, 1)
            self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)
        else:
            self.conv_last = nn.Conv2d(embed_dim, out_chans, 3, 1, 1)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """Pad bottom/right to a multiple of the window (reflect, or replicate where reflect cannot reach).

        Under graph export (torch.export, ONNX) sizes are symbolic and a branch on them would fix the graph
        to the traced size: there the input is always reflect-padded (by 0 where it fits), so the exported
        graph serves any size of at least one window.
        """
        h, w = x.shape[-2:]
        ph, pw = -h % self.pad_multiple, -w % self.pad_multiple
        if torch.compiler.is_exporting():
            return F.pad(x, (0, pw, 0, ph), mode='reflect')
        if not ph and not pw:
            return x
        return F.pad(x, (0, pw, 0, ph), mode='reflect' if ph < h and pw < w else 'replicate')

    def position_embedding(self, x_size: Tuple[int, int]) -> torch.Tensor:
        """The absolute position embedding, resized bicubically for inputs not of `img_size`."""
        pe = self.absolute_pos_embed
        if not torch.compiler.is_exporting() and tuple(x_size) == self.patches_resolution:  # see pad
            return pe
        grid = pe.transpose(1, 2).reshape(1, -1, *self.patches_resolution)
        return F.interpolate(grid, size=x_size, mode='bicubic', align_corners=False).flatten(2).transpose(1, 2)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x_size = (x.shape[2], x.shape[3])
        x = self.patch_embed(x)
        if self.absolute_pos_embed is not None:
            x = x + self.position_embedding(x_size)
        x = self.pos_drop(x)
        for layer in self.layers:
            x = layer(x, x_size)
        return self.patch_unembed(self.norm(x), x_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B,C,H,W) -> (B,C,H·upscale,W·upscale)."""
        h, w = x.shape[-2:]
        x = (self.pad(x) - self.mean) * self.img_range
        if self.upsampler is None:
            feat = self.conv_first(x)
            x = x + self.conv_last(self.conv_after_body(self.forward_features(feat)) + feat)
        else:
            x = self.conv_first(x)
            x = self.conv_after_body(self.forward_features(x)) + x
            if self.upsampler == 'pixelshuffle':
                x = self.conv_last(self.upsample(self.conv_before_upsample(x)))
            elif self.upsampler == 'pixelshuffledirect':
                x = self.upsample(x)
            else:
                x = self.lrelu(self.conv_up1(F.interpolate(self.conv_before_upsample(x), scale_factor=2,
                                                           mode='nearest')))
                if self.upscale == 4:
                    x = self.lrelu(self.conv_up2(F.interpolate(x, scale_factor=2, mode='nearest')))
                x = self.conv_last(self.lrelu(self.conv_hr(x)))
        x = x / self.img_range + self.mean
        if torch.compiler.is_exporting():  # cropped by negative padding: slicing guards on the size (see pad)
            ph, pw = x.shape[-2] - h * self.upscale, x.shape[-1] - w * self.upscale
            return F.pad(x, (0, -pw, 0, -ph))
        return x[:, :, :h * self.upscale, :w * self.upscale]


def _init_transformer_weights(m: nn.Module) -> None:
    """Truncated-normal Linear weights and unit LayerNorms (ViT/Swin practice); convs keep PyTorch's init."""
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)
