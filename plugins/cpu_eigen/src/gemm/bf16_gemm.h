// The interface between matmul_bf16.cc and the AVX512-BF16 GEMM
// (bf16_gemm.cc).
//
// bf16_gemm.cc is compiled only on x86-64, once, for -march=x86-64-v4 plus
// AVX512_BF16 (a target pragma in the file; CMakeLists.txt defines
// CPU_EIGEN_BF16_GEMM when it is built). Its functions must only be called
// after CpuHasAvx512Bf16() (matmul_bf16.cc, baseline code) said the CPU and
// the OS support it. Like gemm.h, this header holds plain data and
// declarations only, so it
// generates no code the builds could share by accident.
#ifndef DRAGON_CPU_EIGEN_GEMM_BF16_GEMM_H_
#define DRAGON_CPU_EIGEN_GEMM_BF16_GEMM_H_

#include <cstdint>

namespace cpu_eigen {

// C[i] = act(op(A[i]) * op(B[i]) + bias) for i in [0, batch): op(A) is
// n x k, op(B) k x m, both bfloat16 (raw bits), and C (n x m, row-major,
// leading dimension ldc, c_stride elements between items) float32 or
// bfloat16. Element (r, c) of A[i] lies at a[a_offsets[i] + r * a_rs +
// c * a_cs] (any strides; a_offsets null = all 0), and likewise for B.
// Products accumulate in float32 over k in order (a single product over at
// least 1024 k whose operands both run along k down their stored rows,
// A^T B, is summed in two fixed halves of k added at the end: SplitK in
// bf16_gemm.cc), and a bfloat16 C is
// rounded once, to nearest even. bias (m floats, null = none) is added in
// float32 before that rounding, then the residual (when given), then relu
// (NaN kept) when asked.
// A plain aggregate: value-initialise it with `Bf16GemmCall call{};`.
struct Bf16GemmCall {
  int64_t batch;
  int64_t n, m, k;
  const uint16_t* a;
  int64_t a_rs, a_cs;
  const int64_t* a_offsets;
  const uint16_t* b;
  int64_t b_rs, b_cs;
  const int64_t* b_offsets;
  void* c;
  bool c_f32;
  int64_t ldc;
  int64_t c_stride;
  const float* bias;
  bool relu;
  // Optional float32 residual (batch 1 only): residual[r * ld_residual + c]
  // is added to C(r, c) after the bias, in float32, before the relu and
  // the rounding.
  const float* residual;
  int64_t ld_residual;
  // A bfloat16 C rounded as the Cast kernel rounds (cast.h: nearest even on
  // the bits, a NaN the quiet NaN of its sign, denormals kept) instead of
  // by vcvtneps2bf16 (which flushes denormals and keeps NaN payloads): the
  // same bits as a float32 C followed by a Cast.
  bool cast_round;
  // OpenMP threads to use (>= 1); the result is the same for any count.
  int threads;
  // Scratch of Bf16GemmWorkspaceBytes(call) bytes, 64-byte aligned.
  void* workspace;
};

// Whether bfloat16 products run on this GEMM here: the build has it, the
// CPU runs AVX512-BF16, DRAGON_CPU_EIGEN_BF16_GEMM is not "off"
// (matmul_bf16.cc; baseline code, callable anywhere).
bool Bf16GemmRuns();

// Whether this GEMM comes before oneDNN's for bfloat16 products here: it
// runs (Bf16GemmRuns) and either oneDNN has no AMX tiles to run them on
// (AmxServesBf16) or DRAGON_CPU_EIGEN_BF16_GEMM is "all". Where AMX runs,
// oneDNN's tile kernels are several times faster than any vdpbf16ps
// kernel (docs/benchmarks.md, "Session 24"), so this one ranks below oneDNN's
// and the ops built on it (the bfloat16 MatMulBiasAdd and attention) are
// not registered. Baseline code, callable anywhere.
bool Bf16GemmPreferred();

// Whether oneDNN runs bfloat16 products on AMX tiles in this process:
// the CPU has AMX-TILE and AMX-BF16, the OS enables their state (XCR0
// bits 17 and 18) and the kernel can grant it (arch_prctl
// ARCH_GET_XCOMP_SUPP), and ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA do not
// cap oneDNN below AMX. DRAGON_CPU_EIGEN_AMX=on / off overrides the
// detection (tests, A/B runs); read once.
bool AmxServesBf16();

#ifdef CPU_EIGEN_BF16_GEMM
namespace gemm_bf16 {
// Bytes of scratch the call needs (packed operands, partial sums).
int64_t WorkspaceBytes(const Bf16GemmCall& call);
// Runs the call (batch, n, m > 0; k >= 0).
void Gemm(const Bf16GemmCall& call);
}  // namespace gemm_bf16
#endif

}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_GEMM_BF16_GEMM_H_
