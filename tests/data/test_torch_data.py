"""``dragon_core.vm.torch.utils.data`` against real ``torch.utils.data`` 2.13:
collation, DataLoader batching, shuffling, workers (seeding, worker_init_fn,
get_worker_info, errors), lengths and datasets."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from dragon_core.data import WorkerError
from dragon_core.vm import torch as vt
from dragon_core.vm.torch.utils import data as vdata
from _torch_data_helpers import FailsAt, Mixed, RandomDraws, VtMixed, WhoAmI, \
    record_init

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
tdata = torch.utils.data


def assert_same(ours, ref, where="batch"):
    """``ours`` (vm.torch) has the structure, types, dtypes and values of
    ``ref`` (real torch)."""
    if isinstance(ref, torch.Tensor):
        assert isinstance(ours, vt.Tensor), f"{where}: {type(ours)} instead of a tensor"
        assert str(ours.dtype) == str(ref.dtype), f"{where}: {ours.dtype} vs {ref.dtype}"
        assert tuple(ours.shape) == tuple(ref.shape), f"{where}: {ours.shape} vs {ref.shape}"
        np.testing.assert_array_equal(ours.numpy(), ref.numpy(), err_msg=where)
        return
    assert type(ours).__name__ == type(ref).__name__, f"{where}: {type(ours)} vs {type(ref)}"
    if isinstance(ref, dict):
        assert list(ours) == list(ref), where
        for k in ref:
            assert_same(ours[k], ref[k], f"{where}[{k!r}]")
    elif isinstance(ref, (list, tuple)):
        assert len(ours) == len(ref), where
        for i, (a, b) in enumerate(zip(ours, ref)):
            assert_same(a, b, f"{where}[{i}]")
    elif isinstance(ref, np.ndarray):
        np.testing.assert_array_equal(ours, ref, err_msg=where)
    else:
        assert ours == ref, f"{where}: {ours!r} vs {ref!r}"


def _batch_cases():
    P = collections.namedtuple("P", "a b")
    return {
        "floats": [1.5, -2.25, 3.0],
        "ints": [1, 2, 3],
        "bools": [True, False],
        "int_then_float": [1, 2.5],
        "bool_then_int": [True, 2],
        "float_then_int": [2.5, 1],
        "np_scalars": [np.float32(1.5), np.float32(2)],
        "np_int8": [np.int8(-3), np.int8(4)],
        "np_bool": [np.bool_(True), np.bool_(False)],
        "np_arrays": [np.arange(4, dtype=np.float64).reshape(2, 2), np.ones((2, 2))],
        "np_0d": [np.array(3, np.int32), np.array(4, np.int32)],
        "np_strided": [np.arange(12.0)[::3], np.arange(12.0)[1::3]],
        "strings": ["a", "bb"],
        "bytes": [b"a", b"bb"],
        "tuples": [(1, 2.5, "x"), (3, 4.5, "y")],
        "lists": [[1, [2.0, 3]], [4, [5.0, 6]]],
        "dicts": [{"a": 1, "b": {"c": 2.5, "d": "s"}}, {"a": 3, "b": {"c": 4.5, "d": "t"}}],
        "ordered": [collections.OrderedDict(z=1, a=2.0), collections.OrderedDict(z=3, a=4.0)],
        "namedtuples": [P(1, 2.0), P(3, 4.0)],
        "namedtuple_of_arrays": [P(np.zeros(2, np.float32), "u"), P(np.ones(2, np.float32), "v")],
    }


@pytest.mark.parametrize("name", list(_batch_cases()))
def test_default_collate_matches_torch(name):
    batch = _batch_cases()[name]
    assert_same(vdata.default_collate(batch), tdata.default_collate(batch), name)


@pytest.mark.parametrize("name", list(_batch_cases()))
def test_default_convert_matches_torch(name):
    for example in _batch_cases()[name]:
        assert_same(vdata.default_convert(example), tdata.default_convert(example), name)


def test_default_collate_of_tensors_and_mixed_examples():
    ours = [Mixed(vt)[i] for i in range(4)]
    ref = [Mixed(torch)[i] for i in range(4)]
    assert_same(vdata.default_collate(ours), tdata.default_collate(ref))


@pytest.mark.parametrize("batch, error", [
    ([None, None], TypeError),
    ([object(), object()], TypeError),
    ([np.array(["a"]), np.array(["b"])], TypeError),
    ([(1, 2), (3,)], RuntimeError),
])
def test_default_collate_refuses_what_torch_refuses(batch, error):
    with pytest.raises(error):
        tdata.default_collate(batch)
    with pytest.raises(error, match="default_collate"):
        vdata.default_collate(batch)


def test_default_collate_unequal_tensor_shapes_name_them():
    with pytest.raises(RuntimeError, match=r"\[2\] at entry 0 and \[3\] at entry 1"):
        vdata.default_collate([vt.zeros(2), vt.zeros(3)])


@pytest.mark.parametrize("batch_size, drop_last", [(1, False), (3, False), (3, True),
                                                   (4, True), (None, False), (20, False)])
def test_loader_batches_match_torch(batch_size, drop_last):
    ours = list(vdata.DataLoader(VtMixed(), batch_size=batch_size, drop_last=drop_last))
    ref = list(tdata.DataLoader(Mixed(torch), batch_size=batch_size, drop_last=drop_last))
    assert len(ours) == len(ref)
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert_same(a, b, f"batch {i}")


@pytest.mark.parametrize("n", [0, 1, 7, 12])
@pytest.mark.parametrize("batch_size", [1, 5, None])
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_matches_torch(n, batch_size, drop_last):
    if batch_size is None and drop_last:
        with pytest.raises(ValueError, match="mutually exclusive"):
            tdata.DataLoader(list(range(n)), batch_size=None, drop_last=True)
        with pytest.raises(ValueError, match="mutually exclusive"):
            vdata.DataLoader(list(range(n)), batch_size=None, drop_last=True)
        return
    ours = vdata.DataLoader(list(range(n)), batch_size=batch_size, drop_last=drop_last)
    ref = tdata.DataLoader(list(range(n)), batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(ref) == len(list(ours)) == len(list(ref))


def test_user_collate_fn_receives_the_dataset_examples():
    ds = vdata.TensorDataset(vt.arange(6.0).reshape(3, 2), vt.arange(3))
    seen = []
    loader = vdata.DataLoader(ds, batch_size=2, collate_fn=lambda b: seen.append(b) or len(b))
    assert list(loader) == [2, 1]
    assert all(isinstance(x, vt.Tensor) and isinstance(y, vt.Tensor) for x, y in seen[0])
    assert str(seen[0][0][0].dtype) == "torch.float32" and seen[0][1][1].tolist() == 1


def test_shuffle_permutes_every_epoch_and_follows_the_generator():
    def epochs(seed, n=3):
        loader = vdata.DataLoader(list(range(30)), batch_size=7, shuffle=True,
                                  generator=vt.Generator().manual_seed(seed))
        return [[i for b in loader for i in b.tolist()] for _ in range(n)]
    a = epochs(5)
    vt.manual_seed(123)                        # the global generator does not matter
    vt.rand(7)
    b = epochs(5)
    assert a == b
    assert all(sorted(e) == list(range(30)) for e in a)      # each epoch a permutation
    assert a[0] != a[1] != a[2]                               # reshuffled every epoch
    assert epochs(6)[0] != a[0]


def test_shuffle_without_generator_follows_manual_seed():
    def first_epoch():
        return [i for b in vdata.DataLoader(list(range(30)), batch_size=4, shuffle=True)
                for i in b.tolist()]
    vt.manual_seed(1)
    a = first_epoch()
    vt.manual_seed(1)
    assert first_epoch() == a and sorted(a) == list(range(30)) and a != list(range(30))


def test_loader_does_not_shard_by_the_launcher_environment(monkeypatch):
    # torch's DataLoader reads the whole dataset on every rank (sharding is
    # DistributedSampler's job); it must not silently read 1/world_size of it.
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = vdata.DataLoader(list(range(10)), batch_size=4)
    assert len(loader) == 3 and [i for b in loader for i in b.tolist()] == list(range(10))


def _draws(num_workers, seed=7, n=40):
    loader = vdata.DataLoader(RandomDraws(n), batch_size=5, num_workers=num_workers,
                              generator=vt.Generator().manual_seed(seed))
    try:
        epoch0 = [tuple(map(float, row)) for b in loader for row in zip(*b)]
        epoch1 = [tuple(map(float, row)) for b in loader for row in zip(*b)]
    finally:
        loader._loader.close()
    return epoch0, epoch1


def test_worker_random_numbers_are_distinct_and_reproducible():
    two, two_again, three = _draws(2), _draws(2), _draws(3)
    for epoch in two:
        assert [r[0] for r in epoch] == list(range(40))
        for k in range(1, 5):                       # vm.torch rand/randint, numpy, random
            values = [r[k] for r in epoch]
            assert len(set(values)) == len(values), f"generator {k}: workers repeat numbers"
    assert two == two_again                         # the same seed, the same numbers
    assert two[0] == three[0]                       # whatever the number of workers
    assert two[0] != two[1]                         # and new ones every epoch
    assert _draws(2, seed=8)[0] != two[0]


def test_worker_init_fn_and_get_worker_info():
    assert vdata.get_worker_info() is None
    loader = vdata.DataLoader(WhoAmI(), batch_size=None, num_workers=2,
                              worker_init_fn=record_init)
    try:
        rows = list(loader)
    finally:
        loader._loader.close()
    assert [int(r[0]) for r in rows] == list(range(12))
    assert {int(r[1]) for r in rows} <= {0, 1} and {int(r[2]) for r in rows} == {2}
    for r in rows:                                  # each worker ran the init once, first
        assert [int(x) for x in r[3]] == [int(r[1])]
    # in-process: no worker info and no worker_init_fn, as torch
    rows = list(vdata.DataLoader(WhoAmI(), batch_size=None, worker_init_fn=record_init))
    assert {(int(r[1]), int(r[2]), int(r[3])) for r in rows} == {(-1, -1, 0)}


def test_worker_error_surfaces_with_its_traceback():
    loader = vdata.DataLoader(FailsAt(6), batch_size=2, num_workers=2)
    try:
        with pytest.raises(WorkerError, match="no example 6 here") as info:
            list(loader)
        assert "KeyError" in info.value.worker_traceback and info.value.index == 6
    finally:
        loader._loader.close()


def test_worker_batches_equal_in_process_batches():
    ours = list(vdata.DataLoader(VtMixed(), batch_size=3, num_workers=2))
    ref = list(tdata.DataLoader(Mixed(torch), batch_size=3))
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert_same(a, b, f"batch {i}")
    assert len(ours) == len(ref)


def test_concat_dataset_indexing_matches_torch():
    parts = [list(range(3)), [], list(range(10, 14))]
    ours, ref = vdata.ConcatDataset(parts), tdata.ConcatDataset(parts)
    assert len(ours) == len(ref) == 7
    for i in range(-7, 7):
        assert ours[i] == ref[i]
    for i in (7, -8):
        with pytest.raises((IndexError, ValueError)):
            ref[i]
        with pytest.raises((IndexError, ValueError)):
            ours[i]


def test_random_split_follows_the_generator():
    def split(seed):
        parts = vdata.random_split(list(range(20)), [5, 15],
                                   generator=vt.Generator().manual_seed(seed))
        return [list(p.indices) for p in parts]
    a = split(3)
    vt.manual_seed(99)
    assert split(3) == a and sorted(a[0] + a[1]) == list(range(20)) and split(4) != a


def test_tensor_dataset_examples_match_torch():
    x = np.arange(12, dtype=np.float64).reshape(6, 2)
    y = np.arange(6, dtype=np.int16)
    ours = vdata.TensorDataset(vt.tensor(x), vt.tensor(y))
    ref = tdata.TensorDataset(torch.tensor(x), torch.tensor(y))
    for i in (0, 5, -1):
        assert_same(ours[i], ref[i], f"example {i}")
    assert_same(next(iter(vdata.DataLoader(ours, batch_size=4))),
                next(iter(tdata.DataLoader(ref, batch_size=4))))


# ---------------------------------------------------------------- samplers

def _flat(batches):
    return [int(i) for b in batches for i in b.tolist()]


def test_sequential_and_batch_samplers_match_torch():
    data = list(range(11))
    for bs, drop in ((1, False), (3, False), (3, True), (11, True), (12, True)):
        ours = vdata.BatchSampler(vdata.SequentialSampler(data), bs, drop)
        ref = tdata.BatchSampler(tdata.SequentialSampler(data), bs, drop)
        assert list(ours) == list(ref) and len(ours) == len(ref)
        a = list(vdata.DataLoader(data, batch_sampler=ours))
        b = list(tdata.DataLoader(data, batch_sampler=ref))
        assert len(a) == len(b) == len(vdata.DataLoader(data, batch_sampler=ours))
        for x, y in zip(a, b):
            assert_same(x, y)
    uneven = [[0, 5], [2], [9, 1, 3]]          # any iterable of index lists
    for x, y in zip(vdata.DataLoader(data, batch_sampler=uneven),
                    tdata.DataLoader(data, batch_sampler=uneven)):
        assert_same(x, y)


def test_sampler_argument_checks_match_torch():
    for mod in (vdata, tdata):
        with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
            mod.DataLoader([1, 2], sampler=[0, 1], shuffle=True)
        with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
            mod.DataLoader([1, 2], batch_sampler=[[0]], batch_size=2)
        for bad in (0, -1, True, 2.0):
            with pytest.raises(ValueError, match="batch_size should be a positive integer"):
                mod.BatchSampler([0, 1], bad, False)
        with pytest.raises(ValueError, match="num_samples should be a positive integer"):
            mod.RandomSampler([1, 2], num_samples=0)
        with pytest.raises(TypeError, match="replacement should be a boolean"):
            mod.RandomSampler([1, 2], replacement=1)
        with pytest.raises(ValueError, match="Invalid rank"):
            mod.DistributedSampler(list(range(4)), num_replicas=2, rank=2)


@pytest.mark.parametrize("n, replicas, drop_last", [(10, 3, False), (10, 3, True), (9, 3, False),
                                                    (2, 4, False), (5, 4, True), (0, 2, False)])
def test_distributed_sampler_without_shuffle_matches_torch(n, replicas, drop_last):
    data = list(range(n))
    for rank in range(replicas):
        ours = vdata.DistributedSampler(data, replicas, rank, shuffle=False, drop_last=drop_last)
        ref = tdata.DistributedSampler(data, replicas, rank, shuffle=False, drop_last=drop_last)
        assert list(ours) == list(ref) and len(ours) == len(ref)


@pytest.mark.parametrize("n, replicas, drop_last", [(10, 3, False), (10, 3, True), (2, 4, False),
                                                    (12, 4, False)])
def test_distributed_sampler_covers_each_sample_once_per_epoch(n, replicas, drop_last):
    data = list(range(n))
    for epoch in range(3):
        shards = []
        for rank in range(replicas):
            s = vdata.DistributedSampler(data, replicas, rank, shuffle=True, seed=5,
                                         drop_last=drop_last)
            s.set_epoch(epoch)
            shards.append(list(s))
            assert len(shards[-1]) == len(s)
        ref_sizes = [len(tdata.DistributedSampler(data, replicas, r, drop_last=drop_last))
                     for r in range(replicas)]
        assert [len(x) for x in shards] == ref_sizes            # equal shards, as torch
        everything = [i for x in shards for i in x]
        if drop_last:                                           # distinct, the tail dropped
            assert len(set(everything)) == len(everything) == replicas * (n // replicas)
        else:                                                   # all, padded by repeats
            assert set(everything) == set(data)
            assert len(everything) - n == -n % replicas
        if epoch == 0:
            first = shards
    if n >= 10:
        assert shards != first                                  # set_epoch reshuffles


def test_random_samplers_are_permutations_seeded_by_manual_seed():
    data = list(range(20))
    vt.manual_seed(3)
    a = [list(vdata.RandomSampler(data)) for _ in range(2)]
    vt.manual_seed(3)
    b = [list(vdata.RandomSampler(data)) for _ in range(2)]
    assert a == b and a[0] != a[1] and all(sorted(x) == data for x in a)
    chained = list(vdata.RandomSampler(data, num_samples=45))
    assert len(chained) == 45 and sorted(chained[:20]) == sorted(chained[20:40]) == data
    assert len(set(chained[40:])) == 5
    drawn = list(vdata.RandomSampler(data, replacement=True, num_samples=500))
    assert len(drawn) == 500 and set(drawn) <= set(data) and len(set(drawn)) > 15
    assert len(tdata.RandomSampler(data, num_samples=45)) == \
        len(vdata.RandomSampler(data, num_samples=45)) == 45
    sub = [3, 7, 11, 19]
    assert sorted(vdata.SubsetRandomSampler(sub)) == sub


def test_weighted_random_sampler():
    vt.manual_seed(0)
    weights = [0.0, 1.0, 3.0, 0.0, 6.0]
    drawn = list(vdata.WeightedRandomSampler(weights, 20000))
    counts = np.bincount(drawn, minlength=5) / 20000
    assert counts[0] == counts[3] == 0
    np.testing.assert_allclose(counts[[1, 2, 4]], [0.1, 0.3, 0.6], atol=0.02)
    once = list(vdata.WeightedRandomSampler(weights, 3, replacement=False))
    assert sorted(once) == [1, 2, 4]
    # torch draws zero-weight indices once the others are used up; we refuse
    assert 0 in list(tdata.WeightedRandomSampler(weights, 5, replacement=False)) or \
        3 in list(tdata.WeightedRandomSampler(weights, 5, replacement=False))
    with pytest.raises(RuntimeError, match="without replacement from 3 non-zero"):
        vdata.WeightedRandomSampler(weights, 4, replacement=False)
    for mod in (vdata, tdata):
        with pytest.raises(RuntimeError):
            list(mod.WeightedRandomSampler([-1.0, 2.0], 1))


def test_loader_with_a_sampler_reads_its_indices_every_epoch():
    data = [float(i) for i in range(10)]
    sampler = vdata.RandomSampler(data, replacement=True, num_samples=7)
    loader = vdata.DataLoader(data, batch_size=3, sampler=sampler)
    assert len(loader) == 3
    epochs = [_flat(loader) for _ in range(2)]
    assert [len(e) for e in epochs] == [7, 7] and epochs[0] != epochs[1]
    loader = vdata.DataLoader(data, batch_size=3, sampler=[9, 9, 0, 4], drop_last=True)
    assert _flat(loader) == [9, 9, 0] and len(loader) == 1
    with pytest.raises(IndexError, match="sampler gave index 10"):
        list(vdata.DataLoader(data, sampler=[10]))


def test_loader_with_samplers_and_workers_matches_in_process():
    sampler = vdata.DistributedSampler(list(range(11)), 2, 1, shuffle=True, seed=1)
    batches = vdata.BatchSampler(sampler, 4, False)
    ours = [b for b in vdata.DataLoader(VtMixed(), batch_sampler=batches, num_workers=2)]
    ref = [b for b in tdata.DataLoader(Mixed(torch), batch_sampler=list(batches))]
    assert len(ours) == len(ref) == 2
    for a, b in zip(ours, ref):
        assert_same(a, b)


# ---------------------------------------------------------------- IterableDataset

@pytest.mark.parametrize("batch_size, drop_last", [(1, False), (4, False), (4, True),
                                                   (None, False)])
def test_iterable_dataset_batches_match_torch(batch_size, drop_last):
    from _torch_data_helpers import make_stream
    ours_ds = make_stream(vt, vdata.IterableDataset)(10)
    ref_ds = make_stream(torch, tdata.IterableDataset)(10)
    ours = vdata.DataLoader(ours_ds, batch_size=batch_size, drop_last=drop_last)
    ref = tdata.DataLoader(ref_ds, batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(ref)
    for _ in range(2):                                  # every pass restarts the stream
        a, b = list(ours), list(ref)
        assert len(a) == len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"batch {i}")


def test_iterable_dataset_refusals():
    class Stream(vdata.IterableDataset):
        def __iter__(self):
            return iter(range(4))
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        vdata.DataLoader(Stream(), shuffle=True)
    with pytest.raises(ValueError, match="expected unspecified sampler option"):
        vdata.DataLoader(Stream(), sampler=[0])
    with pytest.raises(NotImplementedError, match="num_workers>0"):
        vdata.DataLoader(Stream(), num_workers=2)
