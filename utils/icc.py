"""Embedded ICC colour profiles: whether an image's pixel values are sRGB, and the values converted to sRGB if not.

OpenCV decodes pixel values without looking at a profile. A Display P3 or Adobe RGB photo read that way is
trained on (and scored by) colours its author never saw: its values taken as sRGB are duller, and a
network learns that shift. The datasets' `icc` key (data/checks.py) says what happens to such a file:
"convert" (the default: its pixels become sRGB as they are read), "refuse" (the run does not start), "ignore"
(the values as they are, as before the key existed).

A profile counts as sRGB when converting to sRGB moves no colour by more than half an 8-bit level
(SRGB_TOLERANCE): the many sRGB profiles in circulation (copies of IEC 61966-2-1's, built-in ones) are not
converted, and their files cost only the profile's lookup in the header (once per distinct profile).

The conversion is relative colorimetric to sRGB (IEC 61966-2-1, D65), colours outside sRGB clipped per channel.
Matrix/TRC profiles (display and working spaces: Display P3, Adobe RGB, ProPhoto, Rec. 2020) and gray
profiles are evaluated here in floating point from the profile's own curves and colorants (ICC.1's curveType
and parametricCurveType, XYZType colorants adapted to the D50 connection space), so 16-bit images keep their
16-bit precision. Other RGB profiles (lookup tables: scanner, camera, printer profiles) go through LittleCMS
(Pillow's ImageCms), which Pillow drives at 8 bits per sample only: 8-bit images are converted, a 16-bit image
with such a profile is refused with that reason. Other colour spaces (CMYK, Lab) are refused: OpenCV has already
turned a CMYK JPEG into RGB its own way.
"""
import functools
import io
import struct
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from utils.errors import UserError
from utils.image_header import embedded_icc

ICC_MODES = ('convert', 'refuse', 'ignore')  # the values of the datasets' `icc` key
SRGB_TOLERANCE = 0.5 / 255  # a profile converting no colour further than this from itself is sRGB

PCS_WHITE = np.array([0.9642, 1.0, 0.8249])  # D50, the ICC profile connection space's white (XYZ)
BRADFORD = np.array([[0.8951, 0.2664, -0.1614], [-0.7502, 1.7135, 0.0367], [0.0389, -0.0685, 1.0296]])
SRGB_PRIMARIES = ((0.64, 0.33), (0.30, 0.60), (0.15, 0.06))  # CIE xy of red, green, blue
D65 = (0.3127, 0.3290)

Curve = Callable[[np.ndarray], np.ndarray]


class ProfileError(ValueError):
    """A profile that cannot be read or converted; the message says why, without the file."""


def rgb_to_pcs(primaries: Sequence[Tuple[float, float]], white: Tuple[float, float]) -> np.ndarray:
    """The 3x3 matrix from linear RGB to connection-space XYZ for RGB `primaries` and `white` (CIE xy), adapted to
    D50 with the Bradford transform: the colorants (columns) that a matrix/TRC profile of that space stores."""
    def xyz(x: float, y: float) -> np.ndarray:
        return np.array([x / y, 1.0, (1 - x - y) / y])
    prim = np.stack([xyz(*p) for p in primaries], axis=1)
    white_xyz = xyz(*white)
    matrix = prim * np.linalg.solve(prim, white_xyz)  # columns scaled so that RGB (1, 1, 1) is the white
    adapt = np.linalg.inv(BRADFORD) @ np.diag((BRADFORD @ PCS_WHITE) / (BRADFORD @ white_xyz)) @ BRADFORD
    return adapt @ matrix


PCS_TO_SRGB = np.linalg.inv(rgb_to_pcs(SRGB_PRIMARIES, D65))


def srgb_encode(linear: np.ndarray) -> np.ndarray:
    """Linear light (clipped to [0, 1]) as sRGB values in [0, 1]: IEC 61966-2-1's curve, in the array's float type."""
    linear = np.clip(linear, 0, 1)
    return np.where(linear <= 0.0031308, linear * 12.92, np.power(linear, 1 / 2.4) * 1.055 - 0.055)


def _quantize(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    peak = np.iinfo(dtype).max
    return np.rint(values * peak).astype(dtype)


ENCODE_STEPS = 65535  # uint8 output: linear light in steps of 1/65535, within 0.03 of an 8-bit level of the curve
_ENCODE_8 = _quantize(srgb_encode(np.arange(ENCODE_STEPS + 1) / ENCODE_STEPS), np.dtype(np.uint8))


def encode_samples(linear: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Linear light (float32) as sRGB samples of the integer `dtype`: uint8 through a table (the curve's powers
    are most of the conversion's time), uint16 from the curve itself."""
    if dtype == np.uint8:
        index = linear * ENCODE_STEPS
        index += 0.5
        np.clip(index, 0, ENCODE_STEPS, out=index)
        return _ENCODE_8[index.astype(np.uint16)]
    return _quantize(srgb_encode(linear), dtype)


class Profile:
    """A non-sRGB profile: its name (its description tag) and how pixels in it become sRGB."""

    def __init__(self, name: str):
        self.name = name

    def problem(self, bits: int) -> Optional[str]:
        """Why images of `bits` per sample (8, 16) in this profile cannot be converted, or None."""
        return None

    def is_srgb(self) -> bool:
        raise NotImplementedError

    def _convert(self, colour: np.ndarray, bgr: bool) -> np.ndarray:
        raise NotImplementedError

    def to_srgb(self, img: np.ndarray, what: str, bgr: bool = False) -> np.ndarray:
        """`img` (HW or HWC uint8/uint16; C 1, 3, or 4 with alpha, which passes unchanged; colour in BGR order with
        `bgr`) in sRGB: the same type and channel order (a gray image with an RGB profile becomes colour). A
        UserError naming `what` (the file) when it cannot be converted."""
        problem = self.problem(8 * img.dtype.itemsize)
        if problem:
            raise UserError(f'cannot convert {what} to sRGB: {problem}')
        flat = img.ndim == 2
        img = img[:, :, None] if flat else img
        alpha = img[:, :, 3:] if img.shape[2] == 4 else None
        out = self._convert(img[:, :, :3], bgr)
        if alpha is not None:
            out = np.concatenate([out, alpha], axis=2)
        return out[:, :, 0] if flat and out.shape[2] == 1 else out


class _Curves(Profile):
    """A profile of per-channel curves to linear light: tables of them for every level of a sample type."""

    def __init__(self, name: str, curves: Sequence[Curve]):
        super().__init__(name)
        self.curves = tuple(curves)
        self._tables: Dict[np.dtype, np.ndarray] = {}

    def linear(self, channel: np.ndarray, i: int) -> np.ndarray:
        """Channel `i`'s integer samples as linear light, float32."""
        table = self._tables.get(channel.dtype)
        if table is None:
            levels = np.arange(np.iinfo(channel.dtype).max + 1) / np.iinfo(channel.dtype).max
            table = np.stack([np.clip(c(levels), 0, 1) for c in self.curves]).astype(np.float32)
            self._tables[channel.dtype] = table
        return table[i][channel]


class MatrixProfile(_Curves):
    """An RGB matrix/TRC profile: three curves to linear light, then the colorant matrix to the connection space."""

    def __init__(self, name: str, curves: Sequence[Curve], to_pcs: np.ndarray):
        super().__init__(name, curves)
        self.to_srgb_linear = PCS_TO_SRGB @ to_pcs

    def _srgb_linear(self, linear: Sequence[np.ndarray]) -> List[np.ndarray]:
        """Linear light of the profile's R, G, B as linear light of sRGB's."""
        m = self.to_srgb_linear.astype(linear[0].dtype)
        return [linear[0] * m[i, 0] + linear[1] * m[i, 1] + linear[2] * m[i, 2] for i in range(3)]

    def is_srgb(self) -> bool:
        levels = np.linspace(0, 1, 17)
        probe = np.concatenate([np.stack(np.meshgrid(levels, levels, levels), -1).reshape(-1, 3),
                                np.repeat(np.linspace(0, 1, 256)[:, None], 3, axis=1)])
        out = self._srgb_linear([np.clip(self.curves[i](probe[:, i]), 0, 1) for i in range(3)])
        return max(np.abs(srgb_encode(o) - probe[:, i]).max() for i, o in enumerate(out)) <= SRGB_TOLERANCE

    def _convert(self, colour: np.ndarray, bgr: bool) -> np.ndarray:
        if colour.shape[2] == 1:  # a gray image tagged with an RGB profile: its grays in that space
            colour = np.repeat(colour, 3, axis=2)
        order = (2, 1, 0) if bgr else (0, 1, 2)  # where R, G, B are
        linear = self._srgb_linear([self.linear(colour[:, :, c], i) for i, c in enumerate(order)])
        out = np.empty(colour.shape, colour.dtype)
        for i, c in enumerate(order):
            out[:, :, c] = encode_samples(linear[i], colour.dtype)
        return out


class GrayProfile(_Curves):
    """A gray profile: one curve to linear light (the connection space's luminance), which sRGB's curve encodes."""

    def is_srgb(self) -> bool:
        probe = np.linspace(0, 1, 4096)
        return np.abs(srgb_encode(np.clip(self.curves[0](probe), 0, 1)) - probe).max() <= SRGB_TOLERANCE

    def _convert(self, colour: np.ndarray, bgr: bool) -> np.ndarray:
        out = np.empty(colour.shape, colour.dtype)  # a gray image decoded as colour: every channel alike
        for c in range(colour.shape[2]):
            out[:, :, c] = encode_samples(self.linear(colour[:, :, c], 0), colour.dtype)
        return out


class LittleCmsProfile(Profile):
    """An RGB profile of lookup tables: LittleCMS converts it (Pillow's ImageCms, 8 bits per sample)."""

    def __init__(self, name: str, icc: bytes):
        super().__init__(name)
        try:
            from PIL import ImageCms
        except ImportError:
            raise ProfileError('a profile of lookup tables, which needs Pillow (LittleCMS): pip install pillow') from None
        try:
            self.transform = ImageCms.buildTransform(
                ImageCms.ImageCmsProfile(io.BytesIO(icc)), ImageCms.createProfile('sRGB'), 'RGB', 'RGB',
                ImageCms.Intent.RELATIVE_COLORIMETRIC)
        except (ImageCms.PyCMSError, OSError, ValueError) as e:  # LittleCMS's own words
            raise ProfileError(f'LittleCMS cannot use it: {str(e).strip() or type(e).__name__}') from None

    def problem(self, bits: int) -> Optional[str]:
        if bits == 8:
            return None
        return (f'its profile "{self.name}" is made of lookup tables, which LittleCMS converts at 8 bits per sample '
                f'here: a {bits}-bit image would lose its precision')

    def _apply(self, rgb: np.ndarray) -> np.ndarray:
        from PIL import Image, ImageCms
        return np.asarray(ImageCms.applyTransform(Image.fromarray(np.ascontiguousarray(rgb), 'RGB'), self.transform))

    def is_srgb(self) -> bool:
        levels = np.linspace(0, 255, 32).round().astype(np.uint8)
        probe = np.stack(np.meshgrid(levels, levels, levels), -1).reshape(32, -1, 3)
        return np.abs(self._apply(probe).astype(int) - probe).max() <= 1  # LittleCMS rounds to 8 bits itself

    def _convert(self, colour: np.ndarray, bgr: bool) -> np.ndarray:
        if colour.shape[2] == 1:
            colour = np.repeat(colour, 3, axis=2)
        out = self._apply(colour[:, :, ::-1] if bgr else colour)
        return np.ascontiguousarray(out[:, :, ::-1]) if bgr else out.copy()


class Unconvertible(Profile):
    """A profile of another colour space (CMYK, Lab): `why` it is not converted."""

    def __init__(self, name: str, why: str):
        super().__init__(name)
        self.why = why

    def problem(self, bits: int) -> Optional[str]:
        return self.why

    def is_srgb(self) -> bool:
        return False


def _tags(icc: bytes) -> Dict[bytes, bytes]:
    """Tag signature -> the tag's bytes (ICC.1: a 128-byte header, a tag count, 12-byte entries)."""
    if len(icc) < 132 or icc[36:40] != b'acsp':
        raise ProfileError('not an ICC profile')
    count = struct.unpack_from('>I', icc, 128)[0]
    if 132 + 12 * count > len(icc):
        raise ProfileError('truncated tag table')
    tags = {}
    for i in range(count):
        sig, offset, size = struct.unpack_from('>4sII', icc, 132 + 12 * i)
        if offset + size > len(icc) or size < 8:
            raise ProfileError(f'tag {sig.decode("latin-1")!r} lies beyond the end of the profile')
        tags[sig] = icc[offset:offset + size]
    return tags


def _s15(tag: bytes, offset: int, count: int) -> np.ndarray:
    """`count` s15Fixed16Number values from `offset`."""
    if len(tag) < offset + 4 * count:
        raise ProfileError(f'truncated {tag[:4].decode("latin-1")!r} tag')
    return np.frombuffer(tag, '>i4', count, offset) / 65536.0


def _xyz(tag: bytes) -> np.ndarray:
    if tag[:4] != b'XYZ ':
        raise ProfileError(f'a colorant of type {tag[:4].decode("latin-1")!r}')
    return _s15(tag, 8, 3)


PARAMETERS = {0: 1, 1: 3, 2: 4, 3: 5, 4: 7}  # parametric curve type -> its number of parameters (g a b c d e f)


def _curve(tag: bytes) -> Curve:
    """A tone curve: ICC.1's curveType (identity, gamma or table) or parametricCurveType (types 0-4)."""
    if tag[:4] == b'curv' and len(tag) >= 12:
        n = struct.unpack_from('>I', tag, 8)[0]
        if n == 0:
            return lambda x: x
        if len(tag) < 12 + 2 * n:
            raise ProfileError('truncated curve')
        if n == 1:
            gamma = struct.unpack_from('>H', tag, 12)[0] / 256.0
            return lambda x: np.power(x, gamma)
        table, grid = np.frombuffer(tag, '>u2', n, 12) / 65535.0, np.linspace(0, 1, n)
        return lambda x: np.interp(x, grid, table)
    if tag[:4] == b'para' and len(tag) >= 12:
        kind = struct.unpack_from('>H', tag, 8)[0]
        if kind not in PARAMETERS:
            raise ProfileError(f'a parametric curve of unknown type {kind}')
        p = dict(zip('gabcdef', _s15(tag, 12, PARAMETERS[kind])))
        g = p['g']
        if kind == 0:
            return lambda x: np.power(x, g)
        a, b = p['a'], p['b']
        if a == 0:
            raise ProfileError('a parametric curve with a = 0')
        # types 1, 2: (ax + b)^g (+ c) from x = -b/a, 0 (c) below; types 3, 4: (ax + b)^g (+ e) from d, cx (+ f) below
        d, slope, low, high = ((-b / a, 0.0, p.get('c', 0.0), p.get('c', 0.0)) if kind in (1, 2)
                               else (p['d'], p['c'], p.get('f', 0.0), p.get('e', 0.0)))
        return lambda x: np.where(x >= d, np.power(np.maximum(a * x + b, 0), g) + high, slope * x + low)
    raise ProfileError(f'a tone curve of type {tag[:4].decode("latin-1")!r}')


def _description(tag: Optional[bytes]) -> str:
    """The profile's name: its description tag (v2 textDescriptionType, v4 multiLocalizedUnicodeType)."""
    try:
        if tag and tag[:4] == b'desc':
            n = struct.unpack_from('>I', tag, 8)[0]
            text = tag[12:12 + n].split(b'\x00')[0].decode('latin-1')
        elif tag and tag[:4] == b'mluc' and struct.unpack_from('>I', tag, 8)[0] > 0:
            length, offset = struct.unpack_from('>II', tag, 20)
            text = tag[offset:offset + length].decode('utf-16-be')
        else:
            text = ''
    except (struct.error, UnicodeDecodeError):
        text = ''
    return ' '.join(text.split()) or 'unnamed'


@functools.lru_cache(maxsize=64)
def read_profile(icc: bytes) -> Optional[Profile]:
    """The profile these ICC bytes describe, or None when it is sRGB (see SRGB_TOLERANCE). ProfileError when they
    cannot be read. Cached: a data set's files share a few profiles, each parsed and probed once per process."""
    tags = _tags(icc)
    name, space = _description(tags.get(b'desc')), icc[16:20]
    if space == b'RGB ':
        names = (b'rXYZ', b'gXYZ', b'bXYZ', b'rTRC', b'gTRC', b'bTRC')
        if icc[20:24] == b'XYZ ' and all(t in tags for t in names):
            to_pcs = np.stack([_xyz(tags[t]) for t in names[:3]], axis=1)
            profile: Profile = MatrixProfile(name, [_curve(tags[t]) for t in names[3:]], to_pcs)
        else:
            profile = LittleCmsProfile(name, icc)
    elif space == b'GRAY':
        if b'kTRC' not in tags:
            raise ProfileError('a gray profile without its gray tone curve (kTRC)')
        profile = GrayProfile(name, [_curve(tags[b'kTRC'])])
    else:
        profile = Unconvertible(name, f'its profile "{name}" is of the colour space '
                                      f'{space.decode("latin-1").strip()!r}: only RGB and gray ones are converted')
    return None if profile.is_srgb() else profile


def file_profile(raw: bytes, what: str, mode: str) -> Optional[Profile]:
    """The non-sRGB profile embedded in the image file bytes `raw` (named `what`) that `mode` (the `icc` key)
    converts from: `profile_to_apply` of the profile in the header; mode "ignore" does not look."""
    if mode == 'ignore':
        return None
    return profile_to_apply(embedded_icc(io.BytesIO(raw), what), mode, what)


def profile_to_apply(icc: Optional[bytes], mode: str, what: str) -> Optional[Profile]:
    """The profile that `what`'s pixels (with the embedded ICC bytes `icc`) are converted from under `mode` (the
    `icc` key); None when there is nothing to do: no profile, an sRGB one, or mode "ignore". A UserError naming
    `what` when mode is "refuse" or the profile cannot be read."""
    if mode not in ICC_MODES:
        raise ValueError(f'icc: must be one of {", ".join(ICC_MODES)}, got {mode!r}')
    if icc is None or mode == 'ignore':
        return None
    try:
        profile = read_profile(icc)
    except ProfileError as e:
        raise UserError(f'{what}: damaged colour profile ({e}); icc "ignore" reads its values as they are') from None
    if profile is not None and mode == 'refuse':
        raise UserError(f'{what}: carries a non-sRGB colour profile ("{profile.name}") and icc is "refuse"')
    return profile
