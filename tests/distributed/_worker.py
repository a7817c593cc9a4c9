"""Run under ``python -m dragon_core.distributed.run -n 2 _worker.py OUTDIR``:
every case of _cases.py on this rank; results go to OUTDIR/rank<R>.npz
(compared with NumPy by test_collectives.py)."""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cases  # noqa: E402

import dragon_core as dg  # noqa: E402
import dragon_core.distributed as dist  # noqa: E402


def T(a):
    return dg.from_numpy(np.array(a, copy=True, order="C"))


def main(outdir):
    dist.init_process_group()
    rank = dist.get_rank()
    assert dist.get_world_size() == _cases.WORLD
    groups = {"world": None, "pair": dist.new_group([0, 1]), "solo1": dist.new_group([1])}
    results, fns = {}, {}
    for case, kind, dt, shape, g, extra in _cases.cases():
        members = _cases.GROUPS[g]
        if rank not in members:
            continue
        grp = groups[g]
        n = len(members)
        x = T(_cases.make_input(case, rank, dt, shape))
        if kind == "all_reduce":
            out = dist.all_reduce(x, op=extra, group=grp)
            assert out is x
        elif kind == "all_reduce_async":
            w = dist.all_reduce(x, op=extra, group=grp, async_op=True)
            out = w.wait()
            assert out is x and w.is_completed()
        elif kind == "broadcast":
            out = dist.broadcast(x, src=extra, group=grp)
        elif kind == "all_gather":
            outs = [T(np.zeros(shape, _cases.np_dtype(dt))) for _ in range(n)]
            dist.all_gather(outs, x, group=grp)
            out = T(np.stack([o.numpy() for o in outs]))
        elif kind == "all_gather_tensor":
            out = T(np.zeros((n,) + tuple(shape), _cases.np_dtype(dt)))
            dist.all_gather_into_tensor(out, x, group=grp)
        elif kind == "reduce_scatter":
            out = T(np.zeros((shape[0] // n,) + tuple(shape[1:]), _cases.np_dtype(dt)))
            dist.reduce_scatter_tensor(out, x, op=extra, group=grp)
        elif kind == "reduce_scatter_list":
            ins = [T(_cases.make_input(f"{case}#{j}", rank, dt, shape)) for j in range(n)]
            out = T(np.zeros(shape, _cases.np_dtype(dt)))
            dist.reduce_scatter(out, ins, op=extra, group=grp)
        elif kind == "all_to_all_single":
            out = T(np.zeros(shape, _cases.np_dtype(dt)))
            dist.all_to_all_single(out, x, group=grp)
        elif kind == "all_to_all":
            ins = [T(_cases.make_input(f"{case}#{j}", rank, dt, shape)) for j in range(n)]
            outs = [T(np.zeros(shape, _cases.np_dtype(dt))) for _ in range(n)]
            dist.all_to_all(outs, ins, group=grp)
            out = T(np.stack([o.numpy() for o in outs]))
        elif kind == "send_recv":
            peer = 1 - rank
            got = T(np.zeros(shape, _cases.np_dtype(dt)))
            if rank == 0:
                dist.send(x, peer)
                dist.recv(got, peer)
            else:
                dist.recv(got, peer)
                dist.send(x, peer)
            out = got
        elif kind.startswith("graph_"):
            gk = kind[6:]
            key = (gk, g)
            if key not in fns:
                if gk == "all_reduce":
                    fns[key] = dg.function(lambda t, op, _g=grp: dist.all_reduce(t, op=op,
                                                                                  group=_g))
                elif gk == "broadcast":
                    fns[key] = dg.function(lambda t, src, _g=grp: dist.broadcast(t, src=src,
                                                                                 group=_g))
                elif gk == "all_gather":
                    fns[key] = dg.function(lambda t, _g=grp: dist.all_gather(None, t, group=_g))
                elif gk == "reduce_scatter":
                    fns[key] = dg.function(lambda t, op, _g=grp: dist.reduce_scatter_tensor(
                        None, t, op=op, group=_g))
                else:
                    fns[key] = dg.function(lambda t, _g=grp: dist.all_to_all_single(
                        None, t, group=_g))
            if gk in ("all_reduce", "reduce_scatter"):
                out = fns[key](x, op=extra)
            elif gk == "broadcast":
                out = fns[key](x, src=extra)
            else:
                out = fns[key](x)
        else:
            raise AssertionError(kind)
        results[case] = np.asarray(out.numpy()).copy()
    dist.barrier()
    np.savez(os.path.join(outdir, f"rank{rank}.npz"),
             **{k: (v.view(np.uint16) if v.dtype.name == "bfloat16" else v)
                for k, v in results.items()})
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
