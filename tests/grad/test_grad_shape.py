"""Gradient rules of the shape ops against central finite differences.

First order through the op-case kit (``OpCase.check_grad``). The kit's
second-order check differentiates a loss that is linear in the op's output,
which for these linear ops never reaches the rule's own derivative; the
second-order tests below therefore use ``sum(c * op(x) ** 2)``, whose
Hessian-vector product differentiates the gradient rule with respect to an
output gradient that depends on x.
"""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import OpCase

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _idx(values):
    return np.array(values, dtype=np.int64)


# (op, inputs, attrs): every case is checked to first order.
CASES = [
    ("Reshape", [_x(2, 3, 4)], {"shape": [6, -1]}),
    ("Reshape", [_x()], {"shape": [1, 1]}),
    ("Reshape", [_x(1)], {"shape": []}),
    ("Reshape", [_x(0, 3)], {"shape": [3, 0]}),
    ("Squeeze", [_x(1, 3, 1, 2)], {}),
    ("Squeeze", [_x(1, 3, 1, 2)], {"axes": [-2]}),
    ("Unsqueeze", [_x(3, 2)], {"axes": [0, -1]}),
    ("Unsqueeze", [_x()], {"axes": [0]}),
    ("Flatten", [_x(2, 3, 4)], {"start_axis": 1}),
    ("Flatten", [_x(2, 3, 4)], {"start_axis": -3, "end_axis": -2}),
    ("Flatten", [_x()], {}),
    ("Transpose", [_x(2, 3, 4)], {}),
    ("Transpose", [_x(2, 3, 4)], {"perm": [2, 0, 1]}),
    ("Transpose", [_x(2, 3, 4)], {"perm": [-1, 0, -2]}),
    ("Transpose", [_x()], {}),
    ("BroadcastTo", [_x(3, 1)], {"shape": [2, 3, 4]}),
    ("BroadcastTo", [_x()], {"shape": [2, 3]}),
    ("BroadcastTo", [_x(1, 3)], {"shape": [0, 3]}),
    ("Split", [_x(5, 3)], {"sizes": [1, 3, 1]}),
    ("Split", [_x(2, 6)], {"sizes": [2, 0, 4], "axis": -1}),
    ("Slice", [_x(7, 5)], {"starts": [1, 0], "ends": [6, 5], "steps": [2, 1]}),
    ("Slice", [_x(7, 5)], {"starts": [-1, 3], "ends": [INT64_MIN, 0], "steps": [-3, -1]}),
    ("Slice", [_x(4, 6)], {"starts": [4], "ends": [INT64_MAX], "steps": [-2], "axes": [-1]}),
    ("Slice", [_x(4, 6)], {"starts": [1, 2], "ends": [3, 5], "steps": [1, 1], "axes": [1, 0]}),
    ("Slice", [_x(4, 6)], {"starts": [3], "ends": [3], "steps": [1]}),
    ("Slice", [_x(4, 6)], {"starts": [0, 4], "ends": [4, -7], "steps": [1, -2]}),
    ("Gather", [_x(5, 3), _idx([1, -4, 1, 4, 1, -1])], {"axis": 0}),
    ("Gather", [_x(2, 4, 3), _idx([[3, -1], [0, 3]])], {"axis": 1}),
    ("Gather", [_x(4, 3), np.array([2, 2, -3], np.int32)], {"axis": -1}),
    ("Gather", [_x(5, 3), _idx(2)], {"axis": 0}),
    ("Gather", [_x(0, 3), _idx([0, 2, 2])], {"axis": 1}),
    ("ScatterAdd", [_x(4, 3), _idx([0, -1, 0, 3]), _x(4, 3, seed=1)], {"axis": 0}),
    ("ScatterAdd", [_x(2, 5), _idx([[4, 1], [1, 1]]), _x(2, 2, 2, seed=1)], {"axis": -1}),
    ("ScatterReduce", [_x(4, 3), _idx([0, -1, 0, 3]), _x(4, 3, seed=1)],
     {"axis": 0, "reduction": "add"}),
    ("ScatterReduce", [_x(4, 3), _idx([0, -1, 0, 3, 0]), _x(5, 3, seed=1)],
     {"axis": 0, "reduction": "max"}),
    ("ScatterReduce", [_x(2, 5), _idx([[4, 1], [1, 1]]), _x(2, 2, 2, seed=1)],
     {"axis": -1, "reduction": "min"}),
    ("ScatterReduce", [_x(4, 3), _idx([0, -1, 0, 3, 0]), _x(5, 3, seed=1)],
     {"axis": 0, "reduction": "mul"}),
    # Zeros among the factors: one zero at a position (x's or an update's)
    # and two zeros at a position; the product rule stays exact.
    ("ScatterReduce", [np.array([[0.0, 1.5, 0.0], [2.0, -1.0, 0.7]]), _idx([0, 0, 1]),
                       np.array([[1.3, 0.0, 0.0], [-0.8, 0.0, 2.0], [0.0, 1.1, -0.4]])],
     {"axis": 0, "reduction": "mul"}),
    ("ScatterReduce", [_x(3, 2), _idx([2, 2]), _x(2, 2, seed=1)], {"axis": 0, "reduction": "max"}),
    ("ScatterReduce", [_x(0, 3), _idx([0, 2]), _x(0, 2)], {"axis": 1, "reduction": "mul"}),
    ("Pad", [_x(2, 3)], {"pads": [1, 2, 0, 3], "value": 1.5}),
    ("Pad", [_x(3, 4)], {"pads": [2, 1, 3, 3], "mode": "reflect"}),
    ("Pad", [_x(3, 4)], {"pads": [0, 0, 1, 0], "mode": "reflect"}),
    ("Pad", [_x(2, 3)], {"pads": [3, 2, 1, 0], "mode": "edge"}),
    ("Pad", [_x(1, 2)], {"pads": [2, 2, 0, 3], "mode": "edge"}),
    ("Pad", [_x(0, 2)], {"pads": [1, 1, 0, 0]}),
    ("Contiguous", [_x(3, 4)[:, ::2]], {}),
]


def _case_id(case):
    op, inputs, attrs = case
    shapes = "_".join("x".join(map(str, np.shape(a))) or "0d"
                      for a in (inputs[0] if isinstance(inputs[0], list) else inputs[:1]))
    return f"{op}-{shapes}-{attrs}"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_first_order(case):
    op, inputs, attrs = case
    OpCase.of(op, inputs, attrs=attrs).check_grad()


# Ops with a variadic input: OpCase.check_grad passes the flattened list of
# inputs positionally, which these ops do not accept, so they are checked
# with the helper below on L = sum(c * op(xs)).
VARIADIC = [
    ("concat", [_x(2, 3), _x(4, 3, seed=1), _x(0, 3)], {"axis": 0}),
    ("concat", [_x(2, 1), _x(2, 3, seed=1)], {"axis": -1}),
    ("concat", [_x(3)], {}),
    ("stack", [_x(2, 3), _x(2, 3, seed=1), _x(2, 3, seed=2)], {"axis": -1}),
    ("stack", [_x(2, 3), _x(2, 3, seed=1)], {"axis": 1}),
    ("stack", [_x(), _x(seed=1)], {}),
]


@pytest.mark.parametrize("op, inputs, attrs", VARIADIC,
                         ids=[f"{c[0]}-{len(c[1])}-{c[2]}" for c in VARIADIC])
def test_first_order_variadic(op, inputs, attrs):
    import dragon_core as dg

    def fn(ts):
        out = getattr(dg.ops, op)(ts, **attrs)
        c = np.random.default_rng(3).standard_normal(out.shape)
        return dg.ops.sum(dg.tensor(c) * out)
    _check_fn_grad(fn, inputs)


# -------------------------------------------------- a scalar function's gradient


def _tensors(arrays):
    import dragon_core as dg

    return [dg.tensor(a) for a in arrays]


def _check_fn_grad(fn, arrays, order=1, eps=1e-6, rtol=1e-5, atol=1e-7):
    """Compare the tape's gradient of ``fn`` with finite differences.

    ``fn(tensors) -> scalar Tensor``. With ``order=2`` the checked scalar is
    ``<grad fn(x), v>`` for a fixed random ``v``, differentiated through
    nested tapes.
    """
    import dragon_core as dg

    rng = np.random.default_rng(7)
    probes = [rng.standard_normal(a.shape) for a in arrays]

    def scalar(ts):
        if order == 1:
            return fn(ts)
        with dg.GradientTape() as inner:
            inner.watch(ts)
            value = fn(ts)
        grads = inner.gradient(value, ts, unconnected_gradients="zero")
        return sum(dg.ops.sum(g * dg.tensor(v)) for g, v in zip(grads, probes))

    ts = _tensors(arrays)
    with dg.GradientTape() as tape:
        tape.watch(ts)
        value = scalar(ts)
    analytic = tape.gradient(value, ts, unconnected_gradients="zero")
    for i, a in enumerate(arrays):
        numeric = np.zeros(a.shape)
        for j in range(a.size):
            plus = [b.copy() for b in arrays]
            minus = [b.copy() for b in arrays]
            plus[i].reshape(-1)[j] += eps
            minus[i].reshape(-1)[j] -= eps
            numeric.reshape(-1)[j] = (scalar(_tensors(plus)).item()
                                      - scalar(_tensors(minus)).item()) / (2 * eps)
        got = analytic[i].numpy()
        assert got.shape == a.shape
        np.testing.assert_allclose(got, numeric, rtol=rtol, atol=atol,
                                   err_msg=f"order {order}, input {i}")


def _squared(op, attrs, **extra):
    """x -> sum(c * op(x) ** 2), c fixed; op's first input is differentiated."""
    import dragon_core as dg

    def fn(ts):
        # attrs are schema names (as OpCase's): call with the Python names
        out = getattr(dg.ops, op)(*ts, **dg.plugin_api.py_attrs(op, attrs), **extra)
        c = np.random.default_rng(3).standard_normal(out.shape)
        return dg.ops.sum(dg.tensor(c) * out * out)
    return fn


SECOND_ORDER = [
    ("gather", [_x(5, 3)], {"indices": None, "axis": 0}),
    ("slice", [_x(6, 5)], {"starts": [-1, 1], "ends": [INT64_MIN, 5], "steps": [-2, 2]}),
    ("slice", [_x(6, 5)], {"starts": [1], "ends": [4], "steps": [1], "axes": [-1]}),
    ("transpose", [_x(2, 3, 4)], {"perm": [1, 2, 0]}),
    ("reshape", [_x(2, 3, 2)], {"shape": [3, -1]}),
]


@pytest.mark.parametrize("op, inputs, attrs", SECOND_ORDER,
                         ids=[f"{c[0]}-{c[2]}" for c in SECOND_ORDER])
def test_second_order(op, inputs, attrs):
    import dragon_core as dg

    attrs = dict(attrs)
    if op == "gather":  # duplicate and negative indices
        attrs["indices"] = dg.tensor(_idx([[1, -4], [4, 1]]))
    _check_fn_grad(_squared(op, attrs), inputs, order=2)


def test_second_order_concat():
    import dragon_core as dg

    def fn(ts):
        out = dg.ops.concat(ts, -1)
        c = np.random.default_rng(3).standard_normal(out.shape)
        return dg.ops.sum(dg.tensor(c) * out * out)
    _check_fn_grad(fn, [_x(2, 3), _x(2, 1, seed=1), _x(2, 2, seed=2)], order=2)


def test_second_order_scatter_add():
    import dragon_core as dg

    idx = dg.tensor(_idx([2, -1, 2]))

    def fn(ts):
        out = dg.ops.scatter_add(ts[0], idx, ts[1], axis=-1)
        c = np.random.default_rng(3).standard_normal(out.shape)
        return dg.ops.sum(dg.tensor(c) * out * out)
    _check_fn_grad(fn, [_x(2, 4), _x(2, 3, seed=1)], order=2)


@pytest.mark.parametrize("reduction", ["mul", "max"])
def test_second_order_scatter_reduce(reduction):
    """The ScatterReduce rules are built from differentiable ops: the
    Hessian of a product (nonzero second derivatives) matches finite
    differences; max's is that of the piecewise-selected values."""
    import dragon_core as dg

    idx = dg.tensor(_idx([2, -1, 2]))

    def fn(ts):
        out = dg.ops.scatter_reduce(ts[0], idx, ts[1], axis=-1, reduction=reduction)
        c = np.random.default_rng(3).standard_normal(out.shape)
        return dg.ops.sum(dg.tensor(c) * out * out)
    _check_fn_grad(fn, [_x(2, 4), _x(2, 3, seed=1)], order=2)


@pytest.mark.parametrize("op, inputs, attrs", [
    ("Gather", [_x(5, 3), _idx([1, -4, 1])], {"axis": 0}),
    ("Slice", [_x(6, 5)], {"starts": [-1], "ends": [INT64_MIN], "steps": [-2]}),
    ("Transpose", [_x(2, 3, 4)], {"perm": [2, 0, 1]}),
    ("Reshape", [_x(2, 3)], {"shape": [-1]}),
], ids=["Gather", "Slice", "Transpose", "Reshape"])
def test_second_order_kit(op, inputs, attrs):
    """The kit's check: the rule runs under an outer tape without error (its
    Hessian is zero for a linear op). Concat is covered by
    test_second_order_concat only (the kit cannot call variadic ops)."""
    OpCase.of(op, inputs, attrs=attrs).check_grad(order=2)


# ------------------------------------------------------------------ special cases


def test_split_unused_outputs():
    """Outputs that do not reach the loss contribute zeros, not errors."""
    import dragon_core as dg

    c0, c2 = _x(3, 1, seed=5), _x(3, 3, seed=6)

    def fn(ts):
        a, _, b = dg.ops.split(ts[0], [1, 2, 3], axis=-1)
        return dg.ops.sum(a * dg.tensor(c0)) + dg.ops.sum(b * dg.tensor(c2))
    _check_fn_grad(fn, [_x(3, 6)])

    x = dg.tensor(_x(3, 6))
    with dg.GradientTape() as tape:
        tape.watch(x)
        loss = fn([x])
    got = tape.gradient(loss, x).numpy()
    np.testing.assert_array_equal(got[:, 1:3], 0.0)
    np.testing.assert_array_equal(got[:, 0:1], c0)


def test_gather_accumulates_duplicates():
    """Each index receives the sum of the output gradients that read it."""
    import dragon_core as dg

    x = dg.tensor(_x(4, 2))
    idx = _idx([3, -1, 0, 3])
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = dg.ops.gather(x, dg.tensor(idx), 0)
    dy = _x(4, 2, seed=9)
    got = tape.gradient(y, x, output_gradients=dg.tensor(dy)).numpy()
    want = np.zeros((4, 2))
    np.add.at(want, idx, dy)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_gradient_matches_numpy_adjoint(mode):
    """<pad(x), dy> == <x, grad>: the gradient is the exact adjoint of
    np.pad, on a 3-D input with padding on every axis."""
    import dragon_core as dg

    pads = ((2, 1), (0, 3), (1, 1))   # (before, after) per axis, as np.pad
    x = _x(3, 4, 2)
    dy = _x(6, 7, 4, seed=4)
    t = dg.tensor(x)
    with dg.GradientTape() as tape:
        tape.watch(t)
        y = dg.ops.pad(t, pads, mode=mode)
    got = tape.gradient(y, t, output_gradients=dg.tensor(dy)).numpy()
    # Column k of the Jacobian of np.pad is np.pad of the k-th unit vector.
    want = np.array([np.sum(np.pad(e.reshape(x.shape), pads,
                                   mode=mode) * dy) for e in np.eye(x.size)])
    np.testing.assert_allclose(got.reshape(-1), want, rtol=1e-12, atol=1e-12)


def test_empty_input_gets_empty_gradient():
    import dragon_core as dg

    a, b = dg.tensor(np.zeros((0, 3))), dg.tensor(_x(2, 3))
    with dg.GradientTape() as tape:
        tape.watch([a, b])
        loss = dg.ops.sum(dg.ops.concat([a, b], 0))
    ga, gb = tape.gradient(loss, [a, b])
    assert ga.shape == (0, 3) and gb.shape == (2, 3)
