// Convolution weights between the core's dense [O, I, kh, kw] layout and
// oneDNN's blocked OIhw16i16o (format_tag::ABcd16b16a; both ways) and the
// deconvolution's OIhw16o16i (BAcd16b16a of the swapped dims; one way),
// with AVX-512 16 x 16 transposes instead of oneDNN's generic reorder
// (jit:uni).
//
// A training step reorders every filter into the forward primitive's
// layout and the filter gradient out of it, once each per step. On
// ResNet-18 (11 M weights) these reorders were a fifth of oneDNN's time in
// the compiled step, and the way back (blocked -> plain, the filter
// gradient) ran 3-4x slower than the way in: jit:uni writes the plain
// tensor with a stride of kh * kw floats. docs/conv.md has the
// measurements.
//
// Both directions are the same permuted transpose. With T = kh * kw, one
// 16 x 16 channel block (a, b) of the plain tensor W[A][B][T] holds 16 rows
// (a) of 16 T consecutive floats (b-major, tap-minor); the blocked block is
// 16 T rows (tap-major, b-minor) of 16 floats (a). Row chunk c (floats
// 16c .. 16c + 15 of every plain row) is therefore one 16 x 16 transpose
// whose 16 outputs are the blocked rows (t, b) with 16 t + ... = k for
// k = 16c + j, b = k / T, t = k % T: every load and store is a whole
// contiguous 64-byte vector. The result is the same bits as oneDNN's
// reorder (a pure permutation; tests/plugins/test_mkldnn_weights.py).
//
// The deconvolution's layout (rows (t, o) of 16 i) transposes each plain
// row's 16 x T (i, tap) values in chunks of 16 taps, the last chunk with
// masked loads (ToBlockedAbBlock).
//
// Served: float32, O and I multiples of 16 (no padded blocks), dense
// inputs, a CPU with AVX-512F; the ways into a blocked layout only for
// T > 1 (oneDNN's 1x1 reorder, jit:blk, is as fast). Anything else -- and every
// call with DRAGON_MKLDNN_WEIGHT_REORDER=onednn, the switch for A/B
// measurements -- goes to oneDNN's reorder as before.
#include <immintrin.h>

// GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics
// (the _mm512_undefined_ps() they start from), a false positive. clang has
// no such warning (and -Werror rejects the unknown name).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common.h"

namespace mkldnn_plugin {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// Whether the AVX-512 transposes may run (read once).
bool Enabled() {
  static const bool on = [] {
    const char* env = std::getenv("DRAGON_MKLDNN_WEIGHT_REORDER");
    if (env && std::string(env) == "onednn") return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return on;
}

#define MKLDNN_AVX512 __attribute__((target("avx512f")))

// Transposes the 16 x 16 matrix r[row][lane] in registers: afterwards r[j]
// holds what was lane j of every row.
MKLDNN_AVX512 inline void Transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 4; ++k) {
    r[4 * k] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
    r[4 * k + 1] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
    r[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
    r[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
  }
  // 128-bit lanes: rows k and k + 4 of each group of 8 exchange halves,
  // then rows j and j + 8 exchange 256-bit halves.
  const __m512i a0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10,
                                       11, 24, 25, 26, 27);
  const __m512i a1 = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14,
                                       15, 28, 29, 30, 31);
  for (int k = 0; k < 2; ++k) {
    for (int j = 0; j < 4; ++j) {
      t[8 * k + j] = _mm512_permutex2var_ps(r[8 * k + j], a0, r[8 * k + 4 + j]);
      t[8 * k + 4 + j] =
          _mm512_permutex2var_ps(r[8 * k + j], a1, r[8 * k + 4 + j]);
    }
  }
  const __m512i b0 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19,
                                       20, 21, 22, 23);
  const __m512i b1 = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25,
                                       26, 27, 28, 29, 30, 31);
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_permutex2var_ps(t[j], b0, t[8 + j]);
    r[8 + j] = _mm512_permutex2var_ps(t[j], b1, t[8 + j]);
  }
}

// The geometry of one conversion: W[a][b][t] plain, A x B channels
// (multiples of 16), T taps; blocked block (ab, bb) at ab * BB + bb, each
// 256 T floats, rows (t, b) of 16 floats (a).
struct Geometry {
  int64_t a, b, t;
};

// The offset, in the blocked block, of row k = 16 c + j of the plain
// block's columns (k = b * T + t) .
inline int64_t BlockedRow(int64_t k, int64_t taps) {
  return ((k % taps) * 16 + k / taps) * 16;
}

// plain -> blocked for block (ab, bb).
MKLDNN_AVX512 void ToBlockedBlock(const float* w, float* out,
                                  const Geometry& g, int64_t ab, int64_t bb) {
  const int64_t row = g.b * g.t;
  const float* s = w + ab * 16 * row + bb * 16 * g.t;
  float* d = out + (ab * (g.b / 16) + bb) * 256 * g.t;
  for (int64_t c = 0; c < g.t; ++c) {
    __m512 r[16];
    for (int a = 0; a < 16; ++a) r[a] = _mm512_loadu_ps(s + a * row + 16 * c);
    Transpose16(r);
    for (int j = 0; j < 16; ++j) {
      _mm512_storeu_ps(d + BlockedRow(16 * c + j, g.t), r[j]);
    }
  }
}

// plain -> blocked with rows (t, a) of 16 floats (b) for block (ab, bb):
// the deconvolution's layout. Per plain row a, its 16 x T (b, tap) values
// are transposed in chunks of 16 taps (masked loads of the last chunk).
MKLDNN_AVX512 void ToBlockedAbBlock(const float* w, float* out,
                                    const Geometry& g, int64_t ab,
                                    int64_t bb) {
  const int64_t row = g.b * g.t;
  const float* s = w + ab * 16 * row + bb * 16 * g.t;
  float* d = out + (ab * (g.b / 16) + bb) * 256 * g.t;
  for (int64_t a = 0; a < 16; ++a) {
    const float* src = s + a * row;  // [16 b][T]
    for (int64_t t0 = 0; t0 < g.t; t0 += 16) {
      const int64_t nt = g.t - t0 < 16 ? g.t - t0 : 16;
      const __mmask16 m = static_cast<__mmask16>((1u << nt) - 1u);
      __m512 r[16];
      for (int b = 0; b < 16; ++b) {
        r[b] = _mm512_maskz_loadu_ps(m, src + b * g.t + t0);
      }
      Transpose16(r);
      for (int64_t t = 0; t < nt; ++t) {
        _mm512_storeu_ps(d + ((t0 + t) * 16 + a) * 16, r[t]);
      }
    }
  }
}

// blocked -> plain for block (ab, bb).
MKLDNN_AVX512 void ToPlainBlock(const float* in, float* w, const Geometry& g,
                                int64_t ab, int64_t bb) {
  const int64_t row = g.b * g.t;
  float* d = w + ab * 16 * row + bb * 16 * g.t;
  const float* s = in + (ab * (g.b / 16) + bb) * 256 * g.t;
  for (int64_t c = 0; c < g.t; ++c) {
    __m512 r[16];
    for (int j = 0; j < 16; ++j) {
      r[j] = _mm512_loadu_ps(s + BlockedRow(16 * c + j, g.t));
    }
    Transpose16(r);
    for (int a = 0; a < 16; ++a) _mm512_storeu_ps(d + a * row + 16 * c, r[a]);
  }
}

// Runs fn(ab, bb) over every block, on the call's threads.
template <typename Fn>
void ForBlocks(const DgCallFrame* f, const Geometry& g, Fn fn) {
  const int64_t na = g.a / 16, nb = g.b / 16, blocks = na * nb;
  const int threads = Threads(f, g.a * g.b * g.t, int64_t{1} << 15);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t q = 0; q < blocks; ++q) fn(q / nb, q % nb);
}

// The served conversions.
enum class Way { kToBlocked, kToPlain, kToDeconv };

// The channel geometry when src -> dst is one of the served conversions
// (`way` says which), else false.
bool Match(const memory::desc& src, const memory::desc& dst, Geometry* g,
           Way* way) {
  if (src.get_data_type() != memory::data_type::f32 ||
      dst.get_data_type() != memory::data_type::f32) {
    return false;
  }
  const memory::dims dims = src.get_dims();
  if (dims.size() != 4 || dst.get_dims() != dims) return false;
  if (dims[0] % 16 != 0 || dims[1] % 16 != 0 || dims[0] == 0 || dims[1] == 0) {
    return false;
  }
  *g = Geometry{dims[0], dims[1], dims[2] * dims[3]};
  if (g->t == 0) return false;
  const memory::desc plain(dims, memory::data_type::f32, tag::abcd);
  const memory::desc blocked(dims, memory::data_type::f32, tag::ABcd16b16a);
  if (src == plain && dst == blocked) {
    *way = Way::kToBlocked;
    return g->t > 1;  // 1x1: oneDNN's jit:blk reorder is as fast
  }
  if (src == blocked && dst == plain) {
    *way = Way::kToPlain;
    return true;
  }
  // The deconvolution (ConvTranspose2d) sees the core's filter [A, B, kh,
  // kw] as dims [B, A, kh, kw] (strides `bacd`) and wants BAcd16b16a:
  // blocks [A/16][B/16], rows (tap, a) of 16 b.
  const memory::desc swapped(dims, memory::data_type::f32, tag::bacd);
  const memory::desc deconv(dims, memory::data_type::f32, tag::BAcd16b16a);
  if (src == swapped && dst == deconv) {
    *way = Way::kToDeconv;
    *g = Geometry{dims[1], dims[0], g->t};
    return g->t > 1;  // 1x1 filters take ABcd16b16a, left to oneDNN
  }
  return false;
}

}  // namespace

bool CopyWeights(const dg::KernelContext& ctx, const dnnl::memory& src,
                 const dnnl::memory& dst) {
  if (!Enabled()) return false;
  Geometry g;
  Way way = Way::kToBlocked;
  if (!Match(src.get_desc(), dst.get_desc(), &g, &way)) return false;
  const float* in = static_cast<const float*>(src.get_data_handle());
  float* out = static_cast<float*>(dst.get_data_handle());
  switch (way) {
    case Way::kToBlocked:
      ForBlocks(ctx.frame(), g, [&](int64_t ab, int64_t bb) {
        ToBlockedBlock(in, out, g, ab, bb);
      });
      break;
    case Way::kToPlain:
      ForBlocks(ctx.frame(), g, [&](int64_t ab, int64_t bb) {
        ToPlainBlock(in, out, g, ab, bb);
      });
      break;
    case Way::kToDeconv:
      ForBlocks(ctx.frame(), g, [&](int64_t ab, int64_t bb) {
        ToBlockedAbBlock(in, out, g, ab, bb);
      });
      break;
  }
  return true;
}

}  // namespace mkldnn_plugin
