"""Ops written in Python (dragon_core.custom_op): NumPy kernels and Python
shape rules dispatched by the same registry and rules as plugin kernels.

Every op defined here is removed when its test ends (the ``define``
fixture), so the registry-wide checks of other test modules never see it.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import errors

_counter = itertools.count()


@pytest.fixture
def define():
    """``define(base, **kw)(fn)``: custom_op under a name unique to the
    test; everything defined is removed at teardown."""
    names = []

    def make(base, **kw):
        name = f"{base}T{next(_counter)}"
        names.append(name)

        def register(fn):
            return dg.custom_op(name, **kw)(fn)
        return register

    yield make
    for name in names:
        try:
            dg.custom_op.remove(name)
        except LookupError:
            pass


def _swish(x, beta=1.0):
    return x / (1 + np.exp(-beta * x))


def _swish_op(define, **kw):
    @define("Swish", attrs={"beta": 1.0}, **kw)
    def swish(x, beta):
        """Swish: x * sigmoid(beta * x)."""
        return x / (1 + np.exp(-beta * x))
    return swish


def _rand(*shape, dtype="float64", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ------------------------------------------------------------ forward


def test_forward_matches_numpy_and_the_op_is_in_dg_ops(define):
    op = _swish_op(define)
    name = op._dragon_op
    x = _rand(3, 4)
    y = op(dg.tensor(x))
    assert isinstance(y, dg.Tensor) and y.shape == (3, 4) and y.dtype == "float64"
    np.testing.assert_allclose(y.numpy(), _swish(x), rtol=1e-12)
    # Generated like any op: dg.ops.<snake_name>, with a real signature and doc.
    import inspect
    fn = getattr(dg.ops, dg._C.op(name).py_name)
    assert fn is op
    assert list(inspect.signature(fn).parameters) == ["x", "beta"]
    assert inspect.signature(fn).parameters["beta"].default == 1.0
    assert "Swish: x * sigmoid" in fn.__doc__
    assert fn.numpy_kernel(x, 1.0).shape == (3, 4)


def test_attrs_reach_the_kernel(define):
    op = _swish_op(define)
    x = _rand(5)
    for beta in (0.5, 2.0, -1.0):
        np.testing.assert_allclose(op(dg.tensor(x), beta=beta).numpy(), _swish(x, beta),
                                   rtol=1e-12)


def test_attribute_types_defaults_and_required(define):
    seen = {}

    @define("Attrs", attrs={"k": int, "scale": 2.0, "flag": False, "mode": "a",
                            "axes": [0, 1], "ws": [0.5, 1.5]})
    def attrs_op(x, k, scale, flag, mode, axes, ws):
        seen.update(k=k, scale=scale, flag=flag, mode=mode, axes=axes, ws=ws)
        return x * scale

    x = dg.tensor(_rand(2, 2))
    attrs_op(x, 3)
    assert seen == {"k": 3, "scale": 2.0, "flag": False, "mode": "a", "axes": [0, 1],
                    "ws": [0.5, 1.5]}
    attrs_op(x, k=1, flag=True, mode="b", axis=2, ws=[1.0])  # Python name of "axes"
    assert seen["flag"] is True and seen["mode"] == "b" and seen["axes"] == [2]
    with pytest.raises(errors.InvalidArgumentError, match="'k'"):
        attrs_op(x, "no")


def test_multiple_outputs_and_inputs(define):
    @define("SumDiff", inputs=["a", "b"], outputs=["s", "d"],
            shape=lambda a, b: [(a.shape, a.dtype), (a.shape, a.dtype)])
    def sum_diff(a, b):
        return a + b, a - b

    a, b = _rand(3, seed=1), _rand(3, seed=2)
    s, d = sum_diff(dg.tensor(a), dg.tensor(b))
    np.testing.assert_allclose(s.numpy(), a + b)
    np.testing.assert_allclose(d.numpy(), a - b)


def test_shape_rule_gives_a_new_shape_and_dtype(define):
    @define("RowNorm", shape=lambda x: [((x.shape[0],), "float64")], dtypes=["float32"])
    def row_norm(x):
        return np.sqrt((x.astype(np.float64) ** 2).sum(axis=1))

    x = _rand(4, 3, dtype="float32")
    y = row_norm(dg.tensor(x))
    assert y.shape == (4,) and y.dtype == "float64"
    np.testing.assert_allclose(y.numpy(), np.linalg.norm(x.astype(np.float64), axis=1))
    # Shape inference runs without the kernel.
    assert dg.infer_shape(row_norm._dragon_op, [((7, 2), "float32")]) == [((7,), "float64")]


# ------------------------------------------------------------ dtypes and errors


def test_dtypes_and_a_dtype_without_kernel_raises_no_kernel_error(define):
    op = _swish_op(define, dtypes=["float32"])
    name = op._dragon_op
    y = op(dg.tensor(_rand(3, dtype="float32")))
    assert y.dtype == "float32"
    with pytest.raises(errors.NoKernelError, match=name) as e:
        op(dg.tensor(_rand(3, dtype="float64")))
    assert e.value.op == name
    assert "python" in str(e.value)   # what is registered


def test_double_registration_is_a_clear_error(define):
    op = _swish_op(define)
    name = op._dragon_op
    with pytest.raises(errors.InvalidArgumentError, match=f"'{name}' is already defined"):
        dg.custom_op(name)(lambda x: x)
    with pytest.raises(errors.InvalidArgumentError, match="already registered"):
        dg.custom_op.kernel(name)(op.numpy_kernel)
    with pytest.raises(errors.InvalidArgumentError, match="both claim"):
        dg.custom_op.kernel(name, name="other")(op.numpy_kernel)
    # Removing makes the name free again (a notebook cell run twice).
    py_name = dg._C.op(name).py_name
    dg.custom_op.remove(name)
    assert py_name not in vars(dg.ops)
    with pytest.raises(LookupError):
        dg._C.op(name)
    again = dg.custom_op(name)(lambda x: x * 3)
    np.testing.assert_allclose(again(dg.tensor(np.ones(2))).numpy(), [3.0, 3.0])
    with pytest.raises(errors.InvalidArgumentError, match="not an op defined from Python"):
        dg.custom_op.remove("Add")


def test_shape_rule_errors_name_the_op(define):
    def rule(x, axis):
        if not -len(x.shape) <= axis < len(x.shape):
            raise ValueError(f"axis {axis} out of range")
        return [(x.shape, x.dtype)]

    @define("Checked", attrs={"axis": 0}, shape=rule)
    def checked(x, axis):
        return x

    name = checked._dragon_op
    with pytest.raises(errors.InvalidArgumentError, match=f"{name}.*axis 5 out of range") as e:
        checked(dg.tensor(_rand(2, 2)), axis=5)
    assert e.value.op == name

    @define("BadRule", shape=lambda x: [(x.shape, x.dtype), (x.shape, x.dtype)])
    def bad_rule(x):
        return x
    with pytest.raises(errors.InvalidArgumentError, match="returned 2 .* for 1 output"):
        bad_rule(dg.tensor(_rand(2)))

    @define("CrashRule", shape=lambda x: 1 / 0)
    def crash_rule(x):
        return x
    with pytest.raises(errors.DragonError, match="ZeroDivisionError") as e:
        crash_rule(dg.tensor(_rand(2)))
    assert "Traceback" in str(e.value) and e.value.op == crash_rule._dragon_op


def test_kernel_returning_a_wrong_shape_or_dtype_is_a_clear_error(define):
    @define("WrongShape")
    def wrong_shape(x):
        return x[:-1]

    @define("WrongDtype")
    def wrong_dtype(x):
        return x.astype(np.float32)

    @define("WrongCount", outputs=["a", "b"],
            shape=lambda x: [(x.shape, x.dtype)] * 2)
    def wrong_count(x):
        return x

    x = dg.tensor(_rand(4))
    with pytest.raises(errors.DragonError, match=r"float64\[3\] for output 'y'.*float64\[4\]") as e:
        wrong_shape(x)
    assert e.value.op == wrong_shape._dragon_op and e.value.kernel == "wrong_shape"
    with pytest.raises(errors.DragonError, match=r"returned float32\[4\].*float64\[4\]"):
        wrong_dtype(x)
    with pytest.raises(errors.DragonError, match="the op has 2 outputs"):
        wrong_count(x)


def test_python_exception_in_the_kernel_becomes_a_dragon_error(define):
    @define("Raises")
    def raises(x):
        def helper():
            raise RuntimeError("boom from the kernel")
        helper()

    with pytest.raises(errors.KernelError) as e:
        raises(dg.tensor(_rand(3)))
    text = str(e.value)
    assert isinstance(e.value, errors.DragonError)
    assert e.value.op == raises._dragon_op and e.value.plugin == "python"
    assert "boom from the kernel" in text and "Traceback" in text and "helper" in text
    # The process is alive and the op still works for a good call.
    assert dg.ops.add(dg.tensor([1.0]), dg.tensor([2.0])).numpy()[0] == 3.0

    @define("RaisesValue")
    def raises_value(x):
        raise ValueError("bad value")
    with pytest.raises(errors.InvalidArgumentError, match="bad value"):
        raises_value(dg.tensor(_rand(3)))


def test_inputs_are_zero_copy_read_only_views(define):
    seen = {}

    @define("Peek")
    def peek(x):
        seen["ptr"] = x.__array_interface__["data"][0]
        seen["writeable"] = x.flags.writeable
        return x.copy()

    t = dg.tensor(_rand(8))
    peek(t)
    assert seen["ptr"] == t.numpy().__array_interface__["data"][0]
    assert seen["writeable"] is False


def test_errors_in_a_subprocess_never_crash_the_interpreter(tmp_path):
    code = (
        "import numpy as np, dragon_core as dg\n"
        "@dg.custom_op('Boom')\n"
        "def boom(x):\n"
        "    raise KeyboardInterrupt\n"
        "try:\n"
        "    boom(dg.tensor(np.ones(2)))\n"
        "except dg.errors.DragonError as e:\n"
        "    print('caught', type(e).__name__)\n"
        "f = dg.function(lambda x: boom(x), parallel=2)\n"
        "try:\n"
        "    f(dg.tensor(np.ones(2)))\n"
        "except dg.errors.DragonError as e:\n"
        "    print('caught in graph')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "caught InternalError" in r.stdout or "caught KernelInternalError" in r.stdout
    assert "caught in graph" in r.stdout


# ------------------------------------------------------------ autograd


def _finite_difference(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        p, m = x.copy(), x.copy()
        p.reshape(-1)[i] += eps
        m.reshape(-1)[i] -= eps
        g.reshape(-1)[i] = (f(p) - f(m)) / (2 * eps)
    return g


def _register_swish_grad(op):
    @dg.custom_op.gradient(op._dragon_op)
    def _(node, dy):
        x, beta = node.inputs[0], node.attrs["beta"]
        s = dg.ops.sigmoid(x * beta)
        return [dy * (s + x * beta * s * (1.0 - s))]


def test_gradient_rule_matches_finite_differences(define):
    op = _swish_op(define)
    _register_swish_grad(op)
    x = _rand(3, 4)
    c = _rand(3, 4, seed=5)

    def loss(a):
        return float((op.numpy_kernel(a, 1.5) * c).sum())

    xt = dg.tensor(x)
    with dg.GradientTape() as tape:
        tape.watch(xt)
        y = dg.ops.sum(op(xt, beta=1.5) * dg.tensor(c))
    (gx,) = tape.gradient(y, [xt])
    np.testing.assert_allclose(gx.numpy(), _finite_difference(loss, x), rtol=1e-6, atol=1e-8)
    # PyTorch-style leaves too.
    xl = dg.tensor(x)
    xl.requires_grad = True
    dg.ops.sum(op(xl, beta=1.5) * dg.tensor(c)).backward()
    np.testing.assert_allclose(xl.grad.numpy(), gx.numpy(), rtol=1e-12)


def test_second_order_through_a_rule_written_with_ops(define):
    op = _swish_op(define)
    _register_swish_grad(op)
    x = _rand(5)
    xt = dg.tensor(x)
    with dg.GradientTape() as outer:
        outer.watch(xt)
        with dg.GradientTape() as inner:
            inner.watch(xt)
            y = dg.ops.sum(op(xt))
        (g,) = inner.gradient(y, [xt])
        gs = dg.ops.sum(g)
    (h,) = outer.gradient(gs, [xt])

    def first(a):
        s = 1 / (1 + np.exp(-a))
        return s + a * s * (1 - s)
    num = np.array([(first(v + 1e-6) - first(v - 1e-6)) / 2e-6 for v in x])
    np.testing.assert_allclose(h.numpy(), num, rtol=1e-5, atol=1e-8)


def test_a_non_differentiable_op_is_not_recorded(define):
    @define("Floorish", differentiable=False)
    def floorish(x):
        return np.floor(x)
    x = dg.tensor(_rand(3))
    x.requires_grad = True
    y = floorish(x)
    assert y._grad_fn is None and not y.requires_grad


# ------------------------------------------------------------ graph mode


def test_eager_equals_function_graph(define):
    op = _swish_op(define)
    w = dg.tensor(_rand(4, 4, seed=3))

    def f(x):
        return dg.ops.sum(op(x @ w, beta=2.0) * 0.5, [1])

    x = dg.tensor(_rand(6, 4))
    eager = f(x).numpy()
    for level in (0, 3):
        g = dg.function(f, opt_level=level)
        np.testing.assert_allclose(g(x).numpy(), eager, rtol=1e-12)
        np.testing.assert_allclose(g(x).numpy(), eager, rtol=1e-12)   # cached plan
    graph = dg.function(f).get_graph(x)
    ops = {o.type: o for o in graph.op}
    assert op._dragon_op in ops and ops[op._dragon_op].plugin == "python"


def test_parallel_executor_runs_python_kernels_on_worker_threads(define):
    threads = set()

    @define("Tagged", attrs={"k": 1.0})
    def tagged(x, k):
        threads.add(threading.get_ident())
        return x * k

    def f(x):
        outs = [tagged(x, k=float(i)) for i in range(8)]
        total = outs[0]
        for o in outs[1:]:
            total = total + o
        return total

    x = dg.tensor(_rand(16))
    g = dg.function(f, parallel=2)
    np.testing.assert_allclose(g(x).numpy(), x.numpy() * sum(range(8)), rtol=1e-12)
    threads.clear()                   # the trace ran the ops on this thread
    for _ in range(3):
        np.testing.assert_allclose(g(x).numpy(), x.numpy() * sum(range(8)), rtol=1e-12)
    assert threads and threading.get_ident() not in threads   # the executor's workers


def test_graph_errors_from_python_kernels(define):
    @define("RaisesInGraph")
    def raises_in_graph(x):
        raise RuntimeError("graph boom")
    g = dg.function(lambda x: raises_in_graph(x * 2.0))
    with pytest.raises(errors.DragonError, match="graph boom"):
        g(dg.tensor(_rand(2)))


def test_gradient_inside_a_function_graph(define):
    op = _swish_op(define)
    _register_swish_grad(op)

    def f(x):
        with dg.GradientTape() as tape:
            tape.watch(x)
            y = dg.ops.sum(op(x))
        return tape.gradient(y, [x])[0]

    x = dg.tensor(_rand(4))
    np.testing.assert_allclose(dg.function(f)(x).numpy(), f(x).numpy(), rtol=1e-12)


# ------------------------------------------------------------ selection


def test_explain_pin_and_priority_with_a_second_python_kernel(define):
    op = _swish_op(define)
    name = op._dragon_op
    text = dg.plugins.explain(name, "cpu", "float64")
    assert "swish" in text and "plugin python" in text and "only candidate" in text

    @dg.custom_op.kernel(name, priority=5, name="swish_fast")
    def swish_fast(x, beta):
        return np.full_like(x, 42.0)          # recognisable result

    x = dg.tensor(_rand(3))
    np.testing.assert_array_equal(op(x).numpy(), [42.0] * 3)   # priority 5 wins
    text = dg.plugins.explain(name, "cpu", "float64")
    assert "* 1. swish_fast [plugin python] priority=5" in text
    assert "2. swish [plugin python] priority=0" in text
    assert "winner: swish_fast" in text and "priority 5 beats 0" in text
    assert [k["name"] for k in dg.plugins.kernels(name)] == ["swish", "swish_fast"]

    dg.plugins.pin(name, "cpu", "swish")      # a pin beats priority
    try:
        np.testing.assert_allclose(op(x).numpy(), _swish(x.numpy()), rtol=1e-12)
        assert "pinned" in dg.plugins.explain(name, "cpu", "float64")
    finally:
        dg.plugins.unpin(name, "cpu")
    np.testing.assert_array_equal(op(x).numpy(), [42.0] * 3)


def test_kernels_of_different_plugins_and_dtype_specificity(define):
    op = _swish_op(define)                  # plugin "python", float32 + float64
    name = op._dragon_op

    @dg.custom_op.kernel(name, dtypes=["float64"], plugin="proto_b", name="swish_f64")
    def swish_f64(x, beta):
        return np.zeros_like(x)

    x64, x32 = dg.tensor(_rand(3)), dg.tensor(_rand(3, dtype="float32"))
    # Same priority: the more dtype-specific kernel wins for float64 ...
    np.testing.assert_array_equal(op(x64).numpy(), [0.0] * 3)
    assert "more dtype-specific" in dg.plugins.explain(name, "cpu", "float64")
    # ... and float32 has only the first kernel.
    np.testing.assert_allclose(op(x32).numpy(), _swish(x32.numpy()), rtol=1e-6)
    # A pin to a plugin without a float32 kernel never falls back.
    dg.plugins.pin(name, "cpu", "proto_b")
    try:
        with pytest.raises(errors.FailedPreconditionError, match="pinned to 'proto_b'"):
            op(x32)
    finally:
        dg.plugins.unpin(name, "cpu")


@pytest.mark.skipif(os.environ.get("DRAGON_TEST_DEVICE", "cpu") != "cpu",
                    reason="Python kernels run on cpu")
def test_concurrent_eager_calls_from_threads(define):
    op = _swish_op(define)
    x = _rand(64)
    results, failures = [], []

    def work():
        try:
            for _ in range(20):
                results.append(op(dg.tensor(x)).numpy())
        except Exception as e:  # noqa: BLE001
            failures.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not failures
    for r in results:
        np.testing.assert_allclose(r, _swish(x), rtol=1e-12)
