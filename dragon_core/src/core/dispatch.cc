#include "dispatch.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>

#include "device.h"
#include "host_api.h"
#include "small_vector.h"
#include "stream.h"

namespace dragon {
namespace {

std::atomic<uint64_t> g_seed_state{0x2545F4914F6CDD1DULL};
std::string (*g_no_kernel_hint)(const std::string&, const std::string&) = nullptr;

const ArgSchema& InputSchema(const OpSchema& op, size_t i) {
  return op.inputs[i < op.inputs.size() ? i : op.inputs.size() - 1];
}

std::string InputName(const OpSchema& op, size_t i) {
  if (op.inputs.empty()) return dg::Str("input", i);
  if (op.variadic_input() && i + 1 >= op.inputs.size())
    return dg::Str(op.inputs.back().name, "[", i + 1 - op.inputs.size(), "]");
  return InputSchema(op, i).name;
}

[[noreturn]] void Raise(const OpSchema& op, DgStatus code, const std::string& msg,
                        const std::vector<Tensor>* inputs,
                        ErrorKind kind = ErrorKind::kStatus) {
  std::string text = dg::Str(op.name, ": ", msg);
  if (inputs && !inputs->empty()) text += dg::Str(" (", DescribeInputs(op, *inputs), ")");
  CoreError e(code, text, kind);
  e.op = op.name;
  throw e;
}

void CheckArity(const OpSchema& op, size_t n, const std::vector<Tensor>* inputs) {
  size_t fixed = op.inputs.size() - (op.variadic_input() ? 1 : 0);
  size_t optional = 0;
  for (auto& a : op.inputs)
    if (a.flags & DG_ARG_OPTIONAL) ++optional;
  bool ok = op.variadic_input() ? n >= fixed : (n <= op.inputs.size() && n + optional >= op.inputs.size());
  if (!ok)
    Raise(op, DG_INVALID_ARGUMENT,
          dg::Str("expects ", op.variadic_input() ? "at least " : "", fixed - optional,
                  " input(s), got ", n),
          inputs);
}

template <typename DTypes>
void CheckDTypes(const OpSchema& op, const DTypes& dtypes,
                 const std::vector<Tensor>* inputs) {
  for (size_t i = 0; i < dtypes.size(); ++i) {
    const ArgSchema& a = InputSchema(op, i);
    if (!(a.dtypes & DG_DTYPE_BIT(dtypes[i])))
      Raise(op, DG_INVALID_ARGUMENT,
            dg::Str("input '", InputName(op, i), "' has dtype ", DTypeName(dtypes[i]),
                    ", expected one of: ", MaskToString(a.dtypes)),
            inputs);
  }
  if ((op.flags & DG_OP_SAME_DTYPE) && dtypes.size() > 1) {
    for (size_t i = 1; i < dtypes.size(); ++i)
      if (dtypes[i] != dtypes[0])
        Raise(op, DG_INVALID_ARGUMENT,
              dg::Str("inputs must share one dtype, got ", DTypeName(dtypes[0]), " ('",
                      InputName(op, 0), "') and ", DTypeName(dtypes[i]), " ('",
                      InputName(op, i), "'); cast one of them first"),
              inputs);
  }
}

template <typename Views>
std::vector<InferredOutput> RunInfer(const OpSchema& op, Views& views,
                                     const std::vector<AttrValue>& attrs,
                                     const std::vector<Tensor>* inputs) {
  SmallVector<const DgTensorView*, 6> view_ptrs(views.size());
  for (size_t i = 0; i < views.size(); ++i) view_ptrs[i] = &views[i];
  SmallVector<const DgAttrValue*, 8> attr_ptrs(attrs.size());
  for (size_t i = 0; i < attrs.size(); ++i) attr_ptrs[i] = &attrs[i].v;
  InferState st;
  st.fixed_outputs = op.variadic_output() ? -1 : static_cast<int32_t>(op.outputs.size());
  DgInferContext ctx{};
  ctx.struct_size = sizeof(DgInferContext);
  ctx.op_name = op.name.c_str();
  ctx.num_inputs = static_cast<int32_t>(views.size());
  ctx.inputs = view_ptrs.data();
  ctx.num_attrs = static_cast<int32_t>(attrs.size());
  ctx.attrs = attr_ptrs.data();
  ctx.attr_names = op.attr_names.data();
  ctx.op_data = op.user_data;
  ctx.host_ctx = &st;
  ctx.host = HostApi();
  DgStatus s = op.infer(&ctx);
  if (s != DG_OK || st.code != DG_OK) {
    DgStatus code = st.code != DG_OK ? st.code : s;
    Raise(op, code, st.message.empty() ? "shape inference failed" : st.message, inputs);
  }
  std::vector<InferredOutput> out;
  size_t expected = op.variadic_output() ? st.outs.size() : op.outputs.size();
  out.reserve(expected);
  if (st.outs.size() < expected) st.outs.resize(expected);
  for (size_t i = 0; i < expected; ++i) {
    if (!st.outs[i].set)
      Raise(op, DG_INTERNAL, dg::Str("shape function did not set output ", i), inputs);
    out.push_back({st.outs[i].dtype, std::move(st.outs[i].shape)});
  }
  return out;
}

}  // namespace

void SetNoKernelHint(std::string (*hint)(const std::string&, const std::string&)) {
  g_no_kernel_hint = hint;
}

void ManualSeed(uint64_t seed) { g_seed_state.store(seed * 0x9E3779B97F4A7C15ULL + 1); }

uint64_t SeedState() { return g_seed_state.load(); }

void SetSeedState(uint64_t state) { g_seed_state.store(state); }

uint64_t NextSeed() {
  // SplitMix64 over an atomic counter; the result is kept in [0, 2^62).
  uint64_t z = g_seed_state.fetch_add(0x9E3779B97F4A7C15ULL) + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (z ^ (z >> 31)) >> 2;
}

std::string DescribeInputs(const OpSchema& op, const std::vector<Tensor>& in) {
  std::string s = "inputs: ";
  for (size_t i = 0; i < in.size(); ++i) {
    if (i) s += ", ";
    s += dg::Str(InputName(op, i), ": ", DTypeName(in[i]->dtype()),
                 ShapeToString(in[i]->shape()), " on ",
                 DeviceRegistry::Get().Name(in[i]->device()));
  }
  return s;
}

std::vector<InferredOutput> InferShapes(OpSchema& op,
                                        const std::vector<DgDType>& dtypes,
                                        const std::vector<Shape>& shapes,
                                        const std::vector<AttrValue>& attrs) {
  CheckArity(op, dtypes.size(), nullptr);
  CheckDTypes(op, dtypes, nullptr);
  std::vector<DgTensorView> views(dtypes.size());
  std::vector<Shape> strides(dtypes.size());
  for (size_t i = 0; i < dtypes.size(); ++i) {
    strides[i] = ContiguousStrides(shapes[i]);
    DgTensorView& v = views[i];
    v.struct_size = sizeof(DgTensorView);
    v.dtype = dtypes[i];
    v.ndim = static_cast<int32_t>(shapes[i].size());
    v.shape = shapes[i].data();
    v.strides = strides[i].data();
  }
  return RunInfer(op, views, attrs, nullptr);
}

// Input x as a view with its axes permuted by the attribute "perm" (unset:
// reversed), checked against the inferred output; null when the attribute
// or the inferred output do not describe such a view.
static Tensor PermutedView(const OpSchema& op, const Tensor& x,
                           const std::vector<AttrValue>& attrs, const InferredOutput& out) {
  const int32_t idx = op.AttrIndex("perm");
  const size_t rank = x->shape().size();
  if (idx < 0 || out.dtype != x->dtype() || out.shape.size() != rank) return nullptr;
  const AttrValue& a = attrs[idx];
  Shape perm(rank);
  if (a.v.present) {
    if (a.ints.size() != rank) return nullptr;
    for (size_t i = 0; i < rank; ++i) {
      int64_t p = a.ints[i];
      if (p < 0) p += static_cast<int64_t>(rank);
      if (p < 0 || p >= static_cast<int64_t>(rank)) return nullptr;
      perm[i] = p;
    }
  } else {
    for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(rank - 1 - i);
  }
  Shape strides(rank);
  for (size_t i = 0; i < rank; ++i) {
    if (out.shape[i] != x->shape()[perm[i]]) return nullptr;
    strides[i] = x->strides()[perm[i]];
  }
  return std::make_shared<TensorImpl>(x->storage(), x->byte_offset(), x->dtype(), out.shape,
                                      std::move(strides));
}

// Input x with its axes permuted by `perm` (a view: shape and strides
// permuted, no copy).
static Tensor Permuted(const Tensor& x, const int64_t* perm) {
  const size_t rank = x->shape().size();
  Shape shape(rank), strides(rank);
  for (size_t i = 0; i < rank; ++i) {
    shape[i] = x->shape()[perm[i]];
    strides[i] = x->strides()[perm[i]];
  }
  return std::make_shared<TensorImpl>(x->storage(), x->byte_offset(), x->dtype(),
                                      std::move(shape), std::move(strides));
}

// Torch's rule for element-wise ops (kOpFlagElementwise): when every input
// of the output's full shape is channels-last (and not also contiguous),
// the outputs are channels-last too. Broadcast operands of the same rank
// (a bias [1, C, 1, 1]) and 0-d operands may join; an operand of another
// rank (it would broadcast along the trailing, now permuted, axes) keeps
// the default. The call then runs on the inputs viewed as NHWC (NDHWC),
// which are dense, so every kernel sees contiguous tensors, and the
// outputs are viewed back as NCHW. Returns false when the rule does not
// apply.
static bool ChannelsLastElementwise(OpSchema& op, const std::vector<Tensor>& inputs,
                                    std::vector<AttrValue>& attrs, DgDevice device,
                                    const std::vector<InferredOutput>& inferred, CallSite* site,
                                    std::vector<Tensor>* result) {
  if (inferred.empty() || inputs.empty()) return false;
  const Shape& shape = inferred[0].shape;
  const size_t rank = shape.size();
  if (rank != 4 && rank != 5) return false;
  for (const InferredOutput& o : inferred)
    if (o.shape != shape) return false;
  bool any = false;
  for (const Tensor& t : inputs) {
    if (t->ndim() == 0) continue;
    if (static_cast<size_t>(t->ndim()) != rank) return false;
    if (t->shape() != shape) continue;
    if (!t->is_strictly_channels_last()) return false;
    any = true;
  }
  if (!any) return false;
  static const int64_t kToLast4[] = {0, 2, 3, 1}, kToFirst4[] = {0, 3, 1, 2};
  static const int64_t kToLast5[] = {0, 2, 3, 4, 1}, kToFirst5[] = {0, 4, 1, 2, 3};
  const int64_t* to_last = rank == 4 ? kToLast4 : kToLast5;
  const int64_t* to_first = rank == 4 ? kToFirst4 : kToFirst5;
  std::vector<Tensor> permuted;
  permuted.reserve(inputs.size());
  for (const Tensor& t : inputs) permuted.push_back(t->ndim() == 0 ? t : Permuted(t, to_last));
  std::vector<Tensor> out = Dispatch(op, permuted, attrs, device, nullptr, site);
  for (Tensor& o : out) o = Permuted(o, to_first);
  *result = std::move(out);
  return true;
}

Tensor MakeContiguous(const Tensor& t) {
  static OpSchema* op = Registry::Get().FindOp("Contiguous");
  if (!op) op = Registry::Get().FindOp("Contiguous");
  if (!op)
    throw CoreError(DG_INTERNAL, "the core defines no Contiguous op");
  std::vector<AttrValue> attrs;
  return Dispatch(*op, {t}, attrs, t->device())[0];
}

namespace {

std::vector<Tensor> DispatchImpl(OpSchema& op, const std::vector<Tensor>& inputs,
                                 std::vector<AttrValue>& attrs, DgDevice device,
                                 const std::vector<Tensor>* preset, CallSite* site);

thread_local std::unique_ptr<OpProfile> t_op_profile;

}  // namespace

OpProfile* CurrentOpProfile() { return t_op_profile.get(); }

void StartOpProfile() { t_op_profile = std::make_unique<OpProfile>(); }

std::vector<OpRecord> StopOpProfile() {
  std::vector<OpRecord> out;
  if (t_op_profile) out.swap(t_op_profile->records);
  t_op_profile.reset();
  return out;
}

std::vector<Tensor> Dispatch(OpSchema& op, const std::vector<Tensor>& inputs,
                             std::vector<AttrValue>& attrs, DgDevice device,
                             const std::vector<Tensor>* preset, CallSite* site) {
  OpProfile* prof = t_op_profile.get();
  if (!prof) return DispatchImpl(op, inputs, attrs, device, preset, site);
  // Profiled: the record is made first (nested dispatches follow it) and
  // timed around the whole call; a failed call leaves no record.
  const size_t slot = prof->records.size();
  {
    OpRecord r;
    r.op = &op;
    r.depth = prof->depth;
    for (const Tensor& t : inputs) {
      r.in_dtypes.push_back(t ? t->dtype() : DG_FLOAT32);
      r.in_shapes.push_back(t ? t->shape() : Shape{});
    }
    prof->records.push_back(std::move(r));
  }
  const auto start = std::chrono::steady_clock::now();
  ++prof->depth;
  std::vector<Tensor> out;
  try {
    out = DispatchImpl(op, inputs, attrs, device, preset, site);
  } catch (...) {
    // The profile may have been stopped by a nested call's Python; only a
    // live one is touched.
    if (OpProfile* p = t_op_profile.get(); p == prof) {
      --p->depth;
      p->records.resize(slot);
    }
    throw;
  }
  const double us = std::chrono::duration<double, std::micro>(
      std::chrono::steady_clock::now() - start).count();
  if (OpProfile* p = t_op_profile.get(); p == prof) {
    --p->depth;
    if (slot < p->records.size()) {
      OpRecord& r = p->records[slot];
      r.us = us;
      for (const Tensor& t : out) r.out_dtypes.push_back(t->dtype());
    }
  }
  return out;
}

namespace {

std::vector<Tensor> DispatchImpl(OpSchema& op, const std::vector<Tensor>& inputs,
                                 std::vector<AttrValue>& attrs, DgDevice device,
                                 const std::vector<Tensor>* preset, CallSite* site) {
  const size_t n = inputs.size();
  CheckArity(op, n, &inputs);
  // Devices: every input on one device.
  if (n > 0) {
    device = inputs[0]->device();
    for (size_t i = 1; i < n; ++i) {
      if (!SameDevice(inputs[i]->device(), device)) {
        Raise(op, DG_INVALID_ARGUMENT,
              dg::Str("inputs are on different devices (",
                      DeviceRegistry::Get().Name(device), " and ",
                      DeviceRegistry::Get().Name(inputs[i]->device()),
                      "); move them with .to(device) first"),
              &inputs, ErrorKind::kStatus);
      }
    }
  }
  SmallVector<DgDType, 6> dtypes(n);
  for (size_t i = 0; i < n; ++i) dtypes[i] = inputs[i]->dtype();
  CheckDTypes(op, dtypes, &inputs);
  if (attrs.size() != op.attrs.size())
    Raise(op, DG_INTERNAL, dg::Str("expected ", op.attrs.size(), " attributes, got ", attrs.size()),
          &inputs);
  if (op.seed_attr >= 0 && attrs[op.seed_attr].v.i < 0) {
    attrs[op.seed_attr].v.i = static_cast<int64_t>(NextSeed());
  }

  // Shape inference (views without data).
  SmallVector<DgTensorView, 4> views(n);
  for (size_t i = 0; i < n; ++i) {
    views[i] = inputs[i]->View();
    views[i].data = nullptr;
  }
  std::vector<InferredOutput> inferred = RunInfer(op, views, attrs, &inputs);

  // A view op: output 0 aliases input 0's storage (same bytes, new shape,
  // contiguous strides); no kernel. A non-contiguous input (a Transpose's
  // view, a slice) is first made dense by one Contiguous copy, which output
  // 0 then aliases.
  if ((op.flags & kOpFlagView) && n > 0 && inferred.size() == 1 &&
      inferred[0].dtype == inputs[0]->dtype() &&
      NumElements(inferred[0].shape) == inputs[0]->numel()) {
    const Tensor src = inputs[0]->is_contiguous() ? inputs[0] : MakeContiguous(inputs[0]);
    Shape strides = ContiguousStrides(inferred[0].shape);
    return {std::make_shared<TensorImpl>(src->storage(), src->byte_offset(), inferred[0].dtype,
                                         std::move(inferred[0].shape), std::move(strides))};
  }
  // A permuting view (Transpose): output 0 aliases input 0 whatever its
  // strides, with the axes (shape and strides) permuted; no kernel.
  if ((op.flags & kOpFlagPermuteView) && n > 0 && inferred.size() == 1) {
    if (Tensor v = PermutedView(op, inputs[0], attrs, inferred[0])) return {v};
  }

  // Element-wise ops keep a shared channels-last layout (eager calls; a
  // graph's planned outputs, `preset`, stay contiguous).
  if ((op.flags & kOpFlagElementwise) && !preset) {
    bool strided = false;
    for (size_t i = 0; i < n && !strided; ++i) strided = !inputs[i]->is_contiguous();
    std::vector<Tensor> result;
    if (strided && ChannelsLastElementwise(op, inputs, attrs, device, inferred, site, &result))
      return result;
  }

  // Kernel candidates for the dispatch dtype.
  DgDType key = n > 0 ? dtypes[std::min<size_t>(op.dispatch_input, n - 1)]
                      : inferred[0].dtype;
  std::shared_ptr<const std::vector<const KernelEntry*>> candidates;
  try {
    candidates = Registry::Get().Candidates(op, device.type, key);
  } catch (const CoreError& e) {
    Raise(op, e.code(), e.what(), &inputs);
  }
  const std::string& device_name = DeviceRegistry::Get().type(device.type).name;
  if (candidates->empty()) {
    if (const PluginRecord* p = Registry::Get().BrokenProvider(op.name, device_name)) {
      CoreError e(DG_UNAVAILABLE,
                  dg::Str(op.name, ": its provider plugin '", p->name, "' failed to load: ",
                          p->error),
                  ErrorKind::kPlugin);
      e.op = op.name;
      e.plugin = p->name;
      throw e;
    }
    std::string registered;
    for (const KernelEntry* k : Registry::Get().Kernels(op.name)) {
      registered += dg::Str(registered.empty() ? "" : "; ", k->device, " {",
                            MaskToString(k->dtypes), "} from ", k->plugin,
                            k->dist.empty() ? "" : " (" + k->dist + ")");
    }
    std::string hint = g_no_kernel_hint ? g_no_kernel_hint(op.name, device_name) : "";
    CoreError e(DG_UNIMPLEMENTED,
                dg::Str(op.name, ": no kernel for device '", device_name, "' and dtype ",
                        DTypeName(key), ". Registered kernels: ",
                        registered.empty() ? "none" : registered, ".",
                        hint.empty() ? "" : " " + hint,
                        n ? dg::Str(" (", DescribeInputs(op, inputs), ")") : ""),
                ErrorKind::kNoKernel);
    e.op = op.name;
    throw e;
  }

  // Outputs from the device's caching allocator.
  std::vector<Tensor> outputs;
  outputs.reserve(inferred.size());
  for (size_t i = 0; i < inferred.size(); ++i) {
    auto& o = inferred[i];
    const Tensor* p = (preset && i < preset->size() && (*preset)[i]) ? &(*preset)[i] : nullptr;
    size_t need = static_cast<size_t>(NumElements(o.shape)) * DTypeSize(o.dtype);
    if (p && SameDevice((*p)->device(), device) && (*p)->byte_offset() == 0 &&
        (*p)->storage()->bytes() >= need && !(*p)->storage()->external() &&
        !(*p)->storage()->read_only()) {
      outputs.push_back(std::make_shared<TensorImpl>((*p)->storage(), 0, o.dtype, o.shape,
                                                     ContiguousStrides(o.shape)));
    } else {
      outputs.push_back(TensorImpl::Empty(device, o.dtype, std::move(o.shape)));
    }
  }

  // The frame.
  SmallVector<DgTensorView, 4> out_views(outputs.size());
  SmallVector<const DgTensorView*, 6> in_ptrs(n), out_ptrs(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    out_views[i] = outputs[i]->View();
    out_ptrs[i] = &out_views[i];
  }
  SmallVector<const DgAttrValue*, 8> attr_ptrs(attrs.size());
  for (size_t i = 0; i < attrs.size(); ++i) attr_ptrs[i] = &attrs[i].v;
  CallState st;
  st.device = device;
  DgCallFrame frame{};
  frame.struct_size = sizeof(DgCallFrame);
  frame.op_name = op.name.c_str();
  frame.num_inputs = static_cast<int32_t>(n);
  frame.inputs = in_ptrs.data();
  frame.num_outputs = static_cast<int32_t>(outputs.size());
  frame.outputs = out_ptrs.data();
  frame.num_attrs = static_cast<int32_t>(attrs.size());
  frame.attrs = attr_ptrs.data();
  frame.attr_names = op.attr_names.data();
  frame.device = device;
  // The thread's current stream (NULL on synchronous devices, stream.h).
  frame.stream = CurrentStream(device);
  frame.host_ctx = &st;
  frame.host = HostApi();

  // Strided inputs for kernels that read strides; the supports() predicate
  // sees those views.
  for (size_t i = 0; i < n; ++i) {
    views[i] = inputs[i]->View();
    in_ptrs[i] = &views[i];
  }
  const KernelEntry* chosen = nullptr;
  for (const KernelEntry* k : *candidates) {
    frame.kernel_data = k->user_data;
    if (!k->supports || k->supports(&frame)) {
      chosen = k;
      break;
    }
  }
  if (!chosen) {
    std::string names;
    for (const KernelEntry* k : *candidates) names += (names.empty() ? "" : ", ") + k->name;
    CoreError e(DG_UNIMPLEMENTED,
                dg::Str(op.name, ": no registered kernel supports this call on ", device_name,
                        " (", DescribeInputs(op, inputs), "); candidates that declined: ",
                        names),
                ErrorKind::kNoKernel);
    e.op = op.name;
    throw e;
  }
  // A kernel with DG_KERNEL_CHANNELS_LAST reads a channels-last input 0 as
  // is and writes output 0 channels-last too (eager; a preset output stays
  // as planned); its other inputs may be channels-last as well.
  const bool native_cl = (chosen->traits & DG_KERNEL_CHANNELS_LAST) != 0;
  if (native_cl && n > 0 && !outputs.empty() && !inputs[0]->is_contiguous() &&
      inputs[0]->is_channels_last() && outputs[0]->ndim() == inputs[0]->ndim() &&
      !(preset && !preset->empty() && (*preset)[0])) {
    outputs[0] = TensorImpl::EmptyChannelsLast(device, outputs[0]->dtype(), outputs[0]->shape());
    out_views[0] = outputs[0]->View();
  }
  std::vector<Tensor> dense;
  if (!(chosen->traits & DG_KERNEL_STRIDED_INPUTS)) {
    for (size_t i = 0; i < n; ++i) {
      if (!inputs[i]->is_contiguous() && !(native_cl && inputs[i]->is_channels_last())) {
        dense.push_back(MakeContiguous(inputs[i]));
        views[i] = dense.back()->View();
      }
    }
  }
  frame.kernel_data = chosen->user_data;
  // Call-site state for kernels that know it (ABI >= 1.2); reset when the
  // call site's kernel changes, since the state is that kernel's. A graph's
  // constants are dense copies it owns (build.py), so a constant input is
  // never replaced by a fresh contiguous copy above.
  if (site && chosen->abi_minor >= 2) {
    if (site->kernel != chosen) {
      site->Reset();
      site->kernel = chosen;
    }
    frame.call_site_state = &site->state;
  }
  // Order the call after what wrote its tensors. (A dense copy above was
  // made on this stream by this thread: it is ordered already.)
  if (frame.stream) {
    for (size_t i = 0; i < n; ++i) UseOnStream(*inputs[i]->storage(), frame.stream, false);
    for (auto& o : outputs) UseOnStream(*o->storage(), frame.stream, true);
  }
  DgStatus s;
  try {
    s = chosen->fn(&frame);
  } catch (...) {
    s = DG_INTERNAL;
    st.message = "a C++ exception escaped the kernel (kernels must not throw across the ABI)";
  }
  if (s != DG_OK || st.code != DG_OK) {
    DgStatus code = s != DG_OK ? s : st.code;
    CoreError e(code,
                dg::Str(op.name, ": kernel '", chosen->name, "' from plugin '", chosen->plugin,
                        "' failed: ", st.message.empty() ? "no message" : st.message,
                        n ? dg::Str(" (", DescribeInputs(op, inputs), ")") : ""));
    e.op = op.name;
    e.kernel = chosen->name;
    e.plugin = chosen->plugin;
    throw e;
  }
  return outputs;
}

}  // namespace

}  // namespace dragon
