"""Epoch orders: sharding and shuffling (pure, no processes)."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_core.data import SHUFFLE_MODES, RecordPipeline, epoch_order



@pytest.mark.parametrize("n", [0, 1, 10, 97, 256])
@pytest.mark.parametrize("mode", SHUFFLE_MODES)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 7])
def test_every_record_exactly_once(n, mode, world_size):
    for epoch in (0, 1):
        parts = [epoch_order(n, shuffle=mode, seed=5, epoch=epoch, rank=r,
                             world_size=world_size, chunk_size=8, shuffle_buffer=12)
                 for r in range(world_size)]
        everything = np.concatenate(parts)
        assert everything.dtype == np.int64
        assert sorted(everything.tolist()) == list(range(n))
        sizes = [len(p) for p in parts]
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == n


@pytest.mark.parametrize("mode", SHUFFLE_MODES)
@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_exactly_once_per_rank(tmp_path, mode, world_size, drop_last):
    """Through RecordPipeline (in-process): no duplicates; with drop_last only
    each rank's incomplete tail batch is missing."""
    source = list(range(103))                     # any indexable works as a source
    seen, tails = [], 0
    for rank in range(world_size):
        pipe = RecordPipeline(source, 4, transformer=int, shuffle=mode, seed=3, rank=rank,
                              world_size=world_size, drop_last=drop_last, chunk_size=5,
                              num_readers=0)
        batches = [b.tolist() for b in pipe]
        assert len(batches) == len(pipe)
        assert all(len(b) == 4 for b in batches[:-1])
        got = [i for b in batches for i in b]
        assert len(got) == pipe.num_examples()
        shard = len(pipe.order(0))
        tails += shard % 4 if drop_last else 0
        seen += got
    assert len(seen) == len(set(seen))            # disjoint across ranks, no repeats
    assert len(seen) == 103 - tails
    if not drop_last:
        assert sorted(seen) == list(range(103))


@pytest.mark.parametrize("mode", ["example", "chunk"])
def test_seeded_and_changes_per_epoch(mode):
    kw = dict(shuffle=mode, rank=1, world_size=2, chunk_size=4)
    a = epoch_order(200, seed=1, epoch=0, **kw)
    assert np.array_equal(a, epoch_order(200, seed=1, epoch=0, **kw))
    assert not np.array_equal(a, epoch_order(200, seed=1, epoch=1, **kw))
    assert not np.array_equal(a, epoch_order(200, seed=2, epoch=0, **kw))
    assert not np.array_equal(a, np.sort(a))      # actually shuffled


def test_shards_change_with_epoch_when_shuffled():
    a = set(epoch_order(100, shuffle="example", seed=0, epoch=0, rank=0, world_size=2))
    b = set(epoch_order(100, shuffle="example", seed=0, epoch=1, rank=0, world_size=2))
    assert a != b


def test_none_is_contiguous_ranges():
    assert epoch_order(10, rank=0, world_size=3).tolist() == [0, 1, 2]
    assert epoch_order(10, rank=1, world_size=3).tolist() == [3, 4, 5]
    assert epoch_order(10, rank=2, world_size=3).tolist() == [6, 7, 8, 9]


def test_chunk_mode_keeps_chunks_contiguous():
    order = epoch_order(50, shuffle="chunk", seed=4, chunk_size=10, shuffle_buffer=1)
    runs = order.reshape(5, 10)
    assert np.all(np.diff(runs, axis=1) == 1)     # each chunk read in sequence
    assert np.all(runs[:, 0] % 10 == 0)
    assert runs[:, 0].tolist() != [0, 10, 20, 30, 40]
    # with a buffer, examples are shuffled only inside windows of that size
    order = epoch_order(60, shuffle="chunk", seed=4, chunk_size=10, shuffle_buffer=20)
    plain = epoch_order(60, shuffle="chunk", seed=4, chunk_size=10, shuffle_buffer=1)
    for w in range(3):
        window = slice(20 * w, 20 * (w + 1))
        assert sorted(order[window]) == sorted(plain[window])
    assert not np.array_equal(order, plain)


def test_equal_shards():
    parts = [epoch_order(10, shuffle="example", rank=r, world_size=3, equal_shards=True)
             for r in range(3)]
    assert [len(p) for p in parts] == [3, 3, 3]
    assert len(set(np.concatenate(parts).tolist())) == 9


@pytest.mark.parametrize("kw, message", [
    (dict(rank=2, world_size=2), "rank"),
    (dict(world_size=0), "rank"),
    (dict(shuffle="random"), "shuffle"),
    (dict(shuffle="chunk", chunk_size=0), "chunk_size"),
])
def test_bad_arguments(kw, message):
    with pytest.raises(ValueError, match=message):
        epoch_order(10, **kw)


def test_bool_shuffle_aliases():
    assert np.array_equal(epoch_order(20, shuffle=True, seed=1),
                          epoch_order(20, shuffle="example", seed=1))
    assert epoch_order(5, shuffle=False).tolist() == [0, 1, 2, 3, 4]
