// Where(condition, x, y): condition ? x : y, the three broadcast together
// (docs/ops.md). Dispatches on x's dtype; condition is bool.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common.h"
#include "dragon/plugin.hpp"
#include "elementwise.h"

namespace cpu_eigen {
namespace {

using elementwise::BroadcastPlan;
using elementwise::ForEachRow;
using elementwise::ForRange;
using elementwise::kCostCheap;
using elementwise::MakeBroadcastPlan;

// The unsigned integer type of T's size: the select works on bit patterns.
template <size_t N> struct BitsOf;
template <> struct BitsOf<1> { using type = uint8_t; };
template <> struct BitsOf<2> { using type = uint16_t; };
template <> struct BitsOf<4> { using type = uint32_t; };
template <> struct BitsOf<8> { using type = uint64_t; };

// out[i] = c[i] ? x[i·SX] : y[i·SY] with compile-time strides (0 or 1), as a
// bit mask: out = (x & m) | (y & ~m) with m all ones where c[i]. Written as
// `c[i] ? x : y`, GCC keeps a branch per element, which a random mask (a
// relu gradient's) mispredicts half the time: 0.7 ns an element against
// ~0.05 for this form, which vectorises. Exact for every value (NaN, -0).
template <typename T, int SX, int SY>
inline void WhereLoop(const bool* c, const T* x, const T* y, T* out,
                      int64_t n) {
  using U = typename BitsOf<sizeof(T)>::type;
  const unsigned char* cb = reinterpret_cast<const unsigned char*>(c);
  for (int64_t i = 0; i < n; ++i) {
    U a, b;
    std::memcpy(&a, x + i * SX, sizeof(U));
    std::memcpy(&b, y + i * SY, sizeof(U));
    const U m = static_cast<U>(0) - static_cast<U>(cb[i] != 0);
    const U r = (a & m) | (b & static_cast<U>(~m));
    std::memcpy(static_cast<void*>(out + i), &r, sizeof(U));
  }
}

// One run of n outputs; each stride is 0 (broadcast) or 1.
template <typename T>
inline void WhereRow(const bool* c, int64_t sc, const T* x, int64_t sx,
                     const T* y, int64_t sy, T* out, int64_t n) {
  if (sc == 0) {  // one condition for the whole run: a copy or a fill
    const T* src = *c ? x : y;
    if ((*c ? sx : sy) == 1) {
      std::copy(src, src + n, out);
    } else {
      std::fill(out, out + n, *src);
    }
  } else if (sx == 1) {
    if (sy == 1) {
      WhereLoop<T, 1, 1>(c, x, y, out, n);
    } else {
      WhereLoop<T, 1, 0>(c, x, y, out, n);
    }
  } else if (sy == 1) {
    WhereLoop<T, 0, 1>(c, x, y, out, n);
  } else {
    WhereLoop<T, 0, 0>(c, x, y, out, n);
  }
}

template <typename T>
void Where(dg::KernelContext& ctx) {
  const dg::TensorRef c = ctx.input(0), x = ctx.input(1), y = ctx.input(2);
  const dg::TensorRef out = ctx.output(0);
  const int64_t n = out.numel();
  if (n == 0) return;
  DG_CHECK(c.dtype() == DG_BOOL, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": condition must be bool, got ", dg::DTypeName(c.dtype()));
  const bool* pc = c.data<const bool>();
  const T* px = x.data<const T>();
  const T* py = y.data<const T>();
  T* po = out.data<T>();
  const int64_t nc = c.numel(), nx = x.numel(), ny = y.numel();
  if ((nc == n || nc == 1) && (nx == n || nx == 1) && (ny == n || ny == 1)) {
    // Same shapes or single elements: one flat run, strides 0 or 1.
    const int64_t sc = nc == n ? 1 : 0, sx = nx == n ? 1 : 0,
                  sy = ny == n ? 1 : 0;
    ForRange(n, kCostCheap, [&](int64_t begin, int64_t end) {
      WhereRow<T>(pc + begin * sc, sc, px + begin * sx, sx, py + begin * sy,
                  sy, po + begin, end - begin);
    });
    return;
  }
  BroadcastPlan<3> plan;
  MakeBroadcastPlan<3>(ctx.op_name(), {c, x, y}, out, &plan);
  const int64_t sc = plan.strides[0][0], sx = plan.strides[1][0],
                sy = plan.strides[2][0];
  ForEachRow<3>(plan, n, kCostCheap,
                [&](int64_t i, int64_t len, const int64_t* off) {
                  WhereRow<T>(pc + off[0], sc, px + off[1], sx, py + off[2],
                              sy, po + i, len);
                });
}
DG_KERNEL("Where", "cpu", Where, CPU_EIGEN_ALL_TYPES, Eigen::half,
          Eigen::bfloat16);  // 16-bit floats: a bit copy, as int16

}  // namespace
}  // namespace cpu_eigen
