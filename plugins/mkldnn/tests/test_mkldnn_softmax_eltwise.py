"""mkldnn's Softmax / LogSoftmax and eltwise ops (Gelu, Elu, Sigmoid, Tanh)
against float64 NumPy references and cpu_eigen, the calls they decline, and
the activations deliberately left to cpu_eigen (docs/nn_ops.md).

Tolerances: float32 uses the kit's (rtol 1e-5, atol 1e-6) times 10 for
softmax (an exp, a sum over the axis and a division or log, as in the
core's tests) and times 4 for the activations (oneDNN's JIT polynomials
for erf/exp/log are within a few ulp); bfloat16 uses the kit's 1e-2.
Eltwise calls under a per-op size (where oneDNN starts to beat cpu_eigen)
are declined by design, so every served case has at least that many
elements.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import OpCase, check_bad_inputs, check_eager_vs_graph, op_case
from dragon_sdk.testing.opcase import numpy_dtype
from mkldnn_testing import (check_mkldnn_alone, cpu_eigen_result, explain_winner, fd_vjp,
                            run_without, tape_vjp)
from tests.ops.test_misc import _log_softmax, _softmax
from tests.ops.test_unary import _elu, _gelu, _sigmoid

DTYPES = ("float32", "bfloat16")
SOFTMAX_OPS = {"Softmax": _softmax, "LogSoftmax": _log_softmax}
ELTWISE_OPS = {"Gelu": _gelu, "Elu": _elu, "Sigmoid": _sigmoid, "Tanh": np.tanh}
# eltwise.cc's per-op kMin: smaller calls are declined.
MIN_ELEMENTS = {"Gelu": 8192, "Elu": 8192, "Sigmoid": 1 << 20, "Tanh": 1 << 20}
# Measured no faster with oneDNN than cpu_eigen at any size, or (Softplus)
# inexact in its negative tail (docs/nn_ops.md).
LEFT_TO_CPU_EIGEN = ["Relu", "LeakyRelu", "Exp", "Log", "Sqrt", "Abs", "Square", "Clip",
                     "Softplus"]


def eltwise_shapes(op):
    """Shapes of at least MIN_ELEMENTS[op] elements: flat, odd rows, 3-D."""
    m = MIN_ELEMENTS[op]
    return [(m,), (3, m // 3 + 1), (2, 65, m // 130 + 1)]


# Softmax shapes with the axis last or followed only by size-1 axes.
SOFTMAX_CASES = [((7,), -1), ((3, 1000), -1), ((5, 4, 33), 2), ((2, 17, 1), 1),
                 ((4, 1, 1), 0), ((1, 1), -1), ((64, 4097), -1), ((0, 5), -1)]
ELTWISE_ATTRS = {"Gelu": [{}, {"approximate": "none"}], "Elu": [{}, {"alpha": 0.3}, {"alpha": 2.5}],
                 "Sigmoid": [{}], "Tanh": [{}]}

# Calls mkldnn declines: (op, shape, attrs, why).
DECLINED = [
    ("Softmax", (3, 4), {"axis": 0}, "axis followed by a non-trivial axis"),
    ("LogSoftmax", (2, 5, 3), {"axis": 1}, "axis followed by a non-trivial axis"),
    ("Gelu", (8192,), {"approximate": "tanh"}, "tanh form: cpu_eigen is as fast"),
    ("Gelu", (8191,), {}, "under the size where oneDNN wins"),
    ("Elu", (10,), {}, "under the size where oneDNN wins"),
    ("Sigmoid", (1000, 1000), {}, "under the size where oneDNN wins"),
    ("Tanh", (1000, 1000), {}, "under the size where oneDNN wins"),
]


def _logits(rng, dt, shape):
    return rng.uniform(-10, 10, shape).astype(numpy_dtype(dt))


def _activations(rng, dt, shape, low=-6.0):
    return rng.uniform(low, 6, shape).astype(numpy_dtype(dt))


def _eltwise_inputs(op):
    """Inputs of ``op`` (the same range for every op served)."""
    return lambda rng, dt, shape: [_activations(rng, dt, shape)]


def _reference(op):
    return SOFTMAX_OPS.get(op) or ELTWISE_OPS[op]


# ------------------------------------------------------------ selection


# float32 softmax is cpu_eigen's (see the next test).
@pytest.mark.parametrize("op, dtype", [(op, dt) for op in list(SOFTMAX_OPS) + list(ELTWISE_OPS)
                                       for dt in DTYPES
                                       if not (op in SOFTMAX_OPS and dt == "float32")])
def test_explain_names_mkldnn(op, dtype):
    line = explain_winner(op, dtype)
    if (op, dtype) == ("Gelu", "float32"):
        # Registered below cpu_eigen's float32 Gelu, which is faster (issue
        # 21, eltwise.cc); served when pinned or alone (tests/ops/test_gelu.py).
        assert "cpu_eigen" in line and "priority 0 beats -10" in line, line
        return
    assert f"mkldnn::{op}" in line and "from mkldnn" in line, line


@pytest.mark.parametrize("op", list(SOFTMAX_OPS))
def test_float32_softmax_is_cpu_eigens_and_mkldnn_is_pinnable(op):
    """cpu_eigen's float32 softmax (priority 20, issue 21) wins over oneDNN's
    (10); oneDNN's stays a candidate that a pin selects."""
    text = dg.plugins.explain(op, "cpu", "float32")
    assert f"winner: {op}F32 from cpu_eigen" in text and f"mkldnn::{op}" in text, text
    dg.plugins.pin(op, "cpu", f"mkldnn::{op}")
    try:
        line = explain_winner(op, "float32")
    finally:
        dg.plugins.unpin(op, "cpu")
    assert f"mkldnn::{op}" in line and "pin" in line, line


@pytest.mark.parametrize("op", LEFT_TO_CPU_EIGEN)
def test_slower_activations_are_not_registered(op):
    assert all(k["plugin"] != "mkldnn" for k in dg.plugins.kernels(op)), op
    assert "cpu_eigen" in explain_winner(op)


def _served_cases():
    rng = np.random.default_rng(21)
    for op, ref in SOFTMAX_OPS.items():
        for shape, axis in SOFTMAX_CASES:
            yield op, [_logits(rng, "float32", shape)], ref, {"axis": axis}, 10
    for op, ref in ELTWISE_OPS.items():
        for shape in eltwise_shapes(op):
            for attrs in ELTWISE_ATTRS[op]:
                yield op, _eltwise_inputs(op)(rng, "float32", shape), ref, attrs, 4


def _declined_calls():
    return [(f"{op}{shape}{attrs}", op,
             [np.linspace(-3, 3, int(np.prod(shape))).reshape(shape).astype(np.float32)], attrs)
            for op, shape, attrs, _ in DECLINED]


def test_mkldnn_alone_serves_and_declines():
    """With cpu_eigen disabled every case runs on mkldnn and matches the
    reference; the DECLINED calls are declined."""
    check_mkldnn_alone("test_mkldnn_softmax_eltwise", len(list(_served_cases())),
                       _declined_calls())


def test_without_mkldnn_cpu_eigen_serves():
    ops = list(SOFTMAX_OPS) + list(ELTWISE_OPS)
    out = run_without("mkldnn", f"""
        import json, dragon_core as dg
        print(json.dumps([dg.plugins.explain(op, "cpu", "float32").splitlines()[-1]
                          for op in {ops!r}]))
    """)
    assert all("cpu_eigen" in w and "mkldnn" not in w for w in out), out


@pytest.mark.parametrize("op, shape, attrs, why", DECLINED)
def test_declined_calls_are_served_by_cpu_eigen_correctly(op, shape, attrs, why):
    x = _eltwise_inputs(op)(np.random.default_rng(3), "float32", shape)
    OpCase.of(op, x, _reference(op), attrs=attrs, tol=10).check_forward()


# ------------------------------------------------------------ numerics


@pytest.mark.parametrize("op", list(SOFTMAX_OPS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axis", SOFTMAX_CASES)
def test_softmax(op, dtype, shape, axis):
    x = _logits(np.random.default_rng(5), dtype, shape)
    out = OpCase.of(op, [x], SOFTMAX_OPS[op], attrs={"axis": axis}, tol=10).check_forward()[0]
    if op == "Softmax" and x.size:
        np.testing.assert_allclose(np.asarray(out, np.float64).sum(axis=axis), 1.0,
                                   rtol=1e-5 if dtype == "float32" else 2e-2)


@pytest.mark.parametrize("op", list(SOFTMAX_OPS))
def test_softmax_is_stable_and_propagates_nan(op):
    """Huge logits stay finite; a NaN or +inf makes its whole slice NaN (as
    cpu_eigen: the max-shifted exponentials are then all NaN)."""
    x = np.tile(np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1000.0, -2000.0],
                          [0.0, 0.0, 0.0]], np.float32), (1, 5))
    out = OpCase.of(op, [x], SOFTMAX_OPS[op], tol=10).check_forward()[0]
    assert np.isfinite(out).all()
    x = np.repeat(x, 3, axis=0)
    x[1, 4], x[4, 0] = np.nan, np.inf
    fn = dg.ops.softmax if op == "Softmax" else dg.ops.log_softmax
    y = fn(dg.tensor(x)).numpy()
    assert np.isnan(y[[1, 4]]).all() and np.isfinite(np.delete(y, [1, 4], axis=0)).all()
    np.testing.assert_allclose(y, cpu_eigen_result(op, lambda: fn(dg.tensor(x)).numpy()),
                               rtol=1e-5, atol=1e-5)


def _eltwise_case(op):
    @op_case(op, inputs=_eltwise_inputs(op), reference=ELTWISE_OPS[op],
             attrs=ELTWISE_ATTRS[op], shapes=eltwise_shapes(op), dtypes=DTYPES, tol=4)
    def test(case):
        case.check_forward()
    test.__doc__ = f"{op} on mkldnn matches NumPy (float32, bfloat16, strided views)."
    return test


test_gelu = _eltwise_case("Gelu")
test_elu = _eltwise_case("Elu")
test_sigmoid = _eltwise_case("Sigmoid")
test_tanh = _eltwise_case("Tanh")

_SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 1e-30, 1e30, 88.0, -88.0,
            30.0, -30.0, 15.5, -15.5]


def _gelu_with_limits(x):
    """gelu(+inf) = inf, gelu(-inf) = -0 (the erf formula gives -inf * 0)."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isinf(x), np.where(x > 0, x, -0.0), _gelu(x))


_LIMITS = {"Gelu": (0.0, np.inf), "Elu": (-1.0, np.inf), "Sigmoid": (0.0, 1.0),
           "Tanh": (-1.0, 1.0)}


@pytest.mark.parametrize("op", list(ELTWISE_OPS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_special_values(op, dtype):
    """NaN, ±inf, ±0, huge and tiny values, tiled to a served size. (The kit's
    input-unchanged check cannot compare bfloat16 NaNs, so bfloat16 NaN input
    is checked by hand.)"""
    ref = _gelu_with_limits if op == "Gelu" else ELTWISE_OPS[op]
    values = _SPECIAL if dtype == "float32" else _SPECIAL[1:]
    x = np.resize(np.array(values, np.float32), MIN_ELEMENTS[op]).astype(numpy_dtype(dtype))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        out = np.asarray(OpCase.of(op, [x], ref, tol=4).check_forward()[0], np.float64)
    low, high = _LIMITS[op]
    np.testing.assert_array_equal(out[[values.index(-np.inf), values.index(np.inf)]], [low, high])
    if dtype == "bfloat16":
        x[::3] = np.nan
        y = getattr(dg.ops, op.lower())(dg.tensor(x)).numpy().astype(np.float64)
        assert np.isnan(y[::3]).all(), op


def test_gelu_negative_tail_is_within_absolute_tolerance():
    """oneDNN's gelu_erf computes 0.5 x (1 + erf(x / sqrt 2)) in float32 (as
    PyTorch does): far left, 1 + erf cancels, so the error there is absolute
    (<= 1e-6), not relative; cpu_eigen's float32 keeps the relative accuracy."""
    x = np.resize(np.linspace(-12, -2, 101, dtype=np.float32), MIN_ELEMENTS["Gelu"])
    y = dg.ops.gelu(dg.tensor(x)).numpy()
    np.testing.assert_allclose(y, _gelu(x.astype(np.float64)), rtol=0, atol=1e-6)
    assert (y <= 0).all()


@pytest.mark.parametrize("op, fn, attrs", [
    ("Softmax", "softmax", {"axis": -1}), ("LogSoftmax", "log_softmax", {"axis": 1}),
    ("Gelu", "gelu", {}), ("Elu", "elu", {"alpha": 0.5}), ("Sigmoid", "sigmoid", {}),
    ("Tanh", "tanh", {}),
])
def test_matches_cpu_eigen_float32(op, fn, attrs):
    x = dg.tensor(_eltwise_inputs(op)(np.random.default_rng(6), "float32", (1024, 1025))[0])
    f = getattr(dg.ops, fn)
    ours = f(x, **attrs).numpy()
    theirs = cpu_eigen_result(op, lambda: f(x, **attrs).numpy())
    np.testing.assert_allclose(ours, theirs, rtol=4e-5, atol=4e-6)


def test_in_place_and_strided_inputs():
    """Elu may write over its input (the graph's in-place pass); a strided
    view is packed by the core first."""
    base = _activations(np.random.default_rng(7), "float32", (64, 300))
    view = dg.tensor(base)[:, ::2]
    np.testing.assert_allclose(dg.ops.elu(view).numpy(), _elu(base[:, ::2].astype(np.float64)),
                               rtol=4e-5, atol=4e-6)

    def chain(x):
        return dg.ops.softplus(dg.ops.gelu(dg.ops.elu(x * 2.0)))

    check_eager_vs_graph(chain, base, grads=True, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------ gradients


@pytest.mark.parametrize("op, fn, attrs", [
    ("Gelu", "gelu", {}), ("Elu", "elu", {"alpha": 0.7}), ("Sigmoid", "sigmoid", {}),
    ("Tanh", "tanh", {}),
])
def test_eltwise_float32_gradient_matches_finite_differences(op, fn, attrs):
    """The tape's gradient in float32 against central differences of the
    float64 reference (element-wise: one perturbation of every element)."""
    rng = np.random.default_rng(8)
    x = _eltwise_inputs(op)(rng, "float32", (MIN_ELEMENTS[op],))[0]
    c = rng.standard_normal(x.shape)
    got = tape_vjp(lambda t: getattr(dg.ops, fn)(t, **attrs), [x], 0, c)
    xd, eps = x.astype(np.float64), 1e-6
    ref = ELTWISE_OPS[op]
    want = (ref(xd + eps, **attrs) - ref(xd - eps, **attrs)) / (2 * eps) * c
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", list(SOFTMAX_OPS))
def test_softmax_float32_gradient_matches_finite_differences(op):
    rng = np.random.default_rng(9)
    x = _logits(rng, "float32", (3, 11)) / 4
    c = rng.standard_normal(x.shape)
    fn = dg.ops.softmax if op == "Softmax" else dg.ops.log_softmax
    got = tape_vjp(fn, [x], 0, c)
    want = fd_vjp(SOFTMAX_OPS[op], [x], 0, c)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_softmax_second_order():
    """d<d<softmax(x), c>/dx, v>/dx with every forward softmax on mkldnn, in
    float32, against finite differences of the float64 first derivative."""
    rng = np.random.default_rng(10)
    x = _logits(rng, "float32", (2, 9)) / 4
    c, v = rng.standard_normal(x.shape), rng.standard_normal(x.shape)

    def first(a):  # d<softmax(a), c>/da in float64
        y = _softmax(a)
        return y * (c - (c * y).sum(axis=-1, keepdims=True))

    t = dg.tensor(x)
    with dg.GradientTape() as outer:
        outer.watch([t])
        with dg.GradientTape() as inner:
            inner.watch([t])
            loss = dg.ops.sum(dg.ops.softmax(t) * dg.tensor(c.astype(np.float32)))
        g = inner.gradient(loss, [t])[0]
        hv = dg.ops.sum(g * dg.tensor(v.astype(np.float32)))
    got = outer.gradient(hv, [t])[0].numpy()
    want = fd_vjp(first, [x], 0, v)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


# ------------------------------------------------------------ bad input


@pytest.mark.parametrize("op, attrs", [("Softmax", {"axis": -1}), ("LogSoftmax", {"axis": 0}),
                                       ("Gelu", {}), ("Elu", {"alpha": 2.0})])
def test_bad_inputs_never_crash(op, attrs):
    x = _activations(np.random.default_rng(0), "float32", (8, 1024))
    # The core's argument conversion rejects None with a TypeError that does
    # not name the op (known, tests/sdk_kit/test_bad_inputs.py).
    check_bad_inputs(op, [x], **attrs)
