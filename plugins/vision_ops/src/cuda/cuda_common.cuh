// Helpers shared by the vision_ops CUDA kernels (compiled only with nvcc).
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

#include "dragon/plugin.hpp"

namespace vision {
namespace cuda {

constexpr int kThreads = 256;

// Blocks for n threads of kThreads each (at least one, capped for 1-D grids).
inline unsigned Blocks(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > 65535LL * 32) b = 65535LL * 32;
  return static_cast<unsigned>(b);
}

// The stream of the call frame (the device plugin's cudaStream_t; null means
// the default stream).
inline cudaStream_t Stream(const dg::KernelContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream());
}

// Turns a CUDA error into a kernel error naming what failed.
inline void Check(cudaError_t e, const char* what) {
  DG_CHECK(e == cudaSuccess, DG_INTERNAL, what, ": ", cudaGetErrorString(e));
}

// Arithmetic rounded after every operation, never contracted into fused
// multiply-adds: the CPU kernels are compiled without them (no -march), so
// kernels that follow a CPU formula with these get the CPU's bits.
__device__ inline float Mul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double Mul(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float Add(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double Add(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float Sub(float a, float b) { return __fsub_rn(a, b); }
__device__ inline double Sub(double a, double b) { return __dsub_rn(a, b); }
__device__ inline float Div(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double Div(double a, double b) { return __ddiv_rn(a, b); }
// a * b + c rounded once (std::fma on the CPU).
__device__ inline float Fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ inline double Fma(double a, double b, double c) { return __fma_rn(a, b, c); }

// std::max / std::min: the first argument unless the comparison says
// otherwise, so a NaN first argument is returned (unlike fmax / fmin).
template <typename T>
__device__ inline T StdMax(T a, T b) {
  return a < b ? b : a;
}
template <typename T>
__device__ inline T StdMin(T a, T b) {
  return b < a ? b : a;
}

// Grid-stride loop over [0, n).
#define VISION_CUDA_LOOP(i, n)                                         \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) +   \
                   threadIdx.x;                                       \
       i < (n); i += static_cast<int64_t>(blockDim.x) * gridDim.x)

}  // namespace cuda
}  // namespace vision
