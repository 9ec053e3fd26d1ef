"""Train any registered model from a JSON option file: one loop for every model and launch mode.

    python main_train.py --opt options/train_dncnn_demo.json [--set train.total_iter=100 ...]
    python main_train.py --describe hat     # the keys a network, dataset, loss, ... takes, and exit
    python main_train.py --check --opt options/train_dncnn_demo.json   # everything before the first step, reported;
                                                                        # nothing written

Launch modes (detected, never configured): plain process, torchrun / platform-injected env
(WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), or a SLURM job step (srun).
"""
if __name__ == '__main__':
    # First of all, before the imports below (torch alone takes seconds): a stop signal during start-up is
    # kept and acted on at the first safe point (exit 3, or 130 for Ctrl-C), never the default death (143).
    from utils import stop as _early_stop
    _early_stop.install()

import argparse  # noqa: E402
import os
import sys
from typing import Any, Dict, Optional, Sequence

# c10d's C++ warnings (store retries, shutdown notes) are noise next to our one-line errors;
# TORCH_CPP_LOG_LEVEL=INFO shows them. Must be set before torch is imported.
os.environ.setdefault('TORCH_CPP_LOG_LEVEL', 'ERROR')
# How OpenMP's idle threads wait (a short spin, then sleep: utils/wait_policy.py): read once, when torch loads
# OpenMP, so it is chosen before torch is imported.
from utils import wait_policy  # noqa: E402

wait_policy.choose()

import torch  # noqa: E402

from option_rules import read_options
from training.batches import one_line
from training.check import checked_run
from training.launcher import maybe_relaunch, settle_launch
from training.run_folder import prepare_run_dir
from training.trainer import Trainer, out_of_memory
from utils import dist, parent_watch, stop
from utils.checkpoint import UNSAFE_FLAG
from utils.errors import UserError, say
from utils.exit_codes import EXIT_INTERRUPTED, EXIT_PREEMPTED, EXIT_USER_ERROR
from utils.logger import setup_logger
from utils.oom import on_out_of_memory
from utils.options import training_notes
from utils.stop import TrainingStopped


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line: an option file (with `--set` overrides) to train, or `--describe NAME` to read."""
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument('--opt', help='path to the JSON option file')
    what.add_argument('--describe', metavar='NAME',
                      help='print the option keys of a registered network, dataset, loss, optimizer, scheduler, '
                           'metric, model or initialiser (type, default, meaning) and exit')
    p.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE',
                   help='override an option (value parsed as JSON, else a string); repeatable')
    p.add_argument('--check', action='store_true',
                   help='do everything the run does before its first step (options, every data folder, the network '
                        'with a sample, one step\'s memory, the launch), report it and exit: nothing is written')
    p.add_argument('--fresh', action='store_true',
                   help='start from scratch: move an existing <root>/<task> aside (never deleted)')
    p.add_argument(UNSAFE_FLAG, dest='allow_unsafe_load', action='store_true',
                   help='allow checkpoints that need full unpickling (only for files you trust)')
    # torch.distributed.launch passes --local-rank/--local_rank; LOCAL_RANK in the env is what counts.
    p.add_argument('--local_rank', '--local-rank', type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.check and args.opt is None:
        p.error('--check: give --opt FILE, the option file of the run to check')
    return args


def stop_if_asked(signals: stop.StopSignals, when: str) -> None:
    """A safe point of the start-up, the same on every rank: a stop asked for so far (on any rank) ends the run
    here, before anything is written to the run folder, with exit 3 (130 for Ctrl-C)."""
    asked, interrupted = dist.agree_any([signals.requested, signals.interrupted])
    if asked:
        by = signals.name() or ('SIGINT (Ctrl-C) on another rank' if interrupted else 'a signal on another rank')
        raise TrainingStopped(f'stopped by {by} during start-up ({when}): nothing written, nothing to save; rerun '
                              f'the same command to continue', EXIT_INTERRUPTED if interrupted else EXIT_PREEMPTED)


def train(opt: Dict[str, Any], state: dist.DistState, args: argparse.Namespace) -> None:
    """One rank's run, in the order that keeps a mistake cheap: join the process group, check everything the
    user gave (`Trainer.build`) before the run folder is touched, then lock and prepare the folder, resume and
    train. Every rank leaves together (`dist.cleanup`), also when any of them stops or fails."""
    dist.select_gpus(opt['gpu_ids'], state)
    device = dist.init(state, opt['dist_timeout'])
    threads = dist.set_cpu_threads(state, opt['datasets']['train']['dataloader_num_workers']
                                   if 'train' in opt['datasets'] else 0)
    log = setup_logger(state.rank)
    signals = stop.install()
    dist.watch_departures()  # a rank out of memory mid-step ends every rank (utils/dist/departure.py)
    trainer, lock = None, None
    ok = False
    try:
        stop_if_asked(signals, 'while loading')  # on every rank, the first point where all of them can agree
        log.info(dist.banner(state, device))
        if threads:
            log.info(threads)
        for note in opt['_notes'] + training_notes(opt) + dist.unused_gpu_notes(opt['gpu_ids'], state,
                                                                                  torch.cuda.is_available()):
            log.warning(f'options: {note}')
        opt, args, notes = settle_launch(opt, state, args, os.environ)
        for note in notes:
            log.info(note)
        trainer = Trainer(opt, state, device, args)
        with on_out_of_memory(lambda e: out_of_memory(trainer, 'at start-up (netG built, one training sample through '
                                                               'it)', e)):
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
    except Exception:
        dist.await_departure()  # an error that another rank's departure caused ends with its line, not a traceback
        raise
    finally:
        if trainer is not None:
            trainer.close()
        dist.cleanup(together=ok)  # the stop-signal handlers stay until the process exits: a late SIGTERM is no 143
        if lock is not None:
            lock.release()


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
    """The command: returns the exit code (utils/exit_codes.py) a job script acts on. A user mistake is one
    `error:` line and 2, a stop one `stopped:` line and 3 (130 after Ctrl-C), never a traceback; with several
    `gpu_ids` this process only relaunches itself as one rank per GPU and returns their code."""
    parent_watch.install()  # first: the parent pid it records must be the launcher's
    signals = stop.install()  # already there when run as a script (see the top of this file)
    args = parse_args(argv)
    if args.describe is not None:
        return describe(args.describe)
    try:
        opt = read_options(args.opt, args.set)
        if args.check:  # before any relaunch: one process checks (training/check.py)
            print(checked_run(opt, args, Trainer), flush=True)
            return 0
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
