"""Restoring inputs of one's own, without targets (`main_test.py --input PATH`): images, frames and videos.

data/inputs.py finds and checks the inputs; here they become items, an image or a window of a clip or video
(the restorer's `stream_windows`: one frame for an image network, overlapping windows of its temporal length
for a video network), which the one evaluation loop (models/evaluation.py, `targets=False`) shares among the
ranks round by round, so every rank restores its share under any launcher and the outputs do not depend on
the number of ranks. Rank 0 writes them in order (`OutputWriter`): images and frames under their own names
and formats (16-bit stays 16-bit), atomically; a video as a video of the same frame rate, fed window by
window as they come (memory holds one round of windows, however long the video), through a temporary file
renamed when its last frame is in. An item that cannot be read is skipped with a warning line naming it; a
video that breaks midway is given up whole (its temporary file removed).

For the comparison page (`page`), rank 0 also writes each image's and clip frame's input scaled to its output's
size as `input/<output name>.png`, a video's (with --frames) as `input/<video name>/<frame>.png`, and a PNG
copy of each output a browser cannot show (TIFF, PPM/PGM) as `preview/<output name>.png`; `Restored.files` says
what it wrote of each item, for utils/compare_page.py. A video without --frames has no images on the page.
"""
import copy
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Union

import numpy as np
import torch

from data.inputs import FRAMES, IMAGE, VIDEO, FrameSource, Found, Source
from models.evaluation import Encode, Evaluation, Skipped, evaluate
from models.restorer import ImageRestorer, Window
from models.startup_checks import NETWORK_FAILURES, failure_text
from models.video_restorer import VideoRestorer
from utils import dist
from utils.checkpoint import atomic_write_bytes
from utils.compare_page import shown_in_browsers
from utils.errors import UserError, first_line
from utils.image import encode_image, uint8_tensor
from utils.logger import get_logger
from utils.oom import is_out_of_memory
from utils.video import VideoWriter

PROBE_SIDE = 64  # the start-up check runs the network on the first input's size, cropped to at most this


@dataclass(frozen=True)
class Item:
    """One unit of work: `window` of `source` (an image: its one frame); `name` is unique, e.g. `clip.mp4[0:16]`
    (the restored frames it keeps)."""
    source: Source
    window: Window
    name: str


def plan(found: Found, restorer: ImageRestorer) -> List[Item]:
    """Every input as items, in order: an image whole, a clip or video in the restorer's windows."""
    items = []
    for s in found.sources:
        windows = [Window(0, 1, 0, 1)] if s.kind == IMAGE else restorer.stream_windows(s.frames)
        items.extend(Item(s, w, s.name if s.kind == IMAGE else f'{s.name}[{w.keep_start}:{w.keep_stop}]')
                     for w in windows)
    return items


def batches(items: Sequence[Item], rank: int, world: int, channels: int,
            clips: bool) -> Iterator[Union[Dict[str, Any], Skipped]]:
    """This rank's items (every `world`-th from `rank`: the evaluation loop's rounds) as batches of one: L is
    1xCxHxW (an image network) or 1xTxCxHxW (`clips`: a video network; `keep` the window's kept frames), uint8
    or uint16 as the files are. An item that cannot be read is a Skipped; so is the rest of a video once one
    of its windows could not be decoded (the decoder cannot go on past it)."""
    reader = FrameSource(channels)
    broken: Dict[Source, str] = {}
    try:
        for item in items[rank::world]:
            s, w = item.source, item.window
            if s in broken:
                yield Skipped(item.name, broken[s])
                continue
            try:
                frames = reader.read_frames(s, w.start, w.stop)
            except UserError as e:
                if s.kind == VIDEO:
                    broken[s] = str(e)
                yield Skipped(item.name, str(e))
                continue
            if len({f.dtype for f in frames}) > 1:
                yield Skipped(item.name, f'{s.name}: frames {w.start}..{w.stop - 1} mix 8- and 16-bit images')
                continue
            tensors = [uint8_tensor(f) for f in frames]
            if clips:
                yield {'L': torch.stack(tensors)[None], 'folder': [item.name],
                       'keep': (w.keep_start - w.start, w.keep_stop - w.start)}
            else:
                yield {'L': tensors[0][None], 'name': [item.name]}
    finally:
        reader.close()


def encoder(items: Sequence[Item], frames_too: bool, page: bool = False) -> Encode:
    """What each rank makes of its restored frames for rank 0 (`evaluate`'s `encode`), a pair each: an image or a
    frame of a clip of frames as the bytes of its output file (its input's format) and, for the `page`, PNG bytes
    when browsers cannot show that format; a video's frame as it is (rank 0 encodes the video) and, with
    `frames_too`, also as PNG bytes."""
    by_name = {item.name: item for item in items}

    def encode(name: str, index: int, frame: np.ndarray) -> Any:
        item = by_name[name]
        s = item.source
        if s.kind == VIDEO:
            return frame, encode_image(frame) if frames_too else None
        ext = os.path.splitext(output_names(item)[index])[1]
        return encode_image(frame, ext), encode_image(frame) if page and not shown_in_browsers(ext) else None
    return encode


def output_names(item: Item) -> List[str]:
    """The output files of an item's kept frames, relative to the output folder: an image's own name, a clip's
    frames' own names, a video's frames as `--frames` writes them (`<video name>/<frame>.png`)."""
    s, w = item.source, item.window
    if s.kind == IMAGE:
        return [s.name]
    if s.kind == FRAMES:
        return list(s.outputs[w.keep_start:w.keep_stop])
    return [os.path.join(os.path.splitext(s.name)[0], f'{t:06d}.png') for t in range(w.keep_start, w.keep_stop)]


def on_page(item: Item, frames_too: bool) -> bool:
    """Whether the comparison page shows the item's images: images and clips of frames, a video's windows only
    with `frames_too` (its frames as PNGs: a video file is no image)."""
    return item.source.kind != VIDEO or frames_too


class OutputWriter:
    """Rank 0's writer of the restored items, called in item order (`evaluate`'s `write_item`, `skip_item`,
    `write_sources`): `<out>/<name>` for an image, each frame under its own name for a clip of frames,
    `<out>/<video name>` for a video (and its frames as `<out>/<video name without extension>/<frame>.png` with
    `frames_too`); for the page, the inputs and previews (see the module docstring), kept in `files`."""

    def __init__(self, out_dir: str, items: Sequence[Item], frames_too: bool = False):
        self.out_dir = out_dir
        self.by_name = {item.name: item for item in items}
        self.frames_too = frames_too
        self.videos: Dict[Source, VideoWriter] = {}
        self.given_up: Set[Source] = set()
        self.files: Dict[str, Dict[str, List[str]]] = {}

    def write(self, name: str, frames: List[Any]) -> None:
        """Rank 0: one restored item's frames (as `encoder` made them) into its image files or its video."""
        item = self.by_name[name]
        s, w = item.source, item.window
        names = output_names(item)
        if s.kind == VIDEO:
            if s in self.given_up:
                return
            video = self.videos.get(s)
            if video is None:
                h, width = frames[0][0].shape[:2]
                video = self.videos[s] = VideoWriter(os.path.join(self.out_dir, s.name), s.rate, h, width)
            for frame, _ in frames:
                video.write(frame)
            if w.keep_stop == s.frames:
                self.videos.pop(s).close()
        shown = []
        for rel, (data, extra) in zip(names, frames):
            if s.kind == VIDEO:  # (the frame, its PNG with --frames): the frame went into the video
                if extra is None:
                    continue
                data, extra = extra, None
            self._file(rel, data)
            if extra is not None:  # the PNG copy of an output browsers cannot show
                rel = os.path.join('preview', f'{rel}.png')
                self._file(rel, extra)
            shown.append(rel)
        if shown:
            self.files[name] = {'output': shown}

    def write_sources(self, name: str, inputs: Optional[List[bytes]], targets: List[bytes]) -> None:
        """The page's input of an item (`evaluate`'s `write_sources`: scaled to the output's size; no targets)."""
        if inputs is None or name not in self.files:
            return
        item = self.by_name[name]  # a video's frames are PNGs of our naming already
        paths = [os.path.join('input', rel if item.source.kind == VIDEO else f'{rel}.png')
                 for rel in output_names(item)]
        for rel, data in zip(paths, inputs):
            self._file(rel, data)
        self.files[name]['input'] = paths

    def skip(self, skipped: Skipped) -> None:
        """An item a rank could not read: one warning line; a video with it is given up (nothing of it is left)."""
        s = self.by_name[skipped.name].source
        if s in self.given_up:
            return
        if s.kind == VIDEO:
            self.given_up.add(s)
            if s in self.videos:
                self.videos.pop(s).abort()
        where = '' if s.kind == IMAGE else f' ({skipped.name})'
        get_logger().warning(f'skipped{where}: {skipped.problem}')

    def abort(self) -> None:
        """Videos still open (a failed write, an error): their temporary files removed."""
        for video in self.videos.values():
            video.abort()
        self.videos.clear()

    def _file(self, rel: str, data: bytes) -> None:
        atomic_write_bytes(os.path.join(self.out_dir, rel), lambda f: f.write(data), size=len(data))


def check_output_folder(out_dir: str, input_path: str) -> None:
    """Before any work: the output folder can be created and written, and is neither the input folder nor inside
    it (outputs keep their inputs' names: they would overwrite them, or be read as inputs next time). Rank 0
    looks; every rank gets the same UserError."""
    def check() -> None:
        source, out = os.path.realpath(input_path), os.path.realpath(out_dir)
        folder = source if os.path.isdir(source) else os.path.dirname(source)
        if out == folder or (os.path.isdir(source) and out.startswith(folder + os.sep)):
            raise UserError(f'--out {out_dir}: {"is" if out == folder else "lies inside"} the input folder '
                            f'{folder}; the outputs keep the inputs\' names: give another folder')
        try:
            os.makedirs(out_dir, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix='.write_check.', dir=out_dir)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise UserError(f'--out {out_dir}: cannot write there ({e.strerror or first_line(e)})') from None
    problem = dist.main_process_outcome(check, lambda e: str(e) if isinstance(e, UserError) else None)
    if problem is not None:
        raise UserError(problem)


def check_network(restorer: ImageRestorer, items: Sequence[Item], channels: int, clips: bool, net_type: str) -> None:
    """The network run once at start-up, on every rank alike, on a random input of the first item's channels,
    frames and size (cropped to PROBE_SIDE): one it cannot take (a network fed noise maps or spikes besides
    the image, a 1-channel network and colour images) is one line before any output is written."""
    first = items[0]
    h, w = (min(PROBE_SIDE, side) for side in first.source.size)
    frames = first.window.stop - first.window.start
    g = torch.Generator().manual_seed(0)
    shape = (1, frames, channels, h, w) if clips else (1, channels, h, w)
    batch: Dict[str, Any] = {'L': torch.rand(shape, generator=g), 'name': ['probe'], 'folder': ['probe']}
    if clips:
        batch['keep'] = (0, frames)
    try:
        restorer.restore(batch)
    except NETWORK_FAILURES as e:
        if is_out_of_memory(e):  # not the data's or the options' fault: its own line and exit code
            raise
        what = f'{frames} frames of ' if clips else 'an image of '
        raise UserError(f'netG ({net_type}) cannot restore {first.source.paths[0]}: {failure_text(e)} (tried on '
                        f'{what}{channels} channels, {h}x{w}; --input gives the frames alone, without noise level '
                        f'maps, kernels or spike channels)') from None


@dataclass
class Restored:
    """What `restore_inputs` did: the evaluation (rows and no-reference scores, `skipped`, rank 0's
    `write_error`), the inputs not (wholly) restored because something could not be read, in order (the files of
    images and videos, the clips of frames: the warnings name the frames), and rank 0's files of each item for
    the page (utils/compare_page.py's `files`)."""
    evaluation: Evaluation
    missed: List[str]
    files: Dict[str, Dict[str, List[str]]] = field(default_factory=dict)


def restore_inputs(restorer: ImageRestorer, found: Found, out_dir: Optional[str], channels: int, net_type: str,
                   frames_too: bool = False, page: bool = False) -> Restored:
    """Restore every input of `found` on every rank (a collective) and write them under `out_dir` on rank 0 (None:
    write nothing), with `page` also what the comparison page shows beside them (the module docstring)."""
    clips = isinstance(restorer, VideoRestorer)
    items = plan(found, restorer)
    if not items:
        return Restored(Evaluation([], {'count': 0}, names=()), [])
    check_network(restorer, items, channels, clips, net_type)
    log = get_logger()
    for s in found.sources:
        if s.kind == VIDEO and dist.is_main_process():
            windows = sum(item.source == s for item in items)
            log.info(f'{s.name}: {s.frames} frames at {float(s.rate):.3f} fps ({s.rate}), restored in {windows} '
                     f'window{"s" if windows != 1 else ""}')
    writer = OutputWriter(out_dir, items, frames_too) if out_dir is not None else None
    page = page and writer is not None
    by_name = {item.name: item for item in items}
    try:
        res = evaluate(restorer, batches(items, dist.get_rank(), dist.get_world_size(), channels, clips),
                       len(items), label='restoring', lines=True, targets=False,
                       encode=encoder(items, frames_too, page), write_item=writer.write if writer else None,
                       skip_item=writer.skip if writer else None,
                       write_sources=writer.write_sources if page else None,
                       source_items=lambda name: on_page(by_name[name], frames_too))
    finally:
        if writer is not None:
            writer.abort()
    missed = dict.fromkeys(by_name[s.name].source for s in res.skipped)
    return Restored(res, [s.name if s.kind == FRAMES else s.paths[0] for s in missed],
                    writer.files if page else {})


def no_reference(restorer: ImageRestorer) -> ImageRestorer:
    """This restorer (the same network) scoring only its no-reference `val.metrics` (NIQE): items without targets
    cannot be scored by the others (a test set without targets among sets with them, models/set_runner.py)."""
    out = copy.copy(restorer)
    out.metrics = {name: m for name, m in restorer.metrics.items() if not m.needs_reference}
    return out


def needing_targets(val: Dict[str, Any]) -> List[str]:
    """The names in `val.metrics` that need targets (LPIPS, DISTS): inputs without targets cannot be scored by
    them (the no-reference ones, NIQE, are)."""
    from metrics.registry import METRICS
    return [name for name in val['metrics'] if METRICS.get(name, 'val.metrics').needs_reference]
