// FusedElementwise: a straight-line program of element-wise float ops
// (docs/ops.md, "Fused element-wise"; the encoding is in the schema,
// dragon_core/src/ops/fused.cc).
//
// The program is first compiled into a plan: instructions whose operands are
// all single elements (0-d inputs, constants) are evaluated once, dead ones
// are dropped, and each remaining value gets a block-sized buffer, reused
// once the value is dead (the instruction that makes the result writes into
// the output directly). The plan then runs over the output in blocks of
// kBlock elements, each instruction as one run of the float table that the
// unfused ops use (elementwise.h), so an element's result is bit for bit
// the one the unfused ops give. Inputs of the output's element count are
// read in place; other broadcast inputs are gathered per block. Large
// outputs are split into chunks of whole blocks, one per thread.
//
// float16 / bfloat16: the plan runs in float with every value rounded to the
// 16-bit dtype after each instruction, through each op's scalar float form,
// exactly as the unfused 16-bit kernels (half_elementwise.cc, unary_math.cc,
// int_arith.cc: widen, the float scalar functor, one rounding) store each
// op's result; so a fused 16-bit group gives the unfused results bit for bit.
// Inputs are widened per block; a constant register used as an operand is
// rounded to the dtype (the unfused op read a 16-bit scalar tensor), alpha
// stays in float (the unfused op's float attribute).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common.h"
#include "dragon/elementwise.h"
#include "dragon/plugin.hpp"
#include "elementwise.h"
#include "elementwise_ops.h"
#include "widen.h"

namespace cpu_eigen {
namespace {

using elementwise::BroadcastPlan;
using elementwise::FloatKernelsFor;
using elementwise::kCostCheap;
using elementwise::kCostDivide;
using elementwise::kCostHeavy;
using elementwise::kCostTranscendental;
using elementwise::MakeBroadcastPlan;

// Elements per block: one padded block of the table's inexact runs.
constexpr int64_t kBlock = 512;
// Fewest blocks a thread gets when the output is split across threads.
constexpr int64_t kMinChunkBlocks = 8;
// As in the schema: at most this many temporary registers.
constexpr int64_t kMaxTemporaries = 1024;

// Opcodes: the element-wise op table (dragon/elementwise.h), whose rows
// also give each opcode's kind and cost class.
constexpr int64_t kNumOpcodes = DG_EW_NEXT_FREE_OPCODE;

struct Decoded {
  bool binary = false;
  UnaryKind unary = UnaryKind::kNeg;
  BinaryKind bin = BinaryKind::kAdd;
  int64_t cost = 0;
};

// Per opcode: what Decode fills in; valid = false for unused numbers.
struct OpcodeEntry {
  bool valid = false;
  bool alpha = false;  // takes alpha from the constant register b
  bool binary = false;
  UnaryKind unary = UnaryKind::kNeg;
  BinaryKind bin = BinaryKind::kAdd;
  int64_t cost = 0;
};

constexpr bool IsAlpha(const char* attr) {
  return attr[0] == 'a' && attr[1] == 'l' && attr[2] == 'p' &&
         attr[3] == 'h' && attr[4] == 'a' && attr[5] == '\0';
}

struct OpcodeTable {
  OpcodeEntry e[kNumOpcodes];
};

constexpr OpcodeTable MakeOpcodeTable() {
  OpcodeTable t{};
#define CPU_EIGEN_FUSED_U_(Kind, Opcode, OpType, Attr, Kernel, Cost) \
  if ((Opcode) >= 0) {                                               \
    t.e[Opcode].valid = true;                                        \
    t.e[Opcode].alpha = IsAlpha(Attr);                               \
    t.e[Opcode].unary = UnaryKind::k##Kind;                          \
    t.e[Opcode].cost = kCost##Cost;                                  \
  }
#define CPU_EIGEN_FUSED_B_(Kind, Opcode, OpType, Cost) \
  if ((Opcode) >= 0) {                                 \
    t.e[Opcode].valid = true;                          \
    t.e[Opcode].binary = true;                         \
    t.e[Opcode].bin = BinaryKind::k##Kind;             \
    t.e[Opcode].cost = kCost##Cost;                    \
  }
  DG_ELEMENTWISE_UNARY(CPU_EIGEN_FUSED_U_)
  DG_ELEMENTWISE_BINARY(CPU_EIGEN_FUSED_B_)
#undef CPU_EIGEN_FUSED_U_
#undef CPU_EIGEN_FUSED_B_
  return t;
}

constexpr OpcodeTable kOpcodes = MakeOpcodeTable();

bool TakesAlpha(int64_t code) {
  return code >= 0 && code < kNumOpcodes && kOpcodes.e[code].alpha;
}

// Fills *d for opcode `code`, field by field as before the table (through
// a pointer: returning the struct costs a store-forwarding stall per
// instruction).
void Decode(const char* op, int64_t code, Decoded* d) {
  const bool known = code >= 0 && code < kNumOpcodes && kOpcodes.e[code].valid;
  DG_CHECK(known, DG_INVALID_ARGUMENT, op, ": unknown opcode ", code,
           " (see docs/ops.md)");
  const OpcodeEntry& e = kOpcodes.e[code];
  d->binary = e.binary;
  if (e.binary) {
    d->bin = e.bin;
  } else {
    d->unary = e.unary;
  }
  d->cost = e.cost;
}

// Where a value lives while the plan runs.
enum class Loc : uint8_t {
  kNone,    // not defined
  kScalar,  // one element: scalars[index]
  kInput,   // input `index`, vector (read in place or gathered)
  kValue,   // the result of vector step `index`
};

struct Ref {
  Loc loc = Loc::kNone;
  int32_t index = 0;
};

// Where an operand or destination is in a block: a single element, an
// input's block, a scratch slot, or the output.
enum class Buf : uint8_t { kScalar, kInput, kSlot, kOut };

struct Operand {
  Buf buf = Buf::kScalar;
  int32_t index = 0;
};

template <typename T>
struct Step {
  Decoded op;
  UnaryParams<T> params{};
  Ref a, b;        // while compiling
  Operand pa, pb;  // after buffer assignment
  Operand dst;
  bool live = false;
};

// An input read at the output's shape: in place when it has the output's
// element count, else gathered through a broadcast plan into a slot.
struct VectorInput {
  const void* data = nullptr;
  bool flat = true;
  int32_t slot = -1;
  BroadcastPlan<1> plan;
};

template <typename T>
struct Plan {
  std::vector<T> scalars;
  std::vector<Step<T>> steps;
  std::vector<VectorInput> inputs;  // one per op input (unused if single)
  Ref result;
  int32_t slots = 0;
  int64_t cost = 0;  // per element
  // 16-bit storage: inputs are widened into slots, each value is rounded to
  // the dtype, and the result goes through slot `out_slot`.
  bool half = false;
  int32_t out_slot = -1;
};

// Copies input elements [begin, begin + len) at the output's shape (through
// plan p) into out.
template <typename S, typename T>
void Gather(const BroadcastPlan<1>& p, const S* x, int64_t begin, int64_t len,
            T* out) {
  int64_t idx[elementwise::kMaxDims];
  int64_t off = 0, rem = begin;
  for (int d = 0; d < p.ndim; ++d) {
    idx[d] = rem % p.shape[d];
    rem /= p.shape[d];
    off += idx[d] * p.strides[0][d];
  }
  const int64_t row = p.shape[0], s0 = p.strides[0][0];
  int64_t i = 0;
  while (true) {
    const int64_t run = std::min(row - idx[0], len - i);
    if (s0 == 0) {
      std::fill(out + i, out + i + run, static_cast<T>(x[off]));
    } else {
      const S* src = x + off;
      for (int64_t j = 0; j < run; ++j) {
        out[i + j] = static_cast<T>(src[j * s0]);
      }
    }
    i += run;
    if (i >= len) return;
    off -= idx[0] * s0;
    idx[0] = 0;
    for (int d = 1; d < p.ndim; ++d) {
      off += p.strides[0][d];
      if (++idx[d] < p.shape[d]) break;
      off -= p.shape[d] * p.strides[0][d];
      idx[d] = 0;
    }
  }
}

// ------------------------------------------------ 16-bit instructions

// y[i] = f(x[i]) rounded to H (and held in float), the unfused 16-bit
// kernel's arithmetic (widen.h: the float scalar form, one rounding).
template <typename H, typename F>
void HalfUnaryLoop(const F& f, const float* x, float* y, int64_t m) {
  for (int64_t i = 0; i < m; ++i) {
    y[i] = static_cast<float>(static_cast<H>(f(x[i])));
  }
}

template <typename H, typename F>
void HalfBinaryLoop(const F& f, BinaryForm form, const float* a,
                    const float* b, float* y, int64_t m) {
  switch (form) {
    case BinaryForm::kVV:
      for (int64_t i = 0; i < m; ++i) {
        y[i] = static_cast<float>(static_cast<H>(f(a[i], b[i])));
      }
      break;
    case BinaryForm::kSV: {
      const float s = *a;
      for (int64_t i = 0; i < m; ++i) {
        y[i] = static_cast<float>(static_cast<H>(f(s, b[i])));
      }
      break;
    }
    case BinaryForm::kVS: {
      const float s = *b;
      for (int64_t i = 0; i < m; ++i) {
        y[i] = static_cast<float>(static_cast<H>(f(a[i], s)));
      }
      break;
    }
  }
}

// One instruction of a 16-bit program over m elements (operands and result
// in float, every value already representable in H). The functors are those
// the unfused 16-bit kernels construct, with the same parameters: no
// attribute (numeric, float, libm, custom0 rows) or alpha (custom1). The
// custom2 rows (Softplus, Clip) have no opcode.
template <typename H>
void HalfUnary(UnaryKind kind, const UnaryParams<float>& prm, const float* x,
               float* y, int64_t m) {
  switch (kind) {
#define CPU_EIGEN_FUSED_HU_(Kind, Opcode, OpType, Attr, Kernel, Cost) \
  CPU_EIGEN_FUSED_HU_##Kernel(Kind)
#define CPU_EIGEN_FUSED_HU_PLAIN_(Kind)                                \
  case UnaryKind::k##Kind:                                            \
    HalfUnaryLoop<H>(ew_base::Kind##Op<float>{}, x, y, m);            \
    return;
#define CPU_EIGEN_FUSED_HU_numeric(Kind) CPU_EIGEN_FUSED_HU_PLAIN_(Kind)
#define CPU_EIGEN_FUSED_HU_float(Kind) CPU_EIGEN_FUSED_HU_PLAIN_(Kind)
#define CPU_EIGEN_FUSED_HU_libm(Kind) CPU_EIGEN_FUSED_HU_PLAIN_(Kind)
#define CPU_EIGEN_FUSED_HU_custom0(Kind) CPU_EIGEN_FUSED_HU_PLAIN_(Kind)
#define CPU_EIGEN_FUSED_HU_custom1(Kind)                               \
  case UnaryKind::k##Kind:                                            \
    HalfUnaryLoop<H>(ew_base::Kind##Op<float>{prm.p0}, x, y, m);      \
    return;
#define CPU_EIGEN_FUSED_HU_custom2(Kind)
    DG_ELEMENTWISE_UNARY(CPU_EIGEN_FUSED_HU_)
#undef CPU_EIGEN_FUSED_HU_
#undef CPU_EIGEN_FUSED_HU_PLAIN_
#undef CPU_EIGEN_FUSED_HU_numeric
#undef CPU_EIGEN_FUSED_HU_float
#undef CPU_EIGEN_FUSED_HU_libm
#undef CPU_EIGEN_FUSED_HU_custom0
#undef CPU_EIGEN_FUSED_HU_custom1
#undef CPU_EIGEN_FUSED_HU_custom2
    default:
      break;
  }
  DG_CHECK(false, DG_INTERNAL, "FusedElementwise: unary kind ",
           static_cast<int>(kind), " has no 16-bit form");
}

// Binary kinds: the unfused 16-bit Pow is pow in float (never a·a), which
// is PowOp's scalar form; SquareA is never planned for 16-bit programs.
template <typename H>
void HalfBinary(BinaryKind kind, BinaryForm form, const float* a,
                const float* b, float* y, int64_t m) {
  switch (kind) {
#define CPU_EIGEN_FUSED_HB_(Kind, Opcode, OpType, Cost)      \
  case BinaryKind::k##Kind:                                 \
    HalfBinaryLoop<H>(ew_base::Kind##Op{}, form, a, b, y, m); \
    return;
    DG_ELEMENTWISE_BINARY(CPU_EIGEN_FUSED_HB_)
#undef CPU_EIGEN_FUSED_HB_
  }
  DG_CHECK(false, DG_INTERNAL, "FusedElementwise: binary kind ",
           static_cast<int>(kind), " has no 16-bit form");
}

// Per-instruction runs of a plan: the float table for float / double
// (T == H), the 16-bit forms above otherwise (T float).
template <typename T, typename H>
struct StepRunner {
  const FloatKernels<T>* fk;
  void Unary(UnaryKind kind, const UnaryParams<T>& prm, const T* x, T* y,
             int64_t m) const {
    if constexpr (std::is_same_v<T, H>) {
      fk->unary(kind, prm, x, y, m);
    } else {
      HalfUnary<H>(kind, prm, x, y, m);
    }
  }
  void Binary(BinaryKind kind, BinaryForm form, const T* a, const T* b, T* y,
              int64_t m) const {
    if constexpr (std::is_same_v<T, H>) {
      fk->binary(kind, form, a, b, y, m);
    } else {
      HalfBinary<H>(kind, form, a, b, y, m);
    }
  }
};

// Reads the attributes and the inputs into a plan; validates the program
// (the schema's shape function has normally done so with fuller messages).
// T is the type the plan computes in, H the tensors' dtype (T float for
// 16-bit H, else T == H).
template <typename T, typename H>
void Compile(dg::KernelContext& ctx, Plan<T>* plan) {
  const char* op = ctx.op_name();
  constexpr bool kHalf = !std::is_same_v<T, H>;
  const StepRunner<T, H> run{&FloatKernelsFor<T>()};
  const dg::TensorRef y = ctx.output(0);
  const int32_t n_in = ctx.num_inputs();
  const DgAttrValue& prog_attr = ctx.get("program");
  const DgAttrValue& const_attr = ctx.get("constants");
  const int64_t* prog = prog_attr.ints;
  const int64_t prog_len = prog_attr.count;
  const int64_t n_const = const_attr.count;
  const int64_t first_temp = n_in + n_const;
  DG_CHECK(prog_len % 4 == 0, DG_INVALID_ARGUMENT, op, ": program has ",
           prog_len, " entries, not a multiple of 4");

  Plan<T>& p = *plan;
  p.half = kHalf;
  // Registers: inputs, constants, then temporaries up to the highest written.
  int64_t num_regs = first_temp;
  for (int64_t k = 1; k < prog_len; k += 4) {
    DG_CHECK(prog[k] >= first_temp && prog[k] - first_temp < kMaxTemporaries,
             DG_INVALID_ARGUMENT, op, ": instruction ", k / 4,
             " writes register ", prog[k], ", which is not a temporary");
    num_regs = std::max(num_regs, prog[k] + 1);
  }
  std::vector<Ref> regs(static_cast<size_t>(num_regs));
  const int64_t n = y.numel();
  p.inputs.resize(static_cast<size_t>(n_in));
  for (int32_t k = 0; k < n_in; ++k) {
    const dg::TensorRef x = ctx.input(k);
    const H* px = x.data<const H>();
    if (x.numel() == 1) {
      regs[k] = {Loc::kScalar, static_cast<int32_t>(p.scalars.size())};
      p.scalars.push_back(static_cast<T>(px[0]));
      continue;
    }
    regs[k] = {Loc::kInput, k};
    VectorInput& in = p.inputs[k];
    in.data = px;
    in.flat = x.numel() == n;
    if (!in.flat) MakeBroadcastPlan<1>(op, {x}, y, &in.plan);
  }
  for (int64_t c = 0; c < n_const; ++c) {
    regs[n_in + c] = {Loc::kScalar, static_cast<int32_t>(p.scalars.size())};
    // As an operand a constant is a value of the dtype (rounded through
    // float for 16-bit dtypes).
    p.scalars.push_back(static_cast<T>(static_cast<H>(const_attr.floats[c])));
  }

  auto read = [&](int64_t k, int64_t r) {
    DG_CHECK(r >= 0 && r < static_cast<int64_t>(regs.size()) &&
                 regs[r].loc != Loc::kNone,
             DG_INVALID_ARGUMENT, op, ": instruction ", k, " reads register ",
             r, ", which holds no value");
    return regs[r];
  };
  const int64_t count = prog_len / 4;
  p.steps.reserve(static_cast<size_t>(count));
  p.scalars.reserve(p.scalars.size() + static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    const int64_t* ins = prog + 4 * k;
    // Built in place (a copied Step costs more than the rest of the loop).
    Step<T>& s = p.steps.emplace_back();
    Decode(op, ins[0], &s.op);
    s.a = read(k, ins[2]);
    if (s.op.binary) {
      s.b = read(k, ins[3]);
    } else if (TakesAlpha(ins[0])) {
      DG_CHECK(ins[3] >= n_in && ins[3] < first_temp, DG_INVALID_ARGUMENT, op,
               ": instruction ", k, " takes alpha from register ", ins[3],
               ", which is not a constant");
      s.params.p0 = static_cast<T>(const_attr.floats[ins[3] - n_in]);
    }
    const int64_t dst = ins[1];  // checked above
    // pow(a, 2) squares, as the Pow kernel does for a single exponent 2.
    // (Not for 16-bit dtypes, whose unfused Pow is pow in float.)
    if (!kHalf && ins[0] == DG_EW_OP_Pow && s.b.loc == Loc::kScalar &&
        p.scalars[s.b.index] == T(2)) {
      s.op.bin = BinaryKind::kSquareA;
      s.op.cost = kCostCheap;
    }
    const bool scalar = s.a.loc == Loc::kScalar &&
                        (!s.op.binary || s.b.loc == Loc::kScalar);
    if (scalar) {  // evaluated once, here
      T out;
      if (s.op.binary) {
        run.Binary(s.op.bin, BinaryForm::kVV, &p.scalars[s.a.index],
                   &p.scalars[s.b.index], &out, 1);
      } else {
        run.Unary(s.op.unary, s.params, &p.scalars[s.a.index], &out, 1);
      }
      p.steps.pop_back();
      regs[dst] = {Loc::kScalar, static_cast<int32_t>(p.scalars.size())};
      p.scalars.push_back(out);
    } else {
      regs[dst] = {Loc::kValue, static_cast<int32_t>(p.steps.size() - 1)};
    }
  }
  const int64_t result = ctx.i("result");
  if (result == -1) {
    DG_CHECK(prog_len > 0, DG_INVALID_ARGUMENT, op,
             ": an empty program needs an explicit result register");
    p.result = regs[prog[prog_len - 3]];
  } else {
    p.result = read(prog_len / 4, result);
  }
}

// Marks the steps the result needs, assigns buffers (a value's slot is
// free again after its last reader) and sums the per-element cost.
template <typename T>
void Allocate(Plan<T>* plan) {
  Plan<T>& p = *plan;
  const int32_t count = static_cast<int32_t>(p.steps.size());
  std::vector<int32_t> last_use(count, -1);
  auto mark = [&](const Ref& r, int32_t reader) {
    if (r.loc == Loc::kValue) {
      p.steps[r.index].live = true;
      last_use[r.index] = std::max(last_use[r.index], reader);
    }
  };
  mark(p.result, count);
  for (int32_t k = count - 1; k >= 0; --k) {
    Step<T>& s = p.steps[k];
    if (!s.live) continue;
    mark(s.a, k);
    if (s.op.binary) mark(s.b, k);
  }
  // Inputs no live step reads are neither read nor gathered; a gathered
  // input keeps its slot for the whole block.
  std::vector<bool> used(p.inputs.size(), false);
  auto mark_input = [&](const Ref& r) {
    if (r.loc == Loc::kInput) used[r.index] = true;
  };
  mark_input(p.result);
  for (const Step<T>& s : p.steps) {
    if (!s.live) continue;
    mark_input(s.a);
    if (s.op.binary) mark_input(s.b);
  }
  for (size_t k = 0; k < p.inputs.size(); ++k) {
    VectorInput& in = p.inputs[k];
    if (!used[k]) in.data = nullptr;
    if (in.data != nullptr && (!in.flat || p.half)) in.slot = p.slots++;
  }
  if (p.half) p.out_slot = p.slots++;
  // slot_of[k]: the slot of step k's value; -1 = the output (or none yet),
  // -2 = freed.
  std::vector<int32_t> slot_of(count, -1), free_slots;
  auto operand = [&](const Ref& r) {
    switch (r.loc) {
      case Loc::kScalar: return Operand{Buf::kScalar, r.index};
      case Loc::kInput: return Operand{Buf::kInput, r.index};
      default: break;
    }
    if (slot_of[r.index] >= 0) return Operand{Buf::kSlot, slot_of[r.index]};
    return Operand{Buf::kOut, 0};  // the result, read after its step
  };
  for (int32_t k = 0; k < count; ++k) {
    Step<T>& s = p.steps[k];
    if (!s.live) continue;
    s.pa = operand(s.a);
    if (s.op.binary) s.pb = operand(s.b);
    p.cost += s.op.cost;
    // Operands read for the last time here free their slots first: each
    // run reads an element before it writes it, so dst may be an operand.
    for (const Ref* r : {&s.a, &s.b}) {
      if (r == &s.b && !s.op.binary) break;
      if (r->loc == Loc::kValue && last_use[r->index] == k &&
          slot_of[r->index] >= 0) {
        free_slots.push_back(slot_of[r->index]);
        slot_of[r->index] = -2;
      }
    }
    if (p.result.loc == Loc::kValue && p.result.index == k) {
      s.dst = Operand{Buf::kOut, 0};
    } else {
      int32_t slot;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        slot = p.slots++;
      }
      slot_of[k] = slot;
      s.dst = Operand{Buf::kSlot, slot};
    }
  }
}

// Runs the plan over output elements [begin, end), block by block, with
// `scratch` holding p.slots blocks. For 16-bit H (T float) every input is
// widened into its slot and the result, computed in slot p.out_slot, is
// stored to y (exactly: each value is already representable in H).
template <typename T, typename H>
void RunBlocks(const Plan<T>& p, const StepRunner<T, H>& run, H* y,
               int64_t begin, int64_t end, T* scratch) {
  constexpr bool kHalf = !std::is_same_v<T, H>;
  const T* in_ptr[64];
  std::vector<const T*> in_heap;
  const T** inputs = in_ptr;
  if (p.inputs.size() > 64) {
    in_heap.resize(p.inputs.size());
    inputs = in_heap.data();
  }
  for (int64_t i0 = begin; i0 < end; i0 += kBlock) {
    const int64_t m = std::min(kBlock, end - i0);
    T* out;
    if constexpr (kHalf) {
      out = scratch + p.out_slot * kBlock;
    } else {
      out = y + i0;
    }
    for (size_t k = 0; k < p.inputs.size(); ++k) {
      const VectorInput& in = p.inputs[k];
      if (in.data == nullptr) continue;
      const H* x = static_cast<const H*>(in.data);
      if (!kHalf && in.flat) {
        inputs[k] = reinterpret_cast<const T*>(x) + i0;  // T == H here
      } else if (in.flat) {
        T* buf = scratch + in.slot * kBlock;
        for (int64_t j = 0; j < m; ++j) buf[j] = static_cast<T>(x[i0 + j]);
        inputs[k] = buf;
      } else {
        T* buf = scratch + in.slot * kBlock;
        Gather(in.plan, x, i0, m, buf);
        inputs[k] = buf;
      }
    }
    auto ptr = [&](const Operand& o) -> T* {
      switch (o.buf) {
        case Buf::kScalar:
          return const_cast<T*>(&p.scalars[o.index]);
        case Buf::kInput:
          return const_cast<T*>(inputs[o.index]);
        case Buf::kSlot:
          return scratch + o.index * kBlock;
        case Buf::kOut:
          break;
      }
      return out;
    };
    for (const Step<T>& s : p.steps) {
      if (!s.live) continue;
      T* dst = ptr(s.dst);
      if (!s.op.binary) {
        run.Unary(s.op.unary, s.params, ptr(s.pa), dst, m);
      } else {
        const bool sa = s.pa.buf == Buf::kScalar;
        const bool sb = s.pb.buf == Buf::kScalar;
        const BinaryForm form = sa   ? BinaryForm::kSV
                                : sb ? BinaryForm::kVS
                                     : BinaryForm::kVV;
        run.Binary(s.op.bin, form, ptr(s.pa), ptr(s.pb), dst, m);
      }
    }
    switch (p.result.loc) {
      case Loc::kScalar:
        std::fill(out, out + m, p.scalars[p.result.index]);
        break;
      case Loc::kInput:
        std::copy(inputs[p.result.index], inputs[p.result.index] + m, out);
        break;
      default:  // written by its step
        break;
    }
    if constexpr (kHalf) {
      for (int64_t j = 0; j < m; ++j) y[i0 + j] = static_cast<H>(out[j]);
    }
  }
}

// H is the tensors' dtype; the plan computes in H, or in float for 16-bit H.
template <typename H>
void FusedElementwise(dg::KernelContext& ctx) {
  using T = std::conditional_t<widen::kIsHalf<H>, float, H>;
  const dg::TensorRef y = ctx.output(0);
  Plan<T> plan;
  Compile<T, H>(ctx, &plan);  // validates even when y is empty
  const int64_t n = y.numel();
  if (n == 0) return;
  Allocate<T>(&plan);
  const StepRunner<T, H> run{&FloatKernelsFor<T>()};
  H* py = y.data<H>();

  // Chunks of whole blocks, one per thread, when the work is large (as
  // ParallelFor decides) and each chunk has kMinChunkBlocks blocks: a long
  // program on a small tensor is a few microseconds per thread, about what
  // waking the team costs on an idle machine and far less than on a busy one.
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int64_t cost = std::max<int64_t>(plan.cost, 1);
  int64_t chunks = 1;
  const int threads = omp_get_max_threads();
  if (threads > 1 && n * cost >= kParallelGrain) {
    chunks = std::min<int64_t>(threads, n * cost / (kParallelGrain / 2));
    chunks = std::max<int64_t>(1, std::min(chunks, blocks / kMinChunkBlocks));
  }
  const int64_t per_chunk = static_cast<int64_t>(plan.slots) * kBlock;
  T* scratch = ctx.workspace<T>(static_cast<size_t>(chunks * per_chunk));
  auto run_chunk = [&](int64_t c) {
    const int64_t b0 = blocks * c / chunks, b1 = blocks * (c + 1) / chunks;
    RunBlocks<T, H>(plan, run, py, b0 * kBlock, std::min(n, b1 * kBlock),
                    scratch + c * per_chunk);
  };
  if (chunks == 1) {
    run_chunk(0);
  } else {
    // Cost kParallelGrain per index: ParallelFor gives each chunk a thread.
    ParallelFor(
        chunks,
        [&](int64_t c0, int64_t c1) {
          for (int64_t c = c0; c < c1; ++c) run_chunk(c);
        },
        kParallelGrain);
  }
}

DG_KERNEL("FusedElementwise", "cpu", FusedElementwise, float, double,
          CPU_EIGEN_HALF_TYPES);

}  // namespace
}  // namespace cpu_eigen
