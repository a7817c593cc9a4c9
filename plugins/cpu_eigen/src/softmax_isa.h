// Float32 Softmax / LogSoftmax row kernels (softmax_isa.cc) as a table of
// entry points built per instruction set, like rows.h: the baseline build
// is part of the plugin's sources, the x86-64-v3 and -v4 builds are picked
// at first use when the CPU runs them (DetectIsaLevel in common.h;
// DRAGON_CPU_EIGEN_ISA caps the choice).
//
// The entry points run single-threaded over what they are given; softmax.cc
// splits rows (or column blocks) over threads. Each slice is computed alone,
// in an order that depends on its length only, so results do not depend on
// the thread count. The builds with FMA (v3, v4) do the same IEEE
// operations in the same order (the row sums in 16 logical lanes whatever
// the register width) and give the same bits; the baseline rounds its
// multiply-adds twice, so it may differ from them in the last bit.
#pragma once

#include <cstdint>

#ifndef CPU_EIGEN_SOFTMAX_TABLE_ONLY
#include "common.h"
#endif

namespace cpu_eigen {

struct SoftmaxKernels {
  // Softmax (log_softmax when `log`) of each of the `rows` contiguous rows
  // of n >= 1 floats of x into y: m = max(row), e = exp(x - m) (the
  // exponential of softmax_exp.h), s = sum(e) (16 lanes, each adding up to
  // 16 values in float before its double; the lanes halved in a fixed
  // order); softmax y = e * float(1 / s), log_softmax
  // y = (x - m) - float(log(s)). A row holding a NaN, a +inf, or only -inf
  // comes out all NaN (as the max-shifted formula gives).
  void (*rows)(const float* x, float* y, int64_t rows, int64_t n, int log);
  // The same along the middle axis of one slice laid out as (dim, inner),
  // for the positions [k0, k1) of the inner axis; `max` (floats) and `sum`
  // (doubles) are scratch of k1 - k0 elements.
  void (*columns)(const float* x, float* y, int64_t dim, int64_t inner,
                  int64_t k0, int64_t k1, int log, float* max, double* sum);
  // SoftmaxGrad along the last axis for `rows` rows of n floats:
  // dx = y * (dy - s), s = float(sum(dy * y)) with the products rounded to
  // float and summed exactly as reduce.cc's Sum folds a float run
  // (SumFloatRun: 8 float lanes over blocks of 32, widened to 8 double
  // lanes, then a tail in double) over `chunks` equal pieces of the row,
  // the pieces added in order: bit for bit the Mul, Sum(keepdims), Sub and
  // Mul kernels one by one. dx may alias y or dy.
  void (*grad_rows)(const float* y, const float* dy, float* dx, int64_t rows,
                    int64_t n, int64_t chunks);
  const char* isa;
};

#ifndef CPU_EIGEN_SOFTMAX_TABLE_ONLY
namespace softmax_v3 {
extern const SoftmaxKernels kSoftmaxKernels
    __attribute__((weak, visibility("hidden")));
}
namespace softmax_v4 {
extern const SoftmaxKernels kSoftmaxKernels
    __attribute__((weak, visibility("hidden")));
}
namespace softmax_base {
extern const SoftmaxKernels kSoftmaxKernels;
}

// The softmax kernels of the best build this CPU runs, chosen once.
inline const SoftmaxKernels& SoftmaxKernelsForCpu() {
  static const SoftmaxKernels* const chosen = BestIsaBuild(
      &softmax_v4::kSoftmaxKernels, &softmax_v3::kSoftmaxKernels,
      static_cast<const SoftmaxKernels*>(nullptr),
      &softmax_base::kSoftmaxKernels);
  return *chosen;
}
#endif  // CPU_EIGEN_SOFTMAX_TABLE_ONLY

}  // namespace cpu_eigen
