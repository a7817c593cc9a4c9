// Op bindings: the generic call used by the generated dragon_core.ops
// functions, shape inference, schema introspection, tensor operators.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../core/allocator.h"
#include "../core/device.h"
#include "bindings.h"
#include "dragon/elementwise.h"

namespace dragon {
namespace {

struct OpHandle {
  OpSchema* op;
};

// An argument error of op (an ArgumentTypeError in Python for kType).
[[noreturn]] void ArgError(const OpSchema& op, const std::string& what,
                           ErrorKind kind = ErrorKind::kType) {
  CoreError e(DG_INVALID_ARGUMENT, dg::Str(op.name, ": ", what), kind);
  e.op = op.name;
  throw e;
}

[[noreturn]] void AttrError(const OpSchema& op, const AttrSchema& a, const std::string& why) {
  ArgError(op, dg::Str("attribute '", a.name, "' ", why));
}

// "float nan", "str 'false'", "list [1]": a value as error messages show it.
std::string Show(py::handle v) {
  std::string type = py::str(py::type::of(v).attr("__name__"));
  std::string r = py::repr(v);
  if (r.size() > 80) r = r.substr(0, 77) + "...";
  return type + " " + r;
}

// NumPy's scalar base types, looked up once (kept for the process).
struct NumpyScalarTypes {
  PyObject* bool_;
  PyObject* integer;
  PyObject* floating;
};
const NumpyScalarTypes& NpTypes() {
  static const NumpyScalarTypes types = [] {
    py::module_ np = py::module_::import("numpy");
    auto keep = [&](const char* name) { return py::object(np.attr(name)).release().ptr(); };
    return NumpyScalarTypes{keep("bool_"), keep("integer"), keep("floating")};
  }();
  return types;
}

bool IsBool(py::handle v) {
  return PyBool_Check(v.ptr()) || PyObject_IsInstance(v.ptr(), NpTypes().bool_) == 1;
}
// int or np.integer, not bool: True is not an int attribute value.
bool IsInteger(py::handle v) {
  if (PyBool_Check(v.ptr())) return false;
  return PyLong_Check(v.ptr()) || PyObject_IsInstance(v.ptr(), NpTypes().integer) == 1;
}
bool IsFloating(py::handle v) {
  return PyFloat_Check(v.ptr()) || PyObject_IsInstance(v.ptr(), NpTypes().floating) == 1;
}
// Text and mappings are never sequences of numbers (bytes would iterate as ints).
bool IsNumberSequence(py::handle v) {
  PyObject* o = v.ptr();
  return PySequence_Check(o) && !PyUnicode_Check(o) && !PyBytes_Check(o) &&
         !PyByteArray_Check(o) && !PyDict_Check(o);
}

// An int attribute value: int or np.integer in the int64 range, exactly.
// Returns "" or why `v` is not one.
std::string ToInt(py::handle v, int64_t* out) {
  if (!IsInteger(v)) return dg::Str("expects an int, got ", Show(v));
  PyObject* idx = PyNumber_Index(v.ptr());
  if (!idx) {
    PyErr_Clear();
    return dg::Str("expects an int, got ", Show(v));
  }
  int overflow = 0;
  long long r = PyLong_AsLongLongAndOverflow(idx, &overflow);
  Py_DECREF(idx);
  if (overflow) return dg::Str("expects an int64, got ", Show(v), ", out of the int64 range");
  *out = r;
  return "";
}

// A float attribute value: float, np.floating, or an int a double holds
// exactly (an int64 value past 2**53 must not round silently).
std::string ToFloat(py::handle v, double* out) {
  if (IsFloating(v)) {
    *out = PyFloat_AsDouble(v.ptr());
    return "";
  }
  if (!IsInteger(v)) return dg::Str("expects a float, got ", Show(v));
  py::int_ i = py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr()));
  if (!i) {
    PyErr_Clear();
    return dg::Str("expects a float, got ", Show(v));
  }
  double d = PyLong_AsDouble(i.ptr());
  if (d == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return dg::Str("expects a float, got ", Show(v), ", too large for a float64");
  }
  if (PyObject_RichCompareBool(i.ptr(), py::float_(d).ptr(), Py_EQ) != 1)
    return dg::Str("expects a float, got ", Show(v),
                   ", which a float64 cannot hold exactly (it would become ",
                   py::repr(py::float_(d)).cast<std::string>(), ")");
  *out = d;
  return "";
}

AttrValue ConvertAttr(const OpSchema& op, const AttrSchema& a, py::handle v) {
  if (v.is_none()) {
    if (a.has_default) return a.def;
    if (a.flags & DG_ATTR_OPTIONAL) {
      AttrValue out(a.type);
      out.v.present = 0;
      return out;
    }
    AttrError(op, a, "is required");
  }
  AttrValue out(a.type);
  out.v.present = 1;
  std::string why;
  switch (a.type) {
    case DG_ATTR_INT: why = ToInt(v, &out.v.i); break;
    case DG_ATTR_FLOAT: why = ToFloat(v, &out.v.f); break;
    case DG_ATTR_BOOL:
      // Only True/False: "false", nan, [1] and -1 are not booleans.
      if (!IsBool(v)) why = dg::Str("expects a bool (True or False), got ", Show(v));
      else out.v.i = PyObject_IsTrue(v.ptr());
      break;
    case DG_ATTR_STRING:
      if (!PyUnicode_Check(v.ptr())) why = dg::Str("expects a str, got ", Show(v));
      else out.s = v.cast<std::string>();
      break;
    case DG_ATTR_DTYPE: {
      // A dtype code is not a dtype: zeros(2, 3) must not mean int16.
      if (PyBool_Check(v.ptr()) || PyIndex_Check(v.ptr())) {
        why = dg::Str("expects a dtype (a dragon_core dtype, its name such as 'int64', or a "
                      "NumPy dtype), got ", Show(v));
        break;
      }
      try {
        out.v.i = Hooks().dtype_code(v).cast<int64_t>();
      } catch (py::error_already_set& e) {
        why = dg::Str("expects a dtype, got ", Show(v), ": ", std::string(py::str(e.value())));
      }
      break;
    }
    case DG_ATTR_INTS:
    case DG_ATTR_FLOATS: {
      const bool ints = a.type == DG_ATTR_INTS;
      const char* what = ints ? "ints" : "floats";
      auto item = [&](py::handle x) {
        if (ints) {
          int64_t i = 0;
          std::string w = ToInt(x, &i);
          out.ints.push_back(i);
          return w;
        }
        double f = 0;
        std::string w = ToFloat(x, &f);
        out.floats.push_back(f);
        return w;
      };
      if (IsInteger(v) || (!ints && IsFloating(v))) {  // one value: a sequence of one
        why = item(v);
        break;
      }
      if (!IsNumberSequence(v)) {
        why = dg::Str("expects a sequence of ", what, ", got ", Show(v));
        break;
      }
      try {
        size_t k = 0;
        for (auto x : py::reinterpret_borrow<py::sequence>(v)) {
          std::string w = item(x);
          if (!w.empty()) {
            why = dg::Str("expects a sequence of ", what, ", got ", Show(v), " (item ", k, " ",
                          w.substr(w.find("got ") + 4), ")");
            break;
          }
          ++k;
        }
      } catch (py::error_already_set& e) {
        why = dg::Str("expects a sequence of ", what, ", got ", Show(v), ": ",
                      std::string(py::str(e.value())));
      }
      break;
    }
  }
  if (!why.empty()) AttrError(op, a, why);
  out.Fix();
  return out;
}

}  // namespace

std::vector<AttrValue> ConvertAttrs(const OpSchema& op, py::handle attrs) {
  std::vector<AttrValue> out;
  py::tuple t = py::reinterpret_borrow<py::tuple>(attrs);
  if (t.size() != op.attrs.size())
    throw CoreError(DG_INVALID_ARGUMENT, dg::Str(op.name, ": expected ", op.attrs.size(),
                                                 " attributes, got ", t.size()));
  out.reserve(op.attrs.size());
  for (size_t i = 0; i < op.attrs.size(); ++i) out.push_back(ConvertAttr(op, op.attrs[i], t[i]));
  return out;
}

namespace {

bool IsTensor(py::handle h) { return py::isinstance<TensorImpl>(h); }

// One type lookup instead of isinstance + cast (hot path of every op call).
bool AsTensor(py::handle h, Tensor* out) {
  static PyTypeObject* tensor_type =
      reinterpret_cast<PyTypeObject*>(py::type::of<TensorImpl>().ptr());
  if (Py_TYPE(h.ptr()) != tensor_type && !PyObject_TypeCheck(h.ptr(), tensor_type)) return false;
  py::detail::make_caster<Tensor> caster;
  if (!caster.load(h, false)) return false;
  *out = py::detail::cast_op<Tensor>(std::move(caster));
  return true;
}

std::vector<Tensor> ConvertInputs(const OpSchema& op, py::handle inputs) {
  py::tuple t = py::reinterpret_borrow<py::tuple>(inputs);
  // Trailing optional inputs given as None are absent: the kernel sees
  // fewer inputs (Conv2d(x, w, b=None) runs with two).
  size_t count = t.size();
  while (count > 0 && count <= op.inputs.size() && t[count - 1].is_none() &&
         (op.inputs[count - 1].flags & DG_ARG_OPTIONAL) &&
         !(op.variadic_input() && count == op.inputs.size()))
    --count;
  // Owning references: iterating a sequence may make its items on the fly
  // (a NumPy array's rows or scalars, any __getitem__); a borrowed handle to
  // such an item dangles as soon as the iteration drops it.
  std::vector<py::object> flat;
  for (size_t i = 0; i < count; ++i) {
    bool variadic = op.variadic_input() && i + 1 == op.inputs.size();
    if (variadic) {
      if (IsTensor(t[i]) || !PySequence_Check(t[i].ptr()))
        ArgError(op, dg::Str("input '", op.inputs.back().name, "' takes a list of tensors"));
      for (auto item : py::reinterpret_borrow<py::sequence>(t[i])) flat.push_back(item);
    } else {
      flat.push_back(t[i]);
    }
  }
  const Tensor* like = nullptr;
  std::vector<Tensor> out(flat.size());
  for (size_t i = 0; i < flat.size(); ++i) {
    if (AsTensor(flat[i], &out[i]) && !like) like = &out[i];
  }
  // Python scalars take the dtype of the dispatch input when it is a
  // tensor (Where(cond, x, 0.0): 0.0 becomes x's dtype, not bool).
  size_t d = static_cast<size_t>(op.dispatch_input);
  if (d < out.size() && out[d]) like = &out[d];
  // A scalar in the dispatch input's own place (Where(cond, 0.0, y)) takes
  // the dtype of a tensor input under the same dtype constraint (y), never
  // that of an input with another role (the bool condition).
  const Tensor* peer = nullptr;
  if (d < out.size() && !out[d] && d < op.inputs.size()) {
    for (size_t j = 0; j < out.size() && j < op.inputs.size(); ++j) {
      if (out[j] && op.inputs[j].dtypes == op.inputs[d].dtypes) {
        peer = &out[j];
        break;
      }
    }
  }
  for (size_t i = 0; i < flat.size(); ++i) {
    if (out[i]) continue;
    const Tensor* like_i = like;
    if (peer && i < op.inputs.size() && op.inputs[i].dtypes == op.inputs[d].dtypes)
      like_i = peer;
    // An input past the schema's last (the op is not variadic) has no name:
    // the call has too many inputs, whatever this one holds.
    if (!op.variadic_input() && i >= op.inputs.size())
      ArgError(op, dg::Str("expects at most ", op.inputs.size(), " input(s), got ", flat.size()),
               ErrorKind::kStatus);
    // The schema's name of flat input i (a variadic input's items share one).
    const size_t arg = std::min(i, op.inputs.size() - 1);
    const std::string name = op.inputs.empty() ? std::to_string(i) : op.inputs[arg].name;
    auto fail = [&](const std::string& why) {
      ArgError(op, dg::Str("input '", name, "' (position ", i, ") ", why));
    };
    if (flat[i].is_none()) {
      fail(arg < op.inputs.size() && (op.inputs[arg].flags & DG_ARG_OPTIONAL)
               ? "is None: an optional input may be omitted only when no later input is given"
               : "is None, but the op requires a tensor");
    }
    try {
      out[i] = ToTensor(flat[i], like_i);
    } catch (py::error_already_set& err) {
      if (err.matches(PyExc_OverflowError)) {
        // A Python int out of the tensor's dtype range (NumPy 2 raises too).
        std::string msg = dg::Str(op.name, ": input '", name, "' (position ", i, ") ",
                                  py::str(err.value()).cast<std::string>());
        PyErr_SetString(PyExc_OverflowError, msg.c_str());
        throw py::error_already_set();
      }
      if (!err.matches(PyExc_TypeError) && !err.matches(PyExc_ValueError)) throw;
      fail(dg::Str("cannot be made a tensor from ", py::str(py::type::of(flat[i])).cast<std::string>(),
                   ": ", py::str(err.value()).cast<std::string>()));
    }
  }
  return out;
}

py::object PackOutputs(const OpSchema& op, std::vector<Tensor>&& outs) {
  if (op.variadic_output()) return py::cast(outs);
  if (outs.size() == 1) return py::cast(std::move(outs[0]));
  py::tuple t(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) t[i] = py::cast(std::move(outs[i]));
  return py::object(std::move(t));
}

py::dict AttrDefault(const AttrSchema& a) {
  py::dict d;
  d["name"] = a.name;
  d["type"] = static_cast<int>(a.type);
  d["required"] = !a.has_default && !(a.flags & DG_ATTR_OPTIONAL);
  d["optional"] = static_cast<bool>(a.flags & DG_ATTR_OPTIONAL);
  d["doc"] = a.doc;
  py::object def = py::none();
  if (a.has_default) {
    const DgAttrValue& v = a.def.v;
    switch (a.type) {
      case DG_ATTR_INT: def = py::int_(v.i); break;
      case DG_ATTR_FLOAT: def = py::float_(v.f); break;
      case DG_ATTR_BOOL: def = py::bool_(v.i != 0); break;
      case DG_ATTR_STRING: def = py::str(a.def.s); break;
      case DG_ATTR_DTYPE: def = py::str(DTypeName(static_cast<DgDType>(v.i))); break;
      case DG_ATTR_INTS: def = py::cast(a.def.ints); break;
      case DG_ATTR_FLOATS: def = py::cast(a.def.floats); break;
    }
  }
  d["default"] = def;
  return d;
}

py::list Args(const std::vector<ArgSchema>& args) {
  py::list l;
  for (auto& a : args) {
    py::dict d;
    d["name"] = a.name;
    d["dtypes"] = MaskToString(a.dtypes);
    d["variadic"] = static_cast<bool>(a.flags & DG_ARG_VARIADIC);
    d["optional"] = static_cast<bool>(a.flags & DG_ARG_OPTIONAL);
    d["no_grad"] = static_cast<bool>(a.flags & DG_ARG_NO_GRAD);
    d["doc"] = a.doc;
    l.append(d);
  }
  return l;
}

py::dict Describe(const OpSchema& op) {
  py::dict d;
  d["name"] = op.name;
  d["py_name"] = op.py_name;
  d["doc"] = op.doc;
  d["plugin"] = op.plugin;
  d["inputs"] = Args(op.inputs);
  d["outputs"] = Args(op.outputs);
  py::list attrs;
  for (auto& a : op.attrs) attrs.append(AttrDefault(a));
  d["attrs"] = attrs;
  d["stateful"] = static_cast<bool>(op.flags & DG_OP_STATEFUL);
  d["collective"] = static_cast<bool>(op.flags & DG_OP_COLLECTIVE);
  d["same_dtype"] = static_cast<bool>(op.flags & DG_OP_SAME_DTYPE);
  d["no_grad"] = static_cast<bool>(op.flags & DG_OP_NO_GRAD);
  d["control"] = static_cast<bool>(op.flags & DG_OP_CONTROL);
  d["view"] = static_cast<bool>(op.flags & (kOpFlagView | kOpFlagPermuteView));
  d["strided_view"] = static_cast<bool>(op.flags & kOpFlagPermuteView);
  d["elementwise"] = static_cast<bool>(op.flags & kOpFlagElementwise);
  d["dispatch_input"] = op.dispatch_input;
  d["inplace_inputs"] = op.inplace_inputs;
  return d;
}

OpSchema& RequireOp(const std::string& name) {
  OpSchema* op = Registry::Get().FindOp(name);
  if (!op) op = Registry::Get().FindOpByPyName(name);
  if (!op) {
    if (const PluginRecord* p = Registry::Get().BrokenProvider(name, "")) {
      CoreError e(DG_UNAVAILABLE,
                  dg::Str(name, ": its provider plugin '", p->name, "' failed to load: ", p->error),
                  ErrorKind::kPlugin);
      e.op = name;
      e.plugin = p->name;
      throw e;
    }
    throw CoreError(DG_NOT_FOUND, dg::Str("no op named '", name, "' is defined"));
  }
  return *op;
}

// Scalar operands on non-host devices (`x * 0.9`, `ops.add(x, 1.0)` with x
// on cuda): one read-only 0-d tensor per (device, dtype, value bits), made
// once and reused, instead of a new tensor and a pageable host-to-device
// copy per call. Shared by the operator fast path below and the Python
// paths (_tensor._device_scalar). The bits are the value in the dtype, so
// -0.0 and 0.0, and NaN payloads, stay apart. First in, first out past the
// limit (kMaxDeviceScalars unless _device_scalar_limit set another). Never
// handed to user code as a result, only fed to ops as an input; read-only
// storage besides (the dispatcher never writes an output over it). Never
// destroyed: at exit the device plugins may be gone.
//
// Thread safety: every caller holds the GIL today (the operator fast path,
// _device_scalar, _drop_device_scalars, _device_scalar_count/_limit;
// executor workers and the GIL-free collective path never reach it), but
// the cache does not rely on that: its own mutex guards the map, the
// order and the limit, so it stays right when a caller releases the GIL or
// under free-threaded Python. The mutex is never held across work that
// may block or re-enter: the host-to-device copy of a new scalar runs
// unlocked (two threads missing at once both copy; the first to insert
// wins and the other's tensor is returned to its caller only), and
// evicted tensors are destroyed after unlocking (a tensor's destructor
// may run Python: its autograd state holds Python objects).
constexpr size_t kMaxDeviceScalars = 256;

struct ScalarKey {
  int32_t type, index, dtype;
  uint64_t bits;
  bool operator==(const ScalarKey& o) const {
    return type == o.type && index == o.index && dtype == o.dtype && bits == o.bits;
  }
};
struct ScalarKeyHash {
  size_t operator()(const ScalarKey& k) const {
    uint64_t h = k.bits * 0x9E3779B97F4A7C15ull;
    h ^= (static_cast<uint64_t>(static_cast<uint32_t>(k.type)) << 40) ^
         (static_cast<uint64_t>(static_cast<uint32_t>(k.index)) << 20) ^
         static_cast<uint64_t>(static_cast<uint32_t>(k.dtype));
    return static_cast<size_t>(h ^ (h >> 29));
  }
};
class DeviceScalars {
 public:
  // The cached tensor of `key`, or null.
  Tensor Find(const ScalarKey& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    return it == map_.end() ? Tensor() : it->second;
  }
  // Caches `s` under `key` unless the limit is 0; returns the cached tensor
  // (an earlier thread's when one inserted `key` meanwhile, else `s`).
  Tensor Insert(const ScalarKey& key, Tensor s) {
    std::vector<Tensor> evicted;  // destroyed after unlocking
    std::lock_guard<std::mutex> lock(mu_);
    if (limit_ == 0) return s;
    auto it = map_.find(key);
    if (it != map_.end()) return it->second;
    EvictTo(limit_ - 1, &evicted);
    map_.emplace(key, s);
    order_.push_back(key);
    return s;
  }
  // Forgets the tensors of device (type, index), or all with type < 0.
  void Drop(int32_t type, int32_t index) {
    std::vector<Tensor> evicted;
    std::lock_guard<std::mutex> lock(mu_);
    std::deque<ScalarKey> keep;
    for (const ScalarKey& k : order_) {
      if (type < 0 || (k.type == type && k.index == index)) Take(k, &evicted);
      else keep.push_back(k);
    }
    order_.swap(keep);
  }
  size_t Size() {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
  }
  // Sets the limit (and evicts past it); returns the old one.
  size_t SetLimit(size_t limit) {
    std::vector<Tensor> evicted;
    std::lock_guard<std::mutex> lock(mu_);
    const size_t old = limit_;
    limit_ = limit;
    EvictTo(limit_, &evicted);
    return old;
  }
  size_t Limit() {
    std::lock_guard<std::mutex> lock(mu_);
    return limit_;
  }

 private:
  // Under mu_: drops the oldest entries until at most n remain.
  void EvictTo(size_t n, std::vector<Tensor>* out) {
    while (map_.size() > n && !order_.empty()) {
      Take(order_.front(), out);
      order_.pop_front();
    }
  }
  void Take(const ScalarKey& k, std::vector<Tensor>* out) {
    auto it = map_.find(k);
    if (it == map_.end()) return;
    out->push_back(std::move(it->second));
    map_.erase(it);
  }

  std::mutex mu_;
  std::unordered_map<ScalarKey, Tensor, ScalarKeyHash> map_;
  std::deque<ScalarKey> order_;  // insertion order
  size_t limit_ = kMaxDeviceScalars;  // 0: every call makes a new one
};
DeviceScalars& Scalars() {
  static auto* cache = new DeviceScalars();
  return *cache;
}

// The cached 0-d `t` tensor on `d` holding the `size` bytes at `value`.
Tensor DeviceScalar(DgDevice d, DgDType t, const void* value, size_t size) {
  ScalarKey key{d.type, d.index, static_cast<int32_t>(t), 0};
  std::memcpy(&key.bits, value, size < 8 ? size : 8);
  DeviceScalars& c = Scalars();
  if (Tensor hit = c.Find(key)) return hit;
  Tensor host = TensorImpl::Empty(kHost, t, {});
  std::memcpy(host->data(), value, size);
  Tensor s = CopyTo(host, d);
  s->storage()->set_read_only(true);
  return c.Insert(key, std::move(s));
}

// Runs `a op b` (`b op a` when reflected) with the default attributes on a's
// device, and records it.
py::object DispatchBinary(OpSchema& op, const Tensor& a, const Tensor& b, bool reflected) {
  std::vector<Tensor> in = reflected ? std::vector<Tensor>{b, a} : std::vector<Tensor>{a, b};
  std::vector<AttrValue> attrs;
  attrs.reserve(op.attrs.size());
  for (const AttrSchema& s : op.attrs) attrs.push_back(s.def);
  ApplyAutocast(op, in, &attrs);
  std::vector<Tensor> out = Dispatch(op, in, attrs, a->device());
  MaybeRecord(op, in, attrs, out);
  return py::cast(std::move(out[0]));
}

// Whether the integer v is a value of dtype t (float dtypes hold any int64,
// rounded).
bool FitsDType(long long v, DgDType t) {
  switch (t) {
    case DG_UINT8: return v >= 0 && v <= 255;
    case DG_INT8: return v >= -128 && v <= 127;
    case DG_INT16: return v >= -32768 && v <= 32767;
    case DG_INT32: return v >= INT32_MIN && v <= INT32_MAX;
    case DG_UINT16: return v >= 0 && v <= UINT16_MAX;
    case DG_UINT32: return v >= 0 && v <= UINT32_MAX;
    case DG_UINT64: return v >= 0;  // past INT64_MAX: overflow, Python decides
    default: return true;
  }
}

// Fast path for tensor operators: same dtype and device go straight to the
// dispatcher; everything else (scalars, promotion) goes to Python.
py::object Binary(OpSchema* op, const Tensor& a, py::handle b, bool reflected) {
  Tensor bt;
  if (AsTensor(b, &bt)) {
    if (bt->dtype() == a->dtype() && SameDevice(bt->device(), a->device()) &&
        (op->inputs[0].dtypes & DG_DTYPE_BIT(a->dtype()))) {
      return DispatchBinary(*op, a, bt, reflected);
    }
  }
  // Python scalars: a 0-d tensor of a's dtype, made here, when that is what
  // the promotion rules give (see _tensor._binary_slow for the full rules);
  // on a non-host device the cached one (DeviceScalar), except while
  // tracing (a trace's constants are its own: Python makes them).
  DgDType t = a->dtype();
  bool is_float = DG_MASK_FLOAT & DG_DTYPE_BIT(t);
  bool is_int = DG_MASK_ANY_INT & DG_DTYPE_BIT(t);
  PyObject* o = b.ptr();
  const bool host = a->device().type == kHost.type;
  bool scalar_ok = t != DG_FLOAT16 && t != DG_BFLOAT16 && (host || Grad().tracing == 0) &&
                   (op->inputs[0].dtypes & DG_DTYPE_BIT(t)) &&
                   ((PyFloat_CheckExact(o) && is_float) ||
                    (PyLong_CheckExact(o) && (is_float || is_int)));
  if (scalar_ok) {
    alignas(8) unsigned char buf[8] = {};
    void* p = buf;
    if (PyFloat_CheckExact(o)) {
      double v = PyFloat_AS_DOUBLE(o);
      if (t == DG_FLOAT32) *static_cast<float*>(p) = static_cast<float>(v);
      else *static_cast<double*>(p) = v;
    } else {
      int overflow = 0;
      long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
      // Out of the dtype's range: Python decides (OverflowError as NumPy 2,
      // or the exact answer of a comparison).
      if (overflow || !FitsDType(v, t)) return Hooks().binary_slow(op->py_name, a, b, reflected);
      switch (t) {
        case DG_FLOAT32: *static_cast<float*>(p) = static_cast<float>(v); break;
        case DG_FLOAT64: *static_cast<double*>(p) = static_cast<double>(v); break;
        case DG_UINT8: *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v); break;
        case DG_INT8: *static_cast<int8_t*>(p) = static_cast<int8_t>(v); break;
        case DG_INT16: *static_cast<int16_t*>(p) = static_cast<int16_t>(v); break;
        case DG_INT32: *static_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
        case DG_UINT16: *static_cast<uint16_t*>(p) = static_cast<uint16_t>(v); break;
        case DG_UINT32: *static_cast<uint32_t*>(p) = static_cast<uint32_t>(v); break;
        case DG_UINT64: *static_cast<uint64_t*>(p) = static_cast<uint64_t>(v); break;
        default: *static_cast<int64_t*>(p) = static_cast<int64_t>(v); break;
      }
    }
    if (!host) return DispatchBinary(*op, a, DeviceScalar(a->device(), t, buf, DTypeSize(t)),
                                     reflected);
    Tensor s = TensorImpl::Empty(kHost, t, {});
    std::memcpy(s->data(), buf, DTypeSize(t));
    if (Grad().tracing > 0) {
      // A constant of the trace, exactly as _tensor._convert would record it.
      py::object st = py::cast(s);
      py::module_::import("dragon_core._graph.function").attr("note_created")(st);
    }
    return DispatchBinary(*op, a, s, reflected);
  }
  return Hooks().binary_slow(op->py_name, a, b, reflected);
}

// The autocast table: op -> policy (set from dragon_core.amp).
std::unordered_map<const OpSchema*, AutocastPolicy>& AutocastTable() {
  static std::unordered_map<const OpSchema*, AutocastPolicy> table;
  return table;
}

bool IsLowFloat(DgDType t) { return t == DG_FLOAT16 || t == DG_BFLOAT16; }

// x cast to `to`, dispatched and recorded (autograd, graph traces).
Tensor AutocastCast(const Tensor& x, DgDType to) {
  static OpSchema* cast = Registry::Get().FindOp("Cast");
  AttrValue dt(DG_ATTR_DTYPE);
  dt.v.present = 1;
  dt.v.i = to;
  std::vector<Tensor> in{x};
  std::vector<AttrValue> attrs{dt};
  std::vector<Tensor> out = Dispatch(*cast, in, attrs, x->device());
  MaybeRecord(*cast, in, attrs, out);
  return out[0];
}

// The autocast cast cache: within one autocast state of a thread, the
// cast of a tensor to a dtype is made once and handed to every later op that
// needs it while it is alive (the layer input read by the query, key and
// value projections; a weight read twice). Entries hold both tensors weakly,
// so the cache keeps no memory alive: a cast that nothing else holds (no
// autograd node, no caller) is gone and is made again. An entry is used only
// while the source and the cast are at the versions they had (no in-place
// write to either), the source's requires_grad and the grad mode are what
// they were (so the cast was recorded for autograd exactly as a new one
// would be), and no GradientTape is active nor a graph being traced (a
// tape or trace must see each op it depends on). Cleared whenever the
// thread's autocast state changes (entering or leaving a region, and the
// backward pass, which runs autocast off).
//
// A source that does not require grad may also be another tensor viewing
// the same bytes (same storage, offset, dtype, shape and strides, storage
// not written since): `linear` reshapes its input before the product, so
// the query, key and value projections each see a new view of one layer
// input. Only values matter for such a source (no gradient is routed
// through its cast); a source that requires grad must be the same tensor.
struct CastCacheEntry {
  const TensorImpl* key = nullptr;
  std::weak_ptr<TensorImpl> src, out;
  std::weak_ptr<Storage> storage;
  int64_t src_version = 0, out_version = 0, storage_version = 0, byte_offset = 0;
  Shape shape, strides;
  DgDType src_dtype = DG_FLOAT32, to = DG_FLOAT32;
  bool src_requires_grad = false, grad_enabled = false;
};

bool SameValuesView(const CastCacheEntry& e, const Tensor& x) {
  if (x->requires_grad || e.src_requires_grad || e.src_dtype != x->dtype() ||
      e.byte_offset != x->byte_offset() || e.shape != x->shape() || e.strides != x->strides())
    return false;
  std::shared_ptr<Storage> st = e.storage.lock();
  return st && st == x->storage() && e.storage_version == st->version;
}
constexpr size_t kMaxCastCache = 256;
thread_local std::vector<CastCacheEntry> t_cast_cache;

bool CastCacheUsable() {
  const GradState& g = Grad();
  return g.autocast_cache && g.tracing == 0 && g.tapes == 0;
}

// Memory the front end cannot see written: NumPy/DLPack-owned bytes
// (from_numpy of a buffer the caller keeps filling) and memory a writable
// NumPy/DLPack view was handed out for (x.numpy()[...] = v). Their version
// counters say nothing, so their casts are never cached.
bool WritableBehindOurBack(const Tensor& x) {
  const Storage& st = *x->storage();
  return !st.read_only() && (st.external() || st.exported);
}

Tensor CachedAutocastCast(const Tensor& x, DgDType to) {
  if (!CastCacheUsable() || WritableBehindOurBack(x)) return AutocastCast(x, to);
  const bool grad_enabled = Grad().enabled;
  for (CastCacheEntry& e : t_cast_cache) {
    if (!e.key || e.to != to) continue;
    if (e.key == x.get() && e.src.lock() == x) {
      Tensor out = e.out.lock();
      if (out && e.src_version == x->version() && e.out_version == out->version() &&
          e.src_requires_grad == x->requires_grad && e.grad_enabled == grad_enabled)
        return out;
      e.key = nullptr;  // stale: replaced below
    } else if (e.grad_enabled == grad_enabled && SameValuesView(e, x)) {
      Tensor out = e.out.lock();
      if (out && e.out_version == out->version()) return out;
    }
  }
  Tensor out = AutocastCast(x, to);
  // Drop stale and dead entries; past the limit, the oldest.
  // (An entry whose source died still serves other views of its bytes.)
  auto dead = [](const CastCacheEntry& e) {
    return !e.key || e.out.expired() || e.storage.expired();
  };
  t_cast_cache.erase(std::remove_if(t_cast_cache.begin(), t_cast_cache.end(), dead),
                     t_cast_cache.end());
  if (t_cast_cache.size() >= kMaxCastCache) t_cast_cache.erase(t_cast_cache.begin());
  CastCacheEntry e;
  e.key = x.get();
  e.src = x;
  e.out = out;
  e.src_version = x->version();
  e.out_version = out->version();
  e.to = to;
  e.src_requires_grad = x->requires_grad;
  e.grad_enabled = grad_enabled;
  e.storage = x->storage();
  e.storage_version = x->storage()->version;
  e.byte_offset = x->byte_offset();
  e.shape = x->shape();
  e.strides = x->strides();
  e.src_dtype = x->dtype();
  t_cast_cache.push_back(std::move(e));
  return out;
}

}  // namespace

void ApplyAutocast(const OpSchema& op, std::vector<Tensor>& inputs,
                   std::vector<AttrValue>* attrs) {
  const int target = Grad().autocast;
  if (target < 0) return;
  auto& table = AutocastTable();
  auto it = table.find(&op);
  if (it == table.end()) return;
  const DgDType low = static_cast<DgDType>(target);
  switch (it->second) {
    case AutocastPolicy::kLower:
      for (Tensor& t : inputs) {
        if (t && t->dtype() == DG_FLOAT32) t = CachedAutocastCast(t, low);
      }
      break;
    case AutocastPolicy::kLowerFloat32Out: {
      // The two operands (inputs 0 and 1) run in the 16-bit dtype; a bias
      // (MatMulBiasAct's input 2) is added to the product, so it takes the
      // product's dtype, decided below.
      const size_t n_operands = inputs.size() < 2 ? inputs.size() : 2;
      bool low_in = false;
      for (size_t k = 0; k < n_operands; ++k) {
        Tensor& t = inputs[k];
        if (t && t->dtype() == DG_FLOAT32) t = CachedAutocastCast(t, low);
        low_in = low_in || (t && t->dtype() == low);
      }
      // Runs in the 16-bit dtype: the product is written as float32 unless
      // the caller chose out_dtype.
      const bool runs_low = low_in && !inputs.empty() && inputs[0] && inputs[0]->dtype() == low;
      int out = runs_low ? static_cast<int>(low) : -1;
      for (size_t i = 0; runs_low && attrs && i < op.attrs.size() && i < attrs->size(); ++i) {
        AttrValue& v = (*attrs)[i];
        if (op.attrs[i].name == "out_dtype" && op.attrs[i].type == DG_ATTR_DTYPE) {
          if (!v.v.present) {
            v.v.type = DG_ATTR_DTYPE;
            v.v.present = 1;
            v.v.i = DG_FLOAT32;
          }
          out = static_cast<int>(v.v.i);
        }
      }
      // A float32 or 16-bit bias in the product's dtype (float32 for
      // autocast's float32 product: added to the unrounded accumulator).
      for (size_t k = n_operands; out >= 0 && k < inputs.size(); ++k) {
        Tensor& t = inputs[k];
        if (t && t->dtype() != out && (t->dtype() == DG_FLOAT32 || IsLowFloat(t->dtype())))
          t = CachedAutocastCast(t, static_cast<DgDType>(out));
      }
      break;
    }
    case AutocastPolicy::kFloat32:
      for (Tensor& t : inputs) {
        if (t && IsLowFloat(t->dtype())) t = CachedAutocastCast(t, DG_FLOAT32);
      }
      break;
    case AutocastPolicy::kPromote: {
      bool has32 = false, has_low = false;
      for (const Tensor& t : inputs) {
        if (!t) continue;
        has32 = has32 || t->dtype() == DG_FLOAT32;
        has_low = has_low || IsLowFloat(t->dtype());
      }
      if (has32 && has_low) {
        for (Tensor& t : inputs) {
          if (t && IsLowFloat(t->dtype())) t = CachedAutocastCast(t, DG_FLOAT32);
        }
      }
      break;
    }
    case AutocastPolicy::kNone: break;
  }
}

GradState& Grad() {
  thread_local GradState state;
  return state;
}

py::object AttrToPy(const DgAttrValue& v) {
  if (!v.present) return py::none();
  switch (v.type) {
    case DG_ATTR_INT: return py::int_(v.i);
    case DG_ATTR_FLOAT: return py::float_(v.f);
    case DG_ATTR_BOOL: return py::bool_(v.i != 0);
    case DG_ATTR_STRING: return py::str(v.s ? v.s : "");
    case DG_ATTR_DTYPE: return py::str(DTypeName(static_cast<DgDType>(v.i)));
    case DG_ATTR_INTS: {
      py::list l;
      for (int64_t i = 0; i < v.count; ++i) l.append(py::int_(v.ints[i]));
      return py::object(std::move(l));
    }
    case DG_ATTR_FLOATS: {
      py::list l;
      for (int64_t i = 0; i < v.count; ++i) l.append(py::float_(v.floats[i]));
      return py::object(std::move(l));
    }
  }
  return py::none();
}

void MaybeRecord(const OpSchema& op, const std::vector<Tensor>& inputs,
                 const std::vector<AttrValue>& attrs, const std::vector<Tensor>& outputs) {
  GradState& g = Grad();
  bool trace = g.tracing > 0 && Hooks().trace;
  bool needed = g.enabled && !(op.flags & DG_OP_NO_GRAD) && Hooks().record;
  if (needed) {
    needed = g.tapes > 0;
    for (size_t i = 0; i < inputs.size() && !needed; ++i) needed = inputs[i]->requires_grad;
  }
  if (!needed && !trace) return;
  py::list in, out;
  for (const Tensor& t : inputs) in.append(py::cast(t));
  for (const Tensor& t : outputs) out.append(py::cast(t));
  py::dict attr_dict;
  for (size_t i = 0; i < attrs.size(); ++i) attr_dict[py::str(op.attrs[i].name)] = AttrToPy(attrs[i].v);
  if (trace) Hooks().trace(op.name, in, attr_dict, out);
  if (needed) Hooks().record(op.name, in, attr_dict, out);
}

Tensor ToTensor(py::handle obj, const Tensor* like) {
  py::object dtype = py::none(), device = py::none();
  if (like) {
    dtype = py::int_((*like)->dtype());
    device = py::str(DeviceRegistry::Get().Name((*like)->device()));
  }
  // Another input's dtype: the value must survive the conversion.
  py::object t = like ? Hooks().convert(obj, dtype, device, py::arg("operand") = true)
                      : Hooks().convert(obj, dtype, device);
  return t.cast<Tensor>();
}

void BindOps(py::module_& m) {
  py::class_<OpHandle>(m, "OpHandle")
      .def_property_readonly("name", [](const OpHandle& h) { return h.op->name; })
      .def_property_readonly("py_name", [](const OpHandle& h) { return h.op->py_name; })
      .def("describe", [](const OpHandle& h) { return Describe(*h.op); })
      .def("__repr__", [](const OpHandle& h) { return "<op " + h.op->name + ">"; });

  m.def("op", [](const std::string& name) { return OpHandle{&RequireOp(name)}; },
        "The handle of a registered op (by op name or Python name).");
  m.def("elementwise_table", [] {
    // The rows of dragon/elementwise.h, for the fusion pass and its tests.
    py::list l;
#define DG_BIND_EW_U_(Kind, Opcode, OpType, Attr, Kernel, Cost)                    \
  l.append(py::make_tuple(#Kind, "unary", Opcode, OpType, Attr, #Kernel, #Cost));
#define DG_BIND_EW_B_(Kind, Opcode, OpType, Cost) \
  l.append(py::make_tuple(#Kind, "binary", Opcode, OpType, "", "", #Cost));
    DG_ELEMENTWISE_UNARY(DG_BIND_EW_U_)
    DG_ELEMENTWISE_BINARY(DG_BIND_EW_B_)
#undef DG_BIND_EW_U_
#undef DG_BIND_EW_B_
    return l;
  }, "The element-wise op table (dragon/elementwise.h): tuples (kind, arity, opcode, "
     "op type, attr, cpu_eigen kernel class, cost class); opcode -1 = not fusable.");
  m.def("_autocast_set", [](int dtype) {
    int old = Grad().autocast;
    Grad().autocast = dtype;
    if (dtype != old) t_cast_cache.clear();
    return old;
  }, "Sets this thread's autocast dtype code (-1: off); returns the previous one. A "
     "change clears the thread's autocast cast cache.");
  m.def("_autocast_cache", [](py::object enabled) {
    const bool old = Grad().autocast_cache;
    if (!enabled.is_none()) {
      Grad().autocast_cache = enabled.cast<bool>();
      if (!Grad().autocast_cache) t_cast_cache.clear();
    }
    return old;
  }, py::arg("enabled") = py::none(),
     "Whether this thread's autocast reuses live casts (autocast(cache_enabled=...)); with "
     "`enabled`, sets it and returns the old value.");
  m.def("_autocast_cache_size", [] {
    size_t n = 0;
    for (const CastCacheEntry& e : t_cast_cache) n += (e.key && !e.out.expired()) ? 1 : 0;
    return n;
  }, "How many live casts this thread's autocast cast cache holds.");
  m.def("_autocast_get", [] { return Grad().autocast; });
  m.def("_op_profile_start", [] { StartOpProfile(); },
        "Starts this thread's op profile (dragon_core.profiler), dropping any running one.");
  m.def("_op_profile_active", [] { return CurrentOpProfile() != nullptr; });
  m.def("_op_profile_stop", [] {
    // (op, input dtype codes, input shapes, output dtype codes, us, depth)
    py::list l;
    for (const OpRecord& r : StopOpProfile()) {
      py::list in_dtypes, in_shapes, out_dtypes;
      for (DgDType t : r.in_dtypes) in_dtypes.append(py::int_(static_cast<int>(t)));
      for (const Shape& sh : r.in_shapes) {
        py::tuple t(sh.size());
        for (size_t i = 0; i < sh.size(); ++i) t[i] = py::int_(sh[i]);
        in_shapes.append(t);
      }
      for (DgDType t : r.out_dtypes) out_dtypes.append(py::int_(static_cast<int>(t)));
      l.append(py::make_tuple(r.op->name, in_dtypes, in_shapes, out_dtypes, r.us, r.depth));
    }
    return l;
  }, "Stops this thread's op profile; returns its records in call order.");
  m.def("_autocast_policy", [](const std::string& name, int policy) {
    OpSchema* op = Registry::Get().FindOp(name);
    if (!op) return false;
    if (policy == 0) AutocastTable().erase(op);
    else AutocastTable()[op] = static_cast<AutocastPolicy>(policy);
    return true;
  }, "Sets the autocast policy of op `name` (0 none, 1 lower, 2 float32, 3 promote); "
     "False when no such op is registered.");
  m.def("_device_scalar", [](py::bytes value, int dtype, const std::string& device) {
    const std::string v = value;
    const DgDType t = static_cast<DgDType>(dtype);
    if (dtype < 0 || dtype >= DG_NUM_DTYPES || v.size() != DTypeSize(t) || v.size() > 8)
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str("_device_scalar: ", v.size(), " bytes for dtype code ", dtype));
    const DgDevice d = DeviceRegistry::Get().Parse(device);
    if (d.type == kHost.type)
      throw CoreError(DG_INVALID_ARGUMENT, "_device_scalar: scalars on the host are not cached");
    return DeviceScalar(d, t, v.data(), v.size());
  }, "The cached read-only 0-d tensor of dtype code `dtype` on `device` (not the host) "
     "whose value has the bytes `value` (made on first use).");
  m.def("_device_scalar_stress", [](const std::string& device, int threads, int iterations,
                                    int distinct, int check_every) {
    // A self-check of DeviceScalar's thread safety that Python threads
    // cannot give under the GIL: `threads` native threads, the GIL
    // released, each asking `iterations` times for a float32 scalar among
    // `distinct` values, reading every `check_every`-th back (a read-back
    // waits for the device: fewer of them keep the threads in the cache).
    const DgDevice d = DeviceRegistry::Get().Parse(device);
    if (d.type == kHost.type || threads < 1 || iterations < 0 || distinct < 1 ||
        check_every < 1)
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str("_device_scalar_stress: needs a non-host device, threads >= 1, "
                              "iterations >= 0, distinct >= 1 and check_every >= 1; got ",
                              device, ", ", threads, ", ", iterations, ", ", distinct, ", ",
                              check_every));
    std::atomic<int64_t> wrong{0}, calls{0};
    std::atomic<size_t> max_size{0};
    std::mutex error_mu;
    std::string error;
    {
      py::gil_scoped_release nogil;
      std::vector<std::thread> pool;
      for (int k = 0; k < threads; ++k) {
        pool.emplace_back([&, k] {
          try {
            uint32_t state = 2654435761u * static_cast<uint32_t>(k + 1);
            for (int i = 0; i < iterations; ++i) {
              state = state * 1664525u + 1013904223u;
              const float v = static_cast<float>((state >> 8) % static_cast<uint32_t>(distinct));
              const Tensor s = DeviceScalar(d, DG_FLOAT32, &v, sizeof(v));
              float got = v;
              if (i % check_every == 0) {
                const Tensor h = CopyTo(s, kHost);
                std::memcpy(&got, h->data(), sizeof(got));
              }
              if (got != v || s->ndim() != 0 || s->dtype() != DG_FLOAT32 ||
                  !s->storage()->read_only())
                ++wrong;
              const size_t n = Scalars().Size();
              size_t seen = max_size.load();
              while (n > seen && !max_size.compare_exchange_weak(seen, n)) {
              }
              ++calls;
            }
          } catch (const std::exception& e) {
            std::lock_guard<std::mutex> lock(error_mu);
            if (error.empty()) error = e.what();
          }
        });
      }
      for (std::thread& t : pool) t.join();
    }
    if (!error.empty()) throw CoreError(DG_INTERNAL, "_device_scalar_stress: " + error);
    py::dict r;
    r["calls"] = calls.load();
    r["wrong"] = wrong.load();
    r["max_size"] = max_size.load();
    return r;
  }, py::arg("device"), py::arg("threads"), py::arg("iterations"), py::arg("distinct"),
     py::arg("check_every") = 1,
     "Test aid: `threads` native threads (the GIL released) each fetch `iterations` cached "
     "float32 scalars among `distinct` values on `device`, reading every `check_every`-th "
     "back; returns "
     "{'calls', 'wrong' (values, dtype, shape or read-only flag not as asked), "
     "'max_size' (the most entries the cache was seen to hold)}.");
  m.def("_drop_device_scalars", [](py::object device) {
    if (device.is_none()) {
      Scalars().Drop(-1, 0);
      return;
    }
    const DgDevice d = DeviceRegistry::Get().Parse(py::str(device));
    Scalars().Drop(d.type, d.index);
  }, py::arg("device") = py::none(),
     "Forget the cached scalar operands of `device` (every device when None).");
  m.def("_device_scalar_count", [] { return Scalars().Size(); },
        "How many scalar operands are cached (all devices).");
  m.def("_device_scalar_limit", [](py::object limit) {
    if (limit.is_none()) return Scalars().Limit();
    const int64_t n = limit.cast<int64_t>();
    if (n < 0) throw CoreError(DG_INVALID_ARGUMENT, "_device_scalar_limit: negative limit");
    return Scalars().SetLimit(static_cast<size_t>(n));
  }, py::arg("limit") = py::none(),
     "The most scalar operands cached (256); with `limit`, sets it and returns the old one "
     "(0: none, every scalar operand is a new tensor and copy, as before the cache).");
  m.def("list_ops", [] {
    py::list l;
    for (OpSchema* op : Registry::Get().Ops()) l.append(Describe(*op));
    return l;
  });
  m.def("call", [](const OpHandle& h, py::tuple inputs, py::tuple attrs, py::object device) {
    const OpSchema& op = *h.op;
    std::vector<Tensor> in = ConvertInputs(op, inputs);
    std::vector<AttrValue> av = ConvertAttrs(op, attrs);
    ApplyAutocast(op, in, &av);
    DgDevice dev = kHost;
    if (!device.is_none()) dev = DeviceRegistry::Get().Parse(py::str(device));
    // Random ops draw a seed when theirs is -1; the record keeps -1 so a
    // traced graph draws a fresh one at every run.
    int64_t seed = op.seed_attr >= 0 ? av[op.seed_attr].v.i : 0;
    std::vector<Tensor> out;
    if (op.flags & DG_OP_COLLECTIVE) {
      // A collective may wait for peers: other Python threads run meanwhile.
      py::gil_scoped_release nogil;
      out = Dispatch(*h.op, in, av, dev);
    } else {
      out = Dispatch(*h.op, in, av, dev);
    }
    if (op.seed_attr >= 0) av[op.seed_attr].v.i = seed;
    MaybeRecord(op, in, av, out);
    return PackOutputs(op, std::move(out));
  }, py::arg("op"), py::arg("inputs"), py::arg("attrs"), py::arg("device") = py::none());
  m.def("infer_shape", [](const std::string& name, py::list inputs, py::tuple attrs) {
    OpSchema& op = RequireOp(name);
    std::vector<DgDType> dtypes;
    std::vector<Shape> shapes;
    for (auto item : inputs) {
      py::tuple pair = py::reinterpret_borrow<py::tuple>(item);
      shapes.push_back(pair[0].cast<Shape>());
      dtypes.push_back(static_cast<DgDType>(pair[1].cast<int>()));
    }
    std::vector<AttrValue> av = ConvertAttrs(op, attrs);
    py::list out;
    for (auto& o : InferShapes(op, dtypes, shapes, av)) {
      py::tuple shape(o.shape.size());
      for (size_t i = 0; i < o.shape.size(); ++i) shape[i] = py::int_(o.shape[i]);
      out.append(py::make_tuple(shape, static_cast<int>(o.dtype)));
    }
    return out;
  });

  // Operators with a C++ fast path.
  auto cls = py::reinterpret_borrow<py::object>(m.attr("Tensor"));
  struct Op2 { const char* dunder; const char* rdunder; const char* op; };
  static const Op2 kOps[] = {
      {"__add__", "__radd__", "Add"},     {"__sub__", "__rsub__", "Sub"},
      {"__mul__", "__rmul__", "Mul"},     {"__truediv__", "__rtruediv__", "Div"},
      {"__pow__", "__rpow__", "Pow"},     {"__matmul__", "__rmatmul__", "MatMul"},
      {"__eq__", nullptr, "Equal"},       {"__ne__", nullptr, "NotEqual"},
      {"__lt__", nullptr, "Less"},        {"__le__", nullptr, "LessEqual"},
      {"__gt__", nullptr, "Greater"},     {"__ge__", nullptr, "GreaterEqual"},
      // As NumPy: & | ^ ~ are bitwise (logical on bool), // and % floor.
      {"__and__", "__rand__", "BitwiseAnd"}, {"__or__", "__ror__", "BitwiseOr"},
      {"__xor__", "__rxor__", "BitwiseXor"},
      {"__lshift__", "__rlshift__", "LeftShift"}, {"__rshift__", "__rrshift__", "RightShift"},
      {"__floordiv__", "__rfloordiv__", "FloorDivide"}, {"__mod__", "__rmod__", "Mod"},
  };
  for (const Op2& o : kOps) {
    OpSchema* op = Registry::Get().FindOp(o.op);
    if (!op) continue;  // schemas missing: the Python layer reports it
    cls.attr(o.dunder) = py::cpp_function(
        [op](const Tensor& a, py::handle b) { return Binary(op, a, b, false); },
        py::is_method(cls), py::name(o.dunder));
    if (o.rdunder)
      cls.attr(o.rdunder) = py::cpp_function(
          [op](const Tensor& a, py::handle b) { return Binary(op, a, b, true); },
          py::is_method(cls), py::name(o.rdunder));
  }

  m.def("manual_seed", [](uint64_t s) { ManualSeed(s); },
        "Seed the global generator used by random ops.");
  m.def("next_seed", [] { return NextSeed(); });
  m.def("seed_state", [] { return SeedState(); },
        "The global generator's state (restore it with set_seed_state).");
  m.def("set_seed_state", [](uint64_t s) { SetSeedState(s); },
        "Restore the global generator's state from seed_state().");

  m.def("memory_stats", [](const std::string& device) {
    auto s = DeviceRegistry::Get().Allocator(DeviceRegistry::Get().Parse(device)).Stats();
    py::dict d;
    d["allocated"] = s.allocated;
    d["reserved"] = s.reserved;
    d["peak"] = s.peak;
    d["num_allocs"] = s.num_allocs;
    d["num_requests"] = s.num_requests;
    d["num_frees"] = s.num_frees;
    d["cross_stream_reuses"] = s.cross_stream_reuses;
    return d;
  });
  m.def("reset_peak", [](const std::string& device) {
    DeviceRegistry::Get().Allocator(DeviceRegistry::Get().Parse(device)).ResetPeak();
  });
  m.def("empty_cache", [](const std::string& device) {
    DeviceRegistry::Get().Allocator(DeviceRegistry::Get().Parse(device)).EmptyCache();
  });
}

}  // namespace dragon
