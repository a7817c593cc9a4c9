"""Optimizer steps over ResNet-18's 62 parameters (issue 21, point (c)).

``SGD(momentum=0.9)`` and ``Adam`` over float32 tensors of ResNet-18's
parameter shapes (11.7 M elements): one multi-tensor op per step
(``foreach=None``, the default: ``MultiSgdUpdate`` / ``MultiAdamUpdate``)
against one op per parameter (``foreach=False``), eager and compiled
(``@dg.function`` of the step), timed alternately (best of 5 runs each);
torch's ``optim.SGD`` / ``optim.Adam`` (``foreach`` default, 2 threads) in
the same run when torch is installed. Before timing, the foreach and the
per-parameter results of one step are checked to be the same bits.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import best_seconds, result, skip_note, try_import  # noqa: E402
from models import resnet  # noqa: E402


def _shapes(torch):
    if torch is not None:
        return list(resnet.float_shapes(resnet.resnet18(torch.nn, 1000).state_dict()).values())
    # ResNet-18 (1000 classes) without torch: conv, bn weight/bias per layer.
    raise RuntimeError("needs torch for the parameter shapes")


def _dragon_step(dg, arrays, grads, cls, kwargs, foreach, compiled):
    params = [dg.tensor(a).requires_grad_() for a in arrays]
    gs = [dg.tensor(g) for g in grads]
    opt = cls(params, foreach=foreach, **kwargs)

    def step(*g):
        opt.step(list(g))

    fn = dg.function(step) if compiled else step
    return (lambda: fn(*gs)), params


def run(quick: bool = False) -> list[dict]:
    dg, torch = try_import("dragon_core"), try_import("torch")
    if dg is None or torch is None:
        return [result("optim_resnet18", "all", "dragon", "ms/step", None, "lower",
                       status="SKIP", note=skip_note("dragon_core" if dg is None else "torch"))]
    torch.set_num_threads(2)
    timing = ({"warmup": 1, "runs": 1, "min_run_s": 0.0} if quick
              else {"warmup": 2, "runs": 5, "min_run_s": 0.3})
    rng = np.random.default_rng(0)
    shapes = _shapes(torch)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [rng.standard_normal(s).astype(np.float32) * 1e-2 for s in shapes]
    rows = []
    for name, dcls, tcls, kwargs in (
            ("sgd_momentum", dg.optim.SGD, torch.optim.SGD, dict(lr=0.01, momentum=0.9)),
            ("adam", dg.optim.Adam, torch.optim.Adam, dict(lr=1e-3))):
        bench = f"optim_resnet18_{name}"
        # Bit-exactness check, one eager step each way.
        outs = []
        for foreach in (None, False):
            f, ps = _dragon_step(dg, arrays, grads, dcls, kwargs, foreach, False)
            f()
            outs.append([p.numpy().copy() for p in ps])
        same = all(np.array_equal(a.view(np.uint32), b.view(np.uint32))
                   for a, b in zip(*outs))
        if not same:
            rows.append(result(bench, "foreach vs per-parameter", "dragon", "ms/step", None,
                               "lower", status="WRONG", note="results differ"))
            continue
        tps = [torch.from_numpy(a.copy()).requires_grad_() for a in arrays]
        for p, g in zip(tps, grads):
            p.grad = torch.from_numpy(g.copy())
        topt = tcls(tps, **kwargs)
        configs = [("torch optim (foreach default)", "torch", topt.step)]
        for compiled in (False, True):
            for foreach in (None, False):
                label = (f"{'@dg.function' if compiled else 'eager'} "
                         f"{'multi-tensor' if foreach is None else 'per-parameter'}")
                configs.append((label, "dragon",
                                _dragon_step(dg, arrays, grads, dcls, kwargs, foreach,
                                             compiled)[0]))
        best = {}
        for _ in range(1 if quick else 3):            # round-robin rounds
            for label, _, fn in configs:
                s, _ = best_seconds(fn, **timing)
                best[label] = min(best.get(label, s), s)
        for label, lib, _ in configs:
            rows.append(result(bench, label, lib, "ms/step", best[label] * 1e3, "lower"))
        for mode in ("eager", "@dg.function"):
            per = best[f"{mode} per-parameter"]
            multi = best[f"{mode} multi-tensor"]
            rows.append(result(bench, f"{mode}: per-parameter / multi-tensor time", "dragon",
                               "x", per / multi, "higher"))
    return rows


if __name__ == "__main__":
    for r in run(quick="--quick" in sys.argv):
        v = r["value"]
        print(f"{r['bench']:<28} {r['impl']:<40} {'-' if v is None else f'{v:.3f}':>9} "
              f"{r['metric']:<8} {r['status']:<6} {r['note'][:60]}")
