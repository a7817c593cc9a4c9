"""Memory formats (channels-last), PyTorch's way.

A channels-last tensor is a logical ``[N, C, H, W]`` tensor whose strides
are those of the dense ``[N, H, W, C]`` layout. This file checks

* the surface: ``dg.channels_last`` / ``contiguous_format`` /
  ``channels_last_3d`` / ``preserve_format``, ``x.contiguous(fmt)``,
  ``x.to(memory_format=)``, ``x.is_contiguous(fmt)``, ``Module.to`` (core and
  vm.torch), and the errors for unsupported combinations;
* layout propagation in eager calls: element-wise ops whose full-shape
  inputs are all channels-last give channels-last results (every op the
  registry marks element-wise is swept), device copies and clones keep the
  format, mixed layouts fall back to the default;
* that every op family computes the same values and gradients on
  channels-last inputs as on contiguous ones, in eager mode and in compiled
  functions (``dg.function``), against a float64 NumPy reference where the
  family has one here (element-wise ops: the contiguous run, itself tested
  against NumPy in tests/ops).
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core.vm import torch

ops = dg.ops
SHAPE = (2, 3, 4, 5)


def _rand(shape, seed=0, low=-2.0, high=2.0, dtype="float32"):
    rng = np.random.default_rng(seed)
    return dg.tensor(rng.uniform(low, high, shape).astype(dtype))


def _cl(x):
    return x.contiguous(dg.channels_last)


def _strides_cl(shape):
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


# ------------------------------------------------------------------ surface

def test_formats_and_repr():
    assert repr(dg.channels_last) == "dragon_core.channels_last"
    assert dg.channels_last.rank == 4 and dg.channels_last_3d.rank == 5
    assert torch.channels_last is dg.channels_last
    assert torch.contiguous_format is dg.contiguous_format
    assert torch.preserve_format is dg.preserve_format
    assert torch.channels_last_3d is dg.channels_last_3d
    assert dg.contiguous_format is not dg.channels_last


def test_contiguous_channels_last_is_a_strided_dense_copy():
    x = _rand(SHAPE)
    y = _cl(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert y.strides == _strides_cl(SHAPE)
    assert not y.is_contiguous()
    assert y.is_contiguous(dg.channels_last)
    assert not x.is_contiguous(dg.channels_last)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    # Already in the format: the same tensor.
    assert _cl(y) is y
    assert x.contiguous() is x
    # Back to row-major: a dense copy with equal values.
    z = y.contiguous()
    assert z.is_contiguous() and z.strides == (60, 20, 5, 1)
    np.testing.assert_array_equal(z.numpy(), x.numpy())
    # preserve_format keeps what is there.
    assert y.contiguous(dg.preserve_format) is y
    assert x.contiguous(dg.preserve_format) is x


def test_channels_last_3d():
    x = _rand((2, 3, 2, 4, 5))
    y = x.contiguous(dg.channels_last_3d)
    assert y.strides == (120, 1, 60, 15, 3)
    assert y.is_contiguous(dg.channels_last_3d) and not y.is_contiguous()
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    z = ops.relu(y)
    assert z.strides == y.strides
    np.testing.assert_array_equal(z.numpy(), np.maximum(x.numpy(), 0))


def test_ambiguous_shapes_are_both():
    """C == 1 or H == W == 1: one layout in memory, both formats hold."""
    for shape in [(2, 1, 4, 5), (2, 3, 1, 1), (1, 1, 1, 1)]:
        x = _rand(shape)
        assert x.is_contiguous() and x.is_contiguous(dg.channels_last)
        assert _cl(x) is x


def test_empty_tensor():
    x = dg.tensor(np.zeros((0, 3, 4, 5), np.float32))
    y = _cl(x)
    assert y.shape == (0, 3, 4, 5)
    assert y.is_contiguous(dg.channels_last)
    assert ops.relu(y).shape == (0, 3, 4, 5)


@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 3, 4), (1, 2, 3, 4, 5)])
def test_channels_last_needs_rank_4(shape):
    x = _rand(shape)
    with pytest.raises(ValueError, match=r"channels_last needs a rank-4 tensor.*float32 on cpu"):
        x.contiguous(dg.channels_last)
    with pytest.raises(ValueError, match="channels_last needs a rank-4"):
        x.to(memory_format=dg.channels_last)
    with pytest.raises(ValueError, match="channels_last needs a rank-4"):
        torch.from_numpy(x.numpy()).contiguous(memory_format=torch.channels_last)
    assert not x.is_contiguous(dg.channels_last)


def test_channels_last_3d_needs_rank_5():
    with pytest.raises(ValueError, match="channels_last_3d needs a rank-5"):
        _rand(SHAPE).contiguous(dg.channels_last_3d)


def test_bad_memory_format_is_a_type_error():
    with pytest.raises(TypeError, match="memory_format must be one of"):
        _rand(SHAPE).contiguous("nhwc")
    with pytest.raises(TypeError, match="memory_format must be one of"):
        _rand(SHAPE).is_contiguous(3)
    with pytest.raises(ValueError, match="preserve_format is not a layout"):
        _rand(SHAPE).is_contiguous(dg.preserve_format)


def test_to_memory_format_with_dtype():
    x = _rand(SHAPE)
    y = x.to("float64", memory_format=dg.channels_last)
    assert y.dtype == dg.float64 and y.is_contiguous(dg.channels_last)
    np.testing.assert_array_equal(y.numpy(), x.numpy().astype(np.float64))
    assert x.to(memory_format=dg.contiguous_format) is x
    z = y.to(memory_format=dg.contiguous_format)
    assert z.is_contiguous()


def test_copies_keep_the_format():
    y = _cl(_rand(SHAPE))
    c = y._clone()
    assert c.strides == y.strides and c.data_ptr() != y.data_ptr()
    np.testing.assert_array_equal(c.numpy(), y.numpy())
    # A cast is element-wise: it keeps the format.
    h = y.to("float64")
    assert h.strides == y.strides
    np.testing.assert_array_equal(h.numpy(), y.numpy().astype(np.float64))


def test_vm_torch_surface():
    x = torch.randn(2, 3, 4, 5)
    y = x.to(memory_format=torch.channels_last)
    assert y.stride() == _strides_cl((2, 3, 4, 5))
    assert x.stride() == (60, 20, 5, 1)
    assert y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()
    assert y.contiguous().is_contiguous()
    assert y.contiguous(memory_format=torch.channels_last) is y
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    # preserve_format (the default of clone and *_like), as PyTorch.
    assert y.clone().stride() == y.stride()
    assert torch.clone(y).stride() == y.stride()
    assert y.clone(memory_format=torch.contiguous_format).is_contiguous()
    assert torch.empty_like(y).stride() == y.stride()
    assert torch.zeros_like(x).is_contiguous()
    e = torch.empty(2, 3, 4, 5, memory_format=torch.channels_last, requires_grad=True)
    assert e.is_contiguous(memory_format=torch.channels_last) and e.is_leaf
    assert torch.empty_like(y, memory_format=torch.contiguous_format).is_contiguous()


def test_vm_torch_module_to_converts_4d_parameters_only():
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                            torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 3, 2))
    w_before = m[0].weight.detach().numpy().copy()
    handle = m[0].weight
    assert m.to(memory_format=torch.channels_last) is m
    assert m[0].weight is handle  # the parameter keeps its handle
    assert m[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert not m[0].weight.is_contiguous()
    np.testing.assert_array_equal(m[0].weight.detach().numpy(), w_before)
    assert m[0].bias.is_contiguous() and m[3].weight.is_contiguous()
    assert m[1].running_mean.is_contiguous()
    x = torch.randn(2, 3, 5, 5)
    ref = m(x).detach().numpy()
    got = m(x.to(memory_format=torch.channels_last)).detach().numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    # Back, with a dtype in the same call.
    m.to(torch.float64, memory_format=torch.contiguous_format)
    assert m[0].weight.dtype == torch.float64 and m[0].weight.is_contiguous()


def test_core_module_to_memory_format():
    conv = dg.nn.Conv2d(3, 4, 3)
    w = conv.weight.numpy().copy()
    assert conv.to(memory_format=dg.channels_last) is conv
    assert conv.weight.is_contiguous(dg.channels_last) and not conv.weight.is_contiguous()
    assert isinstance(conv.weight, dg.nn.Parameter)
    np.testing.assert_array_equal(conv.weight.numpy(), w)
    assert conv.bias is None or conv.bias.is_contiguous()
    x = _rand((2, 3, 6, 6), 1)
    np.testing.assert_allclose(conv(_cl(x)).numpy(), conv(x).numpy(), rtol=1e-5, atol=1e-5)


def test_autograd_through_contiguous_channels_last():
    x = _rand(SHAPE)
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = _cl(x)
        s = ops.sum(y * y)
    g = tape.gradient(s, x)
    np.testing.assert_allclose(g.numpy(), 2 * x.numpy(), rtol=1e-6)


# ------------------------------------------------- element-wise propagation

def _elementwise_ops():
    return sorted(d["name"] for d in dg._C.list_ops() if d.get("elementwise"))


def test_the_registry_marks_the_elementwise_ops():
    names = _elementwise_ops()
    for op in ("Add", "Mul", "Relu", "Exp", "Where", "Cast", "Less", "LogicalNot", "ReluGrad"):
        assert op in names
    for op in ("Conv2d", "Softmax", "Sum", "Transpose", "MatMul", "BatchNorm"):
        assert op not in names


_ATTRS = {"Cast": {"dtype": "float64"}}


def _inputs_for(desc, shape, seed, broadcast_last=False):
    """Inputs of an element-wise op: positive floats where allowed (logs,
    roots), else bools, else int32."""
    arrays = []
    for j, arg in enumerate(desc["inputs"]):
        allowed = arg["dtypes"].replace(" ", "").split(",")
        sh = shape
        if broadcast_last and j == len(desc["inputs"]) - 1 and j > 0:
            sh = (1, shape[1], 1, 1)
        rng = np.random.default_rng(seed + j)
        if "float32" in allowed:
            arrays.append(rng.uniform(0.25, 1.75, sh).astype(np.float32))
        elif "bool" in allowed:
            arrays.append(rng.random(sh) < 0.5)
        else:
            arrays.append(rng.integers(1, 9, sh).astype(np.int32))
    if desc["same_dtype"]:
        dt = arrays[0].dtype
        arrays = [a.astype(dt) for a in arrays]
    if desc["name"] == "Where":  # condition bool, branches one dtype
        arrays[1] = arrays[1].astype(np.float32)
        arrays[2] = arrays[2].astype(np.float32)
    return arrays


def _call(desc, ins):
    return getattr(ops, desc["py_name"])(*ins, **_ATTRS.get(desc["name"], {}))


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


@pytest.mark.parametrize("name", _elementwise_ops())
def test_elementwise_keeps_channels_last(name):
    desc = next(d for d in dg._C.list_ops() if d["name"] == name)
    arrays = _inputs_for(desc, SHAPE, 3)
    dense = [dg.tensor(a) for a in arrays]
    ref = _first(_call(desc, dense))
    got = _first(_call(desc, [_cl(t) for t in dense]))
    assert got.shape == ref.shape and got.dtype == ref.dtype
    assert got.is_contiguous(dg.channels_last) and not got.is_contiguous(), \
        f"{name}: output strides {got.strides}"
    np.testing.assert_array_equal(got.numpy(), ref.numpy())
    # Mixed layouts: the default format, same values.
    if len(dense) > 1:
        mixed = _first(_call(desc, [_cl(dense[0])] + dense[1:]))
        assert mixed.is_contiguous()
        np.testing.assert_array_equal(mixed.numpy(), ref.numpy())


@pytest.mark.parametrize("name", [n for n in _elementwise_ops()
                                  if len(next(d for d in dg._C.list_ops()
                                              if d["name"] == n)["inputs"]) > 1
                                  and not n.endswith("Grad")])  # (x, dy): no broadcasting
def test_elementwise_broadcast_operand_joins(name):
    """A [1, C, 1, 1] operand (a bias) joins a channels-last one."""
    desc = next(d for d in dg._C.list_ops() if d["name"] == name)
    arrays = _inputs_for(desc, SHAPE, 5, broadcast_last=True)
    dense = [dg.tensor(a) for a in arrays]
    ref = _first(_call(desc, dense))
    got = _first(_call(desc, [_cl(dense[0])] + dense[1:]))
    if all(a.shape == SHAPE for a in arrays[:-1]) and len(arrays) > 2:
        # Where: the second full-shape operand is contiguous, so mixed.
        assert got.is_contiguous()
    else:
        assert got.is_contiguous(dg.channels_last) and not got.is_contiguous()
    np.testing.assert_array_equal(got.numpy(), ref.numpy())


def test_scalar_and_other_rank_operands():
    x = _rand(SHAPE)
    y = _cl(x)
    assert (y * 2.0).is_contiguous(dg.channels_last)
    assert (y + dg.tensor(np.float32(1.5))).is_contiguous(dg.channels_last)
    # A trailing-axes operand of lower rank: default format, same values.
    b = _rand((5,), 2)
    z = y + b
    assert z.is_contiguous()
    np.testing.assert_allclose(z.numpy(), x.numpy() + b.numpy())


def test_elementwise_gradients_on_channels_last():
    x, b = _rand(SHAPE, 1), _rand((1, 3, 1, 1), 2)
    res = []
    for inp in (x, _cl(x)):
        with dg.GradientTape() as tape:
            tape.watch(inp)
            tape.watch(b)
            s = ops.sum(ops.tanh(inp * b + inp) * ops.sigmoid(inp))
        res.append([g.numpy() for g in tape.gradient(s, [inp, b])])
    for g0, g1 in zip(*res):
        np.testing.assert_allclose(g1, g0, rtol=1e-6, atol=1e-7)
    xv, bv = x.numpy().astype(np.float64), b.numpy().astype(np.float64)
    t, sg = np.tanh(xv * bv + xv), 1 / (1 + np.exp(-xv))
    gx = (1 - t * t) * (bv + 1) * sg + t * sg * (1 - sg)
    np.testing.assert_allclose(res[1][0], gx, rtol=2e-5, atol=1e-6)


# ------------------------------------------------------- op families sweep
# Each family: (fn of the 4-D input x and extra dense parameters, the extra
# parameters' shapes). Values and gradients (of sum(y * r), r random) on a
# channels-last x (and channels-last 4-D parameters) must equal the
# contiguous run.

def _bn(x, g, b):
    return ops.batch_norm(x, g, b, ops.zeros([3]), ops.ones([3]), eps=1e-5, training=True)[0]


FAMILIES = {
    "conv2d": (lambda x, w, b: ops.conv2d(x, w, b, pads=[1, 1]), [(4, 3, 3, 3), (4,)]),
    "conv2d_strided_groups": (lambda x, w: ops.conv2d(x, w, strides=[2, 2], groups=3),
                              [(6, 1, 2, 2)]),
    "conv2d_bias_act": (lambda x, w, b: ops.conv2d_bias_act(x, w, b, pads=[1, 1],
                                                           activation="relu"),
                        [(4, 3, 3, 3), (4,)]),
    "conv_transpose2d": (lambda x, w: ops.conv_transpose2d(x, w, strides=[2, 2]),
                         [(3, 2, 3, 3)]),
    "max_pool2d": (lambda x: ops.max_pool2d(x, [2, 2], strides=[2, 2]), []),
    "avg_pool2d": (lambda x: ops.avg_pool2d(x, [3, 3], strides=[1, 1], pads=[1, 1]), []),
    "adaptive_avg_pool2d": (lambda x: ops.adaptive_avg_pool2d(x, [2, 3]), []),
    "batch_norm": (_bn, [(3,), (3,)]),
    "group_norm": (lambda x, g, b: ops.group_norm(x, g, b, groups=3), [(3,), (3,)]),
    "layer_norm": (lambda x, g, b: ops.layer_norm(x, g, b, axis=1), [(3, 4, 5), (3, 4, 5)]),
    "softmax_channels": (lambda x: ops.softmax(x, axis=1), []),
    "log_softmax_last": (lambda x: ops.log_softmax(x, axis=-1), []),
    "sum_spatial": (lambda x: ops.sum(x, axis=[2, 3]), []),
    "mean_channels": (lambda x: ops.mean(x, axis=1, keepdims=True), []),
    "max_all": (lambda x: ops.max(x, axis=[1, 3]), []),
    "transpose": (lambda x: ops.transpose(x, (0, 2, 3, 1)) * 1.0, []),
    "reshape": (lambda x: ops.reshape(x, [2, 60]), []),
    "flatten": (lambda x: ops.flatten(x), []),
    "concat_channels": (lambda x, y: ops.concat([x, y], axis=1), [(2, 3, 4, 5)]),
    "pad": (lambda x: ops.pad(x, [(0, 0), (0, 0), (1, 2), (0, 1)]), []),
    "slice": (lambda x: x[:, 1:, ::2, 1:4], []),
    "matmul_last_axis": (lambda x, w: ops.matmul(x, w), [(5, 3)]),
    "squared_sum": (lambda x: ops.sum(ops.square(x - ops.mean(x, axis=1, keepdims=True))), []),
}


def _params(shapes, seed):
    return [_rand(s, seed + 10 + k, low=-1.0, high=1.0) for k, s in enumerate(shapes)]


def _run_family(fn, x, params):
    with dg.GradientTape() as tape:
        tape.watch(x)
        for p in params:
            tape.watch(p)
        y = fn(x, *params)
        r = _rand(tuple(y.shape), 99, low=-1.0, high=1.0)
        s = ops.sum(y * r)
    return y, tape.gradient(s, [x] + params)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("params_layout", ["contiguous", "channels_last"])
def test_family_eager(family, params_layout):
    fn, shapes = FAMILIES[family]
    x = _rand(SHAPE, 7)
    params = _params(shapes, 7)
    ref_y, ref_g = _run_family(fn, x, params)
    cl_params = [_cl(p) if params_layout == "channels_last" and p.ndim == 4 else p
                 for p in params]
    y, g = _run_family(fn, _cl(x), cl_params)
    assert y.shape == ref_y.shape and y.dtype == ref_y.dtype
    np.testing.assert_allclose(y.numpy(), ref_y.numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(g, ref_g):
        assert a.shape == b.shape
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_compiled(family):
    """A compiled function fed a channels-last tensor computes what eager
    computes on the contiguous one (the plan reads the feed through its
    strides or a dense copy; docs/devices.md, "Memory format")."""
    fn, shapes = FAMILIES[family]
    x = _rand(SHAPE, 11)
    params = _params(shapes, 11)

    @dg.function
    def step(x, *params):
        with dg.GradientTape() as tape:
            tape.watch(x)
            y = fn(x, *params)
            s = ops.sum(y * y)
        return y, tape.gradient(s, x)

    ref_y, ref_g = step(x, *params)
    y, g = step(_cl(x), *params)
    np.testing.assert_allclose(y.numpy(), ref_y.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g.numpy(), ref_g.numpy(), rtol=1e-5, atol=1e-5)
    # And against eager on the contiguous input.
    ey, _ = _run_family(fn, x, params)
    np.testing.assert_allclose(ref_y.numpy(), ey.numpy(), rtol=1e-5, atol=1e-6)


def test_conv2d_against_numpy_float64():
    """The conv family on channels-last float64 against a direct float64
    NumPy convolution (not just against the contiguous run)."""
    x = _rand((2, 3, 5, 6), 21, dtype="float64")
    w = _rand((4, 3, 3, 3), 22, dtype="float64")
    y = ops.conv2d(_cl(x), _cl(w), pads=[1, 1])
    xp = np.pad(x.numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((2, 4, 5, 6))
    for i in range(5):
        for j in range(6):
            ref[:, :, i, j] = np.einsum("nchw,ochw->no", xp[:, :, i:i + 3, j:j + 3], w.numpy())
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-12, atol=1e-12)


def test_compiled_elementwise_on_channels_last_feed():
    @dg.function
    def f(a, b):
        return ops.relu(a * b + 1.0)

    a, b = _rand(SHAPE, 1), _rand(SHAPE, 2)
    ref = np.maximum(a.numpy().astype(np.float64) * b.numpy() + 1.0, 0)
    np.testing.assert_allclose(f(_cl(a), _cl(b)).numpy(), ref, rtol=1e-6)
    np.testing.assert_allclose(f(a, _cl(b)).numpy(), ref, rtol=1e-6)


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_training_steps_channels_last_match_contiguous(opt_name):
    """A small conv net trained a few steps (vm.torch: model and images
    channels-last, as torch's recipe) ends with the parameters of the
    contiguous run; the optimizer's updates of channels-last parameters are
    right whatever layout their results take."""
    def run(channels_last):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.BatchNorm2d(6),
                                torch.nn.ReLU(), torch.nn.Conv2d(6, 4, 3, stride=2),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(4, 3))
        x = torch.from_numpy(np.random.default_rng(1).standard_normal((4, 3, 8, 8))
                             .astype(np.float32))
        y = torch.from_numpy(np.array([0, 1, 2, 1]))
        if channels_last:
            m = m.to(memory_format=torch.channels_last)
            x = x.to(memory_format=torch.channels_last)
        opt = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) if opt_name == "SGD"
               else torch.optim.Adam(m.parameters(), lr=0.01))
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
        return [p.detach().numpy().copy() for p in m.parameters()], float(loss)

    ref, ref_loss = run(False)
    got, loss = run(True)
    assert abs(loss - ref_loss) < 1e-5
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_strides_and_rules_match_real_torch():
    """PyTorch itself (a test dependency) as the reference for the strides
    of each format and for the layout element-wise results take."""
    real = pytest.importorskip("torch")
    for shape in [(2, 3, 4, 5), (1, 3, 1, 1), (2, 1, 4, 5), (0, 3, 2, 2)]:
        a = real.zeros(shape).contiguous(memory_format=real.channels_last)
        b = torch.zeros(*shape).contiguous(memory_format=torch.channels_last)
        assert b.stride() == a.stride(), shape
        assert b.is_contiguous() == a.is_contiguous(), shape
    a5 = real.zeros(2, 3, 2, 4, 5).contiguous(memory_format=real.channels_last_3d)
    b5 = torch.zeros(2, 3, 2, 4, 5).contiguous(memory_format=torch.channels_last_3d)
    assert b5.stride() == a5.stride()
    xa = real.zeros(2, 3, 4, 5).contiguous(memory_format=real.channels_last)
    xb = torch.zeros(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    for fa, fb in [(lambda t, m: t + 1.0, None), (lambda t, m: m.relu(t), None),
                   (lambda t, m: t * m.ones(1, 3, 1, 1), None)]:
        assert fa(xb, torch).stride() == fa(xa, real).stride()
