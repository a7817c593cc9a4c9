// Core-wide basics: the error type raised inside the runtime, dtype helpers
// and shape formatting.
#ifndef DRAGON_CORE_COMMON_H_
#define DRAGON_CORE_COMMON_H_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "dragon/plugin.h"
#include "dragon/plugin.hpp"

namespace dragon {

using Shape = std::vector<int64_t>;

// What kind of failure an error is; decides the Python exception class.
enum class ErrorKind {
  kStatus,          // a DgStatus from shape inference or a kernel
  kNoKernel,        // no kernel for (op, device, dtype)
  kPlugin,          // the op's provider failed to load
  kType,            // a Python argument of the wrong type
};

// The one exception type thrown inside the core. Translated to the Python
// classes of dragon_core.errors at the binding boundary.
class CoreError : public std::runtime_error {
 public:
  CoreError(DgStatus code, const std::string& message,
            ErrorKind kind = ErrorKind::kStatus)
      : std::runtime_error(message), code_(code), kind_(kind) {}
  DgStatus code() const { return code_; }
  ErrorKind kind() const { return kind_; }
  std::string op, kernel, plugin;

 private:
  DgStatus code_;
  ErrorKind kind_;
};

inline const char* DTypeName(DgDType t) { return dg::DTypeName(t); }
inline size_t DTypeSize(DgDType t) { return dg::DTypeSize(t); }
bool ParseDType(const std::string& name, DgDType* out);
std::string MaskToString(DgDTypeMask mask);

std::string ShapeToString(const int64_t* shape, int32_t ndim);
inline std::string ShapeToString(const Shape& s) {
  return ShapeToString(s.data(), static_cast<int32_t>(s.size()));
}
int64_t NumElements(const Shape& s);
Shape ContiguousStrides(const Shape& shape);

}  // namespace dragon

#endif  // DRAGON_CORE_COMMON_H_
