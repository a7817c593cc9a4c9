"""Picklable datasets for the vm.torch ``utils.data`` tests (worker processes
import this module)."""

from __future__ import annotations

import collections
import random

import numpy as np

from dragon_core.vm import torch as vt
from dragon_core.vm.torch.utils import data as vdata

Pair = collections.namedtuple("Pair", "x label")
INIT_CALLS: list = []          # filled by record_init in a worker


class Mixed:
    """Examples of every collatable kind, built with ``torch`` (vm.torch or real)."""

    def __init__(self, torch, n=11):
        self.torch, self.n = torch, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        t = self.torch
        return {"x": t.arange(3, dtype=t.float32) + i, "i": i, "f": i / 4, "b": i % 2 == 0,
                "s": f"s{i}", "np": np.full((2,), i, np.int16), "nps": np.float32(i) / 2,
                "pair": Pair(t.tensor([i, -i]), i * 1.5), "tup": (i, str(i)),
                "od": collections.OrderedDict(z=i, a=[i, i + 1])}


class VtMixed(vdata.Dataset):
    def __init__(self, n=11):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return Mixed(vt, self.n)[i]


class RandomDraws(vdata.Dataset):
    """Each example: the index and random numbers from every generator a
    ``__getitem__`` may use."""

    def __init__(self, n=40):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return (i, float(vt.rand(1)[0]), float(vt.randint(0, 1 << 30, (1,))[0]),
                float(np.random.rand()), random.random())


def record_init(worker_id):
    INIT_CALLS.append(worker_id)


class WhoAmI(vdata.Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        info = vdata.get_worker_info()
        if info is None:
            return i, -1, -1, len(INIT_CALLS)
        assert info.dataset is not None and len(info.dataset) == 12
        return i, info.id, info.num_workers, list(INIT_CALLS)


class FailsAt(vdata.Dataset):
    def __init__(self, bad):
        self.bad = bad

    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == self.bad:
            raise KeyError(f"no example {i} here")
        return vt.tensor([float(i)])


def make_stream(torch_module, base):
    """An IterableDataset class of ``base`` (vm.torch's or torch's) yielding
    ``n`` mixed examples, with a ``len``."""

    class Stream(base):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return (Mixed(torch_module, self.n)[i] for i in range(self.n))

        def __len__(self):
            return self.n
    return Stream


class VtDraws(vdata.Dataset):
    """(index, a vm.torch draw, a NumPy global draw, a Python ``random`` draw)."""

    def __init__(self, n=4):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return vt.tensor([float(i), float(vt.rand(1).item()), float(np.random.rand()),
                          random.random()], dtype=vt.float64)
