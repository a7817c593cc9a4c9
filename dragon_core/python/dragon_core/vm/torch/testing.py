"""``torch.testing.assert_close`` over NumPy."""

import numpy as np


def assert_close(actual, expected, *, rtol=None, atol=None, check_dtype=True, msg=None):
    a = np.asarray(actual.detach().numpy() if hasattr(actual, "detach") else actual)
    b = np.asarray(expected.detach().numpy() if hasattr(expected, "detach") else expected)
    if check_dtype and hasattr(actual, "dtype") and hasattr(expected, "dtype"):
        assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    f32 = a.dtype.kind == "f" and a.dtype.itemsize <= 4
    rtol = rtol if rtol is not None else (1.3e-6 if f32 else 1e-7)
    atol = atol if atol is not None else (1e-5 if f32 else 1e-7)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=msg or "")
