"""Inference on inputs of one's own (`main_test.py --input`): images/s and video frames/s on CPU with tiles off
and on, and the peak memory of a long video, which must not grow with its length.

    python bench/bench_inference.py [--quick] [--reps 3] [--threads 2]

Every row goes through models/input_restore.py's `restore_inputs` (read, restore, encode, write; one process):
  images/s  the demo's DnCNN (options/train_dncnn_demo.json's netG, random weights) on 8 generated 192x192 PNGs:
            whole images / tiles of 96 overlapping by 16 (val.tile, val.tile_overlap);
  frames/s  a small clip network (model vrt; `ClipNet` below: per-frame convolutions around a 3x3x3 one across
            frames) on a generated 128x128 .mp4 of 32 frames streamed in 16-frame windows, written as .mp4:
            whole frames / tiles of 64 (val.size_patch_testing);
the two sides of a row alternate (off, on, off, on, ...) and the medians are compared. Then peak RSS: the whole
`main_test.py --input` run, each in a fresh process, on a generated 64x64 .mp4 of 100 and of 1,000 frames
(the clip network, --opt and a weights file), and the ratio of the two: a video is streamed in windows, so
memory stays one round of windows however long it is. `--quick`: 2 images and 4 frames of 48x48, videos of 10
and 50 frames, one rep: a smoke run, the numbers mean nothing.
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from typing import Any, Callable, Dict, List, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from common import entry, parse_reps, reps_parser  # noqa: E402
from data.inputs import find_inputs  # noqa: E402
from models.input_restore import restore_inputs  # noqa: E402
from models.network_loading import build_checked_network  # noqa: E402
from models.registry import MODELS, NETWORKS  # noqa: E402
from option_rules import read_options, read_options_data  # noqa: E402
from utils.image import imwrite  # noqa: E402
from utils.video import VideoWriter  # noqa: E402


@NETWORKS.register('bench_clip_net')
class ClipNet(nn.Module):
    """A clip network small enough to restore 1,000 frames in seconds: N×T×C×H×W in, the same size out."""

    def __init__(self, nc: int = 8):
        super().__init__()
        self.head = nn.Conv2d(3, nc, 3, padding=1)
        self.mix = nn.Conv3d(nc, nc, 3, padding=1)
        self.tail = nn.Conv2d(nc, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, c, h, w = x.shape
        f = torch.relu(self.head(x.reshape(n * t, c, h, w)))
        f = torch.relu(self.mix(f.reshape(n, t, -1, h, w).transpose(1, 2))).transpose(1, 2).reshape(n * t, -1, h, w)
        return x + self.tail(f).reshape(n, t, c, h, w)


CLIP_OPTIONS = {'task': 'bench_clip', 'model': 'vrt', 'netG': {'net_type': 'bench_clip_net'},
                'val': {'num_frame_testing': 16, 'num_frame_overlapping': 2}}


def write_video(path: str, frames: int, side: int) -> None:
    """A generated clip: a smooth random picture sliding one pixel per frame."""
    rng = np.random.default_rng(0)
    small = rng.integers(0, 256, (side // 8, side // 8, 3)).astype(np.float32)
    base = np.kron(small, np.ones((8, 8, 1), np.float32)).astype(np.uint8)
    video = VideoWriter(path, Fraction(25), side, side)
    for t in range(frames):
        video.write(np.roll(base, t, axis=1))
    video.close()


def rate(restorer: Any, found: Any, out: str, units: int) -> Callable[[], float]:
    """One timed restoring of `found` (its `units` images or frames) by `restorer`, as units per second."""
    def run() -> float:
        t0 = time.perf_counter()
        restore_inputs(restorer, found, out, 3, 'bench')
        return units / (time.perf_counter() - t0)
    return run


def paired(label: str, unit: str, off: Callable[[], float], on: Callable[[], float], reps: int) -> None:
    """`off` and `on` alternately `reps` times (after one untimed call each), medians and their ratio."""
    off(), on()
    a, b = [], []
    for _ in range(reps):
        a.append(off())
        b.append(on())
    ma, mb = statistics.median(a), statistics.median(b)
    print(f'{label:<40} tiles off {ma:8.2f} {unit} | tiles on {mb:8.2f} {unit} | on / off {mb / ma:.3f}')


def clip_restorer(opt_overrides: Sequence[str], folder: str) -> Any:
    opt = read_options_data({**CLIP_OPTIONS, 'path': {'root': folder}}, 'bench', opt_overrides)
    net = build_checked_network(opt['netG']).eval()
    return MODELS.get(opt['model'], 'model').restorer_class.from_options(net, opt, torch.device('cpu'))


def child_main(args: List[str]) -> int:
    """`--test ARGS`: main_test.py's main(ARGS) in this process (ClipNet registered), then its peak RSS."""
    import main_test
    code = main_test.main(args)
    print(f'peak_rss_kb {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}')
    return code


def peak_rss(frames: int, side: int, folder: str) -> float:
    """Peak RSS (MiB) of a fresh `main_test.py --input` process restoring a `frames`-frame video."""
    video = os.path.join(folder, f'clip_{frames}.mp4')
    write_video(video, frames, side)
    opt_path = os.path.join(folder, 'clip.json')
    with open(opt_path, 'w') as f:
        json.dump({**CLIP_OPTIONS, 'path': {'root': folder}}, f)
    weights = os.path.join(folder, 'clip.pth')
    if not os.path.exists(weights):
        torch.save(ClipNet().state_dict(), weights)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), '--test', '--opt', opt_path, '--weights', weights,
                           '--input', video, '--out', os.path.join(folder, f'out_{frames}')],
                          capture_output=True, text=True, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('peak_rss_kb ')]
    if proc.returncode or not lines:
        raise SystemExit(f'main_test.py on {frames} frames failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n'
                         f'{proc.stderr[-2000:]}')
    return int(lines[-1].split()[1]) / 1024


def main() -> None:
    p = reps_parser(__doc__, 'smoke run: 2 images and 4 frames of 48x48, 10 and 50 frames for RSS, one rep',
                    'timed reps per side (default 3; --quick 1)')
    p.add_argument('--threads', type=int, default=None, help='torch threads (default: as started)')
    args = parse_reps(p, None, 3)
    if args.threads:
        torch.set_num_threads(args.threads)
    n_images, side, tile = (2, 48, 32) if args.quick else (8, 192, 96)
    n_frames, frame_side, frame_tile = (4, 48, 32) if args.quick else (32, 128, 64)
    short, long = (10, 50) if args.quick else (100, 1000)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder, torch.no_grad():
        images = os.path.join(folder, 'images')
        rng = np.random.default_rng(0)
        for k in range(n_images):
            imwrite(os.path.join(images, f'{k:03d}.png'), rng.integers(0, 256, (side, side, 3), dtype=np.uint8))
        found = find_inputs(images, clips=False)
        demo = read_options(os.path.join(ROOT, 'options', 'train_dncnn_demo.json'), [f'path.root={folder}'])
        net = build_checked_network(demo['netG']).eval()
        restorers: Dict[str, Any] = {
            key: MODELS.get('plain', 'model').restorer_class.from_options(
                net, {**demo, 'val': {**demo['val'], 'tile': t, 'tile_overlap': 16 if t else demo['val']['tile_overlap']}},
                torch.device('cpu')) for key, t in (('off', 0), ('on', tile))}
        out = os.path.join(folder, 'out')
        print(f'== bench_inference.py{" (quick)" if args.quick else ""}: CPU, {torch.get_num_threads()} threads, '
              f'torch {torch.__version__}')
        paired(f'images/s, DnCNN demo, {n_images}x {side}x{side}, tile {tile}', 'img/s',
               rate(restorers['off'], found, out, n_images), rate(restorers['on'], found, out, n_images), args.reps)
        video = os.path.join(folder, 'clip.mp4')
        write_video(video, n_frames, frame_side)
        clip = find_inputs(video, clips=True)
        paired(f'frames/s, clip net, {n_frames}x {frame_side}x{frame_side}, tile {frame_tile}', 'fr/s',
               rate(clip_restorer([], folder), clip, out, n_frames),
               rate(clip_restorer([f'val.size_patch_testing={frame_tile}'], folder), clip, out, n_frames), args.reps)
        a, b = peak_rss(short, 64, folder), peak_rss(long, 64, folder)
        print(f'peak RSS, main_test.py --input, 64x64 video: {short} frames {a:.1f} MiB | {long} frames {b:.1f} MiB '
              f'| {long} / {short} {b / a:.3f}')


if __name__ == '__main__':
    entry(main, test=child_main)
