"""How a restored item is scored: PSNR/SSIM on RGB and on Y, then the `val.metrics`, with a test set's conventions.

One place for what a score means, so that validation during training, main_test and `--input` (no targets:
the no-reference metrics alone) can never disagree: the border cropped at each edge and whether Y is rounded
(`scoring`: a test section's `metric_border`, `metric_round_y`, else KAIR's choice for its scale), the cap on
PSNR, and 16-bit frames scored on their own range.
"""
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from metrics.fidelity import calculate_psnr, calculate_ssim, metric_border, metric_round_y
from metrics.registry import METRICS, Metric
from utils.image import to_uint8
from utils.registry import declared

PSNR_CAP = 100.0  # identical images have infinite PSNR; cap it so a mean stays finite


def build_metrics(val: Mapping[str, Any], device: torch.device) -> Dict[str, Metric]:
    """The metrics `val.metrics` names, in its order, each built once with its own `val` keys on `device`
    (the evaluation's): a restorer keeps them for every validation of the run."""
    return {name: METRICS.get(name, 'val.metrics')(device=device, **METRICS.read(name, val, '', 'val.metrics'))
            for name in val['metrics']}


SCORING_KEYS = ('metric_border', 'metric_round_y')  # a test section's scoring conventions (data/datasets/image.py)


def scoring(test: Dict[str, Any], scale: int) -> Tuple[int, bool]:
    """(border cropped before PSNR/SSIM, Y rounded) for a test section at `scale`: its `metric_border` and
    `metric_round_y` when its dataset declares them (null: KAIR's choice for the scale), else KAIR's choice."""
    given = {key: declared(test, key, None) for key in SCORING_KEYS}
    return metric_border(scale, given['metric_border']), metric_round_y(scale, given['metric_round_y'])


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
