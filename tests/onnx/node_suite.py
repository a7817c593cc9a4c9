"""Run the ONNX backend node suite (the installed ``onnx`` package's own
test cases) through ``dragon_core.onnx.load`` or through onnxruntime.

The cases are generated in memory from ``onnx.backend.test.case.node``
(what ``onnx``'s ``cmd_tools generate-data`` writes to disk), so they always
match the installed onnx. Outputs are compared as onnx's own runner does:
same count, shapes and dtypes, ``assert_allclose(rtol=1e-3, atol=1e-7)``
(two ULPs of rtol for bfloat16).

Crashes cannot take the test run down: ``run_isolated`` runs the cases in a
child process that reports each case as it starts and ends; if the child
dies, the case it was running is recorded as ``crash`` and a new child goes
on with the rest.

Usage::

    python tests/onnx/node_suite.py [--backend dragon|onnxruntime] [-k SUBSTR] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np


BASELINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_suite_baseline.json")


def collect():
    """The node cases of the installed onnx: list of TestCase."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import onnx.backend.test.case.node as node_cases
        return list(node_cases.collect_testcases())


def compare(expected: list, got: list, rtol: float, atol: float) -> None:
    """Raise AssertionError unless ``got`` matches ``expected`` as onnx's
    runner requires."""
    if len(got) != len(expected):
        raise AssertionError(f"{len(got)} outputs, expected {len(expected)}")
    for i, (e, g) in enumerate(zip(expected, got)):
        if isinstance(e, np.generic):
            e = np.asarray(e)
        if type(e).__name__ == "TensorProto":
            from onnx import numpy_helper
            e = numpy_helper.to_array(e)
        if not isinstance(e, np.ndarray):
            raise AssertionError(f"output {i}: expected a {type(e).__name__}")
        g = np.asarray(g)
        if g.shape != e.shape:
            raise AssertionError(f"output {i}: shape {g.shape}, expected {e.shape}")
        if e.dtype == object:
            np.testing.assert_array_equal(g, e)
            continue
        if g.dtype != e.dtype:
            raise AssertionError(f"output {i}: dtype {g.dtype}, expected {e.dtype}")
        r = rtol
        if e.dtype.name == "bfloat16":
            r = max(rtol, 2 ** -6)
            g, e = g.astype(np.float32), e.astype(np.float32)
        np.testing.assert_allclose(g, e, rtol=r, atol=atol, err_msg=f"output {i}")


def _inputs(case) -> list:
    inputs, _ = case.data_sets[0]
    out = []
    for v in inputs:
        if isinstance(v, np.generic):
            v = np.asarray(v)
        if type(v).__name__ == "TensorProto":
            from onnx import numpy_helper
            v = numpy_helper.to_array(v)
        if not isinstance(v, np.ndarray):
            raise NotImplementedError(f"input of type {type(v).__name__} (sequences, maps, "
                                      "optionals and TensorProto inputs are not supported)")
        out.append(v)
    return out


def run_case_dragon(case) -> None:
    import dragon_core.onnx as dgx
    f = dgx.load(case.model.SerializeToString())
    outs = f(*_inputs(case))
    compare(list(case.data_sets[0][1]), [o.numpy() for o in outs], case.rtol, case.atol)


def run_case_ort(case) -> None:
    import onnxruntime as ort
    model = case.model
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    inputs, expected = case.data_sets[0]
    feeds = {i.name: v for i, v in zip(sess.get_inputs(), inputs)}
    outs = sess.run(None, feeds)
    compare(list(expected), outs, case.rtol, case.atol)


def _child(backend: str, skip: set, names_filter: str | None, progress: str) -> None:
    """Run every case not in ``skip``; append one JSON line per event."""
    run = run_case_dragon if backend == "dragon" else run_case_ort
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect()
        with open(progress, "a", buffering=1) as log:
            for case in cases:
                if case.name in skip or (names_filter and names_filter not in case.name):
                    continue
                log.write(json.dumps({"start": case.name}) + "\n")
                log.flush()
                os.fsync(log.fileno())
                try:
                    run(case)
                    status, msg = "pass", ""
                except AssertionError as exc:
                    status, msg = "wrong", str(exc).strip().splitlines()[0][:300] \
                        if str(exc).strip() else "AssertionError"
                except Exception as exc:   # a clean error: what the loader reports
                    first = str(exc).strip().splitlines()
                    if hasattr(exc, "nodes"):
                        first = [f"unsupported: {sorted({n.op_type for n in exc.nodes})}"]
                    head = first[0][:300] if first else ""
                    status, msg = "error", f"{type(exc).__name__}: {head}"
                log.write(json.dumps({"name": case.name, "status": status, "msg": msg}) + "\n")
                log.flush()


def run_isolated(backend: str = "dragon", names_filter: str | None = None,
                 timeout: float = 1800.0) -> dict:
    """Run the suite in child processes; returns name -> {status, msg}.

    Status: ``pass``, ``wrong`` (ran, outputs differ), ``error`` (a Python
    exception, e.g. an unsupported op), ``crash`` (the process died).
    """
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        progress = os.path.join(tmp, "progress.jsonl")
        skip_file = os.path.join(tmp, "skip.json")
        for _ in range(50):
            with open(skip_file, "w") as f:
                json.dump(sorted(results), f)
            proc = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--child", "--backend", backend,
                 "--skip", skip_file, "--progress", progress]
                + (["-k", names_filter] if names_filter else []),
                capture_output=True, text=True, timeout=timeout)
            started = None
            with open(progress) if os.path.exists(progress) else open(os.devnull) as f:
                for line in f:
                    ev = json.loads(line)
                    if "start" in ev:
                        started = ev["start"]
                    else:
                        results[ev["name"]] = {"status": ev["status"], "msg": ev["msg"]}
                        started = None
            if proc.returncode == 0 and started is None:
                break
            if started is None:
                raise RuntimeError(f"node-suite child failed before any case "
                                   f"(exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            results[started] = {"status": "crash",
                                "msg": f"exit {proc.returncode}: {proc.stderr[-500:]}"}
            os.remove(progress)
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--backend", default="dragon", choices=["dragon", "onnxruntime"])
    p.add_argument("-k", default=None)
    p.add_argument("--out", default=None)
    p.add_argument("--update-baseline", action="store_true",
                   help="record the passing cases in node_suite_baseline.json")
    p.add_argument("--child", action="store_true")
    p.add_argument("--skip", default=None)
    p.add_argument("--progress", default=None)
    args = p.parse_args(argv)
    if args.child:
        skip = set(json.load(open(args.skip))) if args.skip else set()
        _child(args.backend, skip, args.k, args.progress)
        return 0
    results = run_isolated(args.backend, args.k)
    counts: dict = {}
    for r in results.values():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print(json.dumps({"backend": args.backend, "cases": len(results), **counts}))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    if args.update_baseline:
        import onnx
        passing = sorted(k for k, r in results.items() if r["status"] == "pass")
        old = json.load(open(BASELINE)) if os.path.exists(BASELINE) else {}
        lost = sorted(set(old.get("passing", [])) - set(passing))
        if lost and not args.k:
            print(f"refusing: {len(lost)} recorded passes now fail: {lost[:20]}")
            return 1
        if args.k:
            passing = sorted(set(old.get("passing", [])) | set(passing))
        with open(BASELINE, "w") as f:
            json.dump({"onnx": onnx.__version__, "cases": len(collect()) if args.k else
                       len(results), "pass_count": len(passing), "passing": passing},
                      f, indent=1)
            f.write("\n")
        print(f"{BASELINE}: {len(passing)} passing cases recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
