"""Inputs of one's own, without targets: what `main_test.py --input PATH` restores, found and checked up front.

PATH is an image, a video file (.mp4, .mkv, .avi, .mov), or a folder of them (searched recursively). For a
video model a folder whose files are images is a clip of frames in name order (each such folder below PATH
one clip; PATH itself when its images lie directly in it); for an image model every image is an item of
its own, and a video's frames are restored one by one.

Before anything runs, every image's header is read (`utils.image_header.read_image_size`: size, end marker)
and every video is opened and its packets counted (`utils.video.probe_video`): a file that fails is not an
input (`Found.bad`, one line each, naming it), a clip whose frames differ in size neither. The rest is read
only when restored (`read_frames`), so that memory holds one item (a video: one window) at a time.

An image with a non-sRGB colour profile embedded (Display P3, Adobe RGB) is converted to sRGB as it is read, as the
datasets' default `icc: "convert"` does (utils/icc.py): restored, it is written in sRGB (without a profile). The log
line that describes the inputs says how many; one whose profile cannot be converted is not an input.
"""
import os
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Dict, List, Optional, Tuple

import numpy as np

from data.checks import non_srgb_profile
from utils.errors import UserError
from utils.image import IMG_EXTENSIONS, imread_uint, is_image_file
from utils.image_header import ImageFileError, header_bit_depth, read_image_size
from utils.video import VIDEO_EXTENSIONS, FrameReader, is_video_file, probe_video

IMAGE, FRAMES, VIDEO = 'image', 'frames', 'video'


@dataclass(frozen=True)
class Source:
    """One input: an image, a clip of frame files, or a video file.

    `name` is where its output goes, relative to the output folder (an image's or video's relative path, a
    clip's folder); `paths` its image file (one), frame files or video file (one); `outputs` the relative
    output path of each frame of a clip of frame files (their own names). `size`: (height, width) of its
    frames, from the headers; `rate`: a video's frame rate."""
    kind: str
    name: str
    paths: Tuple[str, ...]
    frames: int
    size: Tuple[int, int]
    rate: Optional[Fraction] = None
    outputs: Tuple[str, ...] = ()


@dataclass
class Found:
    """The inputs under PATH, in name order, and the files that cannot be inputs: (path, problem)."""
    sources: List[Source] = field(default_factory=list)
    bad: List[Tuple[str, str]] = field(default_factory=list)
    converted: List[str] = field(default_factory=list)  # images with a non-sRGB colour profile, read in sRGB

    def describe(self) -> str:
        """What the inputs are, for the log: e.g. `8 images, 1 video (100 frames)`."""
        parts = []
        for kind, word in ((IMAGE, 'image'), (FRAMES, 'clip'), (VIDEO, 'video')):
            these = [s for s in self.sources if s.kind == kind]
            if these:
                frames = f' ({sum(s.frames for s in these)} frames)' if kind != IMAGE else ''
                parts.append(f'{len(these)} {word}{"s" if len(these) > 1 else ""}{" of frames" if kind == FRAMES else ""}'
                             f'{frames}')
        if self.converted:
            n = len(self.converted)
            parts.append(f'{n} of them with a non-sRGB colour profile, converted to sRGB (the first: '
                         f'{self.converted[0]})')
        return ', '.join(parts) or 'nothing readable'


def find_inputs(path: str, clips: bool, named: str = '--input') -> Found:
    """The inputs under `path` (see the module docstring); `clips`: a video model's (folders of frames are clips).

    A `path` that does not exist, holds nothing to restore, or is itself one file that cannot be read is a
    UserError starting with `named` and the path (`--input`, or the option key that gave it); inside a folder, a
    file that cannot be read is listed in `Found.bad` and the others go on."""
    label = f'{named} {path}'
    if not os.path.exists(path):
        raise UserError(f'{label}: no such file or folder')
    if os.path.isfile(path):
        found = Found()
        name = os.path.basename(path)
        if is_video_file(path):
            found.sources.append(_video(path, name))  # a video that cannot be opened: its UserError
        elif is_image_file(path):
            size = read_image_size(path)  # a damaged header: its one line
            problem = _profile_problem(path, found)
            if problem:
                raise UserError(f'{label}: {problem}')
            found.sources.append(_frames([path], os.path.splitext(name)[0], (name,), size) if clips
                                 else _image(path, name, size))
        else:
            raise UserError(f'{label}: neither an image ({" ".join(IMG_EXTENSIONS)}) nor a video '
                            f'({" ".join(VIDEO_EXTENSIONS)})')
        return found
    found = Found()
    for folder, dirs, files in os.walk(path):
        dirs.sort()
        rel_folder = os.path.relpath(folder, path)
        rel = lambda f: os.path.normpath(os.path.join(rel_folder, f))
        images = sorted(f for f in files if is_image_file(f))
        for f in sorted(f for f in files if is_video_file(f)):
            try:
                found.sources.append(_video(os.path.join(folder, f), rel(f)))
            except UserError as e:
                found.bad.append((os.path.join(folder, f), _problem_of(e, os.path.join(folder, f))))
        good = []
        for f in images:
            try:
                size = read_image_size(os.path.join(folder, f))
            except ImageFileError as e:
                found.bad.append((e.path, e.problem))
                continue
            problem = _profile_problem(os.path.join(folder, f), found)
            if problem:
                found.bad.append((os.path.join(folder, f), problem))
            else:
                good.append((f, size))
        if clips and good:
            (first, (h, w)), odd = good[0], [(f, size) for f, size in good if size != good[0][1]]
            if odd:
                found.bad.append((os.path.join(folder, odd[0][0]), f'a {odd[0][1][0]}x{odd[0][1][1]} frame in a clip of '
                                  f'{h}x{w} frames (as {first}): the clip is skipped'))
                continue
            name = os.path.basename(os.path.abspath(path)) if rel_folder == '.' else rel_folder
            found.sources.append(_frames([os.path.join(folder, f) for f, _ in good], name,
                                         tuple(rel(f) for f, _ in good), (h, w)))
        elif good:
            found.sources.extend(_image(os.path.join(folder, f), rel(f), size) for f, size in good)
    if not found.sources and not found.bad:
        raise UserError(f'{label}: no images ({" ".join(IMG_EXTENSIONS)}) or videos '
                        f'({" ".join(VIDEO_EXTENSIONS)}) in this folder')
    return found


def _profile_problem(path: str, found: Found) -> Optional[str]:
    """Why the image at `path` cannot be read in sRGB (its colour profile is damaged or cannot be converted), or
    None; one that will be converted from its profile is noted in `found.converted`."""
    profile = non_srgb_profile(path)
    if profile is None:
        return None
    problem = profile if isinstance(profile, str) else profile.problem(header_bit_depth(path))
    if problem is None:
        found.converted.append(path)
    return problem


def _problem_of(e: UserError, path: str) -> str:
    """A UserError's message without the `<path>: ` it starts with."""
    text = str(e)
    return text[len(path) + 2:] if text.startswith(f'{path}: ') else text


def _image(path: str, name: str, size: Tuple[int, int]) -> Source:
    return Source(IMAGE, name, (path,), 1, size)


def _frames(paths: List[str], name: str, outputs: Tuple[str, ...], size: Tuple[int, int]) -> Source:
    return Source(FRAMES, name, tuple(paths), len(paths), size, outputs=outputs)


def _video(path: str, name: str) -> Source:
    info = probe_video(path)
    return Source(VIDEO, name, (path,), info.frames, (info.height, info.width), info.rate)


class FrameSource:
    """Reads the frames of sources for one rank's items, in order: one open video at a time (`read_frames`
    streams it: frames before a window are decoded and dropped), none kept once the rank has moved on."""

    def __init__(self, channels: int):
        self.channels = channels
        self._readers: Dict[Source, FrameReader] = {}

    def read_frames(self, source: Source, start: int, stop: int) -> List[np.ndarray]:
        """Frames start..stop-1 of `source`, HWC uint8 (uint16 for 16-bit image files; C = `channels`);
        UserError naming the file when one cannot be decoded."""
        for other in [s for s in self._readers if s != source]:
            self._readers.pop(other).close()
        if source.kind != VIDEO:
            return [imread_uint(p, self.channels, keep_16bit=True) for p in source.paths[start:stop]]
        if source not in self._readers:
            self._readers[source] = FrameReader(source.paths[0], gray=self.channels == 1)
        return self._readers[source].read(start, stop)

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
