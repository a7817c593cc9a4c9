// Reductions on cuda, matching cpu_eigen (reduce.cc, argreduce.cc,
// softmax.cc): Sum, Prod, Mean, Max, Min over a set of axes (inputs read
// through their strides), ArgMax/ArgMin over one axis or all, Softmax and
// LogSoftmax along an axis. Max/Min propagate NaN; ArgMax/ArgMin give the
// first index of ties and treat NaN as the most extreme value (first NaN
// wins). Floats accumulate in double, 16-bit floats in float, integers
// in 64 bits (wrapping as the CPU's integer sums do).
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "elementwise.cuh"

namespace dragon_cuda {
namespace {

constexpr uint32_t kStrided = DG_KERNEL_STRIDED_INPUTS;

template <typename T>
struct RedAcc {
  using type = std::conditional_t<std::is_integral<T>::value,
                                  std::conditional_t<std::is_unsigned<T>::value || std::is_same<T, bool>::value,
                                                     uint64_t, int64_t>,
                                  std::conditional_t<kIsHalf<T>, float, double>>;
};

template <typename A>
__device__ inline bool IsNanA(A x) {
  if constexpr (std::is_floating_point<A>::value) {
    return x != x;
  } else {
    return false;
  }
}

struct SumR {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    } else {
      return a + b;
    }
  }
  template <typename A>
  static A Identity() { return A(0); }
};
struct ProdR {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    if constexpr (std::is_integral<A>::value) {
      return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    } else {
      return a * b;
    }
  }
  template <typename A>
  static A Identity() { return A(1); }
};
struct MaxR {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    if (IsNanA(a)) return a;
    if (IsNanA(b)) return b;
    return a > b ? a : b;
  }
  template <typename A>
  static A Identity() {
    return std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                                : std::numeric_limits<A>::lowest();
  }
};
struct MinR {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    if (IsNanA(a)) return a;
    if (IsNanA(b)) return b;
    return a < b ? a : b;
  }
  template <typename A>
  static A Identity() {
    return std::numeric_limits<A>::has_infinity ? std::numeric_limits<A>::infinity()
                                                : std::numeric_limits<A>::max();
  }
};

// The input's axes split into kept (indexing the output) and reduced ones.
struct Plan {
  Indexer kept, red;  // strides[0]: the input's strides on those axes
  int64_t num_out = 1, num_red = 1;
};

Plan MakePlan(const dg::KernelContext& ctx, const std::vector<bool>& reduce) {
  const dg::TensorRef x = ctx.input(0);
  const std::vector<int64_t> shape = x.shape(), strides = x.strides();
  std::vector<int64_t> ks, kst, rs, rst;
  Plan p;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (reduce[d]) {
      rs.push_back(shape[d]);
      rst.push_back(strides[d]);
      p.num_red *= shape[d];
    } else {
      ks.push_back(shape[d]);
      kst.push_back(strides[d]);
      p.num_out *= shape[d];
    }
  }
  p.kept = MakeIndexer(ctx.op_name(), ks, {kst});
  p.red = MakeIndexer(ctx.op_name(), rs, {rst});
  return p;
}

std::vector<bool> ReducedAxes(const dg::KernelContext& ctx) {
  const int32_t nd = ctx.input(0).ndim();
  std::vector<bool> reduce(nd, !ctx.has("axes"));
  if (ctx.has("axes"))
    for (int64_t a : ctx.ints("axes")) reduce[a < 0 ? a + nd : a] = true;
  return reduce;
}

// Post-processing of the accumulated value: identity, or /n for Mean.
struct NoPost {
  template <typename A>
  __device__ A operator()(A v) const { return v; }
};
struct DivPost {
  double n;
  template <typename A>
  __device__ A operator()(A v) const { return static_cast<A>(v / static_cast<A>(n)); }
};

// One block per output element (many reduced elements), grid-striding.
template <typename T, typename Out, typename A, typename R, typename P>
__global__ void BlockReduce(const T* x, Out* y, Plan p, A init, R r, P post) {
  __shared__ A buf[kThreads];
  for (int64_t o = blockIdx.x; o < p.num_out; o += gridDim.x) {
    int64_t base = 0;
    p.kept.Offsets(o, &base, 1);
    A acc = init;
    for (int64_t j = threadIdx.x; j < p.num_red; j += blockDim.x) {
      int64_t off = 0;
      p.red.Offsets(j, &off, 1);
      acc = r(acc, static_cast<A>(Load(x[base + off])));
    }
    buf[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (static_cast<int>(threadIdx.x) < s) buf[threadIdx.x] = r(buf[threadIdx.x], buf[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) y[o] = static_cast<Out>(post(buf[0]));
    __syncthreads();
  }
}

// One thread per output element (few reduced elements each).
template <typename T, typename Out, typename A, typename R, typename P>
__global__ void ThreadReduce(const T* x, Out* y, Plan p, A init, R r, P post) {
  DGC_LOOP(o, p.num_out) {
    int64_t base = 0;
    p.kept.Offsets(o, &base, 1);
    A acc = init;
    for (int64_t j = 0; j < p.num_red; ++j) {
      int64_t off = 0;
      p.red.Offsets(j, &off, 1);
      acc = r(acc, static_cast<A>(Load(x[base + off])));
    }
    y[o] = static_cast<Out>(post(acc));
  }
}

// x dense [rows, cols] reduced over its rows (a bias gradient: dy [batch,
// features] summed over the batch). A block covers 32 columns with 8 row
// groups: group g combines rows g, g + 8, ... (each a 32-wide coalesced
// load, where BlockReduce would read one column a value per cache line),
// then the 8 group values are combined in a fixed order.
constexpr int kColGroups = kThreads / 32;

template <typename T, typename Out, typename A, typename R, typename P>
__global__ void ColumnReduce(const T* x, Out* y, int64_t rows, int64_t cols, A init, R r,
                             P post) {
  __shared__ A buf[kColGroups][32];
  const int lane = threadIdx.x & 31, g = threadIdx.x >> 5;
  for (int64_t c0 = blockIdx.x * int64_t{32}; c0 < cols; c0 += int64_t{32} * gridDim.x) {
    const int64_t c = c0 + lane;
    A acc = init;
    if (c < cols)
      for (int64_t row = g; row < rows; row += kColGroups)
        acc = r(acc, static_cast<A>(Load(x[row * cols + c])));
    buf[g][lane] = acc;
    __syncthreads();
    if (g == 0 && c < cols) {
      A v = buf[0][lane];
      for (int k = 1; k < kColGroups; ++k) v = r(v, buf[k][lane]);
      y[c] = static_cast<Out>(post(v));
    }
    __syncthreads();
  }
}

// Whether the plan is a dense [rows, cols] input reduced over its rows.
bool IsColumnReduction(const Plan& p) {
  return p.kept.ndim == 1 && p.kept.strides[0][0] == 1 && p.red.ndim == 1 &&
         p.red.strides[0][0] == p.num_out;
}

template <typename T, typename Out, typename R, typename P>
void Reduce(dg::KernelContext& ctx, R r, P post) {
  using A = typename RedAcc<T>::type;
  const Plan p = MakePlan(ctx, ReducedAxes(ctx));
  if (p.num_out == 0) return;
  cudaStream_t s = Prepare(ctx);
  const T* x = static_cast<const T*>(ctx.input(0).raw_data());
  Out* y = static_cast<Out*>(ctx.output(0).raw_data());
  const A init = R::template Identity<A>();
  if (p.num_out >= 32 && p.num_red > 1 && p.num_red <= 4096 && IsColumnReduction(p)) {
    const int64_t blocks = (p.num_out + 31) / 32;
    ColumnReduce<T, Out, A, R, P><<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535),
                                    kThreads, 0, s>>>(x, y, p.num_red, p.num_out, init, r, post);
  } else if (p.num_red <= 32) {
    ThreadReduce<T, Out, A, R, P><<<Blocks(p.num_out), kThreads, 0, s>>>(x, y, p, init, r, post);
  } else {
    const int64_t blocks = p.num_out < 65535LL * 16 ? p.num_out : 65535LL * 16;
    BlockReduce<T, Out, A, R, P><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(x, y, p, init,
                                                                                   r, post);
  }
  CheckLaunch(ctx);
}

template <typename T>
void Sum(dg::KernelContext& ctx) {
  if constexpr (std::is_same<T, bool>::value) {
    Reduce<T, int64_t>(ctx, SumR{}, NoPost{});  // bool sums are int64
  } else {
    Reduce<T, T>(ctx, SumR{}, NoPost{});
  }
}
template <typename T>
void Prod(dg::KernelContext& ctx) { Reduce<T, T>(ctx, ProdR{}, NoPost{}); }
template <typename T>
void Max(dg::KernelContext& ctx) { Reduce<T, T>(ctx, MaxR{}, NoPost{}); }
template <typename T>
void Min(dg::KernelContext& ctx) { Reduce<T, T>(ctx, MinR{}, NoPost{}); }
template <typename T>
void Mean(dg::KernelContext& ctx) {
  const Plan p = MakePlan(ctx, ReducedAxes(ctx));
  Reduce<T, T>(ctx, SumR{}, DivPost{static_cast<double>(p.num_red)});  // 0/0 is NaN
}

#define DGC_INTS int8_t, int16_t, int32_t, int64_t, uint8_t
DG_KERNEL_EX("Sum", "cuda", 0, kStrided, Sum, float, double, half, bf16, DGC_INTS, bool);
DG_KERNEL_EX("Prod", "cuda", 0, kStrided, Prod, float, double, half, bf16, DGC_INTS);
DG_KERNEL_EX("Max", "cuda", 0, kStrided, Max, float, double, half, bf16, DGC_INTS);
DG_KERNEL_EX("Min", "cuda", 0, kStrided, Min, float, double, half, bf16, DGC_INTS);
DG_KERNEL_EX("Mean", "cuda", 0, kStrided, Mean, float, double, half, bf16);

// ------------------------------------------------------------ Var, Std, LogSumExp
// Two passes per output, in double, as the CPU: Var/Std divide the squared
// deviations from the mean by max(n - ddof, 0) (NaN for an empty
// reduction); LogSumExp shifts by the maximum (0 when it is not finite, so
// that -inf, +inf and NaN come out as on the CPU).

__device__ double BlockCombine(double v, double* buf, bool max) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) {
      const double a = buf[threadIdx.x], b = buf[threadIdx.x + s];
      buf[threadIdx.x] = max ? (a != a ? a : (b != b ? b : (a > b ? a : b))) : a + b;
    }
    __syncthreads();
  }
  const double r = buf[0];
  __syncthreads();
  return r;
}

template <int kMode, typename T>  // 0 Var, 1 Std, 2 LogSumExp
__global__ void TwoPass(const T* x, T* y, Plan p, double ddof) {
  __shared__ double buf[kThreads];
  for (int64_t o = blockIdx.x; o < p.num_out; o += gridDim.x) {
    int64_t base = 0;
    p.kept.Offsets(o, &base, 1);
    auto at = [&](int64_t j) {
      int64_t off = 0;
      p.red.Offsets(j, &off, 1);
      return static_cast<double>(Load(x[base + off]));
    };
    double a = kMode == 2 ? -INFINITY : 0.0;
    for (int64_t j = threadIdx.x; j < p.num_red; j += blockDim.x) {
      const double v = at(j);
      a = kMode == 2 ? (a != a ? a : (v != v || v > a ? v : a)) : a + v;
    }
    double first = BlockCombine(a, buf, kMode == 2);
    if (kMode == 2) {
      if (!isfinite(first)) first = 0.0;
    } else {
      first /= static_cast<double>(p.num_red);
    }
    double b = 0.0;
    for (int64_t j = threadIdx.x; j < p.num_red; j += blockDim.x) {
      const double d = at(j) - first;
      b += kMode == 2 ? exp(d) : d * d;
    }
    const double second = BlockCombine(b, buf, false);
    if (threadIdx.x == 0) {
      double r;
      if (kMode == 2) {
        r = first + log(second);
      } else {
        const double n = static_cast<double>(p.num_red);
        r = second / (n - ddof > 0.0 ? n - ddof : 0.0);
        if (kMode == 1) r = sqrt(r);
      }
      y[o] = static_cast<T>(r);
    }
  }
}

template <int kMode, typename T>
void TwoPassRun(dg::KernelContext& ctx) {
  const Plan p = MakePlan(ctx, ReducedAxes(ctx));
  if (p.num_out == 0) return;
  const double ddof = kMode == 2 ? 0.0 : static_cast<double>(ctx.i("ddof"));
  const int64_t blocks = p.num_out < 65535LL * 16 ? p.num_out : 65535LL * 16;
  TwoPass<kMode, T><<<static_cast<unsigned>(blocks), kThreads, 0, Prepare(ctx)>>>(
      static_cast<const T*>(ctx.input(0).raw_data()), static_cast<T*>(ctx.output(0).raw_data()),
      p, ddof);
  CheckLaunch(ctx);
}
template <typename T>
void Var(dg::KernelContext& ctx) { TwoPassRun<0, T>(ctx); }
template <typename T>
void Std(dg::KernelContext& ctx) { TwoPassRun<1, T>(ctx); }
template <typename T>
void LogSumExp(dg::KernelContext& ctx) { TwoPassRun<2, T>(ctx); }
DG_KERNEL_EX("Var", "cuda", 0, kStrided, Var, float, double, half, bf16);
DG_KERNEL_EX("Std", "cuda", 0, kStrided, Std, float, double, half, bf16);
DG_KERNEL_EX("LogSumExp", "cuda", 0, kStrided, LogSumExp, float, double, half, bf16);

// ------------------------------------------------------------ ArgMax/ArgMin

// Whether (v, i) replaces (best, bi): strictly more extreme, or a tie /
// NaN at a smaller index; a NaN beats any number, the first NaN wins.
template <bool kMax, typename A>
__device__ inline bool Better(A v, int64_t i, A best, int64_t bi) {
  if (bi < 0) return true;
  const bool vn = IsNanA(v), bn = IsNanA(best);
  if (bn) return vn && i < bi;
  if (vn) return true;
  if (v == best) return i < bi;
  return kMax ? v > best : v < best;
}

template <bool kMax, typename T>
__global__ void ArgReduce(const T* x, int64_t* y, Plan p) {
  using A = Acc<T>;
  __shared__ A bv[kThreads];
  __shared__ int64_t bi[kThreads];
  for (int64_t o = blockIdx.x; o < p.num_out; o += gridDim.x) {
    int64_t base = 0;
    p.kept.Offsets(o, &base, 1);
    A best = A(0);
    int64_t besti = -1;
    for (int64_t j = threadIdx.x; j < p.num_red; j += blockDim.x) {
      int64_t off = 0;
      p.red.Offsets(j, &off, 1);
      const A v = Load(x[base + off]);
      if (Better<kMax>(v, j, best, besti)) {
        best = v;
        besti = j;
      }
    }
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = besti;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      const int t = threadIdx.x;
      if (t < s && bi[t + s] >= 0 && Better<kMax>(bv[t + s], bi[t + s], bv[t], bi[t])) {
        bv[t] = bv[t + s];
        bi[t] = bi[t + s];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) y[o] = bi[0];
    __syncthreads();
  }
}

template <bool kMax, typename T>
void ArgRun(dg::KernelContext& ctx) {
  const int32_t nd = ctx.input(0).ndim();
  std::vector<bool> reduce(nd, !ctx.has("axis"));
  if (ctx.has("axis")) {
    const int64_t a = ctx.i("axis");
    reduce[a < 0 ? a + nd : a] = true;
  }
  // Over all axes the index is into the flattened (row-major) tensor: the
  // reduced Indexer enumerates the axes in that order.
  const Plan p = MakePlan(ctx, reduce);
  if (p.num_out == 0) return;
  cudaStream_t s = Prepare(ctx);
  const int64_t blocks = p.num_out < 65535LL * 16 ? p.num_out : 65535LL * 16;
  ArgReduce<kMax, T><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
      static_cast<const T*>(ctx.input(0).raw_data()),
      static_cast<int64_t*>(ctx.output(0).raw_data()), p);
  CheckLaunch(ctx);
}
template <typename T>
void ArgMax(dg::KernelContext& ctx) { ArgRun<true, T>(ctx); }
template <typename T>
void ArgMin(dg::KernelContext& ctx) { ArgRun<false, T>(ctx); }
DG_KERNEL_EX("ArgMax", "cuda", 0, kStrided, ArgMax, float, double, half, bf16, DGC_INTS);
DG_KERNEL_EX("ArgMin", "cuda", 0, kStrided, ArgMin, float, double, half, bf16, DGC_INTS);

// ------------------------------------------------------------ Softmax

// One block per row (outer, inner); the row has `len` elements `inner`
// apart. y = exp(x - max) / sum, or x - max - log(sum) for the log form.
template <bool kLog, typename T>
__global__ void SoftmaxRows(const T* x, T* y, int64_t outer, int64_t len, int64_t inner) {
  using A = Acc<T>;
  __shared__ A buf[kThreads];
  for (int64_t row = blockIdx.x; row < outer * inner; row += gridDim.x) {
    const int64_t base = (row / inner) * len * inner + row % inner;
    A m = -INFINITY;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const A v = Load(x[base + j * inner]);
      m = (v > m || v != v) ? v : m;
    }
    buf[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (static_cast<int>(threadIdx.x) < s) {
        const A o = buf[threadIdx.x + s];
        if (o > buf[threadIdx.x] || o != o) buf[threadIdx.x] = o;
      }
      __syncthreads();
    }
    m = buf[0];
    __syncthreads();
    // A row whose max is ±inf: shift by 0 so that exp gives inf/0/NaN as
    // the CPU's exp(x - max) would not; the CPU shifts by max as well.
    A sum = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
      sum += exp(Load(x[base + j * inner]) - m);
    buf[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (static_cast<int>(threadIdx.x) < s) buf[threadIdx.x] += buf[threadIdx.x + s];
      __syncthreads();
    }
    sum = buf[0];
    __syncthreads();
    const A lse = log(sum);
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const A d = Load(x[base + j * inner]) - m;
      y[base + j * inner] = static_cast<T>(kLog ? d - lse : exp(d) / sum);
    }
  }
}

// Contiguous rows of up to kWarpRowLen values (attention scores, logits):
// one warp per row instead of a block of 256 threads mostly idle between
// shared-memory reductions. The lanes' maxima and sums are combined by a
// fixed shuffle tree and lane 0's value is given to every lane, so each
// row is normalised by one max and one sum (the same bits every run).
constexpr int64_t kWarpRowLen = 1024;

template <typename A>
__device__ inline A WarpMaxNan(A m) {
  for (int off = 16; off > 0; off >>= 1) {
    const A o = __shfl_down_sync(0xffffffffu, m, off);
    if (o > m || o != o) m = o;
  }
  return __shfl_sync(0xffffffffu, m, 0);
}

template <typename A>
__device__ inline A WarpSumLane0(A v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return __shfl_sync(0xffffffffu, v, 0);
}

template <bool kLog, typename T>
__global__ void SoftmaxWarpRows(const T* x, T* y, int64_t rows, int64_t len) {
  using A = Acc<T>;
  const int lane = threadIdx.x & 31;
  const int64_t first = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
  const int64_t step = (static_cast<int64_t>(blockDim.x) * gridDim.x) >> 5;
  for (int64_t row = first; row < rows; row += step) {  // the same row in every lane
    const T* xr = x + row * len;
    A m = -INFINITY;
    for (int64_t j = lane; j < len; j += 32) {
      const A v = Load(xr[j]);
      m = (v > m || v != v) ? v : m;
    }
    m = WarpMaxNan(m);
    A sum = 0;
    for (int64_t j = lane; j < len; j += 32) sum += exp(Load(xr[j]) - m);
    sum = WarpSumLane0(sum);
    const A lse = log(sum);
    for (int64_t j = lane; j < len; j += 32) {
      const A d = Load(xr[j]) - m;
      y[row * len + j] = static_cast<T>(kLog ? d - lse : exp(d) / sum);
    }
  }
}

template <bool kLog, typename T>
void SoftmaxRun(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  const int32_t nd = x.ndim();
  DG_CHECK(nd >= 1, DG_INVALID_ARGUMENT, ctx.op_name(), ": input must have rank >= 1");
  int64_t axis = ctx.i("axis");
  if (axis < 0) axis += nd;
  DG_CHECK(axis >= 0 && axis < nd, DG_INVALID_ARGUMENT, ctx.op_name(), ": axis ",
           ctx.i("axis"), " out of range for rank ", nd);
  int64_t outer = 1, inner = 1;
  for (int32_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int32_t d = static_cast<int32_t>(axis) + 1; d < nd; ++d) inner *= x.dim(d);
  const int64_t len = x.dim(static_cast<int32_t>(axis));
  if (outer * inner * len == 0) return;
  cudaStream_t s = Prepare(ctx);
  const int64_t rows = outer * inner;
  const int64_t blocks = rows < 65535LL * 16 ? rows : 65535LL * 16;
  if (inner == 1 && len <= kWarpRowLen) {
    const int64_t wb = (rows * 32 + kThreads - 1) / kThreads;
    SoftmaxWarpRows<kLog, T><<<static_cast<unsigned>(wb < 65535LL * 16 ? wb : 65535LL * 16),
                               kThreads, 0, s>>>(
        static_cast<const T*>(x.raw_data()), static_cast<T*>(ctx.output(0).raw_data()), rows,
        len);
  } else {
    SoftmaxRows<kLog, T><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
        static_cast<const T*>(x.raw_data()), static_cast<T*>(ctx.output(0).raw_data()), outer,
        len, inner);
  }
  CheckLaunch(ctx);
}
template <typename T>
void Softmax(dg::KernelContext& ctx) { SoftmaxRun<false, T>(ctx); }
template <typename T>
void LogSoftmax(dg::KernelContext& ctx) { SoftmaxRun<true, T>(ctx); }
DG_KERNEL("Softmax", "cuda", Softmax, float, double, half, bf16);
DG_KERNEL("LogSoftmax", "cuda", LogSoftmax, float, double, half, bf16);

}  // namespace
}  // namespace dragon_cuda
