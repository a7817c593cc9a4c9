"""Random numbers drawn inside ``Dataset.__getitem__`` in worker processes:
never repeated across workers, reproducible from the seed, independent of the
number of workers; ``get_worker_info``."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_core.data import DataLoader, get_worker_info
from _data_helpers import RandomOps


def _epochs(num_workers, seed=3, n=40, start_method=None):
    with DataLoader(RandomOps(n), batch_size=8, num_workers=num_workers, seed=seed,
                    start_method=start_method) as loader:
        return [[tuple(b[k].numpy()[j].tolist() for k in range(5)) for b in loader
                 for j in range(len(b[0].numpy()))] for _ in range(2)]


@pytest.mark.parametrize("start_method", [None, "fork", "spawn"])
def test_workers_never_repeat_random_numbers(start_method):
    epochs = _epochs(2, start_method=start_method)
    for rows in epochs:
        assert [r[0] for r in rows] == list(range(40))
        for k, name in ((1, "dragon random op"), (2, "np.random"), (3, "random")):
            values = [r[k] for r in rows]
            assert len(set(values)) == len(values), f"{name}: workers repeat numbers"
        assert {tuple(r[4]) for r in rows} <= {(0, 2), (1, 2)}


def test_worker_random_numbers_depend_on_seed_epoch_and_index_only():
    two = _epochs(2)
    again = _epochs(2)                                     # reproducible
    assert [[r[:4] for r in e] for e in again] == [[r[:4] for r in e] for e in two]
    assert [r[:4] for r in _epochs(3)[0]] == [r[:4] for r in two[0]]   # any worker count
    assert [r[:4] for r in _epochs(1)[1]] == [r[:4] for r in two[1]]
    assert [r[1:4] for r in two[0]] != [r[1:4] for r in two[1]]       # new every epoch
    assert [r[1:4] for r in _epochs(2, seed=4)[0]] != [r[1:4] for r in two[0]]


def test_get_worker_info_is_none_in_the_main_process():
    assert get_worker_info() is None
    rows = [tuple(b[4].numpy()[0].tolist()) for b in DataLoader(RandomOps(4), batch_size=1)]
    assert rows == [(-1, -1)] * 4


# -- a sampler that repeats records: every visit gets its own draws ---------------

def _rows(loader):
    return [tuple(b[k].numpy()[j].tolist() for k in range(4)) for b in loader
            for j in range(len(b[0].numpy()))]


@pytest.mark.parametrize("num_workers", [1, 2])
def test_repeated_indices_get_their_own_random_numbers(num_workers):
    sampler = [0, 0, 0, 1, 1, 1]
    with DataLoader(RandomOps(4), batch_size=3, num_workers=num_workers, seed=5,
                    sampler=sampler) as loader:
        rows = _rows(loader)
    assert [r[0] for r in rows] == sampler
    for k, name in ((1, "dragon random op"), (2, "np.random"), (3, "random")):
        values = [r[k] for r in rows]
        assert len(set(values)) == len(values), f"{name}: a repeated index repeats its draws"
    # The first visit of a record keeps the seed it had before repeats were
    # counted: the same draws as in an epoch without repeats.
    with DataLoader(RandomOps(4), batch_size=2, num_workers=1, seed=5,
                    sampler=[0, 1]) as loader:
        unique = _rows(loader)
    assert [rows[0], rows[3]] == unique


def test_repeated_indices_do_not_depend_on_num_workers():
    sampler = [2, 0, 2, 2, 1, 0, 2]

    def rows(num_workers):
        with DataLoader(RandomOps(4), batch_size=7, num_workers=num_workers, seed=1,
                        sampler=sampler) as loader:
            return _rows(loader)
    assert rows(1) == rows(3)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_transformer_rng_differs_for_repeated_indices(num_workers):
    from _data_helpers import IndexOf, RngNoise
    sampler = [3, 1, 3, 3, 1]
    with DataLoader(IndexOf(4), batch_size=5, num_workers=num_workers, seed=2,
                    sampler=sampler, transform=RngNoise()) as loader:
        batch = next(iter(loader)).numpy()
    assert batch[:, 0].tolist() == sampler
    assert len(set(batch[:, 1].tolist())) == 5
    with DataLoader(IndexOf(4), batch_size=5, num_workers=2 - num_workers, seed=2,
                    sampler=sampler, transform=RngNoise()) as loader:
        other = next(iter(loader)).numpy()
    assert np.array_equal(batch, other)                # whatever num_workers


def test_occurrences_counts_earlier_visits():
    from dragon_core.data._workers import occurrences
    idx = np.array([5, 1, 5, 5, 0, 1, 7, 5])
    expected = [list(idx[:j]).count(v) for j, v in enumerate(idx)]
    assert occurrences(idx).tolist() == expected
    assert occurrences(np.random.default_rng(0).permutation(50)).tolist() == [0] * 50
    assert occurrences(np.zeros(0, np.int64)).tolist() == []


# -- a RecordPipeline's source and transform draw from different streams ----------

@pytest.mark.parametrize("num_transformers", [0, 2])
def test_pipeline_source_and_transform_draw_different_numbers(num_transformers):
    from dragon_core.data import RecordPipeline
    from _data_helpers import DrawingSource, drawing_transform

    def run(nt):
        with RecordPipeline(DrawingSource(12), batch_size=12, transformer=drawing_transform,
                            seed=4, num_readers=2, num_transformers=nt) as pipe:
            return next(iter(pipe)).numpy()
    out = run(num_transformers)
    assert out[:, 0].tolist() == list(range(12))
    assert not np.any(out[:, 1] == out[:, 3]), "np.random: transform repeats the source's draw"
    assert not np.any(out[:, 2] == out[:, 4]), "random: transform repeats the source's draw"
    assert len(set(out[:, 3].tolist())) == 12
    assert np.array_equal(out, run(2 - num_transformers))   # whatever the topology
    assert np.array_equal(out, run(num_transformers))       # reproducible
