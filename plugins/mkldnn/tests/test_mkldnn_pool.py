"""mkldnn's pooling kernels (MaxPool2d, AvgPool2d, AdaptiveAvgPool2d and their
gradient ops) against the core's float64 NumPy references, against cpu_eigen
in float32, and the calls they must decline (docs/nn_ops.md).

The helpers shared with the other mkldnn nn-op tests are in mkldnn_testing.py.

Tolerances: float32 results are compared with the kit's float32 tolerance
(rtol 1e-5, atol 1e-6) times the ``tol`` given per case: pooling sums at
most a few dozen values, so 4 suffices; bfloat16 uses the kit's 1e-2.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import OpCase, check_bad_inputs, check_eager_vs_graph, op_case
from dragon_sdk.testing.opcase import numpy_dtype
from mkldnn_testing import (check_mkldnn_alone, cpu_eigen_result, explain_winner, fd_vjp,
                            run_without, tape_vjp)
from tests.ops import test_pool as core_pool
from tests.ops.test_pool import (_geometry, _pooled_shape, _values,
                                 adaptive_avg_pool2d_grad_ref, adaptive_avg_pool2d_ref,
                                 avg_pool2d_grad_ref, avg_pool2d_ref, max_pool2d_grad_ref,
                                 max_pool2d_ref)

# ------------------------------------------------------------ cases

OPS = ["MaxPool2d", "MaxPool2dGrad", "AvgPool2d", "AvgPool2dGrad", "AdaptiveAvgPool2d",
       "AdaptiveAvgPool2dGrad"]

SHAPES = [(2, 3, 7, 6), (1, 2, 5, 8), (1, 1, 5, 5), (3, 5, 9, 11), (0, 2, 6, 5), (2, 0, 4, 4)]

# The core's attribute sets, plus a 5x5 window; count_include_pad=True with a
# ceil-mode window past the padding is declined (DECLINED), so the core's
# ceil-mode average cases are run with count_include_pad=False here.
MAX_ATTRS = core_pool.MAX_ATTRS + [{"kernel_size": [5, 5], "strides": [3, 3], "pads": [2, 2]}]
AVG_ATTRS = [a if not a.get("ceil_mode") else {**a, "count_include_pad": False}
             for a in core_pool.AVG_ATTRS] + [
    {"kernel_size": [2, 2], "strides": [2, 2], "ceil_mode": True}]  # ceil = floor on even sizes

# (shape, output_size) where the output divides the input: a regular pooling.
ADAPTIVE = [((2, 3, 6, 6), [3, 2]), ((1, 2, 8, 4), [1, 1]), ((2, 2, 5, 5), [5, 5]),
            ((1, 4, 9, 6), [3]), ((0, 2, 4, 4), [2, 2])]


def _pool_attrs(attrs):
    return {k: v for k, v in attrs.items() if k != "count_include_pad"}


def _fits(case):
    return _geometry(case.shape, **_pool_attrs(case.attrs)) is not None


def _right_pad(length, out, k, s, p, d):
    """oneDNN's right padding for one axis (as pool.cc chooses it), or None."""
    span = d * (k - 1) + 1
    for pr in (p, (out - 1) * s + span - length - p):
        room = length + p + pr - span
        if pr >= 0 and room >= 0 and room // s + 1 == out:
            return pr
    return None


def include_pad_served(shape, attrs):
    """count_include_pad=True is served when no window reaches past the padded
    extent: the right padding oneDNN needs is at most ``pads``."""
    if not attrs.get("count_include_pad", True):
        return True
    geo = _geometry(shape, **_pool_attrs(attrs))
    return all(_right_pad(shape[2 + a], n, k, s, p, d) <= p
               for a, (k, s, p, d, n) in enumerate(geo))


def _avg_select(case):
    return _fits(case) and include_pad_served(case.shape, case.attrs)


def _distinct(rng, dt, shape):
    """Distinct values (one maximum per window), exact in bfloat16 too."""
    return _values(rng, np.float32, shape).astype(numpy_dtype(dt))


def _uniform(rng, dt, shape):
    return rng.uniform(-3, 3, shape).astype(numpy_dtype(dt))


def _dy(rng, dt, pooled_shape):
    return rng.standard_normal(pooled_shape).astype(numpy_dtype(dt))


def _max_grad_inputs(rng, dt, shape, attrs):
    return [_distinct(rng, dt, shape), _dy(rng, dt, _pooled_shape(shape, **attrs))]


def _avg_grad_inputs(rng, dt, shape, attrs):
    return [_uniform(rng, dt, shape), _dy(rng, dt, _pooled_shape(shape, **_pool_attrs(attrs)))]


DTYPES = ("float32", "bfloat16")

# ------------------------------------------------------------ selection


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_explain_names_mkldnn(op, dtype):
    line = explain_winner(op, dtype)
    assert f"mkldnn::{op}" in line and "from mkldnn" in line, line


def test_float64_stays_with_cpu_eigen():
    for op in OPS:
        assert "cpu_eigen" in explain_winner(op, "float64"), op


def test_without_mkldnn_cpu_eigen_serves():
    """DRAGON_DISABLE_PLUGINS=mkldnn: cpu_eigen wins by the deterministic order
    and computes the same values."""
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 6)).astype(np.float32)
    attrs = {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1]}
    out = run_without("mkldnn", f"""
        import json, numpy as np, dragon_core as dg
        x = dg.tensor(np.array({x.tolist()}, np.float32))
        winners = [dg.plugins.explain(op, "cpu", "float32").splitlines()[-1]
                   for op in {OPS!r}]
        y = dg.ops.max_pool2d(x, **{attrs!r}).numpy()
        print(json.dumps({{"winners": winners, "y": y.tolist()}}))
    """)
    assert all("cpu_eigen" in w and "mkldnn" not in w for w in out["winners"]), out["winners"]
    np.testing.assert_allclose(out["y"], max_pool2d_ref(x.astype(np.float64), **attrs),
                               rtol=1e-6)


# Calls mkldnn must decline, with why (docs/nn_ops.md).
DECLINED = [
    ("AvgPool2d", (1, 1, 7, 6), {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1],
                                 "ceil_mode": True}, "ceil-mode window past the padding"),
    ("AvgPool2d", (2, 2, 6, 6), {"kernel_size": [3, 3], "strides": [2, 2], "ceil_mode": True},
     "ceil-mode window past the input, counted with padding"),
    ("AdaptiveAvgPool2d", (2, 3, 7, 6), {"output_size": [2, 4]}, "7 % 2 != 0"),
    ("AdaptiveAvgPool2d", (1, 1, 3, 3), {"output_size": [5, 5]}, "more bins than cells"),
]


def _declined_call(op, shape, attrs):
    x = np.random.default_rng(1).uniform(-3, 3, shape).astype(np.float32)
    return x, getattr(dg.ops, {"AvgPool2d": "avg_pool2d",
                               "AdaptiveAvgPool2d": "adaptive_avg_pool2d"}[op])


def test_mkldnn_alone_serves_and_declines():
    """With cpu_eigen disabled, every served case runs on mkldnn (and matches
    the reference); the DECLINED calls and a NaN max pooling are declined."""
    check_mkldnn_alone("test_mkldnn_pool", len(list(_served_cases())), list(_declined_calls()))


def _served_cases():
    """(op, inputs, reference, attrs, tol) of every served case, float32."""
    rng = np.random.default_rng(7)
    for shape in SHAPES:
        for attrs in MAX_ATTRS:
            if _geometry(shape, **attrs) is None:
                continue
            x, dy = _max_grad_inputs(rng, np.float32, shape, attrs)
            yield "MaxPool2d", [x], max_pool2d_ref, attrs, 4
            yield "MaxPool2dGrad", [x, dy], max_pool2d_grad_ref, attrs, 4
        for attrs in AVG_ATTRS:
            if _geometry(shape, **_pool_attrs(attrs)) is None or \
                    not include_pad_served(shape, attrs):
                continue
            x, dy = _avg_grad_inputs(rng, np.float32, shape, attrs)
            yield "AvgPool2d", [x], avg_pool2d_ref, attrs, 4
            yield "AvgPool2dGrad", [x, dy], avg_pool2d_grad_ref, attrs, 4
    yield from _asym_cases(rng)
    for shape, size in ADAPTIVE:
        x = rng.uniform(-3, 3, shape).astype(np.float32)
        dy = rng.standard_normal(shape[:2] + (size[0], size[-1])).astype(np.float32)
        yield "AdaptiveAvgPool2d", [x], adaptive_avg_pool2d_ref, {"output_size": size}, 4
        yield "AdaptiveAvgPool2dGrad", [x, dy], adaptive_avg_pool2d_grad_ref, \
            {"output_size": size}, 4


# Asymmetric padding (the schema's [top, left, bottom, right]; the Python
# ((top, bottom), (left, right))): oneDNN's padding_l / padding_r, served.
ASYM = [((2, 3, 7, 6), {"kernel_size": [3, 2], "strides": [2, 2], "pads": [1, 0, 0, 1]}),
        ((1, 2, 5, 8), {"kernel_size": [3, 3], "strides": [1, 2], "pads": [0, 1, 1, 1]}),
        ((1, 2, 6, 5), {"kernel_size": [2, 2], "strides": [1, 1], "pads": [1, 1, 0, 0]})]


def _asym(kind, x, kernel_size, strides=(), pads=(0, 0, 0, 0), dilations=(1, 1),
          ceil_mode=False, count_include_pad=True):
    from tests.ops.test_padding_layout import pool_ref
    t, l, b, r = pads
    return pool_ref(kind, x, list(kernel_size), list(strides) or list(kernel_size),
                    ((t, b), (l, r)), count_include_pad)


def asym_max_ref(x, **attrs):
    return _asym("max", x, **attrs)


def asym_avg_ref(x, **attrs):
    return _asym("avg", x, **attrs)


def _vjp(f, x, dy, h):
    """dy^T J of f at x, column by column (f linear, or piecewise linear with
    every piece wider than h)."""
    base = f(x)
    dx = np.zeros(x.shape)
    for idx in np.ndindex(x.shape):
        e = x.copy()
        e[idx] += h
        dx[idx] = np.sum((f(e) - base) / h * dy)
    return dx


def asym_max_grad_ref(x, dy, **attrs):
    return _vjp(lambda v: asym_max_ref(v, **attrs), x, dy, 1e-4)


def asym_avg_grad_ref(x, dy, **attrs):
    return _vjp(lambda v: asym_avg_ref(v, **attrs), x, dy, 1.0)


def _asym_cases(rng):
    for shape, attrs in ASYM:
        x, dy = _max_grad_inputs(rng, np.float32, shape, {**attrs, "pads": attrs["pads"][:2]})
        dy = rng.standard_normal(asym_max_ref(x.astype(np.float64), **attrs).shape) \
            .astype(np.float32)
        yield "MaxPool2d", [x], asym_max_ref, attrs, 4
        yield "MaxPool2dGrad", [x, dy], asym_max_grad_ref, attrs, 4
        for cip in (True, False):
            a = {**attrs, "count_include_pad": cip}
            yield "AvgPool2d", [x], asym_avg_ref, a, 4
            yield "AvgPool2dGrad", [x, dy], asym_avg_grad_ref, a, 4


@pytest.mark.parametrize("op, inputs, ref, attrs, tol",
                         list(_asym_cases(np.random.default_rng(3))),
                         ids=lambda v: v if isinstance(v, str) else None)
def test_asymmetric_pads_match_reference_and_cpu_eigen(op, inputs, ref, attrs, tol):
    from mkldnn_testing import check_served
    from dragon_sdk.testing import run_op
    check_served(op, inputs, ref, attrs, rtol=1e-5 * tol, atol=1e-6 * tol)
    ours = run_op(op, *[dg.tensor(a) for a in inputs], **attrs)
    theirs = cpu_eigen_result(op, lambda: run_op(op, *[dg.tensor(a) for a in inputs], **attrs))
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-5, atol=1e-6)


def _declined_calls():
    for op, shape, attrs, _ in DECLINED:
        yield f"{op}{shape}", op, [_declined_call(op, shape, attrs)[0]], attrs
    x = np.ones((1, 1, 4, 4), np.float32)
    x[0, 0, 1, 1] = np.nan
    yield "nan", "MaxPool2d", [x], {"kernel_size": [2, 2]}


# ------------------------------------------------------------ numerics


@op_case("MaxPool2d", inputs=lambda rng, dt, shape: [_distinct(rng, dt, shape)],
         reference=max_pool2d_ref, attrs=MAX_ATTRS, shapes=SHAPES, dtypes=DTYPES,
         select=_fits, tol=4)
def test_max_pool2d(case):
    case.check_forward()


@op_case("MaxPool2dGrad", inputs=_max_grad_inputs, reference=max_pool2d_grad_ref,
         attrs=MAX_ATTRS, shapes=SHAPES, dtypes=("float32",), select=_fits, tol=4)
def test_max_pool2d_grad(case):
    case.check_forward()


@op_case("AvgPool2d", inputs=lambda rng, dt, shape: [_uniform(rng, dt, shape)],
         reference=avg_pool2d_ref, attrs=AVG_ATTRS, shapes=SHAPES, dtypes=DTYPES,
         select=_avg_select, tol=4)
def test_avg_pool2d(case):
    case.check_forward()


@op_case("AvgPool2dGrad", inputs=_avg_grad_inputs, reference=avg_pool2d_grad_ref,
         attrs=AVG_ATTRS, shapes=SHAPES, dtypes=DTYPES, select=_avg_select, tol=4)
def test_avg_pool2d_grad(case):
    case.check_forward()


@pytest.mark.parametrize("shape, size", ADAPTIVE)
@pytest.mark.parametrize("dtype", DTYPES)
def test_adaptive_avg_pool2d_and_grad(shape, size, dtype):
    rng = np.random.default_rng(3)
    x = rng.uniform(-3, 3, shape).astype(np.float32)
    dy = rng.standard_normal(shape[:2] + (size[0], size[-1])).astype(np.float32)
    x, dy = x.astype(numpy_dtype(dtype)), dy.astype(numpy_dtype(dtype))
    OpCase.of("AdaptiveAvgPool2d", [x], adaptive_avg_pool2d_ref,
              attrs={"output_size": size}, tol=4).check_forward()
    OpCase.of("AdaptiveAvgPool2dGrad", [x, dy], adaptive_avg_pool2d_grad_ref,
              attrs={"output_size": size}, tol=4).check_forward()


def test_max_pool2d_bfloat16_grad():
    """bfloat16 MaxPool2dGrad on exactly representable distinct values."""
    attrs = {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1]}
    x = (np.random.default_rng(2).permutation(2 * 3 * 7 * 6).reshape(2, 3, 7, 6) - 100.0)
    dy = np.random.default_rng(3).integers(-8, 8, _pooled_shape(x.shape, **attrs)) / 4.0
    bf = numpy_dtype("bfloat16")
    OpCase.of("MaxPool2dGrad", [x.astype(bf), dy.astype(bf)], max_pool2d_grad_ref,
              attrs=attrs).check_forward()


@pytest.mark.parametrize("op, fn, attrs", [
    ("MaxPool2d", "max_pool2d", {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1]}),
    ("MaxPool2dGrad", "max_pool2d", {"kernel_size": [3, 2], "strides": [2, 3], "pads": [1, 1],
                                     "dilations": [2, 2], "ceil_mode": True}),
    ("AvgPool2d", "avg_pool2d", {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1]}),
    ("AvgPool2d", "avg_pool2d", {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1],
                                 "ceil_mode": True, "count_include_pad": False}),
    ("AdaptiveAvgPool2d", "adaptive_avg_pool2d", {"output_size": [4, 3]}),
])
def test_matches_cpu_eigen_float32(op, fn, attrs):
    """A larger call (threaded paths) equals cpu_eigen's float32 result."""
    rng = np.random.default_rng(5)
    x = dg.tensor(_values(rng, np.float32, (4, 16, 24, 18)))
    f = getattr(dg.ops, fn)
    if op == "MaxPool2dGrad":
        dy = dg.tensor(rng.standard_normal(f(x, **attrs).shape).astype(np.float32))
        f = lambda x, **a: dg.ops.max_pool2d_grad(x, dy, **a)  # noqa: E731
    ours = f(x, **attrs).numpy()
    theirs = cpu_eigen_result(op, lambda: f(x, **attrs).numpy())
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_max_pool2d_ties_go_to_the_first_cell():
    """Equal maxima: the gradient goes to the first in row-major window order."""
    x = np.zeros((1, 1, 4, 4), np.float32)
    dy = np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2)
    dx = dg.ops.max_pool2d_grad(dg.tensor(x), dg.tensor(dy), kernel_size=[2, 2]).numpy()
    want = np.zeros((4, 4), np.float32)
    want[0, 0], want[0, 2], want[2, 0], want[2, 2] = 1, 2, 3, 4
    np.testing.assert_array_equal(dx[0, 0], want)


def test_nan_is_declined_to_cpu_eigen_which_propagates_it():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 0, 1] = np.nan
    y = dg.ops.max_pool2d(dg.tensor(x), kernel_size=[2, 2]).numpy()
    np.testing.assert_array_equal(y[0, 0], [[np.nan, 7], [13, 15]])


@pytest.mark.parametrize("where", [0, 131071, 262143])
def test_nan_anywhere_in_a_large_input_is_found(where):
    """The NaN scan of supports() splits inputs of >= 2^18 elements across
    threads: a NaN in any part (first, middle, last element) still declines
    the call, and cpu_eigen's result carries it; without one, oneDNN serves
    the call with the same values."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 8, 128, 128)).astype(np.float32)  # 2^18
    clean = dg.ops.max_pool2d(dg.tensor(x), kernel_size=[2, 2]).numpy()
    assert "from mkldnn" in explain_winner("MaxPool2d")
    x.reshape(-1)[where] = np.nan
    y = dg.ops.max_pool2d(dg.tensor(x), kernel_size=[2, 2]).numpy()
    n, c, h, w = np.unravel_index(where, x.shape)
    assert np.isnan(y[n, c, h // 2, w // 2])
    assert np.isnan(y).sum() == 1
    keep = ~np.isnan(y)
    np.testing.assert_array_equal(y[keep], clean[keep])


def test_declined_calls_are_served_by_cpu_eigen_correctly():
    for op, shape, attrs, _ in DECLINED:
        x, _ = _declined_call(op, shape, attrs)
        ref = avg_pool2d_ref if op == "AvgPool2d" else adaptive_avg_pool2d_ref
        OpCase.of(op, [x], ref, attrs=attrs, tol=4).check_forward()


def test_strided_input_is_read_correctly():
    """A non-contiguous view (the core packs it) pools like its copy."""
    base = np.random.default_rng(4).standard_normal((2, 3, 10, 14)).astype(np.float32)
    view = dg.tensor(base)[:, :, 1:9, ::2]
    attrs = {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1]}
    np.testing.assert_allclose(dg.ops.max_pool2d(view, **attrs).numpy(),
                               max_pool2d_ref(base[:, :, 1:9, ::2].astype(np.float64), **attrs),
                               rtol=1e-6)


# ------------------------------------------------------------ gradients


@pytest.mark.parametrize("fn, ref, attrs", [
    ("max_pool2d", max_pool2d_ref, {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1],
                                    "ceil_mode": True}),
    ("avg_pool2d", avg_pool2d_ref, {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1]}),
    ("avg_pool2d", avg_pool2d_ref, {"kernel_size": [3, 2], "strides": [2, 2], "pads": [1, 1],
                                    "ceil_mode": True, "count_include_pad": False}),
    ("adaptive_avg_pool2d", adaptive_avg_pool2d_ref, {"output_size": [3, 2]}),
])
def test_float32_gradient_matches_finite_differences(fn, ref, attrs):
    """The tape's gradient, every kernel in float32 (mkldnn's gradient ops),
    against central differences of the float64 reference."""
    rng = np.random.default_rng(6)
    x = _values(rng, np.float32, (1, 2, 6, 6))
    y = ref(x.astype(np.float64), **attrs)
    c = rng.standard_normal(y.shape)
    got = tape_vjp(lambda t: getattr(dg.ops, fn)(t, **attrs), [x], 0, c)
    want = fd_vjp(lambda a: ref(a, **attrs), [x], 0, c)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_second_order_through_max_pool2d_grad():
    """d<MaxPool2dGrad(x, dy), v>/d dy (the rule gathers v at the argmax) with
    the first-order op on mkldnn, against finite differences."""
    rng = np.random.default_rng(8)
    attrs = {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1]}
    x = _values(rng, np.float32, (1, 2, 7, 6))
    dy = rng.standard_normal(_pooled_shape(x.shape, **attrs)).astype(np.float32)
    v = rng.standard_normal(x.shape)
    got = tape_vjp(lambda a, b: dg.ops.max_pool2d_grad(a, b, **attrs), [x, dy], 1, v)
    want = fd_vjp(lambda a, b: max_pool2d_grad_ref(a, b, **attrs), [x, dy], 1, v)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("count_include_pad", [True, False])
def test_second_order_through_avg_pool2d_grad(count_include_pad):
    """d<AvgPool2dGrad(x, dy), v>/d dy is AvgPool2d(v) (both on mkldnn),
    against finite differences of the float64 reference."""
    rng = np.random.default_rng(18)
    attrs = {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1],
             "count_include_pad": count_include_pad}
    x = rng.uniform(-3, 3, (1, 2, 7, 6)).astype(np.float32)
    dy = rng.standard_normal(_pooled_shape(x.shape, **_pool_attrs(attrs))).astype(np.float32)
    v = rng.standard_normal(x.shape)
    got = tape_vjp(lambda a, b: dg.ops.avg_pool2d_grad(a, b, **attrs), [x, dy], 1, v)
    want = fd_vjp(lambda a, b: avg_pool2d_grad_ref(a, b, **attrs), [x, dy], 1, v)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------ modes and bad input


def test_eager_matches_graph_with_gradients():
    x = np.random.default_rng(9).standard_normal((2, 3, 8, 8)).astype(np.float32)

    def net(x):
        y = dg.ops.max_pool2d(x, kernel_size=[2, 2])
        return dg.ops.avg_pool2d(y, kernel_size=[3, 3], strides=[1, 1], pads=[1, 1])

    check_eager_vs_graph(net, x, grads=True, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op, attrs", [
    ("MaxPool2d", {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1]}),
    ("AvgPool2d", {"kernel_size": [2, 2], "count_include_pad": False}),
    ("AdaptiveAvgPool2d", {"output_size": [2, 2]}),
])
def test_bad_inputs_never_crash(op, attrs):
    x = np.random.default_rng(0).standard_normal((1, 2, 6, 6)).astype(np.float32)
    # The core's argument conversion rejects None with a TypeError that does
    # not name the op (known, tests/sdk_kit/test_bad_inputs.py).
    check_bad_inputs(op, [x], **attrs)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_window_of_negative_infinity_gives_negative_infinity(dtype):
    """oneDNN's max pooling starts at -FLT_MAX, so a window holding only -inf
    came out as -3.4e38 (torch: -inf). supports() now declines an x with a
    -inf, as one with a NaN, to cpu_eigen; finite windows are unchanged."""
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4) - 8
    x[0, 0, :2, :2] = -np.inf
    x[0, 0, 2, 3] = -np.inf
    y = dg.ops.max_pool2d(dg.tensor(x).astype(dtype), kernel_size=[2, 2])
    got = y.astype("float32").numpy()[0, 0]
    np.testing.assert_array_equal(got, [[-np.inf, -1], [5, 7]])
    # the gradient as torch routes it: a window of -inf sends it to its first cell
    xt = dg.tensor(x)
    with dg.GradientTape() as tape:
        tape.watch(xt)
        loss = dg.ops.sum(dg.ops.max_pool2d(xt, kernel_size=[2, 2]))
    dx = tape.gradient(loss, xt).numpy()[0, 0]
    want = np.zeros((4, 4), np.float32)
    want[0, 0] = want[1, 3] = want[3, 1] = want[3, 3] = 1
    np.testing.assert_array_equal(dx, want)


def test_window_of_negative_infinity_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)
    x[rng.random(x.shape) < 0.6] = -np.inf
    for k, s, p in [((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 2), (1, 1)), ((3, 2), (1, 2), (1, 0))]:
        want = torch.nn.functional.max_pool2d(torch.from_numpy(x), k, s, p).numpy()
        got = dg.ops.max_pool2d(dg.tensor(x), kernel_size=list(k), strides=list(s),
                                pads=list(p)).numpy()
        np.testing.assert_array_equal(got, want)
        assert np.isneginf(want).any()
