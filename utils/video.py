"""Video files: probing, streamed decoding and atomic encoding, through PyAV (FFmpeg's libraries).

Why PyAV and not OpenCV, whose wheel also holds FFmpeg: OpenCV's writer reports nothing when a write fails
(a full disk leaves a file without its index and a warning per frame on stderr), its frame count is the
container's estimate, and its wheel encodes H.264 only through hardware; PyAV raises on every failure (an
OSError with its errno), reads the exact frame rate as a fraction and ships libx264 and FFV1. It is imported
only when a video is read or written (`pip install av`, pinned in requirements.txt).

Frames are HWC uint8 RGB (HW1 for gray), as everywhere in the project. What is written:
  .mp4, .mov  H.264 (libx264, CRF 17: visually lossless, plays everywhere; 4:2:0 chroma when the frame size
              is even, else 4:4:4), the same file for the same frames (`H264_OPTIONS`);
  .mkv, .avi  FFV1, lossless.
"""
import os
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Iterator, List, Optional

import numpy as np

from utils.checkpoint import new_file_mode
from utils.diskspace import NoSpaceLeft, no_space
from utils.errors import UserError, first_line

VIDEO_EXTENSIONS = ('.mp4', '.mkv', '.avi', '.mov')
REQUIREMENT = 'pip install av==18.1.0 (pinned in requirements.txt)'
# CRF 17: visually lossless. Without macroblock-tree rate control (mbtree=0): with it, libx264 (PyAV 18.1's)
# encoded the same frames into different files depending on what the process's heap held before (memory it
# reads before writing, at least on clips shorter than its 40-frame lookahead), so outputs were not repeatable
# run to run, nor the same on 1 and 2 ranks; without it they are, for a few percent more bytes.
H264_OPTIONS = {'crf': '17', 'x264-params': 'mbtree=0'}


def is_video_file(path: str) -> bool:
    return path.lower().endswith(VIDEO_EXTENSIONS)


def _av() -> Any:
    try:
        import av
    except ImportError:
        raise UserError(f'reading and writing video files needs PyAV, which is not installed here; {REQUIREMENT}') \
            from None
    return av


@dataclass(frozen=True)
class VideoInfo:
    """What a video file holds: its first video stream's frame count (counted, not the container's estimate),
    frame rate (exact: e.g. 30000/1001) and frame size."""
    path: str
    frames: int
    rate: Fraction
    height: int
    width: int


def _problem(e: BaseException) -> str:
    """FFmpeg's reason without the path PyAV appends to it."""
    text = first_line(e)
    return text.split(": '", 1)[0] if ": '" in text else text


def probe_video(path: str) -> VideoInfo:
    """The video's frames, rate and size, from its packets (demuxed, not decoded: cheap), and its first frame
    (decoded: a stream that cannot be decoded fails here, before anything runs). UserError naming the file."""
    av = _av()
    try:
        with av.open(path) as container:
            if not container.streams.video:
                raise UserError(f'{path}: no video stream in this file')
            stream = container.streams.video[0]
            rate = stream.average_rate or stream.guessed_rate or stream.base_rate
            first = next(container.decode(stream), None)
        with av.open(path) as container:  # opened again: no seek back, which not every container allows
            frames = sum(1 for packet in container.demux(container.streams.video[0]) if packet.size)
    except UserError:
        raise
    except (av.FFmpegError, OSError, ValueError, StopIteration) as e:
        raise UserError(f'{path}: the video decoder cannot open it ({_problem(e)})') from None
    if first is None or not frames:
        raise UserError(f'{path}: the video decoder finds no frame in it')
    if not rate:
        raise UserError(f'{path}: the video has no frame rate')
    return VideoInfo(path, frames, Fraction(rate), first.height, first.width)


class FrameReader:
    """A video's frames decoded once, in order, for windows that start in order (`read(start, stop)` with
    `start` never decreasing): frames before the window are decoded and dropped, frames the window shares
    with the next one are kept, so memory is one window whatever the video's length."""

    def __init__(self, path: str, gray: bool = False):
        av = _av()
        self.path, self.gray = path, gray
        try:
            self._container = av.open(path)
            stream = self._container.streams.video[0]
            stream.thread_type = 'AUTO'
            self._frames: Iterator[Any] = self._container.decode(stream)
        except (av.FFmpegError, OSError, ValueError, IndexError) as e:
            raise UserError(f'{path}: the video decoder cannot open it ({_problem(e)})') from None
        self._buffer: List[np.ndarray] = []
        self._first = 0  # index of _buffer[0]

    def read(self, start: int, stop: int) -> List[np.ndarray]:
        """Frames start..stop-1 as HWC uint8 RGB (HW1 gray); UserError when the video ends or breaks before."""
        av = _av()
        if start < self._first:
            raise ValueError(f'FrameReader: windows must start in order ({start} after {self._first})')
        drop = min(start - self._first, len(self._buffer))
        del self._buffer[:drop]
        self._first += drop
        while self._first + len(self._buffer) < stop:
            try:
                frame = next(self._frames, None)
            except (av.FFmpegError, OSError, ValueError) as e:
                raise UserError(f'{self.path}: frame {self._first + len(self._buffer)} cannot be decoded '
                                f'({_problem(e)})') from None
            if frame is None:
                raise UserError(f'{self.path}: the video ends after {self._first + len(self._buffer)} frames '
                                f'(damaged? its packets promised {stop} or more)')
            index = self._first + len(self._buffer)
            if index < start:  # before the window: decoded (the decoder needs it) but not converted
                self._first += 1
                continue
            img = frame.to_ndarray(format='gray' if self.gray else 'rgb24')
            self._buffer.append(img[:, :, None] if img.ndim == 2 else img)
        return self._buffer[start - self._first:stop - self._first]

    def close(self) -> None:
        self._container.close()


class VideoWriter:
    """A video written through a temporary file beside `path`, renamed over it by `close()`: a run that
    fails or is stopped leaves the old file or none, never a truncated video. `abort()` removes the
    temporary file. A write that fails for lack of space raises NoSpaceLeft."""

    def __init__(self, path: str, rate: Fraction, height: int, width: int):
        av = _av()
        self.path, self.frames = path, 0
        folder = os.path.dirname(os.path.abspath(path))
        ext = os.path.splitext(path)[1].lower()
        self._tmp: Optional[str] = None
        try:
            os.makedirs(folder, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(prefix='.' + os.path.basename(path) + '.', suffix='.tmp' + ext,
                                             dir=folder)
            os.close(fd)
            # bitexact: no random segment id (Matroska) or muxer version in the file: the same frames, the same bytes
            self._container = av.open(self._tmp, 'w', format={'.mkv': 'matroska', '.mov': 'mov'}.get(ext),
                                      options={'fflags': '+bitexact'})
            if ext in ('.mkv', '.avi'):
                self._stream = self._container.add_stream('ffv1', rate=rate)
                self._stream.pix_fmt = 'bgr0'
            else:
                self._stream = self._container.add_stream('libx264', rate=rate, options=H264_OPTIONS)
                self._stream.pix_fmt = 'yuv420p' if height % 2 == 0 and width % 2 == 0 else 'yuv444p'
            self._stream.width, self._stream.height = width, height
        except BaseException as e:
            self._fail(e)

    def write(self, frame: np.ndarray) -> None:
        """Append one HWC (or HW1) uint8 RGB/gray frame."""
        av = _av()
        img = np.ascontiguousarray(frame[:, :, 0] if frame.ndim == 3 and frame.shape[2] == 1 else frame)
        try:
            video_frame = av.VideoFrame.from_ndarray(img, format='gray' if img.ndim == 2 else 'rgb24')
            for packet in self._stream.encode(video_frame):
                self._container.mux(packet)
        except BaseException as e:
            self._fail(e)
        self.frames += 1

    def close(self) -> None:
        """Flush the encoder, close the file and rename it over `path` (fsynced)."""
        try:
            for packet in self._stream.encode():
                self._container.mux(packet)
            self._container.close()
            with open(self._tmp, 'rb+') as f:
                os.fsync(f.fileno())
            os.chmod(self._tmp, new_file_mode())
            os.replace(self._tmp, self.path)
            self._tmp = None
            folder = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
        except BaseException as e:
            self._fail(e)

    def abort(self) -> None:
        """Give the video up: its temporary file removed, `path` left as it was."""
        container = getattr(self, '_container', None)
        if container is not None:
            try:
                container.close()
            except Exception:  # a container that already failed (its file is removed next)
                pass
        if self._tmp is not None and os.path.exists(self._tmp):
            os.unlink(self._tmp)
        self._tmp = None

    def _fail(self, e: BaseException) -> None:
        folder = os.path.dirname(os.path.abspath(self.path))
        self.abort()
        message = no_space(e, folder) if isinstance(e, Exception) else None
        if message:
            raise NoSpaceLeft(message) from e
        if isinstance(e, OSError) or not isinstance(e, Exception):
            raise e
        raise OSError(f'writing video {self.path} failed: {first_line(e)}') from e
