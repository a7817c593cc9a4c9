// Conv2d, Conv2dBiasAct, ConvTranspose2d and Conv2dBackpropFilter on cuda
// through cuDNN's legacy convolution API, opened with dlopen when a
// convolution first runs (the plugin never links cuDNN; runtime.h says
// where libcudnn.so.9 is searched). The few functions used are declared
// below from cuDNN's documented C API (cudnn_ops.h, cudnn_cnn.h); no cuDNN
// header is needed to build.
//
//   Conv2d, Conv2dBiasAct   cudnnConvolutionForward, then bias + relu
//   ConvTranspose2d         cudnnConvolutionBackwardData, then bias
//   Conv2dBackpropFilter    cudnnConvolutionBackwardFilter
//
// Registered above the direct kernels (conv.cu) with a supports() rule
// (cudnn_plan.h: Unsupported): a call cuDNN's descriptors cannot describe
// (bottom/right pads that change the output size, extents above 2^31-1,
// an empty extent) is declined, so the core runs the direct kernel and
// explain() lists both. Everything else runs cuDNN; a missing libcudnn is an
// UnavailableError, never a switch to the direct kernel.
//
// One cuDNN handle per (device, stream), bound to the stream once, its calls
// serialized by a lock (as the cuBLAS handles). Per geometry a plan (the
// descriptors and the algorithm, chosen by cuDNN's heuristics: see
// cudnn_plan.h) is made once and cached. The workspace comes from the
// call's workspace (ctx.workspace), never a cudaMalloc per call.
//
// Math: float32 is exact float32 (CUDNN_FMA_MATH) unless
// DRAGON_CUDA_ALLOW_TF32=1; float16/bfloat16 use tensor ops with float32
// accumulation; float64 computes in float64. Only deterministic algorithms
// unless DRAGON_CUDNN_DETERMINISTIC=0.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cudnn_plan.h"
#include "elementwise.cuh"

namespace dragon_cuda {
namespace {

using cudnn_plan::Candidate;
using cudnn_plan::ConvGeometry;
using cudnn_plan::Direction;

// ------------------------------------------------------------ cuDNN C API
// Our own declarations of the documented signatures. Handles and
// descriptors are opaque pointers, enumerations C ints.
using cudnnHandle_t = void*;
using cudnnTensorDescriptor_t = void*;
using cudnnFilterDescriptor_t = void*;
using cudnnConvolutionDescriptor_t = void*;
using cudnnStatus_t = int;

constexpr int kTensorNchw = 0, kTensorNhwc = 1;                   // cudnnTensorFormat_t
constexpr int kDataFloat = 0, kDataDouble = 1, kDataHalf = 2, kDataBfloat16 = 9;  // cudnnDataType_t
constexpr int kCrossCorrelation = 1;                              // cudnnConvolutionMode_t

// cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t share this layout.
struct AlgoPerf {
  int algo;
  cudnnStatus_t status;
  float time;
  size_t memory;
  int determinism;
  int math_type;
  int reserved[3];
};

struct Cudnn {
  size_t (*get_version)() = nullptr;
  const char* (*error_string)(cudnnStatus_t) = nullptr;
  void (*last_error_string)(char*, size_t) = nullptr;  // optional (cuDNN >= 9.0)
  cudnnStatus_t (*create)(cudnnHandle_t*) = nullptr;
  cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t) = nullptr;
  cudnnStatus_t (*create_tensor)(cudnnTensorDescriptor_t*) = nullptr;
  cudnnStatus_t (*set_tensor4d)(cudnnTensorDescriptor_t, int format, int dtype, int n, int c,
                                int h, int w) = nullptr;
  cudnnStatus_t (*destroy_tensor)(cudnnTensorDescriptor_t) = nullptr;
  cudnnStatus_t (*create_filter)(cudnnFilterDescriptor_t*) = nullptr;
  cudnnStatus_t (*set_filter4d)(cudnnFilterDescriptor_t, int dtype, int format, int k, int c,
                                int h, int w) = nullptr;
  cudnnStatus_t (*destroy_filter)(cudnnFilterDescriptor_t) = nullptr;
  cudnnStatus_t (*create_conv)(cudnnConvolutionDescriptor_t*) = nullptr;
  cudnnStatus_t (*set_conv2d)(cudnnConvolutionDescriptor_t, int pad_h, int pad_w, int u, int v,
                              int dilation_h, int dilation_w, int mode, int compute) = nullptr;
  cudnnStatus_t (*set_group_count)(cudnnConvolutionDescriptor_t, int) = nullptr;
  cudnnStatus_t (*set_math_type)(cudnnConvolutionDescriptor_t, int) = nullptr;
  cudnnStatus_t (*destroy_conv)(cudnnConvolutionDescriptor_t) = nullptr;
  // Forward: (handle, x, w, conv, y, ...).
  cudnnStatus_t (*fwd_max_count)(cudnnHandle_t, int*) = nullptr;
  cudnnStatus_t (*fwd_algorithms)(cudnnHandle_t, cudnnTensorDescriptor_t,
                                  cudnnFilterDescriptor_t, cudnnConvolutionDescriptor_t,
                                  cudnnTensorDescriptor_t, int, int*, AlgoPerf*) = nullptr;
  cudnnStatus_t (*fwd_workspace)(cudnnHandle_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t,
                                 cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, int,
                                 size_t*) = nullptr;
  cudnnStatus_t (*forward)(cudnnHandle_t, const void* alpha, cudnnTensorDescriptor_t, const void*,
                           cudnnFilterDescriptor_t, const void*, cudnnConvolutionDescriptor_t,
                           int algo, void* ws, size_t ws_size, const void* beta,
                           cudnnTensorDescriptor_t, void*) = nullptr;
  // Backward data: (handle, w, dy, conv, dx, ...).
  cudnnStatus_t (*bwd_data_max_count)(cudnnHandle_t, int*) = nullptr;
  cudnnStatus_t (*bwd_data_algorithms)(cudnnHandle_t, cudnnFilterDescriptor_t,
                                       cudnnTensorDescriptor_t, cudnnConvolutionDescriptor_t,
                                       cudnnTensorDescriptor_t, int, int*, AlgoPerf*) = nullptr;
  cudnnStatus_t (*bwd_data_workspace)(cudnnHandle_t, cudnnFilterDescriptor_t,
                                      cudnnTensorDescriptor_t, cudnnConvolutionDescriptor_t,
                                      cudnnTensorDescriptor_t, int, size_t*) = nullptr;
  cudnnStatus_t (*backward_data)(cudnnHandle_t, const void* alpha, cudnnFilterDescriptor_t,
                                 const void*, cudnnTensorDescriptor_t, const void*,
                                 cudnnConvolutionDescriptor_t, int algo, void* ws,
                                 size_t ws_size, const void* beta, cudnnTensorDescriptor_t,
                                 void*) = nullptr;
  // Backward filter: (handle, x, dy, conv, dw, ...).
  cudnnStatus_t (*bwd_filter_max_count)(cudnnHandle_t, int*) = nullptr;
  cudnnStatus_t (*bwd_filter_algorithms)(cudnnHandle_t, cudnnTensorDescriptor_t,
                                         cudnnTensorDescriptor_t, cudnnConvolutionDescriptor_t,
                                         cudnnFilterDescriptor_t, int, int*, AlgoPerf*) = nullptr;
  cudnnStatus_t (*bwd_filter_workspace)(cudnnHandle_t, cudnnTensorDescriptor_t,
                                        cudnnTensorDescriptor_t, cudnnConvolutionDescriptor_t,
                                        cudnnFilterDescriptor_t, int, size_t*) = nullptr;
  cudnnStatus_t (*backward_filter)(cudnnHandle_t, const void* alpha, cudnnTensorDescriptor_t,
                                   const void*, cudnnTensorDescriptor_t, const void*,
                                   cudnnConvolutionDescriptor_t, int algo, void* ws,
                                   size_t ws_size, const void* beta, cudnnFilterDescriptor_t,
                                   void*) = nullptr;
  std::string error;  // non-empty when cuDNN could not be opened

  // "CUDNN_STATUS_BAD_PARAM (cuDNN's last message)".
  std::string Text(cudnnStatus_t st) const {
    std::string t = error_string ? error_string(st) : ("status " + std::to_string(st));
    if (last_error_string) {
      char buf[512] = {0};
      last_error_string(buf, sizeof(buf) - 1);
      if (buf[0]) t += std::string(" (") + buf + ")";
    }
    return t;
  }
};

// The library opened: DRAGON_CUDNN_LIBRARY (read once; a file name searched
// as below, e.g. another cuDNN 9 build's soname) or libcudnn.so.9.
const char* LibName() {
  static const std::string name = [] {
    const char* v = std::getenv("DRAGON_CUDNN_LIBRARY");
    return std::string(v && v[0] ? v : "libcudnn.so.9");
  }();
  return name.c_str();
}

template <typename F>
bool Resolve(void* lib, const char* name, F* fn, std::string* error) {
  return ResolveSymbol(lib, LibName(), name, fn, error);
}

const Cudnn& TheCudnn() {
  static Cudnn* c = [] {
    auto* c = new Cudnn();  // never destroyed (used until exit)
    std::string error;
    void* lib = OpenLibrary(LibName(), &error);
    if (lib == nullptr) {
      c->error = error + InstallHint("nvidia-cudnn-cu13");
      return c;
    }
    if (!Resolve(lib, "cudnnGetVersion", &c->get_version, &error) ||
        !Resolve(lib, "cudnnGetErrorString", &c->error_string, &error) ||
        !Resolve(lib, "cudnnCreate", &c->create, &error) ||
        !Resolve(lib, "cudnnSetStream", &c->set_stream, &error) ||
        !Resolve(lib, "cudnnCreateTensorDescriptor", &c->create_tensor, &error) ||
        !Resolve(lib, "cudnnSetTensor4dDescriptor", &c->set_tensor4d, &error) ||
        !Resolve(lib, "cudnnDestroyTensorDescriptor", &c->destroy_tensor, &error) ||
        !Resolve(lib, "cudnnCreateFilterDescriptor", &c->create_filter, &error) ||
        !Resolve(lib, "cudnnSetFilter4dDescriptor", &c->set_filter4d, &error) ||
        !Resolve(lib, "cudnnDestroyFilterDescriptor", &c->destroy_filter, &error) ||
        !Resolve(lib, "cudnnCreateConvolutionDescriptor", &c->create_conv, &error) ||
        !Resolve(lib, "cudnnSetConvolution2dDescriptor", &c->set_conv2d, &error) ||
        !Resolve(lib, "cudnnSetConvolutionGroupCount", &c->set_group_count, &error) ||
        !Resolve(lib, "cudnnSetConvolutionMathType", &c->set_math_type, &error) ||
        !Resolve(lib, "cudnnDestroyConvolutionDescriptor", &c->destroy_conv, &error) ||
        !Resolve(lib, "cudnnGetConvolutionForwardAlgorithmMaxCount", &c->fwd_max_count,
                 &error) ||
        !Resolve(lib, "cudnnGetConvolutionForwardAlgorithm_v7", &c->fwd_algorithms, &error) ||
        !Resolve(lib, "cudnnGetConvolutionForwardWorkspaceSize", &c->fwd_workspace, &error) ||
        !Resolve(lib, "cudnnConvolutionForward", &c->forward, &error) ||
        !Resolve(lib, "cudnnGetConvolutionBackwardDataAlgorithmMaxCount",
                 &c->bwd_data_max_count, &error) ||
        !Resolve(lib, "cudnnGetConvolutionBackwardDataAlgorithm_v7", &c->bwd_data_algorithms,
                 &error) ||
        !Resolve(lib, "cudnnGetConvolutionBackwardDataWorkspaceSize", &c->bwd_data_workspace,
                 &error) ||
        !Resolve(lib, "cudnnConvolutionBackwardData", &c->backward_data, &error) ||
        !Resolve(lib, "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount",
                 &c->bwd_filter_max_count, &error) ||
        !Resolve(lib, "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
                 &c->bwd_filter_algorithms, &error) ||
        !Resolve(lib, "cudnnGetConvolutionBackwardFilterWorkspaceSize",
                 &c->bwd_filter_workspace, &error) ||
        !Resolve(lib, "cudnnConvolutionBackwardFilter", &c->backward_filter, &error)) {
      c->error = error;
      return c;
    }
    std::string ignored;  // an older cuDNN 9 may lack it: messages only
    Resolve(lib, "cudnnGetLastErrorString", &c->last_error_string, &ignored);
    return c;
  }();
  return *c;
}

using Handle = StreamHandle<cudnnHandle_t>;
// This library's handle table (runtime.h: HandleFor).
struct CudnnLib {};

Handle& GetHandle(const dg::KernelContext& ctx, const Cudnn& cd, cudaStream_t s) {
  return HandleFor<CudnnLib, cudnnHandle_t>(ctx.device().index, s, [&](cudnnHandle_t* h) {
    cudnnStatus_t st = cd.create(h);
    DG_CHECK(st == 0, DG_UNAVAILABLE, ctx.op_name(), " on cuda:", ctx.device().index,
             ": cudnnCreate failed: ", cd.Text(st), " (", LibName(), " version ",
             cd.get_version(), ")");
    st = cd.set_stream(*h, s);
    DG_CHECK(st == 0, DG_INTERNAL, ctx.op_name(), ": cudnnSetStream failed: ", cd.Text(st));
  });
}

bool AllowTf32() {
  const char* v = std::getenv("DRAGON_CUDA_ALLOW_TF32");
  return v && v[0] && std::strcmp(v, "0") != 0;
}

// DRAGON_CUDNN_DETERMINISTIC=0 also admits cuDNN's non-deterministic
// (atomic) algorithms; by default only deterministic ones run.
bool Deterministic() {
  const char* v = std::getenv("DRAGON_CUDNN_DETERMINISTIC");
  return !(v && std::strcmp(v, "0") == 0);
}

// The largest workspace an algorithm may take: DRAGON_CUDNN_WORKSPACE_MB
// (read once), 1024 MiB by default.
size_t WorkspaceLimit() {
  static const size_t limit = [] {
    const char* v = std::getenv("DRAGON_CUDNN_WORKSPACE_MB");
    long long mb = 1024;
    if (v && v[0]) {
      char* end = nullptr;
      const long long parsed = std::strtoll(v, &end, 10);
      if (end && *end == '\0' && parsed >= 0) mb = parsed;
    }
    return static_cast<size_t>(mb) << 20;
  }();
  return limit;
}

template <typename T>
struct CudnnTypes;
template <>
struct CudnnTypes<float> {
  static constexpr int kData = kDataFloat, kCompute = kDataFloat;
  using Scale = float;
};
template <>
struct CudnnTypes<double> {
  static constexpr int kData = kDataDouble, kCompute = kDataDouble;
  using Scale = double;
};
template <>
struct CudnnTypes<half> {
  static constexpr int kData = kDataHalf, kCompute = kDataFloat;
  using Scale = float;
};
template <>
struct CudnnTypes<bf16> {
  static constexpr int kData = kDataBfloat16, kCompute = kDataFloat;
  using Scale = float;
};

// ------------------------------------------------------------ geometry

// The call's geometry in cuDNN's terms (cudnn_plan.h). Throws on
// malformed attributes (the schema has checked them already).
ConvGeometry GeometryOf(const dg::KernelContext& ctx, Direction dir) {
  ConvGeometry g;
  g.dir = dir;
  g.device = ctx.device().index;
  const std::vector<int64_t> s = ctx.ints("strides"), p = ctx.ints("pads"),
                             d = ctx.ints("dilations");
  DG_CHECK(s.size() == 2 && d.size() == 2 && (p.size() == 2 || p.size() == 4), DG_INVALID_ARGUMENT,
           ctx.op_name(), ": strides and dilations need 2 values, pads 2 or 4");
  g.sh = s[0], g.sw = s[1], g.dh = d[0], g.dw = d[1];
  g.pad_top = p[0], g.pad_left = p[1];
  g.pad_bottom = p.size() == 4 ? p[2] : p[0];
  g.pad_right = p.size() == 4 ? p[3] : p[1];
  g.groups = ctx.i("groups");
  const dg::TensorRef a = ctx.input(0), b = ctx.input(1), out = ctx.output(0);
  DG_CHECK(a.ndim() == 4 && b.ndim() == 4 && out.ndim() == 4, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": operands must have rank 4");
  g.dtype = static_cast<int32_t>(a.dtype());
  g.tf32 = a.dtype() == DG_FLOAT32 && AllowTf32();
  // The call's layout is input 0's (cudnn_plan.h): NHWC when it is
  // channels-last and not also contiguous. float64 kernels do not declare
  // the trait, so their operands always arrive contiguous.
  {
    const std::vector<int64_t> shape = a.shape(), strides = a.strides();
    g.nhwc = !cudnn_plan::IsNchw(shape.data(), strides.data()) &&
             cudnn_plan::IsNhwc(shape.data(), strides.data());
  }
  g.deterministic = Deterministic();
  switch (dir) {
    case Direction::kForward:  // x [N, C, H, W], w [O, C/g, kh, kw] -> y [N, O, Ho, Wo]
      g.n = a.dim(0), g.c = a.dim(1), g.h = a.dim(2), g.w = a.dim(3);
      g.k = b.dim(0), g.kh = b.dim(2), g.kw = b.dim(3);
      g.ho = out.dim(2), g.wo = out.dim(3);
      break;
    case Direction::kBackwardData:  // x [N, C, H, W], w [C, O/g, kh, kw] -> y [N, O, Hy, Wy]
      g.n = a.dim(0), g.k = a.dim(1), g.ho = a.dim(2), g.wo = a.dim(3);
      g.kh = b.dim(2), g.kw = b.dim(3);
      g.c = out.dim(1), g.h = out.dim(2), g.w = out.dim(3);
      break;
    case Direction::kBackwardFilter:  // x [N, C, H, W], dy [N, O, Ho, Wo] -> dw [O, C/g, kh, kw]
      g.n = a.dim(0), g.c = a.dim(1), g.h = a.dim(2), g.w = a.dim(3);
      g.k = b.dim(1), g.ho = b.dim(2), g.wo = b.dim(3);
      g.kh = out.dim(2), g.kw = out.dim(3);
      break;
  }
  return g;
}

std::string GeometryText(const ConvGeometry& g) {
  return dg::Str("image [", g.n, ", ", g.c, ", ", g.h, ", ", g.w, "], filter [", g.k, ", ",
                 g.groups > 0 ? g.c / g.groups : 0, ", ", g.kh, ", ", g.kw, "], window [", g.n,
                 ", ", g.k, ", ", g.ho, ", ", g.wo, "], strides [", g.sh, ", ", g.sw,
                 "], pads [", g.pad_top, ", ", g.pad_left, ", ", g.pad_bottom, ", ", g.pad_right,
                 "], dilations [", g.dh, ", ", g.dw, "], groups ", g.groups, ", ",
                 dg::DTypeName(static_cast<DgDType>(g.dtype)), g.nhwc ? ", NHWC" : ", NCHW");
}

// supports(): cuDNN runs every call its descriptors can describe.
template <Direction kDir>
int32_t Supports(const DgCallFrame* f) {
  try {
    const dg::KernelContext ctx(f);
    return cudnn_plan::Unsupported(GeometryOf(ctx, kDir)).empty() ? 1 : 0;
  } catch (...) {  // a malformed call: decline, never throw
    return 0;
  }
}

// ------------------------------------------------------------ plans

// The descriptors and algorithm of one geometry.
struct Plan {
  const Cudnn* cd = nullptr;
  cudnnTensorDescriptor_t image = nullptr, window = nullptr;
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;
  int math = 0;
  size_t workspace = 0;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (conv) cd->destroy_conv(conv);
    if (filter) cd->destroy_filter(filter);
    if (window) cd->destroy_tensor(window);
    if (image) cd->destroy_tensor(image);
  }
};

cudnn_plan::PlanCache<Plan>& Plans() {
  static auto* cache = new cudnn_plan::PlanCache<Plan>(4096);  // never destroyed
  return *cache;
}

template <typename T>
std::shared_ptr<const Plan> MakePlan(const dg::KernelContext& ctx, const Cudnn& cd,
                                     cudnnHandle_t handle, const ConvGeometry& g) {
  auto p = std::make_shared<Plan>();
  p->cd = &cd;
  auto check = [&](cudnnStatus_t st, const char* what) {
    DG_CHECK(st == 0, DG_INTERNAL, ctx.op_name(), " on cuda:", g.device, ": ", what,
             " failed: ", cd.Text(st), " (", GeometryText(g), ")");
  };
  constexpr int dt = CudnnTypes<T>::kData;
  const int cg = static_cast<int>(g.c / g.groups);
  // One format for the three descriptors (the filter's NHWC is [k, kh, kw,
  // c / groups] in memory: a channels-last filter tensor).
  const int format = g.nhwc ? kTensorNhwc : kTensorNchw;
  check(cd.create_tensor(&p->image), "cudnnCreateTensorDescriptor");
  check(cd.set_tensor4d(p->image, format, dt, static_cast<int>(g.n), static_cast<int>(g.c),
                        static_cast<int>(g.h), static_cast<int>(g.w)),
        "cudnnSetTensor4dDescriptor (image)");
  check(cd.create_tensor(&p->window), "cudnnCreateTensorDescriptor");
  check(cd.set_tensor4d(p->window, format, dt, static_cast<int>(g.n), static_cast<int>(g.k),
                        static_cast<int>(g.ho), static_cast<int>(g.wo)),
        "cudnnSetTensor4dDescriptor (window)");
  check(cd.create_filter(&p->filter), "cudnnCreateFilterDescriptor");
  check(cd.set_filter4d(p->filter, dt, format, static_cast<int>(g.k), cg,
                        static_cast<int>(g.kh), static_cast<int>(g.kw)),
        "cudnnSetFilter4dDescriptor");
  check(cd.create_conv(&p->conv), "cudnnCreateConvolutionDescriptor");
  check(cd.set_conv2d(p->conv, static_cast<int>(g.pad_top), static_cast<int>(g.pad_left),
                      static_cast<int>(g.sh), static_cast<int>(g.sw), static_cast<int>(g.dh),
                      static_cast<int>(g.dw), kCrossCorrelation, CudnnTypes<T>::kCompute),
        "cudnnSetConvolution2dDescriptor");
  check(cd.set_group_count(p->conv, static_cast<int>(g.groups)), "cudnnSetConvolutionGroupCount");

  constexpr bool kHalf = std::is_same<T, half>::value || std::is_same<T, bf16>::value;
  const bool exact32 = std::is_same<T, float>::value && !g.tf32;
  // The math type the heuristics are asked with.
  const int ask_math = exact32 ? cudnn_plan::kFmaMath
                               : (kHalf ? cudnn_plan::kTensorOpMath : cudnn_plan::kDefaultMath);
  check(cd.set_math_type(p->conv, ask_math), "cudnnSetConvolutionMathType");

  int max_count = 0, returned = 0;
  std::vector<AlgoPerf> perf;
  switch (g.dir) {
    case Direction::kForward:
      check(cd.fwd_max_count(handle, &max_count), "cudnnGetConvolutionForwardAlgorithmMaxCount");
      perf.resize(max_count > 0 ? max_count : 1);
      check(cd.fwd_algorithms(handle, p->image, p->filter, p->conv, p->window, max_count,
                              &returned, perf.data()),
            "cudnnGetConvolutionForwardAlgorithm_v7");
      break;
    case Direction::kBackwardData:
      check(cd.bwd_data_max_count(handle, &max_count),
            "cudnnGetConvolutionBackwardDataAlgorithmMaxCount");
      perf.resize(max_count > 0 ? max_count : 1);
      check(cd.bwd_data_algorithms(handle, p->filter, p->window, p->conv, p->image, max_count,
                                   &returned, perf.data()),
            "cudnnGetConvolutionBackwardDataAlgorithm_v7");
      break;
    case Direction::kBackwardFilter:
      check(cd.bwd_filter_max_count(handle, &max_count),
            "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount");
      perf.resize(max_count > 0 ? max_count : 1);
      check(cd.bwd_filter_algorithms(handle, p->image, p->window, p->conv, p->filter, max_count,
                                     &returned, perf.data()),
            "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
      break;
  }
  std::vector<Candidate> cands;
  for (int i = 0; i < returned && i < static_cast<int>(perf.size()); ++i)
    cands.push_back({perf[i].algo, perf[i].status, perf[i].memory, perf[i].determinism,
                     perf[i].math_type});
  const size_t limit = WorkspaceLimit();
  std::string tried;
  for (size_t i : cudnn_plan::Acceptable(cands, limit, exact32, g.deterministic)) {
    const Candidate& c = cands[i];
    const int math = cudnn_plan::MathFor(c, exact32, kHalf);
    if (cd.set_math_type(p->conv, math) != 0) continue;
    size_t bytes = 0;
    cudnnStatus_t st = 0;
    switch (g.dir) {
      case Direction::kForward:
        st = cd.fwd_workspace(handle, p->image, p->filter, p->conv, p->window, c.algo, &bytes);
        break;
      case Direction::kBackwardData:
        st = cd.bwd_data_workspace(handle, p->filter, p->window, p->conv, p->image, c.algo,
                                   &bytes);
        break;
      case Direction::kBackwardFilter:
        st = cd.bwd_filter_workspace(handle, p->image, p->window, p->conv, p->filter, c.algo,
                                     &bytes);
        break;
    }
    if (st != 0 || bytes > limit) {
      tried += dg::Str(" algo ", c.algo, ": ", st != 0 ? cd.Text(st) : "workspace too large", ";");
      continue;
    }
    p->algo = c.algo;
    p->math = math;
    p->workspace = bytes;
    // DRAGON_LOG_LEVEL=0 shows each choice (once per geometry).
    const std::string line =
        dg::Str("cuda: cuDNN plan for ", ctx.op_name(), " (", GeometryText(g), "): algo ", c.algo,
                ", heuristic rank ", i, " of ", cands.size(), ", math ", math, ", workspace ",
                bytes, " bytes");
    ctx.frame()->host->log(0, line.c_str());
    return p;
  }
  std::string listed;
  for (const Candidate& c : cands)
    listed += dg::Str(" algo ", c.algo, " (status ", c.status, ", ", c.memory, " bytes, ",
                      c.determinism == 1 ? "deterministic" : "non-deterministic", ", math ",
                      c.math, ");");
  DG_CHECK(false, DG_UNIMPLEMENTED, ctx.op_name(), " on cuda:", g.device,
           ": cuDNN offers no ", g.deterministic ? "deterministic " : "",
           "algorithm within the workspace limit of ", limit,
           " bytes (DRAGON_CUDNN_WORKSPACE_MB) for ", GeometryText(g), "; heuristics listed:",
           listed, tried.empty() ? "" : " rejected:", tried);
  return p;
}

// y[n, o, i, j] = act(y + bias[o]) in place (y dense, NCHW or NHWC);
// `relu` keeps NaN.
template <typename T>
__global__ void ChannelBiasAct(T* y, const T* bias, int64_t total, int64_t hw, int64_t channels,
                               bool relu, bool nhwc) {
  DGC_LOOP(i, total) {
    Acc<T> v = Load(y[i]);
    if (bias) v += Load(bias[cudnn_plan::ChannelOf(i, hw, channels, nhwc)]);
    if (relu) v = v > Acc<T>(0) || v != v ? v : Acc<T>(0);
    y[i] = Store<T>(v);
  }
}

// dst (dense [n, c, h, w] in one layout) = src (the same tensor in the
// other layout): to_nhwc makes an NHWC copy of an NCHW tensor.
template <typename T>
__global__ void Relayout(const T* src, T* dst, int64_t total, int64_t c, int64_t h, int64_t w,
                         bool to_nhwc) {
  DGC_LOOP(i, total) { dst[i] = src[cudnn_plan::RelayoutSource(i, c, h, w, to_nhwc)]; }
}

// Whether operand t (4-D, contiguous or channels-last: the dispatcher
// guarantees one of them) is already in the call's layout.
bool InLayout(const dg::TensorRef& t, bool nhwc) {
  const std::vector<int64_t> shape = t.shape(), strides = t.strides();
  return nhwc ? cudnn_plan::IsNhwc(shape.data(), strides.data())
              : cudnn_plan::IsNchw(shape.data(), strides.data());
}

// Copies n elements of t ([n, c, h, w]) between `from` and `to`, in the
// direction that makes `to` hold the layout `to_nhwc`.
template <typename T>
void LaunchRelayout(dg::KernelContext& ctx, const dg::TensorRef& t, const void* from, void* to,
                    bool to_nhwc) {
  const int64_t total = t.numel();
  if (total == 0) return;
  Relayout<T><<<Blocks(total), kThreads, 0, Prepare(ctx)>>>(
      static_cast<const T*>(from), static_cast<T*>(to), total, t.dim(1), t.dim(2), t.dim(3),
      to_nhwc);
  CheckLaunch(ctx);
}

// Runs the call's convolution through cuDNN; the output is overwritten.
template <typename T>
void RunCudnn(dg::KernelContext& ctx, Direction dir) {
  const ConvGeometry g = GeometryOf(ctx, dir);
  const std::string why = cudnn_plan::Unsupported(g);
  DG_CHECK(why.empty(), DG_INTERNAL, ctx.op_name(), " on cuda: cuDNN cannot run ",
           GeometryText(g), " (", why, "); supports() should have declined");
  const cudaStream_t s = Prepare(ctx);
  const Cudnn& cd = TheCudnn();
  DG_CHECK(cd.error.empty(), DG_UNAVAILABLE, ctx.op_name(), " on cuda needs cuDNN: ", cd.error);
  Handle& h = GetHandle(ctx, cd, s);
  std::lock_guard<std::mutex> lock(h.mu);
  const std::shared_ptr<const Plan> p =
      Plans().Get(g, [&] { return MakePlan<T>(ctx, cd, h.h, g); });
  // Operands not in the call's layout (cudnn_plan.h) get a staging copy in
  // the workspace, after cuDNN's own part (256-byte aligned).
  const dg::TensorRef in0 = ctx.input(0), in1 = ctx.input(1), out0 = ctx.output(0);
  const bool stage1 = !InLayout(in1, g.nhwc), stage_out = !InLayout(out0, g.nhwc);
  auto round_up = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t cudnn_bytes = round_up(p->workspace);
  const size_t in1_bytes = stage1 ? round_up(in1.numel() * sizeof(T)) : 0;
  const size_t out_bytes = stage_out ? round_up(out0.numel() * sizeof(T)) : 0;
  const size_t total_bytes = cudnn_bytes + in1_bytes + out_bytes;
  char* base = total_bytes ? ctx.workspace<char>(total_bytes) : nullptr;
  void* ws = p->workspace ? static_cast<void*>(base) : nullptr;
  using S = typename CudnnTypes<T>::Scale;
  const S one = S(1), zero = S(0);
  const void* a = in0.raw_data();
  const void* b = in1.raw_data();
  void* out = out0.raw_data();
  if (stage1) {
    void* staged = base + cudnn_bytes;
    LaunchRelayout<T>(ctx, in1, b, staged, g.nhwc);
    b = staged;
  }
  if (stage_out) out = base + cudnn_bytes + in1_bytes;
  cudnnStatus_t st = 0;
  const char* what = "";
  switch (dir) {
    case Direction::kForward:
      what = "cudnnConvolutionForward";
      st = cd.forward(h.h, &one, p->image, a, p->filter, b, p->conv, p->algo, ws, p->workspace,
                      &zero, p->window, out);
      break;
    case Direction::kBackwardData:
      what = "cudnnConvolutionBackwardData";
      st = cd.backward_data(h.h, &one, p->filter, b, p->window, a, p->conv, p->algo, ws,
                            p->workspace, &zero, p->image, out);
      break;
    case Direction::kBackwardFilter:
      what = "cudnnConvolutionBackwardFilter";
      st = cd.backward_filter(h.h, &one, p->image, a, p->window, b, p->conv, p->algo, ws,
                              p->workspace, &zero, p->filter, out);
      break;
  }
  DG_CHECK(st == 0, DG_INTERNAL, ctx.op_name(), " on cuda:", g.device, ": ", what, " failed: ",
           cd.Text(st), " (algo ", p->algo, ", math ", p->math, ", workspace ", p->workspace,
           " bytes, ", GeometryText(g), ")");
  if (stage_out) LaunchRelayout<T>(ctx, out0, out, out0.raw_data(), !g.nhwc);
}

// The bias (input 2, when given) and the activation over output 0 [N, C, H, W].
template <typename T>
void BiasAct(dg::KernelContext& ctx, bool relu) {
  const dg::TensorRef y = ctx.output(0);
  const bool has_bias = ctx.num_inputs() > 2;
  if (!has_bias && !relu) return;
  const T* b = has_bias ? static_cast<const T*>(ctx.input(2).raw_data()) : nullptr;
  const std::vector<int64_t> shape = y.shape(), strides = y.strides();
  const bool nhwc = !cudnn_plan::IsNchw(shape.data(), strides.data());
  ChannelBiasAct<T><<<Blocks(y.numel()), kThreads, 0, Prepare(ctx)>>>(
      static_cast<T*>(y.raw_data()), b, y.numel(), y.dim(2) * y.dim(3), y.dim(1), relu, nhwc);
  CheckLaunch(ctx);
}

template <typename T>
void CudnnConv2d(dg::KernelContext& ctx) {
  RunCudnn<T>(ctx, Direction::kForward);
  BiasAct<T>(ctx, false);
}

template <typename T>
void CudnnConv2dBiasAct(dg::KernelContext& ctx) {
  const std::string act = ctx.s("activation");
  DG_CHECK(act == "none" || act == "relu", DG_INVALID_ARGUMENT, ctx.op_name(),
           ": activation must be 'none' or 'relu', got '", act, "'");
  RunCudnn<T>(ctx, Direction::kForward);
  BiasAct<T>(ctx, act == "relu");
}

template <typename T>
void CudnnConvTranspose2d(dg::KernelContext& ctx) {
  RunCudnn<T>(ctx, Direction::kBackwardData);
  BiasAct<T>(ctx, false);
}

template <typename T>
void CudnnConv2dBackpropFilter(dg::KernelContext& ctx) {
  RunCudnn<T>(ctx, Direction::kBackwardFilter);
}

// Above the direct kernels of conv.cu (priority 0).
constexpr int32_t kCudnnPriority = 10;

// float32, float16 and bfloat16 read channels-last operands natively (NHWC
// descriptors); float64 takes contiguous ones (cuDNN's NHWC support for
// doubles is narrow).
template <typename T>
constexpr uint32_t kConvTraits = std::is_same<T, double>::value ? 0u : DG_KERNEL_CHANNELS_LAST;

template <typename T>
int RegisterOne(const char* op, const char* name, dg::KernelFunc fn, DgSupportsFn supports) {
  return dg::internal::AddKernel(op, "cuda", dg::Bit(dg::DTypeOf<T>::value), kCudnnPriority,
                                 kConvTraits<T>,
                                 dg::Str(name, "<", dg::DTypeName(dg::DTypeOf<T>::value), ">")
                                     .c_str(),
                                 fn, supports);
}

#define DGC_CUDNN_KERNEL(OP, FUNC, DIR)                                                     \
  [[maybe_unused]] static int DG_UNIQUE_(dgc_cudnn_) =                                      \
      RegisterOne<float>(OP, "cudnn::" #FUNC, &FUNC<float>, &Supports<DIR>) +               \
      RegisterOne<double>(OP, "cudnn::" #FUNC, &FUNC<double>, &Supports<DIR>) +             \
      RegisterOne<half>(OP, "cudnn::" #FUNC, &FUNC<half>, &Supports<DIR>) +                 \
      RegisterOne<bf16>(OP, "cudnn::" #FUNC, &FUNC<bf16>, &Supports<DIR>)

DGC_CUDNN_KERNEL("Conv2d", CudnnConv2d, Direction::kForward);
DGC_CUDNN_KERNEL("Conv2dBiasAct", CudnnConv2dBiasAct, Direction::kForward);
DGC_CUDNN_KERNEL("ConvTranspose2d", CudnnConvTranspose2d, Direction::kBackwardData);
DGC_CUDNN_KERNEL("Conv2dBackpropFilter", CudnnConv2dBackpropFilter, Direction::kBackwardFilter);

}  // namespace
}  // namespace dragon_cuda
