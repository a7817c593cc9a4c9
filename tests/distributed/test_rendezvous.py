"""Environment rendezvous (issue 16): ranks started as plain processes (no
mpirun) meet through the TCP store -- ``init_method="env://"``,
``"tcp://host:port"`` and ``store=`` -- and the nccl backend's unique ids go
through the store, one key per process group.

NCCL cannot create a communicator on this GPU-less machine: the
``recorded`` runs replace the ``NcclCommInit`` call by a recorder (the ids
each rank would pass to it), the ``nccl_id`` run keeps the real op and
checks that both ranks pass it the same id and then fail with NCCL's own
error. The GPU check runs the real communicator through env:// (world size
1, plugins/nccl_dist/tests). Every process here is waited for with a
timeout and killed if it overruns: no orphans.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import pytest

import dragon_core.distributed as dist
from dragon_core.distributed import _rendezvous

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_rdzv_worker.py")
_CLEAN = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
          "DRAGON_STORE_PORT", "TORCHELASTIC_USE_AGENT_STORE", "LOCAL_RANK",
          "RDZV_INIT_METHOD", "RDZV_RANK", "RDZV_WORLD", "RDZV_STORE", "RDZV_TIMEOUT",
          "RDZV_SLEEP", "DRAGON_DIST_TIMEOUT")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _free_port_pair() -> int:
    """A port p with p and p + 1 free, below the kernel's ephemeral range: under
    torchrun Dragon's store listens on MASTER_PORT + 1, and an ephemeral
    MASTER_PORT's neighbour is often taken a moment later by an outgoing
    connection (torchrun's own clients), which made the test flaky."""
    import random
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no free pair of ports in 20000-32000")


def _base_env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in _CLEAN and not k.startswith(("OMPI_", "PMIX_"))}
    return env


def _run(mode: str, ranks: list[dict], timeout: float = 60.0) -> list[tuple[int, str]]:
    """Start one worker per entry of ``ranks`` (extra environment of each),
    rank 0 last (the others retry until it serves the store); returns
    ``(returncode, stdout + stderr)`` per entry, in order."""
    procs = [None] * len(ranks)
    order = sorted(range(len(ranks)), key=lambda i: ranks[i].get("RANK", "") == "0")
    try:
        for i in order:
            env = dict(_base_env(), **ranks[i])
            procs[i] = subprocess.Popen([sys.executable, WORKER, mode], env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
        deadline = time.monotonic() + timeout
        outs = []
        for p in procs:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            outs.append((p.returncode, out))
        return outs
    finally:
        for p in procs:
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def _env_ranks(world: int, port: int, **extra) -> list[dict]:
    return [dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                 WORLD_SIZE=str(world), **extra) for r in range(world)]


def _uids(out: str) -> dict:
    """``{group id: (ranks, group rank, id hex)}`` of one rank's output."""
    found = {}
    for m in re.finditer(r"UID group=(\d+) ranks=\[([\d, ]*)\] grank=(\d+) ([0-9a-f]+)", out):
        found[int(m.group(1))] = (m.group(2), int(m.group(3)), m.group(4))
    return found


def _method_ranks(method: str, port: int) -> list[dict]:
    if method == "env://":
        return _env_ranks(2, port)
    if method == "tcp://":
        return [dict(RDZV_INIT_METHOD=f"tcp://127.0.0.1:{port}", RDZV_RANK=str(r),
                     RDZV_WORLD="2") for r in range(2)]
    return [dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RDZV_STORE="1",
                 RDZV_RANK=str(r), RDZV_WORLD="2") for r in range(2)]


@pytest.mark.parametrize("method", ["env://", "tcp://", "store="])
def test_two_plain_processes_form_an_nccl_world_through_the_store(method):
    """The world, groups (an id per group through the store, drawn by the
    group's rank 0), barriers, cpu-tensor errors, destroy and a second
    initialisation -- for each way of naming the rendezvous."""
    outs = _run("recorded", _method_ranks(method, _free_port()))
    for r, (rc, out) in enumerate(outs):
        assert rc == 0, out
        assert f"WORLD rank={r} size=2 backend=nccl" in out, out
        assert "BARRIERS True" in out and f"AGAIN rank={r} size=2" in out, out
        # eager, dist.nn and traced collectives of cpu tensors: no MPI here
        assert out.count("ERR RuntimeError") == 4, out
        assert out.count("got a cpu tensor") == 4 and "cuda tensors only" in out, out
        assert "dragon_core.distributed.nn.all_reduce: got a cpu tensor" in out, out
        assert "destroyed False" in out and out.rstrip().endswith("DONE"), out
        assert "MINE rank=0 size=1" in out, out
    u0, u1 = _uids(outs[0][1]), _uids(outs[1][1])
    # group 0: the world; 1: new_group() (both); 2: new_group([1]); 3: new_group([0])
    assert sorted(u0) == [0, 1, 3] and sorted(u1) == [0, 1, 2], (u0, u1)
    for gid in (0, 1):
        assert u0[gid][2] == u1[gid][2], gid                 # the same id on both ranks
        assert (u0[gid][1], u1[gid][1]) == (0, 1)
    assert u1[2][:2] == ("1", 0) and u0[3][:2] == ("0", 0)
    ids = [u0[0][2], u0[1][2], u1[2][2], u0[3][2]]
    assert len(set(ids)) == 4 and all(len(i) == 256 and set(i) != {"0"} for i in ids)
    assert "GROUPS ProcessGroup(id=1, ranks=[0, 1]) None ProcessGroup(id=3, ranks=[0])" \
        in outs[0][1]
    assert "GROUPS ProcessGroup(id=1, ranks=[0, 1]) ProcessGroup(id=2, ranks=[1]) None" \
        in outs[1][1]
    # destroy_process_group freed the NCCL communicator of every group this
    # rank belongs to (the world, new_group(), its one-rank group), once
    # each, then the second world's
    for r, mine in ((0, 3), (1, 2)):
        destroyed = re.findall(r"NCCL_DESTROY group=(\d+) abort=(\w+) code=(\d+)", outs[r][1])
        assert destroyed == [("0", "False", "0"), ("1", "False", "0"), (str(mine), "False", "0"),
                             ("0", "False", "0")], outs[r][1]
    # the second initialisation drew a fresh world id, again the same on both ranks
    again0 = re.findall(r"UID group=0 ranks=\[0, 1\] grank=0 ([0-9a-f]+)", outs[0][1])
    again1 = re.findall(r"UID group=0 ranks=\[0, 1\] grank=1 ([0-9a-f]+)", outs[1][1])
    assert len(again0) == 2 and again0 == again1 and again0[0] != again0[1]


def _run_launcher(cmd: list, env: dict, timeout: float = 120.0) -> tuple[int, str]:
    """Run a launcher command in its own session; on overrun kill the whole
    session (launcher and ranks): no orphans."""
    import signal
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True, cwd=HERE)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        raise AssertionError(f"{cmd} ran past {timeout} s:\n{out}") from None
    return p.returncode, out


def test_ranks_started_by_a_shell_loop():
    """The docs' example: plain processes from a shell loop, env://."""
    port = _free_port()
    script = (f"for r in 1 0; do MASTER_ADDR=127.0.0.1 MASTER_PORT={port} RANK=$r "
              f"WORLD_SIZE=2 RDZV_TIMEOUT=20 {sys.executable} {WORKER} join & done; wait")
    rc, out = _run_launcher(["bash", "-c", script], _base_env())
    assert rc == 0, out
    assert out.count("JOIN OK") == 2 and "WORLD rank=0 size=2" in out and \
        "WORLD rank=1 size=2" in out, out


def test_ranks_started_by_torchrun():
    """torchrun sets MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE and its agent
    serves torch's own store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE):
    Dragon's store then listens on MASTER_PORT + 1, and the whole store
    world (groups, barriers, a second initialisation) works."""
    pytest.importorskip("torch.distributed.run")
    port = _free_port_pair()
    rc, out = _run_launcher(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-addr", "127.0.0.1", "--master-port", str(port), WORKER, "recorded"],
        dict(_base_env(), RDZV_TIMEOUT="30"))
    assert rc == 0, out
    for r in (0, 1):
        assert f"WORLD rank={r} size=2 backend=nccl" in out, out
        assert f"AGAIN rank={r} size=2" in out, out
    assert out.count("BARRIERS True") == 2 and out.count("DONE") == 2, out
    for gid in (0, 1):      # each group's id: one value, seen by both ranks
        ids = set(re.findall(rf"UID group={gid} ranks=\[0, 1\] grank=\d ([0-9a-f]+)", out))
        assert len(ids) == (2 if gid == 0 else 1), (gid, ids)   # world: two inits


def test_nccl_unique_id_exchange_then_comm_init_needs_a_gpu():
    """The real ops: rank 0's ``NcclUniqueId`` reaches rank 1 through the
    store (ncclGetUniqueId works here: it only needs the bootstrap
    network); ``NcclCommInit`` then fails on each rank with NCCL's reason,
    and neither is left initialised."""
    import dragon_core as dg
    if dg.cuda.device_count() > 0:
        pytest.skip("a GPU is present: the GPU check creates the communicator")
    outs = _run("nccl_id", _env_ranks(2, _free_port()))
    ids = []
    for r, (rc, out) in enumerate(outs):
        assert rc == 0, out
        m = re.search(rf"UID group=0 ranks=\[0, 1\] grank={r} ([0-9a-f]{{256}})", out)
        assert m, out
        ids.append(m.group(1))
        assert f"rank {r}: NcclCommInit: ncclCommInitRankConfig failed" in out, out
        assert "initialised False" in out, out
    assert ids[0] == ids[1] and set(ids[0]) != {"0"}


def test_a_rank_that_never_arrives_is_named():
    t0 = time.monotonic()
    outs = _run("join", _env_ranks(3, _free_port(), RDZV_TIMEOUT="2")[:2])
    assert time.monotonic() - t0 < 30
    for r, (rc, out) in enumerate(outs):
        assert rc == 0, out
        assert "ERR DistributedTimeoutError" in out, out
        assert "timed out after 2 s" in out and "rank 2 of 3 did not arrive (arrived: 0, 1)" \
            in out, out
        assert "initialised False" in out


def test_rank_0_never_arriving_is_named():
    t0 = time.monotonic()
    (rc, out), = _run("join", _env_ranks(2, _free_port(), RDZV_TIMEOUT="1.5")[1:])
    assert time.monotonic() - t0 < 30
    assert rc == 0, out
    assert "ERR DistributedTimeoutError" in out and "rank 0 did not arrive within 1.5 s" in out
    assert "nobody serves the store at 127.0.0.1" in out, out


def test_world_size_mismatch_stops_every_rank():
    ranks = _env_ranks(2, _free_port(), RDZV_TIMEOUT="20")
    ranks[1]["WORLD_SIZE"] = "3"
    t0 = time.monotonic()
    outs = _run("join", ranks)
    assert time.monotonic() - t0 < 15               # well before the 20 s timeout
    for rc, out in outs:
        assert rc == 0, out
        assert "ERR DistributedError" in out, out
        assert "world size mismatch: rank 0 has world size 2, rank 1" in out, out
        assert "initialised False" in out


def test_a_rank_claimed_twice_stops_every_rank():
    ranks = _env_ranks(3, _free_port(), RDZV_TIMEOUT="20")
    ranks[2]["RANK"] = "1"
    outs = _run("join", ranks)
    for rc, out in outs:
        assert rc == 0, out
        assert "ERR DistributedError" in out, out
        assert "rank 1 was claimed twice, by" in out and "must be distinct" in out, out


def test_barrier_timeout_names_the_rank_that_did_not_reach_it():
    ranks = _env_ranks(2, _free_port(), RDZV_TIMEOUT="2")
    ranks[1]["RDZV_SLEEP"] = "5"
    outs = _run("barrier_hang", ranks)
    rc, out = outs[0]
    assert rc == 0, out
    assert "ERR DistributedTimeoutError: rank 0: barrier #2 of process group 0 did not " \
           "complete within 2 s: rank 1 did not reach it" in out, out
    m = re.search(r"after ([\d.]+) s", out)
    assert m and 1.9 <= float(m.group(1)) < 10, out
    assert outs[1][0] == 0 and "DONE" in outs[1][1], outs[1][1]


def test_new_group_with_different_ranks_is_an_error():
    outs = _run("group_mismatch", _env_ranks(3, _free_port(), RDZV_TIMEOUT="3"))
    assert all(rc == 0 for rc, _ in outs), outs
    assert "ERR DistributedError: rank 2: process group 1 is ranks [0, 1, 2] on rank 0 but " \
           "[0, 2] here: every rank must call new_group in the same order with the same " \
           "ranks" in outs[2][1], outs[2][1]
    assert "ERR DistributedTimeoutError" in outs[0][1] and "did not complete within 3 s" \
        in outs[0][1], outs[0][1]


def test_mpi_backend_refuses_more_than_one_rank_without_mpirun():
    """Open MPI 5 singletons cannot be joined (docs/distributed.md): the MPI
    backend says why and what to do, at once; a world of one works."""
    port = _free_port()
    for extra in (_env_ranks(2, port)[1],
                  dict(RDZV_INIT_METHOD=f"tcp://127.0.0.1:{port}", RDZV_RANK="0",
                       RDZV_WORLD="2")):
        t0 = time.monotonic()
        (rc, out), = _run("mpi", [extra])
        assert time.monotonic() - t0 < 30
        assert rc == 0, out
        assert "ERR RuntimeError: init_process_group: environment rendezvous" in out, out
        assert "MPI_ERR_INTERN" in out and "python -m dragon_core.distributed.run" in out
        assert "backend='nccl'" in out and "initialised False" in out
    (rc, out), = _run("mpi", _env_ranks(1, port))
    assert rc == 0 and "MPI OK 0 1 [1.0]" in out, out


# ------------------------------------------------ argument checks (in process)

def _clear(monkeypatch):
    for k in _CLEAN:
        monkeypatch.delenv(k, raising=False)


@pytest.mark.parametrize("missing", ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"])
def test_env_rendezvous_names_the_missing_variable(monkeypatch, missing):
    _clear(monkeypatch)
    full = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500", RANK="0", WORLD_SIZE="2")
    for k, v in full.items():
        if k != missing:
            monkeypatch.setenv(k, v)
    for method in ("env://", None):        # None: any of the four set means env://
        with pytest.raises(ValueError, match=rf"init_process_group\(init_method='env://'\): "
                                             rf"{missing} not set"):
            dist.init_process_group("nccl", init_method=method)
    assert not dist.is_initialized()


def test_bad_rendezvous_arguments(monkeypatch):
    _clear(monkeypatch)
    bad = [
        (dict(init_method="tcp://127.0.0.1:29500"), ValueError, "rank and world_size must"),
        (dict(init_method="tcp://127.0.0.1", rank=0, world_size=2), ValueError,
         "must be 'tcp://host:port'"),
        (dict(init_method="tcp://127.0.0.1:29500", rank=2, world_size=2), ValueError,
         "rank 2 is outside the world of 2 ranks"),
        (dict(init_method="tcp://127.0.0.1:29500", rank=0, world_size=0), ValueError,
         "world size must be >= 1"),
        (dict(init_method="file:///tmp/x"), ValueError, "init_method 'file:///tmp/x' is not "
         "supported"),
        (dict(init_method="mpi", rank=0, world_size=1), ValueError, "MPI assigns the ranks"),
        (dict(rank=0, world_size=2), ValueError, "rank= / world_size= need"),
        (dict(store=object(), rank=0, world_size=1), TypeError, "store must be"),
    ]
    for kw, exc, msg in bad:
        with pytest.raises(exc, match=re.escape(msg)):
            dist.init_process_group("nccl", **kw)
    monkeypatch.setenv("MASTER_ADDR", "h")
    monkeypatch.setenv("MASTER_PORT", "99999")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="MASTER_PORT=99999 is not a TCP port"):
        dist.init_process_group("nccl", init_method="env://")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("RANK", "first")
    with pytest.raises(ValueError, match="RANK='first' must be an integer"):
        dist.init_process_group("nccl", init_method="env://")
    assert not dist.is_initialized()


def test_resolve_reads_arguments_env_and_slurm(monkeypatch):
    _clear(monkeypatch)
    assert _rendezvous.resolve(None, None, None, None) is None          # MPI launch
    monkeypatch.setenv("MASTER_ADDR", "node7")
    monkeypatch.setenv("MASTER_PORT", "29511")
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    r = _rendezvous.resolve(None, None, None, None)                     # srun
    assert (r.method, r.rank, r.world_size, r.host, r.port) == ("env://", 3, 4, "node7", 29511)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    r = _rendezvous.resolve("env://", None, None, None)                 # RANK wins
    assert (r.rank, r.world_size) == (1, 2)
    r = _rendezvous.resolve("env://", 0, 5, None)                       # arguments win
    assert (r.rank, r.world_size) == (0, 5)
    r = _rendezvous.resolve("tcp://10.0.0.2:1234", 1, 2, None)
    assert (r.method, r.host, r.port, r.rank, r.world_size) == \
        ("tcp://10.0.0.2:1234", "10.0.0.2", 1234, 1, 2)
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")          # torchrun's store
    r = _rendezvous.resolve("env://", None, None, None)
    assert r.port == 29512 and "torchrun" in r.port_note
    monkeypatch.setenv("DRAGON_STORE_PORT", "30001")                    # chosen port
    assert _rendezvous.resolve("env://", None, None, None).port == 30001
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")                     # mpirun wins
    assert _rendezvous.resolve(None, None, None, None) is None
