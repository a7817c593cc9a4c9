// FusedElementwise on cuda: the straight-line program of the schema
// (dragon_core/src/ops/fused.cc) interpreted per element, one thread per
// output element, registers in thread-local memory. Every instruction runs
// the functor the unfused kernel runs (ops.cuh), through fused_eval.h, whose
// per-element evaluation is also compiled and tested on the host
// (tests/test_cuda_fused_host.py), so a fused graph computes what the
// unfused ops compute on this device. Every fusable opcode of the op table
// (dragon/elementwise.h) runs. Limits (checked, with a clear error):
// 8 inputs, 16 constants, 128 instructions, 64 registers.
// float16/bfloat16 run each instruction in float and round its result to the
// dtype, as the unfused kernels store it; a constant is rounded to the dtype
// as an operand (the unfused op's scalar tensor) and kept in float as an
// activation's alpha (the unfused op's attribute).
#include <cstdint>
#include <vector>

#include "dragon/elementwise.h"
#include "elementwise.cuh"
#include "fused_eval.h"
#include "merge_axes.h"
#include "ops.cuh"

namespace dragon_cuda {
namespace {

using fused::kMaxConsts;
using fused::kMaxInputs;
using fused::kMaxInstr;
using fused::kMaxRegs;

template <typename T>
struct Program {
  fused::Code<Acc<T>> code;
  int32_t ndim = 0;
  const T* in[kMaxInputs] = {};
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxInputs][kMaxDims] = {};
};

// The unfused kernels' storage of a result: rounded to T (a no-op for float
// and double).
template <typename T>
struct RoundTo {
  __device__ Acc<T> operator()(Acc<T> v) const { return Load(Store<T>(v)); }
};

// kDense: every input is dense over the output (offset i, no index math).
// Otherwise the axes are merged on the host (MergeAxes), and the outermost
// axis needs no division (what is left of i there is its index).
template <typename T, bool kDense>
__global__ void Run(const Program<T> p, T* y, int64_t n) {
  using A = Acc<T>;
  const int32_t n_in = p.code.num_inputs;
  DGC_LOOP(i, n) {
    A reg[kMaxRegs];
    int64_t off[kMaxInputs] = {};
    if constexpr (kDense) {
      for (int k = 0; k < n_in; ++k) off[k] = i;
    } else {
      int64_t rest = i;
      for (int d = p.ndim - 1; d >= 1; --d) {
        const int64_t q = rest / p.shape[d], r = rest - q * p.shape[d];
        for (int k = 0; k < n_in; ++k) off[k] += r * p.strides[k][d];
        rest = q;
      }
      if (p.ndim > 0)
        for (int k = 0; k < n_in; ++k) off[k] += rest * p.strides[k][0];
    }
    for (int k = 0; k < n_in; ++k) reg[k] = Load(p.in[k][off[k]]);
    y[i] = Store<T>(fused::RunElement(p.code, reg, RoundTo<T>{}));
  }
}

template <typename T>
void FusedElementwise(dg::KernelContext& ctx) {
  const int32_t n_in = ctx.num_inputs();
  const std::vector<int64_t> prog = ctx.ints("program");
  const std::vector<double> consts = ctx.floats("constants");
  const int64_t count = static_cast<int64_t>(prog.size() / 4);
  const int64_t first_temp = n_in + static_cast<int64_t>(consts.size());
  DG_CHECK(n_in <= kMaxInputs && consts.size() <= static_cast<size_t>(kMaxConsts) &&
               count <= kMaxInstr,
           DG_UNIMPLEMENTED, ctx.op_name(), " on cuda: a program of ", n_in, " inputs, ",
           consts.size(), " constants and ", count, " instructions exceeds this kernel's limits (",
           kMaxInputs, ", ", kMaxConsts, ", ", kMaxInstr,
           "); compile with the `fusion` pass disabled or split the group");
  Program<T> p;
  fused::Code<Acc<T>>& c = p.code;
  c.num_inputs = n_in;
  c.num_consts = static_cast<int32_t>(consts.size());
  c.num_instr = static_cast<int32_t>(count);
  for (size_t k = 0; k < consts.size(); ++k) {
    c.consts[k] = Load(FromDouble<T>(consts[k]));
    c.alphas[k] = static_cast<Acc<T>>(consts[k]);
  }
  for (int64_t k = 0; k < count; ++k) {
    const int64_t op = prog[4 * k];
    DG_CHECK(fused::OpcodeKind(op) != 0, DG_INVALID_ARGUMENT, ctx.op_name(),
             ": unknown opcode ", op, " at instruction ", k, " (see docs/ops.md)");
    for (int j = 0; j < 4; ++j) {
      const int64_t r = prog[4 * k + j];
      DG_CHECK(j == 0 || (r >= -1 && r < kMaxRegs), DG_UNIMPLEMENTED, ctx.op_name(),
               " on cuda: register ", r, " at instruction ", k, " is beyond this kernel's ",
               kMaxRegs, " registers");
      c.ins[k][j] = static_cast<int16_t>(r);
    }
    DG_CHECK(c.ins[k][1] >= first_temp, DG_INVALID_ARGUMENT, ctx.op_name(), ": instruction ", k,
             " writes register ", c.ins[k][1], ", which is not a temporary");
  }
  const int64_t result = ctx.i("result") == -1 && count > 0 ? prog[4 * (count - 1) + 1]
                                                           : ctx.i("result");
  DG_CHECK(result >= 0 && result < kMaxRegs, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": result register ", result, " is out of range");
  c.result = static_cast<int32_t>(result);
  const dg::TensorRef y = ctx.output(0);
  const int64_t n = y.numel();
  if (n == 0) return;
  const std::vector<int64_t> shape = y.shape();
  DG_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), DG_UNIMPLEMENTED, ctx.op_name(),
           " on cuda: rank ", shape.size(), " exceeds ", kMaxDims);
  std::vector<int64_t> merged = shape;
  std::vector<std::vector<int64_t>> strides;
  for (int32_t k = 0; k < n_in; ++k) {
    const dg::TensorRef x = ctx.input(k);
    p.in[k] = static_cast<const T*>(x.raw_data());
    strides.push_back(BroadcastStrides(x.shape(), DenseStrides(x.shape()), shape));
  }
  MergeAxes(&merged, &strides);
  p.ndim = static_cast<int32_t>(merged.size());
  bool dense = p.ndim <= 1;
  for (size_t d = 0; d < merged.size(); ++d) p.shape[d] = merged[d];
  for (int32_t k = 0; k < n_in; ++k) {
    for (size_t d = 0; d < merged.size(); ++d) p.strides[k][d] = strides[k][d];
    dense = dense && (p.ndim == 0 || strides[k][0] == 1);
  }
  cudaStream_t s = Prepare(ctx);
  T* out = static_cast<T*>(y.raw_data());
  if (dense) {
    Run<T, true><<<Blocks(n), kThreads, 0, s>>>(p, out, n);
  } else {
    Run<T, false><<<Blocks(n), kThreads, 0, s>>>(p, out, n);
  }
  CheckLaunch(ctx);
}
DG_KERNEL("FusedElementwise", "cuda", FusedElementwise, float, double, half, bf16);

}  // namespace
}  // namespace dragon_cuda
