// The row kernels of rows.h (layer norm forward/backward, column sums).
//
// Built with the plugin's baseline flags like every src/*.cc (namespace
// cpu_eigen::rows_base), and again on x86-64 with -march=x86-64-v3 / -v4
// -DCPU_EIGEN_ROWS_ISA=<isa> (namespace rows_<isa>); rows.h picks the best
// build the CPU runs. The code is plain loops the compiler vectorises for
// the build's instruction set: lanes of independent double accumulators for
// the row statistics, whole rows for the element-wise parts and the column
// accumulations. It uses no library code (no Eigen, no std templates), so a
// build emits no symbol that could stand in for another build's: everything
// but the two tables has internal linkage.
#ifdef CPU_EIGEN_ROWS_ISA
#define CPU_EIGEN_ROWS_CAT_INNER_(a, b) a##b
#define CPU_EIGEN_ROWS_CAT_(a, b) CPU_EIGEN_ROWS_CAT_INNER_(a, b)
#define CPU_EIGEN_ROWS_NS CPU_EIGEN_ROWS_CAT_(rows_, CPU_EIGEN_ROWS_ISA)
#ifndef CPU_EIGEN_ROWS_ISA_NAME
#define CPU_EIGEN_ROWS_ISA_NAME "x86-64-isa"
#endif
#else
#define CPU_EIGEN_ROWS_NS rows_base
#define CPU_EIGEN_ROWS_ISA_NAME "baseline"
#endif

#include <cstdint>

#define CPU_EIGEN_ROWS_TABLE_ONLY
#include "rows.h"

namespace cpu_eigen {
namespace CPU_EIGEN_ROWS_NS {
namespace {

// Independent double accumulators per statistic: wide enough for two
// AVX-512 registers, combined pairwise in a fixed order.
constexpr int kLanes = 16;

inline double CombineLanes(const double* a) {
  double s[kLanes / 2];
  for (int j = 0; j < kLanes / 2; ++j) s[j] = a[2 * j] + a[2 * j + 1];
  for (int w = kLanes / 4; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) s[j] = s[2 * j] + s[2 * j + 1];
  }
  return s[0];
}

// Mean and biased variance of a row of n > 0 values, two-pass, in double.
template <typename T>
void RowMoments(const T* __restrict p, int64_t n, double* mean, double* var) {
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += static_cast<double>(p[i + j]);
  }
  double tail = 0;
  for (; i < n; ++i) tail += static_cast<double>(p[i]);
  const double m = (CombineLanes(acc) + tail) / static_cast<double>(n);
  for (int j = 0; j < kLanes; ++j) acc[j] = 0;
  i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double d = static_cast<double>(p[i + j]) - m;
      acc[j] += d * d;
    }
  }
  tail = 0;
  for (; i < n; ++i) {
    const double d = static_cast<double>(p[i]) - m;
    tail += d * d;
  }
  *mean = m;
  *var = (CombineLanes(acc) + tail) / static_cast<double>(n);
}

inline double Rstd(double var, double eps) {
  return 1.0 / __builtin_sqrt(var + eps);
}

template <typename T>
void LayerNormRows(const T* __restrict x, const T* __restrict gamma,
                   const T* __restrict beta, T* __restrict y, int64_t rows,
                   int64_t cols, double eps) {
  if (cols == 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict xp = x + r * cols;
    T* __restrict yp = y + r * cols;
    double mean, var;
    RowMoments(xp, cols, &mean, &var);
    // x - mean as (x - hi) - lo with hi + lo = mean: x - hi is exact near
    // the mean, so a mean far from zero (relative to the spread) costs no
    // accuracy in float.
    const T hi = static_cast<T>(mean), lo = static_cast<T>(mean - hi);
    const T rstd = static_cast<T>(Rstd(var, eps));
    for (int64_t i = 0; i < cols; ++i) {
      yp[i] = ((xp[i] - hi) - lo) * rstd * gamma[i] + beta[i];
    }
  }
}

template <typename T>
void LayerNormGradRows(const T* __restrict x, const T* __restrict gamma,
                       const T* __restrict dy, T* __restrict dx, int64_t rows,
                       int64_t cols, double eps, double* __restrict dgamma,
                       double* __restrict dbeta) {
  if (cols == 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict xp = x + r * cols;
    const T* __restrict gp = dy + r * cols;
    double mean, var;
    RowMoments(xp, cols, &mean, &var);
    const double rstd = Rstd(var, eps);
    // s1 = sum(g), s2 = sum(g * xhat) with g = dy * gamma, in double lanes.
    double a1[kLanes] = {}, a2[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= cols; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) {
        const double g = static_cast<double>(gp[i + j]) *
                         static_cast<double>(gamma[i + j]);
        a1[j] += g;
        a2[j] += g * ((static_cast<double>(xp[i + j]) - mean) * rstd);
      }
    }
    double t1 = 0, t2 = 0;
    for (; i < cols; ++i) {
      const double g =
          static_cast<double>(gp[i]) * static_cast<double>(gamma[i]);
      t1 += g;
      t2 += g * ((static_cast<double>(xp[i]) - mean) * rstd);
    }
    const double n = static_cast<double>(cols);
    const T k1 = static_cast<T>((CombineLanes(a1) + t1) / n);
    const T k2 = static_cast<T>((CombineLanes(a2) + t2) / n);
    const T hi = static_cast<T>(mean), lo = static_cast<T>(mean - hi);
    const T rs = static_cast<T>(rstd);
    T* __restrict dp = dx + r * cols;
    for (int64_t k = 0; k < cols; ++k) {
      const T xhat = ((xp[k] - hi) - lo) * rs;
      dp[k] = rs * (gp[k] * gamma[k] - k1 - xhat * k2);
    }
    // The parameter gradients of this row, column by column.
    for (int64_t k = 0; k < cols; ++k) {
      const double d = static_cast<double>(gp[k]);
      dgamma[k] += d * ((static_cast<double>(xp[k]) - mean) * rstd);
      dbeta[k] += d;
    }
  }
}

template <typename T>
void ColumnSum(const T* __restrict x, int64_t stride, int64_t rows,
               int64_t width, double* __restrict dst) {
  int64_t r = 0;
  if constexpr (sizeof(T) == sizeof(float)) {
    for (; r + 4 <= rows; r += 4) {
      const T* __restrict p0 = x + r * stride;
      const T* __restrict p1 = p0 + stride;
      const T* __restrict p2 = p1 + stride;
      const T* __restrict p3 = p2 + stride;
      for (int64_t k = 0; k < width; ++k) {
        dst[k] += static_cast<double>((p0[k] + p1[k]) + (p2[k] + p3[k]));
      }
    }
  }
  for (; r < rows; ++r) {
    const T* __restrict p = x + r * stride;
    for (int64_t k = 0; k < width; ++k) dst[k] += static_cast<double>(p[k]);
  }
}

}  // namespace

extern const RowKernels<float> kRowKernelsF32;
extern const RowKernels<double> kRowKernelsF64;
// Constant-initialised (no code runs at load, whatever the CPU).
const RowKernels<float> kRowKernelsF32 = {
    &LayerNormRows<float>, &LayerNormGradRows<float>, &ColumnSum<float>,
    CPU_EIGEN_ROWS_ISA_NAME};
const RowKernels<double> kRowKernelsF64 = {
    &LayerNormRows<double>, &LayerNormGradRows<double>, &ColumnSum<double>,
    CPU_EIGEN_ROWS_ISA_NAME};

}  // namespace CPU_EIGEN_ROWS_NS
}  // namespace cpu_eigen
