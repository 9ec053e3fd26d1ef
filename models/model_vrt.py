"""The video model (VRT and other clip-to-clip networks): ModelPlain's training plus two things.

1. `train.fix_iter` / `fix_keys` / `fix_lr_mul`: the flow network and the deformable offsets start
   frozen, without changing the autograd graph (so DDP's static graph survives the unfreeze).
2. Whole-clip testing in temporal chunks and spatial tiles (options from `val`), and per-clip metrics.
"""
import math
from typing import Any, Dict, List, Tuple

import numpy as np
import torch
from torch import nn

from models.model_plain import ModelPlain
from models.registry import register_model
from utils.errors import UserError
from utils.image import tensor2uint
from utils.logger import get_logger


@register_model('vrt')
class ModelVRT(ModelPlain):
    """Video restoration: N×T×C×H×W clips in, N×T×C'×H'×W' out.

    **Freezing for `fix_iter` iterations.** The reference trainers (KAIR, BasicSR) freeze the
    parameters whose names contain one of `fix_keys` (SpyNet, the deformable offset convs) by
    setting `requires_grad=False`, and unfreeze them at `fix_iter`. That changes the autograd
    graph, which DDP's `static_graph` cannot follow, so KAIR stops on purpose there and asks the
    user to resume. Here `requires_grad` stays True throughout; the graph (and the static graph
    DDP recorded) never changes. Instead:
      - the fix_keys parameters form their own optimizer param group with
        lr = G_optimizer_lr * fix_lr_mul (the normal group comes first, so `current_lr` reports
        the main lr); the scheduler scales each group from its own base lr;
      - for iterations 1..fix_iter, after backward (and after DDP's all-reduce) their `.grad` is
        set to None. Adam/AdamW skip parameters without a gradient entirely: no step, no moment
        update, no weight decay, no optimizer state created (gradient clipping ignores them too).
        That is exactly what a frozen parameter gets;
      - from iteration fix_iter+1 on they train normally, and this is logged once.
    The cost is computing (and all-reducing) gradients that are then dropped during the fix
    phase, a few percent of an iteration for SpyNet plus the offset convs. KAIR unfreezes at
    iteration == fix_iter, i.e. it freezes fix_iter-1 iterations; here exactly fix_iter.
    A fix_keys entry that matches no parameter is a user error (a typo would otherwise train
    everything from the start).

    **Testing** (`restore`) follows KAIR's `test`/`_test_video`/`_test_clip` but reads its
    options from `val` (KAIR reads pad_seq/flip_seq/center_frame_only from `train`):
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
    All input channels (RGB, noise map, spikes) go to the network; the output and GT are RGB.
    """

    TILE_OVERLAP = 20  # KAIR's fixed spatial tile overlap (VRT's main_test default --tile_overlap 20)

    def __init__(self, opt: Dict[str, Any], device: torch.device, allow_unsafe_load: bool = False):
        t = opt['train']
        self.fix_iter = int(t['fix_iter'])
        self.fix_keys = list(t['fix_keys'])
        self.fix_lr_mul = float(t['fix_lr_mul'])
        self.fix_params: List[nn.Parameter] = []
        super().__init__(opt, device, allow_unsafe_load)  # calls self.param_groups()
        self._check_val_options()
        self._frozen = bool(self.fix_params)
        log = get_logger()
        if self.fix_iter > 0 and not self.fix_params:
            log.warning(f'train.fix_iter: {self.fix_iter} has no effect: train.fix_keys is empty')
        elif self.fix_params:
            n = sum(p.numel() for p in self.fix_params)
            log.info(f'train.fix_keys {self.fix_keys}: {len(self.fix_params)} tensors ({n:,} parameters) '
                     f'frozen for the first {self.fix_iter} iterations, then trained with lr x {self.fix_lr_mul:g}')

    def param_groups(self) -> List[Dict[str, Any]]:
        """[normal parameters, fix_keys parameters with lr * fix_lr_mul]; one group without fix_iter or fix_keys.

        As in KAIR, the separate group (and so `fix_lr_mul`) exists only when the flow network is
        fixed at the start (`fix_iter` > 0); its lower lr then also applies after the release.
        """
        if not self.fix_keys:
            return super().param_groups()
        bad = [k for k in self.fix_keys if not isinstance(k, str) or not k]
        if bad:
            raise UserError(f'train.fix_keys: entries must be non-empty strings (parts of parameter names), got {bad}')
        named = [(n, p) for n, p in self.net_g.named_parameters() if p.requires_grad]
        unmatched = [k for k in self.fix_keys if not any(k in n for n, _ in named)]
        if unmatched:
            raise UserError(f'train.fix_keys: {unmatched} match no parameter name of netG '
                            f'({self.opt["netG"]["net_type"]}), e.g. {named[0][0] if named else "-"}')
        fixed = [(n, p) for n, p in named if any(k in n for k in self.fix_keys)]
        normal = [p for n, p in named if not any(k in n for k in self.fix_keys)]
        if not normal:
            raise UserError(f'train.fix_keys: {self.fix_keys} match every parameter of netG')
        if self.fix_iter <= 0:
            if self.fix_lr_mul != 1:
                get_logger().info(f'train.fix_lr_mul: {self.fix_lr_mul:g} has no effect without train.fix_iter > 0 '
                                  f'(KAIR applies it only with a fixed flow network): one lr for all parameters')
            return super().param_groups()
        self.fix_params = [p for _, p in fixed]
        lr = float(self.train_opt['G_optimizer_lr'])
        return [{'params': normal}, {'params': self.fix_params, 'lr': lr * self.fix_lr_mul}]

    def after_backward(self, step: int) -> None:
        """Drop the fix_keys gradients during the fix phase (see the class docstring)."""
        if step <= self.fix_iter:
            for p in self.fix_params:
                p.grad = None
        elif self._frozen:
            self._frozen = False
            get_logger().info(f'iteration {step}: past train.fix_iter={self.fix_iter}; the parameters matching '
                              f'fix_keys {self.fix_keys} train from now on (lr x {self.fix_lr_mul:g})')

    def training_state(self) -> Dict[str, Any]:
        return {**super().training_state(), 'fix_released': not self._frozen}

    def load_state(self, weights: Dict[str, Any], training: Dict[str, Any]) -> None:
        """As ModelPlain; a run resumed after fix_iter does not announce the unfreeze again."""
        super().load_state(weights, training)
        if training.get('fix_released'):
            self._frozen = False

    def _check_val_options(self) -> None:
        v, ws = self.opt['val'], self._window_size()
        nft, nfo, tile = v['num_frame_testing'], v['num_frame_overlapping'], v['size_patch_testing']
        if nft and nfo >= nft:
            raise UserError(f'val.num_frame_overlapping: {nfo} must be smaller than val.num_frame_testing {nft}')
        if tile and tile <= self.TILE_OVERLAP:
            raise UserError(f'val.size_patch_testing: {tile} must be larger than the tile overlap '
                            f'{self.TILE_OVERLAP} (or 0 for whole frames)')
        if tile and tile % ws[2]:
            raise UserError(f'val.size_patch_testing: {tile} must be a multiple of netG.window_size[-1] = {ws[2]}')

    def _window_size(self) -> Tuple[int, int, int]:
        ws = self.opt['netG'].get('window_size') or [1, 8, 8]
        return int(ws[0]), int(ws[1]), int(ws[2])

    def _reverse_time(self, clip: torch.Tensor) -> torch.Tensor:
        """N×T×C×H×W played backwards: frames reversed, and the spike channels within each frame."""
        clip = clip.flip(1)
        spike_chans = int(self.opt['netG'].get('spike_chans') or 0)
        if spike_chans:
            c = clip.shape[2] - spike_chans
            clip = torch.cat([clip[:, :, :c], clip[:, :, c:].flip(2)], 2)
        return clip

    def restore(self, batch: Dict[str, Any]) -> List[Tuple[str, List[np.ndarray], List[np.ndarray]]]:
        """(clip name, restored frames, GT frames) per clip of the batch; frames are HWC uint8."""
        v = self.opt['val']
        L, H = batch['L'], batch['H']
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
        if v['center_frame_only']:
            E = E[:, n // 2:n // 2 + 1]
            if H.shape[1] == n:
                H = H[:, n // 2:n // 2 + 1]
        if H.shape[1] != E.shape[1]:
            raise UserError(f'datasets.test: clips have {n} input but {H.shape[1]} ground-truth frames')
        names = batch.get('folder') or [f'clip_{j}' for j in range(L.shape[0])]
        return [(str(names[j]), [tensor2uint(E[j, t]) for t in range(E.shape[1])],
                 [tensor2uint(H[j, t]) for t in range(H.shape[1])]) for j in range(L.shape[0])]

    def test_video(self, L: torch.Tensor) -> torch.Tensor:
        """Restore a whole N×T×C×H×W clip, in temporal chunks if `val.num_frame_testing`; output on CPU."""
        v = self.opt['val']
        nft = v['num_frame_testing']
        d = L.shape[1]
        if not nft:
            ws0 = self._window_size()[0]
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
                raise UserError(f'model "vrt": the network returns {out.shape[1]} frames for {min(nft, d)}; video '
                                f'testing needs one output frame per input frame')
            if E is None:
                E = out.new_zeros(L.shape[0], d, *out.shape[2:])
                W = out.new_zeros(L.shape[0], d, 1, 1, 1)
            E[:, s:s + nft] += out
            W[:, s:s + nft] += 1
        return E / W

    def test_clip(self, L: torch.Tensor) -> torch.Tensor:
        """Restore a chunk, in spatial tiles if `val.size_patch_testing` (KAIR's border handling)."""
        tile = self.opt['val']['size_patch_testing']
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
        _, wh, ww = self._window_size()
        h, w = L.shape[-2:]
        mh, mw = math.lcm(8, wh), math.lcm(8, ww)
        ph, pw = (mh - h % mh) % mh, (mw - w % mw) % mw
        if ph:
            L = torch.cat([L, L[..., -ph:, :].flip(-2)], -2)
        if pw:
            L = torch.cat([L, L[..., -pw:].flip(-1)], -1)
        out = self.test(L).float().cpu()
        sf = out.shape[-1] // L.shape[-1]
        return out[..., :h * sf, :w * sf]


    metric_border = 0  # KAIR's main_train_vrt and VRT's main_test_vrt compare whole frames
    log_items = True   # per-clip PSNR/SSIM, as the reference logs them
