"""The record pipeline: reader processes -> transformer processes -> batches."""

from __future__ import annotations

import bisect
import glob
import os
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

from ._batching import _WorkerBatches
from ._collate import default_collate
from ._example import decode_example
from ._records import RecordReader
from ._sampling import (check_shard, epoch_order, normalize_shuffle, num_batches,
                        resolve_shard, shard_size)

if TYPE_CHECKING:
    from ._workers import WorkerPool


class Transformer:
    """Turns one record into one example: :meth:`decode`, then :meth:`augment`.

    Subclass it (and keep the subclass importable, at module level: it is
    pickled to the transformer processes) and override either step. Any
    picklable callable ``fn(record) -> example`` may be used instead of a
    subclass; only a ``Transformer`` receives a random generator.

    The generator passed to :meth:`augment` is seeded by the pipeline seed,
    the epoch and the record index, so augmentation is reproducible,
    changes every epoch, and does not depend on the number of workers.

    Examples
    --------
    >>> class Flip(Transformer):
    ...     def augment(self, example, rng):
    ...         if rng.random() < 0.5:
    ...             example["image"] = example["image"][:, ::-1].copy()
    ...         return example
    """

    _dg_wants_rng = True

    def setup(self, worker_id: int) -> None:
        """Called once in each worker process before any record."""

    def decode(self, record: Any) -> Any:
        """Bytes -> example; the default decodes :func:`encode_example` records."""
        if isinstance(record, (bytes, bytearray, memoryview)):
            return decode_example(record)
        return record

    def augment(self, example: Any, rng: np.random.Generator) -> Any:
        """Random augmentation of a decoded example (default: none)."""
        return example

    def __call__(self, record: Any, rng: np.random.Generator | None = None) -> Any:
        if rng is None:
            rng = np.random.default_rng()
        return self.augment(self.decode(record), rng)


class RecordSource:
    """Several record files seen as one indexable sequence of payloads.

    Pickles as its file list; each process opens its own readers lazily.

    Parameters
    ----------
    paths : str, os.PathLike or sequence of them
        Files, or one glob pattern (sorted).
    """

    def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike]):
        if isinstance(paths, (str, os.PathLike)):
            pattern = os.fspath(paths)
            if glob.has_magic(pattern):
                files = sorted(glob.glob(pattern))
                if not files:
                    raise FileNotFoundError(f"no record file matches {pattern!r}")
            else:
                files = [pattern]
        else:
            files = [os.fspath(p) for p in paths]
        if not files:
            raise ValueError("RecordSource needs at least one file")
        self.paths = files
        counts = []
        for path in files:
            with RecordReader(path) as reader:
                counts.append(len(reader))
        self._starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64).tolist()
        self._readers: dict[int, RecordReader] = {}

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, index: int) -> bytes:
        i = int(index)
        if not 0 <= i < len(self):
            raise IndexError(f"record {index} out of range for {len(self)} records")
        f = bisect.bisect_right(self._starts, i) - 1
        reader = self._readers.get(f)
        if reader is None:
            reader = self._readers[f] = RecordReader(self.paths[f])
        return reader.read(i - self._starts[f])

    def close(self) -> None:
        """Close the open files."""
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def __getstate__(self) -> dict:
        return {"paths": self.paths, "_starts": self._starts}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._readers = {}

    def __repr__(self) -> str:
        return f"RecordSource({len(self.paths)} files, {len(self)} records)"


class RecordPipeline(_WorkerBatches):
    """Batches from record files, read and transformed in worker processes.

    Reader processes read the records this rank owns in this epoch (see
    :func:`epoch_order`), transformer processes decode and augment them,
    and the main process puts the examples back in epoch order and builds
    batches. The order of the examples depends only on the seed, the epoch
    and the shard, never on the number of workers.

    Parameters
    ----------
    source : str, os.PathLike, sequence of paths, or indexable
        Record files (or a glob pattern), or any picklable object with
        ``__len__`` and ``__getitem__`` (e.g. :class:`RecordSource`).
    batch_size : int or None
        Examples per batch; ``None`` yields single examples, uncollated.
    transformer : callable, optional
        A :class:`Transformer` or any picklable ``fn(record)``; default
        ``Transformer()`` (decodes :func:`encode_example` records). Pass
        ``bytes`` to get the raw payloads.
    collate_fn : callable, optional
        ``list of examples -> batch``; default :func:`default_collate`.
    shuffle : {"none", "example", "chunk"} or bool
        See :func:`epoch_order`.
    chunk_size, shuffle_buffer : int
        For ``shuffle="chunk"``.
    seed : int
        Must be the same on every rank.
    rank, world_size : int, optional
        The shard read by this process.
        Default None: this process's place in the distributed job (the
        initialised process group, else the launcher's environment; ``0, 1``
        outside one; see :func:`resolve_shard`).
    drop_last : bool
        Drop this rank's last, incomplete batch.
    equal_shards : bool
        Give every rank the same number of records (drops up to
        ``world_size - 1`` records per epoch).
    num_readers : int
        Reader processes; 0 reads and transforms in the main process.
    num_transformers : int
        Transformer processes; 0 transforms in the readers.
    queue_size : int
        Capacity of the reader -> transformer queue.
    prefetch : int, optional
        Examples in flight ahead of the consumer (default
        ``max(2 * batch_size, 16)``).
    start_method : str, optional
        ``"forkserver"`` (default where available), ``"spawn"`` or ``"fork"``.
    timeout : float or None
        Seconds without any example before :class:`DataTimeoutError`.

    Notes
    -----
    Workers start at the first iteration and live until :meth:`close`
    (also called by ``with``, garbage collection and interpreter exit).
    Iterating again starts the next epoch; :meth:`set_epoch` chooses it.
    """

    def __init__(self, source: Any, batch_size: int | None = 32, *,
                 transformer: Callable | None = None, collate_fn: Callable | None = None,
                 shuffle: str | bool = "none", chunk_size: int = 1024,
                 shuffle_buffer: int | None = None, seed: int = 0, rank: int | None = None,
                 world_size: int | None = None, drop_last: bool = False, equal_shards: bool = False,
                 num_readers: int = 1, num_transformers: int = 2, queue_size: int = 64,
                 prefetch: int | None = None, start_method: str | None = None,
                 timeout: float | None = 300.0):
        if isinstance(source, (str, os.PathLike)) or (
                isinstance(source, (list, tuple)) and source
                and all(isinstance(p, (str, os.PathLike)) for p in source)):
            source = RecordSource(source)
        if not hasattr(source, "__len__") or not hasattr(source, "__getitem__"):
            raise TypeError("source must be record file path(s) or an indexable object, got "
                            f"{type(source).__name__}")
        if batch_size is not None and int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
        if num_readers < 0 or num_transformers < 0:
            raise ValueError("num_readers and num_transformers must be >= 0")
        rank, world_size = resolve_shard(rank, world_size)
        check_shard(rank, world_size)
        self.source = source
        self.batch_size = None if batch_size is None else int(batch_size)
        self.transformer = Transformer() if transformer is None else transformer
        self.collate_fn = collate_fn or default_collate
        self.shuffle = normalize_shuffle(shuffle)
        self.chunk_size = int(chunk_size)
        self.shuffle_buffer = shuffle_buffer
        self.seed = int(seed)
        self.rank, self.world_size = int(rank), int(world_size)
        self.drop_last = bool(drop_last)
        self.equal_shards = bool(equal_shards)
        self.num_readers, self.num_transformers = int(num_readers), int(num_transformers)
        self.queue_size = int(queue_size)
        self.prefetch = prefetch or max(2 * (self.batch_size or 1), 16)
        self.start_method = start_method
        self.timeout = timeout
        self._epoch = 0
        self._pool: WorkerPool | None = None
        self._closed = False

    # -- epochs and sizes

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` (later ones count up from it)."""
        self._epoch = int(epoch)

    @property
    def epoch(self) -> int:
        """The epoch the next iteration will run."""
        return self._epoch

    def num_examples(self) -> int:
        """Examples this rank yields per epoch (after ``drop_last``)."""
        n = shard_size(len(self.source), self.rank, self.world_size, self.equal_shards)
        if self.batch_size is None or not self.drop_last:
            return n
        return n // self.batch_size * self.batch_size

    def __len__(self) -> int:
        """Batches (or examples, when ``batch_size`` is None) per epoch on this rank."""
        n = shard_size(len(self.source), self.rank, self.world_size, self.equal_shards)
        return n if self.batch_size is None else num_batches(n, self.batch_size,
                                                            self.drop_last)

    def order(self, epoch: int) -> np.ndarray:
        """The record indices this rank reads in ``epoch``, in order."""
        return epoch_order(len(self.source), shuffle=self.shuffle, seed=self.seed,
                           epoch=epoch, rank=self.rank, world_size=self.world_size,
                           chunk_size=self.chunk_size, shuffle_buffer=self.shuffle_buffer,
                           equal_shards=self.equal_shards)

    # -- iteration

    def __iter__(self) -> Iterator[Any]:
        if self._closed:
            raise ValueError(f"{type(self).__name__} is closed")
        epoch, indices = self._next_epoch(self.order)
        return self._batched(self._read(
            self.source, self.transformer, epoch, indices, num_readers=self.num_readers,
            num_transformers=self.num_transformers, queue_size=self.queue_size))

    def close(self) -> None:
        """Stop the worker processes (idempotent)."""
        self._closed = True
        if self._pool is not None:
            self._pool.close()
