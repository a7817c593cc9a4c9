"""What the seeded ONNX fuzzing (tests/onnx/onnxfuzz.py) found: each case
is the minimal model, run in Dragon and in onnxruntime (or against the
NumPy formula of the ONNX specification)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import dragon_core as dg

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
dgx = pytest.importorskip("dragon_core.onnx")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnxfuzz as F  # noqa: E402


def _load_run(case):
    return [t.numpy() for t in dgx.load(case.model)(*case.feeds)]


def _both(case):
    F.strict_check(case.model)
    return _load_run(case), F.ort_run(case.model, case.feeds)


# ------------------------------------------------------------- import

def test_slice_negative_step_start_before_the_first_element_reads_it():
    # ONNX clamps a start below -dim to 0 with a negative step (element 0 is
    # read); NumPy's rule, which Dragon's Slice follows, reads nothing.
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    case = F.make_case("Slice", [(x, "in"), (F._i64([-4, -9]), "init"),
                                 (F._i64([-2 ** 63, -2 ** 63]), "init"),
                                 (F._i64([0, 2]), "init"), (F._i64([-1, -2]), "init")],
                       {}, 1, 13)
    got, want = _both(case)
    np.testing.assert_array_equal(want[0], x[0:1, :, 0:1])
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("op,fn", [("ReduceSumSquare", np.square), ("ReduceL1", np.abs),
                                   ("ReduceL2", np.abs), ("ReduceLogSum", np.log),
                                   ("ReduceLogSumExp", lambda v: v), ("ReduceSum", lambda v: v)])
@pytest.mark.parametrize("axes", ["omitted", "empty"])
def test_reduce_over_no_axes_keeps_the_elementwise_part(op, fn, axes):
    # noop_with_empty_axes=1 reduces over no axes: each element alone, so
    # ReduceSumSquare squares, ReduceL1 takes |x|, ReduceLogSum the log.
    x = np.random.default_rng(0).uniform(0.2, 2.0, (2, 3)).astype(np.float32)
    x[0, 0] = -x[0, 0] if op not in ("ReduceLogSum",) else x[0, 0]
    ins = [(x, "in")] + ([(F._i64([]), "init")] if axes == "empty" else [])
    case = F.make_case(op, ins, {"noop_with_empty_axes": 1, "keepdims": 0}, 1, 18)
    got, want = _both(case)
    np.testing.assert_allclose(want[0], fn(x.astype(np.float64)), rtol=1e-6)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)


def test_concat_of_empty_pieces_has_their_summed_size():
    parts = [np.zeros((0, k), np.float32) for k in (1, 2, 3)]
    case = F.make_case("Concat", [(p, "in") for p in parts], {"axis": 1}, 1, 13)
    got, want = _both(case)
    assert want[0].shape == (0, 6)
    assert got[0].shape == (0, 6)


@pytest.mark.parametrize("alpha", [-0.5, 0.7, 2.0])
def test_celu_follows_its_formula_for_every_alpha(alpha):
    x = np.linspace(-3, 3, 13).astype(np.float32)
    case = F.make_case("Celu", [(x, "in")], {"alpha": alpha}, 1, 18)
    got, want = _both(case)
    xd = x.astype(np.float64)
    ref = np.maximum(0, xd) + np.minimum(0, alpha * np.expm1(xd / alpha))
    np.testing.assert_allclose(want[0], ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("spatial,kernel,out,strides", [
    ((5,), (2,), (5,), (1,)), ((5, 4), (2, 3), (5, 5), (1, 1)),
    ((3, 4), (3, 2), (6, 8), (2, 2)), ((4,), (4,), (8,), (2,))])
def test_conv_transpose_output_shape_puts_the_odd_pad_at_the_start(spatial, kernel, out,
                                                                   strides):
    # output_shape without auto_pad: pads[start] = total - total // 2, the
    # extra cell of an odd total at the start (ONNX, onnxruntime).
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2) + spatial).astype(np.float32)
    w = rng.standard_normal((2, 3) + kernel).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    case = F.make_case("ConvTranspose", [(x, "in"), (w, "init"), (b, "init")],
                       {"output_shape": list(out), "strides": list(strides)}, 1, 18)
    got, want = _both(case)
    assert got[0].shape == want[0].shape == (1, 3) + out
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spatial,kernel,strides,pads,p", [
    ((7, 6), (3, 2), (1, 2), (0, 0, 1, 1), 2), ((6, 6), (2, 2), (2, 2), (0, 0, 0, 1), 1),
    ((5,), (2,), (2,), (1, 1), 3)])
def test_lp_pool_ceil_mode_drops_a_window_that_starts_in_the_padding(spatial, kernel,
                                                                     strides, pads, p):
    x = np.random.default_rng(2).standard_normal((2, 3) + spatial).astype(np.float32)
    case = F.make_case("LpPool", [(x, "in")], {"kernel_shape": list(kernel),
                                               "strides": list(strides), "pads": list(pads),
                                               "ceil_mode": 1, "p": p}, 1, 19)
    got, want = _both(case)
    assert got[0].shape == want[0].shape
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def test_resize_keep_aspect_ratio_rounds_half_sizes_up():
    # not_larger picks scale 0.5 for every axis; the batch of 1 becomes
    # round_int(0.5) = 1 (halves round up), not NumPy's round-to-even 0.
    x = np.random.default_rng(3).standard_normal((1, 2, 6, 6)).astype(np.float32)
    case = F.make_case("Resize", [(x, "in"), (None, "omit"), (None, "omit"),
                                  (F._i64([1, 2, 3, 9]), "init")],
                       {"mode": "nearest", "keep_aspect_ratio_policy": "not_larger"}, 1, 19)
    got, want = _both(case)
    assert want[0].shape == (1, 1, 3, 3)
    assert got[0].shape == want[0].shape
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("spatial,pads", [((6, 6), [0, 2, 2, 2]), ((6, 6), [0, 0, 0, 0]),
                                          ((5, 5, 5), [2, 0, 0, 2, 1, 0])])
def test_dilated_average_pool_is_refused_when_loaded(spatial, pads):
    # Dragon's average pooling has no dilation; with wide pads the explicit
    # path used to pool undilated windows, silently.
    r = len(spatial)
    x = np.random.default_rng(8).standard_normal((1, 1) + spatial).astype(np.float32)
    case = F.make_case("AveragePool", [(x, "in")],
                       {"kernel_shape": [3] * r, "dilations": [2] * r, "pads": pads,
                        "count_include_pad": 0}, 1, 19)
    with pytest.raises(dgx.UnsupportedModelError, match=r"AveragePool \(opset 19\).*dilations"):
        dgx.load(case.model)(x)


def test_an_op_error_names_the_onnx_node():
    x = np.zeros((1, 1, 2, 2), np.float32)
    case = F.make_case("MaxPool", [(x, "in")], {"kernel_shape": [2, 2], "dilations": [2, 1]},
                       1, 22)
    with pytest.raises(ValueError) as info:
        dgx.load(case.model)(x)
    assert "ONNX node 'maxpool_node' (MaxPool, opset 22)" in " ".join(info.value.__notes__)


@pytest.mark.parametrize("ftype", ["float32", "float64"])
@pytest.mark.parametrize("itype", ["int32", "int64"])
def test_pow_of_an_integer_base_to_a_float_power_truncates_the_power(itype, ftype):
    # ONNX computes 3 ** 1.5 = 5.196 and truncates to 5; the exponent cast
    # to the base's dtype first gave 3 ** 1 = 3.
    x = np.array([2, 3, 4, 7, 5, 1], itype)
    y = np.array([0.5, 1.5, 2.5, 0.9, 2.0, 3.7], ftype)
    case = F.make_case("Pow", [(x, "in"), (y, "in")], {}, 1, 15)
    got, want = _both(case)
    np.testing.assert_array_equal(want[0], np.trunc(x.astype(np.float64) ** y).astype(itype))
    np.testing.assert_array_equal(got[0], want[0])


# ------------------------------------------------------------- export

def test_export_slice_negative_step_from_before_the_first_element_is_empty():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

    def f(t):
        return dg.ops.slice(t, [-4, 5], [-(2 ** 62), 0], [-1, -2], [0, 2])

    assert f(dg.tensor(x)).shape == (0, 3, 2)
    assert F.check_export(f, [x], 21, "slice")


@pytest.mark.parametrize("src,dst", [((3, 0, 3), (0, 1)), ((2, 0), (0, 2, 1)),
                                     ((0, 4), (2, 0, 2))])
def test_export_reshape_to_an_empty_shape(src, dst):
    # A 0 in the target is a size (allowzero=1), not "copy the input axis".
    x = np.zeros(src, np.float32)
    assert F.check_export(lambda t: dg.ops.reshape(t, list(dst)), [x], 17, "reshape")


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic", "nearest-exact"])
def test_export_interpolate_to_a_size_keeps_a_dynamic_batch(mode):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 5, 4)).astype(np.float32)
    x3 = rng.standard_normal((3, 2, 5, 4)).astype(np.float32)

    def f(t):
        return dg.ops.interpolate(t, size=[3, 7], mode=mode)

    assert F.check_export(f, [x], 21, "interpolate", other_xs=[x3],
                          dynamic_axes={"input_0": {0: "b"}, "output_0": {0: "b"}})


def test_export_group_norm_keeps_a_dynamic_batch():
    rng = np.random.default_rng(5)
    m = dg.nn.GroupNorm(2, 4)
    F._randomize(m, rng)
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    x5 = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
    assert F.check_export(m, [x], 18, "group_norm", other_xs=[x5],
                          dynamic_axes={"input_0": {0: "b"}, "output_0": {0: "b"}})


@pytest.mark.parametrize("opset", [17, 18])
def test_export_masked_attention_at_every_opset(opset):
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((1, 2, 3, 4)).astype(np.float32) for _ in range(3))
    mask = np.array([[True, False, True], [False, False, True], [True, True, True]])

    def f(a, b, c):
        return dg.ops.scaled_dot_product_attention(a, b, c, attn_mask=dg.tensor(mask))

    assert F.check_export(f, [q, k, v], opset, "sdpa")


def test_export_cond_reading_a_same_dtype_cast():
    # A Cast to the dtype it already has is written as Identity: onnxruntime
    # drops a no-op Cast and then misses its output in an If branch.
    o = dg.ops

    def f(x):
        y = o.cast(o.cast(x, "float32"), "float32")
        return dg.cond(o.greater(o.sum(x), 0.0), lambda a, b: o.mul(a, 2.0),
                       lambda a, b: o.add(o.tanh(a), b), [y, x])

    x = np.random.default_rng(7).standard_normal((3, 4)).astype(np.float32)
    assert F.check_export(f, [x], 21, "cond")
    assert F.check_export(f, [-np.abs(x)], 21, "cond")


@pytest.mark.parametrize("size", [(1, 3), (4, 1), (1, 1)])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_export_interpolate_to_an_axis_of_length_one_reads_the_centre(size, mode):
    # pytorch_half_pixel reads source 0 for an output axis of length 1;
    # Dragon (as PyTorch, checked here) reads the centre: half_pixel.
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(9).standard_normal((2, 3, 5, 4)).astype(np.float32)

    def f(t):
        return dg.ops.interpolate(t, size=list(size), mode=mode, align_corners=False)

    ref = torch.nn.functional.interpolate(torch.from_numpy(x), size=size, mode=mode,
                                          align_corners=False).numpy()
    np.testing.assert_allclose(f(dg.tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-6)
    assert F.check_export(f, [x], 21, "interpolate")


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint8"])
@pytest.mark.parametrize("fn", ["sum", "prod", "max", "min"])
def test_export_reductions_of_narrow_integers(dtype, fn):
    # ReduceSum/Prod take 32- and 64-bit integers only, ReduceMax/Min no
    # 16-bit ones: reduced in int32 and cast back (wrapping as Dragon's).
    x = np.array([[100, 100, 3], [7, 2, 5]], dtype)

    def f(t):
        return getattr(dg.ops, fn)(t, axis=[1], keepdims=False)

    assert F.check_export(f, [x], 18, f"{fn} {dtype}")


def test_export_neg_of_unsigned_integers():
    x = np.array([0, 1, 200, 255], np.uint8)
    assert F.check_export(lambda t: dg.ops.neg(t), [x], 18, "neg")


def test_export_bitwise_ops_below_opset_18_are_refused():
    x = np.array([3, 5, -2], np.int32)
    with pytest.raises(dgx.UnsupportedModelError, match=r"BitwiseAnd.*needs opset 18"):
        dgx.export(lambda a: dg.ops.bitwise_and(a, a), [x], None, opset=17)
    assert F.check_export(lambda a: dg.ops.bitwise_and(a, a), [x], 18, "bitwise")


def test_export_a_vm_torch_module():
    # vm.torch points at dragon_core.onnx for ONNX; export took only
    # dragon_core.nn Modules (a vm.torch one failed on its first layer).
    from dragon_core.vm import torch as vt
    m = vt.nn.Sequential(vt.nn.Conv2d(2, 3, 3, padding=1), vt.nn.BatchNorm2d(3),
                         vt.nn.ReLU(), vt.nn.AvgPool2d(2, ceil_mode=True), vt.nn.Flatten(),
                         vt.nn.Linear(3 * 3 * 3, 4))
    x = np.random.default_rng(10).standard_normal((2, 2, 5, 5)).astype(np.float32)
    x4 = np.random.default_rng(11).standard_normal((4, 2, 5, 5)).astype(np.float32)
    model = dgx.export(m, [x], None)
    assert {"0.weight", "1.running_mean", "5.bias"} <= {i.name for i in model.graph.initializer}
    assert m.training                        # the mode is restored
    assert F.check_export(m, [x], 21, "vm.torch", other_xs=[x4],
                          dynamic_axes={"input_0": {0: "b"}, "output_0": {0: "b"}})


@pytest.mark.parametrize("kind", ["max", "avg", "avg_include"])
@pytest.mark.parametrize("size,k,s,p", [(5, 2, 2, 1), (9, 2, 2, 1), (9, 2, 3, 0), (7, 3, 2, 1),
                                        (8, 3, 3, 1), (6, 2, 2, 0)])
def test_export_ceil_mode_pooling_whose_last_window_starts_in_the_padding(kind, size, k, s, p):
    # Dragon (as PyTorch and onnxruntime) drops that window; onnx's shape
    # inference does not, so the checker refused the model (and a Slice
    # after the pool would mislead onnxruntime's memory planner).
    x = np.random.default_rng(12).standard_normal((2, 3, size, size + 1)).astype(np.float32)

    def f(t):
        if kind == "max":
            y = dg.ops.max_pool2d(t, [k, k], [s, s], [p, p], [1, 1], True)
        else:
            y = dg.ops.avg_pool2d(t, [k, k], [s, s], [p, p], True, kind == "avg_include")
        return dg.ops.pad(dg.ops.relu(y), ((0, 0), (0, 0), (0, 1), (1, 0)), mode="edge")

    torch = pytest.importorskip("torch")
    tx = torch.from_numpy(x)
    ref = (torch.nn.functional.max_pool2d(tx, k, s, p, ceil_mode=True) if kind == "max" else
           torch.nn.functional.avg_pool2d(tx, k, s, p, ceil_mode=True,
                                          count_include_pad=kind == "avg_include"))
    ref = torch.nn.functional.pad(torch.relu(ref), (1, 0, 0, 1), mode="replicate").numpy()
    np.testing.assert_allclose(f(dg.tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-6)
    x3 = np.random.default_rng(13).standard_normal((4, 3, size, size + 1)).astype(np.float32)
    assert F.check_export(f, [x], 19, f"{kind} pool", other_xs=[x3],
                          dynamic_axes={"input_0": {0: "b"}, "output_0": {0: "b"}})
