// Batched GEMM on Eigen, built once per instruction set (see gemm.h).
//
// Several builds of this file live in one shared object. Inline functions and
// template instances with the same mangled name are merged by the linker,
// which would let it pick, say, the AVX-512 copy of an Eigen kernel for the
// baseline path. So this file renames Eigen's namespace (the `Eigen` macro
// below, set before any Eigen header), puts its own code in
// cpu_eigen::gemm_<isa>, and uses nothing else that instantiates templates
// or inline functions shared with other translation units (no std
// containers or strings). `nm -C` on the object lists the weak symbols;
// all of them must sit in one of those two ISA-named namespaces.
#ifndef DG_GEMM_ISA
#error "build src/gemm/*.cc with -DDG_GEMM_ISA=base|v3|v4 (see CMakeLists.txt)"
#endif

#define DG_GEMM_CAT_INNER_(a, b) a##b
#define DG_GEMM_CAT_(a, b) DG_GEMM_CAT_INNER_(a, b)
#define DG_GEMM_STR_INNER_(a) #a
#define DG_GEMM_STR_(a) DG_GEMM_STR_INNER_(a)
#define Eigen DG_GEMM_CAT_(Eigen_gemm_, DG_GEMM_ISA)
// What Describe() reports: the -march of a per-ISA build, or the baseline.
#ifndef DG_GEMM_ISA_NAME
#define DG_GEMM_ISA_NAME "x86-64-" DG_GEMM_STR_(DG_GEMM_ISA)
#endif
// Threads are managed here (SplitProduct, batch loops), never by Eigen.
#define EIGEN_DONT_PARALLELIZE

// GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics
// (the `__Y = __Y` idiom of _mm256_undefined_pd) when Eigen's packet
// transposes inline them: a false positive in compiler headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "gemm.h"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>

namespace cpu_eigen {
namespace DG_GEMM_CAT_(gemm_, DG_GEMM_ISA) {
namespace {

template <typename T>
using RowMatrix =
    Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using InMap =
    Eigen::Map<const RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using OutMap = Eigen::Map<RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// One product C = op(A) * op(B) of n x m outputs (a panel of the call's
// C when the product is split), on the calling thread. Eigen picks GEMM,
// GEMV or a coefficient loop by size.
template <typename T>
void Product(const GemmCall<T>& g, int64_t n, int64_t m, const T* a, const T* b,
             T* c) {
  OutMap<T> cm(c, n, m, Eigen::OuterStride<>(g.ldc));
  if (g.k == 0) {
    cm.setZero();
    return;
  }
  InMap<T> am(a, g.trans_a ? g.k : n, g.trans_a ? n : g.k,
              Eigen::OuterStride<>(g.lda));
  InMap<T> bm(b, g.trans_b ? m : g.k, g.trans_b ? g.k : m,
              Eigen::OuterStride<>(g.ldb));
  if (!g.trans_a && !g.trans_b) {
    cm.noalias() = am * bm;
  } else if (g.trans_a && !g.trans_b) {
    cm.noalias() = am.transpose() * bm;
  } else if (!g.trans_a && g.trans_b) {
    cm.noalias() = am * bm.transpose();
  } else {
    cm.noalias() = am.transpose() * bm.transpose();
  }
}

// A large product on `team` threads: C is cut into `team` panels along its
// longer side, each an independent single-threaded Eigen GEMM. Eigen's own
// threading shares packed blocks and makes its threads spin-wait on each
// other at every block, which costs dearly when cores are shared; the
// panels only repeat the packing of the other operand (a few percent).
template <typename T>
void SplitProduct(const GemmCall<T>& g, const T* a, const T* b, T* c,
                  int team) {
  const bool by_rows = g.n >= g.m;
  const int64_t extent = by_rows ? g.n : g.m;
  // Panel edges on multiples of Eigen's register blocks (at most 48 rows
  // by 8 columns for float with AVX-512), so no panel gets ragged edges.
  const int64_t align = by_rows ? 48 : 16;
  const int64_t units = (extent + align - 1) / align;
#pragma omp parallel num_threads(team)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t lo = std::min(extent, units * t / nt * align);
    const int64_t hi = std::min(extent, units * (t + 1) / nt * align);
    if (hi > lo && by_rows) {
      Product(g, hi - lo, g.m, a + (g.trans_a ? lo : lo * g.lda), b,
              c + lo * g.ldc);
    } else if (hi > lo) {
      Product(g, g.n, hi - lo, a, b + (g.trans_b ? lo * g.ldb : lo), c + lo);
    }
  }
}

// Work (2 * n * m * k flops) per thread below which adding a thread does
// not pay (waking it and repacking an operand cost about this much).
constexpr double kFlopsPerThread = 4.0 * 1024 * 1024;
// Per-product work below which a batch runs on one thread per item
// rather than one product at a time on all threads.
constexpr double kBatchParallelFlops = 64.0 * 1024 * 1024;
// Total work below which everything runs on the calling thread.
constexpr double kSerialFlops = 128.0 * 1024;

template <typename T>
void Run(const GemmCall<T>& g) {
  if (g.batch <= 0 || g.n <= 0 || g.m <= 0) return;
  const double flops = 2.0 * static_cast<double>(g.n) *
                       static_cast<double>(g.m) * static_cast<double>(g.k);
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const auto a_of = [&g](int64_t i) {
    return g.a + (g.a_offsets ? g.a_offsets[i] : 0);
  };
  const auto b_of = [&g](int64_t i) {
    return g.b + (g.b_offsets ? g.b_offsets[i] : 0);
  };
  const bool over_batch =
      g.batch > 1 && threads > 1 &&
      flops * static_cast<double>(g.batch) >= kSerialFlops &&
      (flops < kBatchParallelFlops || g.batch >= 4 * threads);
  if (over_batch) {
    const int team = static_cast<int>(std::min<int64_t>(g.batch, threads));
#pragma omp parallel for num_threads(team) schedule(static)
    for (int64_t i = 0; i < g.batch; ++i) {
      Product(g, g.n, g.m, a_of(i), b_of(i), g.c + i * g.c_stride);
    }
    return;
  }
  const int team = static_cast<int>(
      std::max(1.0, std::min<double>(threads, flops / kFlopsPerThread)));
  for (int64_t i = 0; i < g.batch; ++i) {
    if (team > 1) {
      SplitProduct(g, a_of(i), b_of(i), g.c + i * g.c_stride, team);
    } else {
      Product(g, g.n, g.m, a_of(i), b_of(i), g.c + i * g.c_stride);
    }
  }
}

}  // namespace

void Gemm(const GemmCall<float>& call) { Run(call); }
void Gemm(const GemmCall<double>& call) { Run(call); }

const char* Describe() {
  return "Eigen " DG_GEMM_STR_(EIGEN_WORLD_VERSION) "." DG_GEMM_STR_(
      EIGEN_MAJOR_VERSION) "." DG_GEMM_STR_(EIGEN_MINOR_VERSION) " GEMM, "
      DG_GEMM_ISA_NAME;
}

}  // namespace DG_GEMM_CAT_(gemm_, DG_GEMM_ISA)
}  // namespace cpu_eigen
