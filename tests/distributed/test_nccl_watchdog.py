"""The NCCL watchdog (issue 16): a collective whose kernel was enqueued but
never completes on the GPU (a peer died after the enqueue) must not hang
the rank. dragon-nccl-dist records a CUDA event after each collective on
its stream and a watchdog thread polls them; past the group's timeout it
aborts the communicator (its kernels return), prints the error naming the
rank, the collective and the process group, makes later collectives raise
it, and ends the process after ``$DRAGON_DIST_ABORT_GRACE`` seconds.

No GPU here: the real cuda kernels of dragon-nccl-dist run on a stand-in
"cuda" device of host memory (``fake_cuda_device.cc``, built here against
the installed dragon-sdk; the real cuda plugin is disabled) against the
recording stand-in libnccl + CUDA driver of test_destroy.py, whose events
complete at once or, with ``$FAKE_CUDA_HANG``, never. The same run checks
that a collective of a tensor on another GPU than its communicator's is
refused naming both.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from .test_destroy import _log, fake_nccl  # noqa: F401 - the fixture
from .test_rendezvous import _base_env, _env_ranks, _free_port

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_watchdog_worker.py")


@pytest.fixture(scope="module")
def fake_cuda(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if not cxx:
        pytest.skip("no C++ compiler to build the stand-in cuda device")
    import dragon_sdk
    lib = tmp_path_factory.mktemp("fake_cuda") / "libfake_cuda.so"
    p = subprocess.run([cxx, "-std=c++17", "-shared", "-fPIC", "-O1", "-Wall", "-Wextra",
                        "-Werror", "-fvisibility=hidden", f"-I{dragon_sdk.get_include()}",
                        "-o", str(lib), os.path.join(HERE, "fake_cuda_device.cc")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return lib


def _run(mode, fake_nccl, fake_cuda, log, **extra):
    env = dict(_base_env(), DRAGON_DISABLE_PLUGINS="cuda", FAKE_CUDA_PLUGIN=str(fake_cuda),
               DRAGON_NCCL_LIBRARY=str(fake_nccl), DRAGON_CUDA_DRIVER_LIBRARY=str(fake_nccl),
               FAKE_CUDA_DEVICES="2", FAKE_NCCL_LOG=str(log), **extra)
    env.pop("FAKE_CUDA_HANG", None)
    return subprocess.run([sys.executable, WORKER, mode], env=env, capture_output=True,
                          text=True, timeout=150)


def test_collectives_on_the_communicators_gpu_and_their_events(fake_nccl, fake_cuda,
                                                                tmp_path):
    p = _run("ok", fake_nccl, fake_cuda, tmp_path / "ok.log")
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "DONE" in p.stdout, out
    assert "INFO [1, 1]" in out and "ALLREDUCE OK 3" in out, out
    assert "CollectiveAllReduce: the tensor is on cuda:0 but rank 0's NCCL communicator " \
           "of process group 7 is on cuda:1; move the tensor to cuda:1" in out, out
    # one event per collective that ran, each destroyed once it completed;
    # the refused one enqueued nothing
    assert "EVENTS created=3 destroyed=3" in out, out
    log = _log(tmp_path / "ok.log")
    assert [e[0] for e in log if e[0] in ("ALLREDUCE", "ABORT")] == ["ALLREDUCE"] * 3, log
    assert "watchdog" not in out, out


def test_a_kernel_that_never_completes_is_aborted_and_ends_the_process(fake_nccl, fake_cuda,
                                                                       tmp_path):
    p = _run("hang", fake_nccl, fake_cuda, tmp_path / "hang.log", WD_TIMEOUT="1",
             DRAGON_DIST_ABORT_GRACE="2")
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "ALLREDUCE OK 1" in out and "ENQUEUED" in out and "NOT ENDED" not in out, out
    what = ("rank 0: all_reduce #2 (NCCL) was enqueued on cuda:1 but did not complete on "
            "the GPU within 1 s (a peer died or stopped answering) on process group 7; the "
            "watchdog aborted the communicator")
    # printed by the watchdog, raised by the next collective, then the end
    assert f"dragon-nccl-dist: {what}; the process ends after the grace period" in p.stderr, out
    m = re.search(r"RAISED (\w+): (.*)", p.stdout)
    assert m and what in m.group(2) and "init_process_group() again" in m.group(2), out
    assert f"dragon-nccl-dist: ending the process 2 s after: {what}" in p.stderr, out
    log = _log(tmp_path / "hang.log")
    assert [e[0] for e in log if e[0] == "ABORT"] == ["ABORT"], log       # once


@pytest.mark.parametrize("timeout", ["inf", "8.64e13", "1e10"])
def test_an_infinite_or_huge_timeout_never_aborts(fake_nccl, fake_cuda, tmp_path, timeout):
    """timeout=inf (or timedelta.max, 8.64e13 s) must not overflow the
    steady clock's int64 nanoseconds into a deadline in the past: the
    pending kernel is followed, not aborted, and the process keeps going."""
    p = _run("hang_forever", fake_nccl, fake_cuda, tmp_path / "hang.log", WD_TIMEOUT=timeout,
             WD_WATCH="3", DRAGON_DIST_ABORT_GRACE="0")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "ALLREDUCE OK 1" in out and "ENQUEUED" in out, out
    m = re.search(r"STILL RUNNING after (\d+) more, aborts=(\d+)", p.stdout)
    assert m and int(m.group(1)) > 0 and m.group(2) == "0", out
    assert "watchdog" not in out and "RAISED" not in out, out
    log = _log(tmp_path / "hang.log")
    assert not [e for e in log if e[0] == "ABORT"], log


def test_through_init_process_group_device_id_and_eager_all_reduce(fake_nccl, fake_cuda,
                                                                  tmp_path):
    """The same path from dragon_core.distributed: device_id=1 binds the
    world (and a new group) to cuda:1, eager all_reduce runs there, and the
    watchdog's abort becomes DistributedTimeoutError."""
    env = _env_ranks(1, _free_port())[0]
    p = _run("dist", fake_nccl, fake_cuda, tmp_path / "dist.log", WD_TIMEOUT="1",
             DRAGON_DIST_ABORT_GRACE="2", **env)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "BOUND cuda:1" in out and "EAGER OK" in out and "ENQUEUED" in out, out
    assert "RAISED DistributedTimeoutError: all_reduce: rank 0: all_reduce #2 (NCCL) was " \
           "enqueued on cuda:1 but did not complete on the GPU within 1 s" in out, out
    assert "process group 0; the watchdog aborted the communicator" in out, out
    assert "dragon-nccl-dist: ending the process 2 s after" in p.stderr and \
        "NOT ENDED" not in out, out


def test_local_rank_wins_over_the_device_of_earlier_tensors(fake_nccl, fake_cuda, tmp_path):
    """docs/distributed.md, 'Which GPU a rank uses': unlike torch, a device
    made current before init_process_group does not override LOCAL_RANK;
    the first collective of a tensor elsewhere names device_id as the fix."""
    env = dict(_env_ranks(1, _free_port())[0], LOCAL_RANK="0")
    p = _run("local_rank", fake_nccl, fake_cuda, tmp_path / "lr.log", **env)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "DONE" in p.stdout, out
    assert "BOUND cuda:0" in out and "IS VALUEERROR True" in out, out
    assert "RAISED KernelInvalidArgumentError: CollectiveAllReduce: " in out, out
    assert "CollectiveAllReduce: the tensor is on cuda:1 but " \
           "rank 0's NCCL communicator of process group 0 is on cuda:0; move the tensor " \
           "to cuda:0 (or pass device_id=cuda:1 to init_process_group)" in out, out
