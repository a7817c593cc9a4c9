// Det and DetGrad on batches of square matrices [..., n, n], in float64
// whatever the dtype (float32 results are rounded once at the end).
//
// Det: LU factorisation with partial pivoting; det = sign * prod(U_ii).
// DetGrad: dx = dy * C, C the cofactor matrix (C_ij = d det / d x_ij). For
// an invertible matrix C = det * inv(x)^T, from the same factorisation; when
// a pivot is exactly zero (singular x) every cofactor is computed as the
// determinant of its minor instead, so rank n-1 matrices get their exact,
// nonzero gradient. Matrices are independent: one task per matrix.
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "common.h"

namespace cpu_eigen {
namespace {

// Factorises a (row-major n x n, overwritten by L\U) in place; perm[i] is the
// source row of row i. Returns the sign of the permutation, or 0 when a
// pivot is exactly zero (the matrix is singular).
int LuInPlace(double* a, int64_t n, std::vector<int64_t>& perm) {
  perm.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  int sign = 1;
  for (int64_t k = 0; k < n; ++k) {
    int64_t p = k;
    double best = std::fabs(a[k * n + k]);
    for (int64_t i = k + 1; i < n; ++i) {
      const double v = std::fabs(a[i * n + k]);
      if (v > best || (std::isnan(v) && !std::isnan(best))) {
        best = v;
        p = i;
      }
    }
    if (best == 0.0) return 0;
    if (p != k) {
      for (int64_t j = 0; j < n; ++j) std::swap(a[k * n + j], a[p * n + j]);
      std::swap(perm[static_cast<size_t>(k)], perm[static_cast<size_t>(p)]);
      sign = -sign;
    }
    const double piv = a[k * n + k];
    for (int64_t i = k + 1; i < n; ++i) {
      const double f = a[i * n + k] / piv;
      a[i * n + k] = f;
      if (f == 0.0) continue;
      for (int64_t j = k + 1; j < n; ++j) a[i * n + j] -= f * a[k * n + j];
    }
  }
  return sign;
}

// Determinant of the n x n row-major matrix m (copied into work).
double DetOf(const double* m, int64_t n, std::vector<double>& work,
             std::vector<int64_t>& perm) {
  work.assign(m, m + n * n);
  const int sign = LuInPlace(work.data(), n, perm);
  if (sign == 0) return 0.0;
  double d = sign;
  for (int64_t i = 0; i < n; ++i) d *= work[static_cast<size_t>(i * n + i)];
  return d;
}

int64_t CheckedSquare(dg::KernelContext& ctx, const dg::TensorRef& x,
                      int64_t* batch) {
  const int32_t r = x.ndim();
  DG_CHECK(r >= 2 && x.dim(r - 1) == x.dim(r - 2), DG_INTERNAL,
           ctx.op_name(), ": x is not a batch of square matrices");
  const int64_t n = x.dim(r - 1);
  *batch = 1;
  for (int32_t k = 0; k < r - 2; ++k) *batch *= x.dim(k);
  return n;
}

template <typename T>
void DetKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  int64_t batch = 0;
  const int64_t n = CheckedSquare(ctx, x, &batch);
  DG_CHECK(y.numel() == batch, DG_INTERNAL, ctx.op_name(), ": y has ",
           y.numel(), " elements, expected ", batch);
  const T* px = x.data<const T>();
  T* py = y.data<T>();
  ParallelFor(
      batch,
      [&](int64_t begin, int64_t end) {
        std::vector<double> m(static_cast<size_t>(n * n)), work;
        std::vector<int64_t> perm;
        for (int64_t b = begin; b < end; ++b) {
          const T* src = px + b * n * n;
          for (int64_t i = 0; i < n * n; ++i) {
            m[static_cast<size_t>(i)] = static_cast<double>(src[i]);
          }
          py[b] = static_cast<T>(DetOf(m.data(), n, work, perm));
        }
      },
      n * n * n + 1);
}

// Cofactor matrix of m (n x n) into c, n >= 1.
void Cofactors(const double* m, int64_t n, double* c) {
  std::vector<double> lu(m, m + n * n), work, minor;
  std::vector<int64_t> perm;
  const int sign = LuInPlace(lu.data(), n, perm);
  if (sign != 0) {
    // c = det * inv(m)^T: column j of inv(m) solves m z = e_j, and
    // c[i][j] = det * inv[j][i].
    double det = sign;
    for (int64_t i = 0; i < n; ++i) det *= lu[static_cast<size_t>(i * n + i)];
    std::vector<double> z(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      // P m = L U: solve L w = P e_j, then U z = w.
      for (int64_t i = 0; i < n; ++i) {
        double s = perm[static_cast<size_t>(i)] == j ? 1.0 : 0.0;
        for (int64_t k = 0; k < i; ++k) {
          s -= lu[static_cast<size_t>(i * n + k)] * z[static_cast<size_t>(k)];
        }
        z[static_cast<size_t>(i)] = s;
      }
      for (int64_t i = n - 1; i >= 0; --i) {
        double s = z[static_cast<size_t>(i)];
        for (int64_t k = i + 1; k < n; ++k) {
          s -= lu[static_cast<size_t>(i * n + k)] * z[static_cast<size_t>(k)];
        }
        z[static_cast<size_t>(i)] = s / lu[static_cast<size_t>(i * n + i)];
      }
      // z = inv(m)[:, j], and c[j][i] = det * inv(m)[i][j] = det * z[i].
      for (int64_t i = 0; i < n; ++i) c[j * n + i] = det * z[static_cast<size_t>(i)];
    }
    return;
  }
  // Singular: each cofactor from its minor.
  if (n == 1) {
    c[0] = 1.0;
    return;
  }
  const int64_t k = n - 1;
  minor.resize(static_cast<size_t>(k * k));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t t = 0;
      for (int64_t r = 0; r < n; ++r) {
        if (r == i) continue;
        for (int64_t q = 0; q < n; ++q) {
          if (q != j) minor[static_cast<size_t>(t++)] = m[r * n + q];
        }
      }
      const double d = DetOf(minor.data(), k, work, perm);
      c[i * n + j] = ((i + j) % 2 == 0) ? d : -d;
    }
  }
}

// Largest n whose singular matrices get their cofactors from minors
// (n^2 determinants of size n-1: about 1e7 operations at n = 32).
constexpr int64_t kMaxMinorsN = 32;

template <typename T>
void DetGradKernel(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), dy = ctx.input(1), dx = ctx.output(0);
  int64_t batch = 0;
  const int64_t n = CheckedSquare(ctx, x, &batch);
  DG_CHECK(dy.numel() == batch && dx.numel() == x.numel(), DG_INTERNAL,
           ctx.op_name(), ": dy has ", dy.numel(), " elements and dx ",
           dx.numel(), ", expected ", batch, " and ", x.numel());
  if (n == 0) return;
  const T* px = x.data<const T>();
  const T* pdy = dy.data<const T>();
  T* pdx = dx.data<T>();
  if (n > kMaxMinorsN) {
    // Refuse, before any thread starts, singular matrices too large for
    // the minors (no exception may leave a parallel region).
    std::vector<double> m(static_cast<size_t>(n * n));
    std::vector<int64_t> perm;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < n * n; ++i) {
        m[static_cast<size_t>(i)] = static_cast<double>(px[b * n * n + i]);
      }
      DG_CHECK(LuInPlace(m.data(), n, perm) != 0, DG_UNIMPLEMENTED,
               ctx.op_name(), ": matrix ", b, " of x is exactly singular and ",
               n, "x", n, "; the gradient of Det at a singular matrix is "
               "computed from minors only up to ", kMaxMinorsN, "x",
               kMaxMinorsN);
    }
  }
  ParallelFor(
      batch,
      [&](int64_t begin, int64_t end) {
        std::vector<double> m(static_cast<size_t>(n * n)),
            c(static_cast<size_t>(n * n));
        for (int64_t b = begin; b < end; ++b) {
          const T* src = px + b * n * n;
          for (int64_t i = 0; i < n * n; ++i) {
            m[static_cast<size_t>(i)] = static_cast<double>(src[i]);
          }
          Cofactors(m.data(), n, c.data());
          const double g = static_cast<double>(pdy[b]);
          T* out = pdx + b * n * n;
          for (int64_t i = 0; i < n * n; ++i) {
            out[i] = static_cast<T>(g * c[static_cast<size_t>(i)]);
          }
        }
      },
      n * n * n + 1);
}

DG_KERNEL("Det", "cpu", DetKernel, float, double);
DG_KERNEL("DetGrad", "cpu", DetGradKernel, float, double);

}  // namespace
}  // namespace cpu_eigen
