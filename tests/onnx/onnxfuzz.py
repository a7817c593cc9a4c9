"""Seeded differential fuzzing of ``dragon_core.onnx`` (export and import).

Export: random programs of ``tests/graph/graphfuzz.py`` (float32 and
float64) are exported at an opset drawn from the range ``export`` writes,
checked with ``onnx.checker`` (full check) and strict shape inference, run
in onnxruntime and compared with Dragon's eager result; then loaded back
with ``dragon_core.onnx.load`` and compared again (round trip).

Import: ``random_node_model(seed)`` draws one ONNX node (or a small chain)
over the ops ``load`` claims, with attributes at their edge values, built
with ``onnx.helper`` at an opset drawn per case; it runs in Dragon and in
onnxruntime. A model ``load`` refuses (``UnsupportedModelError`` naming the
node) counts as declined, never as a pass; anything it loads must agree.
"""
from __future__ import annotations

import os
import sys

import numpy as np

import dragon_core as dg

HERE = os.path.dirname(os.path.abspath(__file__))


def ort_run(model, feeds: list):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, dict(zip(names, feeds)))


def strict_check(model):
    """The checker's full check and strict shape inference (types checked,
    data propagated): what a consumer of the file may rely on."""
    import onnx
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                      data_prop=True)


def tol(dtype: str) -> tuple:
    """(rtol, atol) of a comparison in ``dtype``."""
    # float64: onnxruntime computes some float64 kernels with float32
    # constants (Gelu's tanh form, attributes read as float)
    return {"float64": (1e-6, 1e-9), "float32": (2e-5, 2e-5)}.get(str(dtype), (0, 0))


def assert_same(tag, got, want, loose: float = 1.0):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{tag}: shape {got.shape} vs {want.shape}"
    assert got.dtype == want.dtype, f"{tag}: dtype {got.dtype} vs {want.dtype}"
    if got.dtype.kind in "fc":
        rt, at = (loose * t for t in tol(want.dtype))
        ok = np.allclose(got, want, rtol=rt, atol=at, equal_nan=True)
    else:
        ok = np.array_equal(got, want)
    if not ok:
        err = np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64))) \
            if got.size else 0
        raise AssertionError(f"{tag}: values differ (max err {err})\ngot  {got}\nwant {want}")


# ------------------------------------------------------------- export

OPSETS = (17, 18, 19, 20, 21, 22, 23)


def export_program(seed: int):
    """A graphfuzz program (float32 or float64), its example inputs and the
    opset to export it at."""
    sys.path.insert(0, os.path.join(HERE, "..", "graph"))
    import graphfuzz as G
    prog = G.random_program(seed)
    rng = np.random.default_rng(seed + 11)
    if prog.dtype not in ("float32", "float64"):
        prog.dtype = "float32" if rng.random() < 0.7 else "float64"
    xs = [rng.standard_normal(s).astype(prog.dtype) for s in prog.in_shapes]
    opset = int(rng.choice(OPSETS))
    return prog, xs, opset


def check_export(fn, xs: list, opset: int, tag: str, roundtrip: bool = True,
                 dynamic_axes=None, other_xs=None) -> bool:
    """Export ``fn`` for ``xs`` at ``opset``; the model must pass the
    strict checks and compute Dragon's eager result in onnxruntime (and in
    ``dragon_core.onnx.load`` when ``roundtrip``). Returns False when the
    export refuses (UnsupportedModelError) or eager mode cannot run it."""
    import dragon_core.onnx as dgx
    if hasattr(fn, "eval") and hasattr(fn, "training"):
        fn.eval()                     # export traces the module in eval mode
    try:
        want = eager(fn, xs)
    except (dg.errors.NoKernelError, dg.errors.InvalidArgumentError, NotImplementedError):
        return False
    except ValueError as e:
        # a draw torch refuses too (GroupNorm over one value per group at
        # batch 1, in eval mode as well): nothing to export
        if "value per group" in str(e):
            return False
        raise
    try:
        model = dgx.export(fn, xs, None, opset=opset, dynamic_axes=dynamic_axes)
    except dgx.UnsupportedModelError:
        return False
    strict_check(model)
    try:
        got = ort_run(model, xs)
    except Exception as exc:
        empty = any(np.asarray(x).size == 0 for x in xs) or any(w.size == 0 for w in want)
        if "NOT_IMPLEMENTED" not in str(exc) and not empty:
            raise
        # a kernel onnxruntime lacks (float64 Elu, ...) or refuses for an
        # empty tensor (LayerNormalization over an axis of size 0)
        got = None
    assert got is None or len(got) == len(want), (
        f"{tag}: {len(got)} outputs in onnxruntime, {len(want)}")
    try:
        for k, (g, w) in enumerate(zip(got or [], want)):
            assert_same(f"{tag} opset {opset} output {k} (onnxruntime)", g, w)
    except AssertionError as exc:
        # onnxruntime departs from the specification in places (ReduceMean
        # over an empty axis gives 0, not NaN): onnx's reference evaluator
        # decides.
        ref = reference_run(model, xs)
        if ref is None:
            raise
        try:
            for k, (g, w) in enumerate(zip(ref, want)):
                assert_same(f"{tag} opset {opset} output {k} (reference)", np.asarray(g), w)
        except AssertionError:
            raise exc from None
    if roundtrip:
        f = dgx.load(model)
        back = f(*xs)
        for k, (g, w) in enumerate(zip(back, want)):
            assert_same(f"{tag} opset {opset} output {k} (load(export))", g.numpy(), w)
    if other_xs is not None:
        want2 = eager(fn, other_xs)
        for k, (g, w) in enumerate(zip(ort_run(model, other_xs), want2)):
            assert_same(f"{tag} opset {opset} output {k} (other shapes)", g, w)
    return True


def eager(fn, xs: list) -> list:
    """``fn``'s outputs for NumPy inputs, as NumPy arrays (a vm.torch
    Module gets vm.torch tensors)."""
    if type(fn).__module__.startswith("dragon_core.vm.torch"):
        from dragon_core.vm import torch as vt
        out = fn(*[vt.from_numpy(np.ascontiguousarray(x)) for x in xs])
    else:
        out = fn(*[dg.tensor(x) for x in xs])
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    return [np.array((o.detach() if hasattr(o, "detach") else o).numpy()) for o in out]


# ------------------------------------------------------------- import

class Case:
    """One random ONNX model: ``model``, the feeds, a description."""

    def __init__(self, model, feeds, desc):
        self.model, self.feeds, self.desc = model, feeds, desc

    def __repr__(self):
        return self.desc


def _f(rng, shape, dtype="float32", kind="normal"):
    """Random data with the values that make ops differ: ties and halves
    (``kind='ties'``), signed small integers, positives."""
    shape = tuple(int(s) for s in shape)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        lo = 0 if np.dtype(dtype).kind == "u" else -9
        return rng.integers(lo, 10, size=shape).astype(dtype)
    if kind == "ties":
        return (rng.integers(-6, 7, size=shape) * 0.5).astype(dtype)
    if kind == "pos":
        return rng.uniform(0.1, 3.0, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _type_outputs(model):
    """Give the graph outputs the types shape inference finds (the
    checker's full check wants typed outputs)."""
    import onnx
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        return
    known = {vi.name: vi for vi in inferred.graph.value_info}
    known.update({vi.name: vi for vi in inferred.graph.output})
    for vi in model.graph.output:
        if vi.name in known and known[vi.name].type.HasField("tensor_type"):
            vi.type.CopyFrom(known[vi.name].type)


def make_case(op_type, inputs, attrs, n_out, opset, desc_extra="", domain=""):
    """``inputs``: list of (array or None, how) with how 'in' (a graph
    input), 'init' (an initializer), 'const' (a Constant node) or 'omit'
    (an empty name, an optional input left out)."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.helper import np_dtype_to_tensor_dtype
    names, g_in, inits, nodes, feeds = [], [], [], [], []
    for k, (arr, how) in enumerate(inputs):
        nm = f"x{k}"
        if how == "omit" or arr is None:
            names.append("")
            continue
        arr = np.asarray(arr)
        names.append(nm)
        if how == "in":
            g_in.append(helper.make_tensor_value_info(nm, np_dtype_to_tensor_dtype(arr.dtype),
                                                      list(arr.shape)))
            feeds.append(arr)
        elif how == "init":
            inits.append(numpy_helper.from_array(arr, nm))
        else:
            nodes.append(helper.make_node("Constant", [], [nm],
                                          value=numpy_helper.from_array(arr, nm + "_v")))
    while names and names[-1] == "":
        names.pop()
    outs = [f"y{j}" for j in range(n_out)]
    nodes.append(helper.make_node(op_type, names, outs, name=f"{op_type.lower()}_node",
                                  **attrs))
    g_out = [helper.make_empty_tensor_value_info(o) for o in outs]
    g = helper.make_graph(nodes, "fuzz", g_in, g_out, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset <= 17 else (9 if opset <= 20 else 10)
    _type_outputs(model)
    def show(a):
        if a is None:
            return None
        a = np.asarray(a)
        return (a.dtype, a.shape) if a.size > 8 else a.tolist()
    shown = ", ".join(f"{how}:{show(a)}" for a, how in inputs)
    desc = f"{op_type}-{opset} {attrs} inputs [{shown}] {desc_extra}"
    return Case(model, feeds, desc)


def _shape(rng, rank=None, lo=1, hi=5):
    rank = int(rng.integers(1, 5)) if rank is None else rank
    return [int(d) for d in rng.integers(lo, hi, size=rank)]


def _bshape(rng, s):
    """A shape broadcastable against ``s`` (fewer axes, or ones)."""
    t = [1 if rng.random() < 0.4 else d for d in s]
    if len(t) > 1 and rng.random() < 0.3:
        t = t[int(rng.integers(1, len(t))):]
    return t


def _how(rng, p_in=0.2):
    return "in" if rng.random() < p_in else ("init" if rng.random() < 0.7 else "const")


def _pick(rng, xs):
    return xs[int(rng.integers(len(xs)))]


FLOATS = ("float32", "float64")


def gen_unary(rng):
    op = _pick(rng, ["Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Sigmoid", "Tanh",
                     "Relu", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Erf", "Softplus",
                     "Softsign", "Elu", "Selu", "Celu", "LeakyRelu", "HardSigmoid",
                     "HardSwish", "ThresholdedRelu", "Shrink", "Mish", "Gelu", "IsNaN",
                     "IsInf", "Tan", "Atan", "Asinh", "Sinh", "Cosh"])
    dtype = _pick(rng, FLOATS)
    if op in ("Abs", "Neg", "Relu", "Sign") and rng.random() < 0.4:
        dtype = _pick(rng, ["int32", "int64", "int8", "int16"])
    kind = "pos" if op in ("Log", "Sqrt") else ("ties" if rng.random() < 0.5 else "normal")
    x = _f(rng, _shape(rng), dtype, kind)
    if op in ("IsNaN", "IsInf") and x.size:
        flat = x.reshape(-1)
        m = min(3, x.size)
        flat[rng.integers(0, x.size, size=m)] = [np.inf, -np.inf, np.nan][:m]
    attrs, opset = {}, int(_pick(rng, [13, 17, 18, 21]))
    if op in ("Elu", "Celu", "LeakyRelu", "ThresholdedRelu") and rng.random() < 0.7:
        attrs["alpha"] = float(_pick(rng, [0.0, 0.3, 2.0, -0.5]))
    if op == "HardSigmoid":
        attrs.update(alpha=float(rng.uniform(0, 1)), beta=float(rng.uniform(-1, 1)))
    if op == "Selu" and rng.random() < 0.5:
        attrs.update(alpha=1.5, gamma=0.7)
    if op == "Shrink":
        attrs.update(lambd=float(_pick(rng, [0.0, 0.5, 1.0])), bias=float(_pick(rng, [0.0, 0.3])))
    if op == "Gelu":
        opset = int(_pick(rng, [20, 21, 23]))
        attrs["approximate"] = _pick(rng, ["none", "tanh"])
    if op == "IsInf" and rng.random() < 0.6:
        attrs.update(detect_positive=int(rng.integers(2)), detect_negative=int(rng.integers(2)))
    if op == "Celu" and dtype != "float32":
        x = x.astype("float32")
    return make_case(op, [(x, "in")], attrs, 1, opset)


def gen_binary(rng):
    op = _pick(rng, ["Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean",
                     "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or",
                     "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu", "Where"])
    s = _shape(rng)
    t = _bshape(rng, s)
    if rng.random() < 0.5:
        s, t = t, s
    if op in ("And", "Or", "Xor"):
        dtype = "bool"
    elif op.startswith("Bitwise"):
        dtype = _pick(rng, ["int32", "int64", "uint8", "int8"])
    elif op in ("Div", "Mod", "Add", "Sub", "Mul", "Max", "Min", "Equal", "Greater", "Less"):
        dtype = _pick(rng, ["float32", "float64", "int32", "int64"])
    else:
        dtype = _pick(rng, FLOATS)
    a, b = _f(rng, s, dtype, "ties"), _f(rng, t, dtype, "ties")
    if op in ("Div", "Mod") and np.dtype(dtype).kind in "iu":
        b = np.where(b == 0, 3, b).astype(dtype)
    if op == "Mod" and np.dtype(dtype).kind == "f":
        b = np.where(b == 0, 1.5, b).astype(dtype)
    attrs = {}
    opset = int(_pick(rng, [13, 14, 18, 21]))
    if op == "Mod":
        attrs["fmod"] = 1 if np.dtype(dtype).kind == "f" else int(rng.integers(2))
    if op == "Pow":
        a = np.abs(a) + np.asarray(0.5, dtype)
        if rng.random() < 0.4:
            b = _f(rng, t, _pick(rng, ["int32", "int64", "float32"]))
        if rng.random() < 0.3:       # an integer base, a float or integer power
            a = np.abs(_f(rng, s, _pick(rng, ["int32", "int64"])))
            b = np.abs(_f(rng, t, _pick(rng, ["float32", "float64", "int64"]), "ties"))
    if op == "Where":
        c = _f(rng, _bshape(rng, s), "bool")
        return make_case(op, [(c, "in"), (a, "in"), (b, _how(rng, 0.8))], {}, 1, opset)
    if op == "PRelu":
        b = _f(rng, _bshape(rng, s), dtype)
        return make_case(op, [(a, "in"), (b, "init")], {}, 1, opset)
    if op in ("Max", "Min", "Sum", "Mean") and rng.random() < 0.4:
        c = _f(rng, _bshape(rng, s), dtype, "ties")
        return make_case(op, [(a, "in"), (b, "in"), (c, "in")], attrs, 1, opset)
    return make_case(op, [(a, "in"), (b, _how(rng, 0.7))], attrs, 1, opset)


def gen_clip(rng):
    dtype = _pick(rng, ["float32", "float64", "int32", "int64", "int8"])
    x = _f(rng, _shape(rng), dtype, "ties")
    opset = int(_pick(rng, [7, 11, 12, 13, 21]))
    lo = float(_pick(rng, [-1.0, -0.5, 0.0, 2.0]))
    hi = float(_pick(rng, [1.0, 0.5, -2.0, 3.0]))
    if opset < 11:
        x = x.astype("float32")
        attrs = {}
        if rng.random() < 0.7:
            attrs["min"] = lo
        if rng.random() < 0.7:
            attrs["max"] = hi
        return make_case("Clip", [(x, "in")], attrs, 1, opset)
    if opset < 12:
        x = x.astype(_pick(rng, FLOATS))
    if np.dtype(x.dtype).kind in "iu":
        lo, hi = round(lo), round(hi)
    mk = lambda v: np.array(v, x.dtype)  # noqa: E731
    ins = [(x, "in")]
    r = rng.random()
    if r < 0.3:
        ins += [(None, "omit"), (mk(hi), _how(rng))]
    elif r < 0.5:
        ins += [(mk(lo), _how(rng))]
    elif r < 0.6:
        pass
    else:
        ins += [(mk(lo), _how(rng)), (mk(hi), _how(rng))]
    return make_case("Clip", ins, {}, 1, opset)


_CASTS = ["float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64",
          "uint8", "bool"]


def gen_cast(rng):
    from onnx.helper import np_dtype_to_tensor_dtype
    import ml_dtypes
    src, to = _pick(rng, _CASTS), _pick(rng, _CASTS)
    if src == "bfloat16":
        src = "float32"
    x = _f(rng, _shape(rng), src, "ties")
    if np.dtype(src).kind == "f":
        x = (x * 3).astype(src)
        if to == "uint8" or to == "bool":
            x = np.abs(x).astype(src)
    if np.dtype(src).kind == "i" and to == "uint8":
        x = np.abs(x)
    tdt = np.dtype(ml_dtypes.bfloat16) if to == "bfloat16" else np.dtype(to)
    opset = int(_pick(rng, [13, 19, 21]))
    attrs = {"to": int(np_dtype_to_tensor_dtype(tdt))}
    if opset >= 19 and rng.random() < 0.3:
        attrs["saturate"] = int(rng.integers(2))
    if rng.random() < 0.3:
        return make_case("CastLike", [(x, "in"), (np.zeros((1,), tdt), "init")], {}, 1, opset)
    return make_case("Cast", [(x, "in")], attrs, 1, opset)


def _i64(v):
    return np.array(v, np.int64)


def gen_shape_ops(rng):
    op = _pick(rng, ["Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Concat",
                     "Split", "Slice", "Expand", "Tile", "Shape", "Size", "DepthToSpace",
                     "SpaceToDepth", "Trilu", "EyeLike", "Identity"])
    dtype = _pick(rng, ["float32", "float64", "int64", "int32", "bool", "uint8"])
    s = _shape(rng, lo=1, hi=5)
    x = _f(rng, s, dtype)
    r = len(s)
    opset = int(_pick(rng, [11, 13, 18, 21]))
    if op == "Reshape":
        t = list(s)
        if rng.random() < 0.5:
            t = [int(np.prod(s))]
        if rng.random() < 0.5 and len(t) > 0:
            t[int(rng.integers(len(t)))] = -1
        if rng.random() < 0.5 and len(t) == len(s):
            k = int(rng.integers(len(t)))
            if t[k] != -1:
                t[k] = 0
        return make_case(op, [(x, "in"), (_i64(t), _how(rng))], {}, 1, opset)
    if op == "Flatten":
        return make_case(op, [(x, "in")], {"axis": int(rng.integers(-r, r + 1))}, 1, opset)
    if op == "Transpose":
        attrs = {} if rng.random() < 0.3 else {"perm": [int(p) for p in rng.permutation(r)]}
        return make_case(op, [(x, "in")], attrs, 1, opset)
    if op in ("Squeeze", "Unsqueeze"):
        if op == "Squeeze":
            s2 = [1 if rng.random() < 0.4 else d for d in s]
            x = _f(rng, s2, dtype)
            ones = [i for i, d in enumerate(s2) if d == 1]
            axes = None if (not ones or rng.random() < 0.3) else \
                sorted({int(_pick(rng, ones)) for _ in range(2)})
            if axes is not None:
                axes = [a - r if rng.random() < 0.5 else a for a in axes]
        else:
            k = int(rng.integers(1, 3))
            axes = sorted({int(v) for v in rng.integers(0, r + k, size=k)})
            k = len(axes)
            axes = [a - (r + k) if rng.random() < 0.5 else a for a in axes]
        if axes is None:
            return make_case(op, [(x, "in")], {}, 1, opset)
        if opset < 13:
            return make_case(op, [(x, "in")], {"axes": axes}, 1, opset)
        return make_case(op, [(x, "in"), (_i64(axes), _how(rng))], {}, 1, opset)
    if op == "Concat":
        ax = int(rng.integers(-r, r))
        ins = []
        for _ in range(int(rng.integers(1, 4))):
            t = list(s)
            t[ax] = int(rng.integers(0, 4))
            ins.append((_f(rng, t, dtype), _how(rng, 0.7)))
        return make_case(op, ins, {"axis": ax}, 1, opset)
    if op == "Split":
        ax = int(rng.integers(-r, r))
        dim = s[ax]
        if opset >= 18 and rng.random() < 0.5:
            k = int(rng.integers(1, dim + 1))
            return make_case(op, [(x, "in")], {"axis": ax, "num_outputs": k}, k, opset,
                             f"dim {dim}")
        if rng.random() < 0.4:
            k = _pick(rng, [d for d in range(1, dim + 1) if dim % d == 0])
            return make_case(op, [(x, "in")], {"axis": ax}, k, opset)
        cuts = sorted(int(c) for c in rng.integers(0, dim + 1, size=int(rng.integers(0, 3))))
        sizes = np.diff([0] + cuts + [dim]).tolist()
        if opset < 13:
            return make_case(op, [(x, "in")], {"axis": ax, "split": sizes}, len(sizes), opset)
        return make_case(op, [(x, "in"), (_i64(sizes), _how(rng))], {"axis": ax},
                         len(sizes), opset)
    if op == "Slice":
        k = int(rng.integers(1, r + 1))
        axes = [int(a) for a in rng.permutation(r)[:k]]
        starts, ends, steps = [], [], []
        for a in axes:
            d = s[a]
            st = int(rng.integers(-d - 3, d + 3))
            en = int(_pick(rng, [int(rng.integers(-d - 3, d + 3)), 2 ** 63 - 1, -2 ** 63, d]))
            sp = int(_pick(rng, [1, 1, 2, -1, -2, 3]))
            starts.append(st), ends.append(en), steps.append(sp)
        axes = [a - r if rng.random() < 0.4 else a for a in axes]
        if opset < 10:
            pass
        ins = [(x, "in"), (_i64(starts), _how(rng)), (_i64(ends), _how(rng))]
        if rng.random() < 0.8 or any(sp != 1 for sp in steps):
            ins.append((_i64(axes), _how(rng)))
            if rng.random() < 0.8 or any(sp != 1 for sp in steps):
                ins.append((_i64(steps), _how(rng)))
        elif axes != list(range(k)):
            ins.append((_i64(axes), _how(rng)))
        return make_case(op, ins, {}, 1, opset)
    if op == "Expand":
        s2 = [1 if rng.random() < 0.5 else d for d in s]
        x = _f(rng, s2, dtype)
        t = [int(_pick(rng, [1, d])) if d != 1 else int(rng.integers(1, 4)) for d in s2]
        if rng.random() < 0.3:
            t = [int(rng.integers(1, 3))] + t
        if rng.random() < 0.3 and len(t) > 1:
            t = t[1:]
        return make_case(op, [(x, "in"), (_i64(t), _how(rng))], {}, 1, opset)
    if op == "Tile":
        reps = [int(v) for v in rng.integers(0 if rng.random() < 0.2 else 1, 4, size=r)]
        return make_case(op, [(x, "in"), (_i64(reps), _how(rng))], {}, 1, opset)
    if op == "Shape":
        attrs = {}
        if opset >= 15 and rng.random() < 0.7:
            attrs["start"] = int(rng.integers(-r - 1, r + 1))
            if rng.random() < 0.6:
                attrs["end"] = int(rng.integers(-r - 1, r + 2))
        return make_case(op, [(x, "in")], attrs, 1, opset)
    if op == "Size":
        return make_case(op, [(x, "in")], {}, 1, opset)
    if op in ("DepthToSpace", "SpaceToDepth"):
        b = int(rng.integers(1, 4))
        if op == "DepthToSpace":
            x = _f(rng, [2, b * b * int(rng.integers(1, 3)), 2, 3], dtype)
        else:
            x = _f(rng, [2, 2, b * 2, b * int(rng.integers(1, 3))], dtype)
        attrs = {"blocksize": b}
        if op == "DepthToSpace" and rng.random() < 0.6:
            attrs["mode"] = _pick(rng, ["DCR", "CRD"])
        return make_case(op, [(x, "in")], attrs, 1, opset)
    if op == "Trilu":
        x = _f(rng, [int(rng.integers(1, 3))] + _shape(rng, 2),
               dtype if dtype != "bool" else "float32")
        attrs = {"upper": int(rng.integers(2))} if rng.random() < 0.7 else {}
        ins = [(x, "in")]
        if rng.random() < 0.7:
            ins.append((_i64(int(rng.integers(-5, 6))), _how(rng)))
        return make_case(op, ins, attrs, 1, 14 if opset < 14 else opset)
    if op == "EyeLike":
        x = _f(rng, _shape(rng, 2), _pick(rng, ["float32", "int64", "int32"]))
        attrs = {}
        if rng.random() < 0.5:
            attrs["k"] = int(rng.integers(-4, 5))
        if rng.random() < 0.4:
            attrs["dtype"] = int(_pick(rng, [1, 7, 11]))
        return make_case(op, [(x, "in")], attrs, 1, opset)
    return make_case(op, [(x, "in")], {}, 1, opset)


def gen_index_ops(rng):
    op = _pick(rng, ["Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND",
                     "OneHot", "CumSum", "TopK", "ArgMax", "ArgMin"])
    dtype = _pick(rng, ["float32", "float64", "int64", "int32"])
    s = _shape(rng, lo=1, hi=5)
    r = len(s)
    x = _f(rng, s, dtype, "ties")
    opset = int(_pick(rng, [11, 13, 16, 18, 21]))
    idt = _pick(rng, ["int64", "int32"])
    if op == "Gather":
        ax = int(rng.integers(-r, r))
        d = s[ax]
        idx = rng.integers(-d, d, size=_shape(rng, int(rng.integers(0, 3)))).astype(idt)
        return make_case(op, [(x, "in"), (idx, _how(rng, 0.5))], {"axis": ax}, 1, opset)
    if op == "GatherElements":
        ax = int(rng.integers(-r, r))
        d = s[ax]
        t = [int(rng.integers(1, v + 1)) for v in s]
        t[ax] = int(rng.integers(1, 5))
        idx = rng.integers(-d, d, size=t).astype(idt)
        return make_case(op, [(x, "in"), (idx, _how(rng, 0.5))], {"axis": ax}, 1, opset)
    if op == "GatherND":
        b = int(rng.integers(0, r)) if opset >= 12 else 0
        k = int(rng.integers(1, r - b + 1))
        lead = s[:b] + _shape(rng, int(rng.integers(0, 3)))
        idx = np.stack([rng.integers(-s[b + j], s[b + j], size=lead) for j in range(k)],
                       -1).astype(np.int64)
        return make_case(op, [(x, "in"), (idx, _how(rng, 0.5))],
                         {"batch_dims": b} if b or rng.random() < 0.3 else {}, 1, opset)
    if op == "ScatterElements":
        ax = int(rng.integers(-r, r))
        d = s[ax]
        t = list(s)
        t[ax] = int(rng.integers(1, d + 1))
        red = _pick(rng, ["none", "add", "mul", "max", "min"]) if opset >= 18 else \
            _pick(rng, ["none", "add", "mul"]) if opset >= 16 else "none"
        if red == "none":
            # distinct indices along the axis for every other position
            idx = np.argsort(rng.random(list(s[:ax % r]) + [d] + list(s[ax % r + 1:])),
                             axis=ax % r)
            idx = np.take(idx, range(t[ax]), axis=ax % r)
        else:
            idx = rng.integers(0, d, size=t)
        idx = np.where(rng.random(idx.shape) < 0.4, idx - d, idx).astype(idt)
        upd = _f(rng, idx.shape, dtype, "ties")
        attrs = {"axis": ax}
        if red != "none" or rng.random() < 0.3:
            attrs["reduction"] = red
        return make_case(op, [(x, "in"), (idx, _how(rng, 0.4)), (upd, "in")], attrs, 1, opset)
    if op == "ScatterND":
        k = int(rng.integers(1, r + 1))
        rows = int(np.prod(s[:k]))
        m = int(rng.integers(1, rows + 1))
        red = _pick(rng, ["none", "add", "mul", "max", "min"]) if opset >= 18 else \
            _pick(rng, ["none", "add", "mul"]) if opset >= 16 else "none"
        flat = rng.permutation(rows)[:m] if red == "none" else rng.integers(0, rows, size=m)
        idx = np.stack(np.unravel_index(flat, s[:k]), -1).astype(np.int64)
        idx = np.where(rng.random(idx.shape) < 0.4, idx - np.array(s[:k]), idx)
        upd = _f(rng, [m] + s[k:], dtype, "ties")
        attrs = {"reduction": red} if red != "none" or rng.random() < 0.3 else {}
        return make_case(op, [(x, "in"), (idx, _how(rng, 0.4)), (upd, "in")], attrs, 1, opset)
    if op == "OneHot":
        depth = int(rng.integers(1, 6))
        idx = rng.integers(-depth - 2, depth + 2, size=_shape(rng, int(rng.integers(1, 3))))
        idx = idx.astype(_pick(rng, ["int64", "int32", "float32"]))
        vals = np.array(_pick(rng, [[0, 1], [-1.5, 2.0], [3, 7]]),
                        _pick(rng, ["float32", "int64", "int32"]))
        attrs = {"axis": int(rng.integers(-idx.ndim - 1, idx.ndim + 1))} \
            if rng.random() < 0.7 else {}
        return make_case(op, [(idx, "in"), (np.array(depth, _pick(rng, ["int64", "float32"])),
                                            _how(rng, 0.0)), (vals, _how(rng, 0.0))],
                         attrs, 1, opset)
    if op == "CumSum":
        attrs = {}
        if rng.random() < 0.5:
            attrs["exclusive"] = int(rng.integers(2))
        if rng.random() < 0.5:
            attrs["reverse"] = int(rng.integers(2))
        ax = np.array(int(rng.integers(-r, r)), _pick(rng, ["int64", "int32"]))
        return make_case(op, [(x, "in"), (ax, _how(rng))], attrs, 1, opset)
    if op == "TopK":
        ax = int(rng.integers(-r, r))
        k = int(rng.integers(0, s[ax] + 1))
        attrs = {"axis": ax}
        if rng.random() < 0.6:
            attrs["largest"] = int(rng.integers(2))
        if rng.random() < 0.3:
            attrs["sorted"] = 1
        return make_case(op, [(x, "in"), (_i64([k]), _how(rng))], attrs, 2, opset)
    ax = int(rng.integers(-r, r))
    attrs = {"axis": ax}
    if rng.random() < 0.5:
        attrs["keepdims"] = int(rng.integers(2))
    if opset >= 12 and rng.random() < 0.5:
        attrs["select_last_index"] = int(rng.integers(2))
    return make_case(op, [(x, "in")], attrs, 1, opset)


_RED = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
        "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def gen_reduce(rng):
    op = _pick(rng, _RED)
    dtype = _pick(rng, ["float32", "float64"] + (["int32", "int64"] if op in (
        "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd") else []))
    s = _shape(rng, lo=1, hi=5)
    r = len(s)
    x = _f(rng, s, dtype, "pos" if op == "ReduceLogSum" else "ties")
    opset = int(_pick(rng, [11, 13, 18, 20]))
    attrs = {}
    if rng.random() < 0.6:
        attrs["keepdims"] = int(rng.integers(2))
    axes = None
    if rng.random() < 0.8:
        axes = sorted({int(a) for a in rng.integers(0, r, size=int(rng.integers(0, r + 1)))})
        axes = [a - r if rng.random() < 0.4 else a for a in axes]
    input_axes = opset >= 18 or (op == "ReduceSum" and opset >= 13)
    if input_axes and rng.random() < 0.4:
        attrs["noop_with_empty_axes"] = int(rng.integers(2))
    if axes is None:
        return make_case(op, [(x, "in")], attrs, 1, opset)
    if input_axes:
        return make_case(op, [(x, "in"), (_i64(axes), _how(rng))], attrs, 1, opset)
    if not axes:
        return None
    attrs["axes"] = axes
    return make_case(op, [(x, "in")], attrs, 1, opset)


def gen_softmax(rng):
    op = _pick(rng, ["Softmax", "LogSoftmax", "Hardmax"])
    s = _shape(rng, lo=1, hi=5)
    r = len(s)
    x = _f(rng, s, _pick(rng, FLOATS), "ties" if op == "Hardmax" else "normal")
    opset = int(_pick(rng, [11, 12, 13, 21]))
    attrs = {"axis": int(rng.integers(-r, r))} if rng.random() < 0.8 else {}
    return make_case(op, [(x, "in")], attrs, 1, opset)


def gen_matmul(rng):
    op = _pick(rng, ["MatMul", "Gemm", "Einsum"])
    dtype = _pick(rng, FLOATS)
    opset = int(_pick(rng, [11, 13, 21]))
    m, k, n = (int(v) for v in rng.integers(1, 6, size=3))
    if op == "MatMul":
        a_s = _pick(rng, [[k], [m, k], [2, m, k], [1, 3, m, k], [3, 1, m, k]])
        b_s = _pick(rng, [[k], [k, n], [2, k, n], [3, 1, k, n], [1, k, n]])
        if len(a_s) == 1 and len(b_s) == 1:
            b_s = [k, n]
        return make_case(op, [(_f(rng, a_s, dtype), "in"), (_f(rng, b_s, dtype), _how(rng, 0.5))],
                         {}, 1, opset)
    if op == "Gemm":
        ta, tb = int(rng.integers(2)), int(rng.integers(2))
        a = _f(rng, [k, m] if ta else [m, k], dtype)
        b = _f(rng, [n, k] if tb else [k, n], dtype)
        attrs = {}
        if ta or rng.random() < 0.3:
            attrs["transA"] = ta
        if tb or rng.random() < 0.3:
            attrs["transB"] = tb
        if rng.random() < 0.4:
            attrs["alpha"] = float(_pick(rng, [0.5, -2.0, 0.0]))
        if rng.random() < 0.4:
            attrs["beta"] = float(_pick(rng, [0.5, -1.0, 0.0]))
        ins = [(a, "in"), (b, _how(rng, 0.5))]
        if rng.random() < 0.7:
            ins.append((_f(rng, _pick(rng, [[m, n], [n], [1, n], [m, 1], [], [1]]), dtype),
                        _how(rng, 0.5)))
        return make_case(op, ins, attrs, 1, opset)
    eq, shapes = _pick(rng, [("ij,jk->ik", [[m, k], [k, n]]), ("ij->ji", [[m, k]]),
                             ("bij,bjk->bik", [[2, m, k], [2, k, n]]), ("ii->i", [[m, m]]),
                             ("ij->", [[m, k]]), ("i,j->ij", [[m], [n]]),
                             ("...ij,...jk->...ik", [[3, m, k], [3, k, n]]),
                             ("ij,ij->i", [[m, k], [m, k]]), ("ijk->kji", [[m, k, n]])])
    return make_case(op, [(_f(rng, sh, dtype), "in") for sh in shapes], {"equation": eq}, 1,
                     opset)


def _geometry_attrs(rng, rank, kernel, pool=False):
    attrs = {}
    if rng.random() < 0.6:
        attrs["strides"] = [int(v) for v in rng.integers(1, 4, size=rank)]
    if rng.random() < 0.4:
        attrs["dilations"] = [int(v) for v in rng.integers(1, 3, size=rank)]
    r = rng.random()
    if r < 0.25:
        attrs["auto_pad"] = _pick(rng, ["SAME_UPPER", "SAME_LOWER", "VALID"])
    elif r < 0.8:
        hi = [max(1, k) for k in kernel]
        attrs["pads"] = [int(rng.integers(0, h)) if pool else int(rng.integers(0, 3))
                         for h in hi + hi]
    return attrs


def gen_conv(rng):
    op = _pick(rng, ["Conv", "Conv", "ConvTranspose"])
    rank = int(_pick(rng, [1, 2, 2, 3]))
    dtype = _pick(rng, FLOATS)
    g = int(_pick(rng, [1, 1, 2]))
    cin, cout = g * int(rng.integers(1, 3)), g * int(rng.integers(1, 3))
    kernel = [int(v) for v in rng.integers(1, 4, size=rank)]
    sp = [int(v) for v in rng.integers(3, 8, size=rank)]
    x = _f(rng, [int(rng.integers(1, 3)), cin] + sp, dtype)
    w = _f(rng, ([cout, cin // g] if op == "Conv" else [cin, cout // g]) + kernel, dtype)
    attrs = _geometry_attrs(rng, rank, kernel)
    if rng.random() < 0.7:
        attrs["kernel_shape"] = kernel
    if g > 1 or rng.random() < 0.2:
        attrs["group"] = g
    opset = int(_pick(rng, [11, 13, 18, 22]))
    if op == "ConvTranspose":
        if attrs.get("auto_pad", "").startswith("SAME"):
            # a stride past the kernel makes SAME's total padding negative,
            # which onnxruntime and the reference evaluator each read their
            # own way (the specification does not say)
            attrs.pop("strides", None)
        st = attrs.get("strides", [1] * rank)
        dl = attrs.get("dilations", [1] * rank)
        if rng.random() < 0.4:
            attrs["output_padding"] = [int(rng.integers(0, max(s, d))) for s, d in zip(st, dl)]
        if rng.random() < 0.2:
            attrs.pop("pads", None)
            attrs.pop("auto_pad", None)
            attrs.pop("output_padding", None)
            attrs["output_shape"] = [int(s * v + rng.integers(0, s)) for s, v in zip(st, sp)]
    ins = [(x, "in"), (w, _how(rng, 0.3))]
    if rng.random() < 0.6:
        ins.append((_f(rng, [cout], dtype), _how(rng, 0.3)))
    elif rng.random() < 0.3:
        ins.append((None, "omit"))
    return make_case(op, ins, attrs, 1, opset)


def gen_pool(rng):
    op = _pick(rng, ["MaxPool", "AveragePool", "AveragePool", "MaxPool", "LpPool",
                     "GlobalAveragePool", "GlobalMaxPool"])
    rank = int(_pick(rng, [1, 2, 2, 2, 3]))
    dtype = _pick(rng, FLOATS)
    sp = [int(v) for v in rng.integers(2, 8, size=rank)]
    x = _f(rng, [int(rng.integers(1, 3)), int(rng.integers(1, 4))] + sp, dtype, "ties")
    opset = int(_pick(rng, [11, 12, 18, 19, 22]))
    if op.startswith("Global"):
        return make_case(op, [(x, "in")], {}, 1, opset)
    kernel = [int(rng.integers(1, min(4, d) + 1)) for d in sp]
    attrs = _geometry_attrs(rng, rank, kernel, pool=True)
    if attrs.get("auto_pad", "").startswith("SAME"):
        # SAME pads with dilations: the specification (and onnx's shape
        # inference, and Dragon) count the dilated window; onnxruntime and
        # the reference evaluator the undilated one. A stride past the
        # kernel makes the total padding negative: onnxruntime refuses it
        # in float32 and uses it in float64, Dragon pads nothing.
        attrs.pop("dilations", None)
        attrs["strides"] = [min(s, k) for s, k in zip(attrs.get("strides", [1] * rank),
                                                      kernel)]
    attrs["kernel_shape"] = kernel
    if op == "AveragePool" and opset < 19:
        attrs.pop("dilations", None)
    if op == "LpPool":
        attrs.pop("dilations", None) if opset < 18 else None
        if rng.random() < 0.5:
            attrs["p"] = int(_pick(rng, [1, 2, 3]))
    if rng.random() < 0.5 and op != "LpPool" or (op == "LpPool" and opset >= 18 and
                                                 rng.random() < 0.3):
        attrs["ceil_mode"] = int(rng.integers(2))
    if op == "AveragePool" and rng.random() < 0.6:
        attrs["count_include_pad"] = int(rng.integers(2))
    n_out = 2 if op == "MaxPool" and rng.random() < 0.2 else 1
    return make_case(op, [(x, "in")], attrs, n_out, opset)


def gen_norm(rng):
    op = _pick(rng, ["BatchNormalization", "InstanceNormalization", "LayerNormalization",
                     "GroupNormalization", "LRN", "LpNormalization",
                     "MeanVarianceNormalization"])
    dtype = _pick(rng, FLOATS)
    s = [int(rng.integers(1, 3)), int(_pick(rng, [2, 4, 6]))] + _shape(rng, int(rng.integers(0, 3)))
    x = _f(rng, s, dtype)
    C = s[1]
    opset = int(_pick(rng, [13, 17, 18, 21]))
    if op == "BatchNormalization":
        var = _f(rng, [C], dtype, "pos")
        ins = [(x, "in")] + [(_f(rng, [C], dtype), _how(rng)) for _ in range(3)]
        ins.append((var, _how(rng)))
        attrs = {"epsilon": float(_pick(rng, [1e-5, 0.1]))} if rng.random() < 0.5 else {}
        return make_case(op, ins, attrs, 1, opset)
    if op == "InstanceNormalization":
        if len(s) < 3:
            return None
        return make_case(op, [(x, "in"), (_f(rng, [C], dtype), "init"),
                              (_f(rng, [C], dtype), "init")], {}, 1, opset)
    if op == "LayerNormalization":
        opset = max(opset, 17)
        r = len(s)
        ax = int(rng.integers(-r, r))
        tail = s[ax % r:]
        ins = [(x, "in"), (_f(rng, tail if rng.random() < 0.7 else tail[-1:], dtype), "init")]
        if rng.random() < 0.6:
            ins.append((_f(rng, tail, dtype), "init"))
        attrs = {"axis": ax}
        if rng.random() < 0.4:
            attrs["epsilon"] = 0.1
        return make_case(op, ins, attrs, 1, opset)
    if op == "GroupNormalization":
        opset = int(_pick(rng, [18, 21]))
        g = int(_pick(rng, [d for d in (1, 2, C) if C % d == 0]))
        n_par = g if opset < 21 else C
        return make_case(op, [(x, "in"), (_f(rng, [n_par], dtype), "init"),
                              (_f(rng, [n_par], dtype), "init")],
                         {"num_groups": g, "epsilon": 1e-3}, 1, opset)
    if op == "LRN":
        if len(s) < 3:
            return None
        return make_case(op, [(x.astype("float32"), "in")],
                         {"size": int(rng.integers(1, 5)), "alpha": 0.01, "beta": 0.6,
                          "bias": 1.5}, 1, opset)
    if op == "LpNormalization":
        r = len(s)
        return make_case(op, [(x, "in")], {"axis": int(rng.integers(-r, r)),
                                           "p": int(_pick(rng, [1, 2]))}, 1, opset)
    if len(s) != 4:
        return None
    return make_case(op, [(x, "in")], {"axes": _pick(rng, [[0, 2, 3], [1], [2, 3], [-1]])},
                     1, opset)


def gen_pad(rng):
    dtype = _pick(rng, ["float32", "float64", "int32", "int64", "uint8", "bool"])
    s = _shape(rng, lo=1, hi=6)
    r = len(s)
    x = _f(rng, s, dtype)
    opset = int(_pick(rng, [7, 11, 13, 18, 19, 21]))
    mode = _pick(rng, ["constant", "constant", "reflect", "edge", "wrap"])
    if opset < 19 and mode == "wrap":
        mode = "edge"
    axes = list(range(r))
    if opset >= 18 and rng.random() < 0.5:
        axes = sorted({int(a) for a in rng.integers(0, r, size=int(rng.integers(1, r + 1)))})
    pads = []
    for side in range(2):
        for a in axes:
            lo = -s[a] + 1 if rng.random() < 0.3 else 0
            hi = (s[a] - 1) if mode == "reflect" else 3
            pads.append(int(rng.integers(lo, max(lo, hi) + 1)))
    attrs = {} if mode == "constant" and rng.random() < 0.5 else {"mode": mode}
    if opset < 11:
        x = x.astype("float32")
        attrs["pads"] = pads
        if rng.random() < 0.5:
            attrs["value"] = 1.5
        return make_case("Pad", [(x, "in")], attrs, 1, opset)
    ins = [(x, "in"), (_i64(pads), _how(rng))]
    if rng.random() < 0.6:
        v = np.array(_pick(rng, [0, 1, 2.5, -3]) if dtype != "bool" else True).astype(dtype)
        ins.append((v, _how(rng)))
    elif axes != list(range(r)):
        ins.append((None, "omit"))
    if axes != list(range(r)):
        ins.append((_i64([a - r if rng.random() < 0.4 else a for a in axes]), _how(rng)))
    return make_case("Pad", ins, attrs, 1, opset)


def gen_resize(rng):
    dtype = _pick(rng, FLOATS + ("float32",))
    r = int(_pick(rng, [3, 4, 4]))
    s = [1, int(rng.integers(1, 3))] + [int(v) for v in rng.integers(1, 7, size=r - 2)]
    x = _f(rng, s, dtype)
    opset = int(_pick(rng, [11, 13, 18, 19]))
    mode = _pick(rng, ["nearest", "linear", "cubic"])
    attrs = {"mode": mode}
    attrs["coordinate_transformation_mode"] = _pick(rng, [
        "half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
        "tf_crop_and_resize"] + (["half_pixel_symmetric"] if opset >= 19 else []))
    if mode == "nearest" and rng.random() < 0.8:
        attrs["nearest_mode"] = _pick(rng, ["round_prefer_floor", "round_prefer_ceil", "floor",
                                            "ceil"])
    if mode == "cubic":
        if rng.random() < 0.5:
            attrs["cubic_coeff_a"] = float(_pick(rng, [-0.5, -0.75]))
        if rng.random() < 0.4:
            attrs["exclude_outside"] = 1
    if opset >= 18 and mode != "nearest" and rng.random() < 0.3:
        attrs["antialias"] = 1
    spatial = list(range(2, r))
    roi = np.array([0.0] * r + [1.0] * r, np.float32)
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        for a in spatial:
            roi[a], roi[r + a] = sorted(rng.uniform(-0.2, 1.2, size=2))
        if rng.random() < 0.5:
            attrs["extrapolation_value"] = 7.0
    # align_corners with a scale whose output length is fractional: the
    # specification divides by the output length, onnx's reference (and its
    # backend test data, and Dragon) by the fractional length, onnxruntime by
    # the integer one. Such cases get sizes.
    # tf_crop_and_resize likewise: onnx's reference tests a fractional
    # length for 1, the specification (and Dragon) the integer one, and
    # onnxruntime departs from both (it ignores roi at scale 1).
    use_sizes = rng.random() < 0.5 or attrs["coordinate_transformation_mode"] in (
        "align_corners", "tf_crop_and_resize")
    if use_sizes:
        sizes = [s[a] if a < 2 else int(rng.integers(1, 10)) for a in range(r)]
        if opset >= 18 and rng.random() < 0.3 and \
                attrs["coordinate_transformation_mode"] != "tf_crop_and_resize":
            # (with a roi the runtimes disagree; not judged here)
            attrs["keep_aspect_ratio_policy"] = _pick(rng, ["not_larger", "not_smaller"])
        tail = [(np.zeros(0, np.float32), "init"), (_i64(sizes), _how(rng))]
    else:
        scales = [1.0, 1.0] + [float(_pick(rng, [0.5, 0.6, 1.0, 1.5, 2.0, 2.7, 3.0, 0.34]))
                               for _ in spatial]
        tail = [(np.array(scales, np.float32), _how(rng))]
    roi_in = (roi, "init") if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" \
        else _pick(rng, [(None, "omit"), (np.zeros(0, np.float32), "init")])
    return make_case("Resize", [(x, "in"), roi_in] + tail, attrs, 1, opset)


def gen_misc(rng):
    op = _pick(rng, ["Range", "ConstantOfShape", "Dropout", "Mod", "Where", "Einsum"])
    opset = int(_pick(rng, [13, 18, 21]))
    if op == "Range":
        dtype = _pick(rng, ["float32", "int64", "int32", "float64"])
        st, lim, de = (np.array(v, dtype) for v in _pick(rng, [
            (0, 5, 1), (5, 0, -2),
            (1, 7.5, 1.5) if dtype.startswith("f") else (1, 7, 2),
            (3, 3, 1), (-2, 4, 3), (0, -4, 1)]))
        return make_case(op, [(st, _how(rng, 0)), (lim, _how(rng, 0)), (de, _how(rng, 0))], {},
                         1, opset)
    if op == "ConstantOfShape":
        from onnx import numpy_helper
        attrs = {}
        if rng.random() < 0.7:
            v = np.array([_pick(rng, [1.5, -2, 0, 7])]).astype(
                _pick(rng, ["float32", "int64", "int32", "float64", "bool", "uint8"]))
            attrs["value"] = numpy_helper.from_array(v, "value")
        return make_case(op, [(_i64(_shape(rng, int(rng.integers(0, 3)), lo=0)), _how(rng, 0))],
                         attrs, 1, opset)
    if op == "Dropout":
        x = _f(rng, _shape(rng), "float32")
        ins = [(x, "in")]
        if rng.random() < 0.5:
            ins.append((np.array(0.3, np.float32), "init"))
            if rng.random() < 0.5:
                ins.append((np.array(False), "init"))
        return make_case(op, ins, {}, int(_pick(rng, [1, 2])), opset)
    return gen_binary(rng)


IMPORT_GENERATORS = {
    "unary": (gen_unary, 60), "binary": (gen_binary, 60), "clip": (gen_clip, 20),
    "cast": (gen_cast, 30), "shape": (gen_shape_ops, 80), "index": (gen_index_ops, 70),
    "reduce": (gen_reduce, 50), "softmax": (gen_softmax, 20), "matmul": (gen_matmul, 25),
    "conv": (gen_conv, 50), "pool": (gen_pool, 60), "norm": (gen_norm, 30),
    "pad": (gen_pad, 40), "resize": (gen_resize, 60), "misc": (gen_misc, 20),
}


class Declined(Exception):
    pass


def check_import(case: Case) -> str:
    """Run ``case`` in onnxruntime and through ``load``. Returns 'ran',
    'ort-refused' or 'dragon-refused'; raises AssertionError on a
    difference, and on an error of Dragon's that is not a refusal naming
    the node."""
    import dragon_core.onnx as dgx
    judge = "ran"
    try:
        strict_check(case.model)
    except Exception:
        return "invalid-model"
    try:
        want = ort_run(case.model, case.feeds)
    except Exception as exc:
        # onnxruntime lacks many float64 kernels (Conv, pooling, Resize):
        # the same model in float32 is the judge there, at float32's
        # tolerance (onnx's reference evaluator has wrong grouped 3-D
        # ConvTranspose and cubic tf_crop_and_resize)
        want = None
        if "NOT_IMPLEMENTED" in str(exc) and any(
                np.asarray(f).dtype == np.float64 for f in case.feeds):
            try:
                m32, f32 = as_float32(case.model, case.feeds)
                want = ort_run(m32, f32)
            except Exception:
                want = None
        if want is None:
            return "ort-refused"
        judge = "ran-in-float32"
    try:
        f = dgx.load(case.model)
        got = f(*case.feeds)
    except NotImplementedError as exc:
        msg = str(exc)
        assert case.model.graph.node[-1].op_type in msg, f"{case}: refusal names no op: {msg}"
        return "dragon-refused"
    except (ValueError, TypeError) as exc:
        # A Dragon op refusing the shapes (a pooling window wider than the
        # padded input, where onnxruntime returns an empty tensor): an
        # error, not a wrong value, and it must name the node.
        notes = " ".join(getattr(exc, "__notes__", []))
        assert "ONNX node" in notes, f"{case}: error names no node: {exc}"
        return "dragon-raised"
    got = [g.numpy() for g in got]
    try:
        if judge != "ran":
            low = [g.astype(np.float32) if g.dtype == np.float64 else g for g in got]
            _same_all(case, low, want, "onnxruntime in float32", loose=5.0)
        else:
            _same_all(case, got, want, "onnxruntime")
    except AssertionError as exc:
        # Where onnxruntime departs from the ONNX specification (a known
        # quirk), onnx's reference evaluator decides.
        ref = reference_run(case.model, case.feeds)
        if ref is None:
            raise
        try:
            # the reference computes some coefficients in float32
            _same_all(case, got, ref, "reference", loose=10.0)
        except AssertionError:
            raise exc from None
        return "ort-quirk"
    return judge


def _same_all(case, got, want, who, loose=1.0):
    assert len(got) == len(want), f"{case}: {len(got)} outputs, {who} {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(f"{case}\n output {k} vs {who}", g, np.asarray(w), loose)


def as_float32(model, feeds):
    """``model`` with every float64 input, output, initializer and
    constant made float32, and the feeds likewise."""
    import onnx
    from onnx import TensorProto, numpy_helper
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.type.tensor_type.elem_type == TensorProto.DOUBLE:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT

    def f32(tp):
        if tp.data_type == TensorProto.DOUBLE:
            tp.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tp).astype(np.float32),
                                                tp.name))
    for init in m.graph.initializer:
        f32(init)
    for node in m.graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                f32(a.t)
    return m, [np.asarray(f).astype(np.float32) if np.asarray(f).dtype == np.float64 else f
               for f in feeds]


def reference_run(model, feeds):
    from onnx.reference import ReferenceEvaluator
    try:
        ref = ReferenceEvaluator(model)
        names = [i.name for i in model.graph.input]
        return ref.run(None, dict(zip(names, feeds)))
    except Exception:
        return None


# ------------------------------------------------- random dg.nn models

def _randomize(module, rng):
    """Random parameters and buffers (positive running variances)."""
    state = {}
    for k, v in module.state_dict().items():
        shape = tuple(v.shape)
        if str(v.dtype) != "float32":
            continue
        if k.endswith("running_var"):
            state[k] = rng.uniform(0.5, 2.0, shape).astype(np.float32)
        else:
            state[k] = (rng.standard_normal(shape) * 0.5).astype(np.float32)
    module.load_state_dict(state, strict=False)
    return module


class _Lambda(dg.nn.Module):
    def __init__(self, fn, name):
        super().__init__()
        self.fn, self.name = fn, name

    def forward(self, x):
        return self.fn(x)

    def __repr__(self):
        return self.name


def _conv_block(rng, c, hw):
    """A random image layer for c channels of size hw; returns (module,
    new c, new hw) or None."""
    nn, o = dg.nn, dg.ops
    kind = _pick(rng, ["conv", "conv", "bn", "gn", "act", "maxpool", "avgpool", "convT",
                       "interp", "pad", "adaptive"])
    h, w = hw
    if kind == "conv":
        k = int(rng.integers(1, 4))
        s = int(rng.integers(1, 3))
        d = int(_pick(rng, [1, 1, 2]))
        p = int(rng.integers(0, k))
        g = int(_pick(rng, [1, 1, c])) if c > 1 else 1
        co = g * int(rng.integers(1, 4)) if g > 1 else int(rng.integers(1, 6))
        eff = d * (k - 1) + 1
        if min(h, w) + 2 * p < eff:
            return None
        m = nn.Conv2d(c, co, k, stride=s, padding=p, dilation=d, groups=g,
                      bias=bool(rng.random() < 0.7))
        return m, co, ((h + 2 * p - eff) // s + 1, (w + 2 * p - eff) // s + 1)
    if kind == "convT":
        k = int(rng.integers(1, 4))
        s = int(rng.integers(1, 3))
        p = int(rng.integers(0, k))
        op_ = int(rng.integers(0, s))
        co = int(rng.integers(1, 5))
        oh, ow = (h - 1) * s - 2 * p + k + op_, (w - 1) * s - 2 * p + k + op_
        if min(oh, ow) < 1:
            return None
        return nn.ConvTranspose2d(c, co, k, stride=s, padding=p, output_padding=op_,
                                  bias=bool(rng.random() < 0.7)), co, (oh, ow)
    if kind == "bn":
        return nn.BatchNorm2d(c, eps=float(_pick(rng, [1e-5, 1e-3]))), c, hw
    if kind == "gn":
        g = int(_pick(rng, [d for d in range(1, c + 1) if c % d == 0]))
        return nn.GroupNorm(g, c), c, hw
    if kind == "act":
        return _pick(rng, [nn.ReLU(), nn.GELU(), nn.SiLU(), nn.ELU(), nn.LeakyReLU(0.2),
                           nn.Sigmoid(), nn.Tanh(), nn.Softplus(), nn.ReLU6()]), c, hw
    if kind in ("maxpool", "avgpool"):
        k = int(rng.integers(1, 4))
        s = int(rng.integers(1, 4))
        p = int(rng.integers(0, k // 2 + 1))
        ceil = bool(rng.random() < 0.4)
        d = int(_pick(rng, [1, 1, 2])) if kind == "maxpool" else 1
        eff = d * (k - 1) + 1
        if min(h, w) + 2 * p < eff:
            return None

        def size(n):
            span = n + 2 * p - eff
            o_ = (-(-span // s) if ceil else span // s) + 1
            if ceil and (o_ - 1) * s >= n + p:
                o_ -= 1
            return o_
        if kind == "maxpool":
            m = nn.MaxPool2d(k, stride=s, padding=p, dilation=d, ceil_mode=ceil)
        else:
            m = nn.AvgPool2d(k, stride=s, padding=p, ceil_mode=ceil,
                             count_include_pad=bool(rng.random() < 0.5))
        return m, c, (size(h), size(w))
    if kind == "adaptive":
        out = int(_pick(rng, [1] + [d for d in range(2, min(h, w) + 1)
                                    if h % d == 0 and w % d == 0]))
        return nn.AdaptiveAvgPool2d(out), c, (out, out)
    if kind == "interp":
        mode = _pick(rng, ["nearest", "bilinear", "bilinear", "bicubic", "nearest-exact"])
        align = bool(rng.random() < 0.5) if mode in ("bilinear", "bicubic") else None
        if rng.random() < 0.5:
            sf = float(_pick(rng, [2.0, 0.5, 1.5, 3.0]))
            nh, nw = int(h * sf), int(w * sf)
            if min(nh, nw) < 1:
                return None
            fn = lambda x: o.interpolate(x, scale_factor=sf, mode=mode,  # noqa: E731
                                         align_corners=align)
            return _Lambda(fn, f"interpolate(sf={sf}, {mode}, {align})"), c, (nh, nw)
        nh, nw = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        fn = lambda x: o.interpolate(x, size=[nh, nw], mode=mode,  # noqa: E731
                                     align_corners=align)
        return _Lambda(fn, f"interpolate(size={nh, nw}, {mode}, {align})"), c, (nh, nw)
    pads = [(int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in range(2)]
    mode = _pick(rng, ["constant", "reflect", "edge"])
    if mode == "reflect" and any(max(p) >= d for p, d in zip(pads, hw)):
        mode = "edge"
    fn = lambda x: o.pad(x, ((0, 0), (0, 0)) + tuple(pads), mode=mode, value=0.5)  # noqa: E731
    return _Lambda(fn, f"pad({pads}, {mode})"), c, (h + sum(pads[0]), w + sum(pads[1]))


def random_convnet(seed: int):
    """A random conv net (Sequential of image layers, then a head), an
    example batch, and another batch size for the dynamic batch axis."""
    rng = np.random.default_rng(seed)
    c, hw = int(rng.integers(1, 4)), (int(rng.integers(4, 12)), int(rng.integers(4, 12)))
    c0, hw0 = c, hw
    layers = []
    while len(layers) < int(rng.integers(2, 7)):
        got = _conv_block(rng, c, hw)
        if got is None or min(got[2]) < 1 or got[2][0] * got[2][1] * got[1] > 4096:
            continue
        m, c, hw = got
        layers.append(m)
    head = _pick(rng, ["flatten_linear", "mean", "none", "softmax"])
    if head == "flatten_linear":
        layers += [dg.nn.Flatten(), dg.nn.Linear(c * hw[0] * hw[1], int(rng.integers(1, 6)))]
    elif head == "mean":
        layers.append(_Lambda(lambda x: dg.ops.mean(x, axis=[2, 3], keepdims=bool(seed % 2)),
                              "mean(2,3)"))
    elif head == "softmax":
        layers += [dg.nn.Flatten(), dg.nn.LogSoftmax(-1) if seed % 2 else dg.nn.Softmax(-1)]
    model = _randomize(dg.nn.Sequential(*layers), rng)
    b = int(rng.integers(1, 4))
    x = rng.standard_normal((b, c0) + hw0).astype(np.float32)
    x2 = rng.standard_normal((b + 2, c0) + hw0).astype(np.float32)
    return model, [x], [x2]


class _SeqModel(dg.nn.Module):
    """A random sequence model over [batch, seq, dim] floats and
    [batch, seq] int64 tokens: attention, norms, reductions with keepdims,
    gathers and slices, casts, comparisons, int and bool outputs."""

    def __init__(self, rng, vocab, d, heads, seq):
        super().__init__()
        nn = dg.nn
        self.emb = nn.Embedding(vocab, d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)
        self.ff = nn.Linear(d, 2 * d)
        self.out = nn.Linear(2 * d, d)
        self.heads, self.d, self.seq = heads, d, seq
        self.causal = bool(rng.random() < 0.5)
        self.kv_heads = int(_pick(rng, [h for h in range(1, heads + 1) if heads % h == 0]))
        self.mask_kind = _pick(rng, ["none", "bool", "float"])
        self.steps = [_pick(rng, ["keepdims", "gather", "slice", "cast", "cmp", "argmax",
                                  "topk", "cumsum", "where", "var", "minmax"])
                      for _ in range(int(rng.integers(1, 5)))]
        self.idx = [int(i) for i in rng.integers(-seq, seq, size=int(rng.integers(1, 4)))]
        self.mask = rng.random((seq, seq)) < 0.7
        np.fill_diagonal(self.mask, True)

    def forward(self, tokens, x):
        o = dg.ops
        h = o.add(self.emb(tokens), x)
        b, s, d = h.shape
        hd = d // self.heads

        def heads(t, n):
            return o.transpose(o.reshape(t, [b, s, n, hd]), [0, 2, 1, 3])
        q = heads(self.q(h), self.heads)
        kv = self.kv_heads
        k = heads(o.slice(self.k(h), [0], [kv * hd], None, [2]), kv)
        v = heads(o.slice(self.v(h), [0], [kv * hd], None, [2]), kv)
        mask = None
        if self.mask_kind == "bool":
            mask = dg.tensor(self.mask)
        elif self.mask_kind == "float":
            mask = dg.tensor(np.where(self.mask, 0.0, -1e4).astype(np.float32))
        a = o.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           is_causal=self.causal and mask is None,
                                           enable_gqa=kv != self.heads)
        a = o.reshape(o.transpose(a, [0, 2, 1, 3]), [b, s, d])
        h = self.ln(o.add(h, a))
        h = o.add(h, self.out(o.gelu(self.ff(h))))
        outs = [h]
        for st in self.steps:
            if st == "keepdims":
                outs.append(o.sub(h, o.mean(h, axis=[1], keepdims=True)))
                outs.append(o.sum(h, axis=[0, 2], keepdims=True))
            elif st == "gather":
                outs.append(o.gather(h, dg.tensor(np.array(self.idx, np.int64)), axis=1))
            elif st == "slice":
                outs.append(o.slice(h, [self.seq - 1, 1], [-(2 ** 62), d], [-1, 2], [1, 2]))
            elif st == "cast":
                outs.append(o.cast(o.mul(h, 4.0), "int32"))
            elif st == "cmp":
                outs.append(o.logical_and(o.greater(h, 0.0), o.less(h, 1.0)))
            elif st == "argmax":
                outs.append(o.argmax(h, axis=-1, keepdims=bool(self.seq % 2)))
            elif st == "topk":
                vals, idx = o.topk(h, 2, axis=-1)
                outs += [vals, idx]
            elif st == "cumsum":
                outs.append(o.cumsum(tokens, 1, exclusive=True))
            elif st == "where":
                outs.append(o.where(o.equal(tokens, 0), o.neg(h[..., 0]), h[..., 1]))
            elif st == "var":
                outs.append(o.var(h, axis=[2], keepdims=True))
            else:
                outs.append(o.maximum(o.max(h, axis=[1]), o.min(h, axis=[1])))
        return tuple(outs)


def random_seqmodel(seed: int):
    rng = np.random.default_rng(seed)
    heads = int(_pick(rng, [1, 2, 4]))
    d = heads * int(_pick(rng, [2, 4, 8]))
    seq, vocab = int(rng.integers(1, 7)), int(rng.integers(2, 12))
    model = _randomize(_SeqModel(rng, vocab, d, heads, seq), rng)
    b = int(rng.integers(1, 4))
    toks = rng.integers(0, vocab, size=(b, seq)).astype(np.int64)
    x = rng.standard_normal((b, seq, d)).astype(np.float32)
    return model, [toks, x], None


# ------------------------------------------- integer and bool programs

_INT_BINARY = ["add", "sub", "mul", "floor_divide", "trunc_divide", "mod", "fmod", "maximum",
               "minimum", "bitwise_and", "bitwise_or", "bitwise_xor"]
_INT_UNARY = ["abs", "neg", "sign", "square", "clip", "cumsum", "sum_k", "prod_k", "max_k",
              "argmax", "argmin", "sort", "argsort", "topk", "isfinite", "cast_f", "where",
              "cmp", "one_hot", "pad"]


def int_program(seed: int):
    """A random straight-line program over int8..int64/uint8 tensors with
    negative values (truncating vs flooring division and modulo, bitwise
    ops, sorts with ties, argmax ties, casts), its inputs and an opset."""
    rng = np.random.default_rng(seed)
    dtype = _pick(rng, ["int32", "int64", "int64", "int8", "int16", "uint8"])
    shape = _shape(rng, int(rng.integers(1, 4)), lo=1, hi=6)
    xs = [_f(rng, shape, dtype), _f(rng, _bshape(rng, shape), dtype)]
    xs[1] = np.where(xs[1] == 0, 3, xs[1]).astype(dtype)      # divisors
    steps = [(_pick(rng, _INT_BINARY + _INT_UNARY), int(rng.integers(1 << 30)))
             for _ in range(int(rng.integers(2, 7)))]

    def prog(a, b):
        o = dg.ops
        vals = [a, b]
        for op, s in steps:
            r = np.random.default_rng(s)
            x = vals[-1] if r.random() < 0.6 else vals[0]
            y = b
            if str(x.dtype) != dtype:
                x = o.cast(x, dtype)
            if x.ndim == 0:
                x = o.reshape(x, [1])
            if op in _INT_BINARY:
                z = getattr(o, op)(x, y)
            elif op in ("abs", "neg", "sign", "square"):
                z = getattr(o, op)(x)
            elif op == "clip":
                z = o.clip(x, -3 if dtype != "uint8" else 2, 5)
            elif op == "cumsum":
                z = o.cumsum(x, int(r.integers(x.ndim)), exclusive=bool(r.integers(2)),
                             reverse=bool(r.integers(2)))
            elif op in ("sum_k", "prod_k", "max_k"):
                fn = {"sum_k": o.sum, "prod_k": o.prod, "max_k": o.max}[op]
                z = fn(x, axis=[int(r.integers(x.ndim))], keepdims=bool(r.integers(2)))
            elif op in ("argmax", "argmin"):
                z = getattr(o, op)(x, axis=int(r.integers(x.ndim)), keepdims=bool(r.integers(2)))
            elif op == "sort":
                z = o.sort(x, axis=-1, descending=bool(r.integers(2)))[0]
            elif op == "argsort":
                z = o.argsort(x, axis=-1, descending=bool(r.integers(2)))
            elif op == "topk":
                z = o.topk(x, int(r.integers(1, x.shape[-1] + 1)), axis=-1,
                           largest=bool(r.integers(2)))[1]
            elif op == "isfinite":
                z = o.isfinite(x)
            elif op == "cast_f":
                z = o.cast(o.div(o.cast(x, "float32"), 2.0), dtype)
            elif op == "where":
                z = o.where(o.greater(x, y), x, y)
            elif op == "cmp":
                z = o.logical_xor(o.less_equal(x, y), o.equal(x, 0)) \
                    if hasattr(o, "logical_xor") else o.less_equal(x, y)
            elif op == "one_hot":
                z = o.one_hot(o.clip(o.abs(x), 0, 3), 4, dtype=dtype)
            else:
                z = o.pad(x, [(int(r.integers(0, 2)), int(r.integers(0, 2)))] * x.ndim,
                          value=7)
            vals.append(z)
        return tuple(vals[2:])
    prog.__name__ = f"int_program_{seed}"
    return prog, xs, int(rng.choice(OPSETS)), steps


def gen_legacy(rng):
    """Opsets 7-10: attributes that later became inputs (Slice, Split,
    Squeeze, Upsample/Resize scales, Clip min/max, Reduce axes, Pad)."""
    op = _pick(rng, ["Slice", "Split", "Squeeze", "Unsqueeze", "Upsample", "Resize", "Clip",
                     "ReduceMean", "ReduceMax", "Pad", "Softmax", "TopK", "MaxPool",
                     "AveragePool", "Flatten", "Gemm", "ArgMax"])
    opset = int(_pick(rng, [7, 8, 9, 10]))
    s = _shape(rng, int(rng.integers(2, 5)), lo=1, hi=6)
    r = len(s)
    x = _f(rng, s, "float32", "ties")
    if op == "Slice":
        k = int(rng.integers(1, r + 1))
        axes = [int(a) for a in rng.permutation(r)[:k]]
        st = [int(rng.integers(-s[a] - 2, s[a] + 2)) for a in axes]
        en = [int(_pick(rng, [int(rng.integers(-s[a] - 2, s[a] + 2)), 2 ** 31 - 1])) for a in axes]
        if opset >= 10:
            return make_case(op, [(x, "in"), (_i64(st), "init"), (_i64(en), "init"),
                                  (_i64(axes), "init")], {}, 1, opset)
        return make_case(op, [(x, "in")], {"starts": st, "ends": en, "axes": axes}, 1, opset)
    if op == "Split":
        ax = int(rng.integers(0, r))
        cuts = sorted(int(c) for c in rng.integers(0, s[ax] + 1, size=int(rng.integers(0, 3))))
        sizes = np.diff([0] + cuts + [s[ax]]).tolist()
        return make_case(op, [(x, "in")], {"axis": ax, "split": sizes}, len(sizes), opset)
    if op == "Squeeze":
        x = _f(rng, [1] + s, "float32")
        return make_case(op, [(x, "in")], {"axes": [0]}, 1, opset)
    if op == "Unsqueeze":
        return make_case(op, [(x, "in")], {"axes": sorted({0, int(rng.integers(0, r + 2))})},
                         1, opset)
    if op in ("Upsample", "Resize"):
        x = _f(rng, [1, 2, int(rng.integers(1, 5)), int(rng.integers(1, 5))], "float32")
        scales = np.array([1, 1, float(_pick(rng, [1, 2, 3])), float(_pick(rng, [1, 2, 2.5]))],
                          np.float32)
        mode = _pick(rng, ["nearest", "linear"])
        if op == "Upsample" and opset < 9:
            return make_case(op, [(x, "in")], {"mode": mode, "scales": scales.tolist()}, 1,
                             opset)
        if op == "Resize" and opset < 10:
            return None
        if op == "Upsample" and opset == 10:
            return None
        return make_case(op, [(x, "in"), (scales, "init")], {"mode": mode}, 1, opset)
    if op == "Clip":
        attrs = {}
        if rng.random() < 0.7:
            attrs["min"] = float(_pick(rng, [-1.0, 0.0, 0.5]))
        if rng.random() < 0.7:
            attrs["max"] = float(_pick(rng, [1.0, 0.25, -2.0]))
        return make_case(op, [(x, "in")], attrs, 1, opset)
    if op in ("ReduceMean", "ReduceMax"):
        attrs = {"keepdims": int(rng.integers(2))}
        if rng.random() < 0.7:
            attrs["axes"] = sorted({int(a) - (r if rng.random() < 0.5 else 0)
                                    for a in rng.integers(0, r, size=2)})
        return make_case(op, [(x, "in")], attrs, 1, opset)
    if op == "Pad":
        pads = [int(v) for v in rng.integers(0, 3, size=2 * r)]
        mode = _pick(rng, ["constant", "edge", "reflect"])
        if mode == "reflect":
            pads = [min(p, s[i % r] - 1) for i, p in enumerate(pads)]
        return make_case(op, [(x, "in")], {"pads": pads, "mode": mode, "value": 1.5}, 1, opset)
    if op == "Softmax":
        return make_case(op, [(x, "in")], {"axis": int(rng.integers(0, r))}, 1, opset)
    if op == "TopK":
        ax = int(rng.integers(-r, r))
        k = int(rng.integers(1, s[ax] + 1))
        if opset >= 10:
            return make_case(op, [(x, "in"), (_i64([k]), "init")], {"axis": ax}, 2, opset)
        return make_case(op, [(x, "in")], {"axis": ax, "k": k}, 2, opset)
    if op in ("MaxPool", "AveragePool"):
        x = _f(rng, [1, 2, int(rng.integers(3, 8)), int(rng.integers(3, 8))], "float32", "ties")
        k = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
        attrs = {"kernel_shape": k, "strides": [int(v) for v in rng.integers(1, 3, size=2)],
                 "pads": [int(rng.integers(0, kk // 2 + 1)) for kk in k + k]}
        if opset >= 10 and rng.random() < 0.5:
            attrs["ceil_mode"] = 1
        if op == "AveragePool" and rng.random() < 0.5:
            attrs["count_include_pad"] = 1
        return make_case(op, [(x, "in")], attrs, 1, opset)
    if op == "Flatten":
        return make_case(op, [(x, "in")], {"axis": int(rng.integers(0, r + 1))}, 1, opset)
    if op == "ArgMax":
        return make_case(op, [(x, "in")], {"axis": int(rng.integers(0, r)),
                                           "keepdims": int(rng.integers(2))}, 1, opset)
    m, k, n = (int(v) for v in rng.integers(1, 5, size=3))
    return make_case("Gemm", [(_f(rng, [m, k], "float32"), "in"),
                              (_f(rng, [n, k], "float32"), "init"),
                              (_f(rng, [n], "float32"), "init")],
                     {"transB": 1, "alpha": 0.5, "beta": 2.0}, 1, opset)


IMPORT_GENERATORS["legacy"] = (gen_legacy, 60)


# ------------------------------------------------ random vm.torch models

def random_torchnet(seed: int):
    """A random ``dragon_core.vm.torch`` model (torch's names and
    signatures): conv layers, norms, pooling with ceil_mode and
    count_include_pad, activations, then a head (flatten + linear,
    attention over the flattened positions, or a softmax); an example
    batch and another batch size for the dynamic batch axis."""
    from dragon_core.vm import torch as vt
    nn = vt.nn
    rng = np.random.default_rng(seed)
    c, h, w = int(rng.integers(1, 4)), int(rng.integers(4, 10)), int(rng.integers(4, 10))
    c0, h0, w0 = c, h, w
    layers = []
    while len(layers) < int(rng.integers(2, 6)):
        kind = _pick(rng, ["conv", "bn", "gn", "act", "maxpool", "avgpool", "convT"])
        if kind == "conv":
            k, s, p = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(0, 2))
            d = int(_pick(rng, [1, 1, 2]))
            eff = d * (k - 1) + 1
            if min(h, w) + 2 * p < eff:
                continue
            co = int(rng.integers(1, 6))
            layers.append(nn.Conv2d(c, co, k, stride=s, padding=p, dilation=d))
            c, h, w = co, (h + 2 * p - eff) // s + 1, (w + 2 * p - eff) // s + 1
        elif kind == "convT":
            k, s = int(rng.integers(1, 4)), int(rng.integers(1, 3))
            co = int(rng.integers(1, 5))
            layers.append(nn.ConvTranspose2d(c, co, k, stride=s))
            c, h, w = co, (h - 1) * s + k, (w - 1) * s + k
        elif kind == "bn":
            layers.append(nn.BatchNorm2d(c))
        elif kind == "gn":
            layers.append(nn.GroupNorm(1, c))
        elif kind == "act":
            layers.append(_pick(rng, [nn.ReLU(), nn.GELU(), nn.SiLU(), nn.Hardswish(),
                                      nn.Hardsigmoid(), nn.Mish(), nn.ELU(0.5),
                                      nn.LeakyReLU(0.1), nn.ReLU6(), nn.PReLU()]))
        else:
            k, s = int(rng.integers(1, 4)), int(rng.integers(1, 4))
            p = int(rng.integers(0, k // 2 + 1))
            ceil = bool(rng.random() < 0.5)
            if min(h, w) + 2 * p < k:
                continue

            def size(n):
                span = n + 2 * p - k
                o_ = (-(-span // s) if ceil else span // s) + 1
                return o_ - 1 if ceil and (o_ - 1) * s >= n + p else o_
            if kind == "maxpool":
                layers.append(nn.MaxPool2d(k, s, p, ceil_mode=ceil))
            else:
                layers.append(nn.AvgPool2d(k, s, p, ceil_mode=ceil,
                                           count_include_pad=bool(rng.random() < 0.5)))
            h, w = size(h), size(w)
        if h * w * c > 2048 or min(h, w) < 1:
            return None
    layers += [nn.Flatten(), nn.Linear(c * h * w, int(rng.integers(1, 6)))]
    if rng.random() < 0.5:
        layers.append(_pick(rng, [nn.Softmax(-1), nn.LogSoftmax(-1), nn.Tanh()]))
    model = nn.Sequential(*layers)
    state = {}
    for k_, v in model.state_dict().items():
        shape = tuple(v.shape)
        if "float" not in str(v.dtype):
            continue
        state[k_] = vt.from_numpy(np.asarray(
            rng.uniform(0.5, 2.0, shape) if k_.endswith("running_var")
            else rng.standard_normal(shape) * 0.5, np.float32))
    model.load_state_dict(state, strict=False)
    b = int(rng.integers(1, 4))
    x = rng.standard_normal((b, c0, h0, w0)).astype(np.float32)
    x2 = rng.standard_normal((b + 1, c0, h0, w0)).astype(np.float32)
    return model, [x], [x2]


def gen_attention(rng):
    """Attention-23/24: 3-D or 4-D inputs, grouped-query heads, a past
    key/value cache, boolean or additive masks shorter than the keys,
    causal, scale, softcap, every qk_matmul_output_mode."""
    b, hk = int(rng.integers(1, 3)), int(_pick(rng, [1, 2]))
    hq = hk * int(_pick(rng, [1, 2]))
    d, dv = int(_pick(rng, [2, 4])), int(_pick(rng, [2, 3]))
    L, S = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    past = int(rng.integers(0, 3)) if rng.random() < 0.4 else 0
    dtype = _pick(rng, ["float32", "float32", "float64"])
    three = rng.random() < 0.4
    if three:
        q = _f(rng, [b, L, hq * d], dtype)
        k = _f(rng, [b, S, hk * d], dtype)
        v = _f(rng, [b, S, hk * dv], dtype)
    else:
        q, k, v = (_f(rng, [b, hq, L, d], dtype), _f(rng, [b, hk, S, d], dtype),
                   _f(rng, [b, hk, S, dv], dtype))
    ins = [(q, "in"), (k, "in"), (v, "in")]
    total = S + past
    r = rng.random()
    if r < 0.3:
        m = rng.random([L, int(rng.integers(1, total + 1))]) < 0.7
        ins.append((m, _how(rng, 0.5)))
    elif r < 0.5:
        m = np.where(rng.random([1, hq, L, total]) < 0.7, 0.0, -1e4).astype(dtype)
        ins.append((m, _how(rng, 0.5)))
    elif past:
        ins.append((None, "omit"))
    if past:
        ins += [(_f(rng, [b, hk, past, d], dtype), "in"), (_f(rng, [b, hk, past, dv], dtype), "in")]
    attrs = {}
    if three:
        attrs.update(q_num_heads=hq, kv_num_heads=hk)
    if rng.random() < 0.4:
        attrs["is_causal"] = 1
    if rng.random() < 0.3:
        attrs["scale"] = float(_pick(rng, [0.1, 1.0, 2.0]))
    if rng.random() < 0.3:
        attrs["softcap"] = float(_pick(rng, [1.0, 5.0]))
    n_out = 1
    if rng.random() < 0.4:
        attrs["qk_matmul_output_mode"] = int(rng.integers(0, 4))
        n_out = 4
    elif past:
        n_out = 3
    return make_case("Attention", ins, attrs, n_out, int(_pick(rng, [23, 24])))


def gen_new_ops(rng):
    """RMSNormalization, RotaryEmbedding (23), Swish (24), TopK with
    ties, GridSample."""
    op = _pick(rng, ["RMSNormalization", "RotaryEmbedding", "GridSample", "LayerNormStash"])
    dtype = _pick(rng, FLOATS)
    if op == "RMSNormalization":
        s = _shape(rng, int(rng.integers(2, 4)))
        r = len(s)
        ax = int(rng.integers(-r, r))
        x = _f(rng, s, dtype)
        tail = s[ax % r:]
        attrs = {"axis": ax} if rng.random() < 0.7 else {}
        if rng.random() < 0.4:
            attrs["epsilon"] = 0.1
        return make_case(op, [(x, "in"), (_f(rng, tail, dtype), "init")], attrs, 1, 23)
    if op == "RotaryEmbedding":
        b, S, H, D = 1, int(rng.integers(1, 4)), int(_pick(rng, [1, 2])), int(_pick(rng, [4, 8]))
        rot = int(_pick(rng, [0, D // 2])) if rng.random() < 0.5 else 0
        half = (rot or D) // 2
        pos_n = 6
        cos = _f(rng, [pos_n, half], dtype)
        sin = _f(rng, [pos_n, half], dtype)
        x = _f(rng, [b, H, S, D], dtype)
        pos = rng.integers(0, pos_n, size=[b, S]).astype(np.int64)
        attrs = {}
        if rng.random() < 0.5:
            attrs["interleaved"] = 1
        if rot:
            attrs["rotary_embedding_dim"] = rot
        return make_case(op, [(x, "in"), (cos, "init"), (sin, "init"), (pos, "in")], attrs, 1,
                         23)
    if op == "GridSample":
        x = _f(rng, [1, 2, int(rng.integers(2, 6)), int(rng.integers(2, 6))], "float32")
        grid = rng.uniform(-1.3, 1.3, [1, 3, 4, 2]).astype(np.float32)
        opset = int(_pick(rng, [16, 20, 22]))
        mode = _pick(rng, ["bilinear", "nearest", "bicubic"] if opset < 20 else
                     ["linear", "nearest", "cubic"])
        attrs = {"mode": mode, "padding_mode": _pick(rng, ["zeros", "border", "reflection"]),
                 "align_corners": int(rng.integers(2))}
        if mode == "bicubic" and attrs["padding_mode"] == "border":
            # onnxruntime departs from the specification there; onnx's
            # reference (which judges) has no GridSample-16
            opset, attrs["mode"] = 20, "cubic"
        return make_case(op, [(x, "in"), (grid, "in")], attrs, 1, opset)
    s = _shape(rng, int(rng.integers(2, 4)))
    r = len(s)
    ax = int(rng.integers(-r, r))
    x = _f(rng, s, "float32")
    return make_case("LayerNormalization", [(x, "in"), (_f(rng, s[ax % r:], "float32"), "init"),
                                            (_f(rng, s[ax % r:], "float32"), "init")],
                     {"axis": ax}, 3, 17)


IMPORT_GENERATORS["attention"] = (gen_attention, 40)
IMPORT_GENERATORS["newops"] = (gen_new_ops, 40)


# -------------------------------------- random torch models, torch.onnx

def random_torch_model(seed: int):
    """A random real-torch model (conv, norms, pooling with ceil_mode and
    count_include_pad, interpolate, attention, reductions, slicing,
    indexing, flatten) with its example input and another batch; the
    TorchScript exporter writes the Shape/Gather/Concat chains of real
    exported models."""
    import torch
    nn = torch.nn
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    c, h, w = int(rng.integers(1, 4)), int(rng.integers(5, 10)), int(rng.integers(5, 10))
    kinds = [_pick(rng, ["conv", "bn", "act", "maxpool", "avgpool", "interp", "gn", "convT",
                         "slice", "pad"]) for _ in range(int(rng.integers(1, 5)))]
    head = _pick(rng, ["linear", "attn", "reduce", "gather", "softmax"])
    ceil = [bool(rng.random() < 0.5) for _ in kinds]
    cip = [bool(rng.random() < 0.5) for _ in kinds]
    sizes = [(int(rng.integers(1, 8)), int(rng.integers(1, 8))) for _ in kinds]
    modes = [_pick(rng, ["nearest", "bilinear", "bicubic"]) for _ in kinds]
    aligns = [bool(rng.random() < 0.5) for _ in kinds]

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            layers, cc = [], c
            for k in kinds:
                if k == "conv":
                    layers.append(nn.Conv2d(cc, 4, 3, padding=1, stride=1))
                    cc = 4
                elif k == "convT":
                    layers.append(nn.ConvTranspose2d(cc, 3, 2, stride=2))
                    cc = 3
                elif k == "bn":
                    layers.append(nn.BatchNorm2d(cc))
                elif k == "gn":
                    layers.append(nn.GroupNorm(1, cc))
                else:
                    layers.append(nn.Identity())
            self.layers = nn.ModuleList(layers)
            self.cc = cc
            self.lin = nn.LazyLinear(5) if False else None
            self.attn = nn.MultiheadAttention(cc, 1, batch_first=True)

        def forward(self, x):
            for k, layer, cm, ci, sz, md, al in zip(kinds, self.layers, ceil, cip, sizes, modes,
                                                    aligns):
                if k in ("conv", "convT", "bn", "gn"):
                    x = layer(x)
                elif k == "act":
                    x = torch.nn.functional.gelu(x) if cm else torch.relu(x)
                elif k == "maxpool" and min(x.shape[2:]) >= 2:
                    x = torch.nn.functional.max_pool2d(x, 2, 2, 1 if ci else 0, ceil_mode=cm)
                elif k == "avgpool" and min(x.shape[2:]) >= 3:
                    x = torch.nn.functional.avg_pool2d(x, 3, 2, 1, ceil_mode=cm,
                                                       count_include_pad=ci)
                elif k == "interp":
                    x = torch.nn.functional.interpolate(
                        x, size=sz, mode=md, align_corners=al if md != "nearest" else None)
                elif k == "slice":
                    x = x[:, :, 1:, ::2] if x.shape[2] > 1 else x
                elif k == "pad":
                    x = torch.nn.functional.pad(x, (1, 0, 0, 2), mode="reflect"
                                                if min(x.shape[2:]) > 2 else "constant")
            if head == "linear":
                return x.flatten(1).sum(-1, keepdim=True) * 0.5
            if head == "attn":
                s = x.flatten(2).transpose(1, 2)
                return self.attn(s, s, s, need_weights=False)[0]
            if head == "reduce":
                return x.mean(dim=(2, 3), keepdim=True), x.amax(dim=1)
            if head == "gather":
                return x[:, -1], x[..., 0].argmax(-1)
            return torch.softmax(x.flatten(2), -1)

    m = M().eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            p.copy_(torch.from_numpy((rng.standard_normal(tuple(p.shape)) * 0.5)
                                     .astype(np.float32)))
        for name, b in m.named_buffers():
            if name.endswith("running_var"):
                b.copy_(torch.from_numpy(rng.uniform(0.5, 2.0, tuple(b.shape)).astype(np.float32)))
            elif name.endswith("running_mean"):
                b.copy_(torch.from_numpy(rng.standard_normal(tuple(b.shape)).astype(np.float32)))
    b = int(rng.integers(1, 3))
    x = rng.standard_normal((b, c, h, w)).astype(np.float32)
    x2 = rng.standard_normal((b + 2, c, h, w)).astype(np.float32)
    return m, x, x2, (kinds, head)


def check_torch_import(seed: int, opset: int) -> bool:
    """torch.onnx.export (TorchScript) of ``random_torch_model(seed)`` with a
    dynamic batch axis, loaded by Dragon and compared with torch at two
    batch sizes."""
    import io
    import torch
    import dragon_core.onnx as dgx
    m, x, x2, desc = random_torch_model(seed)
    with torch.no_grad():
        outs = m(torch.from_numpy(x))
    n_out = len(outs) if isinstance(outs, tuple) else 1
    buf = io.BytesIO()
    names = [f"y{k}" for k in range(n_out)]
    try:
        torch.onnx.export(m, (torch.from_numpy(x),), buf, dynamo=False, opset_version=opset,
                          input_names=["x"], output_names=names,
                          dynamic_axes={"x": {0: "b"}, **{nm: {0: "b"} for nm in names}})
    except Exception:
        return False
    f = dgx.load(buf.getvalue())
    for inp in (x, x2):
        with torch.no_grad():
            want = m(torch.from_numpy(inp))
        want = list(want) if isinstance(want, tuple) else [want]
        got = f(inp)
        for k, (g, w) in enumerate(zip(got, want)):
            w = w.numpy()
            g = g.numpy()
            if g.dtype != w.dtype and g.dtype.kind == w.dtype.kind == "i":
                g = g.astype(w.dtype)
            assert_same(f"torch model seed {seed} {desc} opset {opset} batch {inp.shape[0]} "
                        f"output {k}", g, w, loose=5.0)
    return True
