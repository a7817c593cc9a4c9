// ScaledDotProductAttention (schema and semantics in
// dragon_core/src/ops/attention.cc), fp32 and fp64.
//
// Batch-heads run in chunks (at most 4M scores, or one item): a batched
// GEMM (the plugin's ISA-dispatched one, as MatMul) gives the scores, each
// row is masked and normalised in parallel (max-shifted softmax with
// Eigen's vectorised exp; a row that keeps no key gives zeros), and a second
// batched GEMM multiplies by the values.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common.h"
#include "gemm/gemm.h"

namespace cpu_eigen {
namespace {

// Scores held at once (elements): bounds the scratch of long sequences.
constexpr int64_t kScoreBudget = int64_t{1} << 22;

template <typename T>
void Attention(dg::KernelContext& ctx) {
  const dg::TensorRef qt = ctx.input(0), kt = ctx.input(1), vt = ctx.input(2);
  const std::vector<int64_t> qs = qt.shape(), ks = kt.shape(), vs = vt.shape();
  const int64_t rank = static_cast<int64_t>(qs.size());
  const int64_t L = qs[rank - 2], E = qs[rank - 1], S = ks[rank - 2],
                Ev = vs[rank - 1];
  int64_t items = 1;
  for (int64_t d = 0; d < rank - 2; ++d) items *= qs[d];
  const int64_t hq = rank >= 3 ? qs[rank - 3] : 1;
  const int64_t hk = rank >= 3 ? ks[rank - 3] : 1;
  DG_CHECK(hk > 0 || items == 0, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": key has no heads");
  const int64_t group = hk > 0 ? hq / hk : 1;
  T* y = ctx.output(0).data<T>();
  if (items * L * Ev == 0) return;
  const T* q = qt.data<const T>();
  const T* k = kt.data<const T>();
  const T* v = vt.data<const T>();
  const T scale = ctx.has("scale")
                      ? static_cast<T>(ctx.f("scale"))
                      : static_cast<T>(1.0 / std::sqrt(static_cast<double>(E)));
  const bool causal = ctx.b("is_causal");

  // The mask's strides against the scores' shape [lead..., L, S] (0 where
  // it broadcasts), and its base offset for every batch-head item.
  const bool has_mask = ctx.num_inputs() > 3;
  const void* mask = nullptr;
  bool bool_mask = false;
  int64_t m_row = 0, m_col = 0;
  std::vector<int64_t> m_base;
  if (has_mask) {
    const dg::TensorRef mt = ctx.input(3);
    const std::vector<int64_t> ms = mt.shape();
    bool_mask = mt.dtype() == DG_BOOL;
    mask = bool_mask ? static_cast<const void*>(mt.data<const bool>())
                     : static_cast<const void*>(mt.data<const T>());
    std::vector<int64_t> full(qs.begin(), qs.end() - 2);
    full.push_back(L);
    full.push_back(S);
    const int64_t fr = static_cast<int64_t>(full.size());
    const int64_t mr = static_cast<int64_t>(ms.size());
    std::vector<int64_t> stride(static_cast<size_t>(fr), 0);
    int64_t st = 1;
    for (int64_t i = 1; i <= mr; ++i) {
      const int64_t md = ms[mr - i];
      stride[fr - i] = md == 1 ? 0 : st;
      st *= md;
    }
    m_row = stride[fr - 2];
    m_col = stride[fr - 1];
    m_base.assign(static_cast<size_t>(items), 0);
    for (int64_t b = 0; b < items; ++b) {
      int64_t rest = b, off = 0;
      for (int64_t d = fr - 3; d >= 0; --d) {
        off += (rest % full[d]) * stride[d];
        rest /= full[d];
      }
      m_base[b] = off;
    }
  }

  // Items run in chunks whose scores fit a bounded scratch: one batched
  // GEMM for the chunk's scores, the masked softmax row by row in parallel,
  // one batched GEMM for the outputs. The GEMMs are the plugin's own (the
  // ISA build MatMul uses; they thread internally).
  const int64_t chunk =
      std::max<int64_t>(1, std::min<int64_t>(items, kScoreBudget / (L * S > 0 ? L * S : 1)));
  const T neg_inf = -std::numeric_limits<T>::infinity();
  T* scores = ctx.workspace<T>(static_cast<size_t>(chunk * L * S));
  std::vector<int64_t> q_off(chunk), kv_off(chunk), v_off(chunk), p_off(chunk);
  for (int64_t i0 = 0; i0 < items; i0 += chunk) {
    const int64_t cn = std::min(chunk, items - i0);
    if (S == 0) {
      std::fill(y + i0 * L * Ev, y + (i0 + cn) * L * Ev, T(0));
      continue;
    }
    for (int64_t c = 0; c < cn; ++c) {
      const int64_t b = i0 + c;
      const int64_t kv = (b / hq) * hk + (b % hq) / group;
      q_off[c] = b * L * E;
      kv_off[c] = kv * S * E;
      v_off[c] = kv * S * Ev;
      p_off[c] = c * L * S;
    }
    if (E > 0) {
      GemmCall<T> qk{};
      qk.batch = cn;
      qk.n = L;
      qk.m = S;
      qk.k = E;
      qk.a = q;
      qk.lda = E;
      qk.a_offsets = q_off.data();
      qk.b = k;
      qk.ldb = E;
      qk.trans_b = true;
      qk.b_offsets = kv_off.data();
      qk.c = scores;
      qk.ldc = S;
      qk.c_stride = L * S;
      GemmBest(qk);
    } else {
      std::fill(scores, scores + cn * L * S, T(0));
    }
    ParallelFor(
        cn * L,
        [&](int64_t begin, int64_t end) {
          for (int64_t rr = begin; rr < end; ++rr) {
            const int64_t b = i0 + rr / L, i = rr % L;
            T* srow = scores + rr * S;
            T mx = neg_inf;
            for (int64_t j = 0; j < S; ++j) {
              T s = srow[j] * scale;
              if (causal && j > i) s = neg_inf;
              if (has_mask) {
                const int64_t at = m_base[b] + i * m_row + j * m_col;
                if (bool_mask) {
                  if (!static_cast<const bool*>(mask)[at]) s = neg_inf;
                } else {
                  s += static_cast<const T*>(mask)[at];
                }
              }
              srow[j] = s;
              if (s > mx || s != s) mx = s;  // a NaN score makes the row NaN
            }
            if (mx == neg_inf) {  // keeps no key
              std::fill(srow, srow + S, T(0));
              continue;
            }
            Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> row(srow, S);
            row = (row - mx).exp();
            row *= T(1) / row.sum();
          }
        },
        S * 8);
    GemmCall<T> pv{};
    pv.batch = cn;
    pv.n = L;
    pv.m = Ev;
    pv.k = S;
    pv.a = scores;
    pv.lda = S;
    pv.a_offsets = p_off.data();
    pv.b = v;
    pv.ldb = Ev;
    pv.b_offsets = v_off.data();
    pv.c = y + i0 * L * Ev;
    pv.ldc = Ev;
    pv.c_stride = L * Ev;
    GemmBest(pv);
  }
}

}  // namespace

DG_KERNEL("ScaledDotProductAttention", "cpu", Attention, float, double);

}  // namespace cpu_eigen
