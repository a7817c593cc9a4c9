// Shared declarations of the pybind11 module `dragon_core._C`.
#ifndef DRAGON_CORE_PYTHON_BINDINGS_H_
#define DRAGON_CORE_PYTHON_BINDINGS_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../core/dispatch.h"
#include "../core/registry.h"
#include "../core/tensor.h"

namespace dragon {
namespace py = pybind11;

void BindTensor(py::module_& m);
void BindOps(py::module_& m);
void BindPlugins(py::module_& m);
void BindGraph(py::module_& m);
void BindPyOps(py::module_& m);
void BindStream(py::module_& m);

// Python callbacks installed by dragon_core at import.
struct PyHooks {
  py::object convert;       // (obj, dtype_code_or_None, device_str_or_None) -> Tensor
  py::object binary_slow;   // (op_py_name, a, b, reflected) -> Tensor
  py::object make_error;    // (code, kind, message, op, kernel, plugin) -> Exception
  py::object dtype_code;    // (obj) -> int
  py::object no_kernel_hint;// (op, device) -> str
  py::object record;        // (op_name, inputs, attrs_dict, outputs) -> None
  py::object trace;         // same signature: graph-mode tracing
  py::object created;       // (tensor) -> None: made from host data while tracing
};

// Autograd recording state of this thread.
struct GradState {
  bool enabled = true;   // no_grad() turns it off
  int tapes = 0;         // active GradientTapes
  int tracing = 0;       // active graph traces (every op is reported)
  int autocast = -1;     // DgDType of dragon_core.autocast, -1 when off
  bool autocast_cache = true;  // autocast(cache_enabled=...): reuse live casts
};

// Autocast policy of an op (dragon_core.amp sets the table).
enum class AutocastPolicy : int {
  kNone = 0, kLower = 1, kFloat32 = 2, kPromote = 3,
  // kLower on the two operands (inputs 0, 1), and an unset `out_dtype`
  // attribute becomes float32: the op runs on 16-bit operands and writes
  // float32 (MatMul: no Cast back up); further inputs (MatMulBiasAct's
  // bias) are cast to the product's dtype.
  kLowerFloat32Out = 4,
};
// Applies the thread's autocast to the inputs of `op` (Cast ops dispatched
// and recorded as any other op): kLower casts float32 inputs to the
// autocast dtype, kFloat32 casts float16/bfloat16 inputs to float32,
// kPromote casts float16/bfloat16 inputs to float32 when the inputs mix
// them with float32, kLowerFloat32Out is kLower on inputs 0 and 1 that also
// sets an unset `out_dtype` attribute (in `attrs`, when given) to float32
// and casts the other inputs to the product's dtype. Does nothing
// when autocast is off.
void ApplyAutocast(const OpSchema& op, std::vector<Tensor>& inputs,
                   std::vector<AttrValue>* attrs = nullptr);
GradState& Grad();

// Records `outputs = op(inputs; attrs)` for autograd when needed.
void MaybeRecord(const OpSchema& op, const std::vector<Tensor>& inputs,
                 const std::vector<AttrValue>& attrs, const std::vector<Tensor>& outputs);
// An attribute as Python sees it (None when absent; dtypes by name).
py::object AttrToPy(const DgAttrValue& v);
PyHooks& Hooks();

// numpy dtype <-> dtype code.
DgDType DTypeFromNumpy(const py::dtype& dt);
py::dtype NumpyFromDType(DgDType t);

// A host tensor that views (zero-copy) or copies a NumPy array.
Tensor FromNumpy(py::array arr, bool copy);
py::array ToNumpy(const Tensor& t);

// Converts a Python argument to a tensor; `like` gives dtype/device for
// Python scalars. Returns nullptr-free Tensor or throws.
Tensor ToTensor(py::handle obj, const Tensor* like);

// A tuple of attribute values (schema order) checked and converted for `op`.
std::vector<AttrValue> ConvertAttrs(const OpSchema& op, py::handle attrs);

}  // namespace dragon

#endif  // DRAGON_CORE_PYTHON_BINDINGS_H_
