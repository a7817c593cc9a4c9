// float32 batched small-GEMM on AVX-512: many small products (attention's
// q k^T, p v and their gradients), one thread per batch item.
//
// Compiled once, on x86-64 only, with -march=x86-64-v4 (CMakeLists.txt);
// called only after matmul.cc checked DetectIsaLevel() >= 4. Like gemm.cc
// it shares no inline function or template instance with other
// translation units: its code sits in cpu_eigen::gemm_batched_f32, helpers
// in an anonymous namespace, and it uses only intrinsics and OpenMP.
//
// Method: the threads take whole items, one at a time (no barrier inside
// a product, one fork per call). Per item, on its thread:
//   * op(B) is read in place when its rows are contiguous (b_cs == 1) and m
//     is a multiple of 16; otherwise it is copied once into a dense k x M
//     scratch (M = m rounded up to 16, zero columns past m; a transposed B
//     goes through 16 x 16 register transposes);
//   * op(A) is never copied: the microkernel broadcasts A's elements from
//     wherever they lie (any strides);
//   * the microkernel keeps an MR x (16 NV) tile of C (at most 6 x 64: 24
//     zmm accumulators) over the whole of k, then stores it (masked in the
//     last 16 columns). Items are small (matmul.cc takes only those whose
//     operands fit in L2), so k is not blocked.
// Numerics: each output is one FMA chain over k in order from +0, the same
// for any thread count and any tile position.
// GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics
// (the `__Y = __Y` idiom of _mm512_undefined_*) when the unpack and shuffle
// intrinsics inline: a false positive in compiler headers (as in gemm.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "batched_f32.h"
#include "../thread_scratch.h"

#ifdef CPU_EIGEN_BF16_GEMM
#include "bf16_gemm.h"
#endif

#include <immintrin.h>
#include <omp.h>

#include <cstdint>
#include <cstring>

namespace cpu_eigen {
namespace gemm_batched_f32 {
namespace {

constexpr int64_t kMr = 6;   // rows of the largest register tile
constexpr int64_t kNr = 64;  // columns of the largest register tile

int64_t Round16(int64_t v) { return (v + 15) / 16 * 16; }

bool BInPlace(const BatchedF32Call& g) {
  return g.b_cs == 1 && g.m % 16 == 0;
}

// op(B) (k x m, element (p, j) at b[p * rs + j * cs]) as a dense k x ld
// row-major copy, columns [m, ld) zero.
void PackB(const float* b, int64_t rs, int64_t cs, int64_t k, int64_t m,
           int64_t ld, float* out) {
  if (cs == 1) {
    const __mmask16 tail =
        m % 16 ? static_cast<__mmask16>((1u << (m % 16)) - 1) : 0xFFFF;
    for (int64_t p = 0; p < k; ++p) {
      const float* row = b + p * rs;
      float* o = out + p * ld;
      int64_t j = 0;
      for (; j + 16 <= m; j += 16) _mm512_storeu_ps(o + j, _mm512_loadu_ps(row + j));
      if (j < ld) _mm512_storeu_ps(o + j, _mm512_maskz_loadu_ps(tail, row + j));
    }
    return;
  }
  int64_t p0 = 0, jfull = 0;
  if (rs == 1) {
    // Column j of op(B) is contiguous in k: transpose 16 x 16 blocks.
    jfull = m / 16 * 16;
    for (; p0 + 16 <= k; p0 += 16) {
      for (int64_t j0 = 0; j0 < jfull; j0 += 16) {
        __m512i r[16], t[16];
        for (int64_t j = 0; j < 16; ++j) {
          r[j] = _mm512_castps_si512(_mm512_loadu_ps(b + (j0 + j) * cs + p0));
        }
        for (int j = 0; j < 16; j += 2) {
          t[j] = _mm512_unpacklo_epi32(r[j], r[j + 1]);
          t[j + 1] = _mm512_unpackhi_epi32(r[j], r[j + 1]);
        }
        for (int j = 0; j < 16; j += 4) {
          r[j] = _mm512_unpacklo_epi64(t[j], t[j + 2]);
          r[j + 1] = _mm512_unpackhi_epi64(t[j], t[j + 2]);
          r[j + 2] = _mm512_unpacklo_epi64(t[j + 1], t[j + 3]);
          r[j + 3] = _mm512_unpackhi_epi64(t[j + 1], t[j + 3]);
        }
        for (int h = 0; h < 16; h += 8) {
          for (int j = 0; j < 4; ++j) {
            t[h + j] = _mm512_shuffle_i32x4(r[h + j], r[h + j + 4], 0x88);
            t[h + j + 4] = _mm512_shuffle_i32x4(r[h + j], r[h + j + 4], 0xdd);
          }
        }
        for (int j = 0; j < 8; ++j) {
          r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
          r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
        }
        for (int i = 0; i < 16; ++i) {
          _mm512_storeu_si512(out + (p0 + i) * ld + j0, r[i]);
        }
      }
    }
  }
  // What the blocks left: rows [p0, k) of every column, and rows [0, p0)
  // of the columns past the full 16-column groups; then the zero padding.
  for (int64_t p = 0; p < k; ++p) {
    float* o = out + p * ld;
    const int64_t j_start = p < p0 ? jfull : 0;
    for (int64_t j = j_start; j < m; ++j) o[j] = b[p * rs + j * cs];
    for (int64_t j = m; j < ld; ++j) o[j] = 0.0f;
  }
}

// One MR x (16 NV) tile of C: rows of op(A) from a (element (r, p) at
// a[r * a_rs + p * a_cs]), the matching columns of op(B) at b (row p at
// b + p * ldb, 16 NV readable floats), k terms; the last 16-column group
// stores only the columns in `last`.
template <int MR, int NV>
void Tile(int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
          const float* b, int64_t ldb, float* c, int64_t ldc, __mmask16 last) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  const float* ar[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) ar[r] = a + r * a_rs;
  for (int64_t p = 0; p < k; ++p) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + v * 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 x = _mm512_set1_ps(*ar[r]);
      ar[r] += a_cs;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
    }
    b += ldb;
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* row = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV - 1; ++v) _mm512_storeu_ps(row + v * 16, acc[r][v]);
    _mm512_mask_storeu_ps(row + (NV - 1) * 16, last, acc[r][NV - 1]);
  }
}

using TileFn = void (*)(int64_t, const float*, int64_t, int64_t, const float*,
                        int64_t, float*, int64_t, __mmask16);

template <int MR>
TileFn TileFor(int nv) {
  switch (nv) {
    case 1: return &Tile<MR, 1>;
    case 2: return &Tile<MR, 2>;
    case 3: return &Tile<MR, 3>;
    default: return &Tile<MR, 4>;
  }
}

TileFn TileFor(int64_t mr, int nv) {
  switch (mr) {
    case 1: return TileFor<1>(nv);
    case 2: return TileFor<2>(nv);
    case 3: return TileFor<3>(nv);
    case 4: return TileFor<4>(nv);
    case 5: return TileFor<5>(nv);
    default: return TileFor<6>(nv);
  }
}

// One product on the calling thread; `pack` is k x Round16(m) floats of
// scratch when B is not read in place.
void Product(const BatchedF32Call& g, const float* a, const float* b, float* c,
             float* pack) {
  if (g.k == 0) {
    for (int64_t i = 0; i < g.n; ++i) std::memset(c + i * g.ldc, 0, g.m * 4);
    return;
  }
  int64_t ldb = g.b_rs;
  if (!BInPlace(g)) {
    ldb = Round16(g.m);
    PackB(b, g.b_rs, g.b_cs, g.k, g.m, ldb, pack);
    b = pack;
  }
  for (int64_t j0 = 0; j0 < g.m; j0 += kNr) {
    const int64_t cols = g.m - j0 < kNr ? g.m - j0 : kNr;
    const int nv = static_cast<int>((cols + 15) / 16);
    const int64_t rem = cols - (nv - 1) * 16;
    const __mmask16 last =
        rem >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << rem) - 1);
    const TileFn full = TileFor(kMr, nv);
    int64_t i0 = 0;
    for (; i0 + kMr <= g.n; i0 += kMr) {
      full(g.k, a + i0 * g.a_rs, g.a_rs, g.a_cs, b + j0, ldb,
           c + i0 * g.ldc + j0, g.ldc, last);
    }
    if (i0 < g.n) {
      TileFor(g.n - i0, nv)(g.k, a + i0 * g.a_rs, g.a_rs, g.a_cs, b + j0, ldb,
                            c + i0 * g.ldc + j0, g.ldc, last);
    }
  }
}

int64_t PackFloats(const BatchedF32Call& g) {
  return BInPlace(g) ? 0 : (g.k * Round16(g.m) + 15) / 16 * 16;
}

int Team(const BatchedF32Call& g) {
  const int threads = g.threads > 1 ? g.threads : 1;
  return static_cast<int>(g.batch < threads ? g.batch : threads);
}

}  // namespace

int64_t WorkspaceBytes(const BatchedF32Call& g) {
  if (g.batch <= 0 || g.n <= 0 || g.m <= 0) return 0;
  return Team(g) * PackFloats(g) * 4;
}

void Gemm(const BatchedF32Call& g) {
  if (g.batch <= 0 || g.n <= 0 || g.m <= 0) return;
  const int team = Team(g);
  const int64_t per = PackFloats(g);
  float* ws = static_cast<float*>(g.workspace);
  const auto item = [&g](int64_t i, float* pack) {
    Product(g, g.a + (g.a_offsets ? g.a_offsets[i] : 0),
            g.b + (g.b_offsets ? g.b_offsets[i] : 0), g.c + i * g.c_stride,
            pack);
  };
  if (team <= 1) {
    for (int64_t i = 0; i < g.batch; ++i) item(i, ws);
    return;
  }
  // Items are handed out one at a time, so a thread the OS deschedules
  // (a shared machine) holds up one item, not a fixed half of the batch;
  // which thread computes an item does not change its bits.
#pragma omp parallel num_threads(team)
  {
    float* pack = ws ? ws + omp_get_thread_num() * per : nullptr;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < g.batch; ++i) item(i, pack);
  }
}

// ------------------------------------------------------------ attention

namespace {

// The product C = op(A) op(B) of one item (n x m, k terms) as Product's
// call: A and B given by their element strides, C dense with ldc = m.
BatchedF32Call ItemProduct(int64_t n, int64_t m, int64_t k, int64_t a_rs,
                           int64_t a_cs, int64_t b_rs, int64_t b_cs) {
  BatchedF32Call g{};
  g.batch = 1;
  g.n = n, g.m = m, g.k = k;
  g.a_rs = a_rs, g.a_cs = a_cs;
  g.b_rs = b_rs, g.b_cs = b_cs;
  g.ldc = m;
  return g;
}

const float* At(const AttentionOperand& x, int64_t i) {
  return static_cast<const float*>(x.data) + (x.offsets ? x.offsets[i] : 0);
}

// Item i of output `o` (rows x cols): its element offset, its address (a
// float32 output) and the leading dimension of its rows.
int64_t OutOffset(const AttentionOut& o, int64_t i, int64_t rows, int64_t cols) {
  if (o.heads <= 0) return i * rows * cols;
  return (i / o.heads) * rows * o.heads * cols + (i % o.heads) * cols;
}

float* OutItem(const AttentionOut& o, int64_t i, int64_t rows, int64_t cols) {
  return static_cast<float*>(o.data) + OutOffset(o, i, rows, cols);
}

int64_t OutLd(const AttentionOut& o, int64_t cols) {
  return o.heads > 0 ? o.heads * cols : cols;
}

void ZeroRows(float* x, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memset(x + r * ld, 0, static_cast<size_t>(cols) * 4);
  }
}

// Every product of the forward (fwd) or backward, in the order they run.
struct AttentionProducts {
  BatchedF32Call g[4];
  int count;
};

AttentionProducts Products(const AttentionF32Call& c, bool fwd) {
  AttentionProducts p{};
  if (fwd) {
    // s = q kt; o = p v.
    p.g[0] = ItemProduct(c.L, c.S, c.E, c.q.rs, c.q.cs, c.kt.rs, c.kt.cs);
    p.g[1] = ItemProduct(c.L, c.Ev, c.S, c.S, 1, c.v.rs, c.v.cs);
    p.g[1].ldc = OutLd(c.o_out, c.Ev);
    p.count = 2;
  } else {
    // dp = do v^T; dv = p^T do; dq = ds kt^T; dk = ds^T q.
    p.g[0] = ItemProduct(c.L, c.S, c.Ev, c.dout.rs, c.dout.cs, c.v.cs, c.v.rs);
    p.g[1] = ItemProduct(c.S, c.Ev, c.L, 1, c.S, c.dout.rs, c.dout.cs);
    p.g[2] = ItemProduct(c.L, c.E, c.S, c.S, 1, c.kt.cs, c.kt.rs);
    p.g[3] = ItemProduct(c.S, c.E, c.L, 1, c.S, c.q.rs, c.q.cs);
    p.g[1].ldc = OutLd(c.dv, c.Ev);
    p.g[2].ldc = OutLd(c.dq, c.E);
    p.g[3].ldc = OutLd(c.dk, c.E);
    p.count = 4;
  }
  return p;
}

int64_t ScoreFloats(const AttentionF32Call& c) {
  return (c.L * c.S + 15) / 16 * 16;
}

int64_t AttentionPackFloats(const AttentionF32Call& c) {
  int64_t most = 0;
  for (int fwd = 0; fwd < 2; ++fwd) {
    const AttentionProducts p = Products(c, fwd != 0);
    for (int j = 0; j < p.count; ++j) {
      const int64_t f = PackFloats(p.g[j]);
      most = f > most ? f : most;
    }
  }
  return most;
}

int AttentionTeam(const AttentionF32Call& c) {
  const int threads = c.threads > 1 ? c.threads : 1;
  return static_cast<int>(c.batch < threads ? c.batch : threads);
}

// x[0, n) *= scale, as the Mul kernel rounds each product.
void Scale(float* x, int64_t n, float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), s));
  }
  for (; i < n; ++i) x[i] *= scale;
}

// Runs run(i, scratch) for every item over the team; each thread owns `per`
// bytes of the workspace. Thread t takes the t-th contiguous share of the
// items (not items handed out one at a time): the items follow the batch
// axes, so a thread's share is the rows the same thread wrote in the ops
// before (their row-split outputs, the GEMM's row panels) and its outputs
// are the rows it reads in the ops after. When the host places the two
// cores on different dies, a line another core wrote costs ~5x a local one
// (ping-pong round trip ~460 ns against ~55 ns, measured in session 21),
// and items handed out one at a time read half their operands across:
// contiguous shares made the compiled bfloat16 encoder step 1.04x faster in
// that placement and changed nothing in the other (docs/benchmarks.md).
template <typename Run>
void ForEachItem(const AttentionF32Call& c, int64_t per, const Run& run) {
  const int team = AttentionTeam(c);
  char* ws = static_cast<char*>(c.workspace);
  if (team <= 1) {
    for (int64_t i = 0; i < c.batch; ++i) run(i, ws);
    return;
  }
#pragma omp parallel num_threads(team)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    // The thread's scratch (scores, packed operands) is its own, kept from
    // call to call (thread_scratch.h has the reason); the shared
    // workspace when it cannot be had.
    char* mine = ThreadScratch(per);
    if (mine == nullptr) mine = ws + t * per;
    for (int64_t i = c.batch * t / nt; i < c.batch * (t + 1) / nt; ++i) run(i, mine);
  }
}

// The float32 calls' item loop: item(i, scores, pack).
template <typename Item>
void ForItems(const AttentionF32Call& c, const Item& item) {
  const int64_t scores = ScoreFloats(c);
  ForEachItem(c, (scores + AttentionPackFloats(c)) * 4, [&](int64_t i, char* mine) {
    float* f = reinterpret_cast<float*>(mine);
    item(i, f, f + scores);
  });
}

}  // namespace

#ifdef CPU_EIGEN_BF16_GEMM
namespace {

// Bytes rounded up to whole 64-byte lines.
int64_t Lines(int64_t bytes) { return (bytes + 63) / 64 * 64; }


// float32 -> bfloat16 bits, nearest with ties to even, a NaN the quiet NaN
// of its sign: the Cast kernel's conversion (cast.h FloatToBfloat16Bits;
// restated here, as this file shares no inline code with others).
void RoundToBf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof(u));
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u >> 16 & 0x8000u) | 0x7FC0u;
    const int32_t magnitude = static_cast<int32_t>(u & 0x7FFFFFFFu);
    y[i] = static_cast<uint16_t>(magnitude > 0x7F800000 ? nan : rounded);
  }
}

const uint16_t* AtH(const AttentionOperand& x, int64_t i) {
  return static_cast<const uint16_t*>(x.data) + (x.offsets ? x.offsets[i] : 0);
}

// One bfloat16 product of an item on the calling thread: C (n x m, ldc) =
// op(A) op(B), A and B given by their element strides.
Bf16GemmCall Bf16Product(int64_t n, int64_t m, int64_t k, int64_t a_rs,
                         int64_t a_cs, int64_t b_rs, int64_t b_cs, bool c_f32,
                         int64_t ldc) {
  Bf16GemmCall g{};
  g.batch = 1;
  g.n = n, g.m = m, g.k = k;
  g.a_rs = a_rs, g.a_cs = a_cs;
  g.b_rs = b_rs, g.b_cs = b_cs;
  g.c_f32 = c_f32;
  g.ldc = ldc;
  g.c_stride = n * ldc;
  g.threads = 1;
  return g;
}

// The products of a bf16 call (forward: 0 scores, 1 o; backward: 2 dp,
// 3 dv, 4 dq, 5 dk).
void Bf16Products(const AttentionF32Call& c, Bf16GemmCall g[6]) {
  g[0] = Bf16Product(c.L, c.S, c.E, c.q.rs, c.q.cs, c.kt.rs, c.kt.cs, true, c.S);
  g[1] = Bf16Product(c.L, c.Ev, c.S, c.S, 1, c.v.rs, c.v.cs, false, OutLd(c.o_out, c.Ev));
  g[2] = Bf16Product(c.L, c.S, c.Ev, c.dout.rs, c.dout.cs, c.v.cs, c.v.rs, true, c.S);
  g[3] = Bf16Product(c.S, c.Ev, c.L, 1, c.S, c.dout.rs, c.dout.cs, true, OutLd(c.dv, c.Ev));
  g[4] = Bf16Product(c.L, c.E, c.S, c.S, 1, c.kt.cs, c.kt.rs, true, OutLd(c.dq, c.E));
  g[5] = Bf16Product(c.S, c.E, c.L, 1, c.S, c.q.rs, c.q.cs, true, OutLd(c.dk, c.E));
}

// Per thread: the float32 scores, p and ds rounded to bfloat16, and the
// GEMM's scratch (64-byte multiples).
int64_t Bf16PerThreadBytes(const AttentionF32Call& c) {
  Bf16GemmCall g[6];
  Bf16Products(c, g);
  int64_t gemm = 0;
  for (auto& x : g) {
    if (x.n > 0 && x.m > 0) {
      const int64_t b = gemm_bf16::WorkspaceBytes(x);
      gemm = b > gemm ? b : gemm;
    }
  }
  return Lines(c.L * c.S * 4) + 2 * Lines(c.L * c.S * 2) + Lines(gemm);
}

void RunBf16(Bf16GemmCall g, const void* a, const void* b, void* out, void* ws) {
  if (g.n <= 0 || g.m <= 0) return;
  g.a = static_cast<const uint16_t*>(a);
  g.b = static_cast<const uint16_t*>(b);
  g.c = out;
  g.workspace = ws;
  gemm_bf16::Gemm(g);
}

// The bf16 calls' item loop: item(i, scores, p16, ds16, gemm scratch).
template <typename Item>
void ForItemsBf16(const AttentionF32Call& c, const Item& item) {
  const int64_t f32 = Lines(c.L * c.S * 4), bf16 = Lines(c.L * c.S * 2);
  ForEachItem(c, Bf16PerThreadBytes(c), [&](int64_t i, char* mine) {
    item(i, reinterpret_cast<float*>(mine), reinterpret_cast<uint16_t*>(mine + f32),
         reinterpret_cast<uint16_t*>(mine + f32 + bf16), mine + f32 + 2 * bf16);
  });
}

void ForwardBf16(const AttentionF32Call& c) {
  Bf16GemmCall g[6];
  Bf16Products(c, g);
  const int64_t ls = c.L * c.S;
  ForItemsBf16(c, [&](int64_t i, float* scores, uint16_t* p16, uint16_t*, void* ws) {
    float* p = c.p_out + i * ls;
    uint16_t* o = static_cast<uint16_t*>(c.o_out.data) + OutOffset(c.o_out, i, c.L, c.Ev);
    if (c.S == 0) {  // softmax over no keys: p is empty, o zeros
      for (int64_t r = 0; r < c.L; ++r) {
        std::memset(o + r * g[1].ldc, 0, static_cast<size_t>(c.Ev) * 2);
      }
      return;
    }
    RunBf16(g[0], AtH(c.q, i), AtH(c.kt, i), scores, ws);
    if (c.has_scale) Scale(scores, ls, c.scale);
    c.softmax_rows(scores, p, c.L, c.S, 0);
    RoundToBf16(p, p16, ls);
    RunBf16(g[1], p16, AtH(c.v, i), o, ws);
  });
}

void BackwardBf16(const AttentionF32Call& c) {
  Bf16GemmCall g[6];
  Bf16Products(c, g);
  const int64_t ls = c.L * c.S;
  ForItemsBf16(c, [&](int64_t i, float* ds, uint16_t* p16, uint16_t* ds16, void* ws) {
    float* dq = OutItem(c.dq, i, c.L, c.E);
    float* dk = OutItem(c.dk, i, c.S, c.E);
    float* dv = OutItem(c.dv, i, c.S, c.Ev);
    const float* p = At(c.p, i);
    if (c.L == 0 || c.S == 0) {  // no scores: every gradient is zeros
      ZeroRows(dq, c.L, c.E, g[4].ldc);
      ZeroRows(dk, c.S, c.E, g[5].ldc);
      ZeroRows(dv, c.S, c.Ev, g[3].ldc);
      return;
    }
    if (c.Ev > 0) {
      RunBf16(g[2], AtH(c.dout, i), AtH(c.v, i), ds, ws);
    } else {
      std::memset(ds, 0, static_cast<size_t>(ls) * 4);
    }
    c.softmax_grad_rows(p, ds, ds, c.L, c.S, c.grad_chunks);
    if (c.has_scale) Scale(ds, ls, c.scale);
    RoundToBf16(p, p16, ls);
    RoundToBf16(ds, ds16, ls);
    RunBf16(g[3], p16, AtH(c.dout, i), dv, ws);
    if (c.E > 0) {
      RunBf16(g[4], ds16, AtH(c.kt, i), dq, ws);
      RunBf16(g[5], ds16, AtH(c.q, i), dk, ws);
    }
  });
}

}  // namespace
#endif  // CPU_EIGEN_BF16_GEMM

int64_t AttentionWorkspaceBytes(const AttentionF32Call& c) {
  if (c.batch <= 0) return 0;
#ifdef CPU_EIGEN_BF16_GEMM
  if (c.bf16) return AttentionTeam(c) * Bf16PerThreadBytes(c);
#endif
  return AttentionTeam(c) * (ScoreFloats(c) + AttentionPackFloats(c)) * 4;
}

void AttentionForward(const AttentionF32Call& c) {
  if (c.batch <= 0 || c.L <= 0) return;
#ifdef CPU_EIGEN_BF16_GEMM
  if (c.bf16) return ForwardBf16(c);
#endif
  const AttentionProducts pr = Products(c, true);
  const int64_t ls = c.L * c.S;
  ForItems(c, [&](int64_t i, float* scores, float* pack) {
    float* p = c.p_out + i * ls;
    float* o = OutItem(c.o_out, i, c.L, c.Ev);
    if (c.S == 0) {  // softmax over no keys: p is empty, o zeros
      ZeroRows(o, c.L, c.Ev, pr.g[1].ldc);
      return;
    }
    Product(pr.g[0], At(c.q, i), At(c.kt, i), scores, pack);
    if (c.has_scale) Scale(scores, ls, c.scale);
    c.softmax_rows(scores, p, c.L, c.S, 0);
    if (c.Ev > 0) Product(pr.g[1], p, At(c.v, i), o, pack);
  });
}

void AttentionBackward(const AttentionF32Call& c) {
  if (c.batch <= 0) return;
#ifdef CPU_EIGEN_BF16_GEMM
  if (c.bf16) return BackwardBf16(c);
#endif
  const AttentionProducts pr = Products(c, false);
  const int64_t ls = c.L * c.S;
  ForItems(c, [&](int64_t i, float* ds, float* pack) {
    float* dq = OutItem(c.dq, i, c.L, c.E);
    float* dk = OutItem(c.dk, i, c.S, c.E);
    float* dv = OutItem(c.dv, i, c.S, c.Ev);
    const float* p = At(c.p, i);
    if (c.L == 0 || c.S == 0) {  // no scores: every gradient is zeros
      ZeroRows(dq, c.L, c.E, pr.g[2].ldc);
      ZeroRows(dk, c.S, c.E, pr.g[3].ldc);
      ZeroRows(dv, c.S, c.Ev, pr.g[1].ldc);
      return;
    }
    // dp = do v^T into ds, then ds = SoftmaxGrad(p, dp) [* scale]: its row
    // pass reads p in order (the hardware prefetches it), so the column
    // reads of dv = p^T do after it find p in cache.
    if (c.Ev > 0) {
      Product(pr.g[0], At(c.dout, i), At(c.v, i), ds, pack);
    } else {
      std::memset(ds, 0, static_cast<size_t>(ls) * 4);
    }
    c.softmax_grad_rows(p, ds, ds, c.L, c.S, c.grad_chunks);
    if (c.has_scale) Scale(ds, ls, c.scale);
    if (c.Ev > 0) Product(pr.g[1], p, At(c.dout, i), dv, pack);
    if (c.E > 0) {
      Product(pr.g[2], ds, At(c.kt, i), dq, pack);
      Product(pr.g[3], ds, At(c.q, i), dk, pack);
    }
  });
}

}  // namespace gemm_batched_f32
}  // namespace cpu_eigen
