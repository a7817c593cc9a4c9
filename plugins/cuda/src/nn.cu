// Normalisation and loss kernels on cuda, with cpu_eigen's semantics
// (norm.cc, loss.cc): LayerNorm and LayerNormGrad (statistics in double,
// biased variance, rstd = 1/sqrt(var + eps)); the element-wise losses MseLoss,
// L1Loss, SmoothL1Loss and BceWithLogits (and MseLossAndGrad, MseLoss with its
// gradient), each term in the input dtype and
// the "sum"/"mean" reductions accumulated in double (a mean over nothing is
// NaN). Rows of up to 1024 values take one warp each (wider rows a block).
// Parameter gradients are summed per column by 8 row groups (rows k, k + 8,
// ...), then the groups in order: deterministic. float16/bfloat16 keep the
// same double statistics and sums; element math is in float, rounded once
// per stored value.
#include <cmath>
#include <cstdint>
#include <string>

#include "elementwise.cuh"

namespace dragon_cuda {
namespace {

// Sum of v over the block (every thread gets it); `buf` has kThreads slots.
__device__ double BlockSum(double v, double* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  const double r = buf[0];
  __syncthreads();
  return r;
}

void RowsCols(const dg::KernelContext& ctx, const dg::TensorRef& x, int64_t* rows,
              int64_t* cols) {
  const int32_t nd = x.ndim();
  int64_t axis = ctx.i("axis");
  if (axis < 0) axis += nd;
  DG_CHECK(axis >= 0 && axis <= nd, DG_INVALID_ARGUMENT, ctx.op_name(), ": axis ",
           ctx.i("axis"), " out of range for rank ", nd);
  *rows = 1;
  *cols = 1;
  for (int32_t i = 0; i < nd; ++i) (i < axis ? *rows : *cols) *= x.dim(i);
}

// Mean and rstd of row r (two passes, double).
template <typename T>
__device__ void RowMoments(const T* xp, int64_t cols, double eps, double* buf, double* mean,
                           double* rstd) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) s += ToDouble(xp[i]);
  const double m = BlockSum(s, buf) / static_cast<double>(cols);
  double q = 0;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const double d = ToDouble(xp[i]) - m;
    q += d * d;
  }
  const double var = BlockSum(q, buf) / static_cast<double>(cols);
  *mean = m;
  *rstd = 1.0 / sqrt(var + eps);
}

template <typename T>
__global__ void LayerNormKernel(const T* x, const T* gamma, const T* beta, T* y, int64_t rows,
                                int64_t cols, double eps) {
  __shared__ double buf[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xp = x + r * cols;
    double mean, rstd;
    RowMoments(xp, cols, eps, buf, &mean, &rstd);
    using A = Acc<T>;
    const A m = static_cast<A>(mean), rs = static_cast<A>(rstd);
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
      y[r * cols + i] = Store<T>((Load(xp[i]) - m) * rs * Load(gamma[i]) + Load(beta[i]));
  }
}

// Sum over the warp by a fixed shuffle tree, lane 0's result given to every
// lane (a butterfly would leave lanes with sums in different orders).
__device__ inline double WarpSumAll(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return __shfl_sync(0xffffffffu, v, 0);
}

// Rows of up to kWarpRowCols values take one warp each (the encoder's 256 or
// 1024 features: 8 or 32 values per lane), not a block of 256 threads of
// which most hold one value and wait on shared-memory reductions.
constexpr int64_t kWarpRowCols = 1024;

__device__ inline int64_t WarpIndex() {
  return (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
}
__device__ inline int64_t WarpCount() {
  return (static_cast<int64_t>(blockDim.x) * gridDim.x) >> 5;
}

template <typename T>
__device__ void WarpRowMoments(const T* xp, int64_t cols, double eps, double* mean,
                               double* rstd) {
  const int lane = threadIdx.x & 31;
  double s = 0;
  for (int64_t i = lane; i < cols; i += 32) s += ToDouble(xp[i]);
  const double m = WarpSumAll(s) / static_cast<double>(cols);
  double q = 0;
  for (int64_t i = lane; i < cols; i += 32) {
    const double d = ToDouble(xp[i]) - m;
    q += d * d;
  }
  *mean = m;
  *rstd = 1.0 / sqrt(WarpSumAll(q) / static_cast<double>(cols) + eps);
}

template <typename T>
__global__ void LayerNormWarp(const T* x, const T* gamma, const T* beta, T* y, int64_t rows,
                              int64_t cols, double eps) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = WarpIndex(); r < rows; r += WarpCount()) {  // warp-uniform
    const T* xp = x + r * cols;
    double mean, rstd;
    WarpRowMoments(xp, cols, eps, &mean, &rstd);
    using A = Acc<T>;
    const A m = static_cast<A>(mean), rs = static_cast<A>(rstd);
    for (int64_t i = lane; i < cols; i += 32)
      y[r * cols + i] = Store<T>((Load(xp[i]) - m) * rs * Load(gamma[i]) + Load(beta[i]));
  }
}

template <typename T>
__global__ void LayerNormDxWarp(const T* x, const T* gamma, const T* dy, T* dx, double* stats,
                                int64_t rows, int64_t cols, double eps) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = WarpIndex(); r < rows; r += WarpCount()) {
    const T* xp = x + r * cols;
    const T* gp = dy + r * cols;
    double mean, rstd;
    WarpRowMoments(xp, cols, eps, &mean, &rstd);
    double a = 0, b = 0;
    for (int64_t i = lane; i < cols; i += 32) {
      const double g = ToDouble(gp[i]) * ToDouble(gamma[i]);
      a += g;
      b += g * (ToDouble(xp[i]) - mean) * rstd;
    }
    const double s1 = WarpSumAll(a), s2 = WarpSumAll(b);
    if (lane == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = rstd;
    }
    using A = Acc<T>;
    const A m = static_cast<A>(mean), rs = static_cast<A>(rstd);
    const A k1 = static_cast<A>(s1 / cols), k2 = static_cast<A>(s2 / cols);
    for (int64_t i = lane; i < cols; i += 32) {
      const A xhat = (Load(xp[i]) - m) * rs;
      dx[r * cols + i] = Store<T>(rs * (Load(gp[i]) * Load(gamma[i]) - k1 - xhat * k2));
    }
  }
}

unsigned WarpRowBlocks(int64_t rows) {
  const int64_t b = (rows * 32 + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535LL * 16 ? b : 65535LL * 16);
}

unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>(rows < 65535LL * 16 ? rows : 65535LL * 16);
}

template <typename T>
void LayerNorm(dg::KernelContext& ctx) {
  int64_t rows, cols;
  RowsCols(ctx, ctx.input(0), &rows, &cols);
  if (rows * cols == 0) return;
  const T* x = static_cast<const T*>(ctx.input(0).raw_data());
  const T* gamma = static_cast<const T*>(ctx.input(1).raw_data());
  const T* beta = static_cast<const T*>(ctx.input(2).raw_data());
  T* y = static_cast<T*>(ctx.output(0).raw_data());
  cudaStream_t s = Prepare(ctx);
  if (cols <= kWarpRowCols) {
    LayerNormWarp<T><<<WarpRowBlocks(rows), kThreads, 0, s>>>(x, gamma, beta, y, rows, cols,
                                                              ctx.f("eps"));
  } else {
    LayerNormKernel<T><<<RowBlocks(rows), kThreads, 0, s>>>(x, gamma, beta, y, rows, cols,
                                                            ctx.f("eps"));
  }
  CheckLaunch(ctx);
}
DG_KERNEL("LayerNorm", "cuda", LayerNorm, float, double, half, bf16);

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma; the
// row statistics go to `stats` for the parameter gradients.
template <typename T>
__global__ void LayerNormDx(const T* x, const T* gamma, const T* dy, T* dx, double* stats,
                            int64_t rows, int64_t cols, double eps) {
  __shared__ double buf[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xp = x + r * cols;
    const T* gp = dy + r * cols;
    double mean, rstd;
    RowMoments(xp, cols, eps, buf, &mean, &rstd);
    double a = 0, b = 0;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      const double g = ToDouble(gp[i]) * ToDouble(gamma[i]);
      a += g;
      b += g * (ToDouble(xp[i]) - mean) * rstd;
    }
    const double s1 = BlockSum(a, buf), s2 = BlockSum(b, buf);
    if (threadIdx.x == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = rstd;
    }
    using A = Acc<T>;
    const A m = static_cast<A>(mean), rs = static_cast<A>(rstd);
    const A k1 = static_cast<A>(s1 / cols), k2 = static_cast<A>(s2 / cols);
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      const A xhat = (Load(xp[i]) - m) * rs;
      dx[r * cols + i] = Store<T>(rs * (Load(gp[i]) * Load(gamma[i]) - k1 - xhat * k2));
    }
  }
}

// dgamma, dbeta: a block covers 32 columns with 8 row groups (group k sums
// rows k, k + 8, ...: coalesced 32-wide loads, an eighth of the rows each),
// then the groups' sums are added in a fixed order: deterministic.
constexpr int kRowGroups = kThreads / 32;

template <typename T>
__global__ void ColumnParamGrads(const T* x, const T* dy, const double* stats, int64_t rows,
                                 int64_t cols, T* dgamma, T* dbeta) {
  __shared__ double gs[kRowGroups][32], bs[kRowGroups][32];
  const int lane = threadIdx.x & 31, k = threadIdx.x >> 5;
  for (int64_t j0 = blockIdx.x * int64_t{32}; j0 < cols; j0 += int64_t{32} * gridDim.x) {
    const int64_t j = j0 + lane;
    double g = 0, b = 0;
    if (j < cols) {
      for (int64_t r = k; r < rows; r += kRowGroups) {
        const double d = ToDouble(dy[r * cols + j]);
        g += d * (ToDouble(x[r * cols + j]) - stats[2 * r]) * stats[2 * r + 1];
        b += d;
      }
    }
    gs[k][lane] = g;
    bs[k][lane] = b;
    __syncthreads();
    if (k == 0 && j < cols) {
      for (int q = 1; q < kRowGroups; ++q) {
        g += gs[q][lane];
        b += bs[q][lane];
      }
      dgamma[j] = FromDouble<T>(g);
      dbeta[j] = FromDouble<T>(b);
    }
    __syncthreads();
  }
}

template <typename T>
void LayerNormGrad(dg::KernelContext& ctx) {
  int64_t rows, cols;
  RowsCols(ctx, ctx.input(0), &rows, &cols);
  if (cols == 0) return;
  cudaStream_t s = Prepare(ctx);
  const T* x = static_cast<const T*>(ctx.input(0).raw_data());
  const T* gamma = static_cast<const T*>(ctx.input(1).raw_data());
  const T* dy = static_cast<const T*>(ctx.input(2).raw_data());
  double* stats = ctx.workspace<double>(static_cast<size_t>(2 * (rows > 0 ? rows : 1)));
  if (rows > 0) {
    T* dx = static_cast<T*>(ctx.output(0).raw_data());
    if (cols <= kWarpRowCols) {
      LayerNormDxWarp<T><<<WarpRowBlocks(rows), kThreads, 0, s>>>(x, gamma, dy, dx, stats, rows,
                                                                  cols, ctx.f("eps"));
    } else {
      LayerNormDx<T><<<RowBlocks(rows), kThreads, 0, s>>>(x, gamma, dy, dx, stats, rows, cols,
                                                          ctx.f("eps"));
    }
    CheckLaunch(ctx);
  }
  const int64_t col_blocks = (cols + 31) / 32;
  ColumnParamGrads<T><<<static_cast<unsigned>(col_blocks < 65535 ? col_blocks : 65535),
                        kThreads, 0, s>>>(
      x, dy, stats, rows, cols, static_cast<T*>(ctx.output(1).raw_data()),
      static_cast<T*>(ctx.output(2).raw_data()));
  CheckLaunch(ctx);
}
DG_KERNEL("LayerNormGrad", "cuda", LayerNormGrad, float, double, half, bf16);

// ------------------------------------------------------------ pair losses

enum class Red { kNone, kSum, kMean };

Red GetRed(const dg::KernelContext& ctx) {
  const std::string r = ctx.s("reduction");
  if (r == "none") return Red::kNone;
  if (r == "sum") return Red::kSum;
  DG_CHECK(r == "mean", DG_INVALID_ARGUMENT, ctx.op_name(),
           ": reduction must be \"mean\", \"sum\" or \"none\", got \"", r, "\"");
  return Red::kMean;
}

// f works on Acc<T> (float for the 16-bit floats); each term is rounded to
// T once ("none") or summed in double.
template <typename T, typename F>
__global__ void PairNone(const T* x, const T* t, T* y, int64_t n, F f) {
  DGC_LOOP(i, n) y[i] = Store<T>(f(Load(x[i]), Load(t[i]), i));
}

// One block: the double sum of the terms, then sum or sum / n.
template <typename T, typename F>
__global__ void PairReduce(const T* x, const T* t, T* y, int64_t n, bool mean, F f) {
  __shared__ double buf[kThreads];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    acc += static_cast<double>(f(Load(x[i]), Load(t[i]), i));
  const double s = BlockSum(acc, buf);
  if (threadIdx.x == 0) y[0] = FromDouble<T>(mean ? s / static_cast<double>(n) : s);
}

template <typename T, typename F>
void PairLoss(dg::KernelContext& ctx, F f) {
  const int64_t n = ctx.input(0).numel();
  DG_CHECK(n == ctx.input(1).numel(), DG_INTERNAL, ctx.op_name(), ": input has ", n,
           " elements, target ", ctx.input(1).numel());
  const Red red = GetRed(ctx);
  const T* x = static_cast<const T*>(ctx.input(0).raw_data());
  const T* t = static_cast<const T*>(ctx.input(1).raw_data());
  T* y = static_cast<T*>(ctx.output(0).raw_data());
  cudaStream_t s = Prepare(ctx);
  if (red == Red::kNone) {
    if (n == 0) return;
    PairNone<T, F><<<Blocks(n), kThreads, 0, s>>>(x, t, y, n, f);
  } else {
    PairReduce<T, F><<<1, kThreads, 0, s>>>(x, t, y, n, red == Red::kMean, f);
  }
  CheckLaunch(ctx);
}

struct MseF {
  template <typename T>
  __device__ T operator()(T x, T t, int64_t) const {
    const T d = x - t;
    return d * d;
  }
};
struct L1F {
  template <typename T>
  __device__ T operator()(T x, T t, int64_t) const { return fabs(x - t); }
};
template <typename T>
struct SmoothL1F {
  T beta;
  __device__ T operator()(T x, T t, int64_t) const {
    const T d = fabs(x - t);
    return d < beta ? T(0.5) * d * d / beta : d - T(0.5) * beta;
  }
};
template <typename E>
struct BceF {
  using T = Acc<E>;
  const E* pw;
  int64_t classes;
  __device__ T operator()(T x, T t, int64_t i) const {
    const T w = pw ? Load(pw[classes == 1 ? 0 : i % classes]) : T(1);
    const T sp = log1p(exp(-fabs(x))) + (-x > T(0) ? -x : T(0));  // log(1 + e^-x)
    return (T(1) - t) * x + (T(1) + (w - T(1)) * t) * sp;
  }
};

template <typename T>
void MseLoss(dg::KernelContext& ctx) { PairLoss<T>(ctx, MseF{}); }
template <typename T>
void L1Loss(dg::KernelContext& ctx) { PairLoss<T>(ctx, L1F{}); }
template <typename T>
void SmoothL1Loss(dg::KernelContext& ctx) {
  const double beta = ctx.f("beta");
  DG_CHECK(beta >= 0.0, DG_INVALID_ARGUMENT, ctx.op_name(), ": beta must be >= 0, got ", beta);
  PairLoss<T>(ctx, SmoothL1F<Acc<T>>{static_cast<Acc<T>>(beta)});
}
template <typename T>
void BceWithLogits(dg::KernelContext& ctx) {
  const T* pw = nullptr;
  int64_t classes = 1;
  if (ctx.num_inputs() > 2) {
    const dg::TensorRef w = ctx.input(2);
    DG_CHECK(w.ndim() == 1 && ctx.input(0).ndim() >= 1, DG_INTERNAL, ctx.op_name(),
             ": pos_weight must be 1-D");
    pw = static_cast<const T*>(w.raw_data());
    classes = w.dim(0);
    DG_CHECK(classes == 1 || classes == ctx.input(0).dim(-1), DG_INTERNAL, ctx.op_name(),
             ": pos_weight has ", classes, " entries for a last axis of ", ctx.input(0).dim(-1));
  }
  PairLoss<T>(ctx, BceF<T>{pw, classes});
}
// Sigmoid focal loss (RetinaNet): ce * (1 - p_t)^gamma, weighted by alpha
// when alpha >= 0.
template <typename T>
struct FocalF {
  T alpha, gamma;
  __device__ T operator()(T x, T t, int64_t) const {
    const T p = T(1) / (T(1) + exp(-x));
    const T ce = (T(1) - t) * x + log1p(exp(-fabs(x))) + (-x > T(0) ? -x : T(0));
    const T p_t = p * t + (T(1) - p) * (T(1) - t);
    T loss = ce * pow(T(1) - p_t, gamma);
    if (alpha >= T(0)) loss *= alpha * t + (T(1) - alpha) * (T(1) - t);
    return loss;
  }
};
template <typename T>
void SigmoidFocalLoss(dg::KernelContext& ctx) {
  using A = Acc<T>;
  const A alpha = static_cast<A>(ctx.f("alpha")), gamma = static_cast<A>(ctx.f("gamma"));
  DG_CHECK(gamma >= A(0), DG_INVALID_ARGUMENT, ctx.op_name(), ": gamma must be >= 0, got ", gamma);
  PairLoss<T>(ctx, FocalF<A>{alpha, gamma});
}
// MseLossAndGrad (the loss_fusion pass's op): the loss as MseLoss, and
// dinput = (x - t) * scale as Sub then Mul compute it (d rounded to T, then
// the product rounded to T). Two launches: the fusion saves host-side reads
// of x and t, which device memory does not need.
template <typename T>
__global__ void MseGradKernel(const T* x, const T* t, const T* scale, T* dx, int64_t n) {
  const Acc<T> s = Load(scale[0]);
  DGC_LOOP(i, n) {
    const T d = Store<T>(Load(x[i]) - Load(t[i]));
    dx[i] = Store<T>(Load(d) * s);
  }
}

template <typename T>
void MseLossAndGrad(dg::KernelContext& ctx) {
  const int64_t n = ctx.input(0).numel();
  DG_CHECK(GetRed(ctx) != Red::kNone, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": reduction must be \"mean\" or \"sum\", got \"none\"");
  DG_CHECK(ctx.input(2).numel() == 1 && ctx.output(1).numel() == n, DG_INTERNAL,
           ctx.op_name(), ": scale has ", ctx.input(2).numel(), " elements (expected 1), dinput ",
           ctx.output(1).numel(), " (expected ", n, ")");
  PairLoss<T>(ctx, MseF{});
  if (n == 0) return;
  cudaStream_t s = Prepare(ctx);
  MseGradKernel<T><<<Blocks(n), kThreads, 0, s>>>(
      static_cast<const T*>(ctx.input(0).raw_data()), static_cast<const T*>(ctx.input(1).raw_data()),
      static_cast<const T*>(ctx.input(2).raw_data()), static_cast<T*>(ctx.output(1).raw_data()), n);
  CheckLaunch(ctx);
}

DG_KERNEL("SigmoidFocalLoss", "cuda", SigmoidFocalLoss, float, double, half, bf16);
DG_KERNEL("MseLossAndGrad", "cuda", MseLossAndGrad, float, double);
DG_KERNEL("MseLoss", "cuda", MseLoss, float, double, half, bf16);
DG_KERNEL("L1Loss", "cuda", L1Loss, float, double, half, bf16);
DG_KERNEL("SmoothL1Loss", "cuda", SmoothL1Loss, float, double, half, bf16);
DG_KERNEL("BceWithLogits", "cuda", BceWithLogits, float, double, half, bf16);

}  // namespace
}  // namespace dragon_cuda
