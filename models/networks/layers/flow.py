"""Optical flow pieces the video networks share: SpyNet and backward warping by a flow.

SpyNet (Ranjan & Black, "Optical Flow Estimation using a Spatial Pyramid Network", CVPR 2017) with the
names and buffers of the VRT/BasicSR releases (`spynet.basic_module.<level>.basic_module.<i>`, persistent
ImageNet `mean`/`std`), so one weights file (utils/weights.py 'spynet') serves VRT, RVRT, BasicVSR,
IconVSR and BasicVSR++. `flow_warp` is the bilinear backward warp they all align features with.
"""
import math
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from utils.checkpoint import load as load_checkpoint, unwrap_params
from utils.errors import UserError
from utils.weights import weights_path

def flow_warp(x: torch.Tensor, flow: torch.Tensor, interp_mode: str = 'bilinear',
              padding_mode: str = 'zeros', align_corners: bool = True) -> torch.Tensor:
    """Warp `x` (N,C,H,W) by `flow` (N,H,W,2 in pixels, (dx, dy)).

    `interp_mode='nearest4'` returns the four integer neighbours of each sample point stacked on the
    channel axis (N,4C,H,W): the official image pre-alignment feeds those to conv_first.
    Positions and sampling are (at least) float32 whatever the features' dtype: under `train.amp` they are bf16/fp16,
    which cannot hold a fractional pixel position (bf16 steps by 1 px from 128 px, 2 px from 256 px);
    the result comes back in x's dtype.
    """
    n, _, h, w = x.shape
    dt = torch.promote_types(x.dtype, torch.float32)  # float64 stays float64
    grid_y, grid_x = torch.meshgrid(torch.arange(h, dtype=dt, device=x.device),
                                    torch.arange(w, dtype=dt, device=x.device), indexing='ij')
    vgrid = torch.stack((grid_x, grid_y), 2) + flow.to(dt)
    sx, sy = 2.0 / max(w - 1, 1), 2.0 / max(h - 1, 1)
    src = x.to(dt)
    if interp_mode == 'nearest4':
        xf, xc = torch.floor(vgrid[..., 0]) * sx - 1.0, torch.ceil(vgrid[..., 0]) * sx - 1.0
        yf, yc = torch.floor(vgrid[..., 1]) * sy - 1.0, torch.ceil(vgrid[..., 1]) * sy - 1.0
        return torch.cat([F.grid_sample(src, torch.stack(g, dim=3), mode='nearest', padding_mode=padding_mode,
                                        align_corners=align_corners)
                          for g in ((xf, yf), (xf, yc), (xc, yf), (xc, yc))], 1).to(x.dtype)
    vgrid = torch.stack((vgrid[..., 0] * sx - 1.0, vgrid[..., 1] * sy - 1.0), dim=3)
    return F.grid_sample(src, vgrid, mode=interp_mode, padding_mode=padding_mode,
                         align_corners=align_corners).to(x.dtype)


class BasicModule(nn.Module):
    """One pyramid level of SpyNet: predicts a flow residual from (ref, warped supp, flow)."""

    def __init__(self):
        super().__init__()
        self.basic_module = nn.Sequential(
            nn.Conv2d(8, 32, 7, 1, 3), nn.ReLU(),
            nn.Conv2d(32, 64, 7, 1, 3), nn.ReLU(),
            nn.Conv2d(64, 32, 7, 1, 3), nn.ReLU(),
            nn.Conv2d(32, 16, 7, 1, 3), nn.ReLU(),
            nn.Conv2d(16, 2, 7, 1, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.basic_module(x)


class SpyNet(nn.Module):
    """SpyNet optical flow (Ranjan & Black, 2017), returning flows at several pyramid levels.

    `load_path` is a local file only (a `{'params': sd}` checkpoint or a bare state_dict): training
    runs offline, so nothing is ever downloaded.
    """

    def __init__(self, load_path: Optional[str] = None, return_levels: Sequence[int] = (5,)):
        super().__init__()
        self.return_levels = list(return_levels)
        self.basic_module = nn.ModuleList([BasicModule() for _ in range(6)])
        self.register_buffer('mean', torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer('std', torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        if load_path:
            self.load_weights(load_path)

    def load_weights(self, path: str) -> None:
        """Load released SpyNet weights (which lack the mean/std buffers) or a saved SpyNet state_dict."""
        path = weights_path('spynet', path, 'netG.spynet_path')  # a missing file: which to put there, from where
        try:
            sd = unwrap_params(load_checkpoint(path))
        except UserError as e:
            text = str(e) if str(e).startswith(path) else f'{path}: {e}'  # load() names the file itself
            raise UserError(f'netG.spynet_path: {text}') from None
        missing, unexpected = self.load_state_dict(sd, strict=False)
        if unexpected or set(missing) - {'mean', 'std'}:
            raise UserError(f'netG.spynet_path: {path} is not a SpyNet checkpoint '
                            f'(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})')

    def process(self, ref: torch.Tensor, supp: torch.Tensor, w: int, h: int, w_floor: int,
                h_floor: int) -> List[torch.Tensor]:
        flow_list = []
        ref = [(ref - self.mean) / self.std]
        supp = [(supp - self.mean) / self.std]
        for _ in range(5):
            ref.insert(0, F.avg_pool2d(ref[0], kernel_size=2, stride=2, count_include_pad=False))
            supp.insert(0, F.avg_pool2d(supp[0], kernel_size=2, stride=2, count_include_pad=False))
        flow = ref[0].new_zeros([ref[0].size(0), 2, ref[0].size(2) // 2, ref[0].size(3) // 2])
        for level in range(len(ref)):
            up = F.interpolate(flow, scale_factor=2, mode='bilinear', align_corners=True) * 2.0
            if up.size(2) != ref[level].size(2):
                up = F.pad(up, [0, 0, 0, 1], mode='replicate')
            if up.size(3) != ref[level].size(3):
                up = F.pad(up, [0, 1, 0, 0], mode='replicate')
            warped = flow_warp(supp[level], up.permute(0, 2, 3, 1), padding_mode='border')
            flow = self.basic_module[level](torch.cat([ref[level], warped, up], 1)) + up
            if level in self.return_levels:
                scale = 2 ** (5 - level)
                out = F.interpolate(flow, size=(h // scale, w // scale), mode='bilinear', align_corners=False)
                ratio = out.new_tensor([float(w // scale) / float(w_floor // scale),
                                        float(h // scale) / float(h_floor // scale)])
                flow_list.insert(0, out * ratio.view(1, 2, 1, 1))
        return flow_list

    def forward(self, ref: torch.Tensor, supp: torch.Tensor):
        h, w = ref.size(2), ref.size(3)
        w_floor = math.ceil(w / 32.0) * 32
        h_floor = math.ceil(h / 32.0) * 32
        ref = F.interpolate(ref, size=(h_floor, w_floor), mode='bilinear', align_corners=False)
        supp = F.interpolate(supp, size=(h_floor, w_floor), mode='bilinear', align_corners=False)
        flow_list = self.process(ref, supp, w, h, w_floor, h_floor)
        return flow_list[0] if len(flow_list) == 1 else flow_list
