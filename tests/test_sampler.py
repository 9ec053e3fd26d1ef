import pytest

from data.sampler import ResumableDistributedSampler, ShardSampler


class _Sized:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def _shards(n: int, world: int, epoch: int = 0, seed: int = 0, **kw):
    out = []
    for rank in range(world):
        s = ResumableDistributedSampler(_Sized(n), world, rank, seed=seed, **kw)
        s.set_epoch(epoch)
        out.append(list(s))
    return out


def test_shards_of_one_epoch_are_disjoint_and_cover_all_but_the_drop_last_tail():
    shards = _shards(n=23, world=3)
    indices = [i for shard in shards for i, _ in shard]
    assert [len(s) for s in shards] == [7, 7, 7]
    assert len(set(indices)) == 21  # 23 // 3 * 3: the 2 leftover samples are dropped
    assert set(indices) <= set(range(23))


def test_yields_index_and_integer_seed_pairs():
    (shard,) = _shards(n=5, world=1)
    for index, seed in shard:
        assert isinstance(index, int) and isinstance(seed, int)
        assert 0 <= seed < 2 ** 63


def test_order_changes_with_the_epoch():
    assert _shards(n=50, world=2, epoch=0) != _shards(n=50, world=2, epoch=1)


def test_two_samplers_with_the_same_seed_agree_and_other_seeds_differ():
    assert _shards(n=40, world=2, seed=7) == _shards(n=40, world=2, seed=7)
    assert _shards(n=40, world=2, seed=7) != _shards(n=40, world=2, seed=8)


def test_without_shuffle_the_order_is_the_index_order_sharded_by_rank():
    shards = _shards(n=10, world=2, shuffle=False)
    assert [i for i, _ in shards[0]] == [0, 2, 4, 6, 8]
    assert [i for i, _ in shards[1]] == [1, 3, 5, 7, 9]


def test_set_start_yields_exactly_the_tail_and_len_counts_what_remains():
    s = ResumableDistributedSampler(_Sized(30), 2, 1, seed=3)
    s.set_epoch(4)
    full = list(s)
    s.set_start(6)
    assert len(s) == len(full) - 6
    assert list(s) == full[6:]


def test_set_epoch_resets_the_start():
    s = ResumableDistributedSampler(_Sized(30), 1, 0)
    s.set_start(10)
    s.set_epoch(1)
    assert len(s) == 30 and len(list(s)) == 30


def test_state_dict_round_trip_resumes_mid_epoch():
    a = ResumableDistributedSampler(_Sized(30), 2, 0, seed=5)
    a.set_epoch(2)
    a.set_start(4)
    b = ResumableDistributedSampler(_Sized(30), 2, 0, seed=5)
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == {'epoch': 2, 'position': 8}
    assert list(b) == list(a)


def test_set_start_rejects_positions_beyond_the_shard():
    s = ResumableDistributedSampler(_Sized(10), 2, 0)
    with pytest.raises(ValueError):
        s.set_start(6)


def test_sample_seed_depends_on_position_not_on_rank_count():
    def seed_by_index(world: int) -> dict:
        return {i: seed for shard in _shards(n=24, world=world, epoch=3) for i, seed in shard}
    one, two, three = seed_by_index(1), seed_by_index(2), seed_by_index(3)
    # 24 is divisible by 1, 2 and 3, so every run sees the same permutation and the same seeds
    assert one == two == three
    assert len(set(one.values())) == 24


def test_sample_seeds_change_with_the_epoch():
    e0 = [seed for _, seed in _shards(n=8, world=1, epoch=0, shuffle=False)[0]]
    e1 = [seed for _, seed in _shards(n=8, world=1, epoch=1, shuffle=False)[0]]
    assert set(e0).isdisjoint(e1)


def test_shard_sampler_covers_every_index_exactly_once_without_padding():
    shards = [list(ShardSampler(11, 4, rank)) for rank in range(4)]
    assert sorted(i for shard in shards for i in shard) == list(range(11))
    assert [len(ShardSampler(11, 4, rank)) for rank in range(4)] == [3, 3, 3, 2]
    assert shards[1] == [1, 5, 9]


def test_shard_sampler_with_more_ranks_than_samples_gives_empty_shards():
    assert list(ShardSampler(2, 3, 2)) == []
    assert len(ShardSampler(2, 3, 2)) == 0


@pytest.mark.parametrize('step_size', [None, 6])
def test_a_continuous_sampler_runs_on_through_the_epochs_with_the_keys_of_each_epoch(step_size):
    """One iterator for the whole run (the loader's workers never drain at an epoch's end) sees exactly the
    keys of iterating epoch by epoch, each epoch cut to the whole steps the loop uses, from a resume point."""
    import itertools
    per_epoch = 9  # of a shard of 11 (23 samples over 2 ranks): the loop's whole steps
    continuous = ResumableDistributedSampler(_Sized(23), 2, 1, seed=5, step_size=step_size, per_epoch=per_epoch,
                                             continuous=True)
    continuous.set_epoch(3)
    continuous.set_start(4)
    assert len(continuous) == 5  # what is left of the current epoch
    expected = []
    for epoch, start in ((3, 4), (4, 0), (5, 0)):
        finite = ResumableDistributedSampler(_Sized(23), 2, 1, seed=5, step_size=step_size)
        finite.set_epoch(epoch)
        finite.set_start(start)
        expected += list(finite)[:per_epoch - start]
    assert list(itertools.islice(continuous, len(expected))) == expected


def test_a_continuous_loader_gives_the_batches_of_per_epoch_loaders_with_two_workers():
    import itertools

    import torch

    from data.loader import build_train_loader

    class Keys:
        def __len__(self):
            return 19

        def __getitem__(self, key):
            return torch.tensor(key[:2])

    opt = {'dataloader_batch_size': 2, 'dataloader_num_workers': 2, 'dataloader_shuffle': True,
           'dataloader_persistent_workers': True, 'dataloader_prefetch_factor': 2, '_where': 'datasets.train'}
    cpu = torch.device('cpu')
    loader, sampler = build_train_loader(Keys(), opt, 1, 0, 7, cpu, accumulate_steps=2, continuous=True)
    assert len(loader) == 8  # batches of one epoch: 19 samples -> 4 steps of 2 batches of 2
    got = [b for b in itertools.islice(iter(loader), 24)]
    expected = []
    for epoch in range(3):
        finite, finite_sampler = build_train_loader(Keys(), {**opt, 'dataloader_num_workers': 0}, 1, 0, 7, cpu)
        finite_sampler.set_epoch(epoch)
        expected += list(finite)[:8]  # the 9th batch has no partner for a whole step of 2
    assert len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(got, expected))
