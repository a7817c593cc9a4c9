// Shape arithmetic shared by the standard op schemas: formatting, axis
// normalisation, broadcasting and attribute validation. Every helper throws
// dg::Error(DG_INVALID_ARGUMENT, ...) with a message that names the offending
// values; the core prefixes the op name and appends the input shapes/dtypes.
#ifndef DRAGON_CORE_OPS_INFER_UTIL_H_
#define DRAGON_CORE_OPS_INFER_UTIL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dragon/plugin.hpp"

namespace dragon {
namespace ops {

using Shape = std::vector<int64_t>;

using dg::ShapeStr;  // "[2, 3]"; "[]" for a 0-d shape

// "float32, float64" for a dtype mask.
inline std::string MaskStr(DgDTypeMask mask) {
  std::string out;
  for (int t = 0; t < DG_NUM_DTYPES; ++t) {
    if (!(mask & dg::Bit(static_cast<DgDType>(t)))) continue;
    if (!out.empty()) out += ", ";
    out += dg::DTypeName(static_cast<DgDType>(t));
  }
  return out;
}

inline int64_t Rank(const Shape& s) { return static_cast<int64_t>(s.size()); }

// Number of elements; rejects negative dimensions and int64 overflow.
// `what` names the shape in messages, e.g. "shape".
inline int64_t CheckedNumel(const Shape& s, const char* what) {
  int64_t n = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    DG_CHECK(s[i] >= 0, DG_INVALID_ARGUMENT, what, " ", ShapeStr(s),
             " has a negative dimension ", s[i], " at position ", i);
  }
  for (int64_t d : s) {
    if (d == 0) return 0;
  }
  for (int64_t d : s) {
    DG_CHECK(!__builtin_mul_overflow(n, d, &n), DG_INVALID_ARGUMENT, what, " ",
             ShapeStr(s), " has more elements than fit in int64");
  }
  return n;
}

// Maps `axis` in [-rank, rank) to [0, rank). `name` is the attribute name.
inline int64_t NormalizeAxis(int64_t axis, int64_t rank,
                             const char* name = "axis") {
  if (rank == 0) {
    DG_CHECK(false, DG_INVALID_ARGUMENT, name, " ", axis,
             " is out of range for a tensor of rank 0 (it has no axes)");
  }
  DG_CHECK(axis >= -rank && axis < rank, DG_INVALID_ARGUMENT, name, " ", axis,
           " is out of range for a tensor of rank ", rank,
           " (valid range is [", -rank, ", ", rank - 1, "])");
  return axis < 0 ? axis + rank : axis;
}

// Normalises every axis of `axes` against `rank` and rejects repeats.
// The result keeps the caller's order.
inline std::vector<int64_t> NormalizeAxes(const std::vector<int64_t>& axes,
                                          int64_t rank,
                                          const char* name = "axes") {
  std::vector<int64_t> out;
  out.reserve(axes.size());
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    DG_CHECK(a >= -rank && a < rank, DG_INVALID_ARGUMENT, "axis ", a, " in ",
             name, " ", ShapeStr(axes),
             " is out of range for a tensor of rank ", rank,
             rank > 0 ? dg::Str(" (valid range is [", -rank, ", ", rank - 1,
                                "])")
                      : std::string(" (it has no axes)"));
    int64_t n = a < 0 ? a + rank : a;
    DG_CHECK(!seen[n], DG_INVALID_ARGUMENT, name, " ", ShapeStr(axes),
             " names axis ", n, " more than once");
    seen[n] = true;
    out.push_back(n);
  }
  return out;
}

// NumPy broadcasting of any number of shapes. On failure the message lists
// every shape and the first axis (counted from the end) that disagrees.
inline Shape BroadcastShapes(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = s.size() > rank ? s.size() : rank;
  Shape out(rank, 1);
  for (size_t k = 0; k < rank; ++k) {  // k-th axis from the end
    int64_t dim = 1;
    for (const Shape& s : shapes) {
      if (k >= s.size()) continue;
      int64_t d = s[s.size() - 1 - k];
      if (d == 1 || d == dim) continue;
      if (dim == 1) {
        dim = d;
        continue;
      }
      std::string list;
      for (size_t i = 0; i < shapes.size(); ++i) {
        if (i) list += i + 1 == shapes.size() ? " and " : ", ";
        list += ShapeStr(shapes[i]);
      }
      DG_CHECK(false, DG_INVALID_ARGUMENT, "shapes ", list,
               " cannot be broadcast: axis -", k + 1, " has sizes ", dim,
               " and ", d);
    }
    out[rank - 1 - k] = dim;
  }
  return out;
}

inline Shape BroadcastShapes(const Shape& a, const Shape& b) {
  return BroadcastShapes(std::vector<Shape>{a, b});
}

inline Shape BroadcastShapes(const Shape& a, const Shape& b, const Shape& c) {
  return BroadcastShapes(std::vector<Shape>{a, b, c});
}

// Checks that dtype attribute `name` holds a dtype from `allowed`.
inline DgDType CheckDTypeAttr(const dg::InferContext& ctx, const char* name,
                              DgDTypeMask allowed) {
  int64_t code = ctx.i(name);
  DG_CHECK(code >= 0 && code < DG_NUM_DTYPES, DG_INVALID_ARGUMENT, name, " ",
           code, " is not a valid dtype code");
  DgDType t = static_cast<DgDType>(code);
  DG_CHECK(allowed & dg::Bit(t), DG_INVALID_ARGUMENT, name, " ",
           dg::DTypeName(t), " is not supported; expected one of ",
           MaskStr(allowed));
  return t;
}

// Checks a shape given as an attribute (Fill, BroadcastTo, ...).
inline Shape CheckShapeAttr(const dg::InferContext& ctx, const char* name) {
  Shape s = ctx.ints(name);
  CheckedNumel(s, name);
  return s;
}

// Checks that tensor `t` (named `name`) has the dtype of `ref` (named
// `ref_name`): "<name> must have <ref_name>'s dtype <T>, got <U>".
inline void CheckDTypeLike(const dg::TensorRef& t, const char* name,
                           const dg::TensorRef& ref, const char* ref_name) {
  DG_CHECK(t.dtype() == ref.dtype(), DG_INVALID_ARGUMENT, name, " must have ",
           ref_name, "'s dtype ", dg::DTypeName(ref.dtype()), ", got ",
           dg::DTypeName(t.dtype()));
}

// The shape function of every op whose output 0 mirrors input 0.
inline void SameAsInput(dg::InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
}


// Strides, dilations, pads and groups of an N-d convolution (N spatial axes),
// validated. `axes` names the axes in messages ("height, width"); pads hold
// N values (both sides alike) or 2N (`pads_layout`: the N begins, then the N
// ends).
template <int N>
struct ConvGeometryAttrs {
  int64_t stride[N];
  int64_t dilation[N];
  int64_t pad_begin[N];
  int64_t pad_end[N];
  int64_t groups;
};

template <int N>
ConvGeometryAttrs<N> ReadConvGeometryAttrs(const dg::InferContext& ctx,
                                           const char* axes,
                                           const char* pads_layout) {
  ConvGeometryAttrs<N> a;
  const Shape s = ctx.ints("strides"), d = ctx.ints("dilations"),
              p = ctx.ints("pads");
  DG_CHECK(Rank(s) == N, DG_INVALID_ARGUMENT, "strides must hold ", N,
           " values (", axes, "), got ", ShapeStr(s));
  DG_CHECK(Rank(d) == N, DG_INVALID_ARGUMENT, "dilations must hold ", N,
           " values (", axes, "), got ", ShapeStr(d));
  DG_CHECK(Rank(p) == N || Rank(p) == 2 * N, DG_INVALID_ARGUMENT,
           "pads must hold ", N, " values (", axes, ") or ", 2 * N, " (",
           pads_layout, "), got ", ShapeStr(p));
  for (int i = 0; i < N; ++i) {
    DG_CHECK(s[i] >= 1, DG_INVALID_ARGUMENT, "strides must be positive, got ",
             ShapeStr(s));
    DG_CHECK(d[i] >= 1, DG_INVALID_ARGUMENT,
             "dilations must be positive, got ", ShapeStr(d));
    a.stride[i] = s[i];
    a.dilation[i] = d[i];
    a.pad_begin[i] = p[i];
    a.pad_end[i] = Rank(p) == 2 * N ? p[i + N] : p[i];
  }
  for (int64_t v : p) {
    DG_CHECK(v >= 0, DG_INVALID_ARGUMENT, "pads must be non-negative, got ",
             ShapeStr(p));
  }
  a.groups = ctx.i("groups");
  DG_CHECK(a.groups >= 1, DG_INVALID_ARGUMENT, "groups must be >= 1, got ",
           a.groups);
  return a;
}

}  // namespace ops
}  // namespace dragon

#endif  // DRAGON_CORE_OPS_INFER_UTIL_H_
