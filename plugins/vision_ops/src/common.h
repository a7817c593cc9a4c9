// Helpers shared by the vision_ops CPU kernels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <omp.h>

#include "dragon/plugin.hpp"

namespace vision {

// The float dtypes every vision op accepts.
constexpr DgDTypeMask kFloat = dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64);

// Runs fn(i) for i in [0, n) on the OpenMP pool when the work is large enough
// to pay for it (cost = rough work per index, in elementary operations).
template <typename F>
void ParallelFor(int64_t n, int64_t cost, F&& fn) {
  if (n <= 1 || n * cost < (1 << 15)) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) fn(i);
}

using dg::ShapeStr;  // "[2, 3, 4]": a shape for error messages

}  // namespace vision
