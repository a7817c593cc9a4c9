// BatchNorm's training-mode statistics sums (norm.cc), compiled once for
// the library's baseline and, on x86-64, again for x86-64-v3 and -v4
// (CMakeLists.txt, DG_NORMSTATS_ISA = base | v3 | v4): the loops are plain
// C++ that the compiler vectorises for each instruction set, and norm.cc
// calls the build DetectIsaLevel() allows. Each build's functions live in
// namespace cpu_eigen::normstats_<isa>; stats.cc includes no header with
// inline functions, so no build shares a mangled name with another.
//
// Over nseg segments of len values (segment k at base + k * stride), with
// d = x - shift accumulated in double in vector lanes (stats.cc; the lanes
// are added in a fixed order at the end, so the result does not depend on
// the thread count; the builds may differ in the last bits, where one
// contracts d * d + q into a fused multiply-add):
//   ShiftedSums:     out[0] = sum(d), out[1] = sum(d^2)
//   ShiftedGradSums: also out[2] = sum(g), out[3] = sum(g d), g = dy.
#ifndef DRAGON_CPU_EIGEN_NORM_ISA_STATS_H_
#define DRAGON_CPU_EIGEN_NORM_ISA_STATS_H_

#include <cstdint>

namespace cpu_eigen {

#define CPU_EIGEN_NORMSTATS_DECLARE(ns)                                       \
  namespace ns {                                                              \
  void ShiftedSums(const float* base, int64_t nseg, int64_t stride,           \
                   int64_t len, double shift, double* out);                   \
  void ShiftedSums(const double* base, int64_t nseg, int64_t stride,          \
                   int64_t len, double shift, double* out);                   \
  void ShiftedGradSums(const float* x, const float* dy, int64_t nseg,         \
                       int64_t stride, int64_t len, double shift,             \
                       double* out);                                          \
  void ShiftedGradSums(const double* x, const double* dy, int64_t nseg,       \
                       int64_t stride, int64_t len, double shift,             \
                       double* out);                                          \
  }

CPU_EIGEN_NORMSTATS_DECLARE(normstats_base)
#ifdef CPU_EIGEN_X86_ISAS
CPU_EIGEN_NORMSTATS_DECLARE(normstats_v3)
CPU_EIGEN_NORMSTATS_DECLARE(normstats_v4)
#endif

#undef CPU_EIGEN_NORMSTATS_DECLARE

}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_NORM_ISA_STATS_H_
