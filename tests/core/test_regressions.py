"""Regression tests for memory-safety bugs found by fuzzing under ASan."""

from __future__ import annotations

import numpy as np

import dragon_core as dg


def test_variadic_input_items_live_until_converted():
    """The items of a variadic input must stay alive while they are converted.

    ConvertInputs (dragon_core/src/python/bind_ops.cc) used to keep borrowed
    handles to the items it iterated out of the sequence. An item that only
    the iteration owned (a NumPy scalar or row of an array, anything a
    __getitem__ makes on the fly) was freed before being converted: a heap
    use-after-free that corrupted the heap and crashed the fuzz test much
    later, e.g. in random.getstate. Here __del__ resurrects the item, so the
    premature free stays harmless and shows up as the order of the events.
    """
    events, graveyard = [], []

    class Item:
        def __init__(self, v):
            self.v = v

        def __array__(self, dtype=None, copy=None):
            events.append(("convert", self.v))
            return np.array([self.v], dtype=np.float32)

        def __del__(self):
            events.append(("del", self.v))
            graveyard.append(self)  # resurrected: its memory stays valid

    class Items:  # a sequence whose items exist only while iterated
        def __len__(self):
            return 3

        def __getitem__(self, i):
            if not 0 <= i < 3:
                raise IndexError(i)
            return Item(float(i))

    y = dg.ops.concat(Items())
    assert y.tolist() == [0.0, 1.0, 2.0]
    for v in (0.0, 1.0, 2.0):
        assert ("convert", v) in events, events
        if ("del", v) in events:
            assert events.index(("convert", v)) < events.index(("del", v)), events


def test_variadic_input_from_numpy_array():
    # Iterating an array makes a new row (or scalar) object per item.
    y = dg.ops.concat(np.arange(6, dtype=np.float32).reshape(3, 2))
    assert y.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    x = dg.ops.stack(np.arange(3, dtype=np.float64))
    assert x.tolist() == [0.0, 1.0, 2.0]
