"""The restorers of clips and videos: whole clips in temporal chunks and spatial tiles (VRT, RVRT, BasicVSR:
`VideoRestorer`), or each frame from its own window of frames (EDVR: `SlidingWindowRestorer`).

A video of one's own (`main_test.py --input`) is restored window by window (`stream_windows`), each window a
clip, so memory holds a window however long the video; the test sets' clips are restored whole.
"""
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from metrics.registry import Metric
from models.restorer import ImageRestorer, InputItem, Item, Window, amp_dtype, input_as_target, inputs_as
from models.scoring import build_metrics
from utils.errors import UserError
from utils.image import bit_depth, images_to_float, tensor2uint
from utils.registry import declared


class VideoRestorer(ImageRestorer):
    """Whole clips (N×T×C×H×W) in temporal chunks and spatial tiles, scored per clip.

    Follows KAIR's `test`/`_test_video`/`_test_clip` but reads its options from `val` (KAIR reads
    pad_seq/flip_seq/center_frame_only from `train`):
      - `num_frame_testing` > 0: chunks of that many frames overlapping by `num_frame_overlapping`,
        averaged where they overlap; 0: the whole clip, mirror-padded in time to a multiple of
        window_size[0];
      - `size_patch_testing` > 0: tiles of that size overlapping by TILE_OVERLAP pixels, each
        tile's inner borders (TILE_OVERLAP/2 output pixels) dropped, the rest averaged; 0: whole
        frames. Inputs are mirror-padded only where needed to a multiple of lcm(8, window size)
        (VRT's main_test pads only when needed; KAIR always adds at least one pixel);
      - `pad_seq`: the last frame is repeated once before testing and its output dropped;
      - `flip_seq`: the clip is tested together with its time reversal and the two are averaged;
      - `center_frame_only`: only the centre frame is returned (and compared).
    Time reversal (flip_seq, temporal mirror padding) also reverses the order of the spike
    channels within each frame, since every spike representation lists them in exposure order.
    All input channels (RGB, noise map, spikes) go to the network; the output and GT are RGB. A network that
    says which frame sizes it takes (`size_multiple`, e.g. BasicVSR's 1: any) is padded only to that multiple;
    others to the multiple of 8 and of their window VRT's testing pads to.
    """

    TILE_OVERLAP = 20  # KAIR's fixed spatial tile overlap (VRT's main_test default --tile_overlap 20)
    NO_WINDOW = (1, 8, 8)  # a network without attention windows: any length, VRT's multiple of 8 pixels
    STREAM_FRAMES = 16  # a video's window without val.num_frame_testing (rounded up to window_size[0])
    log_items = True  # per-clip PSNR/SSIM, as the reference logs them

    def __init__(self, net: nn.Module, device: torch.device, val: Dict[str, Any], window_size: Sequence[int],
                 spike_chans: int, metrics: Optional[Mapping[str, Metric]] = None,
                 amp: Optional[torch.dtype] = None):
        # KAIR's main_train_vrt and VRT's main_test_vrt compare whole frames
        super().__init__(net, device, metric_border=0, metrics=metrics, amp=amp)
        self.val = val
        self.window_size = (int(window_size[0]), int(window_size[1]), int(window_size[2]))
        self.spike_chans = int(spike_chans)
        multiple = getattr(net, 'size_multiple', None)  # the frame sizes the network takes, when it says
        self.size_multiple = (math.lcm(8, self.window_size[1]), math.lcm(8, self.window_size[2])) if multiple is None \
            else (int(multiple), int(multiple))
        self._check_val_options()

    @classmethod
    def from_options(cls, net: nn.Module, opt: Dict[str, Any], device: torch.device) -> 'VideoRestorer':
        """Testing options from `val`; window size and spike channels from `netG`, for networks that have them."""
        netG, v = opt['netG'], opt['val']
        cls.refuse_image_testing(v)
        window_size = list(declared(netG, 'window_size', cls.NO_WINDOW))
        if 'clip_size' in netG:  # RVRT restores clips of clip_size frames: whole clips must divide by it too
            window_size[0] = math.lcm(int(window_size[0]), int(netG['clip_size']))
        spike_chans = declared(netG, 'spike_chans', 0)  # spike cameras' networks take spike channels
        return cls(net, device, opt['val'], window_size, spike_chans, build_metrics(v, device),
                   amp_dtype(v['amp'], device, 'val.amp'))

    @staticmethod
    def refuse_image_testing(v: Mapping[str, Any]) -> None:
        """`val.tile` and `val.self_ensemble` are image testing; a video model's are its own keys."""
        if v['tile'] or v['self_ensemble']:
            key = 'val.tile' if v['tile'] else 'val.self_ensemble'
            raise UserError(f'{key}: image testing only; video models test in tiles with val.size_patch_testing '
                            f'and in time with val.flip_seq')

    @staticmethod
    def scoring_of(test: Dict[str, Any]) -> Tuple[int, bool]:
        """Whole frames, Y unrounded, on every test set (KAIR's main_train_vrt and VRT's main_test_vrt)."""
        return 0, False

    def _check_val_options(self) -> None:
        v, ws = self.val, self.window_size
        nft, nfo, tile = v['num_frame_testing'], v['num_frame_overlapping'], v['size_patch_testing']
        if nft and nfo >= nft:
            raise UserError(f'val.num_frame_overlapping: {nfo} must be smaller than val.num_frame_testing {nft}')
        if tile and tile <= self.TILE_OVERLAP:
            raise UserError(f'val.size_patch_testing: {tile} must be larger than the tile overlap '
                            f'{self.TILE_OVERLAP} (or 0 for whole frames)')
        if tile and tile % ws[2]:
            raise UserError(f'val.size_patch_testing: {tile} must be a multiple of netG.window_size[-1] = {ws[2]}')

    def _reverse_time(self, clip: torch.Tensor) -> torch.Tensor:
        """N×T×C×H×W played backwards: frames reversed, and the spike channels within each frame."""
        clip = clip.flip(1)
        if self.spike_chans:
            c = clip.shape[2] - self.spike_chans
            clip = torch.cat([clip[:, :, :c], clip[:, :, c:].flip(2)], 2)
        return clip

    def stream_windows(self, frames: int) -> List['Window']:
        """A long video in windows of `val.num_frame_testing` frames (without it, STREAM_FRAMES rounded up to
        a multiple of window_size[0]) that overlap by `val.num_frame_overlapping`, the last one flush with the
        end; each window is restored as a clip (`test_video`) and keeps the frames it is nearer the middle
        of (the overlap split in half), so every frame is restored once with context on both sides."""
        v = self.val
        ws0 = self.window_size[0]
        length = v['num_frame_testing'] or -(-self.STREAM_FRAMES // ws0) * ws0
        overlap = v['num_frame_overlapping']
        if overlap >= length:
            raise UserError(f'val.num_frame_overlapping: {overlap} must be smaller than the {length}-frame windows a '
                            f'video is restored in (val.num_frame_testing, or {length} without it)')
        if frames <= length:
            return [Window(0, frames, 0, frames)]
        starts = list(range(0, frames - length, length - overlap)) + [frames - length]
        cuts = [0] + [(s + prev + length) // 2 for prev, s in zip(starts, starts[1:])] + [frames]
        return [Window(s, s + length, cuts[k], cuts[k + 1]) for k, s in enumerate(starts)]

    def restore(self, batch: Dict[str, Any]) -> List[Item]:
        """(clip name, restored frames, GT frames) per clip of the batch; frames are HWC uint8 (uint16 for
        16-bit frames). Without targets (no `H`) the GT is None; a window of a longer video (`keep`: the
        (first, last + 1) frames of the window it keeps, `stream_windows`) returns those frames only."""
        bits = bit_depth(batch.get('L'), batch.get('H'))
        batch = images_to_float(batch)
        v = self.val
        L, H = batch['L'], batch.get('H')
        n = L.shape[1]
        if v['pad_seq']:
            L = torch.cat([L, L[:, -1:]], 1)
        if v['flip_seq']:
            L = torch.cat([L, self._reverse_time(L)], 1)
        E = self.test_video(L)
        if v['flip_seq']:
            half = E.shape[1] // 2
            E = 0.5 * (E[:, :half] + E[:, half:].flip(1))
        E = E[:, :n]
        names = batch.get('folder') or [f'clip_{j}' for j in range(L.shape[0])]
        if H is None:
            first, stop = batch['keep'] if 'keep' in batch else (0, n)
            return [(str(names[j]), [tensor2uint(E[j, t], bits) for t in range(first, stop)], None)
                    for j in range(L.shape[0])]
        if v['center_frame_only']:
            E = E[:, n // 2:n // 2 + 1]
            if H.shape[1] == n:
                H = H[:, n // 2:n // 2 + 1]
        if H.shape[1] != E.shape[1]:
            raise UserError(f'datasets.test: clips have {n} input but {H.shape[1]} ground-truth frames')
        return [(str(names[j]), [tensor2uint(E[j, t], bits) for t in range(E.shape[1])],
                 [tensor2uint(H[j, t], bits) for t in range(H.shape[1])]) for j in range(L.shape[0])]

    def input_items(self, batch: Dict[str, Any]) -> List[InputItem]:
        """The input clips as restored clips (see ImageRestorer.input_items): the frames compared are
        the ones `restore` compares; a clip whose target frames are not its input frames (frame
        interpolation) is left out."""
        batch = images_to_float(batch)
        L, H = batch['L'], batch['H']
        n = L.shape[1]
        if H.shape[1] != n:
            return []
        frames = [n // 2] if self.val['center_frame_only'] else range(n)
        names = batch.get('folder') or [f'clip_{j}' for j in range(L.shape[0])]
        out = []
        for j in range(L.shape[0]):
            pairs = [(input_as_target(L[j, t], H[j, t]), tensor2uint(H[j, t])) for t in frames]
            if all(p is not None for p, _ in pairs):
                out.append((str(names[j]), [p[0] for p, _ in pairs], [h for _, h in pairs], pairs[0][0][1]))
        return out

    def own_inputs(self, batch: Dict[str, Any], restored: Sequence[Item]) -> Dict[str, Optional[List[np.ndarray]]]:
        """The input frames of clips without targets beside their restored frames (see ImageRestorer.own_inputs):
        the frames a window keeps (`keep`), as `restore` returns them."""
        bits = bit_depth(batch.get('L'))
        L = images_to_float(batch)['L']
        names = [str(n) for n in batch.get('folder') or [f'clip_{j}' for j in range(L.shape[0])]]
        first, stop = batch['keep'] if 'keep' in batch else (0, L.shape[1])
        return {name: inputs_as(L[names.index(name), first:stop], E, bits) for name, E, _ in restored}

    def test_video(self, L: torch.Tensor) -> torch.Tensor:
        """Restore a whole N×T×C×H×W clip, in temporal chunks if `val.num_frame_testing`; output on CPU."""
        v = self.val
        nft = v['num_frame_testing']
        d = L.shape[1]
        if not nft:
            ws0 = self.window_size[0]
            pad = (ws0 - d % ws0) % ws0
            if pad:
                L = torch.cat([L, self._reverse_time(L[:, -pad:])], 1)
            return self.test_clip(L)[:, :d]
        stride = nft - v['num_frame_overlapping']
        starts = list(range(0, d - nft, stride)) + [max(0, d - nft)]
        E = W = None
        for s in starts:
            out = self.test_clip(L[:, s:s + nft])
            if out.shape[1] != min(nft, d):
                raise UserError(f'netG returns {out.shape[1]} frames for {min(nft, d)}; chunked video testing '
                                f'(val.num_frame_testing) needs one output frame per input frame')
            if E is None:
                E = out.new_zeros(L.shape[0], d, *out.shape[2:])
                W = out.new_zeros(L.shape[0], d, 1, 1, 1)
            E[:, s:s + nft] += out
            W[:, s:s + nft] += 1
        return E / W

    def test_clip(self, L: torch.Tensor) -> torch.Tensor:
        """Restore a chunk, in spatial tiles if `val.size_patch_testing` (KAIR's border handling)."""
        tile = self.val['size_patch_testing']
        h, w = L.shape[-2:]
        if not tile:
            return self._run(L)
        overlap, half = self.TILE_OVERLAP, self.TILE_OVERLAP // 2
        stride = tile - overlap
        hs = list(range(0, h - tile, stride)) + [max(0, h - tile)]
        ws = list(range(0, w - tile, stride)) + [max(0, w - tile)]
        E = W = None
        for hi in hs:
            for wi in ws:
                out = self._run(L[..., hi:hi + tile, wi:wi + tile])
                sf = out.shape[-1] // min(tile, w)
                mask = out.new_ones(*out.shape[:2], 1, *out.shape[-2:])
                # drop each tile's inner borders (KAIR's not_overlap_border), in output pixels
                if hi < hs[-1]:
                    mask[..., -half:, :] = 0
                if wi < ws[-1]:
                    mask[..., :, -half:] = 0
                if hi > hs[0]:
                    mask[..., :half, :] = 0
                if wi > ws[0]:
                    mask[..., :, :half] = 0
                if E is None:
                    E = out.new_zeros(*out.shape[:3], h * sf, w * sf)
                    W = out.new_zeros(*out.shape[:2], 1, h * sf, w * sf)
                region = (..., slice(hi * sf, hi * sf + out.shape[-2]), slice(wi * sf, wi * sf + out.shape[-1]))
                E[region] += out * mask
                W[region] += mask
        return E / W

    def _run(self, L: torch.Tensor) -> torch.Tensor:
        """One network call (eval mode, no grad) on a mirror-padded input; float32 output on CPU."""
        h, w = L.shape[-2:]
        mh, mw = self.size_multiple
        ph, pw = (mh - h % mh) % mh, (mw - w % mw) % mw
        if ph:
            L = torch.cat([L, L[..., -ph:, :].flip(-2)], -2)
        if pw:
            L = torch.cat([L, L[..., -pw:].flip(-1)], -1)
        out = self.test(L).float().cpu()
        sf = out.shape[-1] // L.shape[-1]
        return out[..., :h * sf, :w * sf]


PADDINGS = ('replicate', 'reflection', 'reflection_circle', 'circle')


def window_indices(centre: int, length: int, num_frame: int, position: int, padding: str) -> List[int]:
    """Frame indices of the `num_frame`-frame window whose frame `position` is frame `centre` of a clip of `length`
    frames; indices outside the clip are replaced as BasicSR's `generate_frame_indices` does (its windows are
    centred, `position` = num_frame // 2): 'replicate' the end frame, 'reflection' mirrored about the end frame,
    'reflection_circle' continued from the window's other side backwards, 'circle' wrapped by num_frame."""
    last = length - 1
    before, after = position, num_frame - 1 - position
    out = []
    for i in range(centre - before, centre + after + 1):
        if i < 0:
            i = {'replicate': 0, 'reflection': -i, 'reflection_circle': centre + after - i,
                 'circle': num_frame + i}[padding]
        elif i > last:
            i = {'replicate': last, 'reflection': 2 * last - i, 'reflection_circle': centre - before - (i - last),
                 'circle': i - num_frame}[padding]
        out.append(min(max(i, 0), last))  # clips shorter than the window: stay inside
    return out


class SlidingWindowRestorer(VideoRestorer):
    """Whole clips restored one frame at a time by a sliding-window network (EDVR): for each frame, the
    `netG.num_frame` frames around it (frame t at the window's `center_frame_idx`) in, that frame out; windows
    reaching past the clip's ends take frames by `val.padding` (BasicSR's VideoTestDataset: 'reflection_circle'
    for REDS SR, 'replicate' for deblurring). Spatial tiles (`val.size_patch_testing`), `pad_seq`, `flip_seq`
    and scoring are VideoRestorer's; temporal chunks are not (each frame has its own window)."""

    # the window of a network that does not say its own (netG without `num_frame`): EDVR's default of 5 frames
    UNSAID_WINDOW = 5

    def __init__(self, net: nn.Module, device: torch.device, val: Dict[str, Any], num_frame: int, position: int,
                 metrics: Optional[Mapping[str, Metric]] = None, amp: Optional[torch.dtype] = None):
        if val['num_frame_testing']:
            raise UserError(f'val.num_frame_testing: {val["num_frame_testing"]}: a sliding-window network restores '
                            f'each frame from its own window of {num_frame} frames; set it to 0')
        super().__init__(net, device, val, self.NO_WINDOW, 0, metrics, amp)
        self.num_frame, self.position, self.padding = num_frame, position, val['padding']

    @classmethod
    def from_options(cls, net: nn.Module, opt: Dict[str, Any], device: torch.device) -> 'SlidingWindowRestorer':
        """The window from `netG` (`num_frame` frames, frame `center_frame_idx` at its place, else the middle one)
        and the testing options from `val`."""
        netG, v = opt['netG'], opt['val']
        cls.refuse_image_testing(v)
        num_frame = int(declared(netG, 'num_frame', cls.UNSAID_WINDOW))
        centre = declared(netG, 'center_frame_idx', None)  # None: the window's middle frame
        return cls(net, device, v, num_frame, num_frame // 2 if centre is None else int(centre),
                   build_metrics(v, device), amp_dtype(v['amp'], device, 'val.amp'))

    def stream_windows(self, frames: int) -> List['Window']:
        """Blocks of STREAM_FRAMES frames, each read with the frames its first and last frame's windows reach
        (the network's window around each frame): every frame is restored from exactly the frames it would be
        from the whole video, the video's own ends padded by `val.padding`."""
        before, after = self.position, self.num_frame - 1 - self.position
        return [Window(max(0, s - before), min(frames, s + self.STREAM_FRAMES + after), s,
                       min(frames, s + self.STREAM_FRAMES)) for s in range(0, frames, self.STREAM_FRAMES)]

    def test_video(self, L: torch.Tensor) -> torch.Tensor:
        """Each frame of the N×T×C×H×W clip restored from its own window, the clip's ends padded by `val.padding`."""
        d = L.shape[1]
        frames = [self.test_clip(L[:, window_indices(t, d, self.num_frame, self.position, self.padding)])
                  for t in range(d)]
        return torch.cat(frames, 1)

    def _run(self, L: torch.Tensor) -> torch.Tensor:
        """The network's one frame as a clip of one (N×1×C×H×W), for the tiling and the clip bookkeeping."""
        out = super()._run(L)
        return out.unsqueeze(1) if out.dim() == 4 else out
