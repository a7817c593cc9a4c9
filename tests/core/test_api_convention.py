"""Issue 19 points 1-2: one NumPy-style argument convention for
dragon_core.ops and Tensor methods, and explicit Tensor methods.

Every value is checked against a float64 NumPy reference; gradients against
central finite differences or the exact analytic value.
"""

import inspect

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import _opgen, plugin_api

REDUCTIONS = {
    "sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod,
    "var": np.var, "std": np.std,
    "logsumexp": lambda a, axis=None, keepdims=False: np.log(
        np.sum(np.exp(a), axis=axis, keepdims=keepdims)),
}
AXES = [None, 0, 1, -1, (0, 2), [1, 2], (0, 1, 2)]


def _rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduction_axis_int_or_tuple(name, axis, keepdims):
    a = _rand((2, 3, 4))
    np_axis = tuple(axis) if isinstance(axis, list) else axis
    ref = REDUCTIONS[name](a, axis=np_axis, keepdims=keepdims)
    x = dg.tensor(a)
    for out in (getattr(dg.ops, name)(x, axis=axis, keepdims=keepdims),
                getattr(x, name)(axis=axis, keepdims=keepdims),
                getattr(x, name)(axis, keepdims)):  # positional, as NumPy allows
        assert out.shape == np.shape(ref)
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_axis_across_dtypes_zero_d_and_empty(dtype):
    a = (np.arange(24).reshape(2, 3, 4) - 7).astype(dtype)
    x = dg.tensor(a)
    np.testing.assert_array_equal(x.sum(axis=1).numpy(), a.astype(np.float64).sum(axis=1))
    np.testing.assert_array_equal(x.max(axis=(0, 2)).numpy(), a.max(axis=(0, 2)))
    np.testing.assert_array_equal(x.min(axis=-1, keepdims=True).numpy(),
                                  a.min(axis=-1, keepdims=True))
    s = dg.tensor(np.array(2.5, dtype="float64"))  # 0-d
    assert s.sum().item() == 2.5 and s.sum(axis=None).shape == ()
    e = dg.tensor(np.zeros((0, 3), dtype="float64"))  # empty
    np.testing.assert_array_equal(e.sum(axis=0).numpy(), np.zeros(3))
    assert e.sum(axis=1, keepdims=True).shape == (0, 1)


def test_sum_axis_gradient_matches_finite_differences():
    a = _rand((3, 4), seed=1)
    w = _rand((3,), seed=2)

    def f(arr):
        return float(np.sum(np.sum(arr ** 2, axis=1) * w))

    x = dg.tensor(a)
    with dg.GradientTape() as tape:
        tape.watch([x])
        y = ((x * x).sum(axis=1) * dg.tensor(w)).sum()
    (g,) = tape.gradient(y, [x])
    eps = 1e-6
    num = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        d = np.zeros_like(a)
        d[i] = eps
        num[i] = (f(a + d) - f(a - d)) / (2 * eps)
    np.testing.assert_allclose(g.numpy(), num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("old, new", [("axes", "axis"), ("dims", "axis")])
def test_old_names_raise_naming_the_new_one(old, new):
    x = dg.tensor(_rand((2, 3)))
    for call in (lambda: x.sum(**{old: [1]}), lambda: dg.ops.mean(x, **{old: 1}),
                 lambda: dg.ops.squeeze(dg.tensor(_rand((1, 3))), **{old: [0]})):
        with pytest.raises(TypeError, match=f"'{old}=', which is now '{new}='"):
            call()


def test_transpose_perm_raises_naming_axes():
    with pytest.raises(TypeError, match="'perm=', which is now 'axes='"):
        dg.ops.transpose(dg.tensor(_rand((2, 3))), perm=[1, 0])


@pytest.mark.parametrize("torch_name, new", [("dim", "axis"), ("keepdim", "keepdims")])
def test_pytorch_names_raise_with_a_hint(torch_name, new):
    x = dg.tensor(_rand((2, 3)))
    with pytest.raises(TypeError,
                       match=f"PyTorch argument name '{torch_name}'.*'{new}='.*vm.torch"):
        x.sum(**{torch_name: 1})


def test_unknown_keyword_is_a_typeerror_with_suggestions():
    x = dg.tensor(_rand((2, 3)))
    with pytest.raises(TypeError, match="unexpected keyword argument 'keepdim_'.*keepdims"):
        x.sum(keepdim_=True)


def test_signatures_are_the_python_names():
    assert str(inspect.signature(dg.ops.sum)) == "(x, axis=None, keepdims=False)"
    assert str(inspect.signature(dg.ops.squeeze)) == "(x, axis=None)"
    assert str(inspect.signature(dg.ops.unsqueeze)) == "(x, axis)"
    assert str(inspect.signature(dg.ops.transpose)) == "(x, axes=None)"
    assert str(inspect.signature(dg.ops.slice)) == "(x, starts, ends, steps=None, axis=None)"
    assert "axis : int or sequence of int" in dg.ops.sum.__doc__
    # No generated op keeps a schema name that has a Python name.
    for desc in dg._C.list_ops():
        params = inspect.signature(getattr(dg.ops, desc["py_name"])).parameters
        for old in ("axes", "dims", "keep_dims", "dim", "keepdim"):
            if desc["name"] != "Transpose":
                assert old not in params, (desc["name"], old)


def test_squeeze_unsqueeze_take_an_int_axis():
    a = _rand((1, 3, 1))
    x = dg.tensor(a)
    np.testing.assert_array_equal(x.squeeze(axis=0).numpy(), np.squeeze(a, axis=0))
    np.testing.assert_array_equal(x.squeeze(axis=(0, 2)).numpy(), np.squeeze(a, axis=(0, 2)))
    np.testing.assert_array_equal(x.squeeze().numpy(), np.squeeze(a))
    np.testing.assert_array_equal(dg.ops.unsqueeze(x, 1).numpy(), np.expand_dims(a, 1))
    np.testing.assert_array_equal(dg.ops.unsqueeze(x, (0, -1)).numpy(),
                                  np.expand_dims(a, (0, -1)))


def test_slice_steps_optional():
    a = _rand((4, 5))
    x = dg.tensor(a)
    np.testing.assert_array_equal(dg.ops.slice(x, [1], [3]).numpy(), a[1:3])
    np.testing.assert_array_equal(dg.ops.slice(x, [1, 0], [3, 4]).numpy(), a[1:3, 0:4])
    np.testing.assert_array_equal(dg.ops.slice(x, [1], [5], axis=1).numpy(), a[:, 1:5])
    np.testing.assert_array_equal(dg.ops.slice(x, [4], [0], [-2], axis=1).numpy(),
                                  a[:, 4:0:-2])


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (2, 3, 4), (0, 2, 1)])
def test_transpose_as_numpy(shape):
    a = _rand(shape)
    x = dg.tensor(a)
    np.testing.assert_array_equal(x.transpose().numpy(), a.transpose())
    np.testing.assert_array_equal(x.T.numpy(), a.T)
    if len(shape) >= 2:
        perm = (1, 0) + tuple(range(2, len(shape)))
        np.testing.assert_array_equal(x.transpose(*perm).numpy(), a.transpose(*perm))
        np.testing.assert_array_equal(x.transpose(perm).numpy(), a.transpose(perm))
        np.testing.assert_array_equal(dg.ops.transpose(x, axes=perm).numpy(),
                                      np.transpose(a, axes=perm))
    with pytest.raises(Exception, match="Transpose"):
        x.transpose(*([0] * (len(shape) + 1)))


def test_transpose_gradient():
    a = _rand((2, 3, 4))
    w = _rand((4, 2, 3), seed=3)
    x = dg.tensor(a)
    with dg.GradientTape() as tape:
        tape.watch([x])
        y = (x.transpose(2, 0, 1) * dg.tensor(w)).sum()
    (g,) = tape.gradient(y, [x])
    np.testing.assert_array_equal(g.numpy(), w.transpose(1, 2, 0))


def test_gather_index_select_take_share_one_order():
    a = _rand((4, 5))
    idx = np.array([4, 0, -1], np.int64)
    x, i = dg.tensor(a), dg.tensor(idx)
    np.testing.assert_array_equal(dg.ops.gather(x, i, 1).numpy(), np.take(a, idx, axis=1))
    np.testing.assert_array_equal(dg.ops.index_select(x, i, 1).numpy(),
                                  np.take(a, idx, axis=1))
    i0 = np.array([3, 0], np.int64)
    np.testing.assert_array_equal(dg.ops.index_select(x, dg.tensor(i0)).numpy(),
                                  np.take(a, i0, axis=0))
    np.testing.assert_array_equal(dg.ops.take(x, i).numpy(), np.take(a, idx))
    idx2 = np.array([[1, 2], [3, 0]], np.int64)
    np.testing.assert_array_equal(dg.ops.take(x, dg.tensor(idx2), axis=0).numpy(),
                                  np.take(a, idx2, axis=0))
    for fn in (dg.ops.index_select, dg.ops.take):
        with pytest.raises(TypeError, match=r"\(x, indices, axis\)"):
            fn(x, 1, i)  # the old (x, axis, index) order


def test_gradient_update_and_layout_ops_are_not_methods():
    x = dg.ops.ones((2, 3))
    for name in ("adam_update", "sgd_update", "max_pool2d_grad", "conv2d_backprop_filter",
                 "layer_norm_grad", "nchw16c_from_nchw", "nchw_from_nchw16c",
                 "conv2d_nchw16c", "conv2d_bias_act", "mat_mul_bias_act"):
        assert not hasattr(x, name), name
    for name in ("sum", "mean", "exp", "softmax", "reshape", "transpose", "squeeze", "cast"):
        assert callable(getattr(x, name)), name
    for desc in dg._C.list_ops():
        if desc["name"].endswith(_opgen.NOT_METHOD_SUFFIXES):
            assert not hasattr(dg.Tensor, desc["py_name"]), desc["name"]


def test_set_tensor_method_through_plugin_api():
    x = dg.ops.ones((2, 3))
    try:
        plugin_api.set_tensor_method("Exp", False)
        assert not hasattr(x, "exp")
        plugin_api.set_tensor_method("SgdUpdate", True)
        assert hasattr(x, "sgd_update")
    finally:
        _opgen.TENSOR_METHOD.pop("Exp", None)
        _opgen.TENSOR_METHOD.pop("SgdUpdate", None)
        dg._tensor._install_methods()
    assert hasattr(x, "exp") and not hasattr(x, "sgd_update")
    np.testing.assert_allclose(x.exp().numpy(), np.exp(np.ones((2, 3))), rtol=1e-6)
    with pytest.raises(TypeError, match="bool"):
        plugin_api.set_tensor_method("Exp", 1)


def test_new_ops_get_the_convention_by_schema_name():
    names = {"axes": "axis", "keep_dims": "keepdims", "perm": "perm"}
    for schema, py in names.items():
        assert _opgen.py_attr_name("SomeNewOp", schema) == py
    assert _opgen.py_attr_name("Transpose", "perm") == "axes"
