"""What main_test.py does with a network on its test sets, below the entry point: the sets one after the other,
and the tables they leave.

Several test sets (`datasets.test` a list, or BasicSR's `test_1`, `test_2`, ...; utils/options/datasets.py) run one
after the other with one network load, each scored with its own conventions (`metric_border`, `metric_round_y`) and
through the one evaluation loop (models/evaluation.py). Each set keeps its `results.csv` (a row per item), and
`results.md` holds the paper-style table: a row per set. With one set its folder is the output folder (as
before); with several, each set has `<out>/<set name>/` and `results.md` sits in `<out>`. `write_set_results`
writes a set's table and comparison page, for the test sets and for `--input` alike; `--watch` runs the same
sets for each new checkpoint of a job (models/watch_runs.py).

A set without targets (its section's `_targets` false: LR images alone, BasicSR's SingleImageDataset, data/datasets/
lr_only.py) is its own kind: its images are found and restored as `--input`'s are (models/input_restore.py), written
where a set's images go, scored by the no-reference `val.metrics` alone; results.md marks its row "no ground truth".
"""
import csv
import datetime
import io
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from torch.utils.data import DataLoader

from data.datasets.image import folders
from data.datasets.lr_only import lr_inputs
from data.inputs import Found
from data.loader import build_val_loader, val_loader_options
from data.registry import build_dataset
from data.synthetic.demo import ensure_demo_data
from models.evaluation import Evaluation, describe_input, describe_scores, evaluate
from models.input_restore import check_output_folder, no_reference, restore_inputs
from models.restorer import ImageRestorer
from utils import dist
from utils.checkpoint import atomic_write_bytes, atomic_write_text
from utils.compare_page import frame_files, write_page
from utils.errors import UserError
from utils.logger import get_logger
from utils.options import all_test_sets


@dataclass
class TestSet:
    """One validated test section and its loader (this rank's share of the items), built once per run; a set
    without targets has its inputs instead (found as --input's, every rank alike)."""
    __test__ = False  # not a test class, for pytest
    section: Dict[str, Any]
    loader: Optional[DataLoader]
    inputs: Optional[Found] = None

    @property
    def targets(self) -> bool:
        """Whether its items have targets to score against (validation's `_targets`; False: restored only)."""
        return self.section['_targets']

    @property
    def name(self) -> str:
        """The set's name (`test` when its section gives none): its folder and its rows are named by it."""
        return self.section['name'] or 'test'

    @property
    def where(self) -> str:
        """Its section's place in the options (`datasets.test`, ...), for messages."""
        return self.section['_where']

    @property
    def items(self) -> int:
        """How many items the whole set has (the ranks' loaders share them)."""
        return len(self.loader.dataset) if self.loader is not None else len(self.inputs.sources)


@dataclass
class SetResult:
    """A test set's evaluation and how it was scored (`files`: what rank 0 wrote of each item, for its page)."""
    test_set: TestSet
    evaluation: Evaluation
    border: int
    round_y: bool
    files: Dict[str, Dict[str, List[str]]] = field(default_factory=dict)


def build_test_sets(opt: Dict[str, Any], state: dist.DistState, clips: bool = False) -> List[TestSet]:
    """Every test set of `opt`, in order, its missing demo data generated first (rank 0; every rank learns the
    outcome), its dataset checked (start-up file checks) and its loader built; a set without targets has its
    inputs found (`clips`: a video network's, a folder of frames one clip)."""
    sections = all_test_sets(opt)
    if not sections:
        raise UserError(f'{opt["opt_path"]}: datasets.test: required section is missing')

    def generate() -> None:
        for section in sections:
            ensure_demo_data(section)
    error = dist.main_process_outcome(generate, lambda e: str(e) if isinstance(e, UserError) else None)
    if error is not None:
        raise UserError(error)
    return [TestSet(s, build_val_loader(build_dataset(s), state.world_size, state.rank, **val_loader_options(s)))
            if s['_targets'] else TestSet(s, None, lr_inputs(s, clips)) for s in sections]


def output_root(opt: Dict[str, Any], sets: Sequence[TestSet], given: Optional[str]) -> str:
    """`--out`, else `<run>/results/<set name>` for one test set and `<run>/results` for several (each set in its
    `<name>/`, the folder it has when tested alone)."""
    if given:
        return given
    results = os.path.join(opt['path']['task'], 'results')
    return os.path.join(results, sets[0].name) if len(sets) == 1 else results


def set_folder(root: str, sets: Sequence[TestSet], test_set: TestSet) -> str:
    """Where a set's images and results.csv go: the output folder itself for one set, `<root>/<name>/` for several."""
    return root if len(sets) == 1 else os.path.join(root, test_set.name)


def evaluate_sets(restorer: ImageRestorer, sets: Sequence[TestSet], *, score_input: bool,
                  folder: Optional[Callable[[TestSet], Optional[str]]] = None, sources: bool = False,
                  done: Optional[Callable[[SetResult], None]] = None, lines: bool = True,
                  net_type: str = '') -> List[SetResult]:
    """Every set through the one evaluation loop with this restorer's network, each scored as its section asks (a
    set without targets restored as --input's, `restore_set`). A collective. `folder(set)`: where its restored
    images go (None: none written); `sources`: its inputs and targets too (`input/`, `target/`: what the
    comparison page shows beside the outputs); `done(result)` runs on rank 0 after each set (its table written
    before the next set starts; a failure there raises on every rank alike, `dist.main_process_write`); `lines`:
    progress lines off a terminal; `net_type`: netG's, for the start-up check of a set without targets."""
    out = []
    for test_set in sets:
        where = folder(test_set) if folder is not None else None
        if not test_set.targets:
            result = restore_set(restorer, test_set, where, sources, net_type)
        else:
            scored = restorer.for_test_set(test_set.section)
            writer = None if where is None else ItemWriter(where)
            label = 'testing' if len(sets) == 1 else f'testing {test_set.name}'
            res = evaluate(scored, test_set.loader, test_set.items, score_input=score_input, label=label,
                           lines=lines, write_item=None if writer is None else writer.write_item,
                           write_sources=writer.write_sources if writer is not None and sources else None,
                           where=test_set.where)
            result = SetResult(test_set, res, scored.metric_border, scored.round_y,
                               writer.files if writer is not None else {})
        out.append(result)
        if done is not None:
            dist.main_process_write(lambda: done(result), where or '.')
    return out


def restore_set(restorer: ImageRestorer, test_set: TestSet, where: Optional[str], page: bool,
                net_type: str) -> SetResult:
    """A set without targets: its images restored as `--input` restores them (models/input_restore.py), written
    under `where` (None: not written; `page`: with what the comparison page shows), scored by the no-reference
    `val.metrics` alone. An image that cannot be read is one warning line and is left out of the count."""
    log = get_logger()
    found = test_set.inputs
    for path, problem in found.bad:
        log.warning(f'{test_set.where}: skipped {path}: {problem}')
    scored = no_reference(restorer.for_test_set(test_set.section))
    restored = restore_inputs(scored, found, where, test_set.section['n_channels'], net_type, page=page)
    missed = len(found.bad) + len(restored.missed)
    if missed:
        log.warning(f'{test_set.name}: {missed} of {len(found.sources) + len(found.bad)} images could not be read '
                    f'and were skipped (see the warnings above)')
    return SetResult(test_set, restored.evaluation, scored.metric_border, scored.round_y, restored.files)


class ItemWriter:
    """Writes a set's restored items into `where` (`<name>.png`, or `<name>_000.png`, ... for the frames of a clip)
    and, asked, each item's input and target under `input/` and `target/`; `files` keeps what it wrote, by item
    and kind, for the comparison page."""

    def __init__(self, where: str):
        self.where = where
        self.files: Dict[str, Dict[str, List[str]]] = {}

    def write_item(self, name: str, frames: List[bytes], kind: str = 'output') -> None:
        """Write one item's frames (PNG bytes) as `kind` ('output', 'input' or 'target'), keeping their paths."""
        paths = frame_files(name, len(frames), kind)
        for path, data in zip(paths, frames):
            atomic_write_bytes(os.path.join(self.where, path), lambda f, data=data: f.write(data), size=len(data))
        self.files.setdefault(name, {})[kind] = paths

    def write_sources(self, name: str, inputs: Optional[List[bytes]], targets: List[bytes]) -> None:
        """Write what an item was restored from (its input, None when not comparable) and compared with."""
        if inputs is not None:
            self.write_item(name, inputs, 'input')
        self.write_item(name, targets, 'target')


def evaluate_once(restorer: ImageRestorer, sets: Sequence[TestSet], root: str, weights: str, images: bool,
                  page: bool = True, lr_images: bool = True, net_type: str = '') -> None:
    """main_test without --watch: every set once, rank 0 writing each set's images (`images`; of a set without
    targets `lr_images`), results.csv and (`page`, with images) its index.html comparison page as it ends, then
    results.md with a row per set. `net_type`: netG's, for messages."""
    log = get_logger()
    what = f'{sets[0].items} items' if len(sets) == 1 else \
        f'{len(sets)} test sets: {", ".join(f"{s.name} ({s.items} items)" for s in sets)}'
    log.info(f'testing {weights} on {what} -> {root}')
    writes = {id(s): images if s.targets else lr_images for s in sets}
    for s in sets:  # before any work: outputs keep their inputs' names, they must not land among them
        if not s.targets and writes[id(s)]:
            for lr_folder in folders(s.section, 'dataroot_L'):
                check_output_folder(set_folder(root, sets, s), lr_folder)

    def done(result: SetResult) -> None:
        res, test_set = result.evaluation, result.test_set
        shown = describe_input(res.input, res.names) if test_set.targets else 'the LR image scaled to the output\'s ' \
                                                                                'size (no ground truth)'
        notes = [f'{weights} on {test_set.name}', f'input: {shown}']
        label = '' if len(sets) == 1 else f'{test_set.name}: '
        write_set_results(set_folder(root, sets, test_set), res, result.files,
                          notes if writes[id(test_set)] and page else None, label=label,
                          inputs_scored=test_set.targets)
        if not test_set.targets:
            log.info(f'{label}{res.means["count"]} images restored (no ground truth: not compared)'
                     + (f' -> {set_folder(root, sets, test_set)}' if writes[id(test_set)] else ''))
    results = evaluate_sets(restorer, sets, score_input=True, sources=page and (images or lr_images),
                            folder=lambda s: set_folder(root, sets, s) if writes[id(s)] else None, done=done,
                            net_type=net_type)

    def write_markdown() -> None:
        path = os.path.join(root, 'results.md')
        atomic_write_text(path, results_markdown(results, weights))
        log.info(f'results.md: {path}')
    dist.main_process_write(write_markdown, root)


def write_set_results(folder: str, res: Evaluation, files: Dict[str, Dict[str, List[str]]],
                      page_notes: Optional[List[str]], label: str = '', inputs_scored: bool = False) -> None:
    """Rank 0, after a set's evaluation: its results.csv (when anything was scored) and its log line, with
    `inputs_scored` the line of the inputs' own scores, and with `page_notes` its index.html comparison page of
    `files` (what was written of each item). One writer for main_test's test sets and its `--input`, so that a
    table and a page mean the same whichever wrote them; a write that failed during the evaluation raises here.
    `label` starts each line (a set's name when there are several)."""
    log = get_logger()
    if res.write_error is not None:
        raise res.write_error
    if res.names:
        table = os.path.join(folder, 'results.csv')
        write_table(table, res.names, [[row.name, *row.scores] for row in res.rows], res.means)
        log.info(f'{label}{res.means["count"]} items: {describe_scores(res.means, res.names)}; table: {table}')
    if inputs_scored:
        log.info(f'{label}input: {describe_input(res.input, res.names)}')
    if page_notes is not None:
        path = write_page(folder, res.names, res.higher_is_better, [(row.name, row.scores) for row in res.rows],
                          res.means, files, notes=page_notes)
        log.info(f'{label}comparison page: {path} (open it in a browser)')


def write_table(path: str, names: Sequence[str], rows: List[List[Any]], means: Dict[str, float]) -> None:
    """results.csv: a column per score (`names`: psnr, ssim, psnr_y, ssim_y, then `val.metrics`), one row per
    item (dataset order), then the means."""
    text = io.StringIO()
    w = csv.writer(text)
    w.writerow(['name', *names])
    for r in rows:
        w.writerow([r[0]] + [f'{v:.4f}' for v in r[1:]])
    w.writerow(['mean'] + [f'{means[c]:.4f}' for c in names])
    atomic_write_text(path, text.getvalue())


NO_GROUND_TRUTH = 'no ground truth'  # results.md's mark of a set without targets: restored, not compared


def results_markdown(results: Sequence[SetResult], weights: str) -> str:
    """results.md: the paper-style table of one run of main_test, a row per test set: PSNR/SSIM on RGB and on Y,
    each further `val.metrics` score (its direction marked), the items and how they were scored (the border
    cropped at each edge, whether Y was rounded); a set without targets is marked NO_GROUND_TRUTH, its scores
    blank (only a no-reference metric has one); then the inputs' own scores, the score to beat."""
    scored_sets = [r for r in results if r.test_set.targets] or list(results)
    names = scored_sets[0].evaluation.names  # a set without targets scores a subset: its no-reference metrics
    better = {k: v for r in results for k, v in r.evaluation.higher_is_better.items()}
    heads = {'psnr': 'PSNR (dB)', 'ssim': 'SSIM', 'psnr_y': 'PSNR Y (dB)', 'ssim_y': 'SSIM Y'}
    header = ['set', 'items', *(heads.get(n, f'{n} {"↑" if better[n] else "↓"}') for n in names), 'scored']

    def cells(scores: Dict[str, float]) -> List[str]:
        return ['—' if n not in scores else f'{scores[n]:.2f}' if n in ('psnr', 'psnr_y') else f'{scores[n]:.4f}'
                for n in names]

    def table(rows: List[List[str]], head: List[str]) -> List[str]:
        return ['| ' + ' | '.join(head) + ' |', '|' + '|'.join(['---'] + ['---:'] * (len(head) - 2) + ['---']) + '|',
                *('| ' + ' | '.join(r) + ' |' for r in rows)]

    def scored(r: SetResult) -> str:
        if not r.test_set.targets:
            return f'{NO_GROUND_TRUTH}: restored, not compared'
        return f'border {r.border} px, Y {"rounded" if r.round_y else "unrounded"}'

    rows = [[r.test_set.name, str(r.evaluation.means['count']), *cells(r.evaluation.means), scored(r)] for r in results]
    when = datetime.datetime.now().strftime('%Y-%m-%d %H:%M')
    text = ['# Test results', '', f'Weights `{weights}`, tested {when}.', '', *table(rows, header)]
    if any(r.test_set.targets for r in results):
        text += ['', 'PSNR and SSIM on RGB and on Y (BT.601 luma), after cropping `border` pixels at each edge (the '
                     'set\'s `metric_border`); "Y rounded": Y rounded to integers before its scores (`metric_round_y`, '
                     'KAIR\'s SR convention). Each set\'s `results.csv` has the score of every item.']
    if any(not r.test_set.targets for r in results):
        text += ['', f'"{NO_GROUND_TRUTH}": a set of LR images alone (BasicSR\'s SingleImageDataset); its images '
                     f'are restored and written, nothing is compared ("—"; a no-reference metric is scored).']
    inputs = [r for r in results if r.evaluation.input is not None]
    if inputs:
        rows = []
        for r in inputs:
            up = r.evaluation.input['upscale']
            what = 'the input itself' if up == 1 else f'bicubic x{up:g} of the input'
            rows.append([r.test_set.name, str(r.evaluation.input['count']), *cells(r.evaluation.input), what])
        text += ['', '## The inputs themselves', '', 'The score of doing nothing (an SR paper\'s "Bicubic" row):', '',
                 *table(rows, [*header[:-1], 'compared'])]
    return '\n'.join(text) + '\n'
