// FusedElementwise: a straight-line program of element-wise float ops over
// broadcast inputs, written by the `fusion` graph pass
// (dragon_core/_graph/passes/fusion.py). The encoding is documented in the
// schema doc below and in docs/ops.md; kernels (plugins/cpu_eigen/src/
// fused.cc) evaluate it block by block.
#include <cstdint>
#include <string>
#include <vector>

#include "dragon/elementwise.h"
#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

// Opcodes: the element-wise op table (dragon/elementwise.h), shared with
// the kernels and the fusion pass. Unary ops read register a and take
// b = -1, except those whose table Attr is "alpha" (LeakyRelu, Elu), whose b
// names the constant register holding alpha.

// A program may use at most this many temporary registers; the pass reuses
// registers, so its programs need about as many as the group has branches.
constexpr int64_t kMaxTemporaries = 1024;

constexpr bool StrEq(const char* a, const char* b) {
  return *a == *b && (*a == '\0' || StrEq(a + 1, b + 1));
}

// Per opcode: 0 unused, 1 unary, 2 unary taking alpha, 3 binary (a table,
// so that checking an instruction is one lookup).
struct OpcodeClasses {
  char c[DG_EW_NEXT_FREE_OPCODE];
};
constexpr OpcodeClasses MakeOpcodeClasses() {
  OpcodeClasses t{};
#define DG_FUSED_U_(Kind, Opcode, OpType, Attr, Kernel, Cost) \
  if ((Opcode) >= 0) t.c[Opcode] = StrEq(Attr, "alpha") ? 2 : 1;
#define DG_FUSED_B_(Kind, Opcode, OpType, Cost) \
  if ((Opcode) >= 0) t.c[Opcode] = 3;
  DG_ELEMENTWISE_UNARY(DG_FUSED_U_)
  DG_ELEMENTWISE_BINARY(DG_FUSED_B_)
#undef DG_FUSED_U_
#undef DG_FUSED_B_
  return t;
}
constexpr OpcodeClasses kOpcodeClasses = MakeOpcodeClasses();

constexpr int OpcodeClass(int64_t op) {
  return op >= 0 && op < DG_EW_NEXT_FREE_OPCODE ? kOpcodeClasses.c[op] : 0;
}
constexpr bool IsUnary(int64_t op) {
  return OpcodeClass(op) == 1 || OpcodeClass(op) == 2;
}
constexpr bool IsBinary(int64_t op) { return OpcodeClass(op) == 3; }
// Whether unary opcode `op` takes alpha from the constant register b.
constexpr bool TakesAlpha(int64_t op) { return OpcodeClass(op) == 2; }

// No opcode is used twice, and none is at or past DG_EW_NEXT_FREE_OPCODE.
constexpr bool OpcodesUnique() {
  int64_t codes[] = {
#define DG_FUSED_CU_(Kind, Opcode, OpType, Attr, Kernel, Cost) (Opcode),
#define DG_FUSED_CB_(Kind, Opcode, OpType, Cost) (Opcode),
      DG_ELEMENTWISE_UNARY(DG_FUSED_CU_) DG_ELEMENTWISE_BINARY(DG_FUSED_CB_)
#undef DG_FUSED_CU_
#undef DG_FUSED_CB_
  };
  const int64_t n = static_cast<int64_t>(sizeof(codes) / sizeof(codes[0]));
  for (int64_t i = 0; i < n; ++i) {
    if (codes[i] >= DG_EW_NEXT_FREE_OPCODE) return false;
    for (int64_t j = i + 1; j < n; ++j) {
      if (codes[i] >= 0 && codes[i] == codes[j]) return false;
    }
  }
  return true;
}
static_assert(OpcodesUnique(),
              "dragon/elementwise.h: an opcode is used twice or is not below "
              "DG_EW_NEXT_FREE_OPCODE");

// "0 Neg, 1 Abs, ..." for the schema doc and error messages.
std::string OpcodeList(bool binary) {
  std::string out;
  auto add = [&](int64_t code, const char* kind, const char* attr) {
    if (code < 0) return;
    if (!out.empty()) out += ", ";
    out += dg::Str(code, " ", kind);
    if (attr[0] != '\0') out += dg::Str(" (", attr, ")");
  };
  if (!binary) {
#define DG_FUSED_LU_(Kind, Opcode, OpType, Attr, Kernel, Cost) \
  add(Opcode, #Kind, Attr);
    DG_ELEMENTWISE_UNARY(DG_FUSED_LU_)
#undef DG_FUSED_LU_
  } else {
#define DG_FUSED_LB_(Kind, Opcode, OpType, Cost) add(Opcode, #Kind, "");
    DG_ELEMENTWISE_BINARY(DG_FUSED_LB_)
#undef DG_FUSED_LB_
  }
  return out;
}

// Checks the program against the number of inputs and constants; throws
// DG_INVALID_ARGUMENT naming the instruction at fault.
void CheckProgram(const dg::InferContext& ctx, int64_t num_inputs) {
  const std::vector<int64_t> prog = ctx.ints("program");
  const int64_t num_consts = static_cast<int64_t>(ctx.floats("constants").size());
  const int64_t first_temp = num_inputs + num_consts;
  DG_CHECK(prog.size() % 4 == 0, DG_INVALID_ARGUMENT, "program has ",
           prog.size(), " entries, not a multiple of 4 (each instruction is "
           "opcode, dst, a, b)");
  const int64_t count = static_cast<int64_t>(prog.size()) / 4;
  // defined[r - first_temp]: temporary r was written by an earlier instruction.
  std::vector<bool> defined;
  auto where = [&](int64_t k) {
    return dg::Str("instruction ", k, " (", prog[4 * k], ", ", prog[4 * k + 1],
                   ", ", prog[4 * k + 2], ", ", prog[4 * k + 3], ")");
  };
  auto readable = [&](int64_t r) {
    if (r >= 0 && r < first_temp) return true;
    const int64_t t = r - first_temp;
    return t >= 0 && t < static_cast<int64_t>(defined.size()) && defined[t];
  };
  const std::string regs = dg::Str(
      "registers 0..", num_inputs - 1, " are the inputs, ",
      num_consts ? dg::Str(num_inputs, "..", first_temp - 1,
                           " the constants, ")
                 : std::string(),
      "from ", first_temp, " on temporaries");
  for (int64_t k = 0; k < count; ++k) {
    const int64_t op = prog[4 * k], dst = prog[4 * k + 1];
    const int64_t a = prog[4 * k + 2], b = prog[4 * k + 3];
    DG_CHECK(IsUnary(op) || IsBinary(op), DG_INVALID_ARGUMENT, where(k),
             ": unknown opcode ", op, " (unary: ", OpcodeList(false),
             "; binary: ", OpcodeList(true), "; see docs/ops.md)");
    DG_CHECK(readable(a), DG_INVALID_ARGUMENT, where(k), ": operand a = ", a,
             " is not an input, a constant or a temporary written before (",
             regs, ")");
    if (IsBinary(op)) {
      DG_CHECK(readable(b), DG_INVALID_ARGUMENT, where(k), ": operand b = ",
               b, " is not an input, a constant or a temporary written "
               "before (", regs, ")");
    } else if (TakesAlpha(op)) {
      DG_CHECK(b >= num_inputs && b < first_temp, DG_INVALID_ARGUMENT,
               where(k), ": b = ", b, " must be the constant register that "
               "holds alpha (", regs, ")");
    } else {
      DG_CHECK(b == -1, DG_INVALID_ARGUMENT, where(k), ": unary opcode ", op,
               " takes b = -1, got ", b);
    }
    DG_CHECK(dst >= first_temp && dst - first_temp < kMaxTemporaries,
             DG_INVALID_ARGUMENT, where(k), ": destination ", dst,
             " is not a temporary register (", regs, "; at most ",
             kMaxTemporaries, " temporaries)");
    const size_t t = static_cast<size_t>(dst - first_temp);
    if (defined.size() <= t) defined.resize(t + 1, false);
    defined[t] = true;
  }
  const int64_t result = ctx.i("result");
  if (result == -1) {
    DG_CHECK(count > 0, DG_INVALID_ARGUMENT,
             "an empty program needs an explicit result register");
  } else {
    DG_CHECK(readable(result), DG_INVALID_ARGUMENT, "result register ",
             result, " is not an input, a constant or a temporary the "
             "program writes (", regs, ")");
  }
}

void FusedElementwiseShape(dg::InferContext& ctx) {
  const int32_t n = ctx.num_inputs();
  DG_CHECK(n >= 1, DG_INVALID_ARGUMENT, "needs at least one input tensor");
  CheckProgram(ctx, n);
  std::vector<Shape> shapes;
  for (int32_t i = 0; i < n; ++i) shapes.push_back(ctx.input(i).shape());
  ctx.set_output(0, ctx.input(0).dtype(), BroadcastShapes(shapes));
}

const char* FusedDoc() {
  static const std::string doc = dg::Str(
      "A straight-line program of element-wise float ops, evaluated in "
      "one pass over the output (written by the `fusion` graph pass). "
      "Registers 0..n-1 hold the n inputs, n..n+c-1 the c constants, "
      "and later registers are temporaries. `program` is a flat list of "
      "instructions (opcode, dst, a, b): dst = op(a) or dst = op(a, b). "
      "The opcodes are those of the element-wise op table "
      "(dragon/elementwise.h). Unary (b = -1; those marked alpha take alpha "
      "from the constant register b): ", OpcodeList(false), ". Binary: ",
      OpcodeList(true), ". dst is a "
      "temporary (at most 1024); operands are inputs, constants or "
      "temporaries written earlier; registers may be overwritten. Each "
      "op has the meaning (and, on a kernel that runs the same code, the "
      "exact results) of the op of that name; every value is computed "
      "at the broadcast shape of all inputs, which is y's shape.");
  return doc.c_str();
}

// 16-bit programs compute each instruction in float32 and round it to the
// dtype, as the unfused kernels store it (kernels say which dtypes they have).
constexpr DgDTypeMask kFusedDTypes = dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64) |
                                     dg::Bit(DG_FLOAT16) | dg::Bit(DG_BFLOAT16);

}  // namespace

DG_OP(FusedElementwise)
    .Doc(FusedDoc())
    .Input("inputs", kFusedDTypes,
           DG_ARG_VARIADIC,
           "One or more tensors of one float dtype that broadcast together.")
    .Output("y", kFusedDTypes, 0,
            "The result register, at the broadcast shape of the inputs.")
    .RequiredAttr("program", DG_ATTR_INTS,
                  "Instructions, 4 ints each: opcode, dst, a, b.")
    .Attr("constants", std::vector<double>{},
          "Values of the constant registers n..n+c-1, cast to the dtype.")
    .Attr("result", int64_t{-1},
          "The register y is read from; -1 = the last instruction's dst.")
    .Flags(DG_OP_SAME_DTYPE | DG_OP_NO_GRAD)
    .Shape(FusedElementwiseShape);

}  // namespace ops
}  // namespace dragon
