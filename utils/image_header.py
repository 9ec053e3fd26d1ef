"""Image size from the file header, without decoding: the start-up data checks (data/checks.py).

Decoding thousands of images would take minutes, so these readers parse only the header of each
format the datasets list (PNG, JPEG, BMP, PNM, TIFF, WebP), plus, for PNG and JPEG, the end marker
that OpenCV insists on (a truncated copy fails there). An image whose body is damaged behind a
valid header and end marker is still found only when it is read. The embedded ICC colour profile, where a
format carries one, is found the same way (`embedded_icc`, for utils/icc.py).
"""
import os
import re
import struct
import zlib
from typing import BinaryIO, Iterator, Optional, Tuple

import cv2
import numpy as np

from utils.errors import UserError

class ImageFileError(UserError):
    """An image file whose header cannot be used; `problem` is the reason without the path."""

    def __init__(self, path: str, problem: str):
        super().__init__(f'{path}: {problem}')
        self.path, self.problem = path, problem


class _Bad(Exception):
    pass


_PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
_PNG_IEND = b'\x00\x00\x00\x00IEND\xaeB`\x82'
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_TAIL = 1 << 16  # decoders ignore data after the end marker; look for the marker this far back


def _ends_with(f: BinaryIO, file_size: int, marker: bytes) -> bool:
    """Whether the file ends with `marker`, or (trailing data after it) has it in its last 64 KiB."""
    f.seek(max(0, file_size - len(marker)))
    if f.read(len(marker)) == marker:
        return True
    f.seek(max(0, file_size - _TAIL))
    return marker in f.read(_TAIL)


def _png_size(f: BinaryIO, head: bytes, file_size: int) -> Tuple[int, int]:
    if len(head) < 26 or head[12:16] != b'IHDR':
        raise _Bad('PNG without an IHDR header chunk (truncated or damaged)')
    width, height = struct.unpack('>II', head[16:24])
    depth, colour = head[24], head[25]
    if depth not in _PNG_DEPTHS.get(colour, ()):
        raise _Bad(f'invalid PNG header (bit depth {depth}, colour type {colour})')
    if not _ends_with(f, file_size, _PNG_IEND):
        raise _Bad('truncated PNG: no IEND chunk at the end of the file')
    return height, width


def _jpeg_segments(f: BinaryIO) -> Iterator[Tuple[int, int]]:
    """(marker, length of its data) of every segment after SOI, the file positioned at the segment's data; the
    scan (SOS) or end of image (EOI) comes with length 0 and ends the walk."""
    f.seek(2)
    while True:
        byte = f.read(1)
        if not byte:
            raise _Bad('truncated JPEG: no frame header (SOF)')
        if byte != b'\xff':
            continue  # extraneous bytes before a marker: libjpeg skips them too
        marker = f.read(1)
        while marker == b'\xff':  # fill bytes
            marker = f.read(1)
        if not marker:
            raise _Bad('truncated JPEG: no frame header (SOF)')
        m = marker[0]
        if m == 0x01 or 0xD0 <= m <= 0xD7:  # standalone markers
            continue
        if m in (0xD9, 0xDA):
            yield m, 0
            return
        length = f.read(2)
        if len(length) < 2:
            raise _Bad('truncated JPEG header')
        n = struct.unpack('>H', length)[0]
        if n < 2:
            raise _Bad(f'damaged JPEG: segment length {n}')
        start = f.tell()
        yield m, n - 2
        f.seek(start + n - 2)


def _jpeg_size(f: BinaryIO, head: bytes, file_size: int) -> Tuple[int, int]:
    for m, _ in _jpeg_segments(f):  # segments up to the frame header (SOFn), which holds the size
        if m in (0xD9, 0xDA):
            raise _Bad('damaged JPEG: scan data or end of image before the frame header (SOF)')
        if 0xC0 <= m <= 0xCF and m not in (0xC4, 0xC8, 0xCC):
            sof = f.read(5)
            if len(sof) < 5:
                raise _Bad('truncated JPEG frame header')
            height, width = struct.unpack('>HH', sof[1:5])
            if height == 0:
                raise _Bad('JPEG height defined by a DNL marker (not supported)')
            if not _ends_with(f, file_size, b'\xff\xd9'):
                raise _Bad('truncated JPEG: no end-of-image marker')
            return height, width
    raise _Bad('truncated JPEG: no frame header (SOF)')


def _bmp_size(f: BinaryIO, head: bytes, file_size: int) -> Tuple[int, int]:
    if len(head) < 26:
        raise _Bad('truncated BMP header')
    if struct.unpack('<I', head[14:18])[0] == 12:  # OS/2 BITMAPCOREHEADER
        width, height = struct.unpack('<HH', head[18:22])
    else:
        width, height = struct.unpack('<ii', head[18:26])
    return abs(height), width


def _pnm_size(f: BinaryIO, head: bytes, file_size: int) -> Tuple[int, int]:
    text = re.sub(rb'#[^\n]*', b' ', head[2:])
    fields = text.split()
    if len(fields) < 2 or not fields[0].isdigit() or not fields[1].isdigit():
        raise _Bad('damaged PNM header (no width and height)')
    return int(fields[1]), int(fields[0])


def _tiff_entries(f: BinaryIO, head: bytes) -> Iterator[Tuple[int, int, int, bytes, str]]:
    """(tag, type, count, the 4-byte value field, byte order) of every entry of a TIFF's first image directory."""
    order = '<' if head[:2] == b'II' else '>'
    f.seek(struct.unpack(order + 'I', head[4:8])[0])
    count = f.read(2)
    if len(count) < 2:
        raise _Bad('truncated TIFF: no image directory')
    entries = f.read(12 * struct.unpack(order + 'H', count)[0])
    for i in range(0, len(entries) - 11, 12):
        tag, kind, n = struct.unpack(order + 'HHI', entries[i:i + 8])
        yield tag, kind, n, entries[i + 8:i + 12], order


def _tiff_value(f: BinaryIO, kind: int, n: int, value: bytes, order: str) -> int:
    """The first value of a SHORT (3) or LONG (4) entry."""
    fmt, size = (order + 'H', 2) if kind == 3 else (order + 'I', 4)
    if n * size > 4:  # the values are elsewhere: the field holds their offset
        f.seek(struct.unpack(order + 'I', value)[0])
        value = f.read(size)
    return struct.unpack(fmt, value[:size])[0]


def _tiff_size(f: BinaryIO, head: bytes, file_size: int) -> Tuple[int, int]:
    if struct.unpack(('<' if head[:2] == b'II' else '>') + 'H', head[2:4])[0] != 42:
        raise _Unknown  # BigTIFF: left to OpenCV
    tags = {tag: _tiff_value(f, kind, n, value, order)  # tag -> first value (SHORT or LONG)
            for tag, kind, n, value, order in list(_tiff_entries(f, head)) if kind in (3, 4) and n >= 1}
    if 256 not in tags or 257 not in tags:
        raise _Bad('damaged TIFF: no image width/length in the first directory')
    if tags.get(339, 1) == 3:  # SampleFormat: IEEE float
        raise _Bad('floating-point TIFF samples are not supported (8- or 16-bit images only)')
    if tags.get(258, 8) > 16:  # BitsPerSample (of the first sample when several)
        raise _Bad(f'{tags[258]}-bit TIFF samples are not supported (8- or 16-bit images only)')
    return tags[257], tags[256]


def _webp_size(f: BinaryIO, head: bytes, file_size: int) -> Tuple[int, int]:
    kind = head[12:16]
    if kind == b'VP8 ' and len(head) >= 30 and head[23:26] == b'\x9d\x01\x2a':
        width, height = struct.unpack('<HH', head[26:30])
        return height & 0x3FFF, width & 0x3FFF
    if kind == b'VP8L' and len(head) >= 25 and head[20] == 0x2F:
        bits = int.from_bytes(head[21:25], 'little')
        return ((bits >> 14) & 0x3FFF) + 1, (bits & 0x3FFF) + 1
    if kind == b'VP8X' and len(head) >= 30:
        return int.from_bytes(head[27:30], 'little') + 1, int.from_bytes(head[24:27], 'little') + 1
    raise _Bad('damaged WebP header')


class _Unknown(Exception):
    pass


def _format_reader(head: bytes):
    if head.startswith(_PNG_SIGNATURE):
        return _png_size
    if head.startswith(b'\xff\xd8\xff'):
        return _jpeg_size
    if head.startswith(b'BM'):
        return _bmp_size
    if len(head) >= 2 and head[0:1] == b'P' and head[1:2] in b'123456':
        return _pnm_size
    if head[:4] in (b'II*\x00', b'MM\x00*', b'II+\x00', b'MM\x00+'):
        return _tiff_size
    if head[:4] == b'RIFF' and head[8:12] == b'WEBP':
        return _webp_size
    return None


def header_size(path: str) -> Optional[Tuple[int, int]]:
    """(height, width) from the header; None for a format without a reader here; ImageFileError if bad."""
    try:
        with open(path, 'rb') as f:
            head = f.read(512)
            if not head:
                raise _Bad('empty file')
            reader = _format_reader(head)
            if reader is None:
                return None
            try:
                height, width = reader(f, head, os.fstat(f.fileno()).st_size)
            except (struct.error, OverflowError, ValueError):
                raise _Bad('damaged image header') from None
    except _Unknown:
        return None
    except _Bad as e:
        raise ImageFileError(path, str(e)) from None
    except OSError as e:
        raise ImageFileError(path, f'cannot read: {e.strerror or e}') from None
    if height <= 0 or width <= 0:
        raise ImageFileError(path, f'image of size {height}x{width} in its header')
    return height, width


def header_bit_depth(path: str) -> int:
    """Bits per sample of an image file from its header: 16 for 16-bit PNG, TIFF and PNM (maxval above 255),
    8 for everything else (JPEG, BMP, WebP are 8-bit; a header that cannot be read counts as 8, its problem is
    `read_image_size`'s). What a reader that keeps 16 bits (`utils.image.imread_uint(keep_16bit=True)`) returns."""
    try:
        with open(path, 'rb') as f:
            head = f.read(512)
            if head.startswith(_PNG_SIGNATURE) and len(head) >= 26:
                return 16 if head[24] == 16 else 8
            if head[:4] in (b'II*\x00', b'MM\x00*'):
                return 16 if _tiff_bits(f, head) == 16 else 8
            if len(head) >= 2 and head[0:1] == b'P' and head[1:2] in b'2356':  # PNM with a maxval
                fields = re.sub(rb'#[^\n]*', b' ', head[2:]).split()
                return 16 if len(fields) >= 3 and fields[2].isdigit() and int(fields[2]) > 255 else 8
    except (OSError, struct.error, ValueError, _Bad):
        return 8
    return 8


def _tiff_bits(f: BinaryIO, head: bytes) -> int:
    """BitsPerSample (tag 258, of the first sample) of a TIFF's first image directory; 8 when absent."""
    for tag, kind, n, value, order in list(_tiff_entries(f, head)):
        if tag == 258 and kind == 3:
            return _tiff_value(f, kind, n, value, order)
    return 8


class _BadProfile(Exception):
    pass


def embedded_icc(f: BinaryIO, what: str) -> Optional[bytes]:
    """The ICC colour profile embedded in the image file `f` (named `what` in errors), read from its header
    without decoding: a PNG's iCCP chunk, a JPEG's APP2 segments, a TIFF's tag 34675 or a WebP's ICCP chunk.

    None when the file has none (BMP and PNM carry none here) or its header cannot be walked (`header_size`
    reports that); ImageFileError when the profile's own chunk is damaged."""
    f.seek(0)
    head = f.read(512)
    try:
        if head.startswith(_PNG_SIGNATURE):
            return _png_icc(f)
        if head.startswith(b'\xff\xd8\xff'):
            return _jpeg_icc(f)
        if head[:4] in (b'II*\x00', b'MM\x00*'):
            return _tiff_icc(f, head)
        if head[:4] == b'RIFF' and head[8:12] == b'WEBP':
            return _webp_icc(f)
    except _BadProfile as e:
        raise ImageFileError(what, f'damaged colour profile: {e}') from None
    except (_Bad, struct.error, OverflowError, ValueError):
        return None
    return None


def header_icc(path: str) -> Optional[bytes]:
    """`embedded_icc` of the file at `path`; None also when it cannot be opened (`read_image_size`'s problem)."""
    try:
        with open(path, 'rb') as f:
            return embedded_icc(f, path)
    except OSError:
        return None


def _png_icc(f: BinaryIO) -> Optional[bytes]:
    f.seek(8)
    while True:  # chunks up to the image data, which the iCCP chunk must precede
        head = f.read(8)
        if len(head) < 8:
            return None
        n, kind = struct.unpack('>I4s', head)
        if kind in (b'IDAT', b'IEND'):
            return None
        if kind == b'iCCP':
            data = f.read(n)
            name_end = data.find(b'\x00', 0, 80)
            if len(data) < n or name_end < 0:
                raise _BadProfile('truncated iCCP chunk')
            try:
                return zlib.decompress(data[name_end + 2:])
            except zlib.error:
                raise _BadProfile('the iCCP chunk does not inflate') from None
        f.seek(n + 4, os.SEEK_CUR)


def _jpeg_icc(f: BinaryIO) -> Optional[bytes]:
    parts = {}  # sequence number -> bytes: a profile over 64 KiB spans several APP2 segments
    for m, n in _jpeg_segments(f):
        if m in (0xD9, 0xDA):
            break
        if m == 0xE2 and n > 14:
            data = f.read(n)
            if data[:12] == b'ICC_PROFILE\x00':
                parts[data[12]] = data[14:]
    return b''.join(parts[k] for k in sorted(parts)) or None


def _tiff_icc(f: BinaryIO, head: bytes) -> Optional[bytes]:
    for tag, kind, n, value, order in list(_tiff_entries(f, head)):
        if tag == 34675 and kind in (1, 7) and n > 4:  # InterColorProfile, BYTE or UNDEFINED
            f.seek(struct.unpack(order + 'I', value)[0])
            data = f.read(n)
            if len(data) < n:
                raise _BadProfile('truncated TIFF tag 34675 (InterColorProfile)')
            return data
    return None


def _webp_icc(f: BinaryIO) -> Optional[bytes]:
    f.seek(12)
    for _ in range(2):  # the ICCP chunk follows the VP8X chunk, which comes first
        head = f.read(8)
        if len(head) < 8:
            return None
        kind, n = head[:4], struct.unpack('<I', head[4:])[0]
        if kind == b'ICCP':
            data = f.read(n)
            if len(data) < n:
                raise _BadProfile('truncated ICCP chunk')
            return data
        if kind != b'VP8X':
            return None
        f.seek(n + n % 2, os.SEEK_CUR)
    return None


def read_image_size(path: str) -> Tuple[int, int]:
    """(height, width) of an image file from its header, without decoding the pixels.

    Raises ImageFileError (a UserError naming the file) when the file cannot be read, is not an
    image, or its header is damaged or truncated. Formats without a header reader here (rare:
    files of other formats under an image extension) are asked of OpenCV, which then decodes them.
    """
    size = header_size(path)
    if size is not None:
        return size
    if not cv2.haveImageReader(path):
        raise ImageFileError(path, 'not an image (no known image format in its header)')
    try:
        img = cv2.imdecode(np.fromfile(path, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    except (cv2.error, OSError) as e:
        raise ImageFileError(path, f'cannot decode: {str(e).strip().splitlines()[-1] if str(e).strip() else e}') from None
    if img is None:
        raise ImageFileError(path, 'cannot decode (corrupt or not an image)')
    return img.shape[0], img.shape[1]


def opencv_size_limits() -> Tuple[int, int, int]:
    """(max width, max height, max pixels) OpenCV decodes: its defaults unless its env variables set them."""
    def env(name: str, default: int) -> int:
        value = os.environ.get(name, '').strip()
        m = re.fullmatch(r'(\d+)\s*([KkMm][Bb])?', value)
        if not m:
            return default
        return int(m[1]) * {'': 1, 'k': 1 << 10, 'm': 1 << 20}[(m[2] or '')[:1].lower()]
    return (env('OPENCV_IO_MAX_IMAGE_WIDTH', 1 << 20), env('OPENCV_IO_MAX_IMAGE_HEIGHT', 1 << 20),
            env('OPENCV_IO_MAX_IMAGE_PIXELS', 1 << 30))


def decode_limit_problem(height: int, width: int) -> Optional[str]:
    """Why OpenCV would refuse to decode a height x width image, or None."""
    max_w, max_h, max_pixels = opencv_size_limits()
    if width > max_w:
        return f'{height}x{width} is wider than OpenCV decodes ({max_w:,} pixels; OPENCV_IO_MAX_IMAGE_WIDTH)'
    if height > max_h:
        return f'{height}x{width} is taller than OpenCV decodes ({max_h:,} pixels; OPENCV_IO_MAX_IMAGE_HEIGHT)'
    if height * width > max_pixels:
        return (f'{height}x{width} = {height * width:,} pixels is more than OpenCV decodes '
                f'({max_pixels:,}; OPENCV_IO_MAX_IMAGE_PIXELS)')
    return None
