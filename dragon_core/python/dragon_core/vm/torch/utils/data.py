"""``torch.utils.data``: ``Dataset``, ``TensorDataset``, ``DataLoader`` on
``dragon_core.data`` (its loader, worker processes and shuffling); batches
come out as vm.torch tensors (sharing the collated dragon tensors)."""

from __future__ import annotations

import numpy as np

import dragon_core as _dg
from dragon_core import data as _data

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


def _to_np(x):
    if isinstance(x, Tensor):
        return x._t.numpy()
    if isinstance(x, (tuple, list)):
        return type(x)(_to_np(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_np(v) for k, v in x.items()}
    return x


def _to_torch(x):
    if isinstance(x, _dg.Tensor):
        return _w(x)
    if isinstance(x, np.ndarray):
        return _w(_dg.from_numpy(_np_c(x)))
    if isinstance(x, tuple):
        return tuple(_to_torch(v) for v in x)
    if isinstance(x, list):
        return [_to_torch(v) for v in x]
    if isinstance(x, dict):
        return {k: _to_torch(v) for k, v in x.items()}
    return x


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


class _NumpyView:
    """The dataset as dragon's loader sees it: examples as NumPy arrays
    (collated into dragon tensors by ``dragon_core.data.default_collate``)."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        ds = self.ds
        if isinstance(ds, TensorDataset):
            return tuple(a[i] for a in ds._arrays)
        return _to_np(ds[i])


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
        if i < 0:
            i += len(self)
        k = int(np.searchsorted(self.cumulative_sizes, i, side="right"))
        start = 0 if k == 0 else int(self.cumulative_sizes[k - 1])
        return self.datasets[k][i - start]


def random_split(dataset, lengths, generator=None):
    from .._creation import _np_rng
    n = len(dataset)
    if all(isinstance(x, float) for x in lengths) and abs(sum(lengths) - 1) < 1e-6:
        counts = [int(np.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = _np_rng().permutation(n)
    out, start = [], 0
    for ln in lengths:
        out.append(Subset(dataset, perm[start:start + ln].tolist()))
        start += ln
    return out


def default_collate(batch):
    return _to_torch(_data.default_collate([_to_np(b) for b in batch]))


def _start_method(context):
    """Under ``python -m dragon_core.vm.torch`` workers are forked: a
    forkserver/spawn worker re-imports the script's main module, where
    ``import torch`` would not be mapped to vm.torch."""
    if context is not None:
        return context if isinstance(context, str) else context.get_start_method()
    import sys
    if sys.modules.get("torch") is sys.modules.get("dragon_core.vm.torch"):
        return "fork"
    return None


class DataLoader:
    """Batches of a dataset, through ``dragon_core.data.DataLoader``.

    ``shuffle=True`` reshuffles every epoch (the seed advances per epoch
    from the vm.torch generator); ``num_workers`` uses dragon's worker
    processes. ``sampler``/``batch_sampler`` are not supported.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device=""):
        if sampler is not None or batch_sampler is not None:
            raise NotImplementedError("DataLoader(sampler=/batch_sampler=) is not supported; "
                                      "use shuffle=True, or index the dataset yourself")
        if isinstance(dataset, IterableDataset):
            raise NotImplementedError("IterableDataset is not supported by DataLoader here; "
                                      "iterate the dataset directly")
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.num_workers, self.shuffle = num_workers, bool(shuffle)
        self.collate_fn = collate_fn
        self._epoch_seed = None
        from .._creation import _np_rng
        self._seed = int(_np_rng().integers(0, 2**31 - 1))
        self._loader = _data.DataLoader(
            _NumpyView(dataset), batch_size=batch_size, shuffle=bool(shuffle),
            drop_last=drop_last, num_workers=num_workers,
            collate_fn=None if collate_fn is None else
            (lambda items, fn=collate_fn: _to_np(fn([_to_torch(i) for i in items]))),
            seed=self._seed, start_method=_start_method(multiprocessing_context))

    def __iter__(self):
        for batch in self._loader:
            yield _to_torch(batch)

    def __len__(self):
        return len(self._loader)


def get_worker_info():
    return None


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.utils.data.{name} is not supported; supported: Dataset, "
                              "TensorDataset, DataLoader, Subset, ConcatDataset, random_split")
