// Plugin bindings: loading, records, kernels, pins, explain, devices.
#include "../core/device.h"
#include "../core/elf_note.h"
#include "../core/loader.h"
#include "bindings.h"

namespace dragon {
namespace {

py::dict Record(const PluginRecord& p) {
  py::dict d;
  d["name"] = p.name;
  d["version"] = p.version;
  d["path"] = p.path;
  d["dist"] = p.dist;
  d["dist_version"] = p.dist_version;
  d["entry_point"] = p.entry_point;
  d["abi"] = dg::Str(p.abi_major, ".", p.abi_minor);
  d["min_host_minor"] = p.min_host_minor;
  d["state"] = p.state;
  d["error"] = p.error;
  d["num_ops"] = p.num_ops;
  d["num_kernels"] = p.num_kernels;
  d["devices"] = py::cast(p.devices);
  d["broken_ops"] = py::cast(p.broken_ops);
  return d;
}

std::string HintTrampoline(const std::string& op, const std::string& device) {
  py::gil_scoped_acquire gil;
  if (!Hooks().no_kernel_hint || Hooks().no_kernel_hint.is_none()) return "";
  try {
    return py::str(Hooks().no_kernel_hint(op, device));
  } catch (py::error_already_set&) {
    return "";
  }
}

}  // namespace

void BindPlugins(py::module_& m) {
  m.def("load_plugin", [](const std::string& path, const std::string& entry_point,
                          const std::string& dist, const std::string& dist_version) {
    LoadRequest req{path, entry_point, dist, dist_version};
    return Record(LoadPlugin(req));
  }, py::arg("path"), py::arg("entry_point") = "", py::arg("dist") = "",
     py::arg("dist_version") = "");
  m.def("record_broken_plugin", [](const std::string& name, const std::string& error,
                                   const std::string& dist, const std::string& dist_version) {
    LoadRequest req{"", name, dist, dist_version};
    return Record(RecordBrokenPlugin(req, name, error));
  });
  m.def("abi_note", [](const std::string& path) -> py::object {
    AbiNote note = ReadAbiNote(path);
    if (!note.found) return py::none();
    return py::make_tuple(note.abi_major, note.abi_minor, note.min_host_minor);
  }, py::arg("path"));
  m.def("plugins", [] {
    py::list l;
    for (auto& p : Registry::Get().Plugins()) l.append(Record(p));
    return l;
  });
  m.def("kernels", [](const std::string& op) {
    py::list l;
    for (const KernelEntry* k : Registry::Get().Kernels(op)) {
      py::dict d;
      d["name"] = k->name;
      d["op"] = k->op;
      d["device"] = k->device;
      d["plugin"] = k->plugin;
      d["dist"] = k->dist;
      d["dtypes"] = MaskToString(k->dtypes);
      d["priority"] = k->priority;
      d["strided_inputs"] = static_cast<bool>(k->traits & DG_KERNEL_STRIDED_INPUTS);
      l.append(d);
    }
    return l;
  });
  m.def("num_kernels", [] {
    size_t n = 0;
    for (OpSchema* op : Registry::Get().Ops()) n += Registry::Get().Kernels(op->name).size();
    return n;
  });
  m.def("explain", [](const std::string& op, const std::string& device, int dtype) {
    return Registry::Get().Explain(op, device, static_cast<DgDType>(dtype));
  });
  m.def("pin", [](const std::string& op, const std::string& device, const std::string& target) {
    Registry::Get().Pin(op, device, target);
  });
  m.def("unpin", [](const std::string& op, const std::string& device) {
    Registry::Get().Unpin(op, device);
  });
  m.def("pins", [] {
    py::dict d;
    for (auto& kv : Registry::Get().Pins())
      d[py::make_tuple(kv.first.first, kv.first.second)] = kv.second;
    return d;
  });
  m.def("selected_kernel", [](const std::string& op_name, const std::string& device, int dtype) {
    OpSchema* op = Registry::Get().FindOp(op_name);
    if (!op) throw CoreError(DG_NOT_FOUND, dg::Str("no op named '", op_name, "'"));
    DgDevice d = DeviceRegistry::Get().Parse(device);
    auto c = Registry::Get().Candidates(*op, d.type, static_cast<DgDType>(dtype));
    if (c->empty()) return py::object(py::none());
    return py::object(py::str(c->front()->name));
  });
  m.def("devices", [] {
    py::list l;
    auto& reg = DeviceRegistry::Get();
    for (int32_t i = 0; i < reg.size(); ++i) {
      DeviceType& t = reg.type(i);
      py::dict d;
      d["name"] = t.name;
      d["plugin"] = t.plugin;
      int32_t count = t.def.count ? t.def.count(t.def.user_data) : 0;
      d["count"] = count;
      // A device with none present may say why (ABI 1.3 error_message,
      // asked right after count on this thread): "no NVIDIA driver", ...
      std::string reason;
      if (count == 0 && t.def.error_message) {
        const char* m = t.def.error_message(t.def.user_data, 0);
        if (m) reason = m;
      }
      d["reason"] = reason;
      d["host_accessible"] = static_cast<bool>(t.def.host_accessible);
      py::list descs;
      for (int32_t k = 0; k < count && k < 64; ++k) {
        char buf[256] = {0};
        if (t.def.describe) t.def.describe(t.def.user_data, k, buf, sizeof(buf));
        descs.append(py::str(buf));
      }
      d["descriptions"] = descs;
      l.append(d);
    }
    return l;
  });
  m.def("_set_no_kernel_hint", [](py::object fn) {
    Hooks().no_kernel_hint = fn;
    SetNoKernelHint(&HintTrampoline);
  });
}

}  // namespace dragon
