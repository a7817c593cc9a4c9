// Ops implemented in Python (dragon_core.custom_op, the prototyping path).
//
// The schema and the kernels live in the same registry as every other op;
// only their shape rule and kernel function are C trampolines that take the
// GIL and call Python. The Python side (custom_op.py) wraps the user's
// functions so that they never raise: they return (status, payload), and a
// failure becomes the op's error through host->set_error. The trampolines
// may run on any thread (the parallel graph executor's workers, or a caller
// that released the GIL), hence py::gil_scoped_acquire, which is also a
// no-op when the calling thread already holds the GIL (eager calls).
#include <set>

#include "../core/device.h"
#include "bindings.h"

namespace dragon {
namespace {

// A Python callable kept alive for the life of the process: registrations
// are never freed (a retired op may still be referenced by a compiled plan),
// and destroying a py::object after interpreter teardown would crash.
struct PyCallable {
  py::object fn;
};

PyCallable* Keep(py::object fn) { return new PyCallable{std::move(fn)}; }

// Names of the ops defined from Python (guarded by the GIL).
std::set<std::string>& PythonOps() {
  static auto* s = new std::set<std::string>();
  return *s;
}

py::dict Attrs(int32_t n, const DgAttrValue* const* attrs, const char* const* names) {
  py::dict d;
  for (int32_t i = 0; i < n; ++i) d[py::str(names[i])] = AttrToPy(*attrs[i]);
  return d;
}

py::tuple ShapeOf(const DgTensorView& v) {
  py::tuple t(v.ndim);
  for (int32_t i = 0; i < v.ndim; ++i) t[i] = py::int_(v.shape[i]);
  return t;
}

// A zero-copy NumPy view of a host tensor view, valid during the call only.
py::array ArrayOf(const DgTensorView& v, bool writable) {
  py::dtype dt = NumpyFromDType(v.dtype);
  std::vector<py::ssize_t> shape(v.shape, v.shape + v.ndim), strides(v.ndim);
  for (int32_t i = 0; i < v.ndim; ++i)
    strides[i] = static_cast<py::ssize_t>(v.strides[i]) * dt.itemsize();
  char* data = static_cast<char*>(v.data);
  if (data == nullptr) return py::array(dt, shape, strides);  // zero elements
  py::array a(dt, shape, strides, data + v.byte_offset, py::none());
  if (!writable)
    py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

// Unpacks the (status, payload) answer of a Python wrapper; records the
// error and returns its status when there is one.
DgStatus Failed(const py::object& r, const DgHostApi* host, void* host_ctx, py::object* payload) {
  py::tuple t = py::reinterpret_borrow<py::tuple>(r);
  DgStatus code = t[0].cast<int32_t>();
  if (code != DG_OK) return host->set_error(host_ctx, code, py::str(t[1]).cast<std::string>().c_str());
  *payload = t[1];
  return DG_OK;
}

DgStatus InferTrampoline(const DgInferContext* ctx) {
  auto* rule = static_cast<PyCallable*>(ctx->op_data);
  py::gil_scoped_acquire gil;
  try {
    py::list inputs;
    for (int32_t i = 0; i < ctx->num_inputs; ++i)
      inputs.append(py::make_tuple(ShapeOf(*ctx->inputs[i]), static_cast<int>(ctx->inputs[i]->dtype)));
    py::object outs;
    DgStatus s = Failed(rule->fn(inputs, Attrs(ctx->num_attrs, ctx->attrs, ctx->attr_names)),
                        ctx->host, ctx->host_ctx, &outs);
    if (s != DG_OK) return s;
    int32_t index = 0;
    for (auto item : outs) {
      py::tuple o = py::reinterpret_borrow<py::tuple>(item);
      std::vector<int64_t> shape = o[0].cast<std::vector<int64_t>>();
      s = ctx->host->set_output(ctx->host_ctx, index++, static_cast<DgDType>(o[1].cast<int>()),
                                static_cast<int32_t>(shape.size()), shape.data());
      if (s != DG_OK) return s;
    }
    return DG_OK;
  } catch (std::exception& e) {  // py::error_already_set, cast errors
    return ctx->host->set_error(ctx->host_ctx, DG_INTERNAL,
                                dg::Str("the Python shape rule failed: ", e.what()).c_str());
  }
}

DgStatus KernelTrampoline(const DgCallFrame* f) {
  auto* kernel = static_cast<PyCallable*>(f->kernel_data);
  py::gil_scoped_acquire gil;
  try {
    py::list inputs, outputs;
    for (int32_t i = 0; i < f->num_inputs; ++i) inputs.append(ArrayOf(*f->inputs[i], false));
    for (int32_t i = 0; i < f->num_outputs; ++i) outputs.append(ArrayOf(*f->outputs[i], true));
    // The kernel computes on NumPy arrays: nothing it does is recorded for
    // autograd or traced into a graph.
    struct NoRecord {  // restores the state on any exit
      GradState saved = Grad();
      NoRecord() { Grad() = GradState{false, 0, 0}; }
      ~NoRecord() { Grad() = saved; }
    };
    py::object r;
    {
      NoRecord no_record;
      r = kernel->fn(inputs, outputs, Attrs(f->num_attrs, f->attrs, f->attr_names));
    }
    py::object unused;
    return Failed(r, f->host, f->host_ctx, &unused);
  } catch (std::exception& e) {
    return f->host->set_error(f->host_ctx, DG_INTERNAL,
                              dg::Str("the Python kernel failed: ", e.what()).c_str());
  }
}

AttrValue DefaultOf(DgAttrType type, py::handle v) {
  AttrValue a(type);
  a.v.present = 1;
  switch (type) {
    case DG_ATTR_INT: case DG_ATTR_BOOL: case DG_ATTR_DTYPE: a.v.i = v.cast<int64_t>(); break;
    case DG_ATTR_FLOAT: a.v.f = v.cast<double>(); break;
    case DG_ATTR_STRING: a.s = v.cast<std::string>(); break;
    case DG_ATTR_INTS: a.ints = v.cast<std::vector<int64_t>>(); break;
    case DG_ATTR_FLOATS: a.floats = v.cast<std::vector<double>>(); break;
    default: throw CoreError(DG_INVALID_ARGUMENT, dg::Str("unknown attribute type ", type));
  }
  a.Fix();
  return a;
}

// inputs/outputs: [(name, dtype_mask, flags)]; attrs: [(name, type, default or None)].
void DefineOp(const std::string& name, const std::string& py_name, const std::string& doc,
              const std::string& plugin, py::list inputs, py::list outputs, py::list attrs,
              uint32_t flags, py::object shape_rule) {
  std::vector<std::string> strings;  // owns every name until FromDef copied them
  strings.reserve(2 * (inputs.size() + outputs.size() + attrs.size()));
  auto args = [&](py::list l) {
    std::vector<DgArgDef> out;
    for (auto item : l) {
      py::tuple t = py::reinterpret_borrow<py::tuple>(item);
      strings.push_back(t[0].cast<std::string>());
      DgArgDef a{};
      a.struct_size = sizeof(DgArgDef);
      a.name = strings.back().c_str();
      a.dtypes = t[1].cast<DgDTypeMask>();
      a.flags = t[2].cast<uint32_t>();
      out.push_back(a);
    }
    return out;
  };
  std::vector<DgArgDef> in = args(inputs), out = args(outputs);
  std::vector<AttrValue> defaults;
  defaults.reserve(attrs.size());
  std::vector<DgAttrDef> attr_defs;
  for (auto item : attrs) {
    py::tuple t = py::reinterpret_borrow<py::tuple>(item);
    strings.push_back(t[0].cast<std::string>());
    DgAttrDef d{};
    d.struct_size = sizeof(DgAttrDef);
    d.name = strings.back().c_str();
    d.type = t[1].cast<DgAttrType>();
    if (t[2].is_none()) {
      d.flags = DG_ATTR_REQUIRED;
    } else {
      defaults.push_back(DefaultOf(d.type, t[2]));
      d.default_value = &defaults.back().v;
    }
    attr_defs.push_back(d);
  }
  DgOpDef def{};
  def.struct_size = sizeof(DgOpDef);
  def.name = name.c_str();
  def.py_name = py_name.c_str();
  def.doc = doc.c_str();
  def.num_inputs = static_cast<int32_t>(in.size());
  def.inputs = in.data();
  def.num_outputs = static_cast<int32_t>(out.size());
  def.outputs = out.data();
  def.num_attrs = static_cast<int32_t>(attr_defs.size());
  def.attrs = attr_defs.data();
  def.flags = flags;
  def.infer = &InferTrampoline;
  std::unique_ptr<OpSchema> op = OpSchema::FromDef(def, plugin);
  op->user_data = Keep(std::move(shape_rule));  // leaked with the schema
  Registry::Get().AddOp(std::move(op));          // throws when the name is taken
  PythonOps().insert(name);
}

void RegisterKernel(const std::string& op_name, const std::string& name, const std::string& plugin,
                    const std::string& device, DgDTypeMask dtypes, int32_t priority,
                    py::object fn) {
  OpSchema* op = Registry::Get().FindOp(op_name);
  if (!op) throw CoreError(DG_NOT_FOUND, dg::Str("no op named '", op_name, "' is defined"));
  const std::string& host = DeviceRegistry::Get().type(kHost.type).name;
  if (device != host)
    throw CoreError(DG_INVALID_ARGUMENT,
                    dg::Str(op_name, ": a Python kernel runs on '", host, "' only (it computes "
                            "on NumPy arrays), not on '", device, "'"));
  if (dtypes == 0)
    throw CoreError(DG_INVALID_ARGUMENT, dg::Str(op_name, ": kernel '", name, "' has no dtype"));
  for (const KernelEntry* k : Registry::Get().Kernels(op_name)) {
    if (k->name == name)
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str(op_name, ": a kernel named '", name, "' is already registered"));
    if (k->device == device && k->plugin == plugin && k->priority == priority &&
        (k->dtypes & dtypes))
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str(op_name, ": kernels '", k->name, "' and '", name, "' of plugin '",
                              plugin, "' both claim ", MaskToString(k->dtypes & dtypes),
                              " at priority ", priority, "; give one another priority"));
  }
  KernelEntry k;
  k.op = op_name;
  k.device = device;
  k.name = name;
  k.plugin = plugin;
  k.dtypes = dtypes & DG_MASK_ANY;
  k.priority = priority;
  k.fn = &KernelTrampoline;
  k.user_data = Keep(std::move(fn));
  Registry::Get().AddKernel(std::move(k));
}

}  // namespace

void BindPyOps(py::module_& m) {
  m.def("_define_py_op", &DefineOp, py::arg("name"), py::arg("py_name"), py::arg("doc"),
        py::arg("plugin"), py::arg("inputs"), py::arg("outputs"), py::arg("attrs"),
        py::arg("flags"), py::arg("shape_rule"),
        "Define an op whose shape rule is a Python callable (see custom_op.py).");
  m.def("_register_py_kernel", &RegisterKernel, py::arg("op"), py::arg("name"),
        py::arg("plugin"), py::arg("device"), py::arg("dtypes"), py::arg("priority"),
        py::arg("fn"), "Register a Python kernel for an op (see custom_op.py).");
  m.def("_retire_py_op", [](const std::string& name) {
    if (!PythonOps().count(name))
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str("'", name, "' is not an op defined from Python; only those can be "
                              "removed"));
    PythonOps().erase(name);
    return Registry::Get().RetireOp(name);
  }, "Remove an op defined from Python and its kernels.");
  m.def("_is_py_op", [](const std::string& name) { return PythonOps().count(name) != 0; });
}

}  // namespace dragon
