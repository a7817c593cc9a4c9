"""Eager dispatch overhead: ``add`` on 1-element float32 tensors, µs/op.

With one element the arithmetic is free, so this measures what a framework
costs per op call: argument handling, dtype/shape checks, shape inference,
output allocation and kernel lookup. The issue's target applies to Dragon.
"""

from __future__ import annotations

import operator

import numpy as np

from _harness import per_call_us, result, skip_note, try_import

BENCH = "add_1elem_f32"
TARGET_US = 0.85  # the goal for one eager op call
CALLS = 20000
REPEATS = 5


def _row(impl, library, fn, args, check, target=None):
    """Times ``fn(*args)`` after checking that its result equals 3.0."""
    try:
        out = check(fn(*args))
        if out != 3.0:
            return result(BENCH, impl, library, "us/op", None, "lower", target,
                          status="WRONG", note=f"{impl} gave {out}, not 3.0")
        best, medians = per_call_us(fn, args, calls=CALLS, repeats=REPEATS)
    except Exception as exc:  # report, keep benchmarking the others
        return result(BENCH, impl, library, "us/op", None, "lower", target,
                      note=f"{impl} failed: {type(exc).__name__}: {exc}")
    return result(BENCH, impl, library, "us/op", best, "lower", target,
                  medians_us=medians, calls_per_repeat=CALLS)


def run() -> list[dict]:
    """Time one eager ``add`` call in Dragon, NumPy and torch.

    Returns
    -------
    list of dict
        One row per implementation (see ``_harness.result``).
    """
    rows = []
    x = np.array([1.0], dtype=np.float32)
    y = np.array([2.0], dtype=np.float32)

    dg = try_import("dragon_core")
    if dg is None:
        for impl in ("dg.ops.add(a, b)", "a + b"):
            rows.append(result(BENCH, impl, "dragon", "us/op", None, "lower",
                               TARGET_US, status="SKIP",
                               note=skip_note("dragon_core")))
    else:
        a, b = dg.tensor(x), dg.tensor(y)
        to_float = lambda t: float(t.numpy()[0])  # noqa: E731
        rows.append(_row("dg.ops.add(a, b)", "dragon", dg.ops.add, (a, b),
                         to_float, TARGET_US))
        rows.append(_row("a + b", "dragon", operator.add, (a, b), to_float,
                         TARGET_US))

    rows.append(_row("np.add(a, b)", "numpy", np.add, (x, y),
                     lambda r: float(r[0])))

    torch = try_import("torch")
    if torch is None:
        rows.append(result(BENCH, "torch.add(a, b)", "torch", "us/op", None,
                           "lower", status="SKIP", note=skip_note("torch")))
    else:
        ta, tb = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
        rows.append(_row("torch.add(a, b)", "torch", torch.add, (ta, tb),
                         lambda r: float(r[0])))
    return rows
