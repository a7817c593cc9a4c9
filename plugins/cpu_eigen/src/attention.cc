// ScaledDotProductAttention (schema and semantics in
// dragon_core/src/ops/attention.cc), fp32 and fp64.
//
// Work items are (batch-head, block of query rows); each computes its block
// of scores with one Eigen GEMM, masks and normalises it row by row (a
// max-shifted softmax; a row that keeps no key gives zeros) and multiplies
// by the value matrix. Scratch per item is rows x S, so memory stays bounded
// for long sequences.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common.h"

namespace cpu_eigen {
namespace {

constexpr int64_t kRowBlock = 64;

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

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

  const int64_t blocks = (L + kRowBlock - 1) / kRowBlock;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  ParallelFor(
      items * blocks,
      [&](int64_t begin, int64_t end) {
        RowMat<T> scores;
        for (int64_t it = begin; it < end; ++it) {
          const int64_t b = it / blocks, blk = it % blocks;
          const int64_t r0 = blk * kRowBlock;
          const int64_t rows = std::min(kRowBlock, L - r0);
          const int64_t kv = (b / hq) * hk + (b % hq) / group;
          Eigen::Map<const RowMat<T>> qm(q + (b * L + r0) * E, rows, E);
          Eigen::Map<const RowMat<T>> km(k + kv * S * E, S, E);
          Eigen::Map<const RowMat<T>> vm(v + kv * S * Ev, S, Ev);
          Eigen::Map<RowMat<T>> ym(y + (b * L + r0) * Ev, rows, Ev);
          if (S == 0) {
            ym.setZero();
            continue;
          }
          scores.resize(rows, S);
          scores.noalias() = qm * km.transpose();
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = r0 + r;
            T* srow = scores.data() + r * S;
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
            T sum = T(0);
            for (int64_t j = 0; j < S; ++j) {
              srow[j] = std::exp(srow[j] - mx);
              sum += srow[j];
            }
            const T inv = T(1) / sum;
            for (int64_t j = 0; j < S; ++j) srow[j] *= inv;
          }
          ym.noalias() = scores * vm;
        }
      },
      std::max<int64_t>(1, kRowBlock * S * (E + Ev) / 64));
}

}  // namespace

DG_KERNEL("ScaledDotProductAttention", "cpu", Attention, float, double);

}  // namespace cpu_eigen
