// Loads plugin shared libraries through the C ABI entry point, with
// registrations buffered and committed only when init succeeds.
#ifndef DRAGON_CORE_LOADER_H_
#define DRAGON_CORE_LOADER_H_

#include <string>

#include "registry.h"

namespace dragon {

struct LoadRequest {
  std::string path;         // the .so
  std::string entry_point;  // entry-point name, or "" for load_library
  std::string dist;         // wheel name, e.g. "dragon-cpu-eigen"
  std::string dist_version;
};

// Never throws for a bad plugin: the record's state says "broken" and
// `error` carries the root cause and advice.
PluginRecord LoadPlugin(const LoadRequest& req);

// Records a plugin that failed before its library could be loaded (e.g.
// its Python module raised), so `info` and errors can show it.
PluginRecord RecordBrokenPlugin(const LoadRequest& req, const std::string& name,
                                const std::string& error);

// Defines the core's own standard op schemas (once).
void RegisterBuiltinOps();

}  // namespace dragon

#endif  // DRAGON_CORE_LOADER_H_
