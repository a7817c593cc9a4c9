"""Dense matmul throughput: 1024x1024 float32 @ 1024x1024 float32, GFLOP/s.

Every implementation multiplies the same operands; each result is compared
with a float64 NumPy reference before it is timed, so a fast wrong answer
reports WRONG instead of a number. The issue's target applies to Dragon;
NumPy's figure depends on the OpenBLAS kernel it picks (see the notes) and
is informational.
"""

from __future__ import annotations

import numpy as np

from _harness import best_seconds, result, skip_note, try_import

BENCH = "matmul_1024_f32"
N = 1024
TARGET_GFLOPS = 346.0  # the goal for Dragon's matmul
FLOPS = 2.0 * N * N * N


def _close(out: np.ndarray, ref: np.ndarray) -> str:
    """Returns "" when ``out`` matches ``ref`` to float32 accuracy."""
    out = np.asarray(out, dtype=np.float64)
    if out.shape != ref.shape:
        return f"shape {out.shape}, expected {ref.shape}"
    err = float(np.max(np.abs(out - ref)))
    # float32 dot products of length N: error grows like sqrt(N) * eps * |.|.
    tol = 1e-5 * np.sqrt(N) * float(np.max(np.abs(ref)))
    return "" if err <= tol else f"max abs error {err:.3g} > {tol:.3g}"


def _row(impl, library, fn, to_numpy, ref, target=None):
    try:
        problem = _close(to_numpy(fn()), ref)
        if problem:
            return result(BENCH, impl, library, "GFLOP/s", None, "higher",
                          target, status="WRONG", note=f"{impl}: {problem}")
        best, per_run = best_seconds(fn)
    except Exception as exc:  # report, keep benchmarking the others
        return result(BENCH, impl, library, "GFLOP/s", None, "higher", target,
                      note=f"{impl} failed: {type(exc).__name__}: {exc}")
    return result(BENCH, impl, library, "GFLOP/s", FLOPS / best / 1e9,
                  "higher", target, ms_per_call=best * 1e3,
                  ms_per_run=[t * 1e3 for t in per_run])


def run() -> list[dict]:
    """Time a 1024x1024 float32 matmul in Dragon, NumPy and torch.

    Returns
    -------
    list of dict
        One row per implementation (see ``_harness.result``).
    """
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, N)).astype(np.float32)
    y = rng.standard_normal((N, N)).astype(np.float32)
    ref = x.astype(np.float64) @ y.astype(np.float64)
    rows = []

    dg = try_import("dragon_core")
    if dg is None:
        rows.append(result(BENCH, "dg.ops.matmul(a, b)", "dragon", "GFLOP/s",
                           None, "higher", TARGET_GFLOPS, status="SKIP",
                           note=skip_note("dragon_core")))
    else:
        a, b = dg.tensor(x), dg.tensor(y)
        rows.append(_row("dg.ops.matmul(a, b)", "dragon",
                         lambda: dg.ops.matmul(a, b), lambda t: t.numpy(),
                         ref, TARGET_GFLOPS))

    rows.append(_row("np.matmul(a, b)", "numpy", lambda: np.matmul(x, y),
                     lambda r: r, ref))

    torch = try_import("torch")
    if torch is None:
        rows.append(result(BENCH, "torch.matmul(a, b)", "torch", "GFLOP/s",
                           None, "higher", status="SKIP",
                           note=skip_note("torch")))
    else:
        ta, tb = torch.from_numpy(x), torch.from_numpy(y)
        rows.append(_row("torch.matmul(a, b)", "torch",
                         lambda: torch.matmul(ta, tb), lambda r: r.numpy(),
                         ref))
    return rows
