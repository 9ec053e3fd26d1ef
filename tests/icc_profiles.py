"""Real ICC profiles for the tests, written from the ICC.1 specification (version 2.1 layout), and images
that carry them: LittleCMS (Pillow's ImageCms) opens and converts every one of them.

Display P3: DCI-P3 primaries, D65 white, the sRGB tone curve (a parametric curve of type 3). Adobe RGB (1998):
its primaries, D65, gamma 563/256 (a one-entry curv). sRGB as a 1024-entry curve table (as the widespread
IEC 61966-2.1 profile stores it). Gray gamma 2.2. A lookup-table Adobe RGB (an lut16 A2B0 tag and no
matrix/TRC tags), which only LittleCMS evaluates.
"""
import io
import struct
import zlib
from typing import Dict, List, Sequence, Tuple

import cv2
import numpy as np

from utils.icc import D65, SRGB_PRIMARIES, rgb_to_pcs

P3_PRIMARIES = ((0.680, 0.320), (0.265, 0.690), (0.150, 0.060))
ADOBE_PRIMARIES = ((0.640, 0.330), (0.210, 0.710), (0.150, 0.060))
ADOBE_GAMMA = 563 / 256
SRGB_PARAMS = (2.4, 1 / 1.055, 0.055 / 1.055, 1 / 12.92, 0.04045)  # g a b c d of a type 3 parametric curve


def _s15(*values: float) -> bytes:
    return b''.join(struct.pack('>i', int(round(v * 65536))) for v in values)


def _xyz(xyz: Sequence[float]) -> bytes:
    return b'XYZ \0\0\0\0' + _s15(*xyz)


def desc(text: str) -> bytes:
    ascii_ = text.encode('ascii') + b'\0'
    return (b'desc\0\0\0\0' + struct.pack('>I', len(ascii_)) + ascii_ + struct.pack('>II', 0, 0)
            + struct.pack('>HB', 0, 0) + bytes(67))


def _text(text: str) -> bytes:
    return b'text\0\0\0\0' + text.encode('ascii') + b'\0'


def gamma_curve(gamma: float) -> bytes:
    return b'curv\0\0\0\0' + struct.pack('>IH', 1, int(round(gamma * 256)))


def table_curve(values: np.ndarray) -> bytes:
    return b'curv\0\0\0\0' + struct.pack('>I', len(values)) + np.round(values * 65535).astype('>u2').tobytes()


def parametric_curve(kind: int, params: Sequence[float]) -> bytes:
    return b'para\0\0\0\0' + struct.pack('>HH', kind, 0) + _s15(*params)


def srgb_decode(v: np.ndarray) -> np.ndarray:
    return np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4)


def profile(space: bytes, tags: Dict[bytes, bytes]) -> bytes:
    """An ICC v2.1 display profile of colour space `space` (b'RGB ', b'GRAY') holding `tags` (equal tag data
    shared, 4-byte aligned), with a media white point of D50 and a copyright."""
    tags = {b'cprt': _text('no copyright, test data'), b'wtpt': _xyz((0.9642, 1.0, 0.8249)), **tags}
    count = len(tags)
    offset = 128 + 4 + 12 * count
    table, body, placed = [], b'', {}
    for sig, data in tags.items():
        if data not in placed:
            body += bytes(-len(body) % 4)
            placed[data] = offset + len(body)
            body += data
        table.append(struct.pack('>4sII', sig, placed[data], len(data)))
    size = offset + len(body)
    header = (struct.pack('>I', size) + b'lcms' + struct.pack('>I', 0x02100000) + b'mntr' + space + b'XYZ '
              + struct.pack('>6H', 2026, 1, 1, 0, 0, 0) + b'acsp' + bytes(4) + bytes(4) + bytes(8) + bytes(8)
              + struct.pack('>I', 0) + _s15(0.9642, 1.0, 0.8249) + b'lcms' + bytes(16) + bytes(28))
    assert len(header) == 128
    return header + struct.pack('>I', count) + b''.join(table) + body


def matrix_profile(name: str, primaries, curve: bytes) -> bytes:
    m = rgb_to_pcs(primaries, D65)
    return profile(b'RGB ', {b'desc': desc(name), b'rXYZ': _xyz(m[:, 0]), b'gXYZ': _xyz(m[:, 1]),
                             b'bXYZ': _xyz(m[:, 2]), b'rTRC': curve, b'gTRC': curve, b'bTRC': curve})


def display_p3() -> bytes:
    return matrix_profile('Display P3', P3_PRIMARIES, parametric_curve(3, SRGB_PARAMS))


def adobe_rgb() -> bytes:
    return matrix_profile('Adobe RGB (1998)', ADOBE_PRIMARIES, gamma_curve(ADOBE_GAMMA))


def srgb_table() -> bytes:
    return matrix_profile('sRGB IEC61966-2.1', SRGB_PRIMARIES, table_curve(srgb_decode(np.linspace(0, 1, 1024))))


def gray_gamma22() -> bytes:
    return profile(b'GRAY', {b'desc': desc('Gray Gamma 2.2'), b'kTRC': gamma_curve(2.2)})


def adobe_rgb_lut() -> bytes:
    """Adobe RGB as an lut16 A2B0 tag (gamma input tables, the colorants at the corners of a 2-point grid: exact,
    as the matrix is linear), no matrix/TRC tags. lut16's XYZ encoding: 1.0 is 32768."""
    m = rgb_to_pcs(ADOBE_PRIMARIES, D65)
    entries = 256
    curve = np.round((np.linspace(0, 1, entries) ** ADOBE_GAMMA) * 65535).astype('>u2').tobytes()
    corners = [m @ np.array([r, g, b]) for r in (0, 1) for g in (0, 1) for b in (0, 1)]
    clut = np.clip(np.round(np.array(corners) * 32768), 0, 65535).astype('>u2').tobytes()
    identity = np.round(np.linspace(0, 65535, entries)).astype('>u2').tobytes()
    lut = (b'mft2\0\0\0\0' + struct.pack('>BBBB', 3, 3, 2, 0) + _s15(1, 0, 0, 0, 1, 0, 0, 0, 1)
           + struct.pack('>HH', entries, entries) + curve * 3 + clut + identity * 3)
    return profile(b'RGB ', {b'desc': desc('Adobe RGB lookup tables'), b'A2B0': lut})


# --- images carrying a profile -----------------------------------------------------------------------------------

def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_with_profile(img: np.ndarray, icc: bytes) -> bytes:
    """PNG bytes of an RGB (or HxWx1 gray) uint8/uint16 image with `icc` in an iCCP chunk after IHDR."""
    data = img[:, :, 0] if img.shape[2] == 1 else cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
    ok, buf = cv2.imencode('.png', data)
    assert ok
    png = buf.tobytes()
    ihdr_end = 8 + 8 + 13 + 4
    return png[:ihdr_end] + _png_chunk(b'iCCP', b'test\0\0' + zlib.compress(icc)) + png[ihdr_end:]


def jpeg_with_profile(img: np.ndarray, icc: bytes, quality: int = 95) -> bytes:
    """JPEG bytes with `icc` in APP2 ICC_PROFILE segments, split in two when it is over 200 bytes (as a profile
    over 64 KiB is)."""
    ok, buf = cv2.imencode('.jpg', cv2.cvtColor(img, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    jpg = buf.tobytes()
    parts = [icc[:200], icc[200:]] if len(icc) > 200 else [icc]
    segments = b''.join(b'\xff\xe2' + struct.pack('>H', 2 + 14 + len(p)) + b'ICC_PROFILE\0' + bytes([i + 1, len(parts)])
                        + p for i, p in enumerate(parts))
    return jpg[:2] + segments + jpg[2:]


def tiff_with_profile(img: np.ndarray, icc: bytes) -> bytes:
    """A TIFF written by Pillow with `icc` as its tag 34675 (8-bit RGB)."""
    from PIL import Image
    out = io.BytesIO()
    Image.fromarray(img).save(out, 'TIFF', icc_profile=icc)
    return out.getvalue()


def webp_with_profile(img: np.ndarray, icc: bytes) -> bytes:
    from PIL import Image
    out = io.BytesIO()
    Image.fromarray(img).save(out, 'WEBP', lossless=True, icc_profile=icc)
    return out.getvalue()


def colourful(h: int = 24, w: int = 32, bits: int = 8, seed: int = 0) -> np.ndarray:
    """An RGB image of saturated and dark colours as well as grays (what a profile changes most), with noise so
    that every value occurs."""
    rng = np.random.default_rng(seed)
    peak = 255 if bits == 8 else 65535
    img = rng.integers(0, peak + 1, (h, w, 3))
    img[:4] = rng.integers(0, peak + 1, (4, w, 1))  # grays
    img[4:8, :, 1:] = 0  # pure reds of every level
    return img.astype(np.uint8 if bits == 8 else np.uint16)


def littlecms_srgb(img: np.ndarray, icc: bytes) -> np.ndarray:
    """An 8-bit RGB (or HxWx1 gray) image in profile `icc` converted to sRGB by LittleCMS alone (relative
    colorimetric): the independent reference. Gray comes back as HxWx1 (the sRGB gray of each value)."""
    from PIL import Image, ImageCms
    gray = img.shape[2] == 1
    transform = ImageCms.buildTransform(ImageCms.ImageCmsProfile(io.BytesIO(icc)), ImageCms.createProfile('sRGB'),
                                        'L' if gray else 'RGB', 'RGB', ImageCms.Intent.RELATIVE_COLORIMETRIC)
    out = np.asarray(ImageCms.applyTransform(Image.fromarray(img[:, :, 0] if gray else img), transform))
    return out[:, :, :1] if gray else out


def write(path: str, data: bytes) -> str:
    with open(path, 'wb') as f:
        f.write(data)
    return path


def written(folder, names_and_data: List[Tuple[str, bytes]]) -> List[str]:
    return [write(str(folder / name), data) for name, data in names_and_data]
