"""Compiled (``dg.function``) against eager: random programs and training
steps from ``graphfuzz.py``, run at every optimisation level (with and
without fusion / in-place / buffer reuse, and on the parallel executor),
several calls in a row; plus the regression tests of what the fuzzing found.

``DRAGON_FUZZ_OFFSET`` (first seed, default 0) and ``DRAGON_FUZZ_COUNT``
(programs, default 160; training steps: a quarter of it) choose the programs,
so a deeper run by hand is e.g.
``DRAGON_FUZZ_OFFSET=5000 DRAGON_FUZZ_COUNT=2000 pytest tests/graph/test_graphfuzz.py``.
"""

import os

import numpy as np
import pytest

import dragon_core as dg

from . import graphfuzz as G

OFFSET = int(os.environ.get("DRAGON_FUZZ_OFFSET", "0"))
COUNT = int(os.environ.get("DRAGON_FUZZ_COUNT", "160"))
CHUNK = 8


@pytest.mark.parametrize("chunk", range((COUNT + CHUNK - 1) // CHUNK))
def test_random_programs_compiled_equal_eager(chunk):
    ran = 0
    for seed in range(OFFSET + chunk * CHUNK, OFFSET + min(COUNT, (chunk + 1) * CHUNK)):
        # O0-O2 must give eager's bits; O3 (fusion) too, docs/graph.md
        ran += G.check_program(G.random_program(seed), exact_levels=(0, 1, 2, 3))
    assert ran > 0


@pytest.mark.parametrize("chunk", range(max(1, COUNT // 4 // 4)))
def test_random_training_steps_compiled_equal_eager(chunk):
    ran = 0
    for seed in range(OFFSET + chunk * 4, OFFSET + (chunk + 1) * 4):
        ran += G.check_train_step(G.TrainStep(seed))
    assert ran > 0


def test_generator_is_deterministic_and_covers_the_op_kinds():
    ops = set()
    for seed in range(200):
        a, b = G.random_program(seed), G.random_program(seed)
        assert repr(a) == repr(b)
        ops.update(op for op, _, _ in a.instrs)
        assert 3 <= len(a.instrs) <= 15
    assert ops >= {"relu", "gelu", "add", "mul", "sum", "mean", "max", "reshape", "transpose",
                   "slice", "concat", "split", "matmul", "softmax", "layer_norm", "cast_rt",
                   "where"}


def test_fuzz_checker_catches_a_wrong_result(monkeypatch):
    """The checker is not vacuous: a compiled run that adds 1e-3 fails it."""
    prog = G.random_program(1)
    real = dg.function

    def wrong(fn, **kw):
        g = real(fn, **kw)
        return lambda *xs: tuple(o + 1e-3 if str(o.dtype).startswith("float") else o
                                 for o in g(*xs))

    monkeypatch.setattr(G.dg, "function", wrong)
    with pytest.raises(AssertionError, match="differs from eager"):
        G.check_program(prog, configs=[(1, ())])


# ------------------------------------------------------------- findings


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_returning_an_assigned_variable_returns_the_variable(level):
    """Finding 1: ``w.assign(...); return w`` eagerly returns ``w`` itself
    (a later assign rebinds it); a compiled call returned a new tensor
    holding that call's value, so a kept result differed from eager's."""
    def make():
        w = dg.tensor(np.ones(4, np.float32))

        def f(x):
            old = w                 # the variable, not a copy (as eagerly)
            w.assign(w + x)
            return w, old, dg.ops.reshape(w, [2, 2])
        return w, f

    w_e, f_e = make()
    w_c, f_c = make()
    g = dg.function(f_c, opt_level=level)
    x = dg.tensor(np.arange(4.0, dtype=np.float32))
    kept_e = [f_e(x) for _ in range(3)]
    kept_c = [g(x) for _ in range(3)]
    for (a, b, c), (ea, eb, ec) in zip(kept_c, kept_e):
        assert a is w_c and b is w_c
        np.testing.assert_array_equal(a.numpy(), ea.numpy())
        np.testing.assert_array_equal(b.numpy(), eb.numpy())
        np.testing.assert_array_equal(c.numpy(), ec.numpy())
    np.testing.assert_array_equal(w_c.numpy(), w_e.numpy())
