"""`main_train.py --check`: everything a run does before its first step, as one report, with nothing written.

For a user about to queue a three-day job: the options are validated, every data folder is checked by the
datasets' own start-up checks (each file's header: counts, sizes against the patch, channels, pairs and their
scale, colour profiles), the resume point is found, the network is built and one training sample and one test
item go through it (the model's start-up checks), the first step's batches are read through the real loader,
one training step's memory is measured on a GPU or estimated elsewhere (models/step_memory.py), and the launch
the run would get is said. The first problem ends the check with the line and exit code the run would end
with.

Nothing is written: no run folder, no log file, no checkpoint. Demo data the run would generate first
(`generate_demo`, not there yet) are generated into a temporary folder for the checks and removed after; the
report says so. The check runs in the process it is started in: under a launcher (torchrun, srun) each
process checks what it would train on, without meeting the others; with several `gpu_ids` it reports the
relaunch and checks the first GPU's process.
"""
import argparse
import contextlib
import logging
import os
import shutil
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from data.checks import image_sizes
from data.synthetic.demo import DEMO_FOLDER, is_complete
from models.out_of_memory import batch_text, step_line
from models.step_memory import step_memory
from training.batches import next_batches, step_batches
from training.launcher import relaunch_count, settle_launch
from utils import dist
from utils.dist import DistState
from utils.errors import UserError
from utils.exit_codes import EXIT_OUT_OF_MEMORY
from utils.oom import caught, on_out_of_memory
from utils.options import training_notes
from utils.stop import TrainingStopped

LABEL_WIDTH = 9


class Collected(logging.Handler):
    """The records the start-up logs, kept for the report instead of shown or written."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: List[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def warnings(self) -> List[str]:
        return [r.getMessage() for r in self.records if r.levelno >= logging.WARNING]


@contextlib.contextmanager
def collected_log() -> Iterator[Collected]:
    """The project's logger, inside: no console, no file, every record kept (its state is restored after)."""
    log = logging.getLogger('restoration')
    saved = list(log.handlers), log.propagate, log.level
    handler = Collected()
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.INFO)  # setLevel, not the attribute: the logger caches what each level decided
    try:
        yield handler
    finally:
        log.handlers[:] = saved[0]
        log.propagate = saved[1]
        log.setLevel(saved[2])


def _demo_root(path: str) -> Optional[str]:
    """The `demo_data` folder `path` lies in (its innermost), or None."""
    parts = os.path.abspath(path).split(os.sep)
    inside = [i for i, part in enumerate(parts[:-1]) if part == DEMO_FOLDER]
    return os.sep.join(parts[:inside[-1] + 1]) if inside else None


def _generated(path: str, root: str) -> bool:
    """Whether a generator completed `path`'s folder or one above it, up to the demo folder `root`."""
    folder = os.path.abspath(path)
    while len(folder) > len(root):
        if is_complete(folder):
            return True
        folder = os.path.dirname(folder)
    return False


def demo_sections(opt: Dict[str, Any]) -> List[str]:
    """The dataset sections whose demo data the run would generate first: `generate_demo` set, every path
    inside a demo folder, and not all of them generated yet."""
    out = []
    for phase, section in opt['datasets'].items():
        paths = [v for k, v in section.items() if k.startswith('dataroot') and isinstance(v, str) and v]
        roots = [_demo_root(p) for p in paths]
        if section['generate_demo'] and paths and all(roots) and \
                not all(_generated(p, r) for p, r in zip(paths, roots)):
            out.append(phase)
    return out


@contextlib.contextmanager
def demo_data_aside(opt: Dict[str, Any]) -> Iterator[Tuple[Dict[str, Any], str]]:
    """(the options to check, a note): the sections whose demo data are missing read a copy generated into a
    temporary folder instead (every path of theirs inside a demo folder moved there, same layout), removed after;
    the note says so ('' when nothing was missing)."""
    phases = demo_sections(opt)
    if not phases:
        yield opt, ''
        return
    tmp = tempfile.mkdtemp(prefix='restoration-check-')
    try:
        datasets = dict(opt['datasets'])
        for phase in phases:
            section = dict(datasets[phase])
            for key, value in section.items():
                root = _demo_root(value) if isinstance(value, str) and value and key != '_where' else None
                if root is not None:
                    section[key] = os.path.join(tmp, DEMO_FOLDER, os.path.relpath(os.path.abspath(value), root))
            datasets[phase] = section
        where = ', '.join(f'datasets.{p}' for p in phases)
        yield {**opt, 'datasets': datasets}, (
            f'demo data of {where}: not generated yet; the run generates them first, before anything else; '
            f'--check generated them into a temporary folder for its checks and removed it')
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def launch_text(opt: Dict[str, Any], state: DistState, relaunch: int, device: torch.device, threads: Optional[str],
                workers: Dict[str, int]) -> str:
    """How the run would be launched from here: mode, world size, device, threads, loader workers."""
    if relaunch:
        how = (f'gpu_ids {list(opt["gpu_ids"])}: the run relaunches itself as {relaunch} DDP processes, one per '
               f'GPU (world size {relaunch}); checked as the first of them')
    elif state.distributed:
        how = (f'{state.mode} launch, rank {state.rank} of world size {state.world_size} (local rank '
               f'{state.local_rank}); checked as this rank, without meeting the others')
    else:
        how = 'one process (no launcher detected), world size 1'
    if device.type == 'cuda':
        on = f'device {device} ({torch.cuda.get_device_name(device)})'
    else:
        omp = os.environ.get('OMP_NUM_THREADS')
        if threads:
            count = threads.removeprefix('CPU: ')
        elif omp is None and (relaunch or state.distributed):
            count = '1 torch thread per process (DDP on CPU; OMP_NUM_THREADS overrides)'
        else:
            count = f'{torch.get_num_threads()} torch thread(s) (OMP_NUM_THREADS={omp})'
        on = f'device {device}, {count}'
    loaders = ', '.join(f'{where} {n}' for where, n in workers.items())
    return f'{how}; {on}; loader workers per process: {loaders}'


def folder_text(section: Dict[str, Any], dataset: Any) -> str:
    """An image dataset's folders, as the options name them: how many files, their sizes (the headers the
    checks read)."""
    parts = []
    dataset = getattr(dataset, 'base', dataset)  # train.use_moa's wrapper: the dataset it draws from
    for key, attr in (('dataroot_H', 'paths_H'), ('dataroot_L', 'paths_L')):
        paths = getattr(dataset, attr, None)
        if not paths:
            continue
        sizes = [s for s in image_sizes(paths) if isinstance(s, tuple)]
        if sizes:
            small, large = min(sizes, key=lambda s: s[0] * s[1]), max(sizes, key=lambda s: s[0] * s[1])
            span = f'{small[0]}x{small[1]}' + (f' to {large[0]}x{large[1]}' if large != small else ' each')
        else:
            span = 'sizes unknown'
        parts.append(f'{key} {section[key]}: {len(paths)} files, {span}')
    return '; '.join(parts)


def dataset_text(where: str, section: Dict[str, Any], dataset: Any) -> str:
    """One data line: the section (the user's, before demo data were moved aside), its type, item count,
    folders and channels."""
    channels = getattr(dataset, 'channels_note', None)
    folders = folder_text(section, dataset)
    return (f'{where} ({section["dataset_type"]}): {len(dataset)} items' + (f'; {folders}' if folders else '')
            + (f'; {channels()}' if channels is not None else ''))


def resume_text(point: Any, total: int) -> str:
    """Where the run would start: fresh, from a checkpoint, or nothing to do."""
    if point is None:
        return f'none: a fresh start at iteration 0 of {total}'
    at = point.training['iter']
    if at >= total:
        return f'{point.path} is at iteration {at}, train.total_iter {total}: nothing to train (raise total_iter)'
    return f'from {point.path} at iteration {at} of {total}'


def report(title: str, sections: List[Tuple[str, List[str]]]) -> str:
    """The report: a title, then each section's lines under its label."""
    out = [title]
    for label, lines in sections:
        for i, line in enumerate(lines):
            out.append(f'  {label if i == 0 else "":<{LABEL_WIDTH}} {line}')
    return '\n'.join(out)


def first_step_memory(trainer: Any, device: torch.device) -> str:
    """Build what the run builds (`trainer.build`: the data checks, the network, a sample through it), read the
    first step's batches through the loader, and size one step (models/step_memory.py); out of memory anywhere
    here is the run's own stop (exit 6)."""
    def stop(e: BaseException) -> TrainingStopped:
        model = getattr(trainer, 'model', None)
        return TrainingStopped(step_line(trainer.opt, device, 'in --check (the network, a training sample, one step)',
                                         model.networks()[0] if model is not None else None, caught(e)),
                               EXIT_OUT_OF_MEMORY)
    with on_out_of_memory(stop):
        trainer.build()
        batches, error = next_batches(step_batches(trainer.train_loader, trainer.sampler, trainer.accum,
                                                   lambda: (0, 0)))
        if error is not None:
            raise UserError(error)
        memory = step_memory(trainer.model, batches, device)
    return memory


def checked_run(opt: Dict[str, Any], args: argparse.Namespace, trainer_class: Callable[..., Any]) -> str:
    """Everything the run of `opt` does before its first step, with `trainer_class` (training/trainer.py) building
    what the run builds; returns the report. A problem raises as the run would (UserError, TrainingStopped)."""
    state = dist.detect()
    relaunch = relaunch_count(opt['gpu_ids'], state, torch.cuda.is_available())
    run_state = DistState('env', relaunch) if relaunch else state  # the layout the run's ranks get
    dist.select_gpus(opt['gpu_ids'], state)
    device = dist.init(DistState('single', local_rank=state.local_rank), opt['dist_timeout'])  # no process group
    workers = {f'datasets.{p}': s['dataloader_num_workers'] for p, s in opt['datasets'].items()}
    threads = dist.set_cpu_threads(run_state, workers.get('datasets.train', 0))
    with collected_log() as log, demo_data_aside(opt) as (checked, demo_note):
        checked, args, launch_notes = settle_launch(checked, run_state, args, os.environ)
        trainer = trainer_class(checked, run_state, device, args)
        try:
            memory = first_step_memory(trainer, device)
            workers['datasets.train'] = trainer.train_loader.num_workers  # as the loader took them
            data = [dataset_text('datasets.train', opt['datasets']['train'], trainer.train_set)]
            if trainer.val_loader is not None:
                data.append(dataset_text('datasets.test', opt['datasets']['test'], trainer.val_loader.dataset))
            data += [r.getMessage() for r in log.records if r.getMessage().startswith('training samples')]
            if demo_note:
                data.append(demo_note)
            network = [trainer.model.network_info().replace('network ', '', 1), 'one training sample and one test '
                       'item went through it; the first step\'s batches were read through the loader']
            resume = resume_text(trainer.point, checked['train']['total_iter'])
        finally:
            trainer.close()
    task = opt['path']['task']
    there = ('exists; --fresh moves it aside first' if args.fresh else 'exists') if os.path.isdir(task) else \
        'not there yet: the run creates it'
    folder = f'{task} ({there})'
    notes = [*opt['_notes'], *training_notes(opt), *launch_notes, *log.warnings()]
    return report(f'--check {args.opt}: the run would start; nothing was written', [
        ('options', [f'valid: model {opt["model"]}, netG {opt["netG"]["net_type"]}; run folder {folder}']),
        ('launch', [launch_text(opt, state, relaunch, device, threads, workers)]),
        ('data', data), ('resume', [resume]), ('network', network),
        ('memory', [f'one training step at {batch_text(checked["datasets"]["train"], trainer.accum)}: {memory}']),
        *([('notes', notes)] if notes else [])])

