/* The element-wise op table: one line per element-wise float op kind, shared
 * by the core (the FusedElementwise schema, dragon_core/src/ops/fused.cc, and
 * through dragon_core._C.elementwise_table() the `fusion` graph pass), by
 * cpu_eigen (its kind enums, its per-op kernels and its fused kernel) and by
 * the cuda plugin (its fused kernel's opcodes). A new element-wise op is one
 * line here, its functor in each plugin, its gradient and its test
 * (docs/adding-an-op.md).
 *
 * X-macro lists: a user defines X and expands the list.
 *
 *   DG_ELEMENTWISE_UNARY(X)   X(Kind, Opcode, OpType, Attr, Kernel, Cost)
 *   DG_ELEMENTWISE_BINARY(X)  X(Kind, Opcode, OpType, Cost)
 *
 * Kind    the kind's name: enum value k<Kind> and functor <Kind>Op in
 *         cpu_eigen (elementwise_ops.h), <Kind>F in cuda (ops.cuh).
 * Opcode  its FusedElementwise opcode, or -1 when the kind is not fusable.
 *         Opcodes are stable (they are stored in saved graphs): never
 *         renumber one; a new op takes the next free number (see
 *         DG_EW_NEXT_FREE_OPCODE). Unary opcodes read register a; binary
 *         ones registers a and b.
 * OpType  the op whose meaning the kind has ("" for a kind that only a
 *         kernel uses, as SquareA for pow(a, 2)).
 * Attr    what the op's attributes must be for this kind (the fusion pass
 *         reads it): "" the op has none; "alpha" its float attribute alpha
 *         goes to the constant register that the instruction's b names;
 *         "name=value" its string attribute `name` (or the schema default
 *         when unset) equals value.
 * Kernel  how cpu_eigen registers the unfused kernel: numeric (the float
 *         table for float32/float64, the scalar functor for the other
 *         numeric dtypes; unary.cc), float (the float table, float32 and
 *         float64; unary.cc), both also with float16/bfloat16 kernels
 *         computing in float (half_elementwise.cc); libm (the scalar
 *         functor for every float dtype, 16-bit ones computing in float;
 *         unary_math.cc); or
 *         custom0 / custom1 / custom2 (a hand-written kernel that reads the
 *         op's attributes; its functor takes 0, 1 or 2 parameters).
 * Cost    per-element cost class for threading decisions: Cheap, Divide,
 *         Transcendental or Heavy.
 *
 * Plain C preprocessor only: usable from C, C++ and CUDA. */
#ifndef DRAGON_ELEMENTWISE_H_
#define DRAGON_ELEMENTWISE_H_

/* clang-format off */
#define DG_ELEMENTWISE_UNARY(X)                                              \
  X(Neg,        0,  "Neg",        "",                 numeric, Cheap)          \
  X(Abs,        1,  "Abs",        "",                 numeric, Cheap)          \
  X(Sign,       2,  "Sign",       "",                 numeric, Cheap)          \
  X(Square,     3,  "Square",     "",                 numeric, Cheap)          \
  X(Reciprocal, 4,  "Reciprocal", "",                 float,   Divide)         \
  X(Sqrt,       5,  "Sqrt",       "",                 float,   Divide)         \
  X(Rsqrt,      6,  "Rsqrt",      "",                 float,   Divide)         \
  X(Exp,        7,  "Exp",        "",                 float,   Transcendental) \
  X(Log,        8,  "Log",        "",                 float,   Transcendental) \
  X(Log1p,      9,  "Log1p",      "",                 float,   Transcendental) \
  X(Sin,        10, "Sin",        "",                 float,   Transcendental) \
  X(Cos,        11, "Cos",        "",                 float,   Transcendental) \
  X(Tanh,       12, "Tanh",       "",                 float,   Transcendental) \
  X(Sigmoid,    13, "Sigmoid",    "",                 float,   Transcendental) \
  X(Relu,       14, "Relu",       "",                 numeric, Cheap)          \
  X(Floor,      15, "Floor",      "",                 float,   Cheap)          \
  X(Ceil,       16, "Ceil",       "",                 float,   Cheap)          \
  X(Round,      17, "Round",      "",                 float,   Cheap)          \
  X(GeluErf,    18, "Gelu",       "approximate=none", custom0, Heavy)          \
  X(GeluTanh,   19, "Gelu",       "approximate=tanh", custom0, Transcendental) \
  X(LeakyRelu,  20, "LeakyRelu",  "alpha",            custom1, Cheap)          \
  X(Elu,        21, "Elu",        "alpha",            custom1, Transcendental) \
  X(Tan,        22, "Tan",        "",                 libm,    Transcendental) \
  X(Asin,       23, "Asin",       "",                 libm,    Transcendental) \
  X(Acos,       24, "Acos",       "",                 libm,    Transcendental) \
  X(Atan,       25, "Atan",       "",                 libm,    Transcendental) \
  X(Sinh,       26, "Sinh",       "",                 libm,    Transcendental) \
  X(Cosh,       27, "Cosh",       "",                 libm,    Transcendental) \
  X(Asinh,      28, "Asinh",      "",                 libm,    Transcendental) \
  X(Acosh,      29, "Acosh",      "",                 libm,    Transcendental) \
  X(Atanh,      30, "Atanh",      "",                 libm,    Transcendental) \
  X(Erf,        31, "Erf",        "",                 libm,    Transcendental) \
  X(Expm1,      42, "Expm1",      "",                 libm,    Transcendental) \
  X(Softplus,   -1, "Softplus",   "",                 custom2, Heavy)          \
  X(Clip,       -1, "Clip",       "",                 custom2, Cheap)

#define DG_ELEMENTWISE_BINARY(X)                        \
  X(Add,         32, "Add",         Cheap)              \
  X(Sub,         33, "Sub",         Cheap)              \
  X(Mul,         34, "Mul",         Cheap)              \
  X(Div,         35, "Div",         Divide)             \
  X(Pow,         36, "Pow",         Heavy)              \
  X(Maximum,     37, "Maximum",     Cheap)              \
  X(Minimum,     38, "Minimum",     Cheap)              \
  X(FloorDivide, 39, "FloorDivide", Divide)             \
  X(Mod,         40, "Mod",         Divide)             \
  X(Fmod,        41, "Fmod",        Divide)             \
  X(SquareA,     -1, "",            Cheap)
/* clang-format on */

/* The opcode a new kind takes; then raise this by one. */
#define DG_EW_NEXT_FREE_OPCODE 43

/* DG_EW_OP_<Kind>: a kind's opcode (-1 when not fusable), as constants. */
#define DG_EW_OPCODE_ENUM_U_(Kind, Opcode, OpType, Attr, Kernel, Cost) \
  DG_EW_OP_##Kind = (Opcode),
#define DG_EW_OPCODE_ENUM_B_(Kind, Opcode, OpType, Cost) \
  DG_EW_OP_##Kind = (Opcode),
enum DgElementwiseOpcode {
  DG_ELEMENTWISE_UNARY(DG_EW_OPCODE_ENUM_U_)
  DG_ELEMENTWISE_BINARY(DG_EW_OPCODE_ENUM_B_)
  DG_EW_OPCODE_END_ = DG_EW_NEXT_FREE_OPCODE
};
#undef DG_EW_OPCODE_ENUM_U_
#undef DG_EW_OPCODE_ENUM_B_

#endif /* DRAGON_ELEMENTWISE_H_ */
