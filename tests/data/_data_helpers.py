"""Picklable helpers shared by the data tests (worker processes import them)."""

from __future__ import annotations

import os
import signal
import time

import numpy as np

from dragon_core.data import Dataset, RecordWriter, Transformer


def write_records(path, n: int) -> str:
    """A file of ``n`` encoded examples ``{"x": float32[3] filled with i, "y": i}``."""
    with RecordWriter(path) as w:
        for i in range(n):
            w.write_example({"x": np.full((3,), i, np.float32), "y": i})
    return str(path)


def record_id(payload: bytes) -> int:
    """A transformer returning only the record's ``y`` (cheap to ship)."""
    from dragon_core.data import decode_example
    return decode_example(payload)["y"]


class NoisyId(Transformer):
    """Decodes and adds per-example random noise: (id, noise)."""

    def augment(self, example, rng):
        return example["y"], float(rng.random())


class FailOn(Transformer):
    """Raises on one record."""

    def __init__(self, bad: int):
        self.bad = bad

    def augment(self, example, rng):
        if example["y"] == self.bad:
            raise ValueError(f"cannot augment record {self.bad}")
        return example["y"]


class Sleepy(Transformer):
    """Sleeps on one record (for timeouts)."""

    def __init__(self, index: int, seconds: float):
        self.index, self.seconds = index, seconds

    def augment(self, example, rng):
        if example["y"] == self.index:
            time.sleep(self.seconds)
        return example["y"]


class DieOn(Transformer):
    """Kills its own process on one record."""

    def __init__(self, index: int):
        self.index = index

    def augment(self, example, rng):
        if example["y"] == self.index:
            os.kill(os.getpid(), signal.SIGKILL)
        return example["y"]


class SquaresDataset(Dataset):
    """``{"i": i, "sq": float32[2]}`` examples; raises on ``bad``."""

    def __init__(self, n: int, bad: int = -1):
        self.n, self.bad = n, bad

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.bad:
            raise KeyError(f"dataset refuses {i}")
        return {"i": i, "sq": np.array([i, i * i], np.float32)}


class Unpicklable(Dataset):
    """Returns examples holding a lambda (cannot reach the main process)."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return {"f": lambda: i}


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def is_running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    state = _state(pid)
    return state is not None and state not in ("Z", "X")


def wait_gone(pids, timeout: float = 10.0) -> list[int]:
    """Wait until none of ``pids`` runs; return those still running."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if is_running(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def descendants(pid: int) -> list[int]:
    """All running descendants of ``pid`` (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return [p for p in out if is_running(p)]


class RandomOps(Dataset):
    """Each example: its index, a draw of a dragon random op, of NumPy's
    global generator and of Python's, and what ``get_worker_info`` says."""

    def __init__(self, n: int = 40):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import random

        import dragon_core as dg
        from dragon_core.data import get_worker_info
        info = get_worker_info()
        where = (-1, -1) if info is None else (info.id, info.num_workers)
        return (np.int64(i), np.float64(dg.ops.random_uniform([1]).numpy()[0]),
                np.float64(np.random.rand()), np.float64(random.random()),
                np.array(where, np.int64))


class DrawingSource:
    """A RecordPipeline source whose read draws from NumPy's and Python's
    global generators: ``(index, np.random draw, random draw)``."""

    def __init__(self, n: int = 12):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import random
        return (int(i), float(np.random.rand()), float(random.random()))


def drawing_transform(item):
    """A plain-callable transformer drawing from the same global generators:
    ``(index, source's np draw, source's random draw, np draw, random draw)``."""
    import random
    return np.array(item + (float(np.random.rand()), float(random.random())))


class IndexOf:
    """``source[i]`` is ``i``."""

    def __init__(self, n: int = 4):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return int(i)


class RngNoise(Transformer):
    """A Transformer on plain indices: (index, a draw of its rng)."""

    def augment(self, example, rng):
        return np.array([float(example), float(rng.random())])
