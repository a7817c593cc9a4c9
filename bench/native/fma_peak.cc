// FMA peak microbenchmark: independent fused multiply-adds on registers,
// no memory traffic, one chain set per thread. Built by bench/bench_peak.py
// with the system compiler (-O2 -mavx512f -mfma -fopenmp) and called
// through ctypes. Returns the float32 FLOP/s the threads reached together
// (2 flops per lane per FMA).
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdint>

namespace {

// 12 independent accumulators: enough to cover the FMA latency (4 cycles)
// times the FMA ports (2) of current x86 cores.
template <typename V, V (*Fma)(V, V, V), V (*Set1)(float)>
double Run(int64_t iters, float* sink) {
  V a0 = Set1(1.0f), a1 = Set1(1.1f), a2 = Set1(1.2f), a3 = Set1(1.3f);
  V a4 = Set1(1.4f), a5 = Set1(1.5f), a6 = Set1(1.6f), a7 = Set1(1.7f);
  V a8 = Set1(1.8f), a9 = Set1(1.9f), a10 = Set1(2.0f), a11 = Set1(2.1f);
  const V m = Set1(0.99999f), c = Set1(1e-6f);
  for (int64_t i = 0; i < iters; ++i) {
    a0 = Fma(a0, m, c); a1 = Fma(a1, m, c); a2 = Fma(a2, m, c); a3 = Fma(a3, m, c);
    a4 = Fma(a4, m, c); a5 = Fma(a5, m, c); a6 = Fma(a6, m, c); a7 = Fma(a7, m, c);
    a8 = Fma(a8, m, c); a9 = Fma(a9, m, c); a10 = Fma(a10, m, c); a11 = Fma(a11, m, c);
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
  }
  V s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
  float out[16];
  __builtin_memcpy(out, &s, sizeof(V));
  *sink = out[0];
  return 12.0 * 2.0 * (sizeof(V) / sizeof(float)) * static_cast<double>(iters);
}

__m512 Fma512(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
__m512 Set512(float v) { return _mm512_set1_ps(v); }
__m256 Fma256(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
__m256 Set256(float v) { return _mm256_set1_ps(v); }

}  // namespace

// width 512 or 256; returns FLOP/s over `threads` threads.
extern "C" double fma_peak(int width, int threads, int64_t iters) {
  double flops = 0.0;
  float sink = 0.0f;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
  {
    float local = 0.0f;
    flops += width == 512 ? Run<__m512, Fma512, Set512>(iters, &local)
                          : Run<__m256, Fma256, Set256>(iters, &local);
#pragma omp critical
    sink += local;
  }
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sink == 12345.0f ? 0.0 : flops / s;
}
