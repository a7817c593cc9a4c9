"""``torch.utils.data``: ``Dataset``, ``TensorDataset``, ``DataLoader`` on
``dragon_core.data`` (its loader, worker processes and shuffling); batches
come out as vm.torch tensors (sharing the collated dragon tensors)."""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Mapping, Sequence

import numpy as np

import dragon_core as _dg
from dragon_core import data as _data

from ... import torch as _torch
from .._tensor import Tensor, _w

def _np_c(arr):
    """``arr`` C-contiguous (keeps 0-d arrays 0-d, unlike ascontiguousarray)."""
    arr = np.asarray(arr)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")



class Dataset:
    """Map-style dataset: ``__getitem__`` and ``__len__``."""

    def __getitem__(self, index):
        raise NotImplementedError

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    def __iter__(self):
        raise NotImplementedError


class TensorDataset(Dataset):
    """Examples are the i-th rows of the given tensors."""

    def __init__(self, *tensors):
        n = tensors[0].shape[0]
        if any(t.shape[0] != n for t in tensors):
            raise ValueError("Size mismatch between tensors")
        # host arrays sharing the tensors' memory: picklable for worker processes
        self._arrays = [t.detach().cpu().numpy() for t in tensors]

    @property
    def tensors(self):
        return tuple(_w(_dg.from_numpy(a)) for a in self._arrays)

    def __getitem__(self, index):
        return tuple(_w(_dg.from_numpy(a[index])) if isinstance(index, (slice, list,
                                                                       np.ndarray))
                     else _w(_dg.tensor(a[index])) for a in self._arrays)

    def __len__(self):
        return self._arrays[0].shape[0]


class Subset(Dataset):
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, i):
        return self.dataset[self.indices[i]]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    def __init__(self, datasets):
        self.datasets = list(datasets)
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]))

    def __len__(self):
        return int(self.cumulative_sizes[-1]) if self.cumulative_sizes else 0

    def __getitem__(self, i):
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"ConcatDataset index {i} is out of range for {n} examples")
        if i < 0:
            i += n
        k = int(np.searchsorted(self.cumulative_sizes, i, side="right"))
        start = 0 if k == 0 else int(self.cumulative_sizes[k - 1])
        return self.datasets[k][i - start]


def _rng_of(generator, who):
    """The host generator behind ``generator=`` (the global one for None)."""
    from .._creation import _host_rng, _np_rng
    return _host_rng(generator, who) or _np_rng()


def random_split(dataset, lengths, generator=None):
    rng = _rng_of(generator, "random_split")
    n = len(dataset)
    if all(isinstance(x, float) for x in lengths) and abs(sum(lengths) - 1) < 1e-6:
        counts = [int(np.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = rng.permutation(n)
    out, start = [], 0
    for ln in lengths:
        out.append(Subset(dataset, perm[start:start + ln].tolist()))
        start += ln
    return out


# ------------------------------------------------------------------ collation
#
# torch's rules, on vm.torch tensors: tensors are stacked, NumPy arrays and
# scalars become tensors of their dtype, Python floats float64, ints (and
# bools) int64 (bool), strings and bytes stay lists; mappings keep their
# type, named tuples too, other sequences are transposed into lists.

_NP_NOT_NUMERIC = re.compile(r"[SaUO]")
_COLLATE_TYPES = ("tensors, numpy arrays, numbers, dicts or lists")


def _np_to_tensor(arr) -> Tensor:
    """A tensor of a NumPy array or scalar, its dtype kept (copied if it is
    not native-endian and C-contiguous)."""
    arr = np.asarray(arr)
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and sys.byteorder == "big"):
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return _w(_dg.from_numpy(_np_c(arr)))


def _is_numpy(x) -> bool:
    return isinstance(x, (np.ndarray, np.generic)) and not isinstance(x, (np.str_, np.bytes_))


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _same_mapping(elem, values: dict):
    """A mapping of ``elem``'s type holding ``values`` (a plain dict if that
    type cannot be rebuilt this way)."""
    try:
        out = copy.copy(elem)
        out.update(values)
        return out
    except Exception:
        return values


def default_convert(data):
    """``torch.utils.data.default_convert``: NumPy arrays and scalars become
    tensors (their dtype kept), containers are walked, anything else is
    returned as is. The collation of ``DataLoader(batch_size=None)``."""
    if isinstance(data, Tensor):
        return data
    if _is_numpy(data):
        if isinstance(data, np.ndarray) and _NP_NOT_NUMERIC.search(data.dtype.str):
            return data
        return _np_to_tensor(data)
    if isinstance(data, Mapping):
        return _same_mapping(data, {k: default_convert(v) for k, v in data.items()})
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        return [default_convert(d) for d in data]
    return data


def default_collate(batch):
    """``torch.utils.data.default_collate``: a list of examples -> a batch.

    Tensors are stacked along a new first axis (equal shapes required);
    NumPy arrays and scalars become tensors of their dtype and are stacked;
    Python floats give a float64 tensor, ints int64, bools bool; strings
    and bytes stay a list. Mappings are collated key by key (their type
    kept), named tuples field by field, other sequences position by
    position, giving lists (as torch: a batch of tuples is a list of
    batches). Any other element raises ``TypeError``.
    """
    if not isinstance(batch, Sequence) or isinstance(batch, (str, bytes)):
        raise TypeError(f"default_collate expects a list of examples, got "
                        f"{type(batch).__name__}")
    if len(batch) == 0:
        raise ValueError("default_collate: the batch is empty")
    elem = batch[0]
    if isinstance(elem, Tensor):
        shapes = [tuple(b.shape) if isinstance(b, Tensor) else None for b in batch]
        for i, shape in enumerate(shapes):
            if shape != shapes[0]:
                raise RuntimeError(f"default_collate: stack expects each tensor to be equal "
                                   f"size, but got {list(shapes[0])} at entry 0 and "
                                   f"{list(shape) if shape is not None else type(batch[i])} "
                                   f"at entry {i}")
        return _torch.stack(list(batch), 0)
    if _is_numpy(elem):
        if isinstance(elem, np.ndarray) and _NP_NOT_NUMERIC.search(elem.dtype.str):
            raise TypeError(f"default_collate: batch must contain {_COLLATE_TYPES}; found "
                            f"a NumPy array of dtype {elem.dtype}")
        if isinstance(elem, np.ndarray):
            return default_collate([_np_to_tensor(b) for b in batch])
        return _np_to_tensor(np.array(batch))
    if isinstance(elem, float):
        return _torch.tensor(list(batch), dtype=_torch.float64)
    if isinstance(elem, int):
        return _torch.tensor(list(batch))
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, Mapping):
        return _same_mapping(elem, {k: default_collate([d[k] for d in batch]) for k in elem})
    if _is_namedtuple(elem):
        return type(elem)(*(default_collate(s) for s in zip(*batch)))
    if isinstance(elem, Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise RuntimeError("default_collate: each element in list of batch should be of "
                               "equal size")
        # Fields go on as tuples: a field of strings stays a tuple, as in torch.
        return [default_collate(s) for s in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain {_COLLATE_TYPES}; found "
                    f"{type(elem)}")


# ------------------------------------------------------------------ samplers
#
# torch's samplers with torch's arguments, checks and lengths. The random
# ones draw from their ``generator`` (a torch.Generator's own state), else
# from vm.torch's global generator (``torch.manual_seed``); the sequences are
# not torch's: the same seed gives the same sequence, each pass a new draw.

def _check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} should be a positive integer value, but got {name}={value}")


class Sampler:
    """Base of the samplers: ``__iter__`` yields dataset indices."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A new permutation every pass (``replacement=False``; ``num_samples``
    beyond the dataset's size chains permutations), or ``num_samples``
    uniform draws with replacement."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got "
                            f"replacement={replacement}")
        self.data_source, self.replacement = data_source, replacement
        self._num_samples, self.generator = num_samples, generator
        _check_positive_int("num_samples", self.num_samples)

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n, k = len(self.data_source), self.num_samples
        rng = _rng_of(self.generator, "RandomSampler")
        if self.replacement:
            yield from rng.integers(0, n, size=k).tolist()
            return
        for _ in range(k // n):
            yield from rng.permutation(n).tolist()
        yield from rng.permutation(n)[:k % n].tolist()

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a new random order every pass."""

    def __init__(self, indices, generator=None):
        self.indices, self.generator = indices, generator

    def __iter__(self):
        rng = _rng_of(self.generator, "SubsetRandomSampler")
        for i in rng.permutation(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probabilities proportional to
    ``weights`` (without replacement: distinct indices)."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        _check_positive_int("num_samples", num_samples)
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got "
                             f"replacement={replacement}")
        w = np.asarray(weights.detach().numpy() if isinstance(weights, Tensor) else weights,
                       dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have "
                             f"shape {tuple(w.shape)}")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
            raise RuntimeError("WeightedRandomSampler: weights must be finite, non-negative "
                               "and not all zero")
        if not replacement and num_samples > np.count_nonzero(w):
            raise RuntimeError(f"WeightedRandomSampler: cannot draw {num_samples} samples "
                               f"without replacement from {np.count_nonzero(w)} non-zero "
                               f"weights")
        self.weights = _w(_dg.from_numpy(w))
        self._p = w / w.sum()
        self.num_samples, self.replacement, self.generator = num_samples, replacement, generator

    def __iter__(self):
        rng = _rng_of(self.generator, "WeightedRandomSampler")
        yield from rng.choice(len(self._p), self.num_samples, replace=self.replacement,
                                    p=self._p).tolist()

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler`` (the last one shorter
    unless ``drop_last``)."""

    def __init__(self, sampler, batch_size, drop_last):
        _check_positive_int("batch_size", batch_size)
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got "
                             f"drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class DistributedSampler(Sampler):
    """This rank's share of the dataset, as torch's: every rank computes the
    same order from ``(seed, epoch)`` (a permutation if ``shuffle``), pads it
    by repeating its start to a multiple of ``num_replicas`` (or, with
    ``drop_last``, cuts the tail), and takes every ``num_replicas``-th index
    from ``rank``. Call :meth:`set_epoch` each epoch to reshuffle."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        if num_replicas is None or rank is None:
            from dragon_core import distributed as _dist
            if not _dist.is_initialized():
                raise RuntimeError("DistributedSampler: num_replicas/rank not given and the "
                                   "default process group is not initialized")
            num_replicas = _dist.get_world_size() if num_replicas is None else num_replicas
            rank = _dist.get_rank() if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = -(-(n - num_replicas) // num_replicas)
        else:
            self.num_samples = -(-n // num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:   # the same on every rank: from (seed, epoch) only
            indices = np.random.default_rng([self.seed & 0xFFFFFFFFFFFFFFFF,
                                             self.epoch]).permutation(n).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(indices)
            if pad > 0 and indices:
                indices += (indices * -(-pad // len(indices)))[:pad]
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        self.epoch = epoch


# ------------------------------------------------------------------ workers
#
# vm.torch tensors do not pickle: in a worker process each one in an
# example is packed as its NumPy array and unpacked in the main process.

class _Packed:
    __slots__ = ("array", "requires_grad")

    def __init__(self, array, requires_grad):
        self.array, self.requires_grad = array, requires_grad

    def __reduce__(self):
        return _Packed, (self.array, self.requires_grad)


def _walk(x, leaf):
    """``x`` with ``leaf`` applied to every non-container, containers rebuilt
    with their own types."""
    if isinstance(x, Mapping):
        return _same_mapping(x, {k: _walk(v, leaf) for k, v in x.items()})
    if _is_namedtuple(x):
        return type(x)(*(_walk(v, leaf) for v in x))
    if isinstance(x, tuple):
        items = [_walk(v, leaf) for v in x]
        return tuple(items) if type(x) is tuple else type(x)(items)
    if isinstance(x, list):
        items = [_walk(v, leaf) for v in x]
        if type(x) is list:
            return items
        out = copy.copy(x)
        out[:] = items
        return out
    return leaf(x)


def _pack_leaf(x):
    if isinstance(x, Tensor):
        return _Packed(x.detach().cpu()._t.numpy().copy(), bool(x.requires_grad))
    return x


def _unpack_leaf(x):
    if isinstance(x, _Packed):
        t = _np_to_tensor(x.array)
        if x.requires_grad:
            t.requires_grad_(True)
        return t
    return x


class WorkerInfo:
    """``torch.utils.data.get_worker_info()`` in a worker process.

    ``id`` (0 .. ``num_workers`` - 1), ``num_workers``, ``seed`` (the
    loader's seed plus ``id``) and ``dataset`` (this worker's copy).
    """

    def __init__(self, id, num_workers, seed, dataset):
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset

    def __repr__(self):
        return (f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, seed={self.seed}, "
                f"dataset={self.dataset!r})")


_WORKER_INFO = [None]


def get_worker_info():
    """This worker's :class:`WorkerInfo` in a DataLoader worker process, else None."""
    return _WORKER_INFO[0]


class _DatasetView:
    """The dataset as ``dragon_core.data.DataLoader`` reads it.

    In a worker process it sets up :func:`get_worker_info`, runs
    ``worker_init_fn``, seeds vm.torch's generators for each example from
    the one ``dragon_core.data`` derived from (seed, epoch, index) (so no
    two workers repeat each other's random numbers, and results do not
    depend on the number of workers), and packs tensors for pickling.
    """

    def __init__(self, ds, worker_init_fn, seed):
        self.ds, self.worker_init_fn, self.seed = ds, worker_init_fn, seed

    def __len__(self):
        return len(self.ds)

    def setup(self, worker_id):
        info = _data.get_worker_info()
        _WORKER_INFO[0] = WorkerInfo(worker_id, info.num_workers if info else 1,
                                     self.seed + worker_id, self.ds)
        if self.worker_init_fn is not None:
            self.worker_init_fn(worker_id)

    def __getitem__(self, i):
        info = _data.get_worker_info()
        if info is None:                  # num_workers=0: this process, as it is
            return self.ds[i]
        if info.item_seed is not None:
            _torch.manual_seed(info.item_seed)
        return _walk(self.ds[i], _pack_leaf)


def _start_method(context):
    """Under ``python -m dragon_core.vm.torch`` workers are forked: a
    forkserver/spawn worker re-imports the script's main module, where
    ``import torch`` would not be mapped to vm.torch."""
    if context is not None:
        return context if isinstance(context, str) else context.get_start_method()
    if sys.modules.get("torch") is sys.modules.get("dragon_core.vm.torch"):
        return "fork"
    return None


class DataLoader:
    """Batches of a map-style dataset, through ``dragon_core.data.DataLoader``.

    ``batch_size``, ``shuffle``, ``drop_last``, ``collate_fn`` (default
    :func:`default_collate`; with ``batch_size=None``, :func:`default_convert`
    applied to each example), ``num_workers``, ``worker_init_fn``,
    ``generator`` (its seed seeds the shuffle), ``timeout`` and
    ``multiprocessing_context`` act as in torch. The shuffle order is
    dragon's: seeded by (seed, epoch), a new permutation every epoch, not
    torch's sequence. ``sampler`` and ``batch_sampler`` take torch's samplers
    (or any iterables of indices / of lists of indices). An IterableDataset
    is read in this process (``num_workers > 0`` raises rather than risk
    every worker repeating the stream).
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device=""):
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            for name, value in (("shuffle", shuffle), ("sampler", sampler),
                                ("batch_sampler", batch_sampler)):
                if value:
                    raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                     f"{name} option, but got {name}={value!r}")
            if int(num_workers) > 0:
                # Every worker would iterate its own copy of the stream: without
                # sharding by get_worker_info() each example would come
                # num_workers times. Refused rather than risk it.
                raise NotImplementedError(
                    "DataLoader(IterableDataset, num_workers>0) is not supported: Dragon's "
                    "workers read map-style datasets by index; use num_workers=0, or a "
                    "map-style Dataset (__len__/__getitem__) to read in workers")
        if batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if int(num_workers) < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 "
                             "to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with "
                                 "batch_size, shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.num_workers, self.shuffle = int(num_workers), bool(shuffle)
        self.worker_init_fn, self.generator, self.timeout = worker_init_fn, generator, timeout
        if collate_fn is None:
            collate_fn = default_collate if batch_size is not None or \
                batch_sampler is not None else default_convert
        self.collate_fn = collate_fn
        # The seed of the shuffle and of the workers' generators, drawn from
        # ``generator`` (a torch.Generator's own state) or the global one.
        self._seed = int(_rng_of(generator, "DataLoader").integers(0, 2**31 - 1))
        workers = self.num_workers > 0

        def collate(items, fn=collate_fn):
            return fn([_walk(i, _unpack_leaf) for i in items] if workers else items)
        # A sampler's indices reach dragon's loader through _EpochIndices,
        # filled by __iter__ with this pass's indices.
        self._indices = _EpochIndices() if sampler is not None or \
            batch_sampler is not None else None
        shard = {} if self._indices is not None else {"rank": 0, "world_size": 1}
        if self._iterable:
            self._loader = None
            return
        self._loader = _data.DataLoader(
            _DatasetView(dataset, worker_init_fn, self._seed),
            batch_size=None if batch_sampler is not None else batch_size,
            shuffle=bool(shuffle), drop_last=drop_last, num_workers=self.num_workers,
            collate_fn=collate, seed=self._seed, **shard,
            timeout=float(timeout) if timeout else 300.0,
            start_method=_start_method(multiprocessing_context), sampler=self._indices)

    def _iterate_stream(self):
        """An IterableDataset, in this process: torch's batching of its stream."""
        if self.batch_size is None:
            for item in self.dataset:
                yield self.collate_fn(item)
            return
        batch = []
        for item in self.dataset:
            batch.append(item)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __iter__(self):
        if self._iterable:
            yield from self._iterate_stream()
            return
        unpack = (lambda x: _walk(x, _unpack_leaf)) if self.num_workers else (lambda x: x)
        if self.batch_sampler is not None:
            batches = [list(b) for b in self.batch_sampler]
            self._indices.indices = [i for b in batches for i in b]
            examples = iter(self._loader)
            for b in batches:
                yield self.collate_fn([unpack(next(examples)) for _ in b])
            return
        if self.sampler is not None:
            self._indices.indices = list(self.sampler)
        if self.batch_size is not None:
            yield from self._loader
            return
        for item in self._loader:
            yield self.collate_fn(unpack(item))

    def __len__(self):
        if self._iterable:
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        if self.sampler is not None:
            n = len(self.sampler)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self._loader)


class _EpochIndices:
    """The indices of the current pass, as dragon's loader reads a sampler."""

    def __init__(self):
        self.indices = []

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.utils.data.{name} is not supported; supported: Dataset, "
                              "TensorDataset, DataLoader, Subset, ConcatDataset, random_split, "
                              "default_collate, default_convert, get_worker_info, Sampler, "
                              "SequentialSampler, RandomSampler, SubsetRandomSampler, "
                              "WeightedRandomSampler, BatchSampler, DistributedSampler")
