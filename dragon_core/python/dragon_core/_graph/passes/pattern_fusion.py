"""Pattern fusion: replace declared chains of ops by one fused op.

The patterns come from plugins (``dragon_core.fusion``: a pluggy hook or
``register_pattern``); nothing here names an op or a plugin. Patterns are
tried longest chain first, then by name; for each, every op of the root's
type is a candidate root, in graph order, and the chain is followed
backwards through the inputs (op ``i + 1`` reads output 0 of op ``i``
through exactly one input; when several inputs qualify, each is tried).
A chain is replaced when:

- a kernel for the pattern's fused op is registered for the graph's device
  type (``metadata["device"]``, ``"cpu"`` when absent) and the chain's
  dtype (the root output's), per ``dragon_core._C.kernels``; every input and
  output of the chain's ops has that dtype;
- no op of the chain belongs to another replaced chain;
- every value the chain makes internal (output 0 of each op but the root,
  every other output of every op) is neither a graph output nor a state
  update and has no reader outside the chain, with one exception: a reader
  of the root's chain input that the pattern's ``rewire`` accepts (and that
  runs after the root) is redirected to the fused output;
- the pattern's ``rewrite`` accepts the match (returns a ``Rewrite``; a
  ``ValueError`` from a shape rule also declines, any other exception is a
  bug: a pattern declared by a plugin's hook marks that plugin broken and
  declines, one given to ``register_pattern`` raises ``PluginError`` naming
  the pattern), and the fused op's inferred output has the root output's shape
  and dtype.

The fused op takes the root's place, preceded by the helper ops the rewrite
emitted (``Match.emit``), and writes the root's output 0 under its name (so
its ``value_info`` and every reader are kept). It carries the annotations
``_fused_ops`` (names of the ops replaced, comma-separated) and
``_fusion_pattern`` (the pattern's name). The values made internal lose
their ``value_info``. When an emitted op reads only constants,
``constant_fold`` runs on the result; when the graph carries
``_inplace_input`` annotations, ``inplace`` recomputes them. Sub-graphs of
control-flow ops are not visited.
"""

from __future__ import annotations

import numpy as np

import dragon_core as dg
from dragon_core import proto as P
from dragon_core._graph.build import (_plugin_versions, attr_from_proto, attr_to_proto,
                                      constant_array, schema)
from dragon_core._graph.passes import device_type, kernel_dtypes, register_pass
from dragon_core._graph.passes.prune import _drop_value_info
from dragon_core.errors import PluginError

ANNOTATION = "_fused_ops"
PATTERN_ANNOTATION = "_fusion_pattern"


class _Index:
    """Producers, readers and facts about the tensors of one GraphDef."""

    def __init__(self, g):
        self.g = g
        self.info = {v.name: (v.dtype, tuple(v.shape)) for v in g.value_info}
        self.constants = {c.name: c for c in g.constant}
        self.pinned = set(g.output) | set(g.state_update) | set(g.state_target)
        self.producer = {}   # tensor -> (op index, output index)
        self.readers = {}    # tensor -> [(op index, input index)]
        for k, op in enumerate(g.op):
            for j, name in enumerate(op.output):
                self.producer[name] = (k, j)
            for j, name in enumerate(op.input):
                self.readers.setdefault(name, []).append((k, j))

    def chains(self, types: tuple, root: int):
        """Every chain of op indices (producer first) of ``types`` ending at
        ``root``, each op reading output 0 of the one before exactly once."""
        if self.g.op[root].type != types[-1]:
            return
        if len(types) == 1:
            yield [root]
            return
        inputs = list(self.g.op[root].input)
        for name in dict.fromkeys(inputs):
            src = self.producer.get(name)
            if src is None or src[1] != 0 or inputs.count(name) != 1:
                continue
            for chain in self.chains(types[:-1], src[0]):
                yield chain + [root]


class _Emitter:
    """New ops and constants a rewrite asks for, named uniquely."""

    def __init__(self, used: set, versions: dict):
        self.used = used
        self.versions = versions
        self.ops, self.constants, self.infos = [], [], {}

    def fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name

    def opdef(self, op_type: str, inputs, outputs, attrs: dict,
              name: str | None = None) -> P.OpDef:
        """An OpDef with every schema attribute resolved (defaults filled),
        named ``name`` (default ``<op_type>_fused``) or a fresh variant of it."""
        desc = schema(op_type)
        plugin = desc["plugin"]
        version, dist = self.versions.get(plugin, ("", ""))
        op = P.OpDef(name=self.fresh(name or f"{op_type}_fused"), type=op_type,
                     input=list(inputs),
                     output=list(outputs), plugin=plugin, plugin_version=version,
                     plugin_dist=dist)
        unknown = set(attrs) - {a["name"] for a in desc["attrs"]}
        if unknown:   # a bug of the pattern, not a declined match
            raise TypeError(f"{op_type}: unknown attribute(s) {sorted(unknown)}")
        for spec in desc["attrs"]:
            value = attrs.get(spec["name"], spec["default"])
            op.attr[spec["name"]].CopyFrom(attr_to_proto(spec["type"], value))
        return op


class Match:
    """One candidate chain, as the pattern's ``rewrite`` sees it.

    Attributes
    ----------
    ops : list of dragon_core.proto.OpDef
        The chain's ops, producer first (read-only).
    dtype : str
        The chain's dtype name.
    """

    def __init__(self, index: _Index, chain: list, emitter: _Emitter, dtype: str):
        self._index, self._emitter = index, emitter
        self.ops = [index.g.op[k] for k in chain]
        self.dtype = dtype

    def info(self, name: str) -> tuple:
        """``(dtype name, shape tuple)`` of a tensor of the graph or one emitted."""
        if name in self._emitter.infos:
            return self._emitter.infos[name]
        code, shape = self._index.info[name]
        return dg.as_dtype(code).name, shape

    def attr(self, k: int, name: str):
        """The Python value of attribute ``name`` of chain op ``k``."""
        op = self.ops[k]
        if name not in op.attr:   # (indexing would insert it into the graph)
            raise KeyError(f"{op.type} op '{op.name}' has no attribute '{name}'")
        return attr_from_proto(op.attr[name])

    def other_inputs(self, k: int) -> list:
        """The inputs of chain op ``k`` other than the chain value it reads."""
        link = self.ops[k - 1].output[0] if k else None
        return [t for t in self.ops[k].input if t != link]

    def constant(self, name: str):
        """The value of graph constant ``name`` as a NumPy array, or None."""
        c = self._index.constants.get(name)
        if c is None:
            return None
        return constant_array(c)

    def scalar(self, value: float) -> str:
        """A new 0-d constant of the chain's dtype; returns its name."""
        dt = dg.as_dtype(self.dtype)
        arr = np.asarray(value, dtype=dt.numpy)
        name = self._emitter.fresh("const_fused")
        self._emitter.constants.append(P.TensorProto(name=name, dtype=dt.code, shape=[],
                                                     data=arr.tobytes()))
        self._emitter.infos[name] = (dt.name, ())
        return name

    def emit(self, op_type: str, inputs, **attrs) -> str:
        """Add an op before the fused one; returns the name of its output 0.

        Raises ``ValueError`` (declining the match) when its shape rule
        rejects the inputs.
        """
        metas = [self.info(t)[::-1] for t in inputs]
        outs = dg.infer_shape(op_type, metas, **attrs)
        op = self._emitter.opdef(op_type, inputs, [], attrs)
        for j, (shape, dt) in enumerate(outs):
            op.output.append(f"{op.name}:{j}")
            self._emitter.infos[op.output[j]] = (dt, tuple(shape))
        self._emitter.ops.append(op)
        return op.output[0]


class _Fuser:
    """Finds and builds the replacements of one graph."""

    def __init__(self, graph):
        self.index = _Index(graph)
        self.device = device_type(graph)
        self.used = {op.name for op in graph.op} | set(self.index.info)
        self.versions = _plugin_versions()
        self.taken = set()
        self.replaced = {}    # root index -> (helper ops, fused op, constants)
        self.rewired = {}     # (op index, input index) -> new tensor name
        self._kernels = {}

    def _has_kernel(self, op_type: str, dtype: str) -> bool:
        if op_type not in self._kernels:
            self._kernels[op_type] = kernel_dtypes(op_type, self.device)
        return dtype in self._kernels[op_type]

    def _chain_dtype(self, chain: list):
        """The single dtype name of every value the chain's ops touch, or None."""
        g, info = self.index.g, self.index.info
        names = [t for k in chain for t in list(g.op[k].input) + list(g.op[k].output)]
        codes = {info[t][0] if t in info else None for t in names}
        if len(codes) != 1 or None in codes:
            return None
        return dg.as_dtype(codes.pop()).name

    def _internal_ok(self, pattern, chain: list, match: Match):
        """The readers to redirect ({(op, input): tensor}), or None when a
        value the chain makes internal is needed outside it."""
        g, idx = self.index.g, self.index
        root = chain[-1]
        redirect = {}
        for pos, k in enumerate(chain):
            for j, name in enumerate(g.op[k].output):
                if pos == len(chain) - 1 and j == 0:
                    continue
                if name in idx.pinned:
                    return None
                for reader, at in idx.readers.get(name, []):
                    if pos < len(chain) - 1 and j == 0 and reader == chain[pos + 1]:
                        continue
                    if (pattern.rewire is not None and pos == len(chain) - 2 and j == 0
                            and reader > root and pattern.rewire(g.op[reader], at, match)):
                        redirect[(reader, at)] = g.op[root].output[0]
                        continue
                    return None
        return redirect

    def _build(self, pattern, match: Match, emitter: _Emitter):
        """The fused OpDef, or None when the rewrite declines or its result
        would not have the root output's shape and dtype."""
        try:
            rw = pattern.rewrite(match)
            if rw is None:
                return None
            metas = [match.info(t)[::-1] for t in rw.inputs]
            out = dg.infer_shape(pattern.fused, metas, **rw.attrs)
        except ValueError:   # a shape rule rejected an emitted or the fused op
            return None
        except Exception as e:  # noqa: BLE001 - a bug in the declaring plugin
            from dragon_core import fusion, plugins
            owner = fusion._owner(pattern)
            if owner is not None:
                # A plugin's bug: that plugin is broken, the graph goes on.
                plugins._hook_failed(owner[0], owner[1], f"fusion pattern '{pattern.name}'",
                                     exc=e)
                return None
            raise PluginError(f"fusion pattern '{pattern.name}' failed on ops "
                              f"{[op.name for op in match.ops]}: {type(e).__name__}: {e} "
                              f"(DRAGON_DISABLE_PASSES=pattern_fusion skips the pass)") from e
        root_out = match.ops[-1].output[0]
        if len(out) != 1 or (tuple(out[0][0]), out[0][1]) != match.info(root_out)[::-1]:
            return None
        fused = emitter.opdef(pattern.fused, rw.inputs, [root_out], rw.attrs)
        fused.attr[ANNOTATION].s = ",".join(op.name for op in match.ops)
        fused.attr[PATTERN_ANNOTATION].s = pattern.name
        return fused

    def try_root(self, pattern, root: int) -> bool:
        for chain in self.index.chains(pattern.chain, root):
            if self.taken.intersection(chain):
                continue
            dtype = self._chain_dtype(chain)
            if dtype is None or not self._has_kernel(pattern.fused, dtype):
                continue
            emitter = _Emitter(set(self.used), self.versions)
            match = Match(self.index, chain, emitter, dtype)
            redirect = self._internal_ok(pattern, chain, match)
            if redirect is None:
                continue
            fused = self._build(pattern, match, emitter)
            if fused is None:
                continue
            self.used = emitter.used
            self.taken.update(chain)
            self.rewired.update(redirect)
            self.replaced[root] = (emitter, fused)
            return True
        return False

    def graph(self):
        """The rewritten GraphDef."""
        g = self.index.g
        new = P.GraphDef()
        new.CopyFrom(g)
        del new.op[:]
        dropped = set()
        for k, op in enumerate(g.op):
            if k in self.replaced:
                emitter, fused = self.replaced[k]
                new.op.extend(emitter.ops)
                new.op.append(fused)
                new.constant.extend(emitter.constants)
                for name, (dt, shape) in emitter.infos.items():
                    new.value_info.add(name=name, dtype=dg.as_dtype(dt).code, shape=shape)
                dropped.update(op.output[1:])
            elif k in self.taken:
                dropped.update(op.output)
            else:
                copy = new.op.add()
                copy.CopyFrom(op)
                for j in range(len(op.input)):
                    copy.input[j] = self.rewired.get((k, j), op.input[j])
        _drop_value_info(new, dropped)
        return new


def _constant_inputs_only(graph, ops) -> bool:
    consts = {c.name for c in graph.constant}
    return any(op.input and all(t in consts for t in op.input) for op in ops)


@register_pass("pattern_fusion", level=3)
def pattern_fusion(graph):
    """Replace the chains of ops plugins declared by their fused ops.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph (an unchanged copy when nothing matches).
    """
    from dragon_core.fusion import patterns

    from dragon_core import fusion, plugins

    fuser = _Fuser(graph)
    for pattern in patterns():
        owner = fusion._owner(pattern)
        for root, op in enumerate(graph.op):
            if owner is not None and plugins._is_broken(owner[0]):
                break     # its rewrite failed on an earlier match
            if op.type == pattern.chain[-1] and root not in fuser.taken:
                fuser.try_root(pattern, root)
    if not fuser.replaced:
        new = P.GraphDef()
        new.CopyFrom(graph)
        return new
    new = fuser.graph()
    emitted = [op for emitter, _ in fuser.replaced.values() for op in emitter.ops]
    if _constant_inputs_only(new, emitted):
        from dragon_core._graph.passes.constant_fold import constant_fold
        new = constant_fold(new)
    if any("_inplace_input" in op.attr for op in graph.op):
        from dragon_core._graph.passes.inplace import inplace
        new = inplace(new)
    return new
