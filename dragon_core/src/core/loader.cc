#include "loader.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <cstring>
#include <memory>

#include "device.h"
#include "elf_note.h"
#include "host_api.h"

namespace dragon {
namespace {

// Reads a struct written by a plugin of possibly different minor version:
// copies what both sides know, zero-fills the rest.
template <typename T>
bool CopyPartial(const T* src, T* dst) {
  std::memset(dst, 0, sizeof(T));
  if (src == nullptr || src->struct_size < sizeof(uint32_t)) return false;
  size_t n = src->struct_size < sizeof(T) ? src->struct_size : sizeof(T);
  std::memcpy(dst, src, n);
  return true;
}

struct Buffer {
  std::string plugin, dist;
  uint32_t abi_minor = 0;
  std::vector<std::unique_ptr<OpSchema>> ops;
  std::vector<KernelEntry> kernels;
  struct Device {
    DgDeviceDef def;
    std::string name;
  };
  std::vector<Device> devices;
  std::string error;
};

DgStatus Fail(Buffer* b, DgStatus code, const std::string& msg) {
  if (b->error.empty()) b->error = msg;
  return code;
}

// The dtypes a plugin built against ABI 1.`abi_minor` knows: the wide
// unsigned types (ABI 1.4) never reach a plugin built before them, even if
// it set every bit of a mask.
DgDTypeMask KnownDTypes(uint32_t abi_minor) {
  return abi_minor >= 4 ? DgDTypeMask{DG_MASK_ANY} : DgDTypeMask{DG_MASK_ALL};
}

DgStatus DefineOp(void* ctx, const DgOpDef* def) {
  auto* b = static_cast<Buffer*>(ctx);
  DgOpDef d;
  if (!CopyPartial(def, &d)) return Fail(b, DG_INVALID_ARGUMENT, "define_op: bad DgOpDef");
  try {
    b->ops.push_back(OpSchema::FromDef(d, b->plugin));
    const DgDTypeMask known = KnownDTypes(b->abi_minor);
    for (ArgSchema& a : b->ops.back()->inputs) a.dtypes &= known;
    for (ArgSchema& a : b->ops.back()->outputs) a.dtypes &= known;
    return DG_OK;
  } catch (const CoreError& e) {
    return Fail(b, e.code(), dg::Str("define_op: ", e.what()));
  }
}

DgStatus RegisterKernel(void* ctx, const DgKernelDef* def) {
  auto* b = static_cast<Buffer*>(ctx);
  DgKernelDef d;
  if (!CopyPartial(def, &d)) return Fail(b, DG_INVALID_ARGUMENT, "register_kernel: bad DgKernelDef");
  if (!d.op || !d.device_type || !d.fn || d.dtypes == 0)
    return Fail(b, DG_INVALID_ARGUMENT,
                dg::Str("register_kernel: kernel '", d.name ? d.name : "?",
                        "' needs op, device_type, fn and a non-empty dtype mask"));
  KernelEntry k;
  k.op = d.op;
  k.device = d.device_type;
  k.name = d.name ? d.name : dg::Str(d.op, "@", b->plugin);
  k.plugin = b->plugin;
  k.dist = b->dist;
  k.dtypes = d.dtypes & KnownDTypes(b->abi_minor);
  k.priority = d.priority;
  k.traits = d.traits;
  k.fn = d.fn;
  k.supports = d.supports;
  k.user_data = d.user_data;
  k.abi_minor = b->abi_minor;
  for (const auto& o : b->kernels) {
    if (o.op == k.op && o.device == k.device && o.priority == k.priority &&
        (o.dtypes & k.dtypes) && !o.supports && !k.supports)
      return Fail(b, DG_INVALID_ARGUMENT,
                  dg::Str("register_kernel: '", k.name, "' and '", o.name, "' both claim ",
                          k.op, " on ", k.device, " for ", MaskToString(o.dtypes & k.dtypes),
                          " at priority ", k.priority));
  }
  b->kernels.push_back(std::move(k));
  return DG_OK;
}

DgStatus RegisterDevice(void* ctx, const DgDeviceDef* def) {
  auto* b = static_cast<Buffer*>(ctx);
  Buffer::Device dev;
  if (!CopyPartial(def, &dev.def) || !def->name)
    return Fail(b, DG_INVALID_ARGUMENT, "register_device: bad DgDeviceDef");
  dev.name = def->name;
  b->devices.push_back(dev);
  return DG_OK;
}

void RegistrarSetError(void* ctx, const char* message) {
  auto* b = static_cast<Buffer*>(ctx);
  if (message && b->error.empty()) b->error = message;
}

// Validates the buffer against the registry and commits it. Throws
// CoreError (nothing committed) on a conflict.
void Commit(Buffer& b, PluginRecord& rec) {
  auto& reg = Registry::Get();
  auto& devs = DeviceRegistry::Get();
  for (auto& d : b.devices)
    if (devs.Find(d.name) >= 0)
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str("device '", d.name, "' is already registered"));
  for (size_t i = 0; i < b.ops.size(); ++i) {
    if (OpSchema* existing = reg.FindOp(b.ops[i]->name))
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str("op '", b.ops[i]->name, "' is already defined by '",
                              existing->plugin, "'"));
    if (OpSchema* existing = reg.FindOpByPyName(b.ops[i]->py_name))
      throw CoreError(DG_INVALID_ARGUMENT,
                      dg::Str("Python name '", b.ops[i]->py_name, "' is already used by op '",
                              existing->name, "'"));
    for (size_t j = 0; j < i; ++j)
      if (b.ops[j]->name == b.ops[i]->name)
        throw CoreError(DG_INVALID_ARGUMENT,
                        dg::Str("op '", b.ops[i]->name, "' is defined twice"));
  }
  for (auto& d : b.devices) {
    d.def.name = d.name.c_str();
    devs.Register(d.def, b.plugin);
    rec.devices.push_back(d.name);
  }
  for (auto& op : b.ops) reg.AddOp(std::move(op));
  for (auto& k : b.kernels) reg.AddKernel(std::move(k));
}

std::string RealPath(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) ? std::string(buf) : p;
}

std::string Advice(const LoadRequest& req) {
  return req.dist.empty() ? std::string("rebuild the plugin against the installed dragon-sdk")
                          : dg::Str("pip install --upgrade ", req.dist);
}

// Why this core must refuse a plugin of these ABI numbers, or "".
std::string AbiRefusal(const std::string& name, uint32_t major, uint32_t minor,
                       uint32_t min_host_minor, const LoadRequest& req) {
  if (major != DG_ABI_MAJOR)
    return dg::Str("plugin '", name, "' was built for Dragon ABI ", major, ".", minor,
                   "; this dragon-core speaks ABI ", DG_ABI_MAJOR, ".", DG_ABI_MINOR,
                   ". Install a build of the plugin for this core (", Advice(req),
                   ") or a dragon-core of ABI ", major, ".x");
  if (min_host_minor > DG_ABI_MINOR)
    return dg::Str("plugin '", name, "' needs Dragon ABI ", DG_ABI_MAJOR, ".", min_host_minor,
                   " or newer; this dragon-core has ABI ", DG_ABI_MAJOR, ".", DG_ABI_MINOR,
                   ". Fix: pip install --upgrade dragon-core");
  return "";
}

}  // namespace

PluginRecord RecordBrokenPlugin(const LoadRequest& req, const std::string& name,
                                const std::string& error) {
  PluginRecord rec;
  rec.name = name;
  rec.path = req.path;
  rec.dist = req.dist;
  rec.dist_version = req.dist_version;
  rec.entry_point = req.entry_point;
  rec.version = req.dist_version;
  rec.state = "broken";
  rec.error = error;
  return Registry::Get().AddPlugin(rec);
}

PluginRecord LoadPlugin(const LoadRequest& req) {
  PluginRecord rec;
  rec.path = RealPath(req.path);
  rec.dist = req.dist;
  rec.dist_version = req.dist_version;
  rec.entry_point = req.entry_point;
  rec.name = req.entry_point;
  if (rec.name.empty()) {
    // A bare library (load_library): name it after its file until its
    // entry point tells us better.
    std::string base = rec.path.substr(rec.path.find_last_of('/') + 1);
    if (base.rfind("lib", 0) == 0) base = base.substr(3);
    rec.name = base.substr(0, base.find('.'));
  }
  auto broken = [&](const std::string& why) {
    rec.state = "broken";
    rec.error = why;
    return Registry::Get().AddPlugin(rec);
  };
  for (const auto& p : Registry::Get().Plugins())
    if (p.state == "loaded" && p.path == rec.path) return p;  // already loaded

  // The ABI check comes before dlopen when the library carries the SDK's
  // ABI note, so a refused plugin's code -- static constructors included --
  // never runs. A library without the note (an older SDK) is checked after
  // dlopen, from its DgPluginInfo.
  AbiNote note = ReadAbiNote(rec.path);
  if (note.found) {
    rec.abi_major = note.abi_major;
    rec.abi_minor = note.abi_minor;
    rec.min_host_minor = note.min_host_minor;
    std::string why =
        AbiRefusal(rec.name, note.abi_major, note.abi_minor, note.min_host_minor, req);
    if (!why.empty())
      return broken(dg::Str(why, " (read from the library's ", DG_ABI_NOTE_SECTION,
                            " note; none of its code was run)"));
  }

  void* handle = dlopen(rec.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = dlerror();
    return broken(dg::Str("cannot load ", rec.path, ": ", e ? e : "unknown dlopen error"));
  }
  // Handles are never closed: kernels and device tables point into them.
  dlerror();
  auto entry = reinterpret_cast<DgPluginEntryFn>(dlsym(handle, DG_PLUGIN_ENTRY_SYMBOL));
  if (!entry)
    return broken(dg::Str(rec.path, " is not a Dragon plugin: it does not export ",
                          DG_PLUGIN_ENTRY_SYMBOL, " (build it with dragon_add_plugin "
                          "and DG_PLUGIN)"));
  DgPluginInfo info;
  if (!CopyPartial(entry(), &info))
    return broken(dg::Str(rec.path, ": ", DG_PLUGIN_ENTRY_SYMBOL, " returned no plugin info"));
  rec.name = info.name ? info.name : (req.entry_point.empty() ? rec.path : req.entry_point);
  // One name, one plugin: an entry point may not load a library that calls
  // itself by another plugin's name (it would squat that name, and refuse
  // the real plugin as "already loaded").
  if (!req.entry_point.empty() && rec.name != req.entry_point) {
    std::string lib_name = rec.name;
    rec.name = req.entry_point;
    return broken(dg::Str("entry point '", req.entry_point, "'",
                          req.dist.empty() ? "" : dg::Str(" of ", req.dist), " loads ",
                          rec.path, ", a plugin that calls itself '", lib_name,
                          "'; a plugin's library must carry its entry-point name. Fix: "
                          "name the entry point '", lib_name, "' (or the library's DG_PLUGIN '",
                          req.entry_point, "') and reinstall"));
  }
  rec.version = info.version ? info.version : "";
  rec.abi_major = info.abi_major;
  rec.abi_minor = info.abi_minor;
  rec.min_host_minor = info.min_host_minor;
  std::string why =
      AbiRefusal(rec.name, info.abi_major, info.abi_minor, info.min_host_minor, req);
  if (!why.empty()) return broken(why);
  if (!info.init) return broken(dg::Str("plugin '", rec.name, "' has no init function"));
  if (Registry::Get().FindPlugin(rec.name))
    return broken(dg::Str("a plugin named '", rec.name, "' is already loaded from ",
                          Registry::Get().FindPlugin(rec.name)->path));

  Buffer buffer;
  buffer.plugin = rec.name;
  buffer.dist = req.dist;
  buffer.abi_minor = info.abi_minor;
  DgRegistrar registrar{};
  registrar.struct_size = sizeof(DgRegistrar);
  registrar.ctx = &buffer;
  registrar.define_op = &DefineOp;
  registrar.register_kernel = &RegisterKernel;
  registrar.register_device = &RegisterDevice;
  registrar.set_error = &RegistrarSetError;
  DgStatus status;
  try {
    status = info.init(HostApi(), &registrar);
  } catch (...) {
    status = DG_INTERNAL;
    if (buffer.error.empty()) buffer.error = "a C++ exception escaped init()";
  }
  if (status != DG_OK || !buffer.error.empty()) {
    for (auto& op : buffer.ops) {
      rec.broken_ops.push_back(op->name);
      if (op->py_name != op->name) rec.broken_ops.push_back(op->py_name);
    }
    for (auto& k : buffer.kernels) rec.broken_kernels.push_back({k.op, k.device});
    return broken(dg::Str("plugin '", rec.name, "' failed to initialise (status ", status,
                          "): ", buffer.error.empty() ? "no message" : buffer.error));
  }
  rec.num_ops = static_cast<int32_t>(buffer.ops.size());
  rec.num_kernels = static_cast<int32_t>(buffer.kernels.size());
  try {
    Commit(buffer, rec);
  } catch (const CoreError& e) {
    rec.devices.clear();
    return broken(dg::Str("plugin '", rec.name, "' conflicts with what is loaded: ", e.what()));
  }
  rec.state = "loaded";
  return Registry::Get().AddPlugin(rec);
}

void RegisterBuiltinOps() {
  static bool done = false;
  if (done) return;
  done = true;
  Buffer buffer;
  buffer.plugin = "core";
  buffer.dist = "dragon-core";
  buffer.abi_minor = DG_ABI_MINOR;
  DgRegistrar registrar{};
  registrar.struct_size = sizeof(DgRegistrar);
  registrar.ctx = &buffer;
  registrar.define_op = &DefineOp;
  registrar.register_kernel = &RegisterKernel;
  registrar.register_device = &RegisterDevice;
  registrar.set_error = &RegistrarSetError;
  DgStatus s = dg::internal::RegisterAll(HostApi(), &registrar);
  if (s != DG_OK || !buffer.error.empty() || !buffer.kernels.empty())
    throw CoreError(DG_INTERNAL, dg::Str("core op definitions are invalid: ", buffer.error,
                                         buffer.kernels.empty() ? "" : " (the core registers no kernel)"));
  PluginRecord rec;
  rec.name = "core";
  rec.version = DRAGON_CORE_VERSION;
  rec.dist = "dragon-core";
  rec.abi_major = DG_ABI_MAJOR;
  rec.abi_minor = DG_ABI_MINOR;
  rec.num_ops = static_cast<int32_t>(buffer.ops.size());
  Commit(buffer, rec);
  rec.devices = {"cpu"};
  rec.state = "loaded";
  Registry::Get().AddPlugin(rec);
}

}  // namespace dragon
