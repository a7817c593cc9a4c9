"""A second device, "toy", registered by a plugin (fixtures/toy).

The toy device keeps its memory in host malloc but declares it not host
accessible, and its kernels and copies check that every pointer they get is a
live toy allocation: the core has to move data with the device's copy
functions and must never mix memory spaces or fall back to cpu kernels.
"""

from __future__ import annotations

import numpy as np
import pytest

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int16",
          "int32", "int64", "uint8", "bool"]


def _sample(dtype: str, shape=(2, 3)) -> np.ndarray:
    rng = np.random.default_rng(sum(map(ord, dtype)))
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype == "bfloat16":
        import ml_dtypes
        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype,
                            endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


def _on_toy(dg, array) -> object:
    t = dg.tensor(np.asarray(array)).to("toy")
    assert t.device.type == "toy", t.device
    return t


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_keeps_bytes(dg, toy, dtype):
    for shape in [(2, 3), (), (0, 4), (5,)]:
        x = _sample(dtype, shape)
        t = dg.tensor(x).to("toy")
        assert t.device.type == "toy" and t.device.index == 0
        assert str(t.device) == "toy:0"
        assert t.shape == x.shape and t.dtype.name == dtype
        back = t.to("cpu")
        assert back.device.type == "cpu"
        y = back.numpy()
        assert y.dtype == x.dtype and y.shape == x.shape
        assert y.tobytes() == x.tobytes(), (dtype, shape)


def test_round_trip_of_a_strided_view(dg, toy):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = x[::2, 1::2].T  # non-contiguous, transposed
    t = dg.from_numpy(view).to("toy")
    assert t.to("cpu").numpy().tobytes() == np.ascontiguousarray(view).tobytes()


@pytest.mark.parametrize("dtype", ["float32", "int16", "bool"])
def test_contiguous_runs_on_toy(dg, toy, dtype):
    report = dg.plugins.explain("Contiguous", "toy", dtype)
    winner = [line for line in report.splitlines() if "winner" in line]
    assert winner and "ToyContiguous" in winner[0], report
    x = _sample(dtype, (3, 4))
    y = dg.ops.contiguous(_on_toy(dg, x))
    assert y.device.type == "toy" and y.is_contiguous()
    assert y.to("cpu").numpy().tobytes() == x.tobytes()


@pytest.mark.parametrize("op, kernel, ref", [
    ("add", "toy_add_f32", np.add),
    ("mul", "toy_mul_f32", np.multiply),
])
def test_binary_ops_run_the_toy_kernel(dg, toy, op, kernel, ref):
    a, b = _sample("float32", (3, 5)), _sample("float32", (3, 5)) + 1
    report = dg.plugins.explain(op.capitalize(), "toy", "float32")
    assert kernel in report and "toy" in report, report
    winner = [line for line in report.splitlines() if "winner" in line]
    assert winner and kernel in winner[0], report
    y = getattr(dg.ops, op)(_on_toy(dg, a), _on_toy(dg, b))
    assert y.device.type == "toy" and y.dtype.name == "float32"
    np.testing.assert_array_equal(y.to("cpu").numpy(), ref(a, b))


def test_relu_runs_on_toy(dg, toy):
    x = _sample("float32", (7,))
    report = dg.plugins.explain("Relu", "toy", "float32")
    assert "toy" in report and "ToyRelu" in report, report
    y = dg.ops.relu(_on_toy(dg, x))
    assert y.device.type == "toy"
    np.testing.assert_array_equal(y.to("cpu").numpy(), np.maximum(x, 0))


def test_supports_predicate_refuses_broadcast(dg, toy):
    """toy Add only handles equal shapes (its supports() says so): a
    broadcast has no kernel on toy, and must not run anywhere else."""
    a = _on_toy(dg, _sample("float32", (2, 3)))
    b = _on_toy(dg, _sample("float32", (3,)))
    with pytest.raises(NotImplementedError) as info:
        dg.ops.add(a, b)
    assert isinstance(info.value, dg.errors.DragonError)
    assert "Add" in str(info.value) and "toy" in str(info.value)


def test_op_without_toy_kernel_raises_no_kernel_error(dg, toy):
    t = _on_toy(dg, _sample("float32", (4,)))
    with pytest.raises(dg.errors.NoKernelError) as info:
        dg.ops.exp(t)
    msg = str(info.value)
    assert isinstance(info.value, NotImplementedError)
    assert "Exp" in msg, msg                       # the op
    assert "toy" in msg, msg                       # the device asked for
    assert "float32" in msg, msg                   # the dtype
    assert "cpu" in msg, msg                       # where Exp IS registered
    assert "dragon-cpu-eigen" in msg, msg          # which wheel provides it


def test_dtype_without_toy_kernel_names_registered_dtypes(dg, toy):
    a = _on_toy(dg, _sample("float64", (4,)))
    with pytest.raises(dg.errors.NoKernelError) as info:
        dg.ops.add(a, a)
    msg = str(info.value)
    assert "Add" in msg and "toy" in msg and "float64" in msg, msg
    # What toy does have for Add: float32.
    assert "float32" in msg, msg


def test_no_silent_fallback_to_cpu(dg, toy):
    """Whatever fails on toy, nothing may come back computed on cpu."""
    t = _on_toy(dg, _sample("float32", (4,)))
    for op in ("exp", "neg", "sum"):
        with pytest.raises(dg.errors.DragonError):
            getattr(dg.ops, op)(t)


def test_mixing_devices_is_an_error_naming_both(dg, toy):
    x = _sample("float32", (2, 2))
    on_cpu, on_toy = dg.tensor(x), _on_toy(dg, x)
    for args in [(on_cpu, on_toy), (on_toy, on_cpu)]:
        with pytest.raises(dg.errors.InvalidArgumentError) as info:
            dg.ops.add(*args)
        msg = str(info.value)
        assert isinstance(info.value, ValueError)
        assert "cpu" in msg and "toy" in msg, msg


def test_toy_plugin_is_listed_as_loaded(dg, toy):
    assert toy.state == "loaded", toy
    assert toy.name == "toy" and toy.version == "0.2.0"
    names = [p.name for p in dg.plugins.list() if p.state == "loaded"]
    assert "toy" in names


def test_constant_folded_on_the_device_feeds_the_device(dg, toy):
    """Constant folding runs an op without inputs (a Fill) where the plan
    would, on the graph's device, and the folded constant is fed there: on
    the H100 a compiled ResNet step failed with "BatchNormGrad: inputs are on
    different devices (cuda:0 and cpu:0)" when the zero gradients of the
    batch statistics were folded on the host."""
    def fn(x):
        return x * dg.ops.fill([2, 3], 3.0, "float32", device="toy:0")

    x = dg.tensor(np.full((2, 3), 2.0, np.float32)).to("toy")
    for level in (0, 1, 3):
        f = dg.function(fn, opt_level=level)
        for _ in range(2):
            y = f(x)
            assert str(y.device) == "toy:0"
            np.testing.assert_array_equal(y.cpu().numpy(), np.full((2, 3), 6.0, np.float32))
        consts = f.get_graph(x).constant
        if level >= 1:
            assert [(c.name, c.device) for c in consts] == [("Fill_0:0", "toy:0")]
