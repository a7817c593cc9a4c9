"""Nms and BatchedNms against a float64 NumPy reference of the greedy rule,
hand-computed overlaps, ordering and tie rules, NaN scores and degenerate
boxes, empty input, bad inputs, eager vs graph, the Python API (sliced and
padded forms) and the CUDA kernels (registered; run when a cuda device
exists)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from dragon_sdk.testing import (check_bad_inputs, check_eager_vs_graph,
                                op_case)

import dragon_core as dg
import dragon_vision_ops as vo

KNOWN: list = []   # every variant is checked, None inputs included

from vision_testing import requires_cuda  # noqa: E402

# ---------------------------------------------------------------- reference


def iou_matrix(boxes):
    """IoU of every pair; areas from sides clamped at 0, IoU 0 where the
    union is not positive."""
    x1, y1, x2, y2 = boxes.T
    area = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    iw = np.clip(np.minimum(x2[:, None], x2) - np.maximum(x1[:, None], x1), 0, None)
    ih = np.clip(np.minimum(y2[:, None], y2) - np.maximum(y1[:, None], y1), 0, None)
    inter = iw * ih
    union = area[:, None] + area - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def nms_ref(boxes, scores, idxs=None, iou_threshold=0.5):
    """Greedy NMS: by decreasing score (ties: lower index), keep a box unless
    a kept box of its category overlaps it with IoU > iou_threshold; NaN
    scores are never kept. Returns (keep padded with -1, num_kept)."""
    n = len(scores)
    cats = np.zeros(n, np.int64) if idxs is None else idxs
    iou = iou_matrix(boxes)
    valid = [i for i in range(n) if not np.isnan(scores[i])]
    order = sorted(valid, key=lambda i: (-scores[i], i))
    kept = []
    for i in order:
        if all(cats[k] != cats[i] or not iou[k, i] > iou_threshold for k in kept):
            kept.append(i)
    keep = np.full(n, -1, np.int64)
    keep[:len(kept)] = kept
    return [keep, np.array(len(kept), np.int64)]


def batched_nms_ref(boxes, scores, idxs, iou_threshold):
    return nms_ref(boxes, scores, idxs, iou_threshold)


def _random_boxes(rng, n, dt, spread=20.0):
    xy = rng.uniform(0, spread, (n, 2))
    wh = rng.uniform(1, 8, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1).astype(dt)


def _nms_inputs(rng, dt, shape):
    (n,) = shape
    scores = rng.permutation(n).astype(dt) / max(n, 1)  # distinct scores
    return [_random_boxes(rng, n, dt), scores]


def _batched_inputs(rng, dt, shape):
    boxes, scores = _nms_inputs(rng, dt, shape)
    return [boxes, scores, rng.integers(0, 3, shape[0]).astype(np.int64)]


THRESHOLDS = [{"iou_threshold": t} for t in (0.0, 0.3, 0.5, 0.9, 1.0)]


@op_case("Nms", inputs=_nms_inputs, reference=nms_ref, attrs=THRESHOLDS,
         shapes=[(0,), (1,), (7,), (64,), (130,)], out_dtype="int64")
def test_nms_forward(case):
    case.check_forward()


@op_case("BatchedNms", inputs=_batched_inputs, reference=batched_nms_ref,
         attrs=THRESHOLDS[1:4], shapes=[(0,), (9,), (100,)], out_dtype="int64")
def test_batched_nms_forward(case):
    case.check_forward()


# ------------------------------------------------------------- hand-computed


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_two_boxes_with_known_iou(dtype):
    """[0, 0, 2, 2] and [1, 0, 3, 2]: intersection 2, union 6, IoU 1/3."""
    boxes = dg.tensor(np.array([[0, 0, 2, 2], [1, 0, 3, 2]], dtype))
    scores = dg.tensor(np.array([0.6, 0.9], dtype))
    assert vo.nms(boxes, scores, 0.3).numpy().tolist() == [1]
    assert vo.nms(boxes, scores, 0.34).numpy().tolist() == [1, 0]
    keep, n = vo.nms_padded(boxes, scores, 0.3)
    assert keep.numpy().tolist() == [1, -1] and int(n.item()) == 1
    assert keep.dtype.name == "int64" and n.dtype.name == "int64" and n.shape == ()


def test_ties_are_broken_by_index_and_suppression_is_strict():
    # Identical boxes, equal scores: the lower index wins; IoU 1 is not > 1.
    boxes = dg.tensor(np.array([[0, 0, 1, 1]] * 3, np.float32))
    scores = dg.tensor(np.array([0.5, 0.5, 0.5], np.float32))
    assert vo.nms(boxes, scores, 0.5).numpy().tolist() == [0]
    assert vo.nms(boxes, scores, 1.0).numpy().tolist() == [0, 1, 2]
    # -0.0 and 0.0 are equal scores.
    scores = dg.tensor(np.array([-0.0, 0.0, -0.0], np.float32))
    assert vo.nms(boxes, scores, 1.0).numpy().tolist() == [0, 1, 2]


def test_nan_scores_are_never_kept_and_suppress_nothing():
    boxes = dg.tensor(np.array([[0, 0, 2, 2], [0, 0, 2, 2], [5, 5, 6, 6]], np.float64))
    scores = dg.tensor(np.array([np.nan, 0.1, -np.inf]))
    assert vo.nms(boxes, scores, 0.5).numpy().tolist() == [1, 2]


def test_degenerate_boxes_have_zero_area():
    """Reversed and empty boxes have area 0: IoU 0 with anything, so they are
    kept by score and suppress nothing. A NaN coordinate suppresses nothing."""
    boxes = np.array([[2, 2, 0, 0], [0, 0, 2, 2], [1, 1, 1, 1], [1, 1, 1, 1],
                      [0, 0, np.nan, 2]], np.float64)
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.95])
    got = vo.nms(dg.tensor(boxes), dg.tensor(scores), 0.0).numpy().tolist()
    assert got == [4, 0, 1, 2, 3]
    assert got == nms_ref(boxes, scores, iou_threshold=0.0)[0].tolist()


def test_batched_nms_only_suppresses_within_a_category():
    boxes = dg.tensor(np.array([[0, 0, 2, 2], [0, 0, 2, 2], [0, 0, 2, 2.1]], np.float32))
    scores = dg.tensor(np.array([0.9, 0.8, 0.7], np.float32))
    idxs = dg.tensor(np.array([0, 1, 0], np.int64))
    assert vo.batched_nms(boxes, scores, idxs, 0.5).numpy().tolist() == [0, 1]
    same = dg.tensor(np.zeros(3, np.int64))
    assert vo.batched_nms(boxes, scores, same, 0.5).numpy().tolist() == [0]


def test_large_random_against_reference():
    rng = np.random.default_rng(7)
    boxes = _random_boxes(rng, 700, np.float64, spread=60.0)
    scores = rng.random(700)
    scores[rng.integers(0, 700, 20)] = 0.5  # some ties
    idxs = rng.integers(0, 5, 700)
    for thr in (0.2, 0.6):
        keep, n = vo.nms_padded(dg.tensor(boxes), dg.tensor(scores), thr)
        want = nms_ref(boxes, scores, iou_threshold=thr)
        np.testing.assert_array_equal(keep.numpy(), want[0])
        keep, n = vo.batched_nms_padded(dg.tensor(boxes), dg.tensor(scores),
                                        dg.tensor(idxs), thr)
        np.testing.assert_array_equal(keep.numpy(), nms_ref(boxes, scores, idxs, thr)[0])


def test_empty_input():
    boxes = dg.tensor(np.zeros((0, 4), np.float32))
    scores = dg.tensor(np.zeros((0,), np.float32))
    keep = vo.nms(boxes, scores, 0.5)
    assert tuple(keep.shape) == (0,) and keep.dtype.name == "int64"
    keep = vo.batched_nms(boxes, scores, dg.tensor(np.zeros(0, np.int64)), 0.5)
    assert tuple(keep.shape) == (0,)


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("args, words", [
    (((3, 4), (4,)), ["scores must be [N] with N = 3", "[4]"]),
    (((3, 5), (3,)), ["boxes must be [N, 4]", "[3, 5]"]),
    (((4,), (1,)), ["boxes must be [N, 4]"]),
    (((2, 4), (2, 1)), ["scores must be [N]", "[2, 1]"]),
])
def test_shape_errors_name_the_op(args, words):
    boxes, scores = (dg.tensor(np.zeros(s, np.float32)) for s in args)
    with pytest.raises(dg.errors.InvalidArgumentError) as err:
        vo.nms(boxes, scores, 0.5)
    for w in ["Nms"] + words:
        assert w in str(err.value), str(err.value)


def test_dtype_and_attribute_errors():
    boxes = dg.tensor(np.zeros((2, 4), np.float32))
    with pytest.raises(dg.errors.InvalidArgumentError, match="scores must have boxes' dtype"):
        vo.nms(boxes, dg.tensor(np.zeros(2)), 0.5)
    with pytest.raises(dg.errors.InvalidArgumentError, match="iou_threshold must be a number"):
        vo.nms(boxes, dg.tensor(np.zeros(2, np.float32)), float("nan"))
    with pytest.raises(dg.errors.InvalidArgumentError, match="BatchedNms.*idxs must be"):
        vo.batched_nms(boxes, dg.tensor(np.zeros(2, np.float32)),
                       dg.tensor(np.zeros(3, np.int64)), 0.5)
    with pytest.raises(dg.errors.InvalidArgumentError, match="idxs"):
        vo.batched_nms(boxes, dg.tensor(np.zeros(2, np.float32)),
                       dg.tensor(np.zeros(2, np.int32)), 0.5)


def test_check_bad_inputs():
    rng = np.random.default_rng(8)
    boxes, scores = _nms_inputs(rng, np.float32, (6,))
    idxs = np.array([0, 1, 0, 1, 2, 2], np.int64)
    assert check_bad_inputs("Nms", [boxes, scores], skip=KNOWN,
                            iou_threshold=0.5)["valid"] == "ok"
    assert check_bad_inputs("BatchedNms", [boxes, scores, idxs], skip=KNOWN,
                            iou_threshold=0.5)["valid"] == "ok"


# --------------------------------------------------------------- eager/graph


def test_eager_vs_graph_padded():
    rng = np.random.default_rng(9)
    boxes, scores = _nms_inputs(rng, np.float64, (40,))
    idxs = rng.integers(0, 3, 40)

    def fn(boxes, scores, idxs):
        keep, n = vo.nms_padded(boxes, scores, 0.4)
        bkeep, bn = vo.batched_nms_padded(boxes, scores, idxs, 0.4)
        return [keep, n, bkeep, bn]

    other = [*_nms_inputs(rng, np.float64, (40,)), rng.integers(0, 3, 40)]
    outs = check_eager_vs_graph(fn, boxes, scores, idxs, extra_inputs=[other])
    np.testing.assert_array_equal(outs[0], nms_ref(boxes, scores, iou_threshold=0.4)[0])


def test_sliced_nms_in_a_graph_says_to_use_the_padded_form():
    boxes = dg.tensor(np.array([[0, 0, 1, 1.0]]))
    scores = dg.tensor(np.array([1.0]))
    with pytest.raises(RuntimeError, match="nms_padded"):
        dg.function(lambda b, s: vo.nms(b, s, 0.5))(boxes, scores)


# --------------------------------------------------------------- Python API


def test_generated_signatures_and_docs():
    sig = inspect.signature(dg.ops.nms_padded)
    assert list(sig.parameters) == ["boxes", "scores", "iou_threshold"]
    assert "non-maximum suppression" in dg.ops.nms_padded.__doc__
    sig = inspect.signature(dg.ops.batched_nms_padded)
    assert list(sig.parameters) == ["boxes", "scores", "idxs", "iou_threshold"]
    assert "category" in dg.ops.batched_nms_padded.__doc__
    from dragon_vision_ops import _roi
    assert {"nms", "nms_padded", "batched_nms", "batched_nms_padded"} <= set(_roi.__all__)


# -------------------------------------------------------------------- CUDA


@pytest.mark.parametrize("op", ["Nms", "BatchedNms"])
def test_cuda_kernels_registered(op):
    cuda = [k for k in dg.plugins.kernels(op) if k["device"] == "cuda"]
    assert bool(cuda) == vo.built_with_cuda()
    assert len([k for k in dg.plugins.kernels(op) if k["device"] == "cpu"]) == 2


@requires_cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 300])
def test_cuda_matches_cpu(dtype, n):
    rng = np.random.default_rng(n)
    boxes, scores = _nms_inputs(rng, dtype, (n,))
    if n > 3:
        scores[:3] = [np.nan, 0.5, -0.0]
    idxs = rng.integers(0, 3, n).astype(np.int64)
    for thr in (0.3, 0.7):
        cpu = vo.nms_padded(dg.tensor(boxes), dg.tensor(scores), thr)
        gpu = vo.nms_padded(dg.tensor(boxes, device="cuda"),
                            dg.tensor(scores, device="cuda"), thr)
        for a, b in zip(cpu, gpu):
            np.testing.assert_array_equal(b.cpu().numpy(), a.cpu().numpy())
        cpu = vo.batched_nms_padded(*(dg.tensor(a) for a in (boxes, scores, idxs)), thr)
        gpu = vo.batched_nms_padded(*(dg.tensor(a, device="cuda")
                                      for a in (boxes, scores, idxs)), thr)
        for a, b in zip(cpu, gpu):
            np.testing.assert_array_equal(b.cpu().numpy(), a.cpu().numpy())


def _dense_boxes(rng, n, dt, span):
    """n boxes 10-60 wide in a span x span square: dense enough that most
    are suppressed at low thresholds (the select kernel's removed words
    then change in every 64-box tile)."""
    xy = rng.uniform(0, span, (n, 2))
    wh = rng.uniform(10, 60, (n, 2))
    return np.concatenate([xy, xy + wh], 1).astype(dt)


@requires_cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n,span", [(1000, 150), (5000, 1000), (4097, 300)])
def test_cuda_matches_cpu_many_boxes(dtype, n, span):
    """Thousands of boxes (the benchmark's 5,000 among them), sparse and
    dense, with tied scores, NaN and infinite scores and a NaN coordinate:
    the cuda kernels keep the CPU's indices in the CPU's order, bit for bit,
    and twice the same."""
    rng = np.random.default_rng(n)
    boxes = _dense_boxes(rng, n, dtype, span)
    scores = (np.round(rng.uniform(0, 1, n) * 64) / 64).astype(dtype)  # many ties
    scores[:4] = [np.nan, -0.0, -np.inf, np.inf]
    boxes[7, 2] = np.nan
    idxs = rng.integers(0, 4, n).astype(np.int64)
    for thr in (0.1, 0.5):
        cpu = vo.nms_padded(dg.tensor(boxes), dg.tensor(scores), thr)
        for _ in range(2):
            gpu = vo.nms_padded(dg.tensor(boxes, device="cuda"), dg.tensor(scores, device="cuda"),
                                thr)
            for a, b in zip(cpu, gpu):
                np.testing.assert_array_equal(b.cpu().numpy(), a.cpu().numpy())
        assert 0 < int(cpu[1].numpy()) < n
        cpu = vo.batched_nms_padded(*(dg.tensor(a) for a in (boxes, scores, idxs)), thr)
        gpu = vo.batched_nms_padded(*(dg.tensor(a, device="cuda") for a in (boxes, scores, idxs)),
                                    thr)
        for a, b in zip(cpu, gpu):
            np.testing.assert_array_equal(b.cpu().numpy(), a.cpu().numpy())
    keep = vo.nms(dg.tensor(boxes, device="cuda"), dg.tensor(scores, device="cuda"), 0.5)
    np.testing.assert_array_equal(keep.cpu().numpy(),
                                  vo.nms(dg.tensor(boxes), dg.tensor(scores), 0.5).numpy())


@requires_cuda
def test_cuda_identical_boxes_keep_one():
    """200 copies of one box: the first by score (ties: lowest index) is
    kept, every other one suppressed, on cuda as on the CPU."""
    boxes = np.tile(np.array([[1.0, 2.0, 30.0, 40.0]], np.float32), (200, 1))
    scores = np.full(200, 0.5, np.float32)
    scores[150] = 0.9
    keep, num = vo.nms_padded(dg.tensor(boxes, device="cuda"), dg.tensor(scores, device="cuda"),
                              0.5)
    assert int(num.cpu().numpy()) == 1
    np.testing.assert_array_equal(keep.cpu().numpy(), [150] + [-1] * 199)
