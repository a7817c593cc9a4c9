"""Which records a rank reads in an epoch, and in what order.

One pure function, :func:`epoch_order`, so the order is reproducible,
testable without processes, and identical whichever worker reads it.

1. A *global order* of all ``n`` records is built from ``(seed, epoch)``
   only, so every rank computes the same one:

   - ``"none"``: ``0, 1, ..., n - 1``;
   - ``"example"``: a uniform random permutation;
   - ``"chunk"``: the records are cut into contiguous chunks of
     ``chunk_size``; the chunks are put in random order.

2. The global order is cut into ``world_size`` contiguous parts whose sizes
   differ by at most one; rank ``r`` takes part ``r``. The parts are
   disjoint and their union is every record. (``equal_shards=True`` drops
   the few extra records so that every rank gets ``n // world_size``.)

3. ``"chunk"`` only: the rank's part is cut into windows of
   ``shuffle_buffer`` records and each window is permuted (seeded by seed,
   epoch and rank), so reads stay within a few chunks at a time.
"""

from __future__ import annotations

import numpy as np

SHUFFLE_MODES = ("none", "example", "chunk")


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([int(k) & 0xFFFFFFFFFFFFFFFF for k in key])


def epoch_order(num_records: int, *, shuffle: str = "none", seed: int = 0, epoch: int = 0,
                rank: int = 0, world_size: int = 1, chunk_size: int = 1024,
                shuffle_buffer: int | None = None, equal_shards: bool = False) -> np.ndarray:
    """The record indices rank ``rank`` visits in ``epoch``, in order.

    Parameters
    ----------
    num_records : int
        The number of records in the dataset.
    shuffle : {"none", "example", "chunk"}
        The shuffle mode (see the module docstring). ``True``/``False`` are
        accepted for ``"example"``/``"none"``.
    seed, epoch : int
        Together they determine the permutation; the same on every rank.
    rank, world_size : int
        This process's shard.
    chunk_size : int
        Records per chunk in ``"chunk"`` mode.
    shuffle_buffer : int, optional
        Window of the in-shard shuffle in ``"chunk"`` mode (default
        ``4 * chunk_size``; 1 disables it).
    equal_shards : bool
        Give every rank exactly ``num_records // world_size`` records.

    Returns
    -------
    numpy.ndarray
        int64 indices.
    """
    mode = normalize_shuffle(shuffle)
    n = int(num_records)
    if n < 0:
        raise ValueError(f"num_records must be >= 0, got {num_records}")
    check_shard(rank, world_size)
    if mode == "none":
        order = np.arange(n, dtype=np.int64)
    elif mode == "example":
        order = _rng(seed, epoch, 0x5EED).permutation(n).astype(np.int64)
    else:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        num_chunks = -(-n // chunk_size)
        chunks = _rng(seed, epoch, 0xC4C4).permutation(num_chunks)
        starts = chunks * chunk_size
        lengths = np.minimum(starts + chunk_size, n) - starts
        # Concatenate the ranges [start, start + length) in chunk order.
        order = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
        order = (order + np.arange(n)).astype(np.int64)
    if equal_shards:
        per = n // world_size
        part = order[rank * per:(rank + 1) * per]
    else:
        part = order[rank * n // world_size:(rank + 1) * n // world_size]
    if mode == "chunk":
        window = 4 * chunk_size if shuffle_buffer is None else int(shuffle_buffer)
        if window < 1:
            raise ValueError(f"shuffle_buffer must be >= 1, got {shuffle_buffer}")
        if window > 1:
            part = part.copy()
            rng = _rng(seed, epoch, rank, 0xB0FF)
            for start in range(0, len(part), window):
                rng.shuffle(part[start:start + window])
    return np.ascontiguousarray(part)


def normalize_shuffle(shuffle: str | bool | None) -> str:
    """Map ``True``/``False``/``None`` and the mode names to a mode name."""
    if shuffle is True:
        return "example"
    if shuffle is False or shuffle is None:
        return "none"
    if shuffle not in SHUFFLE_MODES:
        raise ValueError(f"shuffle must be one of {SHUFFLE_MODES} (or a bool), got {shuffle!r}")
    return shuffle


_RANK_ENV = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
             ("RANK", "WORLD_SIZE"))


def resolve_shard(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """The ``(rank, world_size)`` a loader reads when it is given None: so a
    distributed job shards its data without being told.

    Taken from, in order: ``dragon_core.distributed``'s default process group
    when it is initialised; the launcher's environment (Open MPI's
    ``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE``, PMI's
    ``PMI_RANK``/``PMI_SIZE``, or ``RANK``/``WORLD_SIZE``); else ``(0, 1)``.
    Giving only one of the two raises ``ValueError``.
    """
    import os
    if rank is not None and world_size is not None:
        return int(rank), int(world_size)
    if rank is not None or world_size is not None:
        raise ValueError(f"give both rank and world_size or neither (None: from the "
                         f"distributed job), got rank={rank}, world_size={world_size}")
    try:
        from .. import distributed as dist
        if getattr(dist, "is_initialized", lambda: False)():
            return int(dist.get_rank()), int(dist.get_world_size())
    except ImportError:
        pass
    for rank_var, size_var in _RANK_ENV:
        if rank_var in os.environ and size_var in os.environ:
            try:
                return int(os.environ[rank_var]), int(os.environ[size_var])
            except ValueError:
                raise ValueError(f"data sharding: {rank_var}={os.environ[rank_var]!r} / "
                                 f"{size_var}={os.environ[size_var]!r} are not integers") from None
    return 0, 1


def check_shard(rank: int, world_size: int) -> None:
    """Raise ``ValueError`` unless ``0 <= rank < world_size``."""
    if int(world_size) < 1 or not 0 <= int(rank) < int(world_size):
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, "
                         f"world_size={world_size}")


def num_batches(num_examples: int, batch_size: int, drop_last: bool) -> int:
    """The number of batches ``num_examples`` examples make."""
    if drop_last:
        return num_examples // batch_size
    return -(-num_examples // batch_size)


def shard_size(num_records: int, rank: int, world_size: int, equal_shards: bool) -> int:
    """How many records rank ``rank`` gets (see :func:`epoch_order`)."""
    if equal_shards:
        return num_records // world_size
    return (rank + 1) * num_records // world_size - rank * num_records // world_size
