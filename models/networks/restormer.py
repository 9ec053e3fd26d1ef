"""Restormer (Zamir et al., "Restormer: Efficient Transformer for High-Resolution Image Restoration",
CVPR 2022), written from the paper with the official state_dict names, so the released checkpoints
(deraining, motion/defocus deblurring, gaussian and real denoising) load strictly.

A 4-level U-Net of transformer blocks whose attention is across channels, not pixels (MDTA: cost
linear in the image size, so it runs on whole high-resolution images), and whose feed-forward is a
gated depthwise-conv network (GDFN). Levels halve the size with conv + pixel-unshuffle and double it
with conv + pixel-shuffle; the first level's decoder and the refinement run at twice the base width.
H and W must be multiples of 8 (three halvings): test scripts pad, the network does not.
"""
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from models.registry import NETWORKS
from utils.options.foreign import Foreign
from utils.errors import UserError

LAYER_NORM_TYPES = ('WithBias', 'BiasFree')


class ChannelLayerNorm(nn.Module):
    """LayerNorm over the channels of each pixel (eps 1e-5, population variance). BiasFree: no shift and
    no centring of the numerator (the variance is still about the mean), as the paper's denoisers use."""

    def __init__(self, dim: int, layer_norm_type: str):
        super().__init__()
        self.body = nn.Module()  # the official names: norm.body.weight (and .bias)
        self.body.weight = nn.Parameter(torch.ones(dim))
        self.with_bias = layer_norm_type == 'WithBias'
        if self.with_bias:
            self.body.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)  # (B, H, W, C)
        var = x.var(-1, keepdim=True, unbiased=False)
        if self.with_bias:
            y = (x - x.mean(-1, keepdim=True)) / torch.sqrt(var + 1e-5) * self.body.weight + self.body.bias
        else:
            y = x / torch.sqrt(var + 1e-5) * self.body.weight
        return y.permute(0, 3, 1, 2)


class MDTA(nn.Module):
    """Multi-Dconv head transposed attention: q, k, v from a 1x1 then a depthwise 3x3 conv; per head, a
    (C/h x C/h) attention map from L2-normalised q and k over the pixels, scaled by a learnt temperature."""

    def __init__(self, dim: int, num_heads: int, bias: bool):
        super().__init__()
        self.num_heads = num_heads
        self.temperature = nn.Parameter(torch.ones(num_heads, 1, 1))
        self.qkv = nn.Conv2d(dim, dim * 3, 1, bias=bias)
        self.qkv_dwconv = nn.Conv2d(dim * 3, dim * 3, 3, 1, 1, groups=dim * 3, bias=bias)
        self.project_out = nn.Conv2d(dim, dim, 1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q, k, v = (t.reshape(b, self.num_heads, c // self.num_heads, h * w)
                   for t in self.qkv_dwconv(self.qkv(x)).chunk(3, dim=1))
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        attn = (q @ k.transpose(-2, -1) * self.temperature).softmax(dim=-1)
        return self.project_out((attn @ v).reshape(b, c, h, w))


class GDFN(nn.Module):
    """Gated-Dconv feed-forward: 1x1 to two branches of int(dim·factor), depthwise 3x3, gelu(x1)·x2, 1x1 back."""

    def __init__(self, dim: int, ffn_expansion_factor: float, bias: bool):
        super().__init__()
        hidden = int(dim * ffn_expansion_factor)
        self.project_in = nn.Conv2d(dim, hidden * 2, 1, bias=bias)
        self.dwconv = nn.Conv2d(hidden * 2, hidden * 2, 3, 1, 1, groups=hidden * 2, bias=bias)
        self.project_out = nn.Conv2d(hidden, dim, 1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = self.dwconv(self.project_in(x)).chunk(2, dim=1)
        return self.project_out(F.gelu(x1) * x2)


class TransformerBlock(nn.Module):
    """x + MDTA(norm(x)), then + GDFN(norm(.))."""

    def __init__(self, dim: int, num_heads: int, ffn_expansion_factor: float, bias: bool, layer_norm_type: str):
        super().__init__()
        self.norm1 = ChannelLayerNorm(dim, layer_norm_type)
        self.attn = MDTA(dim, num_heads, bias)
        self.norm2 = ChannelLayerNorm(dim, layer_norm_type)
        self.ffn = GDFN(dim, ffn_expansion_factor, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class PatchEmbed(nn.Module):
    """A 3x3 conv from the image to the first level's features (`patch_embed.proj`)."""

    def __init__(self, in_c: int, dim: int, bias: bool):
        super().__init__()
        self.proj = nn.Conv2d(in_c, dim, 3, 1, 1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class Resample(nn.Module):
    """Down: conv n→n/2 + PixelUnshuffle(2) (n→2n channels); up: conv n→2n + PixelShuffle(2) (n→n/2)."""

    def __init__(self, n: int, down: bool):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(n, n // 2 if down else n * 2, 3, 1, 1, bias=False),
                                  nn.PixelUnshuffle(2) if down else nn.PixelShuffle(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


@NETWORKS.register('restormer', foreign=[Foreign('Restormer')])
class Restormer(nn.Module):
    """Image restoration at the input's size (H, W multiples of 8). `dual_pixel_task`: the two
    dual-pixel views come in as 6 channels and the output has no image residual (a skip conv of the
    first level's features instead)."""

    repeated_blocks = (TransformerBlock,)

    def __init__(self, inp_channels: int = 3, out_channels: int = 3, dim: int = 48,
                 num_blocks: Sequence[int] = (4, 6, 6, 8), num_refinement_blocks: int = 4,
                 heads: Sequence[int] = (1, 2, 4, 8), ffn_expansion_factor: float = 2.66, bias: bool = False,
                 LayerNorm_type: str = 'WithBias', dual_pixel_task: bool = False):
        super().__init__()
        if LayerNorm_type not in LAYER_NORM_TYPES:
            raise UserError(f'netG.LayerNorm_type: restormer takes {" or ".join(LAYER_NORM_TYPES)}, '
                            f'got {LayerNorm_type!r}')
        if len(num_blocks) != 4 or len(heads) != 4:
            raise UserError(f'netG: restormer has 4 levels: num_blocks and heads need 4 values each, got '
                            f'{list(num_blocks)} and {list(heads)}')

        def level(n: int, width: int, n_heads: int) -> nn.Sequential:
            return nn.Sequential(*[TransformerBlock(width, n_heads, ffn_expansion_factor, bias, LayerNorm_type)
                                   for _ in range(n)])
        self.dual_pixel_task = dual_pixel_task
        self.patch_embed = PatchEmbed(inp_channels, dim, bias)
        self.encoder_level1 = level(num_blocks[0], dim, heads[0])
        self.down1_2 = Resample(dim, down=True)
        self.encoder_level2 = level(num_blocks[1], dim * 2, heads[1])
        self.down2_3 = Resample(dim * 2, down=True)
        self.encoder_level3 = level(num_blocks[2], dim * 4, heads[2])
        self.down3_4 = Resample(dim * 4, down=True)
        self.latent = level(num_blocks[3], dim * 8, heads[3])
        self.up4_3 = Resample(dim * 8, down=False)
        self.reduce_chan_level3 = nn.Conv2d(dim * 8, dim * 4, 1, bias=bias)
        self.decoder_level3 = level(num_blocks[2], dim * 4, heads[2])
        self.up3_2 = Resample(dim * 4, down=False)
        self.reduce_chan_level2 = nn.Conv2d(dim * 4, dim * 2, 1, bias=bias)
        self.decoder_level2 = level(num_blocks[1], dim * 2, heads[1])
        self.up2_1 = Resample(dim * 2, down=False)  # no channel reduction: level 1 decodes at 2·dim
        self.decoder_level1 = level(num_blocks[0], dim * 2, heads[0])
        self.refinement = level(num_refinement_blocks, dim * 2, heads[0])
        if dual_pixel_task:
            self.skip_conv = nn.Conv2d(dim, dim * 2, 1, bias=bias)
        self.output = nn.Conv2d(dim * 2, out_channels, 3, 1, 1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] % 8 or x.shape[-2] % 8:
            raise UserError(f'restormer needs height and width divisible by 8, got {tuple(x.shape[-2:])}')
        emb = self.patch_embed(x)
        enc1 = self.encoder_level1(emb)
        enc2 = self.encoder_level2(self.down1_2(enc1))
        enc3 = self.encoder_level3(self.down2_3(enc2))
        latent = self.latent(self.down3_4(enc3))
        dec3 = self.decoder_level3(self.reduce_chan_level3(torch.cat([self.up4_3(latent), enc3], 1)))
        dec2 = self.decoder_level2(self.reduce_chan_level2(torch.cat([self.up3_2(dec3), enc2], 1)))
        dec1 = self.refinement(self.decoder_level1(torch.cat([self.up2_1(dec2), enc1], 1)))
        if self.dual_pixel_task:
            return self.output(dec1 + self.skip_conv(emb))
        return self.output(dec1) + x
