"""What main_test.py does with a network, below the entry point: its test sets one after the other, the tables
they leave, and `--watch`, which tests each new checkpoint of a running job.

Several test sets (`datasets.test` a list, or BasicSR's `test_1`, `test_2`, ...; utils/options.py) run one after
the other with one network load, each scored with its own conventions (`metric_border`, `metric_round_y`) and
through the one evaluation loop (models/evaluation.py). Each set keeps its `results.csv` (a row per item), and
`results.md` holds the paper-style table: a row per set. With one set its folder is the output folder (as
before); with several, each set has `<out>/<set name>/` and `results.md` sits in `<out>`.

`watch` follows a job's `models/` folder (utils/watch.py says what counts as complete, and how the folder is
only ever read): rank 0 looks, every rank hears what to do next (test a checkpoint, wait, or end) in one small
broadcast per look, so a long wait for the next checkpoint never holds a collective open longer than one poll.
"""
import csv
import datetime
import io
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from torch import nn
from torch.utils.data import DataLoader

from data.loader import build_val_loader, val_loader_options
from data.registry import build_dataset
from data.synthetic.demo import ensure_demo_data
from models.evaluation import METRICS, Evaluation, describe_input, describe_scores, evaluate
from models.restorer import ImageRestorer
from utils import dist
from utils.checkpoint import atomic_write_bytes, atomic_write_text, load as load_checkpoint
from utils.compare_page import frame_files, write_page
from utils.errors import UserError, first_line
from utils.logger import get_logger
from utils.options import all_test_sets
from utils.runlock import is_held, lock_path
from utils.watch import RESULTS_BY_ITER, TEST_CURVES, Checkpoint, Follower, IterTable, job_total_iter, lock_line

POLL_S = 2.0  # how often --watch looks at the job's models folder while nothing is waiting


@dataclass
class TestSet:
    """One validated test section and its loader (this rank's share of the items), built once per run."""
    __test__ = False  # not a test class, for pytest
    section: Dict[str, Any]
    loader: DataLoader

    @property
    def name(self) -> str:
        return self.section['name'] or 'test'

    @property
    def where(self) -> str:
        return self.section['_where']

    @property
    def items(self) -> int:
        return len(self.loader.dataset)


@dataclass
class SetResult:
    """A test set's evaluation and how it was scored (`files`: what rank 0 wrote of each item, for its page)."""
    test_set: TestSet
    evaluation: Evaluation
    border: int
    round_y: bool
    files: Dict[str, Dict[str, List[str]]] = field(default_factory=dict)


def build_test_sets(opt: Dict[str, Any], state: dist.DistState) -> List[TestSet]:
    """Every test set of `opt`, in order, its missing demo data generated first (rank 0; every rank learns the
    outcome), its dataset checked (start-up file checks) and its loader built."""
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
            for s in sections]


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
                  folder: Optional[Callable[[TestSet], str]] = None, sources: bool = False,
                  done: Optional[Callable[[SetResult], None]] = None, lines: bool = True) -> List[SetResult]:
    """Every set through the one evaluation loop with this restorer's network, each scored as its section asks. A
    collective. `folder(set)`: where its restored images go (None: none written); `sources`: its inputs and
    targets too (`input/`, `target/`: what the comparison page shows beside the outputs); `done(result)` runs on
    rank 0 after each set (its table written before the next set starts; a failure there raises on every rank
    alike, `dist.main_process_write`); `lines`: progress lines off a terminal."""
    out = []
    for test_set in sets:
        scored = restorer.for_test_set(test_set.section)
        writer = None if folder is None else ItemWriter(folder(test_set))
        label = 'testing' if len(sets) == 1 else f'testing {test_set.name}'
        res = evaluate(scored, test_set.loader, test_set.items, score_input=score_input, label=label, lines=lines,
                       write_item=None if writer is None else writer.write_item,
                       write_sources=writer.write_sources if writer is not None and sources else None,
                       where=test_set.where)
        result = SetResult(test_set, res, scored.metric_border, scored.round_y,
                           writer.files if writer is not None else {})
        out.append(result)
        if done is not None:
            dist.main_process_write(lambda: done(result), folder(test_set) if folder is not None else '.')
    return out


class ItemWriter:
    """Writes a set's restored items into `where` (`<name>.png`, or `<name>_000.png`, ... for the frames of a clip)
    and, asked, each item's input and target under `input/` and `target/`; `files` keeps what it wrote, by item
    and kind, for the comparison page."""

    def __init__(self, where: str):
        self.where = where
        self.files: Dict[str, Dict[str, List[str]]] = {}

    def write_item(self, name: str, frames: List[bytes], kind: str = 'output') -> None:
        paths = frame_files(name, len(frames), kind)
        for path, data in zip(paths, frames):
            atomic_write_bytes(os.path.join(self.where, path), lambda f, data=data: f.write(data), size=len(data))
        self.files.setdefault(name, {})[kind] = paths

    def write_sources(self, name: str, inputs: Optional[List[bytes]], targets: List[bytes]) -> None:
        if inputs is not None:
            self.write_item(name, inputs, 'input')
        self.write_item(name, targets, 'target')


def evaluate_once(restorer: ImageRestorer, sets: Sequence[TestSet], root: str, weights: str, images: bool,
                  page: bool = True) -> None:
    """main_test without --watch: every set once, rank 0 writing each set's images, results.csv and (`page`, with
    `images`) its index.html comparison page as it ends, then results.md with a row per set."""
    log = get_logger()
    what = f'{sets[0].items} items' if len(sets) == 1 else \
        f'{len(sets)} test sets: {", ".join(f"{s.name} ({s.items} items)" for s in sets)}'
    log.info(f'testing {weights} on {what} -> {root}')

    def done(result: SetResult) -> None:
        res, test_set = result.evaluation, result.test_set
        if res.write_error is not None:
            raise res.write_error
        table = os.path.join(set_folder(root, sets, test_set), 'results.csv')
        write_table(table, res.names, [[row.name, *row.scores] for row in res.rows], res.means)
        label = '' if len(sets) == 1 else f'{test_set.name}: '
        log.info(f'{label}{res.means["count"]} items: {describe_scores(res.means, res.names)}; table: {table}')
        log.info(f'{label}input: {describe_input(res.input, res.names)}')
        if images and page:
            path = write_page(set_folder(root, sets, test_set), res.names, res.higher_is_better,
                              [(row.name, row.scores) for row in res.rows], res.means, result.files,
                              notes=[f'{weights} on {test_set.name}', f'input: {describe_input(res.input, res.names)}'])
            log.info(f'{label}comparison page: {path} (open it in a browser)')
    results = evaluate_sets(restorer, sets, score_input=True, sources=images and page,
                            folder=(lambda s: set_folder(root, sets, s)) if images else None, done=done)
    def write_markdown() -> None:
        path = os.path.join(root, 'results.md')
        atomic_write_text(path, results_markdown(results, weights))
        log.info(f'results.md: {path}')
    dist.main_process_write(write_markdown, root)


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


def results_markdown(results: Sequence[SetResult], weights: str) -> str:
    """results.md: the paper-style table of one run of main_test, a row per test set: PSNR/SSIM on RGB and on Y,
    each further `val.metrics` score (its direction marked), the items and how they were scored (the border
    cropped at each edge, whether Y was rounded); then the inputs' own scores, the score to beat."""
    names = results[0].evaluation.names
    better = results[0].evaluation.higher_is_better
    heads = {'psnr': 'PSNR (dB)', 'ssim': 'SSIM', 'psnr_y': 'PSNR Y (dB)', 'ssim_y': 'SSIM Y'}
    header = ['set', 'items', *(heads.get(n, f'{n} {"↑" if better[n] else "↓"}') for n in names), 'scored']

    def cells(scores: Dict[str, float]) -> List[str]:
        return [f'{scores[n]:.2f}' if n in ('psnr', 'psnr_y') else f'{scores[n]:.4f}' for n in names]

    def table(rows: List[List[str]], head: List[str]) -> List[str]:
        return ['| ' + ' | '.join(head) + ' |', '|' + '|'.join(['---'] + ['---:'] * (len(head) - 2) + ['---']) + '|',
                *('| ' + ' | '.join(r) + ' |' for r in rows)]

    def scored(r: SetResult) -> str:
        return f'border {r.border} px, Y {"rounded" if r.round_y else "unrounded"}'

    rows = [[r.test_set.name, str(r.evaluation.means['count']), *cells(r.evaluation.means), scored(r)] for r in results]
    when = datetime.datetime.now().strftime('%Y-%m-%d %H:%M')
    text = ['# Test results', '', f'Weights `{weights}`, tested {when}.', '', *table(rows, header), '',
            'PSNR and SSIM on RGB and on Y (BT.601 luma), after cropping `border` pixels at each edge (the set\'s '
            '`metric_border`); "Y rounded": Y rounded to integers before its scores (`metric_round_y`, KAIR\'s SR '
            'convention). Each set\'s `results.csv` has the score of every item.']
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


# ------------------------------------------------------------------------------------------------------- --watch

def watch(restorer: ImageRestorer, sets: Sequence[TestSet], build_net: Callable[[str], nn.Module], models: str,
          root: str, default_total: int, follow: bool, allow_unsafe: bool = False) -> int:
    """Test every complete checkpoint of the job's `models` folder once, oldest first, on every set, as they come;
    rows to `<root>/results_by_iter.csv` and the plot `<root>/test_curves.png` (rank 0). Returns how many were
    tested. Ends after the job's checkpoint at its train.total_iter (`default_total` until the job saved its
    options), or never with `follow`. A collective: every rank calls it; `build_net(path)` loads weights."""
    log = get_logger()
    main = dist.is_main_process()
    run_dir = os.path.dirname(os.path.abspath(models))
    names = (*METRICS, *restorer.metrics)
    set_names = [s.name for s in sets]
    tested = 0
    tables: List[IterTable] = []
    error = dist.main_process_outcome(lambda: tables.append(IterTable(os.path.join(root, RESULTS_BY_ITER), names)),
                                      lambda e: str(e) if isinstance(e, UserError) else None)
    if error is not None:  # on every rank: none is left waiting for rank 0's first look
        raise UserError(error)
    if main:
        table = tables[0]
        done_sets = table.tested()
        follower = Follower(models, [k for k, have in done_sets.items() if set(set_names) <= have])
        total = job_total_iter(run_dir, default_total)
        ends = 'never ends (--follow; Ctrl-C stops it)' if follow else \
            f'ends after the job\'s checkpoint of iteration {total} (its train.total_iter)'
        log.info(f'--watch {models}: every new complete checkpoint is tested once on {", ".join(set_names)}; rows in '
                 f'{table.path}; {ends}')
        if follower.handled:
            log.info(f'--watch: {len(follower.handled)} checkpoint(s) tested before ({RESULTS_BY_ITER}): not again')
        lock_state: List[Optional[bool]] = [None]

    def next_action() -> Tuple[str, Any]:
        """Rank 0: ('test', checkpoint, indices of the sets to test it on), ('wait', None) or ('end', line)."""
        pending, vanished = follower.poll()
        for c in vanished:
            log.warning(f'--watch: iteration {c.step}: removed by the job before it was tested (its '
                        f'train.checkpoint_keep_last pruning, or a resume setting it aside): skipped')
        if pending:
            c = pending[0]
            have = done_sets.get(c.key, set())
            return 'test', c, [i for i, name in enumerate(set_names) if name not in have]
        total_now = job_total_iter(run_dir, default_total)
        if not follow and follower.reached(total_now):
            return 'end', (f'--watch: the job\'s last checkpoint (iteration {total_now}) is tested; {tested} '
                           f'checkpoint(s) tested in this run; rows in {table.path}')
        held = is_held(run_dir)
        line = lock_line(held, lock_state[0], lock_path(run_dir))
        if line:
            log.info(f'--watch: {line}')
        lock_state[0] = held
        return 'wait', None

    while True:
        action = dist.broadcast_object(next_action() if main else None)
        if action[0] == 'end':
            log.info(action[1])
            return tested
        if action[0] == 'wait':
            if main:
                time.sleep(POLL_S)
            continue
        ckpt, which = action[1], [sets[i] for i in action[2]]
        net, problem = load_copy(ckpt, build_net, allow_unsafe)
        problems = [p for p in dist.gather_objects(problem) if p is not None]
        if problems:
            if main:
                gone = any(p == 'gone' for p in problems) or not os.path.exists(ckpt.state_file)
                why = 'deleted by the job while being loaded (pruned)' if gone else problems[0]
                log.warning(f'--watch: iteration {ckpt.step}: {why}: skipped')
                follower.done(ckpt)
            continue
        restorer.net = net
        results = evaluate_sets(restorer, which, score_input=False, lines=False)  # one line per set and checkpoint
        tested += 1

        def record(ckpt: Checkpoint = ckpt, results: List[SetResult] = results) -> None:
            table.append(ckpt, [(r.test_set.name, r.evaluation.means['count'], [r.evaluation.means[n] for n in names])
                                for r in results])
            for r in results:
                log.info(f'--watch: iteration {ckpt.step} ({os.path.basename(ckpt.weights)}), {r.test_set.name}: '
                         f'{describe_scores(r.evaluation.means, names)}')
            follower.done(ckpt)
            done_sets.setdefault(ckpt.key, set()).update(r.test_set.name for r in results)
            draw_curves(table, names, os.path.join(root, TEST_CURVES), os.path.basename(run_dir))
        dist.main_process_write(record, root)  # a failed row: every rank stops, none waits for the next look


def load_copy(ckpt: Checkpoint, build_net: Callable[[str], nn.Module],
              allow_unsafe: bool = False) -> Tuple[Optional[nn.Module], Optional[str]]:
    """(network, None) with the checkpoint's weights, read from a private copy (the job may delete its file at any
    moment: once copied, it is ours); (None, why) when it cannot be tested: 'gone' (deleted before or while it was
    copied) or why its file is damaged. Weights that do not fit netG are the caller's mistake: a UserError."""
    with tempfile.TemporaryDirectory(prefix='watch_') as tmp:
        copy = os.path.join(tmp, os.path.basename(ckpt.weights))  # the name says _E or _G (params_ema or params)
        try:
            shutil.copyfile(ckpt.weights, copy)
        except FileNotFoundError:
            return None, 'gone'
        except OSError as e:  # a file removed on a network file system while read (ESTALE), and the like
            return None, 'gone' if not os.path.exists(ckpt.weights) else f'cannot be read ({first_line(e)})'
        try:
            load_checkpoint(copy, allow_unsafe)
        except UserError as e:
            return None, f'{ckpt.weights}: {str(e).split(": ", 1)[-1]}'
        return build_net(copy), None


def draw_curves(table: IterTable, names: Sequence[str], out: str, title: str) -> None:
    """test_curves.png from the table's rows (matplotlib, imported only here); a failure is one logged line, the
    watch goes on (the rows are the results)."""
    from utils.plot import save_figure, watch_curves_figure
    try:
        save_figure(watch_curves_figure(table.records(), names, title), out)
    except OSError as e:
        get_logger().error(f'--watch: {out}: {first_line(e)}; the rows are in {table.path}')
