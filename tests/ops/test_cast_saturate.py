"""Float -> integer Cast on cpu_eigen: truncation toward zero, saturation at
the integer type's range (±inf included) and NaN -> 0, for every integer
dtype and every float source dtype (docs/ops.md, Cast)."""
import numpy as np
import pytest

import dragon_core as dg

_INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def _expected(x: np.ndarray, dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    out = []
    for v in x.astype(np.float64).ravel():
        if np.isnan(v):
            out.append(0)
        elif v >= info.max:
            out.append(info.max)
        elif v <= info.min:
            out.append(info.min)
        else:
            out.append(int(np.trunc(v)))
    return np.array(out, dtype=dtype).reshape(x.shape)


@pytest.mark.parametrize("src", ["float32", "float64"])
@pytest.mark.parametrize("dtype", _INTS)
def test_float_to_int_truncates_saturates_and_maps_nan_to_zero(src, dtype):
    vals = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.99, -0.99, 2.7, -2.7,
            127.5, -128.5, 255.9, 256.0, 32767.9, -32769.0, 65535.5, 3e9, -3e9,
            4.3e9, 1e19, -1e19, 2e19, 1e30, -1e30]
    x = np.array(vals, dtype=src)
    got = dg.ops.cast(dg.tensor(x), dtype).numpy()
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, _expected(x, dtype))
