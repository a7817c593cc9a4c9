// AMX bfloat16 peak microbenchmark: TDPBF16PS on tile registers only, no
// memory traffic inside the timed loop. Built by bench/bench_peak.py with
// the system compiler (-O2 -mamx-tile -mamx-bf16 -fopenmp) and called
// through ctypes, only on a CPU whose /proc/cpuinfo lists amx_bf16 and
// amx_tile. Returns the FLOP/s the threads reached together: one
// TDPBF16PS on 16 x 16 float32 outputs with 32 bfloat16 products each is
// 16 * 16 * 32 * 2 = 16384 flops.
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>

namespace {

// Linux hands the tile data state to a process only on request
// (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without it the
// first tile instruction raises SIGILL.
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

// The 64-byte operand of LDTILECFG (palette 1).
struct TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// Four independent accumulator tiles (0-3) fed by two A tiles (4, 5) and
// two B tiles (6, 7): the 2 x 2 register blocking of a GEMM microkernel,
// enough chains to cover the instruction's latency.
double Run(int64_t iters, float* sink) {
  alignas(64) TileConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t ones[16 * 32];
  for (auto& v : ones) v = 0x3F80;  // bfloat16 1.0
  _tile_loadd(4, ones, 64);
  _tile_loadd(5, ones, 64);
  _tile_loadd(6, ones, 64);
  _tile_loadd(7, ones, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float out[16 * 16];
  _tile_stored(0, out, 64);
  _tile_release();
  *sink = out[0];
  return 4.0 * 16384.0 * static_cast<double>(iters);
}

}  // namespace

// FLOP/s over `threads` threads; -1 when Linux refuses the tile state.
extern "C" double amx_peak(int threads, int64_t iters) {
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    return -1.0;
  }
  double flops = 0.0;
  float sink = 0.0f;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
  {
    float local = 0.0f;
    flops += Run(iters, &local);
#pragma omp critical
    sink += local;
  }
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sink == 12345.0f ? 0.0 : flops / s;
}
