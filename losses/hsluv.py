"""The HSLuv loss (`G_lossfn_type` / `G_extra_losses`: `hsluv`; traiNNer-redux's `hsluvloss`): hue, saturation and
lightness of the HSLuv colour space (hsluv.org: CIELUV's lightness and chroma, the chroma as a share of the largest
the sRGB gamut allows at that lightness and hue) compared between output and target.

As traiNNer-redux computes it (Apache-2.0; its traiNNer/losses/basic_loss.py HSLuvLoss and traiNNer/utils/hsluv.py,
read as facts): the images (clamped to [1e-12, 1]) are converted in float32 with its guards against division by
zero (denominators kept at least 1e-3 in magnitude, the chroma bound at least 1e-2, hue 0 below chroma 0.028972067,
no saturation below lightness 0.01 or above 99.99); hue, saturation and lightness scaled to [0, 1]. The hue term is
the mean circular distance (x2), 0 where both pixels are grey (saturation < 0.1) or both black or both white, the
larger saturation where only one is grey; the saturation term is the criterion weighted by how far each pixel's
lightness is from black and white (min(l, 1 - l), summed over the two images); the lightness term is the plain
criterion. Each is weighted (1/3 by default) and the three are summed.
"""
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from losses.registry import LOSSES
from utils.options import Key, at_least, non_negative, one_of
from utils.options.foreign import REDUX, Foreign

# sRGB → XYZ, XYZ → sRGB (hsluv.org's reference matrices), CIELUV's white point and constants
_RGB_TO_XYZ = ((0.41239079926595, 0.35758433938387, 0.18048078840183),
               (0.21263900587151, 0.71516867876775, 0.072192315360733),
               (0.019330818715591, 0.11919477979462, 0.95053215224966))
_XYZ_TO_RGB = ((3.240969941904521, -1.537383177570093, -0.498610760293),
               (-0.96924363628087, 1.87596750150772, 0.041555057407175),
               (0.055630079696993, -0.20397695888897, 1.056971514242878))
_REF_U, _REF_V = 0.19783000664283, 0.46831999493879
_KAPPA, _EPSILON = 903.2962962, 0.0088564516
_GREY_CHROMA = 0.028972067  # below it a float32 pixel is grey (traiNNer-redux's threshold)


def _guarded(x: torch.Tensor, floor: float) -> torch.Tensor:
    """x with its magnitude at least `floor`, keeping its sign (0 becomes +floor)."""
    return torch.where(x == 0, torch.full_like(x, floor), torch.sign(x) * x.abs().clamp(min=floor))


def _gamut_lines(light: torch.Tensor) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    """The six lines (slope, intercept) in the (U, V) plane bounding sRGB at CIELUV lightness `light`."""
    cube = (light + 16) ** 3 / 1560896
    sub = torch.where(cube > _EPSILON, cube, light / _KAPPA)
    lines = []
    for m1, m2, m3 in _XYZ_TO_RGB:
        for t in (0, 1):
            top1 = (284517 * m1 - 94839 * m3) * sub
            top2 = (838422 * m3 + 769860 * m2 + 731718 * m1) * light * sub - 769860 * t * light
            bottom = _guarded((632260 * m3 - 126452 * m2) * sub + 126452 * t, 1e-3)
            lines.append((top1 / bottom, top2 / bottom))
    return lines


def _max_chroma(light: torch.Tensor, hue: torch.Tensor) -> torch.Tensor:
    """The largest chroma of sRGB at this lightness and hue (degrees): the nearest gamut line along the hue's ray;
    rays that meet a line behind them count as the largest length found anywhere (traiNNer-redux's masking)."""
    theta = torch.deg2rad(hue)
    lengths = torch.stack([intercept / _guarded(torch.sin(theta) - slope * torch.cos(theta), 1e-3)
                           for slope, intercept in _gamut_lines(light)])
    return torch.where(lengths >= 0, lengths, lengths.max()).min(dim=0).values


def rgb_to_hsluv(rgb: torch.Tensor) -> torch.Tensor:
    """(N, 3, H, W) sRGB in [0, 1] → (N, 3, H, W) hue (degrees), saturation and lightness (0..100)."""
    rgb = rgb.permute(0, 2, 3, 1).clamp(1e-12, 1)
    linear = torch.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    x, y, z = (linear @ torch.tensor(_RGB_TO_XYZ, dtype=rgb.dtype, device=rgb.device).T).unbind(-1)
    light = torch.where(y > _EPSILON, 116 * y.pow(1 / 3) - 16, y * _KAPPA)
    divider = (x + 15 * y + 3 * z).clamp(min=1e-6)
    u = torch.where(light < 1e-4, 0.0, 13 * light * (4 * x / divider - _REF_U))
    v = torch.where(light < 1e-4, 0.0, 13 * light * (9 * y / divider - _REF_V))
    u = torch.where(u == 0, torch.where(u >= 0, 1e-12, -1e-12), u)  # no exact zeros: atan2 and sqrt stay smooth
    v = torch.where(v == 0, torch.where(v >= 0, 1e-12, -1e-12), v)
    chroma = torch.sqrt(u ** 2 + v ** 2)
    hue = torch.rad2deg(torch.atan2(v, u))
    hue = torch.where(hue < 0, hue + 360, hue)
    hue = torch.where(chroma < _GREY_CHROMA, 0.0, hue)
    saturation = chroma / _max_chroma(light, hue).clamp(min=1e-2) * 100
    saturation = torch.where((light > 99.99) | (light < 0.01), 0.0, saturation).clamp(0, 100)
    return torch.stack([hue, saturation, light.clamp(0, 100)], dim=-1).permute(0, 3, 1, 2)


def _criterion(name: str) -> nn.Module:
    if name == 'l1':
        return nn.L1Loss(reduction='none')
    if name == 'l2':
        return nn.MSELoss(reduction='none')
    return _Charbonnier()


class _Charbonnier(nn.Module):
    """sqrt(d^2 + 1e-12) per element (traiNNer-redux's CharbonnierLoss with reduction none)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sqrt((x - y) ** 2 + 1e-12)


_GREY = 0.1  # below this saturation (of 1) a pixel counts as grey; below / above it in lightness as black / white


class HSLuvLoss(nn.Module):
    """weight_h x hue term + weight_s x saturation term + weight_l x lightness term (see the module docstring)."""

    def __init__(self, criterion: str, hue_weight: float, saturation_weight: float, lightness_weight: float,
                 downscale_factor: int, blur_strength: int):
        super().__init__()
        self.criterion = _criterion(criterion)
        self.weights = (hue_weight, saturation_weight, lightness_weight)
        self.downscale, self.blur = downscale_factor, blur_strength

    def _hsl(self, x: torch.Tensor) -> torch.Tensor:
        if self.downscale > 1:
            x = F.interpolate(x, scale_factor=1 / self.downscale, mode='bicubic', antialias=True).clamp(0, 1)
        return rgb_to_hsluv(x) / torch.tensor([360.0, 100.0, 100.0], device=x.device).view(1, 3, 1, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x, y = x.float(), y.float()
        if self.blur:
            from torchvision.transforms.functional import gaussian_blur
            size = 4 * self.blur + 1
            x, y = gaussian_blur(x, [size, size], [float(self.blur)] * 2), gaussian_blur(y, [size, size],
                                                                                         [float(self.blur)] * 2)
        (hx, sx, lx), (hy, sy, ly) = self._hsl(x).unbind(1), self._hsl(y).unbind(1)
        near = (hx - hy).abs()
        hue = torch.minimum(near, 1 - near) * 2
        grey_x, grey_y = sx < _GREY, sy < _GREY
        hue = torch.where(grey_x & grey_y, 0.0, hue)
        hue = torch.where((grey_x & (sy > _GREY)) | ((sx > _GREY) & grey_y), torch.maximum(sx, sy), hue)
        hue = torch.where((lx < _GREY) & (ly < _GREY), 0.0, hue)
        hue = torch.where((lx > 1 - _GREY) & (ly > 1 - _GREY), 0.0, hue)
        weight = torch.minimum(lx, 1 - lx).clamp(0, 0.5) + torch.minimum(ly, 1 - ly).clamp(0, 0.5)
        saturation = (self.criterion(sx, sy) * weight).mean()
        lightness = self.criterion(lx, ly).mean()
        w_h, w_s, w_l = self.weights
        return hue.mean() * w_h + saturation * w_s + lightness * w_l


_THIRD = 1 / 3
_KEYS = {'hue_weight': 'hsluv_hue_weight', 'saturation_weight': 'hsluv_saturation_weight',
         'lightness_weight': 'hsluv_lightness_weight', 'criterion': 'hsluv_criterion',
         'downscale_factor': 'hsluv_downscale_factor', 'blur_strength': 'hsluv_blur_strength'}


@LOSSES.register('hsluv', options={
    'hsluv_criterion': Key('l1', (str,), one_of('l1', 'l2', 'charbonnier'), 'distance of the saturation and lightness '
                                                                              'planes'),
    'hsluv_hue_weight': Key(_THIRD, (int, float), non_negative, 'weight of the hue term'),
    'hsluv_saturation_weight': Key(_THIRD, (int, float), non_negative, 'weight of the saturation term'),
    'hsluv_lightness_weight': Key(_THIRD, (int, float), non_negative, 'weight of the lightness term'),
    'hsluv_downscale_factor': Key(1, (int,), at_least(1), 'compare the images downscaled (bicubic, antialiased) by this '
                                                          'factor (1: as they are)'),
    'hsluv_blur_strength': Key(0, (int,), non_negative, 'Gaussian blur of sigma this, size 4 sigma + 1, first (0: none)')},
    foreign=[Foreign('HSLuvLoss', REDUX, keys=_KEYS, passthrough=False)])
def hsluv(hsluv_criterion: str, hsluv_hue_weight: float, hsluv_saturation_weight: float,
          hsluv_lightness_weight: float, hsluv_downscale_factor: int, hsluv_blur_strength: int) -> nn.Module:
    """HSLuv hue + saturation + lightness loss (see the module docstring)."""
    return HSLuvLoss(hsluv_criterion, hsluv_hue_weight, hsluv_saturation_weight, hsluv_lightness_weight,
                     hsluv_downscale_factor, hsluv_blur_strength)

