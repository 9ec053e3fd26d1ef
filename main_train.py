"""Train any registered model from a JSON option file: one loop for every model and launch mode.

    python main_train.py --opt options/train_dncnn_demo.json [--set train.total_iter=100 ...]
    python main_train.py --describe hat     # the keys a network, dataset, loss, ... takes, and exit

Launch modes (detected, never configured): plain process, torchrun / platform-injected env
(WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), or a SLURM job step (srun).
"""
if __name__ == '__main__':
    # First of all, before the imports below (torch alone takes seconds): a stop signal during start-up is
    # kept and acted on at the first safe point (exit 3, or 130 for Ctrl-C), never the default death (143).
    from utils import stop as _early_stop
    _early_stop.install()

import argparse  # noqa: E402
import hashlib
import math
import os
import random
import sys
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

# c10d's C++ warnings (store retries, shutdown notes) are noise next to our one-line errors;
# TORCH_CPP_LOG_LEVEL=INFO shows them. Must be set before torch is imported.
os.environ.setdefault('TORCH_CPP_LOG_LEVEL', 'ERROR')
# OpenMP's idle threads sleep instead of spinning, so torch's threads leave a core to a loader worker or
# another program the moment they do not compute (utils/dist/group.py set_cpu_threads); read once, when torch
# loads OpenMP.
os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')

import torch  # noqa: E402

from data.batch_augment import with_batch_augmentation
from data.loader import build_train_loader, build_val_loader, val_loader_options
from data.registry import build_dataset, training_files
from data.sampler import TrainKey
from data.synthetic.demo import ensure_demo_data
from models.compile import compiled_graphs
from models.evaluation import describe_input, describe_scores
from models.interface import TrainingModel
from models.registry import MODELS
from option_rules import read_options
from utils import dist, parent_watch, stop
from utils.checkpoint import UNSAFE_FLAG, CheckpointDir, atomic_write_bytes, atomic_write_text
from utils.diskspace import describe_write_error, object_bytes
from utils.errors import UserError, first_line, say
from utils.logger import Reporter, get_logger, log_to_file, setup_logger, show_console
from utils.options import dumps, training_notes
from utils.relaunch import maybe_relaunch
from utils.resume import ResumePoint, find_resume_point
from utils.runlock import RunLock
from utils.seed import rng_state, seed_everything, set_rng_state
from utils.step_gate import StepGate, non_finite_words
from utils.stop import EXIT_INTERRUPTED, EXIT_NONFINITE, EXIT_PREEMPTED, EXIT_SAVE_FAILED, TrainingStopped

EXIT_USER_ERROR = 2
DATA_WAIT_HINT = 0.25  # share of an iteration spent waiting for data above which the log says so, once


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument('--opt', help='path to the JSON option file')
    what.add_argument('--describe', metavar='NAME',
                      help='print the option keys of a registered network, dataset, loss, optimizer, scheduler, '
                           'metric, model or initialiser (type, default, meaning) and exit')
    p.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE',
                   help='override an option (value parsed as JSON, else a string); repeatable')
    p.add_argument('--fresh', action='store_true',
                   help='start from scratch: move an existing <root>/<task> aside (never deleted)')
    p.add_argument(UNSAFE_FLAG, dest='allow_unsafe_load', action='store_true',
                   help='allow checkpoints that need full unpickling (only for files you trust)')
    # torch.distributed.launch passes --local-rank/--local_rank; LOCAL_RANK in the env is what counts.
    p.add_argument('--local_rank', '--local-rank', type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def archive_task_dir(task_dir: str) -> Optional[str]:
    """Move an old run aside for --fresh; returns the new name."""
    if not os.path.exists(task_dir):
        return None
    dest = f'{task_dir.rstrip(os.sep)}_archived_{time.strftime("%y%m%d_%H%M%S")}'
    os.rename(task_dir, dest)
    return dest


def micro_batches(it: Iterator[Any], n: int) -> Iterator[List[Any]]:
    """Group a loader iterator into lists of `n` batches (one optimizer step each)."""
    while True:
        group = []
        for _ in range(n):
            try:
                group.append(next(it))
            except StopIteration:
                return
        yield group


class Trainer:
    """The loop: data → model backward/step → periodic print / validation / checkpoint, rank-aware."""

    def __init__(self, opt: Dict[str, Any], state: dist.DistState, device: torch.device,
                 args: argparse.Namespace):
        self.opt, self.state, self.device, self.args = opt, state, device, args
        self.train_opt = opt['train']
        self.main = dist.is_main_process()
        self.log = get_logger()
        self.ckpt = CheckpointDir(opt['path']['models'], self.train_opt['checkpoint_keep_last'])
        # the best validation so far by `val.best_metric` (value None: none yet); best_G.pth holds its weights
        self.best: Dict[str, Any] = {'metric': opt['val']['best_metric'], 'value': None, 'iter': 0}
        self.gate = StepGate(device, self.train_opt['nan_skip_limit']) if self.train_opt['nan_policy'] != 'off' else None
        self.signals = stop.install()  # the process's handlers: a signal received during start-up is known here
        self.last_saved: Optional[int] = None  # the iteration of the newest complete checkpoint of this run
        self.train_files: Optional[Dict[str, List[str]]] = None
        self.print_windows = 0
        self.data_hinted = False
        self.graphs_seen: Optional[int] = None  # train.compile: graphs compiled up to the last iteration
        self.first_peak_noted = False
        self.input_scored = False  # the validation inputs' own scores are logged once per process

    def build(self) -> None:
        """Everything that depends on the user's input, before anything is written to the run folder.

        Data files, the resume point, loaders, the model and one sample through the network are
        checked here, so a mistake ends the run with one line and leaves no trace (generated demo
        data aside, which lives outside the run folder).
        """
        opt, t = self.opt, self.train_opt
        self.ensure_demo_data()
        if 'train' not in opt['datasets']:
            raise UserError(f'{opt["opt_path"]}: datasets.train: required section is missing')
        train_opt_ds = opt['datasets']['train']
        self.train_set = with_batch_augmentation(build_dataset(train_opt_ds), t)  # train.use_moa
        self.train_files = training_files(self.train_set)
        val_set = build_dataset(opt['datasets']['test']) if 'test' in opt['datasets'] else None

        # Found before seeding: a resumed run must shuffle with the seed it started with.
        self.point = None if self.args.fresh else find_resume_point(opt, self.ckpt, self.args.allow_unsafe_load)
        self.seed = self.choose_seed(self.point)
        seed_everything(self.seed)
        self.log.info(f'seed {self.seed} (same on every rank; data order comes from the sampler)')
        t['accumulate_steps'] = self.resumed_accumulation(self.point, train_opt_ds['dataloader_batch_size'])

        self.train_loader, self.sampler = build_train_loader(
            self.train_set, train_opt_ds, self.state.world_size, self.state.rank, self.seed, self.device,
            t['accumulate_steps'], continuous=True)
        self.val_loader = None
        if val_set is not None:
            self.val_loader = build_val_loader(val_set, self.state.world_size, self.state.rank,
                                               **val_loader_options(opt['datasets']['test']))
        self.accum = t['accumulate_steps']
        self.steps_per_epoch = len(self.train_loader) // self.accum
        if self.steps_per_epoch < 1:
            batches = self.sampler.num_samples // train_opt_ds['dataloader_batch_size']
            raise UserError(f'train.accumulate_steps: {self.accum} exceeds the {batches} batch'
                            f'{"es" if batches != 1 else ""} of {train_opt_ds["dataloader_batch_size"]} per epoch of '
                            f'each process ({self.sampler.num_samples} of the {len(self.train_set)} training samples '
                            f'on each of {self.state.world_size} process(es))')
        per_proc = train_opt_ds['dataloader_batch_size']
        self.effective_batch = per_proc * self.state.world_size * self.accum
        self.log.info(f'training samples {len(self.train_set)}, {self.steps_per_epoch} iterations per epoch; '
                      f'batch {per_proc} per process x {self.state.world_size} processes x {self.accum} '
                      f'accumulation = effective batch {self.effective_batch}')

        self.model: TrainingModel = MODELS.get(opt['model'], 'model')(opt, self.device, self.args.allow_unsafe_load)
        self.log.info(self.model.network_info())
        channels = getattr(self.train_set, 'channels_note', None)  # image datasets say what sets their channels
        self.model.check_sample(self.train_set[TrainKey(0, 0)], train_opt_ds['_where'],
                                channels() if channels is not None else None)
        if val_set is not None and len(val_set):
            self.model.check_test_sample(val_set[0], opt['datasets']['test']['_where'])

    def finished(self) -> bool:
        """Whether the run to resume already reached `train.total_iter`: then say how to go on, and do nothing."""
        total = self.train_opt['total_iter']
        if self.point is None or self.point.training['iter'] < total:
            return False
        show_console()  # a normal end: the start-up lines were held for the checks
        self.log.info(f'nothing to do: {self.opt["path"]["task"]} is at iteration {self.point.training["iter"]}, '
                      f'train.total_iter is {total}; raise train.total_iter to train further (e.g. --set '
                      f'train.total_iter={2 * total}), or --fresh to start over')
        return True

    def ensure_demo_data(self) -> None:
        """Rank 0 generates missing demo data (outside the run folder); every rank learns the outcome."""
        def generate() -> None:
            for section in self.opt['datasets'].values():
                ensure_demo_data(section)
        error = dist.main_process_outcome(generate, lambda e: str(e) if isinstance(e, UserError) else None)
        if error is not None:
            raise UserError(error)

    def resumed_accumulation(self, point: Optional[ResumePoint], batch: int) -> int:
        """`train.accumulate_steps`, or with `train.keep_effective_batch` on a resume with another number of
        processes (or batch), the accumulation that keeps the resumed run's effective batch: one log line."""
        accum = self.train_opt['accumulate_steps']
        if point is None or not self.train_opt['keep_effective_batch'] or 'batch_size' not in point.training:
            return accum
        s = point.training
        saved = s['world_size'] * s['batch_size'] * s['accumulate_steps']
        per_step = self.state.world_size * batch
        if saved == per_step * accum:
            return accum
        if saved % per_step:
            raise UserError(f'train.keep_effective_batch: {point.path} trained with an effective batch of {saved} '
                            f'({s["world_size"]} processes x batch {s["batch_size"]} x {s["accumulate_steps"]} '
                            f'accumulation), which {self.state.world_size} processes x batch {batch} cannot make with '
                            f'whole accumulation steps; change the batch per process or the number of processes, or '
                            f'set train.keep_effective_batch to false')
        self.log.info(f'train.keep_effective_batch: {s["world_size"]} -> {self.state.world_size} processes, batch '
                      f'{s["batch_size"]} -> {batch} per process: train.accumulate_steps {accum} -> {saved // per_step}, '
                      f'the effective batch stays {saved}')
        return saved // per_step

    def choose_seed(self, point: Optional[ResumePoint]) -> int:
        """`train.manual_seed`, else the resumed run's seed, else one drawn on rank 0 for every rank."""
        seed = self.train_opt['manual_seed']
        if seed is not None:
            if point is not None and point.training['seed'] != seed:
                self.log.warning(f'resume: train.manual_seed: checkpoint {point.training["seed"]}, options {seed}; '
                                 f'the options win (data order and augmentation change from here)')
            return seed
        if point is not None:
            return point.training['seed']
        return dist.broadcast_object(random.randint(1, 10000))

    def start(self) -> None:
        """Once the run folder is ours: tidy `models/`, restore the resume point, open reporters."""
        error = dist.main_process_outcome(
            lambda: self.tidy_checkpoints(self.point.training['iter'] if self.point is not None else 0),
            lambda e: f'tidying {self.ckpt.folder} failed: {first_line(e)}' if isinstance(e, OSError) else None)
        if error is not None:
            raise UserError(error)
        # the epoch, the global position its steps started from in this process (0 but after a resume with another
        # effective batch), and the steps done since: the next sample is epoch_start + epoch_step * effective_batch
        self.step, self.epoch, self.epoch_start, self.epoch_step = 0, 0, 0, 0
        wandb_id = None
        if self.point is not None:
            wandb_id = self.restore(self.point)
            self.point = None  # the weights it holds are in the model now
        self.reporter = Reporter(self.opt, self.main, wandb_id, start_iter=self.step)
        if self.main:
            self.reporter.row(self.schedule_row(self.train_opt['total_iter']))

    def tidy_checkpoints(self, start_iter: int) -> None:
        """Rank 0: remove what interrupted or failed saves left, set aside saves newer than the start.

        After this `models/` holds one history ending at the iteration training continues from,
        so pruning and the next auto-resume, which go by iteration, go by recency too.
        """
        for name in self.ckpt.remove_stale_temp():
            self.log.warning(f'removed {name}: temporary file of an interrupted checkpoint write')
        aside = self.ckpt.set_aside_after(start_iter)  # first: newer saves are moved, never deleted
        if aside:
            self.log.warning(f'saves newer than iteration {start_iter}, which this run does not continue, moved '
                             f'to {aside}: {", ".join(sorted(os.listdir(aside)))}')
        for name in self.ckpt.remove_incomplete():
            self.log.warning(f'removed {name}: part of a checkpoint whose write did not complete')

    def restore(self, point: ResumePoint) -> Optional[str]:
        s = point.training
        self.model.load_state(point.weights, s['model'])
        self.step = s['iter']
        same_run = os.path.realpath(os.path.dirname(point.path)) == os.path.realpath(self.ckpt.folder)
        self.best, note = resumed_best(s['best'], self.ckpt.read_best() if same_run else None, self.step,
                                       self.opt['val']['best_metric'])
        if note:
            self.log.warning(f'resume: {note}')
        layout = (self.state.world_size, self.train_loader.batch_size, self.accum)
        # state files written before the batch layout was recorded lack it: the layout is unknown
        saved = (s['world_size'], s['batch_size'], s['accumulate_steps']) if 'batch_size' in s else None
        files_changed = self.training_set_change(s)
        if saved is not None and s['seed'] == self.seed and not files_changed:
            # The order is a function of (seed, epoch, global position): any layout goes on at the sample where
            # the run stopped (the position in the epoch; older files give it as steps of their effective batch).
            saved_batch = saved[0] * saved[1] * saved[2]
            position = s['epoch_position'] if 'epoch_position' in s else s['epoch_step'] * saved_batch
            self.continue_epoch(s['epoch'], position)
            if saved != layout:
                self.log.info(f'resume: (world size, batch per process, accumulation) {saved} -> {layout}: '
                              f'epoch {s["epoch"]} goes on at its sample {position} of '
                              f'{self.steps_per_epoch * self.effective_batch} (the same data order)')
            if saved_batch != self.effective_batch:
                self.log.warning(f'resume: the effective batch changes {saved_batch} -> {self.effective_batch} '
                                 f'(lr and schedule are per iteration, as set); train.keep_effective_batch: true '
                                 f'keeps it by changing train.accumulate_steps')
        else:
            # A new seed or another training set has another order: the next epoch starts a fresh permutation.
            self.epoch, self.epoch_start, self.epoch_step = s['epoch'] + 1, 0, 0
            if saved is None:
                self.log.warning(f'resume: {point.path} does not record the batch layout (an older version wrote '
                                 f'it); continuing at the start of epoch {self.epoch}')
            if files_changed:
                self.log.warning(f'resume: the training set changed since checkpoint {s["iter"]}: {files_changed}; '
                                 f'continuing at the start of epoch {self.epoch}')
        rngs = s['rng']
        set_rng_state(rngs[self.state.rank] if self.state.rank < len(rngs) else rngs[0])
        self.log.info(f'resumed from {point.path} at iteration {self.step} (epoch {self.epoch}, '
                      f'{self.epoch_step} iterations into it)')
        if same_run:
            self.last_saved = self.step
        return s['wandb_id']

    def continue_epoch(self, epoch: int, position: int) -> None:
        """Go on at global `position` of `epoch`, or at the start of the next epoch when no whole step is left."""
        size = self.effective_batch
        if (self.steps_per_epoch * size - position) // size >= 1:
            self.epoch, self.epoch_start, self.epoch_step = epoch, position % size, position // size
        else:
            self.epoch, self.epoch_start, self.epoch_step = epoch + 1, 0, 0

    def steps_in_epoch(self) -> int:
        """Optimizer steps of the current epoch (counted from its start position: fewer after a resume that
        changed the effective batch mid-epoch)."""
        size = self.effective_batch
        return (self.steps_per_epoch * size - self.epoch_start) // size

    def training_set_change(self, s: Mapping[str, Any]) -> str:
        """What differs between the training files a checkpoint recorded and those of this start ('' if
        nothing, or if either side does not know its files), e.g. `1 file gone (dataroot_H: 0007.png)`."""
        before, now = s.get('train_files'), self.train_files
        if not isinstance(before, dict) or now is None or before == now:
            return ''
        parts = []
        for what, keys in (('gone', lambda: {k: sorted(set(before[k]) - set(now.get(k, ()))) for k in before}),
                           ('new', lambda: {k: sorted(set(now[k]) - set(before.get(k, ()))) for k in now})):
            per_folder = {k: v for k, v in keys().items() if v}
            count = sum(len(v) for v in per_folder.values())
            if count:
                names = [f'{k}: {n}' for k, v in per_folder.items() for n in v]
                shown = ', '.join(names[:3]) + (f' and {count - 3} more' if count > 3 else '')
                parts.append(f'{count} file{"s" if count > 1 else ""} {what} ({shown})')
        return ', '.join(parts) or 'the same files in another order'

    def save(self) -> bool:
        """Rank 0 writes; all ranks gather the random states before and learn the outcome after.

        Weights that are no longer finite are never saved: a poisoned save would later be taken
        as the newest complete checkpoint and every restart would resume into it.
        """
        poisoned, = dist.agree_any([not self.model.weights_finite()])
        if poisoned:
            raise TrainingStopped(f'iteration {self.step}: the network weights are not finite; no checkpoint '
                                  f'written; {self.newest_save()}', EXIT_NONFINITE)
        rngs = dist.gather_objects(rng_state())
        files: Dict[str, Any] = {}

        def write() -> None:
            files.update(self.model.state_files())
            files['state'] = {
                'iter': self.step, 'epoch': self.epoch, 'epoch_step': self.epoch_step,
                'epoch_position': self.epoch_start + self.epoch_step * self.effective_batch,
                'world_size': self.state.world_size, 'batch_size': self.train_loader.batch_size,
                'accumulate_steps': self.accum, 'seed': self.seed, 'rng': rngs, 'best': self.best,
                'model': self.model.training_state(), 'wandb_id': self.reporter.wandb_id,
            }
            if self.train_files is not None:
                files['state']['train_files'] = self.train_files  # a resume says when the training set changed
            self.ckpt.save(self.step, files)
            self.log.info(f'saved checkpoint {self.step} to {self.ckpt.folder}')
        # torch.save reports a full disk as RuntimeError, not OSError: every failure of the write is an outcome
        error = dist.main_process_outcome(write, lambda e: (
            f'checkpoint at iteration {self.step} failed: '
            f'{describe_write_error(e, self.ckpt.folder, lambda: object_bytes(files))}'))
        ok = self.act_on_write(error)
        if ok:
            self.last_saved = self.step
        return ok

    def newest_save(self) -> str:
        latest = self.ckpt.complete_steps()
        return f'newest complete checkpoint: {self.ckpt.path(latest[-1], "state") if latest else "none"}'

    def act_on_write(self, error: Optional[str]) -> bool:
        """Every rank, with the same outcome of rank 0's write (`dist.main_process_outcome`): act on
        `train.save_failure` together."""
        if error is None:
            return True
        if self.train_opt['save_failure'] == 'warn':
            self.log.error(f'{error} (train.save_failure=warn: training continues)')
            return False
        raise TrainingStopped(f'{error}; the previous checkpoints are intact '
                              f'(train.save_failure="warn" would continue without it)', EXIT_SAVE_FAILED)

    def validate(self) -> None:
        v = self.opt['val']
        # The first validation of this process also scores the inputs themselves (same pass over the
        # data, same collectives on every rank): the score a restoration has to beat.
        res = self.model.validate(self.val_loader, len(self.val_loader.dataset), score_input=not self.input_scored,
                                  num_previews=v['tb_images'], write_item=self.write_image if v['save_img'] else None)
        if v['save_img'] and self.main:
            images = self.opt['path']['images']
            if res.write_error is not None:  # images are not training state: training goes on
                self.log.error(f'val.save_img: writing validation images of iteration {self.step} failed: '
                               f'{describe_write_error(res.write_error, images)}')
            else:
                self.log.info(f'val.save_img: validation images of iteration {self.step} in {images}')
        if not self.input_scored:
            self.log.info(f'<iter:{self.step:,d}> validation input: {describe_input(res.input, res.names)}')
            self.input_scored = True
        m = res.means
        self.log.info(f'<iter:{self.step:,d}> validation on {m["count"]} items: {describe_scores(m, res.names)}; '
                      f'weights: {res.weights}')
        self.reporter.scalars(self.step, {f'val/{k}': m[k] for k in res.names})
        self.reporter.row({'kind': 'val', 'iter': self.step, 'epoch': self.epoch,
                           'test_set': self.opt['datasets']['test']['name'], 'items': m['count'],
                           **{k: m[k] for k in res.names}, 'time': time.time()})
        self.reporter.images(self.step, {f'val_images/{k}': img for k, img in res.previews.items()})
        metric = self.best['metric']
        if is_better(m[metric], self.best['value'], res.higher_is_better[metric]):
            self.best = {'metric': metric, 'value': m[metric], 'iter': self.step}
            files: Dict[str, Any] = {}

            def write() -> None:
                files.update(self.model.state_files())
                self.ckpt.save_best(files, self.step, m[metric], metric)
            self.act_on_write(dist.main_process_outcome(write, lambda e: (
                f'best checkpoint at iteration {self.step} failed: '
                f'{describe_write_error(e, self.ckpt.folder, lambda: object_bytes(files))}')))
        self.reporter.redraw_curves()

    def write_image(self, name: str, frames: List[bytes]) -> None:
        """`val.save_img` (rank 0): one restored item in KAIR's layout `images/<name>/<name>_<iter>.png`;
        clips get one file per frame, `<frame>_<iter>.png`."""
        folder = os.path.join(self.opt['path']['images'], name)
        for j, data in enumerate(frames):
            stem = name if len(frames) == 1 else f'{j:04d}'
            atomic_write_bytes(os.path.join(folder, f'{stem}_{self.step}.png'),
                               lambda f, data=data: f.write(data), size=len(data))

    def run(self) -> None:
        total = self.train_opt['total_iter']
        if self.step >= total:
            self.log.info(f'nothing to do: iteration {self.step} >= train.total_iter {total}')
            return
        self.log.info(f'start training at iteration {self.step} of {total}')
        self.model.end_iteration(self.step)
        self.timing = Timing()
        groups = self.training_batches()
        self.timing.tick()
        while self.step < total:
            batches, data_error = self.next_batches(groups)
            self.timing.data_ready()
            self.agree_to_go_on(data_error)
            self.step += 1
            self.epoch_step += 1
            self.train_step(batches)
            self.model.end_iteration(self.step)
            self.timing.step_done()
            self.after_step(total)
            if self.epoch_step == self.steps_in_epoch():
                self.epoch += 1
                self.epoch_start, self.epoch_step = 0, 0
            self.timing.tick()
        best = self.best
        self.log.info(f'end of training at iteration {self.step}; ' + (
            f'best {best["metric"]} {best["value"]:.4f} at iteration {best["iter"]}' if best['value'] is not None
            else f'no validation since val.best_metric {best["metric"]} was chosen'))
        self.check_replicas()

    def schedule_row(self, total: int, points: int = 400) -> Dict[str, Any]:
        """The history row of the lr schedule planned from here to `total` (curves.png draws it in the lr panel):
        `points` evenly spaced iterations, each iteration where a phase begins (the end of the warm-up, a decay's
        start: corners drawn where they are) and each side of every step of the schedule (a milestone's drop is
        drawn where it happens), from the schedule's closed form; rank 0 writes it at every start."""
        first = self.step
        corners = [i for i in self.model.lr_phases() if first <= i <= total]  # where a phase begins: drawn exactly
        its = sorted({first, total, *corners, *range(first, total + 1, max(1, (total - first) // points or 1))})
        lrs = self.model.lr_schedule(its)
        # where the lr jumps between two samples (milestones, restarts), add the iterations around the jump
        fine: List[int] = []
        for (a, x), (b, y) in zip(zip(its, lrs), zip(its[1:], lrs[1:])):
            if b - a > 1 and abs(y - x) > 0.1 * max(abs(x), abs(y)):
                lo, hi = a, b  # bisect the jump to the iteration where it happens
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if abs(self.model.lr_schedule([mid])[0] - x) <= 0.1 * max(abs(x), abs(y)):
                        lo = mid
                    else:
                        hi = mid
                fine += [lo, hi]
        if fine:
            its = sorted(set(its) | set(fine))
            lrs = self.model.lr_schedule(its)
        return {'kind': 'schedule', 'iter': self.step, 'points': [[i, lr] for i, lr in zip(its, lrs)]}

    def training_batches(self) -> Iterator[List[Any]]:
        """The micro-batch groups of one optimizer step each, from where training stands on, across epochs.

        The train loader is continuous (data/loader.py): one iterator serves the whole run, so its
        workers keep preparing batches over epoch boundaries instead of draining and starting over.
        A loader that does end (a finite one) starts again at the epoch the loop has reached.
        """
        while True:
            self.sampler.set_epoch(self.epoch)
            self.sampler.set_position(self.epoch_start + self.epoch_step * self.effective_batch)
            steps = 0
            for group in micro_batches(iter(self.train_loader), self.accum):
                steps += 1
                yield group
            if not steps:
                raise RuntimeError(f'the train loader gave no complete step at epoch {self.epoch}')

    @staticmethod
    def next_batches(groups: Iterator[List[Any]]) -> Tuple[Optional[List[Any]], Optional[str]]:
        """The next step's micro-batches, or the one line of a training file that can no longer be read (replaced
        by a damaged file, deleted since the start-up check; in a loader worker or here): the loop saves first."""
        try:
            return next(groups), None
        except UserError as e:
            return None, one_line(str(e))

    def agree_to_go_on(self, data_error: Optional[str]) -> None:
        """Before each iteration, the one host collective of a step: every rank learns whether any rank was asked to
        stop (a signal) or could not read its batch, and all stop together, here, after a checkpoint of the
        iterations done so far. Host flags only: nothing here waits for the device."""
        signals = self.signals
        stop_asked, interrupted, data_failed = dist.agree_any([signals.requested, signals.interrupted,
                                                               data_error is not None])
        if data_failed:
            # only on this path, taken by every rank together: the line of the rank that failed
            errors = dist.gather_objects(data_error)
            rank = next(r for r, e in enumerate(errors) if e is not None)
            where = f' (rank {rank})' if self.state.world_size > 1 else ''
            saved = self.save_before_stopping()
            if self.last_saved == self.step:
                saved += f' at iteration {self.step}'
            raise TrainingStopped(f'iteration {self.step + 1}: training data{where}: {errors[rank]}; {saved}; '
                                  f'replace or remove the file, then rerun the same command to resume', EXIT_USER_ERROR)
        if stop_asked:
            by = signals.name() or ('SIGINT (Ctrl-C) on another rank' if interrupted else 'a signal on another rank')
            saved = self.save_before_stopping()
            at = f'at iteration {self.step}' if self.step else 'before the first iteration'
            raise TrainingStopped(f'stopped by {by} {at}; {saved}, rerun the same command to '
                                  f'{"resume" if self.last_saved is not None else "start"}',
                                  EXIT_INTERRUPTED if interrupted else EXIT_PREEMPTED)

    def save_before_stopping(self) -> str:
        """A checkpoint of the iterations done so far, unless there is one already; what happened, for the last line."""
        self.check_skipped_steps()  # non-finite steps since the last check: exit 4, no save (as at any save)
        if self.last_saved == self.step:
            return 'checkpoint saved'
        if not self.step:
            return 'nothing to save yet'
        with self.model.eval_weights():
            saved = self.save()
        return 'checkpoint saved' if saved else 'the checkpoint FAILED'

    def after_step(self, total: int) -> None:
        """Check skipped steps, print, save, then validate (a failing validation never costs the save).
        The checks come first at every point that reads the device anyway or writes."""
        t, last = self.train_opt, self.step == total
        if t['compile']:
            self.note_compilation()
        if self.device.type == 'cuda' and not self.first_peak_noted:
            self.first_peak_noted = True  # what the run needs of the card, before it runs for hours
            total_mem = torch.cuda.get_device_properties(self.device).total_memory
            self.log.info(f'first iteration: peak GPU memory {torch.cuda.max_memory_allocated(self.device) / 2**30:.2f} '
                          f'GiB of the card\'s {total_mem / 2**30:.1f} GiB (video networks: netG.checkpoint "memory" '
                          f'needs least)')
        print_due = self.step % t['checkpoint_print'] == 0 or last
        save_due = self.step % t['checkpoint_save'] == 0 or last
        validate_due = self.val_loader is not None and (self.step % t['checkpoint_test'] == 0 or last)
        if print_due or save_due or validate_due:
            self.check_skipped_steps()
        if print_due:
            self.print_status(*self.timing.take())
        if save_due or validate_due:
            # a schedule-free optimizer's averaged weights are what is validated and saved; one switch for both
            # (each switch and its way back round the training weights: a resumed run makes the same one)
            with self.model.eval_weights():
                if save_due:
                    self.save()
                if validate_due:
                    self.validate()

    def train_step(self, batches: List[Any]) -> None:
        """Backward, the step's non-finite verdict (on the device, utils/step_gate.py), then the gated step.
        Nothing here reads the device; the only per-iteration host collective is the tiny agreement before it
        (`agree_to_go_on`: stop signals, unreadable data), which never waits for the GPU."""
        loss = self.model.backward(batches)
        finite = self.model.finalize_gradients(self.step, loss)
        applied = self.gate.decide(finite, self.step, self.model.iteration_losses()[1]) \
            if self.gate is not None else None
        self.model.step(self.step, loss, applied)

    def note_compilation(self) -> None:
        """`train.compile`: what the first iteration cost, and any later compilation (a recompilation means the
        inputs or the modules changed between iterations; each costs about as much as the first)."""
        graphs = compiled_graphs()
        if self.graphs_seen is None:
            self.log.info(f'train.compile: the first iteration took {self.timing.last:.1f} s, compilation included '
                          f'({graphs} graphs)')
        elif graphs > self.graphs_seen:
            self.log.warning(f'train.compile: {graphs - self.graphs_seen} more graph(s) compiled at iteration '
                             f'{self.step}: a recompilation (input shapes or module attributes changed)')
        self.graphs_seen = graphs

    def check_skipped_steps(self) -> None:
        """Apply `train.nan_policy` to what the gate counted since the last check (see utils/step_gate.py)."""
        if self.gate is None:
            return
        s = self.gate.take()
        if not s.skipped:
            return
        ranks = ''
        if s.ranks and self.state.world_size > 1:
            ranks = f' on rank{"s" if len(s.ranks) > 1 else ""} {", ".join(map(str, s.ranks))}'
        if self.train_opt['nan_policy'] == 'stop':
            what = non_finite_words(self.model.iteration_losses()[0], s.terms)
            raise TrainingStopped(f'iteration {s.first}: {what}{ranks} (train.nan_policy=stop); '
                                  f'{self.newest_save()}', EXIT_NONFINITE)
        if s.limit_at:
            raise TrainingStopped(f'iteration {s.limit_at}: {self.gate.limit} steps in a row skipped for non-finite '
                                  f'loss or gradients (train.nan_skip_limit); the run is not recovering; '
                                  f'{self.newest_save()}', EXIT_NONFINITE)
        where = f'iteration {s.first}' if s.skipped == 1 else f'iterations {s.first}-{s.last}'
        self.log.warning(f'{where}: {s.skipped} step{"s" if s.skipped > 1 else ""} skipped, non-finite loss or '
                         f'gradients{ranks} (train.nan_policy=skip, at most {s.longest} in a row)')

    def check_replicas(self) -> None:
        """DDP must leave identical parameters (netG, its EMA, a GAN's netD) on every rank; a divergence
        is a bug worth stopping on.

        Buffers are not compared: with BatchNorm each rank's running statistics take one step on
        its own data after the last broadcast, and checkpoints take rank 0's.
        """
        digests = dist.gather_objects(''.join(parameter_digest(net) for net in self.model.networks()))
        if len(set(digests)) != 1:
            raise RuntimeError(f'network parameters differ across ranks: {digests}')
        self.log.info(f'parameters identical on all {len(digests)} rank(s): sha1 {digests[0][:16]}')

    def print_status(self, iter_time: float, data_time: float, seconds_per_iter: float) -> None:
        losses = self.model.log_losses()
        lr = self.model.current_lr()
        eta = seconds_per_iter * (self.train_opt['total_iter'] - self.step)
        throughput = self.effective_batch / max(iter_time, 1e-9)
        loss_txt = ' '.join(f'{k}: {v:.3e}' for k, v in losses.items())
        perf = {'iter_time': iter_time, 'data_time': data_time, 'samples_per_sec': throughput}
        gpu = ''
        if self.device.type == 'cuda':  # peak since the start: what the run needs of the card
            perf['gpu_mem_gib'] = torch.cuda.max_memory_allocated(self.device) / 2 ** 30
            gpu = f' mem: {perf["gpu_mem_gib"]:.2f} GiB'
        self.log.info(f'<epoch:{self.epoch:3d}, iter:{self.step:8,d}, lr:{lr:.3e}> {loss_txt} '
                      f'time/iter: {iter_time:.3f}s data: {data_time:.3f}s {throughput:.1f} samples/s{gpu} '
                      f'eta: {_hms(eta)}')
        self.reporter.scalars(self.step, {**{f'train/{k}': v for k, v in losses.items()}, 'train/lr': lr,
                                          **{f'perf/{k}': v for k, v in perf.items()}})
        self.reporter.row({'kind': 'train', 'iter': self.step, 'epoch': self.epoch, 'lr': lr, **losses, **perf,
                           'time': time.time()})
        self.print_windows += 1
        if self.main and self.print_windows > 1 and data_time > DATA_WAIT_HINT * iter_time and not self.data_hinted:
            self.data_hinted = True  # the first window holds the workers' start-up; later ones are the steady state
            self.log.warning(f'data loading takes {100 * data_time / iter_time:.0f} % of each iteration: the network '
                             f'waits for data; see docs/speed.md "Is my GPU waiting for data?" (more '
                             f'dataloader_num_workers, cache_data, LMDB frames stored raw)')

    def close(self) -> None:
        # Dropping the loaders shuts their (persistent) worker processes down now, not at exit.
        self.train_loader = self.val_loader = None
        reporter = getattr(self, 'reporter', None)
        if reporter is not None:
            reporter.close()


class Timing:
    """Iteration and data-wait times averaged over a print window; seconds per iteration since the start."""

    def __init__(self) -> None:
        self.steps, self.t0 = 0, time.time()
        self.iter_time = self.data_time = 0.0
        self.last = 0.0  # seconds of the last iteration
        self.window = 0
        self._tick = self.t0

    def tick(self) -> None:
        self._tick = time.time()

    def data_ready(self) -> None:
        self.data_time += time.time() - self._tick

    def step_done(self) -> None:
        self.last = time.time() - self._tick
        self.iter_time += self.last
        self.window += 1
        self.steps += 1

    def take(self) -> Tuple[float, float, float]:
        """(mean iteration time, mean data time) of the window, and overall seconds per iteration; resets the window."""
        n = max(self.window, 1)
        out = (self.iter_time / n, self.data_time / n, (time.time() - self.t0) / max(self.steps, 1))
        self.iter_time = self.data_time = 0.0
        self.window = 0
        return out


def is_better(value: float, best: Optional[float], higher_is_better: bool) -> bool:
    """Whether a validation's `value` beats the best so far (None: there is none yet); NaN never does."""
    if math.isnan(value):
        return False
    return best is None or (value > best if higher_is_better else value < best)


def resumed_best(saved: Mapping[str, Any], noted: Optional[Tuple[int, float, str]], step: int,
                 metric: str) -> Tuple[Dict[str, Any], str]:
    """(the best validation a resumed run goes on from, a warning or '').

    `saved` is the state file's record: {'metric', 'value', 'iter'}, or {'psnr', 'iter'} as written before
    `val.best_metric` existed (-inf: none yet). `noted` is the `best` note of the run's folder (iteration,
    value, metric): written at a validation after the save it resumes, it is newer when its iteration lies
    after the saved one, up to `step`. A `val.best_metric` other than the saved one restarts the tracking:
    the best_*.pth files of the old metric stay until the first validation replaces them.
    """
    if 'metric' in saved:
        best = dict(saved)
    else:
        psnr = saved['psnr']
        best = {'metric': 'psnr', 'value': None if psnr == float('-inf') else psnr, 'iter': saved['iter']}
    if noted is not None and noted[2] == best['metric'] and best['iter'] < noted[0] <= step:
        best = {'metric': noted[2], 'value': noted[1], 'iter': noted[0]}
    if best['metric'] == metric:
        return best, ''
    was = 'none yet' if best['value'] is None else f'{best["value"]:.4f} at iteration {best["iter"]}'
    return ({'metric': metric, 'value': None, 'iter': 0},
            f'val.best_metric changed from {best["metric"]} (best {was}) to {metric}: the best checkpoint is '
            f'chosen by {metric} from the next validation on (best_*.pth is replaced then)')


def parameter_digest(net: torch.nn.Module) -> str:
    """sha1 over every parameter, bit for bit."""
    h = hashlib.sha1()
    for name, t in net.named_parameters():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f'{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}'


def prepare_run_dir(opt: Dict[str, Any], state: dist.DistState, args: argparse.Namespace) -> Optional[RunLock]:
    """Rank 0: lock the run folder, archive for --fresh, create folders, start the log file, save the options.

    The lock comes first, before anything is written: a second job on the same folder ends on every
    rank with one line naming the holder (exit 2) and leaves no trace. Rank 0 gets the lock back and
    holds it until the process ends. A write that fails here (a full disk) ends every rank with one
    line and exit 5, as a failed checkpoint does.
    """
    task_dir = opt['path']['task']
    taken: List[RunLock] = []

    def lock_problem(e: BaseException) -> Optional[Tuple[str, str]]:
        if isinstance(e, UserError):  # held by another job
            return 'busy', str(e)
        return ('write', describe_write_error(e, task_dir)) if isinstance(e, OSError) else None  # no space for it
    outcome = dist.main_process_outcome(lambda: taken.append(RunLock.acquire(task_dir)), lock_problem)
    if outcome is not None and outcome[0] == 'busy':
        raise UserError(outcome[1])
    lock = taken[0] if taken else None
    try:
        if outcome is not None:
            raise _run_folder_failed(task_dir, outcome[1])
        archived = archive_task_dir(task_dir) if args.fresh and dist.is_main_process() else None
        dist.barrier()

        def write_folder() -> None:
            for key in ('task', 'models', 'options'):
                os.makedirs(opt['path'][key], exist_ok=True)
            log_to_file(task_dir)
            name = os.path.splitext(os.path.basename(opt['opt_path']))[0]
            atomic_write_text(os.path.join(opt['path']['options'], f'{name}_{time.strftime("%y%m%d_%H%M%S")}.json'),
                              dumps(opt) + '\n')
        write_error = dist.main_process_outcome(
            write_folder, lambda e: describe_write_error(e, task_dir) if isinstance(e, OSError) else None)
        if write_error is not None:
            raise _run_folder_failed(task_dir, write_error)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    if lock is not None and lock.warning:
        get_logger().warning(lock.warning)
    if archived:
        get_logger().info(f'--fresh: previous run moved to {archived}')
    return lock


def _run_folder_failed(task_dir: str, problem: str) -> TrainingStopped:
    return TrainingStopped(f'writing the run folder {task_dir} failed: {problem}; nothing trained yet',
                           EXIT_SAVE_FAILED)


def is_restart(env: Mapping[str, str]) -> bool:
    """Whether this process is an automatic restart of a job: `torchrun --max-restarts` or a SLURM requeue.

    Both rerun the very same command line, so a `--fresh` in it was meant for the first start only.
    """
    return any(int(env.get(key) or 0) > 0 for key in ('TORCHELASTIC_RESTART_COUNT', 'SLURM_RESTART_COUNT'))


def stop_if_asked(signals: stop.StopSignals, when: str) -> None:
    """A safe point of the start-up, the same on every rank: a stop asked for so far (on any rank) ends the run
    here, before anything is written to the run folder, with exit 3 (130 for Ctrl-C)."""
    asked, interrupted = dist.agree_any([signals.requested, signals.interrupted])
    if asked:
        by = signals.name() or ('SIGINT (Ctrl-C) on another rank' if interrupted else 'a signal on another rank')
        raise TrainingStopped(f'stopped by {by} during start-up ({when}): nothing written, nothing to save; rerun '
                              f'the same command to continue', EXIT_INTERRUPTED if interrupted else EXIT_PREEMPTED)


def settle_launch(opt: Dict[str, Any], state: dist.DistState, args: argparse.Namespace,
                  env: Mapping[str, str]) -> Tuple[Dict[str, Any], argparse.Namespace, List[str]]:
    """What the launch decides over the options and the command line, decided once, in new objects:
    `dist` is the detected launch mode (saved as such), and `--fresh` applies to the first start of a
    job only (an automatic restart reruns the same command line). Returns them with the log lines."""
    notes = []
    if args.fresh and is_restart(env):
        notes.append('--fresh: ignored on this automatic restart of the job (it applied to the first start); resuming')
        args = argparse.Namespace(**{**vars(args), 'fresh': False})
    if opt['dist'] != state.distributed:
        notes.append(f'options: "dist": {str(opt["dist"]).lower()} overridden by the detected launch '
                     f'mode ({state.mode}, world size {state.world_size})')
        opt = {**opt, 'dist': state.distributed}
    return opt, args, notes


def train(opt: Dict[str, Any], state: dist.DistState, args: argparse.Namespace) -> None:
    dist.select_gpus(opt['gpu_ids'], state)
    device = dist.init(state, opt['dist_timeout'])
    threads = dist.set_cpu_threads(state, opt['datasets']['train']['dataloader_num_workers']
                                   if 'train' in opt['datasets'] else 0)
    log = setup_logger(state.rank)
    signals = stop.install()
    trainer, lock = None, None
    ok = False
    try:
        stop_if_asked(signals, 'while loading')  # on every rank, the first point where all of them can agree
        log.info(dist.banner(state, device))
        if threads:
            log.info(threads)
        for note in opt['_notes'] + training_notes(opt):
            log.warning(f'options: {note}')
        opt, args, notes = settle_launch(opt, state, args, os.environ)
        for note in notes:
            log.info(note)
        trainer = Trainer(opt, state, device, args)
        trainer.build()
        stop_if_asked(signals, 'while checking the data and the model')
        if trainer.finished():
            ok = True
            return  # nothing to train: nothing written (no log or options file added to the run folder)
        lock = prepare_run_dir(opt, state, args)
        trainer.start()
        trainer.run()
        ok = True
    except TrainingStopped:
        ok = True  # every rank agreed to stop at this point: leave together
        raise
    finally:
        if trainer is not None:
            trainer.close()
        dist.cleanup(together=ok)  # the stop-signal handlers stay until the process exits: a late SIGTERM is no 143
        if lock is not None:
            lock.release()


def one_line(message: str) -> str:
    """A UserError raised in a DataLoader worker comes back wrapped in its traceback: keep the error."""
    if 'Original Traceback' in message:
        return message.strip().splitlines()[-1].split('UserError: ', 1)[-1]
    return message


def describe(name: str) -> int:
    """`--describe NAME`: the keys that member reads (option_catalog.py, as docs/options.md shows them)."""
    from option_catalog import describe as describe_member  # every member module is imported: only when asked
    try:
        print(describe_member(name), flush=True)
    except UserError as e:
        say(f'error: {e}')
        return EXIT_USER_ERROR
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parent_watch.install()  # first: the parent pid it records must be the launcher's
    signals = stop.install()  # already there when run as a script (see the top of this file)
    args = parse_args(argv)
    if args.describe is not None:
        return describe(args.describe)
    try:
        opt = read_options(args.opt, args.set)
        state = dist.detect()
        if not state.distributed:  # a rank waits for the others: they all stop together once they have met
            stop_if_asked(signals, 'while loading')
        code = maybe_relaunch(opt, state, __file__, sys.argv[1:] if argv is None else argv)
        if code is not None:  # this process only launched the ranks
            return code
        train(opt, state, args)
    except UserError as e:
        if signals.requested:  # asked to stop before the failure: what a job script must act on (requeue)
            say(f'stopped: stopped by {signals.name()}; nothing saved (the run failed meanwhile: '
                f'{one_line(str(e))}); rerun the same command to continue')
            return signals.code
        say(f'error: {one_line(str(e))}')
        return EXIT_USER_ERROR
    except TrainingStopped as e:
        say(f'{"stopped" if e.code in (EXIT_PREEMPTED, EXIT_INTERRUPTED) else "error"}: {e}')
        return e.code
    return 0


if __name__ == '__main__':
    dist.exit_now(main())
