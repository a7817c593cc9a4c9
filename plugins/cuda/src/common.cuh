// Helpers shared by the cuda plugin's kernels (compiled by nvcc): launch
// geometry, the call's stream and device, strided/broadcast index math and
// the 16-bit float types.
#ifndef DRAGON_CUDA_COMMON_CUH_
#define DRAGON_CUDA_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "dragon/plugin.hpp"
#include "runtime.h"

DG_DECLARE_DTYPE(__half, DG_FLOAT16)
DG_DECLARE_DTYPE(__nv_bfloat16, DG_BFLOAT16)

namespace dragon_cuda {

using half = __half;
using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;
constexpr int kMaxDims = 8;

// Blocks for n elements, kThreads each, capped (the kernels loop).
inline unsigned Blocks(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > 65535LL * 16) b = 65535LL * 16;
  return static_cast<unsigned>(b);
}

// Makes the call's device current and returns its stream.
inline cudaStream_t Prepare(const dg::KernelContext& ctx) {
  const cudaError_t e = SetDevice(ctx.device().index);
  DG_CHECK(e == cudaSuccess, DG_INTERNAL, ctx.op_name(), " on cuda:", ctx.device().index,
           ": cudaSetDevice failed: ", ErrorText(e));
  return static_cast<cudaStream_t>(ctx.stream());
}

// The status of a failed launch: an error that lost the CUDA context (an
// earlier kernel's illegal address, trap or assert, which every later call
// returns again) is DG_ABORTED, as the device table reports it.
inline DgStatus LaunchStatus(cudaError_t e) {
  if (e == cudaErrorMemoryAllocation) return DG_RESOURCE_EXHAUSTED;
  return ContextLost(e) ? DG_ABORTED : DG_INTERNAL;
}

// Checks the launch that was just issued.
inline void CheckLaunch(const dg::KernelContext& ctx) {
  const cudaError_t e = cudaGetLastError();
  DG_CHECK(e == cudaSuccess, LaunchStatus(e), ctx.op_name(), " on cuda:", ctx.device().index,
           ": kernel launch failed: ", ErrorText(e));
}

#define DGC_LOOP(i, n)                                                              \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;     \
       i < (n); i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// ------------------------------------------------------------ index math

// Maps a dense (row-major) index over `shape` to element offsets of up to
// three operands with their own strides (0 where an operand broadcasts).
// Passed to kernels by value.
struct Indexer {
  int32_t ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[3][kMaxDims] = {};

  __host__ __device__ void Offsets(int64_t i, int64_t* off, int n) const {
    for (int k = 0; k < n; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t q = i / shape[d];
      const int64_t r = i - q * shape[d];
      for (int k = 0; k < n; ++k) off[k] += r * strides[k][d];
      i = q;
    }
  }
};

// Strides of `in` (shape/strides of rank <= out.size()) broadcast against
// `out`: right-aligned, 0 where `in` has size 1 or lacks the axis.
std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& in_shape,
                                      const std::vector<int64_t>& in_strides,
                                      const std::vector<int64_t>& out_shape);

// An Indexer over `shape` for operands with the given (broadcast) strides,
// after merging adjacent axes that are contiguous for every operand and
// dropping size-1 axes (so most calls index over 1 or 2 axes).
Indexer MakeIndexer(const char* op, const std::vector<int64_t>& shape,
                    const std::vector<std::vector<int64_t>>& strides);

inline std::vector<int64_t> DenseStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

// ------------------------------------------------------------ number types

// The type arithmetic is done in: float for the 16-bit floats.
template <typename T>
struct AccOf {
  using type = T;
};
template <>
struct AccOf<half> {
  using type = float;
};
template <>
struct AccOf<bf16> {
  using type = float;
};
template <typename T>
using Acc = typename AccOf<T>::type;

template <typename T>
constexpr bool kIsFloat = std::is_floating_point<T>::value || std::is_same<T, half>::value ||
                          std::is_same<T, bf16>::value;

template <typename T>
__host__ __device__ inline Acc<T> Load(T v) {
  return static_cast<Acc<T>>(v);
}
template <typename T>
__host__ __device__ inline T Store(Acc<T> v) {
  return static_cast<T>(v);
}

// Through double (statistics and sums kept in double): 16-bit floats widen
// through float; a double narrows to T through Acc<T>, as static_cast<T>
// does for float and double.
template <typename T>
__host__ __device__ inline double ToDouble(T v) {
  return static_cast<double>(Load<T>(v));
}
template <typename T>
__host__ __device__ inline T FromDouble(double d) {
  return Store<T>(static_cast<Acc<T>>(d));
}

// Calls f(T{}) with T the C++ type of dtype `t`.
template <typename F>
void Dispatch(DgDType t, const char* op, F&& f) {
  switch (t) {
    case DG_BOOL: f(bool{}); return;
    case DG_UINT8: f(uint8_t{}); return;
    case DG_INT8: f(int8_t{}); return;
    case DG_INT16: f(int16_t{}); return;
    case DG_INT32: f(int32_t{}); return;
    case DG_INT64: f(int64_t{}); return;
    case DG_FLOAT16: f(half{}); return;
    case DG_BFLOAT16: f(bf16{}); return;
    case DG_FLOAT32: f(float{}); return;
    case DG_FLOAT64: f(double{}); return;
    default: DG_CHECK(false, DG_INVALID_ARGUMENT, op, ": unknown dtype code ", t);
  }
}

}  // namespace dragon_cuda

#endif  // DRAGON_CUDA_COMMON_CUH_
