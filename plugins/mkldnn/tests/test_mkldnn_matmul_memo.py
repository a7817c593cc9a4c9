"""The mkldnn MatMul's per-thread memo of bound primitives (32 entries,
searched from the most recent; plugins/mkldnn/src/matmul.cc, class Memo).

Calls that cycle through more problems than the memo holds, fewer, and
repeat one problem between others must each compute their own product:
an entry found for the wrong problem (or a bound primitive reused with
another's memory objects) would give a result of the wrong shape or values.
Values against float64 NumPy with the float32 dot-product bound
``(k + 2) * 2**-24 * (|A| @ |B|)``.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import dragon_core as dg

U32 = 2.0 ** -24


def _problems(count, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        m, k, n = 3 + i % 5, 4 + 3 * i, 2 + i % 7
        out.append((rng.standard_normal((m, k)).astype(np.float32),
                    rng.standard_normal((k, n)).astype(np.float32)))
    return out


def _check(a, b, y):
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bound = (a.shape[1] + 2) * U32 * (np.abs(a).astype(np.float64) @ np.abs(b))
    assert y.shape == ref.shape
    assert np.all(np.abs(y - ref) <= bound)


@pytest.mark.parametrize("count", [5, 31, 33, 70])
def test_cycling_problems_each_get_their_product(count):
    probs = _problems(count)
    tensors = [(dg.tensor(a), dg.tensor(b)) for a, b in probs]
    for _ in range(3):
        for (a, b), (ta, tb) in zip(probs, tensors):
            _check(a, b, dg.ops.matmul(ta, tb).numpy())
    # one problem repeated between all the others (found first, most recent)
    a0, b0 = tensors[0]
    for (a, b), (ta, tb) in zip(probs, tensors):
        _check(a, b, dg.ops.matmul(ta, tb).numpy())
        _check(probs[0][0], probs[0][1], dg.ops.matmul(a0, b0).numpy())


def test_threads_keep_their_own_memo():
    probs = _problems(40, seed=1)
    tensors = [(dg.tensor(a), dg.tensor(b)) for a, b in probs]
    errors = []

    def work(order):
        try:
            for _ in range(3):
                for i in order:
                    _check(*probs[i], dg.ops.matmul(*tensors[i]).numpy())
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(list(range(40)),)),
               threading.Thread(target=work, args=(list(range(39, -1, -1)),))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
