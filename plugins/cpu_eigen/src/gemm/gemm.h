// The interface between matmul.cc and the GEMM translation units.
//
// src/gemm/*.cc are compiled once for the library's baseline (DG_GEMM_ISA
// base: plain x86-64, or the target's default elsewhere) and, on x86-64,
// again for x86-64-v3 and -v4 (CMakeLists.txt defines DG_GEMM_ISA to base,
// v3 or v4, and CPU_EIGEN_X86_ISAS when the v3/v4 builds exist). Each build
// puts its functions in namespace cpu_eigen::gemm_<isa>; GemmBest
// (gemm_dispatch.cc, built for the baseline) picks one at run time. This
// header holds plain data and declarations only, so it generates no code
// that the builds could share by accident.
#ifndef DRAGON_CPU_EIGEN_GEMM_GEMM_H_
#define DRAGON_CPU_EIGEN_GEMM_GEMM_H_

#include <cstdint>

namespace cpu_eigen {

// C[i] = op(A[i]) * op(B[i]) for i in [0, batch), with op(A) n x k, op(B)
// k x m and C n x m. Each operand is stored row-major with leading
// dimension `ld`; `trans` says the stored matrix is the transpose of the
// logical one (so a column-major matrix is a transposed row-major one).
// A plain aggregate (no constructors, nothing inline): value-initialise
// it with `GemmCall<T> call{};`.
template <typename T>
struct GemmCall {
  int64_t batch;
  int64_t n, m, k;
  const T* a;
  int64_t lda;
  bool trans_a;
  const int64_t* a_offsets;  // per batch item, in elements; null = all 0
  const T* b;
  int64_t ldb;
  bool trans_b;
  const int64_t* b_offsets;
  T* c;
  int64_t ldc;
  int64_t c_stride;  // elements between consecutive C matrices
};

#define DG_GEMM_DECLARE_(ns)               \
  namespace ns {                           \
  void Gemm(const GemmCall<float>& call);  \
  void Gemm(const GemmCall<double>& call); \
  const char* Describe();                  \
  }

DG_GEMM_DECLARE_(gemm_base)
#ifdef CPU_EIGEN_X86_ISAS
DG_GEMM_DECLARE_(gemm_v3)
DG_GEMM_DECLARE_(gemm_v4)
#endif

#undef DG_GEMM_DECLARE_

// The build for the best instruction set this CPU has (DetectIsaLevel in
// common.h), chosen once; defined in gemm_dispatch.cc.
void GemmBest(const GemmCall<float>& call);
void GemmBest(const GemmCall<double>& call);
const char* GemmBestDescribe();

}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_GEMM_GEMM_H_
