// Element-wise launch machinery shared by the unary, binary and copy/cast
// kernels: y[i] = f(x0[off0(i)], x1[off1(i)]) over the output's dense index,
// each input read through its own (broadcast, possibly negative) strides.
#ifndef DRAGON_CUDA_ELEMENTWISE_CUH_
#define DRAGON_CUDA_ELEMENTWISE_CUH_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "common.cuh"
#include "index_math.h"

namespace dragon_cuda {

// ------------------------------------------------------------ conversion
// The rules of cpu_eigen's cast.h (docs/ops.md, Cast): to bool is x != 0
// (NaN true); float to integer truncates, saturates and maps NaN to 0; to
// float16/bfloat16 rounds once to nearest-even, also from float64 and int64
// (through round-to-odd intermediates).

__host__ __device__ inline float RoundToOddFloat(double d) {
  float f = static_cast<float>(d);
  if (!(f - f == 0.0f) || static_cast<double>(f) == d) return f;  // inf/NaN or exact
  uint32_t bits;
  memcpy(&bits, &f, sizeof(bits));
  if (fabs(static_cast<double>(f)) > fabs(d)) --bits;  // truncate toward zero
  bits |= 1u;
  memcpy(&f, &bits, sizeof(bits));
  return f;
}

__host__ __device__ inline double RoundToOddDouble(int64_t x) {
  uint64_t u = x < 0 ? uint64_t{0} - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  if (u >> 53) {
    int shift = 0;  // bits that do not fit in 53
    while ((u >> (53 + shift)) != 0) ++shift;
    const uint64_t low = u & ((uint64_t{1} << shift) - 1);
    u -= low;
    if (low != 0) u |= uint64_t{1} << shift;  // sticky bit
  }
  const double d = static_cast<double>(u);
  return x < 0 ? -d : d;
}

template <typename T>
__host__ __device__ inline T SaturatingCast(double d) {
  constexpr double kLo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double kHiExclusive =
      static_cast<double>(std::numeric_limits<T>::max() / 2 + 1) * 2.0;
  if (!(d == d)) return T(0);
  if (d >= kHiExclusive) return std::numeric_limits<T>::max();
  if (d <= kLo) return std::numeric_limits<T>::min();
  return static_cast<T>(d);
}

template <typename T>
constexpr bool kIsHalf = std::is_same<T, half>::value || std::is_same<T, bf16>::value;

template <typename To>
__host__ __device__ inline To FromFloat(float f) {
  if constexpr (std::is_same<To, half>::value) {
    return __float2half_rn(f);
  } else {
    return __float2bfloat16_rn(f);
  }
}

template <typename To, typename From>
__host__ __device__ inline To Convert(From x) {
  if constexpr (std::is_same<To, From>::value) {
    return x;
  } else if constexpr (std::is_same<To, bool>::value) {
    if constexpr (kIsHalf<From>) {
      return static_cast<float>(x) != 0.0f;
    } else {
      return x != From(0);
    }
  } else if constexpr (std::is_same<From, bool>::value) {
    if constexpr (kIsHalf<To>) {
      return FromFloat<To>(x ? 1.0f : 0.0f);
    } else {
      return static_cast<To>(x ? 1 : 0);
    }
  } else if constexpr (std::is_integral<To>::value) {
    if constexpr (std::is_integral<From>::value) {
      return static_cast<To>(x);
    } else if constexpr (kIsHalf<From>) {
      return SaturatingCast<To>(static_cast<double>(static_cast<float>(x)));
    } else {
      return SaturatingCast<To>(static_cast<double>(x));
    }
  } else if constexpr (kIsHalf<To>) {
    if constexpr (std::is_same<From, float>::value) {
      return FromFloat<To>(x);
    } else if constexpr (kIsHalf<From>) {
      return FromFloat<To>(static_cast<float>(x));
    } else if constexpr (std::is_integral<From>::value && sizeof(From) <= 2) {
      return FromFloat<To>(static_cast<float>(x));  // exact in float
    } else if constexpr (std::is_same<From, int64_t>::value) {
      return FromFloat<To>(RoundToOddFloat(RoundToOddDouble(x)));
    } else {
      return FromFloat<To>(RoundToOddFloat(static_cast<double>(x)));
    }
  } else {  // To is float or double
    if constexpr (kIsHalf<From>) {
      return static_cast<To>(static_cast<float>(x));
    } else {
      return static_cast<To>(x);
    }
  }
}

// ------------------------------------------------------------ launches

// y[i] = f(x[off(i)]) with y dense.
template <typename In, typename Out, typename F>
__global__ void UnaryKernel(const In* x, Out* y, int64_t n, Indexer ix, bool dense, F f) {
  DGC_LOOP(i, n) {
    int64_t off = i;
    if (!dense) ix.Offsets(i, &off, 1);
    y[i] = f(x[off]);
  }
}

template <typename A, typename B, typename Out, typename F>
__global__ void BinaryKernel(const A* a, const B* b, Out* y, int64_t n, Indexer ix, bool dense,
                             F f) {
  DGC_LOOP(i, n) {
    int64_t off[2] = {i, i};
    if (!dense) ix.Offsets(i, off, 2);
    y[i] = f(a[off[0]], b[off[1]]);
  }
}

template <typename C, typename T, typename F>
__global__ void TernaryKernel(const C* c, const T* a, const T* b, T* y, int64_t n, Indexer ix,
                              bool dense, F f) {
  DGC_LOOP(i, n) {
    int64_t off[3] = {i, i, i};
    if (!dense) ix.Offsets(i, off, 3);
    y[i] = f(c[off[0]], a[off[1]], b[off[2]]);
  }
}

// Dense operands aligned to V values: the same f on V-value vectors (one
// 16-byte access per operand of the widest type; memory-bound kernels need
// few, wide accesses to reach the bandwidth), the last n % V values by
// block 0.
template <typename In, typename Out, int V, typename F>
__global__ void UnaryVecKernel(const In* x, Out* y, int64_t n, F f) {
  const int64_t nv = n / V;
  const auto* xv = reinterpret_cast<const Vec<In, V>*>(x);
  auto* yv = reinterpret_cast<Vec<Out, V>*>(y);
  DGC_LOOP(i, nv) {
    const Vec<In, V> a = xv[i];
    Vec<Out, V> o;
#pragma unroll
    for (int t = 0; t < V; ++t) o.v[t] = f(a.v[t]);
    yv[i] = o;
  }
  const int64_t tail = nv * V + threadIdx.x;
  if (blockIdx.x == 0 && tail < n) y[tail] = f(x[tail]);
}

template <typename A, typename B, typename Out, int V, typename F>
__global__ void BinaryVecKernel(const A* a, const B* b, Out* y, int64_t n, F f) {
  const int64_t nv = n / V;
  const auto* av = reinterpret_cast<const Vec<A, V>*>(a);
  const auto* bv = reinterpret_cast<const Vec<B, V>*>(b);
  auto* yv = reinterpret_cast<Vec<Out, V>*>(y);
  DGC_LOOP(i, nv) {
    const Vec<A, V> p = av[i];
    const Vec<B, V> q = bv[i];
    Vec<Out, V> o;
#pragma unroll
    for (int t = 0; t < V; ++t) o.v[t] = f(p.v[t], q.v[t]);
    yv[i] = o;
  }
  const int64_t tail = nv * V + threadIdx.x;
  if (blockIdx.x == 0 && tail < n) y[tail] = f(a[tail], b[tail]);
}

// Values per vector: 16 bytes of the widest operand type.
template <typename... Ts>
constexpr int VecWidth() {
  size_t widest = 1;
  for (size_t s : {sizeof(Ts)...}) widest = s > widest ? s : widest;
  return static_cast<int>(16 / widest);
}

inline bool AlignedTo(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Whether an Indexer is the identity (every operand dense over the output).
bool IsDense(const Indexer& ix, int n);

// Launches y = f(x) over ctx's input `in` and output 0 (x read through its
// strides, broadcast to y's shape).
template <typename In, typename Out, typename F>
void LaunchUnary(dg::KernelContext& ctx, F f, int in = 0) {
  const dg::TensorRef x = ctx.input(in), y = ctx.output(0);
  const int64_t n = y.numel();
  if (n == 0) return;
  cudaStream_t s = Prepare(ctx);
  const std::vector<int64_t> shape = y.shape();
  Indexer ix = MakeIndexer(ctx.op_name(), shape,
                           {BroadcastStrides(x.shape(), x.strides(), shape)});
  const bool dense = IsDense(ix, 1);
  constexpr int V = VecWidth<In, Out>();
  if (dense && V > 1 && AlignedTo(x.raw_data(), sizeof(In) * V) &&
      AlignedTo(y.raw_data(), sizeof(Out) * V)) {
    UnaryVecKernel<In, Out, V, F><<<Blocks(n / V), kThreads, 0, s>>>(
        static_cast<const In*>(x.raw_data()), static_cast<Out*>(y.raw_data()), n, f);
  } else {
    UnaryKernel<In, Out, F><<<Blocks(n), kThreads, 0, s>>>(
        static_cast<const In*>(x.raw_data()), static_cast<Out*>(y.raw_data()), n, ix, dense,
        f);
  }
  CheckLaunch(ctx);
}

template <typename A, typename B, typename Out, typename F>
void LaunchBinary(dg::KernelContext& ctx, F f) {
  const dg::TensorRef a = ctx.input(0), b = ctx.input(1), y = ctx.output(0);
  const int64_t n = y.numel();
  if (n == 0) return;
  cudaStream_t s = Prepare(ctx);
  const std::vector<int64_t> shape = y.shape();
  Indexer ix = MakeIndexer(ctx.op_name(), shape,
                           {BroadcastStrides(a.shape(), a.strides(), shape),
                            BroadcastStrides(b.shape(), b.strides(), shape)});
  const bool dense = IsDense(ix, 2);
  constexpr int V = VecWidth<A, B, Out>();
  if (dense && V > 1 && AlignedTo(a.raw_data(), sizeof(A) * V) &&
      AlignedTo(b.raw_data(), sizeof(B) * V) && AlignedTo(y.raw_data(), sizeof(Out) * V)) {
    BinaryVecKernel<A, B, Out, V, F><<<Blocks(n / V), kThreads, 0, s>>>(
        static_cast<const A*>(a.raw_data()), static_cast<const B*>(b.raw_data()),
        static_cast<Out*>(y.raw_data()), n, f);
  } else {
    BinaryKernel<A, B, Out, F><<<Blocks(n), kThreads, 0, s>>>(
        static_cast<const A*>(a.raw_data()), static_cast<const B*>(b.raw_data()),
        static_cast<Out*>(y.raw_data()), n, ix, dense, f);
  }
  CheckLaunch(ctx);
}

}  // namespace dragon_cuda

#endif  // DRAGON_CUDA_ELEMENTWISE_CUH_
