"""Element-wise fusion: one ``FusedElementwise`` op per chain of float ops.

A *group* is a connected set of at least two fusable ops with a single
exit: the output of its last op (the *root*). Every other member's output
is read only by members (so it is not a graph output or a state update, and
no op outside the group reads it). A fusable op is one of the element-wise
float ops with an opcode in the element-wise op table
(``sdk/include/dragon/elementwise.h``, read through
``_C.elementwise_table()``; the ``FusedElementwise`` schema and the kernels
use the same table): the unary ops without attributes, ``Gelu``,
``LeakyRelu``, ``Elu``, and ``Add``, ``Sub``, ``Mul``, ``Div``, ``Pow``,
``Maximum``, ``Minimum``, ``FloorDivide``, ``Mod``, ``Fmod`` (but not
``Clip`` or ``Softplus``, whose rows have no opcode), whose inputs and
output share one dtype, float32, float64, float16 or bfloat16, in
``value_info``. A 16-bit group is exact: its kernels compute each
instruction in float32 and round the result to the dtype, as each unfused
16-bit kernel stores its result, so the fused op gives the unfused values
bit for bit (docs/graph.md, "Element-wise fusion").

Groups are grown from the last op backwards: a member's input produced by a
fusable op joins when all its readers are members, and when that op's
output has as many elements as the root's or a single element (so that no
member computes at the broadcast shape what the graph computed on a smaller
tensor, which fusion would repeat). Each group of two or more ops becomes
one ``FusedElementwise`` op at the root's position, reading the group's
external tensors (single-element float constants of the group's dtype
become ``constants`` of the program instead, when that cannot change the
output's rank) and writing the root's output, whose ``value_info`` is kept;
the members' other outputs disappear with their ``value_info``, as do
constants nothing reads any more. Temporary registers are reused as soon as
a value is dead. The new op's ``_fused_ops`` annotation (a string) lists
the names of the ops it replaces.

The fused op reads its inputs where the root was, which may be later than
the first member read them; so when the graph carries ``_inplace_input``
annotations (the ``inplace`` pass ran first), they are recomputed.

The pass fires only where a ``FusedElementwise`` kernel exists: on the
device type named by ``metadata["device"]`` (``"cpu"`` when absent, an
index like ``"cpu:0"`` allowed) and for the group's dtype, as listed by
``dragon_core._C.kernels``; otherwise the graph is returned unchanged.
Sub-graphs of control-flow ops are not visited (they are optimised at
level 2 at most).
"""

from __future__ import annotations

import struct

import numpy as np

from dragon_core import _C
from dragon_core import proto as P
from dragon_core._graph.build import constant_array
from dragon_core._graph.passes import device_type, kernel_dtypes, register_pass
from dragon_core._graph.passes.prune import _drop_value_info, _keep_only

FUSED = "FusedElementwise"
ANNOTATION = "_fused_ops"
MAX_TEMPORARIES = 1024  # the schema's limit

_F16, _BF16, _F32, _F64 = 6, 7, 8, 9  # DgDType codes (dragon/plugin.h)
_FLOAT_CODES = {_F32: "float32", _F64: "float64", _F16: "float16", _BF16: "bfloat16"}


def _schema_default(op_type: str, attr: str):
    for a in _C.op(op_type).describe()["attrs"]:
        if a["name"] == attr:
            return a.get("default")
    return None


def _load_table():
    """The fusable rows of the element-wise op table (dragon/elementwise.h,
    read through ``_C.elementwise_table()``), split the way the pass uses
    them: op type -> opcode for ops without attributes (unary and binary),
    op type -> opcode for ops whose alpha becomes a constant register, and
    op type -> (attribute, {value: opcode}) for ops told apart by a string
    attribute (``Gelu``'s ``approximate``)."""
    unary, binary, alpha, by_attr = {}, {}, {}, {}
    for kind, arity, opcode, op_type, attr, _kernel, _cost in _C.elementwise_table():
        if opcode < 0 or not op_type:
            continue
        if arity == "binary":
            binary[op_type] = opcode
        elif attr == "":
            unary[op_type] = opcode
        elif attr == "alpha":
            alpha[op_type] = opcode
        elif "=" in attr:
            name, value = attr.split("=", 1)
            by_attr.setdefault(op_type, (name, {}))[1][value] = opcode
        else:
            raise RuntimeError(f"dragon/elementwise.h: row {kind} has an unknown Attr {attr!r}")
    return unary, binary, alpha, by_attr


#: Opcodes of the FusedElementwise schema, from the element-wise op table
#: (sdk/include/dragon/elementwise.h): op type -> opcode.
UNARY, BINARY, WITH_ALPHA, BY_ATTR = _load_table()
#: Gelu's ``approximate`` value -> opcode.
GELU = BY_ATTR.get("Gelu", ("approximate", {}))[1]


def _opcode(op):
    """(opcode, alpha or None) of a fusable op type, or None."""
    if op.type in UNARY:
        return UNARY[op.type], None
    if op.type in BINARY:
        return BINARY[op.type], None
    if op.type in BY_ATTR:
        name, codes = BY_ATTR[op.type]
        value = op.attr[name].s if name in op.attr else _schema_default(op.type, name)
        return (codes[value], None) if value in codes else None
    if op.type in WITH_ALPHA and "alpha" in op.attr and op.attr["alpha"].HasField("f"):
        return WITH_ALPHA[op.type], op.attr["alpha"].f
    return None


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


class _Graph:
    """Indexes of one GraphDef for the group search."""

    def __init__(self, g, dtypes: set):
        self.g = g
        self.info = {v.name: (v.dtype, tuple(v.shape)) for v in g.value_info}
        self.producer = {}
        self.readers = {}
        for k, op in enumerate(g.op):
            for name in op.output:
                self.producer[name] = k
            for name in op.input:
                self.readers.setdefault(name, []).append(k)
        self.pinned = set(g.output) | set(g.state_update) | set(g.state_target)
        self.constants = {c.name: c for c in g.constant}
        self.fusable = {}  # op index -> dtype code
        for k, op in enumerate(g.op):
            if _opcode(op) is None or len(op.output) != 1:
                continue
            expected = 2 if op.type in BINARY else 1
            if len(op.input) != expected:
                continue
            names = list(op.input) + list(op.output)
            codes = {self.info[n][0] if n in self.info else None for n in names}
            if len(codes) == 1:
                code = codes.pop()
                if code in _FLOAT_CODES and _FLOAT_CODES[code] in dtypes:
                    self.fusable[k] = code

    def group(self, root: int, taken: set) -> list:
        """Op indices of the group whose root is ``root``, in graph order."""
        code = self.fusable[root]
        root_numel = _numel(self.info[self.g.op[root].output[0]][1])
        members = {root}
        waiting = {}  # op index -> tensors to look at again once it joins
        stack = list(self.g.op[root].input)
        while stack:
            name = stack.pop()
            p = self.producer.get(name)
            if (p is None or p in members or p in taken or self.fusable.get(p) != code
                    or name in self.pinned):
                continue
            numel = _numel(self.info[name][1])
            if numel != root_numel and numel != 1:
                continue
            missing = [r for r in self.readers[name] if r not in members]
            if missing:
                waiting.setdefault(missing[0], []).append(name)
                continue
            members.add(p)
            stack.extend(self.g.op[p].input)
            stack.extend(waiting.pop(p, []))
        return sorted(members)


def _scalar_constant(graph: _Graph, name: str, code: int):
    """(value, rank) of a single-element constant of dtype ``code``, or None."""
    c = graph.constants.get(name)
    if c is None or c.dtype != code or _numel(c.shape) != 1:
        return None
    # Every dtype's values are exact in float64 (a 16-bit constant is read
    # back rounded to its dtype by the kernels, so it stays the same value).
    return float(np.asarray(constant_array(c)).reshape(-1)[0]), len(c.shape)


def _fuse(graph: _Graph, members: list, name: str, provider: tuple):
    """The FusedElementwise OpDef replacing ``members`` (graph order), the
    names of the values it makes internal and of the constants it folded;
    None when the fused op would not have the root's shape or would need
    more temporaries than the schema allows."""
    ops = [graph.g.op[k] for k in members]
    code = graph.fusable[members[-1]]
    out = ops[-1].output[0]
    internal = {op.output[0] for op in ops[:-1]}
    external = list(dict.fromkeys(t for op in ops for t in op.input if t not in internal))
    # Single-element constants become immediates unless one of them sets the
    # output's rank (a (1, 1) constant makes a (3,) input's result (1, 3)).
    scalars = {t: _scalar_constant(graph, t, code) for t in external}
    rank = max((len(graph.info[t][1]) for t in external if scalars[t] is None), default=-1)
    folded = {t for t in external if scalars[t] is not None and scalars[t][1] <= rank}
    inputs = [t for t in external if t not in folded]
    if np.broadcast_shapes(*[graph.info[t][1] for t in inputs]) != graph.info[out][1]:
        return None
    consts, const_of = [], {}

    def constant_index(value: float) -> int:
        key = struct.pack("<d", value)  # -0.0 is not 0.0
        if key not in const_of:
            const_of[key] = len(consts)
            consts.append(value)
        return const_of[key]

    n_in = len(inputs)
    reg_of = {t: i for i, t in enumerate(inputs)}
    for t in external:
        if t in folded:
            reg_of[t] = n_in + constant_index(scalars[t][0])
    alpha_reg = {}
    for op in ops:
        alpha = _opcode(op)[1]
        if alpha is not None:
            alpha_reg[op.name] = n_in + constant_index(float(alpha))
    first_temp = n_in + len(consts)

    # The last reader (member position) of each internal value frees its
    # register; the smallest free register is reused first.
    last = {}
    for pos, op in enumerate(ops):
        for t in op.input:
            if t in internal:
                last[t] = pos
    free, next_temp, program = [], first_temp, []
    for pos, op in enumerate(ops):
        opcode = _opcode(op)[0]
        srcs = [reg_of[t] for t in op.input]
        for t in dict.fromkeys(op.input):
            if t in internal and last[t] == pos:
                free.append(reg_of[t])
        if free:
            free.sort(reverse=True)
            dst = free.pop()
        else:
            dst, next_temp = next_temp, next_temp + 1
        reg_of[op.output[0]] = dst
        if len(srcs) == 2:
            program += [opcode, dst, srcs[0], srcs[1]]
        else:
            program += [opcode, dst, srcs[0], alpha_reg.get(op.name, -1)]
    if next_temp - first_temp > MAX_TEMPORARIES:
        return None

    fused = P.OpDef(name=name, type=FUSED, input=inputs, output=[out])
    fused.attr["program"].ints.values.extend(program)
    fused.attr["constants"].floats.values.extend(consts)
    fused.attr["result"].i = reg_of[out]
    fused.attr[ANNOTATION].s = ",".join(op.name for op in ops)
    fused.plugin, fused.plugin_version, fused.plugin_dist = provider
    return fused, internal, folded


def _provider() -> tuple:
    """(plugin, version, dist) of the FusedElementwise schema."""
    plugin = _C.op(FUSED).describe()["plugin"]
    for rec in _C.plugins():
        if rec["name"] == plugin:
            return plugin, rec["version"], rec["dist"]
    return plugin, "", ""


@register_pass("fusion", level=3)
def fusion(graph):
    """Replace each group of fusable element-wise ops by one FusedElementwise.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph (an unchanged copy when no group qualifies or no kernel
        exists for the graph's device).
    """
    new = P.GraphDef()
    new.CopyFrom(graph)
    dtypes = kernel_dtypes(FUSED, device_type(graph))
    if not dtypes:
        return new
    index = _Graph(graph, dtypes)
    taken, groups = set(), {}
    for k in sorted(index.fusable, reverse=True):
        if k in taken:
            continue
        members = index.group(k, taken)
        if len(members) >= 2:
            taken.update(members)
            groups[k] = members
    if not groups:
        return new

    used_names = {op.name for op in graph.op}
    provider = _provider()
    replaced, removed, dropped, folded = {}, set(), set(), set()
    for root, members in groups.items():
        name, i = f"{FUSED}_{root}", 0
        while name in used_names:
            i += 1
            name = f"{FUSED}_{root}_{i}"
        made = _fuse(index, members, name, provider)
        if made is None:
            continue
        used_names.add(name)
        replaced[root] = made[0]
        removed.update(members)
        dropped |= made[1]
        folded |= made[2]
    if not replaced:
        return new
    del new.op[:]
    for k, op in enumerate(graph.op):
        if k in replaced:
            new.op.append(replaced[k])
        elif k not in removed:
            new.op.append(op)
    read = set(new.output) | set(new.state_update)
    for op in new.op:
        read.update(op.input)
    dropped |= folded - read
    if folded - read:
        _keep_only(new.constant, lambda c: c.name in read or c.name not in folded)
    _drop_value_info(new, dropped)
    if any("_inplace_input" in op.attr for op in graph.op):
        from dragon_core._graph.passes.inplace import inplace
        new = inplace(new)
    return new
