"""EDVR (Wang et al., "EDVR: Video Restoration with Enhanced Deformable Convolutional Networks", CVPRW 2019)
in BasicSR's layout, so BasicSR's released EDVR checkpoints load strictly (tests/data/archs/edvr__*.tsv).

A sliding-window network: `num_frame` neighbouring frames in, the restored centre frame out. Each frame gets
a three-level feature pyramid (L1 full, L2 1/2, L3 1/4 size); PCD alignment (pyramid, cascading,
deformable) aligns every neighbour's pyramid to the centre frame's with modulated deformable convolutions
whose offsets are predicted coarse to fine; TSA fusion weighs the aligned frames by their similarity to the
centre frame (temporal attention) and the fused features by a pyramid of spatial attention; residual blocks
reconstruct and two ×2 pixel shuffles upsample, on top of the bilinearly upsampled centre frame. Deblurring
(`hr_in` + `with_predeblur`) takes full-size frames, works at 1/4 of their size after a pre-deblurring
module and returns the full size (the centre frame is the residual's base).

Input N×num_frame×C×H×W; output N×C×4H×4W (N×C×H×W with `hr_in`). H and W must be multiples of 4 (16 with
`hr_in`): the pyramid halves them twice (after the ×1/4 of `hr_in`).
"""
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from models.networks.layers.basicsr import ResidualBlockNoBN, residual_blocks
from models.networks.layers.deform_conv import ModulatedDeformConvPack
from models.registry import NETWORKS
from utils.options.foreign import Foreign
from utils.errors import InputShapeError, UserError

LEVELS = ('l3', 'l2', 'l1')  # coarse to fine: the order the offsets are refined in (and BasicSR's key order)


def lrelu(x: torch.Tensor) -> torch.Tensor:
    return F.leaky_relu(x, 0.1)


def up2(x: torch.Tensor) -> torch.Tensor:
    return F.interpolate(x, scale_factor=2, mode='bilinear', align_corners=False)


class DCNv2Pack(ModulatedDeformConvPack):
    """Modulated deformable convolution whose offsets and masks are predicted from other features than the ones
    it convolves (EDVR's alignment: from the offset features of a neighbour and the reference), by one conv
    `conv_offset` with 3·k²·groups outputs: (dy, dx) halves, then the mask logits."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, padding: int = 1,
                 deformable_groups: int = 8):
        super().__init__(in_channels, out_channels, kernel_size, padding=padding, deformable_groups=deformable_groups)
        self.conv_offset = nn.Conv2d(in_channels, 3 * kernel_size * kernel_size * deformable_groups, kernel_size, 1,
                                     padding)
        nn.init.zeros_(self.conv_offset.weight)
        nn.init.zeros_(self.conv_offset.bias)

    def forward(self, x: torch.Tensor, feat: torch.Tensor) -> torch.Tensor:
        o1, o2, mask = torch.chunk(self.conv_offset(feat), 3, dim=1)
        return self.deform(x, torch.cat((o1, o2), dim=1), torch.sigmoid(mask))


class PCDAlignment(nn.Module):
    """Pyramid, cascading and deformable alignment of a neighbour's feature pyramid to the reference's.

    At each level (coarse to fine) offset features come from [neighbour, reference] and, below the top, the
    upsampled offset features of the level above (×2: offsets are in pixels); a DCN samples the neighbour
    with them and its result is fused with the upsampled coarser result. A last cascading DCN refines the
    L1 result against the reference.
    """

    def __init__(self, num_feat: int = 64, deformable_groups: int = 8):
        super().__init__()
        self.offset_conv1, self.offset_conv2, self.offset_conv3 = nn.ModuleDict(), nn.ModuleDict(), nn.ModuleDict()
        self.dcn_pack, self.feat_conv = nn.ModuleDict(), nn.ModuleDict()
        for level in LEVELS:
            top = level == 'l3'
            self.offset_conv1[level] = nn.Conv2d(2 * num_feat, num_feat, 3, 1, 1)
            self.offset_conv2[level] = nn.Conv2d(num_feat if top else 2 * num_feat, num_feat, 3, 1, 1)
            if not top:
                self.offset_conv3[level] = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
            self.dcn_pack[level] = DCNv2Pack(num_feat, num_feat, 3, padding=1, deformable_groups=deformable_groups)
            if not top:
                self.feat_conv[level] = nn.Conv2d(2 * num_feat, num_feat, 3, 1, 1)
        self.cas_offset_conv1 = nn.Conv2d(2 * num_feat, num_feat, 3, 1, 1)
        self.cas_offset_conv2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.cas_dcnpack = DCNv2Pack(num_feat, num_feat, 3, padding=1, deformable_groups=deformable_groups)

    def forward(self, nbr: Sequence[torch.Tensor], ref: Sequence[torch.Tensor]) -> torch.Tensor:
        """`nbr`, `ref`: [L1, L2, L3] features (N×C×h×w, h/2, h/4); returns the aligned L1 features."""
        up_offset: Optional[torch.Tensor] = None
        up_feat: Optional[torch.Tensor] = None
        feat = nbr[0]
        for level in LEVELS:
            i = int(level[1]) - 1
            offset = lrelu(self.offset_conv1[level](torch.cat([nbr[i], ref[i]], 1)))
            if up_offset is None:
                offset = lrelu(self.offset_conv2[level](offset))
            else:
                offset = lrelu(self.offset_conv2[level](torch.cat([offset, up_offset], 1)))
                offset = lrelu(self.offset_conv3[level](offset))
            feat = self.dcn_pack[level](nbr[i], offset)
            if up_feat is not None:
                feat = self.feat_conv[level](torch.cat([feat, up_feat], 1))
            if level != 'l1':
                feat = lrelu(feat)
                up_offset, up_feat = up2(offset) * 2, up2(feat)
        offset = lrelu(self.cas_offset_conv2(lrelu(self.cas_offset_conv1(torch.cat([feat, ref[0]], 1)))))
        return lrelu(self.cas_dcnpack(feat, offset))


class TSAFusion(nn.Module):
    """Temporal and spatial attention fusion of N×T×C×h×w aligned features into N×C×h×w.

    Temporal: each frame's features are weighted per pixel by sigmoid(<embedding(frame), embedding(centre)>)
    before a 1×1 fusion conv. Spatial: an attention map from a two-level max/avg-pooled pyramid of the
    weighted features modulates the fused features (×2·sigmoid, plus an additive term).
    """

    def __init__(self, num_feat: int = 64, num_frame: int = 5, center_frame_idx: int = 2):
        super().__init__()
        self.center_frame_idx = center_frame_idx
        self.temporal_attn1 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.temporal_attn2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.feat_fusion = nn.Conv2d(num_frame * num_feat, num_feat, 1, 1)
        self.spatial_attn1 = nn.Conv2d(num_frame * num_feat, num_feat, 1)
        self.spatial_attn2 = nn.Conv2d(2 * num_feat, num_feat, 1)
        self.spatial_attn3 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.spatial_attn4 = nn.Conv2d(num_feat, num_feat, 1)
        self.spatial_attn5 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.spatial_attn_l1 = nn.Conv2d(num_feat, num_feat, 1)
        self.spatial_attn_l2 = nn.Conv2d(2 * num_feat, num_feat, 3, 1, 1)
        self.spatial_attn_l3 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.spatial_attn_add1 = nn.Conv2d(num_feat, num_feat, 1)
        self.spatial_attn_add2 = nn.Conv2d(num_feat, num_feat, 1)

    @staticmethod
    def _pool(x: torch.Tensor) -> torch.Tensor:
        """[max, mean] over 3×3 windows at stride 2 (zero padding counted in the mean, as nn.AvgPool2d)."""
        return torch.cat([F.max_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 3, 2, 1)], 1)

    def forward(self, aligned: torch.Tensor) -> torch.Tensor:
        n, t, c, h, w = aligned.shape
        ref = self.temporal_attn1(aligned[:, self.center_frame_idx])
        emb = self.temporal_attn2(aligned.reshape(-1, c, h, w)).view(n, t, -1, h, w)
        prob = torch.sigmoid((emb * ref.unsqueeze(1)).sum(2, keepdim=True))  # N×T×1×h×w
        weighted = (aligned * prob).reshape(n, t * c, h, w)
        feat = lrelu(self.feat_fusion(weighted))

        attn = lrelu(self.spatial_attn1(weighted))
        attn = lrelu(self.spatial_attn2(self._pool(attn)))
        level = lrelu(self.spatial_attn_l1(attn))
        level = lrelu(self.spatial_attn_l2(self._pool(level)))
        level = up2(lrelu(self.spatial_attn_l3(level)))
        attn = lrelu(self.spatial_attn3(attn)) + level
        attn = self.spatial_attn5(up2(lrelu(self.spatial_attn4(attn))))
        attn_add = self.spatial_attn_add2(lrelu(self.spatial_attn_add1(attn)))
        return feat * torch.sigmoid(attn) * 2 + attn_add  # ×2: sigmoid starts near 1/2


class PredeblurModule(nn.Module):
    """Pre-deblurring for EDVR's deblurring model: stride-2 convs down to 1/4 of full-size input (`hr_in`),
    then a three-level residual pyramid whose coarser levels are upsampled into the finer ones."""

    def __init__(self, num_in_ch: int = 3, num_feat: int = 64, hr_in: bool = False):
        super().__init__()
        self.hr_in = hr_in
        self.conv_first = nn.Conv2d(num_in_ch, num_feat, 3, 1, 1)
        if hr_in:
            self.stride_conv_hr1 = nn.Conv2d(num_feat, num_feat, 3, 2, 1)
            self.stride_conv_hr2 = nn.Conv2d(num_feat, num_feat, 3, 2, 1)
        self.stride_conv_l2 = nn.Conv2d(num_feat, num_feat, 3, 2, 1)
        self.stride_conv_l3 = nn.Conv2d(num_feat, num_feat, 3, 2, 1)
        self.resblock_l3 = ResidualBlockNoBN(num_feat)
        self.resblock_l2_1 = ResidualBlockNoBN(num_feat)
        self.resblock_l2_2 = ResidualBlockNoBN(num_feat)
        self.resblock_l1 = nn.ModuleList([ResidualBlockNoBN(num_feat) for _ in range(5)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        l1 = lrelu(self.conv_first(x))
        if self.hr_in:
            l1 = lrelu(self.stride_conv_hr2(lrelu(self.stride_conv_hr1(l1))))
        l2 = lrelu(self.stride_conv_l2(l1))
        l3 = lrelu(self.stride_conv_l3(l2))
        l3 = up2(self.resblock_l3(l3))
        l2 = up2(self.resblock_l2_2(self.resblock_l2_1(l2) + l3))
        l1 = self.resblock_l1[1](self.resblock_l1[0](l1)) + l2
        for block in self.resblock_l1[2:]:
            l1 = block(l1)
        return l1


class PyramidAlignFuse(nn.Module):
    """What EDVR and IconVSR's EDVR feature extractor share: per-frame feature pyramids (`feature_extraction`,
    `conv_l2_*`, `conv_l3_*`), PCD alignment of every frame to the centre one (`pcd_align`) and the fusion
    (`fusion`); the subclasses create those modules (their names and order are the checkpoints')."""

    center_frame_idx: int
    feature_extraction: nn.Module
    conv_l2_1: nn.Module
    conv_l2_2: nn.Module
    conv_l3_1: nn.Module
    conv_l3_2: nn.Module
    pcd_align: PCDAlignment
    fusion: nn.Module

    def align_and_fuse(self, feat_l1: torch.Tensor, n: int, t: int) -> torch.Tensor:
        """(N·T)×C×h×w first-level features → N×C×h×w fused features of the centre frame."""
        feat_l1 = self.feature_extraction(feat_l1)
        feat_l2 = lrelu(self.conv_l2_2(lrelu(self.conv_l2_1(feat_l1))))
        feat_l3 = lrelu(self.conv_l3_2(lrelu(self.conv_l3_1(feat_l2))))
        pyramid = [f.view(n, t, *f.shape[1:]) for f in (feat_l1, feat_l2, feat_l3)]
        ref = [f[:, self.center_frame_idx] for f in pyramid]
        aligned = torch.stack([self.pcd_align([f[:, i] for f in pyramid], ref) for i in range(t)], 1)
        if isinstance(self.fusion, TSAFusion):
            return self.fusion(aligned)
        return self.fusion(aligned.flatten(1, 2))


@NETWORKS.register('edvr', foreign=[Foreign('EDVR')])
class EDVR(PyramidAlignFuse):
    """EDVR with BasicSR's constructor keywords. `center_frame_idx` null is the middle frame; `with_tsa` false
    fuses by one 1×1 conv (the first training stage of the recipe); `hr_in` needs `with_predeblur` (the only
    way BasicSR's network brings full-size frames down to feature size)."""

    repeated_blocks = (ResidualBlockNoBN,)

    def __init__(self, num_in_ch: int = 3, num_out_ch: int = 3, num_feat: int = 64, num_frame: int = 5,
                 deformable_groups: int = 8, num_extract_block: int = 5, num_reconstruct_block: int = 10,
                 center_frame_idx: Optional[int] = None, hr_in: bool = False, with_predeblur: bool = False,
                 with_tsa: bool = True):
        super().__init__()
        self._check_args(num_in_ch, num_out_ch, num_feat, num_frame, deformable_groups, center_frame_idx, hr_in,
                         with_predeblur)
        self.num_frame = num_frame
        self.center_frame_idx = num_frame // 2 if center_frame_idx is None else center_frame_idx
        self.hr_in, self.with_predeblur, self.with_tsa = hr_in, with_predeblur, with_tsa
        self.size_multiple = 16 if hr_in else 4  # the pyramid halves twice (after hr_in's ×1/4)
        if with_predeblur:
            self.predeblur = PredeblurModule(num_in_ch, num_feat, hr_in)
            self.conv_1x1 = nn.Conv2d(num_feat, num_feat, 1, 1)
        else:
            self.conv_first = nn.Conv2d(num_in_ch, num_feat, 3, 1, 1)
        self.feature_extraction = residual_blocks(num_extract_block, num_feat)
        self.conv_l2_1 = nn.Conv2d(num_feat, num_feat, 3, 2, 1)
        self.conv_l2_2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_l3_1 = nn.Conv2d(num_feat, num_feat, 3, 2, 1)
        self.conv_l3_2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.pcd_align = PCDAlignment(num_feat, deformable_groups)
        self.fusion = (TSAFusion(num_feat, num_frame, self.center_frame_idx) if with_tsa
                       else nn.Conv2d(num_frame * num_feat, num_feat, 1, 1))
        self.reconstruction = residual_blocks(num_reconstruct_block, num_feat)
        self.upconv1 = nn.Conv2d(num_feat, 4 * num_feat, 3, 1, 1)
        self.upconv2 = nn.Conv2d(num_feat, 4 * 64, 3, 1, 1)
        self.conv_hr = nn.Conv2d(64, 64, 3, 1, 1)
        self.conv_last = nn.Conv2d(64, num_out_ch, 3, 1, 1)

    @staticmethod
    def _check_args(num_in_ch: int, num_out_ch: int, num_feat: int, num_frame: int, deformable_groups: int,
                    center_frame_idx: Optional[int], hr_in: bool, with_predeblur: bool) -> None:
        if num_out_ch != num_in_ch:
            raise UserError(f'netG.num_out_ch: {num_out_ch} must equal num_in_ch {num_in_ch} (the output is added '
                            f'to the centre input frame)')
        if num_frame < 1:
            raise UserError(f'netG.num_frame: must be >= 1, got {num_frame}')
        if center_frame_idx is not None and not 0 <= center_frame_idx < num_frame:
            raise UserError(f'netG.center_frame_idx: {center_frame_idx} is not a frame of the {num_frame} input '
                            f'frames (0..{num_frame - 1}, or null for the middle one)')
        if deformable_groups < 1 or num_feat % deformable_groups:
            raise UserError(f'netG.deformable_groups: {deformable_groups} must divide num_feat {num_feat}')
        if hr_in and not with_predeblur:
            raise UserError('netG.hr_in: full-size input needs with_predeblur true (its stride-2 convolutions bring '
                            'the frames to feature size)')

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: N×num_frame×C×H×W → the restored centre frame N×C×(4H or H)×(4W or W)."""
        n, t, c, h, w = x.shape
        if t != self.num_frame:
            raise InputShapeError(f'EDVR takes num_frame={self.num_frame} frames, got {t}')
        if h % self.size_multiple or w % self.size_multiple:
            raise InputShapeError(f'EDVR needs frame height and width divisible by {self.size_multiple}, got {h}x{w}')
        center = x[:, self.center_frame_idx]
        frames = x.reshape(n * t, c, h, w)
        if self.with_predeblur:
            feat_l1 = self.conv_1x1(self.predeblur(frames))
        else:
            feat_l1 = lrelu(self.conv_first(frames))
        out = self.reconstruction(self.align_and_fuse(feat_l1, n, t))
        out = lrelu(F.pixel_shuffle(self.upconv1(out), 2))
        out = lrelu(F.pixel_shuffle(self.upconv2(out), 2))
        out = self.conv_last(lrelu(self.conv_hr(out)))
        base = center if self.hr_in else F.interpolate(center, scale_factor=4, mode='bilinear', align_corners=False)
        return out + base

