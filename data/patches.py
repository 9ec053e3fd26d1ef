"""Training patch sizes: one integer (a square, as KAIR's and BasicSR's files write them) or `[height, width]`
(wide video frames, text lines), for every key that sizes a training crop: `H_size` of the image datasets,
`lq_patchsize` of blindsr, `gt_size` of realesrgan and of the video datasets.

A value keeps the form it was given in (the options, the run's saved options and `--describe` show it as
written); the code that crops reads it through `patch_hw`, so an integer crops exactly as before. What a
non-square patch changes elsewhere: 90° rotations are skipped (`augment`, data/datasets/transforms.py), since
a batch needs one shape.
"""
from typing import List, Optional, Tuple, Union

from utils.dist import is_main_process
from utils.logger import get_logger
from utils.options import Key, rule

Patch = Union[int, List[int]]

# An input patch under this many pixels a side trains little: a 3x3 convolution there sees mostly the zero
# padding at the patch border (KAIR's and BasicSR's files train on 40 to 192 pixels).
MIN_INPUT_SIDE = 8


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@rule('>= 1 (a square), or [height, width] of integers >= 1', minimum=1, minItems=2, maxItems=2,
      items={'type': 'integer', 'minimum': 1})
def patch_check(v: object) -> Optional[str]:
    """A patch size: an integer >= 1 or [height, width] (null passes: the key's types say whether it may)."""
    if isinstance(v, list):
        if len(v) == 2 and all(_is_int(x) and x >= 1 for x in v):
            return None
        return 'must be [height, width], two integers >= 1 (or one integer for a square)'
    return None if v is None or v >= 1 else 'must be >= 1'


def patch_key(default: Optional[int], help: str, nullable: bool = False) -> Key:
    """A patch size key: an integer or [height, width] (and null when `nullable`)."""
    types: Tuple[type, ...] = (int, type(None), list) if nullable else (int, list)
    return Key(default, types, patch_check, help)


def patch_hw(v: Patch) -> Tuple[int, int]:
    """(height, width) of a patch size."""
    return (int(v[0]), int(v[1])) if isinstance(v, (list, tuple)) else (int(v), int(v))


def shown(v: Patch) -> str:
    """A patch size as messages show it: `96` or `[64, 256]`."""
    return f'[{v[0]}, {v[1]}]' if isinstance(v, (list, tuple)) else str(v)


def indivisible(v: Patch, scale: int) -> bool:
    """Whether a side of the patch is not a multiple of `scale`."""
    return any(side % scale for side in patch_hw(v))


def divided(v: Patch, scale: int) -> Patch:
    """The patch at 1/scale, in the form it was given (an integer stays one)."""
    return [v[0] // scale, v[1] // scale] if isinstance(v, (list, tuple)) else v // scale


def times(v: Patch, scale: int) -> Patch:
    """The patch at `scale` times, in the form it was given."""
    return [v[0] * scale, v[1] * scale] if isinstance(v, (list, tuple)) else v * scale


def fits(size: Tuple[int, int], v: Patch) -> bool:
    """Whether an image of (h, w) `size` holds the patch."""
    h, w = patch_hw(v)
    return size[0] >= h and size[1] >= w


def warn_if_tiny(where: str, what: str, patch: Patch, scale: int = 1) -> Optional[str]:
    """One warning line (main process) when the network's input patch, `patch` at 1/`scale`, has a side under
    MIN_INPUT_SIDE; `where` names the key, `what` says how the input patch comes from it. Returns the line."""
    h, w = patch_hw(divided(patch, scale))
    if min(h, w) >= MIN_INPUT_SIDE:
        return None
    line = (f'{where}: {what} makes {h}x{w} input patches, under {MIN_INPUT_SIDE} pixels a side: a 3x3 '
            f'convolution there sees mostly the zero padding at the border, so the network learns little '
            f'(KAIR and BasicSR train on 40 to 192 pixels)')
    if is_main_process():
        get_logger().warning(line)
    return line

