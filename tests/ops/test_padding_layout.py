"""One padding layout for every op that pads (docs/python-api.md, "Padding").

``pads`` (``padding`` in nn.functional / nn modules) is an int, N ints (both
sides alike) or N ``(before, after)`` pairs, outermost axis first, as
``np.pad``'s ``pad_width``; Pad's pairs cover every axis. Each op is checked
in each form against float64 references written here from ``np.pad`` and a
plain (unpadded) convolution / pooling, forward and gradient (central
differences), and every old flat layout fails with an error that shows the
new form.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import _opgen
from dragon_core.errors import ArgumentTypeError, InvalidArgumentError

# ------------------------------------------------------------ references


def _pairs(pads, n):
    """Any accepted form -> N (before, after) pairs (the test's own reading
    of the convention, independent of _opgen)."""
    if isinstance(pads, int):
        return [(pads, pads)] * n
    pads = list(pads)
    if all(isinstance(p, int) for p in pads):
        return [(p, p) for p in pads]
    return [tuple(p) for p in pads]


def _tap_slices(tap, out, strides, dilations):
    return tuple(slice(t * d, t * d + s * (o - 1) + 1, s)
                 for t, o, s, d in zip(tap, out, strides, dilations))


def conv_ref(x, w, b=None, strides=None, pads=0, dilations=None, groups=1):
    """N-d cross-correlation of x zero-padded by np.pad: the VALID
    convolution of the padded input."""
    nd = x.ndim - 2
    strides, dilations = strides or [1] * nd, dilations or [1] * nd
    xp = np.pad(x, [(0, 0), (0, 0)] + _pairs(pads, nd))
    k = w.shape[2:]
    out = [(xp.shape[2 + i] - dilations[i] * (k[i] - 1) - 1) // strides[i] + 1
           for i in range(nd)]
    og, cg = w.shape[0] // groups, w.shape[1]
    y = np.zeros((x.shape[0], w.shape[0], *out))
    for tap in np.ndindex(*k):
        win = xp[(slice(None), slice(None)) + _tap_slices(tap, out, strides, dilations)]
        for g in range(groups):
            y[:, g * og:(g + 1) * og] += np.einsum(
                "nc...,oc->no...", win[:, g * cg:(g + 1) * cg],
                w[(slice(g * og, (g + 1) * og), slice(None)) + tap])
    if b is not None:
        y += b.reshape((1, -1) + (1,) * nd)
    return y


def conv_transpose_ref(x, w, b=None, strides=None, pads=0, dilations=None, groups=1,
                       output_padding=None):
    """Scatter of every input cell through the filter into the padded
    image, then the padding cut off (the adjoint of conv_ref)."""
    nd = x.ndim - 2
    strides, dilations = strides or [1] * nd, dilations or [1] * nd
    output_padding = output_padding or [0] * nd
    pairs = _pairs(pads, nd)
    k = w.shape[2:]
    full = [(x.shape[2 + i] - 1) * strides[i] + dilations[i] * (k[i] - 1) + 1
            + output_padding[i] for i in range(nd)]
    cg, og = x.shape[1] // groups, w.shape[1]
    y = np.zeros((x.shape[0], og * groups, *full))
    for tap in np.ndindex(*k):
        sl = _tap_slices(tap, x.shape[2:], strides, dilations)
        for g in range(groups):
            y[(slice(None), slice(g * og, (g + 1) * og)) + sl] += np.einsum(
                "nc...,co->no...", x[:, g * cg:(g + 1) * cg],
                w[(slice(g * cg, (g + 1) * cg), slice(None)) + tap])
    y = y[(slice(None), slice(None)) + tuple(
        slice(b_, f - a_) for (b_, a_), f in zip(pairs, full))]
    if b is not None:
        y += b.reshape((1, -1) + (1,) * nd)
    return y


def backprop_filter_ref(x, dy, filter_shape, strides=None, pads=0, dilations=None, groups=1):
    nd = x.ndim - 2
    strides, dilations = strides or [1] * nd, dilations or [1] * nd
    xp = np.pad(x, [(0, 0), (0, 0)] + _pairs(pads, nd))
    og, cg = filter_shape[0] // groups, filter_shape[1]
    dw = np.zeros(filter_shape)
    for tap in np.ndindex(*filter_shape[2:]):
        win = xp[(slice(None), slice(None)) + _tap_slices(tap, dy.shape[2:], strides,
                                                          dilations)]
        for g in range(groups):
            d = dy[:, g * og:(g + 1) * og].reshape(dy.shape[0], og, -1)
            v = win[:, g * cg:(g + 1) * cg].reshape(x.shape[0], cg, -1)
            dw[(slice(g * og, (g + 1) * og), slice(None)) + tap] = np.einsum("nop,ncp->oc", d, v)
    return dw


def pool_ref(kind, x, kernel_size, strides=None, pads=0, count_include_pad=True):
    """Max / average pooling as the VALID pooling of np.pad'ed x: -inf pads
    for the maximum; for the average, zeros over the window size
    (count_include_pad) or over the count of real cells."""
    nd = x.ndim - 2
    strides = strides or kernel_size
    pw = [(0, 0), (0, 0)] + _pairs(pads, nd)
    xp = np.pad(x, pw, constant_values=-np.inf if kind == "max" else 0.0)
    real = np.pad(np.ones(x.shape), pw)
    out = [(xp.shape[2 + i] - kernel_size[i]) // strides[i] + 1 for i in range(nd)]
    wins = [xp[(slice(None), slice(None)) + _tap_slices(t, out, strides, [1] * nd)]
            for t in np.ndindex(*kernel_size)]
    if kind == "max":
        return np.max(wins, axis=0)
    total = np.sum(wins, axis=0)
    if count_include_pad:
        return total / np.prod(kernel_size)
    count = np.sum([real[(slice(None), slice(None)) + _tap_slices(t, out, strides, [1] * nd)]
                    for t in np.ndindex(*kernel_size)], axis=0)
    return total / count


# ------------------------------------------------------------ helpers


def _rng(seed=0):
    return np.random.default_rng(seed)


def _distinct(shape, seed=0):
    """Distinct values (so a maximum has one winner and finite differences
    stay inside one piece)."""
    n = int(np.prod(shape))
    return (_rng(seed).permutation(n) * 0.37 - n * 0.1).reshape(shape)


def check_grad(fn, arrays, seed=1, eps=1e-6, tol=1e-6):
    """The tape's gradient of <fn(*arrays), c> against central differences,
    float64, for every input."""
    tensors = [dg.tensor(a) for a in arrays]
    with dg.GradientTape() as tape:
        tape.watch(tensors)
        y = fn(*tensors)
    c = _rng(seed).standard_normal(tuple(y.shape))
    grads = tape.gradient(y, tensors, output_gradients=dg.tensor(c))

    def value(args):
        return float(np.sum(fn(*[dg.tensor(a) for a in args]).numpy() * c))

    for i, a in enumerate(arrays):
        num = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            plus = [v.copy() for v in arrays]
            minus = [v.copy() for v in arrays]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            num[idx] = (value(plus) - value(minus)) / (2 * eps)
        np.testing.assert_allclose(grads[i].numpy(), num, rtol=tol, atol=tol,
                                   err_msg=f"gradient of input {i}")


# Each accepted form of the same padding, and an asymmetric one.
FORMS_2D = [
    ("int", 1, [(1, 1), (1, 1)]),
    ("n_ints", (1, 0), [(1, 1), (0, 0)]),
    ("n_pairs_symmetric", ((1, 1), (0, 0)), [(1, 1), (0, 0)]),
    ("asymmetric", ((1, 0), (0, 1)), [(1, 0), (0, 1)]),
    ("asymmetric_list", [[0, 1], [1, 0]], [(0, 1), (1, 0)]),
]
FORMS_3D = [
    ("int", 1, [(1, 1)] * 3),
    ("n_ints", [1, 0, 1], [(1, 1), (0, 0), (1, 1)]),
    ("asymmetric", ((1, 0), (0, 1), (1, 1)), [(1, 0), (0, 1), (1, 1)]),
]


@pytest.mark.parametrize("name, pads, pairs", FORMS_2D, ids=[f[0] for f in FORMS_2D])
def test_the_forms_mean_what_np_pad_means(name, pads, pairs):
    assert _opgen.pads_to_pairs("Conv2d", pads, 2) == tuple(pairs)
    assert _pairs(pads, 2) == pairs


# ------------------------------------------------------------ convolution


@pytest.mark.parametrize("name, pads, pairs", FORMS_2D, ids=[f[0] for f in FORMS_2D])
def test_conv2d_forms(name, pads, pairs):
    rng = _rng(2)
    x = rng.standard_normal((2, 4, 5, 6))
    w = rng.standard_normal((6, 2, 3, 2))
    b = rng.standard_normal(6)
    geo = {"strides": [2, 1], "dilations": [1, 2], "groups": 2}
    y = dg.ops.conv2d(dg.tensor(x), dg.tensor(w), dg.tensor(b), pads=pads, **geo)
    np.testing.assert_allclose(y.numpy(), conv_ref(x, w, b, pads=pairs, **geo),
                               rtol=1e-10, atol=1e-10)
    # the same call as a Tensor method and through nn.functional's padding
    np.testing.assert_allclose(dg.tensor(x).conv2d(dg.tensor(w), dg.tensor(b), pads=pads,
                                                   **geo).numpy(), y.numpy())
    f = dg.nn.functional.conv2d(dg.tensor(x), dg.tensor(w), dg.tensor(b), stride=(2, 1),
                                padding=pads, dilation=(1, 2), groups=2)
    np.testing.assert_allclose(f.numpy(), y.numpy())
    check_grad(lambda a, c: dg.ops.conv2d(a, c, pads=pads, **geo),
               [x[:1, :, :4, :4], w])


@pytest.mark.parametrize("name, pads, pairs", FORMS_2D, ids=[f[0] for f in FORMS_2D])
def test_conv_transpose2d_forms(name, pads, pairs):
    rng = _rng(3)
    x = rng.standard_normal((1, 2, 3, 4))
    w = rng.standard_normal((2, 3, 3, 2))
    geo = {"strides": [2, 2], "output_padding": [1, 0]}
    y = dg.ops.conv_transpose2d(dg.tensor(x), dg.tensor(w), pads=pads, **geo)
    np.testing.assert_allclose(y.numpy(), conv_transpose_ref(x, w, pads=pairs, **geo),
                               rtol=1e-10, atol=1e-10)
    f = dg.nn.functional.conv_transpose2d(dg.tensor(x), dg.tensor(w), stride=2,
                                          padding=pads, output_padding=(1, 0))
    np.testing.assert_allclose(f.numpy(), y.numpy())
    check_grad(lambda a, c: dg.ops.conv_transpose2d(a, c, pads=pads, **geo), [x, w])


@pytest.mark.parametrize("name, pads, pairs", FORMS_2D, ids=[f[0] for f in FORMS_2D])
def test_conv2d_backprop_filter_forms(name, pads, pairs):
    rng = _rng(4)
    x = rng.standard_normal((2, 2, 5, 4))
    fs = [3, 2, 2, 3]
    out = conv_ref(x, np.zeros(fs), pads=pairs, strides=[2, 1]).shape
    dy = rng.standard_normal(out)
    got = dg.ops.conv2d_backprop_filter(dg.tensor(x), dg.tensor(dy), fs, strides=[2, 1],
                                        pads=pads)
    np.testing.assert_allclose(got.numpy(), backprop_filter_ref(x, dy, fs, [2, 1], pairs),
                               rtol=1e-10, atol=1e-10)
    check_grad(lambda a, d: dg.ops.conv2d_backprop_filter(a, d, fs, strides=[2, 1],
                                                          pads=pads), [x, dy])


@pytest.mark.parametrize("name, pads, pairs", FORMS_3D, ids=[f[0] for f in FORMS_3D])
def test_conv3d_family_forms(name, pads, pairs):
    rng = _rng(5)
    x = rng.standard_normal((1, 2, 3, 4, 3))
    w = rng.standard_normal((2, 2, 2, 2, 3))
    y = dg.ops.conv3d(dg.tensor(x), dg.tensor(w), pads=pads, strides=[1, 2, 1])
    np.testing.assert_allclose(y.numpy(), conv_ref(x, w, pads=pairs, strides=[1, 2, 1]),
                               rtol=1e-10, atol=1e-10)
    t = dg.ops.conv_transpose3d(y, dg.tensor(w), pads=pads, strides=[1, 2, 1],
                                output_padding=[0, 1, 0])
    np.testing.assert_allclose(
        t.numpy(), conv_transpose_ref(y.numpy(), w, pads=pairs, strides=[1, 2, 1],
                                      output_padding=[0, 1, 0]), rtol=1e-10, atol=1e-10)
    f = dg.ops.conv3d_backprop_filter(dg.tensor(x), y, list(w.shape), pads=pads,
                                      strides=[1, 2, 1])
    np.testing.assert_allclose(f.numpy(), backprop_filter_ref(x, y.numpy(), w.shape,
                                                              [1, 2, 1], pairs),
                               rtol=1e-10, atol=1e-10)
    check_grad(lambda a, c: dg.ops.conv3d(a, c, pads=pads, strides=[1, 2, 1]), [x, w],
               tol=1e-5)


# ------------------------------------------------------------ pooling


POOL_FORMS = FORMS_2D + [("bottom_right_only", ((0, 1), (0, 1)), [(0, 1), (0, 1)])]


@pytest.mark.parametrize("name, pads, pairs", POOL_FORMS, ids=[f[0] for f in POOL_FORMS])
def test_max_pool2d_forms(name, pads, pairs):
    x = _distinct((2, 3, 5, 6))
    geo = {"kernel_size": [3, 2], "strides": [2, 2]}
    y = dg.ops.max_pool2d(dg.tensor(x), pads=pads, **geo)
    np.testing.assert_array_equal(y.numpy(), pool_ref("max", x, pads=pairs, **geo))
    # the indices op points at the maxima
    idx = dg.ops.max_pool2d_indices(dg.tensor(x), pads=pads, **geo).numpy()
    flat = x.reshape(2, 3, -1)
    np.testing.assert_array_equal(np.take_along_axis(flat, idx.reshape(2, 3, -1), 2),
                                  y.numpy().reshape(2, 3, -1))
    f = dg.nn.functional.max_pool2d(dg.tensor(x), (3, 2), 2, pads)
    np.testing.assert_array_equal(f.numpy(), y.numpy())
    m = dg.nn.MaxPool2d((3, 2), 2, pads)
    np.testing.assert_array_equal(m(dg.tensor(x)).numpy(), y.numpy())
    check_grad(lambda a: dg.ops.max_pool2d(a, pads=pads, **geo), [x[:1, :2]])


@pytest.mark.parametrize("cip", [True, False])
@pytest.mark.parametrize("name, pads, pairs", POOL_FORMS, ids=[f[0] for f in POOL_FORMS])
def test_avg_pool2d_forms(name, pads, pairs, cip):
    x = _rng(6).standard_normal((2, 3, 5, 6))
    geo = {"kernel_size": [3, 2], "strides": [2, 2], "count_include_pad": cip}
    y = dg.ops.avg_pool2d(dg.tensor(x), pads=pads, **geo)
    np.testing.assert_allclose(y.numpy(), pool_ref("avg", x, pads=pairs, **geo),
                               rtol=1e-12, atol=1e-12)
    f = dg.nn.functional.avg_pool2d(dg.tensor(x), (3, 2), 2, pads, count_include_pad=cip)
    np.testing.assert_allclose(f.numpy(), y.numpy())
    check_grad(lambda a: dg.ops.avg_pool2d(a, pads=pads, **geo), [x[:1, :2]])
    # AvgPool2dGrad is the adjoint, and its own gradient (second order)
    dy = _rng(7).standard_normal(y.shape)
    dx = dg.ops.avg_pool2d_grad(dg.tensor(x), dg.tensor(dy), pads=pads, **geo).numpy()
    np.testing.assert_allclose(np.sum(x * dx), np.sum(y.numpy() * dy), rtol=1e-12)
    check_grad(lambda d: dg.ops.avg_pool2d_grad(dg.tensor(x[:1, :2]), d, pads=pads, **geo),
               [dy[:1, :2]])


def test_max_pool2d_grad_second_order_asymmetric():
    x = _distinct((1, 2, 5, 4), seed=3)
    geo = {"kernel_size": [2, 3], "strides": [1, 2], "pads": ((1, 0), (0, 1))}
    dy = _rng(8).standard_normal(dg.ops.max_pool2d(dg.tensor(x), **geo).shape)
    check_grad(lambda d: dg.ops.max_pool2d_grad(dg.tensor(x), d, **geo), [dy])


def test_pool2d_asymmetric_ceil_mode_matches_padded_input():
    """ceil_mode with end padding: a last window that would start in the end
    padding is dropped, as with symmetric pads; the maximum equals the max
    pooling of the explicitly padded input (ceil mode) for these sizes."""
    x = _distinct((1, 1, 6, 7), seed=4)
    y = dg.ops.max_pool2d(dg.tensor(x), [3, 3], [2, 2], ((1, 0), (0, 1)), ceil_mode=True)
    xp = np.pad(x, [(0, 0), (0, 0), (1, 0), (0, 1)], constant_values=-np.inf)
    # output cells: H: ceil((7 - 3) / 2) + 1 = 3; W: ceil((8 - 3) / 2) + 1 = 4, the
    # last window starting at 6 < 7 + 0: kept (it reads one real column).
    want = np.full((1, 1, 3, 4), -np.inf)
    for i in range(3):
        for j in range(4):
            want[0, 0, i, j] = np.max(xp[0, 0, 2 * i:2 * i + 3, 2 * j:2 * j + 3])
    np.testing.assert_array_equal(y.numpy(), want)


@pytest.mark.parametrize("name, pads, pairs", FORMS_3D, ids=[f[0] for f in FORMS_3D])
def test_pool3d_forms(name, pads, pairs):
    x = _distinct((1, 2, 4, 5, 4))
    geo = {"kernel_size": [2, 3, 2], "strides": [2, 2, 1]}
    y, _ = dg.ops.max_pool3d(dg.tensor(x), pads=pads, **geo)
    np.testing.assert_array_equal(y.numpy(), pool_ref("max", x, pads=pairs, **geo))
    for cip in (True, False):
        a = dg.ops.avg_pool3d(dg.tensor(x), pads=pads, count_include_pad=cip, **geo)
        np.testing.assert_allclose(a.numpy(), pool_ref("avg", x, pads=pairs,
                                                       count_include_pad=cip, **geo),
                                   rtol=1e-12, atol=1e-12)
    check_grad(lambda t: dg.ops.avg_pool3d(t, pads=pads, count_include_pad=False, **geo),
               [x[:, :1]])
    check_grad(lambda t: dg.ops.max_pool3d(t, pads=pads, **geo)[0], [x[:, :1]])


def test_pool_pads_still_at_most_half_the_kernel():
    x = dg.tensor(np.zeros((1, 1, 6, 6)))
    with pytest.raises(InvalidArgumentError, match=r"MaxPool2d: pads .* kernel_size / 2"):
        dg.ops.max_pool2d(x, [2, 2], pads=((0, 2), (0, 0)))


# ------------------------------------------------------------ Pad


PAD_FORMS = [
    ("int", 1, [(1, 1)] * 3),
    ("n_ints", [2, 0, 1], [(2, 2), (0, 0), (1, 1)]),
    ("n_pairs", ((2, 1), (0, 3), (1, 0)), [(2, 1), (0, 3), (1, 0)]),
]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("name, pads, pairs", PAD_FORMS, ids=[f[0] for f in PAD_FORMS])
def test_pad_forms_are_np_pad(name, pads, pairs, mode):
    x = _rng(9).standard_normal((3, 4, 2))
    kw = {"constant_values": 0.5} if mode == "constant" else {}
    got = dg.ops.pad(dg.tensor(x), pads, mode=mode, value=0.5)
    np.testing.assert_array_equal(got.numpy(), np.pad(x, pairs, mode=mode, **kw))
    np.testing.assert_array_equal(dg.tensor(x).pad(pads, mode=mode, value=0.5).numpy(),
                                  got.numpy())
    check_grad(lambda t: dg.ops.pad(t, pads, mode=mode, value=0.5), [x])


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64", "uint8"])
def test_pad_dtypes_and_edge_shapes(dtype):
    x = (np.arange(6).reshape(2, 3) % 2).astype(dtype)
    np.testing.assert_array_equal(
        dg.ops.pad(dg.tensor(x), ((1, 0), (0, 2))).numpy(),
        np.pad(x, ((1, 0), (0, 2))))
    e = np.zeros((0, 3), dtype)           # empty axis: constant padding only
    np.testing.assert_array_equal(dg.ops.pad(dg.tensor(e), ((1, 1), (0, 1))).numpy(),
                                  np.pad(e, ((1, 1), (0, 1))))
    s = np.array(3, dtype)                # 0-d: no axis to pad
    np.testing.assert_array_equal(dg.ops.pad(dg.tensor(s), ()).numpy(), s)


def test_pad_in_graph_mode_and_gradient():
    x = _rng(10).standard_normal((2, 3))

    @dg.function
    def f(t):
        with dg.GradientTape() as tape:
            tape.watch(t)
            y = dg.ops.pad(t, ((1, 2), (0, 1)), mode="edge")
            loss = dg.ops.sum(y * y)
        return y, tape.gradient(loss, t)

    y, g = f(dg.tensor(x))
    want = np.pad(x, ((1, 2), (0, 1)), mode="edge")
    np.testing.assert_array_equal(y.numpy(), want)
    with dg.GradientTape() as tape:   # the traced gradient equals the eager one
        t = dg.tensor(x)
        tape.watch(t)
        loss = dg.ops.sum(dg.ops.pad(t, ((1, 2), (0, 1)), mode="edge") ** 2)
    np.testing.assert_allclose(g.numpy(), tape.gradient(loss, t).numpy(), rtol=1e-12)


# ------------------------------------------------------------ errors


@pytest.mark.parametrize("call, old, new", [
    (lambda x, w: dg.ops.conv2d(x, w, pads=[1, 0, 2, 1]), "[1, 0, 2, 1]",
     "((1, 2), (0, 1))"),
    (lambda x, w: dg.ops.conv_transpose2d(x, w, pads=[0, 1, 1, 0]), "[0, 1, 1, 0]",
     "((0, 1), (1, 0))"),
    (lambda x, w: dg.ops.max_pool2d(x, [2, 2], pads=[1, 1, 0, 0]), "[1, 1, 0, 0]",
     "((1, 0), (1, 0))"),
    (lambda x, w: dg.ops.pad(x, [1, 0, 0, 0, 2, 1, 0, 3]), "[1, 0, 0, 0, 2, 1, 0, 3]",
     "((1, 0), (0, 0), (2, 1), (0, 3))"),
    (lambda x, w: dg.nn.functional.conv2d(x, w, padding=(1, 0, 2, 1)), "(1, 0, 2, 1)",
     "((1, 2), (0, 1))"),
])
def test_old_flat_layouts_raise_and_show_the_new_form(call, old, new):
    x = dg.tensor(np.zeros((1, 1, 5, 5)))
    w = dg.tensor(np.zeros((1, 1, 3, 3)))
    with pytest.raises(ArgumentTypeError) as info:
        call(x, w)
    msg = str(info.value)
    assert old in msg and new in msg and "docs/python-api.md" in msg, msg
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("pads, words", [
    ([1, 2, 3], ["flat list of 3 values", "pads 2 axes", "((top, bottom), (left, right))"]),
    ([1], ["flat list of 1 value,"]),
    (((1, 0),), ["1 (before, after) pairs", "pads 2 axes"]),
    (((1, 0), (0, 1), (1, 1)), ["3 (before, after) pairs"]),
    (((1, 0), 1), ["mixes forms"]),
    (((1, 0, 2), (0, 1)), ["bad entry"]),
    (((1.5, 0), (0, 1)), ["bad entry"]),
    (True, ["pads must be an int"]),
    ("same", ["pads must be an int"]),
    (2.0, ["pads must be an int"]),
])
def test_bad_padding_forms(pads, words):
    x = dg.tensor(np.zeros((1, 1, 5, 5)))
    w = dg.tensor(np.zeros((1, 1, 3, 3)))
    with pytest.raises(ArgumentTypeError) as info:
        dg.ops.conv2d(x, w, pads=pads)
    msg = str(info.value)
    assert msg.startswith("Conv2d: "), msg
    for word in words:
        assert word in msg, msg


def test_negative_pads_reach_the_op_s_check():
    x = dg.tensor(np.zeros((1, 1, 5, 5)))
    w = dg.tensor(np.zeros((1, 1, 3, 3)))
    with pytest.raises(InvalidArgumentError, match="Conv2d: pads must be non-negative"):
        dg.ops.conv2d(x, w, pads=((0, -1), (0, 0)))
    with pytest.raises(InvalidArgumentError, match="Pad: pads .* negative"):
        dg.ops.pad(dg.tensor(np.zeros(3)), ((1, -1),))


def test_modules_check_the_layout_when_built():
    with pytest.raises(ArgumentTypeError, match=r"Conv2d: .*\(\(top, bottom\), \(left, right\)\)"):
        dg.nn.Conv2d(1, 1, 3, padding=(1, 0, 1, 0))
    with pytest.raises(ArgumentTypeError, match="MaxPool2d"):
        dg.nn.MaxPool2d(2, padding=[0, 0, 1, 1])
    conv = dg.nn.Conv2d(1, 2, 3, padding=((1, 0), (0, 1)))
    assert conv.padding == ((1, 0), (0, 1))
    assert dg.nn.Conv2d(1, 2, 3, padding=1).padding == ((1, 1), (1, 1))
    x = _rng(11).standard_normal((1, 1, 4, 5)).astype(np.float32)
    y = conv(dg.tensor(x)).numpy()
    ref = conv_ref(x.astype(np.float64), conv.weight.numpy().astype(np.float64),
                   conv.bias.numpy().astype(np.float64), pads=((1, 0), (0, 1)))
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_same_padding_is_pairs():
    assert dg.nn.functional.same_padding(4) == ((1, 2), (1, 2))
    assert dg.nn.functional.same_padding((3, 2), dilation=(2, 1)) == ((2, 2), (0, 1))
    x = _rng(12).standard_normal((1, 1, 5, 6))
    w = _rng(13).standard_normal((1, 1, 4, 3))
    y = dg.nn.functional.conv2d(dg.tensor(x), dg.tensor(w), padding="same")
    assert tuple(y.shape) == (1, 1, 5, 6)
    np.testing.assert_allclose(y.numpy(), conv_ref(x, w, pads=((1, 2), (1, 1))),
                               rtol=1e-12, atol=1e-12)


def test_schema_layout_round_trip():
    """The C++ attribute keeps its layout (the ABI): N values when both
    sides agree, N begins then N ends otherwise; Pad's [b0, a0, b1, a1]."""
    assert _opgen.pads_to_schema("Conv2d", ((1, 1), (2, 2)), 2) == [1, 2]
    assert _opgen.pads_to_schema("Conv2d", ((1, 0), (2, 3)), 2) == [1, 2, 0, 3]
    assert _opgen.pads_to_schema("Pad", ((1, 0), (2, 3)), 2) == [1, 0, 2, 3]
    assert _opgen.pads_from_schema("Conv2d", [1, 2, 0, 3], 2) == ((1, 0), (2, 3))
    assert _opgen.pads_from_schema("Conv3d", [1, 2, 3], 3) == ((1, 1), (2, 2), (3, 3))
    assert _opgen.pads_from_schema("MaxPool3d", [2], 3) == ((2, 2),) * 3
    assert _opgen.pads_from_schema("Pad", [1, 0, 2, 3]) == ((1, 0), (2, 3))
    assert dg.plugin_api.pads_from_schema("ConvTranspose2d", [1, 2, 0, 3]) == ((1, 0), (2, 3))
    assert dg.plugin_api.py_attrs("Conv2d", {"pads": [1, 2, 0, 3], "groups": 1}) == \
        {"pads": ((1, 0), (2, 3)), "groups": 1}
    with pytest.raises(ValueError, match="pairs"):
        _opgen.pads_from_schema("Pad", [1, 0, 2])
    # A traced graph records the C++ layout.
    x = dg.tensor(np.zeros((1, 1, 4, 4)))
    w = dg.tensor(np.zeros((1, 1, 3, 3)))
    graph = dg.function(lambda a, b: dg.ops.conv2d(a, b, pads=((1, 0), (0, 1))))
    assert tuple(graph(x, w).shape) == (1, 1, 3, 3)


def _padding_ops():
    from dragon_core import _C
    return sorted((d["name"], d["py_name"], len(next(a for a in d["attrs"]
                                                    if a["name"] == "pads")["default"] or []))
                  for d in _C.list_ops()
                  if any(a["name"] == "pads" and a["type"] == 5 for a in d["attrs"]))


def test_every_op_that_pads_takes_the_one_layout():
    """Registry-wide, the core's ops and plugins' alike: an op with a
    ``pads`` attribute documents the layout and rejects a flat list of the
    wrong length in Python, before any kernel runs."""
    import inspect
    ops = _padding_ops()
    names = {op for op, _, _ in ops}
    assert {"Conv2d", "ConvTranspose2d", "Conv2dBackpropFilter", "Conv2dBiasAct", "Conv3d",
            "ConvTranspose3d", "Conv3dBackpropFilter", "MaxPool2d", "MaxPool2dIndices",
            "MaxPool2dGrad", "AvgPool2d", "AvgPool2dGrad", "MaxPool3d", "AvgPool3d",
            "AvgPool3dGrad", "Pad"} <= names, names
    for op, py, n in ops:
        fn = getattr(dg.ops, py, None) or getattr(dg.ops, "_" + py + "_op")
        assert "(before, after) pair per axis" in fn.__doc__, op
        inputs = {i["name"] for i in dg.plugin_api.op_schema(op)["inputs"]}
        args = []
        for p in inspect.signature(fn).parameters.values():
            if p.default is not p.empty or p.kind is p.KEYWORD_ONLY or p.name == "pads":
                break
            args.append(dg.tensor(np.zeros(1)) if p.name.rstrip("_") in inputs else [1])
        axes = n or 1                       # Pad: every axis of the 1-D dummy
        with pytest.raises(ArgumentTypeError, match=rf"{op}: pads=.*\(before, after\) pair"):
            fn(*args, pads=[0] * (2 * axes))


# ------------------------------------------------------------ front ends


def test_vm_torch_keeps_pytorch_layouts():
    """vm.torch takes PyTorch's layouts and converts: F.pad's pairs run from
    the last axis, Conv2d's padding is an int or (h, w)."""
    import dragon_core.vm.torch as torch
    F = torch.nn.functional
    x = _rng(14).standard_normal((2, 3, 4)).astype(np.float32)
    got = F.pad(torch.tensor(x), (1, 2, 0, 1), mode="constant", value=0.5)
    np.testing.assert_array_equal(got.numpy(), np.pad(x, ((0, 0), (0, 1), (1, 2)),
                                                      constant_values=0.5))
    got = F.pad(torch.tensor(x), (2, 1), mode="replicate")
    np.testing.assert_array_equal(got.numpy(), np.pad(x, ((0, 0), (0, 0), (2, 1)),
                                                      mode="edge"))
    img = _rng(15).standard_normal((1, 2, 5, 6)).astype(np.float32)
    conv = torch.nn.Conv2d(2, 3, (3, 2), padding=(1, 0))
    want = conv_ref(img.astype(np.float64), conv.weight.detach().numpy().astype(np.float64),
                    conv.bias.detach().numpy().astype(np.float64), pads=(1, 0))
    np.testing.assert_allclose(conv(torch.tensor(img)).detach().numpy(), want,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_vm_tensorflow_same_pooling_pads_asymmetrically(kind):
    """'SAME' with an odd total pads one more cell at the end: the pooling ops
    now take that directly (TensorFlow averages over the real cells)."""
    import dragon_core.vm.tensorflow as tf
    x = _distinct((1, 6, 7, 2)).astype(np.float32)   # NHWC
    fn = tf.nn.max_pool2d if kind == "max" else tf.nn.avg_pool2d
    got = fn(tf.constant(x), ksize=2, strides=2, padding="SAME").numpy()
    # out = ceil(in / 2): H 6 -> 3 (no padding), W 7 -> 4 (one cell at the end)
    want = pool_ref(kind, x.transpose(0, 3, 1, 2).astype(np.float64), [2, 2], [2, 2],
                    ((0, 0), (0, 1)), count_include_pad=False).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert tf.nn.same_pads((6, 7), (2, 2), (2, 2)) == ((0, 0), (0, 1))
