"""Differential fuzzing of graph mode against eager mode.

``random_program(seed)`` draws a small random program (a DAG of 3-15 ops:
element-wise unary/binary ops with broadcasting and Python scalars,
reductions, reshape/transpose/slice/concat/split views, matmul,
softmax/layer_norm/gelu, casts through bfloat16/float16/int32, where) as a
list of instructions; ``Program.__call__`` interprets it with
``dragon_core.ops``, so the same Python function runs eagerly and is traced
by ``dg.function``. ``check_program`` runs it eagerly and compiled at every
optimisation level (with and without fusion), several calls in a row with
different inputs, and checks

- outputs equal eager ones (bit for bit where docs/graph.md promises it:
  every level below O3 and the exact 16-bit groups; otherwise within a
  dtype-derived tolerance),
- the inputs are not modified by a call,
- results returned by an earlier call are unchanged by later calls (a
  planned buffer handed out as a result and reused by the next run),
- dtype and shape of every output match.

``random_train_step(seed)`` builds a small training step (parameters,
loss, GradientTape or ``loss.backward()``, SGD/Adam with or without the
multi-tensor update) and ``check_train_step`` compares the parameters,
gradients and losses of several compiled steps with the eager ones.

The number of programs and the first seed come from ``DRAGON_FUZZ_COUNT``
/ ``DRAGON_FUZZ_OFFSET`` (``tests/graph/test_graphfuzz.py``) so a deeper run
by hand is ``DRAGON_FUZZ_OFFSET=1000 DRAGON_FUZZ_COUNT=2000 pytest
tests/graph/test_graphfuzz.py``.
"""

from __future__ import annotations

import numpy as np

import dragon_core as dg

# (opt_level, disable_passes) configurations every program runs under.
CONFIGS = [
    (0, ()),
    (1, ()),
    (2, ()),
    (3, ()),
    (3, ("fusion",)),
    (3, ("fusion", "memory")),
    (3, ("inplace",)),
    (3, ("pattern_fusion",)),
    ("parallel", ()),
]

UNARY = ["relu", "tanh", "sigmoid", "neg", "abs", "square", "gelu", "sin", "exp_s", "sqrt_a",
         "softplus", "erf", "leaky_relu", "elu", "log1p_a", "clip", "pow_s", "contiguous"]
BINARY = ["add", "sub", "mul", "maximum", "minimum", "div_s"]


def _tol(dtype: str) -> float:
    return {"float64": 1e-10, "float32": 2e-5, "float16": 2e-2, "bfloat16": 4e-2}[dtype]


class Program:
    """A random program: ``instrs`` is a list of (op, args, n_out)."""

    def __init__(self, seed: int, dtype: str, in_shapes, instrs, outputs):
        self.seed, self.dtype, self.in_shapes = seed, dtype, in_shapes
        self.instrs, self.outputs = instrs, outputs

    def __repr__(self):
        lines = [f"# seed {self.seed} dtype {self.dtype} inputs {self.in_shapes} "
                 f"fed {getattr(self, 'feed', None)}"]
        n = len(self.in_shapes)
        for op, args, k in self.instrs:
            names = ", ".join(f"v{n + j}" for j in range(k))
            lines.append(f"{names} = {op}{tuple(args)}")
            n += k
        lines.append(f"return {self.outputs}")
        return "\n".join(lines)

    def __call__(self, *xs):
        vals = list(xs)
        for op, args, _ in self.instrs:
            res = _apply(op, args, vals)
            if isinstance(res, (list, tuple)):
                vals.append(res[0])     # split: keep the pieces as one entry per piece
                vals.extend(res[1:])
            else:
                vals.append(res)
        return tuple(vals[i] for i in self.outputs)


def _apply(op, args, vals):
    o = dg.ops
    v = lambda i: vals[i]   # noqa: E731
    if op in ("relu", "tanh", "sigmoid", "neg", "abs", "square", "sin", "softplus", "erf",
              "leaky_relu", "elu", "contiguous"):
        return getattr(o, op)(v(args[0]))
    if op == "log1p_a":
        return o.log1p(o.abs(v(args[0])))
    if op == "clip":
        return o.clip(v(args[0]), -0.5, 0.75)
    if op == "pow_s":
        return o.pow(o.add(o.abs(v(args[0])), 0.5), 1.5)
    if op in ("var", "std", "min", "prod", "logsumexp"):
        return getattr(o, op)(v(args[0]), axis=args[1], keepdims=args[2])
    if op == "broadcast_to":
        return o.broadcast_to(v(args[0]), args[1])
    if op == "cumsum":
        return o.cumsum(v(args[0]), args[1], exclusive=args[2], reverse=args[3])
    if op == "log_softmax":
        return o.log_softmax(v(args[0]), axis=args[1])
    if op == "stack":
        return o.stack([v(i) for i in args[0]], axis=args[1])
    if op == "flatten":
        return o.flatten(v(args[0]), args[1], args[2])
    if op == "pad":
        return o.pad(v(args[0]), args[1], mode=args[2], value=0.5)
    if op == "index_select":
        x = v(args[0])
        return o.index_select(x, dg.tensor(np.array(args[2], np.int64)), axis=args[1])
    if op == "linear":          # matmul + [n] bias (+ relu): pattern_fusion's chains
        x = v(args[0])
        r = np.random.default_rng(args[1])
        w = dg.tensor(r.standard_normal((x.shape[-1], args[2])).astype(np.float32)).cast(x.dtype)
        b = dg.tensor(r.standard_normal((args[2],)).astype(np.float32)).cast(x.dtype)
        z = o.matmul(x, w)
        z = o.add(z, b) if args[3] else z
        return [o.relu(z), z] if args[4] else [z, z]
    if op == "cond":            # control flow: a branch may return its operand or a view of it
        x, y = v(args[0]), v(args[1])
        branches = {
            "id": lambda a, b: a,
            "view": lambda a, b: o.reshape(o.reshape(a, [-1]), list(a.shape)),
            "mul": lambda a, b: o.mul(a, 2.0),
            "mix": lambda a, b: o.add(o.tanh(a), b),
        }
        return dg.cond(o.greater(o.sum(y), 0.0), branches[args[2]], branches[args[3]], [x, y])
    if op in ("topk", "sort"):
        x = v(args[0])
        if op == "topk":
            vals, idx = o.topk(x, args[1], axis=-1, largest=args[2])
        else:
            vals, idx = o.sort(x, axis=-1, descending=args[2])
        return [vals, o.cast(idx, x.dtype)]
    if op == "gelu":
        return o.gelu(v(args[0]), approximate=args[1])
    if op == "exp_s":
        return o.exp(o.mul(v(args[0]), 0.25))
    if op == "sqrt_a":
        return o.sqrt(o.add(o.abs(v(args[0])), 1.0))
    if op in ("add", "sub", "mul", "maximum", "minimum"):
        a, b = args
        a = v(a) if isinstance(a, int) else a[1]
        b = v(b) if isinstance(b, int) else b[1]
        return getattr(o, op)(a, b)
    if op == "div_s":
        return o.div(v(args[0]), args[1])
    if op in ("sum", "mean", "max"):
        return getattr(o, op)(v(args[0]), axis=args[1], keepdims=args[2])
    if op == "reshape":
        return o.reshape(v(args[0]), args[1])
    if op == "transpose":
        return o.transpose(v(args[0]), args[1])
    if op == "slice":
        return o.slice(v(args[0]), args[1], args[2], None, args[3])
    if op == "concat":
        return o.concat([v(i) for i in args[0]], axis=args[1])
    if op == "split":
        return o.split(v(args[0]), args[1], axis=args[2])
    if op == "matmul":
        return o.matmul(v(args[0]), v(args[1]), transpose_b=args[2])
    if op == "softmax":
        return o.softmax(v(args[0]), axis=args[1])
    if op == "layer_norm":
        x = v(args[0])
        n = x.shape[-1]
        g = dg.tensor(np.linspace(0.5, 1.5, n).astype(np.float32)).cast(x.dtype)
        b = dg.tensor(np.linspace(-0.2, 0.2, n).astype(np.float32)).cast(x.dtype)
        return o.layer_norm(x, g, b, axis=-1)
    if op == "cast_rt":          # round trip through another dtype
        x = v(args[0])
        return o.cast(o.cast(x, args[1]), x.dtype)
    if op == "where":
        c, a, b = v(args[0]), v(args[1]), v(args[2])
        return o.where(o.greater(c, 0.0), a, b)
    if op == "unsqueeze_sq":
        return o.squeeze(o.unsqueeze(v(args[0]), args[1]), args[1])
    raise AssertionError(op)


def _bcast_ok(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def _more_op(rng, i, s, shapes):
    """The rarer ops (drawn with probability 1/4 when ``extra`` is drawn)."""
    k = str(rng.choice(["linear", "linear", "cond", "cond", "red2", "broadcast_to", "cumsum", "log_softmax", "stack", "flatten",
                        "pad", "index_select", "topk", "sort"]))
    n = len(s)
    if k == "red2" and n >= 1:
        r = str(rng.choice(["var", "std", "min", "prod", "logsumexp"]))
        ax, kd = int(rng.integers(n)), bool(rng.random() < 0.5)
        o = list(s)
        if kd:
            o[ax] = 1
        else:
            del o[ax]
        return r, [i, ax, kd], [tuple(o)]
    if k == "linear" and n == 2:
        m = int(rng.integers(1, 9))
        o = (s[0], m)
        return "linear", [i, int(rng.integers(1 << 30)), m, bool(rng.random() < 0.7),
                          bool(rng.random() < 0.7)], [o, o]
    if k == "cond":
        cands = [j for j, t in enumerate(shapes) if _bcast_ok(s, t) and
                 tuple(np.broadcast_shapes(s, t)) == s]
        j = cands[int(rng.integers(len(cands)))]
        kinds = ["id", "view", "mul", "mix"]
        return "cond", [i, j, kinds[int(rng.integers(4))], kinds[int(rng.integers(4))]], [s]
    if k == "broadcast_to":
        big = [t for t in shapes if _bcast_ok(s, t) and tuple(np.broadcast_shapes(s, t)) == t]
        t = big[int(rng.integers(len(big)))]
        return "broadcast_to", [i, list(t)], [t]
    if k == "cumsum" and n >= 1:
        return "cumsum", [i, int(rng.integers(n)), bool(rng.random() < 0.3),
                          bool(rng.random() < 0.3)], [s]
    if k == "log_softmax" and n >= 1:
        return "log_softmax", [i, int(rng.integers(n))], [s]
    if k == "stack" and np.prod(s) < 4096:
        same = [j for j, t in enumerate(shapes) if t == s]
        picks = [int(rng.choice(same)) for _ in range(int(rng.integers(1, 4)))]
        ax = int(rng.integers(n + 1))
        o = list(s)
        o.insert(ax, len(picks))
        return "stack", [picks, ax], [tuple(o)]
    if k == "flatten" and n >= 2:
        a = int(rng.integers(n - 1))
        b = int(rng.integers(a + 1, n))
        o = list(s[:a]) + [int(np.prod(s[a:b + 1]))] + list(s[b + 1:])
        return "flatten", [i, a, b], [tuple(o)]
    if k == "pad" and n >= 1 and np.prod(s) < 4096:
        pads = [(int(rng.integers(0, 2)), int(rng.integers(0, 2))) for _ in s]
        mode = "constant" if min(s) < 3 else str(rng.choice(["constant", "edge", "reflect"]))
        return "pad", [i, pads, mode], [tuple(d + a + b for d, (a, b) in zip(s, pads))]
    if k == "index_select" and n >= 1 and max(s) > 0:
        ax = int(np.argmax(s))
        idx = [int(j) for j in rng.integers(0, s[ax], size=int(rng.integers(1, 5)))]
        o = list(s)
        o[ax] = len(idx)
        return "index_select", [i, ax, idx], [tuple(o)]
    if k in ("topk", "sort") and n >= 1 and s[-1] > 0:
        if k == "topk":
            kk = int(rng.integers(1, s[-1] + 1))
            o = s[:-1] + (kk,)
            return "topk", [i, kk, bool(rng.random() < 0.5)], [o, o]
        return "sort", [i, None, bool(rng.random() < 0.5)], [s, s]
    return None, None, None


def random_program(seed: int, min_inputs: int = 1) -> Program:
    rng = np.random.default_rng(seed)
    dtype = str(rng.choice(["float32", "float32", "float32", "float64", "bfloat16", "float16"]))
    n_in = max(min_inputs, int(rng.integers(1, 4)))
    base = [int(d) for d in rng.integers(1, 5, size=int(rng.integers(0, 4)))]
    r = rng.random()
    if r < 0.15 and base:
        base[int(rng.integers(len(base)))] = int(rng.integers(17, 300))   # SIMD tails, threads
    elif r < 0.2 and base:
        base[int(rng.integers(len(base)))] = 0                            # empty
    in_shapes = []
    for _ in range(n_in):
        s = list(base)
        if rng.random() < 0.3:        # broadcastable variant
            s = [1 if rng.random() < 0.4 else d for d in s]
            if rng.random() < 0.3 and len(s) > 1:
                s = s[1:]
        in_shapes.append(tuple(s))
    # how each call feeds the inputs: "dense", "T" (a transposed view of a
    # dense tensor), "alias" (the same tensor as the previous argument)
    feed = []
    for k, s in enumerate(in_shapes):
        r = rng.random()
        if r < 0.2 and len(s) >= 2:
            feed.append("T")
        elif r < 0.35 and k > 0 and in_shapes[k - 1] == s:
            feed.append("alias")
        else:
            feed.append("dense")
    shapes = list(in_shapes)
    instrs = []
    n_ops = int(rng.integers(3, 16))
    tries = 0
    while len(instrs) < n_ops and tries < 200:
        tries += 1
        i = int(rng.integers(len(shapes)))
        # prefer recent values (deeper chains)
        if rng.random() < 0.6:
            i = len(shapes) - 1 - int(rng.integers(min(3, len(shapes))))
        s = shapes[i]
        kind = rng.random() * 1.15     # > 0.985: the rarer ops of _more_op
        op = None
        if kind < 0.25:
            u = str(rng.choice(UNARY))
            if u == "gelu":
                op, args, out = "gelu", [i, str(rng.choice(["none", "tanh"]))], [s]
            else:
                op, args, out = u, [i], [s]
        elif kind < 0.5:
            b = str(rng.choice(BINARY))
            if b == "div_s":
                op, args, out = b, [i, float(rng.choice([3.0, 0.5, -7.0]))], [s]
            else:
                cands = [j for j, t in enumerate(shapes) if _bcast_ok(s, t)]
                if rng.random() < 0.25:
                    sc = ("s", float(rng.choice([0.5, -1.0, 2.0, 0.0])))
                    args = [i, sc] if rng.random() < 0.7 else [sc, i]
                    op, out = b, [s]
                else:
                    j = int(rng.choice(cands))
                    if rng.random() < 0.15:
                        j = i                         # x op x: one value read twice
                    op, args = b, [i, j]
                    out = [tuple(np.broadcast_shapes(s, shapes[j]))]
        elif kind < 0.58 and len(s) >= 1:
            r = str(rng.choice(["sum", "mean", "max"]))
            ax = int(rng.integers(len(s)))
            kd = bool(rng.random() < 0.5)
            o = list(s)
            if kd:
                o[ax] = 1
            else:
                del o[ax]
            op, args, out = r, [i, ax, kd], [tuple(o)]
        elif kind < 0.64:
            n = int(np.prod(s))
            opts = [(n,), (1, n), (n, 1)] + ([tuple(reversed(s))] if len(s) > 1 else [])
            o = opts[int(rng.integers(len(opts)))]
            op, args, out = "reshape", [i, list(o)], [tuple(o)]
        elif kind < 0.70 and len(s) >= 2 and np.prod(s) < 4096:
            perm = [int(p) for p in rng.permutation(len(s))]
            op, args, out = "transpose", [i, perm], [tuple(s[p] for p in perm)]
        elif kind < 0.75 and len(s) >= 1 and max(s) > 1:
            ax = int(np.argmax(s))
            st = int(rng.integers(0, s[ax] - 1))
            en = int(rng.integers(st + 1, s[ax] + 1))
            o = list(s)
            o[ax] = en - st
            op, args, out = "slice", [i, [st], [en], [ax]], [tuple(o)]
        elif kind < 0.79 and len(s) >= 1 and np.prod(s) < 4096:
            same = [j for j, t in enumerate(shapes) if t == s]
            picks = [int(rng.choice(same)) for _ in range(int(rng.integers(2, 4)))]
            ax = int(rng.integers(len(s)))
            o = list(s)
            o[ax] = s[ax] * len(picks)
            op, args, out = "concat", [picks, ax], [tuple(o)]
        elif kind < 0.82 and len(s) >= 1 and max(s) > 1:
            ax = int(np.argmax(s))
            a = int(rng.integers(1, s[ax]))
            sizes = [a, s[ax] - a]
            outs = []
            for z in sizes:
                o = list(s)
                o[ax] = z
                outs.append(tuple(o))
            op, args, out = "split", [i, sizes, ax], outs
        elif kind < 0.87 and len(s) >= 2 and np.prod(s) * s[-2] < 20000:
            if rng.random() < 0.5:
                op, args, out = "matmul", [i, i, True], [s[:-1] + (s[-2],)]
            else:
                cands = [j for j, t in enumerate(shapes)
                         if len(t) == 2 and t[0] == s[-1]]
                if len(s) == 2 and cands:
                    j = int(rng.choice(cands))
                    op, args, out = "matmul", [i, j, False], [(s[0], shapes[j][1])]
        elif kind < 0.90 and len(s) >= 1:
            op, args, out = "softmax", [i, int(rng.integers(-len(s), len(s)))], [s]
        elif kind < 0.93 and len(s) >= 1:
            op, args, out = "layer_norm", [i], [s]
        elif kind < 0.96:
            to = str(rng.choice(["bfloat16", "float16", "int32", "float32", "float64"]))
            if to == dtype:
                to = "int32"
            op, args, out = "cast_rt", [i, to], [s]
        elif kind < 0.98:
            cands = [j for j, t in enumerate(shapes) if _bcast_ok(s, t)]
            j, k = int(rng.choice(cands)), int(rng.choice(cands))
            try:
                o = tuple(np.broadcast_shapes(s, shapes[j], shapes[k]))
            except ValueError:
                continue
            op, args, out = "where", [i, j, k], [o]
        elif kind < 0.985:
            op, args, out = "unsqueeze_sq", [i, int(rng.integers(0, len(s) + 1))], [s]
        else:
            op, args, out = _more_op(rng, i, s, shapes)
        if op is None:
            continue
        instrs.append((op, args, len(out)))
        shapes.extend(out)
    n_vals = len(shapes)
    outs = {n_vals - 1}
    for _ in range(int(rng.integers(0, 4))):
        outs.add(int(rng.integers(n_vals)))     # inputs and views of inputs included
    outs = sorted(outs)
    if rng.random() < 0.1:
        outs.append(outs[0])                    # one value returned twice
    prog = Program(seed, dtype, in_shapes, instrs, outs)
    prog.feed = feed
    return prog


def _inputs(prog, rng, flip=False):
    """One call's inputs; ``flip`` feeds the other layout (a dense tensor
    for a transposed view and back, separate tensors for aliased ones): a
    plan is cached per shape and dtype, whatever the strides and aliasing."""
    out = []
    for s, how in zip(prog.in_shapes, getattr(prog, "feed", ["dense"] * len(prog.in_shapes))):
        if flip:
            how = {"T": "dense", "alias": "dense",
                   "dense": "T" if len(s) >= 2 else "dense"}[how]
        if how == "alias":
            out.append(out[-1])
            continue
        a = rng.standard_normal(s[::-1] if how == "T" else s).astype(np.float32)
        t = dg.tensor(a).cast(prog.dtype) if prog.dtype != "float32" else dg.tensor(a)
        if how == "T":
            t = dg.ops.transpose(t)        # a strided view: the function gets strides
        out.append(t)
    return out


def _np(t):
    d = str(t.dtype)
    if d in ("bfloat16", "float16"):
        return t.cast("float32").numpy().copy(), d
    return t.numpy().copy(), d


def _compare(tag, prog, got, want, exact):
    assert len(got) == len(want), f"{tag}: {len(got)} outputs, eager {len(want)}\n{prog}"
    for k, (g, w) in enumerate(zip(got, want)):
        gn, gd = _np(g)
        wn, wd = w
        assert gd == wd and gn.shape == wn.shape, (
            f"{tag} output {k}: {gd}{gn.shape} vs eager {wd}{wn.shape}\n{prog}")
        if exact:
            ok = np.array_equal(gn, wn, equal_nan=True)
        else:
            t = _tol(wd)
            ok = np.allclose(gn, wn, rtol=t, atol=t, equal_nan=True)
        if not ok:
            err = np.nanmax(np.abs(gn.astype(np.float64) - wn)) if gn.size else 0
            raise AssertionError(f"{tag} output {k} differs from eager (max err {err}, "
                                 f"exact={exact})\n{prog}\ngot {gn}\nwant {wn}")


def bit_exact(level, disabled, dtype, autocast=None) -> bool:
    """Whether docs/graph.md promises eager mode's bits for this config:
    every level, except that at O3 a bfloat16 MatMul+bias[+Relu] chain fused
    by pattern_fusion rounds once (docs/graph.md, "Rounding of 16-bit
    chains"); the parallel executor runs the same kernels."""
    if level == 3 and dtype == "bfloat16" and "pattern_fusion" not in disabled:
        return False
    if level == 3 and autocast and "cast_fold" not in disabled:
        return False   # cast_fold's widening fold: at least as accurate, not the bits
    return True


def check_program(prog: Program, calls: int = 3, configs=CONFIGS, exact_levels=(0, 1, 2),
                  autocast=None):
    """Run ``prog`` eagerly and compiled under ``configs``; raise on a
    difference. With ``autocast`` (a dtype) eager runs inside
    ``dg.autocast("cpu", dtype=autocast)`` and the functions are compiled
    with ``autocast=``; returns False when eager mode cannot run it."""
    import contextlib
    amp = (lambda: dg.autocast("cpu", dtype=autocast)) if autocast else contextlib.nullcontext
    rng = np.random.default_rng(prog.seed + 1)
    feeds = [_inputs(prog, rng, flip=c % 2 == 1) for c in range(calls)]
    eager = []
    try:
        for xs in feeds:
            with amp():
                eager.append([_np(t) for t in prog(*xs)])
    except (dg.errors.NoKernelError, dg.errors.InvalidArgumentError, NotImplementedError):
        return False            # eager mode cannot run it (a kernel gap, not graph mode's)
    for level, disabled in configs:
        if level == "parallel":
            f = dg.function(prog, parallel=2, name=f"fuzz{prog.seed}", autocast=autocast)
        else:
            f = dg.function(prog, opt_level=level, disable_passes=disabled,
                            name=f"fuzz{prog.seed}", autocast=autocast)
        tag = f"seed {prog.seed} O{level} disable={disabled}"
        kept = []
        for c, xs in enumerate(feeds):
            before = [_np(t) for t in xs]
            got = f(*xs)
            for k, (t, b) in enumerate(zip(xs, before)):
                assert np.array_equal(_np(t)[0], b[0], equal_nan=True), (
                    f"{tag} call {c}: input {k} modified\n{prog}")
            exact = level in exact_levels and bit_exact(level, disabled, prog.dtype, autocast)
            _compare(f"{tag} call {c}", prog, got, eager[c], exact=exact)
            kept.append((c, got))
        for c, got in kept:         # results of earlier calls must not have changed
            _compare(f"{tag} kept result of call {c}", prog, got, eager[c], exact=exact)
    return True


class TrainStep:
    """A training step around a random program: input 0 is the data, the
    other inputs are parameters (one is added when the program has a single
    input); the loss is the sum of ``mean(square(out))`` over its outputs."""

    def __init__(self, seed: int):
        rng = np.random.default_rng(seed + 7_000_000)
        prog = random_program(seed, min_inputs=2)
        prog.dtype = str(rng.choice(["float32", "float32", "float64"]))
        # integer round trips have no gradient: keep the float ones
        prog.instrs = [(op, [a[0], "bfloat16"] if op == "cast_rt" and a[1] == "int32" else a, k)
                       for op, a, k in prog.instrs]
        self.prog, self.seed = prog, seed
        self.opt = str(rng.choice(["sgd", "sgd_momentum", "adam", "adamw"]))
        self.foreach = [None, True, False][int(rng.integers(3))]
        self.backward = bool(rng.random() < 0.5)     # loss.backward() or GradientTape
        self.autocast = "bfloat16" if rng.random() < 0.2 else None

    def __repr__(self):
        return (f"TrainStep(seed={self.seed}, opt={self.opt}, foreach={self.foreach}, "
                f"backward={self.backward}, autocast={self.autocast})\n{self.prog}")

    def make(self, values):
        params = [dg.tensor(v).requires_grad_() for v in values]
        kw = dict(foreach=self.foreach)
        opt = {"sgd": lambda: dg.optim.SGD(params, lr=0.05, **kw),
               "sgd_momentum": lambda: dg.optim.SGD(params, lr=0.05, momentum=0.9,
                                                    weight_decay=0.01, **kw),
               "adam": lambda: dg.optim.Adam(params, lr=0.01, **kw),
               "adamw": lambda: dg.optim.AdamW(params, lr=0.01, weight_decay=0.1, **kw),
               }[self.opt]()
        prog = self.prog

        def loss_of(x):
            outs = prog(x, *params)
            loss = None
            for p in params:             # every parameter gets a gradient
                term = dg.ops.mul(dg.ops.sum(dg.ops.square(p)), 1e-3)
                loss = term if loss is None else loss + term
            for o in outs:
                if not str(o.dtype).startswith(("float", "bfloat")):
                    continue
                term = dg.ops.mean(dg.ops.square(o.cast("float32")))
                loss = term if loss is None else loss + term
            return loss

        def step(x):
            if self.backward:
                opt.zero_grad()
                loss = loss_of(x)
                loss.backward()
                opt.step()
            else:
                with dg.GradientTape() as tape:
                    tape.watch(params)
                    loss = loss_of(x)
                opt.step(tape.gradient(loss, params))
            return loss

        return params, step


def check_train_step(ts: TrainStep, steps: int = 3, configs=CONFIGS, exact_levels=()):
    rng = np.random.default_rng(ts.seed + 3)
    dt = ts.prog.dtype
    values = [rng.standard_normal(s).astype(dt) for s in ts.prog.in_shapes[1:]]
    xs = [dg.tensor(rng.standard_normal(ts.prog.in_shapes[0]).astype(dt)) for _ in range(steps)]
    if ts.prog.feed[0] == "T":
        xs = [dg.ops.transpose(dg.tensor(rng.standard_normal(ts.prog.in_shapes[0][::-1])
                                         .astype(dt))) for _ in range(steps)]

    def run(compiled, level=3, disabled=()):
        params, step = ts.make(values)
        fn = step
        if compiled:
            if level == "parallel":
                fn = dg.function(step, parallel=2, autocast=ts.autocast, name=f"train{ts.seed}")
            else:
                fn = dg.function(step, opt_level=level, disable_passes=disabled,
                                 autocast=ts.autocast, name=f"train{ts.seed}")
        losses, grads = [], []
        for x in xs:
            if not compiled and ts.autocast:
                with dg.autocast("cpu", dtype=ts.autocast):
                    loss = fn(x)
            else:
                loss = fn(x)
            if loss is None:
                return None
            losses.append(float(loss.cast("float64").numpy()))
            grads.append([None if p.grad is None else p.grad.numpy().copy() for p in params]
                         if ts.backward else None)
        return losses, [p.numpy().copy() for p in params], grads

    try:
        want = run(False)
    except (dg.errors.NoKernelError, dg.errors.InvalidArgumentError, NotImplementedError):
        return False
    if want is None:
        return False
    tol = 1e-9 if dt == "float64" else 1e-4
    if ts.autocast:
        tol = 3e-2
    for level, disabled in configs:
        tag = f"train seed {ts.seed} O{level} disable={disabled}"
        got = run(True, level, disabled)
        exact = level in exact_levels
        chk = (lambda a, b: np.array_equal(a, b, equal_nan=True)) if exact else (
            lambda a, b: np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True))
        assert chk(np.array(got[0]), np.array(want[0])), f"{tag}: losses {got[0]} vs {want[0]}\n{ts}"
        for k, (a, b) in enumerate(zip(got[1], want[1])):
            assert chk(a, b), f"{tag}: param {k} {a} vs eager {b}\n{ts}"
        for s, (ga, gb) in enumerate(zip(got[2], want[2])):
            if ga is None:
                continue
            for k, (a, b) in enumerate(zip(ga, gb)):
                assert (a is None) == (b is None) and (a is None or chk(a, b)), (
                    f"{tag}: step {s} grad of param {k} {a} vs eager {b}\n{ts}")
    return True
