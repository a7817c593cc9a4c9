"""Conformance of dragon_core.vm.tensorflow's ops.

Every case of ``tf_cases.py`` is checked three ways:

* forward against its float64 NumPy reference (values, shape, dtype);
* gradient (where differentiable) in float64 against central finite
  differences of the NumPy reference;
* when TensorFlow is importable, forward (values, shape, dtype) and gradient
  against real TensorFlow on the same inputs (``tensorflow-cpu`` is not a
  dependency; see docs/from-tensorflow.md).
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core.vm.tensorflow as vtf

from tf_cases import CASES

try:   # real TensorFlow, when installed (a test-only extra)
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as real_tf
except ImportError:   # pragma: no cover - depends on the environment
    real_tf = None

IDS = [c.name for c in CASES]


def _inputs(case, seed=0):
    return case.inputs(np.random.default_rng(seed))


def _run(tf, case, arrays):
    return case.fn(tf, *[tf.constant(a) for a in arrays])


def _expected_dtype(case, arrays):
    return case.dtype or arrays[0].dtype.name


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_matches_numpy(case):
    arrays = _inputs(case)
    out = _run(vtf, case, arrays)
    ref = np.asarray(case.ref(*[a.astype(np.float64) if a.dtype.kind == "f" else a
                                for a in arrays]))
    assert out.dtype.name == _expected_dtype(case, arrays), (out.dtype, case.dtype)
    assert tuple(out.shape) == ref.shape, (tuple(out.shape), ref.shape)
    got = out.numpy()
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, ref.astype(got.dtype))
    else:
        np.testing.assert_allclose(got, ref, rtol=case.rtol, atol=case.atol)


def _fd_grad(ref, arrays, wrt, weight, eps=1e-6):
    xs = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]
    x = xs[wrt].copy()
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for k in range(flat.size):
        orig = flat[k]
        flat[k] = orig + eps
        xs[wrt] = x
        hi = float(np.sum(np.asarray(ref(*xs)) * weight))
        flat[k] = orig - eps
        lo = float(np.sum(np.asarray(ref(*xs)) * weight))
        flat[k] = orig
        gflat[k] = (hi - lo) / (2 * eps)
    return g


GRAD_CASES = [c for c in CASES if c.grad]


@pytest.mark.parametrize("case", GRAD_CASES, ids=[c.name for c in GRAD_CASES])
def test_gradient_matches_finite_differences(case):
    arrays = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in _inputs(case)]
    xs = [vtf.constant(a) for a in arrays]
    ref_out = np.asarray(case.ref(*arrays))
    weight = np.random.default_rng(1).standard_normal(ref_out.shape)
    with vtf.GradientTape() as tape:
        for i in case.grad:
            tape.watch(xs[i])
        out = case.fn(vtf, *xs)
        target = vtf.reduce_sum(out * vtf.constant(weight))
    grads = tape.gradient(target, [xs[i] for i in case.grad])
    for i, g in zip(case.grad, grads):
        expect = _fd_grad(case.ref, arrays, i, weight)
        assert g is not None, f"no gradient for input {i}"
        assert g.dtype.name == "float64"
        np.testing.assert_allclose(g.numpy(), expect, rtol=1e-5, atol=1e-6,
                                   err_msg=f"gradient of input {i}")


TF_CASES = [c for c in CASES if c.with_tf]


@pytest.mark.skipif(real_tf is None, reason="TensorFlow is not installed (NumPy references "
                                            "above still check every case)")
@pytest.mark.parametrize("case", TF_CASES, ids=[c.name for c in TF_CASES])
def test_matches_real_tensorflow(case):
    arrays = _inputs(case)
    ours = _run(vtf, case, arrays)
    theirs = _run(real_tf, case, arrays)
    assert ours.dtype.name == theirs.dtype.name
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=max(case.rtol, 1e-5),
                               atol=max(case.atol, 1e-5))
    if not case.grad:
        return
    weight = np.random.default_rng(1).standard_normal(tuple(ours.shape)).astype(np.float32)
    results = []
    for tf in (vtf, real_tf):
        xs = [tf.constant(a) for a in arrays]
        with tf.GradientTape() as tape:
            for i in case.grad:
                tape.watch(xs[i])
            target = tf.reduce_sum(case.fn(tf, *xs) * tf.constant(weight))
        grads = tape.gradient(target, [xs[i] for i in case.grad])
        results.append([tf.convert_to_tensor(g).numpy() for g in grads])  # IndexedSlices too
    for g_ours, g_tf in zip(*results):
        np.testing.assert_allclose(g_ours, g_tf, rtol=1e-4, atol=1e-5)
