"""Helpers the mkldnn nn-op tests share (test_mkldnn_pool.py,
test_mkldnn_norm.py, test_mkldnn_softmax_eltwise.py): ``run_without`` (a
child interpreter with some plugins disabled), ``served_report`` and
``check_mkldnn_alone`` (what such a child runs and checks),
``check_served`` (one call against a float64 reference),
``cpu_eigen_result`` (a call with the op pinned to cpu_eigen),
``explain_winner`` and ``fd_vjp`` / ``tape_vjp`` (a vector-Jacobian product
of a float64 reference by central finite differences / through the tape).

Not a test module (pytest does not collect it); the tests import it by name,
this folder being on sys.path (pytest's rootdir-relative import of a test
folder without ``__init__.py``, and ``run_without``'s PYTHONPATH).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import dragon_core as dg

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))


def run_without(plugins: str, code: str, **env: str) -> dict:
    """Run ``code`` in a child interpreter with ``DRAGON_DISABLE_PLUGINS=plugins``
    ("" disables none) and the extra environment variables ``env`` (from the
    repository root, this folder importable); it must print one JSON value on
    its last line, which is returned."""
    env = dict(os.environ, **env, DRAGON_DISABLE_PLUGINS=plugins,
               PYTHONPATH=os.pathsep.join([REPO, HERE, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fd_vjp(reference, arrays, wrt, cotangent, eps=1e-6):
    """d<reference(*arrays), cotangent>/d arrays[wrt] by central differences in
    float64 (``reference`` returns one array)."""
    base = [np.asarray(a, np.float64) for a in arrays]
    grad = np.zeros(base[wrt].shape)
    flat = grad.reshape(-1)
    for j in range(flat.size):
        plus = [a.copy() for a in base]
        minus = [a.copy() for a in base]
        plus[wrt].reshape(-1)[j] += eps
        minus[wrt].reshape(-1)[j] -= eps
        flat[j] = np.sum((reference(*plus) - reference(*minus)) * cotangent) / (2 * eps)
    return grad


def tape_vjp(fn, arrays, wrt, cotangent):
    """d<fn(*tensors), cotangent>/d tensors[wrt] through the gradient tape, in
    the arrays' dtype (so float32 runs every kernel of the rule in float32)."""
    tensors = [dg.tensor(a) for a in arrays]
    with dg.GradientTape() as tape:
        tape.watch([tensors[wrt]])
        y = fn(*tensors)
        loss = dg.ops.sum(y * dg.tensor(cotangent.astype(arrays[wrt].dtype)))
    return tape.gradient(loss, [tensors[wrt]])[0].numpy()


def check_served(op, inputs, reference, attrs, rtol=4e-5, atol=4e-6):
    """Run ``op`` on float32 ``inputs`` and compare every output with the
    float64 reference (no other op runs: usable without cpu_eigen)."""
    from dragon_sdk.testing import run_op
    out = run_op(op, *[dg.tensor(a) for a in inputs], **attrs)
    outs = out if isinstance(out, (list, tuple)) else [out]
    want = reference(*[np.asarray(a, np.float64) for a in inputs], **attrs)
    wants = want if isinstance(want, (list, tuple)) else [want]
    assert len(outs) == len(wants), (op, len(outs), len(wants))
    for got, w in zip(outs, wants):
        np.testing.assert_allclose(np.asarray(got), w, rtol=rtol, atol=atol, err_msg=op)


def served_report(served, declined):
    """Run every served case (op, inputs, reference, attrs, tol) against its
    reference and every declined call (label, op, inputs, attrs); returns
    {"served": count, "served_failures": [...], "declined": {label: error}}.
    Meant for a child without cpu_eigen, where a declined call must fail."""
    from dragon_sdk.testing import run_op
    failures, count = [], 0
    for op, inputs, ref, attrs, tol in served:
        try:
            check_served(op, inputs, ref, attrs, rtol=1e-5 * tol, atol=1e-6 * tol)
            count += 1
        except Exception as e:  # noqa: BLE001 - reported to the parent
            failures.append(f"{op} {attrs} {inputs[0].shape}: {e}"[:600])
    outcome = {}
    for label, op, inputs, attrs in declined:
        try:
            run_op(op, *inputs, **attrs)
            outcome[label] = "served"
        except Exception as e:  # noqa: BLE001
            outcome[label] = str(e)
    return {"served": count, "served_failures": failures, "declined": outcome}


def check_mkldnn_alone(module: str, served_count: int, declined_calls) -> None:
    """In a child without cpu_eigen, ``module``'s ``_served_cases()`` all run
    (on mkldnn, the only kernel left) and match their references, and each of
    its ``_declined_calls()`` fails with an error saying mkldnn's kernel
    declined it."""
    report = run_without("cpu_eigen", f"""
        import json, {module} as m
        from mkldnn_testing import served_report
        print(json.dumps(served_report(m._served_cases(), m._declined_calls())))
    """)
    assert report["served_failures"] == [], report["served_failures"]
    assert report["served"] == served_count
    for label, op, _, _ in declined_calls:
        msg = report["declined"][label]
        assert "declined" in msg and f"mkldnn::{op}" in msg, (label, msg)


def cpu_eigen_result(op, fn):
    """fn() with ``op`` pinned to cpu_eigen on cpu."""
    dg.plugins.pin(op, "cpu", "cpu_eigen")
    try:
        return fn()
    finally:
        dg.plugins.unpin(op, "cpu")


def explain_winner(op: str, dtype: str = "float32") -> str:
    text = dg.plugins.explain(op, "cpu", dtype)
    return next(line for line in text.splitlines() if "winner:" in line)
