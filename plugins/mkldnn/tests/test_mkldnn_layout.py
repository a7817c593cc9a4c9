"""The blocked-layout ops (src/layout.cc) and the nchw16c graph pass
(python/dragon_mkldnn/_layout.py): values against float64 NumPy references,
NaN semantics, clean errors, and the pass on small inference graphs
(equal to the same graph without it, reorders only where a plain tensor is
read, training graphs left alone)."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import check_bad_inputs
from tests.ops.test_conv import conv2d_ref


def blocked(a: np.ndarray) -> np.ndarray:
    """[N, C, H, W] -> [N, C/16, H, W, 16], the memory order of nChw16c."""
    n, c, h, w = a.shape
    return a.reshape(n, c // 16, 16, h, w).transpose(0, 1, 3, 4, 2).copy()


def plain(b: np.ndarray) -> np.ndarray:
    n, cb, h, w, _ = b.shape
    return b.transpose(0, 1, 4, 2, 3).reshape(n, cb * 16, h, w)


def max_pool_ref(x, k, s, p, d=(1, 1)):
    """Max pooling in float64 that lets NaN win its window (the core's)."""
    n, c, h, w = x.shape
    oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    y = np.full((n, c, oh, ow), -np.inf)
    for i in range(oh):
        for j in range(ow):
            for a in range(k[0]):
                r = i * s[0] - p[0] + a * d[0]
                for b in range(k[1]):
                    q = j * s[1] - p[1] + b * d[1]
                    if 0 <= r < h and 0 <= q < w:
                        cell = x[:, :, r, q]
                        cur = y[:, :, i, j]
                        y[:, :, i, j] = np.where(np.isnan(cell) | np.isnan(cur),
                                                 np.nan, np.maximum(cur, cell))
    return y


RNG = np.random.default_rng(11)


# ------------------------------------------------------------------ ops

@pytest.mark.parametrize("shape", [(2, 32, 5, 7), (1, 16, 1, 1), (0, 16, 3, 3)])
def test_reorders_round_trip(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    b = dg.ops.nchw16c_from_nchw(dg.tensor(x)).numpy()
    np.testing.assert_array_equal(b, blocked(x))
    np.testing.assert_array_equal(dg.ops.nchw_from_nchw16c(dg.tensor(b)).numpy(), x)


CONVS = [  # x shape, w shape, bias, attrs
    ((2, 32, 9, 8), (48, 32, 3, 3), True, {"pads": [1, 1]}),
    ((1, 16, 10, 11), (16, 16, 3, 2), False,
     {"strides": [2, 3], "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ((2, 3, 12, 12), (32, 3, 7, 7), True, {"strides": [2, 2], "pads": [3, 3]}),  # stem
    ((2, 64, 4, 4), (128, 64, 1, 1), True, {"strides": [2, 2]}),                 # 1x1
]


@pytest.mark.parametrize("activation", ["none", "relu"])
@pytest.mark.parametrize("xs, ws, bias, attrs", CONVS)
def test_conv_matches_reference(xs, ws, bias, attrs, activation):
    x = RNG.uniform(-1, 1, xs).astype(np.float32)
    w = RNG.uniform(-1, 1, ws).astype(np.float32)
    b = RNG.uniform(-1, 1, ws[0]).astype(np.float32) if bias else None
    xin = blocked(x) if xs[1] % 16 == 0 else x
    args = [dg.tensor(xin), dg.tensor(w)] + ([dg.tensor(b)] if bias else [])
    y = dg.ops.conv2d_nchw16c(*args, activation=activation,
                              **dg.plugin_api.py_attrs("Conv2dNchw16c", attrs)).numpy()
    want = conv2d_ref(x.astype(float), w.astype(float),
                      None if b is None else b.astype(float), **attrs)
    if activation == "relu":
        want = np.maximum(want, 0)
    np.testing.assert_allclose(plain(y), want, rtol=1e-4, atol=1e-4)


def test_conv_relu_keeps_nan():
    x = np.ones((1, 16, 3, 3), np.float32)
    x[0, 0, 1, 1] = np.nan
    w = np.ones((16, 16, 1, 1), np.float32)
    y = plain(dg.ops.conv2d_nchw16c(dg.tensor(blocked(x)), dg.tensor(w),
                                    activation="relu").numpy())
    assert np.isnan(y[0, :, 1, 1]).all()
    assert not np.isnan(np.delete(y.reshape(16, 9), 4, axis=1)).any()


@pytest.mark.parametrize("k, s, p, d, nan_at", [
    ((3, 3), (2, 2), (1, 1), (1, 1), None),
    ((3, 3), (2, 2), (1, 1), (1, 1), (1, 20, 4, 4)),
    ((2, 2), (2, 2), (0, 0), (1, 1), (0, 3, 0, 0)),
    ((3, 2), (1, 2), (1, 1), (2, 1), (1, 31, 6, 5)),
])
def test_max_pool_matches_reference_with_nan(k, s, p, d, nan_at):
    """NaN wins its window (the kernel fixes oneDNN's result up, since no
    other kernel serves the blocked op); padded cells never win."""
    x = RNG.standard_normal((2, 32, 7, 6)).astype(np.float32)
    if nan_at:
        x[nan_at] = np.nan
    y = dg.ops.max_pool2d_nchw16c(dg.tensor(blocked(x)), kernel_size=list(k),
                                  strides=list(s), pads=list(p),
                                  dilations=list(d)).numpy()
    want = max_pool_ref(x.astype(float), k, s, p, d)
    np.testing.assert_array_equal(plain(y), want.astype(np.float32))
    assert np.isnan(want).any() == (nan_at is not None)   # the case tests NaN


@pytest.mark.parametrize("call, words", [
    (lambda: dg.ops.nchw16c_from_nchw(dg.tensor(np.ones((1, 8, 2, 2), np.float32))),
     ["Nchw16cFromNchw", "multiple of 16", "[1, 8, 2, 2]"]),
    (lambda: dg.ops.nchw_from_nchw16c(dg.tensor(np.ones((1, 2, 2, 2), np.float32))),
     ["NchwFromNchw16c", "blocked"]),
    (lambda: dg.ops.conv2d_nchw16c(dg.tensor(np.ones((1, 1, 4, 4, 16), np.float32)),
                                   dg.tensor(np.ones((24, 16, 3, 3), np.float32))),
     ["Conv2dNchw16c", "multiple of 16", "[24, 16, 3, 3]"]),
    (lambda: dg.ops.conv2d_nchw16c(dg.tensor(np.ones((1, 1, 4, 4, 16), np.float32)),
                                   dg.tensor(np.ones((16, 16, 3, 3), np.float32)),
                                   groups=2),
     ["Conv2dNchw16c", "groups"]),
    (lambda: dg.ops.conv2d_nchw16c(dg.tensor(np.ones((1, 20, 4, 4), np.float32)),
                                   dg.tensor(np.ones((16, 20, 3, 3), np.float32))),
     ["Conv2dNchw16c", "C < 16"]),
    (lambda: dg.ops.max_pool2d_nchw16c(dg.tensor(np.ones((1, 1, 4, 4, 16), np.float32)),
                                       kernel_size=[3, 3], pads=[2, 2]),
     ["MaxPool2dNchw16c", "pads"]),
])
def test_bad_inputs_name_the_op(call, words):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        call()
    for w in words:
        assert w in str(info.value), (w, str(info.value))


@pytest.mark.parametrize("op, inputs, attrs", [
    ("Nchw16cFromNchw", [np.ones((1, 16, 2, 2), np.float32)], {}),
    ("NchwFromNchw16c", [np.ones((1, 1, 2, 2, 16), np.float32)], {}),
    ("Conv2dNchw16c", [np.ones((1, 1, 4, 4, 16), np.float32),
                       np.ones((16, 16, 3, 3), np.float32),
                       np.ones((16,), np.float32)], {}),
    ("MaxPool2dNchw16c", [np.ones((1, 1, 4, 4, 16), np.float32)], {"kernel_size": [2, 2]}),
])
def test_bad_input_variants_fail_cleanly(op, inputs, attrs):
    """The SDK kit's variants (None, wrong dtypes, ranks, garbage
    attributes) in a child process: named errors, no crash."""
    check_bad_inputs(op, inputs, **attrs)


def test_the_ops_have_no_gradient():
    """DG_OP_NO_GRAD: nothing flows back through them (the pass rewrites
    inference graphs only), as through any non-differentiable op."""
    x = dg.tensor(np.ones((1, 16, 2, 2), np.float32))
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = dg.ops.sum(dg.ops.nchw16c_from_nchw(x))
    assert tape.gradient(y, [x]) == [None]
    assert all(dg._C.op(op).describe()["no_grad"] for op in
               ("Nchw16cFromNchw", "NchwFromNchw16c", "Conv2dNchw16c", "MaxPool2dNchw16c"))


# ------------------------------------------------------------------ pass

def _net(rng):
    """stem conv (3 -> 16) + relu -> max pool -> two 16 -> 16 convs with a
    residual add + relu -> a 16 -> 32 conv; the head reads it plainly."""
    w = [rng.uniform(-0.3, 0.3, s).astype(np.float32) for s in
         [(16, 3, 3, 3), (16, 16, 3, 3), (16, 16, 3, 3), (32, 16, 1, 1)]]
    b = [rng.uniform(-0.1, 0.1, s[0]).astype(np.float32) for s in
         [(16,), (16,), (16,), (32,)]]
    W, B = [dg.tensor(a) for a in w], [dg.tensor(a) for a in b]
    relu, conv = dg.ops.relu, dg.ops.conv2d

    def f(x):
        h = relu(conv(x, W[0], B[0], pads=[1, 1]))
        h = dg.nn.functional.max_pool2d(h, 3, 2, 1)
        r = relu(conv(h, W[1], B[1], pads=[1, 1]))
        r = conv(r, W[2], B[2], pads=[1, 1])
        h = relu(r + h)
        y = conv(h, W[3], B[3])
        return dg.ops.sum(y, axis=[2, 3]), h
    return f


def test_pass_rewrites_inference_graphs_and_keeps_values():
    rng = np.random.default_rng(0)
    f = _net(rng)
    x = dg.tensor(rng.standard_normal((2, 3, 16, 16)).astype(np.float32))
    fast = dg.function(f, freeze=True)
    slow = dg.function(f, freeze=True, disable_passes="nchw16c")
    types = [op.type for op in fast.get_graph(x).op]
    assert "nchw16c" in fast.get_graph(x).metadata["passes"]
    assert types.count("Conv2dNchw16c") == 4 and "MaxPool2dNchw16c" in types
    # No reorder between blocked ops: none enters (the stem reads its plain
    # input), two leave: the head's Sum reads y, and h is a graph output.
    assert "Nchw16cFromNchw" not in types
    assert types.count("NchwFromNchw16c") == 2
    assert not any(t.startswith("Conv2d") and "Nchw16c" not in t for t in types)
    assert "Conv2dNchw16c" not in [op.type for op in slow.get_graph(x).op]
    for _ in range(2):           # twice: the second run uses packed weights
        for a, b in zip(fast(x), slow(x)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)
    ops = {op.type: op for op in fast.get_graph(x).op}
    assert ops["Conv2dNchw16c"].plugin == "mkldnn"        # saved graphs name it


def test_pass_leaves_training_graphs_alone():
    rng = np.random.default_rng(1)
    w = dg.tensor(rng.uniform(-0.3, 0.3, (16, 16, 3, 3)).astype(np.float32))
    x = dg.tensor(rng.standard_normal((1, 16, 6, 6)).astype(np.float32))

    @dg.function
    def step(x):
        with dg.GradientTape() as tape:
            tape.watch(w)
            loss = dg.ops.sum(dg.ops.relu(dg.ops.conv2d(x, w, pads=[1, 1])))
        w.assign(w - 0.01 * tape.gradient(loss, [w])[0])
        return loss

    types = [op.type for op in step.get_graph(x).op]
    assert not any("Nchw16c" in t for t in types), types


def test_pass_skips_what_it_cannot_block():
    """float64, grouped convolutions and 8 output channels stay plain."""
    rng = np.random.default_rng(2)
    for xs, ws, dtype, groups in [((1, 16, 5, 5), (16, 16, 3, 3), np.float64, 1),
                                  ((1, 16, 5, 5), (16, 8, 3, 3), np.float32, 2),
                                  ((1, 16, 5, 5), (8, 16, 3, 3), np.float32, 1)]:
        w = dg.tensor(rng.standard_normal(ws).astype(dtype))
        x = dg.tensor(rng.standard_normal(xs).astype(dtype))
        f = dg.function(lambda t: dg.ops.conv2d(t, w, groups=groups), freeze=True)
        types = [op.type for op in f.get_graph(x).op]
        assert not any("Nchw16c" in t for t in types), (xs, ws, dtype, types)
        np.testing.assert_allclose(f(x).numpy(), dg.ops.conv2d(x, w, groups=groups).numpy())


def test_strided_blocked_input_is_read_correctly():
    """A strided 5-D input is made dense by the core (the blocked op takes
    no strided inputs) rather than read as if it were dense."""
    rng = np.random.default_rng(5)
    base = rng.standard_normal((1, 1, 4, 16, 4)).astype(np.float32)
    x = dg.from_numpy(base.transpose(0, 1, 2, 4, 3))        # strided view
    w = dg.tensor(rng.standard_normal((16, 16, 3, 3)).astype(np.float32))
    dense = dg.tensor(np.ascontiguousarray(base.transpose(0, 1, 2, 4, 3)))
    np.testing.assert_array_equal(dg.ops.conv2d_nchw16c(x, w, pads=[1, 1]).numpy(),
                                  dg.ops.conv2d_nchw16c(dense, w, pads=[1, 1]).numpy())


@pytest.mark.parametrize("call, words", [
    (lambda: dg.ops.max_pool2d_nchw16c(dg.tensor(np.ones((1, 1, 0, 4, 16), np.float32)),
                                       kernel_size=[2, 2], pads=[1, 1]),
     ["MaxPool2dNchw16c", "empty spatial axis"]),
    (lambda: dg.ops.max_pool2d_nchw16c(dg.tensor(np.ones((1, 1, 2, 2, 16), np.float32)),
                                       kernel_size=[2, 2], pads=[1, 1], dilations=[3, 3]),
     ["MaxPool2dNchw16c", "covers only padding"]),
    (lambda: dg.ops.conv2d_nchw16c(dg.tensor(np.ones((1, 1, 4, 4, 16), np.float32)),
                                   dg.tensor(np.ones((16, 16, 0, 3), np.float32))),
     ["Conv2dNchw16c", "kh, kw >= 1"]),
    (lambda: dg.ops.conv2d_nchw16c(dg.tensor(np.ones((1, 1, 0, 4, 16), np.float32)),
                                   dg.tensor(np.ones((16, 16, 3, 3), np.float32)),
                                   pads=[1, 1]),
     ["Conv2dNchw16c", "empty"]),
])
def test_geometries_the_core_rejects_are_rejected(call, words):
    """The blocked ops refuse what MaxPool2d / Conv2d refuse (or what only
    the plain op serves), with a named error instead of garbage."""
    test_bad_inputs_name_the_op(call, words)


def test_pass_keeps_empty_convolutions_plain():
    """An input with no rows (the output is the bias only) stays with the
    plain op, which cpu_eigen serves; the blocked op would have no kernel."""
    rng = np.random.default_rng(6)
    w = dg.tensor(rng.standard_normal((16, 16, 3, 3)).astype(np.float32))
    b = dg.tensor(rng.standard_normal(16).astype(np.float32))
    x = dg.tensor(np.zeros((1, 16, 0, 4), np.float32))
    conv = lambda t: dg.ops.conv2d(t, w, b, pads=[2, 2])  # noqa: E731
    f = dg.function(conv, freeze=True)
    np.testing.assert_array_equal(f(x).numpy(), conv(x).numpy())
    assert "Conv2dNchw16c" not in [op.type for op in f.get_graph(x).op]


def test_pass_keeps_fusion_annotations():
    """dg.fusion.fused_ops still reports what pattern fusion merged."""
    rng = np.random.default_rng(7)
    w = dg.tensor(rng.standard_normal((16, 16, 3, 3)).astype(np.float32))
    b = dg.tensor(rng.standard_normal(16).astype(np.float32))
    x = dg.tensor(rng.standard_normal((1, 16, 5, 5)).astype(np.float32))
    f = dg.function(lambda t: dg.ops.relu(dg.ops.conv2d(t, w, b, pads=[1, 1])),
                    freeze=True)
    fused = dg.fusion.fused_ops(f.get_graph(x))
    assert len(fused) == 1
    (op_type, members), = fused.values()
    assert op_type == "Conv2dNchw16c" and len(members) == 2


def test_frozen_weights_written_after_tracing_do_not_go_stale():
    """The graph owns a copy of its constants: a write into the frozen
    parameter (through numpy) changes neither the packed convolution nor
    the other ops that read it; all see the trace-time values."""
    rng = np.random.default_rng(8)
    w_np = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    w = dg.tensor(w_np.copy())
    x = dg.tensor(rng.standard_normal((1, 16, 6, 6)).astype(np.float32))
    f = dg.function(lambda t: (dg.ops.conv2d(t, w, pads=[1, 1]), dg.ops.sum(w)),
                    freeze=True)
    y0, s0 = f(x)
    w.numpy()[:] = 0.0
    y1, s1 = f(x)
    np.testing.assert_array_equal(y1.numpy(), y0.numpy())
    assert float(s1.numpy()) == float(s0.numpy()) != 0.0


@pytest.mark.parametrize("k, s, p", [((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 2), (1, 1))])
def test_max_pool_window_of_negative_infinity(k, s, p):
    """A window of only -inf gives -inf (oneDNN left -FLT_MAX there; the
    blocked kernel fixes it up), also beside NaN windows; a window whose
    maximum is -FLT_MAX itself keeps it."""
    x = RNG.standard_normal((1, 16, 6, 6)).astype(np.float32)
    x[:, :8, :4, :4] = -np.inf
    x[0, 3, 1, 1] = np.nan
    x[0, 5, 0, 0] = -np.finfo(np.float32).max
    y = dg.ops.max_pool2d_nchw16c(dg.tensor(blocked(x)), kernel_size=list(k),
                                  strides=list(s), pads=list(p)).numpy()
    want = max_pool_ref(x.astype(float), k, s, p).astype(np.float32)
    np.testing.assert_array_equal(plain(y), want)
    assert np.isneginf(want).any() and np.isnan(want).any()
    assert (want == -np.finfo(np.float32).max).any()
