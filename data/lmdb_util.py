"""LMDB storage for frame folders (BasicSR layout) and a fork-safe lazy reader.

Layout: `<name>.lmdb/` holds `data.mdb`, `lock.mdb` and `meta_info.txt`; the key of
`<folder>/<clip>/<frame>.<ext>` is `clip/frame` (no extension) and the value is the file's bytes
unchanged (PNG bytes for images, which `cv2.imdecode` reads, as BasicSR stores them).

`lmdb` is optional: it is imported only when an LMDB is actually created or read.
"""
import os
from pathlib import Path
from typing import Dict, Iterable, Optional, Tuple, Union

from utils.errors import UserError

LMDB_HINT = 'io_backend lmdb needs the lmdb package: pip install lmdb'


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
    if not isinstance(path, str) or not os.path.isdir(path):
        raise UserError(f'{where}: lmdb folder not found: {path}')
    if not os.path.isfile(os.path.join(path, 'data.mdb')):
        raise UserError(f'{where}: not an lmdb folder (no data.mdb): {path}')


def make_lmdb_from_folder(folder: Union[str, os.PathLike], lmdb_path: Union[str, os.PathLike],
                          exts: Iterable[str] = ('.png',), map_size: Optional[int] = None) -> int:
    """Store every `<folder>/<clip>/<frame><ext>` as key `clip/frame`; returns the number stored."""
    lmdb = import_lmdb()
    folder, lmdb_path = Path(folder), Path(lmdb_path)
    exts = tuple(exts)
    files = sorted(p for p in folder.glob('*/*') if p.is_file() and p.suffix.lower() in exts)
    if not files:
        raise UserError(f'no {"/".join(exts)} files in {folder}/<clip>/')
    total = sum(p.stat().st_size for p in files)
    env = lmdb.open(str(lmdb_path), map_size=map_size or max(10 * total, 1 << 20))
    meta = []
    with env.begin(write=True) as txn:
        for p in files:
            key = f'{p.parent.name}/{p.stem}'
            txn.put(key.encode('ascii'), p.read_bytes())
            meta.append(f'{key} {p.suffix.lstrip(".")}\n')
    env.close()
    (lmdb_path / 'meta_info.txt').write_text(''.join(meta))
    return len(files)


# One environment per LMDB folder per process: LMDB refuses to open the same folder twice in a
# process, and an environment must not be used across fork(). Maps realpath -> (pid, environment).
_ENVS: Dict[str, Tuple[int, object]] = {}


def _env(path: str):
    key = os.path.realpath(path)
    entry = _ENVS.get(key)
    if entry is not None and entry[0] == os.getpid():
        return entry[1]
    if entry is not None:
        entry[1].close()  # inherited through fork: closes only this process's handle and mapping
    env = import_lmdb().open(path, readonly=True, lock=False, readahead=False, meminit=False)
    _ENVS[key] = (os.getpid(), env)
    return env


class LazyLmdbReader:
    """Reads values from several LMDB folders, opening them on first use in the current process.

    It holds only paths, so a dataset holding it pickles to spawned DataLoader workers, and a
    worker forked after the main process read something reopens the folders for itself.
    """

    def __init__(self, paths: Dict[str, str]):
        self.paths = dict(paths)

    def get(self, name: str, key: str, where: str) -> bytes:
        with _env(self.paths[name]).begin(write=False) as txn:
            value = txn.get(key.encode('ascii'))
        if value is None:
            raise UserError(f'{where}: key {key} not found in lmdb {self.paths[name]}')
        return bytes(value)
