"""Declarative op test cases: one decorator per op, checked against NumPy.

An op test states *what* the op should compute (a NumPy reference run in
float64) and *where* to look (dtypes, attributes, shapes, memory layouts);
this module does the rest: builds the inputs, runs ``dragon_core.ops.<name>``
on the test device, compares values with dtype-appropriate tolerances, checks
the output dtype, checks that shape inference agrees with the tensor the
kernel produced, and checks that the op left its inputs untouched.

>>> import numpy as np
>>> from dragon_sdk.testing import op_case
>>> @op_case("Softplus",
...          inputs=lambda rng, dt: [rng.standard_normal((3, 4)).astype(dt)],
...          attrs=[{}, {"beta": 2.0}],
...          reference=lambda x, beta=1.0, threshold=20.0:
...              np.log1p(np.exp(beta * x)) / beta,
...          dtypes=["float32", "float64"])
... def test_softplus(case):
...     case.check_forward()

The decorated test is parametrized over ``dtypes x attrs x shapes x layouts``
and receives an :class:`OpCase` as its ``case`` argument.

The test device is ``"cpu"`` unless the environment variable
``DRAGON_TEST_DEVICE`` names another registered device, so one suite runs per
device. ``dragon_core`` is imported lazily, inside the functions that need it,
so importing this module (and collecting tests) never loads the runtime.

Gradient checks: ``case.check_grad(wrt=[0])`` compares the op's gradient rule
with central finite differences in float64; ``case.check_grad(order=2)``
checks a Hessian-vector product through nested tapes (the rule is itself
differentiable and right).
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import os
import re
import warnings
import zlib
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

#: Environment variable naming the device the op suite runs on.
DEVICE_ENV = "DRAGON_TEST_DEVICE"

# Dtype groups of docs/ops.md, as the kernels must cover them: "float" is
# float32 and float64 (schemas also admit the 16-bit floats, where a plugin
# may add kernels), "numeric" adds the integers, "all" adds bool.
FLOAT_DTYPES = ("float32", "float64")
SIGNED_INT_DTYPES = ("int8", "int16", "int32", "int64")
INT_DTYPES = SIGNED_INT_DTYPES + ("uint8",)
# ABI 1.4: like DG_MASK_UINT_WIDE, kept out of INT_DTYPES / ALL_DTYPES so
# that a plugin's suite written for the ten 1.0 dtypes keeps its meaning.
WIDE_UINT_DTYPES = ("uint16", "uint32", "uint64")
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES
ALL_DTYPES = NUMERIC_DTYPES + ("bool",)
#: The 16-bit floats (bfloat16 through ml_dtypes on the NumPy side).
HALF_DTYPES = ("float16", "bfloat16")

#: Base (rtol, atol) per floating dtype, for a correctly rounded operation.
#: Ops built from transcendental functions or long accumulations pass
#: ``tol=`` to scale both.
BASE_TOLERANCES = {
    "float16": (1e-3, 1e-3),
    "bfloat16": (1e-2, 1e-2),
    "float32": (1e-5, 1e-6),
    "float64": (1e-12, 1e-14),
}

#: Layouts an input can be handed to the op in.
LAYOUTS = ("contiguous", "strided")


# --------------------------------------------------------------- utilities


def default_device() -> str:
    """Return the device the op tests run on (``$DRAGON_TEST_DEVICE``)."""
    return os.environ.get(DEVICE_ENV, "cpu") or "cpu"


def dtype_name(dtype: Any) -> str:
    """Return the canonical name of a NumPy, Dragon or string dtype."""
    if isinstance(dtype, str):
        return "bool" if dtype in ("bool_", "bool") else dtype
    name = getattr(dtype, "name", None)
    if isinstance(name, str):
        return "bool" if name == "bool_" else name
    return np.dtype(dtype).name


def numpy_dtype(name: str) -> np.dtype:
    """Return the NumPy dtype for a Dragon dtype name (bfloat16 via ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype("bool" if name == "bool" else name)


def is_float(name: str) -> bool:
    """Return True for floating dtype names."""
    return name in BASE_TOLERANCES


def tolerances(dtype: str, tol: float = 1.0) -> tuple[float, float]:
    """Return ``(rtol, atol)`` for comparing a ``dtype`` result with float64.

    Integer and bool results are compared exactly: ``(0.0, 0.0)``.
    """
    if not is_float(dtype):
        return 0.0, 0.0
    rtol, atol = BASE_TOLERANCES[dtype]
    return rtol * tol, atol * tol


def upcast(array: np.ndarray) -> np.ndarray:
    """Return the array the reference computes on.

    Floating arrays become float64, integer arrays int64 (exact, and wrapping
    back to the narrow type with ``astype`` matches two's complement kernel
    arithmetic), bool stays bool.
    """
    array = np.asarray(array)
    name = dtype_name(array.dtype)
    if is_float(name):
        return array.astype(np.float64)
    if array.dtype.kind in "iu":
        return array.astype(np.int64)
    return array.copy()


def strided(array: np.ndarray) -> np.ndarray:
    """Return a non-contiguous view holding the same values as ``array``.

    The view is column-major and steps over every other element of its last
    axis, so a kernel that ignores strides reads the wrong values. 0-d arrays
    are returned as they are (they have no strides to get wrong).
    """
    array = np.asarray(array)
    if array.ndim == 0:
        return array
    shape = array.shape[:-1] + (2 * array.shape[-1],)
    buffer = np.zeros(shape, dtype=array.dtype, order="F")
    view = buffer[..., ::2]
    view[...] = array
    return view


def to_tensor(value: Any, device: str | None = None):
    """Turn a NumPy array (or a list of them) into Dragon tensors on ``device``.

    Arrays cross zero-copy with ``from_numpy`` (keeping their strides);
    anything that is not an array (a Python scalar, a Tensor) is returned as
    it is.
    """
    import dragon_core as dg

    device = device or default_device()
    if isinstance(value, (list, tuple)):
        return [to_tensor(v, device) for v in value]
    if not isinstance(value, np.ndarray):
        return value
    tensor = dg.from_numpy(value)
    if device != "cpu":
        tensor = tensor.to(device)
    return tensor


def to_numpy(value: Any) -> Any:
    """Turn a Dragon tensor (or a list of them) into NumPy arrays on the host."""
    if isinstance(value, (list, tuple)):
        return [to_numpy(v) for v in value]
    if value.device.type != "cpu":
        value = value.cpu()
    return np.array(value.numpy(), copy=True)


def run_op(op: str, *inputs: Any, device: str | None = None, **attrs: Any):
    """Run ``dragon_core.ops.<op>`` on NumPy inputs; return NumPy outputs.

    ``op`` is the Python name (``"add"``) or the schema name (``"Add"``).
    """
    fn = op_function(op)
    return to_numpy(fn(*(to_tensor(x, device) for x in inputs), **py_attrs(op, attrs)))


def py_attrs(op: str, attrs: dict) -> dict:
    """``attrs`` (schema names, as ``infer_shape`` and the kernels read them)
    keyed by the Python argument names of ``dragon_core.ops.<op>``
    (``axes`` -> ``axis``); names that are not schema attributes pass as they
    are. Cores before the Python-name convention have no mapping."""
    try:
        from dragon_core.plugin_api import py_attrs as _py_attrs
    except ImportError:
        return dict(attrs)
    return _py_attrs(op, attrs)


def op_function(op: str) -> Callable:
    """Return the ``dragon_core.ops`` function for a schema or Python name."""
    import dragon_core as dg

    fn = getattr(dg.ops, op, None)
    if fn is None:
        fn = getattr(dg.ops, py_name_of(op))
    return fn


def py_name_of(op: str) -> str:
    """Return the Python name of op ``op`` (schema name or py name).

    Asks the schema registry when the core exposes it, else converts the
    CamelCase name to snake_case the way the SDK's ``OpSchema`` does.
    """
    try:
        schema = _schema(op)
    except Exception:  # noqa: BLE001 - the registry is optional here
        schema = None
    name = getattr(schema, "py_name", None)
    if isinstance(name, str) and name:
        return name
    if op.islower():
        return op
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_",
                  op).lower()


def _schema(op: str):
    """The registry's description of ``op`` (a dict with ``py_name``...)."""
    import dragon_core as dg

    return _Described(dg.plugin_api.op_schema(op))


class _Described:
    def __init__(self, desc: Mapping[str, Any]):
        self.py_name = desc.get("py_name")
        self.name = desc.get("name")
        self.inputs = desc.get("inputs", [])


def infer_shape(op: str, inputs: Any, attrs: Mapping[str, Any]):
    """Return ``[(shape, dtype_name), ...]`` from the core's shape inference.

    ``inputs`` are tensors (or lists of tensors for a variadic input), in
    schema order, as given to the op; only their shapes and dtypes are used.
    """
    import dragon_core as dg

    metas = [(tuple(int(d) for d in t.shape), t.dtype)
             for t in _flatten(inputs)]
    result = dg.infer_shape(op, metas, **dict(attrs))
    return [(tuple(int(d) for d in shape), dtype_name(dtype))
            for shape, dtype in result]


def assert_close(actual: Any, expected: Any, dtype: str | None = None, *,
                 tol: float = 1.0, rtol: float | None = None,
                 atol: float | None = None, err_msg: str = "") -> None:
    """Assert that a result equals a float64 (or exact) reference.

    Floating results are compared in float64 with :func:`tolerances` (NaN
    equals NaN, infinities must match in sign); integer and bool results
    must be equal after casting the reference to ``dtype`` (wrapping as the
    kernel's two's complement arithmetic does).
    """
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    dtype = dtype or dtype_name(actual.dtype)
    if actual.shape != expected.shape:
        raise AssertionError(f"{err_msg}: shape {actual.shape} != expected "
                             f"{expected.shape}")
    if is_float(dtype):
        r, a = tolerances(dtype, tol)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            # Round the reference to the result's dtype first: a value beyond
            # float32's range must come out as inf there.
            want = expected.astype(numpy_dtype(dtype)).astype(np.float64)
        np.testing.assert_allclose(
            actual.astype(np.float64), want,
            rtol=r if rtol is None else rtol, atol=a if atol is None else atol,
            equal_nan=True, err_msg=err_msg)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            want = expected.astype(numpy_dtype(dtype))
        np.testing.assert_array_equal(actual, want, err_msg=err_msg)


# ----------------------------------------------------------------- the case


def _map_arrays(fn: Callable[[np.ndarray], Any], value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_map_arrays(fn, v) for v in value]
    if isinstance(value, np.ndarray):
        return fn(value)
    return value


def _as_array(value: Any) -> Any:
    """NumPy scalars become 0-d arrays; Python scalars stay as they are."""
    if isinstance(value, (list, tuple)):
        return [_as_array(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    return value


def _short(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_short(v) for v in value) + "]"
    return str(value)


def _attrs_id(attrs: Mapping[str, Any]) -> str:
    if not attrs:
        return "default"
    return ",".join(f"{k}={_short(v)}" for k, v in attrs.items())


def _all_scalar(shape: Any) -> bool:
    if any(isinstance(d, (list, tuple)) for d in shape):
        return all(_all_scalar(s) for s in shape)
    return len(shape) == 0


def _shape_id(shape: Any) -> str:
    if shape is None:
        return ""
    if any(isinstance(d, (list, tuple)) for d in shape):
        return "_".join(_shape_id(s) for s in shape)
    return "x".join(str(d) for d in shape) if len(shape) else "scalar"


@dataclasses.dataclass
class OpCase:
    """One parametrization of an op test: op, dtype, attrs, shape, layout.

    Attributes
    ----------
    op : str
        Schema name (``"Softplus"``).
    dtype : str
        The dtype the inputs are generated in (the ``dt`` given to
        ``inputs``).
    attrs : dict
        Attributes passed to the op and to the reference.
    shape : tuple of int or None
        The shape given to ``inputs`` when the test lists ``shapes``.
    layout : str
        ``"contiguous"``, ``"strided"`` (inputs are non-contiguous views) or
        ``"given"`` (:meth:`OpCase.of`: the inputs exactly as passed).
    device : str
        The device the op runs on.
    """

    op: str
    dtype: str
    attrs: dict
    shape: tuple | None
    layout: str
    device: str
    make_inputs: Callable
    reference: Callable | None
    out_dtype: Any = None
    tol: float = 1.0
    rtol: float | None = None
    atol: float | None = None
    py_name: str | None = None
    id: str = ""
    _arrays: list | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def of(cls, op: str, inputs: Sequence[Any],
           reference: Callable | None = None, *,
           attrs: Mapping[str, Any] | None = None, dtype: str | None = None,
           **options: Any) -> "OpCase":
        """Build a one-off case with fixed inputs (special values, edge cases).

        Parameters
        ----------
        op : str
            Schema name.
        inputs : list
            NumPy arrays (or lists of arrays for a variadic input), used as
            they are (their layout included).
        reference : callable, optional
            As for :func:`op_case`.
        attrs : dict, optional
            Attributes for the op and the reference.
        dtype : str, optional
            The case dtype (the default expected output dtype); defaults to
            the first input's dtype, or ``attrs["dtype"]`` for ops without
            inputs.
        **options
            ``out_dtype``, ``tol``, ``rtol``, ``atol``, ``py_name``,
            ``device``, as for :func:`op_case`.
        """
        fixed = _as_array(list(inputs))
        attrs = dict(attrs or {})
        if dtype is None:
            flat = _flatten(fixed)
            if flat:
                dtype = dtype_name(flat[0].dtype)
            else:
                dtype = dtype_name(attrs.get("dtype", "float32"))
        device = options.pop("device", None) or default_device()
        case = cls(op=op, dtype=dtype_name(dtype), attrs=attrs, shape=None,
                   layout="given", device=device,
                   make_inputs=lambda rng, dt: fixed, reference=reference,
                   id=f"{dtype_name(dtype)}-{_attrs_id(attrs)}", **options)
        case._arrays = fixed
        return case

    # -- inputs ------------------------------------------------------------

    @property
    def rng(self) -> np.random.Generator:
        """A generator seeded from the case id: the same inputs every run."""
        return np.random.default_rng(zlib.crc32(f"{self.op}/{self.id}".encode()))

    def arrays(self) -> list:
        """The NumPy inputs (in the case's layout), generated once."""
        if self._arrays is None:
            args = (self.rng, self.dtype)
            if self.shape is not None:
                args += (self.shape,)
            kwargs = {}
            if _takes(self.make_inputs, "attrs"):
                kwargs["attrs"] = self.attrs
            made = _as_array(list(self.make_inputs(*args, **kwargs)))
            if self.layout == "strided":
                made = _map_arrays(strided, made)
            self._arrays = made
        return self._arrays

    def tensors(self) -> list:
        """The inputs as Dragon tensors on the case's device."""
        return [to_tensor(a, self.device) for a in self.arrays()]

    # -- running -----------------------------------------------------------

    def function(self) -> Callable:
        """The ``dragon_core.ops`` function under test."""
        return op_function(self.py_name or self.op)

    def run(self) -> Any:
        """Run the op; return its output tensor(s)."""
        return self.function()(*self.tensors(), **py_attrs(self.op, self.attrs))

    def expected(self) -> list:
        """Run the reference on float64 / int64 copies of the inputs."""
        if self.reference is None:
            raise ValueError(f"{self.op}: this case has no reference")
        upcast_inputs = _map_arrays(upcast, self.arrays())
        with np.errstate(all="ignore"), warnings.catch_warnings():
            # NumPy warns on empty means etc.; the NaN it returns is the
            # expected value.
            warnings.simplefilter("ignore", RuntimeWarning)
            result = self.reference(*upcast_inputs, **self.attrs)
        if isinstance(result, (list, tuple)):
            return [np.asarray(r) for r in result]
        return [np.asarray(result)]

    def expected_dtype(self, index: int = 0) -> str:
        """The dtype output ``index`` must have.

        ``out_dtype`` may be a dtype name, a callable taking the case dtype
        (or the case dtype and the attributes), a list (one entry per
        output) or None (= the case dtype, the rule of every "same dtype"
        op).
        """
        rule = self.out_dtype
        if isinstance(rule, (list, tuple)):
            rule = rule[index]
        if rule is None:
            return self.dtype
        if callable(rule) and not isinstance(rule, (str, np.dtype, type)):
            if len(inspect.signature(rule).parameters) >= 2:
                rule = rule(self.dtype, self.attrs)
            else:
                rule = rule(self.dtype)
        return dtype_name(rule)

    # -- checks ------------------------------------------------------------

    def check_forward(self) -> list:
        """Run the op and check it against the reference.

        Checks, for every output: the shape equals the reference's; the dtype
        equals :meth:`expected_dtype`; the values match within tolerance;
        shape inference (``dragon_core.infer_shape``) predicted exactly that
        shape and dtype. Also checks that the op did not write to its inputs.

        Returns
        -------
        list of numpy.ndarray
            The op's outputs, for further checks by the test.
        """
        arrays = self.arrays()
        before = _map_arrays(np.copy, arrays)
        tensors = [to_tensor(a, self.device) for a in arrays]
        out = self.function()(*tensors, **py_attrs(self.op, self.attrs))
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        expected = self.expected()
        where = f"{self.op}[{self.id}]"
        assert len(outs) == len(expected), (
            f"{where}: {len(outs)} outputs, reference gave {len(expected)}")

        inferred = infer_shape(self.op, tensors, self.attrs)
        assert len(inferred) == len(outs), (
            f"{where}: shape inference declared {len(inferred)} outputs, "
            f"the op returned {len(outs)}")

        results = []
        for i, (tensor, want) in enumerate(zip(outs, expected)):
            got = to_numpy(tensor)
            got_dtype = dtype_name(tensor.dtype)
            assert tuple(tensor.shape) == tuple(got.shape), (
                f"{where}: output {i} Tensor.shape {tuple(tensor.shape)} "
                f"disagrees with its NumPy view {got.shape}")
            assert got_dtype == self.expected_dtype(i), (
                f"{where}: output {i} has dtype {got_dtype}, expected "
                f"{self.expected_dtype(i)}")
            assert inferred[i] == (tuple(got.shape), got_dtype), (
                f"{where}: shape inference said {inferred[i]}, the kernel "
                f"produced {(tuple(got.shape), got_dtype)}")
            assert_close(got, want, got_dtype, tol=self.tol, rtol=self.rtol,
                         atol=self.atol, err_msg=f"{where} output {i}")
            results.append(got)

        after = _map_arrays(np.copy, arrays)
        for i, (b, a) in enumerate(zip(_flatten(before), _flatten(after))):
            np.testing.assert_array_equal(
                a, b, err_msg=f"{where}: the op modified input {i}")
        return results

    # -- gradients -----------------------------------------------------------

    def _grad_inputs(self, wrt: Sequence[int] | None) -> list:
        desc = _schema(self.op)
        if wrt is not None:
            return list(wrt)
        out = []
        for i, a in enumerate(_flatten(self.arrays())):
            spec = desc.inputs[min(i, len(desc.inputs) - 1)]
            if not spec["no_grad"] and a.dtype.kind == "f":
                out.append(i)
        return out

    def _loss_fn(self, cotangents_seed: int):
        """L(xs) = sum_i <out_i(xs), c_i> in float64 with fixed random c_i."""
        import dragon_core as dg
        fn = self.function()

        structure = [len(a) if isinstance(a, (list, tuple)) else None for a in self.arrays()]

        def regroup(flat):
            """Flat tensors back into the op's arguments (variadic lists)."""
            args, k = [], 0
            for n in structure:
                if n is None:
                    args.append(flat[k])
                    k += 1
                else:
                    args.append(list(flat[k:k + n]))
                    k += n
            return args

        def loss(tensors, quadratic=False):
            out = fn(*regroup(tensors), **py_attrs(self.op, self.attrs))
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            rng = np.random.default_rng(cotangents_seed)
            total = None
            for o in outs:
                if not o.dtype.is_floating_point:
                    continue
                c = dg.tensor(rng.standard_normal(o.shape).astype(np.float64), device=self.device)
                term = dg.ops.sum(o * c)
                if quadratic:
                    # Curvature even for linear ops, so order 2 checks something.
                    d = dg.tensor(rng.standard_normal(o.shape).astype(np.float64),
                                  device=self.device)
                    term = term + dg.ops.sum(o * o * d)
                total = term if total is None else total + term
            return total
        return loss

    def _float64_arrays(self) -> list:
        arrays = [np.array(a, copy=True) for a in _flatten(self.arrays())]
        return [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]

    def check_grad(self, wrt: Sequence[int] | None = None, *, order: int = 1,
                   eps: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-7) -> None:
        """Check the op's gradient rule against central finite differences.

        The check runs in float64 whatever the case dtype. With ``order=2``
        it checks the gradient of ``<dL/dx, v>`` (a Hessian-vector product
        through nested tapes), i.e. that the gradient rule is itself
        differentiable and correct.

        Parameters
        ----------
        wrt : list of int, optional
            Input indices to differentiate (default: every float input the
            schema does not mark no-grad).
        order : {1, 2}
            The derivative order checked.
        """
        import dragon_core as dg
        where = f"{self.op}[{self.id}] grad order {order}"
        idx = self._grad_inputs(wrt)
        assert idx, f"{where}: no differentiable input to check"
        base = self._float64_arrays()
        loss = self._loss_fn(zlib.crc32(where.encode()))
        probe_rng = np.random.default_rng(zlib.crc32((where + "v").encode()))
        probes = [probe_rng.standard_normal(base[i].shape) for i in idx]

        def objective(arrays, analytic: bool):
            """The scalar checked (float) or, analytically, its gradients."""
            tensors = [dg.tensor(a, device=self.device) for a in arrays]
            if order == 1:
                if not analytic:
                    value = loss(tensors)
                    return float(value.item())
                with dg.GradientTape() as tape:
                    tape.watch([tensors[i] for i in idx])
                    value = loss(tensors)
                return tape.gradient(value, [tensors[i] for i in idx])
            with dg.GradientTape() as outer:
                outer.watch([tensors[i] for i in idx])
                with dg.GradientTape() as inner:
                    inner.watch([tensors[i] for i in idx])
                    value = loss(tensors, quadratic=True)
                grads = inner.gradient(value, [tensors[i] for i in idx],
                                       unconnected_gradients="zero")
                hv = None
                for g, v in zip(grads, probes):
                    term = dg.ops.sum(g * dg.tensor(v, device=self.device))
                    hv = term if hv is None else hv + term
            if not analytic:
                return float(hv.item())
            return outer.gradient(hv, [tensors[i] for i in idx])

        analytic = objective(base, analytic=True)
        for k, i in enumerate(idx):
            got = analytic[k]
            got = np.zeros(base[i].shape) if got is None else to_numpy(got)
            numeric = np.zeros(base[i].shape)
            flat = numeric.reshape(-1)
            for j in range(flat.size):
                plus = [a.copy() for a in base]
                minus = [a.copy() for a in base]
                plus[i].reshape(-1)[j] += eps
                minus[i].reshape(-1)[j] -= eps
                flat[j] = (objective(plus, False) - objective(minus, False)) / (2 * eps)
            np.testing.assert_allclose(
                got, numeric, rtol=rtol, atol=atol,
                err_msg=f"{where}: analytic gradient of input {i} differs from finite "
                        "differences")


def _takes(fn: Callable, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _flatten(values: Iterable) -> list:
    out = []
    for v in values:
        if isinstance(v, (list, tuple)):
            out.extend(_flatten(v))
        else:
            out.append(v)
    return out


# ------------------------------------------------------------ the decorator


def op_case(op: str, *, inputs: Callable, reference: Callable | None = None,
            attrs: Sequence[Mapping[str, Any]] | None = None,
            dtypes: Sequence[str] = FLOAT_DTYPES,
            shapes: Sequence[Sequence[int]] | None = None,
            layouts: Sequence[str] = LAYOUTS,
            out_dtype: Any = None, tol: float = 1.0,
            rtol: float | None = None, atol: float | None = None,
            py_name: str | None = None, device: str | None = None,
            select: Callable[[OpCase], bool] | None = None,
            skip: Callable[[OpCase], str | None] | None = None):
    """Parametrize a pytest test over cases of one op.

    Parameters
    ----------
    op : str
        The op's schema name, e.g. ``"Softplus"``.
    inputs : callable
        ``inputs(rng, dtype)`` (or ``inputs(rng, dtype, shape)`` when
        ``shapes`` is given; a parameter named ``attrs`` also receives the
        case's attributes) returning the list of inputs in schema order:
        NumPy arrays, or a list of arrays for a variadic input.
    reference : callable, optional
        ``reference(*inputs, **attrs)`` computing the expected output(s) in
        float64 (integer inputs arrive as int64, bool as bool). Return an
        array, or a list of arrays for several outputs.
    attrs : list of dict, optional
        Attribute sets to test; default ``[{}]`` (the schema defaults).
    dtypes : list of str
        Input dtypes to test; default float32 and float64.
    shapes : list of tuple, optional
        Shapes handed to ``inputs`` as a third argument.
    layouts : list of str
        ``"contiguous"`` and/or ``"strided"`` (non-contiguous input views).
    out_dtype : str, callable, list or None
        The expected output dtype; None means "the input dtype".
    tol : float
        Multiplies the per-dtype tolerances (transcendental ops, long sums).
    rtol, atol : float, optional
        Absolute overrides of the tolerances.
    py_name : str, optional
        The ``dragon_core.ops`` name when it is not derivable from ``op``.
    device : str, optional
        Device to run on; default ``$DRAGON_TEST_DEVICE`` or ``"cpu"``.
    select : callable, optional
        ``select(case)`` returning False drops a combination that does not
        exist (e.g. an axis the shape lacks); it is not even collected.
    skip : callable, optional
        ``skip(case)`` returning a reason to skip that case, or None.

    Returns
    -------
    callable
        A decorator for a test taking a ``case`` argument (an
        :class:`OpCase`).
    """
    import pytest

    unknown = set(layouts) - set(LAYOUTS)
    if unknown:
        raise ValueError(f"op_case({op!r}): unknown layouts {sorted(unknown)}; "
                         f"use {list(LAYOUTS)}")
    attr_sets = [dict(a) for a in (attrs if attrs is not None else [{}])]
    shape_list = [tuple(s) for s in shapes] if shapes is not None else [None]
    params = []
    for dt, at, sh, lay in itertools.product(dtypes, attr_sets, shape_list,
                                             layouts):
        if lay == "strided" and sh is not None and _all_scalar(sh):
            continue  # 0-d inputs have no layout to vary
        parts = [dt, _attrs_id(at)]
        if sh is not None:
            parts.append(_shape_id(sh))
        parts.append(lay)
        case_id = "-".join(parts)
        case = OpCase(op=op, dtype=dtype_name(dt), attrs=at, shape=sh,
                      layout=lay, device=device or default_device(),
                      make_inputs=inputs, reference=reference,
                      out_dtype=out_dtype, tol=tol, rtol=rtol, atol=atol,
                      py_name=py_name, id=case_id)
        if select is not None and not select(case):
            continue
        marks = ()
        reason = skip(case) if skip is not None else None
        if reason:
            marks = (pytest.mark.skip(reason=reason),)
        params.append(pytest.param(case, id=case_id, marks=marks))

    def decorate(test: Callable) -> Callable:
        if "case" not in inspect.signature(test).parameters:
            raise TypeError(f"{test.__name__}: an op_case test takes a 'case' "
                            "argument")
        return pytest.mark.parametrize("case", params)(test)

    return decorate
