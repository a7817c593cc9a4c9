// BatchNorm and BatchNormGrad on cuda with cpu_eigen's semantics (norm.cc):
// x viewed as [N, C, S]; per channel the batch mean and biased variance in
// double (training) or the running statistics (inference); y = (x - mean)
// * gamma * rstd + beta with rstd = 1/sqrt(var + eps). The gradient is
// dx = a dy + b (x - mean) + k per channel (see norm.cc for a, b, k). One
// block per channel for the statistics, then one element-wise pass.
#include <cmath>
#include <cstdint>

#include "elementwise.cuh"

namespace dragon_cuda {
namespace {

struct NCS {
  int64_t n, c, s;
};

NCS View(const dg::TensorRef& x) {
  NCS v{x.dim(0), x.dim(1), 1};
  for (int32_t i = 2; i < x.ndim(); ++i) v.s *= x.dim(i);
  return v;
}

__device__ double Sum(double v, double* buf) {
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

// Batch mean and variance of channel c (NaN for an empty channel).
template <typename T>
__device__ void Moments(const T* x, NCS v, int64_t c, double* buf, double* mean, double* var) {
  const int64_t m = v.n * v.s;
  double s = 0;
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x)
    s += static_cast<double>(x[(i / v.s) * v.c * v.s + c * v.s + i % v.s]);
  const double mu = Sum(s, buf) / static_cast<double>(m);
  double q = 0;
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
    const double d = static_cast<double>(x[(i / v.s) * v.c * v.s + c * v.s + i % v.s]) - mu;
    q += d * d;
  }
  *mean = mu;
  *var = Sum(q, buf) / static_cast<double>(m);
}

template <typename T>
__global__ void Stats(const T* x, const T* rmean, const T* rvar, NCS v, bool training,
                      double* stats, T* out_mean, T* out_var) {
  __shared__ double buf[kThreads];
  for (int64_t c = blockIdx.x; c < v.c; c += gridDim.x) {
    double mean, var;
    if (training) {
      Moments(x, v, c, buf, &mean, &var);
    } else {
      mean = static_cast<double>(rmean[c]);
      var = static_cast<double>(rvar[c]);
    }
    if (threadIdx.x == 0) {
      stats[2 * c] = mean;
      stats[2 * c + 1] = var;
      out_mean[c] = training ? static_cast<T>(mean) : rmean[c];
      out_var[c] = training ? static_cast<T>(var) : rvar[c];
    }
  }
}

template <typename T>
__global__ void Apply(const T* x, const T* gamma, const T* beta, const double* stats, T* y, NCS v,
                      double eps) {
  DGC_LOOP(i, v.n * v.c * v.s) {
    const int64_t c = (i / v.s) % v.c;
    const double scale = static_cast<double>(gamma[c]) * (1.0 / sqrt(stats[2 * c + 1] + eps));
    const T m = static_cast<T>(stats[2 * c]), a = static_cast<T>(scale),
            b = static_cast<T>(static_cast<double>(beta[c]));
    y[i] = (x[i] - m) * a + b;
  }
}

unsigned ChannelBlocks(int64_t c) {
  return static_cast<unsigned>(c < 65535LL * 16 ? (c > 0 ? c : 1) : 65535LL * 16);
}

template <typename T>
void BatchNorm(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  DG_CHECK(xt.ndim() >= 2, DG_INVALID_ARGUMENT, ctx.op_name(), ": x must be [N, C, *], got ",
           dg::ShapeStr(xt.shape()));
  const NCS v = View(xt);
  if (v.c == 0) return;
  cudaStream_t s = Prepare(ctx);
  const bool training = ctx.b("training");
  double* stats = ctx.workspace<double>(static_cast<size_t>(2 * v.c));
  const T* x = static_cast<const T*>(xt.raw_data());
  Stats<T><<<ChannelBlocks(v.c), kThreads, 0, s>>>(
      x, static_cast<const T*>(ctx.input(3).raw_data()),
      static_cast<const T*>(ctx.input(4).raw_data()), v, training, stats,
      static_cast<T*>(ctx.output(1).raw_data()), static_cast<T*>(ctx.output(2).raw_data()));
  CheckLaunch(ctx);
  const int64_t n = v.n * v.c * v.s;
  if (n == 0) return;
  Apply<T><<<Blocks(n), kThreads, 0, s>>>(x, static_cast<const T*>(ctx.input(1).raw_data()),
                                          static_cast<const T*>(ctx.input(2).raw_data()), stats,
                                          static_cast<T*>(ctx.output(0).raw_data()), v,
                                          ctx.f("eps"));
  CheckLaunch(ctx);
}
DG_KERNEL("BatchNorm", "cuda", BatchNorm, float, double);

template <typename T>
__global__ void GradCoefs(const T* x, const T* gamma, const T* rmean, const T* rvar, const T* dy,
                          const T* dmean, const T* dvar, NCS v, bool training, double eps,
                          double* coef, T* dgamma, T* dbeta) {
  __shared__ double buf[kThreads];
  const double m = static_cast<double>(v.n * v.s);
  for (int64_t c = blockIdx.x; c < v.c; c += gridDim.x) {
    double mean, var;
    if (training) {
      Moments(x, v, c, buf, &mean, &var);
    } else {
      mean = static_cast<double>(rmean[c]);
      var = static_cast<double>(rvar[c]);
    }
    double a = 0, b = 0;
    for (int64_t i = threadIdx.x; i < v.n * v.s; i += blockDim.x) {
      const int64_t off = (i / v.s) * v.c * v.s + c * v.s + i % v.s;
      const double g = static_cast<double>(dy[off]);
      a += g;
      b += g * (static_cast<double>(x[off]) - mean);
    }
    const double sum_dy = Sum(a, buf), sum_dy_xc = Sum(b, buf);
    if (threadIdx.x == 0) {
      const double rstd = 1.0 / sqrt(var + eps);
      const double gr = static_cast<double>(gamma[c]) * rstd;
      const double dg = m == 0 ? 0.0 : sum_dy_xc * rstd;
      dgamma[c] = static_cast<T>(dg);
      dbeta[c] = static_cast<T>(sum_dy);
      coef[4 * c] = mean;
      coef[4 * c + 1] = gr;
      if (training && m > 0) {
        coef[4 * c + 2] = (2.0 * static_cast<double>(dvar[c]) - gr * rstd * dg) / m;
        coef[4 * c + 3] = (static_cast<double>(dmean[c]) - gr * sum_dy) / m;
      } else {
        coef[4 * c + 2] = coef[4 * c + 3] = 0.0;
      }
    }
  }
}

template <typename T>
__global__ void GradApply(const T* x, const T* dy, const double* coef, T* dx, NCS v) {
  DGC_LOOP(i, v.n * v.c * v.s) {
    const double* k = coef + 4 * ((i / v.s) % v.c);
    const T mean = static_cast<T>(k[0]), a = static_cast<T>(k[1]), b = static_cast<T>(k[2]),
            shift = static_cast<T>(k[3]);
    dx[i] = a * dy[i] + b * (x[i] - mean) + shift;
  }
}

template <typename T>
void BatchNormGrad(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const NCS v = View(xt);
  if (v.c == 0) return;
  cudaStream_t s = Prepare(ctx);
  double* coef = ctx.workspace<double>(static_cast<size_t>(4 * v.c));
  const T* x = static_cast<const T*>(xt.raw_data());
  const T* dy = static_cast<const T*>(ctx.input(4).raw_data());
  auto in = [&](int i) { return static_cast<const T*>(ctx.input(i).raw_data()); };
  GradCoefs<T><<<ChannelBlocks(v.c), kThreads, 0, s>>>(
      x, in(1), in(2), in(3), dy, in(5), in(6), v, ctx.b("training"), ctx.f("eps"), coef,
      static_cast<T*>(ctx.output(1).raw_data()), static_cast<T*>(ctx.output(2).raw_data()));
  CheckLaunch(ctx);
  const int64_t n = v.n * v.c * v.s;
  if (n == 0) return;
  GradApply<T><<<Blocks(n), kThreads, 0, s>>>(x, dy, coef,
                                               static_cast<T*>(ctx.output(0).raw_data()), v);
  CheckLaunch(ctx);
}
DG_KERNEL("BatchNormGrad", "cuda", BatchNormGrad, float, double);

}  // namespace
}  // namespace dragon_cuda
