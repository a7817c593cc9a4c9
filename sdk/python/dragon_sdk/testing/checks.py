"""Conformance checks any plugin's test suite can apply to its ops.

* :func:`check_schema_kernel_consistency` -- the kernel's outputs have
  exactly the shapes and dtypes shape inference declared;
* :func:`check_numerics` -- values against a float64 NumPy reference for
  every dtype the op's kernels declare on the device;
* :func:`check_eager_vs_graph` -- a function gives the same results (and
  gradients) eagerly and under ``@dragon_core.function``.

(:func:`dragon_sdk.testing.check_bad_inputs` and
:func:`dragon_sdk.testing.audit_plugin_so` live in their own modules;
gradient checks by finite differences are :meth:`OpCase.check_grad`.)

Each check raises AssertionError with the op and the failing case named.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from dragon_sdk.testing.opcase import (OpCase, _flatten, default_device,
                                       dtype_name, infer_shape,
                                       is_float, numpy_dtype, op_function, py_attrs,
                                       strided, to_numpy, to_tensor)


def _outputs(result: Any) -> list:
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _op_name(op: str) -> str:
    """The schema name of ``op`` (schema or Python name)."""
    import dragon_core as dg

    return dg.plugin_api.op_name(op)


# ------------------------------------------------ schema/kernel consistency


def check_schema_kernel_consistency(op: str, inputs: Sequence[Any], *,
                                    device: str | None = None,
                                    **attrs: Any) -> list:
    """Assert that ``op``'s outputs are exactly what shape inference says.

    Runs ``dragon_core.infer_shape`` on the inputs' shapes and dtypes, then
    the op itself (``dragon_core.ops.<op>``, the function users call), and
    compares the number of outputs and each output's shape and dtype.

    Parameters
    ----------
    op : str
        Schema name (``"MatMul"``) or Python name (``"matmul"``).
    inputs : list
        NumPy arrays or tensors (a list of them for a variadic input), in
        schema order.
    device : str, optional
        Where to run; default ``$DRAGON_TEST_DEVICE`` or ``"cpu"``.
    **attrs
        The op's attributes.

    Returns
    -------
    list of numpy.ndarray
        The op's outputs.

    Raises
    ------
    AssertionError
        Naming the op, the output and both (shape, dtype) pairs.
    """
    device = device or default_device()
    tensors = [to_tensor(x, device) for x in inputs]
    inferred = infer_shape(op, tensors, attrs)
    outs = _outputs(op_function(op)(*tensors, **py_attrs(op, attrs)))
    where = f"{op}({', '.join(_describe(t) for t in _flatten(tensors))})"
    assert len(outs) == len(inferred), (
        f"{where}: shape inference declared {len(inferred)} output(s), the "
        f"op returned {len(outs)}")
    results = []
    for i, (tensor, want) in enumerate(zip(outs, inferred)):
        got = (tuple(int(d) for d in tensor.shape), dtype_name(tensor.dtype))
        assert got == want, (
            f"{where}: output {i} is {got[1]}{list(got[0])}, shape inference "
            f"declared {want[1]}{list(want[0])}")
        results.append(to_numpy(tensor))
    return results


def _describe(t: Any) -> str:
    shape = getattr(t, "shape", None)
    if shape is None:
        return repr(t)
    return f"{dtype_name(t.dtype)}{list(int(d) for d in shape)}"


# ------------------------------------------------------------- numerics


def kernel_dtypes(op: str, device: str | None = None) -> list[str]:
    """The dtypes ``op``'s kernels declare for a device type.

    Read from the kernel registry (``dragon_core.plugins.kernels``); the
    device's index (``"cpu:0"``) is ignored.
    """
    import dragon_core as dg

    device = (device or default_device()).split(":")[0]
    found = set()
    for k in dg.plugins.kernels(op):
        if k["device"] == device:
            found.update(d.strip() for d in k["dtypes"].split(",") if d.strip())
    order = ["float16", "bfloat16", "float32", "float64", "int8", "int16",
             "int32", "int64", "uint8", "bool"]
    return sorted(found, key=lambda d: order.index(d) if d in order else 99)


def _normalise_case(case: Any) -> tuple[list, dict]:
    if isinstance(case, Mapping):
        return list(case["inputs"]), dict(case.get("attrs", {}))
    if isinstance(case, OpCase):
        return list(case.arrays()), dict(case.attrs)
    return list(case), {}


def _cast_inputs(inputs: list, dispatch: int, dtype: str) -> list:
    """Cast the inputs sharing the dispatch input's dtype to ``dtype``."""
    flat = _flatten(inputs)
    base = np.asarray(flat[min(dispatch, len(flat) - 1)]).dtype if flat else None

    def cast(a):
        if isinstance(a, (list, tuple)):
            return [cast(v) for v in a]
        if isinstance(a, (np.ndarray, np.generic)) and np.asarray(a).dtype == base:
            with np.errstate(invalid="ignore", over="ignore"):
                return np.asarray(a).astype(numpy_dtype(dtype))
        return a

    return [cast(a) for a in inputs]


def check_numerics(op: str, reference: Callable, cases: Sequence[Any], *,
                   dtypes: Sequence[str] | None = None,
                   device: str | None = None, out_dtype: Any = None,
                   tol: float = 1.0,
                   tolerances: Mapping[str, tuple] | None = None,
                   layouts: Sequence[str] = ("contiguous", "strided")) -> dict:
    """Check ``op`` against a float64 NumPy reference in every kernel dtype.

    For each dtype (default: every dtype ``op``'s kernels declare on the
    device, see :func:`kernel_dtypes`) and each case, the inputs that share
    the dispatch input's dtype are cast to that dtype, the op runs, and
    :meth:`OpCase.check_forward` compares the result with
    ``reference(*upcast_inputs, **attrs)`` using per-dtype tolerances
    (:data:`BASE_TOLERANCES`: float16 and bfloat16 looser, integers exact);
    it also checks the output dtype, inferred shapes and that inputs are
    left untouched. Every (dtype, case, layout) is run; the failures are
    reported together.

    Parameters
    ----------
    op : str
        Schema name.
    reference : callable
        ``reference(*inputs, **attrs)`` in float64 (int64 for integers).
    cases : list
        Each a list of NumPy input arrays, or a dict ``{"inputs": [...],
        "attrs": {...}}``, or an :class:`OpCase`.
    dtypes : list of str, optional
        Dtypes to check instead of the registry's.
    device : str, optional
        Device type; default ``$DRAGON_TEST_DEVICE`` or ``"cpu"``.
    out_dtype : str, callable or None
        Expected output dtype as for :func:`op_case` (None: the case dtype).
    tol : float
        Multiplies every per-dtype tolerance.
    tolerances : dict, optional
        ``{dtype: (rtol, atol)}`` overriding the tolerances of some dtypes.
    layouts : list of str
        ``"contiguous"`` and/or ``"strided"`` (non-contiguous inputs).

    Returns
    -------
    dict
        ``{dtype: number of cases checked}``.

    Raises
    ------
    AssertionError
        Listing every failing (dtype, case, layout) with its first lines.
    """
    import dragon_core as dg

    device = device or default_device()
    name = _op_name(op)
    dtypes = list(dtypes) if dtypes is not None else kernel_dtypes(name, device)
    assert dtypes, (f"{name}: no kernel registered on device "
                    f"'{device}', nothing to check")
    dispatch = int(dg.plugin_api.op_schema(name).get("dispatch_input", 0))
    failures, counts = [], {}
    for dt in dtypes:
        rtol = atol = None
        if tolerances and dt in tolerances:
            rtol, atol = tolerances[dt]
        for k, case in enumerate(cases):
            inputs, attrs = _normalise_case(case)
            cast = _cast_inputs(inputs, dispatch, dt)
            for layout in layouts:
                arrays = cast
                if layout == "strided":
                    arrays = [_strided(a) for a in cast]
                one = OpCase.of(name, arrays, reference, attrs=attrs, dtype=dt,
                                out_dtype=out_dtype, tol=tol, rtol=rtol,
                                atol=atol, device=device)
                one.id = f"{dt}-case{k}-{layout}"
                try:
                    one.check_forward()
                except AssertionError as e:
                    lines = str(e).strip().splitlines()
                    failures.append(f"[{one.id}] " + "\n    ".join(lines[:8]))
                counts[dt] = counts.get(dt, 0) + 1
    if failures:
        raise AssertionError(
            f"{name}: {len(failures)} numerics failure(s) against the "
            f"reference on {device}:\n  " + "\n  ".join(failures))
    return counts


def _strided(a: Any) -> Any:
    if isinstance(a, (list, tuple)):
        return [_strided(v) for v in a]
    if isinstance(a, np.ndarray):
        return strided(a)
    return a


# ------------------------------------------------------- eager vs graph


def _to_tensors(values: Sequence[Any], device: str) -> list:
    return [to_tensor(np.asarray(v) if isinstance(v, np.generic) else v,
                      device) for v in values]


def _with_grads(fn: Callable, wrt: Sequence[int], seed: int) -> Callable:
    """``fn`` returning its outputs then d<outputs, c>/d inputs[wrt]."""
    import dragon_core as dg

    def wrapped(*xs):
        with dg.GradientTape() as tape:
            tape.watch([xs[i] for i in wrt])
            outs = _outputs(fn(*xs))
            rng = np.random.default_rng(seed)
            loss = None
            for o in outs:
                if not o.dtype.is_floating_point:
                    continue
                c = dg.tensor(rng.standard_normal(tuple(o.shape)).astype(
                    to_numpy(o).dtype), device=o.device)
                term = dg.ops.sum(o * c)
                loss = term if loss is None else loss + term
        grads = tape.gradient(loss, [xs[i] for i in wrt],
                              unconnected_gradients="zero")
        return [*outs, *grads]

    return wrapped


def check_eager_vs_graph(fn: Callable, *inputs: Any, grads: bool = False,
                         wrt: Sequence[int] | None = None,
                         extra_inputs: Sequence[Sequence[Any]] = (),
                         device: str | None = None, rtol: float = 1e-6,
                         atol: float = 1e-6, **options: Any) -> list:
    """Assert that ``fn`` gives the same results eagerly and as a graph.

    ``fn`` runs eagerly, then through ``dragon_core.function(fn)``: the
    first graph call traces (and runs eagerly while recording), the second
    runs the compiled plan with no Python per op -- both must match the eager
    result, as must the plan on each of ``extra_inputs`` (same signature,
    new values: catches values frozen into the trace).

    Parameters
    ----------
    fn : callable
        Takes tensors, returns a tensor or a list of tensors.
    *inputs
        NumPy arrays or tensors.
    grads : bool
        Also compare the gradients of ``sum_i <out_i, c_i>`` (fixed random
        ``c_i``) with respect to the float inputs (or ``wrt``), taken with a
        ``GradientTape`` inside the graph.
    wrt : list of int, optional
        Input indices to differentiate (default: every float input).
    extra_inputs : list of tuples
        More input sets with the same shapes and dtypes.
    device : str, optional
        Default ``$DRAGON_TEST_DEVICE`` or ``"cpu"``.
    rtol, atol : float
        Tolerances (graph passes may fuse or reorder arithmetic).
    **options
        Passed to ``dragon_core.function`` (e.g. ``opt_level``).

    Returns
    -------
    list of numpy.ndarray
        The eager outputs (then gradients, with ``grads=True``).
    """
    import dragon_core as dg

    device = device or default_device()
    name = getattr(fn, "__name__", repr(fn))
    sets = [_to_tensors(inputs, device)]
    sets += [_to_tensors(s, device) for s in extra_inputs]
    run = fn
    if grads:
        idx = list(wrt) if wrt is not None else [
            i for i, t in enumerate(sets[0])
            if getattr(getattr(t, "dtype", None), "is_floating_point", False)]
        assert idx, f"{name}: grads=True but no float input to differentiate"
        run = _with_grads(fn, idx, seed=1234)
    graph = dg.function(run, **options) if options else dg.function(run)
    first = None
    for s, tensors in enumerate(sets):
        eager = [to_numpy(o) for o in _outputs(run(*tensors))]
        calls = ["trace", "plan"] if s == 0 else ["plan"]
        for call in calls:
            got = [to_numpy(o) for o in _outputs(graph(*tensors))]
            where = f"{name}: input set {s}, graph {call} call"
            assert len(got) == len(eager), (
                f"{where} returned {len(got)} values, eager {len(eager)}")
            for i, (g, e) in enumerate(zip(got, eager)):
                what = "output" if not grads or i < len(eager) - len(idx) \
                    else "gradient"
                assert g.shape == e.shape and g.dtype == e.dtype, (
                    f"{where}: {what} {i} is {g.dtype}{list(g.shape)}, eager "
                    f"gave {e.dtype}{list(e.shape)}")
                if is_float(dtype_name(e.dtype)):
                    np.testing.assert_allclose(
                        g.astype(np.float64), e.astype(np.float64), rtol=rtol,
                        atol=atol, equal_nan=True,
                        err_msg=f"{where}: {what} {i} differs from eager")
                else:
                    np.testing.assert_array_equal(
                        g, e, err_msg=f"{where}: {what} {i} differs from eager")
        if first is None:
            first = eager
    return first

