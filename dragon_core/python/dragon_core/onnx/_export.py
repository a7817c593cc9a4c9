"""``dragon_core.onnx.export``: a Dragon graph as an ONNX model.

The function (or the Module's ``forward``) is traced by
``dragon_core.function`` at optimisation level 1 (prune, common
sub-expressions, constant folding: no fusion, so the graph holds standard
ops) for the example arguments; each op of that GraphDef becomes ONNX
nodes through ``_export_ops.EXPORT``. Captured tensors (parameters and
buffers) become initializers named after the Module's state dict; tensors
made during the trace become initializers ``const_<i>``.
"""

from __future__ import annotations

import os

import numpy as np

from .._graph.build import attr_from_proto
from .._graph.function import Function
from .._fileio import atomic_write_bytes
from .._dtypes import as_dtype
from .._tensor import Tensor, tensor
from ._errors import UnsupportedModelError, UnsupportedNode
from ._load import DRAGON_DOMAIN, DRAGON_TO_ONNX, np_dtype

#: ONNX opset ranges Dragon writes (onnxruntime 1.31 reads up to 23 with IR 11).
MIN_EXPORT_OPSET, MAX_EXPORT_OPSET = 17, 23


class Emitter:
    """Collects ONNX nodes and initializers; knows the traced shapes."""

    def __init__(self, opset: int, shapes: dict, readers: dict, prefix: str = ""):
        from onnx import helper
        self.helper = helper
        self.opset = opset
        self.shapes = shapes          # onnx name -> (shape tuple, dragon dtype name)
        self.readers = readers        # onnx name -> number of readers
        self.nodes: list = []
        self.initializers: list = []
        self.domains: dict = {}
        self.op_type = ""
        self.prefix = prefix
        self._n = 0

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{self.prefix}{hint}__{self._n}"

    def node(self, op_type: str, inputs: list, outputs: list | None = None, domain: str = "",
             **attrs) -> str:
        """Append a node; returns its first output's name."""
        if outputs is None:
            outputs = [self.fresh(op_type.lower())]
        self.nodes.append(self.helper.make_node(op_type, list(inputs), list(outputs),
                                                name=self.fresh(op_type), domain=domain,
                                                **attrs))
        return outputs[0]

    def const(self, value: np.ndarray, name: str | None = None) -> str:
        from onnx import numpy_helper
        name = name or self.fresh("const")
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def scalar(self, value, like: str) -> str:
        """A 0-d constant of ``like``'s dtype."""
        return self.const(np.array(value).astype(self.np_dtype(self.dtype(like))))

    def reduce(self, op_type: str, x: str, axes, keepdims: bool = True, out: str | None = None):
        outs = [out] if out else None
        if axes is None:
            return self.node(op_type, [x], outs, keepdims=int(keepdims))
        if self.opset >= 18 or op_type == "ReduceSum":
            return self.node(op_type, [x, self.const(np.array(axes, np.int64))], outs,
                             keepdims=int(keepdims))
        return self.node(op_type, [x], outs, axes=list(axes), keepdims=int(keepdims))

    def shape(self, name: str) -> tuple:
        return self.shapes[name][0]

    def dtype(self, name: str) -> str:
        return self.shapes[name][1]

    def used(self, name: str) -> bool:
        return self.readers.get(name, 0) > 0

    @staticmethod
    def np_dtype(name: str):
        return np_dtype(name)

    @staticmethod
    def onnx_dtype(name: str) -> int:
        return DRAGON_TO_ONNX[name]


def _module_names(module) -> dict:
    """id(tensor) -> state-dict name, for a Module (a vm.torch Module's
    tensors by the Dragon tensors they wrap)."""
    names = {}
    for nm, t in list(module.named_parameters()) + list(module.named_buffers()):
        names.setdefault(id(getattr(t, "_t", t)), nm)
    return names


def _torch_module(obj) -> bool:
    """Whether ``obj`` is a ``dragon_core.vm.torch`` Module (without
    importing vm.torch when it is not loaded)."""
    import sys
    mod = sys.modules.get("dragon_core.vm.torch.nn.modules")
    return mod is not None and isinstance(obj, mod.Module)


def _torch_forward(module):
    """A vm.torch Module's forward over Dragon tensors: the arguments
    wrapped as vm.torch tensors (no copy), the results unwrapped."""
    from ..vm.torch._tensor import _w

    def unwrap(out):
        if isinstance(out, (tuple, list)):
            return type(out)(unwrap(o) for o in out)
        return getattr(out, "_t", out)
    return lambda *xs: unwrap(module(*[_w(x) for x in xs]))


def _trace(fn_or_module, example_args):
    from ..nn.module import Module
    args = tuple(a if isinstance(a, Tensor) else tensor(np.asarray(a)) for a in example_args)
    names: dict = {}
    if isinstance(fn_or_module, Module) or _torch_module(fn_or_module):
        module = fn_or_module
        names = _module_names(module)
        was_training = module.training
        module.eval()
        forward = _torch_forward(module) if _torch_module(module) else \
            (lambda *xs: module(*xs))
        try:
            f = Function(forward, opt_level=1, name=type(module).__name__)
            entry, _ = f._entry(*args)
        finally:
            module.train(was_training)
    else:
        fn = getattr(fn_or_module, "_fn", fn_or_module)      # a dragon_core.function
        if not callable(fn):
            raise TypeError(f"export expects a Module, a dragon_core.function or a callable, "
                            f"got {type(fn_or_module).__name__}")
        f = Function(fn, opt_level=1, name=getattr(fn, "__name__", "function"))
        entry, _ = f._entry(*args)
    return entry, names, args


def export(fn_or_module, example_args, path, opset: int = 21, dynamic_axes: dict | None = None,
           input_names: list | None = None, output_names: list | None = None):
    """Export a Dragon function or Module as an ONNX model.

    Parameters
    ----------
    fn_or_module : Module (dragon_core.nn or vm.torch), dragon_core.function or callable
        What to export; a Module's ``forward`` is traced in eval mode (its
        mode is restored afterwards); a vm.torch Module gets its arguments
        as vm.torch tensors.
    example_args : sequence of Tensor or numpy.ndarray
        Arguments to trace with; they fix the shapes and dtypes.
    path : str or os.PathLike
        The ``.onnx`` file, written atomically (a reader never sees half a
        file). ``None`` writes nothing.
    opset : int, default 21
        Default-domain opset, 17 to 23 (LayerNormalization needs 17; Gelu
        is a single op from 20).
    dynamic_axes : dict, optional
        ``{input_or_output_name: {axis: "dim_name"}}``: those dimensions
        are symbolic in the model's signature. The graph was traced for the
        example shapes; reshapes keep a leading axis they do not change as
        "copy", so a dynamic batch axis works for the usual models.
    input_names, output_names : list of str, optional
        Names of the graph inputs and outputs (default ``input_<i>``,
        ``output_<i>``).

    Returns
    -------
    onnx.ModelProto
        The model, which passed ``onnx.checker.check_model(full_check=True)``.

    Raises
    ------
    UnsupportedModelError
        Listing every op that has no ONNX translation, before anything is
        written.
    """
    import onnx
    from onnx import helper
    from ._export_ops import EXPORT

    if not MIN_EXPORT_OPSET <= opset <= MAX_EXPORT_OPSET:
        raise ValueError(f"export: opset must be in [{MIN_EXPORT_OPSET}, {MAX_EXPORT_OPSET}], "
                         f"got {opset}")
    entry, state_names, args = _trace(fn_or_module, example_args)
    graph = entry.compiled.graph

    # ONNX names of Dragon's tensors.
    n_in = len(graph.input)
    input_names = list(input_names or [f"input_{i}" for i in range(n_in)])
    output_names = list(output_names or [f"output_{i}" for i in range(len(graph.output))])
    if len(input_names) != n_in or len(output_names) != len(graph.output):
        raise ValueError(f"export: {n_in} inputs and {len(graph.output)} outputs, got "
                         f"{len(input_names)} input names and {len(output_names)} output names")
    rename = dict(zip(graph.input, input_names))
    shapes = {}
    for vi in graph.value_info:
        shapes[vi.name] = (tuple(int(d) for d in vi.shape), as_dtype(vi.dtype).name)

    # Initializers: captured tensors under their state-dict names, constants.
    inits = []
    used_names = set(input_names) | set(output_names)
    for i, (nm, t) in enumerate(zip(graph.captured, entry.captured)):
        onnx_name = state_names.get(id(t), f"param_{i}")
        while onnx_name in used_names:
            onnx_name += "_"
        used_names.add(onnx_name)
        rename[nm] = onnx_name
        inits.append((onnx_name, t.numpy()))
        shapes.setdefault(nm, (tuple(t.shape), t.dtype.name))
    for i, (c, t) in enumerate(zip(graph.constant, entry.constants)):
        onnx_name = f"const_{i}"
        rename[c.name] = onnx_name
        inits.append((onnx_name, t.numpy()))
        shapes.setdefault(c.name, (tuple(t.shape), t.dtype.name))

    # A graph output that is an input or initializer gets an Identity.
    out_map = {}
    for nm, on in zip(graph.output, output_names):
        out_map.setdefault(nm, on)

    def oname(nm: str) -> str:
        if nm in rename:
            return rename[nm]
        return out_map.get(nm, nm.replace(":", "_"))

    readers: dict = {}
    for op in graph.op:
        for nm in op.input:
            readers[oname(nm)] = readers.get(oname(nm), 0) + 1
    for nm in graph.output:
        readers[oname(nm)] = readers.get(oname(nm), 0) + 1
    onnx_shapes = {oname(k): v for k, v in shapes.items()}

    # Every op is translated (or listed as untranslatable) before anything
    # is written, so one error names all of them.
    bad = []
    e = Emitter(opset, onnx_shapes, readers)
    _emit_ops(e, graph, oname, bad)
    if bad:
        raise UnsupportedModelError("export", bad)
    for nm, on in zip(graph.output, output_names):
        if oname(nm) != on:
            e.node("Identity", [oname(nm)], [on])

    dyn = dynamic_axes or {}

    def value_info(name, shape, dtype):
        dims = [dyn.get(name, {}).get(i, d) for i, d in enumerate(shape)]
        return helper.make_tensor_value_info(name, DRAGON_TO_ONNX[dtype], dims)

    g_inputs = [value_info(on, *shapes[nm]) for nm, on in zip(graph.input, input_names)]
    g_outputs = [value_info(on, *shapes[nm]) for nm, on in zip(graph.output, output_names)]
    from onnx import numpy_helper
    initializers = [numpy_helper.from_array(np.array(v, order="C"), nm) for nm, v in inits]
    initializers += e.initializers
    g = helper.make_graph(e.nodes, graph.name or "dragon", g_inputs, g_outputs, initializers)
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in e.domains]
    model = helper.make_model(g, opset_imports=opsets, producer_name="dragon_core",
                              ir_version=helper.find_min_ir_version_for(opsets[:1]))
    model.ir_version = max(model.ir_version, 8)
    # The full check includes strict shape inference with type checks.
    onnx.checker.check_model(model, full_check=True)
    if path is not None:
        atomic_write_bytes(os.fspath(path), model.SerializeToString())
    return model


def _emit_ops(e: Emitter, graph, oname, bad: list) -> None:
    """Translate ``graph``'s ops into ``e``; untranslatable ones go to ``bad``."""
    from ._export_ops import EXPORT
    for op in graph.op:
        ins = [oname(nm) for nm in op.input]
        outs = [oname(nm) for nm in op.output]
        e.op_type = op.type
        if op.type in ("Cond", "While"):
            (_emit_cond if op.type == "Cond" else _emit_while)(e, op, ins, outs, bad)
            continue
        attrs = {k: attr_from_proto(v) for k, v in op.attr.items() if not k.startswith("_")}
        fn = EXPORT.get(op.type)
        if fn is None and op.plugin in ("", "core"):
            bad.append(UnsupportedNode(op.type, "dragon", e.opset, op.name,
                                       "no ONNX translation for this Dragon op"))
            continue
        try:
            if fn is None:
                _custom(e, op, ins, outs, attrs)
            else:
                fn(e, ins, outs, attrs)
        except NotImplementedError as exc:
            bad.append(UnsupportedNode(op.type, "dragon", e.opset, op.name, str(exc)))


def _emit_sub(e: Emitter, sub, args: list, caps: list, prefix: str, bad: list) -> list:
    """Emit Dragon sub-graph ``sub`` into ``e`` with its inputs bound to the
    ONNX names ``args`` and its captured tensors to ``caps``; its constants
    become initializers of ``e``. Returns the ONNX names of its outputs."""
    from .._graph.build import tensor_from_proto
    rename = dict(zip(sub.input, args))
    rename.update(zip(sub.captured, caps))
    for c in sub.constant:
        rename[c.name] = e.const(tensor_from_proto(c).numpy(),
                                 f"{prefix}{c.name.replace(':', '_')}")

    def oname(nm):
        return rename.get(nm, f"{prefix}{nm.replace(':', '_')}")
    for vi in sub.value_info:
        e.shapes[oname(vi.name)] = (tuple(int(d) for d in vi.shape), as_dtype(vi.dtype).name)
    for op in sub.op:
        for nm in op.input:
            e.readers[oname(nm)] = e.readers.get(oname(nm), 0) + 1
    _emit_ops(e, sub, oname, bad)
    return [oname(nm) for nm in sub.output]


def _value_info(e: Emitter, name: str, like: str):
    from onnx import helper
    shape, dtype = e.shapes[like]
    return helper.make_tensor_value_info(name, DRAGON_TO_ONNX[dtype], list(shape))


def _subgraph(e: Emitter, sub, args: list, caps: list, prefix: str, bad: list):
    """An ONNX sub-graph with no formal inputs (it reads the enclosing
    names) computing Dragon sub-graph ``sub``."""
    from onnx import helper
    child = Emitter(e.opset, dict(e.shapes), {}, prefix)
    outs = _emit_sub(child, sub, args, caps, prefix, bad)
    outputs = []
    for k, nm in enumerate(outs):
        out = f"{prefix}out_{k}"
        child.node("Identity", [nm], [out])
        outputs.append(_value_info(child, out, nm))
    e.domains.update(child.domains)
    return helper.make_graph(child.nodes, prefix.rstrip("_") or "branch", [], outputs,
                             child.initializers)


def _emit_while(e: Emitter, op, ins, outs, bad: list) -> None:
    """Dragon's While (loop variables, cond captures, body captures) as ONNX
    Loop: the condition is computed once before the loop and again at the
    end of each body run, as Loop's body returns the next condition."""
    from onnx import TensorProto, helper
    n_vars = op.attr["num_operands"].i
    n_cond = op.attr["num_then_captures"].i
    vars_ = ins[:n_vars]
    cond_caps = ins[n_vars:n_vars + n_cond]
    body_caps = ins[n_vars + n_cond:]
    cond_g, body_g = op.attr["cond_graph"].graph, op.attr["body_graph"].graph

    def as_bool(em, name):
        if em.dtype(name) != "bool":
            name = em.node("Cast", [name], to=9)
        if em.shape(name) != ():
            name = em.node("Reshape", [name, em.const(np.array([], np.int64))])
        return name
    c0 = as_bool(e, _emit_sub(e, cond_g, vars_, cond_caps, f"{op.name}_c0_", bad)[0])
    prefix = f"{op.name}_body_"
    child = Emitter(e.opset, dict(e.shapes), {}, prefix)
    formal = [f"{prefix}v{k}" for k in range(n_vars)]
    for f_, v in zip(formal, vars_):
        child.shapes[f_] = e.shapes[v]
    new_vars = _emit_sub(child, body_g, formal, body_caps, prefix, bad)
    c_next = as_bool(child, _emit_sub(child, cond_g, new_vars, cond_caps, f"{prefix}c_", bad)[0])
    outputs = [helper.make_tensor_value_info(f"{prefix}cond_out", TensorProto.BOOL, [])]
    child.node("Identity", [c_next], [f"{prefix}cond_out"])
    for k, nm in enumerate(new_vars):
        child.node("Identity", [nm], [f"{prefix}out_{k}"])
        outputs.append(_value_info(child, f"{prefix}out_{k}", nm))
    inputs = [helper.make_tensor_value_info(f"{prefix}iter", TensorProto.INT64, []),
              helper.make_tensor_value_info(f"{prefix}cond_in", TensorProto.BOOL, [])]
    inputs += [_value_info(child, f_, f_) for f_ in formal]
    body = helper.make_graph(child.nodes, prefix.rstrip("_"), inputs, outputs,
                             child.initializers)
    e.domains.update(child.domains)
    m = op.attr["maximum_iterations"].i
    trip = e.const(np.array(m, np.int64)) if m >= 0 else ""
    e.node("Loop", [trip, c0] + vars_, outs, body=body)


def _emit_cond(e: Emitter, op, ins, outs, bad: list) -> None:
    """Dragon's Cond (pred, operands, then captures, else captures) as ONNX
    If with two sub-graphs."""
    n_ops = op.attr["num_operands"].i
    n_then = op.attr["num_then_captures"].i
    pred, operands = ins[0], ins[1:1 + n_ops]
    then_caps = ins[1 + n_ops:1 + n_ops + n_then]
    else_caps = ins[1 + n_ops + n_then:]
    then_g = _subgraph(e, op.attr["then_branch"].graph, operands, then_caps,
                       f"{op.name}_then_", bad)
    else_g = _subgraph(e, op.attr["else_branch"].graph, operands, else_caps,
                       f"{op.name}_else_", bad)
    if e.dtype(pred) != "bool":
        pred = e.node("Cast", [pred], to=9)
    if e.shape(pred) != ():
        pred = e.node("Reshape", [pred, e.const(np.array([], np.int64))])
    e.node("If", [pred], outs, then_branch=then_g, else_branch=else_g)


def _custom(e: Emitter, op, ins, outs, attrs):
    """A plugin op with no standard equivalent: a node of the plugin's
    domain, attributes by name (``dragon_core.onnx.load`` reads it back)."""
    domain = f"{DRAGON_DOMAIN}.{op.plugin}"
    e.domains[domain] = 1
    clean = {}
    for k, v in attrs.items():
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            v = list(v)
        clean[k] = v
    e.node(op.type, ins, outs, domain=domain, **clean)
