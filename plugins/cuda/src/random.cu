// Random ops on cuda, counter-based like cpu_eigen's (random.cc,
// nn_misc.cc), with the same element-to-counter mapping, so that a seed
// gives the same numbers on every run, for any grid, and the same numbers as
// the CPU: RandomUniform bit for bit; RandomNormal within the rounding of
// log/sqrt/sin/cos; Dropout's mask bit for bit.
//  - RandomUniform / RandomNormal: Philox4x32-10 keyed by the seed, counter
//    (block, stream, 0); element b*kSpan + j*kBatch + g takes value j of
//    block b*kBatch + g (kBatch = 64 blocks per batch, kSpan = 64 * values
//    per block).
//  - Dropout: element i is kept when the top 53 bits of
//    SplitMix64(mix(seed) + (i + 1) * golden) are >= ceil(p * 2^53).
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <limits>

#include "elementwise.cuh"

namespace dragon_cuda {
namespace {

constexpr uint32_t kUniformStream = 0x5eed0001u;
constexpr uint32_t kNormalStream = 0x5eed0002u;
constexpr int64_t kBatch = 64;

struct Block4 {
  uint32_t w[4];
};

__device__ Block4 Philox(uint64_t seed, uint64_t block, uint32_t stream) {
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32),
           c2 = stream, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * c0;
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Block4{{c0, c1, c2, c3}};
}

// [0, 1) from the top 53 bits of (hi, lo), exactly as the CPU computes it.
__device__ double Unit53(uint32_t hi, uint32_t lo) {
  const int32_t top = static_cast<int32_t>(hi >> 5);
  const int32_t rest = static_cast<int32_t>(((hi & 31u) << 21) | (lo >> 11));
  return __dadd_rn(static_cast<double>(top) * 0x1.0p-27, static_cast<double>(rest) * 0x1.0p-53);
}

// Element e's (block, value index j) with kPer values per block.
template <int kPer>
__device__ void Locate(int64_t e, uint64_t* block, int* j) {
  constexpr int64_t kSpan = kBatch * kPer;
  const int64_t b = e / kSpan, w = e % kSpan;
  *j = static_cast<int>(w / kBatch);
  *block = static_cast<uint64_t>(b * kBatch + w % kBatch);
}

// float16/bfloat16: the float32 numbers (the same words), rounded once to
// the dtype; RandomUniform clamps a value that rounds up to `high` to the
// largest value below it, as float32 does.
// A double to T: float/double by static_cast, 16-bit floats through float
// (float32's value rounded once).
template <typename T>
T Narrow(double d) {
  if constexpr (sizeof(T) == 2) {
    return Store<T>(static_cast<float>(d));
  } else {
    return static_cast<T>(d);
  }
}

// The neighbour of `from` toward `to` (std::nextafter; also for the 16-bit
// floats, stepping their sign-magnitude bits).
template <typename T>
T StepToward(T from, T to) {
  if constexpr (sizeof(T) == 2) {
    const float f = Load(from), t = Load(to);
    if (!(f != t)) return from;
    using Raw = std::conditional_t<std::is_same<T, half>::value, __half_raw, __nv_bfloat16_raw>;
    Raw raw = from;
    uint16_t b = raw.x;
    if (f == 0.0f) {
      b = t > 0.0f ? 0x0001 : 0x8001;
    } else if ((f < t) == (f > 0.0f)) {
      ++b;  // away from zero
    } else {
      --b;  // toward zero
    }
    raw.x = b;
    return T(raw);
  } else {
    return std::nextafter(from, to);
  }
}

template <typename T>
__global__ void UniformKernel(T* y, int64_t n, uint64_t seed, double low, double range, T t_high,
                              T t_max) {
  constexpr int kPer = sizeof(T) <= 4 ? 4 : 2;
  DGC_LOOP(e, n) {
    uint64_t block;
    int j;
    Locate<kPer>(e, &block, &j);
    const Block4 bits = Philox(seed, block, kUniformStream);
    double u;
    if constexpr (kPer == 4) {
      u = static_cast<double>(static_cast<int32_t>(bits.w[j] >> 8)) * 0x1.0p-24;
    } else {
      u = Unit53(bits.w[2 * j], bits.w[2 * j + 1]);
    }
    const double d = __dadd_rn(low, __dmul_rn(range, u));  // no FMA: as the CPU
    T v;
    if constexpr (sizeof(T) == 2) {
      v = Store<T>(static_cast<float>(d));
    } else {
      v = static_cast<T>(d);
    }
    y[e] = Load(v) < Load(t_high) ? v : t_max;
  }
}

template <typename T>
void RandomUniform(dg::KernelContext& ctx) {
  const dg::TensorRef y = ctx.output(0);
  const double low = ctx.f("low"), high = ctx.f("high");
  DG_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high, DG_INVALID_ARGUMENT,
           ctx.op_name(), ": needs finite low <= high, got low=", low, " high=", high);
  const int64_t n = y.numel();
  if (n == 0) return;
  const T t_low = Narrow<T>(low), t_high = Narrow<T>(high);
  const T t_max = low < high && Load(t_low) < Load(t_high) ? StepToward(t_high, t_low) : t_low;
  UniformKernel<T><<<Blocks(n), kThreads, 0, Prepare(ctx)>>>(
      static_cast<T*>(y.raw_data()), n, static_cast<uint64_t>(ctx.i("seed")), low, high - low,
      t_high, t_max);
  CheckLaunch(ctx);
}
DG_KERNEL("RandomUniform", "cuda", RandomUniform, float, double, half, bf16);

// Box-Muller on the block's words: z0 = r cos(theta) goes to value 0, z1 =
// r sin(theta) to value 1.
template <typename T>
__global__ void NormalKernel(T* y, int64_t n, uint64_t seed, Acc<T> mean, Acc<T> stddev) {
  using A = Acc<T>;  // float for the 16-bit floats: float32's numbers, rounded once
  DGC_LOOP(e, n) {
    uint64_t block;
    int j;
    Locate<2>(e, &block, &j);
    const Block4 bits = Philox(seed, block, kNormalStream);
    A u1, u2;
    if constexpr (sizeof(A) == 4) {
      u1 = (static_cast<float>(bits.w[0]) + 1.0f) * 0x1.0p-32f;
      u2 = static_cast<float>(bits.w[1] >> 8) * 0x1.0p-24f;
    } else {
      u1 = 1.0 - Unit53(bits.w[0], bits.w[1]);
      u2 = Unit53(bits.w[2], bits.w[3]);
    }
    const A r = sqrt(log(u1) * A(-2)) * stddev;
    const A theta = u2 * A(6.283185307179586476925286766559);
    y[e] = Store<T>((j == 0 ? r * cos(theta) : r * sin(theta)) + mean);
  }
}

template <typename T>
void RandomNormal(dg::KernelContext& ctx) {
  const dg::TensorRef y = ctx.output(0);
  const double mean = ctx.f("mean"), stddev = ctx.f("std");
  DG_CHECK(std::isfinite(mean) && std::isfinite(stddev) && stddev >= 0.0, DG_INVALID_ARGUMENT,
           ctx.op_name(), ": needs finite mean and std >= 0, got mean=", mean, " std=", stddev);
  const int64_t n = y.numel();
  if (n == 0) return;
  NormalKernel<T><<<Blocks(n), kThreads, 0, Prepare(ctx)>>>(
      static_cast<T*>(y.raw_data()), n, static_cast<uint64_t>(ctx.i("seed")),
      static_cast<Acc<T>>(mean), static_cast<Acc<T>>(stddev));
  CheckLaunch(ctx);
}
DG_KERNEL("RandomNormal", "cuda", RandomNormal, float, double, half, bf16);

// ------------------------------------------------------------ Dropout

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

__host__ __device__ inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// float16/bfloat16: y = x * scale in float, rounded once (float32's y
// rounded); the mask holds the scale rounded to the dtype.
template <typename T>
__global__ void DropoutKernel(const T* x, T* y, T* mask, int64_t n, uint64_t key,
                              uint64_t threshold, Acc<T> scale) {
  DGC_LOOP(i, n) {
    const uint64_t bits = Mix64(key + static_cast<uint64_t>(i + 1) * kGolden);
    const Acc<T> m = (bits >> 11) >= threshold ? scale : Acc<T>(0);
    mask[i] = Store<T>(m);
    y[i] = Store<T>(Load(x[i]) * m);
  }
}

template <typename T>
void Dropout(dg::KernelContext& ctx) {
  const double p = ctx.f("p");
  DG_CHECK(p >= 0.0 && p <= 1.0, DG_INVALID_ARGUMENT, ctx.op_name(), ": p must be in [0, 1], got ",
           p);
  const int64_t n = ctx.input(0).numel();
  if (n == 0) return;
  cudaStream_t s = Prepare(ctx);
  T* py = static_cast<T*>(ctx.output(0).raw_data());
  T* pm = static_cast<T*>(ctx.output(1).raw_data());
  if (p >= 1.0) {  // everything dropped; no 1 / 0 scale
    cudaError_t e = cudaMemsetAsync(py, 0, n * sizeof(T), s);
    if (e == cudaSuccess) e = cudaMemsetAsync(pm, 0, n * sizeof(T), s);
    DG_CHECK(e == cudaSuccess, DG_INTERNAL, ctx.op_name(), ": memset failed: ", ErrorText(e));
    return;
  }
  const uint64_t threshold = static_cast<uint64_t>(std::ceil(std::ldexp(p, 53)));
  DropoutKernel<T><<<Blocks(n), kThreads, 0, s>>>(
      static_cast<const T*>(ctx.input(0).raw_data()), py, pm, n,
      Mix64(static_cast<uint64_t>(ctx.i("seed"))), threshold,
      static_cast<Acc<T>>(1.0 / (1.0 - p)));
  CheckLaunch(ctx);
}
DG_KERNEL("Dropout", "cuda", Dropout, float, double, half, bf16);

}  // namespace
}  // namespace dragon_cuda
