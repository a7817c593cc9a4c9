"""Conformance of dragon_core.vm.torch with real PyTorch.

Each case runs one function of (torch module, *input tensors) twice, on
real torch and on vm.torch, from the same NumPy inputs, and compares the
outputs (values, dtypes, shapes) and, for float inputs, the gradients of a
weighted sum of the outputs w.r.t. every input. Real torch is a test-only
dependency: without it the suite is skipped with the install command.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
import dragon_core.vm.torch as vt  # noqa: E402

RNG = np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _seeded_inputs(request):
    """Each case draws its inputs from its own seed (same arrays in every
    run and under pytest-xdist, whatever the order)."""
    global RNG
    RNG = np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def _arr(spec):
    """spec: (shape, dtype[, kind]) -> array; kind 'pos' for > 0."""
    shape, dt = spec[0], spec[1]
    kind = spec[2] if len(spec) > 2 else ""
    if dt == "bool":
        return RNG.random(shape) > 0.5
    if dt.startswith("int"):
        lo = 1 if kind == "pos" else -5
        return RNG.integers(lo, 6, shape).astype(dt)
    a = RNG.standard_normal(shape)
    if kind == "pos":
        a = np.abs(a) + 0.5
    if kind == "unit":
        a = np.clip(a * 0.3, -0.9, 0.9)
    if kind == "prob":
        a = 1 / (1 + np.exp(-a))
    if kind == "gt1":
        a = np.abs(a) + 1.1
    return a.astype(dt)


def _flat(out):
    if isinstance(out, (tuple, list)):
        res = []
        for o in out:
            res.extend(_flat(o))
        return res
    return [out]


def _run(T, fn, arrays, grad):
    xs = []
    for a in arrays:
        t = T.tensor(a)
        if grad and a.dtype.kind == "f":
            t.requires_grad_(True)
        xs.append(t)
    out = fn(T, *xs)
    outs = _flat(out)
    grads = []
    if grad:
        floats = [o for o in outs if isinstance(o, T.Tensor) and o.dtype.is_floating_point
                  and o.requires_grad]
        if floats:
            loss = None
            for k, o in enumerate(floats):
                w = np.random.default_rng(k).standard_normal(tuple(o.shape)).astype(
                    np.float64)
                term = (o.double() * T.tensor(w)).sum()
                loss = term if loss is None else loss + term
            loss.backward()
            grads = [None if x.grad is None else x.grad.detach().numpy().copy()
                     for x in xs if x.dtype.is_floating_point]
    vals = []
    for o in outs:
        if isinstance(o, T.Tensor):
            vals.append((o.detach().numpy().copy(), str(o.dtype).replace("torch.", ""),
                         tuple(o.shape)))
        else:
            vals.append((o, type(o).__name__, None))
    return vals, grads


def _close(a, b, rtol, atol, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != torch's {b.shape}"
    if a.dtype == bool or b.dtype == bool or a.dtype.kind in "iu":
        np.testing.assert_array_equal(a, b, err_msg=what)
    else:
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol,
                                   atol=atol, err_msg=what, equal_nan=True)


def check(fn, specs, grad=True, rtol=1e-4, atol=1e-5):
    arrays = [_arr(s) if isinstance(s, tuple) else np.asarray(s) for s in specs]
    try:
        ref_vals, ref_grads = _run(torch, fn, [a.copy() for a in arrays], grad)
    except (RuntimeError, TypeError, ValueError, IndexError) as exc:
        # torch refuses: vm.torch must refuse too, never compute something
        with pytest.raises(Exception):
            _run(vt, fn, [a.copy() for a in arrays], grad)
        return exc
    got_vals, got_grads = _run(vt, fn, [a.copy() for a in arrays], grad)
    assert len(ref_vals) == len(got_vals)
    for i, ((rv, rd, rs), (gv, gd, gs)) in enumerate(zip(ref_vals, got_vals)):
        assert gd == rd, f"output {i}: dtype {gd} != torch's {rd}"
        assert gs == rs, f"output {i}: shape {gs} != torch's {rs}"
        _close(gv, rv, rtol, atol, f"output {i}")
    assert len(got_grads) == len(ref_grads)
    for i, (g, r) in enumerate(zip(got_grads, ref_grads)):
        assert (g is None) == (r is None), f"grad {i}: presence differs"
        if g is not None:
            _close(g, r, rtol * 10, atol * 10, f"grad {i}")


F32 = "float32"
SHAPES = [(), (5,), (2, 3, 4)]

# ------------------------------------------------------------------- unary
UNARY = {
    "exp": "", "log": "pos", "log1p": "pos", "sqrt": "pos", "rsqrt": "pos", "sin": "",
    "cos": "", "tanh": "", "sigmoid": "", "relu": "", "abs": "", "neg": "", "square": "",
    "reciprocal": "pos", "expm1": "", "log2": "pos", "log10": "pos", "floor": "", "ceil": "",
    "round": "", "sign": "", "trunc": "", "frac": "", "tan": "unit",
    "asin": "unit", "acos": "unit", "atan": "", "sinh": "", "cosh": "", "asinh": "",
    "acosh": "gt1", "atanh": "unit", "erf": "", "arcsin": "unit", "arctan": "",
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, shape):
    check(lambda T, x: getattr(T, name)(x), [(shape, F32, UNARY[name])])


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float64_and_empty(name):
    check(lambda T, x: getattr(T, name)(x), [((2, 3), "float64", UNARY[name])], rtol=1e-10,
          atol=1e-12)
    check(lambda T, x: getattr(T, name)(x), [((0, 3), F32, UNARY[name])])


@pytest.mark.parametrize("name", ["exp", "sqrt", "sin", "sigmoid", "abs", "neg", "square"])
def test_unary_method_and_int_input(name):
    check(lambda T, x: getattr(x, name)(), [((3, 4), F32, "pos")])
    check(lambda T, x: getattr(T, name)(x), [((3, 4), "int64", "pos")], grad=False)


# ------------------------------------------------------------------ binary
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "pow", "remainder", "floor_divide",
          "fmod", "atan2", "eq", "ne", "lt", "le", "gt", "ge"]
PAIRS = [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1), (1, 5)), ((), (3,))]


@pytest.mark.parametrize("shapes", PAIRS, ids=str)
@pytest.mark.parametrize("name", BINARY)
def test_binary(name, shapes):
    kind = "pos" if name in ("pow", "div", "remainder", "floor_divide", "fmod") else ""
    grad = name not in ("remainder", "floor_divide", "fmod")
    check(lambda T, a, b: getattr(T, name)(a, b),
          [(shapes[0], F32, kind), (shapes[1], F32, kind)], grad=grad)


OPERATORS = {
    "a + b": lambda a, b: a + b, "a - b": lambda a, b: a - b, "a * b": lambda a, b: a * b,
    "a / b": lambda a, b: a / b, "a // b": lambda a, b: a // b, "a % b": lambda a, b: a % b,
    "a ** 2": lambda a, b: a ** 2, "2 - a": lambda a, b: 2 - a, "3 / a": lambda a, b: 3 / a,
    "a @ b.T": lambda a, b: a @ b.T, "-a": lambda a, b: -a, "a < b": lambda a, b: a < b,
    "a == 1": lambda a, b: a == 1, "a * 2.5": lambda a, b: a * 2.5, "1 + a": lambda a, b: 1 + a,
}
DTYPE_PAIRS = [("float32", "float32"), ("int64", "int64"), ("int64", "float32"),
               ("int32", "float64"), ("float32", "float64"), ("int32", "int64"),
               ("bool", "int64"), ("bool", "float32")]


@pytest.mark.parametrize("dts", DTYPE_PAIRS, ids=str)
@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_operator_promotion(op, dts):
    fn = OPERATORS[op]
    kind = "pos" if op in ("a / b", "a // b", "a % b", "3 / a") else ""
    check(lambda T, a, b: fn(a, b), [((3, 3), dts[0], kind), ((3, 3), dts[1], kind)],
          grad=False)


def test_zero_dim_promotion():
    check(lambda T, a, b: a + b, [((3,), "float32"), ((), "float64")], grad=False)
    check(lambda T, a, b: a * b, [((3,), "int32"), ((), "int64")], grad=False)
    check(lambda T, a, b: a * b, [((3,), "int64"), ((), "float64")], grad=False)


# -------------------------------------------------------------- reductions
REDUCE = ["sum", "mean", "prod", "amax", "amin", "std", "var", "logsumexp", "norm"]
DIMS = [None, 0, 1, -1, (0, 2)]


# torch's signatures: prod takes one dim, logsumexp needs one, dim=None has no keepdim
REDUCE_CASES = [(n, d, k) for n in REDUCE for d in DIMS for k in (False, True)
                if not (n == "prod" and isinstance(d, tuple))
                and not (d is None and (n == "logsumexp" or k))]


@pytest.mark.parametrize("name,dim,keepdim", REDUCE_CASES, ids=str)
def test_reduction(name, dim, keepdim):
    x = ((2, 3, 4), F32)
    if dim is None:
        check(lambda T, a: getattr(T, name)(a), [x])
    elif name == "norm":
        check(lambda T, a: T.norm(a, dim=dim, keepdim=keepdim), [x])
    else:
        check(lambda T, a: getattr(T, name)(a, dim=dim, keepdim=keepdim), [x])


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("name", ["max", "min"])
def test_values_indices(name, dim, keepdim):
    check(lambda T, a: tuple(getattr(T, name)(a, dim=dim, keepdim=keepdim)), [((3, 4, 5), F32)])
    check(lambda T, a: getattr(a, name)(dim), [((3, 4, 5), F32)])


@pytest.mark.parametrize("dim", [None, 0, 1])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions(name, dim):
    check(lambda T, a: getattr(T, name)(a, dim=dim), [((4, 5), F32)], grad=False)


@pytest.mark.parametrize("dt", ["int64", "int32", "bool"])
def test_integer_sum_dtype(dt):
    check(lambda T, a: (a.sum(), a.sum(0), T.sum(a, dim=1, keepdim=True)), [((3, 4), dt)],
          grad=False)


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_all_any(dim):
    if dim is None:
        check(lambda T, a: (a.all(), a.any()), [((3, 4), "bool")], grad=False)
    else:
        check(lambda T, a: (a.all(dim), a.any(dim)), [((3, 4), "bool")], grad=False)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumsum(dim):
    check(lambda T, a: T.cumsum(a, dim), [((3, 4, 5), F32)])
    check(lambda T, a: a.cumsum(dim=dim), [((3, 4, 5), "int64")], grad=False)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, -1])
def test_sort(dim, descending):
    check(lambda T, a: tuple(T.sort(a, dim=dim, descending=descending)), [((4, 6), F32)])
    check(lambda T, a: T.argsort(a, dim=dim, descending=descending), [((4, 6), F32)],
          grad=False)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [1, 3])
def test_topk(k, largest):
    check(lambda T, a: tuple(T.topk(a, k, dim=-1, largest=largest)), [((4, 6), F32)])


def test_median_kthvalue():
    check(lambda T, a: (a.median(), tuple(a.median(1)), tuple(a.kthvalue(2, 0))),
          [((5, 4), F32)])


# --------------------------------------------------------------- einsum/la
EINSUM = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
          ("i,i->", [(5,), (5,)]), ("i,j->ij", [(3,), (4,)]), ("ij->ji", [(3, 4)]),
          ("ij->", [(3, 4)]), ("bhld,bhmd->bhlm", [(2, 2, 3, 4), (2, 2, 5, 4)]),
          ("ij,ij->i", [(3, 4), (3, 4)]), ("ijk->kj", [(2, 3, 4)])]


@pytest.mark.parametrize("eq,shapes", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum(eq, shapes):
    check(lambda T, *xs: T.einsum(eq, *xs), [(s, F32) for s in shapes])


MATMUL = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
          ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2))]


@pytest.mark.parametrize("shapes", MATMUL, ids=str)
def test_matmul(shapes):
    check(lambda T, a, b: T.matmul(a, b), [(shapes[0], F32), (shapes[1], F32)])


def test_mm_bmm_mv_dot_outer():
    check(lambda T, a, b: T.mm(a, b), [((3, 4), F32), ((4, 2), F32)])
    check(lambda T, a, b: T.bmm(a, b), [((2, 3, 4), F32), ((2, 4, 2), F32)])
    check(lambda T, a, b: T.mv(a, b), [((3, 4), F32), ((4,), F32)])
    check(lambda T, a, b: T.dot(a, b), [((4,), F32), ((4,), F32)])
    check(lambda T, a, b: T.outer(a, b), [((3,), F32), ((4,), F32)])
    check(lambda T, a, b, c: T.addmm(a, b, c, beta=0.5, alpha=2.0),
          [((3, 2), F32), ((3, 4), F32), ((4, 2), F32)])


def test_linalg_host():
    a = np.eye(3, dtype=np.float32) * 2 + 0.1
    check(lambda T, x: (T.linalg.inv(x), T.linalg.det(x)), [a], grad=False, rtol=1e-4)
    check(lambda T, x: T.linalg.norm(x), [((3, 4), F32)])


# ------------------------------------------------------------ shape & views
VIEWS = {
    "view": lambda T, x: x.view(4, 6), "view-1": lambda T, x: x.view(-1),
    "reshape": lambda T, x: x.reshape(2, -1), "permute": lambda T, x: x.permute(2, 0, 1),
    "transpose": lambda T, x: x.transpose(0, 2), "T-2d": lambda T, x: x.reshape(6, 4).t(),
    "squeeze": lambda T, x: x.reshape(1, 24, 1).squeeze(),
    "squeeze-dim": lambda T, x: x.reshape(1, 24, 1).squeeze(0),
    "unsqueeze": lambda T, x: x.unsqueeze(1), "unsqueeze-neg": lambda T, x: x.unsqueeze(-1),
    "expand": lambda T, x: x[:, :1].expand(2, 5, 4),
    "narrow": lambda T, x: x.narrow(1, 1, 2), "flatten": lambda T, x: x.flatten(1),
    "flatten-all": lambda T, x: T.flatten(x), "slice-step": lambda T, x: x[:, ::2, 1:],
    "slice-neg": lambda T, x: x[-1, :-1], "int-index": lambda T, x: x[1, 2],
    "ellipsis": lambda T, x: x[..., 0], "none": lambda T, x: x[None, :, 0],
    "bool-mask": lambda T, x: x[x > 0], "int-tensor": lambda T, x: x[T.tensor([1, 0, 1])],
    "int-list-dim1": lambda T, x: x[:, [0, 2]], "two-int-tensors":
        lambda T, x: x[T.tensor([0, 1]), T.tensor([2, 0])],
    "repeat": lambda T, x: x.repeat(2, 1, 1), "flip": lambda T, x: T.flip(x, [0, 2]),
    "roll": lambda T, x: T.roll(x, 1, 1), "chunk": lambda T, x: x.chunk(2, 2),
    "split": lambda T, x: x.split([1, 2], 1), "split-size": lambda T, x: T.split(x, 2, 2),
    "unbind": lambda T, x: x.unbind(1), "movedim": lambda T, x: T.movedim(x, 0, -1),
    "select": lambda T, x: x.select(1, 2), "tril": lambda T, x: T.tril(x[0]),
    "triu": lambda T, x: T.triu(x[0], 1), "diagonal": lambda T, x: T.diagonal(x[0]),
    "index_select": lambda T, x: T.index_select(x, 2, T.tensor([3, 0])),
    "gather": lambda T, x: T.gather(x, 1, T.tensor([[[0, 1, 2, 0]] * 2, [[2, 2, 1, 0]] * 2])),
    "masked_fill": lambda T, x: x.masked_fill(x < 0, 0.5),
    "where": lambda T, x: T.where(x > 0, x, x * 2), "clamp": lambda T, x: T.clamp(x, -0.5, 0.5),
    "clamp-min": lambda T, x: x.clamp(min=0), "tile": lambda T, x: T.tile(x[0], (2,)),
    "unflatten": lambda T, x: x.unflatten(2, (2, 2)), "expand_as": lambda T, x:
        x[:1].expand_as(x), "contiguous": lambda T, x: x.transpose(0, 1).contiguous(),
    "swapaxes": lambda T, x: x.swapaxes(0, 1), "mT": lambda T, x: x.mT,
    "repeat_interleave": lambda T, x: x.repeat_interleave(2, dim=0),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_and_indexing(name):
    check(VIEWS[name], [((2, 3, 4), F32)])


def test_cat_stack():
    check(lambda T, a, b: (T.cat([a, b], 0), T.cat([a, b], -1), T.stack([a, b], 1),
                           T.hstack([a, b]), T.vstack([a, b])), [((2, 3), F32), ((2, 3), F32)])


def test_scatter_add_and_scatter():
    idx = np.array([[0, 1, 2], [2, 0, 1]])
    check(lambda T, x, s: T.scatter_add(x, 1, T.tensor(idx), s),
          [((2, 4), F32), ((2, 3), F32)])
    check(lambda T, x, s: x.scatter(1, T.tensor(idx), s), [((2, 4), F32), ((2, 3), F32)])


SETITEM = {
    "int": lambda y: y.__setitem__((0, 1), 5.0),
    "slice": lambda y: y.__setitem__((slice(None), slice(0, None, 2)), -1.0),
    "mask": lambda y: y.__setitem__(y > 0, 0.0),
    "int-tensor": lambda y: y.__setitem__(np.array([2, 0]), 3.0),
}


@pytest.mark.parametrize("name", sorted(SETITEM))
def test_setitem_no_grad(name):
    def fn(T, x):
        y = x.detach().clone()
        key_fn = SETITEM[name]
        if name == "int-tensor":
            y[T.tensor([2, 0])] = 3.0
        else:
            key_fn(y)
        return y
    check(fn, [((3, 4), F32)], grad=False)


@pytest.mark.parametrize("name", ["int", "slice", "mask"])
def test_setitem_with_grad(name):
    def fn(T, x, v):
        y = x * 1.0
        if name == "int":
            y[0, 1] = v.sum()
        elif name == "slice":
            y[:, ::2] = v[:, :2]
        else:
            y[y > 0] = 0.0
            y = y + v.sum()
        return y
    check(fn, [((3, 4), F32), ((3, 4), F32)])


def test_view_shares_memory_and_inplace():
    def fn(T, x):
        y = x.clone()
        v = y.view(-1)
        v[0] = 100.0
        y.t()[1].mul_(2)
        y[1].add_(1)
        y.narrow(1, 0, 1).zero_()
        return y
    check(fn, [((3, 4), F32)], grad=False)


INPLACE = ["add_", "sub_", "mul_", "div_", "pow_", "clamp_", "exp_", "zero_", "fill_",
           "abs_", "neg_", "sqrt_", "relu_", "sigmoid_", "masked_fill_", "copy_"]


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_methods(name):
    def fn(T, x, o):
        y = x.clone().abs() + 0.5
        m = getattr(y, name)
        args = {"add_": (o,), "sub_": (o,), "mul_": (o,), "div_": (o.abs() + 1,), "pow_": (2,),
                "clamp_": (0.6, 1.0), "fill_": (3.0,), "masked_fill_": (o > 0, -1.0),
                "copy_": (o,)}.get(name, ())
        r = m(*args)
        assert r is y
        return y
    check(fn, [((3, 4), F32), ((3, 4), F32)])


def test_inplace_in_graph_and_iadd():
    def fn(T, x):
        y = x * 2
        y += 1
        y.mul_(x)
        return y.relu_()
    check(fn, [((3, 4), F32)])


# --------------------------------------------------------------- autograd
def test_grad_accumulates_and_autograd_grad_create_graph():
    def fn(T, x):
        y = (x ** 3).sum()
        (g,) = T.autograd.grad(y, x, create_graph=True)
        return g
    check(fn, [((4,), F32)])

    def fn2(T, x):
        (x * 2).sum().backward()
        (x * 3).sum().backward()
        return x.grad * 1.0
    check(fn2, [((3,), F32)], grad=False)


def test_no_grad_and_detach():
    def fn(T, x):
        with T.no_grad():
            y = x * 2
        z = x.detach() * 3
        return (y.requires_grad, z.requires_grad, (x * 2).requires_grad,
                (x * 1).is_leaf, x.is_leaf)
    check(fn, [((3,), F32)], grad=False)


# ------------------------------------------------------------- conversion
def test_dtype_conversions_and_item():
    def fn(T, x):
        return (x.int(), x.long(), x.double(), x.bool(), x.to(T.float64), x.float().half(),
                x.to(dtype=T.int32), x.sum().item(), x.tolist(), x.type(T.int64),
                x.new_zeros(2, 3), T.zeros_like(x), T.ones_like(x, dtype=T.int64),
                T.full_like(x, 7), x.numel(), x.dim(), x.size(1), tuple(x.size()))
    check(fn, [((3, 4), F32)], grad=False)


CREATION = {
    "tensor-floats": lambda T: T.tensor([1.0, 2.0]), "tensor-ints": lambda T: T.tensor([1, 2]),
    "tensor-bools": lambda T: T.tensor([True, False]),
    "tensor-nested": lambda T: T.tensor([[1, 2], [3, 4]], dtype=T.float64),
    "zeros": lambda T: T.zeros(2, 3), "zeros-tuple": lambda T: T.zeros((2, 3), dtype=T.int32),
    "ones": lambda T: T.ones(3), "full-int": lambda T: T.full((2, 2), 3),
    "full-float": lambda T: T.full((2, 2), 1.5), "full-bool": lambda T: T.full((2,), True),
    "arange-int": lambda T: T.arange(5), "arange-float": lambda T: T.arange(0, 1, 0.25),
    "arange-step": lambda T: T.arange(1, 10, 3), "linspace": lambda T: T.linspace(0, 1, 5),
    "eye": lambda T: T.eye(3), "eye-rect": lambda T: T.eye(2, 3),
    "from_numpy": lambda T: T.from_numpy(np.arange(4.0)),
    "logspace": lambda T: T.logspace(0, 2, 3),
}


@pytest.mark.parametrize("name", sorted(CREATION))
def test_creation(name):
    check(lambda T: CREATION[name](T), [], grad=False)


def test_from_numpy_shares_memory_and_dragon_roundtrip():
    a = np.zeros(3, np.float32)
    t = vt.from_numpy(a)
    a[0] = 5
    assert t[0].item() == 5.0
    d = t.dragon()
    assert vt.from_dragon(d).dragon() is d
    t.add_(1)
    assert a[1] == 1.0 and float(d.numpy()[1]) == 1.0


def test_manual_seed_reproducible():
    vt.manual_seed(3)
    a = vt.randn(4)
    b = vt.randint(0, 10, (5,))
    vt.manual_seed(3)
    assert np.array_equal(a.numpy(), vt.randn(4).numpy())
    assert np.array_equal(b.numpy(), vt.randint(0, 10, (5,)).numpy())
    assert vt.rand(2, 3).dtype == vt.float32 and vt.randint(0, 3, (2,)).dtype == vt.int64


# ------------------------------------------------------------- functional
FUNCTIONAL = {
    "linear": (lambda T, x, w, b: T.nn.functional.linear(x, w, b),
               [((4, 3), F32), ((5, 3), F32), ((5,), F32)]),
    "conv2d": (lambda T, x, w, b: T.nn.functional.conv2d(x, w, b, padding=1),
               [((2, 3, 6, 6), F32), ((4, 3, 3, 3), F32), ((4,), F32)]),
    "conv2d-stride": (lambda T, x, w: T.nn.functional.conv2d(x, w, stride=2),
                      [((1, 2, 7, 7), F32), ((3, 2, 3, 3), F32)]),
    "conv2d-same": (lambda T, x, w: T.nn.functional.conv2d(x, w, padding="same"),
                    [((1, 2, 5, 5), F32), ((3, 2, 3, 3), F32)]),
    "conv2d-groups": (lambda T, x, w: T.nn.functional.conv2d(x, w, groups=2, padding=1),
                      [((1, 4, 5, 5), F32), ((4, 2, 3, 3), F32)]),
    "conv1d": (lambda T, x, w: T.nn.functional.conv1d(x, w, padding=1),
               [((2, 3, 8), F32), ((4, 3, 3), F32)]),
    "max_pool2d": (lambda T, x: T.nn.functional.max_pool2d(x, 2), [((2, 3, 6, 6), F32)]),
    "max_pool2d-s1": (lambda T, x: T.nn.functional.max_pool2d(x, 3, 1, 1),
                      [((1, 2, 5, 5), F32)]),
    "avg_pool2d": (lambda T, x: T.nn.functional.avg_pool2d(x, 2), [((2, 3, 6, 6), F32)]),
    "adaptive_avg_pool2d": (lambda T, x: T.nn.functional.adaptive_avg_pool2d(x, 1),
                            [((2, 3, 4, 4), F32)]),
    "layer_norm": (lambda T, x, w, b: T.nn.functional.layer_norm(x, (4,), w, b),
                   [((3, 4), F32), ((4,), F32), ((4,), F32)]),
    "group_norm": (lambda T, x: T.nn.functional.group_norm(x, 2), [((2, 4, 3, 3), F32)]),
    "batch_norm-train": (lambda T, x, w, b: T.nn.functional.batch_norm(
        x, None, None, w, b, training=True), [((4, 3, 2, 2), F32), ((3,), F32), ((3,), F32)]),
    "softmax": (lambda T, x: T.nn.functional.softmax(x, dim=-1), [((3, 5), F32)]),
    "softmax-dim0": (lambda T, x: T.softmax(x, 0), [((3, 5), F32)]),
    "log_softmax": (lambda T, x: T.nn.functional.log_softmax(x, dim=1), [((3, 5), F32)]),
    "gelu": (lambda T, x: T.nn.functional.gelu(x), [((3, 5), F32)]),
    "gelu-tanh": (lambda T, x: T.nn.functional.gelu(x, approximate="tanh"), [((3, 5), F32)]),
    "silu": (lambda T, x: T.nn.functional.silu(x), [((3, 5), F32)]),
    "elu": (lambda T, x: T.nn.functional.elu(x), [((3, 5), F32)]),
    "leaky_relu": (lambda T, x: T.nn.functional.leaky_relu(x, 0.2), [((3, 5), F32)]),
    "softplus": (lambda T, x: T.nn.functional.softplus(x), [((3, 5), F32)]),
    "hardtanh": (lambda T, x: T.nn.functional.hardtanh(x), [((3, 5), F32)]),
    "mish": (lambda T, x: T.nn.functional.mish(x), [((3, 5), F32)]),
    "logsigmoid": (lambda T, x: T.nn.functional.logsigmoid(x), [((3, 5), F32)]),
    "normalize": (lambda T, x: T.nn.functional.normalize(x, dim=1), [((3, 5), F32)]),
    "cosine_similarity": (lambda T, a, b: T.nn.functional.cosine_similarity(a, b),
                          [((3, 5), F32), ((3, 5), F32)]),
    "pad": (lambda T, x: T.nn.functional.pad(x, (1, 2, 0, 1)), [((2, 3, 4), F32)]),
    "pad-value": (lambda T, x: T.nn.functional.pad(x, (1, 1), value=2.0), [((2, 3), F32)]),
    "interpolate-nearest": (lambda T, x: T.nn.functional.interpolate(x, scale_factor=2),
                            [((1, 2, 3, 3), F32)]),
    "interpolate-bilinear": (lambda T, x: T.nn.functional.interpolate(
        x, size=(5, 4), mode="bilinear", align_corners=False), [((1, 2, 3, 3), F32)]),
    "mse": (lambda T, a, b: T.nn.functional.mse_loss(a, b), [((3, 4), F32), ((3, 4), F32)]),
    "mse-sum": (lambda T, a, b: T.nn.functional.mse_loss(a, b, reduction="sum"),
                [((3, 4), F32), ((3, 4), F32)]),
    "l1": (lambda T, a, b: T.nn.functional.l1_loss(a, b), [((3, 4), F32), ((3, 4), F32)]),
    "smooth_l1": (lambda T, a, b: T.nn.functional.smooth_l1_loss(a, b, beta=0.5),
                  [((3, 4), F32), ((3, 4), F32)]),
    "huber": (lambda T, a, b: T.nn.functional.huber_loss(a, b, delta=0.7),
              [((3, 4), F32), ((3, 4), F32)]),
    "bce_logits": (lambda T, a, b: T.nn.functional.binary_cross_entropy_with_logits(a, b),
                   [((3, 4), F32), ((3, 4), F32, "prob")]),
    "bce": (lambda T, a, b: T.nn.functional.binary_cross_entropy(a, b),
            [((3, 4), F32, "prob"), ((3, 4), F32, "prob")]),
    "kl_div": (lambda T, a, b: T.nn.functional.kl_div(a, b, reduction="batchmean"),
               [((3, 4), F32), ((3, 4), F32, "prob")]),
    "sdpa": (lambda T, q, k, v: T.nn.functional.scaled_dot_product_attention(q, k, v),
             [((2, 3, 4), F32), ((2, 5, 4), F32), ((2, 5, 4), F32)]),
    "sdpa-causal": (lambda T, q, k, v: T.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True), [((2, 4, 4), F32), ((2, 4, 4), F32), ((2, 4, 4), F32)]),
    "sdpa-4d-scale": (lambda T, q, k, v: T.nn.functional.scaled_dot_product_attention(
        q, k, v, scale=0.3), [((2, 3, 4, 5), F32), ((2, 3, 6, 5), F32), ((2, 3, 6, 2), F32)]),
    "sdpa-causal-rect": (lambda T, q, k, v: T.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True), [((1, 3, 4), F32), ((1, 6, 4), F32), ((1, 6, 4), F32)]),
    "sdpa-float-mask": (lambda T, q, k, v, m: T.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=m), [((2, 3, 4), F32), ((2, 5, 4), F32), ((2, 5, 4), F32),
                                ((3, 5), F32)]),
    "sdpa-bool-mask": (lambda T, q, k, v: T.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=T.tensor([[True, False, True, True, False]] * 3)),
        [((2, 3, 4), F32), ((2, 5, 4), F32), ((2, 5, 4), F32)]),
    "sdpa-gqa": (lambda T, q, k, v: T.nn.functional.scaled_dot_product_attention(
        q, k, v, enable_gqa=True), [((1, 4, 3, 4), F32), ((1, 2, 5, 4), F32),
                                    ((1, 2, 5, 4), F32)]),
    "sdpa-float64": (lambda T, q, k, v: T.nn.functional.scaled_dot_product_attention(
        q, k, v), [((2, 3, 4), "float64"), ((2, 5, 4), "float64"), ((2, 5, 4), "float64")]),
    "conv3d": (lambda T, x, w, b: T.nn.functional.conv3d(x, w, b, padding=1),
               [((2, 3, 4, 5, 5), F32), ((4, 3, 3, 3, 3), F32), ((4,), F32)]),
    "conv3d-stride-dil-groups": (lambda T, x, w: T.nn.functional.conv3d(
        x, w, stride=(1, 2, 2), dilation=(2, 1, 1), groups=2),
        [((1, 4, 6, 7, 7), F32), ((4, 2, 2, 3, 3), F32)]),
    "conv3d-same": (lambda T, x, w: T.nn.functional.conv3d(x, w, padding="same"),
                    [((1, 2, 4, 5, 5), F32), ((3, 2, 3, 2, 3), F32)]),
    "conv_transpose3d": (lambda T, x, w, b: T.nn.functional.conv_transpose3d(
        x, w, b, stride=2, padding=1, output_padding=1),
        [((1, 2, 3, 3, 3), F32), ((2, 3, 3, 3, 3), F32), ((3,), F32)]),
    "max_pool3d": (lambda T, x: T.nn.functional.max_pool3d(x, 2), [((2, 3, 4, 6, 6), F32)]),
    "max_pool3d-pad-ceil": (lambda T, x: T.nn.functional.max_pool3d(
        x, 3, 2, 1, ceil_mode=True), [((1, 2, 5, 6, 7), F32)]),
    "max_pool3d-indices": (lambda T, x: tuple(T.nn.functional.max_pool3d(
        x, (2, 2, 3), (1, 2, 2), return_indices=True)), [((1, 2, 4, 5, 7), F32)]),
    "avg_pool3d": (lambda T, x: T.nn.functional.avg_pool3d(x, 2), [((2, 3, 4, 6, 6), F32)]),
    "avg_pool3d-pad-nocount": (lambda T, x: T.nn.functional.avg_pool3d(
        x, 3, 2, 1, count_include_pad=False), [((1, 2, 5, 6, 7), F32)]),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_functional(name):
    fn, specs = FUNCTIONAL[name]
    check(fn, specs, rtol=2e-4, atol=2e-5)


TARGET = np.array([1, 0, 3, 2, 1])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("kind", ["cross_entropy", "nll_loss", "cross_entropy-weight",
                                  "cross_entropy-smooth", "cross_entropy-ignore"])
def test_classification_losses(kind, reduction):
    def fn(T, x):
        F = T.nn.functional
        t = T.tensor(TARGET)
        if kind == "cross_entropy":
            return F.cross_entropy(x, t, reduction=reduction)
        if kind == "nll_loss":
            return F.nll_loss(F.log_softmax(x, 1), t, reduction=reduction)
        if kind == "cross_entropy-weight":
            return F.cross_entropy(x, t, weight=T.tensor([1.0, 2.0, 0.5, 1.5]),
                                   reduction=reduction)
        if kind == "cross_entropy-ignore":
            return F.cross_entropy(x, T.tensor([1, -100, 3, 2, -100]), reduction=reduction)
        return F.cross_entropy(x, t, label_smoothing=0.1, reduction=reduction)
    check(fn, [((5, 4), F32)])


def test_embedding_and_one_hot():
    check(lambda T, w: T.nn.functional.embedding(T.tensor([[0, 2], [3, 3]]), w),
          [((4, 3), F32)])
    check(lambda T: T.nn.functional.one_hot(T.tensor([0, 2, 1]), 4), [], grad=False)


# ---------------------------------------------------------------- modules
def _module_case(build, inputs, train=False, call=None):
    torch.manual_seed(0)
    ref = build(torch)
    mine = build(vt)
    state = {k: v.detach().numpy().copy() for k, v in ref.state_dict().items()}
    missing = mine.load_state_dict({k: vt.tensor(v) for k, v in state.items()})
    assert list(missing.missing_keys) == [] and list(missing.unexpected_keys) == []
    assert list(mine.state_dict().keys()) == list(ref.state_dict().keys())
    for m in (ref, mine):
        m.train(train)
    arrays = [_arr(s) for s in inputs]
    results = []
    for T, m in ((torch, ref), (vt, mine)):
        xs = [T.tensor(a) for a in arrays]
        for x in xs:
            if x.dtype.is_floating_point:
                x.requires_grad_(True)
        out = call(m, *xs) if call else m(*xs)
        outs = [o for o in _flat(out) if o is not None]
        loss = sum((o.double() * T.tensor(np.random.default_rng(i).standard_normal(
            tuple(o.shape)))).sum() for i, o in enumerate(outs))
        loss.backward()
        grads = {n: p.grad.numpy().copy() for n, p in m.named_parameters() if p.grad is not None}
        xg = [x.grad.numpy().copy() for x in xs if x.grad is not None]
        results.append(([o.detach().numpy().copy() for o in outs], grads, xg))
    (ro, rg, rx), (go, gg, gx) = results
    assert len(ro) == len(go)
    for a, b in zip(go, ro):
        _close(a, b, 2e-4, 2e-5, "output")
    assert sorted(gg) == sorted(rg)
    for k in rg:
        _close(gg[k], rg[k], 2e-3, 2e-4, f"grad {k}")
    for a, b in zip(gx, rx):
        _close(a, b, 2e-3, 2e-4, "input grad")


MODULES = {
    "Linear": (lambda T: T.nn.Linear(4, 3), [((2, 4), F32)]),
    "Linear-nobias": (lambda T: T.nn.Linear(4, 3, bias=False), [((2, 4), F32)]),
    "Conv2d": (lambda T: T.nn.Conv2d(2, 3, 3, padding=1), [((2, 2, 5, 5), F32)]),
    "ConvTranspose2d": (lambda T: T.nn.ConvTranspose2d(2, 3, 3, stride=2),
                        [((1, 2, 4, 4), F32)]),
    "BatchNorm1d-train": (lambda T: T.nn.BatchNorm1d(3), [((4, 3), F32)], True),
    "BatchNorm2d-eval": (lambda T: T.nn.BatchNorm2d(3), [((2, 3, 2, 2), F32)]),
    "LayerNorm": (lambda T: T.nn.LayerNorm(4), [((2, 3, 4), F32)]),
    "GroupNorm": (lambda T: T.nn.GroupNorm(2, 4), [((2, 4, 3, 3), F32)]),
    "Sequential-MLP": (lambda T: T.nn.Sequential(T.nn.Linear(4, 8), T.nn.ReLU(),
                                                 T.nn.Linear(8, 2), T.nn.Tanh()),
                       [((3, 4), F32)]),
    "LSTM": (lambda T: T.nn.LSTM(3, 4), [((5, 2, 3), F32)]),
    "LSTM-2layer-bf": (lambda T: T.nn.LSTM(3, 4, num_layers=2, batch_first=True),
                       [((2, 5, 3), F32)]),
    "LSTM-bidir": (lambda T: T.nn.LSTM(3, 4, bidirectional=True), [((4, 2, 3), F32)]),
    "GRU": (lambda T: T.nn.GRU(3, 4), [((5, 2, 3), F32)]),
    "GRU-bf-2layer": (lambda T: T.nn.GRU(3, 4, 2, batch_first=True), [((2, 4, 3), F32)]),
    "RNN": (lambda T: T.nn.RNN(3, 4), [((5, 2, 3), F32)]),
    "LSTMCell": (lambda T: T.nn.LSTMCell(3, 4), [((2, 3), F32)]),
    "GRUCell": (lambda T: T.nn.GRUCell(3, 4), [((2, 3), F32)]),
    "MultiheadAttention": (lambda T: T.nn.MultiheadAttention(8, 2), [((3, 2, 8), F32)]),
    "MultiheadAttention-bf": (lambda T: T.nn.MultiheadAttention(8, 4, batch_first=True),
                              [((2, 3, 8), F32)]),
    "TransformerEncoderLayer": (lambda T: T.nn.TransformerEncoderLayer(
        8, 2, dim_feedforward=16, dropout=0.0), [((3, 2, 8), F32)]),
    "TransformerEncoderLayer-normfirst-gelu": (lambda T: T.nn.TransformerEncoderLayer(
        8, 2, 16, 0.0, activation="gelu", batch_first=True, norm_first=True),
        [((2, 3, 8), F32)]),
    "TransformerEncoder": (lambda T: T.nn.TransformerEncoder(T.nn.TransformerEncoderLayer(
        8, 2, 16, 0.0), 2), [((3, 2, 8), F32)]),
    "PReLU": (lambda T: T.nn.PReLU(), [((2, 3), F32)]),
    "Conv1d": (lambda T: T.nn.Conv1d(2, 3, 3, padding=1), [((2, 2, 7), F32)]),
    "MaxPool1d-AvgPool1d": (lambda T: T.nn.Sequential(T.nn.MaxPool1d(2), T.nn.AvgPool1d(2)),
                            [((2, 3, 8), F32)]),
    "AdaptiveAvgPool1d": (lambda T: T.nn.AdaptiveAvgPool1d(1), [((2, 3, 8), F32)]),
    "AvgPool2d-pad": (lambda T: T.nn.AvgPool2d(3, 2, 1), [((1, 2, 6, 6), F32)]),
    "Bilinear": (lambda T: T.nn.Bilinear(3, 4, 2), [((5, 3), F32), ((5, 4), F32)]),
    "Dropout-eval": (lambda T: T.nn.Sequential(T.nn.Linear(3, 3), T.nn.Dropout(0.5)),
                     [((4, 3), F32)]),
    "Unflatten": (lambda T: T.nn.Sequential(T.nn.Linear(6, 6), T.nn.Unflatten(1, (2, 3))),
                  [((4, 6), F32)]),
    "activations": (lambda T: T.nn.Sequential(
        T.nn.Linear(4, 4), T.nn.GELU(), T.nn.Linear(4, 4), T.nn.SiLU(), T.nn.Linear(4, 4),
        T.nn.LeakyReLU(0.1), T.nn.Linear(4, 4), T.nn.ELU(), T.nn.Linear(4, 4), T.nn.Softplus(),
        T.nn.Linear(4, 4), T.nn.Hardswish(), T.nn.Linear(4, 4), T.nn.Softmax(dim=-1)),
        [((3, 4), F32)]),
    "LayerNorm-2d-shape": (lambda T: T.nn.LayerNorm([3, 4]), [((2, 3, 4), F32)]),
    "GroupNorm-noaffine": (lambda T: T.nn.GroupNorm(2, 4, affine=False), [((2, 4, 3), F32)]),
    "BatchNorm2d-train": (lambda T: T.nn.BatchNorm2d(3), [((2, 3, 2, 2), F32)], True),
    "ConvTranspose2d-pad": (lambda T: T.nn.ConvTranspose2d(2, 2, 4, 2, 1), [((1, 2, 3, 3),
                                                                              F32)]),
    "Conv3d": (lambda T: T.nn.Conv3d(2, 3, 3, padding=1), [((2, 2, 4, 5, 5), F32)]),
    "Conv3d-nobias-stride": (lambda T: T.nn.Conv3d(2, 4, (2, 3, 3), stride=2, bias=False),
                             [((1, 2, 5, 7, 7), F32)]),
    "ConvTranspose3d": (lambda T: T.nn.ConvTranspose3d(2, 3, 3, stride=2),
                        [((1, 2, 3, 3, 3), F32)]),
    "MaxPool3d-AvgPool3d": (lambda T: T.nn.Sequential(T.nn.Conv3d(2, 2, 1), T.nn.MaxPool3d(2),
                                                      T.nn.AvgPool3d(2, 1, 1)),
                            [((1, 2, 4, 6, 6), F32)]),
    "MultiheadAttention-noweights": (lambda T: T.nn.MultiheadAttention(8, 2),
                                     [((3, 2, 8), F32)]),
    "MultiheadAttention-noweights-bf": (lambda T: T.nn.MultiheadAttention(
        8, 4, batch_first=True), [((2, 3, 8), F32)]),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules(name):
    build, inputs, *rest = MODULES[name]
    call = None
    if name.startswith("MultiheadAttention-noweights"):
        def call(m, x):  # noqa: E306
            out, w = m(x, x, x, need_weights=False)
            assert w is None
            return out
    elif name.startswith("MultiheadAttention"):
        def call(m, x):  # noqa: E306
            return m(x, x, x)[0]
    _module_case(build, inputs, train=bool(rest and rest[0]), call=call)


@pytest.mark.parametrize("name", ["CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss",
                                  "SmoothL1Loss", "HuberLoss", "BCEWithLogitsLoss",
                                  "KLDivLoss"])
def test_loss_modules(name):
    def fn(T, x, t):
        m = getattr(T.nn, name)()
        if name in ("CrossEntropyLoss", "NLLLoss"):
            tgt = T.tensor([1, 0, 3])
            return m(x if name == "CrossEntropyLoss" else T.log_softmax(x, 1), tgt)
        if name == "KLDivLoss":
            return m(T.log_softmax(x, 1), T.softmax(t, 1))
        return m(x, t.sigmoid() if name == "BCEWithLogitsLoss" else t)
    check(fn, [((3, 4), F32), ((3, 4), F32)])


def test_embedding_module_padding_idx():
    torch.manual_seed(0)
    ref = torch.nn.Embedding(5, 3, padding_idx=1)
    mine = vt.nn.Embedding(5, 3, padding_idx=1)
    assert np.all(mine.weight.detach().numpy()[1] == 0)
    mine.load_state_dict({"weight": vt.tensor(ref.weight.detach().numpy())})
    idx = [[1, 2], [4, 1]]
    r = ref(torch.tensor(idx))
    g = mine(vt.tensor(idx))
    _close(g.detach().numpy(), r.detach().numpy(), 1e-6, 1e-7, "embedding")
    r.sum().backward()
    g.sum().backward()
    _close(mine.weight.grad.numpy(), ref.weight.grad.numpy(), 1e-6, 1e-7, "embedding grad")


def test_state_dict_keys_match_torch():
    def build(T):
        return T.nn.Sequential(T.nn.Conv2d(1, 2, 3), T.nn.BatchNorm2d(2), T.nn.Flatten(),
                               T.nn.LSTM(4, 3), )
    assert list(build(vt).state_dict()) == list(build(torch).state_dict())


# ------------------------------------------------------------- optimizers
OPTIMS = {
    "SGD": lambda T, p: T.optim.SGD(p, lr=0.1),
    "SGD-momentum-nesterov-wd": lambda T, p: T.optim.SGD(p, lr=0.1, momentum=0.9,
                                                          nesterov=True, weight_decay=0.01),
    "Adam": lambda T, p: T.optim.Adam(p, lr=0.01),
    "Adam-amsgrad": lambda T, p: T.optim.Adam(p, lr=0.01, amsgrad=True, weight_decay=0.1),
    "AdamW": lambda T, p: T.optim.AdamW(p, lr=0.01, weight_decay=0.1),
    "RMSprop": lambda T, p: T.optim.RMSprop(p, lr=0.01),
    "RMSprop-centered-momentum": lambda T, p: T.optim.RMSprop(p, lr=0.01, momentum=0.9,
                                                               centered=True),
    "Adagrad": lambda T, p: T.optim.Adagrad(p, lr=0.1),
    "Adadelta": lambda T, p: T.optim.Adadelta(p, lr=1.0),
    "Adadelta-wd": lambda T, p: T.optim.Adadelta(p, lr=0.5, rho=0.8, weight_decay=0.1),
}


@pytest.mark.parametrize("name", sorted(OPTIMS))
def test_optimizers(name):
    w0 = RNG.standard_normal((3, 2)).astype(np.float32)
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    res = []
    for T in (torch, vt):
        w = T.nn.Parameter(T.tensor(w0.copy()))
        opt = OPTIMS[name](T, [w])
        sched = T.optim.lr_scheduler.StepLR(opt, 2, 0.5)
        for _ in range(4):
            opt.zero_grad()
            loss = ((T.tensor(x) @ w).tanh() ** 2).sum()
            loss.backward()
            opt.step()
            sched.step()
        res.append(w.detach().numpy().copy())
    _close(res[1], res[0], 1e-4, 1e-5, name)


SCHEDS = {
    "StepLR": lambda T, o: T.optim.lr_scheduler.StepLR(o, 2, 0.5),
    "MultiStepLR": lambda T, o: T.optim.lr_scheduler.MultiStepLR(o, [1, 3], 0.1),
    "ExponentialLR": lambda T, o: T.optim.lr_scheduler.ExponentialLR(o, 0.9),
    "CosineAnnealingLR": lambda T, o: T.optim.lr_scheduler.CosineAnnealingLR(o, 5),
    "LambdaLR": lambda T, o: T.optim.lr_scheduler.LambdaLR(o, lambda e: 1 / (e + 1)),
    "LinearLR": lambda T, o: T.optim.lr_scheduler.LinearLR(o, 0.5, 1.0, 3),
}


@pytest.mark.parametrize("name", sorted(SCHEDS))
def test_schedulers(name):
    lrs = []
    for T in (torch, vt):
        w = T.nn.Parameter(T.zeros(2))
        opt = T.optim.SGD([w], lr=0.1)
        s = SCHEDS[name](T, opt)
        seq = []
        for _ in range(6):
            w.grad = T.zeros(2)
            opt.step()
            s.step()
            seq.append(s.get_last_lr()[0])
        lrs.append(seq)
    np.testing.assert_allclose(lrs[1], lrs[0], rtol=1e-6)


MISC = {
    "equal": (lambda T, a, b: (T.equal(a, a), T.equal(a, b)), False),
    "allclose": (lambda T, a, b: (T.allclose(a, a + 1e-9), T.allclose(a, b)), False),
    "isclose": (lambda T, a, b: T.isclose(a, b, atol=1.0), False),
    "isnan-isinf-isfinite": (lambda T, a, b: (T.isnan(a / 0 * 0), T.isinf(a / 0),
                                             T.isfinite(a)), False),
    "nan_to_num": (lambda T, a, b: T.nan_to_num(a / 0, posinf=9.0, neginf=-9.0), False),
    "lerp": (lambda T, a, b: T.lerp(a, b, 0.3), True),
    "addcmul": (lambda T, a, b: T.addcmul(a, a, b, value=0.5), True),
    "addcdiv": (lambda T, a, b: T.addcdiv(a, a, b.abs() + 1, value=2.0), True),
    "hypot": (lambda T, a, b: T.hypot(a, b), True),
    "fmod": (lambda T, a, b: T.fmod(a * 5, b.abs() + 1), True),
    "div-floor": (lambda T, a, b: T.div(a, b.abs() + 0.5, rounding_mode="floor"), False),
    "div-trunc": (lambda T, a, b: T.div(a, b.abs() + 0.5, rounding_mode="trunc"), False),
    "logical": (lambda T, a, b: (T.logical_and(a > 0, b > 0), T.logical_or(a > 0, b > 0),
                                 T.logical_xor(a > 0, b > 0), ~(a > 0),
                                 (a > 0) & (b > 0), (a > 0) | (b > 0)), False),
    "count_nonzero": (lambda T, a, b: T.count_nonzero(a > 0, dim=1), False),
    "var_mean": (lambda T, a, b: T.var_mean(a, dim=1), True),
    "std-unbiased-false": (lambda T, a, b: a.std(1, unbiased=False), True),
    "cdist": (lambda T, a, b: T.cdist(a, b), True),
    "tensordot": (lambda T, a, b: T.tensordot(a, b.T, dims=1), True),
    "diag-1d": (lambda T, a, b: T.diag(a[0]), True),
    "trace": (lambda T, a, b: T.trace(a[:, :3]), True),
    "min-other": (lambda T, a, b: T.min(a, b), True),
    "clamp-tensor": (lambda T, a, b: T.clamp(a, min=b), True),
    "sum-dtype": (lambda T, a, b: a.sum(1, dtype=T.float64), True),
    "nonzero": (lambda T, a, b: (T.nonzero(a > 0), T.where(a > 0)), False),
    "masked_select": (lambda T, a, b: T.masked_select(a, a > 0), True),
    "unique": (lambda T, a, b: T.unique((a * 2).round().long(), return_counts=True), False),
}


@pytest.mark.parametrize("name", sorted(MISC))
def test_misc(name):
    fn, grad = MISC[name]
    check(fn, [((3, 4), F32), ((3, 4), F32)], grad=grad)


# ------------------------------------------------ native ops (second wave)
def test_mha_masks_without_weights():
    def fn(T, x):
        T.manual_seed(0)
        m = T.nn.MultiheadAttention(8, 2, batch_first=True)
        with T.no_grad():
            for k, p in enumerate(m.parameters()):
                p.copy_(T.tensor(np.random.default_rng(k).standard_normal(
                    tuple(p.shape)).astype(np.float32) * 0.3))
        am = T.tensor(np.triu(np.ones((3, 3), bool), 1))
        kpm = T.tensor(np.array([[False, False, True], [False, False, False]]))
        fm = T.tensor(np.linspace(-1, 1, 9).reshape(3, 3).astype(np.float32))
        return (m(x, x, x, attn_mask=am, key_padding_mask=kpm, need_weights=False)[0],
                m(x, x, x, attn_mask=fm, need_weights=False)[0],
                m(x, x, x, is_causal=True, attn_mask=am, need_weights=False)[0],
                m(x, x, x, attn_mask=am, key_padding_mask=kpm)[0])
    check(fn, [((2, 3, 8), F32)], rtol=2e-4, atol=2e-5)


def test_isnan_isinf_isfinite():
    a = np.array([1.0, np.nan, np.inf, -np.inf, -0.0, 3.5], np.float32)
    check(lambda T, x: (T.isnan(x), T.isinf(x), T.isfinite(x), x.isnan(), x.isfinite()),
          [a], grad=False)
    check(lambda T, x: (T.isnan(x), T.isinf(x), T.isfinite(x)), [((3, 4), "int32")],
          grad=False)
    check(lambda T, x: (T.isnan(x), T.isinf(x), T.isfinite(x)), [a.astype(np.float64)[:0]],
          grad=False)


INT_DIV = {
    "floor_divide": lambda T, a, b: T.floor_divide(a, b),
    "a // b": lambda T, a, b: a // b,
    "remainder": lambda T, a, b: T.remainder(a, b),
    "a % b": lambda T, a, b: a % b,
    "fmod": lambda T, a, b: T.fmod(a, b),
    "div-trunc": lambda T, a, b: T.div(a, b, rounding_mode="trunc"),
    "div-floor": lambda T, a, b: T.div(a, b, rounding_mode="floor"),
    "a // 3": lambda T, a, b: a // 3,
    "a % -3": lambda T, a, b: a % -3,
    "7 % b": lambda T, a, b: 7 % b,
    "fmod(a, -2)": lambda T, a, b: T.fmod(a, -2),
}


def _nonzero_ints(shape, dt):
    b = RNG.integers(1, 6, shape) * RNG.choice([-1, 1], shape)
    return b.astype(dt)


@pytest.mark.parametrize("dt", ["int64", "int32", "float32", "float64"])
@pytest.mark.parametrize("name", sorted(INT_DIV))
def test_division_family_signs(name, dt):
    """Negative operands: floor (remainder, //) vs trunc (fmod, 'trunc')."""
    a = (RNG.integers(-20, 21, (4, 5)) * (1 if dt.startswith("int") else 0.75)).astype(dt)
    b = _nonzero_ints((4, 5), dt)
    # torch has no derivative for floor_divide and Number % Tensor (vm.torch:
    # the result does not record)
    grad = dt.startswith("float") and "//" not in name and name not in ("floor_divide",
                                                                          "7 % b")
    check(INT_DIV[name], [a, b], grad=grad)


@pytest.mark.parametrize("name", ["remainder", "fmod", "floor_divide", "div-trunc"])
def test_division_family_broadcast_promotion_and_grad(name):
    fn = INT_DIV[name]
    check(fn, [((3, 1), "float32", "pos"), ((4,), "float64", "pos")],
          grad=name != "floor_divide")
    check(fn, [((3, 4), "int32", "pos"), ((4,), "int64", "pos")], grad=False)
    check(fn, [((3, 4), "int64", "pos"), ((), "float32", "pos")], grad=False)


@pytest.mark.parametrize("name", ["floor_divide", "remainder", "div-trunc", "div-floor"])
def test_integer_division_by_zero_raises(name):
    a = np.array([3, -4, 5], np.int64)
    b = np.array([1, 0, 2], np.int64)
    assert isinstance(check(INT_DIV[name], [a, b], grad=False), RuntimeError)


def test_float_division_by_zero_follows_ieee():
    a = np.array([3.0, -4.0, 0.0, 5.0], np.float32)
    b = np.array([0.0, 0.0, 0.0, -0.0], np.float32)
    for name in ("floor_divide", "remainder", "fmod", "div-trunc"):
        check(INT_DIV[name], [a, b], grad=False)


BITWISE = {
    "a & b": lambda T, a, b: a & b, "a | b": lambda T, a, b: a | b,
    "a ^ b": lambda T, a, b: a ^ b, "~a": lambda T, a, b: ~a,
    "bitwise_and": lambda T, a, b: T.bitwise_and(a, b),
    "bitwise_or": lambda T, a, b: T.bitwise_or(a, b),
    "bitwise_xor": lambda T, a, b: T.bitwise_xor(a, b),
    "bitwise_not": lambda T, a, b: T.bitwise_not(a),
    "a & 6": lambda T, a, b: a & 6, "5 | b": lambda T, a, b: 5 | b,
    "method": lambda T, a, b: a.bitwise_xor(b),
}


@pytest.mark.parametrize("dts", [("int64", "int64"), ("int32", "int32"), ("int32", "int64"),
                                 ("bool", "bool"), ("bool", "int32"), ("int8", "int16"),
                                 ("uint8", "uint8"), ("float32", "int64")], ids=str)
@pytest.mark.parametrize("name", sorted(BITWISE))
def test_bitwise(name, dts):
    def arr(dt):
        if dt == "bool":
            return RNG.random((3, 4)) > 0.5
        if dt == "uint8":
            return RNG.integers(0, 256, (3, 4)).astype(dt)
        if dt.startswith("float"):
            return RNG.standard_normal((3, 4)).astype(dt)
        return RNG.integers(-100, 100, (3, 4)).astype(dt)
    check(BITWISE[name], [arr(dts[0]), arr(dts[1])], grad=False)


SHIFTS = {
    "a << b": lambda T, a, b: a << b, "a >> b": lambda T, a, b: a >> b,
    "left_shift": lambda T, a, b: T.bitwise_left_shift(a, b),
    "right_shift": lambda T, a, b: T.bitwise_right_shift(a, b),
    "a << 3": lambda T, a, b: a << 3, "a >> 2": lambda T, a, b: a >> 2,
    "1 << b": lambda T, a, b: 1 << b,
}


@pytest.mark.parametrize("dt", ["int64", "int32", "int16", "uint8"])
@pytest.mark.parametrize("name", sorted(SHIFTS))
def test_shifts(name, dt):
    bits = np.dtype(dt).itemsize * 8
    lo = 0 if dt == "uint8" else -1000
    a = RNG.integers(lo, 1000 if dt != "uint8" else 256, (4, 6)).astype(dt)
    b = RNG.integers(0, bits, (4, 6)).astype(dt)
    check(SHIFTS[name], [a, b], grad=False)


def test_shift_float_refused():
    check(lambda T, a, b: a << b, [((3,), F32), ((3,), F32)], grad=False)
    check(lambda T, a, b: T.bitwise_not(a), [((3,), F32), ((3,), F32)], grad=False)


@pytest.mark.parametrize("dt", ["int32", "int64", "bool", "int8", "float64"])
def test_cumsum_dtypes(dt):
    check(lambda T, a: (T.cumsum(a, 1), a.cumsum(0), T.cumsum(a, -1, dtype=T.float64)),
          [((3, 4), dt)])


def test_cumsum_edges():
    check(lambda T, a: T.cumsum(a, 0), [((), F32)])
    check(lambda T, a: T.cumsum(a, 1), [((2, 0), F32)])
    check(lambda T, a: T.cumsum(a, 2), [((2, 3), F32)])


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dt", ["int64", "int32", "float64", "int8"])
def test_sort_ties_stable(dt, descending):
    a = RNG.integers(-2, 3, (4, 7)).astype(dt)
    check(lambda T, x: tuple(T.sort(x, dim=1, descending=descending, stable=True)), [a])
    check(lambda T, x: T.argsort(x, dim=0, descending=descending, stable=True), [a],
          grad=False)
    check(lambda T, x: tuple(x.sort(stable=True, descending=descending)), [a])


def test_sort_nan_and_edges():
    a = np.array([[3.0, np.nan, -1.0, 2.0], [np.nan, 0.0, 5.0, -2.0]], np.float32)
    check(lambda T, x: tuple(T.sort(x)), [a], grad=False)
    check(lambda T, x: tuple(T.sort(x, descending=True)), [a], grad=False)
    check(lambda T, x: tuple(T.sort(x)), [((), F32)])
    check(lambda T, x: tuple(T.sort(x, 0)), [((0, 3), F32)])


@pytest.mark.parametrize("dt", ["float32", "float64", "int32", "int64"])
def test_topk_more(dt):
    check(lambda T, a: tuple(T.topk(a, 2, dim=0)), [np.stack([RNG.permutation(5)] * 3, 1)
                                                      .astype(dt)])
    check(lambda T, a: tuple(T.topk(a, 0)), [((5, 3), dt)])
    # distinct values: torch leaves the order of ties unspecified (native
    # TopK: the lower index first)
    perm = np.stack([RNG.permutation(12)[:6] - 5 for _ in range(2)]).astype(dt)
    check(lambda T, a: tuple(a.topk(3, largest=False)), [perm])
    check(lambda T, a: tuple(T.topk(a, 7)), [perm], grad=False)


EINSUM_MORE = [("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("bii->b", [(2, 3, 3)]),
               ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]), ("...i,i->...", [(2, 3, 4), (4,)]),
               ("ij,jk", [(3, 4), (4, 5)]), ("i,j,k->ijk", [(2,), (3,), (4,)]),
               ("bij,bkj->bik", [(1, 3, 4), (2, 5, 4)]), ("ij...->...ji", [(2, 3, 4, 5)])]


@pytest.mark.parametrize("eq,shapes", EINSUM_MORE, ids=[e for e, _ in EINSUM_MORE])
def test_einsum_native(eq, shapes):
    check(lambda T, *xs: T.einsum(eq, *xs), [(s, F32) for s in shapes])
    check(lambda T, *xs: T.einsum(eq, *xs), [(s, "float64") for s in shapes], rtol=1e-10,
          atol=1e-12)


def test_einsum_list_and_errors():
    check(lambda T, a, b: T.einsum("ij,jk->ik", [a, b]), [((3, 4), F32), ((4, 5), F32)])
    check(lambda T, a, b: T.einsum("ij,jk->ik", a, b), [((3, 4), F32), ((3, 5), F32)])
    check(lambda T, a: T.einsum("ij,jk->ik", a), [((3, 4), F32)])


@pytest.mark.parametrize("dt", ["float32", "int64", "bool", "int8"])
def test_nonzero_argwhere(dt):
    a = _arr(((3, 4), dt))
    if dt != "bool":
        a = a * (RNG.random((3, 4)) > 0.5)
    check(lambda T, x: (T.nonzero(x), T.argwhere(x), x.nonzero(as_tuple=True),
                        T.where(x.bool() if x.dtype != T.bool else x)), [a], grad=False)


def test_nonzero_edges():
    for a in (np.array(3.0, np.float32), np.array(0, np.int64), np.zeros((0, 3), np.float32),
              np.array([0.0, np.nan, -0.0, 2.0], np.float32), np.zeros((2, 3, 2), bool)):
        check(lambda T, x: (T.nonzero(x), T.nonzero(x, as_tuple=True)), [a], grad=False)


@pytest.mark.parametrize("dt", ["float32", "float64", "int32", "int64", "bool"])
def test_unique(dt):
    a = RNG.integers(-3, 4, (3, 5)).astype(dt)
    check(lambda T, x: (T.unique(x), tuple(T.unique(x, return_inverse=True,
                                                    return_counts=True)),
                        tuple(x.unique(return_counts=True))), [a], grad=False)


@pytest.mark.parametrize("dt", ["float32", "float64", "int32", "int64", "bool", "int8"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_dim(dt, dim):
    """torch.unique(dim=...): distinct slices (native Unique with axis, or
    the host for the other dtypes), inverse [size(dim)]."""
    a = RNG.integers(-1, 2, (4, 6)).astype(dt)
    a[3] = a[1]
    a[:, 4] = a[:, 0]
    check(lambda T, x: (T.unique(x, dim=dim), tuple(T.unique(x, return_inverse=True,
                                                             return_counts=True, dim=dim)),
                        tuple(x.unique(return_counts=True, dim=dim))), [a], grad=False)


def test_unique_dim_bad_input():
    x = vt.tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(IndexError, match="dim 2 is out of range"):
        vt.unique(x, dim=2)
    with pytest.raises(TypeError, match="dim must be an int"):
        vt.unique(x, dim=1.0)


def test_floor_divide_has_no_derivative():
    # as torch: the result requires grad, and a backward pass through it raises
    x = vt.tensor([1.5, -2.5], requires_grad=True)
    assert (x // 2).requires_grad and (3.0 % x).requires_grad
    for y in (x // 2, 3.0 % x):
        with pytest.raises(RuntimeError, match="derivative for aten::"):
            y.sum().backward()
    assert (x % 2).requires_grad and vt.fmod(x, 2).requires_grad
    (vt.div(x, 2, rounding_mode="floor") * 1.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])


def test_atan2_quadrants_and_signed_zeros():
    y = np.array([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, 1.0, -1.0, 0.0, -0.0, 2.0], np.float32)
    x = np.array([0.0, 0.0, -0.0, -0.0, 0.0, 0.0, -1.0, -1.0, -3.0, -3.0, np.inf], np.float32)
    check(lambda T, a, b: (T.atan2(a, b), a.atan2(b)), [y, x], grad=False)
    check(lambda T, a, b: T.atan2(a, b), [((3, 4), F32), ((4,), "float64")])
    check(lambda T, a, b: T.atan2(a, b), [((3, 4), "int64"), ((4,), "int32")], grad=False)


@pytest.mark.parametrize("dt", ["int64", "int32", "int16", "int8", "uint8"])
def test_shift_counts_out_of_range(dt):
    """Counts < 0 or >= the bit width: 0 (>> of a negative: -1), as torch."""
    a = np.array([5, -7, 100, 1, -1, 3]).astype(dt)
    b = np.array([64, 70, 8, -1, 200 if dt == "uint8" else 31, 16]).astype(dt)
    check(lambda T, x, y: (x << y, x >> y), [a, b], grad=False)
