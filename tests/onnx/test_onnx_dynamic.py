"""ONNX models with data-dependent output shapes (NonZero, Unique,
NonMaxSuppression, Compress): compiled segments around eager nodes in
``dragon_core.onnx.load``, and the padded NonZero / Unique / Nms ops exported
to the standard ONNX ops and checked in onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg

onnx = pytest.importorskip("onnx")
dgx = pytest.importorskip("dragon_core.onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from dragon_core.onnx import _segments  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=(), opset=21, name="m"):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _vi(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _reference(model, *xs):
    """onnx's own reference evaluator (NumPy)."""
    ref = ReferenceEvaluator(model)
    return ref.run(None, {i.name: x for i, x in zip(model.graph.input, xs)})


def _nonzero_model():
    """Relu -> NonZero -> Transpose -> Cast -> (y, ReduceSum, Gather of x)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("NonZero", ["r"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["t"], perm=[1, 0]),
             helper.make_node("Cast", ["t"], ["y"], to=F),
             helper.make_node("ReduceSum", ["y"], ["s"], keepdims=0),
             helper.make_node("Mul", ["s", "two"], ["s2"]),
             helper.make_node("GatherND", ["x", "t"], ["vals"])]
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    return _model(nodes, [_vi("x", shape=[3, 5])], [_vi("y"), _vi("s2"), _vi("vals")], [two])


def test_nonzero_model_runs_as_two_compiled_segments():
    m = _nonzero_model()
    f = dgx.load(m.SerializeToString())
    assert f.num_graphs == 2
    rng = np.random.default_rng(0)
    for _ in range(4):
        x = rng.standard_normal((3, 5)).astype(np.float32)
        got = [t.numpy() for t in f(x)]
        want = _reference(m, x)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-6)
        coords = np.argwhere(x > 0)
        np.testing.assert_array_equal(got[0], coords.astype(np.float32))
        np.testing.assert_array_equal(got[2], x[x > 0])
    graphs = f.get_graphs(x)
    assert len(graphs) == 2
    assert [op.type for op in graphs[0].op] == ["Relu"]
    assert "NonZero" not in {op.type for g in graphs for op in g.op}
    with pytest.raises(ValueError, match="get_graphs"):
        f.get_graph(x)


@pytest.mark.parametrize("opt_level", [0, 1, 3])
def test_segments_with_freeze_and_every_opt_level(opt_level):
    m = _nonzero_model()
    f = dgx.load(m, freeze=True, opt_level=opt_level)
    x = np.random.default_rng(10).standard_normal((3, 5)).astype(np.float32)
    for g, w in zip(f(x), _reference(m, x)):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-6)
    assert all(g.metadata["opt_level"] == str(opt_level) for g in f.get_graphs(x))


def test_segment_traces_are_reused_per_count():
    f = dgx.load(_nonzero_model())
    x = np.array([[1, -1, 2, 0, 3]] * 3, np.float32)       # 9 non-zeros
    f(x)
    seg = [s for s in f._segments.steps if isinstance(s, _segments._Static)]
    counts = [s.fn.trace_count for s in seg]
    f(x * 2.0)                                               # same count: no trace
    f(x[::-1].copy())
    assert [s.fn.trace_count for s in seg] == counts


def test_static_models_are_not_split():
    """No data-dependent node (or a Compress on a constant): one graph."""
    cond = numpy_helper.from_array(np.array([True, False, True]), "c")
    m = _model([helper.make_node("Relu", ["x"], ["r"]),
                helper.make_node("Compress", ["r", "c"], ["y"], axis=1)],
               [_vi("x", shape=[2, 3])], [_vi("y")], [cond])
    f = dgx.load(m)
    assert f.num_graphs == 1 and f._segments is None
    x = np.array([[1, -2, 3], [-4, 5, 6]], np.float32)
    np.testing.assert_array_equal(f(x)[0].numpy(), np.maximum(x, 0)[:, [0, 2]])
    assert len(f.get_graphs(x)) == 1


def test_compress_with_a_computed_condition_runs_eagerly():
    """The condition x > 0 is computed from the data: Compress runs between
    two compiled segments, and new inputs need no new trace of the first."""
    m = _model([helper.make_node("Greater", ["x", "zero"], ["c"]),
                helper.make_node("Compress", ["x", "c"], ["k"]),
                helper.make_node("Mul", ["k", "k"], ["y"])],
               [_vi("x", shape=[6])], [_vi("y")],
               [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    f = dgx.load(m)
    assert f.num_graphs == 2
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = rng.standard_normal(6).astype(np.float32)
        np.testing.assert_allclose(f(x)[0].numpy(), x[x > 0] ** 2, rtol=1e-6)
    assert f._segments.steps[0].fn.trace_count == 1


def test_too_many_counts_switch_the_segment_to_eager():
    f = dgx.load(_nonzero_model())
    m = _nonzero_model()
    rng = np.random.default_rng(2)
    for k in list(range(16)) * 2:                       # 16 different counts, twice
        x = -np.abs(rng.standard_normal(15)).astype(np.float32)
        x[rng.permutation(15)[:k]] *= -1.0
        x = x.reshape(3, 5)
        for g, w in zip(f(x), _reference(m, x)):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-6)
    after = f._segments.steps[-1]
    assert after.eager and after.fn.trace_count == _segments.MAX_SEGMENT_TRACES
    assert f._segments.steps[0].fn.trace_count == 1


def test_value_of_an_eager_output_needed_at_trace_time():
    """A Reshape target computed by Unique: the next segment keys its traces
    on that value (it is an input of the segment), never a stale one."""
    m = _model([helper.make_node("Unique", ["s"], ["shape"], sorted=0),
                helper.make_node("Reshape", ["z", "shape"], ["y"])],
               [_vi("s", I64, [4]), _vi("z", shape=[6])], [_vi("y")])
    f = dgx.load(m)
    z = np.arange(6, dtype=np.float32)
    assert f(np.array([2, 3, 2, 3]), z)[0].shape == (2, 3)
    assert f(np.array([3, 3, 2, 2]), z)[0].shape == (3, 2)
    assert f(np.array([6, 6, 6, 6]), z)[0].shape == (6,)


def test_segmented_model_from_several_threads():
    import threading
    m = _model([helper.make_node("Unique", ["s"], ["shape"], sorted=0),
                helper.make_node("Reshape", ["z", "shape"], ["y"])],
               [_vi("s", I64, [4]), _vi("z", shape=[6])], [_vi("y")])
    f = dgx.load(m)
    z = np.arange(6, dtype=np.float32)
    cases = [([2, 3, 2, 3], (2, 3)), ([3, 3, 2, 2], (3, 2)), ([6, 6, 6, 6], (6,)),
             ([1, 6, 1, 6], (1, 6))]
    errors = []

    def work(k):
        try:
            for i in range(20):
                s, want = cases[(k + i) % len(cases)]
                y = f(np.array(s), z)[0]
                assert y.shape == want
                np.testing.assert_array_equal(y.numpy().reshape(-1), z)
        except Exception as exc:          # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_nonzero_inside_an_if_branch_runs_the_if_eagerly():
    then = helper.make_graph([helper.make_node("NonZero", ["x"], ["a"])], "then", [],
                             [_vi("a", I64)])
    other = helper.make_graph([helper.make_node("Shape", ["x"], ["b0"]),
                               helper.make_node("Unsqueeze", ["b0", "ax"], ["b"])], "else", [],
                              [_vi("b", I64)])
    m = _model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                helper.make_node("Greater", ["s", "zero"], ["c"]),
                helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
               [_vi("x", shape=[2, 3])], [_vi("y", I64)],
               [numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
                numpy_helper.from_array(np.array([0], np.int64), "ax")])
    f = dgx.load(m)
    x = np.array([[1, 0, 2], [0, 0, 3]], np.float32)
    np.testing.assert_array_equal(f(x)[0].numpy(), np.array(np.nonzero(x)))
    np.testing.assert_array_equal(f(-x)[0].numpy(), [[2, 3]])


def test_data_dependent_model_inside_a_traced_function_is_refused():
    f = dgx.load(_nonzero_model())

    @dg.function
    def g(x):
        return f(x)[0]

    with pytest.raises(Exception, match="depend on the input values|cannot depend"):
        g(dg.tensor(np.ones((3, 5), np.float32)))


# ------------------------------------------------------------------ Unique

@pytest.mark.parametrize("dtype, elem", [("float32", F), ("float64", TensorProto.DOUBLE),
                                         ("int64", I64), ("int32", TensorProto.INT32),
                                         ("uint8", TensorProto.UINT8),
                                         ("int8", TensorProto.INT8),
                                         ("float16", TensorProto.FLOAT16)])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("sorted_", [1, 0])
def test_unique_matches_the_reference(dtype, elem, axis, sorted_):
    attrs = {"sorted": sorted_}
    if axis is not None:
        attrs["axis"] = axis
    m = _model([helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], **attrs)],
               [_vi("x", elem, [6, 3])], [_vi("y", elem), _vi("i", I64), _vi("inv", I64),
                                          _vi("c", I64)])
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2, (6, 3)).astype(dtype)
    x[4] = x[1]                     # a repeated row and column at least
    x[:, 2] = x[:, 0]
    got = [t.numpy() for t in dgx.load(m)(x)]
    # numpy.unique on the float64 / int64 values; sorted=0 reorders it by
    # first occurrence (onnx's reference evaluator takes the wrong axis there).
    wide = x.astype(np.float64 if x.dtype.kind == "f" else np.int64)
    vals, first, inv, counts = np.unique(wide, return_index=True, return_inverse=True,
                                         return_counts=True, axis=axis)
    inv = inv.reshape(-1)
    if not sorted_:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        vals = np.take(vals, order, axis=0 if axis is None else axis)
        first, counts, inv = first[order], counts[order], rank[inv]
    assert got[0].dtype == x.dtype
    for g, w in zip(got, [vals, first, inv, counts]):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g.astype(w.dtype), w)
    if sorted_:
        for g, w in zip(got, _reference(m, x)):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)


# ------------------------------------------------------- NonMaxSuppression

def _nms_model(center=0, with_score=True, max_out=3):
    ins = ["boxes", "scores", "max_out", "iou"] + (["score_thr"] if with_score else [])
    inits = [numpy_helper.from_array(np.array([max_out], np.int64), "max_out"),
             numpy_helper.from_array(np.array([0.45], np.float32), "iou")]
    if with_score:
        inits.append(numpy_helper.from_array(np.array([0.3], np.float32), "score_thr"))
    node = helper.make_node("NonMaxSuppression", ins, ["sel"], center_point_box=center)
    return _model([node], [_vi("boxes", shape=[2, 40, 4]), _vi("scores", shape=[2, 3, 40])],
                  [_vi("sel", I64)], inits)


def _boxes(rng, center):
    lo = rng.uniform(0, 30, (2, 40, 2)).astype(np.float32)
    size = rng.uniform(2, 12, (2, 40, 2)).astype(np.float32)
    if center:
        return np.concatenate([lo + size / 2, size], 2)
    hi = lo + size
    flip = rng.random((2, 40, 1)) < 0.3                  # some diagonals reversed
    return np.where(flip, np.concatenate([hi, lo], 2), np.concatenate([lo, hi], 2))


@pytest.mark.skipif(not hasattr(dg.ops, "nms_padded"), reason="dragon-vision-ops is not installed")
@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("with_score", [True, False])
@pytest.mark.parametrize("max_out", [0, 3, 100])
def test_non_max_suppression_matches_the_reference(center, with_score, max_out):
    m = _nms_model(center, with_score, max_out)
    f = dgx.load(m)
    rng = np.random.default_rng(4)
    for _ in range(2):
        boxes = _boxes(rng, center)
        scores = rng.random((2, 3, 40)).astype(np.float32)
        scores[0, 1, :5] = scores[0, 1, 5]               # ties: lower index first
        (got,) = f(boxes, scores)
        (want,) = _reference(m, boxes, scores)
        assert got.dtype == dg.int64
        np.testing.assert_array_equal(got.numpy(), want.reshape(-1, 3))
    assert max_out == 0 or got.shape[0] > 0


@pytest.mark.skipif(not hasattr(dg.ops, "nms_padded"), reason="dragon-vision-ops is not installed")
@pytest.mark.parametrize("max_out", [1, 25, 60, 1000])
def test_non_max_suppression_prefix_growth_is_exact(monkeypatch, max_out):
    """Crowded boxes (most suppressed): Nms runs on a growing prefix of the
    score order until it keeps max_out boxes; the result is the reference's."""
    calls = []
    real = dg.ops.nms_padded
    monkeypatch.setattr(dg.ops, "nms_padded", lambda b, *a, **k: calls.append(b.shape[0])
                        or real(b, *a, **k))
    rng = np.random.default_rng(9)
    n = 600
    lo = rng.uniform(0, 30, (1, n, 2)).astype(np.float32)
    boxes = np.concatenate([lo, lo + rng.uniform(10, 20, (1, n, 2)).astype(np.float32)], 2)
    scores = rng.integers(0, 50, (1, 1, n)).astype(np.float32) / 50.0     # ties
    scores[0, 0, ::37] = np.nan                                            # never kept
    m = _model([helper.make_node("NonMaxSuppression", ["boxes", "scores", "mo", "iou"],
                                 ["sel"])],
               [_vi("boxes", shape=[1, n, 4]), _vi("scores", shape=[1, 1, n])], [_vi("sel", I64)],
               [numpy_helper.from_array(np.array([max_out], np.int64), "mo"),
                numpy_helper.from_array(np.array([0.3], np.float32), "iou")])
    (got,) = dgx.load(m)(boxes, scores)
    want = _reference(m, boxes, np.nan_to_num(scores, nan=-np.inf))[0]
    want = want[np.isfinite(scores[0, 0, want[:, 2]])]
    np.testing.assert_array_equal(got.numpy(), want[:max_out])
    assert calls[0] == min(max(4 * max_out, 64), n - len(range(0, n, 37)))
    if max_out in (25, 60):
        assert len(calls) > 1           # the prefix grew


@pytest.mark.skipif(not hasattr(dg.ops, "nms_padded"), reason="dragon-vision-ops is not installed")
def test_non_max_suppression_feeds_a_compiled_gather():
    """Detection post-processing: NMS selects rows, a compiled segment
    gathers the kept boxes."""
    nms = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou"], ["sel"])
    nodes = [nms,
             helper.make_node("Gather", ["sel", "two"], ["idx"], axis=1),
             helper.make_node("Squeeze", ["boxes", "zero"], ["b2"]),
             helper.make_node("Gather", ["b2", "idx"], ["kept"], axis=0)]
    inits = [numpy_helper.from_array(np.array([10], np.int64), "max_out"),
             numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
             numpy_helper.from_array(np.array(2, np.int64), "two"),
             numpy_helper.from_array(np.array([0], np.int64), "zero")]
    m = _model(nodes, [_vi("boxes", shape=[1, 40, 4]), _vi("scores", shape=[1, 1, 40])],
               [_vi("kept")], inits)
    f = dgx.load(m)
    assert f.num_graphs == 1          # NMS first (eager), then one compiled segment
    rng = np.random.default_rng(5)
    boxes = _boxes(rng, 0)[:1]
    scores = rng.random((1, 1, 40)).astype(np.float32)
    np.testing.assert_array_equal(f(boxes, scores)[0].numpy(), _reference(m, boxes, scores)[0])
    (graph,) = f.get_graphs(boxes, scores)
    assert "Gather" in {op.type for op in graph.op}


def test_non_max_suppression_needs_vision_ops(monkeypatch):
    from dragon_core.onnx import _import_ops
    real = _import_ops._C.list_ops
    monkeypatch.setattr(_import_ops._C, "list_ops",
                        lambda: [d for d in real() if d["name"] != "Nms"])
    with pytest.raises(dgx.UnsupportedModelError, match="NonMaxSuppression.*vision"):
        dgx.load(_nms_model())


# ----------------------------------------------------- export to onnxruntime

ort = pytest.importorskip("onnxruntime")


def _ort(model, *xs):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})


def _same(got, ref):
    for g, r in zip(got, ref):
        r = r.numpy()
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_array_equal(g, r)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool", "uint8",
                                   "int8", "float16"])
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 4), (2, 0, 3)], ids=str)
def test_nonzero_padded_exports_to_nonzero(dtype, shape):
    x = np.random.default_rng(6).integers(-1, 2, shape).astype(dtype)
    model = dgx.export(lambda t: dg.ops.nonzero_padded(t), [x], None)
    assert "NonZero" in {n.op_type for n in model.graph.node}
    _same(_ort(model, x), dg.ops.nonzero_padded(dg.tensor(x)))


def test_nonzero_float64_export_keeps_tiny_values_and_nan():
    x = np.array([0.0, 1e-300, np.nan, -0.0, 2.0])
    model = dgx.export(lambda t: dg.ops.nonzero_padded(t), [x], None)
    idx, count = _ort(model, x)
    np.testing.assert_array_equal(idx, [[1, 2, 4, -1, -1]])
    assert int(count) == 3


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("shape, axis", [((), None), ((0,), None), ((9,), None),
                                         ((3, 4), None), ((6, 3), 0), ((3, 6), 1),
                                         ((2, 3, 4), -1), ((0, 3), 1)], ids=str)
@pytest.mark.parametrize("sorted_", [True, False])
def test_unique_padded_exports_to_unique(dtype, shape, axis, sorted_):
    x = np.random.default_rng(7).integers(-1, 2, shape).astype(dtype)
    model = dgx.export(lambda t: dg.ops.unique_padded(t, sorted=sorted_, axis=axis), [x], None)
    assert "Unique" in {n.op_type for n in model.graph.node}
    _same(_ort(model, x), dg.ops.unique_padded(dg.tensor(x), sorted=sorted_, axis=axis))


def test_exported_padded_ops_load_back_as_segments():
    """Round trip: the exported NonZero / Unique nodes import into a model
    split at them, which reproduces Dragon's padded outputs."""
    def f(t):
        idx, n = dg.ops.nonzero_padded(t)
        v, first, inv, counts, m = dg.ops.unique_padded(t, axis=0)
        return idx, n, v, inv, m

    x = np.array([[1, 0, 2], [0, 0, 0], [1, 0, 2]], np.float32)
    model = dgx.export(f, [x], None)
    g = dgx.load(model)
    assert g.num_graphs >= 1 and g._segments is not None
    for got, ref in zip(g(x), f(dg.tensor(x))):
        np.testing.assert_array_equal(got.numpy(), ref.numpy())


@pytest.mark.skipif(not hasattr(dg.ops, "batched_nms_padded"),
                    reason="dragon-vision-ops is not installed")
@pytest.mark.parametrize("n, cats", [(0, 1), (1, 3), (30, 1), (30, 3), (200, 50)])
def test_batched_nms_exports_to_non_max_suppression(n, cats):
    """Per-category NMS as ONNX NonMaxSuppression with one class per
    category; many tied scores check Dragon's order (score, then index)."""
    rng = np.random.default_rng(8)
    xy = rng.uniform(0, 20, (n, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(2, 10, (n, 2)).astype(np.float32)], 1)
    scores = rng.integers(0, 10, n).astype(np.float32) / 10.0
    idxs = rng.integers(0, cats, n).astype(np.int64) * 7 - 3      # arbitrary category ids

    def f(b, s, i):
        return dg.ops.batched_nms_padded(b, s, i, 0.3)

    model = dgx.export(f, [boxes, scores, idxs], None)
    assert "NonMaxSuppression" in {nd.op_type for nd in model.graph.node}
    assert all(nd.domain == "" for nd in model.graph.node)
    _same(_ort(model, boxes, scores, idxs), f(dg.tensor(boxes), dg.tensor(scores),
                                               dg.tensor(idxs)))
