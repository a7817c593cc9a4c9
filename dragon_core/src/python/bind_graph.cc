// Graph bindings: the executor plan built from Python's compiled GraphDef.
#include "../core/executor.h"
#include "bindings.h"

namespace dragon {

void BindGraph(py::module_& m) {
  // The cache key of a call whose positional arguments are all tensors:
  // (dtype, device type, device index, ndim, dims...) per tensor; None when
  // an argument is not a tensor (the Python path then builds the key).
  m.def("tensor_signature", [](py::tuple args) -> py::object {
    std::vector<int64_t> key;
    for (auto item : args) {
      if (!py::isinstance<TensorImpl>(item)) return py::none();
      const TensorImpl& t = item.cast<const TensorImpl&>();
      key.push_back(t.dtype());
      key.push_back(t.device().type);
      key.push_back(t.device().index);
      key.push_back(t.ndim());
      for (int64_t d : t.shape()) key.push_back(d);
    }
    py::tuple out(key.size());
    for (size_t i = 0; i < key.size(); ++i) out[i] = py::int_(key[i]);
    return py::object(std::move(out));
  });
  py::class_<Plan, std::shared_ptr<Plan>>(m, "Plan")
      .def(py::init<std::string, int32_t, std::vector<int32_t>, std::vector<int32_t>>(),
           py::arg("name"), py::arg("num_slots"), py::arg("inputs"), py::arg("outputs"))
      .def("add_op", [](Plan& plan, const std::string& type, const std::string& name,
                        std::vector<int32_t> inputs, std::vector<int32_t> outputs,
                        py::tuple attrs, std::vector<int32_t> release, int32_t inplace_input,
                        std::vector<int32_t> out_buffers, uint64_t constant_inputs) {
        OpSchema* op = Registry::Get().FindOp(type);
        if (!op) throw CoreError(DG_NOT_FOUND, dg::Str("graph op '", name, "': unknown op type '", type, "'"));
        PlanOp p;
        p.op = op;
        p.name = name;
        p.inputs = std::move(inputs);
        p.outputs = std::move(outputs);
        p.attrs = ConvertAttrs(*op, attrs);
        p.release = std::move(release);
        p.inplace_input = inplace_input;
        p.out_buffers = std::move(out_buffers);
        p.site->state.constant_inputs = constant_inputs;
        plan.AddOp(std::move(p));
      })
      .def("add_control", [](Plan& plan, const std::string& kind, const std::string& name,
                             std::vector<int32_t> inputs, std::vector<int32_t> outputs,
                             std::shared_ptr<Plan> first, std::shared_ptr<Plan> second,
                             int32_t num_operands, int32_t num_first_captures,
                             int32_t num_second_captures, int64_t max_iterations,
                             std::vector<int32_t> release) {
        PlanOp p;
        if (kind == "Cond") p.kind = PlanOp::kCond;
        else if (kind == "While") p.kind = PlanOp::kWhile;
        else throw CoreError(DG_INVALID_ARGUMENT, dg::Str("unknown control op '", kind, "'"));
        p.name = name;
        p.inputs = std::move(inputs);
        p.outputs = std::move(outputs);
        p.then_plan = std::move(first);
        p.else_plan = std::move(second);
        p.num_operands = num_operands;
        p.num_then_captures = num_first_captures;
        p.num_else_captures = num_second_captures;
        p.max_iterations = max_iterations;
        p.release = std::move(release);
        plan.AddOp(std::move(p));
      })
      .def("set_error", [](Plan& plan, int32_t code, int32_t kind, std::string message,
                           std::string op) {
        if (code <= 0)
          throw CoreError(DG_INVALID_ARGUMENT, dg::Str("set_error: the status code must be "
                                                       "positive, got ", code));
        if (kind < 0 || kind > static_cast<int32_t>(ErrorKind::kType))
          throw CoreError(DG_INVALID_ARGUMENT, dg::Str("set_error: unknown error kind ", kind));
        plan.SetError(code, kind, std::move(message), std::move(op));
      }, py::arg("code"), py::arg("kind"), py::arg("message"), py::arg("op") = "",
         "Make every run raise this error (a Cond branch whose tracing failed).")
      .def("set_constants", &Plan::SetConstants)
      .def("set_parallel", &Plan::SetParallel, py::arg("threads"))
      .def("set_buffers", &Plan::SetBuffers)
      .def_property_readonly("num_ops", &Plan::num_ops)
      .def_property_readonly("planned_bytes", &Plan::planned_bytes)
      .def("set_profiling", &Plan::SetProfiling, py::arg("on"))
      .def_property_readonly("profile_runs", &Plan::profile_runs)
      .def("profile", [](Plan& plan) {
        py::list out;
        for (const Plan::OpTiming& t : plan.Profile()) {
          py::dict d;
          d["name"] = t.name;
          d["type"] = t.type;
          d["calls"] = t.calls;
          d["total_ns"] = t.total_ns;
          out.append(d);
        }
        return out;
      })
      .def("set_capture", &Plan::SetCapture, py::arg("enabled"), py::arg("warmup") = 2,
           py::arg("immutable_begin") = 0, py::arg("immutable_end") = 0,
           "Graph capture (CUDA Graphs) of the steady-state run; feeds in "
           "[immutable_begin, immutable_end) are constants read in place.")
      .def("capture_status", [](Plan& plan) {
        const Plan::CaptureStatus st = plan.GetCaptureStatus();
        py::dict d;
        d["enabled"] = st.enabled;
        d["state"] = st.state;
        d["reason"] = st.reason;
        d["captures"] = st.captures;
        d["replays"] = st.replays;
        d["normal_runs"] = st.normal_runs;
        d["graphs"] = st.graphs;
        return d;
      })
      .def("run", [](Plan& plan, std::vector<Tensor> feeds) {
        // No Python runs inside the executor; workers must not wait on the GIL.
        py::gil_scoped_release release;
        return plan.Run(feeds);
      });
}

}  // namespace dragon
