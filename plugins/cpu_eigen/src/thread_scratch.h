// A per-thread scratch buffer for kernels whose threads keep private data
// from call to call (the bfloat16 GEMM's packed halves and A panels, the
// fused attention's scores): written and read by its own thread alone, its
// lines stay in that thread's core, where bytes of a workspace shared by
// every kernel were last written by whichever core the previous op gave
// them to (docs/benchmarks.md, "Session 21"). Declared here, defined in
// thread_scratch.cc with the plugin's baseline flags, so the per-ISA GEMM
// files (gemm/*.cc) call it without sharing any inline code.
#ifndef DRAGON_CPU_EIGEN_THREAD_SCRATCH_H_
#define DRAGON_CPU_EIGEN_THREAD_SCRATCH_H_

#include <cstdint>

namespace cpu_eigen {

// Requests over this get null: a one-off large call must not leave its
// data held by every thread for the life of the process.
constexpr int64_t kThreadScratchMax = int64_t{4} << 20;

// The calling thread's buffer of at least `bytes` bytes, 64-byte aligned,
// kept from call to call (grown as needed, never freed); null when `bytes`
// is over kThreadScratchMax or the memory cannot be had (the caller then
// uses the shared workspace). One buffer per thread: a caller must be done
// with it before the same thread asks again.
char* ThreadScratch(int64_t bytes);

}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_THREAD_SCRATCH_H_
