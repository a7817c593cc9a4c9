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

template <typename T>
__global__ void UniformKernel(T* y, int64_t n, uint64_t seed, double low, double range, T t_high,
                              T t_max) {
  constexpr int kPer = sizeof(T) == 4 ? 4 : 2;
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
    const T v = static_cast<T>(__dadd_rn(low, __dmul_rn(range, u)));  // no FMA: as the CPU
    y[e] = v < t_high ? v : t_max;
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
  const T t_low = static_cast<T>(low), t_high = static_cast<T>(high);
  const T t_max = low < high ? std::max(t_low, std::nextafter(t_high, t_low)) : t_low;
  UniformKernel<T><<<Blocks(n), kThreads, 0, Prepare(ctx)>>>(
      static_cast<T*>(y.raw_data()), n, static_cast<uint64_t>(ctx.i("seed")), low, high - low,
      t_high, t_max);
  CheckLaunch(ctx);
}
DG_KERNEL("RandomUniform", "cuda", RandomUniform, float, double);

// Box-Muller on the block's words: z0 = r cos(theta) goes to value 0, z1 =
// r sin(theta) to value 1.
template <typename T>
__global__ void NormalKernel(T* y, int64_t n, uint64_t seed, T mean, T stddev) {
  DGC_LOOP(e, n) {
    uint64_t block;
    int j;
    Locate<2>(e, &block, &j);
    const Block4 bits = Philox(seed, block, kNormalStream);
    T u1, u2;
    if constexpr (sizeof(T) == 4) {
      u1 = (static_cast<float>(bits.w[0]) + 1.0f) * 0x1.0p-32f;
      u2 = static_cast<float>(bits.w[1] >> 8) * 0x1.0p-24f;
    } else {
      u1 = 1.0 - Unit53(bits.w[0], bits.w[1]);
      u2 = Unit53(bits.w[2], bits.w[3]);
    }
    const T r = sqrt(log(u1) * T(-2)) * stddev;
    const T theta = u2 * T(6.283185307179586476925286766559);
    y[e] = (j == 0 ? r * cos(theta) : r * sin(theta)) + mean;
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
      static_cast<T>(mean), static_cast<T>(stddev));
  CheckLaunch(ctx);
}
DG_KERNEL("RandomNormal", "cuda", RandomNormal, float, double);

// ------------------------------------------------------------ Dropout

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

__host__ __device__ inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

template <typename T>
__global__ void DropoutKernel(const T* x, T* y, T* mask, int64_t n, uint64_t key,
                              uint64_t threshold, T scale) {
  DGC_LOOP(i, n) {
    const uint64_t bits = Mix64(key + static_cast<uint64_t>(i + 1) * kGolden);
    const T m = (bits >> 11) >= threshold ? scale : T(0);
    mask[i] = m;
    y[i] = x[i] * m;
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
      Mix64(static_cast<uint64_t>(ctx.i("seed"))), threshold, static_cast<T>(1.0 / (1.0 - p)));
  CheckLaunch(ctx);
}
DG_KERNEL("Dropout", "cuda", Dropout, float, double);

}  // namespace
}  // namespace dragon_cuda
