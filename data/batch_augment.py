"""Batch augmentation: traiNNer-redux's "mixture of augmentations" (MoA) of Yoo et al. (CVPR 2020).

`train.use_moa` turns it on; each iteration one augmentation of `train.moa_augs` is chosen with the
probabilities `train.moa_probs` (traiNNer-redux's names and defaults) and applied to every sample of the
iteration, in the training step on the device:
- `none`: the batch as it is;
- `mixup` (Zhang et al., ICLR 2018): input and target become lam x + (1 - lam) x' with the sample's partner
  x', lam ~ U(0.4, 0.6) per sample (traiNNer-redux's range);
- `cutmix` (Yun et al., ICCV 2019): a box of the partner replaces the same box of the sample, input and
  target alike; side ratio sqrt(1 - lam), lam ~ U(0, 0.9), centre uniform, clipped at the borders;
- `resizemix` (Qin et al., 2020): the whole partner, resized (bicubic, antialiased) to tau times the size,
  tau ~ U(0.5, 0.9) per iteration, pasted at a uniformly drawn place of each sample;
- `cutblur` (Yoo et al., CVPR 2020): the input takes the target's pixels in a box (side ratio ~ N(0.7,
  0.01), place uniform), or, for half of the samples, everywhere but in the box; the target is unchanged.
  The network learns where to restore and where to leave the image alone. It needs the input at the
  target's size: networks that restore at scale 1 (denoising, deblurring, JPEG; dncnn, drunet, swinir's
  denoisers, restormer, nafnet...) or take a pre-upsampled LR. At another scale (an SR network's 24x24 -> 96x96)
  it is refused at start-up with one line.
Boxes are drawn on L's grid and scaled to H's (H = s x L). Every image of the batch is mixed alike: L,
H and the transform's loss targets H_<loss> (data/degradations/batch_transforms.py).

Reproducible like the data itself. The augmentation of an iteration comes from the optimizer step's seed
(data/sampler.py: seed, epoch, step), the same on every rank and micro-batch; a sample's parameters
(ratio, box) and its partner, another training sample (its index and seed drawn from the sample's seed),
come from the sample's seed, which depends on its position in the epoch's global order, not on the rank
or batch it lands in. The partner is read with the sample by the dataset wrapper (`BatchAugmented`, one
more sample read on mixing iterations) instead of being another sample of the batch (traiNNer-redux's
randperm), so N ranks x batch b train exactly as 1 rank x N*b, any number of loader workers gives the
same batches, and a resumed run continues bit for bit. The items carry the draws (`PLAN_KEY`, a JSON text
the same for every item of the iteration, read on the host; `PARAMS_KEY`, a small float tensor per
sample); `apply`, in the model's `to_device`, mixes the batch with batched tensor ops: no host read of a
device value, no loop over the samples.

The batch augmentations mix image pairs: items that carry other network inputs (FFDNet's C, USRNet's k,
sf, sigma) or an L with more channels than H (noise-level maps, spike streams) are refused at start-up.
"""
import json
import random
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from data.degradations import batch_transforms
from data.sampler import TrainKey, key_step_seed, parse_key
from utils.errors import UserError
from utils.logger import get_logger
from utils.options import Key, rule

Batch = Dict[str, Any]
AUGMENTS = ('none', 'mixup', 'cutmix', 'resizemix', 'cutblur')
NEEDS_PARTNER = ('mixup', 'cutmix', 'resizemix')
PLAN_KEY = 'moa_plan'              # the iteration's augmentation (JSON text, identical in its items)
PARAMS_KEY = 'moa_params'          # a sample's draws: (ratio, y, x, inside) floats in [0, 1]
PARTNER = 'moa_partner.'           # prefix of the partner item's fields

MIXUP_RANGE = (0.4, 0.6)           # lam of mixup (traiNNer-redux's)
CUTMIX_MAX = 0.9                   # lam of cutmix ~ U(0, CUTMIX_MAX); box side ratio sqrt(1 - lam)
RESIZEMIX_RANGE = (0.5, 0.9)       # tau of resizemix (traiNNer-redux's)
CUTBLUR_RATIO = (0.7, 0.01)        # box side ratio of cutblur ~ N(mean, std) (Yoo et al.'s alpha 0.7)


@rule(f'distinct names from {", ".join(AUGMENTS)}', minItems=1, uniqueItems=True, items={'enum': list(AUGMENTS)})
def _augment_names(v: Any) -> Optional[str]:
    if v and all(a in AUGMENTS for a in v) and len(set(v)) == len(v):
        return None
    return f'must be a list of distinct names from {", ".join(AUGMENTS)}'


@rule('probabilities >= 0 that sum to 1, one per train.moa_augs entry', minItems=1,
      items={'type': 'number', 'minimum': 0})
def _probabilities(v: Any) -> Optional[str]:
    if (v and all(isinstance(p, (int, float)) and not isinstance(p, bool) and p >= 0 for p in v)
            and abs(sum(v) - 1) < 1e-6):
        return None
    return 'must be probabilities >= 0 that sum to 1, one per train.moa_augs entry'


# The `train` keys (traiNNer-redux's names and defaults; ModelPlain declares them, the loop wraps the data)
MOA_OPTIONS: Dict[str, Key] = {
    'use_moa': Key(False, (bool,), help='batch augmentation on (traiNNer-redux\'s mixture of augmentations): one of '
                                        'moa_augs per iteration, on the device'),
    'moa_augs': Key(list(AUGMENTS), (list,), _augment_names, 'the batch augmentations to choose from (none, '
                                                             'mixup, cutmix, resizemix, cutblur)'),
    'moa_probs': Key([0.4, 0.084, 0.084, 0.084, 0.348], (list,), _probabilities,
                     'the chance of each of moa_augs per iteration (they sum to 1)'),
}


def iteration_plan(step_seed: int, augs: Sequence[str], probs: Sequence[float]) -> Dict[str, Any]:
    """The augmentation of the optimizer step with seed `step_seed` (and resizemix's tau)."""
    rng = random.Random(f'moa-step:{step_seed}')
    aug = rng.choices(list(augs), weights=list(probs))[0]
    plan: Dict[str, Any] = {'aug': aug}
    if aug == 'resizemix':
        plan['tau'] = rng.uniform(*RESIZEMIX_RANGE)
    return plan


def sample_params(aug: str, rng: random.Random) -> List[float]:
    """A sample's (ratio, y, x, inside): mixup's lam, cutmix's lam, cutblur's side ratio; the box's place as
    fractions of the free room (resolved on the device, where the sizes are known); cutblur's inside/outside."""
    if aug == 'mixup':
        ratio = rng.uniform(*MIXUP_RANGE)
    elif aug == 'cutmix':
        ratio = rng.uniform(0.0, CUTMIX_MAX)
    elif aug == 'cutblur':
        ratio = min(max(rng.gauss(*CUTBLUR_RATIO), 0.05), 1.0)
    else:
        ratio = 0.0
    return [ratio, rng.random(), rng.random(), float(rng.random() < 0.5)]


class BatchAugmented(Dataset):
    """A training set whose items carry their batch augmentation: the iteration's plan, the sample's draws
    and, on mixing iterations, the partner item (`PARTNER` + its keys). Everything else is the wrapped
    dataset's (attributes are looked up there). Keys without a step seed are the start-up probes: they
    carry a plan that has the step check what each chosen augmentation needs."""

    uses_step_seed = True  # the sampler gives every key its optimizer step's seed

    def __init__(self, base: Dataset, augs: Sequence[str], probs: Sequence[float]):
        if len(augs) != len(probs):
            raise UserError(f'train.moa_probs: {len(probs)} probabilities for the {len(augs)} augmentations of '
                            f'train.moa_augs ({", ".join(augs)})')
        self.base = base
        self.augs, self.probs = list(augs), [float(p) for p in probs]
        self.chosen = [a for a, p in zip(self.augs, self.probs) if p > 0 and a != 'none']

    def __getattr__(self, name: str) -> Any:
        if name == 'base':  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.base, name)

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, key: Any) -> Dict[str, Any]:
        item = self.base[key]
        index, seed = parse_key(key)
        if seed is None:  # an evaluation key: nothing random
            return item
        step = key_step_seed(key)
        if step is None:
            return {**item, PLAN_KEY: json.dumps({'aug': 'none', 'check': self.chosen})}
        plan = iteration_plan(step, self.augs, self.probs)
        out = {**item, PLAN_KEY: json.dumps(plan)}
        if plan['aug'] == 'none':
            return out
        rng = random.Random(f'moa-sample:{seed}')
        out[PARAMS_KEY] = torch.tensor(sample_params(plan['aug'], rng), dtype=torch.float32)
        if plan['aug'] in NEEDS_PARTNER:
            n = len(self.base)
            other = rng.randrange(n - 1) if n > 1 else 0
            other += int(n > 1 and other >= index)  # another item whenever there is one
            partner = self.base[TrainKey(other, rng.getrandbits(63), step)]
            out.update({PARTNER + k: v for k, v in partner.items()})
        return out


def with_batch_augmentation(dataset: Dataset, train_opt: Dict[str, Any]) -> Dataset:
    """The training set with `train.use_moa`'s batch augmentation, or as it is when off."""
    if not train_opt['use_moa']:
        return dataset
    out = BatchAugmented(dataset, train_opt['moa_augs'], train_opt['moa_probs'])
    chances = ', '.join(f'{a} {p:g}' for a, p in zip(out.augs, out.probs))
    get_logger().info(f'batch augmentation (train.use_moa), one per iteration on the device: {chances}')
    return out


# --- the device side -----------------------------------------------------------------------------------------

def _image_keys(batch: Dict[str, Any]) -> List[str]:
    """The images an augmentation mixes: L, H and the transform's loss targets H_<loss>."""
    return [k for k in batch if k in ('L', 'H') or (k.startswith('H_') and torch.is_tensor(batch[k]))]


def _planes(t: torch.Tensor) -> torch.Tensor:
    """An image batch (N, C, H, W) or clip batch (N, T, C, H, W) as (N, K, H, W)."""
    return t.reshape(t.shape[0], -1, *t.shape[-2:])


def _scale(batch: Dict[str, Any]) -> int:
    return batch['H'].shape[-2] // batch['L'].shape[-2]


def _column(v: torch.Tensor) -> torch.Tensor:
    return v.view(-1, 1, 1, 1)


def _box_mask(top: torch.Tensor, left: torch.Tensor, bottom: torch.Tensor, right: torch.Tensor, s: int,
              like: torch.Tensor) -> torch.Tensor:
    """(N, 1, H, W) bool: inside the box [top, bottom) x [left, right) of L's grid, scaled by `s`."""
    h, w = like.shape[-2:]
    ys = torch.arange(h, device=like.device, dtype=top.dtype).view(1, h, 1)
    xs = torch.arange(w, device=like.device, dtype=top.dtype).view(1, 1, w)
    inside = ((ys >= s * top.view(-1, 1, 1)) & (ys < s * bottom.view(-1, 1, 1))
              & (xs >= s * left.view(-1, 1, 1)) & (xs < s * right.view(-1, 1, 1)))
    return inside[:, None]


def _each_image(batch: Dict[str, Any], fn: Callable[[str, torch.Tensor, int], torch.Tensor]) -> Dict[str, Any]:
    """`fn(key, planes, grid scale)` on every image of the batch (planes (N, K, H, W); scale 1 for L)."""
    s = _scale(batch)
    out = dict(batch)
    for k in _image_keys(batch):
        t = batch[k]
        out[k] = fn(k, _planes(t), 1 if k == 'L' else s).reshape(t.shape)
    return out


def mixup(batch: Batch, partner: Batch, params: torch.Tensor, plan: Batch) -> Batch:
    """Every image lam x + (1 - lam) x', lam = params[:, 0]."""
    lam = _column(params[:, 0])
    return _each_image(batch, lambda k, x, s: torch.lerp(_planes(partner[k]), x, lam.to(x.dtype)))


def cutmix(batch: Batch, partner: Batch, params: torch.Tensor, plan: Batch) -> Batch:
    """The partner's box in every image: side ratio sqrt(1 - params[:, 0]), centre (params[:, 1], params[:, 2])."""
    h, w = batch['L'].shape[-2:]
    ratio = (1.0 - params[:, 0]).sqrt()
    half_h, half_w = (h * ratio).floor().div(2).floor(), (w * ratio).floor().div(2).floor()
    cy, cx = (params[:, 1] * h).floor(), (params[:, 2] * w).floor()
    top, bottom = (cy - half_h).clamp(0, h), (cy + half_h).clamp(0, h)
    left, right = (cx - half_w).clamp(0, w), (cx + half_w).clamp(0, w)
    return _each_image(batch, lambda k, x, s: torch.where(_box_mask(top, left, bottom, right, s, x),
                                                          _planes(partner[k]), x))


def _paste(dst: torch.Tensor, src: torch.Tensor, top: torch.Tensor, left: torch.Tensor) -> torch.Tensor:
    """`src` (N, K, h, w) pasted into `dst` (N, K, H, W) at (top, left) of each image, by one gather."""
    n, k, h, w = dst.shape
    sh, sw = src.shape[-2:]
    ys = torch.arange(h, device=dst.device).view(1, h, 1) - top.long().view(n, 1, 1)
    xs = torch.arange(w, device=dst.device).view(1, 1, w) - left.long().view(n, 1, 1)
    inside = (ys >= 0) & (ys < sh) & (xs >= 0) & (xs < sw)  # N, H, W
    index = (ys.clamp(0, sh - 1) * sw + xs.clamp(0, sw - 1)).view(n, 1, h * w).expand(n, k, h * w)
    picked = torch.gather(src.reshape(n, k, sh * sw), 2, index).view(n, k, h, w)
    return torch.where(inside[:, None], picked, dst)


def resizemix(batch: Batch, partner: Batch, params: torch.Tensor, plan: Batch) -> Batch:
    """The partner at tau (the plan's) times the size, at (params[:, 1], params[:, 2]) of the free room."""
    h, w = batch['L'].shape[-2:]
    th, tw = max(1, round(plan['tau'] * h)), max(1, round(plan['tau'] * w))
    top, left = (params[:, 1] * (h - th + 1)).floor(), (params[:, 2] * (w - tw + 1)).floor()

    def mix(k: str, x: torch.Tensor, s: int) -> torch.Tensor:
        small = F.interpolate(_planes(partner[k]).float(), size=(s * th, s * tw), mode='bicubic', antialias=True,
                              align_corners=False).to(x.dtype)
        return _paste(x, small, s * top, s * left)
    return _each_image(batch, mix)


def cutblur(batch: Batch, partner: Optional[Batch], params: torch.Tensor, plan: Batch) -> Batch:
    """L takes H's pixels in a box (side ratio params[:, 0]) or, where params[:, 3] is 0, outside it."""
    L, H = _planes(batch['L']), _planes(batch['H'])
    h, w = L.shape[-2:]
    ch, cw = (h * params[:, 0]).floor(), (w * params[:, 0]).floor()
    top, left = (params[:, 1] * (h - ch + 1)).floor(), (params[:, 2] * (w - cw + 1)).floor()
    box = _box_mask(top, left, top + ch, left + cw, 1, L)
    take_target = torch.where(_column(params[:, 3] > 0.5), box, ~box)  # inside the box, or everywhere else
    return {**batch, 'L': torch.where(take_target, H.to(L.dtype), L).reshape(batch['L'].shape)}


AUGMENT_FNS = {'mixup': mixup, 'cutmix': cutmix, 'resizemix': resizemix, 'cutblur': cutblur}


def check_batch(batch: Dict[str, Any], augs: Sequence[str]) -> None:
    """What the augmentations `augs` need of a (transformed) training batch; one line naming the option if not."""
    if not augs:
        return
    names = ', '.join(augs)
    others = [k for k, v in batch.items() if torch.is_tensor(v) and k not in _image_keys(batch)]
    if 'L' not in batch or 'H' not in batch or others:
        what = f'also {", ".join(others)}' if others else 'no L and H pair'
        raise UserError(f'train.use_moa: the batch augmentations ({names}) mix input/target image pairs, but the '
                        f'training items carry {what} (network inputs of their own: models plain2/plain4); '
                        f'set train.use_moa to false')
    L, H = batch['L'], batch['H']
    if L.dim() != H.dim() or L.shape[:-2] != H.shape[:-2]:
        raise UserError(f'train.use_moa: the batch augmentations ({names}) mix L and H alike, but L has '
                        f'{tuple(L.shape[1:-2])} channels/frames and H {tuple(H.shape[1:-2])} (an L with noise-level '
                        f'maps or spike streams); set train.use_moa to false')
    (h, w), (hh, hw) = L.shape[-2:], H.shape[-2:]
    s = hh // h
    if hh != s * h or hw != s * w:
        raise UserError(f'train.use_moa: H ({hh}x{hw}) is not an integer multiple of L ({h}x{w}), so the '
                        f'augmentations\' boxes cannot be placed on both; set train.use_moa to false')
    if 'cutblur' in augs and s != 1:
        raise UserError(f'train.moa_augs: "cutblur" pastes target pixels into the input, so it needs the input at the '
                        f'target\'s size: networks restoring at scale 1 (denoising, deblurring, JPEG) or taking a '
                        f'pre-upsampled LR; here L is {h}x{w} and H {hh}x{hw} (scale {s}); remove "cutblur" from '
                        f'train.moa_augs and its probability from train.moa_probs')


def apply(batch: Dict[str, Any]) -> Dict[str, Any]:
    """A collated training batch on its device through its dataset's device transform (also the partner's),
    then through its iteration's batch augmentation; a batch without one only through the transform."""
    plan_text = batch.get(PLAN_KEY)
    main = {k: v for k, v in batch.items() if k not in (PLAN_KEY, PARAMS_KEY) and not k.startswith(PARTNER)}
    main = batch_transforms.apply(main)
    if plan_text is None:
        return main
    plan = json.loads(plan_text if isinstance(plan_text, str) else plan_text[0])
    if 'check' in plan:
        check_batch(main, plan['check'])
        return main
    fn = AUGMENT_FNS.get(plan['aug'])
    if fn is None:
        return main
    partner = None
    if plan['aug'] in NEEDS_PARTNER:
        partner = batch_transforms.apply({k[len(PARTNER):]: v for k, v in batch.items() if k.startswith(PARTNER)})
    return fn(main, partner, batch[PARAMS_KEY], plan)
