"""Run as one of 2 real processes (gloo, env://): build cached datasets and report what this rank holds.

`python tests/frame_cache_worker.py SCENARIO IMAGE_FOLDER`, one process per rank. Each rank prints one
line `REPORT {...}` on stdout: the error it stopped with, or how many files it decoded while the cache
filled, which file its cache maps (device, inode, name from /proc/self/maps), whether its items equal
those of the uncached dataset, and its memory (RSS, PSS of the cache's mapping). Scenarios:
`share` (train and test set cached, one frame per fill round); `refuse` (available memory patched to
1000 bytes on every rank); `no_proc` (rank 1 cannot open rank 0's file); `two_nodes` (each rank on a
node of its own); `two_nodes_one_short` (rank 1's node with 1000 bytes available); `slow_fill` (3 s of
decoding under a 2 s collective timeout; SLOW_FILL_PORT a second free port; SLOW_FILL_ROUND_S=10 shows
the timeout one long wait would hit); `hold` (after reporting, a loader worker is forked and the rank
waits to be killed); `plain_copies` (the cache of before, one private np.empty copy per rank: a baseline
for the memory numbers). The caller corrupts files itself.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from data import frame_cache  # noqa: E402
from data.datasets.image import DatasetDnCNN  # noqa: E402
from data.loader import build_train_loader  # noqa: E402
from tests.conftest import unchecked_section  # noqa: E402
from utils import dist  # noqa: E402
from utils.errors import UserError  # noqa: E402
from utils.logger import setup_logger  # noqa: E402
from utils.memory import MemoryBudget  # noqa: E402


def mapping_of(buffer: np.ndarray) -> dict:
    """The line of /proc/self/maps that holds `buffer`: which file (device, inode, name) backs it."""
    address = buffer.__array_interface__['data'][0]
    with open('/proc/self/maps') as f:
        for line in f:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split('-'))
            if start <= address < end:
                return {'dev': fields[3], 'inode': int(fields[4]), 'name': fields[5].strip() if len(fields) > 5 else ''}
    raise AssertionError('buffer not found in /proc/self/maps')


def memory(buffer: np.ndarray) -> dict:
    """This process's RSS and PSS, and the PSS of the mappings that hold `buffer` (kB), after reading every page
    of it (a page counts only where this process has touched it)."""
    int(buffer[::4096].sum())
    begin = buffer.__array_interface__['data'][0]
    end, out, inside = begin + buffer.size, {'cache_pss_kb': 0}, False
    with open('/proc/self/smaps') as f:
        for line in f:
            first = line.split()[0]
            if '-' in first and not first.endswith(':'):
                start, stop = (int(x, 16) for x in first.split('-'))
                inside = start < end and begin < stop
            elif line.startswith('Pss:') and inside:
                out['cache_pss_kb'] += int(line.split()[1])
    with open('/proc/self/smaps_rollup') as f:
        for line in f:
            if line.startswith(('Rss:', 'Pss:')):
                out[line.split(':')[0].lower() + '_kb'] = int(line.split()[1])
    return out


def items_equal(a: DatasetDnCNN, b: DatasetDnCNN) -> bool:
    keys = [(0, 11), (3, 12345)] if a.train else [0, 1]
    return all(torch.equal(a[k]['H'], b[k]['H']) and torch.equal(a[k]['L'], b[k]['L']) for k in keys)


def main() -> None:
    scenario, root = sys.argv[1], sys.argv[2]
    state = dist.detect()
    dist.init(state, timeout_s=60)
    setup_logger(state.rank, buffered=False)
    if scenario == 'slow_fill':  # a fill of 3 s under a 2 s collective timeout, in rounds of 0.5 s
        import datetime
        import torch.distributed as c10d
        dist.barrier()
        c10d.destroy_process_group()  # started with 60 s: both ranks are up now, so 2 s is enough to meet again
        os.environ['MASTER_PORT'] = os.environ['SLOW_FILL_PORT']
        c10d.init_process_group('gloo', timeout=datetime.timedelta(seconds=2))
        frame_cache.ROUND_S = float(os.environ.get('SLOW_FILL_ROUND_S', '0.5'))
        frame_cache.FILL_THREADS = 1  # 6 frames x 0.5 s one after the other: longer than the timeout
    if scenario == 'share':
        frame_cache.ROUND_S = 0.0  # one frame per round: the ranks agree between any two frames
    if scenario == 'refuse' or (scenario == 'two_nodes_one_short' and state.rank == 1):
        frame_cache.memory_budget = lambda: MemoryBudget(1000)
    if scenario.startswith('two_nodes'):
        frame_cache.node_key = lambda: f'node{state.rank}'  # as if each rank ran on a machine of its own
    if scenario == 'no_proc' and state.rank == 1:
        def no_access(pid, share, total):
            raise PermissionError(13, 'Permission denied')
        frame_cache.FrameCache._map_leader = staticmethod(no_access)
    if scenario == 'plain_copies':
        class PrivateCopy(frame_cache.FrameCache):
            """As before this change: np.empty filled by every rank."""
            def __init__(self, shapes, read, where, dtypes=None):
                self.where, self.index, total = where, {}, 0
                for path, shape in shapes.items():
                    self.index[path] = (total, shape, np.dtype(np.uint8))
                    total += int(np.prod(shape))
                self.buffer = np.empty(total, np.uint8)
                for path, (offset, shape, _) in self.index.items():
                    self.buffer[offset:offset + int(np.prod(shape))] = read(path).reshape(-1)
        import data.datasets.image
        data.datasets.image.FrameCache = PrivateCopy

    decoded = []
    real = DatasetDnCNN._decode

    def counting(self, path):
        decoded.append(path)
        if scenario == 'slow_fill':
            time.sleep(0.5)
        return real(self, path)

    report = {'rank': state.rank}
    DatasetDnCNN._decode = counting
    try:
        phases = ('train', 'test') if scenario == 'share' else ('train',)
        cached = {p: DatasetDnCNN(unchecked_section(DatasetDnCNN, p, dataroot_H=root, H_size=24, cache_data=True))
                  for p in phases}
    except UserError as e:
        report['error'] = str(e)
    finally:
        DatasetDnCNN._decode = real
    if 'error' not in report:
        plain = {p: DatasetDnCNN(unchecked_section(DatasetDnCNN, p, dataroot_H=root, H_size=24)) for p in cached}
        report.update(decoded=len(decoded), files=len(cached['train'].paths_H), bytes=cached['train'].cache.buffer.size,
                      mappings={p: mapping_of(ds.cache.buffer) for p, ds in cached.items()},
                      owner=cached['train'].cache.__dict__.get('owner'),
                      node_ranks=cached['train'].cache.__dict__.get('node_ranks'),
                      same_items=all(items_equal(cached[p], plain[p]) for p in cached),
                      memory=memory(cached['train'].cache.buffer))
    if scenario == 'hold':
        opt = {'dataloader_batch_size': 2, 'dataloader_num_workers': 1, 'dataloader_shuffle': True,
               'dataloader_persistent_workers': True, 'dataloader_prefetch_factor': 1, '_where': 'datasets.train'}
        loader, _ = build_train_loader(cached['train'], opt, state.world_size, state.rank, 5, torch.device('cpu'))
        batches = iter(loader)
        next(batches)  # a forked worker now maps the cache too
        report['workers'] = [w.pid for w in batches._workers]
    print('REPORT ' + json.dumps(report), flush=True)
    if scenario == 'hold':
        time.sleep(600)  # until the test kills this process group
    dist.cleanup()


if __name__ == '__main__':
    main()
