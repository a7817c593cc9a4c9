// The optimizer element loops of optim_isa.h (Adam).
//
// Built with the plugin's baseline flags like every src/*.cc (namespace
// cpu_eigen::optim_base), and again on x86-64 with -march=x86-64-v3 / -v4
// -DCPU_EIGEN_OPTIM_ISA=<isa> (namespace optim_<isa>); optim_isa.h picks the
// best build the CPU runs. Every build compiles with -fno-math-errno (so sqrt
// vectorises) and -ffp-contract=off (no fused multiply-add: the same bits
// at every width). Plain loops over independent elements, no library code
// (no Eigen, no std templates), so a build emits no symbol that could stand
// in for another build's: everything but the two tables has internal
// linkage.
#ifdef CPU_EIGEN_OPTIM_ISA
#define CPU_EIGEN_OPTIM_CAT_INNER_(a, b) a##b
#define CPU_EIGEN_OPTIM_CAT_(a, b) CPU_EIGEN_OPTIM_CAT_INNER_(a, b)
#define CPU_EIGEN_OPTIM_NS CPU_EIGEN_OPTIM_CAT_(optim_, CPU_EIGEN_OPTIM_ISA)
#ifndef CPU_EIGEN_OPTIM_ISA_NAME
#define CPU_EIGEN_OPTIM_ISA_NAME "x86-64-isa"
#endif
#else
#define CPU_EIGEN_OPTIM_NS optim_base
#define CPU_EIGEN_OPTIM_ISA_NAME "baseline"
#endif

#include <cstdint>
#if defined(__AVX__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#endif

#define CPU_EIGEN_OPTIM_TABLE_ONLY
#include "optim_isa.h"

namespace cpu_eigen {
namespace CPU_EIGEN_OPTIM_NS {
namespace {

inline float Sqrt(float x) { return __builtin_sqrtf(x); }
inline double Sqrt(double x) { return __builtin_sqrt(x); }

// The loop for one combination of the per-call switches (hoisted out of the
// loop so that each variant vectorises as a straight line).
template <typename T, bool kAms, bool kMax, bool kL2, bool kShrink>
void AdamLoop(const AdamParams<T>& a, const T* p, const T* g, const T* m,
              const T* v, const T* vmax, T* p_out, T* m_out, T* v_out,
              T* vmax_out, int64_t len) {
  const T b1 = a.b1, c1 = a.one_minus_b1, b2 = a.b2, c2 = a.one_minus_b2;
  const T l2 = a.l2, shrink = a.shrink, bc2 = a.bc2_sqrt, eps = a.eps;
  const T step = a.step_size;
  for (int64_t i = 0; i < len; ++i) {
    T d = kMax ? -g[i] : g[i];
    if (kL2) d = d + l2 * p[i];
    const T mi = b1 * m[i] + c1 * d;
    const T vi = b2 * v[i] + c2 * (d * d);
    T s = vi;
    if (kAms) {
      const T old = vmax[i];
      s = old < vi ? vi : old;
    }
    const T den = Sqrt(s) / bc2 + eps;
    const T pi = p[i];
    m_out[i] = mi;
    v_out[i] = vi;
    if (kAms) vmax_out[i] = s;
    p_out[i] = kShrink ? pi * shrink - step * (mi / den) : pi - step * (mi / den);
  }
}

// Non-temporal copies of n values to dst (whole vectors from the first
// vector-aligned element; the rest with normal stores), in builds with
// AVX (v3) or AVX-512 (v4); elsewhere normal stores. The caller fences.
#if defined(__AVX512F__)
constexpr int kStreamBytes = 64;
inline void StreamVec(float* d, const float* s) {
  _mm512_stream_ps(d, _mm512_loadu_ps(s));
}
inline void StreamVec(double* d, const double* s) {
  _mm512_stream_pd(d, _mm512_loadu_pd(s));
}
inline void StreamFence() { _mm_sfence(); }
#elif defined(__AVX__)
constexpr int kStreamBytes = 32;
inline void StreamVec(float* d, const float* s) {
  _mm256_stream_ps(d, _mm256_loadu_ps(s));
}
inline void StreamVec(double* d, const double* s) {
  _mm256_stream_pd(d, _mm256_loadu_pd(s));
}
inline void StreamFence() { _mm_sfence(); }
#else
constexpr int kStreamBytes = 0;
template <typename T>
inline void StreamVec(T*, const T*) {}
inline void StreamFence() {}
#endif

template <typename T>
void StreamCopy(const T* src, T* dst, int64_t n) {
  int64_t i = 0;
  if constexpr (kStreamBytes > 0) {
    constexpr uintptr_t kAlign = kStreamBytes > 0 ? kStreamBytes : 1;
    constexpr int64_t kLanes = static_cast<int64_t>(kAlign / sizeof(T));
    const auto addr = reinterpret_cast<uintptr_t>(dst);
    if (addr % sizeof(T) == 0) {
      const int64_t head =
          static_cast<int64_t>(((kAlign - addr % kAlign) % kAlign) / sizeof(T));
      for (; i < head && i < n; ++i) dst[i] = src[i];
      for (; i + kLanes <= n; i += kLanes) StreamVec(dst + i, src + i);
    }
  }
  for (; i < n; ++i) dst[i] = src[i];
}

// The same loop with m', v' (vmax') computed into chunks on the stack and
// written with StreamCopy: the same operations on each element, so the same
// bits. Chunk by chunk, every element is read before it is written, so the
// outputs may still be their inputs' buffers.
template <typename T, bool kAms, bool kMax, bool kL2, bool kShrink>
void AdamLoopStream(const AdamParams<T>& a, const T* p, const T* g,
                    const T* m, const T* v, const T* vmax, T* p_out, T* m_out,
                    T* v_out, T* vmax_out, int64_t len) {
  constexpr int64_t kChunk = 512;
  alignas(64) T mc[kChunk];
  alignas(64) T vc[kChunk];
  alignas(64) T sc[kChunk];
  for (int64_t i0 = 0; i0 < len; i0 += kChunk) {
    const int64_t n = len - i0 < kChunk ? len - i0 : kChunk;
    AdamLoop<T, kAms, kMax, kL2, kShrink>(
        a, p + i0, g + i0, m + i0, v + i0, kAms ? vmax + i0 : nullptr,
        p_out + i0, mc, vc, kAms ? sc : nullptr, n);
    StreamCopy(mc, m_out + i0, n);
    StreamCopy(vc, v_out + i0, n);
    if (kAms) StreamCopy(sc, vmax_out + i0, n);
  }
  StreamFence();
}

template <typename T, bool kAms, bool kMax, bool kL2>
void AdamShrink(const AdamParams<T>& a, const T* p, const T* g, const T* m,
                const T* v, const T* vmax, T* p_out, T* m_out, T* v_out,
                T* vmax_out, int64_t len) {
  if (a.stream && kStreamBytes > 0) {
    if (a.shrink != T(1)) {
      AdamLoopStream<T, kAms, kMax, kL2, true>(a, p, g, m, v, vmax, p_out,
                                               m_out, v_out, vmax_out, len);
    } else {
      AdamLoopStream<T, kAms, kMax, kL2, false>(a, p, g, m, v, vmax, p_out,
                                                m_out, v_out, vmax_out, len);
    }
  } else if (a.shrink != T(1)) {
    AdamLoop<T, kAms, kMax, kL2, true>(a, p, g, m, v, vmax, p_out, m_out,
                                       v_out, vmax_out, len);
  } else {
    AdamLoop<T, kAms, kMax, kL2, false>(a, p, g, m, v, vmax, p_out, m_out,
                                        v_out, vmax_out, len);
  }
}

template <typename T, bool kAms, bool kMax>
void AdamL2(const AdamParams<T>& a, const T* p, const T* g, const T* m,
            const T* v, const T* vmax, T* p_out, T* m_out, T* v_out,
            T* vmax_out, int64_t len) {
  if (a.l2 != T(0)) {
    AdamShrink<T, kAms, kMax, true>(a, p, g, m, v, vmax, p_out, m_out, v_out,
                                    vmax_out, len);
  } else {
    AdamShrink<T, kAms, kMax, false>(a, p, g, m, v, vmax, p_out, m_out, v_out,
                                     vmax_out, len);
  }
}

template <typename T>
void Adam(const AdamParams<T>& a, const T* p, const T* g, const T* m,
          const T* v, const T* vmax, T* p_out, T* m_out, T* v_out,
          T* vmax_out, int64_t len) {
  if (a.amsgrad) {
    if (a.maximize) {
      AdamL2<T, true, true>(a, p, g, m, v, vmax, p_out, m_out, v_out,
                            vmax_out, len);
    } else {
      AdamL2<T, true, false>(a, p, g, m, v, vmax, p_out, m_out, v_out,
                             vmax_out, len);
    }
  } else if (a.maximize) {
    AdamL2<T, false, true>(a, p, g, m, v, vmax, p_out, m_out, v_out, vmax_out,
                           len);
  } else {
    AdamL2<T, false, false>(a, p, g, m, v, vmax, p_out, m_out, v_out,
                            vmax_out, len);
  }
}

}  // namespace

extern const OptimKernels<float> kOptimKernelsF32;
extern const OptimKernels<double> kOptimKernelsF64;

const OptimKernels<float> kOptimKernelsF32 = {&Adam<float>,
                                              CPU_EIGEN_OPTIM_ISA_NAME};
const OptimKernels<double> kOptimKernelsF64 = {&Adam<double>,
                                               CPU_EIGEN_OPTIM_ISA_NAME};

}  // namespace CPU_EIGEN_OPTIM_NS
}  // namespace cpu_eigen
