"""send/recv inside dg.function on 2 ranks: graph ops with the collective
flag (never pruned, traced order kept), against NumPy."""

from __future__ import annotations

import os

import numpy as np

from .test_collectives import run_job

HERE = os.path.dirname(os.path.abspath(__file__))


def test_send_recv_in_a_compiled_function(tmp_path):
    p = run_job(os.path.join(HERE, "_p2p_worker.py"), str(tmp_path), dist_timeout=60)
    assert p.returncode == 0, f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    z = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)]
    n = 0
    for dtype in ("float32", "float64", "int32"):
        for shape in ((3, 2), (), (0,)):
            for run in range(3):
                key = f"{dtype}-{'x'.join(map(str, shape)) or 'scalar'}-{run}"
                base = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
                x0, x1 = base + run, base + 10 + run
                x0, x1 = x0.astype(dtype), x1.astype(dtype)
                want1_a = x0 * 2                               # rank 1 received 2 x0
                want0_a = want1_a * 3 + 1                      # rank 0 received it back
                for r, want_a, want_b in ((0, want0_a, want0_a + x1),
                                          (1, want1_a, want0_a + x1)):
                    for suffix, want in (("-a", want_a), ("-b", want_b)):
                        got = z[r][key + suffix]
                        assert got.dtype == np.dtype(dtype) and got.shape == shape, key
                        np.testing.assert_array_equal(got, want.astype(dtype),
                                                      err_msg=f"{key}{suffix} rank {r}")
                        n += 1
    assert n == 3 * 3 * 3 * 4
    ops = {ln.split()[1]: ln.split()[2:] for ln in p.stdout.splitlines()
           if ln.startswith("OPS")}
    # rank 0: send, recv, all_reduce; rank 1: recv, send (unused), all_reduce
    assert ops["0"] == ["CollectiveStart", "CollectiveWait", "CollectiveStart",
                        "CollectiveWait", "CollectiveAllReduce"], ops
    assert ops["1"] == ops["0"], ops
