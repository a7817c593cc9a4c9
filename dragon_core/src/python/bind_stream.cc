// Streams, events and device counters for dragon_core._stream (ABI 1.3).
// Handles cross as integers; 0 is "no stream/event" (synchronous devices).
#include <cstring>

#include "../core/device.h"
#include "../core/stream.h"
#include "bindings.h"

namespace dragon {
namespace {

DgDevice Dev(const std::string& spec) { return DeviceRegistry::Get().Parse(spec); }
uintptr_t H(void* p) { return reinterpret_cast<uintptr_t>(p); }
void* P(uintptr_t h) { return reinterpret_cast<void*>(h); }

}  // namespace

void BindStream(py::module_& m) {
  m.def("_stream_ordered", [](const std::string& d) { return StreamOrdered(Dev(d)); });
  m.def("_current_stream", [](const std::string& d) { return H(CurrentStream(Dev(d))); });
  m.def("_default_stream", [](const std::string& d) { return H(DefaultStream(Dev(d))); });
  m.def("_pool_stream", [](const std::string& d) { return H(PoolStream(Dev(d))); });
  m.def("_set_current_stream", [](const std::string& d, uintptr_t s) {
    return H(SetCurrentStream(Dev(d), P(s)));
  });
  m.def("_stream_synchronize", [](const std::string& d, uintptr_t s) {
    DgDevice dev = Dev(d);
    py::gil_scoped_release nogil;
    if (StreamOrdered(dev)) SyncStream(dev, P(s), "stream synchronize");
  });
  m.def("_device_synchronize", [](const std::string& d) {
    DgDevice dev = Dev(d);
    py::gil_scoped_release nogil;
    SyncDevice(dev, "device synchronize");
  });
  m.def("_event_create", [](const std::string& d) { return H(AcquireEvent(Dev(d))); });
  m.def("_event_release", [](const std::string& d, uintptr_t e) { ReleaseEvent(Dev(d), P(e)); });
  m.def("_event_record", [](const std::string& d, uintptr_t e, uintptr_t s) {
    RecordEvent(Dev(d), P(e), P(s));
  });
  m.def("_event_query", [](const std::string& d, uintptr_t e) { return QueryEvent(Dev(d), P(e)); });
  m.def("_event_synchronize", [](const std::string& d, uintptr_t e) {
    DgDevice dev = Dev(d);
    py::gil_scoped_release nogil;
    SyncEvent(dev, P(e));
  });
  m.def("_stream_wait_event", [](const std::string& d, uintptr_t s, uintptr_t e) {
    StreamWaitEvent(Dev(d), P(s), P(e));
  });
  m.def("_event_elapsed_ms", [](const std::string& d, uintptr_t a, uintptr_t b) {
    return ElapsedMs(Dev(d), P(a), P(b));
  });
  m.def("_pin_memory", [](const Tensor& t, const std::string& spec) {
    DgDevice pin = spec.empty() ? DefaultPinDevice() : Dev(spec);
    if (pin.type < 0)
      throw CoreError(DG_UNAVAILABLE,
                      "pin_memory(): no installed device provides pinned host memory "
                      "(DgDeviceDef.host_alloc); install a device plugin that does");
    if (t->device().type != 0)
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str("pin_memory(): the tensor is on ",
                              DeviceRegistry::Get().Name(t->device()),
                              "; only host tensors can be pinned"));
    Tensor src = t->is_contiguous() ? t : MakeContiguous(t);
    const size_t bytes = static_cast<size_t>(src->numel()) * src->itemsize();
    auto storage = AllocatePinned(pin, bytes);
    if (bytes) std::memcpy(storage->data(), src->data(), bytes);
    return std::make_shared<TensorImpl>(storage, 0, src->dtype(), src->shape(),
                                        ContiguousStrides(src->shape()));
  });
  m.def("_is_pinned", [](const Tensor& t) { return IsPinned(*t->storage()); });
  m.def("_to_device_non_blocking", [](const Tensor& t, const std::string& spec) {
    DgDevice d = Dev(spec);
    if (SameDevice(d, t->device())) return t;
    if (t->device().type != 0 || !t->is_contiguous() || !IsPinned(*t->storage()))
      return CopyTo(t, d);  // nothing to overlap: the ordinary copy
    Tensor out = TensorImpl::Empty(d, t->dtype(), t->shape());
    CopyNonBlocking(*out->storage(), out->data(), *t->storage(), t->data(),
                    static_cast<size_t>(t->numel()) * t->itemsize());
    return out;
  });
  // The stream handle to pass to a producer's __dlpack__(stream=...), or
  // None when the DLPack device is not a stream-ordered device of ours.
  m.def("_dlpack_consumer_stream", [](int32_t dl_type, int32_t index) -> py::object {
    auto& reg = DeviceRegistry::Get();
    for (int32_t id = 1; id < reg.size(); ++id) {
      if (reg.type(id).def.dlpack_device_type != dl_type) continue;
      DgDevice d{id, index};
      if (!StreamOrdered(d)) return py::none();
      return py::int_(H(CurrentStream(d)));
    }
    return py::none();
  });
  // DgDeviceDef.memory_info / get_attribute (ABI 1.3); None when absent.
  m.def("_memory_info", [](const std::string& spec) -> py::object {
    DgDevice d = Dev(spec);
    const DgDeviceDef& def = DeviceRegistry::Get().type(d.type).def;
    if (!def.memory_info) return py::none();
    size_t free_bytes = 0, total = 0;
    DgStatus s = def.memory_info(def.user_data, d.index, &free_bytes, &total);
    if (s != DG_OK) ThrowDeviceError(d, s, "memory_info");
    return py::make_tuple(free_bytes, total);
  });
  m.def("_device_attribute", [](const std::string& spec, int32_t attr) -> py::object {
    DgDevice d = Dev(spec);
    const DgDeviceDef& def = DeviceRegistry::Get().type(d.type).def;
    if (!def.get_attribute) return py::none();
    int64_t v = 0;
    DgStatus s = def.get_attribute(def.user_data, d.index, attr, &v);
    if (s == DG_NOT_FOUND) return py::none();
    if (s != DG_OK) ThrowDeviceError(d, s, "get_attribute");
    return py::int_(v);
  });
  // The allocator's counters are in memory_stats (bind_ops.cc).
  m.def("_device_counters", [](const std::string& d) {
    StreamCounters c = GetStreamCounters(Dev(d));
    py::dict out;
    out["device_syncs"] = c.device_syncs;
    out["stream_syncs"] = c.stream_syncs;
    out["event_syncs"] = c.event_syncs;
    out["stream_waits"] = c.stream_waits;
    out["events_created"] = c.events_created;
    out["h2d_copies"] = c.h2d_copies;
    out["d2h_copies"] = c.d2h_copies;
    return out;
  });
}

}  // namespace dragon
