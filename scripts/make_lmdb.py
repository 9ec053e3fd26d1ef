"""Build an LMDB of video frames in BasicSR's key/meta format, for `io_backend: {"type": "lmdb"}`.

    python scripts/make_lmdb.py --input <folder> --output <x.lmdb> [--layout vimeo|reds] [--compress none|fast]
                                [--meta-info <meta_info_file>] [--icc convert|refuse|ignore]
        --compress raw: decoded uint8 frames (no PNG), about 3x larger, nothing to decode when training

Layouts (the key of a frame is its path below --input without the extension, as BasicSR's create_lmdb):
  vimeo  <input>/<clip>/<seq>/im1.png ..  → keys `00001/0001/im1`  (Vimeo-90K `sequences` folder)
  reds   <input>/<clip>/<frame>.png ..    → keys `000/00000000`    (REDS, GoPro, DAVIS: any image type)
Every frame is decoded (8-bit RGB, as the datasets read it) and stored as PNG bytes, so the LMDB
gives the datasets exactly the pixels of the folder. `--compress` is the PNG compression: `fast`
(zlib level 1, BasicSR's default) or `none` (level 0: larger, no faster to decode: PNG decoding is
row filters and inflate either way), or `raw`: the decoded pixels themselves (data/lmdb_util.py
`encode_raw_frame`), so reading a training clip is a memory copy instead of a PNG decode per frame
(see bench/bench_loader.py). `<output>/meta_info.txt` has one line per frame, `<key>.png (h,w,c)
<compress level>` as BasicSR's (`<key>.raw (h,w,c) raw` for raw frames).
`--meta-info` keeps only the clips/sequences named by the first field of that file's lines.
Frames with a non-sRGB colour profile embedded (Display P3, Adobe RGB) are stored converted to sRGB, as the
datasets read such files by default (`--icc convert`; the PNGs stored carry no profile), or refused before anything
is written (`--icc refuse`), or stored as their values are (`--icc ignore`); see utils/icc.py.

The LMDB is written into `<output>.tmp-<pid>` and renamed into place, so an interrupted run leaves
no LMDB that looks complete. Progress: a tqdm bar on a terminal, else a line per 10% (no bar redraws in
a batch job's log).
Exit codes: 0 done, 2 a problem with the arguments or the input (one line on stderr).
"""
import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, TypeVar

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import cv2  # noqa: E402

from data.checks import colour_profiles  # noqa: E402
from data.lmdb_util import encode_raw_frame, import_lmdb  # noqa: E402
from utils.errors import UserError  # noqa: E402
from utils.icc import ICC_MODES  # noqa: E402
from utils.image import imread_uint, is_image_file  # noqa: E402
from utils.paths import folder_problem  # noqa: E402
from utils.progress import progress as show_progress  # noqa: E402

LAYOUT_DEPTH = {'vimeo': 3, 'reds': 2}   # path components below --input: clip/seq/frame, clip/frame
COMPRESS_LEVEL = {'none': 0, 'fast': 1, 'raw': None}  # PNG level; None: raw pixels
BATCH = 500                              # frames per write transaction
T = TypeVar('T')


def list_frames(folder: Path, layout: str, only: Optional[Set[str]] = None) -> List[Tuple[str, Path]]:
    """(key, path) of every image exactly LAYOUT_DEPTH[layout] levels below `folder`, sorted by key."""
    depth = LAYOUT_DEPTH[layout]
    frames = []
    for dirpath, dirnames, filenames in os.walk(folder):
        rel = Path(dirpath).relative_to(folder)
        level = len(rel.parts)
        if level < depth - 1:
            dirnames.sort()
            continue
        dirnames.clear()
        if level != depth - 1 or (only is not None and rel.as_posix() not in only
                                  and rel.parts[0] not in only):
            continue
        for name in filenames:
            if is_image_file(name):
                frames.append(((rel / Path(name).stem).as_posix(), Path(dirpath) / name))
    frames.sort()
    keys = [k for k, _ in frames]
    dup = next((a for a, b in zip(keys, keys[1:]) if a == b), None)
    if dup is not None:
        raise UserError(f'--input: two frames share the key {dup} (same name, different extensions) in {folder}')
    return frames


def read_selection(path: str) -> Set[str]:
    """The first field of every non-empty line: clip names (`000`) or Vimeo sequences (`00001/0001`)."""
    if not os.path.isfile(path):
        raise UserError(f'--meta-info: file not found: {path}')
    with open(path) as f:
        names = {line.split()[0] for line in f if line.strip()}
    if not names:
        raise UserError(f'--meta-info: no clips listed in {path}')
    return names


def progress(items: Sequence[T], desc: str) -> Iterator[T]:
    """A tqdm bar on a terminal, else a line at every 10% with the time so far (utils/progress.py)."""
    start = time.monotonic()

    def say(text: str) -> None:
        print(f'{text} frames ({time.monotonic() - start:.1f} s)', file=sys.stderr, flush=True)
    yield from show_progress(items, len(items), desc, every=0.1, say=say, unit='frame')


def encode_frame(path: Path, level: Optional[int], icc: str = 'convert') -> Tuple[bytes, Tuple[int, int, int]]:
    """PNG bytes (BGR, as cv2.imdecode reads them back to the same RGB), or raw pixels for level None,
    and (h, w, c) of one frame; in sRGB as `icc` says (utils/icc.py)."""
    bgr = imread_uint(str(path), 3, bgr=True, icc=icc)
    if level is None:
        return encode_raw_frame(bgr), bgr.shape
    ok, buf = cv2.imencode('.png', bgr, [cv2.IMWRITE_PNG_COMPRESSION, level])
    if not ok:
        raise UserError(f'--input: cannot encode {path} as PNG')
    return buf.tobytes(), bgr.shape


def make_lmdb_from_frames(folder: str, output: str, layout: str = 'reds', compress: str = 'fast',
                          selection: Optional[Set[str]] = None,
                          show: Callable[[Sequence[T], str], Iterable[T]] = progress, icc: str = 'convert') -> int:
    """Write the LMDB and its meta_info.txt (see the module docstring); returns the number of frames."""
    lmdb = import_lmdb()
    src, out = Path(folder), Path(output)
    if layout not in LAYOUT_DEPTH:
        raise UserError(f'--layout: must be one of {", ".join(LAYOUT_DEPTH)}, got {layout!r}')
    if compress not in COMPRESS_LEVEL:
        raise UserError(f'--compress: must be one of {", ".join(COMPRESS_LEVEL)}, got {compress!r}')
    if icc not in ICC_MODES:
        raise UserError(f'--icc: must be one of {", ".join(ICC_MODES)}, got {icc!r}')
    problem = folder_problem(str(src))
    if problem:
        raise UserError(f'--input: {problem}')
    if out.exists():
        raise UserError(f'--output: {out} already exists; remove it or choose another path')
    frames = list_frames(src, layout, selection)
    if not frames:
        shape = '<clip>/<seq>/im1.png' if layout == 'vimeo' else '<clip>/<frame>.png'
        raise UserError(f'--input: no frames {shape} in {src}' + (' listed in --meta-info' if selection else '')
                        + f' (--layout {layout})')
    colour_profiles([str(p) for _, p in frames], icc, '--input', '--icc',
                    lambda line: print(f'make_lmdb: {line}', file=sys.stderr, flush=True))
    level = COMPRESS_LEVEL[compress]
    tmp = Path(f'{out}.tmp-{os.getpid()}')
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        first, _ = encode_frame(frames[0][1], level, icc)
        env = lmdb.open(str(tmp), map_size=max(4 * len(first) * len(frames), 1 << 24))
        meta: List[str] = []
        batch: List[Tuple[bytes, bytes]] = []

        def flush() -> None:
            while True:
                try:
                    with env.begin(write=True) as txn:
                        for key, value in batch:
                            txn.put(key, value)
                    break
                except lmdb.MapFullError:  # frames larger than the first: grow the map and redo the batch
                    env.set_mapsize(env.info()['map_size'] * 2)
            batch.clear()

        for key, path in show(frames, f'{src.name} -> {out.name}'):
            data, (h, w, c) = encode_frame(path, level, icc)
            batch.append((key.encode('utf-8'), data))
            meta.append(f'{key}.png ({h},{w},{c}) {level}\n' if level is not None else f'{key}.raw ({h},{w},{c}) raw\n')
            if len(batch) >= BATCH:
                flush()
        flush()
        env.close()
        (tmp / 'meta_info.txt').write_text(''.join(meta))
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return len(frames)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description='Build an LMDB of video frames (BasicSR key/meta format).')
    parser.add_argument('--input', required=True,
                        help='folder of clips: <clip>/<frame> (reds) or <clip>/<seq>/im<i> (vimeo)')
    parser.add_argument('--output', required=True, help='the LMDB folder to create, e.g. train_GT.lmdb')
    parser.add_argument('--layout', choices=sorted(LAYOUT_DEPTH), default='reds')
    parser.add_argument('--compress', choices=sorted(COMPRESS_LEVEL), default='fast',
                        help='stored frames: PNG with fast (level 1) or none (level 0) compression, or raw '
                             'decoded pixels (about 3x larger, no decoding when training)')
    parser.add_argument('--meta-info', default=None, help='only the clips/sequences listed in this file')
    parser.add_argument('--icc', choices=ICC_MODES, default='convert',
                        help='frames with a non-sRGB colour profile: stored converted to sRGB (default), refused, or '
                             'as their values are (ignore)')
    args = parser.parse_args(argv)
    try:
        selection = read_selection(args.meta_info) if args.meta_info else None
        n = make_lmdb_from_frames(args.input, args.output, args.layout, args.compress, selection, icc=args.icc)
    except UserError as e:
        print(f'make_lmdb: {e}', file=sys.stderr)
        return 2
    print(f'make_lmdb: {n} frames -> {args.output} (meta_info.txt beside data.mdb)', file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
