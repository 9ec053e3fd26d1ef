"""The train loop: one `Trainer` for every model and launch mode. Data -> the model's step -> the periodic status
line, validation and checkpoint, rank-aware: every rank makes the same collective calls in the same order, and the
run folder's writes go through rank 0 (utils/logger.py's Reporter, `dist.main_process_write`).

main_train.py parses the command line, reads the options and joins the process group; `Trainer.build` checks what
the user gave before the run folder is touched, `start` resumes or begins, `run` trains until the end or a stop.
"""
import argparse
import os
import random
import time
from typing import Any, Dict, List, Optional

import torch

from data.batch_augment import with_batch_augmentation
from data.loader import build_train_loader, build_val_loader, val_loader_options
from data.registry import build_dataset, training_files
from data.sampler import TrainKey
from data.synthetic.demo import ensure_demo_data
from models.compile import compiled_graphs
from models.evaluation import describe_input, describe_scores
from models.interface import TrainingModel
from models.out_of_memory import stop_line
from models.registry import MODELS
from training import resume_plan
from training.batches import next_batches, step_batches
from training.replicas import check_replicas
from training.resume_plan import (epoch_layout, is_better, resume_position, resumed_best, steps_in_epoch,
                                  training_set_change)
from training.run_folder import tidy_checkpoints
from training.status import (Timing, compilation_note, data_wait_hint, peak_memory_line, schedule_row, status_line,
                             window_perf)
from utils import dist, stop
from utils.checkpoint import CheckpointDir, atomic_write_bytes
from utils.diskspace import describe_write_error, object_bytes
from utils.errors import UserError, first_line
from utils.exit_codes import (EXIT_INTERRUPTED, EXIT_NONFINITE, EXIT_OUT_OF_MEMORY, EXIT_PREEMPTED, EXIT_SAVE_FAILED,
                              EXIT_USER_ERROR)
from utils.logger import Reporter, get_logger, show_console
from utils.oom import OutOfMemory, caught, is_out_of_memory, on_out_of_memory, pass_of
from utils.resume import ResumePoint, find_resume_point
from utils.seed import rng_state, seed_everything, set_rng_state
from utils.step_gate import StepGate
from utils.stop import TrainingStopped


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
        self.gate = (StepGate(device, self.train_opt['nan_skip_limit']) if self.train_opt['nan_policy'] != 'off'
                     else None)
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
        seed, note = resume_plan.choose_seed(t['manual_seed'], self.point)
        if note:
            self.log.warning(note)
        self.seed = seed if seed is not None else dist.broadcast_object(random.randint(1, 10000))
        seed_everything(self.seed)
        self.log.info(f'seed {self.seed} (same on every rank; data order comes from the sampler)')
        t['accumulate_steps'] = self.resumed_accumulation(self.point, train_opt_ds['dataloader_batch_size'])
        t['channels_last'], note = resume_plan.resumed_memory_format(self.point, t['channels_last'])
        if note:
            self.log.info(note)
        note = resume_plan.resumed_threads_note(self.point, self.cpu_threads())
        if note:
            self.log.warning(note)

        self.train_loader, self.sampler = build_train_loader(
            self.train_set, train_opt_ds, self.state.world_size, self.state.rank, self.seed, self.device,
            t['accumulate_steps'], continuous=True)
        self.val_loader = None
        if val_set is not None:
            self.val_loader = build_val_loader(val_set, self.state.world_size, self.state.rank,
                                               **val_loader_options(opt['datasets']['test']))
        self.accum = t['accumulate_steps']
        self.steps_per_epoch, self.effective_batch, line = epoch_layout(
            len(self.train_loader), self.accum, train_opt_ds['dataloader_batch_size'], self.state.world_size,
            self.sampler.num_samples, len(self.train_set))
        self.log.info(line)

        self.model: TrainingModel = MODELS.get(opt['model'], 'model')(opt, self.device, self.args.allow_unsafe_load)
        self.log.info(self.model.network_info())
        channels = getattr(self.train_set, 'channels_note', None)  # image datasets say what sets their channels
        self.model.check_sample(self.train_set[TrainKey(0, 0)], train_opt_ds['_where'],
                                channels() if channels is not None else None)
        if val_set is not None and len(val_set):
            self.model.check_test_sample(val_set[0], opt['datasets']['test']['_where'])

    def cpu_threads(self) -> Optional[int]:
        """This process's intra-op threads where they decide the numerics (a CPU run), else None."""
        return torch.get_num_threads() if self.device.type == 'cpu' else None

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
        """`train.accumulate_steps`, or on a resume with `train.keep_effective_batch` the accumulation that keeps
        the resumed run's effective batch (training/resume_plan.py): one log line when it changes."""
        accum, note = resume_plan.resumed_accumulation(point, self.train_opt, self.state.world_size, batch)
        if note:
            self.log.info(note)
        return accum

    def start(self) -> None:
        """Once the run folder is ours: tidy `models/`, restore the resume point, open reporters."""
        error = dist.main_process_outcome(
            lambda: tidy_checkpoints(self.ckpt, self.point.training['iter'] if self.point is not None else 0, self.log),
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
            self.reporter.row(schedule_row(self.model, self.step, self.train_opt['total_iter']))

    def restore(self, point: ResumePoint) -> Optional[str]:
        """Put the run where `point` left it: weights and optimizer state, iteration, best validation, data
        position (training/resume_plan.py decides where the epoch goes on) and random states; returns the run's
        W&B id. Only once the run folder is ours (`start`): a resume that fails at build time wrote nothing."""
        s = point.training
        self.model.load_state(point.weights, s['model'])
        self.step = s['iter']
        same_run = os.path.realpath(os.path.dirname(point.path)) == os.path.realpath(self.ckpt.folder)
        self.best, note = resumed_best(s['best'], self.ckpt.read_best() if same_run else None, self.step,
                                       self.opt['val']['best_metric'])
        if note:
            self.log.warning(f'resume: {note}')
        layout = (self.state.world_size, self.train_loader.batch_size, self.accum)
        files_changed = training_set_change(s.get('train_files'), self.train_files)
        (self.epoch, self.epoch_start, self.epoch_step), notes = resume_position(
            s, point.path, self.seed, files_changed, layout, self.steps_per_epoch, self.effective_batch)
        for level, line in notes:
            self.log.log(level, line)
        rngs = s['rng']
        set_rng_state(rngs[self.state.rank] if self.state.rank < len(rngs) else rngs[0])
        self.log.info(f'resumed from {point.path} at iteration {self.step} (epoch {self.epoch}, '
                      f'{self.epoch_step} iterations into it)')
        if same_run:
            self.last_saved = self.step
        return s['wandb_id']

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
                'accumulate_steps': self.accum, 'channels_last': self.model.channels_last,
                'cpu_threads': self.cpu_threads(), 'seed': self.seed,
                'rng': rngs, 'best': self.best,
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
        """Where a rerun would resume from, for the last line of a run that stops without saving."""
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
        """Score the test set on every rank (the model gathers the scores), log and record them, and keep the
        weights of the best validation by `val.best_metric` (best_*.pth): the checkpoint to use after training,
        which need not be the last one."""
        v = self.opt['val']
        # The first validation of this process also scores the inputs themselves (same pass over the
        # data, same collectives on every rank): the score a restoration has to beat.
        with on_out_of_memory(lambda e: out_of_memory(self, f'in validation at iteration {self.step}', e, True)):
            res = self.model.validate(self.val_loader, len(self.val_loader.dataset),
                                      score_input=not self.input_scored, num_previews=v['tb_images'],
                                      write_item=self.write_image if v['save_img'] else None)
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
        """Train from `self.step` to `train.total_iter`: each iteration agrees with the other ranks to go on,
        steps, then prints, saves and validates when due (`after_step`); a stop (signal, unreadable data,
        non-finite steps) leaves as TrainingStopped after the saves it calls for. At the end the ranks' parameters
        are compared: DDP must leave them identical."""
        total = self.train_opt['total_iter']
        if self.step >= total:
            self.log.info(f'nothing to do: iteration {self.step} >= train.total_iter {total}')
            return
        self.log.info(f'start training at iteration {self.step} of {total}')
        self.model.end_iteration(self.step)
        self.timing = Timing()
        # the position is read where a finite loader starts again: at the epoch the loop has reached
        groups = step_batches(self.train_loader, self.sampler, self.accum, lambda: (
            self.epoch, self.epoch_start + self.epoch_step * self.effective_batch))
        self.timing.tick()
        while self.step < total:
            batches, data_error = next_batches(groups)
            self.timing.data_ready()
            self.agree_to_go_on(data_error)
            self.step += 1
            self.epoch_step += 1
            self.train_step(batches)
            self.model.end_iteration(self.step)
            self.timing.step_done()
            self.after_step(total)
            if self.epoch_step == steps_in_epoch(self.steps_per_epoch, self.effective_batch, self.epoch_start):
                self.epoch += 1
                self.epoch_start, self.epoch_step = 0, 0
            self.timing.tick()
        best = self.best
        self.log.info(f'end of training at iteration {self.step}; ' + (
            f'best {best["metric"]} {best["value"]:.4f} at iteration {best["iter"]}' if best['value'] is not None
            else f'no validation since val.best_metric {best["metric"]} was chosen'))
        self.check_replicas()

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
            self.log.info(peak_memory_line(self.device))
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
        (`agree_to_go_on`: stop signals, unreadable data), which never waits for the GPU. Out of memory on this
        rank ends the run here (`out_of_memory`, naming the phase)."""
        phase = ''
        try:
            loss = self.model.backward(batches)
            phase = 'the optimizer step'
            finite = self.model.finalize_gradients(self.step, loss)
            applied = self.gate.decide(finite, self.step, self.model.iteration_losses()[1]) \
                if self.gate is not None else None
            self.model.step(self.step, loss, applied)
        except Exception as e:
            if not is_out_of_memory(e):
                raise
            raise out_of_memory(self, f'in {phase or f"the {pass_of(e)} pass"} of iteration {self.step}', e) from None

    def note_compilation(self) -> None:
        """`train.compile`: what the first iteration cost, and any later compilation (training/status.py)."""
        graphs = compiled_graphs()
        note = compilation_note(graphs, self.graphs_seen, self.timing.last, self.step)
        if note is not None:
            self.log.log(*note)
        self.graphs_seen = graphs

    def check_skipped_steps(self) -> None:
        """Apply `train.nan_policy` to what the gate counted since the last check (see utils/step_gate.py)."""
        if self.gate is None:
            return
        warning = self.gate.check(self.train_opt['nan_policy'], self.state.world_size,
                                  lambda: self.model.iteration_losses()[0], self.newest_save)
        if warning:
            self.log.warning(warning)

    def check_replicas(self) -> None:
        """At the end: the same parameters on every rank (training/replicas.py), or a RuntimeError."""
        self.log.info(check_replicas(self.model.networks()))

    def print_status(self, iter_time: float, data_time: float, seconds_per_iter: float) -> None:
        """A print window's status line (training/status.py), its history row and scalars; and once, when the
        network waits for data, the hint that says so (the first window holds the workers' start-up)."""
        losses, lr = self.model.log_losses(), self.model.current_lr()
        perf = window_perf(self.effective_batch, iter_time, data_time, self.device)
        eta = seconds_per_iter * (self.train_opt['total_iter'] - self.step)
        self.log.info(status_line(self.epoch, self.step, lr, losses, perf, eta))
        self.reporter.scalars(self.step, {**{f'train/{k}': v for k, v in losses.items()}, 'train/lr': lr,
                                          **{f'perf/{k}': v for k, v in perf.items()}})
        self.reporter.row({'kind': 'train', 'iter': self.step, 'epoch': self.epoch, 'lr': lr, **losses, **perf,
                           'time': time.time()})
        self.print_windows += 1
        if self.main and self.print_windows > 1 and not self.data_hinted:
            hint = data_wait_hint(data_time, iter_time)
            if hint is not None:
                self.data_hinted = True  # the first window holds the workers' start-up; later ones are the steady state
                self.log.warning(hint)

    def close(self) -> None:
        """Release what the run holds, whether it ended or failed. Dropping the loaders shuts their (persistent)
        worker processes down now, not at exit."""
        self.train_loader = self.val_loader = None
        reporter = getattr(self, 'reporter', None)
        if reporter is not None:
            reporter.close()


def out_of_memory(trainer: Trainer, where: str, e: BaseException, evaluation: bool = False) -> TrainingStopped:
    """The stop an out-of-memory error makes, with its line (models/out_of_memory.py). An error of this rank alone
    (a step, the start-up checks) is told to the other ranks first, which end with it at once
    (utils/dist/departure.py); a validation's is already every rank's (agreed in the evaluation's gather). Nothing
    is saved: a broken step may have changed part of the weights; the newest save is named."""
    model = getattr(trainer, 'model', None)
    line = stop_line(trainer.opt, trainer.device, where, model.networks()[0] if model is not None else None, caught(e),
                     evaluation, trainer.state.rank, trainer.state.world_size)
    line += f'; no checkpoint written after it; {trainer.newest_save()}'
    if not isinstance(e, OutOfMemory):
        dist.depart(line, EXIT_OUT_OF_MEMORY)
    return TrainingStopped(line, EXIT_OUT_OF_MEMORY)
