#include "common.h"

#include <sstream>

namespace dragon {

bool ParseDType(const std::string& name, DgDType* out) {
  for (DgDType t = 0; t < DG_NUM_DTYPES; ++t) {
    if (name == DTypeName(t)) {
      *out = t;
      return true;
    }
  }
  if (name == "float" || name == "float_") { *out = DG_FLOAT32; return true; }
  if (name == "double") { *out = DG_FLOAT64; return true; }
  if (name == "half") { *out = DG_FLOAT16; return true; }
  if (name == "long") { *out = DG_INT64; return true; }
  if (name == "int") { *out = DG_INT32; return true; }
  if (name == "bool_") { *out = DG_BOOL; return true; }
  return false;
}

std::string MaskToString(DgDTypeMask mask) {
  std::string out;
  for (DgDType t = 0; t < DG_NUM_DTYPES; ++t) {
    if (mask & DG_DTYPE_BIT(t)) {
      if (!out.empty()) out += ", ";
      out += DTypeName(t);
    }
  }
  return out.empty() ? "(none)" : out;
}

std::string ShapeToString(const int64_t* shape, int32_t ndim) {
  std::ostringstream os;
  os << "[";
  for (int32_t i = 0; i < ndim; ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

int64_t NumElements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape ContiguousStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = acc;
    acc *= shape[i] > 0 ? shape[i] : 1;
  }
  return strides;
}

}  // namespace dragon
