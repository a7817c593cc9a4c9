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

// Grid-stride loop over [0, n).
#define VISION_CUDA_LOOP(i, n)                                         \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) +   \
                   threadIdx.x;                                       \
       i < (n); i += static_cast<int64_t>(blockDim.x) * gridDim.x)

}  // namespace cuda
}  // namespace vision
