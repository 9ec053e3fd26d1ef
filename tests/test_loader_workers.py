"""`dataloader_num_workers` fits the cores the process may use: more workers than cores become that many, with one
log line naming the key, the asked and the used number, and torch's own warning never shows; KEEP_LOADER_WORKERS=1
keeps the asked number. DDP ranks of one host that share their cores share them among themselves too."""
import os
import warnings

import pytest
import torch

from data.loader import build_train_loader, val_loader_options
from utils.cores import KEEP_WORKERS_ENV, fitted_workers, shared_cores

CPU = torch.device('cpu')


class _Items(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, key):
        index, _ = key  # the sampler's (index, sample seed)
        return torch.tensor(float(index))


def _opt(workers):
    return {'dataloader_batch_size': 2, 'dataloader_num_workers': workers, 'dataloader_shuffle': False,
            'dataloader_prefetch_factor': 2, 'dataloader_persistent_workers': False, '_where': 'datasets.train'}


def test_each_rank_counts_its_share_of_the_cores_of_its_host():
    node = frozenset(range(8))
    assert shared_cores(node, [node]) == 8  # one process
    assert shared_cores(node, [node] * 4) == 2  # torchrun: 4 ranks inherit the node's mask
    assert shared_cores(node, [node] * 16) == 1  # never none
    bound = [frozenset(range(4 * r, 4 * r + 4)) for r in range(2)]  # SLURM --cpus-per-task=4, bound
    assert shared_cores(bound[0], bound) == 4
    assert shared_cores(frozenset({0, 1, 2, 3}), [frozenset({0, 1, 2, 3}), frozenset({2, 3})]) == 3  # 1 + 1 + 1/2 + 1/2


def test_workers_above_the_cores_become_the_cores_unless_kept():
    assert fitted_workers(8, 2, {}) == 2
    assert fitted_workers(2, 2, {}) == 2 and fitted_workers(0, 1, {}) == 0
    assert fitted_workers(8, 2, {KEEP_WORKERS_ENV: '1'}) == 8


def _iterate(loader):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter('always', append=True)  # after the filters in place (the loader's)
        batches = [b.tolist() for b in loader]
    assert batches == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]
    return [str(w.message) for w in seen]


def test_more_workers_than_cores_start_as_many_as_there_are_cores_with_one_line_and_no_torch_warning(monkeypatch,
                                                                                                    caplog):
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0})  # torch's check reads it too
    monkeypatch.delenv(KEEP_WORKERS_ENV, raising=False)
    with caplog.at_level('INFO', logger='restoration'):
        loader, _ = build_train_loader(_Items(), _opt(3), 1, 0, 5, CPU)
        assert val_loader_options({**_opt(4), '_where': 'datasets.test'})['num_workers'] == 1
    assert loader.num_workers == 1
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ['datasets.train.dataloader_num_workers: 3 asked, 1 used: the cores this process may use '
                     f'({KEEP_WORKERS_ENV}=1 keeps 3)',
                     'datasets.test.dataloader_num_workers: 4 asked, 1 used: the cores this process may use '
                     f'({KEEP_WORKERS_ENV}=1 keeps 4)']
    assert _iterate(loader) == []


def test_keep_loader_workers_starts_the_asked_number_and_says_so_instead_of_torch(monkeypatch, caplog):
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0})
    monkeypatch.setenv(KEEP_WORKERS_ENV, '1')
    with warnings.catch_warnings():  # the filter the loader adds stays inside this test
        with caplog.at_level('INFO', logger='restoration'):
            loader, _ = build_train_loader(_Items(), _opt(2), 1, 0, 5, CPU)
        assert loader.num_workers == 2
        assert [r.getMessage() for r in caplog.records] == [
            f'datasets.train.dataloader_num_workers: 2 used as asked ({KEEP_WORKERS_ENV}=1), above the 1 cores this '
            f'process may use']
        assert not [m for m in _iterate(loader) if 'worker processes' in m]


@pytest.mark.parametrize('asked', [0, 1, 2])
def test_workers_within_the_cores_are_started_as_asked_without_a_line(monkeypatch, caplog, asked):
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1})
    with caplog.at_level('INFO', logger='restoration'):
        loader, _ = build_train_loader(_Items(), _opt(asked), 1, 0, 5, CPU)
    assert loader.num_workers == asked and not caplog.records


def test_ddp_ranks_that_share_the_cores_of_their_host_split_them(monkeypatch):
    """torchrun's ranks inherit one mask: 2 ranks on 4 cores get 2 each; another host's ranks do not count."""
    from utils.dist import collectives
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(collectives, 'get_world_size', lambda: 3)
    monkeypatch.setattr(collectives.socket, 'gethostname', lambda: 'a')
    node = frozenset(range(4))
    monkeypatch.setattr(collectives, 'gather_objects', lambda obj: [obj, ('a', node), ('b', node)])
    assert collectives.rank_cores() == 2
