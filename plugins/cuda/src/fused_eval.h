// One element of a FusedElementwise program (the schema's encoding,
// dragon_core/src/ops/fused.cc): the per-instruction evaluation and the
// register machine of the cuda fused kernel (fused.cu), in plain C++ apart
// from DGC_HD, so that plugins/cuda/tests/test_cuda_fused_host.py compiles
// this very code with the host compiler and checks it against cpu_eigen's
// FusedElementwise where there is no GPU. Every opcode runs the functor of
// the unfused cuda kernel (ops.cuh: unary.cu, binary.cu).
#ifndef DRAGON_CUDA_FUSED_EVAL_H_
#define DRAGON_CUDA_FUSED_EVAL_H_

#include <cstdint>
#include <limits>

#include "dragon/elementwise.h"
#include "ops.cuh"

namespace dragon_cuda {
namespace fused {

constexpr int kMaxInputs = 8, kMaxConsts = 16, kMaxInstr = 128, kMaxRegs = 64;

// Per opcode of the element-wise op table (dragon/elementwise.h): 0 not an
// opcode, 1 unary, 2 unary taking alpha from the constant register b,
// 3 binary. Built from the table, so a new fusable row is known here at once
// (and fails the host test until Eval below has its case).
constexpr bool AttrIsAlpha(const char* a) {
  return a[0] == 'a' && a[1] == 'l' && a[2] == 'p' && a[3] == 'h' && a[4] == 'a' && a[5] == '\0';
}
struct OpcodeKinds {
  int8_t k[DG_EW_NEXT_FREE_OPCODE];
};
constexpr OpcodeKinds MakeOpcodeKinds() {
  OpcodeKinds t{};
#define DGC_FUSED_U_(Kind, Opcode, OpType, Attr, Kernel, Cost) \
  if ((Opcode) >= 0) t.k[Opcode] = AttrIsAlpha(Attr) ? 2 : 1;
#define DGC_FUSED_B_(Kind, Opcode, OpType, Cost) \
  if ((Opcode) >= 0) t.k[Opcode] = 3;
  DG_ELEMENTWISE_UNARY(DGC_FUSED_U_)
  DG_ELEMENTWISE_BINARY(DGC_FUSED_B_)
#undef DGC_FUSED_U_
#undef DGC_FUSED_B_
  return t;
}
constexpr OpcodeKinds kOpcodeKinds = MakeOpcodeKinds();

// 0 (not an opcode), 1, 2 or 3, as above.
constexpr int OpcodeKind(int64_t op) {
  return op >= 0 && op < DG_EW_NEXT_FREE_OPCODE ? kOpcodeKinds.k[op] : 0;
}

// Whether unary opcode `op` reads alpha from the constant register b (a
// switch, not the table above, so that device code can call it; the
// static_assert below holds it to the table).
DGC_HD constexpr bool TakesAlpha(int op) {
  return op == DG_EW_OP_LeakyRelu || op == DG_EW_OP_Elu;
}
constexpr bool AlphaMatchesTable() {
  for (int op = 0; op < DG_EW_NEXT_FREE_OPCODE; ++op)
    if (TakesAlpha(op) != (OpcodeKind(op) == 2)) return false;
  return true;
}
static_assert(AlphaMatchesTable(), "TakesAlpha must list the table's alpha opcodes");

// dst = op(a) or op(a, b); `b` is alpha for LeakyRelu/Elu and unused by the
// other unary opcodes. A is the arithmetic type (float for the 16-bit
// floats). An opcode without a case (none: the host test runs every opcode
// of the table) gives NaN.
template <typename A>
DGC_HD A Eval(int op, A a, A b) {
  using namespace fn;  // NOLINT: the op functors
  switch (op) {
    case DG_EW_OP_Neg: return NegF{}(a);
    case DG_EW_OP_Abs: return AbsF{}(a);
    case DG_EW_OP_Sign: return SignF{}(a);
    case DG_EW_OP_Square: return SquareF{}(a);
    case DG_EW_OP_Reciprocal: return ReciprocalF{}(a);
    case DG_EW_OP_Sqrt: return SqrtF{}(a);
    case DG_EW_OP_Rsqrt: return RsqrtF{}(a);
    case DG_EW_OP_Exp: return ExpF{}(a);
    case DG_EW_OP_Log: return LogF{}(a);
    case DG_EW_OP_Log1p: return Log1pF{}(a);
    case DG_EW_OP_Sin: return SinF{}(a);
    case DG_EW_OP_Cos: return CosF{}(a);
    case DG_EW_OP_Tanh: return TanhF{}(a);
    case DG_EW_OP_Sigmoid: return SigmoidF{}(a);
    case DG_EW_OP_Relu: return ReluF{}(a);
    case DG_EW_OP_Floor: return FloorF{}(a);
    case DG_EW_OP_Ceil: return CeilF{}(a);
    case DG_EW_OP_Round: return RoundF{}(a);
    case DG_EW_OP_GeluErf: return GeluErfF{}(a);
    case DG_EW_OP_GeluTanh: return GeluTanhF{}(a);
    case DG_EW_OP_LeakyRelu: return LeakyReluF<A>{b}(a);
    case DG_EW_OP_Elu: return EluF<A>{b}(a);
    case DG_EW_OP_Tan: return TanF{}(a);
    case DG_EW_OP_Asin: return AsinF{}(a);
    case DG_EW_OP_Acos: return AcosF{}(a);
    case DG_EW_OP_Atan: return AtanF{}(a);
    case DG_EW_OP_Sinh: return SinhF{}(a);
    case DG_EW_OP_Cosh: return CoshF{}(a);
    case DG_EW_OP_Asinh: return AsinhF{}(a);
    case DG_EW_OP_Acosh: return AcoshF{}(a);
    case DG_EW_OP_Atanh: return AtanhF{}(a);
    case DG_EW_OP_Erf: return ErfF{}(a);
    case DG_EW_OP_Expm1: return Expm1F{}(a);
    case DG_EW_OP_Add: return AddF{}(a, b);
    case DG_EW_OP_Sub: return SubF{}(a, b);
    case DG_EW_OP_Mul: return MulF{}(a, b);
    case DG_EW_OP_Div: return DivF{}(a, b);
    case DG_EW_OP_Pow: return PowF{}(a, b);
    case DG_EW_OP_Maximum: return MaximumF{}(a, b);
    case DG_EW_OP_Minimum: return MinimumF{}(a, b);
    case DG_EW_OP_FloorDivide: return FloorDivideF{}(a, b);
    case DG_EW_OP_Mod: return ModF{}(a, b);
    case DG_EW_OP_Fmod: return FmodF{}(a, b);
    default: return std::numeric_limits<A>::quiet_NaN();
  }
}

// A program as the kernel holds it (checked on the host, fused.cu): the
// instructions (opcode, dst, a, b), and per constant register its value
// rounded to the dtype (an operand: the unfused op read a scalar tensor of
// the dtype) and unrounded (alpha: the unfused op's float attribute).
template <typename A>
struct Code {
  int32_t num_inputs = 0, num_consts = 0, num_instr = 0, result = 0;
  int16_t ins[kMaxInstr][4] = {};
  A consts[kMaxConsts] = {};
  A alphas[kMaxConsts] = {};
};

// Runs the program over one element whose inputs are reg[0..num_inputs);
// `round` is the storage rounding of every instruction's result (the dtype's
// rounding for float16/bfloat16, as the unfused kernels store each op's
// result; the identity for float and double). Returns the result register.
template <typename A, typename Round>
DGC_HD A RunElement(const Code<A>& c, A* reg, const Round& round) {
  for (int k = 0; k < c.num_consts; ++k) reg[c.num_inputs + k] = c.consts[k];
  for (int k = 0; k < c.num_instr; ++k) {
    const int op = c.ins[k][0], dst = c.ins[k][1], a = c.ins[k][2], b = c.ins[k][3];
    A second = A(0);
    if (b >= 0) {
      // alpha (unrounded) for LeakyRelu/Elu; else the operand register b
      // (a constant there holds the value rounded to the dtype).
      const int cb = b - c.num_inputs;
      second = TakesAlpha(op) && cb >= 0 && cb < c.num_consts ? c.alphas[cb] : reg[b];
    }
    reg[dst] = round(Eval<A>(op, reg[a], second));
  }
  return reg[c.result];
}

}  // namespace fused
}  // namespace dragon_cuda

#endif  // DRAGON_CUDA_FUSED_EVAL_H_
