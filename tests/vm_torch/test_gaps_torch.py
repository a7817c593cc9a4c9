"""vm.torch's cummax/cummin, index_copy(_), scatter_reduce(_), copysign,
xlogy (and torch.special.xlogy), cumprod under autograd, min/max(dim) of
bool tensors, median of 0-d tensors and 16-bit softmax / log_softmax,
against real torch 2.13: values, dtypes, shapes and the gradients of a
weighted sum of the outputs (the machinery of test_differential.py), over
0-d, empty and non-contiguous inputs, negative dims, ties and NaN.

The float64 NumPy references of the same functions are in
test_gaps_numpy.py (they run without torch)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
import dragon_core.vm.torch as vt  # noqa: E402
from test_differential import Spec, check  # noqa: E402


def _case(desc, fn, specs, seed=0, **kw):
    return dict(desc=desc, fn=fn, specs=specs, seed=seed, **kw)


# ------------------------------------------------------- cummax / cummin
CUM_SPECS = [
    ((5,), "float32", "", "c", 0), ((5,), "float32", "", "c", -1),
    ((3, 4), "float64", "", "t", 1), ((3, 4), "float64", "", "t", -2),
    ((2, 3, 4), "float32", "ties", "step", 2), ((2, 3, 4), "float32", "nan", "off", 0),
    ((4, 6), "float16", "ties", "c", 1), ((4, 6), "bfloat16", "", "c", -1),
    ((3, 5), "int64", "ties", "c", 1), ((3, 5), "int32", "", "t", 0),
    ((3, 5), "uint8", "", "c", 1), ((3, 5), "bool", "", "c", -1),
    ((), "float32", "", "c", 0), ((), "int64", "", "c", -1),
    ((0, 3), "float32", "", "c", 0), ((3, 0), "float32", "", "c", 1),
    ((2, 3), "float32", "", "exp", 0),
]


@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("k", range(len(CUM_SPECS)))
def test_cummax_cummin(name, k):
    shape, dt, kind, layout, dim = CUM_SPECS[k]
    for meth in (False, True):
        fn = (lambda T, x: tuple(getattr(x, name)(dim))) if meth else \
            (lambda T, x: tuple(getattr(T, name)(x, dim)))
        check(_case(f"{name}(dim={dim})", fn, [Spec(shape, dt, kind, layout)], seed=k))


def test_cummax_ties_and_nan_indices():
    """torch takes the latest of equal extrema, and a NaN sticks with the
    index of the latest NaN."""
    for name in ("cummax", "cummin"):
        x = [1.0, 3.0, 3.0, float("nan"), 2.0, float("nan"), 5.0, -1.0, 3.0]
        want = getattr(torch, name)(torch.tensor(x), 0)
        got = getattr(vt, name)(vt.tensor(x), 0)
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
        x = [2, 1, 2, 2, 0, 0, 3]
        want = getattr(torch, name)(torch.tensor(x), 0)
        got = getattr(vt, name)(vt.tensor(x), 0)
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())


def test_cummax_errors():
    for T in (torch, vt):
        with pytest.raises(IndexError):
            T.cummax(T.ones(2, 3), 2)


# ------------------------------------------------------------ index_copy
IC_CASES = [  # (shape, dtype, dim, index, layout)
    ((4, 3), "float32", 0, [2, 0], "c"), ((4, 3), "float64", 1, [1], "t"),
    ((4, 3), "float32", -1, [2, 0, 1], "c"), ((2, 3, 4), "float16", 2, [3, 1], "c"),
    ((2, 3, 4), "bfloat16", -2, [0], "step"), ((5,), "int64", 0, [4, 1], "c"),
    ((3, 2), "bool", 0, [1], "c"), ((4, 3), "float32", 0, [], "c"),
    ((0, 3), "float32", 1, [2], "c"), ((), "float32", 0, [0], "c"),
    ((4, 3), "float32", 0, [1, 1, 3], "c"),   # repeated index: the last slice wins
]


@pytest.mark.parametrize("k", range(len(IC_CASES)))
def test_index_copy(k):
    shape, dt, dim, index, layout = IC_CASES[k]
    sshape = list(shape) if shape else []
    if shape:
        sshape[dim] = len(index)
    repeated = len(set(index)) != len(index)

    def fn(T, x, s):
        return T.index_copy(x, dim, T.tensor(index, dtype=T.int64), s)

    def fn_method(T, x, s):
        return x.index_copy(dim, T.tensor(index, dtype=T.int64), s)

    # torch's gradient of a repeated index reaches every copy of it, ours only
    # the one that wins: compare values only there
    for f in (fn, fn_method):
        check(_case(f"index_copy({dim}, {index})", f,
                    [Spec(shape, dt, layout=layout), Spec(tuple(sshape), dt)],
                    seed=k, grad=not repeated))


def test_index_copy_inplace_and_errors():
    for T in (torch, vt):
        x = T.zeros(3, 2)
        out = x.index_copy_(0, T.tensor([2, 0]), T.tensor([[1.0, 2.0], [3.0, 4.0]]))
        assert out is x
        np.testing.assert_array_equal(x.numpy(), [[3, 4], [0, 0], [1, 2]])
        with pytest.raises((RuntimeError, IndexError)):
            T.index_copy(T.zeros(3, 2), 0, T.tensor([3]), T.ones(1, 2))
        with pytest.raises((RuntimeError, IndexError)):
            T.index_copy(T.zeros(3, 2), 0, T.tensor([0]), T.ones(1, 2, dtype=T.float64))
        with pytest.raises((RuntimeError, IndexError)):
            T.index_copy(T.zeros(3, 2), 0, T.tensor([0.0]), T.ones(1, 2))
        with pytest.raises((RuntimeError, IndexError)):
            T.index_copy(T.zeros(3, 2), 0, T.tensor([0, 1]), T.ones(1, 2))


# -------------------------------------------------------- scatter_reduce
SR_SHAPES = [((4, 3), 0, (5, 3)), ((4, 3), 1, (4, 6)), ((3, 4), -1, (2, 5)),
             ((2, 3, 4), 1, (2, 5, 3)), ((5,), 0, (7,)), ((5,), -1, (0,))]


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("k", range(len(SR_SHAPES)))
@pytest.mark.parametrize("dt", ["float32", "float64", "int64"])
def test_scatter_reduce(reduce, include_self, k, dt):
    shape, dim, ishape = SR_SHAPES[k]
    rng = np.random.default_rng(k)
    n = shape[dim]
    index = rng.integers(0, n, ishape)   # repeats: several values per position
    # ties between values reduced together split the gradient; with
    # include_self=False torch still counts input's own value among the ties
    # (and then drops its share), which vm.torch does not (documented in
    # docs/from-pytorch.md): ties only with include_self=True
    kind = "ties" if reduce in ("amax", "amin") and include_self else ""

    def fn(T, x, s):
        return T.scatter_reduce(x, dim, T.tensor(index), s, reduce, include_self=include_self)

    check(_case(f"scatter_reduce({reduce}, include_self={include_self})", fn,
                [Spec(shape, dt, kind), Spec(ishape, dt, kind)], seed=k))
    check(_case(f"Tensor.scatter_reduce({reduce})",
                lambda T, x, s: x.scatter_reduce(dim, T.tensor(index), s, reduce),
                [Spec(shape, dt, layout="t"), Spec(ishape, dt)], seed=k + 100))


def test_scatter_reduce_half_and_inplace():
    for dt in ("float16", "bfloat16"):
        idx = np.array([[0, 1, 0], [2, 2, 1]])
        check(_case("scatter_reduce half", lambda T, x, s: T.scatter_reduce(
            x, 0, T.tensor(idx), s, "sum"), [Spec((3, 3), dt), Spec((2, 3), dt)]))
    for T in (torch, vt):
        x = T.tensor([1.0, 2.0, 3.0])
        out = x.scatter_reduce_(0, T.tensor([0, 0, 2]), T.tensor([5.0, 7.0, -1.0]), "amax",
                                include_self=False)
        assert out is x
        np.testing.assert_array_equal(x.numpy(), [7.0, 2.0, -1.0])
        with pytest.raises(RuntimeError):
            T.scatter_reduce(T.zeros(3), 0, T.tensor([0]), T.ones(1), "mul")
        out = T.scatter_reduce(T.tensor([2.0, 5.0]), 0, T.tensor([0, 0]), T.tensor([3.0, 4.0]),
                               "max")   # torch takes max/min for amax/amin
        np.testing.assert_array_equal(out.numpy(), [4.0, 5.0])
        with pytest.raises(RuntimeError):
            T.scatter_reduce(T.zeros(3), 0, T.tensor([3]), T.ones(1), "sum")


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_bool(reduce, include_self):
    idx = np.array([[0, 1, 2], [2, 2, 0], [3, 0, 0]])
    check(_case(f"scatter_reduce(bool, {reduce})", lambda T, x, s: T.scatter_reduce(
        x, 1, T.tensor(idx), s, reduce, include_self=include_self),
        [Spec((3, 4), "bool"), Spec((3, 3), "bool")]))


def test_scatter_reduce_integer_mean_floors():
    for T in (torch, vt):
        out = T.scatter_reduce(T.tensor([0, -7, 5]), 0, T.tensor([1, 1, 2]),
                               T.tensor([2, 0, 0]), "mean")
        np.testing.assert_array_equal(out.numpy(), [0, -2, 2])


# --------------------------------------------------------------- copysign
BIN_SHAPES = [((3, 4), (3, 4)), ((3, 1), (4,)), ((), (2, 3)), ((0, 3), (3,)), ((2,), ())]
BIN_DTS = [("float32", "float32"), ("float64", "float32"), ("float16", "float16"),
           ("bfloat16", "float32"), ("int64", "float32"), ("int32", "int64"),
           ("bool", "float64"), ("float32", "int64")]


@pytest.mark.parametrize("name", ["copysign", "xlogy"])
@pytest.mark.parametrize("k", range(len(BIN_SHAPES)))
@pytest.mark.parametrize("dts", BIN_DTS)
def test_copysign_xlogy(name, k, dts):
    a, b = BIN_SHAPES[k]
    kind_b = "pos" if name == "xlogy" and dts[1] != "bool" else ""
    specs = [Spec(a, dts[0], layout="t" if len(a) == 2 else "c"), Spec(b, dts[1], kind_b)]
    check(_case(name, lambda T, x, y: getattr(T, name)(x, y), specs, seed=k))
    check(_case(name + " method", lambda T, x, y: getattr(x, name)(y), specs, seed=k + 50))


@pytest.mark.parametrize("other", [2.0, -0.0, 0.0, -3, True, float("nan")])
def test_copysign_scalar(other):
    check(_case(f"copysign(x, {other})", lambda T, x: T.copysign(x, other),
                [Spec((3, 4), "float32")]))


def test_copysign_signed_zeros_and_nan():
    x = [1.0, -2.0, 0.0, -0.0, 3.0, float("nan"), float("inf")]
    y = [-0.0, 0.0, -1.0, 2.0, float("-nan"), -1.0, -0.0]
    want = torch.copysign(torch.tensor(x), torch.tensor(y)).numpy()
    got = vt.copysign(vt.tensor(x), vt.tensor(y)).numpy()
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got, want)
    for T in (torch, vt):   # the gradient at input 0 is 0
        t = T.tensor([0.0, -1.0, 2.0], requires_grad=True)
        T.copysign(t, T.tensor([-1.0, 1.0, -1.0])).sum().backward()
        np.testing.assert_array_equal(t.grad.numpy(), [0.0, -1.0, -1.0])


@pytest.mark.parametrize("scalar_first", [True, False])
@pytest.mark.parametrize("value", [0, 2.5, 0.0, 3])
def test_xlogy_scalar(scalar_first, value):
    if scalar_first:
        fn = lambda T, y: T.xlogy(value, y)  # noqa: E731
        kind = "pos"
    else:
        fn = lambda T, x: T.xlogy(x, value)  # noqa: E731
        kind = ""
    check(_case(f"xlogy scalar {value}", fn, [Spec((2, 3), "float32", kind)]))


def test_xlogy_zero_and_nan():
    """Values everywhere; gradients except at the two documented points
    (x == y == 0: torch's d/dy is NaN, ours 0; x == 0, y == inf: torch's
    d/dx is inf, ours 0)."""
    x = np.array([0.0, 0.0, 0.0, 1.0, 2.0, 0.0, -1.0, 0.0, 0.0, 3.0])
    y = np.array([0.0, float("nan"), 3.0, 0.0, float("inf"), -1.0, -2.0, float("inf"),
                  1.0, float("nan")])
    for f in ("xlogy", "special"):
        outs = []
        for T in (torch, vt):
            a = T.tensor(x, requires_grad=True)
            b = T.tensor(y, requires_grad=True)
            fn = T.special.xlogy if f == "special" else T.xlogy
            out = fn(a, b)
            out.sum().backward()
            outs.append((out.detach().numpy(), a.grad.numpy(), b.grad.numpy()))
        np.testing.assert_allclose(outs[1][0], outs[0][0], rtol=1e-15)
        ok = ~(((x == 0) & (y == 0)) | ((x == 0) & (y == np.inf)))
        for got, want in zip(outs[1][1:], outs[0][1:]):
            np.testing.assert_allclose(got[ok], want[ok], rtol=1e-15)
        np.testing.assert_array_equal(outs[1][1][~ok], 0.0)
        np.testing.assert_array_equal(outs[1][2][~ok], 0.0)


# -------------------------------------------------------------- cumprod
CP_CASES = [((5,), "float32", 0, ""), ((3, 4), "float64", -1, ""), ((3, 4), "float64", 0, "t"),
            ((2, 3, 5), "float32", 1, "step"), ((4, 9), "float64", 1, "zeros"),
            ((4, 6), "float16", -1, ""), ((4, 6), "bfloat16", 0, ""), ((), "float32", 0, ""),
            ((0, 3), "float32", 0, ""), ((3, 0), "float64", 1, ""), ((17,), "float64", 0, "")]


@pytest.mark.parametrize("k", range(len(CP_CASES)))
def test_cumprod_autograd(k):
    shape, dt, dim, kind = CP_CASES[k]
    layout = kind if kind in ("t", "step") else "c"

    def fn(T, x):
        if kind == "zeros":   # exact zeros (one and two per row) in the product
            x = x * (T.arange(x.shape[-1]) % 4 != 2).to(x.dtype)
        return T.cumprod(x, dim)
    check(_case(f"cumprod(dim={dim})", fn, [Spec(shape, dt, layout=layout)], seed=k,
                scale=4.0))
    if dt == "float64" and shape and 0 not in shape:
        check(_case("cumprod double", fn, [Spec(shape, dt, layout=layout)], seed=k,
                    double=True))


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_cumprod_half_without_grad(dt):
    """Without autograd (the host path) 16-bit cumprod is also computed in
    float32 and rounded once, as torch's."""
    x = np.random.default_rng(0).uniform(0.9, 1.1, (3, 70)).astype(np.float32)
    want = torch.cumprod(torch.tensor(x).to(getattr(torch, dt)), 1).float().numpy()
    got = vt.cumprod(vt.tensor(x).to(getattr(vt, dt)), 1).float().numpy()
    np.testing.assert_array_equal(got, want)


def test_cumprod_dtype_argument_with_grad():
    check(_case("cumprod(dtype=float64)", lambda T, x: T.cumprod(x, 1, dtype=T.float64),
                [Spec((3, 4), "float32")]))


# ---------------------------------------------- min/max(dim) bool, median
@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("shape,dim", [((3, 4), 1), ((3, 4), -2), ((5,), 0), ((), 0),
                                       ((2, 3, 2), 1)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_minmax_dim_bool(name, shape, dim, keepdim):
    check(_case(f"{name}(bool, dim={dim})",
                lambda T, x: tuple(getattr(T, name)(x, dim, keepdim)),
                [Spec(shape, "bool")]))
    check(_case(f"Tensor.{name}(bool)", lambda T, x: tuple(getattr(x, name)(dim=dim)),
                [Spec(shape, "bool", layout="t")]))


@pytest.mark.parametrize("dt", ["float32", "float64", "int64", "float16", "bool"])
@pytest.mark.parametrize("dim", [None, 0, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_median_0d(dt, dim, keepdim):
    if dim is None:
        fn = lambda T, x: T.median(x)  # noqa: E731
    else:
        fn = lambda T, x: tuple(T.median(x, dim, keepdim))  # noqa: E731
    check(_case(f"median(0-d, dim={dim})", fn, [Spec((), dt)]))
    check(_case("median(0-d) method", lambda T, x: x.median() if dim is None else
                tuple(x.median(dim)), [Spec((), dt)]))


# ---------------------------------------------- 16-bit softmax, log_softmax
SM_CASES = [((7,), -1), ((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1), ((2, 3, 4), -3),
            ((4, 70), -1), ((0, 4), -1), ((4, 0), 0), ((), 0)]


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("k", range(len(SM_CASES)))
def test_softmax_half_vs_torch(dt, name, k):
    shape, dim = SM_CASES[k]
    check(_case(f"{name}(dim={dim})", lambda T, x: getattr(T, name)(x, dim),
                [Spec(shape, dt, layout="t" if len(shape) > 1 else "c")], seed=k))
    check(_case(f"F.{name}(dim={dim})",
                lambda T, x: getattr(T.nn.functional, name)(x, dim=dim),
                [Spec(shape, dt)], seed=k + 20))


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_softmax_half_double_backward(dt):
    check(_case("softmax double", lambda T, x: T.softmax(x, -1), [Spec((3, 4), dt)],
                double=True, scale=4.0))
