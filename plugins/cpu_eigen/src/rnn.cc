// Lstm and Gru (schemas and semantics in dragon_core/src/ops/rnn.cc).
//
// Per direction: one GEMM gives X W^T for every time step, then each step
// adds H R^T (one GEMM of N x G*H) and the biases and applies the gates
// element-wise. Directions run one after the other; batch rows of a step
// are independent, the gate loops are over N*H elements.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common.h"

namespace cpu_eigen {
namespace {

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <typename T>
T Sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Sizes, layout and the index maps shared by both ops.
struct Rnn {
  int64_t T = 0, N = 0, I = 0, H = 0, D = 1;
  bool batch_major = false;
  bool has_clip = false;
  double clip = 0;
  int64_t XRow(int64_t t, int64_t n) const {
    return batch_major ? n * T + t : t * N + n;
  }
  int64_t YAt(int64_t t, int64_t d, int64_t n) const {
    return (batch_major ? (n * T + t) * D + d : (t * D + d) * N + n) * H;
  }
  int64_t StateAt(int64_t d, int64_t n) const {
    return (batch_major ? n * D + d : d * N + n) * H;
  }
  template <typename T_>
  T_ Clip(T_ v) const {
    if (!has_clip) return v;
    const T_ c = static_cast<T_>(clip);
    return std::min(std::max(v, -c), c);
  }
};

Rnn ReadRnn(const dg::KernelContext& ctx) {
  Rnn r;
  const std::vector<int64_t> xs = ctx.input(0).shape();
  r.batch_major = ctx.i("layout") == 1;
  r.T = r.batch_major ? xs[1] : xs[0];
  r.N = r.batch_major ? xs[0] : xs[1];
  r.I = xs[2];
  r.H = ctx.input(2).shape()[2];
  r.D = ctx.input(2).shape()[0];
  r.has_clip = ctx.has("clip");
  if (r.has_clip) r.clip = ctx.f("clip");
  return r;
}

// sequence_lens (input 4) as int64, checked against T; empty when absent.
std::vector<int64_t> ReadLens(const dg::KernelContext& ctx, const Rnn& r) {
  std::vector<int64_t> lens;
  if (ctx.num_inputs() <= 4) return lens;
  const dg::TensorRef t = ctx.input(4);
  lens.resize(static_cast<size_t>(r.N));
  for (int64_t n = 0; n < r.N; ++n) {
    lens[n] = t.dtype() == DG_INT32 ? t.data<const int32_t>()[n]
                                    : t.data<const int64_t>()[n];
    DG_CHECK(lens[n] >= 0 && lens[n] <= r.T, DG_OUT_OF_RANGE, ctx.op_name(),
             ": sequence_lens[", n, "] = ", lens[n],
             " is outside [0, T] with T = ", r.T);
  }
  return lens;
}

// X W_d^T for all (t, n) rows: [T*N, G*H], rows in X's order.
template <typename T>
RowMat<T> InputProduct(const dg::KernelContext& ctx, const Rnn& r, int64_t gh,
                       int64_t d) {
  Eigen::Map<const RowMat<T>> x(ctx.input(0).data<const T>(), r.T * r.N, r.I);
  Eigen::Map<const RowMat<T>> w(ctx.input(1).data<const T>() + d * gh * r.I,
                                gh, r.I);
  RowMat<T> xw(r.T * r.N, gh);
  xw.noalias() = x * w.transpose();
  return xw;
}

// Initial state input `i` (or zeros) for direction d, as [N, H].
template <typename T>
RowMat<T> InitialState(const dg::KernelContext& ctx, const Rnn& r, int32_t i,
                       int64_t d) {
  RowMat<T> s = RowMat<T>::Zero(r.N, r.H);
  if (ctx.num_inputs() > i) {
    const T* p = ctx.input(i).data<const T>();
    for (int64_t n = 0; n < r.N; ++n) {
      std::copy(p + r.StateAt(d, n), p + r.StateAt(d, n) + r.H, s.row(n).data());
    }
  }
  return s;
}

template <typename T>
void StoreState(const Rnn& r, const RowMat<T>& s, int64_t d, T* out) {
  for (int64_t n = 0; n < r.N; ++n) {
    std::copy(s.row(n).data(), s.row(n).data() + r.H, out + r.StateAt(d, n));
  }
}

template <typename T>
void Lstm(dg::KernelContext& ctx) {
  const Rnn r = ReadRnn(ctx);
  const int64_t H = r.H, gh = 4 * H;
  T* y = ctx.output(0).data<T>();
  T* yh = ctx.output(1).data<T>();
  T* yc = ctx.output(2).data<T>();
  const bool reverse = ctx.s("direction") == "reverse";
  const bool coupled = ctx.b("input_forget");
  const T* bias = ctx.num_inputs() > 3 ? ctx.input(3).data<const T>() : nullptr;
  const T* peep = ctx.num_inputs() > 7 ? ctx.input(7).data<const T>() : nullptr;
  const std::vector<int64_t> lens = ReadLens(ctx, r);
  for (int64_t d = 0; d < r.D; ++d) {
    const bool back = reverse || d == 1;
    RowMat<T> h = InitialState<T>(ctx, r, 5, d);
    RowMat<T> c = InitialState<T>(ctx, r, 6, d);
    if (r.N * H > 0 && r.T > 0) {
      const RowMat<T> xw = InputProduct<T>(ctx, r, gh, d);
      Eigen::Map<const RowMat<T>> rw(ctx.input(2).data<const T>() + d * gh * H,
                                     gh, H);
      std::vector<T> b(static_cast<size_t>(gh), T(0));
      if (bias) {
        for (int64_t g = 0; g < gh; ++g) {
          b[g] = bias[d * 2 * gh + g] + bias[d * 2 * gh + gh + g];
        }
      }
      const T* pi = peep ? peep + d * 3 * H : nullptr;
      RowMat<T> hr(r.N, gh);
      for (int64_t s = 0; s < r.T; ++s) {
        const int64_t t = back ? r.T - 1 - s : s;
        hr.noalias() = h * rw.transpose();
        for (int64_t n = 0; n < r.N; ++n) {
          const T* xr = xw.row(r.XRow(t, n)).data();
          const T* hrr = hr.row(n).data();
          T* yo = y + r.YAt(t, d, n);
          if (!lens.empty() && t >= lens[n]) {  // past the end: state kept
            std::fill(yo, yo + H, T(0));
            continue;
          }
          for (int64_t j = 0; j < H; ++j) {
            const T cp = c(n, j);
            auto pre = [&](int64_t gate) {
              return xr[gate * H + j] + hrr[gate * H + j] + b[gate * H + j];
            };
            T ig = pre(0), og = pre(1), fg = pre(2), cg = pre(3);
            if (pi) {
              ig += pi[j] * cp;
              fg += pi[2 * H + j] * cp;
            }
            ig = Sigmoid(r.Clip(ig));
            fg = coupled ? T(1) - ig : Sigmoid(r.Clip(fg));
            cg = std::tanh(r.Clip(cg));
            const T cn = fg * cp + ig * cg;
            if (pi) og += pi[H + j] * cn;
            og = Sigmoid(r.Clip(og));
            c(n, j) = cn;
            yo[j] = og * std::tanh(cn);
          }
        }
        for (int64_t n = 0; n < r.N; ++n) {
          if (!lens.empty() && t >= lens[n]) continue;
          std::copy(y + r.YAt(t, d, n), y + r.YAt(t, d, n) + H, h.row(n).data());
        }
      }
    }
    StoreState<T>(r, h, d, yh);
    StoreState<T>(r, c, d, yc);
  }
}

template <typename T>
void Gru(dg::KernelContext& ctx) {
  const Rnn r = ReadRnn(ctx);
  const int64_t H = r.H, gh = 3 * H;
  T* y = ctx.output(0).data<T>();
  T* yh = ctx.output(1).data<T>();
  const bool reverse = ctx.s("direction") == "reverse";
  const bool lbr = ctx.b("linear_before_reset");
  const T* bias = ctx.num_inputs() > 3 ? ctx.input(3).data<const T>() : nullptr;
  const std::vector<int64_t> lens = ReadLens(ctx, r);
  for (int64_t d = 0; d < r.D; ++d) {
    const bool back = reverse || d == 1;
    RowMat<T> h = InitialState<T>(ctx, r, 5, d);
    if (r.N * H > 0 && r.T > 0) {
      const RowMat<T> xw = InputProduct<T>(ctx, r, gh, d);
      Eigen::Map<const RowMat<T>> rw(ctx.input(2).data<const T>() + d * gh * H,
                                     gh, H);
      std::vector<T> wb(static_cast<size_t>(gh), T(0)), rb(wb);
      if (bias) {
        for (int64_t g = 0; g < gh; ++g) {
          wb[g] = bias[d * 2 * gh + g];
          rb[g] = bias[d * 2 * gh + gh + g];
        }
      }
      RowMat<T> hr(r.N, gh), rh(r.N, H), rhr(r.N, H);
      RowMat<T> z(r.N, H), rg(r.N, H);
      for (int64_t s = 0; s < r.T; ++s) {
        const int64_t t = back ? r.T - 1 - s : s;
        hr.noalias() = h * rw.transpose();
        for (int64_t n = 0; n < r.N; ++n) {
          const T* xr = xw.row(r.XRow(t, n)).data();
          for (int64_t j = 0; j < H; ++j) {
            z(n, j) = Sigmoid(r.Clip(xr[j] + hr(n, j) + wb[j] + rb[j]));
            rg(n, j) = Sigmoid(
                r.Clip(xr[H + j] + hr(n, H + j) + wb[H + j] + rb[H + j]));
          }
        }
        if (!lbr) {  // (r * H) Rh^T
          rh = rg.cwiseProduct(h);
          rhr.noalias() = rh * rw.bottomRows(H).transpose();
        }
        for (int64_t n = 0; n < r.N; ++n) {
          const T* xr = xw.row(r.XRow(t, n)).data();
          T* yo = y + r.YAt(t, d, n);
          if (!lens.empty() && t >= lens[n]) {  // past the end: state kept
            std::fill(yo, yo + H, T(0));
            continue;
          }
          for (int64_t j = 0; j < H; ++j) {
            const T rec = lbr ? rg(n, j) * (hr(n, 2 * H + j) + rb[2 * H + j])
                              : rhr(n, j) + rb[2 * H + j];
            const T hc = std::tanh(r.Clip(xr[2 * H + j] + rec + wb[2 * H + j]));
            yo[j] = (T(1) - z(n, j)) * hc + z(n, j) * h(n, j);
          }
        }
        for (int64_t n = 0; n < r.N; ++n) {
          if (!lens.empty() && t >= lens[n]) continue;
          std::copy(y + r.YAt(t, d, n), y + r.YAt(t, d, n) + H, h.row(n).data());
        }
      }
    }
    StoreState<T>(r, h, d, yh);
  }
}

}  // namespace

DG_KERNEL("Lstm", "cpu", Lstm, float, double);
DG_KERNEL("Gru", "cpu", Gru, float, double);

}  // namespace cpu_eigen
