// Index math of the cuda plugin's memory-bound kernels, plain C++ so that
// host-side tests compile it without nvcc (plugins/cuda/tests/
// test_cuda_index_math.py): a division by a divisor fixed at launch (a
// multiply-high, an add and a shift per use), 16-byte vector access, and
// the per-channel cut of the batch-norm kernels.
#ifndef DRAGON_CUDA_INDEX_MATH_H_
#define DRAGON_CUDA_INDEX_MATH_H_

#include <cstdint>

#ifdef __CUDACC__
#define DGC_HD __host__ __device__
#else
#define DGC_HD
#endif

namespace dragon_cuda {

// n / d for 0 <= n < 2^31 and 1 <= d < 2^31 (Granlund and Montgomery's
// round-up method): with s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d)
// + 1 (< 2^32), n / d = (hi32(n m) + n) >> s, and hi32(n m) + n < 2^32.
struct FastDiv {
  uint32_t d = 1, m = 1, s = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t div) : d(div) {
    while ((uint64_t{1} << s) < d) ++s;
    m = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1);
  }
  DGC_HD uint32_t Div(uint32_t n) const {
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(n, m);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * m) >> 32);
#endif
    return (hi + n) >> s;
  }
};

// V values of T loaded or stored as one access (16 bytes for V = 16 /
// sizeof(T)); the address must be aligned to sizeof(T) * V.
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// Values per 16-byte vector.
template <typename T>
constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// ------------------------------------------------------------ channel cut
// x viewed as [N, C, S] (batch norm): each channel's N * S values, read in
// units of `vec` consecutive values of one row (vec divides S), are cut into
// `parts` chunks of `per` units, one block each (C * parts blocks), so that
// a few wide channels still fill every SM. Unit u of a channel is row
// u / su, column u % su (su = S / vec); `fast` when every unit index fits
// FastDiv. The cut depends on the shape only (not on the GPU): the
// reduction order, hence every bit of the result, is the same on any device.
struct ChannelCut {
  int64_t n = 0, c = 0, s = 1;
  int64_t vec = 1, su = 1, units = 0, parts = 1, per = 0;
  bool fast = true;
  FastDiv div;

  DGC_HD int64_t Row(int64_t u) const {
    return fast ? static_cast<int64_t>(div.Div(static_cast<uint32_t>(u))) : u / su;
  }
  // Offset, in units, of unit u of channel ch.
  DGC_HD int64_t Offset(int64_t ch, int64_t u) const {
    const int64_t row = Row(u);
    return (row * c + ch) * su + (u - row * su);
  }
};

// Units each thread handles at least before a channel gets another block,
// and the most blocks per channel.
constexpr int64_t kCutUnitsPerThread = 8;
constexpr int64_t kCutMaxParts = 512;

inline ChannelCut MakeChannelCut(int64_t n, int64_t c, int64_t s, int64_t vec, int64_t threads) {
  ChannelCut k;
  k.n = n;
  k.c = c;
  k.s = s;
  k.vec = (vec > 1 && s % vec == 0) ? vec : 1;
  k.su = s / k.vec;
  k.units = n * k.su;
  const int64_t chunk = threads * kCutUnitsPerThread;
  const int64_t want = (k.units + chunk - 1) / chunk;
  k.parts = want < 1 ? 1 : (want > kCutMaxParts ? kCutMaxParts : want);
  k.per = (k.units + k.parts - 1) / k.parts;
  k.fast = k.units < (int64_t{1} << 31) && k.su < (int64_t{1} << 31) && k.su > 0;
  if (k.fast) k.div = FastDiv(static_cast<uint32_t>(k.su));
  return k;
}

}  // namespace dragon_cuda

#endif  // DRAGON_CUDA_INDEX_MATH_H_
