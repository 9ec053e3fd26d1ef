"""The one evaluation loop: every item of a test set restored once, scored, gathered, written by rank 0.

Validation during training (`ModelPlain.validate`) and main_test.py both run `evaluate`, so the two
can never disagree on what a score means, how items are shared among ranks or which images land on
disk. Items go round by round: in round r, rank k restores item r * world_size + k (the val
loader's shard), and every rank gathers that round's scores (and, when images are written, their
PNG bytes), so every rank makes the same collectives, memory stays one round of items, and the rows
come back in dataset order whatever the number of ranks: the means are the same sums in the same
order on 1 or N processes.

Scores are the four always computed (`METRICS`: PSNR/SSIM on RGB and Y, as KAIR reports them) and then
the restorer's `val.metrics` in their order (`Evaluation.names`), each the mean over an item's frames
and then over the items, with the same crop; a no-reference metric scores the inputs alone too. Inputs
without targets (`targets=False`: one's own images and videos, models/input_restore.py) are restored the same
way and scored by the no-reference metrics alone; an item its loader could not read (`Skipped`) is passed
on, in its place in the order, instead of a batch.
"""
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from models.restorer import ImageRestorer
from utils import dist
from utils.errors import InputShapeError, UserError
from utils.image import encode_image, to_uint8
from utils.logger import get_logger
from utils.memory import peak_memory
from utils.oom import OutOfMemory, is_out_of_memory, tried
from utils.progress import progress

METRICS = ('psnr', 'ssim', 'psnr_y', 'ssim_y')  # always scored, first, all higher-is-better

# rank 0 writes one restored item: (name, PNG bytes of each frame: 16-bit PNGs for 16-bit data, or what `encode`
# made of each); an OSError stops further writes
WriteItem = Callable[[str, List[Any]], None]
Encode = Callable[[str, int, np.ndarray], Any]  # (item name, frame index, restored frame) -> what WriteItem gets
# rank 0 writes what one item was restored from and compared with: (name, PNG bytes of the input frames scaled to
# the target's size as the input's scores take them, None where the input is not comparable; of the target frames)
WriteSources = Callable[[str, Optional[List[bytes]], List[bytes]], None]


def png_bytes(name: str, index: int, frame: np.ndarray) -> bytes:
    """The default `Encode`: a PNG file's bytes (16-bit for 16-bit frames)."""
    return encode_image(frame)


@dataclass
class Skipped:
    """What a loader yields for an item it could not read (a corrupt file): its name and why. `evaluate` passes
    it on, in the item's place, to every rank (`Evaluation.skipped`) and to rank 0's `skip_item`."""
    name: str
    problem: str


@dataclass
class Row:
    """One evaluated item: its name, frame count and scores (`Evaluation.names`: psnr, ssim, psnr_y, ssim_y, ...)."""
    name: str
    frames: int
    scores: List[float]


@dataclass
class Evaluation:
    """What `evaluate` returns on every rank (previews and `write_error` are per rank)."""
    rows: List[Row]                           # every item, in dataset order
    means: Dict[str, float]                   # each of `names` over the rows, and 'count'
    input: Optional[Dict[str, float]] = None  # the inputs' own scores (describe_input), when asked
    previews: Dict[str, np.ndarray] = field(default_factory=dict)  # this rank's first restored images
    write_error: Optional[OSError] = None     # rank 0: the write that failed (later items were not written)
    names: Tuple[str, ...] = METRICS          # what the scores are: METRICS, then `val.metrics`
    higher_is_better: Dict[str, bool] = field(default_factory=lambda: dict.fromkeys(METRICS, True))
    skipped: List[Skipped] = field(default_factory=list)  # items the loaders could not read, in order
    weights: str = ''  # which weights were scored, where the caller says (validation: 'EMA (decay ...)', 'netG')


def evaluate(restorer: ImageRestorer, loader: Iterable[Any], num_items: int, *,
             score_input: bool = False, num_previews: int = 0, write_item: Optional[WriteItem] = None,
             write_sources: Optional[WriteSources] = None, label: str = 'validation', lines: bool = False,
             where: str = 'datasets.test', targets: bool = True, encode: Encode = png_bytes,
             skip_item: Optional[Callable[[Skipped], None]] = None,
             source_items: Optional[Callable[[str], bool]] = None) -> Evaluation:
    """Restore and score the `num_items` items of `loader` (this rank's shard) on every rank.

    A collective: every rank calls it with the same arguments but its own loader. `write_item` (rank
    0 only calls it) receives every item's frames as PNG bytes (or as `encode` makes them, on the rank that
    restored them); its first OSError is kept in `write_error` and no further item is written, while the loop
    (and its collectives) goes on.
    `score_input` also scores the inputs themselves (`restorer.input_items`), the score a restoration must beat.
    `write_sources` (rank 0, as `write_item`, errors alike) receives every item's input, as those scores see it
    (upscaled by bicubic for super-resolution), and its target (main_test's comparison page shows them).
    `targets=False`: the items have none; only the restorer's no-reference metrics are scored (`names`), and
    `write_sources` receives each item's input scaled to its output's size (`restorer.own_inputs`) and no target
    frames, for the items `source_items(name)` names (None: all).
    A `Skipped` from a loader goes to `skip_item` (rank 0) and `Evaluation.skipped` (every rank).
    `label` and `lines` are the progress display's (a bar on a terminal; `lines`: also in logs). A restored
    item of another size than its target (`where`: the test section, for the message), or one the network cannot
    take (an `InputShapeError`: frames too small or too few for it), ends the evaluation on every rank, after the
    round's gather, with one UserError naming the item; an out-of-memory error on any rank's item ends it
    there too, as an `OutOfMemory` naming the item, the rank and its peak (models/out_of_memory.py words the line).
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    rounds = -(-num_items // world)
    encoded, sources = write_item is not None, write_sources is not None
    local = iter(loader)
    gathered: List[Tuple[Tuple[int, int, int], Row, Optional[List[float]]]] = []
    skipped: List[Skipped] = []
    previews: Dict[str, np.ndarray] = {}
    write_error: Optional[OSError] = None
    for r in progress(range(rounds), rounds, label, enabled=dist.is_main_process(), lines=lines):
        batch = next(local, None)
        mine: List[Any] = []
        problem = oom = None
        if isinstance(batch, Skipped):
            mine.append(batch)
        elif batch is not None:
            try:
                problem = restore_batch(restorer, batch, mine, score_input=score_input, targets=targets,
                                        sources=sources, encode=encode if encoded else None, previews=previews,
                                        num_previews=num_previews, source_items=source_items)
            except InputShapeError as e:  # an item the network cannot take: one line naming it, every rank together
                problem = f'{item_text(batch, rank, world)}: {e}'
            except Exception as e:  # out of memory on this item: every rank leaves after the gather, together
                if not is_out_of_memory(e):
                    raise
                oom = (item_text(batch, rank, world, where if targets else ''), tried(e), peak_memory(restorer.device))
        parts = dist.gather_objects((mine, problem, oom))
        ooms = [o for _, _, o in parts if o is not None]
        if ooms:
            raise OutOfMemory('', *ooms[0])
        problems = [p for _, p, _ in parts if p is not None]
        if problems:  # on every rank at once: none is left waiting in the next round's gather
            raise UserError(f'{where}: {problems[0]}')
        for k, (part, _, _) in enumerate(parts):
            for j, entry in enumerate(part):
                if isinstance(entry, Skipped):
                    skipped.append(entry)
                    if rank == 0 and skip_item is not None:
                        skip_item(entry)
                    continue
                row, input_scores, frames, source_frames = entry
                gathered.append(((r, k, j), row, input_scores))  # round, rank, item: dataset order
                if rank == 0 and write_error is None:
                    try:
                        if frames is not None:
                            write_item(row.name, frames)
                        if source_frames is not None:
                            write_sources(row.name, *source_frames)
                    except OSError as e:
                        write_error = e
    gathered.sort(key=lambda g: g[0])
    rows = [row for _, row, _ in gathered]
    names = (*METRICS, *restorer.metrics) if targets else tuple(restorer.metrics)
    if restorer.log_items and rank == 0 and targets:
        log = get_logger()
        for row in sorted(rows, key=lambda row: row.name):
            log.info(f'  clip {row.name} ({row.frames} frames): {describe_scores(dict(zip(names, row.scores)), names)}')
    scored_inputs = [s for _, _, s in gathered if s is not None]
    return Evaluation(rows, means_of_rows([row.scores for row in rows], names),
                      input_means(scored_inputs, names) if score_input else None, previews, write_error, names,
                      {**dict.fromkeys(METRICS, True),
                       **{name: bool(m.higher_is_better) for name, m in restorer.metrics.items()}}, skipped)


def restore_batch(restorer: ImageRestorer, batch: Dict[str, Any], mine: List[Any], *, score_input: bool,
                  targets: bool, sources: bool, encode: Optional[Encode], previews: Dict[str, np.ndarray],
                  num_previews: int, source_items: Optional[Callable[[str], bool]]) -> Optional[str]:
    """One loader batch of `evaluate` restored and scored: its entries appended to `mine` (row, the input's
    scores, the frames `encode` made, the source frames), its first previews added; returns the first item whose
    output cannot be scored against its target (`size_problem`), else None."""
    inputs = {name: (restorer.score(I, H) if score_input else None, upscale, I)
              for name, I, H, upscale in restorer.input_items(batch)} if targets and (score_input or sources) \
        else {}
    restored = restorer.restore(batch)
    own = restorer.own_inputs(batch, [r for r in restored if source_items is None or source_items(r[0])]) \
        if sources and not targets else {}
    for name, E, H in restored:
        problem = size_problem(name, E, H) if targets else None
        if problem is not None:
            return problem
        if len(previews) < num_previews:
            previews[name] = to_uint8(E[len(E) // 2])  # TensorBoard/W&B show 8 bits
        given = inputs.get(name)
        if sources and targets:
            source_frames = (None if given is None else [encode_image(i) for i in given[2]],
                             [encode_image(h) for h in H])
        elif name in own:
            source_frames = (None if own[name] is None else [encode_image(i) for i in own[name]], [])
        else:
            source_frames = None
        mine.append((Row(name, len(E), restorer.score(E, H if targets else None)),
                     None if given is None or not score_input else [*given[0], float(given[1])],
                     [encode(name, t, e) for t, e in enumerate(E)] if encode is not None else None, source_frames))
    return None


def item_text(batch: Dict[str, Any], rank: int, world: int, where: str = '') -> str:
    """`on item 0801 of datasets.test (2040x1356 input)`, `on clip 000 (100 frames of 320x180)`, with the rank
    under DDP: where an evaluation ran out of memory (`where`: the test section, '' for inputs of one's own)."""
    if batch.get('name') or batch.get('folder'):
        name = str((batch.get('name') or batch.get('folder'))[0])
    else:
        paths = batch.get('L_path') or batch.get('H_path') or ['?']
        name = os.path.splitext(os.path.basename(str(paths[0])))[0]
    L = batch.get('L')
    clip = torch.is_tensor(L) and L.dim() == 5
    size = ''
    if torch.is_tensor(L) and L.dim() >= 4:
        h, w = L.shape[-2:]
        size = f' ({L.shape[1]} frames of {w}x{h})' if clip else f' ({w}x{h} input)'
    on = f', rank {rank} of {world}' if world > 1 else ''
    of = f' of {where}' if where else ''
    return f'on {"clip" if clip else "item"} {name}{of}{size}{on}'


def size_problem(name: str, E: Sequence[np.ndarray], H: Sequence[np.ndarray]) -> Optional[str]:
    """Why restored frames `E` cannot be scored against their targets `H` (another size), or None."""
    for e, h in zip(E, H):
        if e.shape[:2] == h.shape[:2] and e.shape != h.shape:
            channels = lambda a: a.shape[2] if a.ndim == 3 else 1
            return (f'{name}: the restored image has {channels(e)} channels but its target {channels(h)}; check '
                    f'netG\'s output channels against the data\'s n_channels')
        if e.shape[:2] != h.shape[:2]:
            (eh, ew), (hh, hw) = e.shape[:2], h.shape[:2]
            ratio = f' ({hh // eh}x the output)' if eh and ew and hh % eh == 0 and hw % ew == 0 and \
                hh // eh == hw // ew > 1 else ''
            return (f'{name}: the restored image is {ew}x{eh} but its target is {hw}x{hh}{ratio}; the network\'s '
                    f'output must be the target\'s size: check that netG restores at the data\'s scale and that '
                    f'dataroot_H holds the targets of these inputs')
    return None


def means_of_rows(scores: List[List[float]], names: Sequence[str] = METRICS) -> Dict[str, float]:
    """The mean of each score (`names`) over the items, summed in float64 in the given (dataset) order."""
    sums = np.zeros(len(names), dtype=np.float64)
    for s in scores:
        sums += np.asarray(s, dtype=np.float64)
    n = max(len(scores), 1)
    return {**{m: float(sums[i] / n) for i, m in enumerate(names)}, 'count': len(scores)}


def input_means(scores: List[List[float]], names: Sequence[str] = METRICS) -> Optional[Dict[str, float]]:
    """The inputs' means (and the bicubic factor they were upscaled by, each score's last entry); None when
    no input was comparable."""
    if not scores:
        return None
    means = means_of_rows([s[:-1] for s in scores], names)
    return {**means, 'upscale': float(np.mean([s[-1] for s in scores]))}


def describe_scores(scores: Dict[str, float], names: Sequence[str] = METRICS) -> str:
    """PSNR/SSIM as KAIR logs them, then each further metric of `names` by its name; scores without targets (no
    PSNR among `names`: inputs of one's own) are those further metrics alone."""
    extra = [f'{name} {scores[name]:.4f}' for name in names if name not in METRICS]
    if METRICS[0] not in names:
        return ', '.join(extra)
    text = (f'PSNR {scores["psnr"]:.2f} dB, SSIM {scores["ssim"]:.4f}; '
            f'Y: PSNR {scores["psnr_y"]:.2f} dB, SSIM {scores["ssim_y"]:.4f}')
    return f'{text}; {", ".join(extra)}' if extra else text



def describe_input(res: Optional[Dict[str, float]], names: Sequence[str] = METRICS) -> str:
    """One log line's worth of `Evaluation.input`: what was compared, on how many items, the scores."""
    if res is None:
        return 'no input-vs-target score: the inputs are not comparable with the targets (other frames)'
    up = res['upscale']
    what = 'the input itself (L against H)' if up == 1 else f'the input upscaled by bicubic x{up:g} (against H)'
    return f'{what} on {res["count"]} items: {describe_scores(res, names)}'
