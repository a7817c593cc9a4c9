// RandomUniform and RandomNormal with a counter-based generator.
//
// Element i depends only on (seed, i): the bits come from Philox4x32-10
// (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC 2011)
// keyed by the 64-bit seed, with counter (block, stream). One 128-bit block
// serves 4 float32 or 2 float64 uniforms, or one Box-Muller pair of normals.
// Blocks are computed kBatch at a time in structure-of-arrays form so that
// the rounds and the transforms vectorise: the elements of batch b are
// [b * kSpan, (b + 1) * kSpan), and element b * kSpan + j * kBatch + g takes
// value j of block b * kBatch + g. The mapping is fixed, so results are
// identical for any thread count and any chunking.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common.h"

namespace cpu_eigen {
namespace {

// Counter word 2: keeps the uniform and normal streams of a seed apart.
constexpr uint32_t kUniformStream = 0x5eed0001u;
constexpr uint32_t kNormalStream = 0x5eed0002u;

constexpr int kBatch = 64;  // Philox blocks per batch

struct Bits {
  alignas(64) uint32_t w[4][kBatch];
};

// Ten Philox rounds on counters (first + g, stream, 0), g < kBatch, under
// key `seed`.
void PhiloxBatch(uint64_t seed, uint64_t first, uint32_t stream, Bits* out) {
  uint32_t* c0 = out->w[0];
  uint32_t* c1 = out->w[1];
  uint32_t* c2 = out->w[2];
  uint32_t* c3 = out->w[3];
  for (int g = 0; g < kBatch; ++g) {
    const uint64_t block = first + static_cast<uint64_t>(g);
    c0[g] = static_cast<uint32_t>(block);
    c1[g] = static_cast<uint32_t>(block >> 32);
    c2[g] = stream;
    c3[g] = 0;
  }
  uint32_t k0 = static_cast<uint32_t>(seed);
  uint32_t k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int g = 0; g < kBatch; ++g) {
      const uint64_t p0 = uint64_t{0xD2511F53u} * c0[g];
      const uint64_t p1 = uint64_t{0xCD9E8D57u} * c2[g];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[g] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[g] ^ k1;
      c1[g] = static_cast<uint32_t>(p1);
      c3[g] = static_cast<uint32_t>(p0);
      c0[g] = n0;
      c2[g] = n2;
    }
    k0 += 0x9E3779B9u;  // Weyl sequence key schedule
    k1 += 0xBB67AE85u;
  }
}

// Uniform in [0, 1) from the top 53 of the 64 bits (hi, lo), computed as
// two exact int32 conversions (27 + 26 bits) so that loops vectorise.
inline double Unit53(uint32_t hi, uint32_t lo) {
  const int32_t top = static_cast<int32_t>(hi >> 5);
  const int32_t rest = static_cast<int32_t>(((hi & 31u) << 21) | (lo >> 11));
  return static_cast<double>(top) * 0x1.0p-27 +
         static_cast<double>(rest) * 0x1.0p-53;
}

// Writes y[begin, end) batch by batch: gen(first_block, vals) fills the
// kBatch * kPer values of the batch whose blocks start at first_block, value
// j of block first_block + g going to vals[j * kBatch + g].
template <typename T, int kPer, typename Gen>
void GenerateRange(T* y, int64_t begin, int64_t end, Gen&& gen) {
  alignas(64) T vals[kBatch * kPer];
  constexpr int64_t kSpan = int64_t{kBatch} * kPer;
  for (int64_t first = begin / kSpan * kSpan; first < end; first += kSpan) {
    gen(static_cast<uint64_t>(first / kSpan * kBatch), vals);
    const int64_t lo = std::max(begin, first);
    const int64_t hi = std::min(end, first + kSpan);
    std::memcpy(y + lo, vals + (lo - first),
                static_cast<size_t>(hi - lo) * sizeof(T));
  }
}

template <typename T>
void RandomUniformKernel(dg::KernelContext& ctx) {
  const dg::TensorRef y = ctx.output(0);
  const double low = ctx.f("low"), high = ctx.f("high");
  DG_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high,
           DG_INVALID_ARGUMENT, ctx.op_name(),
           ": needs finite low <= high, got low=", low, " high=", high);
  const uint64_t seed = static_cast<uint64_t>(ctx.i("seed"));
  const double range = high - low;
  const T t_low = static_cast<T>(low), t_high = static_cast<T>(high);
  // The largest T below high: rounding may push low + range * u up to high.
  const T t_max =
      low < high ? std::max(t_low, std::nextafter(t_high, t_low)) : t_low;
  constexpr int kPer = sizeof(T) == 4 ? 4 : 2;
  auto gen = [&](uint64_t first, T* vals) {
    Bits bits;
    PhiloxBatch(seed, first, kUniformStream, &bits);
    for (int j = 0; j < kPer; ++j) {
      for (int g = 0; g < kBatch; ++g) {
        double u;
        if constexpr (kPer == 4) {
          // Through int32 (exact: 24 bits) so that the conversion vectorises.
          u = static_cast<double>(static_cast<int32_t>(bits.w[j][g] >> 8)) *
              0x1.0p-24;
        } else {
          u = Unit53(bits.w[2 * j][g], bits.w[2 * j + 1][g]);
        }
        const T v = static_cast<T>(low + range * u);
        vals[j * kBatch + g] = v < t_high ? v : t_max;
      }
    }
  };
  T* py = y.data<T>();
  ParallelFor(
      y.numel(),
      [&](int64_t begin, int64_t end) {
        GenerateRange<T, kPer>(py, begin, end, gen);
      },
      4);
}

template <typename T>
void RandomNormalKernel(dg::KernelContext& ctx) {
  const dg::TensorRef y = ctx.output(0);
  const double mean = ctx.f("mean"), stddev = ctx.f("std");
  DG_CHECK(std::isfinite(mean) && std::isfinite(stddev) && stddev >= 0.0,
           DG_INVALID_ARGUMENT, ctx.op_name(),
           ": needs finite mean and std >= 0, got mean=", mean,
           " std=", stddev);
  const uint64_t seed = static_cast<uint64_t>(ctx.i("seed"));
  using Vec = Eigen::Array<T, kBatch, 1>;
  const T t_mean = static_cast<T>(mean), t_std = static_cast<T>(stddev);
  const T two_pi = static_cast<T>(6.283185307179586476925286766559);
  // Box-Muller: r = sqrt(-2 ln u1), theta = 2 pi u2, with u1 in (0, 1]:
  // 32 bits for float32 (tails to 6.6 sigma), 53 for float64 (8.5 sigma).
  auto gen = [&](uint64_t first, T* vals) {
    Bits bits;
    PhiloxBatch(seed, first, kNormalStream, &bits);
    Vec u1, u2;
    for (int g = 0; g < kBatch; ++g) {
      if constexpr (sizeof(T) == 4) {
        u1[g] = (static_cast<float>(bits.w[0][g]) + 1.0f) * 0x1.0p-32f;
        u2[g] = static_cast<float>(bits.w[1][g] >> 8) * 0x1.0p-24f;
      } else {
        u1[g] = 1.0 - Unit53(bits.w[0][g], bits.w[1][g]);
        u2[g] = Unit53(bits.w[2][g], bits.w[3][g]);
      }
    }
    const Vec r = (u1.log() * T(-2)).sqrt() * t_std;
    const Vec theta = u2 * two_pi;
    const Vec z0 = r * theta.cos() + t_mean;
    const Vec z1 = r * theta.sin() + t_mean;
    std::memcpy(vals, z0.data(), sizeof(z0));
    std::memcpy(vals + kBatch, z1.data(), sizeof(z1));
  };
  T* py = y.data<T>();
  ParallelFor(
      y.numel(),
      [&](int64_t begin, int64_t end) {
        GenerateRange<T, 2>(py, begin, end, gen);
      },
      16);
}

DG_KERNEL("RandomUniform", "cpu", RandomUniformKernel, float, double);
DG_KERNEL("RandomNormal", "cpu", RandomNormalKernel, float, double);

}  // namespace
}  // namespace cpu_eigen
