"""What DataLoader and RecordPipeline share: one epoch's indices, the worker
pool that reads them (started by the first iteration, kept until close), and
batching."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from ._signals import hold_sigint

if TYPE_CHECKING:
    from ._workers import WorkerPool


class _WorkerBatches:
    """Base of the iterables that batch examples read by a :class:`WorkerPool`.

    Subclasses set ``batch_size``, ``drop_last``, ``collate_fn``, ``seed``,
    ``prefetch``, ``start_method``, ``timeout``, ``_epoch`` and ``_pool``,
    and define ``close``.
    """

    _pool: WorkerPool | None

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the running workers (empty before the first iteration)."""
        return [] if self._pool is None else self._pool.pids

    def _next_epoch(self, order: Callable[[int], np.ndarray]) -> tuple[int, np.ndarray]:
        """The epoch this iteration runs (the count moves on) and its indices."""
        epoch = self._epoch
        self._epoch += 1
        indices = order(epoch)
        if self.batch_size is not None and self.drop_last:   # never read what is dropped
            indices = indices[:len(indices) // self.batch_size * self.batch_size]
        return epoch, indices

    def _read(self, data: Any, transform: Callable | None, epoch: int, indices: np.ndarray, *,
              num_readers: int, num_transformers: int,
              queue_size: int) -> Iterator[tuple[int, Any]]:
        """``(index, example)`` pairs of ``indices``, in order: in this process
        without readers, else from the worker pool (started if needed)."""
        name = type(self).__name__
        if num_readers == 0:
            from ._workers import in_process
            return in_process(data, transform, self.seed, epoch, indices, name)
        if self._pool is None or self._pool.closed:
            # A Ctrl-C waits until the workers have started (or failed to):
            # never a half-started worker or a half-imported multiprocessing.
            with hold_sigint():
                # _workers (and multiprocessing) load on first use, not with
                # dragon_core.
                from ._workers import WorkerPool
                self._pool = WorkerPool(
                    data, transform, num_readers=num_readers,
                    num_transformers=num_transformers, seed=self.seed,
                    queue_size=queue_size, prefetch=self.prefetch,
                    start_method=self.start_method, timeout=self.timeout, name=name)
        return self._pool.run(epoch, indices)

    def _batched(self, examples: Iterator[tuple[int, Any]]) -> Iterator[Any]:
        return self._alive(_batches(examples, self.batch_size, self.drop_last,
                                    self.collate_fn))

    def _alive(self, batches: Iterator[Any]) -> Iterator[Any]:
        """``batches``, holding a reference to ``self`` while they are read:
        ``for b in DataLoader(...)`` must not let the loader (and with it the
        worker pool, closed by ``__del__``) be collected mid-iteration."""
        yield from batches

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.close()


def _batches(examples: Iterator[tuple[int, Any]], batch_size: int | None, drop_last: bool,
             collate_fn: Callable) -> Iterator[Any]:
    if batch_size is None:
        for _, example in examples:
            yield example
        return
    batch: list = []
    for _, example in examples:
        batch.append(example)
        if len(batch) == batch_size:
            yield collate_fn(batch)
            batch = []
    if batch and not drop_last:
        yield collate_fn(batch)
