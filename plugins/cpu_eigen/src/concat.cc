// Concat, Stack and Split. Around the axis, each tensor is a sequence of
// `outer` rows; the joined tensor's row is the concatenation of the parts'
// rows. All three are therefore one row-interleaving memcpy, in either
// direction.
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common.h"
#include "strided.h"

namespace cpu_eigen {
namespace {

struct Part {
  char* data;
  int64_t row_bytes;
};

// Moves `outer` rows between the joined tensor and its parts: joined row o
// is parts[0] row o, parts[1] row o, ... When `join` is false, the copy runs
// from the joined tensor into the parts.
void MoveRows(int64_t outer, char* joined, const std::vector<Part>& parts,
              bool join) {
  int64_t total = 0;
  for (const Part& p : parts) total += p.row_bytes;
  if (outer == 0 || total == 0) return;
  if (outer < 4 * static_cast<int64_t>(omp_get_max_threads())) {
    // Few long rows (e.g. axis 0): parallelise inside each copy.
    for (int64_t o = 0; o < outer; ++o) {
      int64_t off = o * total;
      for (const Part& p : parts) {
        char* part = p.data + o * p.row_bytes;
        const size_t n = static_cast<size_t>(p.row_bytes);
        if (join) {
          ParallelMemcpy(joined + off, part, n);
        } else {
          ParallelMemcpy(part, joined + off, n);
        }
        off += p.row_bytes;
      }
    }
    return;
  }
  ParallelFor(
      outer,
      [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          int64_t off = o * total;
          for (const Part& p : parts) {
            if (p.row_bytes == 0) continue;
            char* part = p.data + o * p.row_bytes;
            const size_t n = static_cast<size_t>(p.row_bytes);
            if (join) {
              std::memcpy(joined + off, part, n);
            } else {
              std::memcpy(part, joined + off, n);
            }
            off += p.row_bytes;
          }
        }
      },
      total / 8 + 1);
}

int64_t Prod(const dg::TensorRef& t, int32_t begin, int32_t end) {
  int64_t n = 1;
  for (int32_t k = begin; k < end; ++k) n *= t.dim(k);
  return n;
}

// Concat (join) or Split: `joined` is the output or the input, the parts
// are the other side, part(i) for i < count; they match `joined` but along
// the axis, where their sizes add up to its size.
template <typename PartFn>
void JoinAlongAxis(const dg::KernelContext& ctx, const dg::TensorRef& joined,
                   int32_t count, PartFn&& part, bool join) {
  const char* part_kind = join ? "input" : "output";
  const char* joined_kind = join ? "output" : "input";
  const int32_t nd = joined.ndim();
  const int64_t axis = NormAxis(ctx.i("axis"), nd);
  DG_CHECK(axis >= 0 && axis < nd, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": axis ", ctx.i("axis"), " out of range for rank ", nd);
  const int32_t a = static_cast<int32_t>(axis);
  const int64_t outer = Prod(joined, 0, a), inner = Prod(joined, a + 1, nd);
  const int64_t esize = static_cast<int64_t>(dg::DTypeSize(joined.dtype()));
  std::vector<Part> parts;
  int64_t sum = 0;
  for (int32_t i = 0; i < count; ++i) {
    const dg::TensorRef t = part(i);
    DG_CHECK(t.ndim() == nd && t.dtype() == joined.dtype(), DG_INTERNAL,
             ctx.op_name(), ": ", part_kind, " ", i, " does not match the ",
             joined_kind);
    sum += t.dim(a);
    parts.push_back(
        {static_cast<char*>(t.raw_data()), t.dim(a) * inner * esize});
  }
  DG_CHECK(sum == joined.dim(a), DG_INTERNAL, ctx.op_name(), ": ", part_kind,
           "s sum to ", sum, " along axis ", a, ", ", joined_kind, " has ",
           joined.dim(a));
  MoveRows(outer, static_cast<char*>(joined.raw_data()), parts, join);
}

void ConcatKernel(dg::KernelContext& ctx) {
  JoinAlongAxis(
      ctx, ctx.output(0), ctx.num_inputs(),
      [&](int32_t i) { return ctx.input(i); }, true);
}

void StackKernel(dg::KernelContext& ctx) {
  const dg::TensorRef y = ctx.output(0);
  const int32_t nd = y.ndim();
  const int64_t axis = NormAxis(ctx.i("axis"), nd);
  DG_CHECK(axis >= 0 && axis < nd, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": axis ", ctx.i("axis"), " out of range for output rank ", nd);
  const int32_t a = static_cast<int32_t>(axis);
  DG_CHECK(y.dim(a) == ctx.num_inputs(), DG_INTERNAL, ctx.op_name(),
           ": output has ", y.dim(a), " entries along axis ", a, " for ",
           ctx.num_inputs(), " inputs");
  const int64_t outer = Prod(y, 0, a);
  const int64_t row_bytes =
      Prod(y, a + 1, nd) * static_cast<int64_t>(dg::DTypeSize(y.dtype()));
  std::vector<Part> parts;
  for (int32_t i = 0; i < ctx.num_inputs(); ++i) {
    const dg::TensorRef x = ctx.input(i);
    DG_CHECK(x.numel() == outer * Prod(y, a + 1, nd), DG_INTERNAL,
             ctx.op_name(), ": input ", i, " does not match the output");
    parts.push_back({static_cast<char*>(x.raw_data()), row_bytes});
  }
  MoveRows(outer, static_cast<char*>(y.raw_data()), parts, true);
}

void SplitKernel(dg::KernelContext& ctx) {
  JoinAlongAxis(
      ctx, ctx.input(0), ctx.num_outputs(),
      [&](int32_t i) { return ctx.output(i); }, false);
}

DG_KERNEL_MASK("Concat", "cpu", dg::kAny, 0, 0, ConcatKernel);
DG_KERNEL_MASK("Stack", "cpu", dg::kAny, 0, 0, StackKernel);
DG_KERNEL_MASK("Split", "cpu", dg::kAny, 0, 0, SplitKernel);

}  // namespace
}  // namespace cpu_eigen
