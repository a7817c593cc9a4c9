"""Test helpers for Dragon ops and plugins.

:func:`op_case` declares an op test against a NumPy reference (see
:mod:`dragon_sdk.testing.opcase`); :mod:`dragon_sdk.testing.plugin` is a
pytest plugin with the shared fixtures (``rng``, ``device``). Enable it in
the rootdir ``conftest.py`` with
``pytest_plugins = ["dragon_sdk.testing.plugin"]`` (or import the fixtures
into any ``conftest.py``).

Nothing here imports ``dragon_core`` at import time.
"""

from dragon_sdk.testing.opcase import (
    ALL_DTYPES,
    BASE_TOLERANCES,
    DEVICE_ENV,
    FLOAT_DTYPES,
    HALF_DTYPES,
    INT_DTYPES,
    LAYOUTS,
    NUMERIC_DTYPES,
    SIGNED_INT_DTYPES,
    OpCase,
    assert_close,
    default_device,
    dtype_name,
    infer_shape,
    is_float,
    numpy_dtype,
    op_case,
    op_function,
    run_op,
    strided,
    to_numpy,
    to_tensor,
    tolerances,
    upcast,
)
