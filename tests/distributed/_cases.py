"""The collective cases the 2-rank job runs (tests/distributed/_worker.py)
and the NumPy float64 references the test compares them with
(test_collectives.py). Inputs are a pure function of (case, rank), so both
sides build them independently."""

from __future__ import annotations

import zlib

import numpy as np

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32",
          "int64", "bool"]
SHAPES = {"2d": (4, 3), "scalar": (), "empty": (0, 3)}
#: group name -> world ranks (2-rank world). "pair" is a new_group of both
#: ranks (its own communicator); "solo1" holds rank 1 only.
GROUPS = {"world": [0, 1], "pair": [0, 1], "solo1": [1]}
WORLD = 2


def np_dtype(name):
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def make_input(case: str, rank: int, dtype: str, shape) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(f"{case}|{rank}".encode()))
    if dtype == "bool":
        a = rng.integers(0, 2, shape).astype(bool)
    elif dtype == "uint8":
        a = rng.integers(0, 4, shape)
    elif dtype.startswith("int"):
        a = rng.integers(-3, 4, shape)
    else:
        a = rng.uniform(-2, 2, shape)
    return np.asarray(a).astype(np_dtype(dtype))


def reduce_ops(dtype):
    if dtype == "bool":
        return ["max", "min"]
    if dtype.startswith(("int", "uint")):
        return ["sum", "max", "min", "prod"]
    return ["sum", "avg", "max", "min", "prod"]


def _reduce(arrays, op, dtype):
    x = np.stack([a.astype(np.float64) for a in arrays])
    r = {"sum": x.sum(0), "avg": x.mean(0), "max": x.max(0), "min": x.min(0),
         "prod": x.prod(0)}[op]
    return r.astype(np_dtype(dtype)) if dtype != "bool" else r.astype(bool)


def cases():
    """``[(case name, kind, dtype, shape, group, extra)]``."""
    out = []
    for g in GROUPS:
        for dt in DTYPES:
            for sname, shape in SHAPES.items():
                for op in reduce_ops(dt):
                    out.append((f"all_reduce-{op}-{dt}-{sname}-{g}", "all_reduce", dt, shape,
                                g, op))
                    out.append((f"all_reduce_async-{op}-{dt}-{sname}-{g}", "all_reduce_async",
                                dt, shape, g, op))
                for src in GROUPS[g]:
                    out.append((f"broadcast-src{src}-{dt}-{sname}-{g}", "broadcast", dt, shape,
                                g, src))
                out.append((f"all_gather-{dt}-{sname}-{g}", "all_gather", dt, shape, g, None))
                out.append((f"all_gather_tensor-{dt}-{sname}-{g}", "all_gather_tensor", dt,
                            shape, g, None))
                if sname == "2d":
                    n = len(GROUPS[g])
                    bshape = (2 * n, 3)
                    for op in reduce_ops(dt)[:2]:
                        out.append((f"reduce_scatter-{op}-{dt}-{g}", "reduce_scatter", dt,
                                    bshape, g, op))
                    out.append((f"reduce_scatter_list-{dt}-{g}", "reduce_scatter_list", dt,
                                (2, 3), g, reduce_ops(dt)[0]))
                    out.append((f"all_to_all_single-{dt}-{g}", "all_to_all_single", dt,
                                bshape, g, None))
                    out.append((f"all_to_all-{dt}-{g}", "all_to_all", dt, (2, 3), g, None))
                    if g == "world":
                        out.append((f"send_recv-{dt}", "send_recv", dt, shape, g, None))
                    for gk in ("all_reduce", "broadcast", "all_gather", "reduce_scatter",
                               "all_to_all"):
                        extra = reduce_ops(dt)[0] if gk in ("all_reduce", "reduce_scatter") \
                            else GROUPS[g][-1]
                        out.append((f"graph_{gk}-{dt}-{g}", "graph_" + gk, dt, bshape, g,
                                    extra))
    return out


def expected(case, kind, dtype, shape, group, extra, rank):
    """The float64-computed reference of ``case`` on world rank ``rank``."""
    members = GROUPS[group]
    n = len(members)
    me = members.index(rank)
    ins = [make_input(case, r, dtype, shape) for r in members]
    if kind.startswith("graph_"):
        kind = kind[6:] + ("_single" if kind == "graph_all_to_all" else "")
        if kind == "all_gather":
            kind = "all_gather_tensor"
    if kind in ("all_reduce", "all_reduce_async"):
        return _reduce(ins, extra, dtype)
    if kind == "broadcast":
        return make_input(case, extra, dtype, shape)
    if kind in ("all_gather", "all_gather_tensor"):
        return np.stack(ins)
    if kind == "reduce_scatter":
        full = _reduce(ins, extra, dtype)
        k = shape[0] // n
        return full[me * k:(me + 1) * k]
    if kind == "reduce_scatter_list":
        lists = [np.stack([make_input(f"{case}#{j}", r, dtype, shape) for j in range(n)])
                 for r in members]
        return _reduce([lst[me] for lst in lists], extra, dtype)
    if kind == "all_to_all_single":
        k = shape[0] // n
        return np.concatenate([a[me * k:(me + 1) * k] for a in ins])
    if kind == "all_to_all":
        return np.stack([make_input(f"{case}#{me}", r, dtype, shape) for r in members])
    if kind == "send_recv":
        return make_input(case, 1 - rank, dtype, shape)
    raise AssertionError(kind)
