"""Square matmul 512-4096, float32 and bfloat16: Dragon beside torch, same run.

For every size and dtype the Dragon and torch calls are timed alternately
(best of several rounds each, ``_harness.best_seconds``) on the same
operands, after each result is checked against a float64 NumPy reference
(tolerance from the dtype's precision: sqrt(k) * eps * |a| |b|). Rows give
GFLOP/s, the float32 rows also the fraction of the machine's measured FMA
peak, the bfloat16 rows the fraction of its measured AMX peak where the CPU
has AMX (bench_peak.py; Dragon's and torch's rows both), and one ``ratio`` row per size: torch time / Dragon
time (above 1: Dragon faster). bfloat16 sizes also time oneDNN's kernel
pinned (mkldnn plugin) beside the default kernel (cpu_eigen's AVX512-BF16
GEMM on CPUs with AVX512_BF16 and no AMX; oneDNN's own where AMX runs) in
the same run, alternately, with a
``ratio oneDNN/dragon time`` row. Targets (issue 21): float32 >= 85% of peak
and >= torch; bfloat16 2048 >= torch.
"""

from __future__ import annotations

import numpy as np

from _harness import best_seconds, result, skip_note, try_import

SIZES = (512, 1024, 2048, 4096)
QUICK_SIZES = (512, 1024, 2048)
EIGEN_SIZES = (512, 1024)   # cpu_eigen's GEMM timed beside oneDNN's (issue 21)
EPS = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8}
PEAK_FRACTION = 0.85


def _check(out, ref, a64, b64, dtype: str, k: int) -> str:
    out = np.asarray(out, dtype=np.float64)
    scale = float(np.abs(a64).max() * np.abs(b64).max())
    # Operands are rounded to dtype first (in ref), then a length-k dot
    # product accumulates in float32: error ~ sqrt(k) * eps32 * k * scale.
    tol = 8.0 * np.sqrt(k) * (EPS["float32"] * k * scale) + 1e-6
    # The result is stored in `dtype`: one more rounding of |ref|.
    tol += EPS[dtype] * float(np.abs(ref).max())
    err = float(np.abs(out - ref).max())
    return "" if err <= tol else f"max abs error {err:.3g} > {tol:.3g}"


def _bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), back in float32."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def _time(fn):
    best, per_run = best_seconds(fn, warmup=2, runs=5, min_run_s=0.2)
    return best, per_run


def _matmul_plugins(dg) -> set:
    """The plugins with a cpu MatMul kernel."""
    return {k["plugin"] for k in dg._C.kernels("MatMul") if k["device"] == "cpu"}


def _of_peak(gflops: float, dtype: str, fma_peak, amx_peak) -> str:
    """The note of a GFLOP/s row: its fraction of the measured float32 FMA
    peak, or for bfloat16 of the AMX peak where the CPU has AMX."""
    if dtype == "float32" and fma_peak:
        return f"{gflops / fma_peak:.0%} of the {fma_peak:.0f} GFLOP/s FMA peak"
    if dtype == "bfloat16" and amx_peak:
        return f"{gflops / amx_peak:.0%} of the {amx_peak:.0f} GFLOP/s AMX peak"
    return ""


def run(quick: bool = False) -> list[dict]:
    """Rows per size: Dragon and torch GFLOP/s (float32, bfloat16), the
    float32 fraction of peak, and the torch/Dragon time ratios."""
    import bench_peak
    dg = try_import("dragon_core")
    torch = try_import("torch")
    rows = []
    if dg is None:
        return [result("gemm", "dg.ops.matmul", "dragon", "GFLOP/s", None, "higher",
                       status="SKIP", note=skip_note("dragon_core"))]
    peak = bench_peak.peak_gflops(2)
    amx_peak = bench_peak.amx_peak_gflops()
    if torch is not None:
        torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    for n in (QUICK_SIZES if quick else SIZES):
        x = rng.standard_normal((n, n)).astype(np.float32)
        y = rng.standard_normal((n, n)).astype(np.float32)
        flops = 2.0 * n ** 3
        for dtype in ("float32", "bfloat16"):
            bench = f"matmul_{n}_{dtype}"
            xr, yr = (x, y) if dtype == "float32" else (_bf16_round(x), _bf16_round(y))
            ref = xr.astype(np.float64) @ yr.astype(np.float64)
            a, b = dg.tensor(x).astype(dtype), dg.tensor(y).astype(dtype)
            fn = lambda: dg.ops.matmul(a, b)  # noqa: E731
            problem = _check(fn().astype("float32").numpy(), ref, xr, yr, dtype, n)
            if problem:
                rows.append(result(bench, "dg.ops.matmul", "dragon", "GFLOP/s", None,
                                   "higher", status="WRONG", note=problem))
                continue
            t_dg, runs_dg = _time(fn)
            t_th = None
            if torch is not None:
                tdt = getattr(torch, dtype)
                ta, tb = torch.from_numpy(x).to(tdt), torch.from_numpy(y).to(tdt)
                tfn = lambda: torch.matmul(ta, tb)  # noqa: E731
                problem = _check(tfn().float().numpy(), ref, xr, yr, dtype, n)
                if problem:
                    rows.append(result(bench, "torch.matmul", "torch", "GFLOP/s", None,
                                       "higher", status="WRONG", note=problem))
                else:
                    # Dragon again after torch: the better of the two rounds each.
                    t_th, runs_th = _time(tfn)
                    t2, r2 = _time(fn)
                    t_dg, runs_dg = min(t_dg, t2), runs_dg + r2
                    rows.append(result(bench, "torch.matmul", "torch", "GFLOP/s",
                                       flops / t_th / 1e9, "higher",
                                       note=_of_peak(flops / t_th / 1e9, dtype, peak,
                                                     amx_peak),
                                       ms_per_run=[t * 1e3 for t in runs_th]))
            target = None
            if dtype == "float32" and peak:
                target = PEAK_FRACTION * peak
            rows.append(result(bench, "dg.ops.matmul", "dragon", "GFLOP/s", flops / t_dg / 1e9,
                               "higher", target,
                               note=_of_peak(flops / t_dg / 1e9, dtype, peak, amx_peak),
                               ms_per_run=[t * 1e3 for t in runs_dg]))
            if dtype == "float32" and n in EIGEN_SIZES and "mkldnn" in _matmul_plugins(dg):
                # cpu_eigen's own GEMM beside oneDNN (which serves MatMul when
                # the mkldnn plugin is installed), pinned for this row only.
                dg.plugins.pin("MatMul", "cpu", "cpu_eigen")
                try:
                    problem = _check(fn().numpy(), ref, xr, yr, dtype, n)
                    t_eg, runs_eg = _time(fn)
                finally:
                    dg.plugins.unpin("MatMul", "cpu")
                rows.append(result(bench, "dg.ops.matmul (cpu_eigen GEMM pinned)", "dragon",
                                   "GFLOP/s", None if problem else flops / t_eg / 1e9, "higher",
                                   status="WRONG" if problem else None, note=problem,
                                   ms_per_run=[t * 1e3 for t in runs_eg]))
            if dtype == "bfloat16" and "mkldnn" in _matmul_plugins(dg):
                # oneDNN's AVX512-BF16 kernel beside the default (cpu_eigen's
                # AVX512-BF16 GEMM where the CPU has it), timed alternately:
                # oneDNN pinned, the default again, oneDNN again.
                t_on, runs_on, problem = None, [], ""
                for rnd in range(2):
                    dg.plugins.pin("MatMul", "cpu", "mkldnn")
                    try:
                        if rnd == 0:
                            problem = _check(fn().astype("float32").numpy(), ref, xr, yr,
                                             dtype, n)
                        if problem:
                            break
                        t1, r1 = _time(fn)
                    finally:
                        dg.plugins.unpin("MatMul", "cpu")
                    t_on = t1 if t_on is None else min(t_on, t1)
                    runs_on += r1
                    if rnd == 0:
                        t2, r2 = _time(fn)
                        t_dg, runs_dg = min(t_dg, t2), runs_dg + r2
                rows.append(result(bench, "dg.ops.matmul (oneDNN pinned)", "dragon", "GFLOP/s",
                                   None if problem else flops / t_on / 1e9, "higher",
                                   status="WRONG" if problem else None, note=problem,
                                   ms_per_run=[t * 1e3 for t in runs_on]))
                if not problem:
                    rows.append(result(bench, "ratio oneDNN/dragon time", "dragon", "x",
                                       t_on / t_dg, "higher"))
            if t_th is not None:
                need = 1.0 if dtype == "float32" or n == 2048 else None
                rows.append(result(bench, "ratio torch/dragon time", "dragon", "x",
                                   t_th / t_dg, "higher", need))
    return rows
