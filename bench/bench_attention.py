"""Scaled dot-product attention forward, the encoder-layer shape of issues 17
and 21: batch 8, 4 heads, sequence 128, head dim 64, float32; unmasked and
causal. ms per call, Dragon's fused ``scaled_dot_product_attention`` next to
``torch.nn.functional.scaled_dot_product_attention`` in the same run. Every
result is checked against a float64 NumPy reference before it is timed.
Informational rows (no target yet).
"""

from __future__ import annotations

import numpy as np

from _harness import best_seconds, result, skip_note, try_import

SHAPE = (8, 4, 128, 64)


def _reference(q, k, v, causal):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(-1, keepdims=True)) @ v


def _row(bench, impl, library, fn, to_numpy, ref):
    try:
        err = float(np.max(np.abs(np.asarray(to_numpy(fn()), np.float64) - ref)))
        if err > 1e-4:
            return result(bench, impl, library, "ms", None, "lower", status="WRONG",
                          note=f"{impl}: max abs error {err:.3g}")
        best, per_run = best_seconds(fn)
    except Exception as exc:  # report, keep benchmarking the others
        return result(bench, impl, library, "ms", None, "lower",
                      note=f"{impl} failed: {type(exc).__name__}: {exc}")
    return result(bench, impl, library, "ms", best * 1e3, "lower",
                  ms_per_run=[t * 1e3 for t in per_run])


def run() -> list[dict]:
    """Time the attention forward in Dragon and torch, unmasked and causal."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(SHAPE).astype(np.float32) for _ in range(3))
    dg, torch = try_import("dragon_core"), try_import("torch")
    rows = []
    for causal in (False, True):
        bench = f"sdpa_{'x'.join(map(str, SHAPE))}_f32{'_causal' if causal else ''}"
        ref = _reference(q, k, v, causal)
        if dg is not None:
            tq, tk, tv = (dg.tensor(a) for a in (q, k, v))
            rows.append(_row(bench, "dg.ops.scaled_dot_product_attention", "dragon",
                             lambda: dg.ops.scaled_dot_product_attention(
                                 tq, tk, tv, is_causal=causal),
                             lambda t: t.numpy(), ref))
        if torch is not None:
            F = torch.nn.functional
            pq, pk, pv = (torch.from_numpy(a) for a in (q, k, v))
            rows.append(_row(bench, "F.scaled_dot_product_attention", "torch",
                             lambda: F.scaled_dot_product_attention(pq, pk, pv,
                                                                    is_causal=causal),
                             lambda t: t.numpy(), ref))
        else:
            rows.append(result(bench, "F.scaled_dot_product_attention", "torch", "ms", None,
                               "lower", status="SKIP", note=skip_note("torch")))
    return rows
