"""In-memory datasets and the DataLoader."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from .._tensor import Tensor
from ._collate import default_collate
from ._batching import _WorkerBatches
from ._sampling import (check_shard, epoch_order, normalize_shuffle, num_batches,
                        resolve_shard, shard_size)

if TYPE_CHECKING:
    from ._workers import WorkerPool


class Dataset:
    """A map-style dataset: subclasses define ``__len__`` and ``__getitem__``.

    With ``num_workers > 0`` the dataset is pickled to each worker process,
    so define subclasses at module level and keep them cheap to pickle
    (open files lazily, in ``__getitem__`` or an optional
    ``setup(worker_id)`` method that each worker calls once).
    """

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define __len__")

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")


class TensorDataset(Dataset):
    """Examples ``(a[i], b[i], ...)`` from arrays sharing their first dimension.

    Parameters
    ----------
    *arrays : numpy.ndarray or Tensor
        Host tensors are viewed as NumPy arrays (no copy).
    """

    def __init__(self, *arrays: np.ndarray | Tensor):
        if not arrays:
            raise ValueError("TensorDataset needs at least one array")
        self.arrays = tuple(a.numpy() if isinstance(a, Tensor) else np.asarray(a)
                            for a in arrays)
        sizes = [a.shape[0] if a.ndim else None for a in self.arrays]
        if None in sizes or len(set(sizes)) != 1:
            raise ValueError(f"TensorDataset arrays must share their first dimension, got "
                             f"shapes {[a.shape for a in self.arrays]}")

    def __len__(self) -> int:
        return self.arrays[0].shape[0]

    def __getitem__(self, index: int) -> tuple:
        return tuple(a[index] for a in self.arrays)


def _pin(batch: Any, device: str | None) -> Any:
    """``batch`` with every host tensor copied into pinned memory."""
    if isinstance(batch, Tensor):
        return batch.pin_memory(device) if batch.device.type == "cpu" else batch
    if isinstance(batch, dict):
        return {k: _pin(v, device) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_pin(v, device) for v in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(_pin(v, device) for v in batch)
    return batch


class DataLoader(_WorkerBatches):
    """Batches of tensors from a :class:`Dataset`.

    Parameters
    ----------
    dataset : Dataset
        Anything with ``__len__`` and ``__getitem__``.
    batch_size : int or None
        Examples per batch (``None``: single examples, uncollated).
    shuffle : bool or {"none", "example", "chunk"}
        Reshuffled every epoch from ``(seed, epoch)``.
    drop_last : bool
        Drop the last, incomplete batch.
    num_workers : int
        Worker processes calling ``dataset[i]``; 0 loads in this process.
    collate_fn : callable, optional
        ``list of examples -> batch``; default :func:`default_collate`
        (tuples and dicts preserved, arrays stacked into tensors).
    seed : int
        Seed of the shuffle (and of :class:`Transformer` generators).
    rank, world_size : int, optional
        Read only shard ``rank`` of ``world_size`` (distributed training).
        Default None: this process's place in the distributed job (the
        initialised process group, else the launcher's environment; ``0, 1``
        outside one; see :func:`resolve_shard`).
    transform : callable, optional
        Applied to each example in the workers (a :class:`Transformer`
        receives a seeded generator).
    prefetch : int, optional
        Examples in flight ahead of the consumer (default
        ``max(2 * batch_size, 16)``).
    start_method : str, optional
        Multiprocessing start method (default: forkserver where available).
    timeout : float or None
        Seconds without any example before :class:`DataTimeoutError`.
    pin_memory : bool or str
        Copy every host tensor of each batch into pinned memory (of the
        named device's type; ``True``: the first device offering it), so that
        ``batch.to(device, non_blocking=True)`` does not wait for the host.
    equal_shards : bool
        Give every rank exactly ``len(dataset) // world_size`` examples
        (dropping up to ``world_size - 1`` per epoch, different ones each
        epoch when shuffled), so every rank runs the same number of batches
        and no collective waits for a rank that ran out.
    sampler : iterable of int, optional
        The dataset indices to read, in order, iterated anew every epoch
        (repeats allowed); replaces ``shuffle`` and the rank sharding, which
        are then left at their defaults. ``len(sampler)`` gives ``len()``.

    Notes
    -----
    Batches come in the same order whatever ``num_workers``. Workers are
    started by the first iteration and kept until :meth:`close` (also
    called by ``with``, garbage collection and interpreter exit).
    """

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool | str = False,
                 drop_last: bool = False, num_workers: int = 0,
                 collate_fn: Callable | None = None, seed: int = 0, *, rank: int | None = None,
                 world_size: int | None = None, transform: Callable | None = None,
                 prefetch: int | None = None, start_method: str | None = None,
                 timeout: float | None = 300.0, pin_memory: bool | str = False,
                 sampler: Any = None, equal_shards: bool = False):
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise TypeError(f"dataset must define __len__ and __getitem__, got "
                            f"{type(dataset).__name__}")
        if batch_size is not None and int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
        if int(num_workers) < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if sampler is not None:
            if normalize_shuffle(shuffle) != "none" or rank is not None or \
                    world_size is not None:
                raise ValueError("DataLoader: sampler= gives the indices itself; leave "
                                 "shuffle, rank and world_size at their defaults")
            rank, world_size = 0, 1
        rank, world_size = resolve_shard(rank, world_size)
        check_shard(rank, world_size)
        self.dataset = dataset
        self.batch_size = None if batch_size is None else int(batch_size)
        self.shuffle = normalize_shuffle(shuffle)
        self.drop_last = bool(drop_last)
        self.num_workers = int(num_workers)
        self.collate_fn = collate_fn or default_collate
        self.seed = int(seed)
        self.rank, self.world_size = int(rank), int(world_size)
        self.transform = transform
        self.prefetch = prefetch or max(2 * (self.batch_size or 1), 16)
        self.start_method = start_method
        self.timeout = timeout
        self.pin_memory = pin_memory
        self.sampler = sampler
        self.equal_shards = bool(equal_shards)
        self._epoch = 0
        self._pool: WorkerPool | None = None

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` (later ones count up from it)."""
        self._epoch = int(epoch)

    def __len__(self) -> int:
        """Batches per epoch."""
        if self.sampler is not None:
            n = len(self.sampler)
        else:
            n = shard_size(len(self.dataset), self.rank, self.world_size, self.equal_shards)
        return n if self.batch_size is None else num_batches(n, self.batch_size,
                                                            self.drop_last)

    def __iter__(self) -> Iterator[Any]:
        epoch, indices = self._next_epoch(self._order)
        batches = self._batched(self._read(
            self.dataset, self.transform, epoch, indices, num_readers=self.num_workers,
            num_transformers=0, queue_size=1))
        if not self.pin_memory:
            return batches
        device = None if self.pin_memory is True else str(self.pin_memory)
        return (_pin(b, device) for b in batches)

    def _order(self, epoch: int) -> np.ndarray:
        if self.sampler is None:
            return epoch_order(len(self.dataset), shuffle=self.shuffle, seed=self.seed,
                               epoch=epoch, rank=self.rank, world_size=self.world_size,
                               equal_shards=self.equal_shards)
        n = len(self.dataset)
        indices = np.fromiter((int(i) for i in self.sampler), dtype=np.int64)
        bad = indices[(indices < -n) | (indices >= n)]
        if bad.size:
            raise IndexError(f"DataLoader: the sampler gave index {int(bad[0])}, out of "
                             f"range for a dataset of {n} examples")
        return indices

    def close(self) -> None:
        """Stop the worker processes (idempotent; a later iteration restarts them)."""
        if self._pool is not None:
            self._pool.close()
