"""Test helpers for Dragon ops and plugins.

:func:`op_case` declares an op test against a NumPy reference (see
:mod:`dragon_sdk.testing.opcase`); :mod:`dragon_sdk.testing.plugin` is a
pytest plugin with the shared fixtures (``rng``, ``device``). Enable it in
the rootdir ``conftest.py`` with
``pytest_plugins = ["dragon_sdk.testing.plugin"]`` (or import the fixtures
into any ``conftest.py``).

Conformance checks (docs/sdk-testing.md), each a plain function raising
AssertionError: :func:`audit_plugin_so` (exports/imports/declared ABI of a
plugin ``.so``), :func:`check_schema_kernel_consistency`,
:func:`check_numerics`, :func:`check_bad_inputs` (in a child process, so a
crash is a failure) and :func:`check_eager_vs_graph`; gradients against
finite differences are :meth:`OpCase.check_grad` (``order=1`` or ``2``).
The pytest fixture ``dragon_checks`` binds them to the device under test.

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
    WIDE_UINT_DTYPES,
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
from dragon_sdk.testing.audit import (
    ENTRY_SYMBOL,
    PluginAudit,
    audit_plugin_so,
    inspect_plugin_so,
    read_plugin_info,
)
from dragon_sdk.testing.badinputs import check_bad_inputs
from dragon_sdk.testing.checks import (
    check_eager_vs_graph,
    check_numerics,
    check_schema_kernel_consistency,
    kernel_dtypes,
)
