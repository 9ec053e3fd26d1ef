"""Spike-camera streams: reading/writing them and turning them into network input channels.

A spike camera fires, per pixel, a binary spike whenever its integrated light reaches a threshold;
it is read out as binary planes at a high rate (e.g. 20 kHz). Each RGB frame of a data set comes with
the planes recorded during its exposure, stored per frame as `.npy` (T×H×W uint8/bool) or as the
camera's packed `.dat` stream.

Packed `.dat` layout (the SpikeCV `load_vidar_dat` convention, with its default `reverse_spike=True`):
  - planes are stored one after the other, each exactly H*W/8 bytes, no header (so H*W must be a
    multiple of 8, and the file length a multiple of H*W/8);
  - within a plane, pixels are enumerated in row-major order over the STORED rows, and bit k of
    byte i (k=0 is the least significant bit) holds pixel 8*i+k;
  - stored rows run bottom-up: stored row 0 is image row H-1 (the sensor reads out upside down, so the
    reader flips vertically and the writer flips back).
`write_spike_dat` is the exact inverse of `read_spike_dat`. `SpikeSource` reads a clip dataset's spike
files as its `SPIKE_OPTIONS` say.

Representations (`spike_to_representation`) return H×W×C float32 in [0, 1]:
  - 'raw':      the `num_planes` planes centred in the stream, one channel each (0/1).
  - 'count':    `num_bins` equal sub-windows of the centred `window` planes (default: all); each
                channel is the spike count of its sub-window divided by the sub-window length, i.e.
                the firing rate in spikes per plane, which is proportional to the light intensity.
  - 'interval': the same sub-windows; each channel is 1 / (mean inter-spike interval), the classic
                texture-from-interval estimate, which is less quantised than counts at low rates.
                A pixel with fewer than two spikes in a sub-window falls back to count / length.
"""
import io
import os
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import numpy as np

from utils.errors import UserError
from utils.options import Key, one_of, rule
from utils.suggest import did_you_mean

# kind -> {param: default}; the defaults are what `representation_channels` assumes when omitted.
REPRESENTATIONS: Dict[str, Dict[str, Any]] = {
    'raw': {'num_planes': 8},
    'count': {'num_bins': 4, 'window': None},
    'interval': {'num_bins': 1, 'window': None},
}


def _check_planes(planes: np.ndarray, where: str, values: bool = True) -> np.ndarray:
    """Shape and type; with `values` also that every value is 0 or 1 (then bool planes become uint8)."""
    if planes.ndim != 3:
        raise UserError(f'{where}: spike stream must be T×H×W, got shape {tuple(planes.shape)}')
    if planes.dtype == np.bool_:
        return planes.astype(np.uint8) if values else planes
    if planes.dtype != np.uint8:
        raise UserError(f'{where}: spike stream must be uint8 or bool, got {planes.dtype}')
    if values and planes.size and planes.max() > 1:
        raise UserError(f'{where}: spike stream must be binary (0/1), found value {int(planes.max())}')
    return planes


def read_spike_npy(path: Union[str, os.PathLike], data: bytes = None, mapped: bool = False) -> np.ndarray:
    """Read a T×H×W binary spike stream saved with `np.save` (from `path`, or from `data` bytes).

    `mapped`: memory-map the file, for a caller that crops it (only the crop's pages are read); its
    values are then checked where they are used (`spike_to_representation`), not here.
    """
    try:
        if mapped and data is None:
            return _check_planes(np.load(path, mmap_mode='r', allow_pickle=False), str(path), values=False)
        planes = np.load(io.BytesIO(data) if data is not None else path, allow_pickle=False)
    except FileNotFoundError:
        raise UserError(f'spike file not found: {path}') from None
    except ValueError as e:
        raise UserError(f'{path}: not a valid .npy spike file ({e})') from None
    return _check_planes(planes, str(path))


def _plane_bytes(height: int, width: int, where: str) -> int:
    if height <= 0 or width <= 0 or (height * width) % 8:
        raise UserError(f'{where}: spike frame size {height}×{width} must be positive with H*W a multiple of 8')
    return height * width // 8


def decode_spike_dat(data: bytes, height: int, width: int, where: str = '') -> np.ndarray:
    """Unpack `.dat` bytes (layout in the module docstring) into T×H×W uint8 planes."""
    n = _plane_bytes(height, width, where)
    if len(data) == 0 or len(data) % n:
        raise UserError(f'{where}: {len(data)} bytes is not a positive multiple of H*W/8 = {n} '
                        f'(frame size {height}×{width}): wrong spike_size or truncated file')
    raw = np.frombuffer(data, dtype=np.uint8)
    bits = np.unpackbits(raw, bitorder='little').reshape(-1, height, width)
    return np.ascontiguousarray(bits[:, ::-1, :])


def read_spike_dat(path: Union[str, os.PathLike], height: int, width: int) -> np.ndarray:
    """Read a packed spike-camera `.dat` file as T×H×W uint8 planes."""
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except FileNotFoundError:
        raise UserError(f'spike file not found: {path}') from None
    return decode_spike_dat(data, height, width, str(path))


def encode_spike_dat(planes: np.ndarray) -> bytes:
    planes = _check_planes(np.asarray(planes), 'spike planes')
    _plane_bytes(planes.shape[1], planes.shape[2], 'spike planes')
    return np.packbits(planes[:, ::-1, :].reshape(planes.shape[0], -1), axis=1, bitorder='little').tobytes()


def write_spike_dat(path: Union[str, os.PathLike], planes: np.ndarray) -> None:
    """Write T×H×W binary planes as a packed `.dat` stream; `read_spike_dat` inverts it exactly."""
    data = encode_spike_dat(planes)
    with open(path, 'wb') as f:
        f.write(data)


def _resolve_params(kind: str, params: Mapping[str, Any]) -> Dict[str, Any]:
    if kind not in REPRESENTATIONS:
        raise UserError(f'spike_repr: unknown representation "{kind}"{did_you_mean(kind, REPRESENTATIONS)}; '
                        f'known: {", ".join(REPRESENTATIONS)}')
    defaults = REPRESENTATIONS[kind]
    for key in params:
        if key not in defaults:
            raise UserError(f'spike_repr_params: unknown key "{key}" for spike_repr "{kind}"'
                            f'{did_you_mean(key, defaults)}; known: {", ".join(defaults)}')
    resolved = {**defaults, **params}
    for key, value in resolved.items():
        if value is None and key == 'window':
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f'spike_repr_params.{key}: must be a positive integer, got {value!r}')
    if 'window' in resolved and resolved['window'] is not None and resolved['num_bins'] > resolved['window']:
        raise UserError(f'spike_repr_params.num_bins: {resolved["num_bins"]} bins need a window of at least '
                        f'{resolved["num_bins"]} planes, got window {resolved["window"]}')
    return resolved


def representation_channels(kind: str, params: Mapping[str, Any] = None) -> int:
    """Number of channels `spike_to_representation(kind, **params)` produces (validates kind/params)."""
    p = _resolve_params(kind, params or {})
    return p['num_planes'] if kind == 'raw' else p['num_bins']


def min_planes(kind: str, params: Mapping[str, Any] = None) -> int:
    """Fewest planes a stream needs for `spike_to_representation(kind, **params)`."""
    p = _resolve_params(kind, params or {})
    if kind == 'raw':
        return p['num_planes']
    return p['window'] if p['window'] is not None else p['num_bins']


def _centred(planes: np.ndarray, length: int, what: str) -> np.ndarray:
    t = planes.shape[0]
    if length > t:
        raise UserError(f'spike_repr_params.{what}: needs {length} planes but the stream has only {t}')
    start = (t - length) // 2
    return planes[start:start + length]


def _sub_windows(planes: np.ndarray, p: Dict[str, Any]) -> np.ndarray:
    """Centred window split into num_bins equal sub-windows: bins×L×H×W (leftover planes dropped)."""
    window = p['window'] if p['window'] is not None else planes.shape[0]
    planes = _centred(planes, window, 'window')
    bins = p['num_bins']
    length = window // bins
    if length == 0:
        raise UserError(f'spike_repr_params.num_bins: {bins} bins need at least {bins} planes, the window has {window}')
    planes = _centred(planes, length * bins, 'window')
    return planes.reshape(bins, length, *planes.shape[1:])


def _interval_rate(sub: np.ndarray) -> np.ndarray:
    """1 / mean inter-spike interval per pixel of an L×H×W window; count/L where < 2 spikes."""
    length = sub.shape[0]
    count = sub.sum(axis=0, dtype=np.float32)
    first = np.argmax(sub, axis=0)
    last = length - 1 - np.argmax(sub[::-1], axis=0)
    span = (last - first).astype(np.float32)
    rate = count / length
    many = count >= 2
    rate[many] = (count[many] - 1) / span[many]
    return rate


def spike_to_representation(planes: np.ndarray, kind: str, **params: Any) -> np.ndarray:
    """Turn T×H×W binary planes into an H×W×C float32 image (C = representation_channels)."""
    p = _resolve_params(kind, params)
    planes = _check_planes(np.asarray(planes), 'spike planes')
    if kind == 'raw':
        out = _centred(planes, p['num_planes'], 'num_planes').astype(np.float32)
    else:
        subs = _sub_windows(planes, p)
        if kind == 'count':
            out = subs.sum(axis=1, dtype=np.float32) / subs.shape[1]
        else:
            out = np.stack([_interval_rate(s) for s in subs])
    return np.ascontiguousarray(out.transpose(1, 2, 0), dtype=np.float32)


@rule('[H, W] with positive integers, or null', minItems=2, maxItems=2, items={'type': 'integer', 'exclusiveMinimum': 0})
def _plane_size(v: Optional[list]) -> Optional[str]:
    if v is None or (len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v)):
        return None
    return 'must be [H, W] with positive integers'


# The keys of a clip dataset that reads spike streams (`SpikeSource`).
SPIKE_OPTIONS: Dict[str, Any] = {
    'dataroot_spike': None,        # <root>/<clip>/<frame>.npy|.dat, one file per RGB frame
    'spike_format': Key('npy', (str,), one_of('npy', 'dat')),
    'spike_size': Key(None, (list, type(None)), _plane_size),   # [H, W] of .dat planes; default: the LQ frame size
    'spike_repr': 'count',         # 'raw' | 'count' | 'interval' (checked with spike_repr_params)
    'spike_repr_params': {},       # e.g. {"num_bins": 4}
}


class SpikeSource:
    """Reads one spike file per RGB frame and turns it into H×W×S float32 channels."""

    def __init__(self, opt: Dict[str, Any], prefix: str):
        self.prefix = prefix
        self.format = opt['spike_format']
        size = opt['spike_size']
        self.size = tuple(size) if size is not None else None
        self.repr = opt['spike_repr']
        self.params = dict(opt['spike_repr_params'] or {})
        try:
            self.channels = representation_channels(self.repr, self.params)
            self.min_planes = min_planes(self.repr, self.params)
        except UserError as e:
            raise UserError(f'{prefix}.{e}') from None

    def filename(self, stem: str) -> str:
        return f'{stem}.{self.format}'

    def decode(self, source: Union[str, bytes], lq_hw: Tuple[int, int], where: str,
               window: Optional[Tuple[int, int, int, int]] = None) -> np.ndarray:
        """H×W×S float32 channels; `source` is a file path or (lmdb) the file's bytes; `where` names it in errors.

        `window` (top, left, height, width) in LQ pixels crops the planes first, so only the crop becomes float
        channels (the representations are per pixel: the same numbers as cropping afterwards), and a
        `.npy` file is memory-mapped so only the crop's pages are read.
        """
        h, w = self.size or lq_hw
        try:
            if self.format == 'npy':
                planes = (read_spike_npy(where, data=source) if isinstance(source, bytes)
                          else read_spike_npy(source, mapped=window is not None))
            elif isinstance(source, bytes):
                planes = decode_spike_dat(source, h, w, where)
            else:
                planes = read_spike_dat(source, h, w)
            if planes.shape[1:] != tuple(lq_hw):
                raise UserError(f'spike frames are {planes.shape[1]}×{planes.shape[2]} '
                                f'but the LQ frames are {lq_hw[0]}×{lq_hw[1]}')
            if window is not None:
                top, left, height, width = window
                planes = planes[:, top:top + height, left:left + width]
            return spike_to_representation(planes, self.repr, **self.params)
        except UserError as e:
            raise UserError(f'{self.prefix}.dataroot_spike: {where}: {e}') from None
