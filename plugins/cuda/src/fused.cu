// FusedElementwise on cuda: the straight-line program of the schema
// (dragon_core/src/ops/fused.cc) interpreted per element, one thread per
// output element, registers in thread-local memory. Every instruction runs
// the functor the unfused kernel runs (ops.cuh), so a fused graph computes
// what the unfused ops compute on this device. Limits (checked, with a
// clear error): 8 inputs, 16 constants, 128 instructions, 64 registers.
// float16/bfloat16 run each instruction in float and round its result to the
// dtype, as the unfused kernels store it; a constant is rounded to the dtype
// as an operand (the unfused op's scalar tensor) and kept in float as an
// activation's alpha (the unfused op's attribute).
#include <cstdint>
#include <vector>

#include "dragon/elementwise.h"
#include "elementwise.cuh"
#include "merge_axes.h"
#include "ops.cuh"

namespace dragon_cuda {
namespace {

using namespace fn;  // NOLINT: the op functors

constexpr int kMaxInputs = 8, kMaxConsts = 16, kMaxInstr = 128, kMaxRegs = 64;

template <typename T>
struct Program {
  int32_t num_inputs = 0, num_instr = 0, result = 0, ndim = 0;
  int16_t ins[kMaxInstr][4] = {};  // opcode, dst, a, b
  Acc<T> consts[kMaxConsts] = {};  // rounded to T (operands)
  Acc<T> alphas[kMaxConsts] = {};  // not rounded (an activation's alpha)
  const T* in[kMaxInputs] = {};
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxInputs][kMaxDims] = {};
};

// The opcodes this kernel runs (of the element-wise op table,
// dragon/elementwise.h): Neg..Elu (0..21) and Add..Minimum (32..38).
static_assert(DG_EW_OP_Neg == 0 && DG_EW_OP_Elu == 21 && DG_EW_OP_Add == 32 &&
                  DG_EW_OP_Minimum == 38,
              "the cuda fused kernel's opcode ranges");
bool Supported(int64_t op) {
  return (op >= DG_EW_OP_Neg && op <= DG_EW_OP_Elu) ||
         (op >= DG_EW_OP_Add && op <= DG_EW_OP_Minimum);
}

template <typename T>
__device__ T Unary(int op, T x, T alpha) {
  switch (op) {
    case DG_EW_OP_Neg: return NegF{}(x);
    case DG_EW_OP_Abs: return AbsF{}(x);
    case DG_EW_OP_Sign: return SignF{}(x);
    case DG_EW_OP_Square: return SquareF{}(x);
    case DG_EW_OP_Reciprocal: return ReciprocalF{}(x);
    case DG_EW_OP_Sqrt: return SqrtF{}(x);
    case DG_EW_OP_Rsqrt: return RsqrtF{}(x);
    case DG_EW_OP_Exp: return ExpF{}(x);
    case DG_EW_OP_Log: return LogF{}(x);
    case DG_EW_OP_Log1p: return Log1pF{}(x);
    case DG_EW_OP_Sin: return SinF{}(x);
    case DG_EW_OP_Cos: return CosF{}(x);
    case DG_EW_OP_Tanh: return TanhF{}(x);
    case DG_EW_OP_Sigmoid: return SigmoidF{}(x);
    case DG_EW_OP_Relu: return ReluF{}(x);
    case DG_EW_OP_Floor: return FloorF{}(x);
    case DG_EW_OP_Ceil: return CeilF{}(x);
    case DG_EW_OP_Round: return RoundF{}(x);
    case DG_EW_OP_GeluErf: return GeluErfF{}(x);
    case DG_EW_OP_GeluTanh: return GeluTanhF{}(x);
    case DG_EW_OP_LeakyRelu: return LeakyReluF<T>{alpha}(x);
    default: return EluF<T>{alpha}(x);  // DG_EW_OP_Elu (checked on the host)
  }
}

template <typename T>
__device__ T Binary(int op, T a, T b) {
  switch (op) {
    case DG_EW_OP_Add: return AddF{}(a, b);
    case DG_EW_OP_Sub: return SubF{}(a, b);
    case DG_EW_OP_Mul: return MulF{}(a, b);
    case DG_EW_OP_Div: return DivF{}(a, b);
    case DG_EW_OP_Pow: return PowF{}(a, b);
    case DG_EW_OP_Maximum: return MaximumF{}(a, b);
    default: return MinimumF{}(a, b);  // DG_EW_OP_Minimum
  }
}

// kDense: every input is dense over the output (offset i, no index math).
// Otherwise the axes are merged on the host (MergeAxes), and the outermost
// axis needs no division (what is left of i there is its index).
template <typename T, bool kDense>
__global__ void Run(const Program<T> p, T* y, int64_t n, int32_t num_consts) {
  using A = Acc<T>;
  DGC_LOOP(i, n) {
    A reg[kMaxRegs];
    int64_t off[kMaxInputs] = {};
    if constexpr (kDense) {
      for (int k = 0; k < p.num_inputs; ++k) off[k] = i;
    } else {
      int64_t rest = i;
      for (int d = p.ndim - 1; d >= 1; --d) {
        const int64_t q = rest / p.shape[d], r = rest - q * p.shape[d];
        for (int k = 0; k < p.num_inputs; ++k) off[k] += r * p.strides[k][d];
        rest = q;
      }
      if (p.ndim > 0)
        for (int k = 0; k < p.num_inputs; ++k) off[k] += rest * p.strides[k][0];
    }
    for (int k = 0; k < p.num_inputs; ++k) reg[k] = Load(p.in[k][off[k]]);
    for (int k = 0; k < num_consts; ++k) reg[p.num_inputs + k] = p.consts[k];
    for (int k = 0; k < p.num_instr; ++k) {
      const int op = p.ins[k][0], dst = p.ins[k][1], a = p.ins[k][2], b = p.ins[k][3];
      A alpha = A(0);
      if (b >= 0) {
        const int c = b - p.num_inputs;
        alpha = c >= 0 && c < num_consts ? p.alphas[c] : reg[b];
      }
      const A r = op < DG_EW_OP_Add ? Unary<A>(op, reg[a], alpha) : Binary<A>(op, reg[a], reg[b]);
      reg[dst] = Load(Store<T>(r));  // the unfused op's rounding (none for float/double)
    }
    y[i] = Store<T>(reg[p.result]);
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
  p.num_inputs = n_in;
  p.num_instr = static_cast<int32_t>(count);
  for (size_t k = 0; k < consts.size(); ++k) {
    p.consts[k] = Load(FromDouble<T>(consts[k]));
    p.alphas[k] = static_cast<Acc<T>>(consts[k]);
  }
  for (int64_t k = 0; k < count; ++k) {
    const int64_t op = prog[4 * k];
    DG_CHECK(Supported(op), DG_INVALID_ARGUMENT, ctx.op_name(),
             ": unknown opcode ", op, " at instruction ", k);
    for (int j = 0; j < 4; ++j) {
      const int64_t r = prog[4 * k + j];
      DG_CHECK(j == 0 || (r >= -1 && r < kMaxRegs), DG_UNIMPLEMENTED, ctx.op_name(),
               " on cuda: register ", r, " at instruction ", k, " is beyond this kernel's ",
               kMaxRegs, " registers");
      p.ins[k][j] = static_cast<int16_t>(r);
    }
    DG_CHECK(p.ins[k][1] >= first_temp, DG_INVALID_ARGUMENT, ctx.op_name(), ": instruction ", k,
             " writes register ", p.ins[k][1], ", which is not a temporary");
  }
  const int64_t result = ctx.i("result") == -1 && count > 0 ? prog[4 * (count - 1) + 1]
                                                           : ctx.i("result");
  DG_CHECK(result >= 0 && result < kMaxRegs, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": result register ", result, " is out of range");
  p.result = static_cast<int32_t>(result);
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
  const int32_t nc = static_cast<int32_t>(consts.size());
  if (dense) {
    Run<T, true><<<Blocks(n), kThreads, 0, s>>>(p, out, n, nc);
  } else {
    Run<T, false><<<Blocks(n), kThreads, 0, s>>>(p, out, n, nc);
  }
  CheckLaunch(ctx);
}
DG_KERNEL("FusedElementwise", "cuda", FusedElementwise, float, double, half, bf16);

}  // namespace
}  // namespace dragon_cuda
