// The Adam element loop as a table of entry points built per instruction
// set (optim_isa.cc, like rows_isa.cc): the baseline build is part of the
// plugin's sources, the x86-64-v3 and -v4 builds are picked at first use
// when the CPU runs them (DetectIsaLevel; DRAGON_CPU_EIGEN_ISA caps it).
//
// Every build does the same IEEE operations in the same order (all builds
// use -ffp-contract=off, so no multiply-add is fused; sqrt and division are
// correctly rounded at every width): the results are bit for bit the same
// whichever build runs, only wider.
#pragma once

#include <cstdint>

#ifndef CPU_EIGEN_OPTIM_TABLE_ONLY
#include <type_traits>

#include "common.h"
#endif

namespace cpu_eigen {

// Adam's per-step scalars, in the element type (optim.cc's AdamStep).
template <typename T>
struct AdamParams {
  T step_size, bc2_sqrt, eps, b1, one_minus_b1, b2, one_minus_b2, l2, shrink;
  bool amsgrad, maximize;
  // Write m', v' (and vmax') with non-temporal stores (the x86-64-v3 and -v4
  // builds; the baseline stores normally): for a state larger than the
  // caches, whose next reader is the next step's update, so the lines need
  // not be read for ownership first. The same values either way.
  bool stream = false;
};

template <typename T>
struct OptimKernels {
  // One Adam step over len elements (vmax pointers only with amsgrad):
  //   d = (maximize ? -g : g) [+ l2 * p]
  //   m' = b1 * m + (1 - b1) * d;  v' = b2 * v + (1 - b2) * (d * d)
  //   [vmax' = max(vmax, v')]
  //   p' = p [* shrink] - step_size * (m' / (sqrt(v' or vmax') / bc2 + eps))
  // Outputs may be their inputs' buffers (each element is read before it
  // is written).
  void (*adam)(const AdamParams<T>& a, const T* p, const T* g, const T* m,
               const T* v, const T* vmax, T* p_out, T* m_out, T* v_out,
               T* vmax_out, int64_t len);
  const char* isa;
};

#ifndef CPU_EIGEN_OPTIM_TABLE_ONLY
#define CPU_EIGEN_OPTIM_DECLARE_(ns, attrs)                 \
  namespace ns {                                           \
  extern const OptimKernels<float> kOptimKernelsF32 attrs;  \
  extern const OptimKernels<double> kOptimKernelsF64 attrs; \
  }
// The per-instruction-set builds: weak and hidden, null when the plugin was
// not linked with them (then the baseline serves).
CPU_EIGEN_OPTIM_DECLARE_(optim_v3, __attribute__((weak, visibility("hidden"))))
CPU_EIGEN_OPTIM_DECLARE_(optim_v4, __attribute__((weak, visibility("hidden"))))
CPU_EIGEN_OPTIM_DECLARE_(optim_base, )
#undef CPU_EIGEN_OPTIM_DECLARE_

// The optimizer kernels for T (float or double) of the best build this CPU
// runs, chosen once.
template <typename T>
const OptimKernels<T>& OptimKernelsFor() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "optimizer kernels exist for float and double");
  static const OptimKernels<T>* const chosen = [] {
    if constexpr (std::is_same_v<T, float>)
      return BestIsaBuild(&optim_v4::kOptimKernelsF32, &optim_v3::kOptimKernelsF32,
                          static_cast<const OptimKernels<T>*>(nullptr),
                          &optim_base::kOptimKernelsF32);
    else
      return BestIsaBuild(&optim_v4::kOptimKernelsF64, &optim_v3::kOptimKernelsF64,
                          static_cast<const OptimKernels<T>*>(nullptr),
                          &optim_base::kOptimKernelsF64);
  }();
  return *chosen;
}
#endif  // CPU_EIGEN_OPTIM_TABLE_ONLY

}  // namespace cpu_eigen
