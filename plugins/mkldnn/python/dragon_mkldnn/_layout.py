"""The ``nchw16c`` graph pass: chains of float32 convolutions in oneDNN's
blocked layout, without a reorder between them.

Every oneDNN convolution of the core's ops reads and writes plain NCHW, so
each one reorders its input into nChw16c and its output back. In an
inference graph this pass rewrites the float32 ``Conv2d`` /
``Conv2dBiasAct`` (groups 1, output channels a multiple of 16),
``MaxPool2d`` and element-wise ops between them to this plugin's blocked
ops (``src/layout.cc``): a blocked tensor is a dense ``[N, C/16, H, W, 16]``
tensor, so element-wise ops of the core (a residual ``Add``, ``Relu``, and
the ``FusedElementwise`` the ``fusion`` pass makes of them later) run on it
unchanged when their operands share that shape. ``Nchw16cFromNchw`` enters
the layout where a convolution reads a plain tensor with 16k channels (a
first layer with fewer than 16 channels reads its plain input as is), and
``NchwFromNchw16c`` leaves it, under the tensor's original name, right
before the first op that needs the plain tensor (or at the end, for a graph
output). onnxruntime's NCHWc transformer does the same for its MLAS kernels.

The pass runs after ``pattern_fusion`` (so convolutions carry their bias
and relu), at level 3, on graphs without state updates (a training step
assigns its parameters, so it keeps the plain ops; a graph that only
computes gradients is rewritten too: its backward ops read the forward
tensors through reorders out, with the same values), on the host device,
when the four blocked ops have float32 kernels. Empty tensors stay with the
plain ops (mkldnn declines them there and cpu_eigen serves them; the
blocked ops have no other kernel). Switch it off with
``DRAGON_DISABLE_PASSES=nchw16c`` or ``disable_passes="nchw16c"``.
"""

from __future__ import annotations

import pluggy

hookimpl = pluggy.HookimplMarker("dragon_core")

BLOCK = 16
_F32 = 8  # DgDType code of float32

#: The blocked ops this pass emits (all defined by this plugin).
OPS = ("Nchw16cFromNchw", "NchwFromNchw16c", "Conv2dNchw16c", "MaxPool2dNchw16c")


def _elementwise_types() -> set:
    """Element-wise float ops that run on any layout (the fusion pass's)."""
    from dragon_core.plugin_api import elementwise_op_types
    return set(elementwise_op_types()) | {"Gelu"}


class _Rewriter:
    def __init__(self, g):
        from dragon_core.plugin_api import op_builder
        self.g = g
        self.info = {v.name: (v.dtype, tuple(v.shape)) for v in g.value_info}
        self.emitter = op_builder(g)
        self.elementwise = _elementwise_types()
        self.blocked = {}        # plain name -> blocked name
        self.plain = set(g.input) | set(g.captured) | {c.name for c in g.constant}
        self.ops = []            # the new op list
        self.infos = {}          # new blocked tensors: name -> shape

    # ------------------------------------------------------------ helpers
    def opdef(self, op_type, name, inputs, outputs, attrs):
        return self.emitter.opdef(op_type, inputs, outputs, attrs, name=name)

    def f32_4d(self, name):
        dt, shape = self.info.get(name, (None, ()))
        return dt == _F32 and len(shape) == 4

    def nonempty(self, *names):
        return all(d > 0 for name in names for d in self.info[name][1])

    def blocked_shape(self, shape):
        n, c, h, w = shape
        return (n, c // BLOCK, h, w, BLOCK)

    def to_blocked(self, name):
        """The blocked tensor for plain ``name`` (reordered in if needed)."""
        if name not in self.blocked:
            out = f"{name}/nchw16c"
            self.ops.append(self.opdef("Nchw16cFromNchw", f"{name}/to_nchw16c",
                                       [name], [out], {}))
            self.infos[out] = self.blocked_shape(self.info[name][1])
            self.blocked[name] = out
        return self.blocked[name]

    def need_plain(self, name):
        """Make plain ``name`` exist (reordered out of its blocked form)."""
        if name in self.plain or name not in self.blocked:
            return
        self.ops.append(self.opdef("NchwFromNchw16c", f"{name}/from_nchw16c",
                                   [self.blocked[name]], [name], {}))
        self.plain.add(name)

    def attrs_of(self, op):
        from dragon_core.plugin_api import op_attrs
        return op_attrs(op)

    def emit_blocked(self, op, op_type, inputs, attrs):
        out = f"{op.output[0]}/nchw16c"
        new = self.opdef(op_type, f"{op.name}/nchw16c", inputs, [out], attrs)
        for key, value in op.attr.items():   # annotations (e.g. _fused_ops)
            if key.startswith("_") and key != "_inplace_input":
                new.attr[key].CopyFrom(value)
        self.ops.append(new)
        self.infos[out] = self.blocked_shape(self.info[op.output[0]][1])
        self.blocked[op.output[0]] = out

    # -------------------------------------------------------------- rules
    def conv(self, op) -> bool:
        if op.type not in ("Conv2d", "Conv2dBiasAct") or len(op.output) != 1:
            return False
        x, w = op.input[0], op.input[1]
        if not (self.f32_4d(x) and self.f32_4d(w) and self.f32_4d(op.output[0])):
            return False
        # Empty tensors stay with the plain op (mkldnn declines them there
        # and cpu_eigen serves them; the blocked op has no other kernel).
        if not self.nonempty(x, w, op.output[0]):
            return False
        a = self.attrs_of(op)
        c, o = self.info[x][1][1], self.info[w][1][0]
        if a.get("groups", 1) != 1 or o % BLOCK or not (c % BLOCK == 0 or c < BLOCK):
            return False
        if len(op.input) > 2 and op.input[2]:
            b = self.info.get(op.input[2], (None, ()))
            if b[0] != _F32 or len(b[1]) != 1:
                return False
        src = self.to_blocked(x) if c % BLOCK == 0 else x
        if src == x:
            self.need_plain(x)
        attrs = {k: a[k] for k in ("strides", "pads", "dilations") if k in a}
        attrs["activation"] = a.get("activation", "relu") if op.type == "Conv2dBiasAct" \
            else "none"   # "relu" is Conv2dBiasAct's schema default
        self.emit_blocked(op, "Conv2dNchw16c", [src] + list(op.input[1:]), attrs)
        return True

    def max_pool(self, op) -> bool:
        if op.type != "MaxPool2d" or op.input[0] not in self.blocked:
            return False
        if not (self.f32_4d(op.output[0]) and self.nonempty(op.output[0])):
            return False
        a = self.attrs_of(op)
        attrs = {k: a[k] for k in ("kernel_size", "strides", "pads", "dilations",
                                   "ceil_mode") if k in a}
        self.emit_blocked(op, "MaxPool2dNchw16c", [self.blocked[op.input[0]]], attrs)
        return True

    def elementwise_op(self, op) -> bool:
        from dragon_core.plugin_api import numel
        if op.type not in self.elementwise or len(op.output) != 1:
            return False
        out = op.output[0]
        if not self.f32_4d(out):
            return False
        shape = self.info[out][1]
        inputs, any_blocked = [], False
        for name in op.input:
            dt, s = self.info.get(name, (None, ()))
            if name in self.blocked and s == shape:
                inputs.append(self.blocked[name])
                any_blocked = True
            elif dt == _F32 and numel(s) == 1 and len(s) <= 4:
                inputs.append(name)          # a scalar broadcasts to 5-D too
            else:
                return False
        if not any_blocked:
            return False
        for name in op.input:
            if name not in self.blocked:
                self.need_plain(name)
        self.emit_blocked(op, op.type, inputs, self.attrs_of(op))
        return True

    def run(self):
        for op in self.g.op:
            if self.conv(op) or self.max_pool(op) or self.elementwise_op(op):
                continue
            for name in op.input:
                self.need_plain(name)
            self.ops.append(op)
            self.plain.update(op.output)
        for name in list(self.g.output) + list(self.g.state_update):
            self.need_plain(name)

    def graph(self):
        from dragon_core import proto as P
        from dragon_core.plugin_api import drop_value_info
        new = P.GraphDef()
        new.CopyFrom(self.g)
        del new.op[:]
        for op in self.ops:
            new.op.add().CopyFrom(op)
        for name, shape in self.infos.items():
            new.value_info.add(name=name, dtype=_F32, shape=list(shape))
        produced = {o for op in self.ops for o in op.output}
        gone = {name for name in self.blocked if name not in produced
                and name not in self.plain}
        drop_value_info(new, gone)
        return new


def nchw16c(graph):
    """The pass (see the module docs): a new GraphDef, an unchanged copy
    when it does not apply."""
    from dragon_core import proto as P
    from dragon_core.plugin_api import device_type, kernel_dtypes

    def unchanged():
        new = P.GraphDef()
        new.CopyFrom(graph)
        return new

    if graph.state_update or device_type(graph) != "cpu":
        return unchanged()
    if any("float32" not in kernel_dtypes(op, "cpu") for op in OPS):
        return unchanged()
    rw = _Rewriter(graph)
    rw.run()
    if not any(op.type == "Conv2dNchw16c" for op in rw.ops):
        return unchanged()
    return rw.graph()


@hookimpl
def dragon_graph_passes(core):
    """This plugin's graph pass: ``nchw16c`` after ``pattern_fusion``."""
    return [core.GraphPass("nchw16c", nchw16c, after="pattern_fusion")]
