#include "device.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "allocator.h"
#include "stream.h"

namespace dragon {
namespace {

// ---- the host device: memory owned by the core, no kernels ----

int32_t HostCount(void*) { return 1; }
DgStatus HostAlloc(void*, int32_t, size_t bytes, void** ptr) {
  size_t aligned = (bytes + 63) / 64 * 64;
  *ptr = std::aligned_alloc(64, aligned ? aligned : 64);
  return *ptr ? DG_OK : DG_RESOURCE_EXHAUSTED;
}
void HostFree(void*, int32_t, void* ptr) { std::free(ptr); }
DgStatus HostCopy(void*, int32_t, void* dst, const void* src, size_t bytes,
                  void*) {
  if (bytes) std::memcpy(dst, src, bytes);
  return DG_OK;
}
DgStatus HostMemset(void*, int32_t, void* dst, int32_t value, size_t bytes,
                    void*) {
  if (bytes) std::memset(dst, value, bytes);
  return DG_OK;
}
DgStatus HostNoStream(void*, int32_t, void** stream) {
  *stream = nullptr;
  return DG_OK;
}
DgStatus HostStreamOp(void*, int32_t, void*) { return DG_OK; }
DgStatus HostSync(void*, int32_t) { return DG_OK; }
DgStatus HostDescribe(void*, int32_t, char* buf, size_t len) {
  if (buf && len) std::snprintf(buf, len, "host memory");
  return DG_OK;
}

DgDeviceDef HostDeviceDef() {
  DgDeviceDef d{};
  d.struct_size = sizeof(DgDeviceDef);
  d.name = "cpu";
  d.count = &HostCount;
  d.alloc = &HostAlloc;
  d.free = &HostFree;
  d.copy_h2d = &HostCopy;
  d.copy_d2h = &HostCopy;
  d.copy_d2d = &HostCopy;
  d.memset = &HostMemset;
  d.stream_create = &HostNoStream;
  d.stream_destroy = &HostStreamOp;
  d.stream_sync = &HostStreamOp;
  d.synchronize = &HostSync;
  d.describe = &HostDescribe;
  d.host_accessible = 1;
  d.dlpack_device_type = 1;  // kDLCPU
  return d;
}

}  // namespace

DeviceRegistry& DeviceRegistry::Get() {
  static DeviceRegistry* registry = new DeviceRegistry();  // never destroyed
  return *registry;
}

DeviceRegistry::DeviceRegistry() {
  types_.reserve(64);  // lock-free readers index it; avoid reallocation
  Register(HostDeviceDef(), "core");
}

int32_t DeviceRegistry::Register(const DgDeviceDef& def,
                                 const std::string& plugin) {
  std::lock_guard<std::mutex> lock(mu_);
  if (def.name == nullptr || def.name[0] == '\0')
    throw CoreError(DG_INVALID_ARGUMENT, "device definition without a name");
  for (auto& t : types_) {
    if (t->name == def.name)
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str("device '", def.name, "' is already registered by plugin '",
                              t->plugin, "'"));
  }
  auto t = std::make_unique<DeviceType>();
  t->id = static_cast<int32_t>(types_.size());
  t->name = def.name;
  t->plugin = plugin;
  // Copy only what the writer declared; newer fields stay zero.
  size_t n = def.struct_size < sizeof(DgDeviceDef) ? def.struct_size
                                                   : sizeof(DgDeviceDef);
  std::memcpy(&t->def, &def, n);
  t->def.struct_size = sizeof(DgDeviceDef);
  t->def.name = nullptr;  // the plugin's string may not outlive init
  if (!t->def.alloc || !t->def.free || !t->def.copy_h2d || !t->def.copy_d2h)
    throw CoreError(DG_INVALID_ARGUMENT,
                    dg::Str("device '", def.name,
                            "' lacks alloc/free/copy_h2d/copy_d2h"));
  // ABI 1.5 graph capture: all four entries or none, on a stream-ordered
  // device (capture records work issued on a stream).
  const int capture_entries = (t->def.stream_begin_capture != nullptr) +
                              (t->def.stream_end_capture != nullptr) +
                              (t->def.graph_launch != nullptr) +
                              (t->def.graph_destroy != nullptr);
  if (capture_entries != 0 &&
      (capture_entries != 4 || !(t->def.flags & DG_DEVICE_STREAM_ORDERED)))
    throw CoreError(DG_INVALID_ARGUMENT,
                    dg::Str("device '", def.name,
                            "': the graph-capture entries (stream_begin_capture, "
                            "stream_end_capture, graph_launch, graph_destroy) must be set "
                            "all together, on a DG_DEVICE_STREAM_ORDERED device"));
  int32_t id = t->id;
  types_.push_back(std::move(t));
  return id;
}

int32_t DeviceRegistry::Find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& t : types_)
    if (t->name == name) return t->id;
  return -1;
}

std::string DeviceRegistry::Name(DgDevice d) const {
  if (d.type < 0 || d.type >= static_cast<int32_t>(types_.size()))
    return dg::Str("<device ", d.type, ">");
  return dg::Str(types_[d.type]->name, ":", d.index);
}

DgDevice DeviceRegistry::Parse(const std::string& spec) const {
  std::string name = spec;
  int32_t index = 0;
  auto colon = spec.find(':');
  if (colon != std::string::npos) {
    name = spec.substr(0, colon);
    try {
      size_t used = 0;
      index = std::stoi(spec.substr(colon + 1), &used);
      if (used != spec.size() - colon - 1 || index < 0) throw 0;
    } catch (...) {
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str("bad device '", spec, "': expected 'name' or 'name:index'"));
    }
  }
  int32_t id = Find(name);
  if (id < 0) {
    std::string known;
    for (auto& t : types_) known += (known.empty() ? "" : ", ") + t->name;
    throw CoreError(DG_NOT_FOUND,
                    dg::Str("unknown device '", name, "'; registered devices: ",
                            known, ". A device comes from a plugin (e.g. pip install dragon-cuda)"));
  }
  return DgDevice{id, index};
}

CachingAllocator& DeviceRegistry::Allocator(DgDevice d) {
  DeviceType& t = *types_[d.type];
  if (d.index >= 0 && d.index < 16) {
    if (CachingAllocator* a = t.fast[d.index].load(std::memory_order_acquire)) return *a;
  }
  std::lock_guard<std::mutex> lock(t.mu);
  if (static_cast<int32_t>(t.allocators.size()) <= d.index) {
    int32_t count = t.def.count ? t.def.count(t.def.user_data) : 1;
    if (d.index >= count) {
      std::string why;
      if (count == 0 && t.def.error_message) {  // the device may say why
        const char* m = t.def.error_message(t.def.user_data, 0);
        if (m && m[0]) why = dg::Str(": ", m);
      }
      throw CoreError(DG_UNAVAILABLE,
                      dg::Str("device ", t.name, ":", d.index, " is not present (",
                              count, " ", t.name, " device(s) found)", why));
    }
    t.allocators.resize(d.index + 1);
  }
  if (!t.allocators[d.index]) {
    t.allocators[d.index] = std::make_unique<CachingAllocator>(&t, d.index);
    if (d.index < 16) t.fast[d.index].store(t.allocators[d.index].get(), std::memory_order_release);
  }
  return *t.allocators[d.index];
}

void CopyBytes(DgDevice dst_dev, void* dst, DgDevice src_dev, const void* src,
               size_t bytes) {
  if (bytes == 0) return;
  auto& reg = DeviceRegistry::Get();
  auto check = [&](DgStatus s, const char* what) {
    if (s != DG_OK)
      throw CoreError(s, dg::Str(what, " from ", reg.Name(src_dev), " to ",
                                 reg.Name(dst_dev), " failed (", bytes, " bytes)"));
  };
  if (src_dev.type == 0 && dst_dev.type == 0) {
    std::memcpy(dst, src, bytes);
  } else if (src_dev.type == 0) {
    auto& d = reg.type(dst_dev.type).def;
    check(d.copy_h2d(d.user_data, dst_dev.index, dst, src, bytes, nullptr), "copy");
    SyncDevice(dst_dev, "synchronize after a copy");
  } else if (dst_dev.type == 0) {
    auto& d = reg.type(src_dev.type).def;
    check(d.copy_d2h(d.user_data, src_dev.index, dst, src, bytes, nullptr), "copy");
    SyncDevice(src_dev, "synchronize after a copy");
  } else if (src_dev.type == dst_dev.type && src_dev.index == dst_dev.index &&
             reg.type(src_dev.type).def.copy_d2d) {
    auto& d = reg.type(src_dev.type).def;
    check(d.copy_d2d(d.user_data, src_dev.index, dst, src, bytes, nullptr), "copy");
    SyncDevice(src_dev, "synchronize after a copy");
  } else {
    std::vector<char> staging(bytes);
    CopyBytes(kHost, staging.data(), src_dev, src, bytes);
    CopyBytes(dst_dev, dst, kHost, staging.data(), bytes);
  }
}

}  // namespace dragon
