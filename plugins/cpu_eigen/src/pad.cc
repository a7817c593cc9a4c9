// Pad: NumPy pad with modes "constant", "reflect" and "edge".
//
// The output is walked row by row along the last axis. Each output row maps
// (per leading axis) to one input row, or to the constant when a leading
// coordinate falls in a constant pad; within a row the middle is a memcpy of
// the input row and the borders are mapped element by element.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cast.h"
#include "common.h"
#include "strided.h"

namespace cpu_eigen {
namespace {

enum class PadMode { kConstant, kReflect, kEdge };

// The input coordinate that output coordinate c (shifted by the leading pad)
// reads along an axis of size n, or -1 for the constant.
inline int64_t SourceIndex(int64_t c, int64_t n, PadMode mode) {
  if (c >= 0 && c < n) return c;
  switch (mode) {
    case PadMode::kConstant:
      return -1;
    case PadMode::kEdge:
      return c < 0 ? 0 : n - 1;
    case PadMode::kReflect: {
      // Mirror without repeating the edge; the pattern has period 2(n-1).
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      c %= period;
      if (c < 0) c += period;
      return c < n ? c : period - c;
    }
  }
  return -1;
}

void PadKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  const int32_t nd = x.ndim();
  const std::vector<int64_t> pads = ctx.ints("pads");
  DG_CHECK(static_cast<int64_t>(pads.size()) == 2 * nd, DG_INVALID_ARGUMENT,
           ctx.op_name(), ": pads has ", pads.size(), " entries, expected ",
           2 * nd, " for rank ", nd);
  DG_CHECK(y.ndim() == nd, DG_INTERNAL, ctx.op_name(),
           ": output rank differs from the input's");
  for (int32_t k = 0; k < nd; ++k) {
    DG_CHECK(pads[2 * k] >= 0 && pads[2 * k + 1] >= 0, DG_INVALID_ARGUMENT,
             ctx.op_name(), ": negative pad on axis ", k);
    DG_CHECK(y.dim(k) == x.dim(k) + pads[2 * k] + pads[2 * k + 1], DG_INTERNAL,
             ctx.op_name(), ": output dim ", k, " is ", y.dim(k), ", expected ",
             x.dim(k) + pads[2 * k] + pads[2 * k + 1]);
  }
  const std::string mode_name = ctx.s("mode");
  PadMode mode;
  if (mode_name == "constant") {
    mode = PadMode::kConstant;
  } else if (mode_name == "reflect") {
    mode = PadMode::kReflect;
  } else if (mode_name == "edge") {
    mode = PadMode::kEdge;
  } else {
    throw dg::Error(DG_INVALID_ARGUMENT,
                    dg::Str(ctx.op_name(), ": unknown mode '", mode_name,
                            "' (expected constant, reflect or edge)"));
  }
  const size_t esize = dg::DTypeSize(x.dtype());
  alignas(8) char value[8] = {};
  StoreScalar(ctx.f("value"), x.dtype(), value);
  if (y.numel() == 0) return;
  char* dst = static_cast<char*>(y.raw_data());
  const char* src = static_cast<const char*>(x.raw_data());
  if (nd == 0) {
    std::memcpy(dst, src, esize);
    return;
  }
  if (x.numel() == 0) {
    DG_CHECK(mode == PadMode::kConstant, DG_INVALID_ARGUMENT, ctx.op_name(),
             ": mode '", mode_name, "' cannot pad an empty input");
    FillElements(dst, y.numel(), value, esize);
    return;
  }

  const int32_t last = nd - 1;
  const int64_t n_in = x.dim(last), n_out = y.dim(last);
  const int64_t before = pads[2 * last];
  const int64_t rows = y.numel() / n_out;
  const std::vector<int64_t> xs = ContiguousStrides(x.shape());
  DispatchElemSize(esize, [&](auto size) {
    constexpr size_t N = decltype(size)::value;
    ParallelFor(
        rows,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            char* d = dst + r * n_out * static_cast<int64_t>(N);
            // Map the leading coordinates of output row r to an input row.
            int64_t rem = r, src_off = 0;
            bool constant_row = false;
            for (int32_t k = last - 1; k >= 0; --k) {
              const int64_t c = rem % y.dim(k);
              rem /= y.dim(k);
              const int64_t si = SourceIndex(c - pads[2 * k], x.dim(k), mode);
              if (si < 0) {
                constant_row = true;
                break;
              }
              src_off += si * xs[k];
            }
            if (constant_row) {
              FillRow<N>(d, n_out, value);
              continue;
            }
            const char* s = src + src_off * static_cast<int64_t>(N);
            for (int64_t j = 0; j < n_out; ++j) {
              if (j == before) {  // the input row itself
                std::memcpy(d + j * N, s, static_cast<size_t>(n_in) * N);
                j += n_in - 1;
                continue;
              }
              const int64_t si = SourceIndex(j - before, n_in, mode);
              CopyElem<N>(d + j * N, si < 0 ? value : s + si * N);
            }
          }
        },
        n_out);
  });
}

DG_KERNEL_MASK("Pad", "cpu", dg::kAnyNumeric, 0, 0, PadKernel);

}  // namespace
}  // namespace cpu_eigen
