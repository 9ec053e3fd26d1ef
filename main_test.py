"""Evaluate a checkpoint on the `datasets.test` sets, or (--watch) each new checkpoint of a running job; or apply
it to images, frames and videos of one's own (`--input`, no targets).

Per test set its restored images and a PSNR/SSIM (+ `val.metrics`) table, results.csv, and results.md with a row
per set; --watch writes results_by_iter.csv and test_curves.png.

    python main_test.py --opt options/train_dncnn_demo.json [--weights path/to/1000_E.pth or x.safetensors]
    python main_test.py --opt <run options> --test-sets options/test/test_sr_benchmarks_x4.json
    python main_test.py --opt <run options> --watch [FOLDER] [--follow]
    python main_test.py --opt test_MSRResNet_x4.yml   (BasicSR's or traiNNer-redux's test file: its sets, its weights)
    python main_test.py --weights W --input PATH [--out DIR] [--frames] [--tile N] [--x8] [--amp bf16]

Without `--weights` the newest checkpoint of the run is used (EMA weights when present); without `--opt`
the network is found from the weights (models/discovery.py: the run's saved options, export's metadata,
net_type "auto"). Runs in a single process or under any launcher (the items are split across ranks; rank 0
writes; a write that fails stops every rank together, exit 5). Beside the restored images and results.csv:
index.html, a static page comparing each item's input (input/), output and target (target/, not for --input)
under a slider (`--no-page`: none of them).
"""
AT_ONCE = None  # the Ctrl-C handler, when run as a script
if __name__ == '__main__':
    # First, before the heavy imports: Ctrl-C ends the evaluation at once with one line and exit 130 (there is
    # nothing to save: --watch has written the rows of every checkpoint it tested), at any moment, instead of a
    # KeyboardInterrupt traceback.
    import signal as _signal

    from utils.stop import StopSignals as _StopSignals
    AT_ONCE = _StopSignals((_signal.SIGINT,), at_once=1, at_once_line='stopped: SIGINT (Ctrl-C): testing stopped; '
                                                                      'results.csv not written')

import argparse  # noqa: E402
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

# How OpenMP's idle threads wait, chosen before torch loads OpenMP (utils/wait_policy.py)
from utils import wait_policy  # noqa: E402

wait_policy.choose()

import torch  # noqa: E402

from data.inputs import find_inputs
from models.discovery import run_weights
from models.input_restore import check_output_folder, needing_targets, restore_inputs
from models.network_loading import build_checked_network, build_eval_network
from models.out_of_memory import evaluation_line
from models.registry import MODELS
from models.set_runner import build_test_sets, evaluate_once, output_root, write_set_results
from models.video_restorer import VideoRestorer
from models.watch_runs import watch
from option_rules import read_options, read_weights_options
from utils import dist
from utils.checkpoint import UNSAFE_FLAG, newest_weights
from utils.diskspace import no_space
from utils.errors import UserError, WriteFailed, say
from utils.exit_codes import EXIT_USER_ERROR, EXIT_WRITE_FAILED
from utils.logger import get_logger, setup_logger
from utils.oom import OutOfMemory, caught, on_out_of_memory
from utils.options import SCHEMA, all_test_sets
from utils.options.readers.yaml_file import is_yaml_file
from utils.watch import RESULTS_BY_ITER, TEST_CURVES, models_folder


def pixels(text: str) -> int:
    """An argparse type: a non-negative whole number of pixels (a bad value is argparse's one line naming the
    flag, before any option file is read)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f'{text!r} is not a non-negative whole number of pixels')
    return value


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """main_test's command line; without --weights or --opt, argparse's one line and exit 2."""
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--opt', default=None, help='the option file the model was trained with (default: found from '
                                               '--weights)')
    p.add_argument('--weights', default=None,
                   help='a _G.pth/_E.pth or .safetensors file, or a run folder (default: newest of the run)')
    p.add_argument('--test-sets', default=None, metavar='FILE',
                   help='an option file whose test sets replace those of --opt (e.g. '
                        'options/test/test_sr_benchmarks_x4.json)')
    p.add_argument('--input', default=None, metavar='PATH',
                   help='restore an image, a folder of images, of frames (video models) or of videos, or a video '
                        'file (.mp4 .mkv .avi .mov), without targets, instead of datasets.test')
    p.add_argument('--out', default=None, help='output folder (default: <root>/<task>/results/<test name or '
                                               'input name>, or <root>/<task>/results with several test sets or '
                                               '--watch)')
    p.add_argument('--watch', nargs='?', const='', default=None, metavar='FOLDER',
                   help='follow a running job: test each new complete checkpoint of its models folder (FOLDER: its '
                        f'run or models folder; default: the run of --opt) once, rows in {RESULTS_BY_ITER}')
    p.add_argument('--follow', action='store_true', help='with --watch: never end (default: end after the job\'s '
                                                         'checkpoint at its train.total_iter)')
    p.add_argument('--frames', action='store_true', help='--input: also write each restored video frame as a PNG')
    p.add_argument('--tile', type=pixels, default=None, metavar='N',
                   help='restore in tiles of N pixels (val.tile; video models: val.size_patch_testing)')
    p.add_argument('--tile-overlap', type=pixels, default=None, metavar='N', help='pixels tiles overlap by '
                                                                                  '(val.tile_overlap)')
    p.add_argument('--x8', action='store_true', help='average the 8 flips and rotations (val.self_ensemble)')
    p.add_argument('--amp', default=None, choices=('none', 'bf16', 'fp16'),
                   help='mixed precision of the network (val.amp; fp16: CUDA only)')
    p.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE')
    p.add_argument('--no-images', action='store_true', help='write the tables only (no images, no page)')
    p.add_argument('--no-page', action='store_true',
                   help='no index.html comparison page, nor its input/, target/ and preview/ images (the outputs '
                        'still)')
    p.add_argument(UNSAFE_FLAG, dest='allow_unsafe_load', action='store_true')
    p.add_argument('--local_rank', '--local-rank', type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.opt is None and args.weights is None:
        p.error('give --weights (the network is found from it) or --opt (the option file it was trained with)')
    return args


def flag_overrides(args: argparse.Namespace) -> Any:
    """The evaluation flags as `val` overrides of the model the options name (video models tile with
    val.size_patch_testing, at a fixed overlap): a function of the option data, for read_options."""
    def more(data: Dict[str, Any]) -> List[str]:
        model = data.get('model', SCHEMA['model'].default)  # the data are the file's, before validation fills it
        video = isinstance(model, str) and issubclass(MODELS.get(model, 'model').restorer_class, VideoRestorer)
        out = []
        if args.tile is not None:
            out.append(f'val.{"size_patch_testing" if video else "tile"}={args.tile}')
        if args.tile_overlap is not None:
            if video:
                raise UserError(f'--tile-overlap: video models (model {model}) tile with a fixed overlap of '
                                f'{VideoRestorer.TILE_OVERLAP} pixels; give --tile alone')
            out.append(f'val.tile_overlap={args.tile_overlap}')
        if args.x8:
            out.append('val.self_ensemble=true')
        if args.amp is not None:
            out.append(f'val.amp="{args.amp}"')
        return out
    return more


def read_test_options(args: argparse.Namespace) -> Tuple[Dict[str, Any], str, Optional[str]]:
    """(options, where the network came from, the weights or None for the run's newest): `--opt` wins, else the
    weights' own (models/discovery.py); `--set` and the flags apply either way. A BasicSR or traiNNer-redux test
    file is read as their test.py reads it: its test sets, and without --weights its path.pretrain_network_g."""
    if args.opt is not None:
        weights = args.weights
        if weights is not None and os.path.isdir(weights):  # a run folder: its newest checkpoint, as without --opt
            weights = run_weights(weights, with_options=False)
        opt = read_options(args.opt, args.set, flag_overrides(args), args.test_sets, testing=True)
        if not file_saves_images(opt) and args.input is None and not args.no_images:
            targets = {s['_targets'] for s in all_test_sets(opt)}
            if True in targets:
                opt['_notes'].append('val.save_img: false: no restored images of the sets with ground truth written '
                                     '(the tables only)')
            if False in targets:
                opt['_notes'].append('val.save_img: false: the restored images of the sets without ground truth are '
                                     'written all the same (restoring them is all such a set is for)')
        return opt, f'--opt {args.opt}', weights or opt['_file_weights']
    opt, found = read_weights_options(args.weights, args.set, flag_overrides(args), args.test_sets)
    return opt, found.note, found.weights


def file_saves_images(opt: Dict[str, Any]) -> bool:
    """Whether the option file lets main_test write the restored images of its sets with targets: a BasicSR or
    traiNNer-redux file only with val.save_img (their test.py writes images only then); this project's always."""
    return not is_yaml_file(opt['opt_path']) or opt['val']['save_img']


def run_test(opt: Dict[str, Any], args: argparse.Namespace, state: dist.DistState, device: torch.device,
             source: str = '', weights: Optional[str] = None) -> None:
    """Evaluate the network of `opt` as the flags ask, on every rank: `--input`'s files, every test set once, or
    (`--watch`) each new checkpoint of a running job. `source`: where the network came from, for the log."""
    models = None if args.watch is None else models_folder(args.watch, opt['path']['models'])
    log = setup_logger(state.rank, buffered=False)
    log.info(dist.banner(state, device))
    for note in opt['_notes']:
        log.warning(f'options: {note}')
    log.info(f'network: {opt["netG"]["net_type"]}, from {source}')
    if args.input is not None:
        return run_inputs(opt, args, device, weights or newest_weights(opt['path']['models']))
    restorer_class = MODELS.get(opt['model'], 'model').restorer_class
    if models is not None:
        targetless = [s['_where'] for s in all_test_sets(opt) if not s['_targets']]
        if targetless:
            raise UserError(f'--watch: {targetless[0]} has no targets (LR images alone): nothing to score for each '
                            f'checkpoint; test it once with main_test.py --weights W')
    sets = build_test_sets(opt, state, clips=issubclass(restorer_class, VideoRestorer))
    if AT_ONCE is not None and len(sets) > 1:
        AT_ONCE.at_once_line = ('stopped: SIGINT (Ctrl-C): testing stopped; results.md not written (each set tested '
                                'to its end has its results.csv)')
    if models is None:
        weights = weights or newest_weights(opt['path']['models'])
        net = eval_network(opt, weights, device, args)
        with out_of_memory_told(opt, device, 'in main_test', net):
            evaluate_once(restorer_class.from_options(net, opt, device), sets, output_root(opt, sets, args.out),
                          weights, images=not args.no_images and file_saves_images(opt), page=not args.no_page,
                          lr_images=not args.no_images, net_type=opt['netG']['net_type'])
        return
    root = args.out or os.path.join(os.path.dirname(os.path.abspath(models)), 'results')
    if AT_ONCE is not None:
        AT_ONCE.at_once_line = (f'stopped: SIGINT (Ctrl-C): --watch stopped; the rows of every checkpoint tested are '
                                f'in {os.path.join(root, RESULTS_BY_ITER)}')
    net = build_checked_network(opt['netG']).to(device).eval()  # the restorer's until the first checkpoint loads
    with out_of_memory_told(opt, device, 'in main_test --watch', net):
        watch(restorer_class.from_options(net, opt, device), sets,
              lambda path: build_eval_network(opt['netG'], path, device, '--watch', args.allow_unsafe_load,
                                              opt['merge_bn']),
              models, root, opt['train']['total_iter'], args.follow, args.allow_unsafe_load)


def eval_network(opt: Dict[str, Any], weights: str, device: torch.device, args: argparse.Namespace) -> torch.nn.Module:
    """netG with `weights`: a BasicSR or traiNNer-redux test file's own weights (path.pretrain_network_g) with its
    param_key_g and strict_load_g, as their test.py loads them; other weights strictly, the entry by their name."""
    if weights == opt['_file_weights']:
        t = opt['train']
        return build_eval_network(opt['netG'], weights, device, 'path.pretrain_network_g', args.allow_unsafe_load,
                                  opt['merge_bn'], t['G_param_key'], t['G_param_strict'])
    return build_eval_network(opt['netG'], weights, device, '--weights', args.allow_unsafe_load, opt['merge_bn'])


def out_of_memory_told(opt: Dict[str, Any], device: torch.device, where: str, net: torch.nn.Module) -> Any:
    """Around an evaluation: out of memory (agreed by every rank in the evaluation loop) leaves as one line naming
    the item, the network and the flags that lower it (models/out_of_memory.py)."""
    return on_out_of_memory(lambda e: OutOfMemory(evaluation_line(opt, device, where, net, caught(e), flags=True)))


def input_name(path: str) -> str:
    """The name of `--input` for its default output folder: the file's name without its extension, or the
    folder's name (`.` and `..` are the folders they stand for)."""
    return os.path.splitext(os.path.basename(os.path.abspath(path)))[0] or 'input'


def run_inputs(opt: Dict[str, Any], args: argparse.Namespace, device: torch.device, weights: str) -> None:
    """`--input`: the images, frames or videos under args.input restored (models/input_restore.py), no targets."""
    log = get_logger()
    restorer_class = MODELS.get(opt['model'], 'model').restorer_class
    found = find_inputs(args.input, clips=issubclass(restorer_class, VideoRestorer))
    out_dir = args.out or os.path.join(opt['path']['task'], 'results', input_name(args.input))
    check_output_folder(out_dir, args.input)
    for path, problem in found.bad:
        log.warning(f'skipped {path}: {problem}')
    net = eval_network(opt, weights, device, args)
    dropped = needing_targets(opt['val'])
    if dropped:
        log.info(f'val.metrics: {", ".join(dropped)} need targets: not scored (inputs without targets)')
        opt = {**opt, 'val': {**opt['val'], 'metrics': [m for m in opt['val']['metrics'] if m not in dropped]}}
    restorer = restorer_class.from_options(net, opt, device)
    log.info(f'restoring {weights} on {args.input}: {found.describe()} -> {out_dir}')
    page = not args.no_images and not args.no_page
    with out_of_memory_told(opt, device, f'in main_test --input {args.input}', net):
        restored = restore_inputs(restorer, found, None if args.no_images else out_dir, opt['n_channels'],
                                  opt['netG']['net_type'], args.frames, page)
    res = restored.evaluation

    scale = opt['scale']
    shown = 'each input itself' if scale == 1 else f'each input upscaled x{scale} by bicubic to its output\'s size'

    def write() -> None:  # rank 0; a failure raises on every rank
        notes = [f'{weights} on {args.input}', f'input: {shown}']
        write_set_results(out_dir, res, restored.files, notes if page and restored.files else None)
        if page and not restored.files and res.rows:
            log.info('comparison page: none (a video shows on it only with --frames, as its frames)')
    dist.main_process_write(write, out_dir)
    bad = [path for path, _ in found.bad] + restored.missed
    log.info(f'restored {len(found.sources) - len(restored.missed)} of {len(found.sources) + len(found.bad)} inputs '
             f'-> {out_dir}')
    if bad:
        raise UserError(f'{len(bad)} input{"s" if len(bad) > 1 else ""} could not be read and '
                        f'{"were" if len(bad) > 1 else "was"} skipped (see the warnings): {", ".join(bad[:5])}'
                        f'{", ..." if len(bad) > 5 else ""}; the others are in {out_dir}')


def main(argv: Optional[Sequence[str]] = None) -> int:
    """main_test: the exit code (0; 2 for a mistake in the flags, options or inputs; 5 when writing the results
    failed; 6 out of memory), each failure one line rather than a traceback."""
    args = parse_args(argv)
    try:
        if args.follow and args.watch is None:
            raise UserError('--follow: only with --watch')
        if args.frames and args.input is None:
            raise UserError('--frames: only with --input (it writes the frames of restored videos of one\'s own)')
        for flag, given in (('--no-images', args.no_images), ('--no-page', args.no_page)):
            if given and args.watch is not None:
                raise UserError(f'{flag}: not with --watch (it writes no images nor page, only {RESULTS_BY_ITER} '
                                f'and {TEST_CURVES})')
        if args.weights is not None and args.watch is not None:
            raise UserError('--weights and --watch: give one (--watch tests the checkpoints of a job as they come)')
        if args.input is not None and (args.watch is not None or args.test_sets is not None):
            raise UserError(f'--input and {"--watch" if args.watch is not None else "--test-sets"}: give one '
                            f'(--input restores files of your own, without targets)')
        opt, source, weights = read_test_options(args)
        state = dist.detect()
        dist.select_gpus(opt['gpu_ids'], state)
        device = dist.init(state, opt['dist_timeout'])
        if 'test' in opt['datasets']:  # the banner says how many threads were chosen
            dist.set_cpu_threads(state, opt['datasets']['test']['dataloader_num_workers'])
        ok = False
        try:
            run_test(opt, args, state, device, source, weights)
            ok = True
        finally:
            dist.cleanup(together=ok)  # after an error on one rank the others may never arrive
    except UserError as e:
        say(f'error: {e}')
        return EXIT_USER_ERROR
    except OutOfMemory as e:  # one line naming the item and the flags that lower it, on every rank alike
        say(f'error: {e}')
        return e.code
    except WriteFailed as e:  # rank 0's write of the results, on every rank (dist.main_process_write)
        say(f'error: writing the results failed: {e}')
        return EXIT_WRITE_FAILED
    except OSError as e:  # writing the images or the table; a full disk is one line, the rest a traceback
        full = no_space(e, e.filename or os.getcwd())
        if not full:
            raise
        say(f'error: writing the results failed: {full}')
        return EXIT_WRITE_FAILED
    return 0


if __name__ == '__main__':
    dist.exit_now(main())
