"""Evaluate a checkpoint on the `datasets.test` section: restored images and a PSNR/SSIM (+ `val.metrics`) table.

    python main_test.py --opt options/train_dncnn_demo.json [--weights path/to/1000_E.pth or x.safetensors]

Without `--weights` the newest checkpoint of the run is used (EMA weights when present). Runs in a
single process or under any launcher (the items are split across ranks; rank 0 writes). Beside the restored
images and results.csv: index.html, a static page comparing each item's input (input/), output and target
(target/) under a slider (`--no-page`: none of them).
"""
if __name__ == '__main__':
    # First, before the heavy imports: Ctrl-C ends the evaluation at once with one line and exit 130 (there is
    # nothing to save), at any moment, instead of a KeyboardInterrupt traceback.
    import signal as _signal

    from utils.stop import StopSignals as _StopSignals
    _StopSignals((_signal.SIGINT,), at_once=1, at_once_line='stopped: SIGINT (Ctrl-C): testing stopped; '
                                                            'results.csv not written')

import argparse  # noqa: E402
import csv
import io
import os
from typing import Any, Dict, List, Optional, Sequence

# OpenMP's idle threads sleep instead of spinning (see main_train.py and utils/dist/group.py set_cpu_threads)
os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')

import torch  # noqa: E402

from data.loader import build_val_loader, val_loader_options
from data.registry import build_dataset
from data.synthetic.demo import ensure_demo_data
from models.evaluation import describe_input, describe_scores, evaluate
from models.registry import MODELS
from models.restorer import build_eval_network
from option_rules import read_options
from utils import dist
from utils.checkpoint import UNSAFE_FLAG, atomic_write_bytes, newest_weights
from utils.compare_page import frame_files, write_page
from utils.diskspace import no_space
from utils.errors import UserError, say
from utils.logger import setup_logger

EXIT_WRITE_FAILED = 5  # as main_train's failed checkpoint write


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--opt', required=True, help='the option file the model was trained with')
    p.add_argument('--weights', default=None,
                   help='a _G.pth/_E.pth or .safetensors file (default: newest of the run)')
    p.add_argument('--out', default=None, help='output folder (default: <root>/<task>/results/<test name>)')
    p.add_argument('--set', action='append', default=[], metavar='KEY.PATH=VALUE')
    p.add_argument('--no-images', action='store_true', help='write the table only (no images, no page)')
    p.add_argument('--no-page', action='store_true',
                   help='no index.html comparison page, nor its input/ and target/ images (the outputs still)')
    p.add_argument(UNSAFE_FLAG, dest='allow_unsafe_load', action='store_true')
    p.add_argument('--local_rank', '--local-rank', type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def write_table(path: str, names: Sequence[str], rows: List[List[Any]], means: Dict[str, float]) -> None:
    """results.csv: a column per score (`names`: psnr, ssim, psnr_y, ssim_y, then `val.metrics`), one row per
    item (dataset order), then the means."""
    def write(f: Any) -> None:
        text = io.StringIO()
        w = csv.writer(text)
        w.writerow(['name', *names])
        for r in rows:
            w.writerow([r[0]] + [f'{v:.4f}' for v in r[1:]])
        w.writerow(['mean'] + [f'{means[c]:.4f}' for c in names])
        f.write(text.getvalue().encode())
    atomic_write_bytes(path, write)


def run_test(opt: Dict[str, Any], args: argparse.Namespace, state: dist.DistState, device: torch.device) -> None:
    if 'test' not in opt['datasets']:
        raise UserError(f'{opt["opt_path"]}: datasets.test: required section is missing')
    test_opt = opt['datasets']['test']
    log = setup_logger(state.rank, buffered=False)
    log.info(dist.banner(state, device))
    for note in opt['_notes']:
        log.warning(f'options: {note}')
    if dist.is_main_process():
        ensure_demo_data(test_opt)
    dist.barrier()
    loader = build_val_loader(build_dataset(test_opt), state.world_size, state.rank, **val_loader_options(test_opt))
    weights = args.weights or newest_weights(opt['path']['models'])
    net = build_eval_network(opt['netG'], weights, device, '--weights', args.allow_unsafe_load, opt['merge_bn'])
    restorer = MODELS.get(opt['model'], 'model').restorer_class.from_options(net, opt, device)
    out_dir = args.out or os.path.join(opt['path']['task'], 'results', test_opt['name'] or 'test')
    log.info(f'testing {weights} on {len(loader.dataset)} items -> {out_dir}')

    files: Dict[str, Dict[str, List[str]]] = {}  # what the page shows: per item, its written frames of each kind

    def write_item(name: str, frames: List[bytes], kind: str = 'output') -> None:
        paths = frame_files(name, len(frames), kind)
        for path, data in zip(paths, frames):
            atomic_write_bytes(os.path.join(out_dir, path), lambda f, data=data: f.write(data), size=len(data))
        files.setdefault(name, {})[kind] = paths

    def write_sources(name: str, inputs: Optional[List[bytes]], targets: List[bytes]) -> None:
        if inputs is not None:
            write_item(name, inputs, 'input')
        write_item(name, targets, 'target')
    page = not args.no_images and not args.no_page
    res = evaluate(restorer, loader, len(loader.dataset), score_input=True, label='testing', lines=True,
                   write_item=None if args.no_images else write_item, write_sources=write_sources if page else None)
    if dist.is_main_process():
        if res.write_error is not None:
            raise res.write_error
        m = res.means
        write_table(os.path.join(out_dir, 'results.csv'), res.names, [[row.name, *row.scores] for row in res.rows], m)
        log.info(f'{m["count"]} items: {describe_scores(m, res.names)}; table: {os.path.join(out_dir, "results.csv")}')
        log.info(f'input: {describe_input(res.input, res.names)}')
        if page:
            path = write_page(out_dir, res.names, res.higher_is_better, [(row.name, row.scores) for row in res.rows],
                              m, files, notes=[f'{weights} on {test_opt["name"] or "test"}',
                                               f'input: {describe_input(res.input, res.names)}'])
            log.info(f'comparison page: {path} (open it in a browser)')


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        opt = read_options(args.opt, args.set)
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
