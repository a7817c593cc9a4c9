"""``destroy_process_group`` (issue 16): every destroyed group's NCCL
communicator is freed (``ncclCommFinalize`` + ``ncclCommDestroy``, or
``ncclCommAbort`` on the failure path and when the finalize fails),
sub-groups included; a second call does nothing; the process may
initialise again -- on the MPI backend too (MPI stays initialised until
the process exits).

NCCL cannot make a communicator on this GPU-less machine, so the NCCL
check runs dragon-nccl-dist's real ``NcclCommInit`` / ``NcclCommDestroy``
kernels against a stand-in libnccl built here (``$DRAGON_NCCL_LIBRARY``),
which hands out numbered communicators and logs every call that creates,
finalizes, destroys or aborts one. The real library runs in the GPU test
(plugins/nccl_dist/tests, world size 1).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from .test_collectives import run_job
from .test_rendezvous import _env_ranks, _free_port

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_destroy_worker.py")

# The stand-in: the symbols dragon-nccl-dist opens, with NCCL's C types
# (ncclUniqueId is 128 bytes passed by value; ncclResult_t an int: 0
# success, 3 internal error, 5 invalid usage, 7 in progress). A finalize
# stays "in progress" for three polls, so the destroy path's polling runs.
FAKE_NCCL = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef void* ncclComm_t;
enum { OK = 0, INTERNAL = 3, USAGE = 5, IN_PROGRESS = 7 };

static int next_comm = 1;
static int polls[1024];          /* per communicator: polls left in progress */
static int state[1024];          /* 0 live, 1 finalizing, 2 freed */

static void say(const char* what, long c, int a, int b) {
  const char* path = getenv("FAKE_NCCL_LOG");
  FILE* f = path ? fopen(path, "a") : NULL;
  if (!f) return;
  fprintf(f, "%s %ld %d %d\n", what, c, a, b);
  fclose(f);
}
static long id_of(ncclComm_t c) { return (long)(intptr_t)c; }
static int bad(ncclComm_t c) {
  long k = id_of(c);
  if (k <= 0 || k >= next_comm || state[k] == 2) {
    say("MISUSE", k, 0, 0);
    return 1;
  }
  return 0;
}

int ncclGetVersion(int* v) { *v = 22800; return OK; }
int ncclGetUniqueId(ncclUniqueId* id) {
  memset(id, 0, sizeof(*id));
  snprintf(id->internal, sizeof(id->internal), "fake-%d-%d", (int)getpid(), next_comm);
  return OK;
}
/* The CUDA driver calls dragon-nccl-dist makes to choose a communicator's
 * GPU ($DRAGON_CUDA_DRIVER_LIBRARY may name this same file): the thread's
 * current context is device d's "primary context" (d + 1), and
 * $FAKE_CUDA_DEVICES devices are visible. A communicator is created on the
 * current device (0 when none is current), as NCCL does. */
static __thread intptr_t current_ctx;  /* 0: none */
static int comm_dev[1024];
int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDeviceGetCount(int* n) {
  const char* v = getenv("FAKE_CUDA_DEVICES");
  *n = v ? atoi(v) : 0;
  return 0;
}
int cuDeviceGet(int* dev, int index) {
  int n = 0;
  cuDeviceGetCount(&n);
  if (index < 0 || index >= n) return 101;  /* CUDA_ERROR_INVALID_DEVICE */
  *dev = index;
  return 0;
}
int cuDevicePrimaryCtxRetain(void** ctx, int dev) { *ctx = (void*)(intptr_t)(dev + 1); return 0; }
int cuCtxGetCurrent(void** ctx) { *ctx = (void*)current_ctx; return 0; }
int cuCtxSetCurrent(void* ctx) {
  current_ctx = (intptr_t)ctx;
  say("SETDEV", (long)current_ctx - 1, 0, 0);
  return 0;
}
int cuGetErrorString(int r, const char** s) { (void)r; *s = "fake CUDA error"; return 0; }
/* The watchdog's events: each logged when created and destroyed; one
 * "completes" at once unless $FAKE_CUDA_HANG was set when it was recorded
 * (after a kernel that never ends: CUDA_ERROR_NOT_READY, 600, forever). */
static int next_event = 1;
typedef struct { int id, hang; } FakeEvent;
int cuEventCreate(void** ev, unsigned flags) {
  (void)flags;
  FakeEvent* e = (FakeEvent*)calloc(1, sizeof(FakeEvent));
  if (!e) return 2;
  e->id = next_event++;
  *ev = e;
  say("EVENT_CREATE", e->id, 0, 0);
  return 0;
}
int cuEventRecord(void* ev, void* stream) {
  (void)stream;
  ((FakeEvent*)ev)->hang = getenv("FAKE_CUDA_HANG") != NULL;
  return 0;
}
int cuEventQuery(void* ev) { return ((FakeEvent*)ev)->hang ? 600 : 0; }
int cuEventDestroy_v2(void* ev) {
  say("EVENT_DESTROY", ((FakeEvent*)ev)->id, 0, 0);
  free(ev);
  return 0;
}
int cuStreamIsCapturing(void* stream, int* status) { (void)stream; *status = 0; return 0; }

int ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                           void* config) {
  (void)id; (void)config;
  if (next_comm >= 1024) return INTERNAL;
  *comm = (ncclComm_t)(intptr_t)next_comm;
  comm_dev[next_comm] = current_ctx ? (int)(current_ctx - 1) : 0;
  say("INIT", next_comm, rank, nranks);
  say("ONDEV", next_comm, comm_dev[next_comm], 0);
  ++next_comm;
  return OK;
}
int ncclCommCuDevice(ncclComm_t comm, int* dev) {
  if (bad(comm)) return USAGE;
  *dev = comm_dev[id_of(comm)];
  return OK;
}
int ncclCommGetAsyncError(ncclComm_t comm, int* r) {
  long k = id_of(comm);
  if (bad(comm)) return USAGE;
  if (state[k] == 1 && polls[k] > 0) {
    --polls[k];
    *r = IN_PROGRESS;
  } else {
    *r = OK;
  }
  return OK;
}
int ncclCommFinalize(ncclComm_t comm) {
  long k = id_of(comm);
  if (bad(comm)) return USAGE;
  const char* mode = getenv("FAKE_NCCL_FINALIZE");
  if (mode && strcmp(mode, "fail") == 0) {
    say("FINALIZE_FAILED", k, 0, 0);
    return INTERNAL;
  }
  state[k] = 1;
  polls[k] = 3;
  say("FINALIZE", k, 0, 0);
  return IN_PROGRESS;
}
int ncclCommDestroy(ncclComm_t comm) {
  long k = id_of(comm);
  if (bad(comm)) return USAGE;
  if (state[k] != 1 || polls[k] != 0) say("DESTROY_UNFINALIZED", k, state[k], polls[k]);
  state[k] = 2;
  say("DESTROY", k, 0, 0);
  return OK;
}
int ncclCommAbort(ncclComm_t comm) {
  long k = id_of(comm);
  if (bad(comm)) return USAGE;
  state[k] = 2;
  say("ABORT", k, 0, 0);
  return OK;
}
const char* ncclGetErrorString(int r) { return r == OK ? "no error" : "fake NCCL error"; }
const char* ncclGetLastError(ncclComm_t comm) { (void)comm; return ""; }
/* A world of one: every reduction is the identity (ncclDataType_t sizes by
 * enum value: int8, uint8, int32, uint32, int64, uint64, half, float,
 * double, bfloat16). */
int ncclAllReduce(const void* send, void* recv, size_t count, int dtype, int op,
                  ncclComm_t comm, void* stream) {
  static const size_t size[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  (void)op; (void)stream;
  if (bad(comm) || dtype < 0 || dtype > 9) return USAGE;
  memmove(recv, send, count * size[dtype]);
  say("ALLREDUCE", id_of(comm), (int)count, dtype);
  return OK;
}
#define UNUSED(name) int name(void) { say("UNEXPECTED " #name, 0, 0, 0); return USAGE; }
UNUSED(ncclBroadcast)
UNUSED(ncclAllGather)
UNUSED(ncclReduceScatter)
UNUSED(ncclSend)
UNUSED(ncclRecv)
UNUSED(ncclGroupStart)
UNUSED(ncclGroupEnd)
"""


@pytest.fixture(scope="module")
def fake_nccl(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build the stand-in libnccl")
    d = tmp_path_factory.mktemp("fake_nccl")
    (d / "fake_nccl.c").write_text(FAKE_NCCL)
    lib = d / "libnccl.so.2"
    p = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(lib),
                        str(d / "fake_nccl.c")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return lib


def _run_ranks(env_list, timeout=90.0, mode="fake_nccl", worker=WORKER):
    procs = []
    try:
        # rank 0 last: the others retry until it serves the store
        for env in sorted(env_list, key=lambda e: e["RANK"] == "0"):
            procs.append((int(env["RANK"]), subprocess.Popen(
                [sys.executable, worker, mode], env=env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True)))
        outs = {}
        for r, p in procs:
            out, _ = p.communicate(timeout=timeout)
            outs[r] = (p.returncode, out)
        return outs
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _log(path):
    return [line.split() for line in open(path).read().splitlines()]


def test_nccl_communicators_are_destroyed_with_their_groups(fake_nccl, tmp_path):
    from .test_rendezvous import _base_env
    envs = []
    for e in _env_ranks(2, _free_port()):
        r = e["RANK"]
        envs.append(dict(_base_env(), **e, DRAGON_NCCL_LIBRARY=str(fake_nccl),
                         FAKE_NCCL_LOG=str(tmp_path / f"rank{r}.log"),
                         FAKE_NCCL_FINALIZE="ok", RDZV_TIMEOUT="30"))
    outs = _run_ranks(envs)
    for r in (0, 1):
        rc, out = outs[r]
        assert rc == 0 and out.rstrip().endswith("DONE"), out
        assert f"WORLD rank={r} size=2" in out and "destroyed False" in out, out
        assert "aborted False" in out, out
        log = _log(tmp_path / f"rank{r}.log")
        assert not [e for e in log if e[0] in ("MISUSE", "DESTROY_UNFINALIZED") or
                    e[0].startswith("UNEXPECTED")], log
        inits = [int(e[1]) for e in log if e[0] == "INIT"]
        # round 1: world, new_group(), this rank's one-rank group; round 2:
        # world; round 3: world, new_group()
        assert len(inits) == 6 and inits == sorted(inits), log
        by = {k: [e[0] for e in log if e[0] not in ("INIT", "ONDEV", "SETDEV") and int(e[1]) == k]
              for k in inits}
        w1, g_all, mine, w2, w3, g3 = inits
        for k in (w1, g_all, mine):
            assert by[k] == ["FINALIZE", "DESTROY"], (k, log)          # once each
        assert by[w2] == ["FINALIZE_FAILED", "ABORT"], log               # aborted, warned
        assert by[w3] == ["ABORT"] and by[g3] == ["ABORT"], log          # failure path
        # new_group() was destroyed first, alone; then the world and the rest
        order = [int(e[1]) for e in log if e[0] == "DESTROY"]
        assert order[0] == g_all and set(order) == {w1, g_all, mine}, log
        # this rank's one-rank group is a 1-rank communicator
        ranks = {int(e[1]): (int(e[2]), int(e[3])) for e in log if e[0] == "INIT"}
        assert ranks[w1] == (r, 2) and ranks[g_all] == (r, 2) and ranks[mine] == (0, 1)
        m = re.search(r"WARNED (\d+) (.*)", out)
        assert m and m.group(1) == "1" and "could not be finalized" in m.group(2), out


def test_communicators_alive_at_exit_are_aborted_not_finalized(fake_nccl, tmp_path):
    """Review finding: the exit hook used to finalize, which waits up to
    the group's timeout for peers that may be gone. With a stand-in whose
    finalize never completes, each rank still exits at once, its
    communicators aborted."""
    from .test_rendezvous import _base_env
    envs = []
    for e in _env_ranks(2, _free_port()):
        r = e["RANK"]
        envs.append(dict(_base_env(), **e, DRAGON_NCCL_LIBRARY=str(fake_nccl),
                         FAKE_NCCL_LOG=str(tmp_path / f"rank{r}.log"),
                         FAKE_NCCL_FINALIZE="ok", RDZV_TIMEOUT="120"))
    outs = _run_ranks(envs, timeout=60.0, mode="fake_nccl_exit")
    for r in (0, 1):
        rc, out = outs[r]
        assert rc == 0 and out.rstrip().endswith("DONE"), out
        log = _log(tmp_path / f"rank{r}.log")
        inits = [int(e[1]) for e in log if e[0] == "INIT"]
        assert len(inits) == 2, log
        for k in inits:
            assert [e[0] for e in log if e[0] not in ("INIT", "ONDEV", "SETDEV") and int(e[1]) == k] == \
                ["ABORT"], log


def test_mpi_world_destroyed_and_initialised_again():
    p = run_job(WORKER, "mpi", dist_timeout=60, timeout_s=180)
    out = p.stdout
    assert p.returncode == 0, f"{out[-4000:]}\n{p.stderr[-4000:]}"
    for round_ in range(3):
        for r in (0, 1):
            assert (f"ROUND {round_} rank={r} size=2 world=[3.0, {20.0 * round_}] "
                    f"group=[3.0]") in out, out
        assert out.count(f"DESTROYED {round_} False") == 2, out
    assert out.count("FREED ProcessGroup(id=2, ranks=[1]) was destroyed") == 3, out
    assert out.count("GONE RuntimeError") == 6 and out.count("DONE") == 2, out
