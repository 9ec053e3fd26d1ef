"""LMDB storage for frame folders (BasicSR layout) and a fork-safe lazy reader.

Layout: `<name>.lmdb/` holds `data.mdb`, `lock.mdb` and `meta_info.txt`; the key of
`<folder>/<clip>/<frame>.<ext>` is `clip/frame` (no extension) and the value is the file's bytes
unchanged (PNG bytes for images, which `cv2.imdecode` reads, as BasicSR stores them), or, for
frames stored raw, the decoded uint8 pixels behind a small header (`encode_raw_frame`): about 3x
the bytes of a PNG, but reading one is a memory copy instead of a PNG decode, the largest cost of
loading a video clip. `decode_frame` reads either kind.

`lmdb` is optional: it is imported only when an LMDB is actually created or read.
"""
import os
import struct
from pathlib import Path
from typing import Dict, Iterable, Optional, Set, Tuple, Union

import cv2
import numpy as np

from utils.errors import UserError
from utils.icc import file_profile
from utils.image import imread_uint, is_image_file
from utils.paths import folder_problem

LMDB_HINT = 'io_backend lmdb needs the lmdb package: pip install lmdb'
RAW_MAGIC = b'RAWFRAME'           # then height, width, channels as little-endian uint32, then HWC BGR pixels
RAW_HEADER = len(RAW_MAGIC) + 12


def encode_raw_frame(bgr: np.ndarray) -> bytes:
    """An H×W×C uint8 frame in the decoder's BGR order as an LMDB value that `decode_frame` reads back."""
    h, w, c = bgr.shape
    return RAW_MAGIC + struct.pack('<III', h, w, c) + np.ascontiguousarray(bgr, dtype=np.uint8).tobytes()


def decode_frame(value: bytes, what: str, icc: str = 'convert') -> np.ndarray:
    """H×W×3 uint8 BGR pixels of an LMDB value: raw (see `encode_raw_frame`) or image file bytes (PNG...).

    `what` names the value in errors, e.g. `datasets.train.dataroot_gt: key 000/00000000 in x.lmdb`. `icc` is the
    section's key: file bytes with a non-sRGB colour profile (a folder's files stored as they are, profile and
    all: `make_lmdb_from_folder`) are converted to sRGB, refused or read as they are (utils/icc.py).
    """
    if value[:len(RAW_MAGIC)] == RAW_MAGIC:
        h, w, c = struct.unpack_from('<III', value, len(RAW_MAGIC))
        if len(value) != RAW_HEADER + h * w * c or c != 3:
            raise UserError(f'{what}: raw frame of {len(value)} bytes does not hold the {h}x{w}x{c} pixels its header names')
        return np.frombuffer(value, np.uint8, h * w * c, RAW_HEADER).reshape(h, w, c)
    profile = file_profile(value, what, icc)
    try:
        img = cv2.imdecode(np.frombuffer(value, np.uint8), cv2.IMREAD_COLOR)
    except cv2.error as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        raise UserError(f'{what} cannot be decoded: {lines[-1] if lines else "OpenCV error"}') from None
    if img is None:
        raise UserError(f'{what} is not an image')
    return img if profile is None else profile.to_srgb(img, what, bgr=True)


def import_lmdb():
    try:
        import lmdb
    except ModuleNotFoundError as e:
        if e.name != 'lmdb':
            raise
        raise UserError(LMDB_HINT) from None
    return lmdb


def check_lmdb_folder(path: Union[str, os.PathLike], where: str) -> None:
    """Fail early (without opening the environment) when `path` is not an LMDB folder."""
    import_lmdb()
    problem = folder_problem(path, 'lmdb folder') if isinstance(path, str) else f'lmdb folder not found: {path}'
    if problem:
        raise UserError(f'{where}: {problem}')
    if not os.path.isfile(os.path.join(path, 'data.mdb')):
        raise UserError(f'{where}: not an lmdb folder (no data.mdb): {path}')


def make_lmdb_from_folder(folder: Union[str, os.PathLike], lmdb_path: Union[str, os.PathLike],
                          exts: Iterable[str] = ('.png',), map_size: Optional[int] = None, raw: bool = False) -> int:
    """Store every `<folder>/<clip>/<frame><ext>` as key `clip/frame`; returns the number stored.

    `raw`: images are stored decoded (`encode_raw_frame`), in sRGB (a non-sRGB colour profile converted); other
    files (spike streams, and images when not `raw`) as they are, an image's colour profile included, which the
    reading dataset's `icc` key then applies (`decode_frame`).
    """
    lmdb = import_lmdb()
    folder, lmdb_path = Path(folder), Path(lmdb_path)
    exts = tuple(exts)
    files = sorted(p for p in folder.glob('*/*') if p.is_file() and p.suffix.lower() in exts)
    if not files:
        raise UserError(f'no {"/".join(exts)} files in {folder}/<clip>/')
    total = sum(p.stat().st_size for p in files)
    lmdb_path.parent.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(lmdb_path), map_size=map_size or max((60 if raw else 10) * total, 1 << 20))
    meta = []
    with env.begin(write=True) as txn:
        for p in files:
            key = f'{p.parent.name}/{p.stem}'
            value = (encode_raw_frame(imread_uint(str(p), 3, bgr=True)) if raw and is_image_file(p.name)
                     else p.read_bytes())
            txn.put(key.encode('ascii'), value)
            meta.append(f'{key} {p.suffix.lstrip(".")}\n')
    env.close()
    (lmdb_path / 'meta_info.txt').write_text(''.join(meta))
    return len(files)


# One environment per LMDB folder per process: LMDB refuses to open the same folder twice in a
# process, and an environment must not be used across fork(). Maps realpath -> (pid, environment).
_ENVS: Dict[str, Tuple[int, object]] = {}


def open_env(path: str):
    """This process's read-only environment of the LMDB folder `path`, opened on first use."""
    key = os.path.realpath(path)
    entry = _ENVS.get(key)
    if entry is not None and entry[0] == os.getpid():
        return entry[1]
    if entry is not None:
        entry[1].close()  # inherited through fork: closes only this process's handle and mapping
    env = import_lmdb().open(path, readonly=True, lock=False, readahead=False, meminit=False)
    _ENVS[key] = (os.getpid(), env)
    return env


def open_env_in_this_process(path: str) -> Optional[object]:
    """The environment `open_env` already opened for `path` in this process, else None (LMDB refuses a
    second one in the same process: another reader of the same files must borrow it)."""
    entry = _ENVS.get(os.path.realpath(path))
    return entry[1] if entry is not None and entry[0] == os.getpid() else None


def opened_environments() -> Set[str]:
    """The folders (realpaths) whose environment `open_env` holds open."""
    return set(_ENVS)


def close_environments_opened_since(before: Set[str]) -> None:
    """Close the environments `open_env` opened that are not in `before` (`opened_environments()` earlier): what
    an in-process run or a test opened, so that a later reader may open those folders itself."""
    for key in set(_ENVS) - before:
        _ENVS.pop(key)[1].close()


class LazyLmdbReader:
    """Reads values from several LMDB folders, opening them on first use in the current process.

    It holds only paths, so a dataset holding it pickles to spawned DataLoader workers, and a
    worker forked after the main process read something reopens the folders for itself.
    """

    def __init__(self, paths: Dict[str, str]):
        self.paths = dict(paths)

    def get(self, name: str, key: str, where: str) -> bytes:
        with open_env(self.paths[name]).begin(write=False) as txn:
            value = txn.get(key.encode('ascii'))
        if value is None:
            raise UserError(f'{where}: key {key} not found in lmdb {self.paths[name]}')
        return bytes(value)
