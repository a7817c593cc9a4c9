"""Random numbers drawn inside ``Dataset.__getitem__`` in worker processes:
never repeated across workers, reproducible from the seed, independent of the
number of workers; ``get_worker_info``."""

from __future__ import annotations

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
