// Fft, Ifft, Rfft and Irfft (schemas and semantics in
// dragon_core/src/ops/fft.cc): complex data is a trailing axis of size 2.
//
// The transform is a mixed-radix Cooley-Tukey FFT for lengths whose prime
// factors are 2, 3 and 5 (recursive decimation in time, radix 4 where the
// length allows, then 2, 3, 5), and Bluestein's chirp-z algorithm for every
// other length: a length-n DFT as a circular convolution of length
// m >= 2n - 1 (m 2/3/5-smooth), done with three smooth FFTs. Both are
// O(n log n). float32 computes in float32 and float64 in float64 (as
// numpy.fft), with twiddle factors evaluated in long double and rounded
// once; float16/bfloat16 run the float32 kernel (widen_call.h).
//
// Every line along the axis is gathered into a contiguous complex buffer,
// transformed and scattered back; lines run in parallel, each thread with
// its own buffers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "reduce_util.h"
#include "widen_call.h"

namespace cpu_eigen {
namespace {

template <typename T>
struct Cx {
  T re, im;
};

template <typename T>
inline Cx<T> Mul(Cx<T> a, Cx<T> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
template <typename T>
inline Cx<T> Add(Cx<T> a, Cx<T> b) {
  return {a.re + b.re, a.im + b.im};
}
template <typename T>
inline Cx<T> Sub(Cx<T> a, Cx<T> b) {
  return {a.re - b.re, a.im - b.im};
}
template <typename T>
inline Cx<T> Conj(Cx<T> a) {
  return {a.re, -a.im};
}

// exp(-i pi num / den) with num in [0, 2 den), evaluated in long double and
// exact at multiples of pi / 2.
inline Cx<long double> Phase(int64_t num, int64_t den) {
  if ((2 * num) % den == 0) {
    switch ((2 * num) / den) {
      case 0: return {1.0L, 0.0L};
      case 1: return {0.0L, -1.0L};
      case 2: return {-1.0L, 0.0L};
      default: return {0.0L, 1.0L};
    }
  }
  const long double pi = 3.141592653589793238462643383279502884L;
  const long double a = pi * static_cast<long double>(num) /
                        static_cast<long double>(den);
  return {std::cos(a), -std::sin(a)};
}

bool Smooth(int64_t n) {
  for (int64_t p : {2, 3, 5})
    while (n % p == 0) n /= p;
  return n == 1;
}

int64_t NextSmooth(int64_t n) {
  while (!Smooth(n)) ++n;
  return n;
}

// A DFT of one length, forward (exp(-2 pi i jk / n)) or inverse
// (exp(+2 pi i jk / n)), both unscaled.
template <typename T>
class Plan {
 public:
  explicit Plan(int64_t n) : n_(n) {
    if (Smooth(n)) {
      // Outermost split first: 5s, 3s, 4s, then one 2 if the power of two
      // is odd. (Radix 3 and 5 outermost: decimation in time in the
      // reverse of the usual decimation-in-frequency order, so float32
      // results round as numpy's do where exact values are 0.)
      int64_t r = n;
      while (r % 5 == 0) { factors_.push_back(5); r /= 5; }
      while (r % 3 == 0) { factors_.push_back(3); r /= 3; }
      while (r % 4 == 0) { factors_.push_back(4); r /= 4; }
      if (r == 2) { factors_.push_back(2); r /= 2; }
      tw_.resize(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        const Cx<long double> w = Phase(2 * j, n);  // exp(-2 pi i j / n)
        tw_[j] = {static_cast<T>(w.re), static_cast<T>(w.im)};
      }
      return;
    }
    // Bluestein: X[k] = c[k] sum_j (x[j] c[j]) conj(c[k - j]), with the
    // chirp c[k] = exp(-i pi k^2 / n); the sum is a circular convolution
    // of length m with b[j] = conj(c[|j|]).
    m_ = NextSmooth(2 * n - 1);
    sub_.reset(new Plan<T>(m_));
    chirp_.resize(static_cast<size_t>(n));
    int64_t k2 = 0;  // k^2 mod 2n
    for (int64_t k = 0; k < n; ++k) {
      const Cx<long double> c = Phase(k2, n);
      chirp_[k] = {static_cast<T>(c.re), static_cast<T>(c.im)};
      k2 = (k2 + 2 * k + 1) % (2 * n);
    }
    std::vector<Cx<T>> b(static_cast<size_t>(m_), Cx<T>{T(0), T(0)});
    b[0] = Conj(chirp_[0]);
    for (int64_t k = 1; k < n; ++k) b[k] = b[m_ - k] = Conj(chirp_[k]);
    bhat_.resize(static_cast<size_t>(m_));
    sub_->Run(b.data(), bhat_.data(), false, nullptr);
    const T inv_m = T(1) / static_cast<T>(m_);
    for (auto& v : bhat_) v = {v.re * inv_m, v.im * inv_m};
  }

  int64_t size() const { return n_; }
  // Scratch (complex values) Run needs besides its input and output.
  int64_t scratch() const { return sub_ ? 2 * m_ + sub_->scratch() : 0; }

  // out = DFT(in), both n contiguous values, distinct buffers. `scratch`
  // holds scratch() values.
  void Run(const Cx<T>* in, Cx<T>* out, bool inverse, Cx<T>* scratch) const {
    if (!sub_) {
      Rec(in, 1, out, n_, 0, inverse);
      return;
    }
    // Inverse through the forward transform: idft(x) = conj(dft(conj(x))).
    Cx<T>* a = scratch;
    Cx<T>* fa = scratch + m_;
    for (int64_t j = 0; j < n_; ++j) {
      const Cx<T> x = inverse ? Conj(in[j]) : in[j];
      a[j] = Mul(x, chirp_[j]);
    }
    for (int64_t j = n_; j < m_; ++j) a[j] = {T(0), T(0)};
    sub_->Run(a, fa, false, scratch + 2 * m_);
    for (int64_t j = 0; j < m_; ++j) fa[j] = Conj(Mul(fa[j], bhat_[j]));
    sub_->Run(fa, a, false, scratch + 2 * m_);  // conj of the inverse
    for (int64_t k = 0; k < n_; ++k) {
      const Cx<T> y = Mul(Conj(a[k]), chirp_[k]);
      out[k] = inverse ? Conj(y) : y;
    }
  }

 private:
  // Twiddle exp(-+2 pi i e / n_) for exponent e in [0, n_).
  Cx<T> Tw(int64_t e, bool inverse) const {
    return inverse ? Conj(tw_[e]) : tw_[e];
  }

  // out[0..n) = DFT of in[0], in[stride], ..., in[(n - 1) stride]: split
  // into p interleaved subsequences (p = factors_[level]), transform each
  // into out[q m .. q m + m), then combine with p-point butterflies.
  void Rec(const Cx<T>* in, int64_t stride, Cx<T>* out, int64_t n,
           size_t level, bool inverse) const {
    if (n == 1) {
      out[0] = in[0];
      return;
    }
    const int64_t p = factors_[level], m = n / p;
    for (int64_t q = 0; q < p; ++q)
      Rec(in + q * stride, stride * p, out + q * m, m, level + 1, inverse);
    const int64_t step = n_ / n;  // twiddle of this length: tw_[e * step]
    const T s = inverse ? T(1) : T(-1);  // sign of the exponent
    for (int64_t k = 0; k < m; ++k) {
      Cx<T> t[5];
      t[0] = out[k];
      for (int64_t q = 1; q < p; ++q)
        t[q] = Mul(out[q * m + k], Tw(q * k * step, inverse));
      switch (p) {
        case 2:
          out[k] = Add(t[0], t[1]);
          out[k + m] = Sub(t[0], t[1]);
          break;
        case 4: {
          // W4 = exp(s i pi / 2) = s i.
          const Cx<T> a = Add(t[0], t[2]), b = Sub(t[0], t[2]);
          const Cx<T> c = Add(t[1], t[3]), d = Sub(t[1], t[3]);
          const Cx<T> id = {-s * d.im, s * d.re};  // s i d
          out[k] = Add(a, c);
          out[k + m] = Add(b, id);
          out[k + 2 * m] = Sub(a, c);
          out[k + 3 * m] = Sub(b, id);
          break;
        }
        default: {  // 3 and 5: direct p-point DFT with this length's roots
          const int64_t root = n_ / p;
          for (int64_t r = 0; r < p; ++r) {
            Cx<T> acc = t[0];
            for (int64_t q = 1; q < p; ++q)
              acc = Add(acc, Mul(t[q], Tw(((q * r) % p) * root, inverse)));
            out[k + r * m] = acc;
          }
        }
      }
    }
  }

  int64_t n_, m_ = 0;
  std::vector<int64_t> factors_;
  std::vector<Cx<T>> tw_, chirp_, bhat_;
  std::unique_ptr<Plan<T>> sub_;
};

// numpy's scale for a transform of length n in direction `inverse`.
double Scale(const std::string& norm, int64_t n, bool inverse) {
  if (norm == "ortho") return 1.0 / std::sqrt(static_cast<double>(n));
  const bool scaled = inverse ? norm == "backward" : norm == "forward";
  return scaled ? 1.0 / static_cast<double>(n) : 1.0;
}

// The split of the signal axis: outer lines of `dim` values `inner` apart.
// Complex tensors split their complex array (the shape less its last axis).
AxisSplit SignalSplit(const dg::KernelContext& ctx, std::vector<int64_t> shape,
                      bool complex) {
  if (complex) shape.pop_back();
  return SplitAt(shape, CheckedAxis(ctx.op_name(), ctx.i("axis"), shape));
}

enum class Kind { kC2C, kR2C, kC2R };

// One kernel for the four ops: gathers each line (cut or zero-padded to the
// transform's input length), transforms, scales and scatters it.
template <typename T>
void Transform(dg::KernelContext& ctx, Kind kind, bool inverse) {
  const dg::TensorRef xt = ctx.input(0);
  dg::TensorRef yt = ctx.output(0);
  const AxisSplit in = SignalSplit(ctx, xt.shape(), kind != Kind::kR2C);
  const AxisSplit out = SignalSplit(ctx, yt.shape(), kind != Kind::kC2R);
  if (yt.numel() == 0) return;
  // n: the transform length.
  const int64_t n = kind == Kind::kC2R ? out.dim : (ctx.has("n") ? ctx.i("n")
                                                                 : in.dim);
  const T scale = static_cast<T>(Scale(ctx.s("norm"), n, inverse));
  const T* x = xt.data<const T>();
  T* y = yt.data<T>();
  const Plan<T> plan(n);
  const int64_t lines = in.outer * in.inner;
  const int64_t cin = kind == Kind::kR2C ? 1 : 2;   // values per input elem
  const int64_t cout = kind == Kind::kC2R ? 1 : 2;  // values per output elem
  const int64_t take = std::min(in.dim, kind == Kind::kC2R ? n / 2 + 1 : n);
  const int64_t cost = 8 * n * (1 + static_cast<int64_t>(std::log2(n + 1)));
  ParallelFor(
      lines,
      [&](int64_t begin, int64_t end) {
        std::vector<Cx<T>> buf(static_cast<size_t>(2 * n + plan.scratch()));
        Cx<T>* a = buf.data();
        Cx<T>* b = a + n;
        Cx<T>* scratch = b + n;
        for (int64_t line = begin; line < end; ++line) {
          const int64_t o = line / in.inner, i = line % in.inner;
          const T* xl = x + (o * in.dim * in.inner + i) * cin;
          for (int64_t j = 0; j < n; ++j) a[j] = {T(0), T(0)};
          for (int64_t j = 0; j < take; ++j) {
            const T* v = xl + j * in.inner * cin;
            a[j] = {v[0], cin == 2 ? v[1] : T(0)};
          }
          if (kind == Kind::kC2R) {  // Hermitian extension of n/2 + 1 values
            a[0].im = T(0);
            if (n % 2 == 0) a[n / 2].im = T(0);
            for (int64_t k = n / 2 + 1; k < n; ++k) a[k] = Conj(a[n - k]);
          }
          plan.Run(a, b, inverse, scratch);
          T* yl = y + (o * out.dim * out.inner + i) * cout;
          for (int64_t k = 0; k < out.dim; ++k) {
            T* v = yl + k * out.inner * cout;
            v[0] = b[k].re * scale;
            if (cout == 2) v[1] = b[k].im * scale;
          }
        }
      },
      cost);
}

template <typename T>
void Fft(dg::KernelContext& ctx) {
  Transform<T>(ctx, Kind::kC2C, false);
}
template <typename T>
void Ifft(dg::KernelContext& ctx) {
  Transform<T>(ctx, Kind::kC2C, true);
}
template <typename T>
void Rfft(dg::KernelContext& ctx) {
  Transform<T>(ctx, Kind::kR2C, false);
}
template <typename T>
void Irfft(dg::KernelContext& ctx) {
  Transform<T>(ctx, Kind::kC2R, true);
}

}  // namespace

DG_KERNEL("Fft", "cpu", Fft, float, double);
DG_KERNEL("Ifft", "cpu", Ifft, float, double);
DG_KERNEL("Rfft", "cpu", Rfft, float, double);
DG_KERNEL("Irfft", "cpu", Irfft, float, double);
CPU_EIGEN_WIDENED_KERNEL("Fft", Fft);
CPU_EIGEN_WIDENED_KERNEL("Ifft", Ifft);
CPU_EIGEN_WIDENED_KERNEL("Rfft", Rfft);
CPU_EIGEN_WIDENED_KERNEL("Irfft", Irfft);

}  // namespace cpu_eigen
