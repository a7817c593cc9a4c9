"""In-place ops whose result dtype cannot be cast back to ``self``'s (by
category bool < integer < float) raise as in torch 2.13: an integer result
written into a bool tensor was silently truncated to bool. The in-place
forms of atan2, bitwise ops, shifts, copysign and xlogy exist as in torch."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
import dragon_core.vm.torch as vt  # noqa: E402

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
          "float64"]
VALS = [1, 0, 1, 3, 2]
OPS = ["add_", "sub_", "mul_", "div_", "floor_divide_", "remainder_", "fmod_", "pow_",
       "atan2_", "bitwise_and_", "bitwise_or_", "bitwise_xor_", "bitwise_left_shift_",
       "bitwise_right_shift_", "copysign_", "xlogy_", "hypot_", "eq_", "lt_", "__iadd__",
       "__imul__", "__isub__", "__itruediv__",
       # the operators write through _inplace itself (bool_x &= uint8_y computed)
       "__iand__", "__ior__", "__ixor__", "__ifloordiv__", "__imod__", "__ilshift__",
       "__irshift__", "__ipow__"]


def _t(lib, dt, zero_d=False):
    t = lib.tensor(VALS, dtype=lib.float64).to(getattr(lib, dt))
    return t[3] if zero_d else t


@pytest.mark.parametrize("op", OPS)
def test_inplace_dtype_rule_as_torch(op):
    cases = [(a, b, z) for a, b in itertools.product(DTYPES, DTYPES) for z in (False, True)]
    cases += [(a, s, None) for a in DTYPES for s in (2, 2.5, True)]
    for a, b, z in cases:
        args = {}
        for lib in (torch, vt):
            x = _t(lib, a)
            y = b if z is None else _t(lib, b, z)
            try:
                out = getattr(x, op)(y)
                args[lib] = (None, out)
            except Exception as e:  # noqa: BLE001 (compared by kind below)
                args[lib] = (e, None)
        (te, tr), (oe, orr) = args[torch], args[vt]
        what = f"{op} {a} with {b} (0-d: {z})"
        if te is not None:
            assert oe is not None, f"{what}: torch raises {te!r}, ours computes {orr}"
            continue
        assert oe is None, f"{what}: ours raises {oe!r}"
        assert str(orr.dtype) == str(tr.dtype), what
        np.testing.assert_allclose(orr.double().numpy(), tr.double().numpy(), rtol=1e-2,
                                   equal_nan=True, err_msg=what)


def test_error_names_the_dtypes():
    x = vt.tensor([True, False])
    with pytest.raises(RuntimeError, match="add_: result type int64 can't be cast to the desired "
                                           "output type bool"):
        x.add_(2)


def test_operator_error_names_torch_scalar_types():
    x = vt.tensor([True, False])
    with pytest.raises(RuntimeError, match="result type Byte can't be cast to the desired "
                                           "output type Bool"):
        x &= vt.tensor([1, 0]).to(vt.uint8)
    assert x.tolist() == [True, False]
