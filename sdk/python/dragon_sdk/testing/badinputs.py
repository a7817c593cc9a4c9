"""Bad-input robustness: an op given garbage errors cleanly, never crashes.

:func:`check_bad_inputs` derives variants from one valid call -- wrong
dtypes, wrong ranks, mismatched shapes, empty tensors, non-contiguous views,
missing and extra inputs, garbage attribute values and unknown attributes --
and runs them in a child interpreter. Each variant must either work or raise
a ``DragonError``, ``TypeError`` or ``ValueError`` whose message (or ``op``
attribute) names the op. An attribute value of the wrong type for the
attribute (``"false"``, nan, ``[1]`` or ``-1`` for a bool, ``True`` or 2.5
for an int, ``None`` for one that is not optional; see :func:`wrong_type`)
must raise, and the error must also name the attribute: an op (or a Python
wrapper, see ``function``) that accepts it fails the check. A variant that
kills the child (a segfault, an abort) or hangs is reported as a failure naming
the op and the variant, and the remaining variants run in a fresh child.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from typing import Any, Sequence

import numpy as np

from dragon_sdk.testing.opcase import default_device, strided

#: Dtypes every input is swapped to, one input at a time.
BAD_DTYPES = ("bool", "uint8", "int32", "int64", "float16", "float64")

#: Values tried for every attribute.
GARBAGE_ATTRS = ("garbage", "false", None, True, -1, 2 ** 40, float("nan"),
                 [1], [1, "x"], -2.5, {"a": 1})

# Attribute type codes of the schema (DgAttrType).
_INT, _FLOAT, _BOOL, _STRING, _INTS, _FLOATS, _DTYPE = 1, 2, 3, 4, 5, 6, 7
_TYPE_NAMES = {_INT: "int", _FLOAT: "float", _BOOL: "bool", _STRING: "str",
               _INTS: "sequence of int", _FLOATS: "sequence of float",
               _DTYPE: "dtype"}


def _is_int(v: Any) -> bool:
    return (isinstance(v, (int, np.integer))
            and not isinstance(v, (bool, np.bool_)))


def _is_real(v: Any) -> bool:
    return _is_int(v) or isinstance(v, (float, np.floating))


def _is_seq(v: Any) -> bool:
    return isinstance(v, (list, tuple, np.ndarray))


def wrong_type(attr_type: int, value: Any, optional: bool = False) -> bool:
    """Whether ``value`` is not of the attribute's type, so that the op must
    refuse it (a value of the right type may still be refused).

    The types are strict: a bool takes only ``True``/``False`` (and
    ``np.bool_``); an int takes ints and ``np.integer``, not bools or
    floats; a float takes ints and floats, not bools; a string only
    ``str``; a list type a sequence of its item type (or one item); a dtype
    never an int. ``None`` is right only for an optional attribute.
    """
    if value is None:
        return not optional
    if attr_type == _BOOL:
        return not isinstance(value, (bool, np.bool_))
    if attr_type == _INT:
        return not _is_int(value)
    if attr_type == _FLOAT:
        return not _is_real(value)
    if attr_type == _STRING:
        return not isinstance(value, str)
    if attr_type in (_INTS, _FLOATS):
        ok = _is_int if attr_type == _INTS else _is_real
        return not (ok(value) or (_is_seq(value) and all(ok(x) for x in value)))
    if attr_type == _DTYPE:
        if isinstance(value, str):
            return value.lower() in ("garbage", "false")  # names no dtype
        return not (isinstance(value, type) or hasattr(value, "itemsize"))
    return False


@dataclasses.dataclass
class Variant:
    """One bad call: a label, the inputs and the attributes.

    ``must_fail`` names the attribute when the call gives it a value of the
    wrong type: the call must then raise an error naming the attribute.
    """

    label: str
    inputs: list
    attrs: dict
    must_fail: str = ""


def _arr(x: Any) -> np.ndarray:
    return np.asarray(x)


def _with(inputs: list, i: int, value: Any) -> list:
    out = list(inputs)
    out[i] = value
    return out


def variants(valid_inputs: Sequence[Any], attrs: dict,
             attr_names: Sequence[str] = (),
             attr_specs: Sequence[dict] = ()) -> list[Variant]:
    """The bad calls derived from one valid call (see the module doc).

    ``attr_specs`` (the ``attrs`` of the op's schema description: dicts
    with ``name``, ``type`` and ``optional``) adds garbage values for those
    attributes too, and marks the values of the wrong type ``must_fail``.
    """
    inputs = [np.asarray(x) if not isinstance(x, (list, tuple)) else list(x)
              for x in valid_inputs]
    out = [Variant("valid", inputs, dict(attrs))]
    for i, x in enumerate(inputs):
        if isinstance(x, list):
            out.append(Variant(f"input {i}: empty list", _with(inputs, i, []),
                               attrs))
            if x and isinstance(x[0], np.ndarray):
                first = x[0]
                other = "int32" if first.dtype.name != "int32" else "float32"
                out.append(Variant(f"input {i}[0] as {other}", _with(
                    inputs, i, [first.astype(other), *x[1:]]), attrs))
                if first.ndim >= 1:
                    grown = np.resize(first, first.shape[:-1]
                                      + (first.shape[-1] + 1,))
                    out.append(Variant(f"input {i}[0] with last dim "
                                       f"{grown.shape[-1]}", _with(
                                           inputs, i, [grown, *x[1:]]), attrs))
                out.append(Variant(f"input {i}[0] with an extra axis", _with(
                    inputs, i, [first[None], *x[1:]]), attrs))
            continue
        for dt in BAD_DTYPES:
            if dt != x.dtype.name:
                with np.errstate(all="ignore"):
                    out.append(Variant(f"input {i} as {dt}",
                                       _with(inputs, i, x.astype(dt)), attrs))
        out.append(Variant(f"input {i} with an extra axis",
                           _with(inputs, i, x[None]), attrs))
        out.append(Variant(f"input {i} as a 0-d array",
                           _with(inputs, i, x.reshape(-1)[:1].reshape(())
                                 if x.size else np.zeros((), x.dtype)), attrs))
        if x.ndim >= 1:
            out.append(Variant(f"input {i} flattened to 1-d",
                               _with(inputs, i, x.reshape(-1)), attrs))
            grown = np.resize(x, x.shape[:-1] + (x.shape[-1] + 1,))
            out.append(Variant(f"input {i} with last dim {grown.shape[-1]}",
                               _with(inputs, i, grown), attrs))
            empty = np.zeros((0,) + x.shape[1:], x.dtype)
            out.append(Variant(f"input {i} empty {list(empty.shape)}",
                               _with(inputs, i, empty), attrs))
            out.append(Variant(f"input {i} non-contiguous",
                               _with(inputs, i, strided(x)), attrs))
        out.append(Variant(f"input {i} as a Python list",
                           _with(inputs, i, x.tolist()), attrs))
        out.append(Variant(f"input {i} as None", _with(inputs, i, None),
                           attrs))
    arrays = [x for x in inputs if isinstance(x, np.ndarray) and x.ndim >= 1]
    if arrays and len(arrays) == len(inputs):
        out.append(Variant("every input empty",
                           [np.zeros((0,) + x.shape[1:], x.dtype)
                            for x in inputs], attrs))
        out.append(Variant("every input non-contiguous",
                           [strided(x) for x in inputs], attrs))
    if inputs:
        out.append(Variant("one input missing", inputs[:-1], attrs))
    out.append(Variant("an extra input", inputs + [inputs[0] if inputs
                                                   else np.zeros(1)], attrs))
    specs = {a["name"]: a for a in attr_specs}
    for name in list(attr_names) + [n for n in specs if n not in attr_names]:
        spec = specs.get(name)
        for value in GARBAGE_ATTRS:
            bad = spec is not None and wrong_type(
                spec["type"], value, bool(spec.get("optional")))
            out.append(Variant(f"attr {name}={value!r}", inputs,
                               {**attrs, name: value}, name if bad else ""))
    out.append(Variant("unknown attr", inputs,
                       {**attrs, "no_such_attribute_xyz": 1}))
    return out


def classify_error(e: BaseException, names: Sequence[str]) -> dict:
    """How a bad input's error is judged: it passes when it names the op
    (its ``op`` attribute or its text mentions one of ``names``, lower-case
    op and Python names)."""
    text = str(e)
    named = (getattr(e, "op", "") or "").lower() in names or any(
        n in text.lower() for n in names)
    return {"ok": named, "error": type(e).__name__ + ": " + text,
            "why": "" if named else "the error does not name the op"}


# -------------------------------------------------------------- the child

_CHILD = r"""
import json, pickle, sys, warnings
warnings.simplefilter("ignore")
import importlib
import numpy as np
import dragon_core as dg
from dragon_core.errors import DragonError
from dragon_sdk.testing.badinputs import classify_error
from dragon_sdk.testing.opcase import op_function, py_attrs, to_tensor

with open(sys.argv[1], "rb") as f:
    job = pickle.load(f)
for lib in job["libraries"]:
    dg.load_library(lib)
if job["function"]:
    module, _, qualname = job["function"].partition(":")
    fn = importlib.import_module(module)
    for part in qualname.split("."):
        fn = getattr(fn, part)
else:
    fn = op_function(job["op"])
names = [n.lower() for n in job["names"]]
start = int(sys.argv[2])

def tensors(v):
    if isinstance(v, list) and v and all(isinstance(a, np.ndarray) for a in v):
        return [to_tensor(a, job["device"]) for a in v]
    return to_tensor(v, job["device"]) if isinstance(v, np.ndarray) else v

for k in range(start, len(job["variants"])):
    label, inputs, attrs, must_fail = job["variants"][k]
    print("@@START " + str(k), flush=True)
    rec = {"k": k, "ok": True, "error": ""}
    try:
        out = fn(*[tensors(v) for v in inputs], **py_attrs(job["op"], attrs))
        for o in (out if isinstance(out, (list, tuple)) else [out]):
            if hasattr(o, "numpy"):
                o.numpy()  # make sure the result is readable
        if must_fail:
            rec = {"k": k, "ok": False, "error": "",
                   "why": "accepted a value of the wrong type for attribute '"
                          + must_fail + "' (it must raise an error naming the "
                          "op and the attribute)"}
    except (DragonError, TypeError, ValueError) as e:
        rec = {"k": k, **classify_error(e, names)}
        if rec["ok"] and must_fail and must_fail not in str(e):
            rec.update(ok=False, why="the error does not name the attribute '"
                       + must_fail + "'")
    except BaseException as e:
        rec = {"k": k, "ok": False,
               "error": type(e).__name__ + ": " + str(e),
               "why": "raised " + type(e).__name__ +
                      ", not DragonError/TypeError/ValueError"}
    print("@@DONE " + json.dumps(rec), flush=True)
"""


def _loaded_libraries() -> list[str]:
    """Libraries this process loaded with ``dragon_core.load_library``."""
    if "dragon_core" not in sys.modules:
        return []
    import dragon_core as dg

    return [p.path for p in dg.plugins.list()
            if p.state == "loaded" and p.path and not p.dist]


def _signal_name(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def check_bad_inputs(op: str, valid_inputs: Sequence[Any], *,
                     device: str | None = None,
                     libraries: Sequence[str] | None = None,
                     garbage_attrs: bool = True,
                     skip: Sequence[str] = (), timeout: float = 120,
                     function: str | None = None,
                     **attrs: Any) -> dict:
    """Assert that ``op`` survives bad inputs with a clean, named error.

    Parameters
    ----------
    op : str
        Schema or Python name of the op.
    valid_inputs : list
        NumPy arrays (a list of arrays for a variadic input) of one valid
        call, in schema order; the bad variants are derived from them.
    device : str, optional
        Default ``$DRAGON_TEST_DEVICE`` or ``"cpu"``.
    libraries : list of str, optional
        Plugin libraries the child loads with ``dragon_core.load_library``
        before running (default: those this process loaded that way).
    garbage_attrs : bool
        Also try garbage values for every attribute of the schema; those of
        the wrong type for the attribute must raise an error naming it.
    skip : list of str
        Variant labels (globs, e.g. ``"input * as None"``) not to run: known
        issues, with a reason in the calling test.
    timeout : float
        Seconds a child may run before it counts as hung.
    function : str, optional
        ``"module:qualname"`` of the Python function to call instead of
        ``dragon_core.ops.<name>``: a plugin whose users call a wrapper
        checks the wrapper's argument handling too (a wrapper that coerces
        ``bool(flag)`` accepts garbage the core would refuse). The child
        process imports it, so it must be importable there.
    **attrs
        The attributes of the valid call.

    Returns
    -------
    dict
        ``{label: "ok" or the error raised}`` per variant.

    Raises
    ------
    AssertionError
        Listing each variant that crashed the process, hung, raised another
        exception type, raised an error that does not name the op, or
        accepted an attribute value of the wrong type.
    """
    import dragon_core as dg

    desc = dg.plugin_api.op_schema(op)
    names = sorted({desc["name"], desc.get("py_name") or desc["name"], op})
    specs = desc["attrs"] if garbage_attrs else []
    todo = [v for v in variants(valid_inputs, attrs, attr_specs=specs)
            if not any(fnmatch.fnmatchcase(v.label, p) for p in skip)]
    job = {"op": op, "names": names, "device": device or default_device(),
           "function": function,
           "libraries": list(_loaded_libraries() if libraries is None
                             else libraries),
           "variants": [(v.label, v.inputs, v.attrs, v.must_fail)
                        for v in todo]}
    env = dict(os.environ)
    env.setdefault("DRAGON_LOG_LEVEL", "3")
    results: dict[int, dict] = {}
    with tempfile.TemporaryDirectory(prefix="dragon-bad-inputs-") as tmp:
        path = os.path.join(tmp, "job.pkl")
        with open(path, "wb") as f:
            pickle.dump(job, f)
        start = 0
        while start < len(todo):
            started = None
            try:
                proc = subprocess.run(
                    [sys.executable, "-c", _CHILD, path, str(start)],
                    capture_output=True, text=True, timeout=timeout, env=env)
                stdout, code = proc.stdout, proc.returncode
                stderr = proc.stderr
            except subprocess.TimeoutExpired as e:
                stdout = (e.stdout or b"").decode() if isinstance(
                    e.stdout, bytes) else (e.stdout or "")
                stderr, code = "", None
            for line in stdout.splitlines():
                if line.startswith("@@START "):
                    started = int(line.split()[1])
                elif line.startswith("@@DONE "):
                    rec = json.loads(line[len("@@DONE "):])
                    results[rec["k"]] = rec
            if code == 0:
                break
            if started is None or started in results:
                raise AssertionError(
                    f"{op}: the bad-input child process failed outside any "
                    f"variant ({_signal_name(code or 0)}):\n{stderr[-3000:]}")
            how = ("hung (timeout)" if code is None
                   else f"crashed the process ({_signal_name(code)})")
            results[started] = {"k": started, "ok": False, "error": "",
                                "why": how + (f": {stderr.strip()[-500:]}"
                                              if stderr.strip() else "")}
            start = started + 1
    report, failures = {}, []
    for k, v in enumerate(todo):
        rec = results.get(k, {"ok": False, "error": "", "why": "never ran"})
        report[v.label] = rec["error"] or "ok"
        if not rec["ok"]:
            detail = f" ({rec['error'][:300]})" if rec["error"] else ""
            failures.append(f"{v.label}: {rec['why']}{detail}")
    if failures:
        raise AssertionError(
            f"{op}: {len(failures)} of {len(todo)} bad-input variants were "
            "not handled cleanly:\n  - " + "\n  - ".join(failures))
    return report
