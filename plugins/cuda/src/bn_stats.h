// The per-element rule of BatchNormStatsUpdate (bn_stats.cu), plain C++
// apart from the rounding intrinsics, so that host-side tests
// (plugins/cuda/tests/test_cuda_bn_stats.py) compile this very code and
// compare it with cpu_eigen's kernel bit for bit:
//   mean = (1 - m) * running_mean + m * batch_mean
//   var  = (1 - m) * running_var + (m * batch_var) * unbias
// in double, every product and sum rounded once, in that order. On the
// device each step is an explicit round-to-nearest intrinsic: nvcc fuses
// a * b + c into one FMA by default (--fmad=true), which rounds once
// instead of twice and so gives other bits than the CPU kernel, whose
// baseline x86-64 build has no FMA.
#ifndef DRAGON_CUDA_BN_STATS_H_
#define DRAGON_CUDA_BN_STATS_H_

#ifdef __CUDACC__
#define DGC_BN_HD __host__ __device__
#else
#define DGC_BN_HD
#endif

namespace dragon_cuda {

// a * b and a + b, each rounded once (never contracted into an FMA).
DGC_BN_HD inline double MulRn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
DGC_BN_HD inline double AddRn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

struct BnStatsValue {
  double mean, var;
};

// One channel's updated running statistics, from the running and batch
// statistics (widened to double), momentum m and unbias = n / (n - 1).
DGC_BN_HD inline BnStatsValue BatchNormStatsStep(double rm, double rv, double bm, double bv,
                                                 double m, double unbias) {
  const double keep = 1.0 - m;
  return BnStatsValue{AddRn(MulRn(keep, rm), MulRn(m, bm)),
                      AddRn(MulRn(keep, rv), MulRn(MulRn(m, bv), unbias))};
}

}  // namespace dragon_cuda

#endif  // DRAGON_CUDA_BN_STATS_H_
