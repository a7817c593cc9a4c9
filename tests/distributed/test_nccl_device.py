"""Rank -> GPU (issue 16): every NCCL communicator of a rank is created on
the rank's GPU -- ``init_process_group(device_id=)`` (or ``device="cuda:N"``),
else ``LOCAL_RANK`` (torchrun), else ``OMPI_COMM_WORLD_LOCAL_RANK`` (mpirun,
our launcher), modulo the visible devices -- by making it current before
``ncclCommInitRankConfig`` (which takes the current device) and restoring
the thread's context after.

There is no GPU here: the real ``NcclCommInit`` op runs against the
recording stand-in of test_destroy.py, which also stands in for the CUDA
driver (``$DRAGON_CUDA_DRIVER_LIBRARY``) with ``$FAKE_CUDA_DEVICES``
devices. The GPU check runs the real thing (plugins/nccl_dist/tests).
"""

from __future__ import annotations

import os
import re

import pytest

import dragon_core.distributed as dist

from .test_destroy import _log, _run_ranks, fake_nccl  # noqa: F401 - the fixture
from .test_rendezvous import _base_env, _env_ranks, _free_port

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_device_worker.py")


def _steps(log):
    """``{step: [log entries]}`` of one rank's log, cut at its MARK lines."""
    out, cur = {}, None
    for e in log:
        if e[0] == "MARK":
            cur = out.setdefault(e[1], [])
        elif cur is not None:
            cur.append(e)
    return out


def test_each_rank_creates_its_communicators_on_its_gpu(fake_nccl, tmp_path):
    envs = []
    for e in _env_ranks(2, _free_port()):
        r = e["RANK"]
        envs.append(dict(_base_env(), **e, DRAGON_NCCL_LIBRARY=str(fake_nccl),
                         DRAGON_CUDA_DRIVER_LIBRARY=str(fake_nccl), FAKE_CUDA_DEVICES="2",
                         FAKE_NCCL_LOG=str(tmp_path / f"rank{r}.log"),
                         FAKE_NCCL_FINALIZE="ok", RDZV_TIMEOUT="30"))
    outs = _run_ranks(envs, timeout=120.0, mode="steps", worker=WORKER)
    for r in (0, 1):
        rc, out = outs[r]
        assert rc == 0 and out.rstrip().endswith("DONE"), out
        want = {                     # step: the GPU of both communicators
            "local_rank": r,         # LOCAL_RANK
            "ompi_local_rank": 1 - r,  # OMPI_COMM_WORLD_LOCAL_RANK when no LOCAL_RANK
            "device_id": 1 - r,      # device_id= wins over LOCAL_RANK
            "device_id_no_backend": 1 - r,  # device_id= without a backend: nccl
            "device_str": 1 - r,     # device="cuda:N" names it too
            "modulo": 0,             # LOCAL_RANK 2, 3 on a node with one GPU
            "modulo3": (3 + r) % 2,  # LOCAL_RANK 3, 4 with two
        }
        for name, dev in want.items():
            assert f"STEP {name} world=cuda:{dev} group=cuda:{dev}" in out, (name, out)
            assert f"STEP {name} after destroy None" in out, out
        steps = _steps(_log(tmp_path / f"rank{r}.log"))
        for name, dev in want.items():
            log = [e for e in steps[name] if e[0] in ("SETDEV", "INIT", "ONDEV")]
            # twice (world, group): made current, created there, context restored
            assert [(e[0], e[1] if e[0] == "SETDEV" else "") for e in log] == \
                [("SETDEV", str(dev)), ("INIT", ""), ("ONDEV", ""), ("SETDEV", "-1")] * 2, \
                (name, log)
            assert [int(e[2]) for e in log if e[0] == "ONDEV"] == [dev, dev], (name, log)
        # neither device_id nor a local rank: NCCL's current device, untouched
        assert "STEP none world=cuda:0 group=cuda:0" in out, out
        assert not [e for e in steps["none"] if e[0] == "SETDEV"], steps["none"]
        # a GPU this process cannot see: a clear error, nothing initialised
        assert f"STEP invisible ERR" in out and f"rank {r}: NcclCommInit: device_id cuda:5 is not visible to this process: " \
               "it sees 2 CUDA devices" in out, out
        assert "STEP invisible initialised False" in out, out
        assert not [e for e in steps["invisible"] if e[0] in ("INIT", "SETDEV")], steps
        log = _log(tmp_path / f"rank{r}.log")
        assert not [e for e in log if e[0] in ("MISUSE", "DESTROY_UNFINALIZED") or
                    e[0].startswith("UNEXPECTED")], log



# ------------------------------------------------ argument checks (in process)

@pytest.fixture
def no_launcher_env(monkeypatch):
    for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
              "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


@pytest.mark.parametrize("kw, exc, msg", [
    (dict(device_id="cpu"), ValueError, "device_id='cpu' is not a CUDA device"),
    (dict(device_id="cuda"), ValueError, "device_id='cuda' names no GPU: give its index"),
    (dict(device_id="cuda:x"), ValueError, "device_id='cuda:x' is not a CUDA device"),
    (dict(device_id=-1), ValueError, "device_id must be >= 0, got -1"),
    (dict(device_id=True), TypeError, "device_id must be a CUDA device index"),
    (dict(device="cuda:0", device_id=1), ValueError,
     "device='cuda:0' and device_id=1 name different GPUs"),
    (dict(backend="mpi", device_id=0), ValueError,
     "device_id=0 chooses a GPU for the nccl backend; the 'mpi' backend runs on cpu"),
])
def test_device_id_is_checked_before_anything_starts(no_launcher_env, kw, exc, msg):
    kw = dict(dict(backend="nccl"), **kw)
    with pytest.raises(exc, match=re.escape(msg)):
        dist.init_process_group(kw.pop("backend"), **kw)
    assert not dist.is_initialized()


def test_device_id_accepts_devices_of_dragon_and_torch():
    import dragon_core as dg
    from dragon_core.distributed import _device_index
    assert _device_index(dg.Device("cuda", 3), "device_id") == 3
    assert _device_index("cuda:2", "device_id") == 2 and _device_index(1, "device_id") == 1
    torch = pytest.importorskip("torch")
    assert _device_index(torch.device("cuda", 1), "device_id") == 1
    with pytest.raises(ValueError, match="names no GPU"):
        _device_index(torch.device("cuda"), "device_id")
    with pytest.raises(ValueError, match="is not a CUDA device"):
        _device_index(torch.device("cpu"), "device_id")


@pytest.mark.parametrize("var", ["LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"])
def test_a_malformed_local_rank_is_named(no_launcher_env, var):
    no_launcher_env.setenv(var, "first")
    with pytest.raises(ValueError, match=f"{var}='first' must be an integer"):
        dist.init_process_group("nccl")
    no_launcher_env.setenv(var, "-2")
    with pytest.raises(ValueError, match=f"{var}=-2 must be >= 0"):
        dist.init_process_group("nccl")
    assert not dist.is_initialized()


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan"])
def test_a_malformed_dist_timeout_variable_is_named(no_launcher_env, value):
    no_launcher_env.setenv("DRAGON_DIST_TIMEOUT", value)
    with pytest.raises(ValueError, match=re.escape(
            f"init_process_group: DRAGON_DIST_TIMEOUT={value!r} must be a number of "
            "seconds > 0 (inf: no deadline)")):
        dist.init_process_group("mpi")
    assert not dist.is_initialized()


def test_the_dist_timeout_variable_accepts_inf(no_launcher_env):
    from dragon_core.distributed import _timeout_seconds
    no_launcher_env.setenv("DRAGON_DIST_TIMEOUT", "inf")
    assert _timeout_seconds(None) == float("inf")
    no_launcher_env.setenv("DRAGON_DIST_TIMEOUT", "12.5")
    assert _timeout_seconds(None) == 12.5
