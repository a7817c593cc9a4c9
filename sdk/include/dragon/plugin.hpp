// Header-only C++17 sugar over the Dragon C ABI (dragon/plugin.h).
//
// A kernel becomes a typed C++ function; an op schema becomes a chain of
// builder calls; registration happens at static-initialisation time into
// lists private to the plugin, and DG_PLUGIN(...) defines the single exported
// entry symbol. No C++ exception crosses the boundary: every callback the
// core sees is wrapped in try/catch and turned into a DgStatus + message.
//
//   template <typename T>
//   void Relu(dg::KernelContext& ctx) {
//     auto x = ctx.input(0); auto y = ctx.output(0);
//     const T* px = x.data<T>(); T* py = y.data<T>();
//     for (int64_t i = 0; i < x.numel(); ++i) py[i] = px[i] > T(0) ? px[i] : T(0);
//   }
//   DG_KERNEL("Relu", "cpu", Relu, float, double);
//   DG_PLUGIN("my_plugin", "0.1.0");
#ifndef DRAGON_PLUGIN_HPP_
#define DRAGON_PLUGIN_HPP_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "dragon/plugin.h"

namespace dg {

// ------------------------------------------------------------------ errors

class Error : public std::exception {
 public:
  Error(DgStatus code, std::string message)
      : code_(code), message_(std::move(message)) {}
  DgStatus code() const noexcept { return code_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  DgStatus code_;
  std::string message_;
};

namespace internal {
inline void Append(std::ostringstream&) {}
template <typename A, typename... R>
void Append(std::ostringstream& os, const A& a, const R&... r) {
  os << a;
  Append(os, r...);
}
}  // namespace internal

// Concatenates its arguments with operator<<.
template <typename... A>
std::string Str(const A&... a) {
  std::ostringstream os;
  internal::Append(os, a...);
  return os.str();
}

// "[2, 3]" ("[]" for a 0-d shape): the core's format of a shape in error
// messages.
inline std::string ShapeStr(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

// DG_CHECK(cond, DG_INVALID_ARGUMENT, "axis ", axis, " out of range")
#define DG_CHECK(cond, code, ...)                              \
  do {                                                         \
    if (!(cond)) throw ::dg::Error((code), ::dg::Str(__VA_ARGS__)); \
  } while (0)

// ------------------------------------------------------------------ dtypes

inline const char* DTypeName(DgDType t) {
  static const char* kNames[] = {"bool",    "uint8",    "int8",    "int16",
                                 "int32",   "int64",    "float16", "bfloat16",
                                 "float32", "float64", "uint16",   "uint32",
                                 "uint64"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == DG_NUM_DTYPES,
                "one name per dtype");
  return (t >= 0 && t < DG_NUM_DTYPES) ? kNames[t] : "invalid";
}

inline size_t DTypeSize(DgDType t) {
  static const size_t kSizes[] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8, 2, 4, 8};
  static_assert(sizeof(kSizes) / sizeof(kSizes[0]) == DG_NUM_DTYPES,
                "one size per dtype");
  return (t >= 0 && t < DG_NUM_DTYPES) ? kSizes[t] : 0;
}

// DTypeOf<T>::value maps a C++ type to its dtype code. Plugins add their own
// 16-bit float types with DG_DECLARE_DTYPE(Eigen::half, DG_FLOAT16).
template <typename T>
struct DTypeOf;
#define DG_DECLARE_DTYPE(TYPE, CODE)              \
  namespace dg {                                  \
  template <>                                     \
  struct DTypeOf<TYPE> {                          \
    static constexpr DgDType value = (CODE);      \
  };                                              \
  }
}  // namespace dg

DG_DECLARE_DTYPE(bool, DG_BOOL)
DG_DECLARE_DTYPE(uint8_t, DG_UINT8)
DG_DECLARE_DTYPE(int8_t, DG_INT8)
DG_DECLARE_DTYPE(int16_t, DG_INT16)
DG_DECLARE_DTYPE(int32_t, DG_INT32)
DG_DECLARE_DTYPE(int64_t, DG_INT64)
DG_DECLARE_DTYPE(uint16_t, DG_UINT16)
DG_DECLARE_DTYPE(uint32_t, DG_UINT32)
DG_DECLARE_DTYPE(uint64_t, DG_UINT64)
DG_DECLARE_DTYPE(float, DG_FLOAT32)
DG_DECLARE_DTYPE(double, DG_FLOAT64)

namespace dg {

// Masks usable in schemas and kernel registrations.
constexpr DgDTypeMask kFloat = DG_MASK_FLOAT;
constexpr DgDTypeMask kInt = DG_MASK_INT;
constexpr DgDTypeMask kNumeric = DG_MASK_NUMERIC;
constexpr DgDTypeMask kAll = DG_MASK_ALL;
// ABI >= 1.4: the ten dtypes above plus uint16/uint32/uint64 (kInt, kNumeric
// and kAll keep their 1.3 meaning; see DG_MASK_UINT_WIDE in plugin.h).
constexpr DgDTypeMask kUIntWide = DG_MASK_UINT_WIDE;
constexpr DgDTypeMask kAnyInt = DG_MASK_ANY_INT;
constexpr DgDTypeMask kAnyNumeric = DG_MASK_ANY_NUMERIC;
constexpr DgDTypeMask kAny = DG_MASK_ANY;
constexpr DgDTypeMask Bit(DgDType t) { return DG_DTYPE_BIT(t); }

// ------------------------------------------------------------------ tensors

// A non-owning view over a DgTensorView.
class TensorRef {
 public:
  explicit TensorRef(const DgTensorView* v) : v_(v) {}
  const DgTensorView* raw() const { return v_; }
  DgDType dtype() const { return v_->dtype; }
  int32_t ndim() const { return v_->ndim; }
  // dim(-1) is the last dimension.
  int64_t dim(int32_t i) const { return v_->shape[i < 0 ? i + v_->ndim : i]; }
  int64_t stride(int32_t i) const {
    return v_->strides[i < 0 ? i + v_->ndim : i];
  }
  std::vector<int64_t> shape() const {
    return std::vector<int64_t>(v_->shape, v_->shape + v_->ndim);
  }
  std::vector<int64_t> strides() const {
    return std::vector<int64_t>(v_->strides, v_->strides + v_->ndim);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int32_t i = 0; i < v_->ndim; ++i) n *= v_->shape[i];
    return n;
  }
  // Row-major dense: the core's rule exactly (and PyTorch's). A tensor
  // with no elements is contiguous whatever its strides; the stride of an
  // axis of size 1 never matters; a 0-d tensor is contiguous.
  bool is_contiguous() const {
    for (int32_t i = 0; i < v_->ndim; ++i)
      if (v_->shape[i] == 0) return true;
    int64_t expected = 1;
    for (int32_t i = v_->ndim - 1; i >= 0; --i) {
      if (v_->shape[i] != 1 && v_->strides[i] != expected) return false;
      expected *= v_->shape[i];
    }
    return true;
  }
  // Channels-last dense (DG_KERNEL_CHANNELS_LAST): a 4-D (5-D) tensor whose
  // strides are those of the dense NHWC (NDHWC) layout over its NCHW
  // (NCDHW) shape; axes of size 1 are ignored, so a tensor may be both
  // this and contiguous (C == 1, or H == W == 1). The core's rule exactly
  // (and PyTorch's): unlike is_contiguous there is no shortcut for an
  // empty tensor (the expected stride is the product of the sizes walked,
  // so 0 after an empty axis).
  bool is_channels_last() const {
    const int32_t r = v_->ndim;
    if (r != 4 && r != 5) return false;
    int64_t expected = 1;
    auto step = [&](int32_t d) {
      if (v_->shape[d] != 1 && v_->strides[d] != expected) return false;
      expected *= v_->shape[d];
      return true;
    };
    if (!step(1)) return false;
    for (int32_t d = r - 1; d >= 2; --d)
      if (!step(d)) return false;
    return step(0);
  }
  void* raw_data() const {
    return static_cast<char*>(v_->data) + v_->byte_offset;
  }
  // Typed pointer to the first element; checks the dtype.
  template <typename T>
  T* data() const {
    DG_CHECK(DTypeOf<std::remove_const_t<T>>::value == v_->dtype, DG_INTERNAL,
             "tensor holds ", DTypeName(v_->dtype), ", kernel asked for ",
             DTypeName(DTypeOf<std::remove_const_t<T>>::value));
    return reinterpret_cast<T*>(raw_data());
  }
  DgDevice device() const { return v_->device; }

 private:
  const DgTensorView* v_;
};

// ---------------------------------------------------------------- attributes

// Attribute lookup shared by kernels and shape functions.
class AttrReader {
 public:
  AttrReader(int32_t n, const DgAttrValue* const* values,
             const char* const* names, const char* op)
      : n_(n), values_(values), names_(names), op_(op) {}

  const DgAttrValue* find(const char* name) const {
    for (int32_t i = 0; i < n_; ++i)
      if (std::strcmp(names_[i], name) == 0) return values_[i];
    return nullptr;
  }
  const DgAttrValue& get(const char* name) const {
    const DgAttrValue* v = find(name);
    DG_CHECK(v != nullptr, DG_NOT_FOUND, op_, ": no attribute '", name, "'");
    return *v;
  }
  // False when the attribute is unknown or was left unset (None).
  bool has(const char* name) const {
    const DgAttrValue* v = find(name);
    return v != nullptr && v->present;
  }
  int64_t i(const char* name) const { return get(name).i; }
  double f(const char* name) const { return get(name).f; }
  bool b(const char* name) const { return get(name).i != 0; }
  DgDType dtype(const char* name) const {
    return static_cast<DgDType>(get(name).i);
  }
  std::string s(const char* name) const {
    const char* p = get(name).s;
    return p ? std::string(p) : std::string();
  }
  std::vector<int64_t> ints(const char* name) const {
    const DgAttrValue& v = get(name);
    return std::vector<int64_t>(v.ints, v.ints + v.count);
  }
  std::vector<double> floats(const char* name) const {
    const DgAttrValue& v = get(name);
    return std::vector<double>(v.floats, v.floats + v.count);
  }

 private:
  int32_t n_;
  const DgAttrValue* const* values_;
  const char* const* names_;
  const char* op_;
};

// ------------------------------------------------------------------ kernels

class KernelContext : public AttrReader {
 public:
  explicit KernelContext(const DgCallFrame* f)
      : AttrReader(f->num_attrs, f->attrs, f->attr_names, f->op_name),
        f_(f) {}
  const DgCallFrame* frame() const { return f_; }
  const char* op_name() const { return f_->op_name; }
  int32_t num_inputs() const { return f_->num_inputs; }
  int32_t num_outputs() const { return f_->num_outputs; }
  TensorRef input(int32_t i) const { return TensorRef(f_->inputs[i]); }
  TensorRef output(int32_t i) const { return TensorRef(f_->outputs[i]); }
  DgDevice device() const { return f_->device; }
  void* stream() const { return f_->stream; }
  int32_t num_threads() const {
    return DG_HOST_HAS(f_->host, num_threads) ? f_->host->num_threads() : 1;
  }
  // The call site's state in a compiled graph (ABI >= 1.2), else nullptr.
  DgCallSiteState* call_site() const {
    if (f_->struct_size <= offsetof(DgCallFrame, call_site_state) ||
        f_->call_site_state == nullptr)
      return nullptr;
    auto* s = static_cast<DgCallSiteState*>(f_->call_site_state);
    // The fields of ABI 1.2 (a later, longer struct still has them).
    constexpr size_t kV12 = offsetof(DgCallSiteState, destroy) +
                            sizeof(s->destroy);
    return s->struct_size >= kV12 ? s : nullptr;
  }
  // Whether input i is a constant of the graph (same storage, never
  // written, on every run): false in eager mode.
  bool input_is_constant(int32_t i) const {
    const DgCallSiteState* s = call_site();
    return s && i >= 0 && i < 64 && ((s->constant_inputs >> i) & 1u);
  }
  // The kernel's object kept at this call site: created with `new T()` on
  // first use and deleted by the core with the graph; nullptr in eager
  // mode. One kernel per call site: the core resets the state when it
  // chooses another.
  template <typename T>
  T* call_site_data() const {
    DgCallSiteState* s = call_site();
    if (!s) return nullptr;
    if (!s->data) {
      s->data = new T();
      s->destroy = [](void* p) { delete static_cast<T*>(p); };
    }
    return static_cast<T*>(s->data);
  }
  // Scratch memory valid until the kernel returns.
  template <typename T>
  T* workspace(size_t count) const {
    DG_CHECK(count <= SIZE_MAX / sizeof(T), DG_RESOURCE_EXHAUSTED,
             "workspace of ", count, " elements of ", sizeof(T),
             " bytes overflows size_t");
    void* p = f_->host->alloc_workspace(f_->host_ctx, count * sizeof(T));
    DG_CHECK(p != nullptr || count == 0, DG_RESOURCE_EXHAUSTED,
             "workspace of ", count * sizeof(T), " bytes");
    return static_cast<T*>(p);
  }

 private:
  const DgCallFrame* f_;
};

using KernelFunc = void (*)(KernelContext&);

namespace internal {

inline DgStatus Report(const DgHostApi* host, void* ctx, DgStatus code,
                       const char* msg) {
  if (host && host->set_error) host->set_error(ctx, code, msg);
  return code == DG_OK ? DG_INTERNAL : code;
}

// The one trampoline: frame->kernel_data holds the typed function.
inline DgStatus KernelTrampoline(const DgCallFrame* f) {
  try {
    KernelContext ctx(f);
    reinterpret_cast<KernelFunc>(f->kernel_data)(ctx);
    return DG_OK;
  } catch (const Error& e) {
    return Report(f->host, f->host_ctx, e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return Report(f->host, f->host_ctx, DG_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return Report(f->host, f->host_ctx, DG_INTERNAL, e.what());
  } catch (...) {
    return Report(f->host, f->host_ctx, DG_INTERNAL, "unknown C++ exception");
  }
}

}  // namespace internal

// ------------------------------------------------------------ shape inference

class InferContext : public AttrReader {
 public:
  explicit InferContext(const DgInferContext* c)
      : AttrReader(c->num_attrs, c->attrs, c->attr_names, c->op_name), c_(c) {}
  const char* op_name() const { return c_->op_name; }
  int32_t num_inputs() const { return c_->num_inputs; }
  TensorRef input(int32_t i) const { return TensorRef(c_->inputs[i]); }
  void* op_data() const { return c_->op_data; }
  void set_output(int32_t index, DgDType dtype,
                  const std::vector<int64_t>& shape) const {
    DgStatus s = c_->host->set_output(c_->host_ctx, index, dtype,
                                      static_cast<int32_t>(shape.size()),
                                      shape.data());
    DG_CHECK(s == DG_OK, s, op_name(), ": could not set output ", index);
  }

 private:
  const DgInferContext* c_;
};

using InferFunc = void (*)(InferContext&);

namespace internal {
inline DgStatus InferTrampoline(const DgInferContext* c);
}

// ------------------------------------------------------------- op builder

// Builds a DgOpDef. Storage lives in the builder; the core deep-copies the
// definition inside define_op().
class OpSchema {
 public:
  explicit OpSchema(std::string name) : name_(std::move(name)) {
    py_name_ = SnakeCase(name_);
  }
  OpSchema& PyName(std::string n) { py_name_ = std::move(n); return *this; }
  OpSchema& Doc(std::string d) { doc_ = std::move(d); return *this; }
  OpSchema& Input(std::string name, DgDTypeMask dtypes = kAll,
                  uint32_t flags = 0, std::string doc = "") {
    inputs_.push_back({std::move(name), dtypes, flags, std::move(doc)});
    return *this;
  }
  OpSchema& Output(std::string name, DgDTypeMask dtypes = kAll,
                   uint32_t flags = 0, std::string doc = "") {
    outputs_.push_back({std::move(name), dtypes, flags, std::move(doc)});
    return *this;
  }
  // Typed attributes with defaults.
  OpSchema& Attr(std::string name, int64_t def, std::string doc = "") {
    return AddAttr(std::move(name), DG_ATTR_INT, 0, doc).SetI(def);
  }
  OpSchema& Attr(std::string name, int def, std::string doc = "") {
    return Attr(std::move(name), static_cast<int64_t>(def), std::move(doc));
  }
  OpSchema& Attr(std::string name, double def, std::string doc = "") {
    AddAttr(std::move(name), DG_ATTR_FLOAT, 0, doc);
    attrs_.back().value.f = def;
    return *this;
  }
  OpSchema& Attr(std::string name, float def, std::string doc = "") {
    return Attr(std::move(name), static_cast<double>(def), std::move(doc));
  }
  OpSchema& Attr(std::string name, bool def, std::string doc = "") {
    return AddAttr(std::move(name), DG_ATTR_BOOL, 0, doc).SetI(def ? 1 : 0);
  }
  OpSchema& Attr(std::string name, const char* def, std::string doc = "") {
    AddAttr(std::move(name), DG_ATTR_STRING, 0, doc);
    attrs_.back().str = def;
    return *this;
  }
  OpSchema& Attr(std::string name, std::vector<int64_t> def,
                 std::string doc = "") {
    AddAttr(std::move(name), DG_ATTR_INTS, 0, doc);
    attrs_.back().ints = std::move(def);
    return *this;
  }
  OpSchema& Attr(std::string name, std::vector<double> def,
                 std::string doc = "") {
    AddAttr(std::move(name), DG_ATTR_FLOATS, 0, doc);
    attrs_.back().floats = std::move(def);
    return *this;
  }
  OpSchema& DTypeAttr(std::string name, DgDType def, std::string doc = "") {
    return AddAttr(std::move(name), DG_ATTR_DTYPE, 0, doc).SetI(def);
  }
  // An attribute the caller must give.
  OpSchema& RequiredAttr(std::string name, DgAttrType type,
                         std::string doc = "") {
    return AddAttr(std::move(name), type, DG_ATTR_REQUIRED, doc);
  }
  // An attribute that may be left unset (None in Python).
  OpSchema& OptionalAttr(std::string name, DgAttrType type,
                         std::string doc = "") {
    return AddAttr(std::move(name), type, DG_ATTR_OPTIONAL, doc);
  }
  OpSchema& Flags(uint32_t f) { flags_ |= f; return *this; }
  // Calls fn(*this): lets ops that share inputs and attributes (an op and
  // its fused variant) declare them in one function.
  template <typename Fn>
  OpSchema& Apply(Fn&& fn) {
    fn(*this);
    return *this;
  }
  OpSchema& DispatchInput(int32_t i) { dispatch_input_ = i; return *this; }
  OpSchema& Inplace(uint32_t input_mask) { inplace_ = input_mask; return *this; }
  OpSchema& Shape(InferFunc f) { infer_ = f; return *this; }

  const std::string& name() const { return name_; }

  // Fills a DgOpDef whose pointers refer into this builder.
  const DgOpDef& Build() {
    in_defs_ = MakeArgs(inputs_);
    out_defs_ = MakeArgs(outputs_);
    attr_defs_.clear();
    for (auto& a : attrs_) {
      a.value.struct_size = sizeof(DgAttrValue);
      a.value.type = a.type;
      a.value.present = 1;
      a.value.s = a.str.c_str();
      a.value.ints = a.ints.data();
      a.value.floats = a.floats.data();
      a.value.count = a.type == DG_ATTR_INTS
                          ? static_cast<int64_t>(a.ints.size())
                          : static_cast<int64_t>(a.floats.size());
      DgAttrDef d{};
      d.struct_size = sizeof(DgAttrDef);
      d.name = a.name.c_str();
      d.type = a.type;
      d.flags = a.flags;
      d.default_value = (a.flags & (DG_ATTR_REQUIRED | DG_ATTR_OPTIONAL))
                            ? nullptr
                            : &a.value;
      d.doc = a.doc.c_str();
      attr_defs_.push_back(d);
    }
    def_ = DgOpDef{};
    def_.struct_size = sizeof(DgOpDef);
    def_.name = name_.c_str();
    def_.py_name = py_name_.c_str();
    def_.doc = doc_.c_str();
    def_.num_inputs = static_cast<int32_t>(in_defs_.size());
    def_.inputs = in_defs_.data();
    def_.num_outputs = static_cast<int32_t>(out_defs_.size());
    def_.outputs = out_defs_.data();
    def_.num_attrs = static_cast<int32_t>(attr_defs_.size());
    def_.attrs = attr_defs_.data();
    def_.flags = flags_;
    def_.dispatch_input = dispatch_input_;
    def_.inplace_inputs = inplace_;
    def_.infer = infer_ ? &internal::InferTrampoline : nullptr;
    def_.user_data = reinterpret_cast<void*>(infer_);
    return def_;
  }

  static std::string SnakeCase(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (c >= 'A' && c <= 'Z') {
        bool prev_lower = i > 0 && ((s[i - 1] >= 'a' && s[i - 1] <= 'z') ||
                                    (s[i - 1] >= '0' && s[i - 1] <= '9'));
        bool next_lower = i + 1 < s.size() && s[i + 1] >= 'a' && s[i + 1] <= 'z';
        bool prev_upper = i > 0 && s[i - 1] >= 'A' && s[i - 1] <= 'Z';
        if (i > 0 && (prev_lower || (prev_upper && next_lower))) out += '_';
        out += static_cast<char>(c - 'A' + 'a');
      } else {
        out += c;
      }
    }
    return out;
  }

 private:
  struct Arg {
    std::string name;
    DgDTypeMask dtypes;
    uint32_t flags;
    std::string doc;
  };
  struct AttrSpec {
    std::string name;
    DgAttrType type;
    uint32_t flags;
    std::string doc;
    DgAttrValue value{};
    std::string str;
    std::vector<int64_t> ints;
    std::vector<double> floats;
  };
  OpSchema& AddAttr(std::string name, DgAttrType type, uint32_t flags,
                    const std::string& doc) {
    AttrSpec a;
    a.name = std::move(name);
    a.type = type;
    a.flags = flags;
    a.doc = doc;
    attrs_.push_back(std::move(a));
    return *this;
  }
  OpSchema& SetI(int64_t v) {
    attrs_.back().value.i = v;
    return *this;
  }
  static std::vector<DgArgDef> MakeArgs(const std::vector<Arg>& args) {
    std::vector<DgArgDef> out;
    for (const auto& a : args) {
      DgArgDef d{};
      d.struct_size = sizeof(DgArgDef);
      d.name = a.name.c_str();
      d.dtypes = a.dtypes;
      d.flags = a.flags;
      d.doc = a.doc.c_str();
      out.push_back(d);
    }
    return out;
  }

  std::string name_, py_name_, doc_;
  std::vector<Arg> inputs_, outputs_;
  std::vector<AttrSpec> attrs_;
  uint32_t flags_ = 0;
  int32_t dispatch_input_ = 0;
  uint32_t inplace_ = 0;
  InferFunc infer_ = nullptr;
  std::vector<DgArgDef> in_defs_, out_defs_;
  std::vector<DgAttrDef> attr_defs_;
  DgOpDef def_{};
};

namespace internal {

inline DgStatus InferTrampoline(const DgInferContext* c) {
  try {
    InferContext ctx(c);
    reinterpret_cast<InferFunc>(c->op_data)(ctx);
    return DG_OK;
  } catch (const Error& e) {
    return Report(c->host, c->host_ctx, e.code(), e.what());
  } catch (const std::exception& e) {
    return Report(c->host, c->host_ctx, DG_INTERNAL, e.what());
  } catch (...) {
    return Report(c->host, c->host_ctx, DG_INTERNAL, "unknown C++ exception");
  }
}

// Registrations collected at static-initialisation time, private to each
// shared object (hidden visibility), replayed by init().
struct KernelSpec {
  std::string op, device, name;
  DgDTypeMask dtypes;
  int32_t priority;
  uint32_t traits;
  KernelFunc fn;
  DgSupportsFn supports;
};

struct Lists {
  std::vector<std::unique_ptr<OpSchema>> ops;
  std::vector<KernelSpec> kernels;
  std::vector<DgDeviceDef> devices;
  std::vector<DgStatus (*)(const DgHostApi*, DgRegistrar*)> hooks;
};

inline Lists& StaticLists() {
  static Lists lists;
  return lists;
}

inline OpSchema& NewOp(const char* name) {
  auto& ops = StaticLists().ops;
  ops.push_back(std::make_unique<OpSchema>(name));
  return *ops.back();
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Registers Getter(TypeTag<T>) for every T, one kernel per dtype.
template <typename... Ts, typename Getter>
int AddTypedKernels(const char* op, const char* device, int32_t priority,
                    uint32_t traits, const char* name, Getter getter) {
  auto& ks = StaticLists().kernels;
  (ks.push_back(KernelSpec{op, device,
                           Str(name, "<", DTypeName(DTypeOf<Ts>::value), ">"),
                           Bit(DTypeOf<Ts>::value), priority, traits,
                           getter(TypeTag<Ts>{}), nullptr}),
   ...);
  return 0;
}

inline int AddKernel(const char* op, const char* device, DgDTypeMask dtypes,
                     int32_t priority, uint32_t traits, const char* name,
                     KernelFunc fn, DgSupportsFn supports = nullptr) {
  StaticLists().kernels.push_back(
      KernelSpec{op, device, name, dtypes, priority, traits, fn, supports});
  return 0;
}

inline int AddDevice(const DgDeviceDef& def) {
  StaticLists().devices.push_back(def);
  return 0;
}

inline int AddHook(DgStatus (*hook)(const DgHostApi*, DgRegistrar*)) {
  StaticLists().hooks.push_back(hook);
  return 0;
}

// Replays the static lists into the core's registrar.
inline DgStatus RegisterAll(const DgHostApi* host, DgRegistrar* reg) {
  try {
    Lists& lists = StaticLists();
    for (const auto& hook : lists.hooks) {
      DgStatus s = hook(host, reg);
      if (s != DG_OK) return s;
    }
    for (auto& d : lists.devices) {
      DgStatus s = reg->register_device(reg->ctx, &d);
      if (s != DG_OK) return s;
    }
    for (auto& op : lists.ops) {
      DgStatus s = reg->define_op(reg->ctx, &op->Build());
      if (s != DG_OK) return s;
    }
    for (auto& k : lists.kernels) {
      DgKernelDef d{};
      d.struct_size = sizeof(DgKernelDef);
      d.op = k.op.c_str();
      d.device_type = k.device.c_str();
      d.dtypes = k.dtypes;
      d.priority = k.priority;
      d.traits = k.traits;
      d.fn = &KernelTrampoline;
      d.supports = k.supports;
      d.user_data = reinterpret_cast<void*>(k.fn);
      d.name = k.name.c_str();
      DgStatus s = reg->register_kernel(reg->ctx, &d);
      if (s != DG_OK) return s;
    }
    return DG_OK;
  } catch (const std::exception& e) {
    if (reg->set_error) reg->set_error(reg->ctx, e.what());
    return DG_INTERNAL;
  } catch (...) {
    if (reg->set_error) reg->set_error(reg->ctx, "unknown C++ exception");
    return DG_INTERNAL;
  }
}

}  // namespace internal
}  // namespace dg

#define DG_CONCAT_INNER_(a, b) a##b
#define DG_CONCAT_(a, b) DG_CONCAT_INNER_(a, b)
#define DG_UNIQUE_(prefix) DG_CONCAT_(prefix, __COUNTER__)

// Defines an op schema at file scope: DG_OP(Relu).Input("x").Output("y")...;
#define DG_OP(NAME)                                                   \
  [[maybe_unused]] static ::dg::OpSchema& DG_UNIQUE_(dg_op_##NAME##_) = \
      ::dg::internal::NewOp(#NAME)

// DG_KERNEL("Relu", "cpu", Relu, float, double): one kernel per type,
// FUNC is a function template `template <typename T> void F(KernelContext&)`.
#define DG_KERNEL(OP, DEVICE, FUNC, ...) \
  DG_KERNEL_EX(OP, DEVICE, 0, 0, FUNC, __VA_ARGS__)

// As DG_KERNEL with a priority and DG_KERNEL_* traits.
#define DG_KERNEL_EX(OP, DEVICE, PRIORITY, TRAITS, FUNC, ...)              \
  [[maybe_unused]] static int DG_UNIQUE_(dg_kernel_) =                     \
      ::dg::internal::AddTypedKernels<__VA_ARGS__>(                        \
          OP, DEVICE, PRIORITY, TRAITS, #FUNC, [](auto tag) {              \
            return static_cast<::dg::KernelFunc>(                          \
                &FUNC<typename decltype(tag)::type>);                      \
          })

// One untyped kernel function serving every dtype in MASK.
#define DG_KERNEL_MASK(OP, DEVICE, MASK, PRIORITY, TRAITS, FUNC)            \
  [[maybe_unused]] static int DG_UNIQUE_(dg_kernel_) =                     \
      ::dg::internal::AddKernel(OP, DEVICE, MASK, PRIORITY, TRAITS, #FUNC,  \
                                &FUNC)

// Registers a DgDeviceDef (returned by an expression evaluated at load).
#define DG_DEVICE(DEF_EXPR)                                               \
  [[maybe_unused]] static int DG_UNIQUE_(dg_device_) =                     \
      ::dg::internal::AddDevice(DEF_EXPR)

// Runs FN(host, registrar) first during init (e.g. to probe hardware).
#define DG_INIT_HOOK(FN)                                                  \
  [[maybe_unused]] static int DG_UNIQUE_(dg_hook_) =                       \
      ::dg::internal::AddHook(FN)

// Defines the plugin's single exported symbol. Use once per plugin.
#define DG_PLUGIN_EX(NAME, VERSION, MIN_HOST_MINOR)                        \
  DG_ABI_NOTE(DG_ABI_MAJOR, DG_ABI_MINOR, (MIN_HOST_MINOR));               \
  extern "C" DG_EXPORT const DgPluginInfo* dragon_plugin_entry_v1(void) {  \
    static const DgPluginInfo info = {                                     \
        sizeof(DgPluginInfo), NAME,         VERSION,                       \
        DG_ABI_MAJOR,         DG_ABI_MINOR, (MIN_HOST_MINOR),              \
        &::dg::internal::RegisterAll};                                     \
    return &info;                                                          \
  }
#define DG_PLUGIN(NAME, VERSION) DG_PLUGIN_EX(NAME, VERSION, 0)

#endif  // DRAGON_PLUGIN_HPP_
