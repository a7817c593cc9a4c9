// Dropout and Embedding.
//
// Dropout's keep decision for element i is the i-th output of a SplitMix64
// stream (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014) whose key is the mixed seed: the generator is
// counter-based, so element i depends only on (seed, i), whatever the thread
// count or chunking. Element i is kept when its top 53 bits, read as u in
// [0, 1), satisfy u >= p, i.e. with probability 1 - p.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"

namespace cpu_eigen {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

template <typename T>
void DropoutKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  const double p = ctx.f("p");
  DG_CHECK(p >= 0.0 && p <= 1.0, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": p must be in [0, 1], got ", p);
  const int64_t n = x.numel();
  if (n == 0) return;
  const T* px = x.data<const T>();
  T* py = ctx.output(0).data<T>();
  T* pm = ctx.output(1).data<T>();
  if (p >= 1.0) {  // everything dropped; no 1 / 0 scale
    std::memset(py, 0, static_cast<size_t>(n) * sizeof(T));
    std::memset(pm, 0, static_cast<size_t>(n) * sizeof(T));
    return;
  }
  // u = k * 2^-53 >= p  <=>  k >= ceil(p * 2^53), exactly (p * 2^53 is exact).
  const uint64_t threshold = static_cast<uint64_t>(std::ceil(std::ldexp(p, 53)));
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  const uint64_t key = Mix64(static_cast<uint64_t>(ctx.i("seed")));
  ParallelFor(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const uint64_t bits =
              Mix64(key + static_cast<uint64_t>(i + 1) * kGolden);
          const T m = (bits >> 11) >= threshold ? scale : T(0);
          pm[i] = m;
          py[i] = px[i] * m;
        }
      },
      4);
}

DG_KERNEL("Dropout", "cpu", DropoutKernel, float, double);

template <typename I>
void EmbeddingRows(const dg::KernelContext& ctx, const I* idx) {
  const dg::TensorRef w = ctx.input(0), y = ctx.output(0);
  DG_CHECK(w.ndim() == 2, DG_INTERNAL, ctx.op_name(),
           ": weight must be 2-D, got ", dg::ShapeStr(w.shape()));
  const int64_t rows = w.dim(0), dim = w.dim(1);
  const int64_t m = ctx.input(1).numel();
  // Validate everything first: no exception may leave a parallel region.
  for (int64_t i = 0; i < m; ++i) {
    const int64_t v = static_cast<int64_t>(idx[i]);
    if (v < 0 || v >= rows) {
      throw dg::Error(
          DG_OUT_OF_RANGE,
          dg::Str(ctx.op_name(), ": index ", v, " (at flat position ", i,
                  " of indices ", dg::ShapeStr(ctx.input(1).shape()),
                  ") is outside [0, ", rows, ") for a weight table of shape ",
                  dg::ShapeStr(w.shape())));
    }
  }
  DG_CHECK(y.numel() == m * dim, DG_INTERNAL, ctx.op_name(), ": output has ",
           y.numel(), " elements, expected ", m * dim);
  if (y.numel() == 0) return;
  const size_t esize = dg::DTypeSize(w.dtype());
  const char* src = static_cast<const char*>(w.raw_data());
  char* dst = static_cast<char*>(y.raw_data());
  const int64_t row = dim * static_cast<int64_t>(esize);
  ParallelFor(
      m,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          std::memcpy(dst + r * row, src + static_cast<int64_t>(idx[r]) * row,
                      static_cast<size_t>(row));
        }
      },
      dim + 4);
}

void EmbeddingKernel(dg::KernelContext& ctx) {
  DispatchIndexType(ctx, ctx.input(1), "indices",
                    [&](const auto* idx) { EmbeddingRows(ctx, idx); });
}

DG_KERNEL_MASK("Embedding", "cpu", dg::kAny, 0, 0, EmbeddingKernel);

}  // namespace
}  // namespace cpu_eigen
