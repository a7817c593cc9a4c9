"""The FusedElementwise opcodes of the ops added for ONNX (22..31 Tan, Asin,
Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Erf; 39..41 FloorDivide, Mod,
Fmod): each equals its eager op bit for bit (special values, broadcasting,
constants), matches NumPy in float64, and a traced function using them fuses
into one op."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import ops
from dragon_sdk.testing import FLOAT_DTYPES

_erf = np.vectorize(math.erf, otypes=[np.float64])

UNARY = {22: ("tan", np.tan), 23: ("asin", np.arcsin), 24: ("acos", np.arccos),
         25: ("atan", np.arctan), 26: ("sinh", np.sinh), 27: ("cosh", np.cosh),
         28: ("asinh", np.arcsinh), 29: ("acosh", np.arccosh), 30: ("atanh", np.arctanh),
         31: ("erf", _erf)}
BINARY = {39: ("floor_divide", np.floor_divide), 40: ("mod", np.remainder),
          41: ("fmod", np.fmod)}

_SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1.0, -1.0, 100.0, -100.0,
             0.5, 2.5, -2.5]


def fused(inputs, program, constants=()):
    return np.asarray(ops.fused_elementwise([dg.tensor(x) for x in inputs], program,
                                            list(constants), -1))


def test_pass_knows_the_opcodes():
    from dragon_core._graph.passes import fusion as module

    for code, (name, _) in {**UNARY, **BINARY}.items():
        op = dg._C.op(name).name
        assert (module.UNARY.get(op) or module.BINARY.get(op)) == code


@pytest.mark.parametrize("dt", FLOAT_DTYPES)
@pytest.mark.parametrize("opcode", sorted(UNARY))
def test_unary_opcode_equals_its_op(opcode, dt):
    name, ref = UNARY[opcode]
    rng = np.random.default_rng(opcode)
    x = np.concatenate([rng.uniform(-3, 3, 1500), _SPECIALS]).astype(dt)
    with np.errstate(all="ignore"):
        got = fused([x], [opcode, 1, 0, -1])
        np.testing.assert_array_equal(got, getattr(ops, name)(dg.tensor(x)).numpy())
        if dt == "float64":
            np.testing.assert_allclose(got, ref(x), rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("dt", FLOAT_DTYPES)
@pytest.mark.parametrize("opcode", sorted(BINARY))
def test_binary_opcode_equals_its_op(opcode, dt):
    name, ref = BINARY[opcode]
    fn = getattr(ops, name)
    rng = np.random.default_rng(opcode)
    a = np.concatenate([rng.uniform(-9, 9, 700), _SPECIALS]).astype(dt).reshape(-1, 1)
    b = np.concatenate([rng.uniform(-4, 4, 20), [0.0, -0.0, 2.0, np.inf, np.nan]]).astype(dt)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(fused([a, b], [opcode, 2, 0, 1]),
                                      fn(dg.tensor(a), dg.tensor(b)).numpy())
        np.testing.assert_array_equal(fused([a, b], [opcode, 2, 1, 0]),
                                      fn(dg.tensor(b), dg.tensor(a)).numpy())
        np.testing.assert_array_equal(fused([a], [opcode, 2, 0, 1], [2.5]),
                                      fn(dg.tensor(a), dg.tensor(np.array(2.5, dt))).numpy())
        if dt == "float64":
            np.testing.assert_array_equal(fused([a, b], [opcode, 2, 0, 1]), ref(a, b))


def test_function_fuses_the_new_ops_and_matches_eager():
    def f(x, y):
        return ops.erf(ops.atan(x) * ops.mod(y, x + 4.0)) + ops.asinh(ops.fmod(y, 1.5))

    rng = np.random.default_rng(5)
    x = dg.tensor(rng.uniform(-2, 2, (4, 3)))
    y = dg.tensor(rng.uniform(-5, 5, (4, 3)))
    fn = dg.function(f)
    types = [op.type for op in fn.get_graph(x, y).op]
    assert types == ["FusedElementwise"], types
    np.testing.assert_array_equal(np.asarray(fn(x, y)), np.asarray(f(x, y)))
