"""dragon-nccl-dist: build, link and load checks (no NVIDIA library in
DT_NEEDED, libnccl opened at run time and its version read), the host ops,
and without a GPU a clear error from communicator creation. With a GPU
(world size 1) every collective runs on cuda against NumPy."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import dragon_core as dg

nccl_dist = pytest.importorskip("dragon_nccl_dist", reason="dragon-nccl-dist is built "
                                "by `make install`")



def _plugin():
    return next(p for p in dg.plugins.list() if p.name == "nccl_dist")


def test_plugin_loads_and_links_no_nvidia_library():
    p = _plugin()
    assert p.state == "loaded", p.error
    # MPI half: CollectiveStart/Wait/Test, MpiRegisterComm; 5 + 3 + 1 cpu kernels.
    # NCCL half (where nccl.h was found): 3 host ops; 5 cuda + 3 cpu kernels.
    assert (p.num_ops, p.num_kernels) in ((4, 9), (8, 18)), p
    needed = subprocess.run(["readelf", "-d", nccl_dist.plugin_library()],
                            capture_output=True, text=True, check=True).stdout
    libs = re.findall(r"Shared library: \[(.*?)\]", needed)
    assert libs and not [x for x in libs if x.startswith(("libnccl", "libcuda", "libcudart",
                                                          "libmpi"))], libs


def test_collective_kernels_are_registered_for_cpu_by_the_mpi_half():
    for op in ("CollectiveAllReduce", "CollectiveBroadcast", "CollectiveAllGather",
               "CollectiveReduceScatter", "CollectiveAllToAll", "CollectiveStart",
               "CollectiveWait"):
        ks = dg.plugins.kernels(op)
        assert [(k["device"], k["plugin"]) for k in ks if k["device"] == "cpu"] == \
            [("cpu", "nccl_dist")], ks


def test_collective_kernels_are_registered_for_cuda():
    for op in ("CollectiveAllReduce", "CollectiveBroadcast", "CollectiveAllGather",
               "CollectiveReduceScatter", "CollectiveAllToAll"):
        ks = dg.plugins.kernels(op)
        assert [(k["device"], k["plugin"]) for k in ks if k["device"] == "cuda"] == \
            [("cuda", "nccl_dist")], ks


def test_opens_the_wheels_libnccl_and_reads_its_version():
    import nvidia.nccl
    header = open(list(nvidia.nccl.__path__)[0] + "/include/nccl.h").read()
    major = int(re.search(r"#define NCCL_MAJOR (\d+)", header).group(1))
    minor = int(re.search(r"#define NCCL_MINOR (\d+)", header).group(1))
    patch = int(re.search(r"#define NCCL_PATCH (\d+)", header).group(1))
    assert nccl_dist.nccl_version() == major * 10000 + minor * 100 + patch


def test_unique_ids_are_fresh_128_bytes():
    a, b = dg.ops.nccl_unique_id().numpy(), dg.ops.nccl_unique_id().numpy()
    assert a.dtype == np.uint8 and a.shape == (128,)
    assert not np.array_equal(a, b)


def test_comm_init_checks_its_arguments():
    with pytest.raises(Exception, match=r"unique_id must be uint8\[128\]"):
        dg.ops.nccl_comm_init(dg.tensor(np.zeros(4, np.uint8)), group=0, nranks=1, rank=0)
    with pytest.raises(Exception, match="rank 3 of 2"):
        dg.ops.nccl_comm_init(dg.ops.nccl_unique_id(), group=0, nranks=2, rank=3)


@pytest.mark.skipif(dg.cuda.device_count() > 0, reason="checks the no-GPU error")
def test_without_a_gpu_comm_init_fails_clearly():
    with pytest.raises(Exception) as e:
        dg.ops.nccl_comm_init(dg.ops.nccl_unique_id(), group=0, nranks=1, rank=0,
                              timeout_s=10.0)
    msg = str(e.value)
    assert "rank 0: NcclCommInit: ncclCommInitRankConfig failed" in msg, msg


def test_comm_destroy_without_a_communicator_frees_nothing():
    """NcclCommDestroy of a group that has no communicator (never made,
    already destroyed) is a no-op returning 0, with or without abort, and
    calls no NCCL function (it works even where libnccl would not load)."""
    for abort in (False, True, False):
        y = dg.ops.nccl_comm_destroy(group=987654, abort=abort)
        assert y.dtype == dg.int64 and y.shape == () and int(y.numpy()) == 0


@pytest.mark.gpu
@pytest.mark.skipif(dg.cuda.device_count() == 0, reason="needs a GPU (world size 1)")
def test_comm_destroy_frees_the_communicator_on_gpu():
    """The op itself (issue 16): a destroyed group's collectives fail with
    'no NCCL communicator', a second destroy frees nothing, the group id
    can be initialised again, and abort frees it too."""
    x = np.arange(4, dtype=np.float32)
    gid = 4242
    for round_ in range(2):
        dg.ops.nccl_comm_init(dg.ops.nccl_unique_id(), group=gid, nranks=1, rank=0,
                              timeout_s=60.0)
        y = dg.ops.collective_all_reduce(dg.tensor(x).to("cuda"), group=gid, group_size=1)
        np.testing.assert_array_equal(y.to("cpu").numpy(), x)
        abort = round_ == 1
        assert int(dg.ops.nccl_comm_destroy(group=gid, abort=abort).numpy()) == \
            (2 if abort else 1)
        assert int(dg.ops.nccl_comm_destroy(group=gid).numpy()) == 0
        with pytest.raises(Exception, match=f"no NCCL communicator for process group {gid}"):
            dg.ops.collective_all_reduce(dg.tensor(x).to("cuda"), group=gid, group_size=1)


@pytest.mark.skipif(dg.cuda.device_count() == 0, reason="needs a GPU (world size 1)")
def test_every_collective_on_one_gpu():
    dg.ops.nccl_comm_init(dg.ops.nccl_unique_id(), group=0, nranks=1, rank=0,
                          timeout_s=60.0)
    rng = np.random.default_rng(0)
    for dt in ("float32", "float64", "float16", "int32", "int64", "uint8", "int8"):
        x = rng.uniform(-3, 3, (4, 3)).astype(dt)
        t = dg.tensor(x).to("cuda")
        for op in ("sum", "max", "min", "prod") + (("avg",) if dt.startswith("float") else ()):
            y = dg.ops.collective_all_reduce(t, group=0, group_size=1, reduce_op=op)
            np.testing.assert_array_equal(y.to("cpu").numpy(), x)
        np.testing.assert_array_equal(dg.ops.collective_broadcast(
            t, group=0, group_size=1).to("cpu").numpy(), x)
        np.testing.assert_array_equal(dg.ops.collective_all_gather(
            t, group=0, group_size=1).to("cpu").numpy(), x[None])
        np.testing.assert_array_equal(dg.ops.collective_reduce_scatter(
            t, group=0, group_size=1).to("cpu").numpy(), x)
        np.testing.assert_array_equal(dg.ops.collective_all_to_all(
            t, group=0, group_size=1).to("cpu").numpy(), x)


# ----------------------------------------------- DDP, world of one (issue 16)

_DDP_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ddp_device_worker.py")


def _run_ddp_worker(device, **extra_env):
    """_ddp_device_worker.py in a fresh process (MPI initialises once per
    process): plain, DDP eager and DDP compiled training must agree."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               DRAGON_DIST_TIMEOUT="120", **extra_env)
    p = subprocess.run([sys.executable, _DDP_WORKER, device], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert f"DDP OK {device}" in p.stdout, p.stdout[-4000:] + p.stderr[-4000:]


def test_ddp_world_of_one_on_cpu_matches_plain_training():
    """The worker's own logic, on the MPI backend (runs everywhere)."""
    import dragon_core.distributed as dist
    if not dist.is_available():
        pytest.skip("no libmpi.so.40 for the MPI backend in this environment")
    _run_ddp_worker("cpu")


@pytest.mark.skipif(dg.cuda.device_count() == 0, reason="needs a GPU (world size 1)")
def test_ddp_on_one_gpu_with_nccl_matches_plain_training():
    """DistributedDataParallel on cuda with the NCCL backend, world size 1,
    eagerly and compiled: a few steps equal to plain training on the GPU."""
    _run_ddp_worker("cuda")


# ------------------------------ environment rendezvous, no MPI (issue 16)

_ENV_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_env_nccl_worker.py")


def _rendezvous_env() -> dict:
    """MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE of a world of one (a free
    port), nothing of an MPI launch."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    return env


@pytest.mark.gpu
@pytest.mark.skipif(dg.cuda.device_count() == 0, reason="needs a GPU (world size 1)")
def test_env_rendezvous_nccl_world_of_one_on_gpu():
    """init_process_group(backend='nccl', init_method='env://'): the unique
    id through the TCP store, a real communicator, every eager and traced
    collective on cuda against NumPy, a group, store barriers, destroy and
    a second initialisation -- no MPI opened."""
    p = subprocess.run([sys.executable, _ENV_WORKER], capture_output=True, text=True,
                       timeout=150, env=_rendezvous_env())
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert "ENV NCCL OK" in p.stdout, p.stdout[-4000:] + p.stderr[-4000:]


@pytest.mark.gpu
@pytest.mark.skipif(dg.cuda.device_count() == 0, reason="needs a GPU (world size 1)")
def test_destroy_process_group_frees_nccl_communicators_on_gpu():
    """destroy_process_group on a real NCCL world of one (env://): each
    group's communicator destroyed once, the failure path aborts, and the
    world initialises again three times with working collectives."""
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_destroy_nccl_worker.py")
    p = subprocess.run([sys.executable, worker], capture_output=True, text=True, timeout=200,
                       env=_rendezvous_env())
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert "DESTROY NCCL OK" in p.stdout, p.stdout[-4000:] + p.stderr[-4000:]


@pytest.mark.gpu
@pytest.mark.skipif(dg.cuda.device_count() == 0, reason="needs a GPU (world size 1)")
def test_ddp_on_one_gpu_through_env_rendezvous():
    """The DDP worker with MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE set and
    no mpirun: init_process_group(device='cuda') joins through the store."""
    env = _rendezvous_env()
    _run_ddp_worker("cuda", **{k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "RANK",
                                                   "WORLD_SIZE")})


# ------------------------------------------------- rank -> GPU (issue 16)

def test_comm_init_on_an_invisible_gpu_is_refused_before_nccl():
    """device= beyond the visible devices names both (here: none visible,
    and why), before any NCCL call."""
    n = dg.cuda.device_count()
    with pytest.raises(Exception, match=rf"rank 0: NcclCommInit: device_id cuda:{n} is not "
                                        rf"visible to this process: it sees {n} CUDA device"):
        dg.ops.nccl_comm_init(dg.ops.nccl_unique_id(), group=4343, nranks=1, rank=0,
                              timeout_s=10.0, device=n)


@pytest.mark.gpu
@pytest.mark.skipif(dg.cuda.device_count() == 0, reason="needs a GPU (world size 1)")
def test_comm_init_on_the_chosen_gpu():
    """NcclCommInit creates the communicator on `device`, or on local_rank
    modulo the visible devices, reports it (ncclCommCuDevice), and its
    collectives run there."""
    n = dg.cuda.device_count()
    x = np.arange(6, dtype=np.float32)
    gid = 4344
    for kw, want in ((dict(device=n - 1), n - 1), (dict(local_rank=2 * n + n - 1), n - 1),
                     (dict(), None)):
        info = dg.ops.nccl_comm_init(dg.ops.nccl_unique_id(), group=gid, nranks=1, rank=0,
                                     timeout_s=60.0, **kw).numpy()
        if want is None:             # neither: the thread's current device, reported
            want = int(info[1])
            assert 0 <= want < n, info
        assert info.tolist() == [1, want], (kw, info)
        y = dg.ops.collective_all_reduce(dg.tensor(x).to(f"cuda:{want}"), group=gid,
                                         group_size=1)
        np.testing.assert_array_equal(y.to("cpu").numpy(), x)
        assert int(dg.ops.nccl_comm_destroy(group=gid).numpy()) == 1


@pytest.mark.gpu
@pytest.mark.skipif(dg.cuda.device_count() == 0, reason="needs a GPU (world size 1)")
def test_init_process_group_binds_the_local_ranks_gpu():
    """init_process_group (env://, world of one): LOCAL_RANK modulo the
    visible devices, device_id= over it, and an invisible device_id refused
    with nothing left initialised."""
    n = dg.cuda.device_count()
    code = (
        "import numpy as np, dragon_core as dg, dragon_core.distributed as dist\n"
        "dist.init_process_group('nccl', timeout=60)\n"
        "w = dist._G.world; g = dist.new_group([0])\n"
        f"assert w.bound_device_id == g.bound_device_id == 'cuda:{(2 * n + n - 1) % n}', "
        "(w.bound_device_id, g.bound_device_id)\n"
        "t = dg.tensor(np.ones(3, np.float32)).to(w.bound_device_id)\n"
        "dist.all_reduce(t); assert t.to('cpu').numpy().tolist() == [1.0, 1.0, 1.0]\n"
        "dist.destroy_process_group()\n"
        "dist.init_process_group('nccl', timeout=60, device_id=0)\n"
        "assert dist._G.world.bound_device_id == 'cuda:0'\n"
        "dist.destroy_process_group()\n"
        "try:\n"
        f"    dist.init_process_group('nccl', timeout=60, device_id={n})\n"
        "except Exception as e:\n"
        f"    assert 'device_id cuda:{n} is not visible' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('an invisible device_id was accepted')\n"
        "assert not dist.is_initialized()\n"
        "print('BOUND OK')\n")
    env = dict(_rendezvous_env(), LOCAL_RANK=str(2 * n + n - 1))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=150, env=env)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert "BOUND OK" in p.stdout, p.stdout[-4000:] + p.stderr[-4000:]
