"""One plain command uses every listed GPU: `python main_train.py` with several `gpu_ids` re-launches
itself as that many DDP processes through torch's elastic launch API (what torchrun runs), instead
of falling back to the slower single-process DataParallel.

Only a plain process relaunches (launch mode 'single'); the children carry WORLD_SIZE/RANK, are
detected as mode 'env' and so never relaunch again. Without CUDA, `gpu_ids` is ignored as before,
unless RESTORATION_CPU_PROCS_FROM_GPU_IDS=1 makes it count CPU processes: the test mode that lets
this path run for real on a machine without GPUs.
"""
import os
import signal
import sys
import uuid
from typing import Any, Dict, List, Mapping, Optional, Sequence

import torch

from utils.dist import DistState
from utils.errors import UserError

CPU_TEST_MODE = 'RESTORATION_CPU_PROCS_FROM_GPU_IDS'


def relaunch_count(gpu_ids: Optional[Sequence[int]], state: DistState, cuda: bool,
                   env: Mapping[str, str] = os.environ) -> int:
    """How many processes to start here: 0 means "do not relaunch, train in this process"."""
    if state.mode != 'single' or not gpu_ids or len(gpu_ids) < 2:
        return 0
    if not cuda and env.get(CPU_TEST_MODE) != '1':
        return 0
    return len(gpu_ids)


def _check_gpus(gpu_ids: Sequence[int], env: Dict[str, str]) -> None:
    """Pin the children to `gpu_ids` unless a launcher already chose the visible GPUs."""
    if 'CUDA_VISIBLE_DEVICES' in env:
        visible = torch.cuda.device_count()
        if len(gpu_ids) > visible:
            raise UserError(f'gpu_ids: {list(gpu_ids)} asks for {len(gpu_ids)} GPUs but CUDA_VISIBLE_DEVICES='
                            f'{env["CUDA_VISIBLE_DEVICES"]} leaves {visible}')
        return
    count = torch.cuda.device_count()
    bad = [g for g in gpu_ids if not 0 <= int(g) < count]
    if bad or len(set(gpu_ids)) != len(gpu_ids):
        raise UserError(f'gpu_ids: {list(gpu_ids)} must be distinct GPU indices below {count} '
                        f'(the GPUs on this machine)')
    env['CUDA_VISIBLE_DEVICES'] = ','.join(str(g) for g in gpu_ids)


def _exit_code(err: BaseException) -> int:
    """The exit code a shell would report for the first failed child (128+N for a signal)."""
    failures = getattr(err, 'failures', None) or {}
    for _, failure in sorted(failures.items()):
        code = failure.exitcode
        return 128 - code if code < 0 else code or 1
    return 1


def maybe_relaunch(opt: Dict[str, Any], state: DistState, script: str, argv: Sequence[str],
                   env: Optional[Dict[str, str]] = None) -> Optional[int]:
    """Run `python -u script *argv` as len(gpu_ids) DDP processes on this node and return the exit code.

    Returns None when this process should train by itself (launcher-started rank, cluster step,
    one GPU, or CPU without the test mode).
    """
    env = os.environ if env is None else env
    cuda = torch.cuda.is_available()
    n = relaunch_count(opt.get('gpu_ids'), state, cuda, env)
    if not n:
        return None
    if cuda:
        _check_gpus(opt['gpu_ids'], env)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch
    where = f'one per GPU (CUDA_VISIBLE_DEVICES={env["CUDA_VISIBLE_DEVICES"]})' if cuda else \
        f'on CPU (test mode {CPU_TEST_MODE}=1)'
    print(f'gpu_ids {list(opt["gpu_ids"])}: relaunching as {n} DDP processes {where}', flush=True)
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=n, run_id=str(uuid.uuid4()),
                          rdzv_backend='c10d', rdzv_endpoint='localhost:0', max_restarts=0)
    args: List[str] = ['-u', os.path.abspath(script), *argv]
    try:
        elastic_launch(config, sys.executable)(*args)
    except ChildFailedError as e:
        return _exit_code(e)
    except SignalException as e:  # SIGTERM/SIGHUP to this process: the children were stopped too
        return 128 + int(e.sigval)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    return 0
