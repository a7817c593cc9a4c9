"""Expm1 (y = e^x - 1), the op added through the element-wise op table only
(sdk/include/dragon/elementwise.h): against float64 NumPy on every float
dtype and ELEMENTWISE_SHAPES (0-d, empty, large), special values, and
fusion (its opcode equals the eager op bit for bit; a traced chain with it
fuses). Gradients: tests/grad/test_grad_expm1.py."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import ops
from dragon_sdk.testing import FLOAT_DTYPES, HALF_DTYPES, OpCase, op_case

from ._common import ELEMENTWISE_SHAPES, sample

DTYPES = FLOAT_DTYPES + HALF_DTYPES


@op_case("Expm1", inputs=lambda rng, dt, s: [sample(rng, dt, s, -5.0, 5.0)],
         reference=np.expm1, dtypes=DTYPES, shapes=ELEMENTWISE_SHAPES)
def test_expm1_matches_numpy(case):
    """Expm1 matches np.expm1 on [-5, 5] for every float dtype and shape."""
    case.check_forward()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_expm1_special_values_and_small_arguments(dtype):
    """Limits, signed zeros, overflow, and full relative accuracy for tiny x
    (where exp(x) - 1 would cancel to 0)."""
    tiny = 1e-30 if dtype == "float32" else 1e-300
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, 1e-8, -1e-8,
                  1000.0, -1000.0], dtype)
    with np.errstate(all="ignore"):
        out = OpCase.of("Expm1", [x], np.expm1).check_forward()[0]
        want = np.expm1(x.astype(np.float64)).astype(dtype)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_allclose(out[finite], want[finite], rtol=2e-7 if dtype == "float32"
                               else 1e-15, atol=0)
    np.testing.assert_array_equal(np.signbit(out[3:5]), [False, True])
    assert out[5] == x[5] and out[6] == x[6]  # expm1(x) = x below an ulp of 1


def test_expm1_python_name_and_errors():
    x = dg.tensor(np.array([0.5, -0.25]))
    np.testing.assert_allclose(ops.expm1(x).numpy(), np.expm1([0.5, -0.25]), rtol=1e-15)
    with pytest.raises(dg.errors.DragonError, match="Expm1"):
        ops.expm1(dg.tensor(np.array([1, 2], np.int32)))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_expm1_opcode_equals_the_op(dtype):
    from dragon_core._graph.passes import fusion as module

    code = module.UNARY["Expm1"]
    rng = np.random.default_rng(42)
    x = np.concatenate([rng.uniform(-30, 30, 2000), [0.0, -0.0, np.inf, -np.inf, np.nan,
                                                     1e-30, 100.0]]).astype(dtype)
    with np.errstate(all="ignore"):
        got = np.asarray(ops.fused_elementwise([dg.tensor(x)], [code, 1, 0, -1], [], -1))
        np.testing.assert_array_equal(got, ops.expm1(dg.tensor(x)).numpy())


def test_traced_chain_with_expm1_fuses_and_matches_eager():
    def f(x, y):
        return ops.expm1(ops.tanh(x) * y) + ops.log1p(ops.abs(y))

    rng = np.random.default_rng(3)
    x = dg.tensor(rng.uniform(-2, 2, (5, 4)))
    y = dg.tensor(rng.uniform(-2, 2, (5, 4)))
    fn = dg.function(f)
    types = [op.type for op in fn.get_graph(x, y).op]
    assert types == ["FusedElementwise"], types
    got = np.asarray(fn(x, y))
    np.testing.assert_array_equal(got, np.asarray(f(x, y)))
    xv, yv = x.numpy(), y.numpy()
    np.testing.assert_allclose(got, np.expm1(np.tanh(xv) * yv) + np.log1p(np.abs(yv)),
                               rtol=1e-14)
