"""dragon_core.vm.torch: the cost of the PyTorch front end, and torch-written
training loops against real torch.

``mlp_train_b128`` (rows ``vmtorch``)
    The 784-512-512-10 MLP SGD-momentum step of ``bench_graph.py``, written
    once for torch (``bench_graph.make_torch_step``) and run three ways in
    this one process: on ``dragon_core.vm.torch``, on real torch, and the
    same step in plain ``dragon_core`` eager (``backward()`` +
    ``dg.optim.SGD``). The three take turns step by step (300 steps each,
    the order rotating), so a shared machine's load hits them alike.
    Targets (issue 18): vm.torch adds at most 10% to the dragon eager step
    (the median over paired steps of vm.torch's time / dragon's <= 1.10; the
    row's value is dragon's best steps/s divided by that ratio), and runs at
    >= real torch's steps/s (best step against best step; the note gives the
    paired median too).
``lenet5_train_b64`` (rows ``vmtorch``)
    ``bench_train.py``'s LeNet-5 step written for torch
    (``bench_train.make_torch_step``: ``nn.Sequential``, ``CrossEntropyLoss``,
    ``optim.SGD``) run on vm.torch and on real torch; target: >= torch's
    steps/s (best step against best step, timed in turns as above). Both
    start from the same weights; vm.torch's first losses must match torch's
    (rtol 2e-4) before timing.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import result, skip_note, try_import  # noqa: E402

OVERHEAD = 1.10
WARMUP = 5
STEPS = 300
CHECK_STEPS = 3


def _interleaved(impls: dict, quick: bool) -> dict:
    """Per-step times of each ``name -> (step, args)``, the impls taking
    turns step by step (the order rotating) so that the load of a shared
    machine hits them alike. Returns ``name -> (best steps/s, times)``;
    ``best`` is 1 / the fastest step (the least disturbed one)."""
    names = list(impls)
    for name in names:
        step, args = impls[name]
        for _ in range(1 if quick else WARMUP):
            step(*args)
    times = {k: [] for k in names}
    for i in range(2 if quick else STEPS):
        order = names[i % len(names):] + names[:i % len(names)]
        for name in order:
            step, args = impls[name]
            t0 = time.perf_counter()
            step(*args)
            times[name].append(time.perf_counter() - t0)
    return {k: (1.0 / min(v), v) for k, v in times.items()}


def _paired_ratio(a: list, b: list) -> float:
    """Median over steps of time(a) / time(b) (same turn, same load)."""
    return float(np.median(np.asarray(a) / np.asarray(b)))


def _f(t):
    if hasattr(t, "detach"):
        t = t.detach()
    return float(np.asarray(t.numpy()))


def bench_mlp(quick: bool) -> list[dict]:
    import bench_graph as G
    rows = []
    bench, metric = "mlp_train_b128", "steps/s"
    dg = try_import("dragon_core")
    if dg is None:
        return [result(bench, "vm.torch eager", "vmtorch", metric, None, "higher",
                       status="SKIP", note=skip_note("dragon_core"))]
    import dragon_core.vm.torch as vt
    init, x, y = G._mlp_init()
    ref = G._mlp_reference_losses(init, x, y, CHECK_STEPS)
    vx, vy = vt.from_numpy(x.copy()), vt.from_numpy(y.copy())
    dx, dy = dg.tensor(x), dg.tensor(y)
    vstep = G.make_torch_step(vt, init)
    dstep = G.make_dragon_step(dg, init, "optim")
    losses = [_f(vstep(vx, vy)) for _ in range(CHECK_STEPS)]
    if not np.allclose(losses, ref, rtol=G.RTOL, atol=0):
        return [result(bench, "vm.torch eager (torch-written step)", "vmtorch", metric, None,
                       "higher", status="WRONG",
                       note=f"losses {losses} differ from the float64 reference {ref}")]
    torch = try_import("torch")
    impls = {"dragon": (dstep, (dx, dy)), "vmtorch": (vstep, (vx, vy))}
    if torch is not None:
        tx, ty = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
        impls["torch"] = (G.make_torch_step(torch, init), (tx, ty))
    timed = _interleaved(impls, quick)
    (dg_best, dg_times), (vm_best, vm_times) = timed["dragon"], timed["vmtorch"]
    ratio = _paired_ratio(vm_times, dg_times)
    rows.append(result(bench, "dragon eager backward() + dg.optim.SGD (same run)", "dragon",
                       metric, dg_best, "higher", median_step_ms=1e3 * np.median(dg_times)))
    # the target: the step-by-step time ratio within 1.10 (value: 1 / that ratio
    # times dragon's best steps/s, so PASS/MISS reads the ratio)
    rows.append(result(bench, "vm.torch eager (torch-written step) vs dragon eager",
                       "vmtorch", metric, dg_best / ratio, "higher", dg_best / OVERHEAD,
                       best_steps_per_s=vm_best, median_step_ms=1e3 * np.median(vm_times),
                       losses=losses, overhead_pct=100.0 * (ratio - 1.0),
                       note=f"vm.torch step / dragon step, median of {len(vm_times)} paired "
                            f"steps: {ratio:.3f} (target <= {OVERHEAD}); best steps/s "
                            f"{vm_best:.1f} vs dragon's {dg_best:.1f}"))
    if torch is None:
        rows.append(result(bench, "torch eager", "torch", metric, None, "higher",
                           status="SKIP", note=skip_note("torch")))
        return rows
    t_best, t_times = timed["torch"]
    tr = _paired_ratio(t_times, vm_times)
    rows.append(result(bench, "torch eager (same step)", "torch", metric, t_best, "higher",
                       median_step_ms=1e3 * np.median(t_times),
                       threads=torch.get_num_threads()))
    rows.append(result(bench, "vm.torch eager (torch-written step) vs torch", "vmtorch",
                       metric, vm_best, "higher", t_best,
                       note=f"best step {vm_best / t_best:.2f}x torch's steps/s; paired "
                            f"median: torch's step takes {tr:.2f}x vm.torch's"))
    return rows


def bench_lenet(quick: bool) -> list[dict]:
    import bench_train as B
    bench, metric = "lenet5_train_b64", "steps/s"
    torch = try_import("torch")
    dg = try_import("dragon_core")
    if dg is None:
        return [result(bench, "vm.torch eager", "vmtorch", metric, None, "higher",
                       status="SKIP", note=skip_note("dragon_core"))]
    import dragon_core.vm.torch as vt
    weights, x, y = B._init()
    rows, ref = [], None
    vx, vy = vt.from_numpy(x.copy()), vt.from_numpy(y.copy())
    vstep = B.make_torch_step(vt, weights)
    impls = {"vmtorch": (vstep, (vx, vy))}
    if torch is not None:
        tx, ty = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
        step = B.make_torch_step(torch, weights)
        ref = [_f(step(tx, ty)) for _ in range(CHECK_STEPS)]
        impls["torch"] = (B.make_torch_step(torch, weights), (tx, ty))
    losses = [_f(vstep(vx, vy)) for _ in range(CHECK_STEPS)]
    if ref is not None and not np.allclose(losses, ref, rtol=B.RTOL, atol=0):
        return [result(bench, "vm.torch eager (torch-written step)", "vmtorch", metric,
                       None, "higher", status="WRONG",
                       note=f"losses {losses} differ from torch's {ref}")]
    timed = _interleaved(impls, quick)
    t_best, note = None, ""
    v_best, v_times = timed["vmtorch"]
    if torch is not None:
        t_best, t_times = timed["torch"]
        rows.append(result(bench, "torch eager (same step)", "torch", metric, t_best, "higher",
                           median_step_ms=1e3 * np.median(t_times),
                           threads=torch.get_num_threads()))
        note = (f"best step {v_best / t_best:.2f}x torch's steps/s; paired median: torch's "
                f"step takes {_paired_ratio(t_times, v_times):.2f}x vm.torch's")
    else:
        rows.append(result(bench, "torch eager", "torch", metric, None, "higher",
                           status="SKIP", note=skip_note("torch")))
    rows.append(result(bench, "vm.torch eager (torch-written step)", "vmtorch", metric, v_best,
                       "higher", t_best, median_step_ms=1e3 * np.median(v_times),
                       losses=losses, note=note))
    return rows


def run(quick: bool = False) -> list[dict]:
    """The vm.torch rows (see the module docstring)."""
    return bench_mlp(quick) + bench_lenet(quick)


if __name__ == "__main__":
    for row in run("--quick" in sys.argv):
        print(row["bench"], "|", row["impl"], "|", row["library"], "|",
              None if row["value"] is None else round(row["value"], 1), row["metric"], "|",
              row.get("status"), "|", row.get("note", ""))
