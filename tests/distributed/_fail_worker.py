"""Failure scenarios for test_failure.py:
``_fail_worker.py MODE TAGFILE`` under the launcher (2 ranks).

die      rank 1 is killed (SIGKILL) after 3 all_reduces; rank 0 goes on
hang     rank 1 stops answering (sleeps) at the 4th all_reduce
caught   as hang, but rank 0 catches the timeout, finds the group unusable
         (the next collective fails at once) and then sleeps: the plugin
         aborts the job after $DRAGON_DIST_ABORT_GRACE seconds
order    inside dg.function rank 0 issues all_reduce then broadcast, rank 1
         the other way round
errors   argument errors raised before anything is sent (each printed)
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import dragon_core as dg
import dragon_core.distributed as dist

mode = sys.argv[1]
dist.init_process_group()
rank = dist.get_rank()
x = dg.tensor(np.ones(4, np.float32))

if mode in ("die", "hang", "caught"):
    for i in range(3):
        dist.all_reduce(x)
    if rank == 1:
        if mode == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(600)
    t0 = time.monotonic()
    try:
        dist.all_reduce(x)
    except dist.DistributedTimeoutError as e:
        print(f"TIMEOUT after {time.monotonic() - t0:.1f}s: {e}", flush=True)
        if mode != "caught":
            raise
        t1 = time.monotonic()
        try:
            dist.all_reduce(x)
        except Exception as e2:  # noqa: BLE001 - the group is broken
            print(f"BROKEN after {time.monotonic() - t1:.1f}s: {e2}", flush=True)
        time.sleep(600)          # the plugin's abort ends this
        print("NOT ABORTED", flush=True)
elif mode == "order":
    def body(t):
        if rank == 0:
            return dist.broadcast(dist.all_reduce(t), src=0)
        return dist.all_reduce(dist.broadcast(t, src=0))
    f = dg.function(body)
    try:
        f(x)
    except Exception as e:  # noqa: BLE001 - the graph run wraps the kernel's error
        print(f"ORDER rank {rank}: {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
        sys.exit(3)
    print("NO ERROR", flush=True)
elif mode == "errors":
    checks = [
        lambda: dist.all_reduce(x, op="mean"),
        lambda: dist.all_reduce(dg.tensor([True, False]), op="sum"),
        lambda: dist.all_reduce(dg.tensor([1, 2]), op="avg"),
        lambda: dist.broadcast(x, src=5),
        lambda: dist.all_gather_into_tensor(dg.tensor(np.zeros(3, np.float32)), x),
        lambda: dist.all_gather([x], x),
        lambda: dist.reduce_scatter_tensor(dg.tensor(np.zeros(3, np.float32)), x),
        lambda: dist.all_to_all_single(dg.tensor(np.zeros(3, np.float32)),
                                       dg.tensor(np.zeros(3, np.float32))),
        lambda: dist.all_reduce(np.ones(3)),
        lambda: dist.new_group([0, 7]),
        lambda: dist.init_process_group(),
        lambda: dist.all_reduce(x, group="world"),
    ]
    for c in checks:
        try:
            c()
        except (TypeError, ValueError, RuntimeError) as e:
            print(f"RAISED {type(e).__name__}: {e}", flush=True)
        else:
            print("NO ERROR", flush=True)
    dist.barrier()
    print("OK", float(dist.all_reduce(x).numpy()[0]), flush=True)
