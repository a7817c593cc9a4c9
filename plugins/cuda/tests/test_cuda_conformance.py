"""Every cuda kernel against the CPU (cpu_eigen) on the same inputs.

For each op with a cuda kernel (the registry is the source: a kernel
without a case here fails ``test_every_cuda_op_has_a_case``), each dtype the
cuda kernel registers is run on both devices: forward values and, for
differentiable float cases, the gradients of ``sum(y * w)`` with respect to
every float input (autograd on each device). float16/bfloat16, which the
CPU kernels mostly lack, are compared with the CPU's float32 result on the
same (rounded) inputs, within the 16-bit types' tolerance. Shapes include
0-d, empty, odd sizes and broadcasting.

GPU tests: they skip, with the device's reason, where no cuda device exists.
``DRAGON_CUDA_CONFORMANCE_DEVICE=cpu`` runs the harness with the CPU as the
device under test (CPU-supported dtypes only), to check the suite itself on
a machine without a GPU.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import dragon_core as dg

ops = dg.ops
DEV = os.environ.get("DRAGON_CUDA_CONFORMANCE_DEVICE", "cuda")
FLOATS = ("float32", "float64", "float16", "bfloat16")
INTS = ("int8", "int16", "int32", "int64", "uint8")
TOL = {"float64": (1e-10, 1e-12), "float32": (2e-5, 1e-6), "float16": (4e-3, 2e-3),
       "bfloat16": (3e-2, 1e-2)}


@pytest.fixture(autouse=True)
def _need_device(request):
    if DEV != "cuda" or request.node.get_closest_marker("gpu") is None:
        return
    import dragon_cuda
    if dragon_cuda.device_count() == 0:
        pytest.skip(f"no cuda device: {dragon_cuda.unavailable_reason()}")


# ------------------------------------------------------------------ inputs

def _data(kind, shape, seed):
    rng = np.random.default_rng(seed)
    if kind == "f":
        return rng.uniform(-2.0, 2.0, shape)
    if kind == "pos":
        return rng.uniform(0.2, 3.0, shape)
    if kind == "unit":
        return rng.uniform(-0.9, 0.9, shape)
    if kind == "ge1":
        return rng.uniform(1.1, 3.0, shape)
    if kind == "nz":  # away from 0, both signs
        return rng.uniform(0.25, 3.0, shape) * rng.choice([-1.0, 1.0], shape)
    if kind == "i":
        return rng.integers(-20, 20, shape)
    if kind == "u":
        return rng.integers(0, 40, shape)
    if kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    raise ValueError(kind)


def _host(arr, dtype):
    """A CPU tensor of ``dtype`` holding ``arr`` (16-bit floats by Cast)."""
    if dtype in ("float16", "bfloat16"):
        return ops.cast(dg.tensor(np.asarray(arr, np.float32)), dtype=dtype)
    return dg.tensor(np.asarray(arr).astype(dtype))


def _numpy(t):
    t = t.to("cpu")
    if str(t.dtype) in ("float16", "bfloat16"):
        t = ops.cast(t, dtype="float32")
    return np.asarray(t.numpy())


def _ref_dtype(dtype):
    """The CPU computes 16-bit float cases in float32."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


HALF = ("float16", "bfloat16")


def _maker(dtype, dev):
    """``arr -> tensor``: on the device under test a ``dtype`` tensor; on the
    CPU reference the same rounded values in the reference dtype (the CPU
    kernels lack the 16-bit floats)."""
    if dev == DEV:
        return lambda arr: _host(arr, dtype).to(dev)
    return lambda arr: ops.cast(_host(arr, dtype), dtype=_ref_dtype(dtype))


def _rounded(t, dtype):
    """A float32 reference result rounded to ``dtype`` once (what the device
    stores), as float32 NumPy."""
    if dtype in HALF:
        t = ops.cast(ops.cast(t.to("cpu"), dtype=dtype), dtype="float32")
    return _numpy(t)


def _need_half_device(dtype):
    if dtype in HALF and DEV == "cpu":
        pytest.skip("the harness check runs the CPU, which has no 16-bit float kernel here")


# ------------------------------------------------------------------ cases
# op -> list of (fn, [(kind, shape), ...], dtypes, differentiable)

U_SHAPES = [(), (0, 3), (5, 7), (3, 1, 5)]
B_SHAPES = [((), ()), ((5, 7), (5, 7)), ((4, 1, 3), (5, 1)), ((0, 3), (3,)), ((2, 3), ())]


def _unary(fn, kind="f", dtypes=FLOATS, grad=True):
    return [(fn, [(kind, s)], dtypes, grad) for s in U_SHAPES]


def _binary(fn, kinds=("f", "f"), dtypes=FLOATS, grad=True):
    return [(fn, [(kinds[0], a), (kinds[1], b)], dtypes, grad) for a, b in B_SHAPES]


NUM = FLOATS + INTS
ALL = NUM + ("bool",)
CASES = {
    "Neg": _unary(ops.neg, dtypes=NUM), "Abs": _unary(ops.abs, dtypes=NUM),
    "Sign": _unary(ops.sign, dtypes=NUM, grad=False), "Square": _unary(ops.square, dtypes=NUM),
    "Relu": _unary(ops.relu, dtypes=NUM),
    "Reciprocal": _unary(ops.reciprocal, "pos"), "Sqrt": _unary(ops.sqrt, "pos"),
    "Rsqrt": _unary(ops.rsqrt, "pos"), "Exp": _unary(ops.exp), "Log": _unary(ops.log, "pos"),
    "Log1p": _unary(ops.log1p, "pos"), "Sin": _unary(ops.sin), "Cos": _unary(ops.cos),
    "Tanh": _unary(ops.tanh), "Sigmoid": _unary(ops.sigmoid),
    "Floor": _unary(ops.floor, grad=False), "Ceil": _unary(ops.ceil, grad=False),
    "Round": _unary(ops.round, grad=False),
    "LeakyRelu": _unary(lambda x: ops.leaky_relu(x, alpha=0.1)),
    "Elu": _unary(lambda x: ops.elu(x, alpha=0.7)),
    "Gelu": _unary(ops.gelu) + _unary(lambda x: ops.gelu(x, approximate="tanh")),
    "GeluGrad": [(lambda x, dy, m=m: ops.gelu_grad(x, dy, approximate=m),
                  [("f", sh), ("f", sh)], FLOATS, True)
                 for sh in U_SHAPES for m in ("none", "tanh")],
    "Softplus": _unary(lambda x: ops.softplus(x, beta=1.5, threshold=2.0)),
    "Clip": _unary(lambda x: ops.clip(x, min=-0.5, max=1.0), dtypes=NUM),
    "LogicalNot": _unary(ops.logical_not, "b", dtypes=ALL, grad=False),
    "Add": _binary(ops.add, dtypes=NUM), "Sub": _binary(ops.sub, dtypes=NUM),
    "Mul": _binary(ops.mul, dtypes=NUM),
    "Maximum": _binary(ops.maximum, dtypes=NUM, grad=False),
    "Minimum": _binary(ops.minimum, dtypes=NUM, grad=False),
    "Div": _binary(ops.div, ("f", "pos")), "Pow": _binary(ops.pow, ("pos", "f")),
    "Tan": _unary(ops.tan, "unit"), "Asin": _unary(ops.asin, "unit"),
    "Acos": _unary(ops.acos, "unit"), "Atan": _unary(ops.atan), "Sinh": _unary(ops.sinh),
    "Cosh": _unary(ops.cosh), "Asinh": _unary(ops.asinh), "Acosh": _unary(ops.acosh, "ge1"),
    "Atanh": _unary(ops.atanh, "unit"), "Erf": _unary(ops.erf), "Expm1": _unary(ops.expm1),
    "FloorDivide": _binary(ops.floor_divide, ("f", "nz"), dtypes=NUM, grad=False),
    "TruncDivide": _binary(ops.trunc_divide, ("f", "nz"), dtypes=NUM, grad=False),
    "Mod": _binary(ops.mod, ("f", "nz"), dtypes=NUM),
    "Fmod": _binary(ops.fmod, ("f", "nz"), dtypes=NUM),
    **{name: _binary(getattr(ops, py), dtypes=ALL, grad=False) for name, py in (
        ("Equal", "equal"), ("NotEqual", "not_equal"), ("Less", "less"),
        ("LessEqual", "less_equal"), ("Greater", "greater"), ("GreaterEqual", "greater_equal"),
        ("LogicalAnd", "logical_and"), ("LogicalOr", "logical_or"))},
    **{name: _binary(getattr(ops, py), dtypes=INTS + ("bool",), grad=False) for name, py in (
        ("BitwiseAnd", "bitwise_and"), ("BitwiseOr", "bitwise_or"),
        ("BitwiseXor", "bitwise_xor"))},
    "Where": [(lambda c, a, b: ops.where(c, a, b), [("b", (3, 1)), ("f", (1, 4)), ("f", (3, 4))],
               NUM, False)],
    "Cast": [(lambda x, d=d: ops.cast(x, dtype=d), [("f", (4, 5))], ALL, False)
             for d in ("bool", "int8", "int64", "uint8", "float16", "bfloat16", "float32",
                       "float64")],
    "Fill": [],  # creation op: see test_fill
    "Contiguous": [],  # views: see test_contiguous_and_copies
    "Reshape": [(lambda x: ops.reshape(x, shape=[7, 5]), [("f", (5, 7))], ALL, True)],
    "Squeeze": [(lambda x: ops.squeeze(x, axis=[1]), [("f", (5, 1, 3))], ALL, True)],
    "Unsqueeze": [(lambda x: ops.unsqueeze(x, axis=[0]), [("f", (5, 3))], ALL, True)],
    "Flatten": [(lambda x: ops.flatten(x), [("f", (2, 3, 4))], ALL, True)],
    "BroadcastTo": [(lambda x: ops.broadcast_to(x, shape=[4, 3, 5]), [("f", (3, 1))], ALL, True)],
    **{name: [(lambda x, f=f, a=a, k=k: f(x, axis=a, keepdims=k), [(kind, s)], dts, g)
              for s, a, k in (((5, 7), None, False), ((4, 6, 3), [0, 2], True),
                              ((3, 300), [1], False), ((0, 4), [1], False), ((), None, False))]
       for name, f, kind, dts, g in (
           ("Sum", ops.sum, "f", NUM, True), ("Prod", ops.prod, "unit", NUM, True),
           ("Mean", ops.mean, "f", FLOATS, True), ("LogSumExp", ops.logsumexp, "f", FLOATS, True),
           ("Var", lambda x, **k: ops.var(x, ddof=1, **k), "f", FLOATS, True),
           ("Std", ops.std, "f", FLOATS, True))},
    **{name: [(lambda x, f=f, a=a, k=k: f(x, axis=a, keepdims=k), [("f", s)], NUM, True)
              for s, a, k in (((5, 7), None, False), ((4, 6, 3), [0, 2], True),
                              ((3, 300), [1], False))]
       for name, f in (("Max", ops.max), ("Min", ops.min))},
    **{name: [(lambda x, f=f, a=a: f(x, axis=a), [("f", s)], NUM, False)
              for s, a in (((5, 7), 1), ((4, 300), None), ((6,), 0))]
       for name, f in (("ArgMax", ops.argmax), ("ArgMin", ops.argmin))},
    **{name: [(lambda x, f=f, a=a: f(x, axis=a), [("f", s)], FLOATS, True)
              for s, a in (((5, 7), -1), ((4, 6, 3), 1), ((2, 1000), -1), ((0, 3), -1))]
       for name, f in (("Softmax", ops.softmax), ("LogSoftmax", ops.log_softmax))},
    "MatMul": [(lambda a, b, ta=ta, tb=tb: ops.matmul(a, b, transpose_a=ta, transpose_b=tb),
                [("f", sa), ("f", sb)], FLOATS, True)
               for sa, sb, ta, tb in (((5, 7), (7, 3), False, False),
                                      ((7, 5), (3, 7), True, True),
                                      ((2, 4, 6), (6, 3), False, False),
                                      ((2, 1, 4, 6), (3, 6, 5), False, False),
                                      ((6,), (6, 2), False, False), ((4, 0), (0, 3), False, False),
                                      ((65, 130), (130, 33), False, False))],
    "MatMulBiasAct": [(lambda a, b, c, act=act: ops.matmul_bias_act(a, b, c, activation=act),
                       [("f", (5, 7)), ("f", (7, 3)), ("f", (3,))], FLOATS, True)
                      for act in ("none", "relu")],
    "Gather": [],  # index ops: see test_index_ops
    "Embedding": [],
    "OneHot": [],
    "ScatterAdd": [],
    "LayerNorm": [(lambda x, g, b, a=a: ops.layer_norm(x, g, b, axis=a, eps=1e-5),
                   [("f", xs), ("f", ps), ("f", ps)], FLOATS, True)
                  for xs, ps, a in (((6, 10), (10,), -1), ((2, 3, 4), (3, 4), 1),
                                    ((3, 700), (700,), -1), ((0, 5), (5,), -1))],
    "LayerNormGrad": [],  # by LayerNorm's gradient above
    **{name: [(lambda x, t, f=f, r=r: f(x, t, reduction=r), [("f", s), ("f", s)],
               FLOATS, True)
              for s in ((7, 5), (0,), (3000,)) for r in ("none", "sum", "mean")]
       for name, f in (("MseLoss", ops.mse_loss), ("L1Loss", ops.l1_loss),
                       ("SmoothL1Loss", lambda x, t, reduction: ops.smooth_l1_loss(
                           x, t, beta=0.5, reduction=reduction)))},
    "SigmoidFocalLoss": [(lambda x, t, a=a, r=r: ops.sigmoid_focal_loss(
                              x, ops.sigmoid(t), alpha=a, gamma=2.0, reduction=r),
                          [("f", (6, 4)), ("f", (6, 4))], FLOATS, True)
                         for a, r in ((0.25, "none"), (-1.0, "mean"), (0.5, "sum"))],
    "BceWithLogits": [(lambda x, t, r=r: ops.bce_with_logits(x, ops.sigmoid(t), reduction=r),
                       [("f", (6, 4)), ("f", (6, 4))], FLOATS, True)
                      for r in ("none", "mean")]
                     + [(lambda x, t, w: ops.bce_with_logits(x, ops.sigmoid(t), pos_weight=w,
                                                             reduction="sum"),
                         [("f", (6, 4)), ("f", (6, 4)), ("pos", (4,))], FLOATS, True)],
    "SoftmaxCrossEntropy": [],  # see test_class_losses
    "NllLoss": [],
    "RandomUniform": [],  # see test_random_ops
    "RandomNormal": [],
    "Dropout": [],
    "BatchNorm": [],  # see test_batch_norm
    "BatchNormGrad": [],
    "FusedElementwise": [],  # see test_fused_elementwise
    "MaxPool2d": [],  # see test_max_pool
    "MaxPool2dIndices": [],
    "MaxPool2dGrad": [],
    "Transpose": [(lambda x, p=p: ops.transpose(x, axes=p), [("f", (2, 3, 4))], ALL, True)
                  for p in ([2, 0, 1], [0, 2, 1], None)],
    "Slice": [(lambda x, a=a: ops.slice(x, **a), [("f", (6, 7))], ALL, True)
              for a in (dict(starts=[1], ends=[5], steps=[2]),
                        dict(starts=[-1, 0], ends=[-8, 100], steps=[-2, 3]),
                        dict(starts=[3], ends=[3], steps=[1], axis=[1]))],
    "Concat": [(lambda a, b, ax=ax: ops.concat([a, b], axis=ax), [("f", sa), ("f", sb)], ALL,
                True) for sa, sb, ax in (((2, 3), (4, 3), 0), ((2, 3), (2, 1), -1),
                                         ((0, 3), (2, 3), 0))],
    "Stack": [(lambda a, b, ax=ax: ops.stack([a, b], axis=ax), [("f", (2, 3)), ("f", (2, 3))],
               ALL, True) for ax in (0, 1, 2)],
    "Split": [(lambda x, ax=ax, sz=sz: ops.concat(
                   [ops.reshape(t, shape=[-1]) for t in ops.split(x, sizes=sz, axis=ax)], axis=0),
               [("f", (5, 6))], ALL, True) for ax, sz in ((0, [2, 0, 3]), (1, [1, 5]))],
    "Arange": [],  # see test_arange
    "Pad": [(lambda x, m=m: ops.pad(x, pads=((1, 2), (3, 0)), mode=m, value=1.5), [("f", s)], NUM,
             True) for m in ("constant", "reflect", "edge") for s in ((4, 5), (3, 4))]
           + [(lambda x: ops.pad(x, pads=((1, 1), (0, 2)), value=-2.0), [("f", (0, 3))], NUM, False)],
    "AvgPool2d": [],  # see test_avg_pools
    "AvgPool2dGrad": [],
    "AdaptiveAvgPool2d": [],
    "AdaptiveAvgPool2dGrad": [],
    "GroupNorm": [(lambda x, g, b, gr=gr: ops.group_norm(x, g, b, groups=gr, eps=1e-5),
                   [("f", xs), ("f", (xs[1],)), ("f", (xs[1],))], FLOATS, True)
                  for xs, gr in (((2, 6, 5), 3), ((3, 4, 2, 3), 4), ((2, 8), 1), ((0, 4, 3), 2))],
    "GroupNormGrad": [],  # by GroupNorm's gradient above
    "Conv2d": [],  # see test_convolutions
    "Conv2dBiasAct": [],
    "ConvTranspose2d": [],
    "Conv2dBackpropFilter": [],
    "SgdUpdate": [],  # see test_optimizer_updates
    "AdamUpdate": [],
    "RmspropUpdate": [],  # see test_rmsprop_and_adagrad_updates
    "AdagradUpdate": [],
    "MultiSgdUpdate": [],  # see test_multi_tensor_updates
    "MultiAdamUpdate": [],
}

# ReluGrad (Relu's backward; resnet branch): x and dy of one shape, no
# broadcasting. Its own gradient (ReluGrad again, x gets none) is checked on
# the CPU in tests/grad/test_grad_relu_grad.py.
CASES["ReluGrad"] = [(ops.relu_grad, [("f", s), ("f", s)], FLOATS, False) for s in U_SHAPES]


# BatchNormStatsUpdate (BatchNorm's running-statistics update; resnet
# branch, src/bn_stats.cu written without a GPU): four [C] vectors, not
# differentiable; also tests/test_cuda_bn_stats.py. The harness compares
# one output: a case per output.
def _bn_stats_update(which):
    return lambda rm, rv, bm, bv: ops.batch_norm_stats_update(
        rm, rv, bm, bv, momentum=0.3, count=9)[which]


CASES["BatchNormStatsUpdate"] = [
    (_bn_stats_update(k), [("f", s), ("pos", s), ("f", s), ("pos", s)], FLOATS, False)
    for s in ((7,), (300,), (), (0,)) for k in (0, 1)]


# MseLossAndGrad (the loss_fusion pass's op: MseLoss with its gradient, not
# differentiable): a case per output, as above.
CASES["MseLossAndGrad"] = [
    (lambda x, t, c, r=r, k=k: ops.mse_loss_and_grad(x, t, c, reduction=r)[k],
     [("f", s), ("f", s), ("f", ())], ("float32", "float64"), False)
    for s in ((7, 5), (0,), (3000,)) for r in ("mean", "sum") for k in (0, 1)]


def _cases():
    for op, cases in sorted(CASES.items()):
        for i, (fn, specs, dtypes, grad) in enumerate(cases):
            for dt in _cuda_dtypes(op, dtypes):
                yield pytest.param(op, fn, specs, dt, grad, id=f"{op}-{i}-{dt}")


def _cuda_dtypes(op, dtypes):
    have = set()
    for k in dg.plugins.kernels(op):
        if k["device"] == DEV and k["plugin"] == ("cuda" if DEV == "cuda" else "cpu_eigen"):
            have |= {d.strip() for d in k["dtypes"].split(",")}
    if DEV == "cpu":  # the harness check: only what the CPU itself runs
        return [d for d in dtypes if d in have]
    return [d for d in dtypes if d in have]


def test_every_cuda_op_has_a_case():
    cuda_ops = {d["name"] for d in dg._C.list_ops()
                if any(k["device"] == "cuda" and k["plugin"] == "cuda"
                       for k in dg.plugins.kernels(d["name"]))}
    assert cuda_ops, "the cuda plugin registered no kernel"
    missing = sorted(cuda_ops - set(CASES))
    assert not missing, f"cuda kernels without a conformance case: {missing}"


def _run(fn, specs, dtype, device, seed, want_grad):
    ins, watched = [], []
    for j, (kind, shape) in enumerate(specs):
        arr = _data(kind, shape, seed + j)
        dt = dtype
        if kind == "b" and j == 0 and len(specs) == 3:  # Where's condition
            dt = "bool"
        t = _host(arr, dt).to(device)
        ins.append(t)
        if want_grad and dt in FLOATS:
            watched.append(t)
    if not want_grad:
        return fn(*ins), []
    with dg.GradientTape() as tape:
        for t in watched:
            tape.watch(t)
        y = fn(*ins)
        w = _host(_data("f", tuple(y.shape), seed + 99), str(y.dtype)).to(device)
        s = ops.sum(y * w)
    return y, tape.gradient(s, watched)


@pytest.mark.gpu
@pytest.mark.parametrize("op,fn,specs,dtype,grad", list(_cases()))
def test_matches_cpu(op, fn, specs, dtype, grad):
    half = dtype in ("float16", "bfloat16")
    want_grad = grad and dtype in FLOATS and not (half and DEV == "cpu")
    # The inputs rounded to `dtype` once; the CPU reference runs in the
    # reference dtype on those same values.
    ref_specs = specs
    y_dev, g_dev = _run(fn, specs, dtype, DEV, 1234, want_grad)
    y_ref, g_ref = _run(
        (lambda *xs: fn(*[ops.cast(x, dtype=_ref_dtype(dtype)) if str(x.dtype) == dtype
                          and half else x for x in xs])) if half else fn,
        ref_specs, dtype, "cpu", 1234, want_grad)
    assert y_dev.device.startswith(DEV.split(":")[0]) if isinstance(y_dev.device, str) else True
    assert tuple(y_dev.shape) == tuple(y_ref.shape)
    got, want = _numpy(y_dev), _numpy(y_ref)
    if np.issubdtype(want.dtype, np.floating):
        rtol, atol = TOL.get(dtype, (0, 0))
        if half:  # the reference is float32; the device rounds its result once more
            want = _numpy(ops.cast(ops.cast(y_ref, dtype=dtype), dtype="float32"))
        if op.startswith("MatMul") and want.size:
            # cuBLAS sums in another order (blocked, split over k): an entry
            # that cancels to near zero keeps the rounding of the largest
            # terms, so the tolerance is relative to the largest output.
            atol = max(atol, rtol * float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"{op} {dtype}")
    else:
        np.testing.assert_array_equal(got, want, err_msg=f"{op} {dtype}")
    for a, b in zip(g_dev, g_ref):
        if a is None or b is None:  # an input the op does not differentiate
            assert a is None and b is None, f"gradient of {op}: {a} and {b}"
            continue
        rtol, atol = TOL[dtype]
        np.testing.assert_allclose(_numpy(a), _numpy(b), rtol=rtol * 4, atol=atol * 4,
                                   err_msg=f"gradient of {op} {dtype}")


# ------------------------------------------------------------------ special cases

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL)
def test_fill(dtype):
    values = (0.0, 1.0) if dtype == "bool" else (0.0, 1.0, 7.0) if dtype in INTS else \
        (0.0, 1.5, -3.0)
    for value in values:
        a = ops.fill(shape=[3, 5], value=value, dtype=dtype, device=DEV)
        b = ops.fill(shape=[3, 5], value=value, dtype=dtype, device="cpu")
        np.testing.assert_array_equal(_numpy(a), _numpy(b))
    assert tuple(ops.fill(shape=[0, 2], value=1.0, dtype=dtype, device=DEV).shape) == (0, 2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ("float32", "float64", "int64", "bool", "float16"))
def test_contiguous_and_copies(dtype):
    a = _data("f", (6, 8), 3)
    x, xc = _host(a, dtype).to(DEV), _host(a, dtype)
    for f in (lambda t: ops.transpose(t, axes=[1, 0]) if hasattr(ops, "transpose") else t,
              lambda t: t[1:5, ::3], lambda t: t[::-1]):
        np.testing.assert_array_equal(_numpy(f(x)), _numpy(f(xc)))
    np.testing.assert_array_equal(_numpy(x), _numpy(xc))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("momentum,nesterov,wd,maximize", [
    (0.0, False, 0.0, False), (0.9, False, 0.01, False), (0.9, True, 0.0, True)])
def test_sgd_update(dtype, momentum, nesterov, wd, maximize):
    """Against the CPU (16-bit floats: the CPU's float32 on the same rounded
    values, each state rounded once)."""
    _need_half_device(dtype)
    p, g, buf = (_data("f", (33,), s) for s in (1, 2, 3))

    def run(dev):
        t = [_maker(dtype, dev)(v) for v in (p, g, buf)]
        lr = dg.tensor(np.float64(0.05)).to(dev)
        return ops.sgd_update(t[0], t[1], t[2], lr, momentum=momentum, dampening=0.0,
                              nesterov=nesterov, weight_decay=wd, maximize=maximize)
    for a, b in zip(run(DEV), run("cpu")):
        assert str(a.dtype) == dtype
        np.testing.assert_allclose(_numpy(a), _rounded(b, dtype), rtol=TOL[dtype][0],
                                   atol=TOL[dtype][1])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("amsgrad,decoupled", [(False, False), (True, False), (False, True)])
def test_adam_update(dtype, amsgrad, decoupled):
    _need_half_device(dtype)
    p, g, m = (_data("f", (41,), s) for s in (1, 2, 3))
    v, vmax = _data("pos", (41,), 4), _data("pos", (41,), 5)

    def run(dev):
        t = [_maker(dtype, dev)(a) for a in (p, g, m, v, vmax)]
        lr = dg.tensor(np.float64(1e-2)).to(dev)
        step = dg.tensor(np.int64(3)).to(dev)
        return ops.adam_update(*t, lr, step, beta1=0.9, beta2=0.99, eps=1e-8,
                               weight_decay=0.01, amsgrad=amsgrad, decoupled=decoupled,
                               maximize=False)
    for a, b in zip(run(DEV), run("cpu")):
        assert str(a.dtype) == dtype
        np.testing.assert_allclose(_numpy(a), _rounded(b, dtype), rtol=TOL[dtype][0] * 10,
                                   atol=TOL[dtype][1] * 10)


def _bits(t):
    """The bytes of a tensor's values (any dtype), for bit-exact comparisons."""
    t = t.to("cpu")
    if str(t.dtype) in HALF:  # no NumPy bfloat16: the raw 16 bits
        return np.asarray(ops.bitcast(t, dtype="int16").numpy()).reshape(-1)
    return np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8)


MULTI_SHAPES = [(37,), (0,), (3, 5), (), (2 * 8192 + 3,), (8192,), (1,)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind,attrs", [
    ("sgd", dict(momentum=0.0)), ("sgd", dict(momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("sgd", dict(momentum=0.8, nesterov=True, maximize=True)),
    ("adam", dict()), ("adam", dict(decoupled=True, weight_decay=0.05)),
    ("adam", dict(amsgrad=True, beta1=0.8, beta2=0.95, eps=1e-6, maximize=True, weight_decay=0.1))],
    ids=str)
def test_multi_tensor_updates(dtype, kind, attrs):
    """MultiSgdUpdate / MultiAdamUpdate (one launch over every parameter:
    empty and 0-d ones, sizes across the 8192-element chunks) are bit for
    bit the device's per-parameter SgdUpdate / AdamUpdate, and match the
    CPU's multi-tensor op (16-bit floats: its float32 result rounded)."""
    _need_half_device(dtype)
    n = len(MULTI_SHAPES)
    arrays = [[_data("f" if r != 3 else "pos", s, 100 * r + k) for k, s in enumerate(MULTI_SHAPES)]
              for r in range(5)]
    if kind == "sgd" and attrs["momentum"] == 0.0:
        arrays[2] = [np.zeros((0,)) for _ in MULTI_SHAPES]
    if kind == "adam" and not attrs.get("amsgrad"):
        arrays[4] = [np.zeros((0,)) for _ in MULTI_SHAPES]
    else:
        arrays[4] = [np.abs(a) + 0.5 for a in arrays[4]]
    steps = [1, 2, 7, 1, 30, 3, 5]

    def run(dev):
        mk = _maker(dtype, dev)
        lr = dg.tensor(np.float64(0.01)).to(dev)
        if kind == "sgd":
            ts = [mk(a) for r in range(3) for a in arrays[r]]
            multi = ops.multi_sgd_update(lr, ts, **attrs)
            single = [ops.sgd_update(ts[k], ts[n + k], ts[2 * n + k], lr, **attrs)
                      for k in range(n)]
            roles = 2
        else:
            ts = [mk(a) for r in range(5) for a in arrays[r]]
            st = [dg.tensor(np.int64(s)).to(dev) for s in steps]
            multi = ops.multi_adam_update(lr, ts + st, **attrs)
            single = [ops.adam_update(*[ts[r * n + k] for r in range(5)], lr, st[k], **attrs)
                      for k in range(n)]
            roles = 4
        return multi, single, roles

    multi, single, roles = run(DEV)
    ref, _, _ = run("cpu")
    assert len(multi) == roles * n
    for k in range(n):
        for r in range(roles):
            got = multi[r * n + k]
            assert str(got.dtype) == dtype and tuple(got.shape) == tuple(single[k][r].shape)
            np.testing.assert_array_equal(_bits(got), _bits(single[k][r]),
                                          err_msg=f"role {r} of parameter {k}")
            np.testing.assert_allclose(_numpy(got), _rounded(ref[r * n + k], dtype),
                                       rtol=TOL[dtype][0] * 10, atol=TOL[dtype][1] * 10)


@pytest.mark.gpu
def test_tf32_matmul_is_opt_in(monkeypatch):
    a, b = _data("f", (256, 256), 1), _data("f", (256, 256), 2)
    x, y = _host(a, "float32").to(DEV), _host(b, "float32").to(DEV)
    exact = _numpy(ops.matmul(x, y))
    np.testing.assert_allclose(exact, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4,
                               atol=1e-4)
    monkeypatch.setenv("DRAGON_CUDA_ALLOW_TF32", "1")
    fast = _numpy(ops.matmul(x, y))
    np.testing.assert_allclose(fast, exact, rtol=5e-2, atol=5e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_matmul_float32_out_of_16bit_operands(dtype):
    """out_dtype="float32" on 16-bit operands (what autocast sets): cuBLAS
    writes the float32 product, equal to the CPU's float32 product of the
    same rounded operands; MatMulBiasAct adds a float32 bias."""
    a, b = _data("f", (3, 37, 64), 11), _data("f", (3, 29, 64), 12)
    x, y = _host(a, dtype), _host(b, dtype)
    want = np.asarray(ops.matmul(x.astype("float32"), y.astype("float32"),
                                 transpose_b=True).numpy(), dtype=np.float64)
    got = ops.matmul(x.to(DEV), y.to(DEV), transpose_b=True, out_dtype="float32")
    assert str(got.dtype) == "float32" and tuple(got.shape) == (3, 37, 29)
    np.testing.assert_allclose(_numpy(got), want, rtol=1e-4, atol=1e-4)
    if DEV == "cpu" and dtype == "float16":
        return  # the CPU stand-in run: no float16 MatMulBiasAct kernel on the host
    a2, b2, c2 = _data("f", (37, 64), 13), _data("f", (64, 29), 14), _data("f", (29,), 15)
    x2, y2 = _host(a2, dtype), _host(b2, dtype)
    bias = dg.tensor(c2.astype(np.float32))
    ref = np.maximum(np.asarray(ops.matmul(x2.astype("float32"), y2.astype("float32"))
                                .numpy(), dtype=np.float64) + c2.astype(np.float32), 0)
    got2 = ops.matmul_bias_act(x2.to(DEV), y2.to(DEV), bias.to(DEV), activation="relu",
                               out_dtype="float32")
    assert str(got2.dtype) == "float32"
    np.testing.assert_allclose(_numpy(got2), ref, rtol=1e-4, atol=1e-4)
    empty = ops.matmul(_host(np.zeros((4, 0)), dtype).to(DEV), _host(np.zeros((0, 5)), dtype)
                       .to(DEV), out_dtype="float32")
    assert str(empty.dtype) == "float32"
    np.testing.assert_array_equal(_numpy(empty), np.zeros((4, 5)))


@pytest.mark.gpu
def test_sticky_device_error_is_typed():
    """Bad work on the device (here an out-of-memory allocation request)
    raises a typed error naming the device, never crashes."""
    with pytest.raises(dg.errors.DragonError, match=DEV):
        ops.fill(shape=[1 << 50], value=0.0, dtype="float32", device=DEV)


@pytest.mark.gpu
@pytest.mark.parametrize("itype", ("int32", "int64"))
@pytest.mark.parametrize("dtype", ("float32", "float64", "float16", "int64", "bool"))
def test_index_ops(itype, dtype):
    """Gather, Embedding, OneHot and ScatterAdd against the CPU, with
    negative (wrapping) indices, repeats and an empty index set."""
    x = _data("f", (5, 4, 3), 7)
    for idx, axis in (([0, 4, -1, 2, 2], 1 - 1), ([[1, 0], [3, 3]], 1), ([], 2)):
        ia = np.asarray(idx, dtype=itype)
        got = ops.gather(_host(x, dtype).to(DEV), dg.tensor(ia).to(DEV), axis=axis)
        want = ops.gather(_host(x, dtype), dg.tensor(ia), axis=axis)
        np.testing.assert_array_equal(_numpy(got), _numpy(want))
    w = _data("f", (6, 4), 8)
    ia = np.asarray([[0, 5, 5], [2, 1, 0]], dtype=itype)
    np.testing.assert_array_equal(
        _numpy(ops.embedding(_host(w, dtype).to(DEV), dg.tensor(ia).to(DEV))),
        _numpy(ops.embedding(_host(w, dtype), dg.tensor(ia))))
    if dtype in ("float32", "float64", "int64"):
        oh = dict(depth=6, axis=-1, on_value=2.0, off_value=-1.0, dtype=dtype)
        np.testing.assert_array_equal(
            _numpy(ops.one_hot(dg.tensor(ia).to(DEV), **oh)),
            _numpy(ops.one_hot(dg.tensor(ia), **oh)))
        upd = _data("f", (5, 3, 3), 9)
        si = np.asarray([3, 0, 3], dtype=itype)
        got = ops.scatter_add(_host(x, dtype).to(DEV), dg.tensor(si).to(DEV),
                              _host(upd, dtype).to(DEV), axis=1)
        want = ops.scatter_add(_host(x, dtype), dg.tensor(si), _host(upd, dtype), axis=1)
        np.testing.assert_allclose(_numpy(got), _numpy(want), rtol=1e-6)


@pytest.mark.gpu
def test_index_out_of_range_is_a_typed_error_at_the_next_read():
    """A device-side check: no crash, an OutOfRangeError naming the op and
    the index when the host next waits, and the device stays usable."""
    w = _host(_data("f", (6, 4), 8), "float32").to(DEV)
    bad = dg.tensor(np.asarray([1, 9], dtype=np.int64)).to(DEV)
    with pytest.raises(dg.errors.OutOfRangeError, match="index 9"):
        ops.embedding(w, bad).cpu().numpy()
    ok = dg.tensor(np.asarray([1, 2], dtype=np.int64)).to(DEV)
    np.testing.assert_array_equal(_numpy(ops.embedding(w, ok)), _data("f", (6, 4), 8)[[1, 2]]
                                  .astype(np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", ((6, 5), (5,), (3, 4, 2, 3), (0, 4)))
@pytest.mark.parametrize("reduction", ("none", "sum", "mean"))
def test_class_losses(dtype, shape, reduction):
    """SoftmaxCrossEntropy (with label smoothing) and NllLoss, forward and
    gradient with respect to the logits, with an ignored target (16-bit
    floats against the CPU's float32 on the same rounded values)."""
    _need_half_device(dtype)
    x = _data("f", shape, 11)
    tshape = () if len(shape) == 1 else (shape[0],) + tuple(shape[2:])
    t = np.random.default_rng(12).integers(0, shape[1 if len(shape) > 1 else 0],
                                           tshape).astype(np.int64)
    if t.size:
        t.flat[0] = -100  # ignore_index

    def run(dev, f):
        mk = _maker(dtype, dev)
        xt = mk(x)
        tt = dg.tensor(t).to(dev)
        with dg.GradientTape() as tape:
            tape.watch(xt)
            y = f(xt, tt)
            s = ops.sum(y * mk(_data("f", tuple(y.shape), 13)))
        return y, tape.gradient(s, [xt])[0]

    for f in (lambda a, b: ops.softmax_cross_entropy(a, b, label_smoothing=0.1,
                                                     reduction=reduction),
              lambda a, b: ops.nll_loss(a, b, reduction=reduction)):
        (y1, g1), (y2, g2) = run(DEV, f), run("cpu", f)
        assert str(y1.dtype) == dtype and str(g1.dtype) == dtype
        rtol, atol = TOL[dtype]
        np.testing.assert_allclose(_numpy(y1), _rounded(y2, dtype), rtol=rtol, atol=atol)
        np.testing.assert_allclose(_numpy(g1), _numpy(g2), rtol=rtol * 4, atol=atol * 4)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ("float32", "float64"))
@pytest.mark.parametrize("n", (1, 63, 257, 4099))
def test_random_ops(dtype, n):
    """Counter-based: the same seed gives the same numbers on every run, and
    the CPU's numbers (uniform and dropout to the last bit up to float
    contraction, normal within the rounding of log/sqrt/sin/cos)."""
    for seed in (0, 7, 2**40 + 3):
        u = [_numpy(ops.random_uniform([n], low=-1.0, high=3.0, dtype=dtype, seed=seed,
                                       device=d)) for d in (DEV, DEV, "cpu")]
        np.testing.assert_array_equal(u[0], u[1])
        np.testing.assert_allclose(u[0], u[2], rtol=4e-7 if dtype == "float32" else 1e-15,
                                   atol=0)
        assert u[0].min() >= -1.0 and u[0].max() < 3.0
        z = [_numpy(ops.random_normal([n], mean=0.5, std=2.0, dtype=dtype, seed=seed,
                                      device=d)) for d in (DEV, DEV, "cpu")]
        np.testing.assert_array_equal(z[0], z[1])
        np.testing.assert_allclose(z[0], z[2], rtol=1e-5 if dtype == "float32" else 1e-12,
                                   atol=1e-5 if dtype == "float32" else 1e-12)
        x = _data("f", (n,), seed)
        for p in (0.0, 0.3, 1.0):
            a = ops.dropout(_host(x, dtype).to(DEV), p=p, seed=seed)
            b = ops.dropout(_host(x, dtype), p=p, seed=seed)
            for ta, tb in zip(a, b):
                np.testing.assert_array_equal(_numpy(ta), _numpy(tb))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("n", (1, 63, 4099))
def test_random_ops_half(dtype, n):
    """16-bit random ops are float32's numbers rounded once: uniform (a
    value that rounds up to ``high`` is clamped below it) and dropout to the
    bit, normal within the rounding of the math library."""
    _need_half_device(dtype)
    high = 3.0
    for seed in (0, 7, 2**40 + 3):
        u = [ops.random_uniform([n], low=-1.0, high=high, dtype=dtype, seed=seed, device=DEV)
             for _ in range(2)]
        assert str(u[0].dtype) == dtype
        got = _numpy(u[0])
        np.testing.assert_array_equal(got, _numpy(u[1]))
        want = _rounded(ops.random_uniform([n], low=-1.0, high=high, dtype="float32", seed=seed,
                                           device="cpu"), dtype)
        below = want < high
        np.testing.assert_array_equal(got[below], want[below])
        assert got.min() >= -1.0 and got.max() < high
        z = _numpy(ops.random_normal([n], mean=0.5, std=2.0, dtype=dtype, seed=seed, device=DEV))
        zref = _rounded(ops.random_normal([n], mean=0.5, std=2.0, dtype="float32", seed=seed,
                                          device="cpu"), dtype)
        np.testing.assert_allclose(z, zref, rtol=TOL[dtype][0], atol=TOL[dtype][1])
        x = _data("f", (n,), seed)
        for p in (0.0, 0.3, 1.0):
            a = ops.dropout(_host(x, dtype).to(DEV), p=p, seed=seed)
            b = ops.dropout(ops.cast(_host(x, dtype), dtype="float32"), p=p, seed=seed)
            for ta, tb in zip(a, b):
                assert str(ta.dtype) == dtype
                np.testing.assert_array_equal(_numpy(ta), _rounded(tb, dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", ((8, 3), (4, 3, 5, 6), (2, 5, 7), (0, 3)))
@pytest.mark.parametrize("training", (True, False))
def test_batch_norm(dtype, shape, training):
    """Forward (y, batch mean, batch variance) and the gradients of x, gamma
    and beta through BatchNormGrad, against the CPU (16-bit floats against
    the CPU's float32 on the same rounded values)."""
    _need_half_device(dtype)
    c = shape[1]

    def run(dev):
        mk = _maker(dtype, dev)
        x = mk(_data("f", shape, 21))
        g, b = (mk(_data("f", (c,), s)) for s in (22, 23))
        rm, rv = mk(_data("f", (c,), 24)), mk(_data("pos", (c,), 25))
        with dg.GradientTape() as tape:
            for t in (x, g, b):
                tape.watch(t)
            y, m, v = ops.batch_norm(x, g, b, rm, rv, eps=1e-5, training=training)
            w = mk(_data("f", shape, 26))
            s = ops.sum(y * w)
            if training and shape[0]:
                s = s + ops.sum(m * 0.3) + ops.sum(v * 0.7)
        return [y, m, v] + list(tape.gradient(s, [x, g, b]))

    rtol, atol = TOL[dtype]
    for a, b in zip(run(DEV), run("cpu")):
        np.testing.assert_allclose(_numpy(a), _numpy(b), rtol=rtol * 10, atol=atol * 10)


# The fusable rows of the element-wise op table (dragon/elementwise.h).
_EW_TABLE = [r for r in dg._C.elementwise_table() if r[2] >= 0]
FUSED_UNARY = sorted(r[2] for r in _EW_TABLE if r[1] == "unary")
FUSED_BINARY = sorted(r[2] for r in _EW_TABLE if r[1] == "binary")
FUSED_ALPHA = {r[2] for r in _EW_TABLE if r[1] == "unary" and r[4] == "alpha"}
_EW_NAME = {r[2]: r[0] for r in _EW_TABLE}


def _fused_unary_input(code, shape, seed):
    """Inputs inside the unary opcode's domain (NaN-free results)."""
    name = _EW_NAME[code]
    if name in ("Asin", "Acos", "Atanh"):
        return _data("unit", shape, seed) * 0.5 + 0.45  # (0, 0.9)
    if name == "Acosh":
        return _data("ge1", shape, seed)
    return _data("pos", shape, seed)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ("float32", "float64"))
@pytest.mark.parametrize("unary", FUSED_UNARY)
def test_fused_elementwise(dtype, unary):
    """Every unary opcode, followed by every binary opcode, inside a program
    over broadcast inputs, against the CPU's FusedElementwise."""
    a = _fused_unary_input(unary, (4, 5), 31)
    b = _data("nz", (5,), 32)
    # r3 = unary(r0 [alpha r2]); r4 = r3 (binary) r1 for each binary opcode
    for binary in FUSED_BINARY:
        prog = [unary, 3, 0, 2 if unary in FUSED_ALPHA else -1, binary, 4, 3, 1]
        outs = [_numpy(ops.fused_elementwise([_host(a, dtype).to(d), _host(b, dtype).to(d)],
                                             program=prog, constants=[0.3], result=-1))
                for d in (DEV, "cpu")]
        rtol, atol = TOL[dtype]
        np.testing.assert_allclose(outs[0], outs[1], rtol=rtol * 4, atol=atol * 4,
                                   err_msg=f"program {prog}")


def _fused_rounded_reference(arrays, prog, consts, dtype):
    """FusedElementwise as the 16-bit device kernel defines it, run on the
    CPU: each instruction in float32 (a one-instruction CPU program on the
    registers) and its result rounded to ``dtype``; a constant is rounded to
    ``dtype`` as an operand and kept in float32 as an activation's alpha."""
    def rnd(t):
        return ops.cast(ops.cast(t, dtype=dtype), dtype="float32")

    n_in = len(arrays)
    reg = {k: rnd(dg.tensor(np.asarray(v, np.float32))) for k, v in enumerate(arrays)}
    for k, c in enumerate(consts):
        reg[n_in + k] = rnd(dg.tensor(np.float32(c)))
    for i in range(0, len(prog), 4):
        op, dst, a, b = prog[i:i + 4]
        if op in FUSED_BINARY:
            r = ops.fused_elementwise([reg[a], reg[b]], program=[op, 2, 0, 1], constants=[],
                                      result=-1)
        elif op in FUSED_ALPHA:  # alpha: the unrounded constant
            r = ops.fused_elementwise([reg[a]], program=[op, 2, 0, 1],
                                      constants=[consts[b - n_in]], result=-1)
        else:
            r = ops.fused_elementwise([reg[a]], program=[op, 1, 0, -1], constants=[], result=-1)
        reg[dst] = rnd(r)
    return _numpy(reg[prog[-3]])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("unary", FUSED_UNARY)
def test_fused_elementwise_half(dtype, unary):
    """The 16-bit FusedElementwise: every opcode in a program that also adds
    a constant operand, equal to the per-instruction rounded float32
    computation (what the unfused 16-bit kernels store)."""
    _need_half_device(dtype)
    a = _fused_unary_input(unary, (4, 5), 31)
    b = _data("nz", (5,), 32)
    for binary in FUSED_BINARY:
        prog = [unary, 3, 0, 2 if unary in FUSED_ALPHA else -1, binary, 4, 3, 1, 32, 5, 4, 2]
        got = ops.fused_elementwise([_host(a, dtype).to(DEV), _host(b, dtype).to(DEV)],
                                    program=prog, constants=[0.3], result=-1)
        assert str(got.dtype) == dtype
        want = _fused_rounded_reference([_numpy(_host(a, dtype)), _numpy(_host(b, dtype))],
                                        prog, [0.3], dtype)
        rtol, atol = TOL[dtype]
        np.testing.assert_allclose(_numpy(got), want, rtol=rtol, atol=atol,
                                   err_msg=f"program {prog}")


# The ops of opcodes 22..31, 39..42 in traced functions that the fusion pass
# turns into one FusedElementwise (the unfused ops run on the device too).
_FUSED_GRAPH_CASES = {
    "Tan": lambda x, y: ops.tan(x * 0.5) + y, "Asin": lambda x, y: ops.asin(x * 0.4) * y,
    "Acos": lambda x, y: ops.acos(x * 0.4) - y, "Atan": lambda x, y: ops.atan(x * y) + 1.0,
    "Sinh": lambda x, y: ops.sinh(x) * y, "Cosh": lambda x, y: ops.cosh(x) - y,
    "Asinh": lambda x, y: ops.asinh(x * 3.0) + y,
    "Acosh": lambda x, y: ops.acosh(ops.abs(x) + 1.5) * y,
    "Atanh": lambda x, y: ops.atanh(x * 0.4) + y, "Erf": lambda x, y: ops.erf(x) * y,
    "Expm1": lambda x, y: ops.expm1(x) - y,
    "FloorDivide": lambda x, y: ops.floor_divide(x * 3.0, y) + x,
    "Mod": lambda x, y: ops.mod(x * 3.0, y) + x,
    "Fmod": lambda x, y: ops.fmod(x * 3.0, y) - x,
}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(_FUSED_GRAPH_CASES))
def test_compiled_graph_fuses_each_new_opcode(dtype, name):
    """A compiled function whose fusion pass emits a FusedElementwise
    holding the opcode (checked on the graph), run on the device, against
    the same function on the CPU (16-bit dtypes against the CPU's 16-bit
    FusedElementwise, which rounds each instruction as the device does)."""
    _need_half_device(dtype)
    f = _FUSED_GRAPH_CASES[name]
    code = {r[0]: r[2] for r in _EW_TABLE}[name]
    x = _data("f", (33, 7), 51)
    y = _data("nz", (7,), 52)
    fn = dg.function(f)
    xs, ys = _host(x, dtype), _host(y, dtype)
    graph = fn.get_graph(xs.to(DEV), ys.to(DEV))
    fused = [o for o in graph.op if o.type == "FusedElementwise"]
    assert fused, [o.type for o in graph.op]
    program = [list(o.attr["program"].ints.values) for o in fused]
    assert any(p[k] == code for p in program for k in range(0, len(p), 4)), program
    got = _numpy(fn(xs.to(DEV), ys.to(DEV)))
    want = _numpy(dg.function(f)(xs, ys))
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got, want, rtol=rtol * 4, atol=atol * 4, err_msg=name)


@pytest.mark.gpu
def test_compiled_elementwise_chain_matches_cpu():
    x = _data("f", (64, 33), 41)

    @dg.function
    def f(t):
        return ops.tanh(t * 0.5 + 1.0) * ops.sigmoid(t) - ops.relu(t) / 3.0

    got = _numpy(f(_host(x, "float32").to(DEV)))
    want = _numpy(f(_host(x, "float32")))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("geom", [
    dict(kernel_size=[2, 2]), dict(kernel_size=[3, 3], strides=[1, 1], pads=[1, 1]),
    dict(kernel_size=[3, 2], strides=[2, 1], dilations=[2, 1], ceil_mode=True),
    dict(kernel_size=[3, 3], strides=[2, 2], pads=[1, 1], ceil_mode=True),
    dict(kernel_size=[3, 2], strides=[2, 1], pads=((1, 0), (0, 1)))])  # asymmetric
def test_max_pool(dtype, geom):
    """Values, indices and the gradient (overlapping windows, ties from a
    quantised input, padding, dilation, ceil mode) against the CPU; the
    16-bit floats (values exact in them) equal the CPU's float32 result
    rounded once."""
    _need_half_device(dtype)
    x = np.round(_data("f", (2, 3, 9, 8), 51) * 2) / 2  # ties
    x[0, 0, 2, 3] = np.nan

    def run(dev):
        mk = _maker(dtype, dev)
        xt = mk(x)
        y = ops.max_pool2d(xt, **geom)
        idx = ops.max_pool2d_indices(xt, **geom)
        dy = mk(_data("f", tuple(y.shape), 52))
        return y, idx, ops.max_pool2d_grad(xt, dy, **geom)

    for a, b in zip(run(DEV), run("cpu")):
        np.testing.assert_array_equal(_numpy(a), _rounded(b, dtype) if dtype in HALF
                                      and str(b.dtype) != "int64" else _numpy(b))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ("int64", "int32", "uint8", "float16", "bfloat16", "float32",
                                   "float64"))
def test_arange(dtype):
    for start, stop, step in ((0, 10, 1), (2.5, -3, -0.5), (1, 200, 7), (5, 5, 1)):
        if dtype == "uint8" and step < 0:
            continue
        got = ops.arange(start, stop, step, dtype=dtype, device=DEV)
        want = ops.arange(start, stop, step, dtype=dtype, device="cpu")
        np.testing.assert_array_equal(_numpy(got), _numpy(want))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("geom", [
    dict(kernel_size=[2, 2]),
    dict(kernel_size=[3, 3], strides=[1, 1], pads=[1, 1], count_include_pad=False),
    dict(kernel_size=[3, 2], strides=[2, 1], pads=[1, 0], ceil_mode=True),
    dict(kernel_size=[3, 3], strides=[2, 2], pads=((0, 1), (1, 0))),   # asymmetric: the
    dict(kernel_size=[2, 3], strides=[1, 2], pads=((1, 0), (1, 1)),    # divisor's end clip
         count_include_pad=False),
    dict(kernel_size=[3, 3], strides=[2, 2], pads=[1, 1], ceil_mode=True,
         count_include_pad=True)])
def test_avg_pools(dtype, geom):
    """AvgPool2d / AdaptiveAvgPool2d and their gradients against the CPU
    (overlapping windows, padding with and without counting it, ceil mode,
    adaptive bins that overlap)."""
    _need_half_device(dtype)
    x = _data("f", (2, 3, 9, 8), 61)

    def run(dev):
        mk = _maker(dtype, dev)
        xt = mk(x)
        y = ops.avg_pool2d(xt, **geom)
        dy = mk(_data("f", tuple(y.shape), 62))
        out = [y, ops.avg_pool2d_grad(xt, dy, **geom)]
        for size in ([1, 1], [4, 3], [9, 8]):
            z = ops.adaptive_avg_pool2d(xt, output_size=size)
            dz = mk(_data("f", tuple(z.shape), 63))
            out += [z, ops.adaptive_avg_pool2d_grad(xt, dz, output_size=size)]
        return out

    rtol, atol = TOL[dtype]
    for a, b in zip(run(DEV), run("cpu")):
        assert str(a.dtype) == dtype
        np.testing.assert_allclose(_numpy(a), _rounded(b, dtype), rtol=rtol, atol=atol)


@pytest.mark.gpu
@pytest.mark.parametrize("opt", ["SGD", "Adam", "AdamW"])
def test_optimizer_steps_foreach_equal_per_parameter(opt):
    """A model trained on the device for three steps with the optimizers'
    default multi-tensor updates ends with the same bits as with
    per-parameter updates (foreach=False), and close to the CPU's."""
    from dragon_core import nn
    rng = np.random.default_rng(21)
    x = rng.standard_normal((16, 6)).astype(np.float32)
    y = rng.standard_normal((16, 3)).astype(np.float32)
    state = None

    def train(dev, foreach):
        nonlocal state
        model = nn.Sequential(nn.Linear(6, 9), nn.Tanh(), nn.Linear(9, 3))
        if state is None:
            state = {k: v.numpy().copy() for k, v in model.state_dict().items()}
        model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
        model.to(dev)
        kw = dict(lr=0.05, momentum=0.9) if opt == "SGD" else dict(lr=1e-2, weight_decay=0.01)
        o = getattr(dg.optim, opt)(model.parameters(), foreach=foreach, **kw)
        xt, yt = dg.tensor(x).to(dev), dg.tensor(y).to(dev)
        for _ in range(3):
            loss = nn.functional.mse_loss(model(xt), yt)
            o.zero_grad()
            loss.backward()
            o.step()
        return {k: _numpy(v) for k, v in model.state_dict().items()}

    multi, single, cpu = train(DEV, None), train(DEV, False), train("cpu", None)
    for k in multi:
        np.testing.assert_array_equal(multi[k].view(np.uint32), single[k].view(np.uint32),
                                      err_msg=k)
        np.testing.assert_allclose(multi[k], cpu[k], rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("momentum,centered,maximize", [(0.0, False, False), (0.9, True, False),
                                                        (0.5, False, True)])
def test_rmsprop_and_adagrad_updates(dtype, momentum, centered, maximize):
    _need_half_device(dtype)
    p, g, buf, avg = (_data("f", (37,), s) for s in (1, 2, 3, 4))
    sq = _data("pos", (37,), 5) + 1.0  # >= avg**2 for the centered form

    def run(dev):
        t = [_maker(dtype, dev)(v) for v in (p, g, sq, buf, avg)]
        lr = dg.tensor(np.float64(1e-2)).to(dev)
        step = dg.tensor(np.int64(4)).to(dev)
        out = list(ops.rmsprop_update(*t, lr, alpha=0.9, eps=1e-8, weight_decay=0.01,
                                      momentum=momentum, centered=centered, maximize=maximize))
        out += list(ops.adagrad_update(t[0], t[1], t[2], lr, step, lr_decay=0.1,
                                       weight_decay=0.01, eps=1e-10, maximize=maximize))
        return out

    for a, b in zip(run(DEV), run("cpu")):
        assert str(a.dtype) == dtype
        np.testing.assert_allclose(_numpy(a), _rounded(b, dtype), rtol=TOL[dtype][0] * 10,
                                   atol=TOL[dtype][1] * 10)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("geom", [
    dict(c=3, o=4, k=(3, 3), strides=[1, 1], pads=[1, 1], dilations=[1, 1], groups=1),
    dict(c=4, o=6, k=(3, 2), strides=[2, 1], pads=((1, 0), (0, 1)), dilations=[1, 2], groups=2),
    dict(c=4, o=4, k=(3, 3), strides=[1, 1], pads=[2, 2], dilations=[2, 2], groups=4),
    dict(c=2, o=3, k=(1, 1), strides=[1, 1], pads=[0, 0], dilations=[1, 1], groups=1)])
def test_convolutions(dtype, geom):
    """Conv2d (forward, and the gradients of x, w and b through the rules,
    which use ConvTranspose2d and Conv2dBackpropFilter), Conv2dBiasAct and
    ConvTranspose2d with a bias, against the CPU."""
    _need_half_device(dtype)
    g = dict(geom)
    c, o, k = g.pop("c"), g.pop("o"), g.pop("k")
    x = _data("f", (2, c, 7, 6), 71)
    w = _data("f", (o, c // g["groups"]) + k, 72)
    b = _data("f", (o,), 73)

    def run(dev):
        mk = _maker(dtype, dev)
        xt, wt, bt = (mk(v) for v in (x, w, b))
        with dg.GradientTape() as tape:
            for t in (xt, wt, bt):
                tape.watch(t)
            y = ops.conv2d(xt, wt, bt, **g)
            s = ops.sum(y * mk(_data("f", tuple(y.shape), 74)))
        out = [y] + list(tape.gradient(s, [xt, wt, bt]))
        out.append(ops.conv2d_bias_act(xt, wt, bt, activation="relu", **g))
        tw = mk(_data("f", (c, o // g["groups"]) + k, 75))
        out.append(ops.conv_transpose2d(xt, tw, None, strides=g["strides"], pads=g["pads"],
                                        dilations=g["dilations"], groups=g["groups"]))
        return out

    rtol, atol = TOL[dtype]
    for a, bb in zip(run(DEV), run("cpu")):
        want = _numpy(bb)
        # cuDNN and the CPU both sum in the dtype (float32 for 16-bit), each
        # in its own order (implicit GEMM, Winograd): an entry that cancels
        # to ~0 keeps the rounding of the largest terms, so the absolute
        # tolerance scales with the largest output (as for MatMul).
        scale = float(np.abs(want).max()) if want.size else 0.0
        np.testing.assert_allclose(_numpy(a), want, rtol=rtol * 10,
                                   atol=max(atol * 10, 4 * rtol * scale))
