"""One rank of the DDP tests, run under ``mpirun -n 2`` by test_ddp.py.

``python _ddp_worker.py OUT_DIR [--no-sync] [--compiled] [--ckpt DIR] [--die-at STEP]``

Trains the digits CNN (BatchNorm converted to SyncBatchNorm, no dropout)
wrapped in DistributedDataParallel on this rank's shard — the DataLoader is
given no rank: it shards by itself from the launcher's environment. Every
rank is seeded differently, so equal results also show the broadcast from
rank 0 at wrap time. Writes ``OUT_DIR/rank{r}.npz`` (final parameters and
buffers) and ``OUT_DIR/events{r}.txt`` (the DDP event log).

With ``--ckpt`` rank 0 saves a checkpoint after every ``CKPT_EVERY`` steps
and a run resumes from the last one it finds; ``--die-at S`` makes rank 1
exit abruptly (``os._exit``) at global step ``S`` (a killed rank).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dragon_core as dg  # noqa: E402
from dragon_core.distributed.ddp import DistributedDataParallel  # noqa: E402
from dragon_core.distributed.sync_batchnorm import SyncBatchNorm  # noqa: E402
from dragon_core.nn import functional as F  # noqa: E402

from _ddp_common import (BATCH_PER_RANK, CKPT_EVERY, EPOCHS, FIRST_CAP_MB, CAP_MB,  # noqa: E402
                         LR, SEED, make_model, train_data)
from _mpi_group import MPIGroup  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--no-sync", action="store_true")
    ap.add_argument("--ckpt")
    ap.add_argument("--die-at", type=int, default=-1)
    ap.add_argument("--compiled", action="store_true")
    ap.add_argument("--direct-bytes", type=int, default=None,
                    help="DDP's DIRECT_BYTES: gradients this large are averaged in place "
                         "on their own (the default leaves this small model's all in buckets)")
    ap.add_argument("--dragon", action="store_true",
                    help="dragon_core.distributed's default group (under its launcher) "
                         "instead of the mpi4py one")
    args = ap.parse_args()
    if args.direct_bytes is not None:
        import dragon_core.distributed.ddp as ddp_module
        ddp_module.DIRECT_BYTES = args.direct_bytes
    if args.dragon:
        import dragon_core.distributed as dist
        dist.init_process_group()
        group, rank, barrier = None, dist.get_rank(), dist.barrier
    else:
        group = MPIGroup()
        rank, barrier = group.rank(), group.comm.Barrier

    dg.manual_seed(SEED + 7 * rank)          # replicas differ until the broadcast
    model = make_model()
    model = SyncBatchNorm.convert_sync_batchnorm(model, process_group=group)
    events: list = []
    ddp = DistributedDataParallel(model, process_group=group, event_log=events,
                                  first_bucket_cap_mb=FIRST_CAP_MB, bucket_cap_mb=CAP_MB)
    opt = dg.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    x, y = train_data()
    loader = dg.data.DataLoader(dg.data.TensorDataset(x, y), batch_size=BATCH_PER_RANK,
                                shuffle=True, drop_last=True, seed=SEED)
    steps_per_epoch = len(loader)

    @dg.function
    def compiled_step(xb, yb):
        opt.zero_grad()
        loss = F.cross_entropy(ddp(xb), yb)
        loss.backward()
        opt.step()
        return loss

    # no_sync in compiled steps (--compiled --no-sync): one function called
    # inside no_sync (no all-reduce) and outside it (all-reduce), and a
    # function with no_sync inside its body followed by a compiled synced
    # step with the optimizer; the steps alternate between the two ways.
    @dg.function
    def micro_step(xb, yb):
        F.cross_entropy(ddp(xb), yb).backward()

    @dg.function
    def accumulate(xb, yb):
        with ddp.no_sync():
            F.cross_entropy(ddp(xb), yb).backward()

    @dg.function
    def synced_step(xb, yb):
        F.cross_entropy(ddp(xb), yb).backward()
        opt.step()

    step = 0
    ckpt = os.path.join(args.ckpt, "last.dgt") if args.ckpt else None
    if ckpt and os.path.exists(ckpt):
        state = dg.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = int(state["step"])

    while step < EPOCHS * steps_per_epoch:
        epoch, skip = divmod(step, steps_per_epoch)
        loader.set_epoch(epoch)
        for k, (xb, yb) in enumerate(loader):
            if k < skip:
                continue
            if step == args.die_at and rank == 1:
                os._exit(17)
            events.append((0.0, "step", step))
            if args.compiled and args.no_sync:
                half = BATCH_PER_RANK // 2
                if step % 2 == 0:
                    # zeros, not None: the .grad guards alone cannot then
                    # tell the no_sync plan from the synced one
                    opt.zero_grad(set_to_none=False)
                    with ddp.no_sync():
                        micro_step(xb[:half], yb[:half])
                    micro_step(xb[half:], yb[half:])
                    opt.step()
                else:
                    opt.zero_grad()
                    accumulate(xb[:half], yb[:half])
                    synced_step(xb[half:], yb[half:])
            elif args.compiled:
                compiled_step(xb, yb)
                if not os.path.exists(os.path.join(args.out, f"graph{rank}.txt")):
                    with open(os.path.join(args.out, f"graph{rank}.txt"), "w") as f:
                        f.write("\n".join(op.type for op in compiled_step.get_graph(xb, yb).op))
            elif args.no_sync:
                opt.zero_grad()
                # Two micro-batches: the first accumulates locally only.
                half = BATCH_PER_RANK // 2
                with ddp.no_sync():
                    F.cross_entropy(ddp(xb[:half]), yb[:half]).backward()
                F.cross_entropy(ddp(xb[half:]), yb[half:]).backward()
                opt.step()
            else:
                opt.zero_grad()
                F.cross_entropy(ddp(xb), yb).backward()
                opt.step()
            step += 1
            if ckpt and rank == 0 and step % CKPT_EVERY == 0:
                tmp = ckpt + ".tmp"
                dg.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                         "step": step}, tmp)
                os.replace(tmp, ckpt)
            if ckpt:
                barrier()                 # the checkpoint is on disk before anyone goes on
    np.savez(os.path.join(args.out, f"rank{rank}.npz"),
             **{k: v.numpy() for k, v in model.state_dict().items()})
    with open(os.path.join(args.out, f"events{rank}.txt"), "w") as f:
        for _, event, detail in events:
            f.write(f"{event} {detail}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
