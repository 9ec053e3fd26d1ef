"""The restorers that run an eval network on a test set's items: whole images, in tiles, the x8 ensemble.

Nothing here knows about training. `main_test.py` builds the network (models/network_loading.py) and wraps it
in its model's `restorer_class`; the training models hand their current eval network (EMA or netG) to the same
restorer, and both run it through models/evaluation.py's one loop. What a score means is models/scoring.py's;
the restorers of clips and videos are models/video_restorer.py's.
"""
import copy
import os
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from metrics.registry import Metric
from models.scoring import build_metrics, item_metrics, no_reference_metrics, scoring
from utils.errors import UserError
from utils.image import bit_depth, images_to_float, imresize_bicubic, tensor2uint
from utils.registry import declared

AMP_DTYPES = {'none': None, 'bf16': torch.bfloat16, 'fp16': torch.float16}  # train.amp and val.amp

# (name, restored frames, GT frames), HWC uint8, or uint16 for items of 16-bit data (`utils.image.bit_depth`):
# scored on that range, written as 16-bit PNGs
Item = Tuple[str, List[np.ndarray], List[np.ndarray]]
InputItem = Tuple[str, List[np.ndarray], List[np.ndarray], int]  # (name, input frames, GT frames, upscale)


def amp_dtype(amp: str, device: torch.device, key: str) -> Optional[torch.dtype]:
    """The autocast dtype of `train.amp` or `val.amp` (`key`) on `device`, None for "none".

    fp16 needs CUDA: its CPU autocast kernels are neither fast nor well covered (and training would need
    loss scaling there); bf16 has float32's range and runs on any device.
    """
    if amp == 'fp16' and device.type != 'cuda':
        raise UserError(f'{key}: "fp16" needs a CUDA device (this run uses {device.type}); use "bf16" or "none"')
    return AMP_DTYPES[amp]


class Window(NamedTuple):
    """A piece of a video restored at once (`stream_windows`): frames start..stop-1 go in, and the restored
    frames keep_start..keep_stop-1 (inside them) are kept; the kept ranges of a video's windows tile it."""
    start: int
    stop: int
    keep_start: int
    keep_stop: int


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
        test = declared(opt['datasets'], 'test', {'scale': opt['scale']})  # without one: scored at the run's scale
        border, round_y = cls.scoring_of(test)
        return cls(net, device, metric_border=border, tile=v['tile'], tile_overlap=v['tile_overlap'],
                   self_ensemble=v['self_ensemble'], round_y=round_y, metrics=build_metrics(v, device),
                   amp=amp_dtype(v['amp'], device, 'val.amp'))

    @staticmethod
    def scoring_of(test: Dict[str, Any]) -> Tuple[int, bool]:
        """(metric_border, round_y) of a test section: its `metric_border`, `metric_round_y`, else KAIR's choice
        for its scale (a section without `scale` restores at 1)."""
        return scoring(test, declared(test, 'scale', 1))

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
        return {name: inputs_as(L[index[name]][None], E, bits) for name, E, _ in restored}


def inputs_as(L: torch.Tensor, E: Sequence[np.ndarray], bits: int) -> Optional[List[np.ndarray]]:
    """The T×C×H×W input frames `L` each as an image of its restored frame's (`E`, HWC) size and channels, as the
    comparison page shows them beside the outputs (images and clips alike); None when one cannot be (see
    input_as_size)."""
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
        """(L, C): the image and its condition map."""
        return batch['L'], batch['C']


class KernelRestorer(ImageRestorer):
    """USRNet (KAIR's `plain4`): fed (L, k, sf, sigma), scored at the test set's `sf_validation`.

    Whole images only: the network models the blur as circular over the whole image, which tiles
    break, and the x8 ensemble would have to move the decimation grid with the flips.
    """

    @classmethod
    def from_options(cls, net: nn.Module, opt: Dict[str, Any], device: torch.device) -> 'KernelRestorer':
        """The restorer of whole images (`val.tile` and `val.self_ensemble` refused), scored at the test set's
        `sf_validation`."""
        v = opt['val']
        if v['tile'] or v['self_ensemble']:
            key = 'val.tile' if v['tile'] else 'val.self_ensemble'
            raise UserError(f'{key}: model {opt["model"]} restores whole images (its blur model is circular over '
                            f'the whole image); set it to 0/false')
        test = declared(opt['datasets'], 'test', {})
        border, round_y = cls.scoring_of(test)
        return cls(net, device, metric_border=border, round_y=round_y, metrics=build_metrics(v, device),
                   amp=amp_dtype(v['amp'], device, 'val.amp'))

    @staticmethod
    def scoring_of(test: Dict[str, Any]) -> Tuple[int, bool]:
        """Scored at the test set's `sf_validation` (none cropped without one)."""
        sf = declared(test, 'sf_validation', None)  # a dataset of KAIR's usrnet kind declares it
        return (0, False) if sf is None else scoring(test, sf)

    @staticmethod
    def inputs(batch: Dict[str, Any]) -> Tuple[Any, ...]:
        """(L, k, sf, sigma): the image, its blur kernel, the batch's one scale factor and its noise level."""
        sf = batch['sf']  # collated: a tensor; one item made into a batch (check_sample): a list
        scales = sorted({int(s) for s in (sf.tolist() if torch.is_tensor(sf) else sf)})
        if len(scales) != 1:
            raise ValueError(f'a batch must share one scale factor, got {scales}')
        return batch['L'], batch['k'], scales[0], batch['sigma']


def _starts(size: int, tile: int, stride: int) -> List[int]:
    """Tile origins covering 0..size: every `stride`, the last one flush with the end."""
    return list(range(0, size - tile, stride)) + [size - tile]


def _image_name(batch: Dict[str, Any], j: int) -> str:
    """An item's name: the batch's `name` when it gives one (inputs of one's own: their relative path), else its
    file name without extension."""
    if batch.get('name'):
        return str(batch['name'][j])
    path = batch.get('L_path') or batch.get('H_path')
    if isinstance(path, (list, tuple)) and path:
        return os.path.splitext(os.path.basename(path[j]))[0]
    return f'image_{j}'
