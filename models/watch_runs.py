"""`main_test.py --watch`: each new complete checkpoint of a running job tested once, on every test set, as it comes.

The job's `models/` folder is followed as utils/watch.py says (what counts as complete, and how the folder is only
ever read): rank 0 looks, every rank hears what to do next (test a checkpoint, wait, or end) in one small broadcast
per look, so a long wait for the next checkpoint never holds a collective open longer than one poll. Each
checkpoint is read from a private copy (the job may prune it at any moment) and tested through the set runner's
one loop (models/set_runner.py); its rows go to `results_by_iter.csv` and the curves to `test_curves.png`.
"""
import os
import shutil
import tempfile
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple

from torch import nn

from models.evaluation import METRICS, describe_scores
from models.restorer import ImageRestorer
from models.set_runner import SetResult, TestSet, evaluate_sets
from utils import dist
from utils.checkpoint import load as load_checkpoint
from utils.errors import UserError, first_line
from utils.logger import get_logger
from utils.runlock import is_held, lock_path
from utils.watch import RESULTS_BY_ITER, TEST_CURVES, Checkpoint, Follower, IterTable, job_total_iter, lock_line

POLL_S = 2.0  # how often --watch looks at the job's models folder while nothing is waiting


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
