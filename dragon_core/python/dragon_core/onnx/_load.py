"""``dragon_core.onnx.load``: an ONNX model as a compiled Dragon function.

How a model becomes a graph
---------------------------
The model's nodes are interpreted by a small Python function, one
translation per ONNX op (``_import_ops.TABLE``), each calling
``dragon_core.ops``; that function is compiled with ``dragon_core.function``
so the first call per input signature traces it into a GraphDef and later
calls run the C++ plan with no Python per op.

Values that ONNX computes at run time but Dragon needs at trace time (a
Reshape target, Slice bounds, a Pad amount) are read back during the trace.
That is exact when they depend only on shapes and constants (the usual
``Shape -> Gather -> Concat -> Reshape`` chains), because a trace is keyed on
the input shapes. Each value carries the set of graph inputs whose *data* it
depends on; when a node needs such a value, the loader keys its traces on
those inputs' values too (they become trace constants) and retraces, so a
graph fed a different Reshape target by the caller is never run with a
stale one.

Initializers are NumPy views of the model's bytes (``raw_data``) or
read-only memory maps of external data files: no copy beyond the parse.
They are constants of the compiled graph that it borrows rather than copies
(``borrowed_constants`` in ``_graph/build.py``): passes fold what depends on
them only (a BatchNormalization into its Conv's filter) once per trace, and
kernels may keep what they derive from them (oneDNN's reordered filters) for
the life of the plan. They are read-only, so nothing can change them behind
the plan's back.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .. import _C
from .._tensor import Tensor, from_numpy, tensor
from .._graph.function import Function
from ._errors import NeedStatic, UnsupportedModelError, UnsupportedNode

# ONNX TensorProto.DataType -> NumPy dtype name (None: Dragon has no such dtype).
ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
               7: "int64", 8: None, 9: "bool", 10: "float16", 11: "float64", 12: "uint32",
               13: "uint64", 14: None, 15: None, 16: "bfloat16"}
ONNX_DTYPE_NAMES = {1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
                    7: "int64", 8: "string", 9: "bool", 10: "float16", 11: "double",
                    12: "uint32", 13: "uint64", 14: "complex64", 15: "complex128",
                    16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz",
                    19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4",
                    23: "float4e2m1", 24: "float8e8m0", 25: "uint2", 26: "int2",
                    27: "float6e2m3", 28: "float6e3m2"}
DRAGON_TO_ONNX = {v: k for k, v in ONNX_DTYPES.items() if v is not None}

DEFAULT_DOMAINS = ("", "ai.onnx")
# Custom ops the exporter writes for plugin ops live in "ai.dragon.<plugin>".
DRAGON_DOMAIN = "ai.dragon"
MIN_OPSET = 7


def np_dtype(name: str):
    """NumPy dtype of a Dragon dtype name (bfloat16 through ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def dtype_of_onnx(code: int, what: str) -> str:
    name = ONNX_DTYPES.get(code)
    if name is None:
        raise NotImplementedError(f"{what}: ONNX dtype {ONNX_DTYPE_NAMES.get(code, code)} has "
                                  "no Dragon equivalent (Dragon has float16/bfloat16/float32/"
                                  "float64, int8..int64, uint8..uint64 and bool)")
    return name


# ----------------------------------------------------------- tensors in

def tensor_proto_to_numpy(tp, base_dir: str | None, keep: list) -> np.ndarray:
    """The value of an ONNX TensorProto as a NumPy array, without copying
    where it can: a view of ``raw_data``, or a read-only memory map of an
    external data file. ``keep`` collects objects that must outlive the
    arrays (the bytes they view)."""
    from onnx import TensorProto, numpy_helper
    what = f"tensor '{tp.name}'"
    dtype = np_dtype(dtype_of_onnx(tp.data_type, what))
    shape = tuple(int(d) for d in tp.dims)
    count = int(np.prod(shape, dtype=np.int64))
    if tp.data_location == TensorProto.EXTERNAL:
        info = {e.key: e.value for e in tp.external_data}
        if base_dir is None:
            raise ValueError(f"{what} is stored in an external file ('{info.get('location')}'): "
                             "load the model from its path, or pass base_dir=")
        location = info.get("location", "")
        path = os.path.normpath(os.path.join(base_dir, location))
        root = os.path.normpath(os.path.abspath(base_dir))
        if os.path.isabs(location) or not os.path.abspath(path).startswith(root + os.sep):
            raise ValueError(f"{what}: external data location '{location}' leaves the model's "
                             f"folder {root}")
        offset = int(info.get("offset", 0))
        length = int(info.get("length", count * dtype.itemsize))
        if length != count * dtype.itemsize:
            raise ValueError(f"{what}: external data length {length} does not match "
                             f"{shape} x {dtype} ({count * dtype.itemsize} bytes)")
        if os.path.getsize(path) < offset + length:
            raise ValueError(f"{what}: external file '{path}' holds "
                             f"{os.path.getsize(path)} bytes, needs {offset + length}")
        if count == 0:
            return np.zeros(shape, dtype)
        arr = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)
        keep.append(arr)
        return arr
    if tp.HasField("raw_data"):
        raw = tp.raw_data
        if len(raw) != count * dtype.itemsize:
            raise ValueError(f"{what}: raw_data holds {len(raw)} bytes, {shape} x {dtype} "
                             f"needs {count * dtype.itemsize}")
        keep.append(raw)
        arr = np.frombuffer(raw, dtype=dtype).reshape(shape)
        return arr if dtype.byteorder in "=|" or np.little_endian else arr.byteswap()
    arr = numpy_helper.to_array(tp)
    if arr.dtype != dtype:      # float16 / bfloat16 stored in int32_data
        arr = arr.astype(dtype)
    return arr


def as_dragon(arr: np.ndarray) -> Tensor:
    """A Dragon tensor viewing ``arr`` (read-only arrays give read-only tensors)."""
    if arr.ndim and not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return from_numpy(arr)


# ------------------------------------------------------------- nodes

class Value:
    """A tensor of the interpreted graph and the graph inputs its data
    depends on (empty for constants and shape computations)."""

    __slots__ = ("t", "deps")

    def __init__(self, t: Tensor, deps: frozenset = frozenset()):
        self.t = t
        self.deps = deps


def attr_value(a):
    """Python value of an ONNX AttributeProto."""
    from onnx import AttributeProto as A
    k = a.type
    if k == A.FLOAT:
        return float(a.f)
    if k == A.INT:
        return int(a.i)
    if k == A.STRING:
        return a.s.decode("utf-8", "replace")
    if k == A.TENSOR:
        return a.t
    if k == A.GRAPH:
        return a.g
    if k == A.FLOATS:
        return [float(v) for v in a.floats]
    if k == A.INTS:
        return [int(v) for v in a.ints]
    if k == A.STRINGS:
        return [s.decode("utf-8", "replace") for s in a.strings]
    if k == A.GRAPHS:
        return list(a.graphs)
    if k == A.TENSORS:
        return list(a.tensors)
    raise NotImplementedError(f"attribute '{a.name}' of type {k} is not supported")


class Node:
    """What an op translation sees: inputs, attributes, opset, and helpers."""

    def __init__(self, proto, values: list, run):
        self.proto = proto
        self.op_type = proto.op_type
        self.name = proto.name or f"{proto.op_type}<{','.join(proto.output)}>"
        self.values = values
        self.opset = run.opset
        self.run = run
        self.attrs = {a.name: a for a in proto.attribute}
        self.num_outputs = len(proto.output)

    # inputs
    def has(self, i: int) -> bool:
        return i < len(self.values) and self.values[i] is not None

    def x(self, i: int) -> Tensor | None:
        return self.values[i].t if self.has(i) else None

    def xs(self) -> list:
        return [v.t for v in self.values if v is not None]

    def static(self, i: int) -> np.ndarray | None:
        """The value of input ``i`` at trace time (None if absent)."""
        if not self.has(i):
            return None
        v = self.values[i]
        if v.deps:
            raise NeedStatic(v.deps)
        return v.t.numpy()

    def ints(self, i: int) -> list | None:
        s = self.static(i)
        return None if s is None else [int(v) for v in np.asarray(s).reshape(-1)]

    # attributes
    def a(self, name: str, default: Any = None):
        at = self.attrs.get(name)
        if at is None:
            return default
        return attr_value(at)

    def a_tensor(self, name: str) -> np.ndarray | None:
        at = self.attrs.get(name)
        if at is None:
            return None
        return np.array(tensor_proto_to_numpy(at.t, self.run.base_dir, self.run.keep))

    def wants(self, j: int) -> bool:
        return j < len(self.proto.output) and self.proto.output[j] != ""

    def fail(self, msg: str):
        raise NotImplementedError(f"ONNX {self.op_type} node '{self.name}' (opset "
                                  f"{self.opset}): {msg}")


def iter_nodes(graph):
    """Every node of ``graph`` and of its sub-graphs (If/Loop/Scan bodies)."""
    from onnx import AttributeProto as A
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.type == A.GRAPH:
                yield from iter_nodes(a.g)
            elif a.type == A.GRAPHS:
                for g in a.graphs:
                    yield from iter_nodes(g)


def check_model(model, opset: int) -> None:
    """Raise UnsupportedModelError listing every node that cannot be
    translated (unknown op, unsupported variant, custom domain)."""
    from ._import_ops import TABLE
    bad = []
    for node in iter_nodes(model.graph):
        name = node.name or f"{node.op_type}<{','.join(node.output)}>"
        if node.domain not in DEFAULT_DOMAINS:
            if node.domain.startswith(DRAGON_DOMAIN):
                if node.op_type not in {d["name"] for d in _C.list_ops()}:
                    bad.append(UnsupportedNode(node.op_type, node.domain, 1, name,
                                               "no installed plugin defines this Dragon op"))
                continue
            ver = next((o.version for o in model.opset_import if o.domain == node.domain), 0)
            bad.append(UnsupportedNode(node.op_type, node.domain, ver, name,
                                       f"custom domain '{node.domain}' is not supported"))
            continue
        spec = TABLE.get(node.op_type)
        if spec is None:
            bad.append(UnsupportedNode(node.op_type, node.domain, opset, name,
                                       "no translation onto Dragon's ops"))
            continue
        if spec.check is not None:
            reason = spec.check({a.name: attr_value(a) for a in node.attribute}, opset, node)
            if reason:
                bad.append(UnsupportedNode(node.op_type, node.domain, opset, name, reason))
    if bad:
        raise UnsupportedModelError(f"ONNX model '{model.graph.name}' (opset {opset})", bad)


class _Run:
    """State of one trace: the opset, the static-input values, the
    tensors kept alive."""

    def __init__(self, opset: int, base_dir, keep):
        self.opset = opset
        self.base_dir = base_dir
        self.keep = keep

    def run_graph(self, graph, env: dict) -> dict:
        """Interpret ``graph``'s nodes over ``env`` (name -> Value; outer
        scopes' values included); returns ``env`` extended."""
        from ._import_ops import TABLE, run_dragon_op
        for proto in graph.node:
            values = []
            for nm in proto.input:
                if nm == "":
                    values.append(None)
                    continue
                v = env.get(nm)
                if v is None:
                    raise ValueError(f"ONNX node '{proto.name}' ({proto.op_type}) reads "
                                     f"'{nm}', which no earlier node, input or initializer "
                                     "defines")
                values.append(v)
            node = Node(proto, values, self)
            outer, self.scope = getattr(self, "scope", None), env
            try:
                if proto.domain not in DEFAULT_DOMAINS:
                    outs, data_free = run_dragon_op(node), False
                else:
                    spec = TABLE[proto.op_type]
                    outs, data_free = spec.fn(node), spec.data_free
            except (ValueError, TypeError, IndexError, RuntimeError) as exc:
                # A Dragon op refusing the node's shapes or attributes: the
                # error says which ONNX node it was translating.
                if not getattr(exc, "_onnx_node_noted", False):
                    exc.add_note(f"while running ONNX node '{node.name}' ({proto.op_type}, "
                                 f"opset {self.opset}) with inputs "
                                 f"{[None if v is None else list(v.t.shape) for v in values]}")
                    exc._onnx_node_noted = True
                raise
            finally:
                self.scope = outer
            if isinstance(outs, (Tensor, Value)):
                outs = [outs]
            deps = frozenset() if data_free else frozenset().union(
                *[v.deps for v in values if v is not None])
            for j, nm in enumerate(proto.output):
                if nm == "":
                    continue
                if j >= len(outs) or outs[j] is None:
                    node.fail(f"output {j} ('{nm}') is not produced by Dragon's translation")
                out = outs[j]
                if isinstance(out, Value):
                    env[nm] = out
                else:
                    if not isinstance(out, Tensor):
                        out = tensor(np.asarray(out))
                    env[nm] = Value(out, deps)
        return env


class OnnxFunction:
    """A loaded ONNX model: call it with the graph inputs, in order.

    Attributes
    ----------
    model : onnx.ModelProto
        The model (initializers still point at their bytes).
    input_names, output_names : list of str
    opset : int
        The model's default-domain opset.
    """

    def __init__(self, model, base_dir: str | None = None, opt_level: int = 3,
                 freeze: bool = False):
        self.model = model
        graph = model.graph
        self.opset = default_opset(model)
        self.base_dir = base_dir
        self._keep: list = []
        self.initializers: dict = {}
        for tp in graph.initializer:
            arr = tensor_proto_to_numpy(tp, base_dir, self._keep)
            if arr.flags.writeable:      # decoded (not raw_data): read-only too
                arr.flags.writeable = False
            self.initializers[tp.name] = as_dragon(arr)
        for sp in graph.sparse_initializer:
            raise NotImplementedError(f"ONNX model '{graph.name}': sparse initializer "
                                      f"'{sp.values.name}' is not supported")
        self.input_names = [i.name for i in graph.input if i.name not in self.initializers]
        self.output_names = [o.name for o in graph.output]
        self._input_types = {}
        for i in graph.input:
            if i.name in self.initializers:
                continue
            if not i.type.HasField("tensor_type"):
                raise NotImplementedError(f"ONNX model '{graph.name}': input '{i.name}' is not "
                                          "a tensor (sequences, maps and optionals are not "
                                          "supported)")
            self._input_types[i.name] = dtype_of_onnx(i.type.tensor_type.elem_type,
                                                      f"input '{i.name}'")
        from ._rewrite import fuse_gelu, fuse_layer_norm
        self._graph = fuse_layer_norm(fuse_gelu(graph))
        self._static: set = set()
        # The initializers are the function's own, read-only, never assigned:
        # constants of every trace, borrowed with no copy, so constant
        # folding (a BatchNormalization into its Conv) and kernels' per-call-
        # site state (oneDNN's reordered filters) happen once, at the first call.
        self._fn = Function(self._trace, opt_level=opt_level, name=graph.name or "onnx",
                            freeze=freeze, owned=self._owned)
        self._opt_level, self._freeze = opt_level, freeze
        self._segments = _plan_segments(self)

    def _owned(self) -> list:
        """The tensors every compiled graph of the model borrows as constants
        (its initializers; see ``Function(owned=...)``)."""
        return list(self.initializers.values())

    # The traced function: tensors of the dynamic inputs, then the values of
    # the static ones (hashable, part of the trace key).
    def _trace(self, dynamic: list, static: tuple):
        run = _Run(self.opset, self.base_dir, self._keep)
        env = {nm: Value(t) for nm, t in self.initializers.items()}
        for nm, t in zip([n for n in self.input_names if n not in self._static], dynamic):
            env[nm] = Value(t, frozenset([nm]))
        for nm, dt, shape, data in static:
            env[nm] = Value(tensor(np.frombuffer(data, np_dtype(dt)).reshape(shape)))
        run.run_graph(self._graph, env)
        return [env[nm].t for nm in self.output_names]

    def _as_input(self, nm: str, value) -> Tensor:
        want = self._input_types[nm]
        if isinstance(value, Tensor):
            t = value
        else:
            arr = np.asarray(value)
            if arr.dtype != np_dtype(want) and arr.dtype.kind == np_dtype(want).kind == "f" \
                    and not isinstance(value, np.ndarray):
                arr = arr.astype(np_dtype(want))
            t = as_dragon(arr)
        if t.dtype.name != want:
            raise TypeError(f"ONNX model '{self.model.graph.name}': input '{nm}' must be "
                            f"{want}, got {t.dtype.name}")
        return t

    def __call__(self, *args):
        """Run the model.

        Parameters
        ----------
        *args : Tensor or numpy.ndarray
            One per graph input (initializers excluded), in graph order.

        Returns
        -------
        tuple of Tensor
            The graph outputs, in graph order.
        """
        if len(args) != len(self.input_names):
            raise TypeError(f"ONNX model '{self.model.graph.name}' takes "
                            f"{len(self.input_names)} inputs {self.input_names}, got {len(args)}")
        feeds = {nm: self._as_input(nm, a) for nm, a in zip(self.input_names, args)}
        if self._segments is not None:
            return self._segments(feeds)
        for _ in range(len(self.input_names) + 1):
            dynamic = [feeds[nm] for nm in self.input_names if nm not in self._static]
            static = tuple((nm, feeds[nm].dtype.name, tuple(feeds[nm].shape),
                            feeds[nm].numpy().tobytes())
                           for nm in self.input_names if nm in self._static)
            try:
                return tuple(self._fn(dynamic, static))
            except NeedStatic as exc:
                new = exc.inputs - self._static
                if not new:
                    raise RuntimeError("internal: a static input was asked twice") from exc
                self._static |= new
        raise RuntimeError("internal: too many retraces")

    def get_graph(self, *args):
        """The optimised Dragon GraphDef the model compiles to for these inputs
        (a model with data-dependent output shapes compiles to several: see
        :meth:`get_graphs`)."""
        if self._segments is not None:
            raise ValueError(f"ONNX model '{self.model.graph.name}' has nodes whose output "
                             "shapes depend on the values and compiles to "
                             f"{self._segments.num_segments} graphs: use get_graphs()")
        self(*args)
        feeds = {nm: self._as_input(nm, a) for nm, a in zip(self.input_names, args)}
        dynamic = [feeds[nm] for nm in self.input_names if nm not in self._static]
        static = tuple((nm, feeds[nm].dtype.name, tuple(feeds[nm].shape),
                        feeds[nm].numpy().tobytes())
                       for nm in self.input_names if nm in self._static)
        return self._fn.get_graph(dynamic, static)


    # -- data-dependent output shapes (NonZero, Unique, ...): _segments.py

    @property
    def num_graphs(self) -> int:
        """How many compiled graphs a call runs: 1, or the number of
        segments of a model split at its data-dependent nodes."""
        return 1 if self._segments is None else self._segments.num_segments

    def get_graphs(self, *args) -> list:
        """The optimised GraphDefs a call with these inputs runs, in order:
        one for most models; one per compiled segment for a model split at
        nodes whose output shapes depend on the values (the nodes between
        them run eagerly; see docs/onnx.md)."""
        if self._segments is None:
            return [self.get_graph(*args)]
        if len(args) != len(self.input_names):
            raise TypeError(f"ONNX model '{self.model.graph.name}' takes "
                            f"{len(self.input_names)} inputs {self.input_names}, got {len(args)}")
        feeds = {nm: self._as_input(nm, a) for nm, a in zip(self.input_names, args)}
        return self._segments.get_graphs(feeds)


def _plan_segments(fn: "OnnxFunction"):
    """The segment plan of a model with data-dependent nodes, else None."""
    from ._segments import plan
    return plan(fn, fn._graph)


def default_opset(model) -> int:
    versions = [o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS]
    if not versions:
        # A model of custom ops only still needs some opset number.
        return 21
    return int(versions[0])


def _read_model(path_or_bytes):
    import onnx
    if isinstance(path_or_bytes, onnx.ModelProto):
        return path_or_bytes, None
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return onnx.load_model_from_string(bytes(path_or_bytes)), None
    if isinstance(path_or_bytes, (str, os.PathLike)):
        path = os.fspath(path_or_bytes)
        with open(path, "rb") as f:
            data = f.read()
        return onnx.load_model_from_string(data), os.path.dirname(os.path.abspath(path))
    raise TypeError(f"dragon_core.onnx.load expects a path, bytes or an onnx.ModelProto, got "
                    f"{type(path_or_bytes).__name__}")


def load(path_or_bytes, *, base_dir: str | os.PathLike | None = None,
         opt_level: int = 3, freeze: bool = False) -> OnnxFunction:
    """Load an ONNX model as a compiled Dragon function.

    Parameters
    ----------
    path_or_bytes : str, os.PathLike, bytes or onnx.ModelProto
        The model. External data files are read (memory-mapped) relative to
        the model file's folder, or to ``base_dir``.
    base_dir : str or os.PathLike, optional
        Folder of the external data files when the model is given as bytes.
    opt_level : int, default 3
        Optimisation level of the compiled graph (see ``dragon_core.function``).
    freeze : bool, default False
        Kept for compatibility: the initializers are always constants of
        the compiled graph, borrowed from the model's bytes without a copy,
        so constant folding precomputes what depends on them only (a
        BatchNormalization folded into its Conv's weights once, not on
        every call) with or without it.

    Returns
    -------
    OnnxFunction
        Call it with the graph inputs (Tensors or NumPy arrays) in graph
        order; it returns a tuple of the graph outputs.

    Raises
    ------
    UnsupportedModelError
        Before anything runs, listing every node (op type, opset, name) that
        Dragon cannot translate.
    NotImplementedError
        For an opset below 7 or a graph input of a dtype Dragon lacks.
    """
    model, found_dir = _read_model(path_or_bytes)
    opset = default_opset(model)
    if opset < MIN_OPSET:
        raise NotImplementedError(f"ONNX model '{model.graph.name}' uses opset {opset}; "
                                  f"dragon_core.onnx.load reads opsets {MIN_OPSET} and newer "
                                  "(upgrade it with onnx.version_converter.convert_version)")
    check_model(model, opset)
    base = os.fspath(base_dir) if base_dir is not None else found_dir
    return OnnxFunction(model, base, opt_level, freeze)


def supported_ops() -> list:
    """The default-domain ONNX op types the importer translates."""
    from ._import_ops import TABLE
    return sorted(TABLE)
