"""Evaluate a checkpoint on the `datasets.test` sets, or (--watch) each new checkpoint of a running job.

Per test set its restored images and a PSNR/SSIM (+ `val.metrics`) table, results.csv, and results.md with a row
per set; --watch writes results_by_iter.csv and test_curves.png.

    python main_test.py --opt options/train_dncnn_demo.json [--weights path/to/1000_E.pth or x.safetensors]
    python main_test.py --opt <run options> --test-sets options/test/test_sr_benchmarks_x4.json
    python main_test.py --opt <run options> --watch [FOLDER] [--follow]

Without `--weights` the newest checkpoint of the run is used (EMA weights when present). Runs in a
single process or under any launcher (the items are split across ranks; rank 0 writes). Beside the restored
images and results.csv: index.html, a static page comparing each item's input (input/), output and target
(target/) under a slider (`--no-page`: none of them).
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
from typing import Any, Dict, Optional, Sequence

# OpenMP's idle threads sleep instead of spinning (see main_train.py and utils/dist/group.py set_cpu_threads)
os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')

import torch  # noqa: E402

from models.registry import MODELS
from models.restorer import build_checked_network, build_eval_network
from models.testing import build_test_sets, output_root, evaluate_once, watch
from option_rules import read_options
from utils import dist
from utils.checkpoint import UNSAFE_FLAG, newest_weights
from utils.diskspace import no_space
from utils.errors import UserError, say
from utils.logger import setup_logger
from utils.watch import RESULTS_BY_ITER, models_folder

EXIT_WRITE_FAILED = 5  # as main_train's failed checkpoint write


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--opt', required=True, help='the option file the model was trained with')
    p.add_argument('--weights', default=None,
                   help='a _G.pth/_E.pth or .safetensors file (default: newest of the run)')
    p.add_argument('--test-sets', default=None, metavar='FILE',
                   help='an option file whose test sets replace those of --opt (e.g. '
                        'options/test/test_sr_benchmarks_x4.json)')
    p.add_argument('--out', default=None, help='output folder (default: <root>/<task>/results/<test name>, or '
                                               '<root>/<task>/results with several test sets or --watch)')
    p.add_argument('--watch', nargs='?', const='', default=None, metavar='FOLDER',
                   help='follow a running job: test each new complete checkpoint of its models folder (FOLDER: its '
                        f'run or models folder; default: the run of --opt) once, rows in {RESULTS_BY_ITER}')
    p.add_argument('--follow', action='store_true', help='with --watch: never end (default: end after the job\'s '
                                                         'checkpoint at its train.total_iter)')
    p.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE')
    p.add_argument('--no-images', action='store_true', help='write the tables only (no images, no page)')
    p.add_argument('--no-page', action='store_true',
                   help='no index.html comparison page, nor its input/ and target/ images (the outputs still)')
    p.add_argument(UNSAFE_FLAG, dest='allow_unsafe_load', action='store_true')
    p.add_argument('--local_rank', '--local-rank', type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def run_test(opt: Dict[str, Any], args: argparse.Namespace, state: dist.DistState, device: torch.device) -> None:
    models = None if args.watch is None else models_folder(args.watch, opt['path']['models'])
    log = setup_logger(state.rank, buffered=False)
    log.info(dist.banner(state, device))
    for note in opt['_notes']:
        log.warning(f'options: {note}')
    sets = build_test_sets(opt, state)
    restorer_class = MODELS.get(opt['model'], 'model').restorer_class
    if AT_ONCE is not None and len(sets) > 1:
        AT_ONCE.at_once_line = ('stopped: SIGINT (Ctrl-C): testing stopped; results.md not written (each set tested '
                                'to its end has its results.csv)')
    if models is None:
        weights = args.weights or newest_weights(opt['path']['models'])
        net = build_eval_network(opt['netG'], weights, device, '--weights', args.allow_unsafe_load, opt['merge_bn'])
        evaluate_once(restorer_class.from_options(net, opt, device), sets, output_root(opt, sets, args.out), weights,
                      images=not args.no_images, page=not args.no_page)
        return
    root = args.out or os.path.join(os.path.dirname(os.path.abspath(models)), 'results')
    if AT_ONCE is not None:
        AT_ONCE.at_once_line = (f'stopped: SIGINT (Ctrl-C): --watch stopped; the rows of every checkpoint tested are '
                                f'in {os.path.join(root, RESULTS_BY_ITER)}')
    net = build_checked_network(opt['netG']).to(device).eval()  # the restorer's until the first checkpoint loads
    watch(restorer_class.from_options(net, opt, device), sets,
          lambda path: build_eval_network(opt['netG'], path, device, '--watch', args.allow_unsafe_load,
                                          opt['merge_bn']),
          models, root, opt['train']['total_iter'], args.follow, args.allow_unsafe_load)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        if args.follow and args.watch is None:
            raise UserError('--follow: only with --watch')
        if args.weights is not None and args.watch is not None:
            raise UserError('--weights and --watch: give one (--watch tests the checkpoints of a job as they come)')
        opt = read_options(args.opt, args.set, args.test_sets)
        state = dist.detect()
        dist.select_gpus(opt['gpu_ids'], state)
        device = dist.init(state, opt['dist_timeout'])
        if 'test' in opt['datasets']:  # the banner says how many threads were chosen
            dist.set_cpu_threads(state, opt['datasets']['test']['dataloader_num_workers'])
        ok = False
        try:
            run_test(opt, args, state, device)
            ok = True
        finally:
            dist.cleanup(together=ok)  # after an error on one rank the others may never arrive
    except UserError as e:
        say(f'error: {e}')
        return 2
    except OSError as e:  # writing the images or the table; a full disk is one line, the rest a traceback
        full = no_space(e, e.filename or os.getcwd())
        if not full:
            raise
        say(f'error: writing the results failed: {full}')
        return EXIT_WRITE_FAILED
    return 0


if __name__ == '__main__':
    dist.exit_now(main())
