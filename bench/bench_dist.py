"""Data-parallel benchmarks (issue 16 point 7), 2 ranks under Open MPI's mpirun.

Rows:

- ``allreduce_busbw``: bus bandwidth (``2 (n-1)/n * bytes / s``) of a sum
  all-reduce of a 16 MiB float32 buffer: ``dragon_core.distributed.all_reduce``
  (blocking, and ``async_op=True`` + ``wait()``) against mpi4py's
  ``Allreduce`` on the same buffers (the anchor; goal >= 0.9x) and mpi4py's
  in-place ``Iallreduce`` + ``Wait`` (the non-blocking form); also the tests'
  mpi4py process group (tests/distributed/_mpi_group.py).
- ``ddp_mlp``: training steps/s of an MLP (784-1024-1024-10, 64 examples per
  rank, SGD): one process without DDP, Dragon DDP on 2 ranks (default
  process group of ``dragon_core.distributed``), and
  ``torch.distributed`` (gloo) DDP on 2 ranks, the same job in the same run.
  To separate compute from communication: torch on 1 rank, and each library
  on 2 ranks that train without communicating (the compute under the same
  sharing of the cores as the DDP runs).

Each measurement is one ``mpirun -n 2 python bench_dist.py --worker JOB``;
the workers print one JSON line (rank 0). Run alone:
``python bench/bench_dist.py`` (prints the rows).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")
NBYTES = 16 * 1024 * 1024
BATCH, HIDDEN = 64, 1024


def _env():
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                OMP_NUM_THREADS="1", DRAGON_NUM_THREADS="1")


def _launch(job: str, n: int, quick: bool) -> dict:
    cmd = [MPIRUN, "--oversubscribe", "-n", str(n), sys.executable, os.path.abspath(__file__),
           "--worker", job] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{job}: mpirun exited {proc.returncode}: {proc.stderr[-800:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1])


# ----------------------------------------------------------------- workers

def _busbw(seconds: float, nbytes: int, n: int) -> float:
    return 2 * (n - 1) / n * nbytes / seconds / 1e9


def _best(fn, reps: int) -> float:
    """Best of ``reps`` timings; ranks synchronised before each."""
    from mpi4py import MPI
    best = float("inf")
    for _ in range(reps):
        MPI.COMM_WORLD.Barrier()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _worker_allreduce(quick: bool) -> dict:
    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "tests", "distributed"))
    import dragon_core as dg
    import dragon_core.distributed as dist
    dist.init_process_group()                 # MPI_Init_thread; mpi4py then shares it
    from mpi4py import MPI
    from _mpi_group import MPIGroup
    comm, group = MPI.COMM_WORLD, MPIGroup()
    src = np.full(NBYTES // 4, comm.Get_rank() + 1, np.float32)
    out = np.empty_like(src)
    t = dg.from_numpy(src)
    reps = 5 if quick else 20
    res = {}
    res["mpi4py"] = _best(lambda: comm.Allreduce(src, out, op=MPI.SUM), reps)
    buf = src.copy()
    res["mpi4py_nb"] = _best(lambda: comm.Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM).Wait(),
                             reps)
    res["dist"] = _best(lambda: dist.all_reduce(t), reps)
    res["dist_async"] = _best(lambda: dist.all_reduce(t, async_op=True).wait(), reps)
    res["dragon"] = _best(lambda: group.all_reduce(t, async_op=True).wait(), reps)
    # (in place, as mpi4py_nb: the values grow each repetition, the traffic is the same)
    # The group reduces in place (t now holds a power of the sum): check the
    # result on a fresh tensor.
    fresh = dg.from_numpy(np.full(NBYTES // 4, comm.Get_rank() + 1, np.float32))
    res["ok"] = bool(np.all(group.all_reduce(fresh).numpy() == 3.0))
    fresh = dg.from_numpy(np.full(NBYTES // 4, comm.Get_rank() + 1, np.float32))
    res["ok"] &= bool(np.all(dist.all_reduce(fresh).numpy() == 3.0))
    n = comm.Get_size()
    return {k: (_busbw(v, NBYTES, n) if k != "ok" else v) for k, v in res.items()}


AB_SIZES_MIB = (1, 16, 25)   # DDP's first-bucket cap, the bench's buffer, DDP's bucket cap


def _worker_allreduce_ab(quick: bool) -> dict:
    """A/B of the two MPI engines of dragon-nccl-dist in one job, on the same
    buffers, interleaved: every repetition times each form once (in a
    rotating order, ranks synchronised before each), so load changes hit
    every form alike. Forms: mpi4py's blocking ``Allreduce`` (the anchor),
    ``dist.all_reduce`` (eager, in place) and DDP's bucket path
    (``_all_reduce_start_result(t, "avg")`` then wait: in place, average
    in the kernel) on a group whose engine is ``thread`` (blocking MPI calls
    on the communicator's thread, the default) and on one whose engine is
    ``nonblocking`` (MPI_I* polled on the caller's thread: the old path).
    Returns ``{size_mib: {form: [busbw GB/s of each repetition]}}``."""
    import numpy as np
    import dragon_core as dg
    import dragon_core.distributed as dist
    from dragon_core.distributed import _all_reduce_start_result
    dist.init_process_group()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    thread_g = dist.new_group()
    nb_g = dist.new_group()
    nb_g._set_engine("nonblocking")
    thread_g._set_engine("thread")
    reps = 5 if quick else 15
    out = {}
    for mib in AB_SIZES_MIB:
        nbytes = mib * 1024 * 1024
        src = np.full(nbytes // 4, comm.Get_rank() + 1, np.float32)
        dst = np.empty_like(src)
        t = dg.from_numpy(src.copy())
        forms = {
            "mpi4py Allreduce": lambda: comm.Allreduce(src, dst, op=MPI.SUM),
            "all_reduce thread": lambda: dist.all_reduce(t, group=thread_g),
            "all_reduce nonblocking": lambda: dist.all_reduce(t, group=nb_g),
            "ddp bucket thread": lambda: _all_reduce_start_result(t, "avg", thread_g)(),
            "ddp bucket nonblocking": lambda: _all_reduce_start_result(t, "avg", nb_g)(),
        }
        names = list(forms)
        for f in forms.values():   # warm up (buffers, communicators, threads)
            f()
        times = {k: [] for k in names}
        for r in range(reps):
            for k in names[r % len(names):] + names[:r % len(names)]:
                comm.Barrier()
                t0 = time.perf_counter()
                forms[k]()
                times[k].append(time.perf_counter() - t0)
        out[mib] = {k: [_busbw(v, nbytes, n) for v in times[k]] for k in names}
        # correctness on a fresh buffer, both engines
        for g in (thread_g, nb_g):
            fresh = dg.from_numpy(np.full(nbytes // 4, comm.Get_rank() + 1, np.float32))
            assert np.all(dist.all_reduce(fresh, group=g).numpy() == n * (n + 1) / 2)
            fresh = dg.from_numpy(np.full(nbytes // 4, comm.Get_rank() + 1, np.float32))
            avg = _all_reduce_start_result(fresh, "avg", g)().numpy()
            assert np.all(avg == (n + 1) / 2)
    return out


def _ab_table(res: dict) -> str:
    """Best / median busbw per form and size, and the ratios to mpi4py."""
    import statistics
    lines = [f"{'size':>7}  {'form':24s} {'best GB/s':>9} {'median':>7} {'best/mpi4py':>11} "
             f"{'median/mpi4py':>13}"]
    for mib, forms in res.items():
        ref = forms["mpi4py Allreduce"]
        rb, rm = max(ref), statistics.median(ref)
        for k, v in forms.items():
            b, m = max(v), statistics.median(v)
            lines.append(f"{mib:>4} MiB  {k:24s} {b:9.2f} {m:7.2f} {b / rb:11.2f} {m / rm:13.2f}")
    return "\n".join(lines)


def _mlp_data(rank: int):
    import numpy as np
    rng = np.random.default_rng(rank)
    return (rng.standard_normal((BATCH, 784)).astype(np.float32),
            rng.integers(0, 10, BATCH).astype(np.int64))


def _worker_dragon(quick: bool, ddp: bool) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "tests", "distributed"))
    import dragon_core as dg
    from dragon_core import nn
    from dragon_core.nn import functional as F
    rank = 0
    if ddp:
        import dragon_core.distributed as dist
        dist.init_process_group()
        rank = dist.get_rank()
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN),
                          nn.ReLU(), nn.Linear(HIDDEN, 10))
    net = model
    if ddp:
        from dragon_core.distributed.ddp import DistributedDataParallel
        net = DistributedDataParallel(model)          # the default group
    opt = dg.optim.SGD(model.parameters(), lr=0.01)
    xn, yn = _mlp_data(rank)
    x, y = dg.tensor(xn), dg.tensor(yn)

    def step():
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    return {"steps_per_s": _steps_per_s(step, quick, ddp)}


def _steps_per_s(step, quick: bool, synced) -> float:
    steps = 10 if quick else 40
    for _ in range(3):
        step()
    best = 0.0
    for _ in range(2 if quick else 3):
        if synced:
            _barrier()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        best = max(best, steps / (time.perf_counter() - t0))
    return best


def _barrier() -> None:
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()


def _worker_torch(quick: bool, ddp: bool = True) -> dict:
    import torch
    import torch.distributed as tdist
    from mpi4py import MPI
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if ddp:
        port = comm.bcast(29500 + (os.getpid() % 1000) if rank == 0 else None, root=0)
        tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                 world_size=size)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, HIDDEN), torch.nn.ReLU(),
                                torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
                                torch.nn.Linear(HIDDEN, 10))
    net = torch.nn.parallel.DistributedDataParallel(model) if ddp else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xn, yn = _mlp_data(rank)
    x, y = torch.from_numpy(xn), torch.from_numpy(yn)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()

    out = {"steps_per_s": _steps_per_s(step, quick, True)}
    if ddp:
        tdist.destroy_process_group()
    return out


def _worker(job: str, quick: bool) -> None:
    if job == "allreduce":
        res = _worker_allreduce(quick)
    elif job == "allreduce_ab":
        res = _worker_allreduce_ab(quick)
    elif job == "dragon1":
        res = _worker_dragon(quick, ddp=False)
    elif job == "dragon2":
        res = _worker_dragon(quick, ddp=True)
    elif job == "torch2":
        res = _worker_torch(quick)
    elif job == "torch1":
        res = _worker_torch(quick, ddp=False)
    else:
        raise SystemExit(f"unknown job {job}")
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    if rank == 0:
        print(json.dumps(res), flush=True)


# -------------------------------------------------------------------- rows

def run(quick: bool = False) -> list[dict]:
    import _harness
    rows = []
    ar = _launch("allreduce", 2, quick)
    note = f"16 MiB float32, 2 ranks, in place unless said, best of {5 if quick else 20}"
    rows.append(_harness.result("allreduce_busbw", "mpi4py Allreduce", "mpi4py", "GB/s",
                                ar["mpi4py"], "higher", note=note))
    rows.append(_harness.result("allreduce_busbw", "mpi4py Iallreduce in place + Wait",
                                "mpi4py", "GB/s", ar["mpi4py_nb"], "higher",
                                note="the non-blocking call DDP's group makes, without Dragon"))
    rows.append(_harness.result("allreduce_busbw", "dist.all_reduce", "dragon", "GB/s",
                                ar["dist"], "higher", target=0.9 * ar["mpi4py"],
                                status=None if ar["ok"] else "WRONG",
                                ratio=ar["dist"] / ar["mpi4py"]))
    rows.append(_harness.result("allreduce_busbw", "dist.all_reduce(async_op=True).wait()",
                                "dragon", "GB/s", ar["dist_async"], "higher",
                                status=None if ar["ok"] else "WRONG",
                                ratio_nonblocking=ar["dist_async"] / ar["mpi4py_nb"]))
    rows.append(_harness.result("allreduce_busbw", "tests' mpi4py group (async)", "dragon",
                                "GB/s", ar["dragon"], "higher",
                                ratio_nonblocking=ar["dragon"] / ar["mpi4py_nb"]))
    # The two MPI engines A/B on the same buffers, interleaved (medians of the
    # repetitions; see _worker_allreduce_ab): the bandwidth goal at DDP's
    # bucket caps too.
    import statistics
    ab = _launch("allreduce_ab", 2, quick)
    for mib, forms in ab.items():
        ref = statistics.median(forms["mpi4py Allreduce"])
        note = f"{mib} MiB float32, 2 ranks, median of {len(forms['mpi4py Allreduce'])}, " \
               "forms interleaved in one job"
        rows.append(_harness.result(f"allreduce_ab_{mib}MiB", "mpi4py Allreduce", "mpi4py",
                                    "GB/s", ref, "higher", note=note))
        for form in ("all_reduce thread", "all_reduce nonblocking", "ddp bucket thread",
                     "ddp bucket nonblocking"):
            v = statistics.median(forms[form])
            target = 0.9 * ref if form == "all_reduce thread" else None
            rows.append(_harness.result(f"allreduce_ab_{mib}MiB", form, "dragon", "GB/s", v,
                                        "higher", target=target, ratio=v / ref))
    one = _launch("dragon1", 1, quick)["steps_per_s"]
    two = _launch("dragon2", 2, quick)["steps_per_s"]
    rows.append(_harness.result("ddp_mlp", "1 rank, no DDP", "dragon", "steps/s", one,
                                "higher", note=f"MLP 784-{HIDDEN}-{HIDDEN}-10, batch {BATCH} "
                                "per rank, SGD, 1 thread per rank (OMP/DRAGON_NUM_THREADS=1, "
                                "torch.set_num_threads(1))"))
    # Compute alone, to separate it from communication: 1 rank of torch, and
    # 2 ranks of each training without communicating (the two processes
    # share the machine's cores as the DDP runs do).
    one_nocomm = _launch("dragon1", 2, quick)["steps_per_s"]
    rows.append(_harness.result("ddp_mlp", "2 ranks, no communication", "dragon", "steps/s",
                                one_nocomm, "higher",
                                note="each rank trains alone: compute under the same load"))
    try:
        torch_one = _launch("torch1", 1, quick)["steps_per_s"]
        torch_nocomm = _launch("torch1", 2, quick)["steps_per_s"]
        rows.append(_harness.result("ddp_mlp", "1 rank, no DDP", "torch", "steps/s",
                                    torch_one, "higher", dragon_ratio=one / torch_one))
        rows.append(_harness.result("ddp_mlp", "2 ranks, no communication", "torch",
                                    "steps/s", torch_nocomm, "higher",
                                    dragon_ratio=one_nocomm / torch_nocomm))
    except Exception as e:  # noqa: BLE001 - the anchor is optional
        rows.append(_harness.result("ddp_mlp", "1 rank, no DDP", "torch", "steps/s", None,
                                    "higher", status="SKIP", note=str(e)[:200]))
    torch_row = None
    try:
        torch_two = _launch("torch2", 2, quick)["steps_per_s"]
        torch_row = _harness.result("ddp_mlp", "2 ranks torch DDP (gloo)", "torch", "steps/s",
                                    torch_two, "higher")
    except Exception as e:  # noqa: BLE001 - the anchor is optional
        torch_two = None
        torch_row = _harness.result("ddp_mlp", "2 ranks torch DDP (gloo)", "torch", "steps/s",
                                    None, "higher", status="SKIP", note=str(e)[:200])
    rows.append(_harness.result("ddp_mlp", "2 ranks DDP", "dragon", "steps/s", two, "higher",
                                target=torch_two, vs_one_rank=two / one))
    rows.append(torch_row)
    return rows


if __name__ == "__main__":
    if "--worker" in sys.argv:
        _worker(sys.argv[sys.argv.index("--worker") + 1], "--quick" in sys.argv)
    elif "--ab" in sys.argv:
        print(_ab_table(_launch("allreduce_ab", 2, "--quick" in sys.argv)))
    else:
        sys.path.insert(0, HERE)
        for row in run(quick="--quick" in sys.argv):
            print(row)
