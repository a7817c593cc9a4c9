"""DistributedDataParallel in a world of one rank on one device:
``python _ddp_device_worker.py DEVICE`` (``cpu``: the MPI backend; ``cuda``:
the NCCL backend). Run by test_nccl_dist.py in a fresh process (MPI can be
initialised once per process).

A small MLP trains a few SGD steps (momentum) three ways from the same
initial parameters and batches: plain (no DDP), DDP eagerly and DDP inside
``dg.function`` (forward, ``backward()`` and ``opt.step()`` compiled), with
bucket caps small enough for several buckets. With one rank the average over
the ranks is the gradient itself, so both DDP runs must end with the plain
run's parameters and losses; the event log and the compiled graph show that
every bucket went through the backend's all-reduce. Prints ``DDP OK``.
"""

from __future__ import annotations

import sys

import numpy as np

import dragon_core as dg
import dragon_core.distributed as dist
from dragon_core import nn
from dragon_core.distributed.ddp import DistributedDataParallel
from dragon_core.nn import functional as F

device = sys.argv[1]
STEPS = 4
# parameters (float32, reverse order): 12, 192 | 64, 1024 | 64, 384 bytes -> 3 buckets
FIRST_CAP_MB = 256 / 2**20
CAP_MB = 1100 / 2**20
BUCKETS = [[5, 4], [3, 2], [1, 0]]

dist.init_process_group(device=device)
assert dist.get_world_size() == 1 and dist.get_rank() == 0
expected_backend = "nccl" if device.startswith("cuda") else "mpi"
assert dist.get_backend() == expected_backend, dist.get_backend()

rng = np.random.default_rng(0)
XS = [rng.standard_normal((8, 6)).astype(np.float32) for _ in range(STEPS)]
YS = [rng.integers(0, 3, 8).astype(np.int64) for _ in range(STEPS)]


def make_model():
    dg.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 3))


def train(mode):
    model = make_model()
    model.to(device)                      # before the optimizer: moving replaces parameters
    log = []
    net = model
    if mode != "plain":
        net = DistributedDataParallel(model, event_log=log, first_bucket_cap_mb=FIRST_CAP_MB,
                                      bucket_cap_mb=CAP_MB)
        assert net.bucket_indices == BUCKETS, net.bucket_indices
    opt = dg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss

    if mode == "compiled":
        step = dg.function(step)
    losses = []
    for xn, yn in zip(XS, YS):
        x, y = dg.tensor(xn).to(device), dg.tensor(yn).to(device)
        losses.append(float(step(x, y).cpu().numpy()))
    params = {k: v.cpu().numpy().copy() for k, v in model.state_dict().items()}
    return params, np.array(losses), log, step, net


plain, plain_losses, _, _, _ = train("plain")
eager, eager_losses, log, _, ddp = train("eager")
compiled, compiled_losses, clog, cstep, _ = train("compiled")


def check(name, got, got_losses, rtol):
    for k, ref in plain.items():
        assert got[k].shape == ref.shape and got[k].dtype == np.float32, (name, k)
        err = float(np.abs(got[k] - ref).max() / max(float(np.abs(ref).max()), 1e-30))
        assert err <= rtol, f"{name} {k}: relative error {err:.3g} (rtol {rtol})"
    np.testing.assert_allclose(got_losses, plain_losses, rtol=rtol, err_msg=name)
    # the parameters moved: the comparison is not between two untrained models
    assert max(float(np.abs(got[k] - make_model().state_dict()[k].numpy()).max())
               for k in got) > 1e-3, name


check("DDP eager", eager, eager_losses, 1e-6)
check("DDP compiled", compiled, compiled_losses, 1e-5)

# Eagerly: one all-reduce started and done per bucket and step.
starts = [e for e in log if e[1] == "allreduce_start"]
dones = [e for e in log if e[1] == "allreduce_done"]
assert len(starts) == len(dones) == len(BUCKETS) * STEPS, (len(starts), len(dones))

# Compiled: the buckets' all-reduces are graph ops of the backend's device.
x0, y0 = dg.tensor(XS[0]).to(device), dg.tensor(YS[0]).to(device)
types = [op.type for op in cstep.get_graph(x0, y0).op]
if device.startswith("cuda"):
    n = types.count("CollectiveAllReduce")          # NCCL kernels, op="avg"
else:
    n = types.count("DDPAllReduceStart")            # the MPI async pair
    assert types.count("DDPAllReduceWait") == len(BUCKETS), types
assert n == len(BUCKETS), types
print(f"DDP OK {device}: eager and compiled match plain training over {STEPS} steps, "
      f"{len(starts)} bucket all-reduces eagerly, {n} per compiled step", flush=True)
dist.destroy_process_group()
