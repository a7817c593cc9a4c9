"""The DFT family on the CPU: batched complex FFTs of a power of two, a
3-smooth length and a prime (Bluestein), and a real FFT, float32 and
float64; ms per call, Dragon's ``fft``/``rfft`` next to ``numpy.fft`` in the
same run. Every result is checked against a float64 NumPy reference before
it is timed. Informational rows (no target).
"""

from __future__ import annotations

import numpy as np

from _harness import best_seconds, result, try_import

BATCH = 64
CASES = [("fft", 4096), ("fft", 6561), ("fft", 4093), ("rfft", 4096)]


def _row(bench, impl, library, fn, to_numpy, ref, tol):
    try:
        got = np.asarray(to_numpy(fn()))
        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
        if err > tol:
            return result(bench, impl, library, "ms", None, "lower", status="WRONG",
                          note=f"{impl}: relative error {err:.3g}")
        best, per_run = best_seconds(fn)
    except Exception as exc:  # report, keep benchmarking the others
        return result(bench, impl, library, "ms", None, "lower",
                      note=f"{impl} failed: {type(exc).__name__}: {exc}")
    return result(bench, impl, library, "ms", best * 1e3, "lower",
                  ms_per_run=[t * 1e3 for t in per_run])


def _pairs(z):
    return np.stack([z.real, z.imag], -1)


def run() -> list[dict]:
    """Time fft/rfft along the last axis of [64, n] in Dragon and NumPy."""
    rng = np.random.default_rng(0)
    dg = try_import("dragon_core")
    rows = []
    for kind, n in CASES:
        for dtype, tol in (("float32", 1e-5), ("float64", 1e-13)):
            bench = f"{kind}_{BATCH}x{n}_{'f32' if dtype == 'float32' else 'f64'}"
            if kind == "fft":
                z = rng.standard_normal((BATCH, n)) + 1j * rng.standard_normal((BATCH, n))
                ref = _pairs(np.fft.fft(z))
                x = _pairs(z).astype(dtype)
                zc = z.astype(np.complex64 if dtype == "float32" else np.complex128)
                np_fn = lambda zc=zc: np.fft.fft(zc)  # noqa: E731
            else:
                r = rng.standard_normal((BATCH, n))
                ref = _pairs(np.fft.rfft(r))
                x = r.astype(dtype)
                np_fn = lambda x=x: np.fft.rfft(x)  # noqa: E731
            if dg is not None:
                t = dg.tensor(x)
                op = getattr(dg.ops, kind)
                rows.append(_row(bench, f"dg.ops.{kind}", "dragon", lambda t=t, op=op: op(t),
                                 lambda y: y.numpy(), ref, tol))
            rows.append(_row(bench, f"numpy.fft.{kind}", "numpy", np_fn, _pairs, ref, tol))
    return rows
