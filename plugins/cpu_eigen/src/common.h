// Shared helpers for the cpu_eigen kernels: dtype declarations for Eigen's
// 16-bit floats, a parallel loop, and shape arithmetic.
#ifndef DRAGON_CPU_EIGEN_COMMON_H_
#define DRAGON_CPU_EIGEN_COMMON_H_

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "dragon/plugin.hpp"

DG_DECLARE_DTYPE(Eigen::half, DG_FLOAT16)
DG_DECLARE_DTYPE(Eigen::bfloat16, DG_BFLOAT16)

namespace cpu_eigen {

// Below this many elements (of simple work) a loop runs on one thread: the
// cost of waking a team (~1-2 us) outweighs the work.
constexpr int64_t kParallelGrain = 32768;

// Runs fn(begin, end) over [0, n) in contiguous chunks, in parallel when the
// work is large enough. `cost` scales the grain for expensive elements.
template <typename Fn>
void ParallelFor(int64_t n, Fn&& fn, int64_t cost = 1) {
  if (n <= 0) return;
  if (n * cost < kParallelGrain) {  // small work: no OpenMP call at all
    fn(int64_t{0}, n);
    return;
  }
  int threads = omp_get_max_threads();
  if (threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads, (n * cost) / (kParallelGrain / 2));
  chunks = std::max<int64_t>(1, std::min<int64_t>(chunks, n));
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    fn(begin, end);
  }
}

// 1, 2, 3 or 4: the x86-64 microarchitecture level this CPU runs (1 is the
// plain x86-64 baseline the library is compiled for, and the only level on
// other architectures), capped by DRAGON_CPU_EIGEN_ISA=base|v2|v3 (for
// testing and benchmarking the other builds).
inline int DetectIsaLevel() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
#if !defined(__clang__) && __GNUC__ >= 12
  const bool v2 = __builtin_cpu_supports("x86-64-v2");
  const bool v3 = v2 && __builtin_cpu_supports("x86-64-v3");
  const bool v4 = v3 && __builtin_cpu_supports("x86-64-v4");
#else
  const bool v2 = __builtin_cpu_supports("sse3") &&
                  __builtin_cpu_supports("ssse3") &&
                  __builtin_cpu_supports("sse4.1") &&
                  __builtin_cpu_supports("sse4.2") &&
                  __builtin_cpu_supports("popcnt");
  const bool v3 = v2 && __builtin_cpu_supports("avx2") &&
                  __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") &&
                  __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") &&
                  __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
#endif
  int level = v4 ? 4 : v3 ? 3 : v2 ? 2 : 1;
  if (const char* cap = std::getenv("DRAGON_CPU_EIGEN_ISA")) {
    if (std::strcmp(cap, "base") == 0) level = 1;
    if (std::strcmp(cap, "v2") == 0) level = std::min(level, 2);
    if (std::strcmp(cap, "v3") == 0) level = std::min(level, 3);
  }
  return level;
#else
  return 1;
#endif
}

// Of the builds of one kernel table, the one for the best instruction set
// this CPU runs among those linked in: v4, v3 and v2 are weak tables, null
// when the plugin was not linked with them; base always exists. Call it only
// from baseline code (the *_TABLE_ONLY guards keep it out of the other builds).
template <typename Table>
const Table* BestIsaBuild(const Table* v4, const Table* v3, const Table* v2,
                          const Table* base) {
  const int level = DetectIsaLevel();
  if (level >= 4 && v4 != nullptr) return v4;
  if (level >= 3 && v3 != nullptr) return v3;
  if (level >= 2 && v2 != nullptr) return v2;
  return base;
}

// Contiguous (row-major) strides in elements for a shape.
inline std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

inline int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Normalises a possibly negative axis against ndim.
inline int64_t NormAxis(int64_t axis, int64_t ndim) {
  return axis < 0 ? axis + ndim : axis;
}


// The "axis" attribute normalised against the rank of x (input 0);
// DG_INVALID_ARGUMENT when it is out of range.
inline int64_t CheckedAxis(const dg::KernelContext& ctx,
                           const dg::TensorRef& x) {
  const int64_t axis = NormAxis(ctx.i("axis"), x.ndim());
  DG_CHECK(axis >= 0 && axis < x.ndim(), DG_INVALID_ARGUMENT, ctx.op_name(),
           ": axis ", ctx.i("axis"), " out of range for x shape ",
           dg::ShapeStr(x.shape()));
  return axis;
}

// Throws DG_OUT_OF_RANGE unless -n <= v < n: index v along `axis` (size n)
// of input 0. Callers check every index before a parallel region starts:
// no exception may leave one.
inline void CheckIndex(const dg::KernelContext& ctx, int64_t v, int64_t n,
                       int64_t axis) {
  if (v < -n || v >= n) {
    throw dg::Error(DG_OUT_OF_RANGE,
                    dg::Str(ctx.op_name(), ": index ", v,
                            " is out of range for axis ", axis, " with size ",
                            n, " (x shape ",
                            dg::ShapeStr(ctx.input(0).shape()), ")"));
  }
}

// Returns fn(t.data<const int32_t>()) or fn(t.data<const int64_t>()) by the
// dtype of the index tensor t; any other dtype is a DG_INVALID_ARGUMENT
// error naming the op and `what` (the input's name).
template <typename Fn>
decltype(auto) DispatchIndexType(const dg::KernelContext& ctx,
                                 const dg::TensorRef& t, const char* what,
                                 Fn&& fn) {
  switch (t.dtype()) {
    case DG_INT32:
      return fn(t.data<const int32_t>());
    case DG_INT64:
      return fn(t.data<const int64_t>());
    default:
      throw dg::Error(DG_INVALID_ARGUMENT,
                      dg::Str(ctx.op_name(), ": ", what,
                              " must be int32 or int64, got ",
                              dg::DTypeName(t.dtype())));
  }
}

}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_COMMON_H_
