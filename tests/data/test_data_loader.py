"""Dataset, TensorDataset, DataLoader and default_collate."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import dragon_core as dg
from dragon_core.data import DataLoader, Dataset, TensorDataset, WorkerError, default_collate
from _data_helpers import SquaresDataset, Unpicklable, wait_gone


def _as_lists(batches):
    out = []
    for b in batches:
        if isinstance(b, dict):
            out.append({k: v.tolist() for k, v in b.items()})
        else:
            out.append(tuple(t.tolist() for t in b))
    return out


def test_tensor_dataset_batches():
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10)
    ds = TensorDataset(x, dg.tensor(y))
    assert len(ds) == 10 and ds[3][0].tolist() == [6.0, 7.0] and ds[3][1] == 3
    loader = DataLoader(ds, batch_size=4)
    batches = list(loader)
    assert len(loader) == len(batches) == 3
    bx, by = batches[0]
    assert isinstance(bx, dg.Tensor) and bx.shape == (4, 2) and bx.dtype == dg.float32
    assert by.dtype == dg.int64 and by.tolist() == [0, 1, 2, 3]
    assert batches[2][1].tolist() == [8, 9]
    assert len(DataLoader(ds, batch_size=4, drop_last=True)) == 2
    assert [b[1].tolist() for b in DataLoader(ds, 4, drop_last=True)] == [[0, 1, 2, 3],
                                                                      [4, 5, 6, 7]]


def test_tensor_dataset_rejects_mismatch():
    with pytest.raises(ValueError, match="first dimension"):
        TensorDataset(np.zeros((3, 2)), np.zeros(4))
    with pytest.raises(ValueError, match="at least one"):
        TensorDataset()


def test_abstract_dataset():
    with pytest.raises(NotImplementedError, match="__getitem__"):
        Dataset()[0]
    with pytest.raises(TypeError, match="__len__ and __getitem__"):
        DataLoader(object())


def test_shuffle_is_seeded_and_changes_per_epoch():
    ds = TensorDataset(np.arange(50))
    loader = DataLoader(ds, batch_size=10, shuffle=True, seed=3)
    e0 = [i for (b,) in loader for i in b.tolist()]
    e1 = [i for (b,) in loader for i in b.tolist()]
    assert sorted(e0) == sorted(e1) == list(range(50)) and e0 != e1
    loader.set_epoch(0)
    assert [i for (b,) in loader for i in b.tolist()] == e0
    other = DataLoader(ds, batch_size=10, shuffle=True, seed=4)
    assert [i for (b,) in other for i in b.tolist()] != e0


def test_workers_give_the_same_batches():
    ds = SquaresDataset(37)
    ref = _as_lists(DataLoader(ds, batch_size=5, shuffle=True, seed=1))
    with DataLoader(ds, batch_size=5, shuffle=True, seed=1, num_workers=2,
                    timeout=60) as loader:
        assert _as_lists(loader) == ref
        loader.set_epoch(0)
        assert _as_lists(loader) == ref                 # persistent workers, epoch 0 again
        pids = loader.worker_pids
        assert len(pids) == 2
    assert wait_gone(pids) == []
    assert ref[0]["sq"][1] == [float(ref[0]["i"][1]), float(ref[0]["i"][1] ** 2)]


def test_sharded_loader_covers_dataset():
    ds = TensorDataset(np.arange(23))
    seen = []
    for rank in range(3):
        loader = DataLoader(ds, batch_size=4, shuffle=True, seed=9, rank=rank, world_size=3)
        got = [i for (b,) in loader for i in b.tolist()]
        assert len(loader) == -(-len(got) // 4)
        seen += got
    assert sorted(seen) == list(range(23))


def test_worker_exception_has_traceback():
    with DataLoader(SquaresDataset(20, bad=11), batch_size=4, num_workers=2,
                    timeout=60) as loader:
        with pytest.raises(WorkerError) as info:
            list(loader)
    text = str(info.value)
    assert info.value.index == 11 and "record 11" in text
    assert "KeyError" in text and "dataset refuses 11" in text and "__getitem__" in text


def test_in_process_exception_is_the_original():
    with pytest.raises(KeyError, match="dataset refuses 2") as info:
        list(DataLoader(SquaresDataset(5, bad=2), batch_size=2))
    assert any("record 2" in note for note in info.value.__notes__)


def test_unpicklable_example_is_reported():
    with DataLoader(Unpicklable(), batch_size=2, num_workers=1, timeout=60) as loader:
        with pytest.raises(WorkerError, match="cannot be pickled"):
            list(loader)


def test_custom_collate_and_unbatched():
    ds = SquaresDataset(6)
    loader = DataLoader(ds, batch_size=4, collate_fn=lambda exs: [e["i"] for e in exs])
    assert list(loader) == [[0, 1, 2, 3], [4, 5]]
    singles = list(DataLoader(ds, batch_size=None))
    assert len(singles) == 6 and singles[2]["i"] == 2


def test_default_collate_structures():
    Pair = collections.namedtuple("Pair", "a b")
    batch = default_collate([Pair(1, [0.5, "x"]), Pair(2, [1.5, "y"])])
    assert isinstance(batch, Pair)
    assert batch.a.tolist() == [1, 2] and batch.a.dtype == dg.int64
    assert batch.b[0].dtype == dg.float32 and batch.b[1] == ["x", "y"]
    batch = default_collate([{"m": np.ones((2, 2), np.float64), "t": dg.tensor([1, 2]),
                              "ok": True}] * 3)
    assert batch["m"].shape == (3, 2, 2) and batch["m"].dtype == dg.float64
    assert batch["t"].shape == (3, 2) and batch["ok"].dtype == dg.bool_
    with pytest.raises(ValueError, match=r"batch\['m'\]: cannot stack .* \(2,\) and \(3,\)"):
        default_collate([{"m": np.ones(2)}, {"m": np.ones(3)}])
    with pytest.raises(ValueError, match="different keys"):
        default_collate([{"a": 1}, {"b": 1}])
    with pytest.raises(ValueError, match="at least one"):
        default_collate([])


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_other_start_methods(method):
    ds = SquaresDataset(9)
    ref = _as_lists(DataLoader(ds, batch_size=4, shuffle=True, seed=2))
    with DataLoader(ds, batch_size=4, shuffle=True, seed=2, num_workers=2,
                    start_method=method, timeout=60) as loader:
        assert _as_lists(loader) == ref
        pids = loader.worker_pids
    assert wait_gone(pids) == []


def test_bad_start_method():
    with pytest.raises(ValueError, match="start_method 'thread'"):
        list(DataLoader(SquaresDataset(3), num_workers=1, start_method="thread"))


def test_sampler_gives_the_indices_of_every_epoch():
    ds = TensorDataset(np.arange(10))

    class Twice:
        def __init__(self):
            self.calls = 0

        def __iter__(self):
            self.calls += 1
            return iter([3, 3, 9, 0] if self.calls == 1 else [1, 2])

        def __len__(self):
            return 4 if self.calls == 0 else 2
    loader = DataLoader(ds, batch_size=3, sampler=Twice())
    assert len(loader) == 2
    assert [b[0].tolist() for b in loader] == [[3, 3, 9], [0]]
    assert [b[0].tolist() for b in loader] == [[1, 2]]
    assert [b[0].tolist() for b in DataLoader(ds, batch_size=2, sampler=[5, 4, 7],
                                              num_workers=2)] == [[5, 4], [7]]
    with pytest.raises(ValueError, match="sampler= gives the indices"):
        DataLoader(ds, sampler=[0], shuffle=True)
    with pytest.raises(IndexError, match="index -11"):
        list(DataLoader(ds, sampler=[-11]))


def test_iterating_a_temporary_loader_with_workers():
    # ``for b in DataLoader(...)``: nothing else holds the loader; it must
    # live until the iteration ends (its __del__ closes the worker pool).
    ds = TensorDataset(np.arange(10))
    assert [b[0].tolist() for b in DataLoader(ds, batch_size=4, num_workers=2)] == \
        [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


@pytest.mark.parametrize("shuffle", [False, True])
def test_equal_shards_give_every_rank_the_same_batches(shuffle):
    # 10 examples on 3 ranks: without equal_shards one rank gets 4 and runs
    # one batch more (its all_reduce would wait for ever); with it, 3 each.
    ds = TensorDataset(np.arange(10))
    for epoch in range(2):
        seen = []
        for rank in range(3):
            loader = DataLoader(ds, batch_size=2, shuffle=shuffle, drop_last=True, rank=rank,
                                world_size=3, equal_shards=True)
            loader.set_epoch(epoch)
            batches = [b[0].tolist() for b in loader]
            assert len(batches) == len(loader) == 1
            seen += [i for b in batches for i in b]
        assert len(set(seen)) == len(seen) == 6
    sizes = [len(DataLoader(ds, batch_size=2, drop_last=True, rank=r, world_size=3))
             for r in range(3)]
    assert sorted(sizes) == [1, 1, 2]        # the default: shards differ by one


@pytest.mark.parametrize("items, dtype, values", [
    ([1, 2.5], "float32", [1.0, 2.5]),
    ([True, 2], "int64", [1, 2]),
    ([2.5, True], "float32", [2.5, 1.0]),
    ([True, False], "bool", [True, False]),
    ([3, -4], "int64", [3, -4]),
])
def test_default_collate_of_mixed_python_numbers_never_truncates(items, dtype, values):
    out = default_collate(items)
    assert out.dtype == getattr(dg, dtype if dtype != "bool" else "bool_") and \
        out.tolist() == values


@pytest.mark.parametrize("items, message", [([1, None], "mix int with NoneType"),
                                            ([1, 2**70], "does not fit in int64")])
def test_default_collate_refuses_what_it_cannot_stack(items, message):
    with pytest.raises(ValueError, match=message):
        default_collate(items)
