#include "host_api.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace dragon {
namespace {

DgStatus SetError(void* ctx, DgStatus code, const char* message) {
  auto* h = static_cast<HostCtx*>(ctx);
  // The first error is the root cause (e.g. a rejected set_output that the
  // C++ sugar then reports again in general terms): keep it.
  if (h && h->code == DG_OK) {
    h->code = code == DG_OK ? DG_INTERNAL : code;
    h->message = message ? message : "";
  }
  return code;
}

void* AllocWorkspace(void* ctx, size_t bytes) {
  auto* h = static_cast<HostCtx*>(ctx);
  if (!h || h->kind != HostCtx::kCall) return nullptr;
  auto* call = static_cast<CallState*>(h);
  try {
    auto s = Storage::Allocate(call->device, bytes);
    void* p = s->data();
    call->workspaces.push_back(std::move(s));
    return p;
  } catch (const std::exception& e) {
    SetError(ctx, DG_RESOURCE_EXHAUSTED, e.what());
    return nullptr;
  }
}

DgStatus SetOutput(void* ctx, int32_t index, DgDType dtype, int32_t ndim,
                   const int64_t* shape) {
  auto* h = static_cast<HostCtx*>(ctx);
  if (!h || h->kind != HostCtx::kInfer)
    return SetError(ctx, DG_FAILED_PRECONDITION,
                    "set_output is only valid during shape inference");
  auto* st = static_cast<InferState*>(h);
  if (index < 0 || (st->fixed_outputs >= 0 && index >= st->fixed_outputs) ||
      index > 4096)
    return SetError(ctx, DG_INVALID_ARGUMENT,
                    dg::Str("set_output: output index ", index, " out of range").c_str());
  if (dtype < 0 || dtype >= DG_NUM_DTYPES)
    return SetError(ctx, DG_INVALID_ARGUMENT,
                    dg::Str("set_output: invalid dtype code ", dtype).c_str());
  if (ndim < 0 || (ndim > 0 && shape == nullptr))
    return SetError(ctx, DG_INVALID_ARGUMENT, "set_output: invalid shape");
  // NumPy's limit: the non-zero dimensions times the item size must fit in
  // int64 (a [2^63-1, 0] tensor is empty yet cannot be represented).
  int64_t bytes = static_cast<int64_t>(DTypeSize(dtype));
  for (int32_t i = 0; i < ndim; ++i) {
    if (shape[i] < 0)
      return SetError(ctx, DG_INVALID_ARGUMENT,
                      dg::Str("output ", index, ": negative dimension in ",
                              ShapeToString(shape, ndim)).c_str());
    if (shape[i] > 0 && __builtin_mul_overflow(bytes, shape[i], &bytes))
      return SetError(ctx, DG_INVALID_ARGUMENT,
                      dg::Str("output ", index, " of shape ", ShapeToString(shape, ndim),
                              " is too large: its non-zero dimensions times the ",
                              DTypeName(dtype), " item size exceed 2^63 bytes").c_str());
  }
  if (static_cast<int32_t>(st->outs.size()) <= index) st->outs.resize(index + 1);
  auto& o = st->outs[index];
  o.set = true;
  o.dtype = dtype;
  o.shape.assign(shape, shape + ndim);
  return DG_OK;
}

void Log(int32_t level, const char* message) {
  static const char* kLevels[] = {"debug", "info", "warning", "error"};
  const char* env = std::getenv("DRAGON_LOG_LEVEL");
  int32_t min_level = env ? std::atoi(env) : 2;
  if (level < min_level) return;
  std::fprintf(stderr, "[dragon %s] %s\n",
               kLevels[level < 0 ? 0 : (level > 3 ? 3 : level)],
               message ? message : "");
}

int32_t NumThreads() { return HostNumThreads(); }

}  // namespace

int32_t HostNumThreads() {
  static int32_t n = [] {
    const char* env = std::getenv("DRAGON_NUM_THREADS");
    if (env && std::atoi(env) > 0) return std::atoi(env);
    unsigned hc = std::thread::hardware_concurrency();
    return static_cast<int32_t>(hc ? hc : 1);
  }();
  return n;
}

const DgHostApi* HostApi() {
  static const DgHostApi api = [] {
    DgHostApi a{};
    a.struct_size = sizeof(DgHostApi);
    a.abi_major = DG_ABI_MAJOR;
    a.abi_minor = DG_ABI_MINOR;
    a.core_version = DRAGON_CORE_VERSION;
    a.set_error = &SetError;
    a.alloc_workspace = &AllocWorkspace;
    a.set_output = &SetOutput;
    a.log = &Log;
    a.num_threads = &NumThreads;
    return a;
  }();
  return &api;
}

}  // namespace dragon
