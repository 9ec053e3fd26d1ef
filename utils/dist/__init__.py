"""Distributed state: detected once from the environment, then one process group for the run.

Callers use `from utils import dist; dist.detect()` etc.; the work is split by job:
`detect` (where this process sits, from the environment), `group` (the process group's life),
`collectives` (rank queries and collectives that are the identity in a plain process), `banner`
(the start-up log lines) and `ddp` (a trained network in DistributedDataParallel). Tests that
monkeypatch a name must patch it in the module that uses it (e.g.
`utils.dist.collectives.is_initialized`), not in this package.
"""
from utils.dist.banner import banner, environment
from utils.dist.collectives import (agree_any, all_reduce_max, all_reduce_min, all_reduce_sum, barrier,
                                    broadcast_object, broadcast_tensors, gather_objects, get_rank, get_world_size,
                                    is_main_process, main_process_outcome, main_process_write, rank_cores)
from utils.dist.ddp import ddp_of, wrap_ddp
from utils.dist.departure import await_departure, depart, departed
from utils.dist.departure import watch as watch_departures
from utils.dist.detect import (DistState, cuda_device_index, detect, expand_hostlist, first_host, select_gpus,
                               unused_gpu_notes)
from utils.dist.group import (INIT_GRACE_S, cleanup, control_group, exit_if_stuck, exit_now, init,
                              is_initialized, set_cpu_threads, wait_for_master)

__all__ = [
    'DistState', 'detect', 'expand_hostlist', 'first_host', 'select_gpus', 'unused_gpu_notes', 'cuda_device_index',
    'INIT_GRACE_S', 'init', 'set_cpu_threads', 'wait_for_master', 'exit_if_stuck', 'control_group', 'cleanup',
    'exit_now',
    'is_initialized', 'get_rank', 'get_world_size', 'is_main_process', 'barrier', 'all_reduce_sum',
    'all_reduce_max', 'all_reduce_min', 'broadcast_object', 'broadcast_tensors', 'gather_objects', 'agree_any',
    'main_process_outcome', 'main_process_write', 'rank_cores',
    'banner', 'environment', 'wrap_ddp', 'ddp_of', 'depart', 'departed', 'await_departure', 'watch_departures',
]
