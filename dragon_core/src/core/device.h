// Device types registered by name. "cpu" (type 0) is the host; its memory is
// owned by the core. Every other device arrives from a plugin's DgDeviceDef.
#ifndef DRAGON_CORE_DEVICE_H_
#define DRAGON_CORE_DEVICE_H_

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"

namespace dragon {

class CachingAllocator;

struct DeviceType {
  int32_t id = 0;
  std::string name;
  std::string plugin;   // who registered it ("core" for cpu)
  DgDeviceDef def{};    // copied, fields beyond the writer's size zeroed
  std::vector<std::unique_ptr<CachingAllocator>> allocators;  // per index
  // Lock-free lookup of the first allocators (set once, never cleared).
  std::array<std::atomic<CachingAllocator*>, 16> fast{};
  std::mutex mu;
};

class DeviceRegistry {
 public:
  static DeviceRegistry& Get();
  // Registers a device type; returns its id. Throws if the name is taken.
  int32_t Register(const DgDeviceDef& def, const std::string& plugin);
  // -1 when unknown.
  int32_t Find(const std::string& name) const;
  DeviceType& type(int32_t id) { return *types_.at(id); }
  int32_t size() const { return static_cast<int32_t>(types_.size()); }
  std::string Name(DgDevice d) const;
  // The caching allocator of one device (created on first use).
  CachingAllocator& Allocator(DgDevice d);
  // Parses "cpu", "cpu:0", "toy:1".
  DgDevice Parse(const std::string& spec) const;

 private:
  DeviceRegistry();
  std::vector<std::unique_ptr<DeviceType>> types_;
  mutable std::mutex mu_;
};

constexpr DgDevice kHost{0, 0};
inline bool SameDevice(DgDevice a, DgDevice b) {
  return a.type == b.type && a.index == b.index;
}

// Copies bytes between any two devices (staging through the host when both
// are non-host devices of different types), synchronizing the device after
// each copy: the contract of synchronous devices. Tensors go through
// CopyOrdered (stream.h), which keeps stream-ordered devices asynchronous.
// Throws CoreError.
void CopyBytes(DgDevice dst_dev, void* dst, DgDevice src_dev, const void* src,
               size_t bytes);

}  // namespace dragon

#endif  // DRAGON_CORE_DEVICE_H_
