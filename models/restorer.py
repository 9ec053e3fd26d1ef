"""Inference: a network built for evaluation, the restorers that run it, and the PSNR/SSIM they report.

Nothing here knows about training. `main_test.py` builds the network with `build_eval_network` and
wraps it in its model's `restorer_class`; the training models hand their current eval network
(EMA or netG) to the same restorer, and both run it through models/evaluation.py's one loop.
"""
import copy
import math
import os
import warnings
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from metrics.fidelity import calculate_psnr, calculate_ssim, metric_border, metric_round_y
from metrics.registry import METRICS, Metric
from models.merge_bn import fold_batchnorm
from models.registry import build_network, build_on_meta
from utils.checkpoint import load as load_checkpoint, unwrap_params
from utils.errors import UserError
from utils.image import bit_depth, images_to_float, imresize_bicubic, tensor2uint, to_uint8
from utils.logger import get_logger
from utils.memory import memory_budget

PSNR_CAP = 100.0  # identical images have infinite PSNR; cap it so a mean stays finite
AMP_DTYPES = {'none': None, 'bf16': torch.bfloat16, 'fp16': torch.float16}  # train.amp and val.amp

# (name, restored frames, GT frames), HWC uint8, or uint16 for items of 16-bit data (`utils.image.bit_depth`):
# scored on that range, written as 16-bit PNGs
Item = Tuple[str, List[np.ndarray], List[np.ndarray]]
InputItem = Tuple[str, List[np.ndarray], List[np.ndarray], int]  # (name, input frames, GT frames, upscale)


def build_checked_network(netG: Dict[str, Any], section: str = 'netG') -> nn.Module:
    """The network of `netG` (or of `netD`: `section`), with its sizes checked first.

    A negative integer (a width, count or channel number) is a user error naming the key; the
    network is then built without memory (`torch.device('meta')`) to count its parameters, and one
    whose weights alone exceed the memory this process may still take (the machine's, or a job's memory
    cgroup limit: utils/memory.py) is refused with its size,
    instead of failing to allocate; a parameter without elements (e.g. `nc: 0`) is a user error too.
    """
    for key, value in netG.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        bad = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v < 0]
        if bad:
            raise UserError(f'{section}.{key}: {value} must not be negative (widths, counts and channel numbers '
                            f'are sizes)')
    count = _parameter_count(netG, section)
    budget = memory_budget()
    if count is not None and budget is not None and 4 * count > budget.available:
        raise UserError(f'{section} ({netG["net_type"]}): {count:,} parameters, {4 * count / 1e9:,.1f} GB of '
                        f'float32 weights alone, more than {budget.has(f"{budget.available / 1e9:.1f} GB")}; '
                        f'check its sizes ({", ".join(k for k, v in netG.items() if isinstance(v, (int, list)))})')
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='Initializing zero-element tensors')
        net = build_network(netG, f'{section}.net_type')
    empty = [name for name, p in net.named_parameters() if p.numel() == 0]
    if empty:
        raise UserError(f'{section} ({netG["net_type"]}): parameter {empty[0]} has no elements '
                        f'(a width or channel count of 0 in {section}?)')
    return net


def _parameter_count(netG: Dict[str, Any], section: str) -> Optional[int]:
    """Parameters of the network, counted on the meta device (no memory); None if it cannot be built there."""
    probe = build_on_meta(netG, f'{section}.net_type')
    return None if probe is None else sum(p.numel() for p in probe.parameters())


def build_metrics(val: Mapping[str, Any], device: torch.device) -> Dict[str, Metric]:
    """The metrics `val.metrics` names, in its order, each built once with its own `val` keys on `device`
    (the evaluation's): a restorer keeps them for every validation of the run."""
    return {name: METRICS.get(name, 'val.metrics')(device=device, **METRICS.read(name, val, '', 'val.metrics'))
            for name in val['metrics']}


def load_weights(net: nn.Module, path: str, strict: bool, prefer: str, where: str,
                 allow_unsafe: bool = False, merge_bn: bool = False) -> bool:
    """Load KAIR (bare) or BasicSR/VRT (`params`/`params_ema`) weights; mismatches are user errors.

    With `merge_bn`, weights saved after BatchNorm was folded (their names are those of the folded
    network, not of `net`) are loaded into `net` folded first. Returns whether `net` was folded.
    """
    try:
        state = unwrap_params(load_checkpoint(path, allow_unsafe), prefer)
    except UserError as e:
        raise UserError(f'{where}: {e}') from None  # which option named the file
    folded = False
    if merge_bn and set(state) != set(net.state_dict()):
        candidate = copy.deepcopy(net)
        fold_batchnorm(candidate)
        if set(state) == set(candidate.state_dict()):
            fold_batchnorm(net)
            folded = True
    try:
        result = net.load_state_dict(state, strict=strict)
    except RuntimeError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        raise UserError(f'{where}: {path} does not fit netG: {" ".join(lines[1:3])[:300]}') from None
    if not strict and (result.missing_keys or result.unexpected_keys):
        get_logger().warning(f'{where}: loaded non-strictly; missing {len(result.missing_keys)}, '
                             f'unexpected {len(result.unexpected_keys)} keys')
    return folded


def build_eval_network(netG: Dict[str, Any], weights: str, device: torch.device, where: str,
                       allow_unsafe_load: bool = False, merge_bn: bool = False) -> nn.Module:
    """netG with exactly the weights of `weights` (strict), in eval mode on `device`.

    No initialisation, optimizer, loss, DDP or EMA: testing needs only the trained weights. From a
    BasicSR/VRT file holding both, an `_E.pth` name takes `params_ema`, any other name `params`.
    With `merge_bn`, weights saved before or after the BatchNorm fold both load.
    """
    net = build_checked_network(netG)
    prefer = 'params_ema' if weights.endswith('_E.pth') else 'params'
    load_weights(net, weights, True, prefer, where, allow_unsafe_load, merge_bn)
    return net.to(device).eval()


def amp_dtype(amp: str, device: torch.device, key: str) -> Optional[torch.dtype]:
    """The autocast dtype of `train.amp` or `val.amp` (`key`) on `device`, None for "none".

    fp16 needs CUDA: its CPU autocast kernels are neither fast nor well covered (and training would need
    loss scaling there); bf16 has float32's range and runs on any device.
    """
    if amp == 'fp16' and device.type != 'cuda':
        raise UserError(f'{key}: "fp16" needs a CUDA device (this run uses {device.type}); use "bf16" or "none"')
    return AMP_DTYPES[amp]


class ImageRestorer:
    """Runs an eval network on whole images (or in tiles, optionally x8) and scores the results.

    `tile` > 0 restores large images in tiles of at most tile x tile input pixels that overlap by
    `tile_overlap` and are averaged where they overlap (KAIR's SwinIR testing), so memory no longer
    grows with the image; networks that need a multiple of their window pad inside. `self_ensemble`
    averages the outputs for the 8 flips and rotations of the input (KAIR's x8 testing). `amp` (an
    autocast dtype, `val.amp`) runs each network call in mixed precision; its outputs are float32 from
    there on, so tiles and flips are averaged at full precision.
    """

    log_items = False  # log every evaluated item, not only the means (video restorers)

    def __init__(self, net: nn.Module, device: torch.device, metric_border: int, tile: int = 0,
                 tile_overlap: int = 0, self_ensemble: bool = False, round_y: bool = False,
                 metrics: Optional[Mapping[str, Metric]] = None, amp: Optional[torch.dtype] = None):
        if tile and tile_overlap >= tile:
            raise UserError(f'val.tile_overlap: {tile_overlap} must be smaller than val.tile {tile}')
        self.net = net
        self.device = device
        self.amp = amp
        self.metric_border = metric_border  # pixels cropped at each border before PSNR/SSIM (and the metrics)
        self.round_y = round_y              # Y rounded to integers before the Y scores
        self.tile, self.tile_overlap, self.self_ensemble = tile, tile_overlap, self_ensemble
        self.metrics: Dict[str, Metric] = dict(metrics or {})  # `val.metrics`, scored after the four

    @classmethod
    def from_options(cls, net: nn.Module, opt: Dict[str, Any], device: torch.device) -> 'ImageRestorer':
        """The restorer the options ask for; scoring follows the test set's `metric_border`, `metric_round_y`."""
        v = opt['val']
        test = opt['datasets']['test'] if 'test' in opt['datasets'] else {'scale': opt['scale']}
        border, round_y = cls.scoring_of(test)
        return cls(net, device, metric_border=border, tile=v['tile'], tile_overlap=v['tile_overlap'],
                   self_ensemble=v['self_ensemble'], round_y=round_y, metrics=build_metrics(v, device),
                   amp=amp_dtype(v['amp'], device, 'val.amp'))

    @staticmethod
    def scoring_of(test: Dict[str, Any]) -> Tuple[int, bool]:
        """(metric_border, round_y) of a test section: its `metric_border`, `metric_round_y`, else KAIR's choice
        for its scale (a section without `scale` restores at 1)."""
        return scoring(test, test['scale'] if 'scale' in test else 1)

    def for_test_set(self, test: Dict[str, Any]) -> 'ImageRestorer':
        """This restorer (the same network and metrics) scoring as the test section `test` asks: several test sets
        of one run each keep their own border (main_test)."""
        out = copy.copy(self)
        out.metric_border, out.round_y = self.scoring_of(test)
        return out

    def score(self, E: Sequence[np.ndarray], H: Optional[Sequence[np.ndarray]]) -> List[float]:
        """[psnr, ssim, psnr_y, ssim_y, *`val.metrics`] of one restored item, with this restorer's conventions;
        without targets (`H` None) only the `val.metrics`, which must then all be no-reference ones."""
        if H is None:
            return no_reference_metrics(E, self.metric_border, self.metrics)
        return item_metrics(E, H, self.metric_border, self.round_y, self.metrics)

    def stream_windows(self, frames: int) -> List['Window']:
        """How a sequence of `frames` frames (a video) is restored piece by piece, in order: here each frame
        alone (an image network). Video restorers take windows of several frames."""
        return [Window(t, t + 1, t, t + 1) for t in range(frames)]

    def _forward(self, *inputs: Any) -> torch.Tensor:
        """One network call, under autocast with `amp`; the output in float32."""
        if self.amp is None:
            return self.net(*inputs)
        with torch.autocast(self.device.type, dtype=self.amp):
            out = self.net(*inputs)
        return out.float()

    @staticmethod
    def inputs(batch: Dict[str, Any]) -> Tuple[torch.Tensor, ...]:
        """The network's positional inputs from a batch (training and testing alike)."""
        return (batch['L'],)

    @torch.no_grad()
    def test(self, *inputs: torch.Tensor) -> torch.Tensor:
        """The restored image of `inputs` (L first) in eval mode; the network's mode is left as it was."""
        net = self.net
        was_training = net.training
        net.eval()
        try:
            if not self.self_ensemble:
                return self._tiled(inputs)
            outs = []
            for k in range(8):  # rotations by k % 4 quarter turns, mirrored for k >= 4
                L = torch.rot90(inputs[0], k % 4, (-2, -1))
                L = L.flip(-1) if k >= 4 else L
                out = self._tiled((L, *inputs[1:]))
                out = out.flip(-1) if k >= 4 else out
                outs.append(torch.rot90(out, -(k % 4), (-2, -1)))
            return torch.stack(outs).mean(0)
        finally:
            net.train(was_training)

    def _tiled(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        """net(*inputs) whole, or over overlapping tiles of L averaged where they overlap."""
        L, rest = inputs[0], [t.to(self.device) if torch.is_tensor(t) else t for t in inputs[1:]]
        h, w = L.shape[-2:]
        if not self.tile or (h <= self.tile and w <= self.tile):
            return self._forward(L.to(self.device), *rest)
        th, tw = min(self.tile, h), min(self.tile, w)
        stride = self.tile - self.tile_overlap
        E = W = None
        for top in _starts(h, th, stride):
            for left in _starts(w, tw, stride):
                out = self._forward(L[..., top:top + th, left:left + tw].to(self.device), *rest)
                sf = out.shape[-1] // tw
                if E is None:
                    E = out.new_zeros(*out.shape[:-2], h * sf, w * sf)
                    W = out.new_zeros(1, 1, h * sf, w * sf)
                E[..., top * sf:(top + th) * sf, left * sf:(left + tw) * sf] += out
                W[..., top * sf:(top + th) * sf, left * sf:(left + tw) * sf] += 1
        return E / W

    def restore(self, batch: Dict[str, Any]) -> List[Item]:
        """Restore one evaluation batch: (name, restored frames, ground-truth frames) per item.

        Images are single-frame items; video restorers return whole clips. Frames are HWC uint8, uint16
        where the item's images are 16-bit (its L or H a uint16 tensor). A batch without targets (no `H`:
        inputs of one's own) gives None for the ground truth.
        """
        bits = bit_depth(batch.get('L'), batch.get('H'))
        batch = images_to_float(batch)
        out = self.test(*self.inputs(batch))
        H = batch.get('H')
        return [(_image_name(batch, j), [tensor2uint(out[j], bits)], None if H is None else [tensor2uint(H[j], bits)])
                for j in range(out.shape[0])]

    def input_items(self, batch: Dict[str, Any]) -> List[InputItem]:
        """The inputs themselves as restored items: (name, input frames, GT frames, upscale) per item.

        The score of doing nothing, to compare the restored items with: L against H when they have
        the same size (denoising, deblurring, JPEG), else L upscaled to H's size by MATLAB's bicubic
        (super-resolution; `upscale` is the factor, 1 for none). Extra input channels (noise level
        maps, kernels) are left out; items whose L cannot be compared with H are left out too.
        """
        bits = bit_depth(batch.get('L'), batch.get('H'))
        batch = images_to_float(batch)
        out = []
        for j in range(batch['H'].shape[0]):
            frame = input_as_target(batch['L'][j], batch['H'][j], bits)
            if frame is not None:
                out.append((_image_name(batch, j), [frame[0]], [tensor2uint(batch['H'][j], bits)], frame[1]))
        return out

    def own_inputs(self, batch: Dict[str, Any], restored: Sequence[Item]) -> Dict[str, Optional[List[np.ndarray]]]:
        """Inputs of one's own (a batch without targets) as the comparison page shows them beside `restored`
        (this batch's `restore`, or some of its items): per item name, its input frames each of its restored
        frame's size (the input itself, or for super-resolution upscaled by MATLAB's bicubic, as `input_items`
        scales to the target); None when the output is no whole multiple of the input."""
        bits = bit_depth(batch.get('L'))
        L = images_to_float(batch)['L']
        index = {_image_name(batch, j): j for j in range(L.shape[0])}
        return {name: _inputs_as(L[index[name]][None], E, bits) for name, E, _ in restored}


def _inputs_as(L: torch.Tensor, E: Sequence[np.ndarray], bits: int) -> Optional[List[np.ndarray]]:
    """The T×C×H×W input frames `L` each as an image of its restored frame's (`E`, HWC) size and channels; None
    when one cannot be (see input_as_size)."""
    out = [input_as_size(frame, e.shape[2], e.shape[:2], bits) for frame, e in zip(L, E)]
    return None if any(f is None for f in out) else [f[0] for f in out]


def input_as_target(L: torch.Tensor, H: torch.Tensor, bits: int = 8) -> Optional[Tuple[np.ndarray, int]]:
    """CHW float L as an HWC uint8 (`bits` 16: uint16) image of H's size, and the bicubic factor it took (1: none).

    Only L's first channels (as many as H has) are the image; None when L is not H's size or an
    integer fraction of it.
    """
    return input_as_size(L, H.shape[0], H.shape[-2:], bits)


def input_as_size(L: torch.Tensor, channels: int, size: Sequence[int],
                  bits: int = 8) -> Optional[Tuple[np.ndarray, int]]:
    """input_as_target for a target of `channels` channels and `size` (height, width)."""
    L = L[:channels]
    (h, w), (lh, lw) = size, L.shape[-2:]
    if (h, w) == (lh, lw):
        return tensor2uint(L, bits), 1
    if h % lh or w % lw or h // lh != w // lw:
        return None
    factor = h // lh
    up = imresize_bicubic(L.float().cpu().permute(1, 2, 0).numpy().astype(np.float64), factor)
    return tensor2uint(torch.from_numpy(np.ascontiguousarray(up)).permute(2, 0, 1), bits), factor


class ConditionedRestorer(ImageRestorer):
    """Networks fed (L, C), C a noise level or degradation map per image (KAIR's `plain2`: FFDNet)."""

    @staticmethod
    def inputs(batch: Dict[str, Any]) -> Tuple[torch.Tensor, ...]:
        return batch['L'], batch['C']


class KernelRestorer(ImageRestorer):
    """USRNet (KAIR's `plain4`): fed (L, k, sf, sigma), scored at the test set's `sf_validation`.

    Whole images only: the network models the blur as circular over the whole image, which tiles
    break, and the x8 ensemble would have to move the decimation grid with the flips.
    """

    @classmethod
    def from_options(cls, net: nn.Module, opt: Dict[str, Any], device: torch.device) -> 'KernelRestorer':
        v = opt['val']
        if v['tile'] or v['self_ensemble']:
            key = 'val.tile' if v['tile'] else 'val.self_ensemble'
            raise UserError(f'{key}: model {opt["model"]} restores whole images (its blur model is circular over '
                            f'the whole image); set it to 0/false')
        test = opt['datasets']['test'] if 'test' in opt['datasets'] else {}
        border, round_y = cls.scoring_of(test)
        return cls(net, device, metric_border=border, round_y=round_y, metrics=build_metrics(v, device),
                   amp=amp_dtype(v['amp'], device, 'val.amp'))

    @staticmethod
    def scoring_of(test: Dict[str, Any]) -> Tuple[int, bool]:
        """Scored at the test set's `sf_validation` (none cropped without one)."""
        return scoring(test, test['sf_validation']) if 'sf_validation' in test else (0, False)

    @staticmethod
    def inputs(batch: Dict[str, Any]) -> Tuple[Any, ...]:
        sf = batch['sf']  # collated: a tensor; one item made into a batch (check_sample): a list
        scales = sorted({int(s) for s in (sf.tolist() if torch.is_tensor(sf) else sf)})
        if len(scales) != 1:
            raise ValueError(f'a batch must share one scale factor, got {scales}')
        return batch['L'], batch['k'], scales[0], batch['sigma']


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
        window_size = list(netG['window_size'] if 'window_size' in netG else cls.NO_WINDOW)
        if 'clip_size' in netG:  # RVRT restores clips of clip_size frames: whole clips must divide by it too
            window_size[0] = math.lcm(int(window_size[0]), int(netG['clip_size']))
        spike_chans = netG['spike_chans'] if 'spike_chans' in netG else 0
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
        return {name: _inputs_as(L[names.index(name), first:stop], E, bits) for name, E, _ in restored}

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


class Window(NamedTuple):
    """A piece of a video restored at once (`stream_windows`): frames start..stop-1 go in, and the restored
    frames keep_start..keep_stop-1 (inside them) are kept; the kept ranges of a video's windows tile it."""
    start: int
    stop: int
    keep_start: int
    keep_stop: int


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

    def __init__(self, net: nn.Module, device: torch.device, val: Dict[str, Any], num_frame: int, position: int,
                 metrics: Optional[Mapping[str, Metric]] = None, amp: Optional[torch.dtype] = None):
        if val['num_frame_testing']:
            raise UserError(f'val.num_frame_testing: {val["num_frame_testing"]}: a sliding-window network restores '
                            f'each frame from its own window of {num_frame} frames; set it to 0')
        super().__init__(net, device, val, self.NO_WINDOW, 0, metrics, amp)
        self.num_frame, self.position, self.padding = num_frame, position, val['padding']

    @classmethod
    def from_options(cls, net: nn.Module, opt: Dict[str, Any], device: torch.device) -> 'SlidingWindowRestorer':
        netG, v = opt['netG'], opt['val']
        cls.refuse_image_testing(v)
        num_frame = int(netG['num_frame']) if 'num_frame' in netG else 5
        centre = netG['center_frame_idx'] if 'center_frame_idx' in netG else None
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
        d = L.shape[1]
        frames = [self.test_clip(L[:, window_indices(t, d, self.num_frame, self.position, self.padding)])
                  for t in range(d)]
        return torch.cat(frames, 1)

    def _run(self, L: torch.Tensor) -> torch.Tensor:
        """The network's one frame as a clip of one (N×1×C×H×W), for the tiling and the clip bookkeeping."""
        out = super()._run(L)
        return out.unsqueeze(1) if out.dim() == 4 else out


SCORING_KEYS = ('metric_border', 'metric_round_y')  # a test section's scoring conventions (data/datasets/image.py)


def scoring(test: Dict[str, Any], scale: int) -> Tuple[int, bool]:
    """(border cropped before PSNR/SSIM, Y rounded) for a test section at `scale`: its `metric_border` and
    `metric_round_y` when its dataset declares them (null: KAIR's choice for the scale), else KAIR's choice."""
    given = {key: test[key] if key in test else None for key in SCORING_KEYS}
    return metric_border(scale, given['metric_border']), metric_round_y(scale, given['metric_round_y'])


def _starts(size: int, tile: int, stride: int) -> List[int]:
    """Tile origins covering 0..size: every `stride`, the last one flush with the end."""
    return list(range(0, size - tile, stride)) + [size - tile]


def item_metrics(E: Sequence[np.ndarray], H: Sequence[np.ndarray], border: int, round_y: bool = False,
                 metrics: Optional[Mapping[str, Metric]] = None) -> List[float]:
    """Metrics of one item (an image, or a clip: mean over its frames): the four of `image_metrics`, then
    each of `metrics` on the same frames with the same `border` cropped (a no-reference one without H).
    PSNR/SSIM score 16-bit frames on their own range; the `val.metrics` (LPIPS, DISTS, NIQE: networks and
    statistics fitted to 8-bit images) take them rounded to 8 bits."""
    extra = list((metrics or {}).values())
    per_frame = np.array([image_metrics(e, h, border, round_y) + [
        float(m(_crop(to_uint8(e), border), _crop(to_uint8(h), border) if m.needs_reference else None))
        for m in extra] for e, h in zip(E, H)], dtype=np.float64)
    return per_frame.mean(axis=0).tolist()


def no_reference_metrics(E: Sequence[np.ndarray], border: int, metrics: Mapping[str, Metric]) -> List[float]:
    """Each of `metrics` (no-reference ones: NIQE) on an item's frames without targets, as `item_metrics` scores
    them: `border` cropped, rounded to 8 bits, the mean over the frames."""
    wrong = [name for name, m in metrics.items() if m.needs_reference]
    if wrong:
        raise ValueError(f'metrics {wrong} need targets; items without targets score no-reference metrics only')
    if not metrics:
        return []
    return np.array([[float(m(_crop(to_uint8(e), border), None)) for m in metrics.values()] for e in E],
                    dtype=np.float64).mean(axis=0).tolist()


def _crop(img: np.ndarray, border: int) -> np.ndarray:
    """`img` without `border` pixels at each side, as PSNR/SSIM see it (the frame when 0)."""
    return img[border:-border, border:-border] if border else img


def image_metrics(E: np.ndarray, H: np.ndarray, border: int, round_y: bool = False) -> List[float]:
    """[psnr, ssim, psnr_y, ssim_y] of one restored image against its ground truth."""
    psnr = min(calculate_psnr(E, H, border), PSNR_CAP)
    ssim = calculate_ssim(E, H, border)
    if E.ndim == 3 and E.shape[2] == 3:
        psnr_y = min(calculate_psnr(E, H, border, test_y_channel=True, round_y=round_y), PSNR_CAP)
        ssim_y = calculate_ssim(E, H, border, test_y_channel=True, round_y=round_y)
    else:
        psnr_y, ssim_y = psnr, ssim
    return [psnr, ssim, psnr_y, ssim_y]


def _image_name(batch: Dict[str, Any], j: int) -> str:
    """An item's name: the batch's `name` when it gives one (inputs of one's own: their relative path), else its
    file name without extension."""
    if batch.get('name'):
        return str(batch['name'][j])
    path = batch.get('L_path') or batch.get('H_path')
    if isinstance(path, (list, tuple)) and path:
        return os.path.splitext(os.path.basename(path[j]))[0]
    return f'image_{j}'
