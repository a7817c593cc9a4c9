// The float32 Softmax / LogSoftmax kernels of softmax_isa.h.
//
// Built with the plugin's baseline flags like every src/*.cc (namespace
// cpu_eigen::softmax_base), and again on x86-64 with -march=x86-64-v3 / -v4
// -DCPU_EIGEN_SOFTMAX_ISA=<isa> (namespace softmax_<isa>); softmax_isa.h
// picks the best build the CPU runs. Every build is compiled with
// -ffp-contract=off: the only fused multiply-adds are softmax_exp.h's
// explicit ones. The arithmetic is spelled on vectors of the build's
// register width (GCC vector extensions), tails included (padded lanes), so
// a value's result never depends on its position. It uses no library code
// but memcpy and log, so a build emits no symbol that could stand in for
// another build's: everything but the table has internal linkage.
//
// A row takes three passes: the maximum (with NaN detection), the
// exponentials and their sum (16 logical lanes: float partial sums of up
// to 16 values each, added to double lanes, halved in a fixed order), and
// the scaling (or, for log_softmax, x - m - log(sum)).
#ifdef CPU_EIGEN_SOFTMAX_ISA
#define CPU_EIGEN_SOFTMAX_CAT_INNER_(a, b) a##b
#define CPU_EIGEN_SOFTMAX_CAT_(a, b) CPU_EIGEN_SOFTMAX_CAT_INNER_(a, b)
#define CPU_EIGEN_SOFTMAX_NS \
  CPU_EIGEN_SOFTMAX_CAT_(softmax_, CPU_EIGEN_SOFTMAX_ISA)
#ifndef CPU_EIGEN_SOFTMAX_ISA_NAME
#define CPU_EIGEN_SOFTMAX_ISA_NAME "x86-64-isa"
#endif
#else
#define CPU_EIGEN_SOFTMAX_NS softmax_base
#define CPU_EIGEN_SOFTMAX_ISA_NAME "baseline"
#endif

#include <cstdint>
#include <cstring>
#include <utility>

#define CPU_EIGEN_SOFTMAX_TABLE_ONLY
#include "softmax_isa.h"
#include "softmax_exp.h"

namespace cpu_eigen {
namespace CPU_EIGEN_SOFTMAX_NS {
namespace {

using softmax_exp::ExpNonPositive;
using softmax_exp::Splat;

// The build's register width in floats. Arithmetic runs on native vectors
// (a wider GCC vector would be split, some operations lane by lane); the
// sums are kept in 16 logical double lanes whatever the width, so every
// build adds the same values in the same order.
#if defined(__AVX512F__)
constexpr int kW = 16;
#elif defined(__AVX__)
constexpr int kW = 8;
#else
constexpr int kW = 4;
#endif
constexpr int kLanes = 16;             // logical lanes of a row's sum
constexpr int kAcc = 2 * kLanes / kW;  // double vectors holding them
// A lane adds up to this many exponentials in float before its double.
constexpr int64_t kSumBlock = 16;
typedef float VF __attribute__((vector_size(4 * kW)));
typedef float VH __attribute__((vector_size(2 * kW)));  // half of VF
typedef double VD __attribute__((vector_size(4 * kW)));  // kW / 2 doubles
typedef int32_t VI __attribute__((vector_size(4 * kW)));

constexpr float kInf = __builtin_inff();

inline VF Load(const float* p) {
  VF v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void Store(float* p, VF v) { std::memcpy(p, &v, sizeof v); }

// The first n < kW values at p, the other lanes `fill`.
inline VF LoadPart(const float* p, int64_t n, float fill) {
  float b[kW];
  for (int j = 0; j < kW; ++j) b[j] = j < n ? p[j] : fill;
  return Load(b);
}

inline void StorePart(float* p, int64_t n, VF v) {
  float b[kW];
  Store(b, v);
  for (int64_t j = 0; j < n; ++j) p[j] = b[j];
}

// Lane-wise maximum that keeps a NaN once one is seen.
inline VF NanMax(VF m, VF v) { return ((v > m) | (v != v)) ? v : m; }
inline float NanMax(float m, float v) {
  return (v > m || v != v) ? v : m;
}

// The double lanes acc[0], acc[1] += the kW floats of e (low half first).
inline void AddWide(VD* acc, VF e) {
#if defined(__AVX512F__)
  const VH lo = __builtin_shufflevector(e, e, 0, 1, 2, 3, 4, 5, 6, 7);
  const VH hi = __builtin_shufflevector(e, e, 8, 9, 10, 11, 12, 13, 14, 15);
#elif defined(__AVX__)
  const VH lo = __builtin_shufflevector(e, e, 0, 1, 2, 3);
  const VH hi = __builtin_shufflevector(e, e, 4, 5, 6, 7);
#else
  const VH lo = __builtin_shufflevector(e, e, 0, 1);
  const VH hi = __builtin_shufflevector(e, e, 2, 3);
#endif
  acc[0] += __builtin_convertvector(lo, VD);
  acc[1] += __builtin_convertvector(hi, VD);
}

// v with lane j replaced by lane (j + W) mod N (N lanes).
template <int W, typename V, int... I>
inline V Rotate(V v, std::integer_sequence<int, I...>) {
  return __builtin_shufflevector(v, v, ((I + W) % sizeof...(I))...);
}

template <typename V>
constexpr int kLanesOf = sizeof(V) / sizeof(V{}[0]);

// Folds the lanes of v halving: lane j op= lane j + W for W = N/2, ..., 1;
// lane 0 holds the result (in shuffles, never through memory).
template <int W, typename V, typename Op>
inline V Fold(V v, Op op) {
  if constexpr (W == 0) {
    return v;
  } else {
    const V r = Rotate<W>(v, std::make_integer_sequence<int, kLanesOf<V>>());
    return Fold<W / 2>(op(v, r), op);
  }
}

// The sum of the 16 logical lanes, halving in a fixed order: lane j + w
// is added to lane j for w = 8, 4, 2, 1 (first across the kAcc vectors,
// then within the last one), whatever the build's width.
inline double Combine(VD* acc) {
  for (int c = kAcc; c > 1; c /= 2) {
    for (int j = 0; j < c / 2; ++j) acc[j] += acc[j + c / 2];
  }
  return Fold<kW / 4>(acc[0], [](VD a, VD b) { return a + b; })[0];
}

// The largest lane (lanes hold no NaN).
inline float MaxLane(VF v) {
  return Fold<kW / 2>(v, [](VF a, VF b) { return b > a ? b : a; })[0];
}

// Whether a lane is nonzero.
inline bool AnyLane(VI v) {
  return Fold<kW / 2>(v, [](VI a, VI b) { return a | b; })[0] != 0;
}

inline bool Finite(float m) { return m - m == 0.0f; }

// Stores (unless log) exp(x - m) of the 16 values at x and adds them to
// the float lanes `part`; `have16` values are real (the rest count as -inf).
inline void ExpSum16(const float* __restrict x, float* __restrict y, VF mm,
                     bool log, VF* part, int64_t have16) {
  for (int b = 0; b < kLanes / kW; ++b) {
    const int64_t have = have16 - b * kW;
    if (have <= 0) return;  // -inf lanes add exactly 0
    const VF v =
        have >= kW ? Load(x + b * kW) : LoadPart(x + b * kW, have, -kInf);
    // x <= m (finite): x - m is <= 0 or -inf.
    const VF e = ExpNonPositive<VF, true>(v - mm);
    if (!log) {
      if (have >= kW) {
        Store(y + b * kW, e);
      } else {
        StorePart(y + b * kW, have, e);
      }
    }
    part[b] += e;
  }
}

// The maximum of a row (two running maxima: two dependency chains, merged
// after the loop) and whether it holds a NaN.
inline float RowMax(const float* __restrict x, int64_t n, bool* has_nan) {
  const int64_t full = n / kW * kW;
  VF mv = Splat<VF>(-kInf), mv2 = mv;
  VI nan{}, nan2{};
  int64_t i = 0;
  for (; i + 2 * kW <= full; i += 2 * kW) {
    const VF v = Load(x + i), v2 = Load(x + i + kW);
    nan |= v != v;
    nan2 |= v2 != v2;
    mv = v > mv ? v : mv;
    mv2 = v2 > mv2 ? v2 : mv2;
  }
  for (; i < full; i += kW) {
    const VF v = Load(x + i);
    nan |= v != v;
    mv = v > mv ? v : mv;
  }
  nan |= nan2;
  mv = mv2 > mv ? mv2 : mv;
  if (full < n) {
    const VF v = LoadPart(x + full, n - full, -kInf);
    nan |= v != v;
    mv = v > mv ? v : mv;
  }
  *has_nan = AnyLane(nan);
  return MaxLane(mv);
}

// Softmax (log_softmax when `log`) of kR rows of n values, rows `ld` floats
// apart, in lock step: each phase runs for every row before the next phase,
// so the rows' dependency chains (the maxima, the exponentials' sums, their
// folds and the division) overlap where one short row alone waits on its
// own latency. Every row goes through exactly the operations of a row done
// alone (kR = 1), in the same order: the same bits for any grouping.
template <int kR>
void RowGroup(const float* __restrict x, float* __restrict y, int64_t n,
              int64_t ld, bool log) {
  float m[kR];
  bool bad = false;
  for (int r = 0; r < kR; ++r) {
    bool has_nan;
    m[r] = RowMax(x + r * ld, n, &has_nan);
    bad = bad || has_nan || !Finite(m[r]);
  }
  if (kR > 1 && bad) {  // the rare rows that come out all NaN, one by one
    for (int r = 0; r < kR; ++r) RowGroup<1>(x + r * ld, y + r * ld, n, ld, log);
    return;
  }
  if (bad) {  // a NaN, a +inf, or only -inf: all NaN
    const float nan = __builtin_nanf("");
    for (int64_t i = 0; i < n; ++i) y[i] = nan;
    return;
  }
  VF mm[kR];
  for (int r = 0; r < kR; ++r) {
    m[r] += 0.0f;  // -0 -> +0, whichever zero the lanes kept
    mm[r] = Splat<VF>(m[r]);
  }
  // Each logical lane sums its exponentials of a block of kSumBlock * 16
  // elements in float, then adds that partial sum to its double.
  VD acc[kR][kAcc] = {};
  for (int64_t i0 = 0; i0 < n; i0 += kSumBlock * kLanes) {
    const int64_t i1 =
        n - i0 < kSumBlock * kLanes ? n : i0 + kSumBlock * kLanes;
    VF part[kR][kLanes / kW] = {};
    int64_t i = i0;
    for (; i + kLanes <= i1; i += kLanes) {
      for (int r = 0; r < kR; ++r) {
        ExpSum16(x + r * ld + i, y + r * ld + i, mm[r], log, part[r], kLanes);
      }
    }
    if (i < i1) {
      for (int r = 0; r < kR; ++r) {
        ExpSum16(x + r * ld + i, y + r * ld + i, mm[r], log, part[r], i1 - i);
      }
    }
    for (int r = 0; r < kR; ++r) {
      for (int b = 0; b < kLanes / kW; ++b) AddWide(acc[r] + 2 * b, part[r][b]);
    }
  }
  for (int r = 0; r < kR; ++r) {
    const double sum = Combine(acc[r]);  // >= 1: the maximum contributes 1
    const float* xr = x + r * ld;
    float* yr = y + r * ld;
    if (log) {
      // logf of the sum rounded to float: sum >= 1, so both roundings cost
      // under 2^-24 in absolute, and logf is cheaper than log.
      const float ls = __builtin_logf(static_cast<float>(sum));
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m[r]) - ls;
    } else {
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t i = 0; i < n; ++i) yr[i] *= inv;
    }
  }
}

// Rows of up to this many values go four at a time (RowGroup<4>), so that
// the short rows' reductions overlap. Measured on Zen 4 (x86-64-v4, two
// threads), 4096 rows of 128: 140 -> 120 us; inside the fused attention no
// change, where the exponentials' arithmetic bounds the rows
// (docs/benchmarks.md, session 21).
constexpr int64_t kGroupMaxN = 1024;

void Rows(const float* x, float* y, int64_t rows, int64_t n, int log) {
  int64_t r = 0;
  if (n <= kGroupMaxN) {
    for (; r + 4 <= rows; r += 4) RowGroup<4>(x + r * n, y + r * n, n, n, log != 0);
  }
  for (; r < rows; ++r) RowGroup<1>(x + r * n, y + r * n, n, n, log != 0);
}

// Positions [k0, k1) of the inner axis of one (dim, inner) slice: running
// max and sum are vectors over the block, the axis is swept row by row.
void Columns(const float* __restrict x, float* __restrict y, int64_t dim,
             int64_t inner, int64_t k0, int64_t k1, int log,
             float* __restrict m, double* __restrict sum) {
  const int64_t w = k1 - k0, full = w / kW * kW;
  x += k0;
  y += k0;
  for (int64_t k = 0; k < w; ++k) m[k] = x[k];
  for (int64_t a = 1; a < dim; ++a) {
    const float* r = x + a * inner;
    for (int64_t k = 0; k < full; k += kW)
      Store(m + k, NanMax(Load(m + k), Load(r + k)));
    for (int64_t k = full; k < w; ++k) m[k] = NanMax(m[k], r[k]);
  }
  for (int64_t k = 0; k < w; ++k) sum[k] = 0.0;
  for (int64_t a = 0; a < dim; ++a) {
    const float* r = x + a * inner;
    float* out = y + a * inner;
    for (int64_t k = 0; k < full; k += kW) {
      const VF e = ExpNonPositive(Load(r + k) - Load(m + k));
      if (!log) Store(out + k, e);
      VD two[2];
      std::memcpy(two, sum + k, sizeof two);
      AddWide(two, e);
      std::memcpy(sum + k, two, sizeof two);
    }
    if (full < w) {  // the tail through the same vector code
      const int64_t have = w - full;
      const VF e = ExpNonPositive(LoadPart(r + full, have, 0.0f) -
                                  LoadPart(m + full, have, 0.0f));
      if (!log) StorePart(out + full, have, e);
      float ev[kW];
      Store(ev, e);
      for (int64_t k = 0; k < have; ++k) {
        sum[full + k] += static_cast<double>(ev[k]);
      }
    }
  }
  // Per position the normaliser (in sum's place): 1 / sum or log(sum), NaN
  // where the column is not finite (a NaN, a +inf, or only -inf), which
  // then spreads to the whole column.
  for (int64_t k = 0; k < w; ++k) {
    sum[k] = !Finite(m[k]) ? __builtin_nan("")
             : log         ? __builtin_log(sum[k])
                           : 1.0 / sum[k];
  }
  for (int64_t a = 0; a < dim; ++a) {
    const float* r = x + a * inner;
    float* out = y + a * inner;
    if (log) {
      for (int64_t k = 0; k < w; ++k)
        out[k] = (r[k] - m[k]) - static_cast<float>(sum[k]);
    } else {
      for (int64_t k = 0; k < w; ++k)
        out[k] = out[k] * static_cast<float>(sum[k]);
    }
  }
}

// ------------------------------------------------------------ SoftmaxGrad

typedef float G8 __attribute__((vector_size(32)));
typedef double G8d __attribute__((vector_size(64)));

inline G8 Load8(const float* p) {
  G8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// sum(dy * y) over n values, products rounded to float, in reduce.cc's
// SumFloatRun order: per block of 32, 8 float lanes (starting from +0)
// add 4 products each, then widen into 8 double lanes; the tail of fewer
// than 32 adds in double; ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
// + tail.
double ProductSumRun(const float* y, const float* dy, int64_t n) {
  G8d acc{};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    G8 lane = G8{} + Load8(dy + i) * Load8(y + i);
    lane += Load8(dy + i + 8) * Load8(y + i + 8);
    lane += Load8(dy + i + 16) * Load8(y + i + 16);
    lane += Load8(dy + i + 24) * Load8(y + i + 24);
    acc += __builtin_convertvector(lane, G8d);
  }
  double tail = 0;
  for (; i < n; ++i) tail += static_cast<double>(dy[i] * y[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
         ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

void GradRows(const float* y, const float* dy, float* dx, int64_t rows,
              int64_t n, int64_t chunks) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * n;
    const float* dyr = dy + r * n;
    float* out = dx + r * n;
    double acc = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t lo = n * c / chunks, hi = n * (c + 1) / chunks;
      const double part = 0.0 + ProductSumRun(yr + lo, dyr + lo, hi - lo);
      acc = c == 0 ? part : acc + part;
    }
    const float s = static_cast<float>(acc);
    for (int64_t i = 0; i < n; ++i) out[i] = yr[i] * (dyr[i] - s);
  }
}

}  // namespace

extern const SoftmaxKernels kSoftmaxKernels;
// Constant-initialised (no code runs at load, whatever the CPU).
const SoftmaxKernels kSoftmaxKernels = {&Rows, &Columns, &GradRows,
                                        CPU_EIGEN_SOFTMAX_ISA_NAME};

}  // namespace CPU_EIGEN_SOFTMAX_NS
}  // namespace cpu_eigen
