// Row kernels of layer norm (forward and backward) and of column sums (a
// reduction over leading axes that keeps the contiguous last one, e.g. a
// Linear layer's bias gradient [rows, cols] -> [cols]), as a table of
// entry points built per instruction set (rows_isa.cc, like
// elementwise_isa.cc): the baseline build is part of the plugin's sources,
// the x86-64-v3 and -v4 builds are picked at first use when the CPU runs
// them (DetectIsaLevel in common.h; DRAGON_CPU_EIGEN_ISA caps the choice).
//
// The entry points run single-threaded over the rows they are given; the
// callers (norm.cc, reduce.cc) split the rows over threads, in blocks that
// depend on the shapes only. Every build does the same operations in the
// same order (no reassociation: the compiler vectorises across independent
// lanes and columns only); the v3/v4 builds may contract a multiply-add
// into one FMA, so their results can differ from the baseline's in the
// last bit.
#pragma once

#include <cstdint>

#ifndef CPU_EIGEN_ROWS_TABLE_ONLY
#include <type_traits>

#include "common.h"
#endif

namespace cpu_eigen {

template <typename T>
struct RowKernels {
  // y[r, :] = (x[r, :] - mean_r) * rstd_r * gamma + beta for rows [0, rows)
  // of the [rows, cols] matrices; statistics in double, two-pass.
  void (*layer_norm)(const T* x, const T* gamma, const T* beta, T* y,
                     int64_t rows, int64_t cols, double eps);
  // Per row, with g = dy * gamma and xhat = (x - mean) * rstd:
  //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat));
  // and the parameter gradients of these rows added to dgamma[cols] and
  // dbeta[cols] (double): dgamma += dy * xhat, dbeta += dy.
  void (*layer_norm_grad)(const T* x, const T* gamma, const T* dy, T* dx,
                          int64_t rows, int64_t cols, double eps,
                          double* dgamma, double* dbeta);
  // dst[k] += sum over rows r in [0, rows) of x[r * stride + k], for k in
  // [0, width). float rows are added four at a time in float, then widened
  // (as reduce.cc's fold of floats); double rows one at a time.
  void (*column_sum)(const T* x, int64_t stride, int64_t rows, int64_t width,
                     double* dst);
  const char* isa;
};

// rows_isa.cc includes only the table (CPU_EIGEN_ROWS_TABLE_ONLY): a build
// for another instruction set must emit no code shared with the baseline.
#ifndef CPU_EIGEN_ROWS_TABLE_ONLY
#define CPU_EIGEN_ROWS_DECLARE_(ns, attrs)                            \
  namespace ns {                                                     \
  extern const RowKernels<float> kRowKernelsF32 attrs;               \
  extern const RowKernels<double> kRowKernelsF64 attrs;              \
  }
// The per-instruction-set builds: weak and hidden, null when the plugin was
// not linked with them (then the baseline serves).
CPU_EIGEN_ROWS_DECLARE_(rows_v3, __attribute__((weak, visibility("hidden"))))
CPU_EIGEN_ROWS_DECLARE_(rows_v4, __attribute__((weak, visibility("hidden"))))
CPU_EIGEN_ROWS_DECLARE_(rows_base, )
#undef CPU_EIGEN_ROWS_DECLARE_

// The row kernels for T (float or double) of the best build this CPU runs,
// chosen once.
template <typename T>
const RowKernels<T>& RowKernelsFor() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "row kernels exist for float and double");
  static const RowKernels<T>* const chosen = [] {
    if constexpr (std::is_same_v<T, float>)
      return BestIsaBuild(&rows_v4::kRowKernelsF32, &rows_v3::kRowKernelsF32,
                          static_cast<const RowKernels<T>*>(nullptr),
                          &rows_base::kRowKernelsF32);
    else
      return BestIsaBuild(&rows_v4::kRowKernelsF64, &rows_v3::kRowKernelsF64,
                          static_cast<const RowKernels<T>*>(nullptr),
                          &rows_base::kRowKernelsF64);
  }();
  return *chosen;
}
#endif  // CPU_EIGEN_ROWS_TABLE_ONLY

}  // namespace cpu_eigen
