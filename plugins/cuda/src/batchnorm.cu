// BatchNorm and BatchNormGrad on cuda with cpu_eigen's semantics (norm.cc):
// x viewed as [N, C, S]; per channel the batch mean and biased variance in
// double (training) or the running statistics (inference); y = (x - mean)
// * gamma * rstd + beta with rstd = 1/sqrt(var + eps). The gradient is
// dx = a dy + b (x - mean) + k per channel (see norm.cc for a, b, k). One
// block per channel for the statistics, then one element-wise pass.
// float16/bfloat16 (x, parameters and statistics all of x's dtype, as the
// schema asks) keep the double statistics; element math is in float,
// rounded once per stored value.
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
    s += ToDouble(x[(i / v.s) * v.c * v.s + c * v.s + i % v.s]);
  const double mu = Sum(s, buf) / static_cast<double>(m);
  double q = 0;
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
    const double d = ToDouble(x[(i / v.s) * v.c * v.s + c * v.s + i % v.s]) - mu;
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
      mean = ToDouble(rmean[c]);
      var = ToDouble(rvar[c]);
    }
    if (threadIdx.x == 0) {
      stats[2 * c] = mean;
      stats[2 * c + 1] = var;
      out_mean[c] = training ? FromDouble<T>(mean) : rmean[c];
      out_var[c] = training ? FromDouble<T>(var) : rvar[c];
    }
  }
}

template <typename T>
__global__ void Apply(const T* x, const T* gamma, const T* beta, const double* stats, T* y, NCS v,
                      double eps) {
  DGC_LOOP(i, v.n * v.c * v.s) {
    const int64_t c = (i / v.s) % v.c;
    using A = Acc<T>;
    const double scale = ToDouble(gamma[c]) * (1.0 / sqrt(stats[2 * c + 1] + eps));
    const A m = static_cast<A>(stats[2 * c]), a = static_cast<A>(scale), b = Load(beta[c]);
    y[i] = Store<T>((Load(x[i]) - m) * a + b);
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
DG_KERNEL("BatchNorm", "cuda", BatchNorm, float, double, half, bf16);

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
      mean = ToDouble(rmean[c]);
      var = ToDouble(rvar[c]);
    }
    double a = 0, b = 0;
    for (int64_t i = threadIdx.x; i < v.n * v.s; i += blockDim.x) {
      const int64_t off = (i / v.s) * v.c * v.s + c * v.s + i % v.s;
      const double g = ToDouble(dy[off]);
      a += g;
      b += g * (ToDouble(x[off]) - mean);
    }
    const double sum_dy = Sum(a, buf), sum_dy_xc = Sum(b, buf);
    if (threadIdx.x == 0) {
      const double rstd = 1.0 / sqrt(var + eps);
      const double gr = ToDouble(gamma[c]) * rstd;
      const double dg = m == 0 ? 0.0 : sum_dy_xc * rstd;
      dgamma[c] = FromDouble<T>(dg);
      dbeta[c] = FromDouble<T>(sum_dy);
      coef[4 * c] = mean;
      coef[4 * c + 1] = gr;
      if (training && m > 0) {
        coef[4 * c + 2] = (2.0 * ToDouble(dvar[c]) - gr * rstd * dg) / m;
        coef[4 * c + 3] = (ToDouble(dmean[c]) - gr * sum_dy) / m;
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
    using A = Acc<T>;
    const A mean = static_cast<A>(k[0]), a = static_cast<A>(k[1]), b = static_cast<A>(k[2]),
            shift = static_cast<A>(k[3]);
    dx[i] = Store<T>(a * Load(dy[i]) + b * (Load(x[i]) - mean) + shift);
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
DG_KERNEL("BatchNormGrad", "cuda", BatchNormGrad, float, double, half, bf16);

// ------------------------------------------------------------ GroupNorm
// Per (sample, group) q, the contiguous run of cg * S values: statistics in
// double, y = (x - mean) * gamma[c] * rstd + beta[c]; the gradient as
// LayerNorm's per group, dgamma/dbeta summed per channel over (n, s).

template <typename T>
__device__ void RunMoments(const T* xp, int64_t len, double eps, double* buf, double* mean,
                           double* rstd) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s += ToDouble(xp[i]);
  const double m = Sum(s, buf) / static_cast<double>(len);
  double q = 0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
    const double d = ToDouble(xp[i]) - m;
    q += d * d;
  }
  *mean = m;
  *rstd = 1.0 / sqrt(Sum(q, buf) / static_cast<double>(len) + eps);
}

template <typename T>
__global__ void GroupNormKernel(const T* x, const T* gamma, const T* beta, T* y, NCS v,
                                int64_t groups, double eps) {
  __shared__ double buf[kThreads];
  const int64_t cg = v.c / groups, len = cg * v.s;
  for (int64_t q = blockIdx.x; q < v.n * groups; q += gridDim.x) {
    const T* xp = x + q * len;
    double mean, rstd;
    RunMoments(xp, len, eps, buf, &mean, &rstd);
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const int64_t c = (q % groups) * cg + i / v.s;
      using A = Acc<T>;
      const A m = static_cast<A>(mean), a = static_cast<A>(ToDouble(gamma[c]) * rstd),
              b = Load(beta[c]);
      y[q * len + i] = Store<T>((Load(xp[i]) - m) * a + b);
    }
  }
}

template <typename T>
void GroupNorm(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const NCS v = View(xt);
  const int64_t groups = ctx.i("groups");
  DG_CHECK(groups > 0 && v.c % groups == 0, DG_INVALID_ARGUMENT, ctx.op_name(), ": ", v.c,
           " channels do not split into ", groups, " groups");
  if (xt.numel() == 0) return;
  GroupNormKernel<T><<<ChannelBlocks(v.n * groups), kThreads, 0, Prepare(ctx)>>>(
      static_cast<const T*>(xt.raw_data()), static_cast<const T*>(ctx.input(1).raw_data()),
      static_cast<const T*>(ctx.input(2).raw_data()), static_cast<T*>(ctx.output(0).raw_data()),
      v, groups, ctx.f("eps"));
  CheckLaunch(ctx);
}
DG_KERNEL("GroupNorm", "cuda", GroupNorm, float, double, half, bf16);

template <typename T>
__global__ void GroupNormDx(const T* x, const T* gamma, const T* dy, T* dx, double* stats, NCS v,
                            int64_t groups, double eps) {
  __shared__ double buf[kThreads];
  const int64_t cg = v.c / groups, len = cg * v.s;
  for (int64_t q = blockIdx.x; q < v.n * groups; q += gridDim.x) {
    const T* xp = x + q * len;
    const T* gp = dy + q * len;
    double mean, rstd;
    RunMoments(xp, len, eps, buf, &mean, &rstd);
    double a = 0, b = 0;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const T gm = gamma[(q % groups) * cg + i / v.s];
      const double g = ToDouble(gp[i]) * ToDouble(gm);
      a += g;
      b += g * (ToDouble(xp[i]) - mean) * rstd;
    }
    const double s1 = Sum(a, buf), s2 = Sum(b, buf);
    if (threadIdx.x == 0) {
      stats[2 * q] = mean;
      stats[2 * q + 1] = rstd;
    }
    using A = Acc<T>;
    const A m = static_cast<A>(mean), rs = static_cast<A>(rstd);
    const A k1 = static_cast<A>(s1 / len), k2 = static_cast<A>(s2 / len);
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const A gm = Load(gamma[(q % groups) * cg + i / v.s]);
      const A xhat = (Load(xp[i]) - m) * rs;
      dx[q * len + i] = Store<T>(rs * (Load(gp[i]) * gm - k1 - xhat * k2));
    }
  }
}

template <typename T>
__global__ void GroupNormParams(const T* x, const T* dy, const double* stats, NCS v,
                                int64_t groups, T* dgamma, T* dbeta) {
  const int64_t cg = v.c / groups;
  DGC_LOOP(c, v.c) {
    double g = 0, b = 0;
    for (int64_t n = 0; n < v.n; ++n) {
      const int64_t q = n * groups + c / cg;
      const double mean = stats[2 * q], rstd = stats[2 * q + 1];
      const T* xp = x + (n * v.c + c) * v.s;
      const T* gp = dy + (n * v.c + c) * v.s;
      for (int64_t i = 0; i < v.s; ++i) {
        const double d = ToDouble(gp[i]);
        g += d * (ToDouble(xp[i]) - mean) * rstd;
        b += d;
      }
    }
    dgamma[c] = FromDouble<T>(g);
    dbeta[c] = FromDouble<T>(b);
  }
}

template <typename T>
void GroupNormGrad(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const NCS v = View(xt);
  const int64_t groups = ctx.i("groups");
  DG_CHECK(groups > 0 && v.c % groups == 0, DG_INVALID_ARGUMENT, ctx.op_name(), ": ", v.c,
           " channels do not split into ", groups, " groups");
  if (v.c == 0) return;
  cudaStream_t s = Prepare(ctx);
  const T* x = static_cast<const T*>(xt.raw_data());
  const T* dy = static_cast<const T*>(ctx.input(2).raw_data());
  const int64_t q = v.n * groups;
  double* stats = ctx.workspace<double>(static_cast<size_t>(2 * (q > 0 ? q : 1)));
  if (xt.numel() > 0) {
    GroupNormDx<T><<<ChannelBlocks(q), kThreads, 0, s>>>(
        x, static_cast<const T*>(ctx.input(1).raw_data()), dy,
        static_cast<T*>(ctx.output(0).raw_data()), stats, v, groups, ctx.f("eps"));
    CheckLaunch(ctx);
  }
  GroupNormParams<T><<<Blocks(v.c), kThreads, 0, s>>>(
      x, dy, stats, v, groups, static_cast<T*>(ctx.output(1).raw_data()),
      static_cast<T*>(ctx.output(2).raw_data()));
  CheckLaunch(ctx);
}
DG_KERNEL("GroupNormGrad", "cuda", GroupNormGrad, float, double, half, bf16);

}  // namespace
}  // namespace dragon_cuda
