// The pybind11 module dragon_core._C.
#include "../core/host_api.h"
#include "../core/loader.h"
#include "bindings.h"

namespace dragon {

PyHooks& Hooks() {
  static PyHooks* hooks = new PyHooks();  // leaked: outlives interpreter teardown
  return *hooks;
}

}  // namespace dragon

PYBIND11_MODULE(_C, m) {
  namespace py = pybind11;
  using namespace dragon;
  m.doc() = "Dragon core runtime (C++)";
  m.attr("__version__") = DRAGON_CORE_VERSION;
  m.attr("ABI_VERSION") = py::make_tuple(DG_ABI_MAJOR, DG_ABI_MINOR);
  m.attr("NUM_THREADS") = HostNumThreads();

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CoreError& e) {
      if (!Hooks().make_error || Hooks().make_error.is_none()) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return;
      }
      py::object exc = Hooks().make_error(static_cast<int>(e.code()), static_cast<int>(e.kind()),
                                          e.what(), e.op, e.kernel, e.plugin);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });

  RegisterBuiltinOps();
  BindTensor(m);
  BindOps(m);
  BindPlugins(m);
  BindGraph(m);
  BindPyOps(m);
  BindStream(m);

  m.def("_set_hooks", [](py::object convert, py::object binary_slow, py::object make_error,
                         py::object dtype_code) {
    Hooks().convert = convert;
    Hooks().binary_slow = binary_slow;
    Hooks().make_error = make_error;
    Hooks().dtype_code = dtype_code;
  });
}
